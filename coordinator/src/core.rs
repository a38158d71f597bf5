//! The coordinator's core: the state behind a lock, the journal in front of
//! every durable change. The rule everywhere: write the journal record, wait
//! for its fsync, apply it to the state, then answer.

use crate::checkpoint;
use crate::journal::{Journal, JournalError};
use crate::seen::Seen;
use crate::state::{
    Checking, Granted, JobState, JobView, LeaseRef, Limits, State, StateError, TaskList, Verdict,
    WorkerInfo,
};
use crate::store::{Opened, Store, StoreError, StoreWriter};
use nqueens_common::plan::{Plan, PlanError, PlanSpec, Tally, Task};
use nqueens_proto::tally_to_wire;
use nqueens_proto::v1::{self, journal_record::Record, JournalRecord};
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

/// Why a call failed.
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
         is kept), start once with --accept-lost-records {missing}: the checkpoints and the store are \
         then moved aside (kept, named *.lost-*) and rebuilt from the journal, and the boot epoch still \
         moves forward"
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
        "the plan asks for {asked} tasks; this coordinator accepts at most {max} (--max-tasks): \
         ask for fewer with --tasks, or raise --max-tasks if the coordinator has the memory \
         (a few KB per task)"
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
    /// Bumped after every change, for watchers.
    changed: tokio::sync::watch::Sender<u64>,
    /// Serialises job submissions (job ids come from the state).
    submit: tokio::sync::Mutex<()>,
    data_dir: PathBuf,
    /// The stop flag of each job being planned (set by cancel or shutdown).
    planning: Mutex<std::collections::HashMap<u64, Arc<AtomicBool>>>,
    /// Set at shutdown: no planning starts or continues.
    stopping: AtomicBool,
    /// Whether a job that finishes is audited in the background.
    audit_when_done: AtomicBool,
    /// Held open for the lifetime of the process: the data directory's lock.
    _lock: File,
}

/// How far records were acknowledged, by the marks a start finds.
struct Marks {
    /// The last record whose row the store holds.
    store: u64,
    /// The last record the latest readable checkpoint holds.
    checkpoint: u64,
    /// That checkpoint's boot epoch.
    epoch: u64,
}

impl Marks {
    fn acknowledged(&self) -> u64 {
        self.store.max(self.checkpoint)
    }

    /// The refusal for a journal that ends at `last` (with `torn` bytes of
    /// a cut-short record after it).
    fn behind(&self, path: PathBuf, last: u64, torn: u64) -> CoordError {
        let by = match (self.store > last, self.checkpoint > last) {
            (true, true) => "the store and the checkpoint hold",
            (true, false) => "the store holds",
            _ => "the checkpoint holds",
        };
        CoordError::JournalBehind {
            path,
            last,
            torn: match torn {
                0 => String::new(),
                n => format!(" (then {n} bytes of a cut-short record)"),
            },
            by: by.into(),
            acknowledged: self.acknowledged(),
            missing: self.acknowledged() - last,
        }
    }
}

/// Moves the checkpoints and the store aside (renamed `*.lost-UNIXTIME`,
/// nothing deleted) and opens a new, empty store.
fn set_aside(data_dir: &Path) -> Result<(Store, Opened), CoordError> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for name in ["checkpoint", "checkpoint.prev", "store"] {
        let from = data_dir.join(name);
        let to = data_dir.join(format!("{name}.lost-{stamp}"));
        match std::fs::rename(&from, &to) {
            Ok(()) => tracing::warn!(from = %from.display(), to = %to.display(), "moved aside"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(CoordError::DataDir {
                    path: from,
                    why: format!("cannot move it aside to {}: {e}", to.display()),
                })
            }
        }
    }
    crate::journal::sync_dir(&data_dir.join("store")).map_err(|e| CoordError::DataDir {
        path: data_dir.to_path_buf(),
        why: format!("cannot sync it: {e}"),
    })?;
    Ok(Store::open(&data_dir.join("store"))?)
}

/// The data directory's secret for lease ids (`DIR/lease.key`, 32 random
/// bytes, owner-only), made on first start.
fn lease_key(dir: &Path) -> Result<crate::state::LeaseKey, String> {
    let path = dir.join("lease.key");
    match std::fs::read(&path) {
        Ok(bytes) => bytes.try_into().map_err(|b: Vec<u8>| {
            format!(
                "{} holds {} bytes, not 32: it is damaged. Remove it to make a new one \
                 (workers then lose the leases they hold across this restart)",
                path.display(),
                b.len()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = crate::state::random_key();
            let tmp = dir.join("lease.key.tmp");
            let write = || -> std::io::Result<()> {
                use std::io::Write;
                let mut o = std::fs::OpenOptions::new();
                o.write(true).create(true).truncate(true);
                #[cfg(unix)]
                std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
                let mut f = o.open(&tmp)?;
                f.write_all(&key)?;
                f.sync_all()?;
                std::fs::rename(&tmp, &path)?;
                File::open(dir)?.sync_all()
            };
            write().map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            Ok(key)
        }
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

fn rec(r: Record) -> JournalRecord {
    JournalRecord { record: Some(r) }
}

impl Coordinator {
    /// Opens the data directory: takes its lock, replays the journal,
    /// re-plans every job (checked against the journal's digest), verifies
    /// the totals, and records a new boot.
    ///
    /// A journal that ends before what was acknowledged stops the start,
    /// unless `accept_lost` is exactly the number of records it lacks.
    pub async fn open(
        data_dir: &Path,
        limits: Limits,
        clock: Arc<dyn Clock>,
        accept_lost: Option<u64>,
    ) -> Result<Arc<Coordinator>, CoordError> {
        let started = std::time::Instant::now();
        let dir_err = |why: String| CoordError::DataDir {
            path: data_dir.to_path_buf(),
            why,
        };
        std::fs::create_dir_all(data_dir).map_err(|e| dir_err(format!("cannot create it: {e}")))?;
        // The lock is on the directory itself (an exclusive flock held
        // while this process lives), so removing a file cannot release it.
        let lock =
            File::open(data_dir).map_err(|e| dir_err(format!("cannot open it to lock it: {e}")))?;
        lock.try_lock().map_err(|e| {
            dir_err(format!(
                "another process holds its lock (another coordinator, or `solve --state`, on the same \
                 directory): stop that one first, or give a different --data-dir ({e})"
            ))
        })?;
        let key = lease_key(data_dir).map_err(dir_err)?;
        let (mut store, mut store_opened) = Store::open(&data_dir.join("store"))?;
        let loaded = checkpoint::load(data_dir);
        // How far results were acknowledged, by the store's and the latest
        // readable checkpoint's own marks: the journal must reach it.
        let marks = Marks {
            store: store.caught_up(),
            checkpoint: loaded.as_ref().map_or(0, |c| c.seen.last()),
            epoch: loaded.as_ref().map_or(0, |c| c.state.epoch()),
        };
        // A checkpoint is used only if the store holds the rows of every
        // record it covers (it was written after they were synced; a
        // store rebuilt since is not): the records before it are not read.
        let mut checkpoint = loaded.filter(|c| {
            let covered = c.seen.last();
            if marks.store < covered {
                tracing::warn!(checkpoint = %c.path.display(), covered, store_caught_up = marks.store, "the store is behind the checkpoint (rebuilt or restored?); replaying the whole journal");
            }
            marks.store >= covered
        });
        let journal_path = data_dir.join("journal");
        let after = checkpoint.as_ref().map_or(0, |c| c.seen.upto);
        let (journal, replay) = match Journal::open(&journal_path, after, marks.acknowledged()) {
            Err(JournalError::Behind { last, torn, .. }) => {
                let missing = marks.acknowledged() - last;
                if accept_lost != Some(missing) {
                    return Err(marks.behind(journal_path, last, torn));
                }
                tracing::warn!(missing, "--accept-lost-records: moving the checkpoints and the store aside; their tasks are counted again");
                drop(store);
                checkpoint = None;
                (store, store_opened) = set_aside(data_dir)?;
                Journal::open(&journal_path, 0, 0)?
            }
            other => other?,
        };
        // The store's mark, as the replay below uses it.
        let caught_up = store.caught_up();
        let read = started.elapsed();
        let from_checkpoint = checkpoint.as_ref().map(|c| (c.seen.upto, c.bytes));
        let (mut state, applied) = match checkpoint {
            Some(c) => (c.state.with_limits(limits), Some(c.seen)),
            None => (State::new(limits), None),
        };
        state.set_lease_key(key);
        // Boots recorded only in a checkpoint set aside still count.
        state.raise_epoch(marks.epoch);
        // Without a checkpoint: every task with a result record, counted
        // or not, for the store check.
        let mut journaled = applied.is_none().then(std::collections::HashSet::new);
        let mut rows = Vec::new();
        let mut replayed = 0;
        for (seq, r) in (replay.first..).zip(&replay.records) {
            // Applied before the checkpoint was taken: its effect is in it.
            if applied.as_ref().is_some_and(|a| a.contains(seq)) {
                continue;
            }
            replayed += 1;
            let verdict = state.apply(r)?;
            if let Some(Record::TaskDone(d)) = &r.record {
                if let Some(j) = journaled.as_mut() {
                    j.insert((d.job_id, d.task_index));
                }
                // From a checkpoint, only counted results get a row (the
                // store check that removes the others needs every record).
                let row = journaled.is_some() || matches!(verdict, Some(Verdict::New));
                if seq > caught_up && row {
                    rows.push(d.clone());
                }
                if rows.len() == 1 << 16 {
                    store.add_results(std::mem::take(&mut rows), None)?;
                }
            }
        }
        let records = replay.last;
        store.add_results(rows, Some(records))?;
        // Rows of deleted jobs that a crash left behind (idempotent).
        for id in state.deleted_jobs() {
            store.delete_job(id)?;
        }
        let replay_done = started.elapsed();
        // Jobs planned before (their size was accepted then) get their
        // tasks now; jobs never planned are planned once serving, as at
        // submit, so that a long plan cannot keep the coordinator down.
        let mut planned = Vec::new();
        let mut unplanned = Vec::new();
        for j in state.jobs() {
            match (j.planned(), j.state()) {
                (Some(p), _) => planned.push((j.id, j.spec, p)),
                (None, JobState::Cancelled) => {}
                (None, _) => unplanned.push((j.id, j.spec)),
            }
        }
        let (changed, _) = tokio::sync::watch::channel(0);
        let core = Arc::new(Coordinator {
            recovery: std::sync::OnceLock::new(),
            state: Mutex::new(state),
            applied: Mutex::new(Seen::upto(records)),
            checkpointed: AtomicU64::new(from_checkpoint.map_or(0, |c| c.0)),
            journal,
            store,
            store_opened,
            writes: std::sync::OnceLock::new(),
            started_ms: clock.now_ms(),
            clock,
            changed,
            submit: tokio::sync::Mutex::new(()),
            data_dir: data_dir.to_path_buf(),
            planning: Mutex::default(),
            stopping: AtomicBool::new(false),
            audit_when_done: AtomicBool::new(true),
            _lock: lock,
        });
        let mut replanned = 0;
        for (id, spec, p) in planned {
            replanned += u64::from(core.plan_job(id, spec, Some(p)).await?);
        }
        let verifying = std::time::Instant::now();
        core.verify(journaled.as_ref())?;
        let verified = verifying.elapsed();
        core.store.flush();
        let _ = core
            .writes
            .set(StoreWriter::spawn(core.store.clone(), records));
        let epoch = core.lock().epoch() + 1;
        core.write(rec(Record::Boot(v1::Boot {
            epoch,
            unix_ms: core.clock.now_ms(),
        })))
        .await?;
        // Where a restart's time goes: reading the journal, replaying it
        // (state and store rows), checking the store against it.
        let ms = |d: std::time::Duration| d.as_millis() as u64;
        tracing::info!(
            dir = %data_dir.display(),
            records,
            replayed,
            checkpoint_upto = from_checkpoint.map(|c| c.0),
            checkpoint_bytes = from_checkpoint.map(|c| c.1),
            replanned,
            torn_bytes = replay.truncated,
            epoch,
            jobs = core.lock().jobs().count(),
            read_ms = ms(read),
            replay_ms = ms(replay_done - read),
            verify_ms = ms(verified),
            ms = ms(started.elapsed()),
            "coordinator state restored"
        );
        let _ = core.recovery.set(Recovery {
            records,
            replayed,
            checkpoint_upto: from_checkpoint.map(|c| c.0),
            replanned,
            ms: ms(started.elapsed()),
        });
        for (id, spec) in unplanned {
            core.plan_in_background(id, spec);
        }
        Ok(core)
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

    /// Journals a record (waiting for its fsync), then applies it.
    async fn write(&self, r: JournalRecord) -> Result<Option<Verdict>, CoordError> {
        let seq = self.journal.append(&r).await?;
        // The result that finishes a job (seen under one lock, so it is
        // logged once).
        let (v, finished) = {
            let mut s = self.lock();
            let job = match &r.record {
                Some(Record::TaskDone(d)) => Some(d.job_id),
                _ => None,
            };
            let done = |s: &State, id| s.job(id).is_ok_and(|j| j.state() == JobState::Done);
            let before = job.is_some_and(|id| done(&s, id));
            let applied = s.apply(&r);
            // Under the state's lock, so that a checkpoint of the state
            // knows which records it holds, and finds each of them sent to
            // the store's thread: every record is told to it (its count of
            // records caught up must have no gap), none before it starts.
            // The store's result row is the counted result, nothing else.
            self.applied.lock().expect("applied lock").add(seq);
            if let Some(w) = self.writes.get() {
                match (&applied, &r.record) {
                    (Ok(Some(Verdict::New)), Some(Record::TaskDone(d))) => w.result(d.clone(), seq),
                    _ => w.seen(seq),
                }
            }
            (applied?, job.filter(|&id| !before && done(&s, id)))
        };
        if let Some(j) = finished.and_then(|id| self.job(id).ok()) {
            tracing::info!(job = j.id, n = j.spec.n.get(), total = %j.total, unique = %j.unique, tasks = j.tasks, "job done");
            if self.audit_when_done.load(Ordering::Relaxed) {
                self.audit_in_background(j.id, j.tasks);
            }
        }
        self.bump();
        Ok(v)
    }

    /// Audits a job that just finished, off the async threads, and logs its
    /// digest and verdict. An audit holds every counted result's counts,
    /// so a job past [`AUDIT_AT_DONE_MAX`] tasks is left to the operator.
    fn audit_in_background(&self, id: u64, tasks: u64) {
        if tasks > AUDIT_AT_DONE_MAX {
            tracing::info!(job = id, tasks, "job not audited inside the coordinator (too large): run `nqueens audit {id} --data-dir DIR` on a machine with the memory");
            return;
        }
        let journal = self.data_dir.join("journal");
        let started = std::thread::Builder::new()
            .name("audit".into())
            .spawn(move || match crate::audit::audit(&journal, id) {
                Ok(a) => tracing::info!(
                    job = id,
                    digest = %a.digest,
                    passed = a.passed(),
                    complete = a.complete(),
                    problems = a.problems.len(),
                    "job audited"
                ),
                Err(e) => tracing::warn!(job = id, error = %e, "job audit failed"),
            });
        if let Err(e) = started {
            tracing::warn!(job = id, error = %e, "cannot start the job's audit");
        }
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
        // before the lock was released: a sync now covers them all.
        let synced = self.store_writer().sync().await;
        if synced < seen.last() {
            return Err(CoordError::Store(crate::store::StoreError::Behind {
                synced,
                needed: seen.last(),
            }));
        }
        let dir = self.data_dir.clone();
        let len = bytes.len() as u64;
        tokio::task::spawn_blocking(move || checkpoint::save(&dir, &bytes))
            .await
            .expect("checkpoint thread panicked")
            .map_err(|e| CoordError::DataDir {
                path: self.data_dir.clone(),
                why: format!("cannot write the checkpoint: {e}"),
            })?;
        self.checkpointed.store(seen.last(), Ordering::SeqCst);
        let (mut sealed, mut compressed) = (None, 0);
        if seal {
            sealed = self.journal.rotate().await?;
            let journal = self.data_dir.join("journal");
            compressed =
                tokio::task::spawn_blocking(move || crate::journal::segments::compress(&journal))
                    .await
                    .expect("compression thread panicked")?;
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

    /// Attaches a job's tasks: from the store when they match the journal's
    /// digest, else computed off the async threads (and stored). A job
    /// planned for the first time gets its JobPlanned record. True when
    /// the tasks were computed.
    async fn plan_job(
        &self,
        id: u64,
        spec: PlanSpec,
        planned: Option<(u64, u64)>,
    ) -> Result<bool, CoordError> {
        let derived = Plan::new(spec)?.derived_tasks().is_some();
        if let (Some((count, want)), false) = (planned, derived) {
            let stored = self.store.table(id).map(TaskList::Listed);
            if let Some(tasks) = stored.filter(|t| t.count() == count && t.matches(want)) {
                self.lock().attach_tasks(id, tasks)?;
                self.bump();
                return Ok(false);
            }
            tracing::info!(job = id, "task list not in the store; re-planning");
        }
        let stop = Arc::new(AtomicBool::new(self.stopping.load(Ordering::Relaxed)));
        self.planning_flags().insert(id, Arc::clone(&stop));
        let scheduled = tokio::task::spawn_blocking(move || {
            Plan::new(spec).and_then(|p| TaskList::of(&p, &stop))
        })
        .await;
        self.planning_flags().remove(&id);
        let tasks = scheduled.expect("planning thread panicked")?;
        // A listed plan is kept in the store (a derived one needs nothing).
        if let TaskList::Listed(table) = &tasks {
            match self.writes.get() {
                Some(w) => w.table(id, table.clone()),
                // Start-up: nothing else uses the store yet.
                None => self.store.put_table(id, table)?,
            }
        }
        if planned.is_none() {
            self.write(rec(Record::JobPlanned(v1::JobPlanned {
                job_id: id,
                tasks: tasks.count(),
                digest: tasks.digest(),
            })))
            .await?;
        }
        self.lock().attach_tasks(id, tasks)?;
        self.bump();
        Ok(true)
    }

    /// Re-derives every job's totals from its result rows, and rewrites
    /// store rows that disagree with the journal. With `journaled` (every
    /// task with a result record: the whole journal was replayed), also
    /// checks every row of the store against it; after a checkpoint that
    /// full scan is left to the audit, so that a start-up stays short.
    fn verify(
        &self,
        journaled: Option<&std::collections::HashSet<(u64, u64)>>,
    ) -> Result<(), CoordError> {
        let state = self.lock();
        let mut repaired = 0;
        for job in state.jobs() {
            let mut sum = Tally::default();
            for (&task, r) in job.results() {
                sum.merge(&r.tally).map_err(|e| CoordError::Verify {
                    job: job.id,
                    why: e.to_string(),
                })?;
                let row = self.store.result(job.id, task);
                if row
                    .as_ref()
                    .and_then(|d| d.result.as_ref())
                    .map(nqueens_proto::tally_from_wire)
                    != Some(r.tally)
                {
                    let mut result = tally_to_wire(&r.tally);
                    result.elapsed_ms = r.elapsed_ms;
                    result.solver_version = r.solver_version.clone();
                    self.store.put_result(&v1::TaskDone {
                        job_id: job.id,
                        task_index: task,
                        result: Some(result),
                        worker_id: r.worker.clone(),
                        lease_id: r.lease_id,
                        unix_ms: r.unix_ms,
                        credential: if r.credential == r.worker {
                            String::new()
                        } else {
                            r.credential.clone()
                        },
                    })?;
                    repaired += 1;
                }
            }
            // Only a ledger holding every result can be re-added here.
            if job.results_complete() && sum != *job.tally() {
                return Err(CoordError::Verify {
                    job: job.id,
                    why: "the job's running totals differ from the sum of its results".into(),
                });
            }
        }
        // A result row is written only after its journal record was
        // fsynced: a row whose record is missing means the journal lost
        // acknowledged results (cut, or restored from an older copy).
        // Nothing is deleted; the operator decides.
        let Some(journaled) = journaled else {
            if repaired > 0 {
                tracing::warn!(
                    rows = repaired,
                    "store rows different from the journal were rewritten"
                );
            }
            return Ok(());
        };
        let keys = self.store.result_keys();
        let lost: Vec<&(u64, u64)> = keys.iter().filter(|k| !journaled.contains(k)).collect();
        if let Some(&&(job, task)) = lost.first() {
            return Err(CoordError::Verify {
                job,
                why: format!(
                    "the store holds a result for task {task} (and {} more rows) that the journal does not have: \
                     the journal lost acknowledged results (was it cut, or restored from an older copy?). \
                     Nothing was changed. Restore the journal from a backup; or, accepting the loss, move \
                     {} aside (it is rebuilt from the journal) and start again",
                    lost.len() - 1,
                    self.data_dir.join("store").display()
                ),
            });
        }
        // Rows of results the journal has but does not count (a
        // quarantined worker's) go: the journal keeps the result.
        for (job, task) in keys {
            if !state.job(job).is_ok_and(|j| j.counted(task)) {
                self.store.remove_result(job, task)?;
                repaired += 1;
            }
        }
        if repaired > 0 {
            tracing::warn!(
                rows = repaired,
                "store rows missing from, or different from, the journal were rewritten"
            );
        }
        Ok(())
    }

    /// Accepts a job; planning continues in the background.
    pub async fn submit(
        self: &Arc<Self>,
        spec: PlanSpec,
        checking: Checking,
    ) -> Result<JobView, CoordError> {
        // A plan too large to schedule is refused now, with its size,
        // rather than planned without bound.
        let plan = Plan::new(spec)?;
        let plan_listed = plan.derived_tasks().is_none();
        tokio::task::spawn_blocking(move || plan.check_size())
            .await
            .expect("size check panicked")?;
        let max = self.limits().max_tasks;
        if spec.tasks > max && plan_listed {
            return Err(CoordError::TooManyTasks {
                asked: spec.tasks,
                max,
            });
        }
        let _one_at_a_time = self.submit.lock().await;
        let id = self.lock().next_job_id();
        self.write(rec(Record::JobSubmitted(v1::JobSubmitted {
            job_id: id,
            plan: Some((&spec).into()),
            unix_ms: self.now_ms(),
            redundancy: checking.redundancy,
            verify_fraction: checking.fraction,
            cross_device: checking.cross_device,
        })))
        .await?;
        tracing::info!(job = id, n = spec.n.get(), strategy = ?spec.strategy, depth = spec.depth, tasks = spec.tasks, redundancy = checking.redundancy, cross_device = checking.cross_device, "job submitted");
        self.plan_in_background(id, spec);
        self.job(id)
    }

    /// Plans a job on a blocking thread; cancel and shutdown stop it.
    fn plan_in_background(self: &Arc<Self>, id: u64, spec: PlanSpec) {
        let me = Arc::clone(self);
        tokio::spawn(async move {
            match me.plan_job(id, spec, None).await {
                Ok(_) => {
                    let tasks = me.job(id).map_or(0, |j| j.tasks);
                    tracing::info!(job = id, tasks, "job planned")
                }
                Err(CoordError::Plan(PlanError::Stopped)) => {
                    tracing::info!(
                        job = id,
                        "planning stopped (job cancelled, or shutting down)"
                    )
                }
                Err(e) => tracing::error!(job = id, error = %e, "planning failed"),
            }
        });
    }

    fn planning_flags(&self) -> MutexGuard<'_, std::collections::HashMap<u64, Arc<AtomicBool>>> {
        self.planning.lock().expect("planning lock poisoned")
    }

    /// Whether a job that finishes is audited in the background (on by
    /// default; see [`crate::server::Config::audit_when_done`]).
    pub fn set_audit_when_done(&self, on: bool) {
        self.audit_when_done.store(on, Ordering::Relaxed);
    }

    /// Stops every plan being computed, and any later one (at shutdown:
    /// a plan can take minutes, and nothing of it is durable until done).
    pub fn stop_planning(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        for flag in self.planning_flags().values() {
            flag.store(true, Ordering::Relaxed);
        }
    }

    /// Whether job `id` is being planned now.
    pub fn is_planning(&self, id: u64) -> bool {
        self.planning_flags().contains_key(&id)
    }

    /// Event counters, for metrics.
    pub fn counters(&self) -> crate::state::Counters {
        self.lock().counters
    }

    pub fn job(&self, id: u64) -> Result<JobView, CoordError> {
        let state = self.lock();
        let mut view = state.job(id)?.view();
        view.waiting_for = state.waiting_for(id, self.now_ms());
        Ok(view)
    }

    /// A page of job `id`'s counted results from task `from` on, in task
    /// order, each with its task (`None` while the job is not planned),
    /// read from the store: call [`Coordinator::sync_store`] first so that
    /// every result counted so far is there.
    pub fn export_page(
        &self,
        id: u64,
        from: u64,
        max: usize,
    ) -> Result<Vec<(Option<Task>, v1::TaskDone)>, CoordError> {
        self.lock().job(id)?;
        let rows = self.store.results_from(id, from, max);
        let state = self.lock();
        let job = state.job(id)?;
        Ok(rows
            .into_iter()
            .map(|d| (job.task(d.task_index), d))
            .collect())
    }

    /// Writes every result row the store's thread holds; returns the
    /// journal records whose rows are all in the store.
    pub async fn sync_store(&self) -> u64 {
        self.store_writer().sync().await
    }

    pub fn jobs(&self) -> Vec<JobView> {
        let state = self.lock();
        let now = self.now_ms();
        state
            .jobs()
            .map(|j| JobView {
                waiting_for: state.waiting_for(j.id, now),
                ..j.view()
            })
            .collect()
    }

    /// A worker's public tag (see [`crate::state::State::worker_tag`]).
    pub fn worker_tag(&self, worker: &str) -> String {
        self.lock().worker_tag(worker)
    }

    /// Every worker with the leases it holds now (count, and the oldest).
    pub fn workers(&self) -> Vec<(WorkerInfo, usize, Option<LeaseRef>)> {
        let s = self.lock();
        let mut held: std::collections::HashMap<&str, (usize, Option<LeaseRef>)> =
            std::collections::HashMap::new();
        for (lease, worker) in s.all_leases() {
            let h = held.entry(worker).or_default();
            h.0 += 1;
            h.1.get_or_insert(lease);
        }
        s.workers()
            .map(|w| {
                let (n, first) = held.get(w.id.as_str()).copied().unwrap_or_default();
                (w.clone(), n, first)
            })
            .collect()
    }

    /// Deletes a done or cancelled job (durably): it leaves the state, its
    /// rows and task list leave the store. Returns its counted results.
    pub async fn delete(&self, id: u64) -> Result<u64, CoordError> {
        let view = self.lock().job(id)?.view();
        if !matches!(view.state, JobState::Done | JobState::Cancelled) {
            return Err(StateError::NotDeletable {
                job: id,
                state: view.state,
            }
            .into());
        }
        self.write(rec(Record::JobDeleted(v1::JobDeleted {
            job_id: id,
            unix_ms: self.now_ms(),
        })))
        .await?;
        self.store_writer().delete_job(id);
        tracing::info!(job = id, results = view.done, total = %view.total, unique = %view.unique, "job deleted");
        Ok(view.done)
    }

    /// Puts a job's dead tasks back in its schedule (durably): refused for a
    /// cancelled job, or one without dead tasks.
    pub async fn retry(&self, id: u64) -> Result<JobView, CoordError> {
        let view = self.lock().job(id)?.view();
        if view.state == JobState::Cancelled {
            return Err(StateError::Finished {
                job: id,
                state: view.state,
                action: "retried",
            }
            .into());
        }
        if view.dead == 0 {
            return Err(StateError::NothingToRetry { job: id }.into());
        }
        self.write(rec(Record::TasksRetried(v1::TasksRetried {
            job_id: id,
            unix_ms: self.now_ms(),
        })))
        .await?;
        tracing::info!(job = id, tasks = view.dead, "dead tasks retried");
        self.job(id)
    }

    /// Pauses, resumes or cancels a job.
    pub async fn set_state(&self, id: u64, to: JobState) -> Result<JobView, CoordError> {
        let now = self.lock().job(id)?.state();
        let action = match to {
            JobState::Paused => "paused",
            JobState::Running => "resumed",
            _ => "cancelled",
        };
        if matches!(now, JobState::Cancelled | JobState::Done) {
            return Err(StateError::Finished {
                job: id,
                state: now,
                action,
            }
            .into());
        }
        let wire = match to {
            JobState::Paused => v1::JobState::Paused,
            JobState::Running => v1::JobState::Running,
            _ => v1::JobState::Cancelled,
        };
        self.write(rec(Record::JobState(v1::JobStateChanged {
            job_id: id,
            state: wire as i32,
        })))
        .await?;
        tracing::info!(job = id, "job {action}");
        if to == JobState::Cancelled {
            if let Some(flag) = self.planning_flags().get(&id) {
                flag.store(true, Ordering::Relaxed);
            }
        }
        self.job(id)
    }

    /// Admits a worker id, and ties it to the issued credential that first
    /// uses it, durably (a `WorkerBound` record) before the call is
    /// answered: after a restart no other credential can claim it.
    async fn admit(&self, worker: &str, credential: &str) -> Result<(), CoordError> {
        let new = {
            let mut s = self.lock();
            if s.admit(worker).is_err() {
                // Full: forget one silent worker that left nothing behind.
                let before = self.silent_before(2 * s.limits().lease_ttl_ms);
                s.forget_workers(before, 1);
            }
            s.admit(worker)?;
            s.may_bind(worker, credential)?
        };
        if new {
            self.write(rec(Record::WorkerBound(v1::WorkerBound {
                worker_id: worker.to_string(),
                credential: credential.to_string(),
                unix_ms: self.now_ms(),
            })))
            .await?;
            // A call with another credential may have bound it first.
            self.lock().may_bind(worker, credential)?;
        }
        Ok(())
    }

    /// The time before which a worker silent for `quiet_ms` was last heard
    /// from; 0 (none) until this coordinator has run that long, so that
    /// workers still reconnecting after a restart are not forgotten.
    fn silent_before(&self, quiet_ms: u64) -> u64 {
        let now = self.now_ms();
        match now.saturating_sub(self.started_ms) >= quiet_ms {
            true => now - quiet_ms,
            false => 0,
        }
    }

    /// A worker's description (sent again after every reconnect).
    pub async fn register(
        &self,
        worker: &str,
        credential: &str,
        name: &str,
        host: &str,
        cores: u32,
        version: &str,
    ) -> Result<(), CoordError> {
        self.admit(worker, credential).await?;
        let now = self.now_ms();
        let mut s = self.lock();
        s.admit(worker)?;
        let w = s.touch_worker(worker, now);
        let again = w.registered;
        w.name = name.to_string();
        w.host = host.to_string();
        w.cores = cores;
        w.solver_version = version.to_string();
        w.registered = true;
        w.draining = false;
        match again {
            false => tracing::info!(worker, name, host, cores, version, "worker joined"),
            true => tracing::debug!(worker, "worker registered again"),
        }
        Ok(())
    }

    /// Whether the coordinator has this worker's description (else it
    /// asks the worker to register again).
    pub fn registered(&self, worker: &str) -> bool {
        self.lock().worker(worker).is_some_and(|w| w.registered)
    }

    pub async fn lease(
        &self,
        worker: &str,
        credential: &str,
        max: usize,
    ) -> Result<Vec<Granted>, CoordError> {
        self.admit(worker, credential).await?;
        let now = self.now_ms();
        let g = {
            let mut s = self.lock();
            s.admit(worker)?;
            s.lease(worker, max, now)
        };
        if !g.is_empty() {
            self.bump();
        }
        Ok(g)
    }

    pub async fn heartbeat(
        &self,
        worker: &str,
        credential: &str,
        refs: &[LeaseRef],
        subproblems_done: u64,
        draining: bool,
    ) -> Result<(Vec<LeaseRef>, u64, Vec<LeaseRef>), CoordError> {
        self.admit(worker, credential).await?;
        let now = self.now_ms();
        let mut s = self.lock();
        s.admit(worker)?;
        let beat = s.heartbeat(worker, refs, subproblems_done, now);
        s.touch_worker(worker, now).draining = draining;
        Ok(beat)
    }

    pub async fn release(
        &self,
        worker: &str,
        credential: &str,
        refs: &[LeaseRef],
    ) -> Result<u32, CoordError> {
        self.admit(worker, credential).await?;
        let now = self.now_ms();
        let n = {
            let mut s = self.lock();
            s.admit(worker)?;
            s.release(worker, refs, now)
        };
        self.bump();
        Ok(n)
    }

    /// Stores a result: on disk before this returns `New`.
    pub async fn report(
        &self,
        worker: &str,
        credential: &str,
        r: LeaseRef,
        result: v1::TaskResult,
    ) -> Result<Verdict, CoordError> {
        let tally = nqueens_proto::tally_from_wire(&result);
        self.admit(worker, credential).await?;
        let (checked, credential) = {
            let s = self.lock();
            (
                s.check_report(worker, &r, &tally, result.checksum),
                s.credential_of(worker),
            )
        };
        let verdict = match checked {
            // Counted long ago: compared with the store's row.
            Err(StateError::ResultNotInMemory { job, task }) => {
                let row = self.store_writer().lookup(job, task).await;
                match row.as_ref().and_then(|d| d.result.as_ref()) {
                    Some(stored)
                        if nqueens_proto::tally_from_wire(stored) == tally
                            && stored.checksum == result.checksum =>
                    {
                        Verdict::Duplicate
                    }
                    Some(_) => Verdict::Conflict,
                    None => return Err(StateError::ResultNotInMemory { job, task }.into()),
                }
            }
            other => other?,
        };
        let now = self.now_ms();
        let done = || {
            rec(Record::TaskDone(v1::TaskDone {
                job_id: r.job,
                task_index: r.task,
                result: Some(result.clone()),
                worker_id: worker.to_string(),
                lease_id: r.lease_id,
                unix_ms: now,
                credential: credential.clone(),
            }))
        };
        match verdict {
            Verdict::Duplicate => {
                self.lock().note_duplicate();
                Ok(verdict)
            }
            Verdict::AwaitingCheck => Ok(verdict),
            Verdict::NotCounted if self.lock().quarantined(worker) => {
                // Kept in the journal for the audit, never counted.
                tracing::warn!(
                    job = r.job,
                    task = r.task,
                    worker,
                    "result of a quarantined worker: journaled, not counted"
                );
                self.write(done()).await?;
                Ok(Verdict::NotCounted)
            }
            Verdict::NotCounted => Ok(verdict),
            Verdict::New => {
                // A concurrent report may have won meanwhile: `apply` then
                // answers Duplicate or Conflict, and never adds twice.
                let applied = self.write(done()).await?;
                tracing::debug!(job = r.job, task = r.task, worker, "result counted");
                Ok(applied.unwrap_or(Verdict::New))
            }
            Verdict::Conflict => {
                tracing::warn!(
                    job = r.job,
                    task = r.task,
                    worker,
                    "verification conflict: result differs from the stored one"
                );
                self.write(rec(Record::TaskConflict(v1::TaskConflict {
                    job_id: r.job,
                    task_index: r.task,
                    result: Some(result),
                    worker_id: worker.to_string(),
                    unix_ms: now,
                })))
                .await?;
                Ok(Verdict::Conflict)
            }
        }
    }

    /// Expires overdue leases; tasks out of retries are journaled dead.
    pub async fn sweep(&self) -> Result<(), CoordError> {
        let now = self.now_ms();
        let forget_before = self.silent_before(crate::state::FORGET_AFTER_MS);
        let (expired, (lost, quarantined)) = {
            let mut s = self.lock();
            let ttl = s.limits().lease_ttl_ms;
            s.forget_workers(forget_before, usize::MAX);
            (s.expire(now), s.workers_news(now.saturating_sub(ttl)))
        };
        self.bump();
        for w in lost {
            tracing::warn!(worker = %w.id, name = %w.name, host = %w.host, last_seen_ms = w.last_seen_ms, "worker lost: not heard from within a lease's lifetime");
        }
        for w in quarantined {
            tracing::warn!(worker = %w.id, name = %w.name, host = %w.host, conflicts = w.conflicts, "worker quarantined: a result of it was contradicted; it gets no more work and its results are not counted");
        }
        let mut dying = Vec::new();
        for e in expired {
            match e.dying {
                false => {
                    tracing::info!(job = e.job, task = e.task, worker = %e.worker, "lease expired; task requeued after a backoff")
                }
                true => dying.push((e.job, e.task, e.worker)),
            }
        }
        for (job, task, worker) in dying {
            tracing::warn!(job, task, %worker, "lease expired and the task is out of retries: marked dead");
            self.write(rec(Record::TaskDead(v1::TaskDead {
                job_id: job,
                task_index: task,
                reason: "out of retries: every lease expired".into(),
            })))
            .await?;
        }
        Ok(())
    }
}
