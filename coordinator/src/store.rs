//! The sled store: each job's task list (so a restart need not re-plan, which
//! takes minutes at N=27) and its result rows, queryable without the journal.
//!
//! The journal stays the source of truth. sled 0.34's flush is not a full
//! fsync and a killed process can leave a directory sled will not open, so:
//! at every start every journal record is applied again (idempotently) to
//! catch up; rows that disagree with the journal are rewritten; a directory
//! that will not open is moved aside and rebuilt from the journal and the
//! plans. Nothing here is needed for exactness, only for speed.
//!
//! After start-up one thread ([`StoreWriter`]) makes every write, with
//! sled's own background flusher off: sled is then used from one thread at
//! a time, and a slow or stuck sled (0.34 has known deadlocks under
//! concurrent use) can never hold up an acknowledgement.

use crate::rows::{self, Edit, Reporter};
use crate::seen::Seen;
use crate::state::Done;
use nqueens_common::plan::table::{Run, TaskTable};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A store problem (reported, never fatal to counting).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store {path}: {source}")]
    Sled { path: PathBuf, source: sled::Error },
    #[error(
        "store {path} cannot be opened: {source}. This is the machine's condition (disk space, \
         quota, file-size limit, permissions, open files), not damage: nothing was moved or changed. \
         Fix it and start again"
    )]
    Unusable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("store {path}: cannot move the damaged store aside: {source}")]
    Move {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the store's thread has written the rows of records up to {synced} only, and {needed} are needed: an earlier store write failed (see the log). Every result is in the journal: once the disk takes writes again, restart the coordinator, which rebuilds the store from the journal")]
    Behind { synced: u64, needed: u64 },
    #[error("store {path}: cannot fsync its files: {source}")]
    Sync {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// How the store was found at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    Existing,
    /// It would not open; the old directory was moved here and a new one made.
    Rebuilt {
        moved_to: PathBuf,
        reason: String,
    },
}

#[derive(Clone)]
pub struct Store {
    path: PathBuf,
    db: sled::Db,
    tasks: sled::Tree,
    /// Result rows, [`rows::BLOCK`] tasks to a value (see [`crate::rows`]).
    results: sled::Tree,
    /// Who reported results: number → [`Reporter`], and in memory both ways.
    reporters: sled::Tree,
    known: Arc<Mutex<Reporters>>,
}

#[derive(Default)]
struct Reporters {
    by_id: Vec<Reporter>,
    ids: HashMap<Reporter, u32>,
}

/// The layout of task lists and result rows; a store of another one has
/// them dropped at open (the journal's catch-up rewrites the rows, the
/// task lists are planned again).
const ROWS_FORMAT: &[u8] = b"blocks-v2";

/// The key, in the results tree, of the number of journal records whose
/// rows are all in the store (written in the same batch as those rows, so
/// sled's crash recovery keeps the two consistent).
const CAUGHT_UP: &[u8; 8] = b"caughtup";

/// The key of a task's block.
fn block_key(job: u64, task: u64) -> [u8; 16] {
    key(job, task / rows::BLOCK)
}

/// A result row's change: set (first result wins, or replace) or remove.
enum Change {
    Add(Done),
    Put(Done),
    Remove(u64, u64),
}

impl Change {
    fn at(&self) -> (u64, u64) {
        match self {
            Change::Add(d) | Change::Put(d) => (d.job, d.task),
            Change::Remove(job, task) => (*job, *task),
        }
    }
}

fn key(job: u64, index: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&job.to_be_bytes());
    k[8..].copy_from_slice(&index.to_be_bytes());
    k
}

/// Runs of a task table per stored value (a key per task cost sled
/// gigabytes of memory at a million tasks; a table has a run per group).
const RUNS_PER_VALUE: usize = 4096;

/// sled's page cache: bounded, so the coordinator's memory does not grow
/// with the store (sled's default is 1 GiB).
const CACHE_BYTES: u64 = 64 << 20;

/// sled without its background flusher: [`StoreWriter`] flushes.
///
/// A store closed a moment ago may still hold its file lock while sled's
/// own threads finish with it (a restart in the same process, as tests and
/// `solve --state` do): that is waited for, up to [`LOCK_WAIT`], instead of
/// counting the store as damaged and rebuilding it from the journal.
fn open_sled(path: &Path) -> sled::Result<sled::Db> {
    // Made here, not by sled, so that it is the owner's only.
    crate::owner_only::create_dir_all(path)?;
    let started = std::time::Instant::now();
    loop {
        let opened = sled::Config::new()
            .path(path)
            .flush_every_ms(None)
            .cache_capacity(CACHE_BYTES)
            .open();
        match opened {
            Err(sled::Error::Io(e))
                if e.to_string().contains("could not acquire lock")
                    && started.elapsed() < LOCK_WAIT =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// An I/O error that comes from the machine's condition (space, quota,
/// limits, permissions), not from damage to the store's files.
fn of_the_machine(e: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        e.kind(),
        K::StorageFull
            | K::QuotaExceeded
            | K::FileTooLarge
            | K::ReadOnlyFilesystem
            | K::PermissionDenied
            | K::OutOfMemory
    ) || matches!(e.raw_os_error(), Some(23 | 24)) // ENFILE, EMFILE
}

/// Whether a file can be written and synced beside the store (64 KiB): if
/// not, a store that will not open is not called damaged.
fn can_write_beside(store: &Path) -> std::io::Result<()> {
    let probe = store.with_extension("probe");
    let wrote = File::create(&probe).and_then(|mut f| {
        std::io::Write::write_all(&mut f, &[0u8; 64 << 10])?;
        f.sync_all()
    });
    let _ = std::fs::remove_file(&probe);
    match wrote {
        Err(e) if of_the_machine(&e) => Err(e),
        _ => Ok(()),
    }
}

/// How long a store's lock, held by a handle being closed, is waited for.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// How long sled may take to open (recover) a store before it counts as
/// damaged. Rebuilding from the journal is always possible.
const OPEN_WAIT: Duration = Duration::from_secs(60);

/// Runs `f` on its own thread and waits at most `wait`: a damaged
/// directory can make sled 0.34 panic, fail, or (rarely) never return. A
/// thread that never returns is left behind with the old directory, which
/// is then moved aside.
fn within<T: Send + 'static>(
    wait: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("store-open".into())
        .spawn(move || {
            let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
        })
        .map_err(|e| format!("cannot start a thread to open it: {e}"))?;
    match rx.recv_timeout(wait) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(_)) => Err("sled panicked while opening it".into()),
        Err(_) => Err(format!("sled did not open it within {wait:?}")),
    }
}

impl Store {
    /// Opens the store, moving a damaged one aside and starting afresh.
    pub fn open(path: &Path) -> Result<(Store, Opened), StoreError> {
        let sled_err = |source| StoreError::Sled {
            path: path.to_path_buf(),
            source,
        };
        let p = path.to_path_buf();
        let attempt = match within(OPEN_WAIT, move || open_sled(&p)) {
            Ok(Err(sled::Error::Io(e))) if of_the_machine(&e) => {
                return Err(StoreError::Unusable {
                    path: path.to_path_buf(),
                    source: e,
                })
            }
            other => other.and_then(|r| r.map_err(|e| e.to_string())),
        };
        let (db, opened) = match attempt {
            Ok(db) => (db, Opened::Existing),
            Err(reason) => {
                // A panic or a hang may hide the same conditions.
                if let Err(e) = can_write_beside(path) {
                    return Err(StoreError::Unusable {
                        path: path.to_path_buf(),
                        source: e,
                    });
                }
                let moved_to = path.with_extension(format!("damaged-{}", std::process::id()));
                tracing::warn!(store = %path.display(), %reason, moved_to = %moved_to.display(), "store will not open; rebuilding it from the journal");
                std::fs::rename(path, &moved_to).map_err(|source| StoreError::Move {
                    path: path.to_path_buf(),
                    source,
                })?;
                let db = open_sled(path).map_err(sled_err)?;
                (db, Opened::Rebuilt { moved_to, reason })
            }
        };
        // Task tables as runs; the tree of task lists one task at a time
        // (before tables) is dropped: a missing table is re-planned.
        db.drop_tree("tasks").map_err(sled_err)?;
        let tasks = db.open_tree("task-tables").map_err(sled_err)?;
        let results = db.open_tree("results").map_err(sled_err)?;
        let reporters = db.open_tree("reporters").map_err(sled_err)?;
        if db.get("rows").map_err(sled_err)?.as_deref() != Some(ROWS_FORMAT) {
            // Task lists are re-planned when missing.
            tasks.clear().map_err(sled_err)?;
            results.clear().map_err(sled_err)?;
            reporters.clear().map_err(sled_err)?;
            db.insert("rows", ROWS_FORMAT).map_err(sled_err)?;
        }
        let mut known = Reporters::default();
        for kv in reporters.iter() {
            let (k, v) = kv.map_err(sled_err)?;
            let who = Reporter::decode(&v);
            let id = k.as_ref().try_into().ok().map(u32::from_be_bytes);
            match (who, id) {
                (Some(who), Some(id)) if id as usize == known.by_id.len() => {
                    known.ids.insert(who.clone(), id);
                    known.by_id.push(who);
                }
                // A damaged table: drop rows and table, the catch-up
                // rewrites them.
                _ => {
                    results.clear().map_err(sled_err)?;
                    reporters.clear().map_err(sled_err)?;
                    known = Reporters::default();
                    break;
                }
            }
        }
        Ok((
            Store {
                path: path.to_path_buf(),
                db,
                tasks,
                results,
                reporters,
                known: Arc::new(Mutex::new(known)),
            },
            opened,
        ))
    }

    /// The number of a reporter, given one if new.
    fn reporter_id(&self, who: Reporter) -> Result<u32, StoreError> {
        let mut known = self.known.lock().expect("reporters lock");
        if let Some(&id) = known.ids.get(&who) {
            return Ok(id);
        }
        let id = known.by_id.len() as u32;
        self.reporters
            .insert(id.to_be_bytes(), who.encode())
            .map_err(|e| self.err(e))?;
        known.ids.insert(who.clone(), id);
        known.by_id.push(who);
        Ok(id)
    }

    fn reporter(&self, id: u32) -> Option<Reporter> {
        self.known
            .lock()
            .expect("reporters lock")
            .by_id
            .get(id as usize)
            .cloned()
    }

    /// Journal records (from the first) whose rows are all in the store:
    /// a start-up catches up only the ones after.
    pub fn caught_up(&self) -> u64 {
        let v = self.results.get(CAUGHT_UP).ok().flatten();
        v.and_then(|v| Some(u64::from_le_bytes(v.as_ref().try_into().ok()?)))
            .unwrap_or(0)
    }

    /// Applies row changes, each block read and written once; with
    /// `caught_up`, records that number in the same batch.
    fn change(&self, changes: Vec<Change>, caught_up: Option<u64>) -> Result<(), StoreError> {
        let mut by_block: BTreeMap<[u8; 16], Vec<(u16, Edit)>> = BTreeMap::new();
        for c in changes {
            let (job, task) = c.at();
            let edit = match c {
                Change::Add(d) => Edit::Add(rows::encode(&d, self.reporter_id(Reporter::of(&d))?)),
                Change::Put(d) => Edit::Put(rows::encode(&d, self.reporter_id(Reporter::of(&d))?)),
                Change::Remove(..) => Edit::Remove,
            };
            let low = (task % rows::BLOCK) as u16;
            by_block
                .entry(block_key(job, task))
                .or_default()
                .push((low, edit));
        }
        let mut batch = sled::Batch::default();
        if let Some(n) = caught_up {
            batch.insert(CAUGHT_UP, &n.to_le_bytes());
        }
        for (k, edits) in by_block {
            let block = self.results.get(k).map_err(|e| self.err(e))?;
            batch.insert(&k, rows::merge(block.as_deref().unwrap_or_default(), edits));
        }
        self.results.apply_batch(batch).map_err(|e| self.err(e))
    }

    /// Records the rows of many results at once (the first result of a
    /// task wins, as in the journal): the start-up catch-up.
    /// Then, with `caught_up`, records that every journal record up to
    /// that number has its row.
    pub fn add_results(&self, done: &[Done], caught_up: Option<u64>) -> Result<(), StoreError> {
        for chunk in done.chunks(1 << 16) {
            self.change(chunk.iter().cloned().map(Change::Add).collect(), None)?;
        }
        match caught_up {
            Some(n) => self.change(Vec::new(), Some(n)),
            None => Ok(()),
        }
    }

    fn err(&self, source: sled::Error) -> StoreError {
        StoreError::Sled {
            path: self.path.clone(),
            source,
        }
    }

    /// A job's stored task table, if complete and consistent.
    pub fn table(&self, job: u64) -> Option<TaskTable> {
        let mut runs = Vec::new();
        for kv in self.tasks.scan_prefix(job.to_be_bytes()) {
            let (_, v) = kv.ok()?;
            if v.len() % Run::BYTES != 0 {
                return None;
            }
            for r in v.chunks(Run::BYTES) {
                runs.push(Run::decode(r)?);
            }
        }
        let table = TaskTable::from_runs(runs).ok()?;
        (!table.is_empty()).then_some(table)
    }

    /// Stores a job's task table, `RUNS_PER_VALUE` runs to a value, in
    /// place of any table it had.
    pub fn put_table(&self, job: u64, table: &TaskTable) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for k in self.tasks.scan_prefix(job.to_be_bytes()).keys() {
            batch.remove(k.map_err(|e| self.err(e))?);
        }
        for (i, chunk) in table.runs().chunks(RUNS_PER_VALUE).enumerate() {
            let value: Vec<u8> = chunk.iter().flat_map(Run::encode).collect();
            batch.insert(&key(job, i as u64), value);
        }
        self.tasks.apply_batch(batch).map_err(|e| self.err(e))
    }

    /// Removes every row and the task list of job `job`.
    pub fn delete_job(&self, job: u64) -> Result<(), StoreError> {
        for tree in [&self.results, &self.tasks] {
            let mut batch = sled::Batch::default();
            for k in tree
                .range(key(job, 0)..key(job.saturating_add(1), 0))
                .keys()
            {
                batch.remove(k.map_err(|e| self.err(e))?);
            }
            tree.apply_batch(batch).map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// A stored result row.
    pub fn result(&self, job: u64, task: u64) -> Option<Done> {
        let block = self.results.get(block_key(job, task)).ok()??;
        let low = (task % rows::BLOCK) as u16;
        let (_, payload) = rows::entries(&block).into_iter().find(|&(t, _)| t == low)?;
        rows::decode(job, task, payload, |id| self.reporter(id))
    }

    /// Replaces a row that disagrees with the journal.
    pub fn put_result(&self, d: &Done) -> Result<(), StoreError> {
        self.change(vec![Change::Put(d.clone())], None)
    }

    /// The result rows of job `job` from task `from` on, in task order, at
    /// most `max` of them (a page of an export).
    pub fn results_from(&self, job: u64, from: u64, max: usize) -> Vec<Done> {
        let mut out = Vec::new();
        let start = block_key(job, from);
        let end = key(job.saturating_add(1), 0);
        for (k, v) in self.results.range(start..end).filter_map(Result::ok) {
            if k.len() != 16 {
                continue;
            }
            let first = u64::from_be_bytes(k[8..].try_into().expect("8 bytes")) * rows::BLOCK;
            for (low, payload) in rows::entries(&v) {
                let task = first + u64::from(low);
                if task < from {
                    continue;
                }
                if let Some(d) = rows::decode(job, task, payload, |id| self.reporter(id)) {
                    out.push(d);
                }
            }
            if out.len() >= max {
                break;
            }
        }
        out
    }

    /// The (job, task) of every result row.
    pub fn result_keys(&self) -> Vec<(u64, u64)> {
        let word = |b: &[u8]| u64::from_be_bytes(b.try_into().expect("8 bytes"));
        let mut out = Vec::new();
        for (k, v) in self.results.iter().filter_map(Result::ok) {
            if k.len() == 16 {
                let (job, first) = (word(&k[..8]), word(&k[8..]) * rows::BLOCK);
                out.extend(
                    rows::entries(&v)
                        .into_iter()
                        .map(|(t, _)| (job, first + u64::from(t))),
                );
            }
        }
        out
    }

    /// Drops a row the journal does not have.
    pub fn remove_result(&self, job: u64, task: u64) -> Result<(), StoreError> {
        self.change(vec![Change::Remove(job, task)], None)
    }

    /// Rows in the store: for checks and tests.
    pub fn result_rows(&self) -> usize {
        self.result_keys().len()
    }

    /// Bytes of the store's directory on disk (for the operator).
    pub fn size_on_disk(&self) -> u64 {
        self.db.size_on_disk().unwrap_or(0)
    }

    /// Flushes sled, then fsyncs every file of its directory and the
    /// directory itself (sled's flush alone is not a full fsync): what was
    /// written before is on disk, so a checkpoint may rely on it.
    pub fn sync(&self) -> Result<(), StoreError> {
        self.db.flush().map_err(|e| self.err(e))?;
        fsync_tree(&self.path).map_err(|source| StoreError::Sync {
            path: self.path.clone(),
            source,
        })
    }

    /// Asks sled to write its buffers (not a durability point: see above).
    pub fn flush(&self) {
        if let Err(e) = self.try_flush() {
            tracing::warn!(error = %e, "store flush failed; the journal still holds everything");
        }
    }

    fn try_flush(&self) -> Result<(), StoreError> {
        self.db.flush().map(drop).map_err(|e| self.err(e))
    }
}

/// An fsync's result where the file may be gone: sled removes files of
/// its own meanwhile (blobs, old segments), and one gone between the
/// listing and its fsync needs none.
fn gone_is_fine(r: std::io::Result<()>) -> std::io::Result<()> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// fsyncs every file under `dir`, and the directories.
fn fsync_tree(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        gone_is_fine(match entry.file_type()?.is_dir() {
            true => fsync_tree(&path),
            false => File::open(&path).and_then(|f| f.sync_all()),
        })?;
    }
    File::open(dir)?.sync_all()
}

/// A write for the store's thread (or a read that must see every write
/// queued before it).
enum Write {
    /// Journal records by number, each with its counted result's row if
    /// it has one.
    Records(Vec<(u64, Option<Done>)>),
    Table(u64, TaskTable),
    Lookup(u64, u64, tokio::sync::oneshot::Sender<Option<Done>>),
    /// A deleted job's rows and task list.
    DeleteJob(u64),
    /// Write what is gathered, flush, and answer with the records caught up.
    Sync(tokio::sync::oneshot::Sender<u64>),
}

/// How often the store's thread asks sled to write its buffers while busy.
const FLUSH_EVERY: Duration = Duration::from_millis(500);
/// How long closing waits for the store's thread to drain.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// The one thread that writes to the store once the coordinator serves.
/// Writes are queued, never waited for: the journal already holds them.
pub struct StoreWriter {
    tx: Mutex<Option<StoreSink>>,
    /// Says when the thread has drained its queue and flushed.
    finished: Mutex<Option<mpsc::Receiver<()>>>,
}

/// Where the store's writes go: to its thread, or (with
/// [`IoMode::Inline`](crate::hub::IoMode)) straight to the store, on the
/// caller's thread.
enum StoreSink {
    Thread(mpsc::Sender<Write>),
    Inline(Box<(Store, Pending)>),
}

impl StoreWriter {
    /// The store's thread, the store holding the rows of the first
    /// `caught_up` journal records.
    pub fn spawn(store: Store, caught_up: u64) -> StoreWriter {
        let (tx, rx) = mpsc::channel();
        let (done, finished) = mpsc::channel();
        std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || {
                write_loop(&store, &rx, caught_up);
                // Closed only once sled is: its directory lock goes with it.
                drop(store);
                let _ = done.send(());
            })
            .expect("start the store thread");
        StoreWriter {
            tx: Mutex::new(Some(StoreSink::Thread(tx))),
            finished: Mutex::new(Some(finished)),
        }
    }

    /// The store's writer without a thread: each write is made by the
    /// caller, before it goes on (see [`crate::hub::IoMode::Inline`]).
    pub fn inline(store: Store, caught_up: u64) -> StoreWriter {
        StoreWriter {
            tx: Mutex::new(Some(StoreSink::Inline(Box::new((
                store,
                Pending::new(caught_up),
            ))))),
            finished: Mutex::new(None),
        }
    }

    fn send(&self, w: Write) {
        match self.tx.lock().expect("store queue lock").as_mut() {
            // A dead thread has logged why; the journal holds the record.
            Some(StoreSink::Thread(tx)) => {
                let _ = tx.send(w);
            }
            Some(StoreSink::Inline(inline)) => {
                let (store, pending) = &mut **inline;
                pending.take(store, w);
                pending.write_if_due(store, false);
            }
            None => {}
        }
    }

    /// Notes journal records by number and queues the rows of the
    /// counted results among them: one message, so one wake-up of the
    /// store's thread, for a whole group.
    pub fn records(&self, records: Vec<(u64, Option<Done>)>) {
        self.send(Write::Records(records));
    }

    /// Queues the removal of a deleted job's rows (after every write queued
    /// before it).
    pub fn delete_job(&self, job: u64) {
        self.send(Write::DeleteJob(job));
    }

    /// Queues a job's task table.
    pub fn table(&self, job: u64, table: TaskTable) {
        self.send(Write::Table(job, table));
    }

    /// The result row of a task, read after every write queued before
    /// (so a result counted earlier is there); `None` if it has none, or
    /// the store's thread has stopped.
    pub async fn lookup(&self, job: u64, task: u64) -> Option<Done> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(Write::Lookup(job, task, tx));
        rx.await.ok().flatten()
    }

    /// Writes every row gathered so far and flushes sled (then fsyncs its
    /// files); answers with the journal records whose rows are all in the
    /// store (0 if the store's thread has stopped).
    pub async fn sync(&self) -> u64 {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(Write::Sync(tx));
        rx.await.unwrap_or(0)
    }

    /// Stops taking writes and waits (boundedly) until the queued ones are
    /// written and flushed.
    pub fn close(&self) {
        // The thread's queue is dropped here: the thread drains it and ends.
        match self.tx.lock().expect("store queue lock").take() {
            Some(StoreSink::Inline(mut inline)) => {
                let (store, pending) = &mut *inline;
                pending.write_if_due(store, true);
            }
            Some(StoreSink::Thread(tx)) => drop(tx),
            None => {}
        }
        if let Some(finished) = self.finished.lock().expect("store queue lock").take() {
            if finished.recv_timeout(CLOSE_WAIT) == Err(RecvTimeoutError::Timeout) {
                tracing::warn!(
                    "the store did not finish writing in time; the journal holds everything"
                );
            }
        }
    }
}

impl Drop for StoreWriter {
    fn drop(&mut self) {
        self.close();
    }
}

/// Results the store's thread gathers before it writes their blocks.
const GATHER: usize = 1 << 14;

fn write_loop(store: &Store, rx: &mpsc::Receiver<Write>, caught_up: u64) {
    let mut pending = Pending::new(caught_up);
    loop {
        let closing = match rx.recv_timeout(FLUSH_EVERY) {
            Ok(w) => {
                pending.take(store, w);
                false
            }
            Err(RecvTimeoutError::Timeout) => false,
            Err(RecvTimeoutError::Disconnected) => true,
        };
        pending.write_if_due(store, closing);
        if closing {
            break;
        }
    }
}

/// What the store's writer holds between writes.
struct Pending {
    /// Results wait here, so that each block is rewritten once per batch
    /// rather than once per result; a lookup sees them.
    gathered: Vec<Done>,
    seen: Seen,
    written: u64,
    /// When the rows were last written: on the runtime's clock where there
    /// is one (a simulation's, with [`crate::hub::IoMode::Inline`]), so
    /// that a simulated run writes at the same simulated moments each time.
    flushed: tokio::time::Instant,
    /// Failed writes, logged once a minute: a full disk fails every try.
    failures: crate::throttle::Throttle,
    /// The last write failed.
    failing: bool,
}

impl Pending {
    fn new(caught_up: u64) -> Pending {
        Pending {
            gathered: Vec::new(),
            seen: Seen::upto(caught_up),
            written: caught_up,
            flushed: tokio::time::Instant::now(),
            failures: crate::throttle::Throttle::new(crate::throttle::EVERY),
            failing: false,
        }
    }

    /// Logs a failed write, once a minute (with how many were not logged).
    fn warn(&mut self, r: Result<(), StoreError>) {
        if let Err(e) = r {
            if let Some(held) = self.failures.allow() {
                tracing::warn!(error = %e, failures_not_logged = held, "store update failed; the journal holds the record (logged once a minute)");
            }
        }
    }

    /// Takes one write (or answers a read or a sync).
    fn take(&mut self, store: &Store, w: Write) {
        match w {
            Write::Records(records) => {
                for (seq, row) in records {
                    self.gathered.extend(row);
                    self.seen.add(seq);
                }
            }
            Write::Table(job, table) => {
                let put = store.put_table(job, &table);
                self.warn(put);
            }
            Write::DeleteJob(job) => {
                // Its rows still gathered go first, then all of them.
                self.gathered.retain(|d| d.job != job);
                let deleted = store.delete_job(job);
                self.warn(deleted);
            }
            Write::Lookup(job, task, answer) => {
                let waiting = self
                    .gathered
                    .iter()
                    .find(|d| d.job == job && d.task == task)
                    .cloned();
                let _ = answer.send(waiting.or_else(|| store.result(job, task)));
            }
            Write::Sync(answer) => {
                let synced = store
                    .add_results(&self.gathered, Some(self.seen.upto))
                    .and_then(|()| store.sync());
                match synced {
                    Ok(()) => {
                        self.gathered.clear();
                        self.written = self.seen.upto;
                        let _ = answer.send(self.written);
                    }
                    // Dropping `answer` says: nothing synced.
                    Err(e) => self.warn(Err(e)),
                }
                self.flushed = tokio::time::Instant::now();
            }
        }
    }

    /// Writes the gathered rows and flushes when enough have gathered, a
    /// while has passed, or the writer is closing.
    fn write_if_due(&mut self, store: &Store, closing: bool) {
        // After a failed write, the next try waits its turn: a full disk
        // must not turn every result into another failing write.
        let full = self.gathered.len() >= GATHER && !self.failing;
        if closing || full || self.flushed.elapsed() >= FLUSH_EVERY {
            // Every record up to `seen.upto` has reached the writer: its
            // row is written now, or was before.
            if !self.gathered.is_empty() || self.seen.upto > self.written {
                // Rows that could not be written stay gathered for the
                // next try: the store never records as caught up a record
                // whose row it lacks.
                let written = store
                    .add_results(&self.gathered, Some(self.seen.upto))
                    .and_then(|()| store.try_flush());
                self.failing = written.is_err();
                if !self.failing {
                    self.gathered.clear();
                    self.written = self.seen.upto;
                }
                self.warn(written);
            }
            self.flushed = tokio::time::Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file sled removes while a sync lists its directory needs no
    /// fsync: the sync goes on (a dangling link opens as a file gone).
    #[cfg(unix)]
    #[test]
    fn a_file_gone_during_a_sync_is_passed_over() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("kept"), b"1").unwrap();
        std::os::unix::fs::symlink(dir.path().join("removed"), dir.path().join("blob")).unwrap();
        fsync_tree(dir.path()).unwrap();
    }

    #[test]
    fn rows_and_the_records_caught_up_are_written_together() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(&dir.path().join("store")).unwrap();
        assert_eq!(store.caught_up(), 0);
        let row = Done {
            job: 1,
            task: 700,
            worker: "w".into(),
            lease_id: 5,
            ..Done::default()
        };
        store
            .add_results(std::slice::from_ref(&row), Some(42))
            .unwrap();
        assert_eq!(store.caught_up(), 42);
        assert_eq!(store.result_keys(), vec![(1, 700)], "the count is no row");
        let back = store.result(1, 700).unwrap();
        assert_eq!((back.worker, back.lease_id), (row.worker, row.lease_id));
    }

    /// A store still open elsewhere (a handle being closed) is waited for,
    /// not moved aside as damaged: its rows are there when it opens.
    #[test]
    fn a_store_still_closing_is_waited_for_not_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let (store, _) = Store::open(&path).unwrap();
        store.add_results(&[], Some(42)).unwrap();
        store.flush();
        // The old handle closes a little later, on another thread.
        let (opening, wait) = mpsc::channel::<()>();
        let closer = std::thread::spawn(move || {
            wait.recv().unwrap();
            std::thread::sleep(Duration::from_millis(300));
            drop(store);
        });
        opening.send(()).unwrap();
        let (again, opened) = Store::open(&path).unwrap();
        closer.join().unwrap();
        assert!(
            matches!(opened, Opened::Existing),
            "rebuilt instead of waited for"
        );
        assert_eq!(again.caught_up(), 42);
    }

    #[test]
    fn opening_is_given_up_when_it_hangs_or_panics() {
        assert_eq!(within(Duration::from_secs(5), || 7), Ok(7));
        let panicked = within(Duration::from_secs(5), || -> u8 { panic!("damaged") });
        assert!(panicked.unwrap_err().contains("panicked"));
        // A stand-in for sled stuck in recovery: it never answers.
        let (_keep, never) = mpsc::channel::<()>();
        let hung = within(Duration::from_millis(50), move || never.recv());
        assert!(hung.unwrap_err().contains("did not open"));
    }
}
