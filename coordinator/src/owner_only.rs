//! Files and directories only the coordinator's user may read or write:
//! a data directory holds the results, the lease secret and the tokens'
//! hashes. Every file the coordinator creates there goes through here.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// Creates (or empties) `path` for writing, mode 0600.
pub fn create(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

/// Opens `path` to read and append, creating it with mode 0600.
pub fn append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
}

/// Creates `dir`, mode 0700, whose parent must exist (an existing one is
/// left as it is).
pub fn create_dir(dir: &Path) -> io::Result<()> {
    match DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        done => done,
    }
}

/// Creates `dir` and its missing parents, mode 0700 (an existing one is
/// left as it is).
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn what_is_created_is_the_owners_only() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("a/b");
        create_dir_all(&data).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&data), 0o700);
        create(&data.join("f")).unwrap();
        append(&data.join("g")).unwrap();
        assert_eq!(
            (mode(&data.join("f")), mode(&data.join("g"))),
            (0o600, 0o600)
        );
    }
}
