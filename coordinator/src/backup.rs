//! A backup of a data directory, taken while its coordinator runs (or
//! with none): the journal, which holds every acknowledged record, and
//! the small files a coordinator started on the copy needs to go on as
//! the original would (its lease secret, the issued tokens' hashes, the
//! mark that workers must authenticate). The store and the checkpoints are
//! left out: a coordinator started on the backup rebuilds them from the
//! journal (replaying all of it once), as after losing them.
//!
//! The journal is copied as a `kill -9` at one moment would leave it
//! ([`crate::journal::copy`]), and read back from the copy, every CRC
//! checked, before the backup is called made.

use crate::journal::{self, copy::Copied, JournalError};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The small files copied beside the journal, where they exist.
pub const BESIDE: [&str; 3] = ["lease.key", crate::credentials::FILE, crate::access::MARK];

/// Why a backup was not made.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{0} holds no journal: is it a coordinator's data directory (--data-dir)?")]
    NoJournal(PathBuf),
    #[error("{0} exists and is not empty: back up into a new directory")]
    NotEmpty(PathBuf),
    #[error("{dest} is inside the data directory {dir}: put the backup elsewhere (another disk)")]
    Inside { dest: PathBuf, dir: PathBuf },
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("cannot write the backup at {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("the copy in {path} reads back {got} records, not the {want} copied: its disk may be failing")]
    ReadBack { path: PathBuf, want: u64, got: u64 },
}

/// What a backup holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Made {
    pub journal: Copied,
    /// Which of [`BESIDE`] were there, and copied.
    pub beside: Vec<&'static str>,
}

fn io(path: &Path) -> impl FnOnce(io::Error) -> BackupError {
    let path = path.to_path_buf();
    move |source| BackupError::Io { path, source }
}

fn write(path: &Path) -> impl FnOnce(io::Error) -> BackupError {
    let path = path.to_path_buf();
    move |source| BackupError::Write { path, source }
}

/// Backs up data directory `from` into `to` (a new or empty directory).
/// The copy is made beside `to` under a temporary name, and renamed to
/// `to` only once whole and read back: a backup cut short (a full disk,
/// Ctrl-C) never leaves at `to` a directory a coordinator would start on
/// with records missing.
pub fn backup(from: &Path, to: &Path) -> Result<Made, BackupError> {
    let journal = from.join("journal");
    if !journal.exists() && !journal::segments::dir_of(&journal).exists() {
        return Err(BackupError::NoJournal(from.to_path_buf()));
    }
    if std::fs::read_dir(to).is_ok_and(|mut d| d.next().is_some()) {
        return Err(BackupError::NotEmpty(to.to_path_buf()));
    }
    let (parent, name) = match (to.parent(), to.file_name()) {
        (Some(p), Some(n)) => (
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            },
            n,
        ),
        _ => return Err(BackupError::NotEmpty(to.to_path_buf())),
    };
    let (dir, above) = (
        std::fs::canonicalize(from).map_err(io(from))?,
        std::fs::canonicalize(parent).map_err(io(parent))?,
    );
    if above.starts_with(&dir) {
        return Err(BackupError::Inside {
            dest: to.to_path_buf(),
            dir,
        });
    }
    let partial = parent.join(format!(".{}.partial", name.to_string_lossy()));
    if partial.exists() {
        // A backup cut short before.
        std::fs::remove_dir_all(&partial).map_err(write(&partial))?;
    }
    crate::owner_only::create_dir_all(&partial).map_err(write(&partial))?;
    let made = copy_into(from, &partial).and_then(|made| {
        std::fs::rename(&partial, to).map_err(write(to))?;
        journal::sync_dir(to).map_err(write(to))?;
        Ok(made)
    });
    if made.is_err() {
        // Best effort: the error says what went wrong.
        let _ = std::fs::remove_dir_all(&partial);
    }
    made
}

/// The journal and [`BESIDE`] of `from` copied into the empty `to`.
fn copy_into(from: &Path, to: &Path) -> Result<Made, BackupError> {
    let journal = from.join("journal");
    let mut beside = Vec::new();
    for name in BESIDE {
        let bytes = match std::fs::read(from.join(name)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            r => r.map_err(io(&from.join(name)))?,
        };
        let copy = to.join(name);
        let mut f = crate::owner_only::create(&copy).map_err(write(&copy))?;
        f.write_all(&bytes)
            .and_then(|()| f.sync_all())
            .map_err(write(&copy))?;
        beside.push(name);
    }
    let copied = journal::copy::copy(&journal, &to.join("journal")).map_err(|e| match e {
        JournalError::Io { path, source } if path.starts_with(to) => {
            BackupError::Write { path, source }
        }
        e => e.into(),
    })?;
    std::fs::File::open(to)
        .and_then(|d| d.sync_all())
        .map_err(write(to))?;
    let read = journal::scan(&to.join("journal"), |_| {})?;
    if read.records != copied.records {
        return Err(BackupError::ReadBack {
            path: to.to_path_buf(),
            want: copied.records,
            got: read.records,
        });
    }
    Ok(Made {
        journal: copied,
        beside,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Journal;
    use crate::state::Event;
    use std::os::unix::fs::PermissionsExt;

    /// A data directory with three records and a lease key.
    async fn data_dir(root: &Path) -> PathBuf {
        let dir = root.join("data");
        std::fs::create_dir(&dir).unwrap();
        let (j, _) = Journal::open(&dir.join("journal"), 0, 0).unwrap();
        for epoch in 1..=3 {
            j.append(&Event::Boot { epoch, unix_ms: 7 }).await.unwrap();
        }
        std::fs::write(dir.join("lease.key"), [7; 32]).unwrap();
        dir
    }

    #[tokio::test]
    async fn a_backup_copies_the_journal_and_the_secrets_owner_only() {
        let root = tempfile::tempdir().unwrap();
        let data = data_dir(root.path()).await;
        let to = root.path().join("backup");
        let made = backup(&data, &to).unwrap();
        assert_eq!((made.journal.records, made.beside), (3, vec!["lease.key"]));
        assert_eq!(std::fs::read(to.join("lease.key")).unwrap(), [7; 32]);
        // Issued tokens and the mark that workers authenticate go too: a
        // coordinator on the copy takes the same tokens.
        let token = crate::credentials::issue(&data, "node-a").unwrap();
        std::fs::write(data.join(crate::access::MARK), b"").unwrap();
        let again = root.path().join("again");
        assert_eq!(backup(&data, &again).unwrap().beside, BESIDE);
        let creds = crate::credentials::Credentials::open(&again).unwrap();
        assert_eq!(creds.name_of(&token).as_deref(), Some("node-a"));
        assert!(again.join(crate::access::MARK).exists());
        for path in [&to, &to.join("lease.key"), &to.join("journal")] {
            let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
            assert!(mode & 0o077 == 0, "{} is {mode:o}", path.display());
        }
        // Never over an earlier backup, nor inside the data directory, nor
        // from a directory without a journal.
        assert!(matches!(backup(&data, &to), Err(BackupError::NotEmpty(_))));
        let inside = backup(&data, &data.join("journal.d")).unwrap_err();
        assert!(matches!(inside, BackupError::Inside { .. }), "{inside}");
        assert!(!data.join("journal.d").exists());
        let empty = root.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        let no = backup(&empty, &root.path().join("b2")).unwrap_err();
        assert!(matches!(no, BackupError::NoJournal(_)), "{no}");
        assert!(no.to_string().contains("--data-dir"), "{no}");
    }

    /// A journal damaged before its end is not copied: the error is the
    /// one a start-up gives, with where the damage is.
    #[tokio::test]
    async fn a_damaged_journal_is_named_not_copied() {
        let root = tempfile::tempdir().unwrap();
        let data = data_dir(root.path()).await;
        let mut bytes = std::fs::read(data.join("journal")).unwrap();
        bytes[crate::journal::head::LEN + 20] ^= 0xff;
        std::fs::write(data.join("journal"), bytes).unwrap();
        let to = root.path().join("backup");
        let e = backup(&data, &to).unwrap_err();
        assert!(
            matches!(e, BackupError::Journal(JournalError::Corrupt { .. })),
            "{e}"
        );
        assert!(e.to_string().contains("byte"), "{e}");
        assert!(!to.exists(), "a failed backup leaves nothing behind");
        assert_eq!(
            std::fs::read_dir(root.path()).unwrap().count(),
            1,
            "only the data"
        );
    }

    /// Into an empty directory that exists (made owner-only), over what a
    /// backup cut short left beside it: the backup is whole.
    #[tokio::test]
    async fn a_backup_replaces_an_empty_directory_and_a_partial_one() {
        let root = tempfile::tempdir().unwrap();
        let data = data_dir(root.path()).await;
        let to = root.path().join("backup");
        std::fs::create_dir(&to).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
        let cut_short = root.path().join(".backup.partial");
        std::fs::create_dir_all(cut_short.join("journal.d")).unwrap();
        std::fs::write(cut_short.join("journal.d/junk.seg"), b"half").unwrap();
        assert_eq!(backup(&data, &to).unwrap().journal.records, 3);
        assert!(!cut_short.exists());
        let mode = std::fs::metadata(&to).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert!(!to.join("journal.d").exists());
        assert_eq!(journal::read(&to.join("journal")).unwrap().0.last, 3);
    }
}
