//! Sealed journal segments: `journal.d/FIRST-LAST.seg`, the records
//! numbered `FIRST..=LAST`, each file whole (it was fsynced before it was
//! sealed, so a torn end is damage here). A sealed segment is later
//! compressed to `FIRST-LAST.seg.gz` (written beside, fsynced, renamed,
//! and only then is the plain file removed); if both exist, the plain one
//! is read and the compression done again.
//!
//! Segments are never deleted: they are the evidence an audit re-reads,
//! and a start-up without a usable checkpoint replays them all. Sealed
//! segments must follow each other from record 1 with no gap.

use super::head::{self, Expected, Head, Identity};
use super::{io_err, parse, sync_dir, JournalError};
use crate::state::Event;
use flate2::{read::GzDecoder, write::GzEncoder, Compression};
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// One sealed segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sealed {
    pub first: u64,
    pub last: u64,
    pub path: PathBuf,
    pub compressed: bool,
}

/// The directory of the sealed segments of the journal at `journal`.
pub fn dir_of(journal: &Path) -> PathBuf {
    journal.with_extension("d")
}

pub(super) fn name(first: u64, last: u64) -> String {
    format!("{first:020}-{last:020}.seg")
}

/// `FIRST-LAST.seg` or `FIRST-LAST.seg.gz`.
fn parse_name(name: &str) -> Option<(u64, u64, bool)> {
    let (stem, compressed) = match name.strip_suffix(".seg.gz") {
        Some(stem) => (stem, true),
        None => (name.strip_suffix(".seg")?, false),
    };
    let (a, b) = stem.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?, compressed))
}

/// The sealed segments of the journal at `journal`, in order; a gap, an
/// overlap or a segment that does not start at record 1 is damage.
pub fn list(journal: &Path) -> Result<Vec<Sealed>, JournalError> {
    let found = list_all(journal)?;
    let mut next = 1;
    for s in &found {
        if s.first != next || s.last < s.first {
            return Err(JournalError::MissingSegment {
                path: s.path.clone(),
                first: s.first,
                last: s.last,
                due: next,
            });
        }
        next = s.last + 1;
    }
    Ok(found)
}

/// The sealed segments of the journal at `journal`, in order, gaps and
/// all (one file where a segment is there both plain and compressed).
pub(super) fn list_all(journal: &Path) -> Result<Vec<Sealed>, JournalError> {
    let mut found = list_every(journal)?;
    // The plain file first where both exist; then drop the other.
    found.dedup_by_key(|s| (s.first, s.last));
    Ok(found)
}

/// Every sealed segment file of the journal at `journal`, in order (a
/// segment there both plain and compressed twice, the plain one first).
pub(super) fn list_every(journal: &Path) -> Result<Vec<Sealed>, JournalError> {
    let dir = dir_of(journal);
    let entries = match std::fs::read_dir(&dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        r => r.map_err(io_err(&dir))?,
    };
    let mut found: Vec<Sealed> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_err(&dir))?;
        let file_name = entry.file_name();
        let Some((first, last, compressed)) = file_name.to_str().and_then(parse_name) else {
            continue; // a temporary file of an interrupted compression
        };
        found.push(Sealed {
            first,
            last,
            path: entry.path(),
            compressed,
        });
    }
    found.sort_by_key(|s| (s.first, s.last, s.compressed));
    Ok(found)
}

/// The bytes of a segment, uncompressed.
fn bytes_of(s: &Sealed) -> Result<Vec<u8>, JournalError> {
    let raw = std::fs::read(&s.path).map_err(io_err(&s.path))?;
    if !s.compressed {
        return Ok(raw);
    }
    let mut bytes = Vec::new();
    GzDecoder::new(&raw[..])
        .read_to_end(&mut bytes)
        .map_err(|e| JournalError::DamagedSegment {
            path: s.path.clone(),
            first: s.first,
            last: s.last,
            what: format!("it does not decompress ({e})"),
        })?;
    Ok(bytes)
}

/// A sealed segment, read.
#[derive(Debug)]
pub struct Segment {
    pub records: Vec<Event>,
    /// The bytes of its records' frames, uncompressed (its head not
    /// counted).
    pub frames: u64,
}

/// Every record of a sealed segment, CRC-checked; anything short of the
/// whole segment is damage, and a head of another journal than `want`
/// is refused.
pub fn read(s: &Sealed, want: Option<&Expected>) -> Result<Segment, JournalError> {
    let bytes = bytes_of(s)?;
    let damaged = |what: String| JournalError::DamagedSegment {
        path: s.path.clone(),
        first: s.first,
        last: s.last,
        what,
    };
    head::check(want, &s.path, Head::of(&bytes))?;
    let parsed = parse(&bytes, &s.path, s.first).map_err(|e| match e {
        JournalError::Corrupt {
            offset,
            record,
            what,
            ..
        } => damaged(format!(
            "at byte {offset} (uncompressed), record #{record}: {what}"
        )),
        e => e,
    })?;
    if parsed.good != bytes.len() || parsed.records.len() as u64 != s.last - s.first + 1 {
        return Err(damaged(format!(
            "it ends after {} of its records",
            parsed.records.len()
        )));
    }
    Ok(Segment {
        records: parsed.records,
        frames: (bytes.len() - parsed.head.size()) as u64,
    })
}

/// The head of a sealed segment (of a compressed one, as much as
/// decompresses); a file that cannot be opened has none to read.
pub fn head_of(s: &Sealed) -> Head {
    let Ok(file) = File::open(&s.path) else {
        return Head::Torn;
    };
    let mut bytes = Vec::with_capacity(head::LEN);
    let read = match s.compressed {
        true => GzDecoder::new(file)
            .take(head::LEN as u64)
            .read_to_end(&mut bytes),
        false => file.take(head::LEN as u64).read_to_end(&mut bytes),
    };
    match read {
        Ok(_) => Head::of(&bytes),
        Err(_) => Head::Torn,
    }
}

/// The identity a journal's files carry: the live file's (with `live`,
/// its head) where the newest sealed segment of `sealed` carries the same
/// or none, else that of the newest segment that carries one; none where
/// no file of the current format is there. (A journal of the second
/// format may hold files of the current one anywhere: a rebuild writes the
/// segments it makes in the current format, between older ones. So every
/// segment's head may be read, once, until the live file carries the
/// identity after the next seal.)
///
/// Where the live file and the newest segment differ, one of them is
/// another journal's ([`JournalError::Foreign`]): the live file if the
/// next segment with an identity agrees with the newest, else the newest.
/// While the live file is of the second format, the newest segment is
/// too (a rebuild writes segments only below the newest it keeps, and
/// rewrites a live file it does not keep in the current format): a newest
/// segment that carries an identity then is another journal's, refused
/// with [`JournalError::Newer`].
pub fn expected(live: (&Path, Head), sealed: &[Sealed]) -> Result<Option<Expected>, JournalError> {
    let mut heads = sealed.iter().rev().map(|s| (s.path.as_path(), head_of(s)));
    let newest = heads.next();
    let from_live = Expected::of(live);
    match (&from_live, newest) {
        (None, Some((path, Head::V3 { .. }))) if live.1 == Head::V2 => Err(JournalError::Newer {
            path: path.to_path_buf(),
            live: live.0.to_path_buf(),
        }),
        (Some(l), Some((path, head))) => match l.check(path, head) {
            Ok(()) => Ok(from_live),
            Err(newest_odd) => match heads.find_map(Expected::of) {
                Some(older) if older.id != l.id => Err(older
                    .check(live.0, live.1)
                    .expect_err("the live file's identity differs")),
                _ => Err(newest_odd),
            },
        },
        (Some(_), None) => Ok(from_live),
        (None, newest) => Ok(newest.into_iter().chain(heads).find_map(Expected::of)),
    }
}

/// The identity new files of a journal carry: the one its files carry,
/// or a new one.
pub fn identity(want: Option<&Expected>) -> Identity {
    want.map_or_else(Identity::random, |w| w.id)
}

/// Moves the journal file at `journal` (holding records `first..=last`,
/// fsynced) into the sealed segments.
pub(super) fn seal(journal: &Path, first: u64, last: u64) -> io::Result<()> {
    let dir = dir_of(journal);
    if !dir.exists() {
        crate::owner_only::create_dir_all(&dir)?;
        sync_dir(&dir)?;
    }
    std::fs::rename(journal, dir.join(name(first, last)))?;
    File::open(&dir)?.sync_all()?;
    sync_dir(journal)
}

/// Compresses every plain sealed segment, streamed (the records' CRCs go
/// along inside, so damage is still found when it is read), so the
/// history costs a fraction of its size on disk. Returns how many.
pub fn compress(journal: &Path) -> Result<usize, JournalError> {
    let dir = dir_of(journal);
    let mut done = 0;
    for s in list(journal)?.into_iter().filter(|s| !s.compressed) {
        let packed = dir.join(format!("{}.gz", name(s.first, s.last)));
        let tmp = dir.join(format!("{}.gz.tmp", name(s.first, s.last)));
        let write = || -> io::Result<()> {
            let mut gz = GzEncoder::new(crate::owner_only::create(&tmp)?, Compression::fast());
            io::copy(&mut io::BufReader::new(File::open(&s.path)?), &mut gz)?;
            gz.finish()?.sync_all()?;
            std::fs::rename(&tmp, &packed)?;
            File::open(&dir)?.sync_all()?;
            std::fs::remove_file(&s.path)?;
            File::open(&dir)?.sync_all()
        };
        write().map_err(io_err(&s.path))?;
        done += 1;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_range_and_the_compression() {
        assert_eq!(parse_name(&name(1, 250)), Some((1, 250, false)));
        assert_eq!(
            parse_name(&format!("{}.gz", name(251, 9))),
            Some((251, 9, true))
        );
        assert_eq!(parse_name("00001-00002.seg.gz.tmp"), None);
        assert_eq!(parse_name("journal"), None);
    }
}
