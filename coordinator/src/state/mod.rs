//! Everything the coordinator knows, in memory: jobs, their tasks and
//! results, leases and workers. Pure and deterministic (the clock is passed
//! in), so the same code replays the journal at start-up and serves live
//! calls, and tests drive it without sleeping.
//!
//! Durable facts enter only through [`State::apply`] with a journal record
//! that is already on disk. Leases are not durable: after a restart every
//! unfinished task is pending again, and a lease of an earlier boot (see
//! [`lease_id`]) can still be recognised: its holder may adopt it (by a
//! heartbeat) or report it while no other worker holds the task.
//!
//! Each part owns one concern: `schedule` (what goes out next, who holds
//! what), `votes` (agreement under redundancy), `ledger` (counted
//! results and their sum), `rate`, `workers`; `job` puts a job's
//! parts together and this module applies records and calls to them.

mod event;
mod job;
mod lease_id;
mod ledger;
mod rate;
mod schedule;
#[cfg(test)]
mod tests;
mod votes;
mod workers;

pub use event::{Done, Event, Outcome};
pub use job::{Job, JobState, JobView, TaskList};
pub use lease_id::{lease_id, random_key, LeaseKey};
pub use ledger::{Conflict, StoredResult};
pub use votes::{on_card, Checking, CountOn};
pub use workers::{Forget, WorkerInfo, FORGET_AFTER_MS, MAX_WORKERS};

use ledger::StoredResult as Stored;
use nqueens_common::known::known;
use nqueens_common::plan::{Plan, PlanSpec, Tally, Task, TaskTable};
use schedule::Lease;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use votes::Ballot;
use workers::Workers;

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
    /// The most tasks a submitted plan may list (a synthetic plan's tasks
    /// are derived, never listed, and are not bound by this).
    pub max_tasks: u64,
    /// Counted results each job keeps in memory, the latest ones (older
    /// ones are read from the store when needed); `None`: all (an audit).
    pub results_in_memory: Option<usize>,
    /// The least time between two snapshots of one watched job: a job of
    /// short tasks changes thousands of times a second. A job's last
    /// snapshot (done or cancelled) is never held back.
    pub watch_spacing_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            lease_ttl_ms: 60_000,
            retry_budget: 5,
            backoff_base_ms: 1_000,
            backoff_max_ms: 300_000,
            max_tasks: nqueens_common::plan::MAX_TASKS,
            results_in_memory: Some(RESULTS_IN_MEMORY),
            watch_spacing_ms: 250,
        }
    }
}

/// Counted results a coordinator keeps in memory per job by default (an
/// older one is compared with its store row): each checkpoint encodes them
/// under the state's lock, about 0.8 µs apiece, so this bounds how long a
/// checkpoint holds every call (about 13 ms).
pub const RESULTS_IN_MEMORY: usize = 1 << 14;

/// A task lent to a worker.
#[derive(Clone, Debug, PartialEq)]
pub struct Granted {
    pub job: u64,
    pub spec: PlanSpec,
    pub task: Task,
    pub lease_id: u64,
    pub deadline: u64,
    /// The kind of device to count it on (a cross-device check).
    pub count_on: CountOn,
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
    #[error("job {job} is {state}; it cannot be {action}")]
    Finished {
        job: u64,
        state: JobState,
        action: &'static str,
    },
    #[error("the coordinator already knows {0} worker ids, its limit; no new worker id is taken until one that holds no lease and no result awaiting a check has been silent for half a lease's life (its place is then given to the newcomer)")]
    TooManyWorkers(usize),
    #[error(
        "worker id '{worker}' belongs to credential '{bound}'; choose another worker id (--name)"
    )]
    WrongCredential { worker: String, bound: String },
    #[error("job {job} has no dead tasks to retry (`nqueens status {job}` shows the tasks out of retries)")]
    NothingToRetry { job: u64 },
    #[error("job {0} was deleted")]
    Deleted(u64),
    #[error("job {job} is {state}: only a done or cancelled job can be deleted (cancel it first)")]
    NotDeletable { job: u64, state: JobState },
    #[error("journal record does not fit the state: {0}")]
    BadRecord(String),
    #[error("re-planning job {job} gave a different task list (digest {got:#x}, journal says {want:#x})")]
    PlanChanged { job: u64, got: u64, want: u64 },
    /// Task `task` of job `job` is counted and its result is no longer in
    /// memory: the caller compares with the store's row.
    #[error("the result of task {task} of job {job} is not in memory")]
    ResultNotInMemory { job: u64, task: u64 },
}

/// A vote that agreed on task `task`: the agreeing workers were checked
/// and are credited (quarantined ones aside); the odd ones out are
/// conflicts, their workers quarantined. Returns who is credited.
fn settle(
    workers: &mut Workers,
    counters: &mut Counters,
    job: &mut Job,
    task: u64,
    same: Vec<Stored>,
    odd: Vec<Stored>,
) -> Vec<String> {
    for s in &same {
        workers.entry(&s.worker).checked += 1;
    }
    let mut credited: Vec<String> = same
        .iter()
        .filter(|s| !workers.quarantined(&s.worker))
        .map(|s| s.worker.clone())
        .collect();
    credited.sort();
    credited.dedup();
    for o in odd {
        contradicted(workers, counters, job, task, o.worker, o.tally);
    }
    credited
}

/// A result of `worker` on `task` that differs from the one counted or
/// agreed: kept in the job's ledger for the audit, and its worker
/// quarantined.
fn contradicted(
    workers: &mut Workers,
    counters: &mut Counters,
    job: &mut Job,
    task: u64,
    worker: String,
    tally: Tally,
) {
    let w = workers.entry(&worker);
    w.errors += 1;
    w.conflicts += 1;
    counters.conflicts += 1;
    job.ledger.conflict(Conflict {
        task,
        worker,
        tally,
    });
}

/// A lease that ran out (see [`State::expire`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expiry {
    pub job: u64,
    pub task: u64,
    pub worker: String,
    /// Out of retries: the caller journals the task dead.
    pub dying: bool,
}

/// Event counts since start-up (replayed records included), for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    pub accepted: u64,
    pub duplicates: u64,
    pub conflicts: u64,
    pub leases_granted: u64,
    pub lease_expiries: u64,
    pub releases: u64,
}

/// The whole in-memory state. Its durable part (all but the limits, the
/// lease key and the leases) is what a checkpoint holds.
#[derive(Debug, Serialize, Deserialize)]
pub struct State {
    pub counters: Counters,
    #[serde(skip)]
    limits: Limits,
    jobs: BTreeMap<u64, Job>,
    /// Jobs the operator deleted: their ids are never given again, and
    /// records about them are skipped.
    deleted: std::collections::BTreeSet<u64>,
    workers: Workers,
    epoch: u64,
    /// The secret lease ids are derived with.
    #[serde(skip, default = "random_key")]
    lease_key: LeaseKey,
}

/// FNV-1a over the bytes of `words`, continuing from `h`.
fn fnv(mut h: u64, words: impl IntoIterator<Item = u64>) -> u64 {
    for x in words {
        for b in x.to_le_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// An order-sensitive digest of a task table (FNV-1a over its runs), so a
/// re-plan or a stored table can be checked against the journal. It reads
/// the runs, not the tasks: a table of 10^8 tasks is checked in
/// milliseconds at every start.
pub fn digest(table: &TaskTable) -> u64 {
    let runs = table.runs().iter();
    // A mark, so no table's digest equals a listed one's by design.
    fnv(
        fnv(FNV_START, [u64::from_le_bytes(*b"runs-v1\0")]),
        runs.flat_map(|r| [r.first, r.lo, r.hi, r.count, r.parts]),
    )
}

/// The digest journaled before task tables, over every task's range: still
/// accepted for jobs planned then (see [`TaskList::matches`]).
pub fn listed_digest(tasks: impl IntoIterator<Item = Task>) -> u64 {
    fnv(
        FNV_START,
        tasks.into_iter().flat_map(|t| [t.lo, t.hi, t.skip, t.take]),
    )
}

/// The digest journaled for a plan whose tasks are derived from their
/// index: of its spec (the tasks follow from it).
pub fn derived_digest(spec: &PlanSpec, tasks: u64) -> u64 {
    listed_digest([Task {
        index: 0,
        lo: u64::from(spec.n.get()),
        hi: tasks,
        skip: u64::MAX,
        take: u64::MAX,
        subproblems: 0,
        work: 0.0,
    }])
}

impl State {
    pub fn new(limits: Limits) -> State {
        State {
            counters: Counters::default(),
            limits,
            jobs: BTreeMap::new(),
            deleted: Default::default(),
            workers: Workers::default(),
            epoch: 0,
            lease_key: random_key(),
        }
    }

    /// Whether `credential` may use worker id `worker`: `Ok(true)` when
    /// the id is bound to no credential yet and this call would bind it
    /// (journal a `WorkerBound` record first); an error when another
    /// credential holds it.
    pub fn may_bind(&self, worker: &str, credential: &str) -> Result<bool, StateError> {
        self.workers.may_bind(worker, credential)
    }

    /// Binds in memory alone (tests; the coordinator journals a binding).
    #[cfg(test)]
    pub fn bind(&mut self, worker: &str, credential: &str) -> Result<(), StateError> {
        if self.may_bind(worker, credential)? {
            self.workers.bind(worker, credential);
        }
        Ok(())
    }

    /// A worker's public tag (for the unauthenticated metrics page).
    pub fn worker_tag(&self, worker: &str) -> String {
        lease_id::worker_tag(&self.lease_key, worker)
    }

    /// The credential a worker id is bound to (empty if none).
    pub fn credential_of(&self, worker: &str) -> String {
        self.workers.credential_of(worker)
    }

    /// Who vouches for a worker's results: its credential, else its id.
    pub fn voter(&self, worker: &str) -> String {
        self.workers.voter(worker)
    }

    /// A state read from a checkpoint, under this coordinator's limits
    /// (limits are configuration, not state).
    pub fn with_limits(mut self, limits: Limits) -> State {
        self.limits = limits;
        self
    }

    /// Uses the data directory's lease key (so leases of earlier boots can
    /// be recognised).
    pub fn set_lease_key(&mut self, key: LeaseKey) {
        self.lease_key = key;
    }

    /// Whether `r` is a lease this coordinator granted `worker`, in this
    /// boot or an earlier one (it may have expired, or been handed back).
    fn granted(&self, worker: &str, r: &LeaseRef) -> bool {
        lease_id::granted_by_then(
            &self.lease_key,
            self.epoch,
            r.job,
            r.task,
            worker,
            r.lease_id,
        )
    }

    /// The leases `worker` holds, in every job.
    fn held_by(&self, worker: &str) -> usize {
        self.jobs.values().map(|j| j.schedule.held_by(worker)).sum()
    }

    /// The leases the workers `voter` vouches for hold, in every job.
    fn held_by_voter(&self, voter: &str) -> usize {
        self.jobs
            .values()
            .map(|j| j.schedule.held_by_voter(voter))
            .sum()
    }

    /// Refuses a worker id never seen before once `MAX_WORKERS` are known.
    pub fn admit(&self, worker: &str) -> Result<(), StateError> {
        self.workers.admit(worker)
    }

    /// Forgets up to `most` workers silent since before `before_ms` that
    /// `which` allows and that hold no lease (see
    /// `Workers::forget`): made-up ids cannot fill the table for
    /// good, and are not kept in checkpoints. A worker whose result waits
    /// for a check is kept too (a result kept for the audit stays in its
    /// job's ledger, with who made it).
    pub fn forget_workers(&mut self, before_ms: u64, most: usize, which: Forget) -> usize {
        let keep: std::collections::HashSet<&str> = self
            .jobs
            .values()
            .flat_map(|job| {
                let holding = job.schedule.leases().map(|(_, l)| l.worker.as_str());
                holding.chain(job.votes.voters())
            })
            .collect();
        self.workers
            .forget(before_ms, |id| keep.contains(id), most, which)
    }

    /// Whether the record report `d` would journal with verdict `v` is
    /// there already: a conflict of its worker on its task, or its very
    /// lease's result kept for the audit; or whether its worker's kept
    /// results in the job have reached `MOST_KEPT_PER_WORKER`.
    /// Each is journaled once, so a report sent again and again (or a
    /// quarantined id's every lease) costs the journal nothing.
    pub fn on_record(&self, v: Verdict, d: &Done) -> bool {
        let Some(job) = self.jobs.get(&d.job) else {
            return false;
        };
        match v {
            Verdict::Conflict => job.ledger.has_conflict(d.task, &d.worker),
            Verdict::NotCounted => {
                job.ledger.has_kept(d.task, &d.worker, d.lease_id)
                    || job.ledger.kept_of(&d.worker) >= ledger::MOST_KEPT_PER_WORKER
            }
            _ => false,
        }
    }

    /// Whether `worker` may have `more` results kept for the audit in job
    /// `job` besides those kept already (at most `MOST_KEPT_PER_WORKER`).
    pub fn room_to_keep(&self, job: u64, worker: &str, more: u32) -> bool {
        self.jobs.get(&job).is_some_and(|j| {
            j.ledger.kept_of(worker).saturating_add(more) < ledger::MOST_KEPT_PER_WORKER
        })
    }

    /// Whether `worker` is quarantined.
    pub fn quarantined(&self, worker: &str) -> bool {
        self.workers.quarantined(worker)
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    pub fn job(&self, id: u64) -> Result<&Job, StateError> {
        match self.jobs.get(&id) {
            Some(j) => Ok(j),
            None if self.deleted.contains(&id) => Err(StateError::Deleted(id)),
            None => Err(StateError::UnknownJob(id)),
        }
    }

    pub fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values()
    }

    pub fn workers(&self) -> impl Iterator<Item = &WorkerInfo> {
        self.workers.iter()
    }

    /// Job `id` as it stands at `now_ms`: its view, and why it cannot
    /// progress, if it cannot; then it has no ETA (its rate is of the
    /// results before it stopped).
    pub fn job_view(&self, id: u64, now_ms: u64) -> Result<JobView, StateError> {
        let mut view = self.job(id)?.view();
        view.waiting_for = self.waiting_for(id, now_ms);
        if view.waiting_for.is_some() {
            (view.eta_seconds, view.eta_error_seconds) = (None, None);
        }
        Ok(view)
    }

    /// Why job `id` cannot progress now, if it cannot: it is being planned,
    /// or its redundancy needs more distinct credentials than the workers
    /// seen within a lease's lifetime (and not quarantined) have.
    pub fn waiting_for(&self, id: u64, now_ms: u64) -> Option<String> {
        let job = self.jobs.get(&id)?;
        let since = now_ms.saturating_sub(self.limits.lease_ttl_ms);
        let voters = self.workers.voters_since(since);
        // Workers going away may still be finishing its leases.
        let finishing = || {
            (job.schedule.leases()).any(|(_, l)| {
                self.workers
                    .get(&l.worker)
                    .is_some_and(|w| w.heard && w.last_seen_ms >= since)
            })
        };
        match job.state() {
            JobState::Planning => return Some("planning: its tasks are being computed".into()),
            JobState::Running if voters == 0 && !finishing() => {
                return Some(
                    "workers: none that takes tasks has called within a lease's lifetime (draining and \
                     quarantined ones take none; start one with `nqueens worker --coordinator URL`; \
                     `nqueens workers` lists those seen)"
                        .into(),
                )
            }
            JobState::Running if job.redundancy() > 1 => {}
            _ => return None,
        }
        let needed = job.redundancy() as usize;
        if voters < needed {
            return Some(format!(
                "workers: redundancy {needed} needs {needed} distinct worker credentials, and {voters} \
                 connected: start another worker (where tokens are issued, an issued token \
                 counts once however many workers use it: give each machine its own with \
                 `nqueens token issue NAME`)"
            ));
        }
        let disputed = job.votes.disputed();
        if disputed > 0 {
            let kinds = match job.votes.cross_device {
                true => {
                    " (with --cross-device they must include a card's result and a CPU's: a \
                     card against a CPU waits for a third result, from a card or a CPU)"
                }
                false => "",
            };
            return Some(format!(
                "workers: results from different credentials disagree on {disputed} task(s); each \
                 waits for {needed} credentials that agree, from credentials that have not counted it \
                 yet{kinds} ({voters} connected: give another machine its own token with `nqueens \
                 token issue NAME`; once results agree, `nqueens workers` shows who conflicted and \
                 `nqueens audit` lists it)"
            ));
        }
        let (card, cpu) = self.workers.devices_since(since);
        (job.votes.cross_device && !(card && cpu)).then(|| {
            format!(
                "workers: --cross-device needs results counted on a GPU and on a CPU, and no \
                 connected worker counts on {} (start one with `nqueens worker --gpus auto`, or \
                 `--gpus none` for a CPU)",
                if card { "a CPU" } else { "a GPU" }
            )
        })
    }

    /// Every lease held now, oldest job first, with its holder.
    pub fn all_leases(&self) -> impl Iterator<Item = (LeaseRef, &str)> {
        self.jobs.values().flat_map(|j| {
            j.schedule.leases().map(move |(&task, l)| {
                (
                    LeaseRef {
                        job: j.id,
                        task,
                        lease_id: l.lease_id,
                    },
                    l.worker.as_str(),
                )
            })
        })
    }

    pub fn worker(&self, id: &str) -> Option<&WorkerInfo> {
        self.workers.get(id)
    }

    /// Workers newly lost (not heard from since `since_ms`) and newly
    /// quarantined, each returned once (for the log).
    pub fn workers_news(&mut self, since_ms: u64) -> (Vec<WorkerInfo>, Vec<WorkerInfo>) {
        self.workers.news(since_ms)
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Counts a duplicate answered without a journal record (a report
    /// equal to the stored result).
    pub fn note_duplicate(&mut self) {
        self.counters.duplicates += 1;
    }

    /// Makes the next boot's epoch follow `epoch` at least.
    pub fn raise_epoch(&mut self, epoch: u64) {
        self.epoch = self.epoch.max(epoch);
    }

    pub fn next_job_id(&self) -> u64 {
        let last = self.jobs.keys().next_back().max(self.deleted.last());
        last.map_or(1, |k| k + 1)
    }

    /// Whether job `id` was deleted.
    pub fn deleted(&self, id: u64) -> bool {
        self.deleted.contains(&id)
    }

    /// Jobs deleted.
    pub fn deleted_jobs(&self) -> impl Iterator<Item = u64> + '_ {
        self.deleted.iter().copied()
    }

    /// Applies one event (replayed, or just journaled). Task results are
    /// idempotent by task: a second one is compared, never added.
    pub fn apply(&mut self, event: &Event) -> Result<Option<Verdict>, StateError> {
        if event.job().is_some_and(|id| self.deleted.contains(&id)) {
            return Ok(None);
        }
        match event {
            Event::JobDeleted { job, .. } => {
                self.jobs.remove(job);
                self.deleted.insert(*job);
            }
            Event::Boot { epoch, .. } => self.epoch = self.epoch.max(*epoch),
            Event::JobSubmitted {
                job,
                spec,
                unix_ms,
                checking,
            } => {
                let keep = self.limits.results_in_memory;
                let new = Job::new(*job, *spec, *unix_ms, *checking, keep);
                self.jobs.insert(*job, new);
            }
            Event::JobPlanned { job, tasks, digest } => {
                self.job_mut(*job)?.planned = Some((*tasks, *digest));
            }
            Event::JobControlled { job, state } => self.control(*job, *state)?,
            Event::TaskDone(d) => return self.apply_result(d).map(Some),
            Event::TaskConflict {
                job,
                task,
                outcome,
                worker,
                ..
            } => {
                // Deleted jobs' records were passed over above.
                let j = self.jobs.get_mut(job).ok_or(StateError::UnknownJob(*job))?;
                let (w, c) = (worker.clone(), outcome.tally);
                contradicted(&mut self.workers, &mut self.counters, j, *task, w, c);
            }
            Event::TaskDead { job, task, reason } => {
                let job = self.job_mut(*job)?;
                if job.ledger.bury(*task, reason) {
                    job.schedule.finish(*task);
                }
            }
            Event::TasksRetried { job, .. } => {
                let job = self.job_mut(*job)?;
                for task in job.ledger.revive_all() {
                    job.schedule.revive(task);
                }
            }
            Event::WorkerBound {
                worker,
                credential,
                unix_ms,
                claimed,
            } => self.bound(worker, credential, *unix_ms, *claimed),
        }
        Ok(None)
    }

    /// The operator's pause, resume or cancel.
    fn control(&mut self, job: u64, state: JobState) -> Result<(), StateError> {
        if !matches!(
            state,
            JobState::Running | JobState::Paused | JobState::Cancelled
        ) {
            return Err(StateError::BadRecord(format!(
                "a job cannot be set {state}"
            )));
        }
        let job = self.job_mut(job)?;
        job.control = state;
        if state == JobState::Cancelled {
            job.schedule.drop_leases();
        }
        Ok(())
    }

    /// A worker id bound to a credential. A `claimed` binding holds over
    /// an earlier one: another credential's is journaled only once the id
    /// was forgotten (the coordinator claims an id while its binding is
    /// written, so two never race). An unclaimed one (an earlier version's
    /// journal) holds only where the id is free: a later one lost a race.
    fn bound(&mut self, worker: &str, credential: &str, unix_ms: u64, claimed: bool) {
        if claimed || self.workers.may_bind(worker, credential) == Ok(true) {
            self.workers.bind(worker, credential);
            let w = self.workers.entry(worker);
            w.last_seen_ms = w.last_seen_ms.max(unix_ms);
        }
    }

    fn job_mut(&mut self, id: u64) -> Result<&mut Job, StateError> {
        if self.deleted.contains(&id) {
            return Err(StateError::Deleted(id));
        }
        self.jobs.get_mut(&id).ok_or(StateError::UnknownJob(id))
    }

    /// A task's result: counted, compared, put to the vote, or kept for
    /// the audit only.
    fn apply_result(&mut self, d: &Done) -> Result<Verdict, StateError> {
        let this = d.stored();
        let (tally, checksum) = (d.outcome.tally, d.outcome.checksum);
        // Journals older than `WorkerBound` bind ids through their results.
        if self.workers.may_bind(&d.worker, &d.credential) == Ok(true) {
            self.workers.bind(&d.worker, &d.credential);
        }
        let quarantined = self.workers.quarantined(&d.worker);
        let task = d.task;
        let job = self
            .jobs
            .get_mut(&d.job)
            .ok_or(StateError::UnknownJob(d.job))?;
        // A quarantined worker's result, or one that reached the journal
        // after a cancel, is kept for the audit only; so is a count past
        // what any task can have (refused before the journal since
        // [`MOST_PER_TASK`]; a journal from before may hold one).
        let impossible = tally.largest() > MOST_PER_TASK;
        if quarantined || job.control == JobState::Cancelled || impossible {
            job.ledger.keep(task, this);
            return Ok(Verdict::NotCounted);
        }
        if let Some(stored) = job.ledger.result(task) {
            if stored.same(&tally, checksum) {
                self.counters.duplicates += 1;
                return Ok(Verdict::Duplicate);
            }
            // Both passed `check_report` before either was applied: the
            // later one is contradicted as if it had come after.
            let worker = d.worker.clone();
            contradicted(
                &mut self.workers,
                &mut self.counters,
                job,
                task,
                worker,
                tally,
            );
            return Ok(Verdict::Conflict);
        }
        if job.counted(task) {
            // Counted already, and its result left memory: a concurrent
            // report that lost the race. Never added twice.
            self.counters.duplicates += 1;
            return Ok(Verdict::Duplicate);
        }
        // Who computed the counted result: the reporter, and under
        // redundancy every worker whose result agreed.
        let mut credited = vec![d.worker.clone()];
        if job.votes.needs(task) > 1 {
            let workers = &self.workers;
            match job
                .votes
                .vote(task, this.clone(), |w| workers.quarantined(w))
            {
                Ballot::Waiting => {
                    // Another worker must compute it: back to the queue.
                    job.schedule.requeue(task);
                    return Ok(Verdict::AwaitingCheck);
                }
                Ballot::Agreed { same, odd } => {
                    credited = settle(&mut self.workers, &mut self.counters, job, task, same, odd);
                }
            }
        }
        job.ledger
            .count(task, this)
            .map_err(|e| StateError::BadRecord(e.to_string()))?;
        job.schedule.finish(task);
        let mut subproblems = 0;
        if let Some(t) = job.task(task) {
            subproblems = t.subproblems;
            job.work_done += t.work;
            job.rate.add(d.unix_ms, t.work);
        }
        for id in &credited {
            if let Some(w) = self.workers.get_mut(id) {
                w.tasks_done += 1;
                w.subproblems_done = w.subproblems_done.saturating_add(subproblems);
            }
        }
        self.counters.accepted += 1;
        Ok(Verdict::New)
    }

    /// Gives a planned job its task list (computed, loaded from the store,
    /// or derived), checked against the journal's digest.
    pub fn attach_tasks(&mut self, job_id: u64, tasks: TaskList) -> Result<(), StateError> {
        let job = self.job_mut(job_id)?;
        if let Some((_, want)) = job.planned {
            if !tasks.matches(want) {
                return Err(StateError::PlanChanged {
                    job: job_id,
                    got: tasks.digest(),
                    want,
                });
            }
        }
        job.work_total = match &tasks {
            TaskList::Listed(t) => t.work(),
            TaskList::Derived(_, n) => *n as f64,
        };
        job.work_done = match &tasks {
            TaskList::Listed(t) => t.work_of(|i| job.counted(i)),
            TaskList::Derived(..) => job.ledger.done() as f64,
        };
        job.schedule.plan(tasks.count());
        job.tasks = Some(tasks);
        Ok(())
    }

    /// Records a call from a worker (registering it if new).
    pub fn touch_worker(&mut self, id: &str, now: u64) -> &mut WorkerInfo {
        self.workers.touch(id, now)
    }

    /// Lends up to `max` ready tasks to `worker`, oldest job first.
    pub fn lease(&mut self, worker: &str, max: usize, now: u64) -> Vec<Granted> {
        if self.workers.touch(worker, now).quarantined() {
            return Vec::new();
        }
        let me = self.workers.voter(worker);
        let max = max
            .min(MOST_HELD.saturating_sub(self.held_by(worker)))
            .min(MOST_HELD_PER_VOTER.saturating_sub(self.held_by_voter(&me)));
        let ttl = self.limits.lease_ttl_ms;
        let (key, epoch) = (self.lease_key, self.epoch);
        let (card, cpu) = self.workers.devices(worker);
        let mut granted = Vec::new();
        for job in self.jobs.values_mut() {
            if granted.len() >= max {
                break;
            }
            if job.state() != JobState::Running {
                continue;
            }
            job.schedule.wake(now);
            // Tasks handed back that one call looks at in a job, at most:
            // a credential may not take those it voted on, however many
            // wait for others (each job its own, so one cannot starve the
            // next).
            let mut budget = LOOK_PER_LEASE;
            while granted.len() < max {
                // With redundancy, a credential never checks its own
                // result, and a cross-device check goes to the other kind.
                let votes = &job.votes;
                let workers = &self.workers;
                let quarantined = |w: &str| workers.quarantined(w);
                let skip =
                    |t| votes.voted(t, worker, &me) || !votes.wants(t, card, cpu, &quarantined);
                let Some(task) = job.schedule.next_within(skip, &mut budget) else {
                    break;
                };
                let lease_id = lease_id(&key, epoch, job.id, task, worker);
                self.counters.leases_granted += 1;
                let deadline = now + ttl;
                job.schedule.hold(
                    task,
                    Lease {
                        lease_id,
                        worker: worker.to_string(),
                        voter: me.clone(),
                        deadline,
                    },
                );
                granted.push(Granted {
                    job: job.id,
                    spec: job.spec,
                    task: job.task(task).expect("running jobs are planned"),
                    lease_id,
                    deadline,
                    count_on: job.votes.count_on(task, card, &quarantined),
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
        let w = self.workers.touch(worker, now);
        w.subproblems_done = w.subproblems_done.max(subproblems_done);
        let (done_before, at) = w.beat;
        if at > 0 && now > at && subproblems_done >= done_before {
            w.rate = (subproblems_done - done_before) as f64 * 1000.0 / (now - at) as f64;
        }
        w.beat = (subproblems_done, now);
        let deadline = now + self.limits.lease_ttl_ms;
        let (mut extended, mut stop) = (Vec::new(), Vec::new());
        let mut held = self.held_by(worker);
        let me = self.workers.voter(worker);
        let mut held_voter = self.held_by_voter(&me);
        if self.quarantined(worker) {
            // No more work for a quarantined worker: its leases run out.
            return (extended, deadline, refs.to_vec());
        }
        for r in refs {
            // This worker's lease that merely expired (a late heartbeat),
            // or one from before a restart, on a task nobody holds now, is
            // adopted, so its running count is not thrown away.
            let was_mine = self.granted(worker, r);
            let Some(job) = self.jobs.get_mut(&r.job) else {
                stop.push(*r);
                continue;
            };
            // Never a task it already voted on: it would hold the task
            // another credential must check.
            let adoptable = was_mine
                && held < MOST_HELD
                && held_voter < MOST_HELD_PER_VOTER
                && !job.votes.voted(r.task, worker, &me)
                && job.state() == JobState::Running
                && job.unfinished(r.task)
                && job.task_count().is_some_and(|t| r.task < t);
            match job.schedule.lease_mut(r.task) {
                Some(l) if l.lease_id == r.lease_id && l.worker == worker => {
                    l.deadline = deadline;
                    extended.push(*r);
                }
                None if adoptable => {
                    held += 1;
                    held_voter += 1;
                    job.schedule.hold(
                        r.task,
                        Lease {
                            lease_id: r.lease_id,
                            worker: worker.to_string(),
                            voter: me.clone(),
                            deadline,
                        },
                    );
                    extended.push(*r);
                }
                _ => stop.push(*r),
            }
        }
        (extended, deadline, stop)
    }

    /// Hands back, without penalty, every lease held by a worker bound to
    /// `credential` (revoked: its workers can report nothing more).
    /// Returns how many.
    pub fn release_credential(&mut self, credential: &str) -> usize {
        self.release_held_by(|workers, w| workers.bound_to(w, credential))
    }

    /// Hands back every lease of the workers bound to no issued
    /// credential (they called with the shared token, or none, whose
    /// calls are refused once the workers are protected); returns how
    /// many.
    pub fn release_unbound(&mut self) -> usize {
        self.release_held_by(|workers, w| workers.credential_of(w).is_empty())
    }

    fn release_held_by(&mut self, held: impl Fn(&Workers, &str) -> bool) -> usize {
        let workers = &self.workers;
        let mut released = 0;
        for job in self.jobs.values_mut() {
            let theirs: Vec<u64> = job
                .schedule
                .leases()
                .filter(|(_, l)| held(workers, &l.worker))
                .map(|(&task, _)| task)
                .collect();
            for task in theirs {
                released += usize::from(job.schedule.give_back(task).is_some());
            }
        }
        released
    }

    /// Hands leases back without penalty (a worker going away).
    pub fn release(&mut self, worker: &str, refs: &[LeaseRef], now: u64) -> u32 {
        self.workers.touch(worker, now);
        let mut released = 0;
        for r in refs {
            let Some(job) = self.jobs.get_mut(&r.job) else {
                continue;
            };
            let held = job
                .schedule
                .lease(r.task)
                .is_some_and(|l| l.lease_id == r.lease_id && l.worker == worker);
            if held {
                job.schedule.give_back(r.task);
                released += 1;
                self.counters.releases += 1;
            }
        }
        released
    }

    /// Returns expired leases' tasks to pending after a backoff; a task out
    /// of retries is returned in the list (the caller journals it as dead).
    pub fn expire(&mut self, now: u64) -> Vec<Expiry> {
        let limits = self.limits;
        let backoff = |attempts: u32| {
            limits
                .backoff_base_ms
                .saturating_mul(1 << (attempts - 1).min(20))
                .min(limits.backoff_max_ms)
        };
        let mut dying = Vec::new();
        for job in self.jobs.values_mut() {
            for e in job.schedule.expire(now, limits.retry_budget, backoff) {
                self.counters.lease_expiries += 1;
                if let Some(w) = self.workers.get_mut(&e.lease.worker) {
                    w.errors += 1;
                }
                dying.push(Expiry {
                    job: job.id,
                    task: e.task,
                    worker: e.lease.worker,
                    dying: e.dying,
                });
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
        let tasks = job.task_count().ok_or(StateError::NotPlanned(r.job))?;
        let Some(task) = job.task(r.task) else {
            return Err(StateError::UnknownTask {
                job: r.job,
                task: r.task,
                tasks,
            });
        };
        plausible(job, &task, tally)?;
        let compare = |stored: &Stored| {
            if stored.same(tally, checksum) {
                Verdict::Duplicate
            } else {
                Verdict::Conflict
            }
        };
        // The same report again (an answer lost on the way): judged by
        // what this very lease stored, with no lease needed any more.
        let by_this_lease = |c: &Stored| c.worker == worker && c.lease_id == r.lease_id;
        if let Some(stored) = job
            .result(r.task)
            .filter(|c| by_this_lease(c))
            .or_else(|| job.votes.find(r.task, by_this_lease))
        {
            return Ok(compare(stored));
        }
        if job.ledger.has_kept(r.task, worker, r.lease_id) {
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
        let holds = match job.schedule.lease(r.task) {
            Some(l) => l.lease_id == r.lease_id && l.worker == worker,
            None => self.granted(worker, r),
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
        let mine = job.votes.find(r.task, |c| c.worker == worker);
        if let Some(stored) = job.result(r.task).or(mine) {
            return Ok(compare(stored));
        }
        if job.counted(r.task) {
            return Err(StateError::ResultNotInMemory {
                job: r.job,
                task: r.task,
            });
        }
        Ok(Verdict::New)
    }
}

/// Tasks handed back that one lease call looks at in each job, at most
/// (see `Schedule::next_within`).
pub const LOOK_PER_LEASE: usize = 8192;

/// The most leases one worker id holds at once: what one heartbeat renews
/// (an honest worker holds no more, `worker/src/pace.rs`), so that an id
/// cannot take a whole job of small tasks from the others.
pub const MOST_HELD: usize = 4096;

/// The most leases the workers of one issued credential hold at once, all
/// their ids together: sixteen workers' worth, so that one credential's
/// many made-up ids cannot take a job from the others (the shared worker
/// token binds no id, and its ids are bounded one by one).
pub const MOST_HELD_PER_VOTER: usize = 16 * MOST_HELD;

/// The most any one count of a task may be, nodes included (2^90): the
/// whole search of N=32 places about 10^23 queens (2^77), and a job of
/// [`nqueens_common::plan::MAX_TASKS`] (under 2^30) tasks each at this
/// bound sums to under 2^120, so a job's totals (its classes times their
/// orbits' sizes) never leave u128 however its workers lie.
pub const MOST_PER_TASK: u128 = 1 << 90;

/// Rejects results that no task of this plan can produce: a count past
/// [`MOST_PER_TASK`], counts of the wrong kind for the strategy, or more
/// solutions than the whole N has; a synthetic task's answer is known
/// exactly.
pub fn plausible(job: &Job, task: &Task, t: &Tally) -> Result<(), StateError> {
    let no = |why: String| {
        Err(StateError::Implausible {
            job: job.id,
            task: task.index,
            why,
        })
    };
    let plan = Plan::new(job.spec).expect("stored specs are valid");
    if let Some(want) = plan.synthetic_tally(task) {
        if *t != want {
            return no(format!(
                "a synthetic task {} answers {}, not {}",
                task.index, want.weighted, t.weighted
            ));
        }
        return Ok(());
    }
    if t.largest() > MOST_PER_TASK {
        return no(format!(
            "a count of {} is more than any task can have (at most 2^90)",
            t.largest()
        ));
    }
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
