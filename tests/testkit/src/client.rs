//! Clients of a coordinator (a process or in-process): an honest worker
//! calls through the project's worker client, as real workers do;
//! `Workers::raw` and the operator client take wire types directly, so
//! tests can also send what no real client would.

use crate::wait::{within, PATIENCE};
use nqueens_common::plan::{Plan, PlanSpec, Strategy, Tally};
use nqueens_common::Size;
use nqueens_proto::v1::operator_service_client::OperatorServiceClient;
use nqueens_proto::v1::{self, ReportOutcome};
use nqueens_proto::worker_client::{About, WorkerClient};
use nqueens_proto::{task_from_wire, u128_from_wire};
use tonic::transport::Channel;

/// A worker client; each helper below speaks for the worker id it is
/// given.
pub type Workers = WorkerClient<Channel>;
pub type Operators = OperatorServiceClient<Channel>;

/// A worker and an operator client of `url`.
pub async fn clients(url: &str) -> (Workers, Operators) {
    (
        WorkerClient::new(
            Channel::from_shared(url.to_string())
                .expect("a URL")
                .connect()
                .await
                .expect("connect to the coordinator"),
            "",
        ),
        operators(url).await,
    )
}

/// An operator client of `url`.
pub async fn operators(url: &str) -> Operators {
    OperatorServiceClient::connect(url.to_string())
        .await
        .expect("connect to the coordinator")
}

/// The wire form of a plan (a frame plan's depth picks its kind: see
/// `PlanSpec`).
pub fn plan_spec(n: u32, strategy: Strategy, depth: u32, tasks: u64) -> v1::PlanSpec {
    (&PlanSpec::backtracking(Size::new(n).unwrap(), strategy, depth, tasks)).into()
}

/// A job of `plan`, counted once (no redundancy).
pub fn job_request(plan: v1::PlanSpec) -> v1::SubmitJobRequest {
    v1::SubmitJobRequest {
        plan: Some(plan),
        ..Default::default()
    }
}

/// Submits a job; the coordinator's answer (the job, not planned yet).
pub async fn submit(ops: &mut Operators, req: v1::SubmitJobRequest) -> v1::Job {
    ops.submit_job(req).await.unwrap().into_inner()
}

/// Submits a job and follows its watch stream until it is planned.
pub async fn submit_planned(ops: &mut Operators, req: v1::SubmitJobRequest) -> v1::Job {
    let job = submit(ops, req).await;
    watch_until(ops, job.job_id, |j| j.tasks > 0).await
}

/// The job `id` now.
pub async fn job(ops: &mut Operators, id: u64) -> v1::Job {
    ops.get_job(v1::JobRef { job_id: id })
        .await
        .unwrap()
        .into_inner()
}

/// Follows the job's watch stream until `until` holds for a snapshot (at
/// most [`PATIENCE`]). The stream coalesces snapshots: wait this way for
/// lasting states only (planned, done), not for passing ones.
pub async fn watch_until(
    ops: &mut Operators,
    id: u64,
    until: impl Fn(&v1::Job) -> bool,
) -> v1::Job {
    let mut stream = ops
        .watch_job(v1::JobRef { job_id: id })
        .await
        .unwrap()
        .into_inner();
    within(PATIENCE, &format!("job {id} on its watch stream"), async {
        while let Some(j) = stream.message().await.unwrap() {
            if until(&j) {
                return j;
            }
        }
        panic!("the watch stream of job {id} ended first");
    })
    .await
}

/// The last snapshot of a watch stream: the job as it ended (at most
/// [`PATIENCE`]).
pub async fn last(mut stream: tonic::Streaming<v1::Job>) -> v1::Job {
    within(PATIENCE, "the end of a watch stream", async {
        let mut last = None;
        while let Some(j) = stream.message().await.unwrap() {
            last = Some(j);
        }
        last.expect("a watch stream sends the job at once")
    })
    .await
}

/// The workers the coordinator lists.
pub async fn workers(ops: &mut Operators) -> Vec<v1::Worker> {
    ops.list_workers(v1::ListWorkersRequest {})
        .await
        .unwrap()
        .into_inner()
        .workers
}

/// The job's total and unique counts.
pub fn counts(j: &v1::Job) -> (u128, u128) {
    (
        u128_from_wire(j.total.as_ref()),
        u128_from_wire(j.unique.as_ref()),
    )
}

/// The job is done.
pub fn done(j: &v1::Job) -> bool {
    j.state == v1::JobState::Done as i32
}

/// Registers a worker as a real one would, with made-up details.
pub async fn register(w: &mut Workers, worker: &str) {
    let about = About {
        host: "h".into(),
        cores: 1,
        solver_version: "t".into(),
        name: worker.into(),
    };
    w.renamed(worker).register(&about).await.unwrap();
}

/// Leases up to `max` tasks for `worker`.
pub async fn lease(w: &mut Workers, worker: &str, max: u32) -> Vec<v1::Lease> {
    w.renamed(worker).lease(max).await.unwrap().leases
}

/// A leased task counted as a worker counts it: its tally and checksum.
pub fn count(l: &v1::Lease) -> (Tally, u64) {
    let (spec, task) = task_from_wire(l.task.as_ref().unwrap()).unwrap();
    Plan::new(spec).unwrap().count_task_checked(&task).unwrap()
}

/// A leased task's true result, as an honest worker reports it.
pub fn result_of(l: &v1::Lease) -> v1::TaskResult {
    inflated(l, 0)
}

/// A leased task's result with `lie` solutions too many (a liar's, with
/// the honest checksum).
pub fn inflated(l: &v1::Lease, lie: u128) -> v1::TaskResult {
    let (mut tally, checksum) = count(l);
    tally.weighted += lie;
    v1::TaskResult {
        checksum,
        ..v1::TaskResult::from(&tally)
    }
}

/// `worker`'s report of `result` for the lease `lease`.
pub fn report_request(
    worker: &str,
    lease: v1::LeaseRef,
    result: v1::TaskResult,
) -> v1::ReportRequest {
    v1::ReportRequest {
        worker_id: worker.into(),
        lease: Some(lease),
        result: Some(result),
    }
}

/// Reports `result` for `lease` as `worker`; the outcome, or the refusal.
pub async fn report(
    w: &mut Workers,
    worker: &str,
    lease: v1::LeaseRef,
    result: v1::TaskResult,
) -> Result<ReportOutcome, tonic::Status> {
    w.renamed(worker).report(lease, result).await
}

/// Counts a leased task as an honest worker would, and reports it.
pub async fn count_and_report(w: &mut Workers, worker: &str, l: &v1::Lease) -> ReportOutcome {
    report(w, worker, l.lease_ref(), result_of(l))
        .await
        .unwrap()
}

/// Leases, counts and reports (each accepted) until nothing is left to
/// lease or `limit` tasks are done; how many were done.
pub async fn work(w: &mut Workers, worker: &str, limit: usize) -> usize {
    let mut n = 0;
    while n < limit {
        let got = lease(w, worker, (limit - n).min(8) as u32).await;
        if got.is_empty() {
            break;
        }
        for l in &got {
            assert_eq!(
                count_and_report(w, worker, l).await,
                ReportOutcome::Accepted
            );
            n += 1;
        }
    }
    n
}

/// The job is done, and its audit finds nothing wrong and every task
/// counted exactly once; the audit, whose digest is the same wherever the
/// plan was counted correctly.
pub async fn audited(ops: &mut Operators, id: u64) -> v1::AuditReport {
    let j = job(ops, id).await;
    assert!(done(&j), "{j:?}");
    assert_eq!(j.done, j.tasks);
    let a = ops
        .audit_job(v1::JobRef { job_id: id })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(a.problems, Vec::<String>::new());
    assert_eq!(a.counted, j.tasks, "every task counted once");
    // Two workers may report one task at the same moment (one held its
    // lease from before a restart or a partition): both results are
    // journaled, the replay counts the first and the audit agrees.
    assert!(a.result_records >= j.tasks);
    a
}

/// [`audited`], and the job's counts are the published ones (`known.rs`).
pub async fn exact_and_audited(ops: &mut Operators, id: u64) -> v1::AuditReport {
    let j = job(ops, id).await;
    let n = j.plan.as_ref().expect("a job has a plan").n;
    let k = nqueens_common::known::known(n).expect("a board size with published counts");
    assert!(done(&j), "{j:?}");
    assert_eq!(counts(&j), (k.total, k.unique), "job {id} (N={n})");
    let a = audited(ops, id).await;
    assert_eq!(a.known, v1::KnownCheck::Matches as i32);
    a
}

/// The audit digest of `plan` counted without faults: by an honest
/// client of a coordinator inside the test, on a temporary directory.
pub async fn reference_digest(plan: v1::PlanSpec) -> String {
    use nqueens_coordinator::hub::{Clock, SystemClock};
    let dir = crate::tempdir();
    let clock: std::sync::Arc<dyn Clock> = std::sync::Arc::new(SystemClock);
    let r = nqueens_coordinator::server::start(crate::config(dir.path()), clock)
        .await
        .expect("start a reference coordinator");
    let (mut w, mut ops) = clients(&crate::url(&r)).await;
    let id = submit_planned(&mut ops, job_request(plan)).await.job_id;
    work(&mut w, "reference", usize::MAX).await;
    let digest = audited(&mut ops, id).await.digest;
    r.shutdown().await.expect("stop the reference coordinator");
    digest
}
