//! Auditing a job from its journal alone: the evidence behind a count.
//!
//! The audit re-reads the journal file (checking every record's CRC),
//! replays it into a fresh state (the coordinator's own rules: the first
//! result per task counts, redundancy decides by agreement), re-plans the
//! job and checks the plan against the digest journaled when it was first
//! planned, checks every counted result against its task, sums the results
//! again from nothing with checked arithmetic, compares that sum with the
//! running totals, and the final counts with the published ones. It ends
//! with a SHA-256 digest of the plan and every counted result, without
//! node counts or timings, so another site that ran the same plan with any
//! solver version can compare digests.

use crate::journal::{self, JournalError};
use crate::state::{plausible, Event, Job, JobState, Limits, State, StateError, TaskList, Verdict};
use nqueens_common::known;
use nqueens_common::plan::{Mode, Plan, PlanError, PlanSpec, Tally};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::sync::atomic::AtomicBool;

/// Why an audit could not be made at all (findings go in [`Audit::problems`]).
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(
        "{cause}. With no backup: {lost} record(s) of the journal are lost ({ranges}); stop the \
         coordinator and start it once with --accept-lost-records {lost} (every record that reads is kept, and the lost records' \
         tasks are counted again; the start names the number again if it differs)"
    )]
    Lost {
        cause: JournalError,
        lost: u64,
        ranges: String,
    },
    #[error("replaying the journal failed: {0}")]
    Replay(StateError),
    #[error("job {0} is not in this journal")]
    UnknownJob(u64),
    #[error(
        "job {0} was deleted, by `nqueens delete` or, where the records that submitted it were \
         lost and the loss accepted (--accept-lost-records), passed over: its results are no \
         longer counted anywhere (submit it again to count it)"
    )]
    Deleted(u64),
    #[error("job {0} has not been planned yet; audit it once it has tasks")]
    NotPlanned(u64),
    #[error("re-planning the job failed: {0}")]
    Plan(#[from] PlanError),
}

/// What an audit found.
#[derive(Debug, Clone, PartialEq)]
pub struct Audit {
    pub job: u64,
    pub spec: PlanSpec,
    pub state: JobState,
    /// Records in the journal (each CRC-checked) and the bytes of their
    /// frames, uncompressed, over every segment.
    pub journal_records: u64,
    pub journal_bytes: u64,
    /// Bytes of a half-written last record (normal while a coordinator writes).
    pub torn_bytes: u64,
    /// Tasks of the plan, re-computed now.
    pub tasks: u64,
    /// `TaskDone` records of this job: counted results, and duplicates or
    /// redundant copies that were not counted.
    pub result_records: u64,
    /// Tasks with a counted result.
    pub counted: u64,
    /// Counts recomputed from the results; `None` until every task has one
    /// (a frame plan's unique count needs all of them).
    pub total: Option<u128>,
    pub unique: Option<u128>,
    /// Whether they equal OEIS A000170 / A002562 (`None` beyond the table).
    pub matches_known: Option<bool>,
    /// SHA-256 of the plan and every counted result, hex.
    pub digest: String,
    /// Everything that is wrong; empty for a clean audit.
    pub problems: Vec<String>,
    /// Results that disagreed with the one counted (redundancy settled
    /// them: the odd one out is not counted, its worker quarantined), and
    /// tasks whose results disagree, waiting for another vote: what the
    /// checking caught, not a problem of the count.
    pub disagreements: Vec<String>,
}

impl Audit {
    pub fn complete(&self) -> bool {
        self.counted == self.tasks
    }

    /// Clean: nothing wrong, and the counts agree with the published ones
    /// wherever those are known.
    pub fn passed(&self) -> bool {
        self.problems.is_empty() && self.matches_known != Some(false)
    }
}

/// Audits job `job` from the journal at `path`, without changing it.
pub fn audit(path: &Path, job: u64) -> Result<Audit, AuditError> {
    // Read before the journal: records appended meanwhile cannot pass it.
    let acknowledged = journal::mark::peek(path);
    let replayed = replay(path, job).map_err(|e| match e {
        AuditError::Journal(
            cause @ (JournalError::Corrupt { .. }
            | JournalError::MissingSegment { .. }
            | JournalError::MissingRecords { .. }
            | JournalError::DamagedSegment { .. }),
        ) => match journal::repair::survey(path) {
            // As a start counts them: those cut off the end too, by the
            // journal's commit mark.
            Ok(s) if s.damaged() => AuditError::Lost {
                cause,
                lost: s.lost_records() + acknowledged.saturating_sub(s.last()),
                ranges: s.ranges(),
            },
            Err(
                c @ (JournalError::Conflicting { .. }
                | JournalError::Beyond { .. }
                | JournalError::Foreign { .. }
                | JournalError::Newer { .. }),
            ) => AuditError::Journal(c),
            _ => AuditError::Journal(cause),
        },
        e => e,
    })?;
    let mut state = replayed.state;
    if state.deleted(job) {
        return Err(AuditError::Deleted(job));
    }
    let j = state.job(job).map_err(|_| AuditError::UnknownJob(job))?;
    j.planned().ok_or(AuditError::NotPlanned(job))?;
    let plan = Plan::new(j.spec)?;
    let tasks = TaskList::of(&plan, &AtomicBool::new(false))?;
    let mut problems = Problems::default();
    let read = replayed.scanned.records;
    if acknowledged > read {
        problems.note(format!(
            "the journal ends at record {read}, but its commit mark says records up to \
             {acknowledged} were acknowledged: {} acknowledged record(s) are missing from its end \
             (a start refuses it, naming the flag that accepts the loss)",
            acknowledged - read
        ));
    }
    // Checks the plan against the digest journaled when it was made.
    if let Err(e) = state.attach_tasks(job, tasks.clone()) {
        problems.note(format!(
            "{e}: the plan computed now differs from the one journaled (another planner version?)"
        ));
    }
    let j = state.job(job).map_err(|_| AuditError::UnknownJob(job))?;
    let disagreements = disagreements(&state, j);
    let (sum, digest) = re_add(j, &tasks, &replayed.counted, &mut problems);
    let counted = replayed.counted.len() as u64;
    let (total, unique) = if counted == tasks.count() {
        match plan.finish(&sum) {
            Ok(t) => (t.total().ok(), t.unique().ok()),
            Err(e) => {
                problems.note(format!("finishing the counts: {e}"));
                (None, None)
            }
        }
    } else {
        (None, None)
    };
    Ok(Audit {
        job,
        spec: j.spec,
        state: j.state(),
        journal_records: replayed.scanned.records,
        journal_bytes: replayed.scanned.bytes,
        torn_bytes: replayed.scanned.truncated,
        tasks: tasks.count(),
        result_records: replayed.result_records,
        counted,
        total,
        unique,
        matches_known: matches_known(&j.spec, total, unique),
        digest,
        problems: problems.into_list(),
        disagreements,
    })
}

/// What redundancy caught in job `j`: each result outvoted, whose worker
/// the audit's replay quarantined, and the tasks still disputed.
fn disagreements(state: &State, j: &Job) -> Vec<String> {
    let mut listed = Problems {
        noun: Some("disagreements"),
        ..Problems::default()
    };
    for c in j.conflicts() {
        listed.note(format!(
            "task {}: {} reported other counts than the result counted{}",
            c.task,
            c.worker,
            match state.quarantined(&c.worker) {
                true => "; it is quarantined",
                false => "",
            }
        ));
    }
    let disputed = j.disputed();
    if disputed > 0 {
        listed.note(format!(
            "{disputed} task(s) whose results disagree wait for another to decide"
        ));
    }
    listed.into_list()
}

/// A whole journal replayed by the coordinator's own rules.
struct Replayed {
    state: State,
    /// The counts of each result of the job that counted, by task.
    counted: Vec<(u64, Tally)>,
    /// The job's result records, counted or not.
    result_records: u64,
    scanned: journal::Scanned,
}

/// Replays the journal at `path` into a fresh state, keeping each counted
/// result's counts of job `job` (not the whole result, nor other jobs'),
/// to re-add them in task order.
fn replay(path: &Path, job: u64) -> Result<Replayed, AuditError> {
    let mut state = State::new(Limits::default());
    let mut counted: Vec<(u64, Tally)> = Vec::new();
    let mut result_records = 0;
    let mut failed = None;
    let scanned = journal::scan(path, |r| {
        let ours = match &r {
            Event::TaskDone(d) if d.job == job => Some(d),
            _ => None,
        };
        result_records += u64::from(ours.is_some());
        if failed.is_some() {
            return;
        }
        match (state.apply(&r), ours) {
            (Ok(Some(Verdict::New)), Some(d)) => counted.push((d.task, d.outcome.tally)),
            (Ok(_), _) => {}
            (Err(e), _) => failed = Some(e),
        }
    })?;
    if let Some(e) = failed {
        return Err(AuditError::Replay(e));
    }
    counted.sort_unstable_by_key(|&(task, _)| task);
    Ok(Replayed {
        state,
        counted,
        result_records,
        scanned,
    })
}

/// Re-adds the counted results in task order, each checked against its
/// task, into their sum and the digest another site can compare.
fn re_add(
    j: &Job,
    tasks: &TaskList,
    counted: &[(u64, Tally)],
    problems: &mut Problems,
) -> (Tally, String) {
    let mut sum = Tally::default();
    let mut sha = Sha256::new();
    // A join job's digest names its mode; a backtracking job's stays as
    // it was before modes existed.
    let mode = match j.spec.mode {
        Mode::Backtrack => String::new(),
        Mode::Join => " mode=join".into(),
    };
    sha.update(format!(
        "nqueens-audit-v1 n={} strategy={:?} depth={} tasks={}{mode}\n",
        j.spec.n.get(),
        j.spec.strategy,
        j.spec.depth,
        tasks.count()
    ));
    for &(task, ref t) in counted {
        let Some(listed) = tasks.get(task) else {
            problems.note(format!(
                "a result for task {task}, which the plan does not have"
            ));
            continue;
        };
        if let Err(e) = plausible(j, &listed, t) {
            problems.note(e.to_string());
        }
        if let Err(e) = sum.merge(t) {
            problems.note(format!("summing the results: {e}"));
        }
        let c = &t.classes;
        sha.update(format!(
            "{task} {} {} {} {} {} {} {}\n",
            c.c1, c.c2, c.c4, c.c8, t.weighted, t.half, t.quarter
        ));
    }
    if sum != *j.tally() {
        problems.note(
            "the results sum to other counts than the running totals the coordinator kept".into(),
        );
    }
    (sum, hex(&sha.finalize()))
}

/// Whether the counts are the published ones; a synthetic job's answer is
/// known exactly: the sum of its tasks'.
fn matches_known(spec: &PlanSpec, total: Option<u128>, unique: Option<u128>) -> Option<bool> {
    total.zip(unique).and_then(|(t, u)| {
        if spec.strategy == nqueens_common::plan::Strategy::Synthetic {
            let want = nqueens_common::plan::synthetic_sum(spec.tasks);
            Some(t == want && u == want)
        } else {
            known::matches(spec.n.get(), t, u)
        }
    })
}

/// The audit's findings, at most [`MAX_PROBLEMS`] of them listed (a job
/// of millions of bad results must not make a reply of gigabytes).
#[derive(Default)]
struct Problems {
    listed: Vec<String>,
    more: u64,
    /// What is listed, where not problems.
    noun: Option<&'static str>,
}

/// Problems an audit lists; the rest are counted.
pub const MAX_PROBLEMS: usize = 100;

impl Problems {
    fn note(&mut self, problem: String) {
        match self.listed.len() < MAX_PROBLEMS {
            true => self.listed.push(problem),
            false => self.more += 1,
        }
    }

    fn into_list(mut self) -> Vec<String> {
        if self.more > 0 {
            self.listed.push(format!(
                "... and {} more {} (the first {MAX_PROBLEMS} are listed)",
                self.more,
                self.noun.unwrap_or("problems")
            ));
        }
        self.listed
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_problem_list_is_bounded_and_says_how_many_were_left_out() {
        let mut p = Problems::default();
        for i in 0..MAX_PROBLEMS + 150 {
            p.note(format!("problem {i}"));
        }
        let list = p.into_list();
        assert_eq!(list.len(), MAX_PROBLEMS + 1);
        assert_eq!(list[0], "problem 0");
        assert_eq!(
            list[MAX_PROBLEMS],
            "... and 150 more problems (the first 100 are listed)"
        );
        assert!(Problems::default().into_list().is_empty());
    }
}
