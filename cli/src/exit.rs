//! How a command fails, and the exit code each kind of failure gets, so
//! scripts can tell "the coordinator is down" from "no such job".

use std::io;
use std::process::ExitCode;

/// A failed command. The message says what was wrong and what to do.
#[derive(Debug)]
pub enum Failure {
    /// The command ran but failed: a count that differs from the published
    /// one, no completion, a cancelled job. Exit 1.
    Failed(String),
    /// The input was wrong. Exit 2.
    BadInput(String),
    /// The coordinator could not be reached. Exit 3.
    Unreachable(String),
    /// The job does not exist. Exit 4.
    UnknownJob(String),
    /// The coordinator refused the token. Exit 5.
    Refused(String),
    /// Stopped by Ctrl-C or SIGTERM. Exit 130.
    Interrupted(String),
    Io(io::Error),
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Io(e)
    }
}

impl Failure {
    /// A failed call to the coordinator at `url`.
    pub fn from_status(url: &str, status: &tonic::Status) -> Failure {
        use tonic::Code;
        if let Some(msg) = tls_mismatch(url, status) {
            return Failure::Unreachable(msg);
        }
        let msg = nqueens_proto::client::explain(url, status);
        match status.code() {
            Code::Unavailable => Failure::Unreachable(msg),
            Code::NotFound => Failure::UnknownJob(format!("{msg} (`nqueens jobs` lists the jobs)")),
            Code::Unauthenticated | Code::PermissionDenied => Failure::Refused(format!(
                "{msg} (give the operator token with --token-file or NQUEENS_OPERATOR_TOKEN)"
            )),
            Code::InvalidArgument | Code::OutOfRange => Failure::BadInput(msg),
            _ => Failure::Failed(msg),
        }
    }

    /// Whether this is the coordinator being unreachable (exit 3).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Failure::Unreachable(_))
    }

    /// The message alone (for JSON output of a failure).
    pub fn message(&self) -> String {
        match self {
            Failure::Io(e) => e.to_string(),
            Failure::Failed(m)
            | Failure::BadInput(m)
            | Failure::Unreachable(m)
            | Failure::UnknownJob(m)
            | Failure::Refused(m)
            | Failure::Interrupted(m) => m.clone(),
        }
    }

    /// Prints the message on stderr and gives the exit code.
    pub fn report(self) -> ExitCode {
        let (code, msg) = match self {
            // A closed pipe (`nqueens boards 12 | head`) is the reader's choice.
            Failure::Io(e) if e.kind() == io::ErrorKind::BrokenPipe => return ExitCode::SUCCESS,
            Failure::Io(e) => (1, e.to_string()),
            Failure::Failed(m) => (1, m),
            Failure::BadInput(m) => (2, m),
            Failure::Unreachable(m) => (3, m),
            Failure::UnknownJob(m) => (4, m),
            Failure::Refused(m) => (5, m),
            Failure::Interrupted(m) => {
                eprintln!("{m}");
                return ExitCode::from(130);
            }
        };
        eprintln!("error: {msg}");
        ExitCode::from(code)
    }
}

/// The text of a failed call and of every error under it.
fn chain(status: &tonic::Status) -> String {
    let mut text = status.message().to_string();
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        let e_text = e.to_string();
        if !text.contains(&e_text) {
            text += &format!(": {e_text}");
        }
        source = e.source();
    }
    text
}

/// A call that failed because one side speaks TLS and the other does not
/// (or the certificate is not trusted): what it probably is and what to
/// change. The transport's own words ("received corrupt message of type
/// InvalidContentType", "transport error") do not say.
fn tls_mismatch(url: &str, status: &tonic::Status) -> Option<String> {
    let text = chain(status);
    let plain = url
        .strip_prefix("https://")
        .map(|rest| format!("http://{rest}"));
    if let Some(plain) = plain {
        if text.contains("InvalidContentType") || text.contains("corrupt message") {
            return Some(format!(
                "the coordinator at {url} answers without TLS (a plain-text coordinator, \
                 started without --tls-cert): use {plain}, or give the coordinator a certificate \
                 ({text})"
            ));
        }
        if text.contains("invalid peer certificate") || text.contains("UnknownIssuer") {
            return Some(format!(
                "the coordinator at {url} speaks TLS but its certificate is not trusted here: \
                 give the CA that signed it with --tls-ca F (and check that the URL's host is \
                 one the certificate names) ({text})"
            ));
        }
        return None;
    }
    // Over http://, a TLS server reads the HTTP/2 preface as a broken TLS
    // record and closes the connection before any answer.
    let tls = url
        .strip_prefix("http://")
        .map(|rest| format!("https://{rest}"))?;
    let closed = [
        "transport error",
        "connection closed",
        "connection reset",
        "broken pipe",
        "frame with invalid size",
    ];
    let lower = text.to_lowercase();
    (status.code() != tonic::Code::Unavailable || !lower.contains("tcp connect"))
        .then_some(())
        .filter(|()| closed.iter().any(|c| lower.contains(c)))
        .map(|()| {
            format!(
                "the coordinator at {url} closed the connection before answering: it probably \
                 speaks TLS (started with --tls-cert); use {tls} (with --tls-ca F if its \
                 certificate has its own CA) ({text})"
            )
        })
}
