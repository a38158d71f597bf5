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
        use nqueens_proto::refusal::Refusal;
        if let Some(msg) = nqueens_proto::client::tls_mismatch(url, status) {
            return Failure::Unreachable(msg);
        }
        let msg = nqueens_proto::client::explain(url, status);
        match Refusal::of(status) {
            Refusal::Transport | Refusal::NotNow => Failure::Unreachable(msg),
            Refusal::Unknown => {
                Failure::UnknownJob(format!("{msg} (`nqueens jobs` lists the jobs)"))
            }
            // The coordinator's refusal names the option already.
            Refusal::Unauthenticated | Refusal::Forbidden if msg.contains("--token-file") => {
                Failure::Refused(msg)
            }
            Refusal::Unauthenticated | Refusal::Forbidden => Failure::Refused(format!(
                "{msg} (give the operator token with --token-file or NQUEENS_OPERATOR_TOKEN)"
            )),
            Refusal::BadRequest => Failure::BadInput(msg),
            Refusal::WrongState | Refusal::Full | Refusal::DataLoss | Refusal::Internal => {
                Failure::Failed(msg)
            }
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
                say!("{m}");
                return ExitCode::from(130);
            }
        };
        say!("error: {msg}");
        ExitCode::from(code)
    }
}
