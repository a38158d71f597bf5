//! Everything the coordinator knows, in memory: jobs, their tasks and
//! results, leases and workers. Pure and deterministic (the clock is passed
//! in), so the same code replays the journal at start-up and serves live
//! calls, and tests drive it without sleeping.
//!
//! Durable facts enter only through [`State::apply`] with a journal record
//! that is already on disk. Leases are not durable: after a restart every
//! unfinished task is pending again. A lease id is a MAC (HMAC-SHA-256 under
//! the data directory's secret key) over the boot epoch, job, task and
//! worker, so it cannot be guessed, is bound to its worker, and a lease of
//! an earlier boot can still be recognised: its holder may adopt it (by a
//! heartbeat) or report it while no other worker holds the task.

use nqueens_common::known::known;
#[cfg(test)]
use nqueens_common::plan::Strategy;
use nqueens_common::plan::{Plan, PlanSpec, Tally, Task};
use nqueens_proto::tally_from_wire;
use nqueens_proto::v1::{self, journal_record::Record, JournalRecord};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// Lease ids are `(boot epoch mod 2^16) << EPOCH_SHIFT | 48 bits of MAC`.
const EPOCH_SHIFT: u32 = 48;

/// The secret behind lease ids (32 bytes).
pub type LeaseKey = [u8; 32];

/// A fresh random lease key.
pub fn random_key() -> LeaseKey {
    let mut k = [0u8; 32];
    getrandom::getrandom(&mut k).expect("the operating system's random source failed");
    k
}

/// The lease id of `worker`'s lease on `task` of `job` in boot `epoch`:
/// HMAC-SHA-256 under `key`, never 0.
pub fn lease_id(key: &LeaseKey, epoch: u64, job: u64, task: u64, worker: &str) -> u64 {
    let (mut ipad, mut opad) = ([0x36u8; 64], [0x5cu8; 64]);
    for (i, k) in key.iter().enumerate() {
        ipad[i] ^= k;
        opad[i] ^= k;
    }
    let inner = Sha256::new()
        .chain_update(ipad)
        .chain_update(b"nqueens lease v1")
        .chain_update(epoch.to_le_bytes())
        .chain_update(job.to_le_bytes())
        .chain_update(task.to_le_bytes())
        .chain_update((worker.len() as u64).to_le_bytes())
        .chain_update(worker.as_bytes())
        .finalize();
    let mac = Sha256::new()
        .chain_update(opad)
        .chain_update(inner)
        .finalize();
    let low = u64::from_le_bytes(mac[..8].try_into().expect("8 bytes")) & ((1 << EPOCH_SHIFT) - 1);
    ((epoch & 0xffff) << EPOCH_SHIFT | low).max(1)
}

/// Timing and retry rules.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// A lease not renewed within this returns its task to pending.
    pub lease_ttl_ms: u64,
    /// Expired leases a task may have before it is dead.
    pub retry_budget: u32,
    /// Wait before retrying a task: base × 2^(attempts-1), at most max.
    pub backoff_base_ms: u64,
    pub backoff_max_ms: u64,
    /// The most tasks a submitted plan may have.
    pub max_tasks: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            lease_ttl_ms: 60_000,
            retry_budget: 5,
            backoff_base_ms: 1_000,
            backoff_max_ms: 300_000,
            max_tasks: nqueens_common::plan::MAX_DEFAULT_TASKS,
        }
    }
}

/// What a job is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    /// Submitted; its tasks are being computed.
    Planning,
    Running,
    Paused,
    Cancelled,
    Done,
}

/// A stored task result and who produced it.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredResult {
    pub tally: Tally,
    pub checksum: u64,
    pub worker: String,
    /// Who vouches for it: the worker's credential, else its id.
    pub credential: String,
    pub lease_id: u64,
    pub unix_ms: u64,
    pub elapsed_ms: u64,
    pub solver_version: String,
}

impl StoredResult {
    /// Equal counts and checksum: a duplicate, not a conflict.
    pub fn same(&self, tally: &Tally, checksum: u64) -> bool {
        self.tally == *tally && self.checksum == checksum
    }
}

/// A result that disagreed with the stored one.
#[derive(Clone, Debug, PartialEq)]
pub struct Conflict {
    pub task: u64,
    pub worker: String,
    pub tally: Tally,
}

#[derive(Clone, Debug)]
struct Lease {
    lease_id: u64,
    worker: String,
    deadline: u64,
}

/// One job.
#[derive(Clone, Debug)]
pub struct Job {
    pub id: u64,
    pub spec: PlanSpec,
    pub submitted_ms: u64,
    /// Agreeing results from different workers each task needs (1: none).
    pub redundancy: u32,
    /// The share of tasks that need `redundancy` (the others need one).
    pub verify_fraction: f64,
    /// Results of tasks not yet agreed on (redundancy), by task.
    candidates: HashMap<u64, Vec<StoredResult>>,
    /// Results journaled but never counted (from a quarantined worker, or
    /// arriving after a cancel), kept for the audit: (task, result).
    pub ignored: Vec<(u64, StoredResult)>,
    /// The operator's choice: Running, Paused or Cancelled.
    control: JobState,
    /// The plan's tasks, once planned.
    tasks: Option<Vec<Task>>,
    planned: Option<(u64, u64)>,
    pub work_total: f64,
    pub work_done: f64,
    results: BTreeMap<u64, StoredResult>,
    dead: BTreeMap<u64, String>,
    pub conflicts: Vec<Conflict>,
    /// Sum of every stored result (checked arithmetic).
    pub tally: Tally,
    leases: BTreeMap<u64, Lease>,
    ready: BTreeSet<u64>,
    /// Tasks waiting out a retry backoff: (not before, task).
    waiting: BTreeSet<(u64, u64)>,
    attempts: HashMap<u64, u32>,
    /// The latest results: (time, estimated work), for the rate.
    recent: VecDeque<(u64, f64)>,
}

/// Most distinct worker ids the coordinator keeps.
pub const MAX_WORKERS: usize = 10_000;

/// Results the rate is measured over.
const RATE_WINDOW: usize = 256;

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
    /// Tasks with a result that waits for another worker's agreement.
    pub checking: u64,
    /// Estimated work done per second over the latest results.
    pub work_per_second: f64,
    /// Seconds left at that rate, when it is known.
    pub eta_seconds: Option<f64>,
    /// Why it cannot progress now, when it cannot (see [`State::waiting_for`]).
    pub waiting_for: Option<String>,
}

impl Job {
    /// Work per second between the oldest and newest of the latest results.
    fn rate(&self) -> f64 {
        match (self.recent.front(), self.recent.back()) {
            (Some(&(t0, _)), Some(&(t1, _))) if t1 > t0 => {
                let work: f64 = self.recent.iter().skip(1).map(|&(_, w)| w).sum();
                work * 1000.0 / (t1 - t0) as f64
            }
            _ => 0.0,
        }
    }

    pub fn state(&self) -> JobState {
        match (self.control, &self.tasks) {
            (JobState::Cancelled, _) => JobState::Cancelled,
            (_, Some(t)) if self.results.len() == t.len() => JobState::Done,
            // A pause holds from the moment it is asked, planning or not.
            (JobState::Paused, _) => JobState::Paused,
            (_, None) => JobState::Planning,
            (c, _) => c,
        }
    }

    pub fn tasks(&self) -> Option<&[Task]> {
        self.tasks.as_deref()
    }

    pub fn result(&self, task: u64) -> Option<&StoredResult> {
        self.results.get(&task)
    }

    pub fn results(&self) -> impl Iterator<Item = (&u64, &StoredResult)> {
        self.results.iter()
    }

    pub fn planned(&self) -> Option<(u64, u64)> {
        self.planned
    }

    /// The running totals of the counted results.
    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    /// Total and unique of the results so far: exact once the job is done
    /// (the unique count of a frame plan needs every task, so it stays 0
    /// until then).
    pub fn counts(&self) -> (u128, u128) {
        let plan = Plan::new(self.spec).expect("stored specs are valid");
        if self.state() == JobState::Done {
            if let Ok(t) = plan.finish(&self.tally) {
                return (t.total().unwrap_or(0), t.unique().unwrap_or(0));
            }
        }
        let c = &self.tally.classes;
        let total = c.total().unwrap_or(0).saturating_add(self.tally.weighted);
        let unique = if plan.whole() {
            c.unique().unwrap_or(0)
        } else {
            0
        };
        (total, unique)
    }

    pub fn view(&self) -> JobView {
        let (total, unique) = self.counts();
        JobView {
            id: self.id,
            spec: self.spec,
            state: self.state(),
            tasks: self.tasks.as_ref().map_or(0, |t| t.len() as u64),
            pending: self.ready.len() as u64,
            leased: self.leases.len() as u64,
            done: self.results.len() as u64,
            failed: self.waiting.len() as u64,
            dead: self.dead.len() as u64,
            work_total: self.work_total,
            work_done: self.work_done,
            total,
            unique,
            conflicts: self.conflicts.len() as u64,
            submitted_ms: self.submitted_ms,
            workers: self
                .leases
                .values()
                .map(|l| l.worker.as_str())
                .collect::<std::collections::HashSet<_>>()
                .len() as u64,
            redundancy: self.redundancy,
            verify_fraction: self.verify_fraction,
            checking: self.candidates.len() as u64,
            work_per_second: self.rate(),
            eta_seconds: (self.rate() > 0.0)
                .then(|| (self.work_total - self.work_done).max(0.0) / self.rate()),
            waiting_for: None,
        }
    }

    /// Agreeing workers this task needs: `redundancy` for the chosen
    /// share of tasks (a hash of job and task, stable across restarts).
    pub fn needs(&self, task: u64) -> u32 {
        if self.verify_fraction >= 1.0 {
            return self.redundancy;
        }
        let mut h = (self.id ^ task.rotate_left(32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 31;
        h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h ^= h >> 29;
        if (h >> 11) as f64 / (1u64 << 53) as f64 <= self.verify_fraction {
            self.redundancy
        } else {
            1
        }
    }

    fn unfinished(&self, task: u64) -> bool {
        !self.results.contains_key(&task) && !self.dead.contains_key(&task)
    }
}

/// A worker as the coordinator sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkerInfo {
    pub id: String,
    pub host: String,
    pub cores: u32,
    pub solver_version: String,
    pub last_seen_ms: u64,
    pub tasks_done: u64,
    pub subproblems_done: u64,
    pub errors: u64,
    /// Results of this worker that others contradicted; one is enough to
    /// stop leasing to it (quarantine).
    pub conflicts: u64,
    /// Results of this worker that another credential agreed with.
    pub checked: u64,
}

impl WorkerInfo {
    pub fn quarantined(&self) -> bool {
        self.conflicts > 0
    }
}

/// A task lent to a worker.
#[derive(Clone, Debug, PartialEq)]
pub struct Granted {
    pub job: u64,
    pub spec: PlanSpec,
    pub task: Task,
    pub lease_id: u64,
    pub deadline: u64,
}

/// A worker's reference to one of its leases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LeaseRef {
    pub job: u64,
    pub task: u64,
    pub lease_id: u64,
}

/// How a report compares with what is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The task's first result: journal it, then apply it. (With
    /// redundancy, the result that completes the agreement.)
    New,
    /// Stored, and waiting for another worker to compute the same task
    /// (redundancy): nothing counted yet.
    AwaitingCheck,
    /// Equal to the stored result: nothing to do.
    Duplicate,
    /// Different from the stored result: journal the conflict.
    Conflict,
    /// Journaled for the audit but never counted: the worker is
    /// quarantined (or the job was cancelled meanwhile).
    NotCounted,
}

/// A request that cannot be served, with what was wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StateError {
    #[error("job {0} does not exist")]
    UnknownJob(u64),
    #[error("job {job} has no task {task} (it has {tasks})")]
    UnknownTask { job: u64, task: u64, tasks: u64 },
    #[error("job {0} is still being planned; try again shortly")]
    NotPlanned(u64),
    #[error("task {task} of job {job} is not leased to worker '{worker}' under lease {lease_id} (expired and reassigned, or never granted)")]
    NotLeased {
        job: u64,
        task: u64,
        lease_id: u64,
        worker: String,
    },
    #[error("result for task {task} of job {job} is impossible: {why}")]
    Implausible { job: u64, task: u64, why: String },
    #[error("job {job} is {state:?}; it cannot be {action}")]
    Finished {
        job: u64,
        state: JobState,
        action: &'static str,
    },
    #[error("the coordinator already knows {0} worker ids, its limit; no new worker id is taken (restart it to forget idle workers)")]
    TooManyWorkers(usize),
    #[error(
        "worker id '{worker}' belongs to credential '{bound}'; choose another worker id (--name)"
    )]
    WrongCredential { worker: String, bound: String },
    #[error("journal record does not fit the state: {0}")]
    BadRecord(String),
    #[error("re-planning job {job} gave a different task list (digest {got:#x}, journal says {want:#x})")]
    PlanChanged { job: u64, got: u64, want: u64 },
}

/// Event counts since start-up (replayed records included), for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub accepted: u64,
    pub duplicates: u64,
    pub conflicts: u64,
    pub leases_granted: u64,
    pub lease_expiries: u64,
    pub releases: u64,
}

/// The whole in-memory state.
#[derive(Debug)]
pub struct State {
    pub counters: Counters,
    limits: Limits,
    jobs: BTreeMap<u64, Job>,
    workers: BTreeMap<String, WorkerInfo>,
    /// Current leases: lease id → (job, task).
    by_lease: HashMap<u64, (u64, u64)>,
    /// Expired leases of this boot whose late results are still welcome:
    /// lease id → (worker, job, task).
    expired: HashMap<u64, (String, u64, u64)>,
    epoch: u64,
    /// The secret lease ids are derived with.
    lease_key: LeaseKey,
    /// Worker id → the credential it authenticated with (not durable:
    /// bound again by the first call after a restart).
    bound: HashMap<String, String>,
}

/// An order-sensitive digest of a task list (FNV-1a over the ranges), so a
/// re-plan can be checked against the journal.
pub fn digest(tasks: &[Task]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for t in tasks {
        for x in [t.lo, t.hi, t.skip, t.take] {
            for b in x.to_le_bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    h
}

impl State {
    pub fn new(limits: Limits) -> State {
        State {
            counters: Counters::default(),
            limits,
            jobs: BTreeMap::new(),
            workers: BTreeMap::new(),
            by_lease: HashMap::new(),
            expired: HashMap::new(),
            epoch: 0,
            lease_key: random_key(),
            bound: HashMap::new(),
        }
    }

    /// Ties a worker id to the credential it authenticated with (empty:
    /// the shared worker token, or none); another credential may not use
    /// that id.
    pub fn bind(&mut self, worker: &str, credential: &str) -> Result<(), StateError> {
        if credential.is_empty() {
            return Ok(());
        }
        match self.bound.get(worker) {
            Some(b) if b != credential => Err(StateError::WrongCredential {
                worker: worker.to_string(),
                bound: b.clone(),
            }),
            Some(_) => Ok(()),
            None => {
                self.bound
                    .insert(worker.to_string(), credential.to_string());
                Ok(())
            }
        }
    }

    /// The credential a worker id is bound to (empty if none).
    pub fn credential_of(&self, worker: &str) -> String {
        self.bound.get(worker).cloned().unwrap_or_default()
    }

    /// Who vouches for a worker's results: its credential, else its id.
    pub fn voter(&self, worker: &str) -> String {
        self.bound
            .get(worker)
            .cloned()
            .unwrap_or_else(|| worker.to_string())
    }

    /// Uses the data directory's lease key (so leases of earlier boots can
    /// be recognised).
    pub fn set_lease_key(&mut self, key: LeaseKey) {
        self.lease_key = key;
    }

    /// Whether `r` is a lease this coordinator granted `worker` in an
    /// earlier boot.
    fn issued_before(&self, worker: &str, r: &LeaseRef) -> bool {
        let mut e = r.lease_id >> EPOCH_SHIFT;
        while e < self.epoch {
            if lease_id(&self.lease_key, e, r.job, r.task, worker) == r.lease_id {
                return true;
            }
            e += 1 << 16;
        }
        false
    }

    /// Whether this worker's lease `r` lapsed in this boot (expired).
    fn lapsed(&self, worker: &str, r: &LeaseRef) -> bool {
        self.expired
            .get(&r.lease_id)
            .is_some_and(|(w, j, t)| w == worker && *j == r.job && *t == r.task)
    }

    /// Refuses a worker id never seen before once `MAX_WORKERS` are known,
    /// so made-up ids cannot grow memory, replies and metrics without end.
    pub fn admit(&self, worker: &str) -> Result<(), StateError> {
        if self.workers.len() >= MAX_WORKERS && !self.workers.contains_key(worker) {
            return Err(StateError::TooManyWorkers(MAX_WORKERS));
        }
        Ok(())
    }

    /// Whether `worker` is quarantined.
    pub fn quarantined(&self, worker: &str) -> bool {
        self.workers.get(worker).is_some_and(|w| w.quarantined())
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    pub fn job(&self, id: u64) -> Result<&Job, StateError> {
        self.jobs.get(&id).ok_or(StateError::UnknownJob(id))
    }

    pub fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values()
    }

    pub fn workers(&self) -> impl Iterator<Item = &WorkerInfo> {
        self.workers.values()
    }

    /// Why job `id` cannot progress now, if it cannot: it is being planned,
    /// or its redundancy needs more distinct credentials than the workers
    /// seen within a lease's lifetime (and not quarantined) have.
    pub fn waiting_for(&self, id: u64, now_ms: u64) -> Option<String> {
        let job = self.jobs.get(&id)?;
        match job.state() {
            JobState::Planning => return Some("planning: its tasks are being computed".into()),
            JobState::Running if job.redundancy > 1 => {}
            _ => return None,
        }
        let since = now_ms.saturating_sub(self.limits.lease_ttl_ms);
        let voters = self
            .workers
            .values()
            .filter(|w| w.last_seen_ms >= since && !w.quarantined())
            .map(|w| self.voter(&w.id))
            .collect::<std::collections::HashSet<_>>()
            .len();
        let needed = job.redundancy as usize;
        (voters < needed).then(|| {
            format!(
                "workers: redundancy {needed} needs {needed} distinct worker credentials, and {voters} \
                 connected (an issued token counts once, however many workers use it: give each \
                 machine its own with `nqueens token issue NAME`)"
            )
        })
    }

    /// Leases a worker holds now.
    pub fn leases_of(&self, worker: &str) -> usize {
        self.jobs
            .values()
            .flat_map(|j| j.leases.values())
            .filter(|l| l.worker == worker)
            .count()
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn next_job_id(&self) -> u64 {
        self.jobs.keys().next_back().map_or(1, |k| k + 1)
    }

    /// Applies one journal record (replayed or just written). Task results
    /// are idempotent by task: a second one is compared, never added.
    pub fn apply(&mut self, record: &JournalRecord) -> Result<Option<Verdict>, StateError> {
        let bad = |what: &str| StateError::BadRecord(what.to_string());
        match record.record.as_ref().ok_or_else(|| bad("empty record"))? {
            Record::Boot(b) => {
                self.epoch = self.epoch.max(b.epoch);
            }
            Record::JobSubmitted(s) => {
                let spec =
                    PlanSpec::try_from(s.plan.as_ref().ok_or_else(|| bad("job without plan"))?)
                        .map_err(|e| bad(&e.to_string()))?;
                self.jobs.insert(
                    s.job_id,
                    new_job(s.job_id, spec, s.unix_ms, s.redundancy, s.verify_fraction),
                );
            }
            Record::JobPlanned(p) => {
                let job = self
                    .jobs
                    .get_mut(&p.job_id)
                    .ok_or(StateError::UnknownJob(p.job_id))?;
                job.planned = Some((p.tasks, p.digest));
            }
            Record::JobState(c) => {
                let job = self
                    .jobs
                    .get_mut(&c.job_id)
                    .ok_or(StateError::UnknownJob(c.job_id))?;
                job.control = match v1::JobState::try_from(c.state) {
                    Ok(v1::JobState::Running) => JobState::Running,
                    Ok(v1::JobState::Paused) => JobState::Paused,
                    Ok(v1::JobState::Cancelled) => JobState::Cancelled,
                    _ => return Err(bad("unknown job state")),
                };
                if job.control == JobState::Cancelled {
                    let ids: Vec<u64> = job.leases.values().map(|l| l.lease_id).collect();
                    job.leases.clear();
                    for id in ids {
                        self.by_lease.remove(&id);
                    }
                }
            }
            Record::TaskDone(d) => {
                let wire = d.result.as_ref().ok_or_else(|| bad("result missing"))?;
                let (tally, checksum) = (tally_from_wire(wire), wire.checksum);
                let job = self
                    .jobs
                    .get_mut(&d.job_id)
                    .ok_or(StateError::UnknownJob(d.job_id))?;
                let r = d.result.as_ref().expect("checked above");
                let this = StoredResult {
                    tally,
                    checksum,
                    worker: d.worker_id.clone(),
                    credential: if d.credential.is_empty() {
                        d.worker_id.clone()
                    } else {
                        d.credential.clone()
                    },
                    lease_id: d.lease_id,
                    unix_ms: d.unix_ms,
                    elapsed_ms: r.elapsed_ms,
                    solver_version: r.solver_version.clone(),
                };
                // A quarantined worker's result, or one that reached the
                // journal after a cancel, is kept for the audit only.
                let quarantined = self
                    .workers
                    .get(&d.worker_id)
                    .is_some_and(|w| w.quarantined());
                if quarantined || job.control == JobState::Cancelled {
                    job.ignored.push((d.task_index, this));
                    return Ok(Some(Verdict::NotCounted));
                }
                if let Some(stored) = job.results.get(&d.task_index) {
                    let v = if stored.same(&tally, checksum) {
                        Verdict::Duplicate
                    } else {
                        Verdict::Conflict
                    };
                    match v {
                        Verdict::Duplicate => self.counters.duplicates += 1,
                        _ => self.counters.conflicts += 1,
                    }
                    if v == Verdict::Conflict {
                        job.conflicts.push(Conflict {
                            task: d.task_index,
                            worker: d.worker_id.clone(),
                            tally,
                        });
                    }
                    return Ok(Some(v));
                }
                let needed = job.needs(d.task_index);
                if needed > 1 {
                    let seen = job.candidates.entry(d.task_index).or_default();
                    seen.push(this.clone());
                    let workers = &self.workers;
                    let agree = seen
                        .iter()
                        .filter(|c| c.same(&tally, checksum))
                        .filter(|c| !workers.get(&c.worker).is_some_and(|w| w.quarantined()))
                        .map(|c| c.credential.as_str())
                        .collect::<std::collections::HashSet<_>>()
                        .len();
                    if let Some(l) = job.leases.remove(&d.task_index) {
                        self.by_lease.remove(&l.lease_id);
                    }
                    if agree < needed as usize {
                        // Another worker must compute it: back to the queue.
                        job.ready.insert(d.task_index);
                        return Ok(Some(Verdict::AwaitingCheck));
                    }
                    // Agreed: the odd ones out are conflicts, their workers
                    // quarantined; the others were checked.
                    let seen = job.candidates.remove(&d.task_index).unwrap_or_default();
                    for same in seen.iter().filter(|c| c.same(&tally, checksum)) {
                        worker_entry(&mut self.workers, &same.worker).checked += 1;
                    }
                    for odd in seen.iter().filter(|c| !c.same(&tally, checksum)) {
                        job.conflicts.push(Conflict {
                            task: d.task_index,
                            worker: odd.worker.clone(),
                            tally: odd.tally,
                        });
                        self.counters.conflicts += 1;
                        worker_entry(&mut self.workers, &odd.worker).conflicts += 1;
                    }
                }
                job.tally.merge(&tally).map_err(|e| bad(&e.to_string()))?;
                job.results.insert(d.task_index, this);
                job.dead.remove(&d.task_index);
                let mut subproblems = 0;
                if let Some(t) = job
                    .tasks
                    .as_ref()
                    .and_then(|t| t.get(d.task_index as usize))
                {
                    subproblems = t.subproblems;
                    job.work_done += t.work;
                    job.recent.push_back((d.unix_ms, t.work));
                    if job.recent.len() > RATE_WINDOW {
                        job.recent.pop_front();
                    }
                }
                job.ready.remove(&d.task_index);
                job.waiting.retain(|&(_, t)| t != d.task_index);
                if let Some(l) = job.leases.remove(&d.task_index) {
                    self.by_lease.remove(&l.lease_id);
                }
                if let Some(w) = self.workers.get_mut(&d.worker_id) {
                    w.tasks_done += 1;
                    w.subproblems_done += subproblems;
                }
                self.counters.accepted += 1;
                return Ok(Some(Verdict::New));
            }
            Record::TaskConflict(c) => {
                let tally =
                    tally_from_wire(c.result.as_ref().ok_or_else(|| bad("result missing"))?);
                let job = self
                    .jobs
                    .get_mut(&c.job_id)
                    .ok_or(StateError::UnknownJob(c.job_id))?;
                job.conflicts.push(Conflict {
                    task: c.task_index,
                    worker: c.worker_id.clone(),
                    tally,
                });
                self.counters.conflicts += 1;
                let w = worker_entry(&mut self.workers, &c.worker_id);
                w.errors += 1;
                w.conflicts += 1;
            }
            Record::TaskDead(d) => {
                let job = self
                    .jobs
                    .get_mut(&d.job_id)
                    .ok_or(StateError::UnknownJob(d.job_id))?;
                if !job.results.contains_key(&d.task_index) {
                    job.dead.insert(d.task_index, d.reason.clone());
                    job.ready.remove(&d.task_index);
                    job.waiting.retain(|&(_, t)| t != d.task_index);
                }
            }
        }
        Ok(None)
    }

    /// Gives a planned job its task list (computed, or loaded from the
    /// store), checked against the journal's digest.
    pub fn attach_tasks(&mut self, job_id: u64, tasks: Vec<Task>) -> Result<(), StateError> {
        let job = self
            .jobs
            .get_mut(&job_id)
            .ok_or(StateError::UnknownJob(job_id))?;
        let got = digest(&tasks);
        if let Some((_, want)) = job.planned {
            if want != got {
                return Err(StateError::PlanChanged {
                    job: job_id,
                    got,
                    want,
                });
            }
        }
        job.work_total = tasks.iter().map(|t| t.work).sum();
        job.work_done = job
            .results
            .keys()
            .filter_map(|&i| tasks.get(i as usize))
            .map(|t| t.work)
            .sum();
        job.ready = (0..tasks.len() as u64)
            .filter(|&i| job.unfinished(i))
            .collect();
        job.tasks = Some(tasks);
        Ok(())
    }

    /// Records a call from a worker (registering it if new).
    pub fn touch_worker(&mut self, id: &str, now: u64) -> &mut WorkerInfo {
        let w = worker_entry(&mut self.workers, id);
        w.last_seen_ms = now;
        w
    }

    /// Lends up to `max` ready tasks to `worker`, oldest job first.
    pub fn lease(&mut self, worker: &str, max: usize, now: u64) -> Vec<Granted> {
        if self.touch_worker(worker, now).quarantined() {
            return Vec::new();
        }
        let ttl = self.limits.lease_ttl_ms;
        let (key, epoch) = (self.lease_key, self.epoch);
        let me = self.voter(worker);
        let mut granted = Vec::new();
        for job in self.jobs.values_mut() {
            if granted.len() >= max {
                break;
            }
            if job.state() != JobState::Running {
                continue;
            }
            // Tasks whose backoff is over become ready again.
            while let Some(&(until, task)) = job.waiting.first() {
                if until > now {
                    break;
                }
                job.waiting.pop_first();
                if job.unfinished(task) && !job.leases.contains_key(&task) {
                    job.ready.insert(task);
                }
            }
            while granted.len() < max {
                // With redundancy, a credential never checks its own result.
                let mine = |t: &u64| {
                    job.candidates
                        .get(t)
                        .is_some_and(|c| c.iter().any(|c| c.worker == worker || c.credential == me))
                };
                let Some(task) = job.ready.iter().copied().find(|t| !mine(t)) else {
                    break;
                };
                job.ready.remove(&task);
                let lease_id = lease_id(&key, epoch, job.id, task, worker);
                self.counters.leases_granted += 1;
                let deadline = now + ttl;
                job.leases.insert(
                    task,
                    Lease {
                        lease_id,
                        worker: worker.to_string(),
                        deadline,
                    },
                );
                self.by_lease.insert(lease_id, (job.id, task));
                let t = job.tasks.as_ref().expect("running jobs are planned")[task as usize];
                granted.push(Granted {
                    job: job.id,
                    spec: job.spec,
                    task: t,
                    lease_id,
                    deadline,
                });
            }
        }
        granted
    }

    /// Extends the worker's listed leases; returns the extended ones, the
    /// new deadline, and the ones to stop (cancelled, lost or done).
    pub fn heartbeat(
        &mut self,
        worker: &str,
        refs: &[LeaseRef],
        subproblems_done: u64,
        now: u64,
    ) -> (Vec<LeaseRef>, u64, Vec<LeaseRef>) {
        // Accepted results add up too; a heartbeat can only tell of more
        // (work counted but not yet reported).
        let w = self.touch_worker(worker, now);
        w.subproblems_done = w.subproblems_done.max(subproblems_done);
        let deadline = now + self.limits.lease_ttl_ms;
        let (mut extended, mut stop) = (Vec::new(), Vec::new());
        if self.quarantined(worker) {
            // No more work for a quarantined worker: its leases run out.
            return (extended, deadline, refs.to_vec());
        }
        for r in refs {
            // This worker's lease from before a restart, or its own lease
            // that merely expired (a late heartbeat), on a task nobody holds
            // now, is adopted, so its running count is not thrown away.
            let was_mine = self.lapsed(worker, r) || self.issued_before(worker, r);
            let Some(job) = self.jobs.get_mut(&r.job) else {
                stop.push(*r);
                continue;
            };
            let adoptable = was_mine
                && job.state() == JobState::Running
                && job.unfinished(r.task)
                && job.tasks.as_ref().is_some_and(|t| r.task < t.len() as u64);
            match job.leases.get_mut(&r.task) {
                Some(l) if l.lease_id == r.lease_id && l.worker == worker => {
                    l.deadline = deadline;
                    extended.push(*r);
                }
                None if adoptable => {
                    job.ready.remove(&r.task);
                    job.waiting.retain(|&(_, t)| t != r.task);
                    job.leases.insert(
                        r.task,
                        Lease {
                            lease_id: r.lease_id,
                            worker: worker.to_string(),
                            deadline,
                        },
                    );
                    self.by_lease.insert(r.lease_id, (r.job, r.task));
                    extended.push(*r);
                }
                _ => stop.push(*r),
            }
        }
        (extended, deadline, stop)
    }

    /// Hands leases back without penalty (a worker going away).
    pub fn release(&mut self, worker: &str, refs: &[LeaseRef], now: u64) -> u32 {
        self.touch_worker(worker, now);
        let mut released = 0;
        for r in refs {
            let Some(job) = self.jobs.get_mut(&r.job) else {
                continue;
            };
            if job
                .leases
                .get(&r.task)
                .is_some_and(|l| l.lease_id == r.lease_id && l.worker == worker)
            {
                job.leases.remove(&r.task);
                self.by_lease.remove(&r.lease_id);
                if job.unfinished(r.task) {
                    job.ready.insert(r.task);
                }
                released += 1;
                self.counters.releases += 1;
            }
        }
        released
    }

    /// Returns expired leases' tasks to pending after a backoff; a task out
    /// of retries is returned in the list (the caller journals it as dead).
    pub fn expire(&mut self, now: u64) -> Vec<(u64, u64)> {
        let limits = self.limits;
        let mut dying = Vec::new();
        for job in self.jobs.values_mut() {
            let gone: Vec<u64> = job
                .leases
                .iter()
                .filter(|(_, l)| l.deadline <= now)
                .map(|(&t, _)| t)
                .collect();
            for task in gone {
                let l = job.leases.remove(&task).expect("listed above");
                self.by_lease.remove(&l.lease_id);
                self.counters.lease_expiries += 1;
                if let Some(w) = self.workers.get_mut(&l.worker) {
                    w.errors += 1;
                }
                self.expired.insert(l.lease_id, (l.worker, job.id, task));
                if !job.unfinished(task) {
                    continue;
                }
                let attempts = job.attempts.entry(task).or_insert(0);
                *attempts += 1;
                if *attempts >= limits.retry_budget {
                    dying.push((job.id, task));
                } else {
                    let backoff = limits
                        .backoff_base_ms
                        .saturating_mul(1 << (*attempts - 1).min(20))
                        .min(limits.backoff_max_ms);
                    job.waiting.insert((now + backoff, task));
                }
            }
        }
        dying
    }

    /// Checks a reported result before it is journaled.
    pub fn check_report(
        &self,
        worker: &str,
        r: &LeaseRef,
        tally: &Tally,
        checksum: u64,
    ) -> Result<Verdict, StateError> {
        let job = self.job(r.job)?;
        let tasks = job.tasks.as_ref().ok_or(StateError::NotPlanned(r.job))?;
        if r.task >= tasks.len() as u64 {
            return Err(StateError::UnknownTask {
                job: r.job,
                task: r.task,
                tasks: tasks.len() as u64,
            });
        }
        plausible(job, r.task, tally)?;
        let compare = |stored: &StoredResult| {
            if stored.same(tally, checksum) {
                Verdict::Duplicate
            } else {
                Verdict::Conflict
            }
        };
        // The same report again (an answer lost on the way): judged by
        // what this very lease stored, with no lease needed any more.
        let by_this_lease = |c: &&StoredResult| c.worker == worker && c.lease_id == r.lease_id;
        if let Some(stored) = job.results.get(&r.task).filter(by_this_lease).or_else(|| {
            job.candidates
                .get(&r.task)
                .and_then(|c| c.iter().find(by_this_lease))
        }) {
            return Ok(compare(stored));
        }
        if job
            .ignored
            .iter()
            .any(|(t, c)| *t == r.task && by_this_lease(&c))
        {
            return Ok(Verdict::NotCounted);
        }
        if job.state() == JobState::Cancelled {
            return Err(StateError::Finished {
                job: r.job,
                state: JobState::Cancelled,
                action: "given results",
            });
        }
        // Only a lease this worker holds now counts, or one it held (it
        // lapsed, or was granted before a restart) on a task that no other
        // worker holds now.
        let holds = match job.leases.get(&r.task) {
            Some(l) => l.lease_id == r.lease_id && l.worker == worker,
            None => self.lapsed(worker, r) || self.issued_before(worker, r),
        };
        if !holds {
            return Err(StateError::NotLeased {
                job: r.job,
                task: r.task,
                lease_id: r.lease_id,
                worker: worker.to_string(),
            });
        }
        if self.quarantined(worker) {
            return Ok(Verdict::NotCounted);
        }
        let mine = job
            .candidates
            .get(&r.task)
            .and_then(|c| c.iter().find(|c| c.worker == worker));
        if let Some(stored) = job.results.get(&r.task).or(mine) {
            return Ok(compare(stored));
        }
        Ok(Verdict::New)
    }
}

/// A worker's entry, made on first sight (also from journal records, so a
/// quarantine survives a restart).
fn worker_entry<'a>(workers: &'a mut BTreeMap<String, WorkerInfo>, id: &str) -> &'a mut WorkerInfo {
    workers.entry(id.to_string()).or_insert_with(|| WorkerInfo {
        id: id.to_string(),
        ..WorkerInfo::default()
    })
}

fn new_job(id: u64, spec: PlanSpec, submitted_ms: u64, redundancy: u32, fraction: f64) -> Job {
    Job {
        id,
        spec,
        submitted_ms,
        redundancy: redundancy.max(1),
        verify_fraction: if fraction > 0.0 && fraction < 1.0 {
            fraction
        } else {
            1.0
        },
        candidates: HashMap::new(),
        ignored: Vec::new(),
        control: JobState::Running,
        tasks: None,
        planned: None,
        work_total: 0.0,
        work_done: 0.0,
        results: BTreeMap::new(),
        dead: BTreeMap::new(),
        conflicts: Vec::new(),
        tally: Tally::default(),
        leases: BTreeMap::new(),
        ready: BTreeSet::new(),
        waiting: BTreeSet::new(),
        attempts: HashMap::new(),
        recent: VecDeque::new(),
    }
}

/// Rejects results that no task of this plan can produce: counts of the
/// wrong kind for the strategy, or more solutions than the whole N has.
pub fn plausible(job: &Job, task: u64, t: &Tally) -> Result<(), StateError> {
    let no = |why: String| {
        Err(StateError::Implausible {
            job: job.id,
            task,
            why,
        })
    };
    let plan = Plan::new(job.spec).expect("stored specs are valid");
    let classes = t.classes.c1 | t.classes.c2 | t.classes.c4 | t.classes.c8;
    if plan.whole() {
        if t.weighted | t.half | t.quarter != 0 {
            return no("weighted counts in a task of a whole-board plan".into());
        }
    } else if classes != 0 {
        return no("class counts in a task of prefixes or frames".into());
    }
    if let Some(k) = known(job.spec.n.get()) {
        let total = t
            .classes
            .total()
            .unwrap_or(u128::MAX)
            .saturating_add(t.weighted);
        if total > k.total || t.half > k.total || t.quarter > t.half.max(k.total) {
            return no(format!(
                "more solutions than N={} has ({})",
                job.spec.n, k.total
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nqueens_common::Size;
    use nqueens_proto::tally_to_wire;
    use nqueens_proto::v1::{Boot, JobPlanned, JobStateChanged, JobSubmitted, TaskDead, TaskDone};

    const TTL: u64 = 10_000;
    const KEY: LeaseKey = [7; 32];

    fn rec(r: Record) -> JournalRecord {
        JournalRecord { record: Some(r) }
    }

    fn spec(n: u32, strategy: Strategy, tasks: u64) -> PlanSpec {
        PlanSpec {
            n: Size::new(n).unwrap(),
            strategy,
            depth: 3,
            tasks,
        }
    }

    /// A state with one planned, running job (id 1), booted in `epoch`.
    fn running(spec: PlanSpec, epoch: u64) -> (State, Plan, Vec<Task>) {
        running_checked(spec, epoch, 0, 1.0)
    }

    /// [`running`] with every task needing `redundancy` agreeing workers.
    fn running_checked(
        spec: PlanSpec,
        epoch: u64,
        redundancy: u32,
        verify_fraction: f64,
    ) -> (State, Plan, Vec<Task>) {
        let mut s = State::new(Limits {
            lease_ttl_ms: TTL,
            retry_budget: 3,
            backoff_base_ms: 1_000,
            backoff_max_ms: 4_000,
            ..Limits::default()
        });
        s.set_lease_key(KEY);
        s.apply(&rec(Record::Boot(Boot { epoch, unix_ms: 0 })))
            .unwrap();
        s.apply(&rec(Record::JobSubmitted(JobSubmitted {
            job_id: 1,
            plan: Some((&spec).into()),
            unix_ms: 5,
            redundancy,
            verify_fraction,
        })))
        .unwrap();
        let plan = Plan::new(spec).unwrap();
        let tasks = plan.schedule().tasks;
        s.apply(&rec(Record::JobPlanned(JobPlanned {
            job_id: 1,
            tasks: tasks.len() as u64,
            digest: digest(&tasks),
        })))
        .unwrap();
        s.attach_tasks(1, tasks.clone()).unwrap();
        (s, plan, tasks)
    }

    fn done(job: u64, task: u64, t: &Tally, worker: &str, lease_id: u64) -> JournalRecord {
        rec(Record::TaskDone(TaskDone {
            job_id: job,
            task_index: task,
            result: Some(tally_to_wire(t)),
            worker_id: worker.into(),
            lease_id,
            unix_ms: 1,
            credential: String::new(),
        }))
    }

    fn lref(g: &Granted) -> LeaseRef {
        LeaseRef {
            job: g.job,
            task: g.task.index,
            lease_id: g.lease_id,
        }
    }

    /// Leases, counts and reports every task as one worker would.
    fn run_all(s: &mut State, plan: &Plan, worker: &str, now: u64) {
        loop {
            let g = s.lease(worker, 3, now);
            if g.is_empty() {
                break;
            }
            for g in g {
                let t = plan.count_task(&g.task).unwrap();
                assert_eq!(s.check_report(worker, &lref(&g), &t, 0), Ok(Verdict::New));
                assert_eq!(
                    s.apply(&done(g.job, g.task.index, &t, worker, g.lease_id))
                        .unwrap(),
                    Some(Verdict::New)
                );
            }
        }
    }

    /// Leases one task to `worker` and reports `tally` for it.
    fn report_one(s: &mut State, worker: &str, tally: &Tally) -> (u64, Verdict) {
        let g = s.lease(worker, 1, 0).remove(0);
        let v = s.check_report(worker, &lref(&g), tally, 7).unwrap();
        assert_eq!(v, Verdict::New, "not yet stored");
        let applied = s.apply(&done(1, g.task.index, tally, worker, g.lease_id));
        (g.task.index, applied.unwrap().unwrap())
    }

    #[test]
    fn redundancy_counts_a_task_once_two_workers_agree_and_quarantines_a_liar() {
        let (mut s, plan, tasks) = running_checked(spec(8, Strategy::Frame, 3), 1, 2, 1.0);
        let right = plan.count_task(&tasks[0]).unwrap();
        let mut wrong = right;
        wrong.weighted += 8; // plausible, but not the truth
                             // The liar goes first: stored, not counted, and back in the queue.
        let (t, v) = report_one(&mut s, "liar", &wrong);
        assert_eq!((t, v), (0, Verdict::AwaitingCheck));
        assert_eq!(s.job(1).unwrap().view().done, 0);
        assert_eq!(s.job(1).unwrap().view().checking, 1);
        // An honest worker disagrees: still not counted (one each).
        assert_eq!(
            report_one(&mut s, "w1", &right),
            (0, Verdict::AwaitingCheck)
        );
        // A worker never checks its own result: w1 gets task 1, not 0.
        let g = s.lease("w1", 1, 0);
        assert_eq!(g[0].task.index, 1);
        s.release("w1", &[lref(&g[0])], 0);
        // A third worker agrees with w1: counted once; the liar is the odd
        // one out, recorded and quarantined.
        assert_eq!(report_one(&mut s, "w2", &right), (0, Verdict::New));
        let v = s.job(1).unwrap().view();
        assert_eq!((v.done, v.checking, v.conflicts), (1, 0, 1));
        let liar = s.workers().find(|w| w.id == "liar").unwrap();
        assert!(liar.quarantined());
        assert!(s.lease("liar", 5, 0).is_empty(), "no work for a liar");
        // The rest, each by two workers, gives the exact counts.
        loop {
            let g = s.lease("w1", 1, 0);
            let Some(g) = g.first() else { break };
            let t = plan.count_task(&g.task).unwrap();
            s.apply(&done(1, g.task.index, &t, "w1", g.lease_id))
                .unwrap();
            let h = s.lease("w2", 1, 0).remove(0);
            assert_eq!(h.task.index, g.task.index);
            let v = s
                .apply(&done(1, h.task.index, &t, "w2", h.lease_id))
                .unwrap();
            assert_eq!(v, Some(Verdict::New));
        }
        let v = s.job(1).unwrap().view();
        assert_eq!((v.state, v.total, v.unique), (JobState::Done, 92, 12));
    }

    #[test]
    fn a_verify_fraction_checks_a_stable_share_of_the_tasks() {
        let (mut s, plan, tasks) = running_checked(spec(10, Strategy::Frame, 40), 1, 2, 0.5);
        let checked: Vec<u64> = (0..tasks.len() as u64)
            .filter(|&t| s.job(1).unwrap().needs(t) == 2)
            .collect();
        let n = tasks.len();
        assert!(
            checked.len() > n / 5 && checked.len() < n * 4 / 5,
            "{checked:?} of {n}"
        );
        // Two workers take turns: unchecked tasks count at once, checked
        // ones when the second worker agrees.
        for (w, other) in [("w1", "w2"), ("w2", "w1")].into_iter().cycle() {
            let Some(g) = s.lease(w, 1, 0).pop() else {
                let Some(g) = s.lease(other, 1, 0).pop() else {
                    break;
                };
                let t = plan.count_task(&g.task).unwrap();
                s.apply(&done(1, g.task.index, &t, other, g.lease_id))
                    .unwrap();
                continue;
            };
            let t = plan.count_task(&g.task).unwrap();
            let v = s.apply(&done(1, g.task.index, &t, w, g.lease_id)).unwrap();
            let want = if checked.contains(&g.task.index) && s.job(1).unwrap().view().checking > 0 {
                Verdict::AwaitingCheck
            } else {
                Verdict::New
            };
            assert_eq!(v, Some(want), "task {}", g.task.index);
        }
        let v = s.job(1).unwrap().view();
        assert_eq!((v.state, v.total, v.unique), (JobState::Done, 724, 92));
    }

    #[test]
    fn a_job_runs_to_exact_counts() {
        for strategy in [Strategy::Frame, Strategy::Prefix] {
            let (mut s, plan, tasks) = running(spec(10, strategy, 7), 1);
            assert_eq!(s.job(1).unwrap().view().pending, tasks.len() as u64);
            run_all(&mut s, &plan, "w1", 100);
            let v = s.job(1).unwrap().view();
            assert_eq!(v.state, JobState::Done);
            assert_eq!((v.total, v.unique), (724, 92), "{strategy}");
            assert_eq!((v.done, v.pending, v.leased), (tasks.len() as u64, 0, 0));
            assert!((v.work_done - v.work_total).abs() < 1e-6 * v.work_total);
            let w = s.workers().next().unwrap();
            assert_eq!(w.tasks_done, tasks.len() as u64);
            let subproblems: u64 = tasks.iter().map(|t| t.subproblems).sum();
            assert_eq!(w.subproblems_done, subproblems);
        }
    }

    #[test]
    fn rate_and_eta_follow_the_results() {
        let (mut s, plan, _) = running(spec(10, Strategy::Frame, 8), 1);
        assert_eq!(
            s.job(1).unwrap().view().eta_seconds,
            None,
            "no rate before two results"
        );
        let granted = s.lease("w", 2, 0);
        for (k, g) in granted.iter().enumerate() {
            let t = plan.count_task(&g.task).unwrap();
            let mut r = done(1, g.task.index, &t, "w", g.lease_id);
            if let Some(Record::TaskDone(d)) = r.record.as_mut() {
                d.unix_ms = 1_000 * k as u64; // one second apart
            }
            s.apply(&r).unwrap();
        }
        let v = s.job(1).unwrap().view();
        let second = granted[1].task.work;
        assert!(
            (v.work_per_second - second).abs() < 1e-9 * second,
            "{} vs {second}",
            v.work_per_second
        );
        let eta = v.eta_seconds.unwrap();
        assert!((eta - (v.work_total - v.work_done) / second).abs() < 1e-6 * eta.max(1.0));
    }

    #[test]
    fn duplicates_never_add_and_differences_are_conflicts() {
        let (mut s, plan, _) = running(spec(8, Strategy::Frame, 3), 1);
        let g = s.lease("w1", 1, 0).remove(0);
        let t = plan.count_task(&g.task).unwrap();
        s.apply(&done(1, g.task.index, &t, "w1", g.lease_id))
            .unwrap();
        let before = s.job(1).unwrap().tally;
        // The same result again (a lost answer): a duplicate, nothing added.
        assert_eq!(
            s.check_report("w1", &lref(&g), &t, 0),
            Ok(Verdict::Duplicate)
        );
        // Anyone else, with that lease: refused.
        assert!(matches!(
            s.check_report("w2", &lref(&g), &t, 0),
            Err(StateError::NotLeased { .. })
        ));
        assert_eq!(
            s.apply(&done(1, g.task.index, &t, "w2", 99)).unwrap(),
            Some(Verdict::Duplicate)
        );
        // A different result: a conflict, recorded, nothing added.
        let mut wrong = t;
        wrong.weighted += 8;
        assert_eq!(
            s.check_report("w1", &lref(&g), &wrong, 0),
            Ok(Verdict::Conflict)
        );
        assert_eq!(
            s.apply(&done(1, g.task.index, &wrong, "w2", 99)).unwrap(),
            Some(Verdict::Conflict)
        );
        assert_eq!(s.job(1).unwrap().tally, before);
        assert_eq!(s.job(1).unwrap().conflicts.len(), 1);
    }

    #[test]
    fn expired_leases_go_back_after_a_backoff_and_late_results_count_only_while_unclaimed() {
        let (mut s, plan, _) = running(spec(8, Strategy::Frame, 2), 1);
        let first = s.lease("slow", 1, 0).remove(0);
        // Heartbeats keep it alive past the original deadline.
        let (ext, deadline, stop) = s.heartbeat("slow", &[lref(&first)], 0, TTL - 1);
        assert_eq!((ext.len(), deadline, stop.len()), (1, 2 * TTL - 1, 0));
        assert!(s.expire(TTL + 1).is_empty());
        assert_eq!(s.job(1).unwrap().view().leased, 1);
        // Silence past the deadline: the task leaves the lease...
        assert!(s.expire(2 * TTL).is_empty());
        let v = s.job(1).unwrap().view();
        assert_eq!((v.leased, v.failed), (0, 1));
        // ...and waits out its backoff (1 s) before anyone gets it again.
        let others: Vec<u64> = s
            .lease("fast", 10, 2 * TTL)
            .iter()
            .map(|g| g.task.index)
            .collect();
        assert!(!others.contains(&first.task.index));
        let again = s.lease("fast", 10, 2 * TTL + 1_000);
        let second = again
            .iter()
            .find(|g| g.task.index == first.task.index)
            .expect("re-leased after backoff")
            .clone();
        // The old holder is told to stop at its next heartbeat.
        let (_, _, stop) = s.heartbeat("slow", &[lref(&first)], 0, 2 * TTL + 1_001);
        assert_eq!(stop, vec![lref(&first)]);
        // Its late result is refused now that another worker holds the task...
        let t = plan.count_task(&first.task).unwrap();
        assert!(matches!(
            s.check_report("slow", &lref(&first), &t, 0),
            Err(StateError::NotLeased { .. })
        ));
        assert_eq!(
            s.check_report("fast", &lref(&second), &t, 0),
            Ok(Verdict::New)
        );
        // ...but welcome while nobody holds it (first valid result wins).
        let (mut s, plan, _) = running(spec(8, Strategy::Frame, 2), 1);
        let first = s.lease("slow", 1, 0).remove(0);
        s.expire(TTL);
        let t = plan.count_task(&first.task).unwrap();
        assert_eq!(
            s.check_report("slow", &lref(&first), &t, 0),
            Ok(Verdict::New)
        );
        assert!(matches!(
            s.check_report("other", &lref(&first), &t, 0),
            Err(StateError::NotLeased { .. })
        ));
    }

    #[test]
    fn a_task_out_of_retries_is_reported_dying() {
        let (mut s, _, _) = running(spec(8, Strategy::Frame, 1), 1);
        let mut now = 0;
        for attempt in 1..=3 {
            let g = s.lease("w", 1, now);
            assert_eq!(g.len(), 1, "attempt {attempt}");
            now += TTL;
            let dying = s.expire(now);
            if attempt < 3 {
                assert!(dying.is_empty());
                now += 4_000; // past the longest backoff
            } else {
                assert_eq!(dying, vec![(1, g[0].task.index)]);
            }
        }
        s.apply(&rec(Record::TaskDead(TaskDead {
            job_id: 1,
            task_index: 0,
            reason: "out of retries".into(),
        })))
        .unwrap();
        let v = s.job(1).unwrap().view();
        assert_eq!((v.dead, v.pending, v.failed), (1, 0, 0));
        assert!(s.lease("w", 1, now + 10_000).is_empty());
    }

    #[test]
    fn leases_from_before_a_restart_are_adopted_by_their_heartbeat() {
        let (mut s, _, _) = running(spec(8, Strategy::Frame, 3), 2);
        let old = LeaseRef {
            job: 1,
            task: 1,
            lease_id: lease_id(&KEY, 1, 1, 1, "w"),
        };
        // Another worker cannot adopt it, nor anyone a made-up id.
        assert_eq!(s.heartbeat("x", &[old], 0, 9).2, vec![old]);
        for id in [
            0,
            1,
            old.lease_id + 1,
            old.lease_id ^ 1 << 60,
            1 << EPOCH_SHIFT,
        ] {
            let forged = LeaseRef {
                lease_id: id,
                ..old
            };
            assert_eq!(s.heartbeat("w", &[forged], 0, 9).2, vec![forged], "{id:#x}");
        }
        let (ext, _, stop) = s.heartbeat("w", &[old], 0, 10);
        assert_eq!((ext, stop), (vec![old], vec![]));
        let others: Vec<u64> = s.lease("x", 10, 11).iter().map(|g| g.task.index).collect();
        assert!(!others.contains(&1), "the adopted task is not lent again");
        // A lease of this boot that is not current is not adopted.
        let forged = LeaseRef {
            lease_id: lease_id(&KEY, 2, 1, 2, "w"),
            task: 2,
            ..old
        };
        assert_eq!(s.heartbeat("w", &[forged], 0, 12).2, vec![forged]);
    }

    #[test]
    fn a_late_heartbeat_keeps_an_expired_lease_nobody_else_took() {
        let (mut s, _, _) = running(spec(8, Strategy::Frame, 2), 1);
        let g = s.lease("slow", 1, 0).remove(0);
        s.expire(TTL); // the heartbeat came too late
        let (ext, _, stop) = s.heartbeat("slow", &[lref(&g)], 0, TTL + 1);
        assert_eq!((ext, stop), (vec![lref(&g)], vec![]));
        assert!(s
            .lease("other", 5, TTL + 10_000)
            .iter()
            .all(|o| o.task.index != g.task.index));
        // Once someone else holds the task, the late holder is told to stop.
        let (mut s, _, _) = running(spec(8, Strategy::Frame, 1), 1);
        let g = s.lease("slow", 1, 0).remove(0);
        s.expire(TTL);
        let taken = s.lease("other", 1, TTL + 1_000);
        assert_eq!(taken.len(), 1);
        assert_eq!(
            s.heartbeat("slow", &[lref(&g)], 0, TTL + 1_001).2,
            vec![lref(&g)]
        );
    }

    #[test]
    fn release_returns_tasks_at_once_without_penalty() {
        let (mut s, _, _) = running(spec(8, Strategy::Frame, 3), 1);
        let g = s.lease("w1", 2, 0);
        let refs: Vec<LeaseRef> = g.iter().map(lref).collect();
        assert_eq!(s.release("w2", &refs, 1), 0, "only the holder can release");
        assert_eq!(s.release("w1", &refs, 1), 2);
        let again: BTreeSet<u64> = s.lease("w2", 10, 2).iter().map(|g| g.task.index).collect();
        assert!(g.iter().all(|g| again.contains(&g.task.index)));
    }

    #[test]
    fn pause_stops_new_leases_and_cancel_stops_running_ones() {
        let (mut s, _, _) = running(spec(8, Strategy::Frame, 5), 1);
        let held = s.lease("w", 1, 0).remove(0);
        let state = |st: i32| {
            rec(Record::JobState(JobStateChanged {
                job_id: 1,
                state: st,
            }))
        };
        s.apply(&state(v1::JobState::Paused as i32)).unwrap();
        assert_eq!(s.job(1).unwrap().state(), JobState::Paused);
        assert!(s.lease("w", 5, 1).is_empty());
        assert_eq!(
            s.heartbeat("w", &[lref(&held)], 0, 2).0.len(),
            1,
            "running work may finish"
        );
        s.apply(&state(v1::JobState::Running as i32)).unwrap();
        assert!(!s.lease("w", 1, 3).is_empty());
        s.apply(&state(v1::JobState::Cancelled as i32)).unwrap();
        assert_eq!(s.job(1).unwrap().state(), JobState::Cancelled);
        let (ext, _, stop) = s.heartbeat("w", &[lref(&held)], 0, 4);
        assert!(ext.is_empty());
        assert_eq!(stop, vec![lref(&held)]);
        assert!(s.lease("w", 5, 5).is_empty());
    }

    #[test]
    fn reports_without_a_lease_or_with_impossible_counts_are_refused() {
        let (mut s, plan, tasks) = running(spec(8, Strategy::Frame, 3), 2);
        let g = s.lease("w1", 1, 0).remove(0);
        let t = plan.count_task(&g.task).unwrap();
        // Another worker, or a lease id this boot never granted for it.
        assert!(matches!(
            s.check_report("w2", &lref(&g), &t, 0),
            Err(StateError::NotLeased { .. })
        ));
        for id in [0, g.lease_id + 1, g.lease_id - 1, (2 << EPOCH_SHIFT) + 777] {
            let forged = LeaseRef {
                lease_id: id,
                ..lref(&g)
            };
            assert!(matches!(
                s.check_report("w1", &forged, &t, 0),
                Err(StateError::NotLeased { .. })
            ));
        }
        // This worker's lease from before the restart (epoch 1) is
        // accepted on a task nobody holds: its result is still valid work.
        let free = (g.task.index + 1) % tasks.len() as u64;
        let tf = plan.count_task(&tasks[free as usize]).unwrap();
        let old = LeaseRef {
            job: 1,
            task: free,
            lease_id: lease_id(&KEY, 1, 1, free, "w3"),
        };
        assert_eq!(s.check_report("w3", &old, &tf, 0), Ok(Verdict::New));
        assert!(matches!(
            s.check_report("w4", &old, &tf, 0),
            Err(StateError::NotLeased { .. })
        ));
        // Not on a task another worker holds.
        let held = LeaseRef {
            lease_id: lease_id(&KEY, 1, 1, g.task.index, "w3"),
            ..lref(&g)
        };
        assert!(matches!(
            s.check_report("w3", &held, &t, 0),
            Err(StateError::NotLeased { .. })
        ));
        // Unknown job and task.
        assert_eq!(
            s.check_report("w1", &LeaseRef { job: 9, ..lref(&g) }, &t, 0),
            Err(StateError::UnknownJob(9))
        );
        let far = LeaseRef {
            task: 999,
            ..lref(&g)
        };
        let count = tasks.len() as u64;
        assert!(
            matches!(s.check_report("w1", &far, &t, 0), Err(StateError::UnknownTask { tasks, .. }) if tasks == count)
        );
        // Class counts in a frame task, or more solutions than N=8 has.
        let mut bad = t;
        bad.classes.c8 = 1;
        assert!(matches!(
            s.check_report("w1", &lref(&g), &bad, 0),
            Err(StateError::Implausible { .. })
        ));
        let mut big = t;
        big.weighted = 93;
        assert!(matches!(
            s.check_report("w1", &lref(&g), &big, 0),
            Err(StateError::Implausible { .. })
        ));
    }

    #[test]
    fn redundancy_needs_votes_from_distinct_credentials() {
        let (mut s, plan, tasks) = running_checked(spec(8, Strategy::Frame, 2), 1, 2, 1.0);
        let right = plan.count_task(&tasks[0]).unwrap();
        s.bind("a1", "alice").unwrap();
        s.bind("a2", "alice").unwrap();
        s.bind("b1", "bob").unwrap();
        assert!(matches!(
            s.bind("a1", "bob"),
            Err(StateError::WrongCredential { .. })
        ));
        let vote = |s: &mut State, w: &str, task: u64, t: &Tally| {
            let mut d = done(1, task, t, w, 0);
            if let Some(Record::TaskDone(d)) = d.record.as_mut() {
                d.credential = s.credential_of(w);
            }
            s.apply(&d).unwrap().unwrap()
        };
        assert_eq!(vote(&mut s, "a1", 0, &right), Verdict::AwaitingCheck);
        // The same credential under another worker id is not a second vote,
        // and is not even offered the task.
        assert!(s.lease("a2", 5, 0).iter().all(|g| g.task.index != 0));
        assert_eq!(vote(&mut s, "a2", 0, &right), Verdict::AwaitingCheck);
        assert_eq!(s.job(1).unwrap().view().done, 0);
        assert_eq!(vote(&mut s, "b1", 0, &right), Verdict::New);
        assert_eq!(s.job(1).unwrap().view().done, 1);
    }

    #[test]
    fn a_job_says_when_its_redundancy_cannot_be_met_by_the_connected_credentials() {
        let (mut s, plan, tasks) = running_checked(spec(8, Strategy::Frame, 2), 1, 2, 1.0);
        let now = 5 * TTL;
        for (w, cred) in [("a1", "alice"), ("a2", "alice")] {
            s.bind(w, cred).unwrap();
            s.touch_worker(w, now);
        }
        let why = s
            .waiting_for(1, now)
            .expect("one credential cannot give two votes");
        assert!(
            why.contains("needs 2 distinct worker credentials, and 1 connected"),
            "{why}"
        );
        s.bind("b1", "bob").unwrap();
        s.touch_worker("b1", now);
        assert_eq!(s.waiting_for(1, now), None);
        // Bob is not heard from for longer than a lease: waiting again.
        s.touch_worker("a1", now + TTL + 1);
        assert!(s.waiting_for(1, now + TTL + 1).is_some());
        // Agreeing results are "checked" for both voters.
        let right = plan.count_task(&tasks[0]).unwrap();
        for w in ["a1", "b1"] {
            let mut d = done(1, 0, &right, w, 0);
            if let Some(Record::TaskDone(d)) = d.record.as_mut() {
                d.credential = s.credential_of(w);
            }
            s.apply(&d).unwrap();
        }
        let checked = |s: &State, id: &str| s.workers().find(|w| w.id == id).unwrap().checked;
        assert_eq!(
            (checked(&s, "a1"), checked(&s, "b1"), checked(&s, "a2")),
            (1, 1, 0)
        );
        // Redundancy 1 never waits for credentials.
        let (s, _, _) = running(spec(8, Strategy::Frame, 2), 1);
        assert_eq!(s.waiting_for(1, now), None);
    }

    #[test]
    fn a_quarantined_workers_results_are_kept_but_never_counted() {
        let (mut s, plan, _) = running(spec(8, Strategy::Frame, 3), 1);
        let g = s.lease("liar", 2, 0);
        s.apply(&rec(Record::TaskConflict(v1::TaskConflict {
            job_id: 1,
            task_index: 2,
            result: Some(tally_to_wire(&Tally::default())),
            worker_id: "liar".into(),
            unix_ms: 0,
        })))
        .unwrap();
        assert!(s.quarantined("liar"));
        let t = plan.count_task(&g[0].task).unwrap();
        assert_eq!(
            s.check_report("liar", &lref(&g[0]), &t, 0),
            Ok(Verdict::NotCounted)
        );
        assert_eq!(
            s.apply(&done(1, g[0].task.index, &t, "liar", g[0].lease_id))
                .unwrap(),
            Some(Verdict::NotCounted)
        );
        let v = s.job(1).unwrap().view();
        assert_eq!((v.done, v.total), (0, 0));
        assert_eq!(s.job(1).unwrap().ignored.len(), 1);
        // The same report again is answered without a second record.
        assert_eq!(
            s.check_report("liar", &lref(&g[0]), &t, 0),
            Ok(Verdict::NotCounted)
        );
        // Its other lease is not extended.
        assert_eq!(
            s.heartbeat("liar", &[lref(&g[1])], 0, 1).2,
            vec![lref(&g[1])]
        );
    }

    #[test]
    fn nothing_counts_for_a_cancelled_job() {
        let (mut s, plan, _) = running(spec(8, Strategy::Frame, 3), 1);
        let g = s.lease("w", 1, 0).remove(0);
        s.apply(&rec(Record::JobState(JobStateChanged {
            job_id: 1,
            state: v1::JobState::Cancelled as i32,
        })))
        .unwrap();
        let t = plan.count_task(&g.task).unwrap();
        assert!(matches!(
            s.check_report("w", &lref(&g), &t, 0),
            Err(StateError::Finished { .. })
        ));
        // A result journaled just after the cancel (a race) is not counted.
        assert_eq!(
            s.apply(&done(1, g.task.index, &t, "w", g.lease_id))
                .unwrap(),
            Some(Verdict::NotCounted)
        );
        assert_eq!(s.job(1).unwrap().view().total, 0);
    }

    #[test]
    fn replaying_the_same_records_gives_the_same_state() {
        let (mut s, plan, tasks) = running(spec(9, Strategy::Frame, 4), 1);
        let mut log = Vec::new();
        for g in s.lease("w", 10, 0) {
            let t = plan.count_task(&g.task).unwrap();
            let r = done(1, g.task.index, &t, "w", g.lease_id);
            s.apply(&r).unwrap();
            log.push(r.clone());
            log.push(r); // a duplicate in the journal must not double-count
        }
        let (mut fresh, _, _) = running(spec(9, Strategy::Frame, 4), 1);
        for r in &log {
            fresh.apply(r).unwrap();
        }
        let (a, b) = (s.job(1).unwrap().view(), fresh.job(1).unwrap().view());
        assert_eq!((a.total, a.unique, a.done), (b.total, b.unique, b.done));
        assert_eq!(a.total, 352);
        assert_eq!(a.done, tasks.len() as u64);
    }

    #[test]
    fn a_re_plan_that_differs_from_the_journal_is_refused() {
        let (mut s, _, mut tasks) = running(spec(9, Strategy::Frame, 4), 1);
        tasks[0].hi += 1;
        assert!(matches!(
            s.attach_tasks(1, tasks),
            Err(StateError::PlanChanged { .. })
        ));
    }
}

/// Hostile reports against the lease rules, with random workers, lease ids
/// and task indices: nothing but a report under a lease granted to its
/// worker ever changes a total.
#[cfg(test)]
mod forged {
    use super::*;
    use nqueens_common::Size;
    use nqueens_proto::tally_to_wire;
    use nqueens_proto::v1::{Boot, JobPlanned, JobStateChanged, JobSubmitted, TaskDone};
    use proptest::prelude::*;
    use proptest::strategy::Strategy as _;

    const WORKERS: [&str; 3] = ["a", "b", "c"];

    #[derive(Clone, Debug)]
    enum Op {
        Lease(usize, usize),
        /// A report under a lease once granted (by index), from worker `w`
        /// (the holder or not), honest only when from the holder.
        Granted(usize, usize),
        /// A report with a made-up lease id: random, or a neighbour of a
        /// granted one.
        Forged(usize, u64, u64, bool),
        Heartbeat(usize, usize, u64),
        Expire(u64),
        Release(usize),
        Cancel,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        prop_oneof![
            3 => (0..3usize, 1..4usize).prop_map(|(w, m)| Op::Lease(w, m)),
            4 => (0..64usize, 0..3usize).prop_map(|(g, w)| Op::Granted(g, w)),
            4 => (0..3usize, 0..12u64, any::<u64>(), any::<bool>()).prop_map(|(w, t, id, n)| Op::Forged(w, t, id, n)),
            2 => (0..3usize, 0..64usize, any::<u64>()).prop_map(|(w, g, id)| Op::Heartbeat(w, g, id)),
            1 => (0..30_000u64).prop_map(Op::Expire),
            1 => (0..64usize).prop_map(Op::Release),
            1 => Just(Op::Cancel),
        ]
    }

    fn rec(r: Record) -> JournalRecord {
        JournalRecord { record: Some(r) }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn no_unleased_report_changes_a_total(
            redundancy in 1..3u32,
            epoch in 1..4u64,
            ops in proptest::collection::vec(op(), 1..120),
        ) {
            let spec = PlanSpec { n: Size::new(8).unwrap(), strategy: super::Strategy::Frame, depth: 3, tasks: 8 };
            let mut s = State::new(Limits { lease_ttl_ms: 10_000, retry_budget: 100, backoff_base_ms: 10, backoff_max_ms: 10, ..Limits::default() });
            s.apply(&rec(Record::Boot(Boot { epoch, unix_ms: 0 }))).unwrap();
            s.apply(&rec(Record::JobSubmitted(JobSubmitted { job_id: 1, plan: Some((&spec).into()), unix_ms: 0, redundancy, verify_fraction: 1.0 }))).unwrap();
            let plan = Plan::new(spec).unwrap();
            let tasks = plan.schedule().tasks;
            s.apply(&rec(Record::JobPlanned(JobPlanned { job_id: 1, tasks: tasks.len() as u64, digest: digest(&tasks) }))).unwrap();
            s.attach_tasks(1, tasks.clone()).unwrap();
            let truth: Vec<Tally> = tasks.iter().map(|t| plan.count_task(t).unwrap()).collect();
            let mut grants: Vec<(String, LeaseRef)> = Vec::new();
            let mut now = 0;
            // Reports one result as the coordinator would (check, journal, apply).
            let report = |s: &mut State, w: &str, r: LeaseRef, t: Tally, now: u64| {
                if let Ok(Verdict::New | Verdict::NotCounted) = s.check_report(w, &r, &t, 0) {
                    let d = TaskDone { job_id: r.job, task_index: r.task, result: Some(tally_to_wire(&t)), worker_id: w.into(), lease_id: r.lease_id, unix_ms: now, credential: String::new() };
                    s.apply(&rec(Record::TaskDone(d))).unwrap();
                }
            };
            for op in ops {
                now += 1;
                match op {
                    Op::Lease(w, m) => {
                        for g in s.lease(WORKERS[w], m, now) {
                            grants.push((WORKERS[w].into(), LeaseRef { job: g.job, task: g.task.index, lease_id: g.lease_id }));
                        }
                    }
                    Op::Granted(g, w) => {
                        let Some((holder, r)) = grants.get(g % grants.len().max(1)).cloned() else { continue };
                        let mut t = truth[r.task as usize];
                        if holder != WORKERS[w] {
                            t.weighted += 1; // a thief's lie
                        }
                        report(&mut s, WORKERS[w], r, t, now);
                    }
                    Op::Forged(w, task, id, near) => {
                        let id = match (near, grants.last()) {
                            (true, Some((_, r))) => r.lease_id.wrapping_add(id % 5).wrapping_sub(2),
                            _ => id,
                        };
                        let r = LeaseRef { job: 1, task, lease_id: id };
                        if grants.iter().any(|(h, g)| h == WORKERS[w] && *g == r) {
                            continue; // guessed a real one: not a forgery
                        }
                        let mut t = truth.get(task as usize).copied().unwrap_or_default();
                        t.weighted += 1;
                        report(&mut s, WORKERS[w], r, t, now);
                    }
                    Op::Heartbeat(w, g, id) => {
                        let mut refs = vec![LeaseRef { job: 1, task: id % 12, lease_id: id }];
                        if let Some((_, r)) = grants.get(g % grants.len().max(1)) {
                            refs.push(*r);
                        }
                        let (extended, _, _) = s.heartbeat(WORKERS[w], &refs, 0, now);
                        for e in extended {
                            prop_assert!(grants.iter().any(|(h, g)| h == WORKERS[w] && *g == e), "extended a lease never granted: {e:?}");
                        }
                    }
                    Op::Expire(ms) => {
                        now += ms;
                        s.expire(now);
                    }
                    Op::Release(g) => {
                        if let Some((h, r)) = grants.get(g % grants.len().max(1)).cloned() {
                            s.release(&h, &[r], now);
                        }
                    }
                    Op::Cancel => {
                        if s.job(1).unwrap().state() != JobState::Done {
                            s.apply(&rec(Record::JobState(JobStateChanged { job_id: 1, state: v1::JobState::Cancelled as i32 }))).unwrap();
                        }
                    }
                }
                // Every counted result is the truth, granted to its worker.
                let job = s.job(1).unwrap();
                let mut sum = Tally::default();
                for (&task, r) in job.results() {
                    prop_assert_eq!(r.tally, truth[task as usize], "task {} counted a lie", task);
                    prop_assert!(grants.iter().any(|(h, g)| *h == r.worker && g.task == task && g.lease_id == r.lease_id));
                    sum.merge(&r.tally).unwrap();
                }
                prop_assert_eq!(job.tally, sum);
            }
        }
    }
}
