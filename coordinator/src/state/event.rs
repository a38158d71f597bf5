//! The durable facts of a run, as the state applies them: each event is
//! written to the journal (by its codec, [`crate::journal::codec`]) and
//! fsynced before [`super::State::apply`] sees it, and replayed in the
//! same order at start-up. Plain domain types: no wire message enters the
//! state.

use super::{Checking, JobState, StoredResult};
use nqueens_common::plan::{PlanSpec, Tally};

/// What counting one task produced, as a worker reported it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    pub tally: Tally,
    /// Over every subproblem's id and counts, in order; compared between
    /// duplicates.
    pub checksum: u64,
    pub elapsed_ms: u64,
    pub solver_version: String,
}

/// The first valid result of a task (a later one for the same task is
/// compared, never added).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Done {
    pub job: u64,
    pub task: u64,
    pub outcome: Outcome,
    pub worker: String,
    pub lease_id: u64,
    pub unix_ms: u64,
    /// The credential the worker authenticated with (an issued token's
    /// name; empty for the shared worker token).
    pub credential: String,
}

impl Done {
    /// The result as a job's ledger keeps it: vouched for by the worker's
    /// credential, else by its id.
    pub fn stored(&self) -> StoredResult {
        StoredResult {
            tally: self.outcome.tally,
            checksum: self.outcome.checksum,
            worker: self.worker.clone(),
            credential: if self.credential.is_empty() {
                self.worker.clone()
            } else {
                self.credential.clone()
            },
            lease_id: self.lease_id,
            unix_ms: self.unix_ms,
            elapsed_ms: self.outcome.elapsed_ms,
            solver_version: self.outcome.solver_version.clone(),
        }
    }

    /// Task `task` of job `job`'s result as a ledger keeps it (the inverse
    /// of [`Done::stored`]).
    pub fn of_stored(job: u64, task: u64, r: &StoredResult) -> Done {
        Done {
            job,
            task,
            outcome: Outcome {
                tally: r.tally,
                checksum: r.checksum,
                elapsed_ms: r.elapsed_ms,
                solver_version: r.solver_version.clone(),
            },
            worker: r.worker.clone(),
            lease_id: r.lease_id,
            unix_ms: r.unix_ms,
            credential: if r.credential == r.worker {
                String::new()
            } else {
                r.credential.clone()
            },
        }
    }
}

/// One durable change.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A coordinator start: lease ids carry the epoch.
    Boot {
        epoch: u64,
        unix_ms: u64,
    },
    JobSubmitted {
        job: u64,
        spec: PlanSpec,
        unix_ms: u64,
        checking: Checking,
    },
    /// The plan was cut into `tasks` tasks; a re-plan must give `digest`.
    JobPlanned {
        job: u64,
        tasks: u64,
        digest: u64,
    },
    /// The operator paused, resumed or cancelled a job: `state` is
    /// [`JobState::Running`], [`JobState::Paused`] or
    /// [`JobState::Cancelled`].
    JobControlled {
        job: u64,
        state: JobState,
    },
    TaskDone(Done),
    /// A result that disagreed with the stored one.
    TaskConflict {
        job: u64,
        task: u64,
        outcome: Outcome,
        worker: String,
        unix_ms: u64,
    },
    /// A task out of retries.
    TaskDead {
        job: u64,
        task: u64,
        reason: String,
    },
    /// The operator put a job's dead tasks back in its schedule.
    TasksRetried {
        job: u64,
        unix_ms: u64,
    },
    /// The operator deleted a finished or cancelled job: later events
    /// about it are skipped and its id is never given again.
    JobDeleted {
        job: u64,
        unix_ms: u64,
    },
    /// A worker id was first used with an issued credential: only that
    /// credential may use it from now on (until the id is forgotten).
    WorkerBound {
        worker: String,
        credential: String,
        unix_ms: u64,
        /// Written while the coordinator claimed the id for this binding
        /// alone: it holds over an earlier one (of an id forgotten since).
        /// Unset in journals of earlier versions, whose first binding of
        /// an id holds (a later one lost a race).
        claimed: bool,
    },
}

impl Event {
    /// The job whose events a deletion makes void: none for a boot, a
    /// binding, or the deletion itself (a second one changes nothing).
    pub fn job(&self) -> Option<u64> {
        match self {
            Event::Boot { .. } | Event::WorkerBound { .. } | Event::JobDeleted { .. } => None,
            Event::JobSubmitted { job, .. }
            | Event::JobPlanned { job, .. }
            | Event::JobControlled { job, .. }
            | Event::TaskConflict { job, .. }
            | Event::TaskDead { job, .. }
            | Event::TasksRetried { job, .. } => Some(*job),
            Event::TaskDone(d) => Some(d.job),
        }
    }
}
