//! Who may call: decided when the coordinator starts, and only ever
//! tightened while it runs.
//!
//! Workers are *protected* when a shared worker token is configured, or
//! the data directory has issued worker tokens or the [`MARK`] file. The
//! mark is written the first time either holds and stays, so revoking
//! every issued token, editing the token file or restarting never lets an
//! unauthenticated worker in: a protected directory with no usable token
//! refuses every worker until one is issued. A coordinator that started
//! with its workers open protects them within a second or two of the
//! first `nqueens token issue` for its directory ([`Gate::check`]), and
//! nothing opens them again while it runs. Operators are protected by
//! their token. Client certificates (mutual TLS) protect both roles at the
//! connection.

use crate::credentials::Credentials;
use crate::service::Credential;
use nqueens_proto::refusal::Refusal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use subtle::ConstantTimeEq;
use tonic::{Request, Status};

/// Written in a data directory whose workers must authenticate.
pub const MARK: &str = "worker-auth";

/// The shortest token accepted (bytes).
pub const MIN_TOKEN: usize = 16;

/// Whether the directory's workers have been protected before.
pub fn marked(dir: &Path) -> bool {
    dir.join(MARK).exists() || dir.join(crate::credentials::FILE).exists()
}

/// Marks the directory's workers as protected, durably (the file and its
/// directory entry synced).
pub fn mark(dir: &Path) -> std::io::Result<()> {
    if dir.join(MARK).exists() {
        return Ok(());
    }
    crate::owner_only::create_dir_all(dir)?;
    let text = "Workers of this data directory must authenticate (a shared worker token or an \
                issued one).\nTo open it to anonymous workers, stop the coordinator and delete \
                this file and worker-tokens.\n";
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    let mut f = o.open(dir.join(MARK))?;
    std::io::Write::write_all(&mut f, text.as_bytes())?;
    f.sync_all()?;
    std::fs::File::open(dir)?.sync_all()
}

/// Which roles a running coordinator protects, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// Workers need a token (shared or issued).
    pub workers: bool,
    /// The shared worker token is configured.
    pub shared_worker_token: bool,
    /// Operators need their token.
    pub operators: bool,
    /// Clients need a certificate signed by the configured CA.
    pub client_certs: bool,
}

impl Access {
    /// The header value every answer carries (see [`ACCESS_HEADER`]).
    pub fn header(&self) -> String {
        let yes = |b: bool| if b { "token" } else { "open" };
        format!(
            "workers={} operators={} client-certs={}",
            yes(self.workers),
            yes(self.operators),
            if self.client_certs { "required" } else { "no" }
        )
    }

    /// One line for a person: the start line and `nqueens doctor`.
    pub fn describe(&self) -> String {
        describe_header(&self.header())
    }
}

/// Whether workers must authenticate, as it stands now: as decided at
/// start, then protected for good once the data directory is marked or
/// holds issued tokens ([`Gate::check`], which the coordinator runs every
/// second). Never opened again while the coordinator runs.
pub struct Gate {
    at_start: Access,
    workers: AtomicBool,
    dir: PathBuf,
}

impl Gate {
    pub fn new(at_start: Access, dir: &Path) -> Gate {
        Gate {
            at_start,
            workers: AtomicBool::new(at_start.workers),
            dir: dir.to_path_buf(),
        }
    }

    /// Whether a worker's call needs a token.
    pub fn workers_protected(&self) -> bool {
        self.workers.load(Ordering::Acquire)
    }

    /// The roles' protection now.
    pub fn access(&self) -> Access {
        Access {
            workers: self.workers_protected(),
            ..self.at_start
        }
    }

    /// Protects the workers from now on if a token was issued for the
    /// directory since the start (or it was marked): `Ok(true)` the first
    /// time. The workers are protected before the mark is written, so a
    /// mark that cannot be written (the error) leaves them protected
    /// still, until the coordinator stops.
    pub fn check(&self, issued: &Credentials) -> std::io::Result<bool> {
        if self.workers_protected() || !(issued.any() || marked(&self.dir)) {
            return Ok(false);
        }
        self.workers.store(true, Ordering::Release);
        mark(&self.dir)?;
        Ok(true)
    }
}

/// Answers carry the roles' protection so `nqueens doctor` can show it
/// (it is no secret: any call would find it out).
pub const ACCESS_HEADER: &str = "nqueens-access";

/// A person's line for an [`ACCESS_HEADER`] value.
pub fn describe_header(value: &str) -> String {
    let field = |k: &str| {
        value
            .split_whitespace()
            .find_map(|f| f.strip_prefix(k)?.strip_prefix('='))
            .unwrap_or("unknown")
    };
    let role = |k: &str| match field(k) {
        "token" => "need a token".to_string(),
        "open" => "need no token".to_string(),
        other => format!("are {other}"),
    };
    let certs = match field("client-certs") {
        "required" => "TLS client certificates are required",
        "no" => "no client certificate is asked for",
        _ => "client certificates unknown",
    };
    format!(
        "workers {}, operators {}; {certs}",
        role("workers"),
        role("operators")
    )
}

fn bearer_of<T>(req: &Request<T>) -> Option<&str> {
    req.metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// Checks `authorization: Bearer <token>` in constant time; no token
/// configured means no check.
pub fn bearer(
    expected: Option<Arc<str>>,
    role: &'static str,
) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone {
    move |req: Request<()>| {
        let Some(want) = &expected else {
            return Ok(req);
        };
        match bearer_of(&req) {
            Some(t) if bool::from(t.as_bytes().ct_eq(want.as_bytes())) => Ok(req),
            Some(_) => Err(Refusal::Unauthenticated.status(format!("the {role} token is wrong"))),
            None => Err(Refusal::Unauthenticated.status(format!(
                "{} {role} token is required: give the command --token-file F (or \
                 NQUEENS_{}_TOKEN); over raw gRPC, send 'authorization: Bearer <token>'",
                if role.starts_with(['a', 'e', 'i', 'o', 'u']) {
                    "an"
                } else {
                    "a"
                },
                role.to_uppercase()
            ))),
        }
    }
}

/// The worker check: the shared worker token, or a token the operator
/// issued (`nqueens token issue`), whose name then rides along with the
/// call as its [`Credential`]. While the `gate` leaves workers open, no
/// check; once it protects them, a call without a valid token is refused
/// even when no token is left to accept.
pub fn worker_auth(
    gate: Arc<Gate>,
    shared: Option<Arc<str>>,
    issued: Arc<Credentials>,
) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone {
    move |mut req: Request<()>| {
        if !gate.workers_protected() {
            return Ok(req);
        }
        let Some(t) = bearer_of(&req).map(str::to_string) else {
            return Err(Refusal::Unauthenticated
                .status("a worker token is required: give the worker --token-file F (or \
                         NQUEENS_WORKER_TOKEN); over raw gRPC, send 'authorization: Bearer <token>'"));
        };
        if shared
            .as_ref()
            .is_some_and(|w| bool::from(t.as_bytes().ct_eq(w.as_bytes())))
        {
            return Ok(req);
        }
        let name = issued.name_of(&t).or_else(|| {
            // Perhaps issued a moment ago.
            let _ = issued.refresh();
            issued.name_of(&t)
        });
        match name {
            Some(name) => {
                req.extensions_mut().insert(Credential(name));
                Ok(req)
            }
            None => {
                Err(Refusal::Unauthenticated.status("the worker token is wrong (or was revoked)"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(token: Option<&str>) -> Request<()> {
        let mut r = Request::new(());
        if let Some(t) = token {
            r.metadata_mut()
                .insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        r
    }

    #[test]
    fn a_protected_directory_stays_protected_with_no_token_left() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!marked(dir.path()));
        let token = crate::credentials::issue(dir.path(), "alice").unwrap();
        assert!(marked(dir.path()), "issuing a token protects the directory");
        mark(dir.path()).unwrap();
        let issued = Arc::new(Credentials::open(dir.path()).unwrap());
        let gate = Arc::new(Gate::new(open_workers(), dir.path()));
        assert!(
            gate.check(&issued).unwrap(),
            "a token issued protects the workers"
        );
        let mut check = worker_auth(gate, None, Arc::clone(&issued));
        assert!(check(call(Some(&token))).is_ok());
        crate::credentials::revoke(dir.path(), "alice").unwrap();
        issued.force_refresh().unwrap();
        assert!(!issued.any(), "no token left");
        for t in [None, Some(token.as_str()), Some("nqw-made-up-token-0000")] {
            let e = check(call(t)).unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unauthenticated, "{t:?}");
        }
        // The file of tokens deleted too: the mark alone keeps it protected.
        std::fs::remove_file(dir.path().join(crate::credentials::FILE)).unwrap();
        assert!(marked(dir.path()));
    }

    fn open_workers() -> Access {
        Access {
            workers: false,
            shared_worker_token: false,
            operators: true,
            client_certs: false,
        }
    }

    #[test]
    fn a_token_issued_while_running_protects_the_workers_for_good() {
        let dir = tempfile::tempdir().unwrap();
        let issued = Arc::new(Credentials::open(dir.path()).unwrap());
        let gate = Arc::new(Gate::new(open_workers(), dir.path()));
        let mut check = worker_auth(Arc::clone(&gate), None, Arc::clone(&issued));
        assert!(!gate.check(&issued).unwrap(), "nothing issued: still open");
        assert!(check(call(None)).is_ok(), "open workers need no token");
        let token = crate::credentials::issue(dir.path(), "alice").unwrap();
        assert!(
            gate.check(&issued).unwrap(),
            "the first check after the issue"
        );
        assert!(!gate.check(&issued).unwrap(), "once only");
        assert!(dir.path().join(MARK).exists(), "marked durably");
        assert_eq!(
            gate.access().header(),
            "workers=token operators=token client-certs=no"
        );
        let e = check(call(None)).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert!(check(call(Some(&token))).is_ok());
        // Every token revoked and the files deleted: still protected.
        crate::credentials::revoke(dir.path(), "alice").unwrap();
        issued.force_refresh().unwrap();
        std::fs::remove_file(dir.path().join(MARK)).unwrap();
        std::fs::remove_file(dir.path().join(crate::credentials::FILE)).unwrap();
        assert!(!gate.check(&issued).unwrap());
        assert!(gate.workers_protected());
        assert!(check(call(None)).is_err());
    }

    #[test]
    fn the_header_reads_back_as_a_sentence() {
        let a = Access {
            workers: true,
            shared_worker_token: false,
            operators: false,
            client_certs: true,
        };
        assert_eq!(
            a.header(),
            "workers=token operators=open client-certs=required"
        );
        assert_eq!(
            a.describe(),
            "workers need a token, operators need no token; TLS client certificates are required"
        );
    }
}
