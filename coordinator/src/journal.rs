//! The results journal: an append-only file of CRC-checked records, fsynced
//! before anything it holds is acknowledged. It is the coordinator's source
//! of truth; everything else (sled, memory) is rebuilt from it.
//!
//! Frame: `[u32 length][u32 CRC-32 of payload][payload]`, little endian;
//! the payload is one `nqueens.v1.JournalRecord`.
//!
//! Appends go through one writer thread that commits in groups: it takes
//! every append waiting, writes them, calls `fsync` once and only then
//! answers them all. A failed write or fsync poisons the journal: every
//! later append fails at once, so nothing is acknowledged that may not be
//! on disk (the caller reports the error; the data on disk stays intact).

use nqueens_proto::v1::JournalRecord;
use prost::Message;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use tokio::sync::oneshot;

const HEADER: usize = 8;
/// Larger records are refused (and a header claiming one is damage).
pub const MAX_RECORD: usize = 1 << 20;
/// Most appends committed by one fsync.
const MAX_GROUP: usize = 4096;

/// Why the journal cannot be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("journal {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error(
        "journal {path} is damaged at byte {offset} of {len}: a record there is unreadable and more data follows, \
         so this is not a torn last write. Nothing was changed. Restore the data directory from a backup, or \
         keep the first {offset} bytes (losing the results after them) with: truncate -s {offset} {path}"
    )]
    Corrupt {
        path: PathBuf,
        offset: u64,
        len: u64,
    },
    #[error("the journal stopped accepting writes after an earlier failure ({0}); restart the coordinator once the disk is fixed")]
    Poisoned(String),
    #[error("record of {0} bytes is larger than the limit of {MAX_RECORD}")]
    TooLarge(usize),
}

/// What opening found.
#[derive(Debug)]
pub struct Replay {
    pub records: Vec<JournalRecord>,
    /// Bytes of a torn last write that were cut off (0 if none).
    pub truncated: u64,
}

/// A handle to append records; cheap to clone.
#[derive(Clone)]
pub struct Journal {
    tx: mpsc::Sender<Append>,
}

struct Append {
    frame: Vec<u8>,
    done: oneshot::Sender<Result<(), JournalError>>,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> JournalError + '_ {
    move |source| JournalError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Reads a journal without changing it (for audits, also of a journal a
/// running coordinator is appending to: a half-written last record reads
/// as torn). Every record's CRC is checked; damage before the end is an
/// error, as at start-up.
pub fn read(path: &Path) -> Result<(Replay, u64), JournalError> {
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    let (records, good) = parse(&bytes, path)?;
    let truncated = (bytes.len() - good) as u64;
    Ok((Replay { records, truncated }, bytes.len() as u64))
}

impl Journal {
    /// Opens (or creates) the journal at `path`, reads every record, cuts
    /// off a torn last write, and starts the writer.
    pub fn open(path: &Path) -> Result<(Journal, Replay), JournalError> {
        let existed = path.exists();
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(io_err(path))?;
        if !existed {
            sync_dir(path).map_err(io_err(path))?;
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io_err(path))?;
        let (records, good) = parse(&bytes, path)?;
        let truncated = (bytes.len() - good) as u64;
        if truncated > 0 {
            tracing::warn!(path = %path.display(), bytes = truncated, "cutting off a torn last record");
            file.set_len(good as u64).map_err(io_err(path))?;
            file.sync_all().map_err(io_err(path))?;
        }
        file.seek(SeekFrom::End(0)).map_err(io_err(path))?;
        let (tx, rx) = mpsc::channel();
        let owned = path.to_path_buf();
        std::thread::Builder::new()
            .name("journal-writer".into())
            .spawn(move || writer(file, owned, rx))
            .map_err(io_err(path))?;
        Ok((Journal { tx }, Replay { records, truncated }))
    }

    /// Appends a record and returns once it is on disk.
    pub async fn append(&self, record: &JournalRecord) -> Result<(), JournalError> {
        let payload = record.encode_to_vec();
        if payload.len() > MAX_RECORD {
            return Err(JournalError::TooLarge(payload.len()));
        }
        let mut frame = Vec::with_capacity(HEADER + payload.len());
        frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        frame.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        frame.extend_from_slice(&payload);
        let (done, wait) = oneshot::channel();
        let gone = || JournalError::Poisoned("the journal writer has stopped".into());
        self.tx.send(Append { frame, done }).map_err(|_| gone())?;
        wait.await.map_err(|_| gone())?
    }
}

/// The record at the start of `rest` and its size, if it is whole and valid.
fn record_at(rest: &[u8]) -> Option<(JournalRecord, usize)> {
    let len = u32::from_le_bytes(rest.get(..4)?.try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(rest.get(4..8)?.try_into().expect("4 bytes"));
    if len > MAX_RECORD {
        return None;
    }
    let payload = rest.get(HEADER..HEADER + len)?;
    // A real record always has its `oneof` set (zeros would otherwise read
    // as empty records with a matching CRC).
    (crc32fast::hash(payload) == crc)
        .then(|| JournalRecord::decode(payload).ok())
        .flatten()
        .filter(|r| r.record.is_some())
        .map(|r| (r, HEADER + len))
}

/// Reads records until the end or the first unreadable one. An unreadable
/// record with no valid record anywhere after it is a torn last write (its
/// bytes are dropped); one followed by a valid record is damage, refused
/// (a damaged length field must not pass for a torn tail and cost every
/// result after it).
fn parse(bytes: &[u8], path: &Path) -> Result<(Vec<JournalRecord>, usize), JournalError> {
    let mut records = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match record_at(&bytes[at..]) {
            Some((r, size)) => {
                records.push(r);
                at += size;
            }
            None => {
                if (at + 1..bytes.len()).any(|k| record_at(&bytes[k..]).is_some()) {
                    return Err(JournalError::Corrupt {
                        path: path.to_path_buf(),
                        offset: at as u64,
                        len: bytes.len() as u64,
                    });
                }
                return Ok((records, at));
            }
        }
    }
    Ok((records, at))
}

/// The writer thread: group commit, one fsync per group.
fn writer(mut file: File, path: PathBuf, rx: mpsc::Receiver<Append>) {
    let mut poisoned: Option<String> = None;
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(a) => group.push(a),
                Err(_) => break,
            }
        }
        if poisoned.is_none() {
            let mut buf = Vec::with_capacity(group.iter().map(|a| a.frame.len()).sum());
            for a in &group {
                buf.extend_from_slice(&a.frame);
            }
            if let Err(e) = file.write_all(&buf).and_then(|()| file.sync_data()) {
                tracing::error!(path = %path.display(), error = %e, "journal write failed; refusing further writes");
                poisoned = Some(e.to_string());
            }
        }
        for a in group {
            let result = match &poisoned {
                None => Ok(()),
                Some(e) => Err(JournalError::Poisoned(e.clone())),
            };
            let _ = a.done.send(result);
        }
    }
}

/// Makes a new file's directory entry durable.
fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nqueens_proto::v1::{journal_record::Record, Boot, JobStateChanged};

    fn boot(epoch: u64) -> JournalRecord {
        JournalRecord {
            record: Some(Record::Boot(Boot { epoch, unix_ms: 7 })),
        }
    }

    fn reopen(path: &Path) -> Result<Replay, JournalError> {
        Journal::open(path).map(|(_, r)| r)
    }

    #[tokio::test]
    async fn appended_records_come_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let (j, replay) = Journal::open(&path).unwrap();
        assert!(replay.records.is_empty());
        // Many concurrent appends: group commit must keep every one.
        let handles: Vec<_> = (0..200)
            .map(|i| {
                let j = j.clone();
                tokio::spawn(async move { j.append(&boot(i)).await })
            })
            .collect();
        for h in handles {
            h.await.unwrap().unwrap();
        }
        let mut epochs: Vec<u64> = reopen(&path)
            .unwrap()
            .records
            .into_iter()
            .map(|r| match r.record {
                Some(Record::Boot(b)) => b.epoch,
                other => panic!("{other:?}"),
            })
            .collect();
        epochs.sort_unstable();
        assert_eq!(epochs, (0..200).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_torn_last_record_is_cut_off_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let (j, _) = Journal::open(&path).unwrap();
        for i in 1..=3 {
            j.append(&boot(i)).await.unwrap(); // equal sizes (no zero fields)
        }
        drop(j);
        let full = std::fs::read(&path).unwrap();
        let one = full.len() / 3;
        // Every possible torn length of the last record.
        for cut in 1..one {
            std::fs::write(&path, &full[..full.len() - cut]).unwrap();
            let r = reopen(&path).unwrap();
            assert_eq!(r.records.len(), 2, "cut {cut}");
            assert_eq!(r.truncated as usize, one - cut);
            assert_eq!(
                std::fs::read(&path).unwrap().len(),
                2 * one,
                "file cut back to whole records"
            );
        }
        // Zeros after the records (a preallocated tail) count as torn too.
        let mut padded = full.clone();
        padded.extend_from_slice(&[0; 100]);
        std::fs::write(&path, &padded).unwrap();
        assert_eq!(reopen(&path).unwrap().records.len(), 3);
    }

    #[tokio::test]
    async fn damage_before_the_end_is_refused_and_nothing_is_changed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let (j, _) = Journal::open(&path).unwrap();
        for i in 1..=3 {
            let r = JournalRecord {
                record: Some(Record::JobState(JobStateChanged {
                    job_id: i,
                    state: 2,
                })),
            };
            j.append(&r).await.unwrap();
        }
        drop(j);
        let bytes = std::fs::read(&path).unwrap();
        let one = bytes.len() / 3;
        // Any bit of the middle record, its length and CRC included.
        for bit in 0..one * 8 {
            let mut damaged = bytes.clone();
            damaged[one + bit / 8] ^= 1 << (bit % 8);
            std::fs::write(&path, &damaged).unwrap();
            let err = reopen(&path).unwrap_err();
            assert!(
                matches!(err, JournalError::Corrupt { offset, .. } if offset == one as u64),
                "bit {bit}: {err}"
            );
            assert!(err.to_string().contains("truncate -s"), "{err}");
            assert_eq!(
                std::fs::read(&path).unwrap(),
                damaged,
                "a refused journal is left as it was"
            );
        }
    }
}
