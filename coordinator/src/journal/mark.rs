//! The journal's commit mark, `journal.mark`: the last record fsynced into
//! the journal, written after each group's fsync and before any record of
//! the group is acknowledged. It is written, not synced (a second fsync a
//! group would halve the journal's rate), so it survives a crash of the
//! process, which leaves the page cache to the kernel, and may lag after
//! a power cut, when the store's and the checkpoint's marks still bound
//! what was acknowledged. It never runs ahead of the journal's durable
//! records: a start that finds the journal ending before it knows records
//! were lost, however the journal was cut (a whole record off the end
//! reads as a journal that simply ended there).
//!
//! 16 bytes at offset 0: the sequence number (little-endian), its CRC32,
//! and the tag `NQJM`. A mark that does not read back whole says nothing (a
//! warning, and the other marks decide).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const TAG: &[u8; 4] = b"NQJM";
const LEN: usize = 16;

/// Where the mark of the journal at `journal` lives.
pub fn path_of(journal: &Path) -> PathBuf {
    journal.with_extension("mark")
}

fn encode(last: u64) -> [u8; LEN] {
    let mut b = [0; LEN];
    b[..8].copy_from_slice(&last.to_le_bytes());
    b[8..12].copy_from_slice(&crc32fast::hash(&last.to_le_bytes()).to_le_bytes());
    b[12..].copy_from_slice(TAG);
    b
}

fn decode(b: &[u8]) -> Option<u64> {
    let b: &[u8; LEN] = b.try_into().ok()?;
    let last: [u8; 8] = b[..8].try_into().expect("8 bytes");
    let crc = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
    (&b[12..] == TAG && crc == crc32fast::hash(&last)).then(|| u64::from_le_bytes(last))
}

/// [`read`] without a word: 0 where there is no mark or it does not read
/// whole (as while its writer rewrites it, to a reader of a running
/// coordinator's journal).
pub fn peek(journal: &Path) -> u64 {
    std::fs::read(path_of(journal))
        .ok()
        .and_then(|b| decode(&b))
        .unwrap_or(0)
}

/// The last record the journal at `journal` had fsynced when its writer
/// last said so: 0 where there is no mark, and, with a warning, where it
/// does not read back whole.
pub fn read(journal: &Path) -> u64 {
    let path = path_of(journal);
    match std::fs::read(&path) {
        Ok(b) => decode(&b).unwrap_or_else(|| {
            tracing::warn!(path = %path.display(), "the journal's commit mark is damaged; the store's and the checkpoint's marks decide how far records were acknowledged");
            0
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the journal's commit mark; the store's and the checkpoint's marks decide how far records were acknowledged");
            0
        }
    }
}

/// The writer's handle on the mark.
pub struct Mark {
    file: File,
}

impl Mark {
    /// Opens (or makes, owner-only) the mark of the journal at `journal`.
    pub fn open(journal: &Path) -> io::Result<Mark> {
        let path = path_of(journal);
        let file = match std::fs::OpenOptions::new().write(true).open(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => crate::owner_only::create(&path)?,
            r => r?,
        };
        Ok(Mark { file })
    }

    /// Records that every record up to `last` is fsynced in the journal.
    pub fn set(&self, last: u64) -> io::Result<()> {
        self.file.write_all_at(&encode(last), 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_reads_back_and_a_damaged_one_says_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("journal");
        assert_eq!(read(&journal), 0, "no mark");
        let m = Mark::open(&journal).unwrap();
        m.set(41).unwrap();
        m.set(1 << 40).unwrap();
        assert_eq!(read(&journal), 1 << 40);
        drop(m);
        assert_eq!(read(&journal), 1 << 40, "kept when opened again");
        Mark::open(&journal).unwrap();
        assert_eq!(read(&journal), 1 << 40);
        let mut b = std::fs::read(path_of(&journal)).unwrap();
        b[2] ^= 1;
        std::fs::write(path_of(&journal), &b).unwrap();
        assert_eq!(read(&journal), 0, "a flipped bit");
        std::fs::write(path_of(&journal), &encode(7)[..10]).unwrap();
        assert_eq!(read(&journal), 0, "cut short");
    }
}
