//! One job: its plan, the operator's control, and its parts (schedule,
//! votes, ledger, rate).

use super::ledger::{Conflict, Ledger, StoredResult};
use super::rate::Rate;
use super::schedule::Schedule;
use super::votes::{Checking, Votes};
use nqueens_common::plan::{Plan, PlanError, PlanSpec, Task, TaskTable};
use serde::{Deserialize, Serialize};
use std::sync::atomic::AtomicBool;

/// What a job is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobState {
    /// Submitted; its tasks are being computed.
    Planning,
    Running,
    Paused,
    Cancelled,
    Done,
}

impl std::fmt::Display for JobState {
    /// As operators read it: `running`, `cancelled`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            JobState::Planning => "planning",
            JobState::Running => "running",
            JobState::Paused => "paused",
            JobState::Cancelled => "cancelled",
            JobState::Done => "done",
        })
    }
}

/// A planned job's tasks: a table computed once and kept (its runs, not
/// its tasks: see [`TaskTable`]), or derived from their index on demand (a
/// synthetic plan of any size).
#[derive(Clone, Debug)]
pub enum TaskList {
    Listed(TaskTable),
    Derived(Box<Plan>, u64),
}

impl TaskList {
    /// The plan's tasks: derived at once, or listed by enumerating the
    /// plan (minutes for a large one; stops when `stop` is set).
    pub fn of(plan: &Plan, stop: &AtomicBool) -> Result<TaskList, PlanError> {
        Ok(match plan.derived_tasks() {
            Some(n) => TaskList::Derived(Box::new(plan.clone()), n),
            None => TaskList::Listed(plan.schedule_until(stop)?.tasks),
        })
    }

    /// The digest journaled when the job was planned.
    pub fn digest(&self) -> u64 {
        match self {
            TaskList::Listed(t) => super::digest(t),
            TaskList::Derived(p, n) => super::derived_digest(&p.spec, *n),
        }
    }

    /// Whether these are the tasks a journaled digest names: the table's
    /// digest, or for a job planned before task tables, the digest of its
    /// tasks listed one by one (computed only then).
    pub fn matches(&self, want: u64) -> bool {
        self.digest() == want
            || matches!(self, TaskList::Listed(t) if super::listed_digest(t.iter()) == want)
    }

    /// How many tasks the plan has.
    pub fn count(&self) -> u64 {
        match self {
            TaskList::Listed(t) => t.len(),
            TaskList::Derived(_, n) => *n,
        }
    }

    pub fn get(&self, index: u64) -> Option<Task> {
        match self {
            TaskList::Listed(t) => t.get(index),
            TaskList::Derived(p, n) => (index < *n).then(|| p.derived_task(index)),
        }
    }
}

/// One job.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Job {
    pub id: u64,
    pub spec: PlanSpec,
    pub submitted_ms: u64,
    /// The operator's choice: Running, Paused or Cancelled.
    pub(super) control: JobState,
    /// Attached at start-up (from the store, or re-planned), never in a
    /// checkpoint.
    #[serde(skip)]
    pub(super) tasks: Option<TaskList>,
    /// (tasks, digest) as journaled when first planned.
    pub(super) planned: Option<(u64, u64)>,
    pub work_total: f64,
    pub work_done: f64,
    pub(super) schedule: Schedule,
    pub(super) votes: Votes,
    pub(super) ledger: Ledger,
    pub(super) rate: Rate,
}

/// A snapshot of a job's progress.
#[derive(Clone, Debug, PartialEq)]
pub struct JobView {
    pub id: u64,
    pub spec: PlanSpec,
    pub state: JobState,
    pub tasks: u64,
    pub pending: u64,
    pub leased: u64,
    pub done: u64,
    pub failed: u64,
    pub dead: u64,
    pub work_total: f64,
    pub work_done: f64,
    pub total: u128,
    pub unique: u128,
    pub conflicts: u64,
    pub submitted_ms: u64,
    /// Distinct workers holding a lease on this job now.
    pub workers: u64,
    pub redundancy: u32,
    pub verify_fraction: f64,
    /// Checked tasks need agreeing results from a card and a CPU.
    pub cross_device: bool,
    /// Tasks with a result that waits for another worker's agreement.
    pub checking: u64,
    /// Estimated work done per second over the latest results.
    pub work_per_second: f64,
    /// Seconds left, and its error (one standard deviation), once the
    /// rate is steady (see `Rate::steady`).
    pub eta_seconds: Option<f64>,
    pub eta_error_seconds: Option<f64>,
    /// Why it cannot progress now, when it cannot (see [`super::State::waiting_for`]).
    pub waiting_for: Option<String>,
}

impl Job {
    /// A job checked by `(redundancy, fraction)`, keeping `keep` counted
    /// results in memory (`None`: all).
    pub(super) fn new(
        id: u64,
        spec: PlanSpec,
        submitted_ms: u64,
        checking: Checking,
        keep: Option<usize>,
    ) -> Job {
        Job {
            id,
            spec,
            submitted_ms,
            control: JobState::Running,
            tasks: None,
            planned: None,
            work_total: 0.0,
            work_done: 0.0,
            schedule: Schedule::default(),
            votes: Votes::new(id, checking),
            ledger: Ledger::keeping(keep),
            rate: Rate::default(),
        }
    }

    pub fn state(&self) -> JobState {
        match (self.control, &self.tasks) {
            (JobState::Cancelled, _) => JobState::Cancelled,
            (_, Some(t)) if self.ledger.done() == t.count() => JobState::Done,
            // A pause holds from the moment it is asked, planning or not.
            (JobState::Paused, _) => JobState::Paused,
            (_, None) => JobState::Planning,
            (c, _) => c,
        }
    }

    /// Every planned task has its counted result (what a checkpoint's
    /// state knows, which holds no task list: see [`Job::state`]).
    pub fn finished(&self) -> bool {
        self.planned
            .is_some_and(|(tasks, _)| self.ledger.done() == tasks)
    }

    /// What the operator last set: running, paused or cancelled.
    pub fn control(&self) -> JobState {
        self.control
    }

    /// The plan's task count, once planned.
    pub fn task_count(&self) -> Option<u64> {
        self.tasks.as_ref().map(TaskList::count)
    }

    /// Task `index` of the plan, once planned.
    pub fn task(&self, index: u64) -> Option<Task> {
        self.tasks.as_ref()?.get(index)
    }

    /// The counted result of `task`, if it is still in memory.
    pub fn result(&self, task: u64) -> Option<&StoredResult> {
        self.ledger.result(task)
    }

    /// Whether `task` has a counted result (in memory or not).
    pub fn counted(&self, task: u64) -> bool {
        self.schedule.finished(task) && !self.ledger.is_dead(task)
    }

    /// Whether every counted result is in memory (always, in an audit).
    pub fn results_complete(&self) -> bool {
        self.ledger.complete()
    }

    /// Counted results in memory, in task order (all of them in an audit;
    /// the latest ones in a coordinator).
    pub fn results(&self) -> impl Iterator<Item = (&u64, &StoredResult)> {
        self.ledger.results()
    }

    /// Results kept for the audit but never counted.
    pub fn ignored(&self) -> &[(u64, StoredResult)] {
        self.ledger.ignored()
    }

    pub fn conflicts(&self) -> &[Conflict] {
        self.ledger.conflicts()
    }

    /// Tasks whose results from different credentials disagree, waiting
    /// for another result to decide.
    pub fn disputed(&self) -> usize {
        self.votes.disputed()
    }

    pub fn planned(&self) -> Option<(u64, u64)> {
        self.planned
    }

    /// The records that defined this job in its journal: its submission
    /// and, once planned, its plan.
    pub fn restated(&self) -> (super::Event, Option<super::Event>) {
        let checking = Checking {
            redundancy: self.votes.redundancy,
            fraction: self.votes.fraction,
            cross_device: self.votes.cross_device,
        };
        let submitted = super::Event::JobSubmitted {
            job: self.id,
            spec: self.spec,
            unix_ms: self.submitted_ms,
            checking,
        };
        let planned = self
            .planned
            .map(|(tasks, digest)| super::Event::JobPlanned {
                job: self.id,
                tasks,
                digest,
            });
        (submitted, planned)
    }

    pub fn redundancy(&self) -> u32 {
        self.votes.redundancy
    }

    /// Agreeing credentials this task needs.
    pub fn needs(&self, task: u64) -> u32 {
        self.votes.needs(task)
    }

    /// The running totals of the counted results.
    pub fn tally(&self) -> &nqueens_common::plan::Tally {
        self.ledger.tally()
    }

    /// Total and unique of the results so far: exact once the job is done
    /// (the unique count of a frame plan needs every task, so it stays 0
    /// until then).
    pub fn counts(&self) -> (u128, u128) {
        let plan = Plan::new(self.spec).expect("stored specs are valid");
        let tally = self.ledger.tally();
        if self.state() == JobState::Done {
            if let Ok(t) = plan.finish(tally) {
                return (t.total().unwrap_or(0), t.unique().unwrap_or(0));
            }
        }
        let c = &tally.classes;
        let total = c.total().unwrap_or(0).saturating_add(tally.weighted);
        let unique = if plan.whole() {
            c.unique().unwrap_or(0)
        } else {
            0
        };
        (total, unique)
    }

    pub fn view(&self) -> JobView {
        let (total, unique) = self.counts();
        // What it counts now: nothing, once it has ended.
        let ended = matches!(self.state(), JobState::Done | JobState::Cancelled);
        let rate = if ended { 0.0 } else { self.rate.per_second() };
        let left = (self.work_total - self.work_done).max(0.0);
        // Nothing left (up to rounding): no time left, known exactly.
        let eta = if left <= self.work_total * 1e-9 {
            Some((0.0, 0.0))
        } else {
            self.rate
                .steady()
                .map(|(steady, error)| (left / steady, left / steady * error))
        };
        JobView {
            id: self.id,
            spec: self.spec,
            state: self.state(),
            tasks: self.task_count().unwrap_or(0),
            pending: self.schedule.pending(),
            leased: self.schedule.leases().count() as u64,
            done: self.ledger.done(),
            failed: self.schedule.backing_off(),
            dead: self.ledger.dead(),
            work_total: self.work_total,
            work_done: self.work_done,
            total,
            unique,
            conflicts: self.ledger.conflicts().len() as u64,
            submitted_ms: self.submitted_ms,
            workers: self
                .schedule
                .leases()
                .map(|(_, l)| l.worker.as_str())
                .collect::<std::collections::HashSet<_>>()
                .len() as u64,
            redundancy: self.votes.redundancy,
            verify_fraction: self.votes.fraction,
            cross_device: self.votes.cross_device,
            checking: self.votes.checking() as u64,
            work_per_second: rate,
            eta_seconds: eta.map(|(eta, _)| eta),
            eta_error_seconds: eta.map(|(_, error)| error),
            waiting_for: None,
        }
    }

    /// Neither counted nor given up on.
    pub(super) fn unfinished(&self, task: u64) -> bool {
        !self.schedule.finished(task)
    }
}
