//! A consistent copy of a journal that a running coordinator may be
//! appending to, sealing and compressing meanwhile: every sealed segment
//! and the live file's whole records, as a `kill -9` at one moment would
//! leave them, each read back from the copy and its CRCs checked.
//!
//! The copy takes no lock. It takes a [`super::view::View`] of the
//! journal, and starts again if a segment listed there is compressed
//! before it is copied. A half-written last record of the live file is
//! left out, as a start-up cuts it off.

use super::view::{try_view, TRIES};
use super::{head, io_err, segments, sync_dir, JournalError};
use std::io::{self, Write};
use std::path::Path;

/// What a copy holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Copied {
    /// Records `1..=records`.
    pub records: u64,
    pub segments: usize,
    /// Bytes written (segments as stored, compressed or not).
    pub bytes: u64,
}

/// Copies the journal at `from` (with its sealed segments) to `to`, where
/// no journal may be yet. Damage in the journal is an error, as at
/// start-up.
pub fn copy(from: &Path, to: &Path) -> Result<Copied, JournalError> {
    let dir = segments::dir_of(to);
    if to.exists() || dir.exists() {
        return Err(JournalError::Io {
            path: to.to_path_buf(),
            source: io::Error::from(io::ErrorKind::AlreadyExists),
        });
    }
    let mut changing = JournalError::Io {
        path: from.to_path_buf(),
        source: io::Error::other(format!(
            "it changed under {TRIES} tries to copy it (sealed or compressed each time)"
        )),
    };
    for _ in 0..TRIES {
        // What an earlier try copied.
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(io_err(&dir))?;
        }
        match try_copy(from, to) {
            Ok(Some(copied)) => return Ok(copied),
            Ok(None) => {}
            // A listing taken while a segment was compressed may miss
            // both its names: tried again, and said if it stays missing.
            Err(e @ JournalError::MissingSegment { .. }) => changing = e,
            Err(e) => return Err(e),
        }
    }
    Err(changing)
}

/// One try: `None` if a segment was sealed or compressed meanwhile.
fn try_copy(from: &Path, to: &Path) -> Result<Option<Copied>, JournalError> {
    let Some(view) = try_view(from)? else {
        return Ok(None);
    };
    let (sealed, live, good, first, want) =
        (view.sealed, view.live, view.good, view.first, view.want);
    let records = view.records.len() as u64;
    let dir = segments::dir_of(to);
    if !sealed.is_empty() {
        crate::owner_only::create_dir_all(&dir).map_err(io_err(&dir))?;
    }
    let mut bytes = 0;
    for s in &sealed {
        let raw = match std::fs::read(&s.path) {
            // Compressed meanwhile (the plain file removed).
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            r => r.map_err(io_err(&s.path))?,
        };
        let name = s.path.file_name().expect("a segment's file name");
        let copy = dir.join(name);
        write_synced(&copy, &raw).map_err(io_err(&copy))?;
        segments::read(
            &segments::Sealed {
                path: copy,
                ..s.clone()
            },
            want.as_ref(),
        )
        .map_err(|e| match e {
            // Said of the file copied, which is the one to move.
            JournalError::Foreign {
                found, want, from, ..
            } => JournalError::Foreign {
                path: s.path.clone(),
                found,
                want,
                from,
            },
            e => e,
        })?;
        bytes += raw.len() as u64;
    }
    if !sealed.is_empty() {
        std::fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .and_then(|()| sync_dir(&dir))
            .map_err(io_err(&dir))?;
    }
    let new = head::bytes(segments::identity(want.as_ref()), first);
    let head = if live.is_empty() { &new } else { &live[..good] };
    write_synced(to, head).map_err(io_err(to))?;
    sync_dir(to).map_err(io_err(to))?;
    Ok(Some(Copied {
        records: first - 1 + records,
        segments: sealed.len(),
        bytes: bytes + head.len() as u64,
    }))
}

/// Writes `bytes` to a new file at `path` (mode 0600) and fsyncs it.
fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = crate::owner_only::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::super::testing::{boot, churn};
    use super::super::{read, Journal};
    use super::*;
    use crate::state::Event;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    fn epochs(path: &Path) -> Vec<u64> {
        let (all, _) = read(path).unwrap();
        let epoch = |r: &Event| match r {
            Event::Boot { epoch, .. } => *epoch,
            _ => unreachable!("only boots here"),
        };
        all.records.iter().map(epoch).collect()
    }

    /// Sealed segments (one compressed) and a live file with a torn last
    /// write: the copy holds every whole record and opens as a journal.
    #[tokio::test]
    async fn a_copy_holds_every_whole_record_and_opens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        {
            let (j, _) = Journal::open(&path, 0, 0).unwrap();
            for e in 1..=7 {
                j.append(&boot(e)).await.unwrap();
                if e % 3 == 0 {
                    j.rotate().await.unwrap();
                }
            }
        }
        assert_eq!(segments::compress(&path).unwrap(), 2);
        let (j, _) = Journal::open(&path, 0, 0).unwrap();
        j.append(&boot(8)).await.unwrap();
        j.rotate().await.unwrap();
        j.append(&boot(9)).await.unwrap();
        drop(j);
        // A write torn half-way: never acknowledged.
        let mut live = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        live.write_all(&[40, 0, 0, 0, 1, 2]).unwrap();

        let to = dir.path().join("copy/journal");
        std::fs::create_dir(dir.path().join("copy")).unwrap();
        let copied = copy(&path, &to).unwrap();
        assert_eq!((copied.records, copied.segments), (9, 3));
        assert_eq!(epochs(&to), (1..=9).collect::<Vec<_>>());
        let (j, replay) = Journal::open(&to, 0, 9).unwrap();
        assert_eq!((replay.last, replay.truncated), (9, 0));
        assert_eq!(j.append(&boot(10)).await.unwrap(), 10);
        // A copy never lands on a journal.
        assert!(copy(&path, &to).is_err());
    }

    /// Copies taken while records are appended, sealed and compressed:
    /// each is a prefix of the journal holding every record acknowledged
    /// before it began, and opens.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn copies_taken_while_the_journal_is_sealed_hold_what_was_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let (j, _) = Journal::open(&path, 0, 0).unwrap();
        let acked = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let copies = {
            let (path, root) = (path.clone(), dir.path().to_path_buf());
            let (acked, done) = (acked.clone(), done.clone());
            std::thread::spawn(move || {
                let mut taken = Vec::new();
                for i in 0.. {
                    if done.load(Ordering::SeqCst) && i >= 10 {
                        break;
                    }
                    let before = acked.load(Ordering::SeqCst);
                    let to = root.join(format!("copy{i}"));
                    std::fs::create_dir(&to).unwrap();
                    let copied = copy(&path, &to.join("journal")).unwrap();
                    assert!(
                        copied.records >= before,
                        "{copied:?} lost acknowledged records"
                    );
                    taken.push((to.join("journal"), copied.records));
                }
                taken
            })
        };
        churn(&j, &path, &acked).await;
        done.store(true, Ordering::SeqCst);
        let taken = copies.join().unwrap();
        for (copy, records) in taken {
            assert_eq!(epochs(&copy), (1..=records).collect::<Vec<_>>());
            Journal::open(&copy, 0, records).unwrap();
        }
    }

    /// A segment of another journal is refused, named where it lies in
    /// the journal copied, not in the copy.
    #[tokio::test]
    async fn a_segment_of_another_journal_is_named_where_it_lies() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let (j, _) = Journal::open(&path, 0, 0).unwrap();
        for e in 1..=4 {
            j.append(&boot(e)).await.unwrap();
            j.rotate().await.unwrap();
        }
        drop(j);
        let odd = segments::list(&path).unwrap().remove(2).path;
        let mut b = std::fs::read(&odd).unwrap();
        b[..head::LEN].copy_from_slice(&head::bytes(head::Identity::fixed(9), 3));
        std::fs::write(&odd, b).unwrap();
        match copy(&path, &dir.path().join("copy")) {
            Err(JournalError::Foreign { path, .. }) => assert_eq!(path, odd),
            other => panic!("{other:?}"),
        }
    }
}
