//! The coordinator itself: the state behind a lock, the journal in front
//! of every durable change. The rule everywhere: write the journal record, wait
//! for its fsync, apply it to the state, then answer.

use crate::checkpoint;
use crate::journal::{Journal, JournalError};
use crate::seen::Seen;
use crate::state::{
    Checking, Done, Event, Granted, JobState, JobView, LeaseRef, Limits, Outcome, State,
    StateError, TaskList, Verdict, WorkerInfo,
};
use crate::store::{Opened, Store, StoreError, StoreWriter};
use nqueens_common::plan::{Plan, PlanError, PlanSpec, Tally, Task};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, from the coordinator's clock only.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> u64;
}

/// The system clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
}

/// A clock that moves only when told to (for tests of lease expiry).
#[derive(Default)]
pub struct ManualClock(pub AtomicU64);

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl ManualClock {
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

/// Where the coordinator's disk work runs (journal appends and their
/// fsync, store writes, plans, checkpoints).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IoMode {
    /// On the journal's and the store's writer threads and tokio's
    /// blocking pool: the async threads never wait for the disk.
    #[default]
    Threads,
    /// On the calling task, which waits for it. For the simulation tests,
    /// whose one thread runs every host on simulated time: work on another
    /// thread would finish at a moment of the real clock, not of the
    /// simulation, and a seed would not replay. Every call sees the same
    /// results in the same order as with threads; records are committed
    /// one fsync each rather than in groups.
    Inline,
}

/// Why a call failed.
/// How long a checkpoint waits for the store to sync before it is given
/// up (the journal holds everything; the next start replays more).
pub const STORE_SYNC_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum CoordError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error("invalid plan: {0}")]
    Plan(#[from] PlanError),
    #[error("data directory {path}: {why}")]
    DataDir { path: PathBuf, why: String },
    #[error("start-up check failed for job {job}: {why}")]
    Verify { job: u64, why: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "the journal {path} ends at record {last}{torn}, but {by} records up to {acknowledged}: \
         {missing} acknowledged record(s) are missing from the journal (was it cut, or restored from an \
         older copy, or a sealed segment in journal.d/ deleted?). Nothing was changed. Restore the journal \
         (DIR/journal and DIR/journal.d/) from a backup; or, accepting that those \
         {missing} record(s) are lost (their tasks are counted again; every record still in the journal \
         is kept), start once with --accept-lost-records {missing}: the checkpoints, the store and the journal's \
         commit mark are then moved aside (kept, named *.lost-*) and rebuilt from the journal, and the \
         boot epoch still moves forward"
    )]
    JournalBehind {
        path: PathBuf,
        last: u64,
        /// Says so when a cut-short record follows the last whole one.
        torn: String,
        /// Which marks say how far records were acknowledged.
        by: String,
        acknowledged: u64,
        missing: u64,
    },
    #[error(
        "{cause}. With no backup: the journal {path} has {lost} acknowledged record(s) lost: inside \
         it, {ranges}{behind}. To go on (the lost results' tasks are counted again), start once \
         with --accept-lost-records {lost}: every record that reads is kept at its number, the lost ones \
         are rebuilt (a job one of them defined is restated from the checkpoint), files out of \
         place are set aside, each file rewritten or removed is kept beside it as *.damaged-*, and the checkpoints and the store are moved aside \
         (*.lost-*) and rebuilt from the journal"
    )]
    JournalLost {
        cause: String,
        path: PathBuf,
        lost: u64,
        ranges: String,
        behind: String,
    },
    #[error(
        "the plan asks for {asked} tasks; this coordinator accepts at most {max} (--max-tasks): \
         ask for fewer with --tasks, or raise --max-tasks if the coordinator has the memory \
         (a bit per task, and the plan's table, which grows with its groups: a 10^8-task job \
         took under 200 MB in all)"
    )]
    TooManyTasks { asked: u64, max: u64 },
}

/// What a checkpoint did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointMade {
    /// Every journal record up to here is in it (and perhaps a few after).
    pub upto: u64,
    pub bytes: u64,
    /// Time the state's lock was held to encode it.
    pub encode_ms: u64,
    pub ms: u64,
    /// The journal segment sealed after it (first and last record).
    pub sealed: Option<(u64, u64)>,
    /// Sealed segments compressed.
    pub compressed: usize,
}

/// The largest job audited inside the coordinator when it finishes. An
/// audit holds every counted result's counts (its peak: about 270 bytes a
/// task, 314 MB over a 109 MB coordinator at 1.18 M tasks), so this keeps a
/// coordinator that finishes a job under 256 MB.
pub const AUDIT_AT_DONE_MAX: u64 = 500_000;

/// How the state was recovered at start-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// Journal records at start-up.
    pub records: u64,
    /// Records applied from the journal (the rest came with the checkpoint).
    pub replayed: u64,
    /// The checkpoint used: every record up to here was in it.
    pub checkpoint_upto: Option<u64>,
    /// Planned jobs whose task table was not in the store (or not the
    /// journaled one) and was computed again.
    pub replanned: u64,
    pub ms: u64,
}

/// The coordinator.
pub struct Coordinator {
    /// Itself, for the journal writes that must outlive their call.
    me: std::sync::Weak<Coordinator>,
    recovery: std::sync::OnceLock<Recovery>,
    state: Mutex<State>,
    /// The journal records the state holds (updated under its lock).
    applied: Mutex<Seen>,
    /// The last record of the latest checkpoint (0: none this run).
    checkpointed: AtomicU64,
    journal: Journal,
    /// Read and repaired at start-up only; written afterwards by `writes`.
    store: Store,
    store_opened: Opened,
    /// The store's writer once start-up is over.
    writes: std::sync::OnceLock<StoreWriter>,
    clock: Arc<dyn Clock>,
    /// When this coordinator started (its clock, ms).
    started_ms: u64,
    /// When the sweep last forgot silent workers (its clock, ms).
    forgot_ms: AtomicU64,
    /// Bumped after every change, for watchers.
    changed: tokio::sync::watch::Sender<u64>,
    /// Serialises job submissions (job ids come from the state).
    submit: tokio::sync::Mutex<()>,
    data_dir: PathBuf,
    /// The stop flag of each job being planned (set by cancel or shutdown).
    planning: Mutex<std::collections::HashMap<u64, Arc<AtomicBool>>>,
    /// Set at shutdown: no planning starts or continues.
    stopping: AtomicBool,
    /// True once shutting down: long calls (watches) end, saying so.
    closing: tokio::sync::watch::Sender<bool>,
    /// Whether a job that finishes is audited in the background.
    audit_when_done: AtomicBool,
    io: IoMode,
    /// Records for the audit alone that calls are writing now.
    recording: claims::Claims<claims::Record, ()>,
    /// Results kept for the audit alone that calls are writing now, by
    /// job and worker id.
    keeping: claims::Counts<(u64, String)>,
    /// Worker ids being bound now, each to the credential it is bound to.
    binding: claims::Claims<String, String>,
    /// The data directory's lock, held while this coordinator lives.
    lock: recovery::DirLock,
}

mod claims;
mod jobs;
mod lost;
mod recovery;
pub(crate) use recovery::{lease_key, lock_dir};
mod workers;

impl Coordinator {
    /// Runs `f` off the async threads (inline with [`IoMode::Inline`]).
    async fn blocking<T: Send + 'static>(
        &self,
        what: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        match self.io {
            IoMode::Threads => tokio::task::spawn_blocking(f)
                .await
                .unwrap_or_else(|e| panic!("{what} panicked: {e}")),
            IoMode::Inline => f(),
        }
    }

    /// True while the journal can be written; changes when that does.
    pub fn journal_healthy(&self) -> tokio::sync::watch::Receiver<bool> {
        self.journal.healthy()
    }

    /// How the state was recovered at start-up.
    pub fn recovery(&self) -> Recovery {
        *self.recovery.get().expect("set at start-up")
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The store, and how it was found at start-up.
    pub fn store(&self) -> (&Store, &Opened) {
        (&self.store, &self.store_opened)
    }

    fn store_writer(&self) -> &StoreWriter {
        self.writes
            .get()
            .expect("results arrive only after start-up")
    }

    /// Writes what the store still has queued (at shutdown).
    pub fn close_store(&self) {
        if let Some(w) = self.writes.get() {
            w.close();
        }
    }

    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    pub fn limits(&self) -> Limits {
        self.lock().limits()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("state lock poisoned")
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v += 1);
    }

    /// A receiver that changes after every state change.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Begins a shutdown: planning stops, and every call that streams
    /// until something happens (a watch) ends, telling its client why.
    pub fn close(&self) {
        self.stop_planning();
        self.closing.send_replace(true);
    }

    /// Turns true once the data directory's lock is released: when the
    /// last handle to this coordinator goes.
    pub fn lock_released(&self) -> tokio::sync::watch::Receiver<bool> {
        self.lock.released()
    }

    /// True once [`Coordinator::close`] was called.
    pub fn closing(&self) -> tokio::sync::watch::Receiver<bool> {
        self.closing.subscribe()
    }

    /// Journals an event (waiting for its fsync), then applies it.
    async fn write(&self, r: Event) -> Result<Option<Verdict>, CoordError> {
        self.write_holding(r, ()).await
    }

    /// [`Coordinator::write`], `held` kept until the event is applied.
    async fn write_holding(
        &self,
        r: Event,
        held: impl Send + 'static,
    ) -> Result<Option<Verdict>, CoordError> {
        let mut applied = self.write_all(vec![r], held).await?;
        Ok(applied.pop().expect("one event, one answer")?)
    }

    /// Journals events in one group (one fsync), then applies them in
    /// order under one lock: each one's verdict, or why it was not applied.
    ///
    /// Never half done: a call whose client goes away is dropped at its
    /// next await, and a record handed to the journal's writer is written
    /// whether or not anyone waits for it; unapplied, it would leave a gap
    /// in the records the state holds, and no checkpoint could be written
    /// again. So the write and the apply run as a task of their own, which
    /// the caller awaits (with [`IoMode::Inline`] the write is done before
    /// its first await returns: nothing can come between). `held` (the
    /// claims on what the events write, see `claims.rs`) goes with the
    /// task, dropped once they are applied.
    async fn write_all(
        &self,
        events: Vec<Event>,
        held: impl Send + 'static,
    ) -> Result<Vec<Result<Option<Verdict>, StateError>>, CoordError> {
        if self.io == IoMode::Inline {
            let answers = self.write_and_apply(events).await;
            drop(held);
            return answers;
        }
        let me = self.me.upgrade().expect("a coordinator lives in an Arc");
        let done = tokio::spawn(async move {
            let answers = me.write_and_apply(events).await;
            drop(held);
            answers
        });
        match done.await {
            Ok(answers) => answers,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(JournalError::Poisoned("the coordinator is stopping".into()).into()),
        }
    }

    /// [`Coordinator::write_all`]'s work.
    async fn write_and_apply(
        &self,
        events: Vec<Event>,
    ) -> Result<Vec<Result<Option<Verdict>, StateError>>, CoordError> {
        let first = self.journal.append_all(&events).await?;
        // The results that finish a job (seen under one lock, so each is
        // logged once).
        let mut finished = Vec::new();
        let mut answers = Vec::with_capacity(events.len());
        let mut records = Vec::with_capacity(events.len());
        {
            let mut s = self.lock();
            let done = |s: &State, id| s.job(id).is_ok_and(|j| j.state() == JobState::Done);
            for (seq, r) in (first..).zip(events) {
                let job = match &r {
                    Event::TaskDone(d) => Some(d.job),
                    _ => None,
                };
                let before = job.is_some_and(|id| done(&s, id));
                let applied = s.apply(&r);
                self.applied.lock().expect("applied lock").add(seq);
                // The store's result row is the counted result, nothing else.
                records.push(match (&applied, r) {
                    (Ok(Some(Verdict::New)), Event::TaskDone(d)) => (seq, Some(d)),
                    _ => (seq, None),
                });
                finished.extend(job.filter(|&id| !before && done(&s, id)));
                answers.push(applied);
            }
            // Under the state's lock, so that a checkpoint of the state
            // knows which records it holds, and finds each of them sent to
            // the store's thread: every record is told to it (its count of
            // records caught up must have no gap), none before it starts.
            if let Some(w) = self.writes.get() {
                w.records(records);
            }
        }
        for j in finished.into_iter().filter_map(|id| self.job(id).ok()) {
            tracing::info!(job = j.id, n = j.spec.n.get(), total = %j.total, unique = %j.unique, tasks = j.tasks, "job done");
            if self.audit_when_done.load(Ordering::Relaxed) {
                self.audit_in_background(j.id, j.tasks);
            }
        }
        self.bump();
        Ok(answers)
    }

    /// Writes a checkpoint of the state, if anything was journaled since
    /// the last one: the state is encoded under its lock, the store is
    /// synced up to every record the state holds, the checkpoint is
    /// written durably; then, with `seal`, the journal's current file is
    /// sealed and the sealed segments compressed (at shutdown the file is
    /// left as it is: the next start reads it anyway). A failure changes
    /// nothing on disk that a start-up relies on (the journal keeps every
    /// record).
    pub async fn checkpoint(&self, seal: bool) -> Result<Option<CheckpointMade>, CoordError> {
        let started = std::time::Instant::now();
        let (bytes, seen) = {
            let s = self.lock();
            let seen = self.applied.lock().expect("applied lock").clone();
            if seen.last() <= self.checkpointed.load(Ordering::SeqCst) {
                return Ok(None);
            }
            (checkpoint::encode(&seen, &s, self.now_ms()), seen)
        };
        let encode_ms = started.elapsed().as_millis() as u64;
        // Every record the state holds was sent to the store's thread
        // before the lock was released: a sync now covers them all. A
        // store that cannot finish one (sled never completes a flush after
        // a write error, such as a full disk) holds no checkpoint, nor a
        // shutdown, longer than STORE_SYNC_WAIT.
        let sync = tokio::time::timeout(STORE_SYNC_WAIT, self.store_writer().sync());
        let synced = sync.await.unwrap_or(0);
        if synced < seen.last() {
            return Err(CoordError::Store(crate::store::StoreError::Behind {
                synced,
                needed: seen.last(),
            }));
        }
        let dir = self.data_dir.clone();
        let len = bytes.len() as u64;
        self.blocking("checkpoint thread", move || checkpoint::save(&dir, &bytes))
            .await
            .map_err(|e| CoordError::DataDir {
                path: self.data_dir.clone(),
                why: format!("cannot write the checkpoint: {e}"),
            })?;
        self.checkpointed.store(seen.last(), Ordering::SeqCst);
        let (mut sealed, mut compressed) = (None, 0);
        if seal {
            sealed = self.journal.rotate().await?;
            let journal = self.data_dir.join("journal");
            compressed = self
                .blocking("compression thread", move || {
                    crate::journal::segments::compress(&journal)
                })
                .await?;
        }
        let made = CheckpointMade {
            upto: seen.upto,
            bytes: len,
            encode_ms,
            ms: started.elapsed().as_millis() as u64,
            sealed,
            compressed,
        };
        tracing::info!(upto = made.upto, bytes = made.bytes, encode_ms, ms = made.ms, sealed = ?made.sealed, compressed, "checkpoint written");
        Ok(Some(made))
    }

    /// Journal records since the last checkpoint.
    pub fn records_since_checkpoint(&self) -> u64 {
        let last = self.applied.lock().expect("applied lock").last();
        last.saturating_sub(self.checkpointed.load(Ordering::SeqCst))
    }

    /// Event counters, for metrics.
    pub fn counters(&self) -> crate::state::Counters {
        self.lock().counters
    }
}
