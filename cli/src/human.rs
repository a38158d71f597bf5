//! Jobs and workers as operators read them: text with thousands separators
//! and spoken durations, or JSON with the same fields for scripts.

use crate::format::{dec, dec_opt, human_duration, now_unix_ms, thousands, utc};
use nqueens_common::known::{matches, verdict};
use nqueens_common::plan::Strategy;
use nqueens_proto::v1;
use nqueens_proto::{known_from_wire, strategy_from_wire, u128_from_wire};
use serde::Serialize;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// running, paused, cancelled or done; planning while a running job has
/// no task list yet.
fn state_name(state: i32, tasks: u64) -> &'static str {
    match v1::JobState::try_from(state).unwrap_or_default() {
        v1::JobState::Running | v1::JobState::Unspecified if tasks == 0 => "planning",
        v1::JobState::Running | v1::JobState::Unspecified => "running",
        v1::JobState::Paused => "paused",
        v1::JobState::Cancelled => "cancelled",
        v1::JobState::Done => "done",
    }
}

fn strategy_name(spec: &v1::PlanSpec) -> &'static str {
    strategy_from_wire(spec.strategy).map_or("unknown", Strategy::name)
}

fn mode_name(spec: &v1::PlanSpec) -> &'static str {
    match v1::Mode::try_from(spec.mode) {
        Ok(v1::Mode::Backtrack) => "backtrack",
        Ok(v1::Mode::Join) => "join",
        Err(_) => "unknown",
    }
}

/// `N=17 prefix depth 4`, `N=27 rings depth 3`, `N=24 frame`, or with the
/// mode when it is not backtracking: `N=18 halves by join`.
fn plan_text(n: u32, strategy: &str, depth: u32, mode: &str) -> String {
    let plan = match strategy {
        "prefix" | "rings" => format!("N={n} {strategy} depth {depth}"),
        s => format!("N={n} {s}"),
    };
    if mode == "backtrack" {
        plan
    } else {
        format!("{plan} by {mode}")
    }
}

/// A job, decoded from the wire: the one job object that `status`,
/// `watch`, `submit`, `pause`/`resume`/`cancel`, `jobs` and `solve --state`
/// print with `--json` (README: "JSON output"). Integers of 64 bits and
/// more are decimal strings.
#[derive(Clone, Debug, Serialize)]
pub struct JobInfo {
    #[serde(serialize_with = "dec")]
    pub job: u64,
    pub n: u32,
    pub strategy: String,
    pub depth: u32,
    /// How subproblems are counted: backtrack or join.
    pub mode: &'static str,
    /// planning, running, paused, cancelled or done.
    pub state: &'static str,
    #[serde(serialize_with = "dec")]
    pub tasks: u64,
    #[serde(serialize_with = "dec")]
    pub done: u64,
    #[serde(serialize_with = "dec")]
    pub leased: u64,
    #[serde(serialize_with = "dec")]
    pub pending: u64,
    #[serde(serialize_with = "dec")]
    pub failed: u64,
    #[serde(serialize_with = "dec")]
    pub dead: u64,
    /// Share of the expected work done, 0 to 1 (exactly 1 once done).
    pub progress: f64,
    /// Counts of the done tasks (exact totals once done).
    #[serde(serialize_with = "dec")]
    pub total: u128,
    #[serde(serialize_with = "dec")]
    pub unique: u128,
    #[serde(serialize_with = "dec")]
    pub conflicts: u64,
    /// Workers that must agree on each task (1: no check).
    pub redundancy: u32,
    /// The share of tasks checked by `redundancy` workers.
    pub verify_fraction: f64,
    /// Checked tasks need agreeing results from a GPU and a CPU.
    pub cross_device: bool,
    /// Tasks whose result waits for another worker's agreement.
    #[serde(serialize_with = "dec")]
    pub checking: u64,
    /// Why the job cannot make progress now (planning, or too few distinct
    /// worker credentials for its redundancy); null when it can.
    pub waiting_for: Option<String>,
    #[serde(serialize_with = "dec")]
    pub active_workers: u64,
    #[serde(serialize_with = "dec")]
    pub submitted_unix_ms: u64,
    /// The coordinator's rate over the latest results, in tasks of the
    /// plan's average size per second (0 while unknown or not running).
    pub tasks_per_second: f64,
    /// Seconds left, once the rate is steady; null once ended or while
    /// unknown.
    pub eta_seconds: Option<f64>,
    /// The ETA's error (one standard deviation), with it.
    pub eta_error_seconds: Option<f64>,
    /// Once done: whether the counts equal the published ones (absent past N=27).
    pub matches_known: Option<bool>,
    /// `solve --state` only (null elsewhere): what this run of the
    /// command did.
    pub run: Option<RunInfo>,
}

/// What one `solve --state DIR` run did, beside its job.
#[derive(Clone, Debug, Serialize)]
pub struct RunInfo {
    /// The state directory.
    pub state_dir: std::path::PathBuf,
    /// Tasks already stored in it when this run started.
    #[serde(serialize_with = "dec")]
    pub tasks_before: u64,
    /// Tasks this run counted.
    #[serde(serialize_with = "dec")]
    pub tasks_counted: u64,
    /// Seconds this run took.
    pub seconds: f64,
}

impl JobInfo {
    pub fn new(j: &v1::Job) -> JobInfo {
        let spec = j.plan.unwrap_or_default();
        let state = state_name(j.state, j.tasks);
        let strategy = strategy_name(&spec);
        let (total, unique) = (
            u128_from_wire(j.total.as_ref()),
            u128_from_wire(j.unique.as_ref()),
        );
        let ended = matches!(state, "done" | "cancelled");
        let moving = matches!(state, "running") && j.work_total > 0.0;
        JobInfo {
            job: j.job_id,
            n: spec.n,
            strategy: strategy.to_string(),
            depth: spec.depth,
            mode: mode_name(&spec),
            state,
            tasks: j.tasks,
            done: j.done,
            leased: j.leased,
            pending: j.pending,
            failed: j.failed,
            dead: j.dead,
            // A done job has done all of its work: exactly 1, whatever the
            // floating sum of its tasks' estimates says (0.9999999).
            progress: if state == "done" {
                1.0
            } else if j.work_total > 0.0 {
                (j.work_done / j.work_total).clamp(0.0, 1.0)
            } else {
                0.0
            },
            total,
            unique,
            conflicts: j.conflicts,
            redundancy: j.redundancy.max(1),
            verify_fraction: if j.verify_fraction > 0.0 {
                j.verify_fraction
            } else {
                1.0
            },
            cross_device: j.cross_device,
            checking: j.checking,
            waiting_for: (!ended && !j.waiting_for.is_empty()).then(|| j.waiting_for.clone()),
            active_workers: j.active_workers,
            submitted_unix_ms: j.submitted_unix_ms,
            tasks_per_second: if moving && j.work_per_second > 0.0 {
                j.work_per_second / j.work_total * j.tasks as f64
            } else {
                0.0
            },
            // No ETA once ended (the coordinator's last estimate can be a
            // rounding residue such as 5.6e-17 seconds).
            eta_seconds: (!ended && j.eta_seconds >= 0.5).then_some(j.eta_seconds),
            eta_error_seconds: (!ended && j.eta_seconds >= 0.5).then_some(j.eta_error_seconds),
            matches_known: (state == "done")
                .then(|| {
                    if strategy == "synthetic" {
                        // Known exactly: the sum of its tasks' answers.
                        let want = nqueens_common::plan::synthetic_sum(spec.tasks);
                        Some(total == want && unique == want)
                    } else {
                        matches(spec.n, total, unique)
                    }
                })
                .flatten(),
            run: None,
        }
    }

    /// The rate as people read it: `12.3 tasks/s` (or `0.050 tasks/s`),
    /// `unknown` before the first results, `-` when not running.
    pub fn rate(&self) -> String {
        match self.tasks_per_second {
            _ if self.state != "running" => "-".into(),
            r if r <= 0.0 => "unknown".into(),
            r if r >= 100.0 => format!("{} tasks/s", thousands(r.round() as u128)),
            r if r >= 1.0 => format!("{r:.1} tasks/s"),
            r => format!("{r:.3} tasks/s"),
        }
    }

    pub fn ended(&self) -> bool {
        matches!(self.state, "done" | "cancelled")
    }

    /// `N=17 prefix depth 4` or `N=24 frame`.
    pub fn plan(&self) -> String {
        plan_text(self.n, &self.strategy, self.depth, self.mode)
    }

    pub fn eta(&self) -> String {
        match (self.state, self.eta_seconds) {
            ("done", _) => "done".into(),
            ("cancelled", _) => "-".into(),
            ("paused", _) => "paused".into(),
            (_, Some(s)) => {
                let eta = human_duration(Duration::from_secs_f64(s));
                match self.eta_error_seconds {
                    Some(e) if e >= 0.5 => {
                        format!("{eta} ± {}", human_duration(Duration::from_secs_f64(e)))
                    }
                    _ => eta,
                }
            }
            _ => "unknown".into(),
        }
    }

    /// `1 worker`, `3 workers`: the workers holding its tasks now.
    pub fn workers_text(&self) -> String {
        crate::format::counted(self.active_workers as usize, "worker")
    }

    /// One line, for logs and pipes: the time it was printed (UTC), the
    /// state, progress, rate, counts so far and ETA.
    pub fn line(&self) -> String {
        format!(
            "{} job {} {}: {} {:.1}% ({}/{} tasks), rate {}, total{} {}, unique {}, {}, ETA {}{}",
            utc(now_unix_ms()),
            self.job,
            self.plan(),
            self.state,
            self.progress * 100.0,
            thousands(self.done.into()),
            thousands(self.tasks.into()),
            self.rate(),
            if self.state == "done" { "" } else { " so far" },
            thousands(self.total),
            self.unique_text(),
            self.workers_text(),
            self.eta(),
            self.warnings(),
        )
    }

    /// The unique count, or when it comes: a frame plan's is known only
    /// once every task has its result.
    fn unique_text(&self) -> String {
        match self.state != "done" && self.unique == 0 && self.total > 0 {
            true => "at the end".to_string(),
            false => thousands(self.unique),
        }
    }

    /// What needs an operator, if anything.
    pub fn warnings(&self) -> String {
        let mut w = String::new();
        if let Some(why) = &self.waiting_for {
            w += &format!("; waiting for {why}");
        }
        if self.dead > 0 {
            w += &format!(
                "; {} tasks out of retries (the job cannot finish until `nqueens retry {}` \
                 puts them back; the coordinator's log says why they failed)",
                self.dead, self.job
            );
        }
        if self.conflicts > 0 {
            w += &format!(
                "; {} conflicting results (see `nqueens workers`)",
                self.conflicts
            );
        }
        w
    }

    /// The block of `nqueens status JOB`.
    /// How long ago it was submitted, as people read it.
    pub fn age(&self) -> String {
        let age = SystemTime::now()
            .duration_since(UNIX_EPOCH + Duration::from_millis(self.submitted_unix_ms))
            .unwrap_or_default();
        human_duration(Duration::from_secs(age.as_secs()))
    }

    pub fn text(&self) -> String {
        let age = SystemTime::now()
            .duration_since(UNIX_EPOCH + Duration::from_millis(self.submitted_unix_ms))
            .unwrap_or_default();
        let check = match self.redundancy {
            1 => String::new(),
            r => format!(
                "\ncheck     {:.0}% of the tasks by {r} workers{}\nagreement {} tasks waiting for it, {} conflicting results",
                self.verify_fraction * 100.0,
                if self.cross_device { ", a GPU and a CPU" } else { "" },
                thousands(self.checking.into()),
                self.conflicts
            ),
        };
        let known = match self.matches_known {
            None => String::new(),
            Some(m) if self.strategy == "synthetic" => format!(
                "\nknown     {} the sum of its tasks' answers",
                if m { "matches" } else { "DIFFERS from" }
            ),
            m => format!("\nknown     {}", verdict(m)),
        };
        let state = match &self.waiting_for {
            Some(why) => format!("{}, waiting for {why}", self.state),
            None => self.state.to_string(),
        };
        format!(
            "job       {}\nplan      {}\nstate     {}\nprogress  {:.1}% of the expected work\ntasks     {} of {} done, {} leased, {} pending\n\
             retries   {} waiting to retry, {} out of retries\nrate      {}\n\
             total     {}{}\nunique    {}{known}{check}\nworkers   {} active\nsubmitted {} ago ({})\neta       {}\n",
            self.job,
            self.plan(),
            state,
            self.progress * 100.0,
            thousands(self.done.into()),
            thousands(self.tasks.into()),
            thousands(self.leased.into()),
            thousands(self.pending.into()),
            thousands(self.failed.into()),
            thousands(self.dead.into()),
            self.rate(),
            thousands(self.total),
            if self.state == "done" { "" } else { " (so far)" },
            self.unique_text(),
            self.active_workers,
            human_duration(age),
            utc(self.submitted_unix_ms),
            self.eta(),
        )
    }

    /// The header of `nqueens jobs` (79 columns: an 80-column terminal
    /// does not wrap it; tasks and the rate are in `nqueens status JOB`).
    pub fn table_header() -> String {
        format!(
            "{:>5}  {:<16}  {:<9}  {:>6}  {:>25}  {:>9}",
            "JOB", "PLAN", "STATE", "DONE", "TOTAL", "ETA"
        )
    }

    pub fn table_row(&self) -> String {
        format!(
            "{:>5}  {:<16}  {:<9}  {:>5.1}%  {:>25}  {:>9}",
            self.job,
            self.short_plan(),
            self.state,
            self.progress * 100.0,
            thousands(self.total),
            self.eta(),
        )
    }

    /// `N=17 prefix/4`, `N=24 frame/2`, `N=18 halves`, `N=27 rings/3+j`:
    /// the plan in a table's column (16 wide). The halves strategy is the
    /// join's alone, and a synthetic plan a load test's: neither has a
    /// depth; other plans counted by the join are marked "+j".
    pub fn short_plan(&self) -> String {
        if self.strategy == "halves" || self.strategy == "synthetic" {
            return format!("N={} {}", self.n, self.strategy);
        }
        let join = if self.mode == "backtrack" { "" } else { "+j" };
        format!("N={} {}/{}{join}", self.n, self.strategy, self.depth)
    }
}

/// A worker, decoded from the wire.
#[derive(Clone, Debug, Serialize)]
pub struct WorkerRow {
    /// Its id (unique: the name and a suffix of its own).
    pub worker: String,
    /// What the operator called it (several workers may share one).
    pub name: String,
    pub host: String,
    pub cores: u32,
    pub leases: u32,
    #[serde(serialize_with = "dec")]
    pub tasks_done: u64,
    #[serde(serialize_with = "dec")]
    pub subproblems_done: u64,
    #[serde(serialize_with = "dec")]
    pub errors: u64,
    /// Results others contradicted; any puts the worker in quarantine.
    #[serde(serialize_with = "dec")]
    pub conflicts: u64,
    /// Results another credential agreed with (redundancy); 0: this
    /// worker's results were never cross-checked.
    #[serde(serialize_with = "dec")]
    pub checked: u64,
    pub quarantined: bool,
    pub draining: bool,
    /// Not heard from within a lease's lifetime.
    pub lost: bool,
    /// Not heard from since the coordinator started.
    pub unheard: bool,
    /// working, idle, draining, left, lost, unheard or quarantined.
    pub state: &'static str,
    /// One task it holds, `JOB:TASK`, if any.
    pub in_hand: Option<String>,
    pub subproblems_per_second: f64,
    #[serde(serialize_with = "dec")]
    pub last_seen_unix_ms: u64,
    pub solver_version: String,
}

impl WorkerRow {
    pub fn new(w: &v1::Worker) -> WorkerRow {
        let mut row = WorkerRow {
            worker: w.worker_id.clone(),
            name: w.name.clone(),
            host: w.host.clone(),
            cores: w.cores,
            leases: w.leases,
            tasks_done: w.tasks_done,
            subproblems_done: w.subproblems_done,
            errors: w.errors,
            conflicts: w.conflicts,
            checked: w.checked,
            quarantined: w.quarantined,
            draining: w.draining,
            lost: w.lost,
            unheard: w.unheard,
            state: "",
            in_hand: w
                .in_hand
                .as_ref()
                .map(|l| format!("{}:{}", l.job_id, l.task_index)),
            subproblems_per_second: w.subproblems_per_second,
            last_seen_unix_ms: w.last_seen_unix_ms,
            solver_version: w.solver_version.clone(),
        };
        row.state = row.state();
        row
    }

    /// quarantined (no more leases), unheard (known from the
    /// coordinator's records, not heard from since it started), left (it
    /// said it was draining and holds no task, or fell silent since: it
    /// went away as asked), lost (not heard from within a lease's
    /// lifetime), draining (going away, finishing its tasks), working
    /// (holding tasks), or idle.
    fn state(&self) -> &'static str {
        match () {
            () if self.quarantined => "quarantined",
            () if self.unheard => "unheard",
            () if self.draining && (self.lost || self.leases == 0) => "left",
            () if self.lost => "lost",
            () if self.draining => "draining",
            () if self.leases > 0 => "working",
            () => "idle",
        }
    }

    /// The engine path the worker counts with (the last word of its
    /// version, `0.1.0 avx2`), or `?` for a worker that does not say.
    pub fn path(&self) -> &str {
        match self.solver_version.split_once(' ') {
            Some((_, path)) => path,
            None => "?",
        }
    }

    /// The CORES column: threads and path (`2 avx512`), or with cards
    /// the threads and the number of cards (`16+1 gpu`; the cards' names
    /// are in the version, in `--json`).
    fn cores_column(&self) -> String {
        let path = self.path();
        match path.split('+').filter(|p| p.starts_with("gpu:")).count() {
            0 => format!("{} {path}", self.cores),
            cards => format!("{}+{cards} gpu", self.cores),
        }
    }

    /// The header of `nqueens workers` (at most 80 columns; the id,
    /// version, host, leases, errors and conflicts are in `--json`).
    pub fn table_header() -> String {
        format!(
            "{:<12}  {:>9}  {:>8}  {:>9}  {:>11}  {:>7}  {}",
            "NAME", "CORES", "TASKS", "SUBPROB/S", "IN HAND", "SEEN", "STATE"
        )
    }

    /// Its row; `shared_name`: another worker listed has its name, so
    /// the row adds the end of its id (`rescuer#9b1c`) to tell them apart.
    pub fn table_row(&self, shared_name: bool) -> String {
        // 0: not seen since the coordinator started (known from its
        // journal only).
        let seen = match self.last_seen_unix_ms {
            0 => "-".to_string(),
            ms => human_duration(
                SystemTime::now()
                    .duration_since(UNIX_EPOCH + Duration::from_millis(ms))
                    .unwrap_or_default(),
            ),
        };
        let name = match (self.name.is_empty(), shared_name) {
            (true, _) => cut(&self.worker, 12),
            (false, false) => cut(&self.name, 12),
            (false, true) => {
                let skip = self.worker.chars().count().saturating_sub(4);
                let tail: String = self.worker.chars().skip(skip).collect();
                format!("{}#{tail}", cut(&self.name, 7))
            }
        };
        format!(
            "{:<12}  {:>9}  {:>8}  {:>9}  {:>11}  {:>7}  {}",
            name,
            cut(&self.cores_column(), 9),
            thousands(self.tasks_done.into()),
            thousands(self.subproblems_per_second.round() as u128),
            cut(self.in_hand.as_deref().unwrap_or("-"), 11),
            seen,
            self.state,
        )
    }
}

/// `s` in at most `width` characters: a longer one is cut and ends in `~`
/// (so columns stay in place).
fn cut(s: &str, width: usize) -> String {
    match s.char_indices().nth(width - 1) {
        Some((at, _)) if s.chars().count() > width => format!("{}~", &s[..at]),
        _ => s.to_string(),
    }
}

/// An audit's findings, decoded from the wire.
#[derive(Clone, Debug, Serialize)]
pub struct AuditView {
    #[serde(serialize_with = "dec")]
    pub job: u64,
    pub n: u32,
    pub strategy: &'static str,
    pub depth: u32,
    pub mode: &'static str,
    pub state: &'static str,
    #[serde(serialize_with = "dec")]
    pub journal_records: u64,
    #[serde(serialize_with = "dec")]
    pub journal_bytes: u64,
    #[serde(serialize_with = "dec")]
    pub torn_bytes: u64,
    #[serde(serialize_with = "dec")]
    pub tasks: u64,
    #[serde(serialize_with = "dec")]
    pub result_records: u64,
    #[serde(serialize_with = "dec")]
    pub counted: u64,
    /// Recomputed from the results once every task has one.
    #[serde(serialize_with = "dec_opt")]
    pub total: Option<u128>,
    #[serde(serialize_with = "dec_opt")]
    pub unique: Option<u128>,
    pub matches_known: Option<bool>,
    /// SHA-256 of the plan and every counted result.
    pub digest: String,
    pub problems: Vec<String>,
    /// What redundancy caught (results outvoted, tasks still disputed).
    pub disagreements: Vec<String>,
    pub passed: bool,
}

impl AuditView {
    pub fn new(a: &v1::AuditReport) -> AuditView {
        let spec = a.plan.unwrap_or_default();
        let matches_known = known_from_wire(a.known);
        AuditView {
            job: a.job_id,
            n: spec.n,
            strategy: strategy_name(&spec),
            depth: spec.depth,
            mode: mode_name(&spec),
            state: state_name(a.state, a.tasks),
            journal_records: a.journal_records,
            journal_bytes: a.journal_bytes,
            torn_bytes: a.torn_bytes,
            tasks: a.tasks,
            result_records: a.result_records,
            counted: a.counted,
            total: a.total.as_ref().map(u128::from),
            unique: a.unique.as_ref().map(u128::from),
            matches_known,
            digest: a.digest.clone(),
            problems: a.problems.clone(),
            disagreements: a.disagreements.clone(),
            passed: a.problems.is_empty() && matches_known != Some(false),
        }
    }

    pub fn text(&self) -> String {
        let n = |x: u64| thousands(u128::from(x));
        let torn = if self.torn_bytes > 0 {
            format!(
                "; a half-written last record of {} bytes (normal while the coordinator writes)",
                n(self.torn_bytes)
            )
        } else {
            String::new()
        };
        let counts = match (self.total, self.unique) {
            (Some(t), Some(u)) => format!(
                "total {}, unique {}, recomputed from the results",
                thousands(t),
                thousands(u)
            ),
            _ => format!(
                "not final: {} of {} tasks have a result",
                n(self.counted),
                n(self.tasks)
            ),
        };
        let known = match (self.total, self.matches_known) {
            (None, _) => "checked once every task has a result".to_string(),
            // A synthetic job has no published count: its answer is the
            // sum of its tasks' answers.
            (Some(_), Some(m)) if self.strategy == "synthetic" => format!(
                "{} the sum of its tasks' answers (a synthetic job)",
                if m { "equals" } else { "DIFFERS from" }
            ),
            (Some(_), m) => verdict(m).to_string(),
        };
        let outcome = if !self.passed {
            let mut lines = format!("FAILED ({} problems)", self.problems.len().max(1));
            for p in &self.problems {
                lines += &format!("\n  - {p}");
            }
            lines
        } else if self.total.is_some() {
            "passed".to_string()
        } else if self.state == "cancelled" {
            "passed for the results it has (the job was cancelled: it has no final count)"
                .to_string()
        } else {
            "passed so far (the job is not finished)".to_string()
        };
        let checked = match self.disagreements.is_empty() {
            true => String::new(),
            false => format!(
                "checking caught, and agreeing results settle (not a problem of the count):{}\n",
                self.disagreements
                    .iter()
                    .map(|d| format!("\n  - {d}"))
                    .collect::<String>()
            ),
        };
        format!(
            "audit of job {} ({}, {})\n\
             journal  {} records, {} bytes, every CRC checked{torn}\n\
             plan     re-computed: {} tasks, checked against the journaled digest\n\
             results  {} tasks counted ({} result records), each checked against its task\n\
             counts   {counts}\n\
             known    {known}\n\
             digest   {} (SHA-256)\n\
             {checked}\
             verdict  {outcome}\n",
            self.job,
            plan_text(self.n, self.strategy, self.depth, self.mode),
            self.state,
            n(self.journal_records),
            n(self.journal_bytes),
            n(self.tasks),
            n(self.counted),
            n(self.result_records),
            self.digest,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_worker_is_not_workers() {
        let mut job = JobInfo::new(&v1::Job::default());
        let said = |j: &JobInfo| j.workers_text();
        assert_eq!(said(&job), "0 workers");
        job.active_workers = 1;
        assert_eq!(said(&job), "1 worker");
        assert!(job.line().contains(", 1 worker, ETA"), "{}", job.line());
        job.active_workers = 300;
        assert_eq!(said(&job), "300 workers");
    }

    /// Tasks out of retries are said with the command that puts them back.
    #[test]
    fn dead_tasks_are_said_with_the_command_that_retries_them() {
        let mut job = JobInfo::new(&v1::Job {
            job_id: 7,
            dead: 4,
            ..v1::Job::default()
        });
        assert!(
            job.warnings().contains("4 tasks out of retries"),
            "{}",
            job.warnings()
        );
        assert!(
            job.warnings().contains("`nqueens retry 7`"),
            "{}",
            job.warnings()
        );
        job.dead = 0;
        assert_eq!(job.warnings(), "");
    }

    #[test]
    fn an_eta_comes_with_its_error_bar_and_only_from_a_steady_rate() {
        let running = |eta: f64, error: f64| {
            let j = v1::Job {
                state: v1::JobState::Running as i32,
                eta_seconds: eta,
                eta_error_seconds: error,
                ..v1::Job::default()
            };
            JobInfo::new(&j).eta()
        };
        assert_eq!(running(0.0, 0.0), "unknown", "no steady rate yet");
        assert_eq!(running(1_560.0, 240.0), "26m 0s ± 4m 0s");
        assert_eq!(running(90.0, 0.1), "1m 30s", "an error under half a second");
    }

    /// A table's rows keep to its header's columns with the widest plan
    /// and the longest time since a worker was seen.
    #[test]
    fn rows_keep_to_their_headers_columns() {
        let mut job = JobInfo::new(&v1::Job::default());
        (job.n, job.strategy, job.depth, job.state) = (28, "synthetic".into(), 0, "running");
        assert_eq!(job.short_plan(), "N=28 synthetic");
        (job.strategy, job.depth, job.mode) = ("rings".into(), 12, "join");
        assert_eq!(job.short_plan(), "N=28 rings/12+j");
        let (header, row) = (JobInfo::table_header(), job.table_row());
        assert_eq!(
            row.find("running"),
            header.find("STATE"),
            "\n{header}\n{row}"
        );
        let seen = now_unix_ms() - 59 * 60_000 - 59_000;
        let w = WorkerRow::new(&v1::Worker {
            name: "w".into(),
            last_seen_unix_ms: seen,
            ..v1::Worker::default()
        });
        let (header, row) = (WorkerRow::table_header(), w.table_row(false));
        assert!(row.contains("59m 59s"), "{row}");
        assert_eq!(row.find(w.state), header.find("STATE"), "\n{header}\n{row}");
        // Known from the journal only, never seen since the start.
        let unseen = WorkerRow::new(&v1::Worker {
            name: "w".into(),
            ..v1::Worker::default()
        });
        let row = unseen.table_row(false);
        let state = header.find("STATE").unwrap();
        assert_eq!(&row[state - 3..state], "-  ", "\n{header}\n{row}");
    }

    /// Two workers of one name are told apart by the end of their ids.
    #[test]
    fn workers_of_one_name_are_told_apart() {
        let w = |id: &str| {
            WorkerRow::new(&v1::Worker {
                worker_id: id.into(),
                name: "rescuer-on-rack-7".into(),
                ..v1::Worker::default()
            })
        };
        let (a, b) = (
            w("rescuer-on-rack-7-3f2a9b1c"),
            w("rescuer-on-rack-7-77d0e4aa"),
        );
        assert!(
            a.table_row(true).starts_with("rescue~#9b1c "),
            "{}",
            a.table_row(true)
        );
        assert!(
            b.table_row(true).starts_with("rescue~#e4aa "),
            "{}",
            b.table_row(true)
        );
        assert!(
            a.table_row(false).starts_with("rescuer-on-~ "),
            "{}",
            a.table_row(false)
        );
    }

    #[test]
    fn a_worker_done_draining_left_one_silent_otherwise_is_lost() {
        let w = |draining, lost, leases| {
            let w = v1::Worker {
                draining,
                lost,
                leases,
                ..v1::Worker::default()
            };
            WorkerRow::new(&w).state
        };
        assert_eq!(w(true, true, 0), "left");
        assert_eq!(w(true, true, 2), "left");
        assert_eq!(w(false, true, 0), "lost");
        assert_eq!(w(true, false, 2), "draining", "finishing its tasks");
        assert_eq!(w(true, false, 0), "left", "its drain is done");
        assert_eq!(w(false, false, 0), "idle");
        let unheard = v1::Worker {
            unheard: true,
            leases: 3,
            ..v1::Worker::default()
        };
        assert_eq!(WorkerRow::new(&unheard).state, "unheard");
    }

    /// A frame plan's unique count comes with its last result: before,
    /// a line says when instead of showing 0; a cancelled job's audit
    /// says it has no final count.
    #[test]
    fn a_unique_count_to_come_is_not_shown_as_zero() {
        let mut job = JobInfo::new(&v1::Job::default());
        (job.state, job.total, job.unique) = ("running", 14_696_112, 0);
        assert!(job.line().contains("unique at the end"), "{}", job.line());
        assert!(
            job.text().contains("unique    at the end"),
            "{}",
            job.text()
        );
        (job.state, job.total, job.unique) = ("done", 95_815_104, 11_977_939);
        assert!(job.line().contains("unique 11,977,939"), "{}", job.line());
        let mut a = AuditView::new(&v1::AuditReport::default());
        a.state = "cancelled";
        assert!(a.text().contains("the job was cancelled"), "{}", a.text());
    }

    #[test]
    fn a_synthetic_audit_is_not_compared_with_oeis() {
        let mut a = AuditView::new(&v1::AuditReport::default());
        (a.total, a.unique, a.matches_known) = (Some(10), Some(10), Some(true));
        a.strategy = "synthetic";
        let text = a.text();
        assert!(
            text.contains("equals the sum of its tasks' answers"),
            "{text}"
        );
        assert!(!text.contains("OEIS"), "{text}");
        a.strategy = "frame";
        assert!(a.text().contains("matches OEIS"));
    }
}
