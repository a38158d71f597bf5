//! Starting from a data directory: the lock, the marks of what was
//! acknowledged, the journal replayed after the latest checkpoint, every
//! plan checked against its digest, the totals verified.

use super::lost;
use super::*;
use crate::journal::{repair, Replay};
use std::collections::HashSet;

/// How far records were acknowledged, by the marks a start finds.
pub(super) struct Marks {
    /// The last record the journal's writer had fsynced (its commit mark,
    /// `journal::mark`).
    pub(super) journal: u64,
    /// The last record whose row the store holds.
    store: u64,
    /// The last record the latest readable checkpoint holds.
    checkpoint: u64,
    /// That checkpoint's boot epoch.
    pub(super) epoch: u64,
}

impl Marks {
    pub(super) fn acknowledged(&self) -> u64 {
        self.journal.max(self.store).max(self.checkpoint)
    }

    /// The refusal for a journal that ends at `last` (with `torn` bytes of
    /// a cut-short record after it).
    fn behind(&self, path: PathBuf, last: u64, torn: u64) -> CoordError {
        let marks = [
            (self.journal, "the journal's commit mark"),
            (self.store, "the store"),
            (self.checkpoint, "the checkpoint"),
        ];
        let by: Vec<&str> = marks
            .iter()
            .filter(|(m, _)| *m > last)
            .map(|(_, name)| *name)
            .collect();
        let by = match by.as_slice() {
            [one] => format!("{one} holds"),
            [rest @ .., last] => format!("{} and {last} hold", rest.join(", ")),
            [] => unreachable!("a journal behind no mark is not behind"),
        };
        CoordError::JournalBehind {
            path,
            last,
            torn: match torn {
                0 => String::new(),
                n => format!(" (then {n} bytes of a cut-short record)"),
            },
            by,
            acknowledged: self.acknowledged(),
            missing: self.acknowledged() - last,
        }
    }
}

/// The data directory's secret for lease ids (`DIR/lease.key`, 32 random
/// bytes, owner-only), made on first start.
pub(crate) fn lease_key(dir: &Path) -> Result<crate::state::LeaseKey, String> {
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

/// Takes the data directory's lock: an exclusive flock on the directory
/// itself, held while this process lives, so removing a file cannot
/// release it.
pub(crate) fn lock_dir(data_dir: &Path) -> Result<File, CoordError> {
    let dir_err = |why: String| CoordError::DataDir {
        path: data_dir.to_path_buf(),
        why,
    };
    if !data_dir.exists() {
        let parent = match data_dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if !parent.is_dir() {
            return Err(dir_err(format!(
                "it does not exist, nor does {}: only the last folder of the path is made, so \
                 that a mistyped path starts no empty run (create the folders above it first)",
                parent.display()
            )));
        }
        tracing::info!(
            path = %data_dir.display(),
            "made a new, empty data directory: no jobs, results or tokens yet (if this \
             coordinator ran before, it was on another directory)"
        );
    }
    crate::owner_only::create_dir(data_dir)
        .map_err(|e| dir_err(format!("cannot create it: {e}")))?;
    let lock =
        File::open(data_dir).map_err(|e| dir_err(format!("cannot open it to lock it: {e}")))?;
    lock.try_lock().map_err(|e| {
        dir_err(format!(
            "another process holds its lock (another coordinator, or `solve --state`, on the same \
             directory): stop that one first, or use another directory (a coordinator's --data-dir, \
             `solve`'s --state) ({e})"
        ))
    })?;
    Ok(lock)
}

/// The data directory's lock held by a coordinator: released when the
/// coordinator's last handle goes (a call's task may hold one for a moment
/// after the server ends), which [`DirLock::released`] tells.
pub(crate) struct DirLock {
    file: Option<File>,
    released: tokio::sync::watch::Sender<bool>,
}

impl DirLock {
    pub(crate) fn new(file: File) -> DirLock {
        DirLock {
            file: Some(file),
            released: tokio::sync::watch::channel(false).0,
        }
    }

    /// Turns true once the lock is released.
    pub(crate) fn released(&self) -> tokio::sync::watch::Receiver<bool> {
        self.released.subscribe()
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Closing the directory's handle releases its flock.
        drop(self.file.take());
        self.released.send_replace(true);
    }
}

/// What a start finds on disk: the store, the checkpoint it may start
/// from, and the journal records after it.
struct Found {
    store: Store,
    store_opened: Opened,
    checkpoint: Option<checkpoint::Loaded>,
    /// Boots recorded only in a checkpoint (maybe one set aside).
    epoch: u64,
    journal: Journal,
    replay: Replay,
}

/// Opens the store, the latest readable checkpoint and the journal, and
/// checks the journal reaches every acknowledged record; a journal that
/// ends before stops the start unless `accept_lost` is exactly the number
/// of records it lacks (then the checkpoints and the store are set aside).
fn find(data_dir: &Path, accept_lost: Option<u64>, io: IoMode) -> Result<Found, CoordError> {
    let (store, store_opened) = Store::open(&data_dir.join("store"))?;
    let loaded = checkpoint::load(data_dir);
    // How far results were acknowledged, by the store's and the latest
    // readable checkpoint's own marks: the journal must reach it.
    let marks = Marks {
        journal: crate::journal::mark::read(&data_dir.join("journal")),
        store: store.caught_up(),
        checkpoint: loaded.as_ref().map_or(0, |c| c.seen.last()),
        epoch: loaded.as_ref().map_or(0, |c| c.state.epoch()),
    };
    // A checkpoint is used only if the store holds the rows of every
    // record it covers (it was written after they were synced; a store
    // rebuilt since is not): the records before it are not read.
    let journal_path = data_dir.join("journal");
    // With the flag, the whole journal is read first: records lost inside
    // it, not only off its end, are what it may accept.
    if let Some(accept) = accept_lost {
        let survey = repair::survey(&journal_path)?;
        if survey.damaged() || marks.acknowledged() > survey.last() {
            let (store, store_opened, acknowledged) =
                lost::rebuild(data_dir, survey, &marks, accept, store)?;
            let (journal, replay) = Journal::open_with(&journal_path, 0, acknowledged, io)?;
            return Ok(Found {
                store,
                store_opened,
                checkpoint: None,
                epoch: marks.epoch,
                journal,
                replay,
            });
        }
    }
    let checkpoint = loaded.filter(|c| {
        let covered = c.seen.last();
        if marks.store < covered {
            tracing::warn!(checkpoint = %c.path.display(), covered, store_caught_up = marks.store, "the store is behind the checkpoint (rebuilt or restored?); replaying the whole journal");
        }
        marks.store >= covered
    });
    let after = checkpoint.as_ref().map_or(0, |c| c.seen.upto);
    let (journal, replay) = match Journal::open_with(&journal_path, after, marks.acknowledged(), io)
    {
        // (With the flag, a journal behind was rebuilt above.)
        Err(JournalError::Behind { last, torn, .. }) => {
            return Err(marks.behind(journal_path, last, torn))
        }
        Err(
            e @ (JournalError::Corrupt { .. }
            | JournalError::MissingSegment { .. }
            | JournalError::MissingRecords { .. }
            | JournalError::DamagedSegment { .. }),
        ) => {
            let survey = match repair::survey(&journal_path) {
                Ok(s) if s.damaged() => s,
                Err(
                    c @ (JournalError::Conflicting { .. }
                    | JournalError::Beyond { .. }
                    | JournalError::Foreign { .. }
                    | JournalError::Newer { .. }),
                ) => return Err(c.into()),
                _ => return Err(e.into()),
            };
            let behind = marks.acknowledged().saturating_sub(survey.last());
            return Err(lost::refusal(e.to_string(), &journal_path, &survey, behind));
        }
        other => other?,
    };
    Ok(Found {
        store,
        store_opened,
        checkpoint,
        epoch: marks.epoch,
        journal,
        replay,
    })
}

/// What replaying the journal gave besides the state.
struct Replayed {
    /// Records applied (the others came with the checkpoint).
    replayed: u64,
    /// Without a checkpoint: every task with a result record, counted or
    /// not, for the store check.
    journaled: Option<HashSet<(u64, u64)>>,
}

/// Applies the records a checkpoint (`applied`) does not hold to `state`,
/// and gives the store the rows it lacks (those after its mark), then its
/// new mark and the removal of deleted jobs' rows.
fn replay_into(
    state: &mut State,
    applied: Option<&Seen>,
    replay: &Replay,
    store: &Store,
) -> Result<Replayed, CoordError> {
    let caught_up = store.caught_up();
    let mut journaled = applied.is_none().then(HashSet::new);
    let (mut rows, mut replayed) = (Vec::new(), 0);
    for (seq, r) in (replay.first..).zip(&replay.records) {
        // Applied before the checkpoint was taken: its effect is in it.
        if applied.is_some_and(|a| a.contains(seq)) {
            continue;
        }
        replayed += 1;
        let verdict = state.apply(r)?;
        let Event::TaskDone(d) = r else { continue };
        if let Some(j) = journaled.as_mut() {
            j.insert((d.job, d.task));
        }
        // From a checkpoint, only counted results get a row (the store
        // check that removes the others needs every record).
        let row = journaled.is_some() || matches!(verdict, Some(Verdict::New));
        if seq > caught_up && row {
            rows.push(d.clone());
        }
        if rows.len() == 1 << 16 {
            store.add_results(&rows, None)?;
            rows.clear();
        }
    }
    store.add_results(&rows, Some(replay.last))?;
    // Rows of deleted jobs that a crash left behind (idempotent).
    for id in state.deleted_jobs() {
        store.delete_job(id)?;
    }
    Ok(Replayed {
        replayed,
        journaled,
    })
}

/// Jobs planned before (their size was accepted then), with their
/// journaled plan, and jobs never planned (planned once serving, as at
/// submit, so that a long plan cannot keep the coordinator down).
type Planned = Vec<(u64, PlanSpec, (u64, u64))>;
fn plans_to_make(state: &State) -> (Planned, Vec<(u64, PlanSpec)>) {
    let (mut planned, mut unplanned) = (Vec::new(), Vec::new());
    for j in state.jobs() {
        match (j.planned(), j.state()) {
            (Some(p), _) => planned.push((j.id, j.spec, p)),
            (None, JobState::Cancelled) => {}
            (None, _) => unplanned.push((j.id, j.spec)),
        }
    }
    (planned, unplanned)
}

/// Where a start's time went.
struct Timings {
    started: std::time::Instant,
    read: std::time::Duration,
    replayed: std::time::Duration,
}

impl Coordinator {
    /// Opens the data directory, whose lock the caller holds (`lock`, from
    /// `lock_dir`, taken before it listens): replays the journal,
    /// re-plans every job (checked against the journal's digest), verifies
    /// the totals, and records a new boot.
    ///
    /// A journal that ends before what was acknowledged stops the start,
    /// unless `accept_lost` is exactly the number of records it lacks.
    /// `io` says where the disk work runs from then on.
    pub async fn open(
        lock: File,
        data_dir: &Path,
        limits: Limits,
        clock: Arc<dyn Clock>,
        accept_lost: Option<u64>,
        io: IoMode,
    ) -> Result<Arc<Coordinator>, CoordError> {
        let started = std::time::Instant::now();
        let key = lease_key(data_dir).map_err(|why| CoordError::DataDir {
            path: data_dir.to_path_buf(),
            why,
        })?;
        let found = find(data_dir, accept_lost, io)?;
        let read = started.elapsed();
        let from_checkpoint = found.checkpoint.as_ref().map(|c| (c.seen.upto, c.bytes));
        let (mut state, applied) = match found.checkpoint {
            Some(c) => (c.state.with_limits(limits), Some(c.seen)),
            None => (State::new(limits), None),
        };
        state.set_lease_key(key);
        state.raise_epoch(found.epoch);
        let replayed = replay_into(&mut state, applied.as_ref(), &found.replay, &found.store)?;
        let timings = Timings {
            started,
            read,
            replayed: started.elapsed(),
        };
        let (planned, unplanned) = plans_to_make(&state);
        let records = found.replay.last;
        let (changed, _) = tokio::sync::watch::channel(0);
        let core = Arc::new_cyclic(|me| Coordinator {
            me: me.clone(),
            recovery: std::sync::OnceLock::new(),
            state: Mutex::new(state),
            applied: Mutex::new(Seen::upto(records)),
            checkpointed: AtomicU64::new(from_checkpoint.map_or(0, |c| c.0)),
            journal: found.journal,
            store: found.store,
            store_opened: found.store_opened,
            writes: std::sync::OnceLock::new(),
            started_ms: clock.now_ms(),
            forgot_ms: AtomicU64::new(clock.now_ms()),
            clock,
            changed,
            submit: tokio::sync::Mutex::new(()),
            data_dir: data_dir.to_path_buf(),
            planning: Mutex::default(),
            stopping: AtomicBool::new(false),
            closing: tokio::sync::watch::channel(false).0,
            audit_when_done: AtomicBool::new(true),
            io,
            recording: Default::default(),
            keeping: Default::default(),
            binding: Default::default(),
            lock: DirLock::new(lock),
        });
        let mut recovery = Recovery {
            records,
            replayed: replayed.replayed,
            checkpoint_upto: from_checkpoint.map(|c| c.0),
            replanned: 0,
            ms: 0,
        };
        for (id, spec, p) in planned {
            recovery.replanned += u64::from(core.plan_job(id, spec, Some(p)).await?);
        }
        core.resume(
            recovery,
            replayed.journaled.as_ref(),
            &timings,
            from_checkpoint,
            found.replay.truncated,
        )
        .await?;
        for (id, spec) in unplanned {
            core.plan_in_background(id, spec);
        }
        Ok(core)
    }

    /// The last steps of a start, once the state is replayed and the jobs
    /// planned: the totals verified, the store's writer started, the boot
    /// journaled, and what recovery did logged and kept.
    async fn resume(
        &self,
        mut recovery: Recovery,
        journaled: Option<&HashSet<(u64, u64)>>,
        t: &Timings,
        from_checkpoint: Option<(u64, u64)>,
        torn_bytes: u64,
    ) -> Result<(), CoordError> {
        let verifying = std::time::Instant::now();
        self.verify(journaled)?;
        let verified = verifying.elapsed();
        self.store.flush();
        let _ = self.writes.set(match self.io {
            IoMode::Threads => StoreWriter::spawn(self.store.clone(), recovery.records),
            IoMode::Inline => StoreWriter::inline(self.store.clone(), recovery.records),
        });
        let epoch = self.lock().epoch() + 1;
        self.write(Event::Boot {
            epoch,
            unix_ms: self.clock.now_ms(),
        })
        .await?;
        // Where a restart's time goes: reading the journal, replaying it
        // (state and store rows), checking the store against it.
        let ms = |d: std::time::Duration| d.as_millis() as u64;
        recovery.ms = ms(t.started.elapsed());
        tracing::info!(
            dir = %self.data_dir.display(),
            records = recovery.records,
            replayed = recovery.replayed,
            checkpoint_upto = from_checkpoint.map(|c| c.0),
            checkpoint_bytes = from_checkpoint.map(|c| c.1),
            replanned = recovery.replanned,
            torn_bytes,
            epoch,
            jobs = self.lock().jobs().count(),
            read_ms = ms(t.read),
            replay_ms = ms(t.replayed - t.read),
            verify_ms = ms(verified),
            ms = recovery.ms,
            "coordinator state restored"
        );
        let _ = self.recovery.set(recovery);
        Ok(())
    }

    /// Re-derives every job's totals from its result rows, and rewrites
    /// store rows that disagree with the journal. With `journaled` (every
    /// task with a result record: the whole journal was replayed), also
    /// checks every row of the store against it; after a checkpoint that
    /// full scan is left to the audit, so that a start-up stays short.
    pub(super) fn verify(&self, journaled: Option<&HashSet<(u64, u64)>>) -> Result<(), CoordError> {
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
                if row.map(|d| d.outcome.tally) != Some(r.tally) {
                    self.store.put_result(&Done::of_stored(job.id, task, r))?;
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
}
