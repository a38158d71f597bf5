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

/// Every call's answer, awaited twice the keep-alive at most (40 s by
/// default; `NQUEENS_KEEPALIVE`). The transport answers pings on its own,
/// so keep-alive finds a dead link but not a coordinator that never
/// answers a call; such a call fails `DEADLINE_EXCEEDED`, tried again
/// like an unreachable coordinator's. Enforced here, not by a header a
/// coordinator may ignore.
async fn bounded<R>(
    call: impl std::future::Future<Output = Result<tonic::Response<R>, Status>>,
) -> Result<R, Status> {
    let limit = 2 * crate::client::keepalive();
    match tokio::time::timeout(limit, call).await {
        Ok(r) => Ok(r?.into_inner()),
        Err(_) => Err(Status::deadline_exceeded(format!("no answer in {limit:?}"))),
    }
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
    (a.code != 0).then(|| Status::new(tonic::Code::from(a.code), a.message.clone()))
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
        bounded(self.rpc.register(req)).await
    }

    /// Up to `max` tasks (at most [`MAX_LEASE_BATCH`]).
    pub async fn lease(&mut self, max: u32) -> Result<v1::LeaseResponse, Status> {
        let req = v1::LeaseRequest {
            worker_id: self.id.clone(),
            max_tasks: max.min(MAX_LEASE_BATCH),
        };
        bounded(self.rpc.lease(req)).await
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
        bounded(self.rpc.heartbeat(req)).await
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
        let outcome = bounded(self.rpc.report(req)).await?.outcome;
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
        Ok(bounded(self.rpc.report_many(req)).await?.answers)
    }

    /// Hands leases back; how many the coordinator released.
    pub async fn release(&mut self, leases: Vec<v1::LeaseRef>) -> Result<u32, Status> {
        let req = v1::ReleaseRequest {
            worker_id: self.id.clone(),
            leases,
        };
        Ok(bounded(self.rpc.release(req)).await?.released)
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
        assert!(worth_retrying(&Status::unavailable(
            "not stored, retry later"
        )));
    }
}
