//! Durable result commits per second through the real gRPC stack on
//! loopback: C concurrent clients lease and report tasks; every report is
//! fsynced (group commit) before it is answered.
//!
//!     cargo bench -p nqueens-coordinator --bench commits -- [CLIENTS] [TASKS]
//!
//! Reports carry all-zero counts (valid for any frame task), so the figure
//! is the coordinator's, not the solver's.

use nqueens_common::plan::{PlanSpec, Strategy, Tally};
use nqueens_common::Size;
use nqueens_coordinator::core::SystemClock;
use nqueens_coordinator::server::{start, Config};
use nqueens_coordinator::state::Limits;
use nqueens_proto::tally_to_wire;
use nqueens_proto::v1::operator_service_client::OperatorServiceClient;
use nqueens_proto::v1::worker_service_client::WorkerServiceClient;
use nqueens_proto::v1::{self, ReportOutcome};
use std::sync::Arc;
use std::time::Instant;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let clients: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(64);
    let tasks: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.path().to_path_buf(),
        worker_token: None,
        operator_token: None,
        insecure: false,
        metrics: None,
        metrics_public: false,
        tls: None,
        limits: Limits::default(),
    };
    let server = start(config, Arc::new(SystemClock)).await.unwrap();
    let url = format!("http://{}", server.addr);
    let mut ops = OperatorServiceClient::connect(url.clone()).await.unwrap();
    let spec = PlanSpec {
        n: Size::new(18).unwrap(),
        strategy: Strategy::Frame,
        depth: 0,
        tasks,
    };
    let job = ops
        .submit_job(v1::SubmitJobRequest {
            plan: Some((&spec).into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut watch = ops
        .watch_job(v1::JobRef { job_id: job.job_id })
        .await
        .unwrap()
        .into_inner();
    let mut total_tasks = 0;
    while let Some(j) = watch.message().await.unwrap() {
        if j.tasks > 0 {
            total_tasks = j.tasks;
            break;
        }
    }
    drop(watch);
    let zero = tally_to_wire(&Tally::default());
    let start_at = Instant::now();
    let handles: Vec<_> = (0..clients)
        .map(|k| {
            let (url, zero) = (url.clone(), zero.clone());
            tokio::spawn(async move {
                let mut w = WorkerServiceClient::connect(url).await.unwrap();
                let name = format!("bench-{k}");
                let mut reported = 0u64;
                loop {
                    let req = v1::LeaseRequest {
                        worker_id: name.clone(),
                        max_tasks: 1,
                    };
                    let Some(l) = w.lease(req).await.unwrap().into_inner().leases.pop() else {
                        break;
                    };
                    let lease = v1::LeaseRef {
                        job_id: l.job_id,
                        task_index: l.task.unwrap().index,
                        lease_id: l.lease_id,
                    };
                    let req = v1::ReportRequest {
                        worker_id: name.clone(),
                        lease: Some(lease),
                        result: Some(zero.clone()),
                    };
                    let outcome = w.report(req).await.unwrap().into_inner().outcome;
                    assert_eq!(outcome, ReportOutcome::Accepted as i32);
                    reported += 1;
                }
                reported
            })
        })
        .collect();
    let mut reported = 0;
    for h in handles {
        reported += h.await.unwrap();
    }
    let secs = start_at.elapsed().as_secs_f64();
    assert_eq!(reported, total_tasks);
    println!(
        "{clients} clients, {reported} tasks leased and reported: {secs:.2} s, {:.0} durable commits/s (lease + fsynced report each)",
        reported as f64 / secs
    );
    server.shutdown().await.unwrap();
}
