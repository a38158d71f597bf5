//! Per-worker credentials: tokens the operator issues by name
//! (`nqueens token issue NAME --data-dir DIR`), stored only as SHA-256
//! hashes in `DIR/worker-tokens` (one `NAME HASH` line each, owner-only).
//! A running coordinator picks up issued and revoked tokens within a
//! second or two. Redundancy counts votes by credential, so one token
//! cannot supply two votes however many worker ids it registers.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::time::SystemTime;

/// The file of issued tokens in a data directory.
pub const FILE: &str = "worker-tokens";

/// Why a credential command failed.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("credential name '{0}' is not allowed: use 1 to 64 letters, digits, '-', '_' or '.'")]
    BadName(String),
    #[error("a credential named '{0}' exists already: revoke it first, or choose another name")]
    Exists(String),
    #[error("no credential named '{0}' (`nqueens token list --data-dir DIR` lists them)")]
    Unknown(String),
    #[error("{path} line {line} is damaged: expected 'NAME SHA256-HEX'")]
    Damaged { path: PathBuf, line: usize },
    #[error(
        "the tokens' file would belong to user {mine}, and the coordinator runs as the data \
         directory's owner, user {owner}, who could not read it: run this as that user \
         (e.g. `sudo -u '#{owner}' nqueens token ...`) or as root"
    )]
    NotTheOwner { mine: u32, owner: u32 },
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The stored form of a token.
pub fn hash(token: &str) -> String {
    hex(&Sha256::digest(token.trim().as_bytes()))
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Reads the file: (name, hash) in order; a missing file is empty.
fn read(dir: &Path) -> Result<Vec<(String, String)>, CredentialError> {
    let path = dir.join(FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(CredentialError::Io { path, source }),
    };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut parts = line.split_whitespace();
        match (parts.next(), parts.next(), parts.next()) {
            (Some(name), Some(h), None) if valid_name(name) && h.len() == 64 => {
                out.push((name.to_string(), h.to_string()))
            }
            _ => {
                return Err(CredentialError::Damaged {
                    path: path.clone(),
                    line: i + 1,
                })
            }
        }
    }
    Ok(out)
}

/// Writes the file atomically (a temporary file renamed over it).
fn write(dir: &Path, entries: &[(String, String)]) -> Result<(), CredentialError> {
    let path = dir.join(FILE);
    let tmp = dir.join(format!("{FILE}.tmp"));
    let text: String = entries.iter().map(|(n, h)| format!("{n} {h}\n")).collect();
    let io = |source| CredentialError::Io {
        path: path.clone(),
        source,
    };
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    let mut f = o.open(&tmp).map_err(io)?;
    #[cfg(unix)]
    if let Err(e) = give_to_owner(dir, &f) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::io::Write::write_all(&mut f, text.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, &path).map_err(io)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io)
}

/// Gives `file`, just made in `dir`, to `dir`'s owner and group, the
/// coordinator's user: a token issued by root (as `sudo nqueens token
/// issue` does) must stay readable by the coordinator. Another user, who
/// cannot give a file away, is refused and told whom to run as.
#[cfg(unix)]
fn give_to_owner(dir: &Path, file: &std::fs::File) -> Result<(), CredentialError> {
    use std::os::unix::fs::MetadataExt;
    let io = |source| CredentialError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let (owner, made) = (
        std::fs::metadata(dir).map_err(io)?,
        file.metadata().map_err(io)?,
    );
    if (made.uid(), made.gid()) == (owner.uid(), owner.gid()) {
        return Ok(());
    }
    std::os::unix::fs::fchown(file, Some(owner.uid()), Some(owner.gid())).map_err(|e| {
        match e.kind() {
            std::io::ErrorKind::PermissionDenied => CredentialError::NotTheOwner {
                mine: made.uid(),
                owner: owner.uid(),
            },
            _ => io(e),
        }
    })
}

/// Whether `dir` is a coordinator's data directory: it holds a journal
/// (a coordinator started there: the file, or its sealed segments'
/// folder) or issued tokens.
pub fn is_data_dir(dir: &Path) -> bool {
    let journal = dir.join("journal");
    crate::journal::segments::dir_of(&journal).is_dir()
        || [journal, dir.join(FILE), dir.join(crate::access::MARK)]
            .iter()
            .any(|p| p.is_file())
}

/// Issues a new token named `name`; returns it (only its hash is kept).
pub fn issue(dir: &Path, name: &str) -> Result<String, CredentialError> {
    if !valid_name(name) {
        return Err(CredentialError::BadName(name.to_string()));
    }
    crate::owner_only::create_dir_all(dir).map_err(|source| CredentialError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut entries = read(dir)?;
    if entries.iter().any(|(n, _)| n == name) {
        return Err(CredentialError::Exists(name.to_string()));
    }
    let token = format!("nqw-{}", hex(&crate::state::random_key()));
    entries.push((name.to_string(), hash(&token)));
    write(dir, &entries)?;
    Ok(token)
}

/// Revokes the token named `name`.
pub fn revoke(dir: &Path, name: &str) -> Result<(), CredentialError> {
    let mut entries = read(dir)?;
    let before = entries.len();
    entries.retain(|(n, _)| n != name);
    if entries.len() == before {
        return Err(CredentialError::Unknown(name.to_string()));
    }
    write(dir, &entries)
}

/// The names of the issued tokens.
pub fn list(dir: &Path) -> Result<Vec<String>, CredentialError> {
    Ok(read(dir)?.into_iter().map(|(n, _)| n).collect())
}

/// The issued tokens of a running coordinator, re-read when the file
/// changes.
pub struct Credentials {
    dir: PathBuf,
    /// (the file's modification time when read, hash → name)
    known: RwLock<(Option<SystemTime>, HashMap<String, String>)>,
    /// Names revoked since [`Credentials::take_revoked`] last asked,
    /// whichever call re-read the file.
    revoked: std::sync::Mutex<Vec<String>>,
}

impl Credentials {
    pub fn open(dir: &Path) -> Result<Credentials, CredentialError> {
        let c = Credentials {
            dir: dir.to_path_buf(),
            known: RwLock::new((None, HashMap::new())),
            revoked: std::sync::Mutex::new(Vec::new()),
        };
        c.refresh()?;
        Ok(c)
    }

    fn modified(&self) -> Option<SystemTime> {
        std::fs::metadata(self.dir.join(FILE))
            .and_then(|m| m.modified())
            .ok()
    }

    /// Re-reads the file if it changed. A damaged file keeps the tokens
    /// known before (and says why).
    pub fn refresh(&self) -> Result<(), CredentialError> {
        let m = self.modified();
        if self.known.read().expect("credentials lock").0 == m && m.is_some() {
            return Ok(());
        }
        let entries = read(&self.dir)?;
        let map: HashMap<String, String> = entries.into_iter().map(|(n, h)| (h, n)).collect();
        let mut known = self.known.write().expect("credentials lock");
        // By token, not name: a name revoked and issued again between two
        // reads is revoked too (its old token is gone).
        let mut gone: Vec<String> = (known.1.iter())
            .filter(|(h, _)| !map.contains_key(*h))
            .map(|(_, n)| n.clone())
            .collect();
        gone.sort();
        gone.dedup();
        self.revoked.lock().expect("revoked lock").extend(gone);
        *known = (m, map);
        Ok(())
    }

    /// The names whose token was revoked since the last call (each once;
    /// the name may have been issued a new token since).
    pub fn take_revoked(&self) -> Vec<String> {
        std::mem::take(&mut *self.revoked.lock().expect("revoked lock"))
    }

    /// Re-reads the file whatever its modification time says.
    pub fn force_refresh(&self) -> Result<(), CredentialError> {
        self.known.write().expect("credentials lock").0 = None;
        self.refresh()
    }

    /// Whether any token was issued.
    pub fn any(&self) -> bool {
        !self.known.read().expect("credentials lock").1.is_empty()
    }

    /// The name of the credential whose token this is.
    pub fn name_of(&self, token: &str) -> Option<String> {
        let h = hash(token);
        self.known
            .read()
            .expect("credentials lock")
            .1
            .get(&h)
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token issued by root in a data directory of another user (the
    /// coordinator's) is given to that user, who can then read it.
    /// Skipped, saying why, where the test cannot give a directory away.
    #[test]
    fn a_token_issued_by_root_belongs_to_the_data_directorys_owner() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        crate::owner_only::create_dir_all(&data).unwrap();
        if let Err(e) = std::os::unix::fs::chown(&data, Some(65534), Some(65534)) {
            return println!("skipped: cannot give a directory to user 65534 here ({e})");
        }
        issue(&data, "node1").unwrap();
        let file = std::fs::metadata(data.join(FILE)).unwrap();
        assert_eq!((file.uid(), file.gid()), (65534, 65534));
        assert!(!data.join(format!("{FILE}.tmp")).exists());
    }

    #[test]
    fn issued_tokens_are_known_by_name_until_revoked() {
        let dir = tempfile::tempdir().unwrap();
        let a = issue(dir.path(), "node-a").unwrap();
        let creds = Credentials::open(dir.path()).unwrap();
        assert_eq!(creds.name_of(&a).as_deref(), Some("node-a"));
        assert_eq!(creds.name_of("nqw-guess"), None);
        assert!(matches!(
            issue(dir.path(), "node-a"),
            Err(CredentialError::Exists(_))
        ));
        assert!(matches!(
            issue(dir.path(), "bad name"),
            Err(CredentialError::BadName(_))
        ));
        let stored = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert!(!stored.contains(&a), "only the hash is stored");
        let b = issue(dir.path(), "node-b").unwrap();
        assert_eq!(list(dir.path()).unwrap(), ["node-a", "node-b"]);
        revoke(dir.path(), "node-a").unwrap();
        // A file changed within the same tick of the clock is still seen.
        creds.force_refresh().unwrap();
        assert_eq!(creds.name_of(&a), None);
        assert_eq!(creds.name_of(&b).as_deref(), Some("node-b"));
        assert!(matches!(
            revoke(dir.path(), "node-a"),
            Err(CredentialError::Unknown(_))
        ));
    }

    #[test]
    fn a_name_revoked_and_issued_again_between_reads_is_revoked() {
        let dir = tempfile::tempdir().unwrap();
        let old = issue(dir.path(), "node-a").unwrap();
        issue(dir.path(), "node-b").unwrap();
        let creds = Credentials::open(dir.path()).unwrap();
        revoke(dir.path(), "node-a").unwrap();
        let new = issue(dir.path(), "node-a").unwrap();
        creds.force_refresh().unwrap();
        assert_eq!(creds.take_revoked(), ["node-a"]);
        assert_eq!(creds.name_of(&old), None);
        assert_eq!(creds.name_of(&new).as_deref(), Some("node-a"));
        creds.force_refresh().unwrap();
        assert!(creds.take_revoked().is_empty());
    }
}
