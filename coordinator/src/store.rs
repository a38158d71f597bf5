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

use nqueens_common::plan::Task;
use nqueens_proto::v1::{journal_record::Record, JournalRecord, TaskDone};
use prost::Message;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A store problem (reported, never fatal to counting).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store {path}: {source}")]
    Sled { path: PathBuf, source: sled::Error },
    #[error("store {path}: cannot move the damaged store aside: {source}")]
    Move {
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
    results: sled::Tree,
}

fn key(job: u64, index: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&job.to_be_bytes());
    k[8..].copy_from_slice(&index.to_be_bytes());
    k
}

fn encode_task(t: &Task) -> Vec<u8> {
    let mut v = Vec::with_capacity(48);
    for x in [t.index, t.lo, t.hi, t.skip, t.take, t.subproblems] {
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.extend_from_slice(&t.work.to_le_bytes());
    v
}

fn decode_task(b: &[u8]) -> Option<Task> {
    let word = |i: usize| {
        b.get(i * 8..i * 8 + 8)
            .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
    };
    Some(Task {
        index: word(0)?,
        lo: word(1)?,
        hi: word(2)?,
        skip: word(3)?,
        take: word(4)?,
        subproblems: word(5)?,
        work: f64::from_bits(word(6)?),
    })
}

/// sled without its background flusher: [`StoreWriter`] flushes.
fn open_sled(path: &Path) -> sled::Result<sled::Db> {
    sled::Config::new().path(path).flush_every_ms(None).open()
}

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
        let attempt =
            within(OPEN_WAIT, move || open_sled(&p)).and_then(|r| r.map_err(|e| e.to_string()));
        let (db, opened) = match attempt {
            Ok(db) => (db, Opened::Existing),
            Err(reason) => {
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
        let tasks = db.open_tree("tasks").map_err(sled_err)?;
        let results = db.open_tree("results").map_err(sled_err)?;
        Ok((
            Store {
                path: path.to_path_buf(),
                db,
                tasks,
                results,
            },
            opened,
        ))
    }

    fn err(&self, source: sled::Error) -> StoreError {
        StoreError::Sled {
            path: self.path.clone(),
            source,
        }
    }

    /// A job's stored task list, if complete and readable.
    pub fn tasks(&self, job: u64) -> Option<Vec<Task>> {
        let mut out = Vec::new();
        for (i, kv) in self.tasks.scan_prefix(job.to_be_bytes()).enumerate() {
            let (_, v) = kv.ok()?;
            let t = decode_task(&v)?;
            if t.index != i as u64 {
                return None;
            }
            out.push(t);
        }
        (!out.is_empty()).then_some(out)
    }

    pub fn put_tasks(&self, job: u64, tasks: &[Task]) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for t in tasks {
            batch.insert(&key(job, t.index), encode_task(t));
        }
        self.tasks.apply_batch(batch).map_err(|e| self.err(e))
    }

    /// Records a journal record's row (the first result of a task wins,
    /// as in the journal).
    pub fn apply(&self, r: &JournalRecord) -> Result<(), StoreError> {
        match &r.record {
            Some(Record::TaskDone(d)) => self.add_result(d),
            _ => Ok(()),
        }
    }

    fn add_result(&self, d: &TaskDone) -> Result<(), StoreError> {
        let k = key(d.job_id, d.task_index);
        let _ = self
            .results
            .compare_and_swap(k, None as Option<&[u8]>, Some(d.encode_to_vec()))
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// A stored result row.
    pub fn result(&self, job: u64, task: u64) -> Option<TaskDone> {
        let v = self.results.get(key(job, task)).ok()??;
        TaskDone::decode(v.as_ref()).ok()
    }

    /// Replaces a row that disagrees with the journal.
    pub fn put_result(&self, d: &TaskDone) -> Result<(), StoreError> {
        self.results
            .insert(key(d.job_id, d.task_index), d.encode_to_vec())
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// The (job, task) of every result row.
    pub fn result_keys(&self) -> Vec<(u64, u64)> {
        let word = |b: &[u8]| u64::from_be_bytes(b.try_into().expect("8 bytes"));
        self.results
            .iter()
            .keys()
            .filter_map(Result::ok)
            .filter(|k| k.len() == 16)
            .map(|k| (word(&k[..8]), word(&k[8..])))
            .collect()
    }

    /// Drops a row the journal does not have.
    pub fn remove_result(&self, job: u64, task: u64) -> Result<(), StoreError> {
        self.results
            .remove(key(job, task))
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Rows in the store: for checks and tests.
    pub fn result_rows(&self) -> usize {
        self.results.len()
    }

    /// Asks sled to write its buffers (not a durability point: see above).
    pub fn flush(&self) {
        if let Err(e) = self.db.flush() {
            tracing::warn!(error = %e, "store flush failed; the journal still holds everything");
        }
    }
}

/// A write for the store's thread (or a read that must see every write
/// queued before it).
enum Write {
    Result(Box<TaskDone>),
    Tasks(u64, Vec<Task>),
    Lookup(u64, u64, tokio::sync::oneshot::Sender<Option<TaskDone>>),
}

/// How often the store's thread asks sled to write its buffers while busy.
const FLUSH_EVERY: Duration = Duration::from_millis(500);
/// How long closing waits for the store's thread to drain.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// The one thread that writes to the store once the coordinator serves.
/// Writes are queued, never waited for: the journal already holds them.
pub struct StoreWriter {
    tx: Mutex<Option<mpsc::Sender<Write>>>,
    /// Says when the thread has drained its queue and flushed.
    finished: Mutex<Option<mpsc::Receiver<()>>>,
}

impl StoreWriter {
    pub fn spawn(store: Store) -> StoreWriter {
        let (tx, rx) = mpsc::channel();
        let (done, finished) = mpsc::channel();
        std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || {
                write_loop(&store, &rx);
                // Closed only once sled is: its directory lock goes with it.
                drop(store);
                let _ = done.send(());
            })
            .expect("start the store thread");
        StoreWriter {
            tx: Mutex::new(Some(tx)),
            finished: Mutex::new(Some(finished)),
        }
    }

    fn send(&self, w: Write) {
        if let Some(tx) = self.tx.lock().expect("store queue lock").as_ref() {
            // A dead thread has logged why; the journal holds the record.
            let _ = tx.send(w);
        }
    }

    /// Queues a counted result's row.
    pub fn result(&self, d: TaskDone) {
        self.send(Write::Result(Box::new(d)));
    }

    /// Queues a job's task list.
    pub fn tasks(&self, job: u64, tasks: Vec<Task>) {
        self.send(Write::Tasks(job, tasks));
    }

    /// The result row of a task, read after every write queued before
    /// (so a result counted earlier is there); `None` if it has none, or
    /// the store's thread has stopped.
    pub async fn lookup(&self, job: u64, task: u64) -> Option<TaskDone> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(Write::Lookup(job, task, tx));
        rx.await.ok().flatten()
    }

    /// Stops taking writes and waits (boundedly) until the queued ones are
    /// written and flushed.
    pub fn close(&self) {
        drop(self.tx.lock().expect("store queue lock").take());
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

fn write_loop(store: &Store, rx: &mpsc::Receiver<Write>) {
    let mut dirty = false;
    let mut flushed = Instant::now();
    loop {
        match rx.recv_timeout(FLUSH_EVERY) {
            Ok(w) => {
                dirty = true;
                let written = match w {
                    Write::Result(d) => store.add_result(&d),
                    Write::Tasks(job, tasks) => store.put_tasks(job, &tasks),
                    Write::Lookup(job, task, answer) => {
                        let _ = answer.send(store.result(job, task));
                        Ok(())
                    }
                };
                if let Err(e) = written {
                    tracing::warn!(error = %e, "store update failed; the journal holds the record");
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if dirty && flushed.elapsed() >= FLUSH_EVERY {
            store.flush();
            (dirty, flushed) = (false, Instant::now());
        }
    }
    if dirty {
        store.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
