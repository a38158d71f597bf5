//! The results journal: an append-only file of CRC-checked records, fsynced
//! before anything it holds is acknowledged. It is the coordinator's source
//! of truth; everything else (sled, memory) is rebuilt from it.
//!
//! The file starts with a head ([`head`]: the format, the journal's
//! identity and the number of the file's first record); then each record is framed
//! as `[u32 length][u32 CRC-32 of seq and payload][u64 seq][payload]`,
//! little endian; the payload is one `nqueens.v1.JournalRecord` (see [`codec`]) and `seq`
//! counts records from 1, so a lost record is a gap. (A journal of the
//! first format, `[u32 length][u32 CRC-32][payload]` with no magic, is
//! read, rewritten in this format at start-up and kept as `journal.v1`.)
//!
//! Damage rules: only a partial record at the very end, shorter than the
//! record its header announces (or a tail of zeros), is a torn write that
//! was never acknowledged, and is cut off. Anything else that does not
//! read — a bad CRC before the end or in the last complete record, a
//! length past the limit, a gap in the sequence, a cut inside the file —
//! is damage: the journal is left as it is and opening fails, saying where
//! and how to recover.
//!
//! Segments: when the coordinator checkpoints its state, the file is
//! sealed — renamed into `journal.d/` as `FIRST-LAST.seg` (the sequence
//! numbers it holds) — and a new one started, whose first record follows
//! the last sealed one. Sealed segments are later compressed
//! (`.seg.gz`) and kept: a start-up reads only the records after its
//! checkpoint, an audit reads them all. See [`segments`].
//!
//! Appends go through one writer thread that commits in groups: it takes
//! every append waiting, writes them, calls `fsync` once and only then
//! answers them all. A failed write or fsync poisons the journal: every
//! later append fails at once, so nothing is acknowledged that may not be
//! on disk (the caller reports the error; the data on disk stays intact).

pub mod codec;
pub mod copy;
pub mod head;
pub mod mark;
pub mod repair;
pub mod segments;
pub mod view;

use crate::state::Event;
use head::{Head, Identity};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, LazyLock};
use tokio::sync::oneshot;

/// The time of each fsync of the writer thread (seconds). Process-wide:
/// the coordinator opens its journal itself, and a process serves one
/// coordinator (tests, which start several, see their sum).
pub static FSYNC_SECONDS: LazyLock<Histogram> =
    LazyLock::new(|| nqueens_metrics::histogram(nqueens_metrics::FSYNC_SECONDS));
/// Records committed by each fsync (the group commit's group size).
pub static GROUP_RECORDS: LazyLock<Histogram> =
    LazyLock::new(|| nqueens_metrics::histogram(nqueens_metrics::SIZES));
/// Writes and fsyncs that failed.
pub static WRITE_ERRORS: LazyLock<Counter> = LazyLock::new(Counter::default);

/// Frame header: length, CRC, sequence number.
const HEADER: usize = 16;
/// Frame header of the first format: length, CRC.
const HEADER_V1: usize = 8;
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
        "journal {path} is damaged at byte {offset} of {len}, record #{record}: {what}. This is not a torn \
         last write, so the coordinator will not start and nothing was changed: restore the journal from \
         a backup"
    )]
    Corrupt {
        path: PathBuf,
        offset: u64,
        len: u64,
        /// The number (from 1) of the first record that does not read.
        record: u64,
        what: String,
    },
    #[error(
        "journal segment {path} holds records {first}..={last}, where record {due} was due: a segment \
         is missing or was renamed. Nothing was changed, and the coordinator will not start (nor an \
         audit pass) without every acknowledged record: put the missing segment back from a backup"
    )]
    MissingSegment {
        path: PathBuf,
        first: u64,
        last: u64,
        due: u64,
    },
    #[error(
        "records {from}..={to} are missing between the sealed segments ({dir}) and the live journal \
         {path}, which starts at record {next}: a sealed segment was deleted or moved. Nothing was \
         changed, and the coordinator will not start without every acknowledged record: put the \
         segment back (its name is {from:020}-{to:020}.seg or .seg.gz) from a backup"
    )]
    MissingRecords {
        dir: PathBuf,
        path: PathBuf,
        from: u64,
        to: u64,
        next: u64,
    },
    #[error(
        "sealed journal segment {path} (records {first}..={last}) is damaged: {what}. A sealed segment \
         was whole and fsynced when it was sealed, so this is damage on the disk, not a torn write, \
         and its records were acknowledged. Nothing was changed: put the segment back from a backup \
         (keep the store and the checkpoints where they are: a start from a checkpoint that covers \
         these records does not read it)"
    )]
    DamagedSegment {
        path: PathBuf,
        first: u64,
        last: u64,
        what: String,
    },
    #[error(
        "{first} and {second} both hold a record numbered {seq}, and the two differ: one of them is \
         not this journal's (a copy from another data directory?). Nothing was changed: move the \
         one that does not belong out of the data directory, and start again"
    )]
    Conflicting {
        seq: u64,
        first: PathBuf,
        second: PathBuf,
    },
    #[error(
        "{path} holds record {seq}, past the live journal's last record ({last}); sealed segments \
         all come before the live file, so it is not this journal's (a copy from another data \
         directory?). Nothing was changed: move it out of the data directory, and start again"
    )]
    Beyond { path: PathBuf, seq: u64, last: u64 },
    #[error(
        "sealed journal segment {path} holds records up to #{seq}, but the live journal {live} \
         starts at record #{next}: sealed segments all come before the live file, so one of the two \
         is not this journal's (a copy from another data directory?). Nothing was changed: move the \
         one that does not belong (most likely the segment) out of the data directory, and start again"
    )]
    Overlaps {
        path: PathBuf,
        seq: u64,
        live: PathBuf,
        next: u64,
    },
    #[error(
        "{path} belongs to another journal (its identity is {found}, where this journal's is {want}, \
         read from {from}): it was copied in from another data directory. Nothing was changed: move \
         it out of the data directory, and start again (if {from} is the file that was copied in, \
         move that one instead)"
    )]
    Foreign {
        path: PathBuf,
        found: Identity,
        want: Identity,
        from: PathBuf,
    },
    #[error(
        "{path}, the newest sealed journal segment, carries a journal identity, but the live journal \
         {live} is of the older format, which this journal's files had before they carried one: the \
         segment was copied in from another data directory. Nothing was changed: move it out of the \
         data directory, and start again"
    )]
    Newer { path: PathBuf, live: PathBuf },
    #[error(
        "the journal {path} ends at record {last} ({torn} bytes of a cut-short record after it), but \
         acknowledged records go up to {acknowledged}"
    )]
    Behind {
        path: PathBuf,
        last: u64,
        acknowledged: u64,
        torn: u64,
    },
    #[error("the journal stopped accepting writes after an earlier failure ({0}); restart the coordinator once the disk is fixed")]
    Poisoned(String),
    #[error("the journal cannot be written ({0}): nothing was stored. Free disk space (or raise the file-size limit); the coordinator tries again with the next write")]
    Unwritable(String),
    #[error("record of {0} bytes is larger than the limit of {MAX_RECORD}")]
    TooLarge(usize),
}

/// What opening found.
#[derive(Debug)]
pub struct Replay {
    /// The records read, in order: `records[i]` has sequence number
    /// `first + i`.
    pub records: Vec<Event>,
    pub first: u64,
    /// The sequence number of the journal's last record (0: none yet).
    pub last: u64,
    /// Bytes of a torn last write that were cut off (0 if none).
    pub truncated: u64,
    /// The journal was of the first format (no sequence numbers).
    pub v1: bool,
}

/// A handle to append records; cheap to clone.
#[derive(Clone)]
pub struct Journal {
    sink: Sink,
    healthy: tokio::sync::watch::Receiver<bool>,
}

/// Where appends go: to the writer thread, or (with
/// [`IoMode::Inline`](crate::hub::IoMode)) straight to the writer, on the
/// caller's thread.
#[derive(Clone)]
enum Sink {
    Thread(mpsc::Sender<Msg>),
    Inline(std::sync::Arc<std::sync::Mutex<Writer>>),
}

impl Sink {
    /// Hands `msg` to the writer; false if it has stopped.
    fn send(&self, msg: Msg) -> bool {
        match self {
            Sink::Thread(tx) => tx.send(msg).is_ok(),
            Sink::Inline(w) => {
                let mut w = w.lock().expect("journal writer lock");
                match msg {
                    Msg::Append(a) => w.answer(vec![a], None),
                    Msg::Rotate(r) => w.answer(Vec::new(), Some(r)),
                }
                true
            }
        }
    }
}

/// What the writer thread is asked to do.
enum Msg {
    Append(Append),
    /// Seal the current file (see [`Journal::rotate`]).
    Rotate(oneshot::Sender<RotateAnswer>),
}

/// Records written together, numbered in order.
struct Append {
    payloads: Vec<Vec<u8>>,
    /// The first record's sequence number once all are on disk.
    done: oneshot::Sender<Result<u64, JournalError>>,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> JournalError + '_ {
    move |source| JournalError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What [`scan`] went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scanned {
    pub records: u64,
    /// The bytes of the records' frames, uncompressed (files' magic bytes
    /// not counted, so the figure does not depend on how the journal was
    /// cut into segments).
    pub bytes: u64,
    /// Bytes of a half-written last record.
    pub truncated: u64,
}

/// Goes through a whole journal — every sealed segment, then the current
/// file — record by record, one segment in memory at a time, without
/// changing it (for audits, also of a journal a running coordinator is
/// appending to, sealing and compressing: a consistent [`view::View`] of
/// it, and a half-written last record reads as torn). Every record's CRC
/// is checked; damage before the end is an error, as at start-up.
pub fn scan(path: &Path, mut each: impl FnMut(Event)) -> Result<Scanned, JournalError> {
    let v = view::view(path)?;
    let (mut records, mut bytes_read) = (0, 0);
    for s in &v.sealed {
        let sealed = view::read_listed(s, v.want.as_ref())?;
        bytes_read += sealed.frames;
        records += sealed.records.len() as u64;
        sealed.records.into_iter().for_each(&mut each);
    }
    records += v.records.len() as u64;
    v.records.into_iter().for_each(each);
    let head = Head::of(&v.live).size().min(v.live.len());
    Ok(Scanned {
        records,
        bytes: bytes_read + (v.live.len() - head) as u64,
        truncated: (v.live.len() - v.good) as u64,
    })
}

/// Every record of a whole journal in memory (see [`scan`]), and the bytes
/// of their frames.
pub fn read(path: &Path) -> Result<(Replay, u64), JournalError> {
    let mut records = Vec::new();
    let scanned = scan(path, |r| records.push(r))?;
    let v1 = std::fs::read(path).is_ok_and(|b| Head::of(&b) == Head::V1);
    Ok((
        Replay {
            records,
            first: 1,
            last: scanned.records,
            truncated: scanned.truncated,
            v1,
        },
        scanned.bytes,
    ))
}

/// One frame of the current format.
fn frame(seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut crc = crc32fast::Hasher::new();
    crc.update(&seq.to_le_bytes());
    crc.update(payload);
    let mut f = Vec::with_capacity(HEADER + payload.len());
    f.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    f.extend_from_slice(&crc.finalize().to_le_bytes());
    f.extend_from_slice(&seq.to_le_bytes());
    f.extend_from_slice(payload);
    f
}

/// Rewrites a first-format journal in the current format, as journal
/// `id`: the new file is written and fsynced beside it, the old one kept
/// as `journal.v1`.
fn upgrade(path: &Path, records: &[Event], id: Identity) -> Result<(), JournalError> {
    let tmp = path.with_extension("v2.tmp");
    let mut bytes = head::bytes(id, 1).to_vec();
    for (i, r) in records.iter().enumerate() {
        bytes.extend_from_slice(&frame(i as u64 + 1, &codec::encode(r)));
    }
    let write = || -> io::Result<()> {
        let mut f = crate::owner_only::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(path, path.with_extension("v1"))?;
        std::fs::rename(&tmp, path)?;
        sync_dir(path)
    };
    write().map_err(io_err(path))?;
    tracing::warn!(path = %path.display(), records = records.len(), "journal of the first format rewritten with sequence numbers; the old file is kept as journal.v1");
    Ok(())
}

/// The live file's records, as opening found them.
struct Live {
    records: Vec<Event>,
    /// Bytes of a torn last write, cut off.
    truncated: u64,
    /// The file was of the first format (and is now upgraded).
    v1: bool,
}

/// Opens (or creates) the live file at `path` of journal `id`, whose
/// first record is number `first` (the one after the last of `sealed`):
/// reads it, refuses it if it ends before `acknowledged`, cuts off a torn
/// last write, upgrades the first format, and leaves the handle at the end
/// for appends.
fn open_live(
    path: &Path,
    sealed: &[segments::Sealed],
    acknowledged: u64,
    id: Identity,
) -> Result<(File, Live), JournalError> {
    let first = sealed.last().map_or(1, |s| s.last + 1);
    let existed = path.exists();
    let mut file = crate::owner_only::append(path).map_err(io_err(path))?;
    if !existed {
        sync_dir(path).map_err(io_err(path))?;
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(io_err(path))?;
    let Parsed {
        records,
        good,
        head,
    } = match parse(&bytes, path, first) {
        Err(e @ JournalError::Corrupt { .. }) => {
            return Err(misplaced(&bytes, path, sealed).unwrap_or(e))
        }
        other => other?,
    };
    let v1 = head == Head::V1;
    let last = first - 1 + records.len() as u64;
    let truncated = (bytes.len() - good) as u64;
    if last < acknowledged {
        return Err(JournalError::Behind {
            path: path.to_path_buf(),
            last,
            acknowledged,
            torn: truncated,
        });
    }
    if truncated > 0 {
        tracing::warn!(path = %path.display(), bytes = truncated, "cutting off a torn last record (never acknowledged)");
        file.set_len(good as u64).map_err(io_err(path))?;
        file.sync_all().map_err(io_err(path))?;
    }
    if v1 {
        upgrade(path, &records, id)?;
        // The file at `path` is the new one.
        drop(file);
        file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(path)
            .map_err(io_err(path))?;
    } else if good == 0 {
        file.write_all(&head::bytes(id, first))
            .and_then(|()| file.sync_all())
            .map_err(io_err(path))?;
    }
    file.seek(SeekFrom::End(0)).map_err(io_err(path))?;
    Ok((
        file,
        Live {
            records,
            truncated,
            v1,
        },
    ))
}

impl Journal {
    /// Opens (or creates) the journal at `path`, reads the records after
    /// number `after` (0: all; sealed segments wholly before it are not
    /// read), cuts off a torn last write, and starts the writer.
    ///
    /// `acknowledged` is the last record known to have been acknowledged
    /// (the store's and the checkpoint's marks): a journal that ends
    /// before it, torn or cut at a record boundary, is refused with
    /// [`JournalError::Behind`] and left as it is.
    pub fn open(
        path: &Path,
        after: u64,
        acknowledged: u64,
    ) -> Result<(Journal, Replay), JournalError> {
        Journal::open_with(path, after, acknowledged, crate::hub::IoMode::Threads)
    }

    /// [`Journal::open`], its writes made where `io` says.
    pub fn open_with(
        path: &Path,
        after: u64,
        acknowledged: u64,
        io: crate::hub::IoMode,
    ) -> Result<(Journal, Replay), JournalError> {
        let sealed = segments::list(path)?;
        let want = segments::expected((path, head_of_file(path)?), &sealed)?;
        let mut records = Vec::new();
        let mut from = None;
        let mut keep = |seq: u64, r: Event| {
            if seq > after {
                from.get_or_insert(seq);
                records.push(r);
            }
        };
        for s in sealed.iter().filter(|s| s.last > after) {
            for (seq, r) in (s.first..).zip(segments::read(s, want.as_ref())?.records) {
                keep(seq, r);
            }
        }
        // The current file's first record follows the last sealed one.
        let first = sealed.last().map_or(1, |s| s.last + 1);
        let id = segments::identity(want.as_ref());
        let (file, live) = open_live(path, &sealed, acknowledged, id)?;
        let last = first - 1 + live.records.len() as u64;
        for (seq, r) in (first..).zip(live.records) {
            keep(seq, r);
        }
        let (healthy_tx, healthy) = tokio::sync::watch::channel(true);
        let w = Writer::new(file, path.to_path_buf(), id, (first, last + 1), healthy_tx);
        let sink = match io {
            crate::hub::IoMode::Threads => {
                let (tx, rx) = mpsc::channel();
                std::thread::Builder::new()
                    .name("journal-writer".into())
                    .spawn(move || writer(w, rx))
                    .map_err(io_err(path))?;
                Sink::Thread(tx)
            }
            crate::hub::IoMode::Inline => {
                Sink::Inline(std::sync::Arc::new(std::sync::Mutex::new(w)))
            }
        };
        Ok((
            Journal { sink, healthy },
            Replay {
                records,
                first: from.unwrap_or(last + 1),
                last,
                truncated: live.truncated,
                v1: live.v1,
            },
        ))
    }

    /// Seals the current file into `journal.d/` and starts a new one (once
    /// every append sent before is on disk). Returns the sequence numbers
    /// the sealed segment holds, or `None` if the file had no records.
    pub async fn rotate(&self) -> Result<Option<(u64, u64)>, JournalError> {
        let (done, wait) = oneshot::channel();
        let gone = || JournalError::Poisoned("the journal writer has stopped".into());
        if !self.sink.send(Msg::Rotate(done)) {
            return Err(gone());
        }
        wait.await.map_err(|_| gone())?
    }

    /// True while the latest write reached the disk; changes when that does.
    pub fn healthy(&self) -> tokio::sync::watch::Receiver<bool> {
        self.healthy.clone()
    }

    /// Appends a record and returns once it is on disk, with its sequence
    /// number (records count from 1).
    pub async fn append(&self, record: &Event) -> Result<u64, JournalError> {
        self.append_all(std::slice::from_ref(record)).await
    }

    /// Appends records in one message to the writer, so they share one
    /// write and one fsync, numbered in order; returns once all are on
    /// disk, with the first one's sequence number.
    pub async fn append_all(&self, records: &[Event]) -> Result<u64, JournalError> {
        let payloads: Vec<Vec<u8>> = records.iter().map(codec::encode).collect();
        if let Some(big) = payloads.iter().find(|p| p.len() > MAX_RECORD) {
            return Err(JournalError::TooLarge(big.len()));
        }
        let (done, wait) = oneshot::channel();
        let gone = || JournalError::Poisoned("the journal writer has stopped".into());
        if !self.sink.send(Msg::Append(Append { payloads, done })) {
            return Err(gone());
        }
        wait.await.map_err(|_| gone())?
    }
}

/// Why the bytes at some offset are not a record.
enum Bad {
    /// Fewer bytes than a header, or than the record its header announces.
    Short,
    /// A whole record is there but does not read.
    Wrong(String),
}

/// Decodes a payload.
fn decode(payload: &[u8]) -> Result<Event, Bad> {
    codec::decode(payload).map_err(|why| {
        Bad::Wrong(format!(
            "its CRC matches but it is not a journal record: {why}"
        ))
    })
}

/// The record at the start of `rest`, its sequence number (0 in the first
/// format) and its size.
fn record_at(rest: &[u8], v1: bool) -> Result<(Event, u64, usize), Bad> {
    let header = if v1 { HEADER_V1 } else { HEADER };
    if rest.len() < header {
        return Err(Bad::Short);
    }
    let len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
    if len > MAX_RECORD {
        return Err(Bad::Wrong(format!(
            "its header gives a length of {len} bytes, past the limit of {MAX_RECORD}"
        )));
    }
    let Some(payload) = rest.get(header..header + len) else {
        return Err(Bad::Short);
    };
    if v1 {
        if crc32fast::hash(payload) != crc {
            return Err(Bad::Wrong("its CRC does not match".into()));
        }
        return Ok((decode(payload)?, 0, header + len));
    }
    let seq = u64::from_le_bytes(rest[8..16].try_into().expect("8 bytes"));
    let mut h = crc32fast::Hasher::new();
    h.update(&rest[8..16]);
    h.update(payload);
    if h.finalize() != crc {
        return Err(Bad::Wrong("its CRC does not match".into()));
    }
    Ok((decode(payload)?, seq, header + len))
}

/// Whether `rest` (at least a header) is one whole record whose length
/// field alone is wrong: its CRC matches the bytes up to the end.
fn whole_under_bad_length(rest: &[u8], v1: bool) -> bool {
    let header = if v1 { HEADER_V1 } else { HEADER };
    if rest.len() <= header {
        return false;
    }
    let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
    crc32fast::hash(&rest[8..]) == crc
}

/// The error for a live file at `path` (its bytes) that does not start
/// right after the last of the sealed segments `sealed`: a sealed segment
/// is missing, or one is numbered past the live file's start.
fn misplaced(bytes: &[u8], path: &Path, sealed: &[segments::Sealed]) -> Option<JournalError> {
    let first = sealed.last().map_or(1, |s| s.last + 1);
    let next = first_seq(bytes)?;
    if next > first {
        return Some(JournalError::MissingRecords {
            dir: segments::dir_of(path),
            path: path.to_path_buf(),
            from: first,
            to: next - 1,
            next,
        });
    }
    let odd = sealed.iter().find(|s| s.last >= next)?;
    // Said by its identity where it has one.
    let want = head::Expected::of((path, Head::of(bytes)));
    if let Err(e) = head::check(want.as_ref(), &odd.path, segments::head_of(odd)) {
        return Some(e);
    }
    Some(JournalError::Overlaps {
        path: odd.path.clone(),
        seq: odd.last,
        live: path.to_path_buf(),
        next,
    })
}

/// The number of a live journal file's first record: its head's, or
/// that its first record carries.
fn first_seq(bytes: &[u8]) -> Option<u64> {
    let head = Head::of(bytes);
    match head {
        Head::V3 { first, .. } => Some(first),
        Head::V2 => record_at(&bytes[head.size()..], false)
            .ok()
            .map(|(_, seq, _)| seq),
        _ => None,
    }
}

/// The head of the file at `path` (a missing file has none: [`Head::Torn`]).
fn head_of_file(path: &Path) -> Result<Head, JournalError> {
    let mut bytes = Vec::with_capacity(head::LEN);
    match File::open(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Head::Torn),
        f => f
            .and_then(|f| f.take(head::LEN as u64).read_to_end(&mut bytes))
            .map_err(io_err(path))?,
    };
    Ok(Head::of(&bytes))
}

/// One file's records, read.
pub(super) struct Parsed {
    pub records: Vec<Event>,
    /// The length of the part that reads (head and whole records).
    pub good: usize,
    pub head: Head,
}

/// Reads every record of one file, whose first record must carry sequence
/// number `first`; returns them, the length of the good part, and the
/// file's head. Only a short partial record (or zeros) at the very end is
/// a torn write; see the module doc.
fn parse(bytes: &[u8], path: &Path, first: u64) -> Result<Parsed, JournalError> {
    let head = Head::of(bytes);
    let refuse = |what: String| JournalError::Corrupt {
        path: path.to_path_buf(),
        offset: 0,
        len: bytes.len() as u64,
        record: first,
        what,
    };
    match head {
        Head::V1 if first != 1 => {
            return Err(refuse(
                "it does not start with the journal's magic bytes".into(),
            ))
        }
        Head::Damaged => return Err(refuse("its head does not match its CRC".into())),
        Head::V3 { first: f, .. } if f != first => {
            return Err(refuse(format!(
                "its head gives #{f} as its first record, where #{first} was due"
            )))
        }
        // A torn first write of the head: nothing was ever acknowledged.
        Head::Torn => {
            return Ok(Parsed {
                records: Vec::new(),
                good: 0,
                head,
            })
        }
        _ => {}
    }
    let v1 = head == Head::V1;
    let mut at = head.size();
    let mut records = Vec::new();
    let damaged = |at: usize, records: &Vec<Event>, what: String| JournalError::Corrupt {
        path: path.to_path_buf(),
        offset: at as u64,
        len: bytes.len() as u64,
        record: first + records.len() as u64,
        what,
    };
    while at < bytes.len() {
        let rest = &bytes[at..];
        match record_at(rest, v1) {
            Ok((r, seq, size)) => {
                let want = first + records.len() as u64;
                if !v1 && seq != want {
                    return Err(damaged(
                        at,
                        &records,
                        format!("it carries sequence number {seq} where {want} was due (records are missing or repeated)"),
                    ));
                }
                records.push(r);
                at += size;
            }
            Err(_) if rest.iter().all(|&b| b == 0) => break,
            Err(Bad::Short) => {
                // A partial last record, unless its bytes are a whole
                // record under a damaged length field, or a valid record
                // follows (then bytes were cut out of the middle).
                if whole_under_bad_length(rest, v1) {
                    return Err(damaged(
                        at,
                        &records,
                        "its length field is damaged (the bytes after it form a whole record with a matching CRC)".into(),
                    ));
                }
                if (at + 1..bytes.len()).any(|k| record_at(&bytes[k..], v1).is_ok()) {
                    return Err(damaged(
                        at,
                        &records,
                        "the record there is cut short and valid records follow (bytes are missing inside the file)".into(),
                    ));
                }
                break;
            }
            Err(Bad::Wrong(what)) => return Err(damaged(at, &records, what)),
        }
    }
    Ok(Parsed {
        records,
        good: at,
        head,
    })
}

/// The writer thread: group commit, one fsync per group.
///
/// A failed write (a full disk, a file-size limit) acknowledges nothing of
/// its group: the file is cut back to its last fsynced length and later
/// appends try again, so the journal recovers when space comes back. A
/// failed fsync poisons the journal for good (the kernel may have dropped
/// the pages it could not write): only a restart, which re-reads the
/// file, is safe then. `healthy` follows the latest outcome.
fn writer(mut w: Writer, rx: mpsc::Receiver<Msg>) {
    while let Ok(msg) = rx.recv() {
        let (group, rotate) = gather(msg, &rx);
        w.answer(group, rotate);
    }
}

/// The appends waiting after `msg`, up to [`MAX_GROUP`], and a rotation
/// asked for after them (it waits for the group sent before it).
fn gather(
    msg: Msg,
    rx: &mpsc::Receiver<Msg>,
) -> (Vec<Append>, Option<oneshot::Sender<RotateAnswer>>) {
    let (mut group, mut rotate) = (Vec::new(), None);
    match msg {
        Msg::Append(a) => group.push(a),
        Msg::Rotate(r) => rotate = Some(r),
    }
    let mut records: usize = group.iter().map(|a| a.payloads.len()).sum();
    while rotate.is_none() && records < MAX_GROUP {
        match rx.try_recv() {
            Ok(Msg::Append(a)) => {
                records += a.payloads.len();
                group.push(a)
            }
            Ok(Msg::Rotate(r)) => rotate = Some(r),
            Err(_) => break,
        }
    }
    (group, rotate)
}

/// What a rotation answers: the records sealed, if any.
type RotateAnswer = Result<Option<(u64, u64)>, JournalError>;

/// The writer thread's file and what it knows of it.
struct Writer {
    file: File,
    path: PathBuf,
    /// The journal's identity, for the head of each new file.
    id: Identity,
    /// The current file's first sequence number, and the next to write.
    file_first: u64,
    next: u64,
    /// The file's length up to its last fsynced record.
    good_len: u64,
    /// Why no write may be tried again (a failed fsync or a failed cut).
    poisoned: Option<String>,
    failures: crate::throttle::Throttle,
    healthy: tokio::sync::watch::Sender<bool>,
    /// The commit mark, set after each fsync ([`mark`]); none where it
    /// cannot be opened (said once). Its failures are logged on their
    /// own throttle, so that they never hide a write's.
    mark: Option<mark::Mark>,
    mark_failures: crate::throttle::Throttle,
}

impl Writer {
    fn new(
        file: File,
        path: PathBuf,
        id: Identity,
        // The current file's first sequence number, and the next to write.
        (file_first, next): (u64, u64),
        healthy: tokio::sync::watch::Sender<bool>,
    ) -> Writer {
        let mark = mark::Mark::open(&path)
            .inspect_err(|e| tracing::error!(path = %mark::path_of(&path).display(), error = %e, "cannot open the journal's commit mark; a start after a crash then knows acknowledged records from the store's and the checkpoint's marks only"))
            .ok();
        Writer {
            good_len: file.metadata().map_or(0, |m| m.len()),
            file,
            path,
            id,
            mark,
            mark_failures: crate::throttle::Throttle::new(crate::throttle::EVERY),
            file_first,
            next,
            poisoned: None,
            failures: crate::throttle::Throttle::new(crate::throttle::EVERY),
            healthy,
        }
    }

    /// Commits `group`, answers each append, then seals the file if
    /// `rotate` asks.
    fn answer(&mut self, group: Vec<Append>, rotate: Option<oneshot::Sender<RotateAnswer>>) {
        let first = self.next;
        let failed = self.commit(&group);
        let written = self.poisoned.is_none() && failed.is_none();
        self.healthy.send_if_modified(|h| {
            let now = written;
            std::mem::replace(h, now) != now
        });
        let mut seq = first;
        for a in group {
            let result = match (&self.poisoned, &failed) {
                (Some(e), _) => Err(JournalError::Poisoned(e.clone())),
                (None, Some(e)) => Err(JournalError::Unwritable(e.clone())),
                (None, None) => Ok(seq),
            };
            seq += a.payloads.len() as u64;
            let _ = a.done.send(result);
        }
        if let Some(answer) = rotate {
            let _ = answer.send(self.rotate());
        }
    }

    /// Writes `group` in one write and one fsync; returns why it failed
    /// (the file cut back to its last good length), if it did.
    fn commit(&mut self, group: &[Append]) -> Option<String> {
        if self.poisoned.is_some() || group.is_empty() {
            return None;
        }
        let payloads = || group.iter().flat_map(|a| &a.payloads);
        let mut buf = Vec::with_capacity(payloads().map(|p| HEADER + p.len()).sum());
        for (seq, p) in (self.next..).zip(payloads()) {
            buf.extend_from_slice(&frame(seq, p));
        }
        let records = payloads().count();
        if let Err(e) = self.file.write_all(&buf) {
            WRITE_ERRORS.inc();
            let path = self.path.display();
            if let Some(held) = self.failures.allow() {
                tracing::error!(%path, error = %e, failures_not_logged = held, "journal write failed; nothing of it acknowledged, later writes will try again (logged once a minute)");
            }
            let undone = self
                .file
                .set_len(self.good_len)
                .and_then(|()| self.file.seek(SeekFrom::End(0)).map(|_| ()));
            if let Err(u) = undone {
                tracing::error!(%path, error = %u, "cannot cut the journal back after a failed write; refusing further writes");
                self.poisoned = Some(format!("{e}; then {u}"));
            }
            return Some(e.to_string());
        }
        match timed_sync(&self.file) {
            Ok(()) => {
                self.next += records as u64;
                self.good_len += buf.len() as u64;
                GROUP_RECORDS.observe(records as f64);
                self.set_mark();
            }
            Err(e) => {
                WRITE_ERRORS.inc();
                tracing::error!(path = %self.path.display(), error = %e, "journal fsync failed; refusing further writes");
                self.poisoned = Some(e.to_string());
            }
        }
        None
    }

    /// Sets the commit mark to the last record fsynced, before any of the
    /// group is answered; a failure is logged (once a minute), and the
    /// mark then lags, as after a power cut.
    fn set_mark(&mut self) {
        let Some(m) = &self.mark else {
            return;
        };
        if let Err(e) = m.set(self.next - 1) {
            if let Some(held) = self.mark_failures.allow() {
                tracing::error!(path = %mark::path_of(&self.path).display(), error = %e, failures_not_logged = held, "cannot write the journal's commit mark (logged once a minute)");
            }
        }
    }

    /// Seals the current file if it holds records, and starts a new one.
    fn rotate(&mut self) -> RotateAnswer {
        if let Some(e) = &self.poisoned {
            return Err(JournalError::Poisoned(e.clone()));
        }
        if self.file_first == self.next {
            return Ok(None);
        }
        match seal(&self.path, self.id, self.file_first, self.next - 1) {
            Ok(new) => {
                self.file = new;
                self.good_len = head::LEN as u64;
                let sealed = (self.file_first, self.next - 1);
                self.file_first = self.next;
                Ok(Some(sealed))
            }
            Err(e) => {
                // The handle may now be the sealed file's: no append may
                // go there.
                WRITE_ERRORS.inc();
                tracing::error!(path = %self.path.display(), error = %e, "sealing the journal segment failed; refusing further writes");
                self.poisoned = Some(format!("sealing a segment: {e}"));
                self.healthy.send_replace(false);
                Err(JournalError::Poisoned(e.to_string()))
            }
        }
    }
}

/// Moves the current file (records `first..=last`, all fsynced) into the
/// sealed segments and opens a new, empty one of journal `id` in its place.
fn seal(path: &Path, id: Identity, first: u64, last: u64) -> io::Result<File> {
    segments::seal(path, first, last)?;
    let mut file = crate::owner_only::append(path)?;
    file.write_all(&head::bytes(id, last + 1))?;
    file.sync_all()?;
    sync_dir(path)?;
    Ok(file)
}

/// `fsync` (data only), its time observed in [`FSYNC_SECONDS`].
fn timed_sync(file: &File) -> io::Result<()> {
    let started = std::time::Instant::now();
    let synced = file.sync_data();
    FSYNC_SECONDS.observe(started.elapsed().as_secs_f64());
    synced
}

/// Makes a new file's directory entry durable.
pub(crate) fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()
}

/// What the journal's readers' tests share.
#[cfg(test)]
pub(crate) mod testing {
    use super::{segments, Journal};
    use crate::state::Event;
    use std::path::Path;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A boot record numbered `epoch`.
    pub fn boot(epoch: u64) -> Event {
        Event::Boot { epoch, unix_ms: 7 }
    }

    /// Appends boots 1 to 3,000 to `j` (at `path`), each stored in `acked`
    /// once acknowledged, sealing every 10 and compressing every 250: what
    /// a reader that takes no lock must see through.
    pub async fn churn(j: &Journal, path: &Path, acked: &AtomicU64) {
        for e in 1..=3_000u64 {
            j.append(&boot(e)).await.unwrap();
            acked.store(e, Ordering::SeqCst);
            if e % 10 == 0 {
                j.rotate().await.unwrap();
            }
            if e % 250 == 0 {
                segments::compress(path).unwrap();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::boot;
    use super::*;
    use crate::state::JobState;

    fn reopen(path: &Path) -> Result<Replay, JournalError> {
        Journal::open(path, 0, 0).map(|(_, r)| r)
    }

    fn epochs(records: &[Event]) -> Vec<u64> {
        records
            .iter()
            .map(|r| match r {
                Event::Boot { epoch, .. } => *epoch,
                _ => 0,
            })
            .collect()
    }

    #[tokio::test]
    async fn sealed_segments_continue_the_numbering_and_a_start_skips_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        {
            let (j, _) = Journal::open(&path, 0, 0).unwrap();
            for e in 1..=3 {
                assert_eq!(j.append(&boot(e)).await.unwrap(), e);
            }
            assert_eq!(j.rotate().await.unwrap(), Some((1, 3)));
            assert_eq!(j.rotate().await.unwrap(), None, "nothing new to seal");
            assert_eq!(j.append(&boot(4)).await.unwrap(), 4);
            assert_eq!(j.rotate().await.unwrap(), Some((4, 4)));
            assert_eq!(j.append(&boot(5)).await.unwrap(), 5);
        }
        assert_eq!(segments::compress(&path).unwrap(), 2);
        // After record 3: the first segment (1..=3) is not even read.
        let (j, r) = Journal::open(&path, 3, 0).unwrap();
        assert_eq!((r.first, r.last, epochs(&r.records)), (4, 5, vec![4, 5]));
        assert_eq!(j.append(&boot(6)).await.unwrap(), 6, "numbering goes on");
        drop(j);
        let (all, _) = read(&path).unwrap();
        assert_eq!(epochs(&all.records), vec![1, 2, 3, 4, 5, 6]);
        // A sealed segment must be whole: a cut end is damage, not a tear.
        let first = segments::list(&path).unwrap().remove(0);
        let bytes = std::fs::read(&first.path).unwrap();
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_end(&mut plain)
            .unwrap();
        let cut = first.path.with_extension("");
        std::fs::write(&cut, &plain[..plain.len() - 2]).unwrap();
        assert!(matches!(
            Journal::open(&path, 0, 0),
            Err(JournalError::DamagedSegment { .. })
        ));
        std::fs::remove_file(&cut).unwrap();
        // The newest sealed segment gone: the live file's records start
        // later than due, and the segment is named, not the live file.
        let newest = segments::list(&path).unwrap().pop().unwrap();
        std::fs::remove_file(&newest.path).unwrap();
        match Journal::open(&path, 0, 0) {
            Err(e @ JournalError::MissingRecords { from: 4, to: 4, .. }) => {
                assert!(e.to_string().contains("put the segment back"), "{e}");
                assert!(!e.to_string().contains("truncate"), "{e}");
            }
            other => panic!("{:?}", other.map(|(_, r)| r.last)),
        }
        // A journal shorter than acknowledged is refused and left alone.
        let before = std::fs::read(&path).unwrap();
        assert!(matches!(
            Journal::open(&path, 0, 9),
            Err(JournalError::MissingRecords { .. })
        ));
        assert_eq!(std::fs::read(&path).unwrap(), before);
    }

    #[tokio::test]
    async fn appended_records_come_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let (j, replay) = Journal::open(&path, 0, 0).unwrap();
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
            .map(|r| match r {
                Event::Boot { epoch, .. } => epoch,
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
        let (j, _) = Journal::open(&path, 0, 0).unwrap();
        for i in 1..=3 {
            j.append(&boot(i)).await.unwrap(); // equal sizes (no zero fields)
        }
        drop(j);
        let full = std::fs::read(&path).unwrap();
        let one = (full.len() - head::LEN) / 3;
        // Every possible torn length of the last record.
        for cut in 1..one {
            std::fs::write(&path, &full[..full.len() - cut]).unwrap();
            let r = reopen(&path).unwrap();
            assert_eq!(r.records.len(), 2, "cut {cut}");
            assert_eq!(r.truncated as usize, one - cut);
            assert_eq!(
                std::fs::read(&path).unwrap().len(),
                head::LEN + 2 * one,
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
        let (j, _) = Journal::open(&path, 0, 0).unwrap();
        for i in 1..=3 {
            let r = Event::JobControlled {
                job: i,
                state: JobState::Paused,
            };
            j.append(&r).await.unwrap();
        }
        drop(j);
        let bytes = std::fs::read(&path).unwrap();
        let one = (bytes.len() - head::LEN) / 3;
        let at = |k: usize| head::LEN + k * one;
        // Any bit of the middle or the last record, length, CRC and
        // sequence number included: damage, never a torn tail.
        for bit in 0..2 * one * 8 {
            let mut damaged = bytes.clone();
            damaged[at(1) + bit / 8] ^= 1 << (bit % 8);
            std::fs::write(&path, &damaged).unwrap();
            let err = reopen(&path).unwrap_err();
            let want = at(1 + bit / (8 * one)) as u64;
            assert!(
                matches!(err, JournalError::Corrupt { offset, .. } if offset == want),
                "bit {bit}: {err}"
            );
            assert!(err.to_string().contains("from a backup"), "{err}");
            assert_eq!(
                std::fs::read(&path).unwrap(),
                damaged,
                "a refused journal is left as it was"
            );
            // The survey loses only the record hit (the last one, hit,
            // is cut off the end: the commit mark counts that one).
            let s = repair::survey(&path).unwrap();
            let lost = if bit < 8 * one { vec![(2, 2)] } else { vec![] };
            assert!(s.damaged(), "bit {bit}");
            assert_eq!(
                (s.lost(), s.last()),
                (lost, 3 - u64::from(bit >= 8 * one)),
                "bit {bit}"
            );
        }
    }

    async fn three_records(path: &Path) -> (Vec<u8>, usize) {
        let (j, _) = Journal::open(path, 0, 0).unwrap();
        for i in 1..=3 {
            j.append(&boot(i)).await.unwrap();
        }
        drop(j);
        let bytes = std::fs::read(path).unwrap();
        let one = (bytes.len() - head::LEN) / 3;
        (bytes, one)
    }

    #[tokio::test]
    async fn a_cut_inside_the_file_or_a_missing_record_is_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let (bytes, one) = three_records(&path).await;
        let at = |k: usize| head::LEN + k * one;
        // A few bytes cut out of the middle record.
        for cut in [1, 5, one / 2, one - 1] {
            let mut damaged = bytes[..at(1) + 3].to_vec();
            damaged.extend_from_slice(&bytes[at(1) + 3 + cut..]);
            std::fs::write(&path, &damaged).unwrap();
            let err = reopen(&path).unwrap_err();
            assert!(
                matches!(err, JournalError::Corrupt { offset, record: 2, .. } if offset == at(1) as u64),
                "cut {cut}: {err}"
            );
        }
        // A whole record missing: a gap in the sequence.
        let mut gap = bytes[..at(1)].to_vec();
        gap.extend_from_slice(&bytes[at(2)..]);
        std::fs::write(&path, &gap).unwrap();
        let err = reopen(&path).unwrap_err();
        assert!(
            err.to_string()
                .contains("sequence number 3 where 2 was due"),
            "{err}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), gap, "left as it was");
    }

    #[tokio::test]
    async fn a_journal_of_the_first_format_is_read_and_upgraded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let mut old = Vec::new();
        for i in 1..=3 {
            let payload = codec::encode(&boot(i));
            old.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            old.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
            old.extend_from_slice(&payload);
        }
        std::fs::write(&path, &old).unwrap();
        let (j, r) = Journal::open(&path, 0, 0).unwrap();
        assert_eq!((r.records.len(), r.v1), (3, true));
        j.append(&boot(4)).await.unwrap();
        drop(j);
        assert_eq!(std::fs::read(path.with_extension("v1")).unwrap(), old);
        let r = reopen(&path).unwrap();
        assert_eq!((r.records.len(), r.v1), (4, false));
        // A damaged first-format journal is refused, not upgraded.
        let mut bad = old.clone();
        bad[10] ^= 1;
        let path = dir.path().join("journal2");
        std::fs::write(&path, &bad).unwrap();
        assert!(matches!(reopen(&path), Err(JournalError::Corrupt { .. })));
    }

    /// The heads of the live file and of every sealed segment.
    fn heads(path: &Path) -> Vec<Head> {
        let mut h: Vec<Head> = segments::list(path)
            .unwrap()
            .iter()
            .map(segments::head_of)
            .collect();
        h.push(head_of_file(path).unwrap());
        h
    }

    /// Every file a journal writes carries one identity, kept across
    /// starts, and the number of its first record.
    #[tokio::test]
    async fn every_file_carries_the_journals_identity_and_its_first_number() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        for start in 0..2u64 {
            let (j, _) = Journal::open(&path, 0, 0).unwrap();
            for e in 1..=4 {
                j.append(&boot(start * 4 + e)).await.unwrap();
                if e % 2 == 0 {
                    j.rotate().await.unwrap();
                }
            }
        }
        segments::compress(&path).unwrap();
        let heads = heads(&path);
        let id = heads[0].id().unwrap();
        let firsts: Vec<Option<u64>> = heads.iter().map(|h| h.first()).collect();
        assert_eq!(firsts, [1, 3, 5, 7, 9].map(Some));
        assert!(heads.iter().all(|h| h.id() == Some(id)), "{heads:?}");
        assert_eq!(
            epochs(&reopen(&path).unwrap().records),
            (1..=8).collect::<Vec<_>>()
        );
    }

    /// A live file of the second format (no identity) goes on as it is;
    /// its files after the next seal carry one, and the whole journal
    /// reads.
    #[tokio::test]
    async fn a_journal_of_the_second_format_goes_on_with_an_identity() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let mut old = head::MAGIC_V2.to_vec();
        for seq in 1..=3 {
            old.extend_from_slice(&frame(seq, &codec::encode(&boot(seq))));
        }
        std::fs::write(&path, &old).unwrap();
        let (j, r) = Journal::open(&path, 0, 0).unwrap();
        assert_eq!(epochs(&r.records), [1, 2, 3]);
        j.append(&boot(4)).await.unwrap();
        j.rotate().await.unwrap();
        j.append(&boot(5)).await.unwrap();
        drop(j);
        let before = heads(&path);
        assert_eq!(before[0], Head::V2);
        assert_eq!(before[1].first(), Some(5));
        let (all, _) = read(&path).unwrap();
        assert_eq!(epochs(&all.records), [1, 2, 3, 4, 5]);
        let (j, _) = Journal::open(&path, 0, 0).unwrap();
        j.rotate().await.unwrap();
        drop(j);
        let after = heads(&path);
        assert_eq!(
            after[1..].iter().map(|h| h.id()).collect::<Vec<_>>(),
            [before[1].id(); 2]
        );
    }
}
