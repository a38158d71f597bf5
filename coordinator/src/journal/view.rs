//! A consistent view of a journal that a running coordinator may be
//! appending to, sealing and compressing meanwhile, for the readers that
//! take no lock (an audit, a backup).
//!
//! A view lists the sealed segments, reads the live file, and lists them
//! again: if a segment was sealed in between (the live file is gone, or
//! the two lists differ), it starts again. With both lists alike, a live
//! file that does not start right after the last sealed segment lacks a
//! segment: damage, said as the start says it. A segment sealed after the view
//! was taken holds records the view has in its live bytes; one compressed
//! after it is read from its compressed file ([`read_listed`]). So a race
//! with a seal is never mistaken for damage, whose advice would cut
//! acknowledged records off the journal.

use super::head::{Expected, Head};
use super::{io_err, misplaced, parse, segments, JournalError};
use crate::state::Event;
use segments::{Sealed, Segment};
use std::io;
use std::path::Path;

/// Tries before a reader gives up on a journal that keeps changing under
/// it (a seal happens at each checkpoint: seconds to minutes apart).
pub const TRIES: usize = 20;

/// The journal at one moment: its sealed segments and its live file's
/// bytes and records, the first of them numbered `first`.
pub struct View {
    pub sealed: Vec<Sealed>,
    /// The live file's bytes (empty where it was missing beside sealed
    /// segments), its whole records, and the length of their part.
    pub live: Vec<u8>,
    pub records: Vec<Event>,
    pub good: usize,
    pub first: u64,
    /// The identity every file must carry (none where no file is of the
    /// current format).
    pub want: Option<Expected>,
}

/// A [`View`] of the journal at `path`, trying again while it changes
/// under the reader; an error for damage, or for a journal that changed
/// under every one of [`TRIES`] tries.
pub fn view(path: &Path) -> Result<View, JournalError> {
    let mut changing = JournalError::Io {
        path: path.to_path_buf(),
        source: io::Error::other(format!(
            "it changed under {TRIES} tries to read it (sealed or compressed each time)"
        )),
    };
    for i in 0..TRIES {
        if i > 0 {
            // Give a seal or a compression under way the time to end.
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        match try_view(path) {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            // A listing taken while a segment was compressed may miss
            // both its names: tried again, and said if it stays missing.
            Err(e @ JournalError::MissingSegment { .. }) => changing = e,
            Err(e) => return Err(e),
        }
    }
    Err(changing)
}

/// One try at a [`View`]: `None` if a segment was sealed or compressed
/// while it was taken.
pub fn try_view(path: &Path) -> Result<Option<View>, JournalError> {
    let sealed = segments::list(path)?;
    // Alike where they hold the same records (a segment compressed since
    // is read from its compressed file: see `read_listed`).
    let same = |other: &[Sealed]| {
        let range = |s: &Sealed| (s.first, s.last);
        other.iter().map(range).eq(sealed.iter().map(range))
    };
    let live = match std::fs::read(path) {
        // Moved into the segments while they were listed, or between.
        Err(e) if e.kind() == io::ErrorKind::NotFound && !same(&segments::list(path)?) => {
            return Ok(None)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound && !sealed.is_empty() => Vec::new(),
        r => r.map_err(io_err(path))?,
    };
    if !same(&segments::list(path)?) {
        return Ok(None);
    }
    let first = sealed.last().map_or(1, |s| s.last + 1);
    let parsed = match parse(&live, path, first) {
        Ok(parsed) => parsed,
        // No seal came between the listings: a later first record means
        // a segment is missing, an earlier one a segment out of place.
        Err(e @ JournalError::Corrupt { .. }) => {
            return Err(misplaced(&live, path, &sealed).unwrap_or(e))
        }
        Err(e) => return Err(e),
    };
    let want = segments::expected((path, Head::of(&live)), &sealed)?;
    Ok(Some(View {
        sealed,
        live,
        records: parsed.records,
        good: parsed.good,
        first,
        want,
    }))
}

/// Every record of a segment a view listed (see [`segments::read`]): from
/// its compressed file where it was compressed since.
pub fn read_listed(s: &Sealed, want: Option<&Expected>) -> Result<Segment, JournalError> {
    match segments::read(s, want) {
        Err(JournalError::Io { source, .. })
            if source.kind() == io::ErrorKind::NotFound && !s.compressed =>
        {
            let mut gz = s.path.clone().into_os_string();
            gz.push(".gz");
            segments::read(
                &Sealed {
                    path: gz.into(),
                    compressed: true,
                    ..s.clone()
                },
                want,
            )
        }
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{boot, churn};
    use super::super::{scan, segments, Journal};
    use crate::state::Event;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    /// Scans (as an audit takes them) while records are appended, sealed
    /// and compressed: every one reads a whole prefix of the journal, in
    /// order, holding every record acknowledged before it began, and none
    /// takes a race for damage.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn scans_taken_while_the_journal_is_sealed_read_it_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let (j, _) = Journal::open(&path, 0, 0).unwrap();
        let acked = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let scans = {
            let path = path.clone();
            let (acked, done) = (acked.clone(), done.clone());
            std::thread::spawn(move || {
                let mut n = 0;
                while !done.load(Ordering::SeqCst) || n < 10 {
                    let before = acked.load(Ordering::SeqCst);
                    let mut epochs = Vec::new();
                    let scanned = scan(&path, |r| match r {
                        Event::Boot { epoch, .. } => epochs.push(epoch),
                        _ => unreachable!("only boots here"),
                    })
                    .unwrap_or_else(|e| panic!("scan {n} after {before} records: {e}"));
                    assert!(scanned.records >= before, "{scanned:?} lost records");
                    assert_eq!(epochs, (1..=scanned.records).collect::<Vec<_>>());
                    n += 1;
                }
                n
            })
        };
        churn(&j, &path, &acked).await;
        done.store(true, Ordering::SeqCst);
        assert!(scans.join().unwrap() >= 10);
    }

    /// The newest sealed segment deleted: the scan says which records are
    /// missing and to put the segment back, as a start does, rather than
    /// taking the gap for a seal under way.
    #[tokio::test]
    async fn a_deleted_segment_is_damage_not_a_race() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let (j, _) = Journal::open(&path, 0, 0).unwrap();
        for e in 1..=7u64 {
            j.append(&boot(e)).await.unwrap();
            if e % 2 == 0 {
                j.rotate().await.unwrap();
            }
        }
        drop(j);
        let newest = segments::list(&path).unwrap().pop().unwrap();
        std::fs::remove_file(&newest.path).unwrap();
        match scan(&path, |_| {}) {
            Err(e @ super::super::JournalError::MissingRecords { from: 5, to: 6, .. }) => {
                assert!(e.to_string().contains("put the segment back"), "{e}")
            }
            other => panic!("{other:?}"),
        }
    }
}
