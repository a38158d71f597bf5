//! Checkpoints: the state's durable part as it was after a known set of
//! journal records, so that a start-up reads it and replays only the
//! records after (seconds, whatever the history).
//!
//! File `DIR/checkpoint`: the 8 bytes [`MAGIC`], the format number (u32),
//! the CRC-32 of the body (u32), the body's length (u64), little endian,
//! then the body (postcard). A new checkpoint is written beside, fsynced,
//! and renamed over the old one, which is kept as `checkpoint.prev`: a
//! damaged latest one falls back to it, and without either the whole
//! journal is replayed (the journal keeps every record, so a checkpoint
//! is never the only copy of anything).

use crate::journal::sync_dir;
use crate::seen::Seen;
use crate::state::State;
use prometheus_client::metrics::counter::Counter;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

pub const MAGIC: &[u8; 8] = b"NQCKPT\x00\x01";
/// Bumped whenever the state's shape changes, or what applying a record
/// makes of it: a checkpoint of another format is not read (the journal
/// is replayed instead).
pub const FORMAT: u32 = 8; // 2: plan specs carry a mode; 3: votes say whether checks cross devices; 4: worker ids' bindings; 5: plan specs carry their cut; 6: a count past 2^90 is kept for the audit only (a checkpoint of 5 may hold one counted, wedging its job); 7: a job's rate says whether it was steady; 8: a job's ledger indexes its conflicts and kept results, and the workers keep the quarantined ids forgotten
const HEADER: usize = 24;

/// The body of a checkpoint: which records the state holds, and the state.
#[derive(Serialize)]
struct Body<'a> {
    upto: u64,
    also: Vec<u64>,
    unix_ms: u64,
    state: &'a State,
}

#[derive(Deserialize)]
struct OwnedBody {
    upto: u64,
    also: Vec<u64>,
    unix_ms: u64,
    state: State,
}

/// A checkpoint read back.
#[derive(Debug)]
pub struct Loaded {
    /// The journal records the state holds: every one up to `seen.upto`,
    /// and those in `seen.beyond`.
    pub seen: Seen,
    pub state: State,
    pub unix_ms: u64,
    pub path: PathBuf,
    pub bytes: u64,
}

/// The file of the latest checkpoint in data directory `dir`.
pub fn path(dir: &Path) -> PathBuf {
    dir.join("checkpoint")
}

fn prev_path(dir: &Path) -> PathBuf {
    dir.join("checkpoint.prev")
}

/// A checkpoint's bytes: of `state`, which holds the records in `seen`.
pub fn encode(seen: &Seen, state: &State, unix_ms: u64) -> Vec<u8> {
    let body = postcard::to_stdvec(&Body {
        upto: seen.upto,
        also: seen.beyond.iter().copied().collect(),
        unix_ms,
        state,
    })
    .expect("the state serialises");
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Checkpoints that failed (process-wide, as the journal's figures).
pub static ERRORS: LazyLock<Counter> = LazyLock::new(Counter::default);

/// Writes a checkpoint durably (beside, fsync, rename, fsync of the
/// directory), keeping the one before as `checkpoint.prev`.
pub fn save(dir: &Path, bytes: &[u8]) -> io::Result<()> {
    // A file of its own per save: a save still running after its task was
    // aborted (at shutdown) never mixes its bytes with the next one's.
    static SAVES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SAVES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!("checkpoint.tmp.{n}"));
    let written = crate::owner_only::create(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    if let Err(e) = written {
        // A full disk must not fill up with partial checkpoints.
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let latest = path(dir);
    if latest.exists() {
        std::fs::rename(&latest, prev_path(dir))?;
    }
    std::fs::rename(&tmp, &latest)?;
    sync_dir(&latest)
}

/// Why a checkpoint file was not used.
fn decode(bytes: &[u8]) -> Result<OwnedBody, String> {
    if bytes.len() < HEADER || &bytes[..8] != MAGIC {
        return Err("it is not a checkpoint (bad magic bytes or too short)".into());
    }
    let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let format = word(8);
    if format != FORMAT {
        return Err(format!(
            "it is of format {format}, and this coordinator reads format {FORMAT}"
        ));
    }
    let len = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
    let body = &bytes[HEADER..];
    if body.len() as u64 != len {
        return Err(format!(
            "its header announces {len} bytes and {} follow (cut short?)",
            body.len()
        ));
    }
    if crc32fast::hash(body) != word(12) {
        return Err("its CRC does not match (damaged)".into());
    }
    postcard::from_bytes(body).map_err(|e| format!("its body does not decode: {e}"))
}

/// The latest usable checkpoint of data directory `dir`, if any: the
/// latest, else the one before it. Unusable ones are logged and skipped.
pub fn load(dir: &Path) -> Option<Loaded> {
    // Saves a crash interrupted (never renamed into place) are no use.
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with("checkpoint.tmp")
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    [path(dir), prev_path(dir)]
        .into_iter()
        .find_map(|file| read(file, true))
}

/// The checkpoint in `file`, if it reads (why not logged where `noisy`).
fn read(file: PathBuf, noisy: bool) -> Option<Loaded> {
    let bytes = match std::fs::read(&file) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => {
            if noisy {
                tracing::warn!(path = %file.display(), error = %e, "cannot read the checkpoint; trying an older one or the whole journal");
            }
            return None;
        }
    };
    match decode(&bytes) {
        Ok(b) => {
            let mut seen = Seen {
                upto: b.upto,
                beyond: BTreeSet::new(),
            };
            for seq in b.also {
                seen.add(seq);
            }
            Some(Loaded {
                seen,
                state: b.state,
                unix_ms: b.unix_ms,
                path: file,
                bytes: bytes.len() as u64,
            })
        }
        Err(why) => {
            if noisy {
                tracing::warn!(path = %file.display(), %why, "checkpoint not used; trying an older one or the whole journal");
            }
            None
        }
    }
}

/// Every checkpoint of data directory `dir` that reads, those moved aside
/// (`checkpoint*.lost-*`) included, newest first: what they say of the
/// jobs outlives the records they covered.
pub fn every(dir: &Path) -> Vec<Loaded> {
    let mut found: Vec<Loaded> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("checkpoint") && !name.starts_with("checkpoint.tmp")
        })
        .filter_map(|e| read(e.path(), false))
        .collect();
    found.sort_by_key(|c| std::cmp::Reverse(c.unix_ms));
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Limits;

    fn seen() -> Seen {
        let mut s = Seen::upto(41);
        s.add(43);
        s
    }

    #[test]
    fn a_checkpoint_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let state = State::new(Limits::default());
        save(dir.path(), &encode(&seen(), &state, 7)).unwrap();
        let l = load(dir.path()).unwrap();
        assert_eq!((l.seen, l.unix_ms), (seen(), 7));
        assert_eq!(l.state.epoch(), state.epoch());
    }

    #[test]
    fn a_damaged_latest_checkpoint_falls_back_to_the_one_before() {
        let dir = tempfile::tempdir().unwrap();
        let state = State::new(Limits::default());
        save(dir.path(), &encode(&Seen::upto(10), &state, 1)).unwrap();
        save(dir.path(), &encode(&Seen::upto(20), &state, 2)).unwrap();
        let latest = path(dir.path());
        let good = std::fs::read(&latest).unwrap();
        // A flipped byte, a cut, another format: each falls back.
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        let mut other = good.clone();
        other[8] = 9;
        for bad in [
            flipped,
            good[..good.len() - 3].to_vec(),
            other,
            b"junk".to_vec(),
        ] {
            std::fs::write(&latest, &bad).unwrap();
            assert_eq!(load(dir.path()).unwrap().seen, Seen::upto(10));
        }
        std::fs::remove_file(prev_path(dir.path())).unwrap();
        assert!(load(dir.path()).is_none(), "nothing usable: replay it all");
        // A save a crash left half-written is cleared at the next load.
        let stale = dir.path().join("checkpoint.tmp.7");
        std::fs::write(&stale, b"half").unwrap();
        load(dir.path());
        assert!(!stale.exists());
    }

    /// A save onto a full disk (a 64 KB tmpfs of the test's own, in a
    /// mount namespace it makes; skipped, saying why, where that is not
    /// allowed) fails, leaves no `checkpoint.tmp.*`, and the checkpoint
    /// before it still loads.
    #[test]
    fn a_save_onto_a_full_disk_fails_and_leaves_no_partial_file() {
        const INSIDE: &str = "NQUEENS_TEST_IN_MOUNTNS";
        const NAME: &str =
            "checkpoint::tests::a_save_onto_a_full_disk_fails_and_leaves_no_partial_file";
        if std::env::var_os(INSIDE).is_none() {
            if !nqueens_testkit::passes_in_namespace("-m", INSIDE, NAME) {
                eprintln!("skipped: making a mount namespace (unshare -m) is not allowed here");
            }
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(
            mounted.success(),
            "mount a tmpfs on {}",
            dir.path().display()
        );
        let state = State::new(Limits::default());
        save(dir.path(), &encode(&Seen::upto(10), &state, 1)).unwrap();
        let err = save(dir.path(), &vec![7u8; 1 << 20]).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(28), "ENOSPC: {err}");
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["checkpoint"], "a partial file was left");
        assert_eq!(load(dir.path()).unwrap().seen, Seen::upto(10));
    }
}
