//! Why a call failed, in one table shared by the coordinator (which
//! answers each of its errors with a [`Refusal`]'s code) and every client
//! (which reads a status back into one, then decides: retry, exit code,
//! advice).

use tonic::{Code, Status};

/// What a failed call means to the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No such job or task (or a deleted job).
    Unknown,
    /// The request is malformed or out of bounds: sending it again fails
    /// again.
    BadRequest,
    /// The request does not fit the job's state (a lease not held, a
    /// finished job, nothing to retry).
    WrongState,
    /// A bound is reached (workers, connections): later, or elsewhere.
    Full,
    /// No valid credential.
    Unauthenticated,
    /// A valid credential that may not do this (another role, a worker id
    /// bound to another credential).
    Forbidden,
    /// Not now: the coordinator is starting, planning, or did not store
    /// the result (a disk that stopped taking writes). Retry later.
    NotNow,
    /// The coordinator's own data is damaged.
    DataLoss,
    /// The coordinator failed.
    Internal,
    /// No answer from the coordinator: unreachable, timed out, or the
    /// connection broke.
    Transport,
}

/// The message of [`Refusal::closing`].
const CLOSING: &str = "the coordinator is shutting down";

/// The metadata a coordinator's refusals carry: a refusal of a credential
/// without it came from something between (a proxy's or a load
/// balancer's 401 or 403), not from the coordinator.
const MARK: &str = "nqueens-refusal";

/// Each refusal's gRPC code: the one table, read both ways. A code not in
/// it (a transport's `UNKNOWN`, `CANCELLED`, `DEADLINE_EXCEEDED`,
/// `ABORTED`) reads as [`Refusal::Transport`].
const TABLE: [(Refusal, Code); 10] = [
    (Refusal::Unknown, Code::NotFound),
    (Refusal::BadRequest, Code::InvalidArgument),
    (Refusal::WrongState, Code::FailedPrecondition),
    (Refusal::Full, Code::ResourceExhausted),
    (Refusal::Unauthenticated, Code::Unauthenticated),
    (Refusal::Forbidden, Code::PermissionDenied),
    (Refusal::NotNow, Code::Unavailable),
    (Refusal::DataLoss, Code::DataLoss),
    (Refusal::Internal, Code::Internal),
    (Refusal::BadRequest, Code::OutOfRange),
];

impl Refusal {
    /// The code a coordinator answers it with.
    pub fn code(self) -> Code {
        match self {
            Refusal::Transport => Code::Unknown,
            r => TABLE
                .iter()
                .find(|(t, _)| *t == r)
                .map(|&(_, c)| c)
                .expect("every refusal but Transport is in the table"),
        }
    }

    /// The refusal a status carries. A status the client made from a
    /// transport error (it has that error as its source; one read from a
    /// coordinator's answer never has) is [`Refusal::Transport`], whatever
    /// its code.
    ///
    /// A refusal of the caller's credential counts only where a
    /// coordinator said it ([`Refusal::answered`]): from a proxy or load
    /// balancer between (an HTTP 401 or 403, which gRPC reads as these
    /// codes) it is [`Refusal::Transport`], so a worker tries again
    /// rather than ending as if its token were revoked.
    pub fn of(status: &Status) -> Refusal {
        if std::error::Error::source(status).is_some() {
            return Refusal::Transport;
        }
        let code = status.code();
        let r = TABLE
            .iter()
            .find(|(_, c)| *c == code)
            .map_or(Refusal::Transport, |&(r, _)| r);
        if r.about_the_token() && status.metadata().get(MARK).is_none() {
            return Refusal::Transport;
        }
        r
    }

    /// A status saying it, with `message`, as a coordinator answers it.
    pub fn status(self, message: impl Into<String>) -> Status {
        Refusal::answered(self.code(), message)
    }

    /// A status with `code` and `message` that a coordinator answered
    /// (a call's, or one item's of a batch), marked as the coordinator's.
    pub fn answered(code: Code, message: impl Into<String>) -> Status {
        let mut metadata = tonic::metadata::MetadataMap::new();
        metadata.insert(MARK, tonic::metadata::MetadataValue::from_static("1"));
        Status::with_metadata(code, message, metadata)
    }

    /// Whether a worker should try the same call again (after a backoff):
    /// the coordinator is away, busy, or did not store. A refusal of the
    /// request itself is never retried.
    pub fn transient(self) -> bool {
        matches!(
            self,
            Refusal::NotNow | Refusal::Full | Refusal::Internal | Refusal::Transport
        )
    }

    /// What a coordinator that is shutting down answers a call it ends
    /// early (a watch).
    pub fn closing() -> Status {
        Refusal::NotNow.status(CLOSING)
    }

    /// Whether `status` says the coordinator shut down.
    pub fn is_closing(status: &Status) -> bool {
        Refusal::of(status) == Refusal::NotNow && status.message() == CLOSING
    }

    /// Whether the caller's credential is the problem.
    pub fn about_the_token(self) -> bool {
        matches!(self, Refusal::Unauthenticated | Refusal::Forbidden)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Refusal; 10] = [
        Refusal::Unknown,
        Refusal::BadRequest,
        Refusal::WrongState,
        Refusal::Full,
        Refusal::Unauthenticated,
        Refusal::Forbidden,
        Refusal::NotNow,
        Refusal::DataLoss,
        Refusal::Internal,
        Refusal::Transport,
    ];

    #[test]
    fn every_refusal_reads_back_from_its_own_status() {
        for r in ALL {
            assert_eq!(Refusal::of(&r.status("why")), r, "{r:?}");
        }
        let codes: std::collections::HashSet<_> = ALL.iter().map(|r| r.code() as i32).collect();
        assert_eq!(codes.len(), ALL.len(), "one code per refusal");
    }

    #[test]
    fn transport_failures_and_busy_coordinators_are_retried_bad_requests_never() {
        for code in [
            Code::Unknown,
            Code::Cancelled,
            Code::DeadlineExceeded,
            Code::Aborted,
        ] {
            assert_eq!(Refusal::of(&Status::new(code, "")), Refusal::Transport);
        }
        let retried: Vec<_> = ALL.into_iter().filter(|r| r.transient()).collect();
        assert_eq!(
            retried,
            [
                Refusal::Full,
                Refusal::NotNow,
                Refusal::Internal,
                Refusal::Transport
            ]
        );
        assert_eq!(Refusal::of(&Status::out_of_range("")), Refusal::BadRequest);
    }

    /// A 401 or 403 from a proxy between reads as UNAUTHENTICATED or
    /// PERMISSION_DENIED without the coordinator's mark: the link, not
    /// the token.
    #[test]
    fn a_credential_refused_by_something_between_is_transport() {
        for code in [Code::Unauthenticated, Code::PermissionDenied] {
            let proxy = Status::new(code, "HTTP status client error (401 Unauthorized)");
            assert_eq!(Refusal::of(&proxy), Refusal::Transport);
            assert!(Refusal::of(&proxy).transient());
            let coordinator = Refusal::answered(code, "the worker token is wrong");
            assert!(Refusal::of(&coordinator).about_the_token());
        }
    }

    /// A connection refused reads as UNAVAILABLE too, but carries its
    /// cause: no coordinator answered, which is not "not now".
    #[test]
    fn a_status_made_from_a_transport_error_is_transport() {
        let mut s = Status::unavailable("tcp connect error");
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        s.set_source(std::sync::Arc::new(refused));
        assert_eq!(Refusal::of(&s), Refusal::Transport);
        assert_eq!(
            Refusal::of(&Status::unavailable("planning")),
            Refusal::NotNow
        );
    }
}
