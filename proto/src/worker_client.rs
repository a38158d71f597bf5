//! The worker's side of the protocol in one place: every `WorkerService`
//! call (register, lease, heartbeat, report, release) for one worker id,
//! with the policy every caller shares — which failures are worth trying
//! again ([`worth_retrying`], from the [`Refusal`] table), how a batched
//! report's per-item refusal reads, and the batch bounds. The worker, the
//! load generator, `doctor` and the test kit all call through it.

use crate::client::Authed;
use crate::refusal::Refusal;
use crate::v1::{self, worker_service_client::WorkerServiceClient};
use tonic::codegen::{Body, Bytes, StdError};
use tonic::Status;

/// The most tasks one lease call asks for (the coordinator's bound).
pub const MAX_LEASE_BATCH: u32 = 1024;

/// Every call's answer, awaited twice the keep-alive (40 s by default;
/// `NQUEENS_KEEPALIVE`) and a second more for every [`SLOWEST_LINK`] bytes
/// of its request at most. The transport answers pings on its own, so
/// keep-alive finds a dead link but not a coordinator that never answers
/// a call; such a call fails `DEADLINE_EXCEEDED`, tried again like an
/// unreachable coordinator's. Enforced here, not by a header a coordinator
/// may ignore.
async fn bounded<R>(
    limit: std::time::Duration,
    call: impl std::future::Future<Output = Result<tonic::Response<R>, Status>>,
) -> Result<R, Status> {
    match tokio::time::timeout(limit, call).await {
        Ok(r) => Ok(r?.into_inner()),
        Err(_) => Err(Status::deadline_exceeded(format!(
            "no answer in {limit:.0?}"
        ))),
    }
}

/// Bytes a second of a request that a call still waits for: a link as
/// slow as 2 KiB/s for each of the 16 reports a worker sends at once (a
/// full `ReportMany` is about 96 KB: 48 s more) still gets its reports
/// through after a backlog, rather than timing each out and sending it
/// again.
pub const SLOWEST_LINK: usize = 2048;

/// How long a call with request `req` waits for its answer.
fn deadline(req: &impl prost::Message) -> std::time::Duration {
    let sending = (req.encoded_len() / SLOWEST_LINK) as u64;
    2 * crate::client::keepalive() + std::time::Duration::from_secs(sending)
}

/// What a worker says of itself when it registers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct About {
    pub host: String,
    pub cores: u32,
    pub solver_version: String,
    /// The operator's name for it (display only).
    pub name: String,
}

/// Whether a failed call is worth trying again after a backoff: the
/// coordinator is away, busy, or did not store. A refused request never is.
pub fn worth_retrying(s: &Status) -> bool {
    Refusal::of(s).transient()
}

/// One item's refusal in a batched report, as the status `Report` would
/// have answered with; `None` when it was judged.
pub fn item_refusal(a: &v1::ReportItemAnswer) -> Option<Status> {
    (a.code != 0).then(|| Refusal::answered(tonic::Code::from(a.code), a.message.clone()))
}

/// A connection to a coordinator's `WorkerService`, speaking for one
/// worker id.
#[derive(Clone, Debug)]
pub struct WorkerClient<T = Authed> {
    rpc: WorkerServiceClient<T>,
    id: String,
}

impl<T> WorkerClient<T>
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<StdError>,
    T::ResponseBody: Body<Data = Bytes> + Send + 'static,
    <T::ResponseBody as Body>::Error: Into<StdError> + Send,
{
    /// Calls over `transport` as worker `id`.
    pub fn new(transport: T, id: impl Into<String>) -> Self {
        WorkerClient {
            rpc: WorkerServiceClient::new(transport),
            id: id.into(),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// The same connection, speaking for worker `id`.
    pub fn renamed(&self, id: impl Into<String>) -> Self
    where
        T: Clone,
    {
        WorkerClient {
            rpc: self.rpc.clone(),
            id: id.into(),
        }
    }

    /// The generated client, for requests no honest worker sends (tests
    /// of a hostile client).
    pub fn raw(&mut self) -> &mut WorkerServiceClient<T> {
        &mut self.rpc
    }

    pub async fn register(&mut self, about: &About) -> Result<v1::RegisterResponse, Status> {
        let req = v1::RegisterRequest {
            worker_id: self.id.clone(),
            host: about.host.clone(),
            cores: about.cores,
            solver_version: about.solver_version.clone(),
            name: about.name.clone(),
        };
        bounded(deadline(&req), self.rpc.register(req)).await
    }

    /// Up to `max` tasks (at most [`MAX_LEASE_BATCH`]).
    pub async fn lease(&mut self, max: u32) -> Result<v1::LeaseResponse, Status> {
        let req = v1::LeaseRequest {
            worker_id: self.id.clone(),
            max_tasks: max.min(MAX_LEASE_BATCH),
        };
        bounded(deadline(&req), self.rpc.lease(req)).await
    }

    /// Renews the leases held, says how much was done, and whether the
    /// worker is draining.
    pub async fn heartbeat(
        &mut self,
        leases: Vec<v1::LeaseRef>,
        subproblems_done: u64,
        draining: bool,
    ) -> Result<v1::HeartbeatResponse, Status> {
        let req = v1::HeartbeatRequest {
            worker_id: self.id.clone(),
            leases,
            subproblems_done,
            draining,
        };
        bounded(deadline(&req), self.rpc.heartbeat(req)).await
    }

    /// One result.
    pub async fn report(
        &mut self,
        lease: v1::LeaseRef,
        result: v1::TaskResult,
    ) -> Result<v1::ReportOutcome, Status> {
        let req = v1::ReportRequest {
            worker_id: self.id.clone(),
            lease: Some(lease),
            result: Some(result),
        };
        let outcome = bounded(deadline(&req), self.rpc.report(req)).await?.outcome;
        v1::ReportOutcome::try_from(outcome)
            .map_err(|_| Status::internal(format!("an unknown report outcome {outcome}")))
    }

    /// Several results in one call: one answer per item, in order.
    pub async fn report_many(
        &mut self,
        reports: Vec<v1::ReportItem>,
    ) -> Result<Vec<v1::ReportItemAnswer>, Status> {
        let req = v1::ReportManyRequest {
            worker_id: self.id.clone(),
            reports,
        };
        Ok(bounded(deadline(&req), self.rpc.report_many(req))
            .await?
            .answers)
    }

    /// Hands leases back; how many the coordinator released.
    pub async fn release(&mut self, leases: Vec<v1::LeaseRef>) -> Result<u32, Status> {
        let req = v1::ReleaseRequest {
            worker_id: self.id.clone(),
            leases,
        };
        Ok(bounded(deadline(&req), self.rpc.release(req))
            .await?
            .released)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_item_reads_as_the_status_report_would_answer() {
        let judged = v1::ReportItemAnswer {
            outcome: v1::ReportOutcome::Accepted as i32,
            ..Default::default()
        };
        assert!(item_refusal(&judged).is_none());
        let refused = v1::ReportItemAnswer {
            code: tonic::Code::FailedPrecondition as i32,
            message: "not leased".into(),
            ..Default::default()
        };
        let s = item_refusal(&refused).unwrap();
        assert_eq!(Refusal::of(&s), Refusal::WrongState);
        assert!(!worth_retrying(&s));
        // An item refused for its credential came from the coordinator
        // (inside its answer), never from a proxy: not retried.
        let forbidden = v1::ReportItemAnswer {
            code: tonic::Code::PermissionDenied as i32,
            message: "worker id w1 is bound to another credential".into(),
            ..Default::default()
        };
        let s = item_refusal(&forbidden).unwrap();
        assert_eq!(Refusal::of(&s), Refusal::Forbidden);
        assert!(!worth_retrying(&s));
        assert!(worth_retrying(&Status::unavailable(
            "not stored, retry later"
        )));
    }

    /// A full `ReportMany` (1,024 results, about 96 KB) waits about 48 s
    /// more than a heartbeat: 16 of them at once over a slow link after a
    /// backlog still get through, where a heartbeat's bound stays the
    /// keep-alive's.
    #[test]
    fn a_call_waits_longer_the_more_it_sends() {
        let n = |x: u128| Some(v1::U128::from(x));
        let result = v1::TaskResult {
            c1: n(u128::from(u64::MAX) << 20),
            c2: n(1 << 40),
            c4: n(1 << 30),
            c8: n(1 << 50),
            nodes: n(u128::from(u64::MAX) << 30),
            weighted: n(u128::from(u64::MAX) << 22),
            elapsed_ms: 60_000,
            solver_version: "0.1.0 avx512+gpu:NVIDIA H100 80GB HBM3 (vulkan)".into(),
            checksum: u64::MAX,
            ..Default::default()
        };
        let item = v1::ReportItem {
            lease: Some(v1::LeaseRef {
                job_id: u64::MAX,
                task_index: u64::MAX,
                lease_id: u64::MAX,
            }),
            result: Some(result),
        };
        let full = v1::ReportManyRequest {
            worker_id: "rack1-node07-5f3a9c1e".into(),
            reports: vec![item; 1024],
        };
        let beat = v1::HeartbeatRequest {
            worker_id: full.worker_id.clone(),
            ..Default::default()
        };
        let keepalive = crate::client::keepalive();
        assert_eq!(deadline(&beat), 2 * keepalive);
        let extra = deadline(&full) - 2 * keepalive;
        assert!(extra >= std::time::Duration::from_secs(40), "{extra:?}");
    }
}
