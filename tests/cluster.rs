//! A coordinator and a worker, both real processes of the binary, count a
//! job; the worker drains and exits 0 on SIGTERM.

use nqueens_common::plan::{PlanSpec, Strategy};
use nqueens_common::Size;
use nqueens_proto::u128_from_wire;
use nqueens_proto::v1::{self, operator_service_client::OperatorServiceClient};
use std::io::Read;
use std::process::{Command, Stdio};

mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_process_counts_a_job_and_drains_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let c = common::start(&dir.path().join("data"));
    let mut worker = Command::new(env!("CARGO_BIN_EXE_nqueens"))
        .args([
            "worker",
            "--coordinator",
            &c.url,
            "--threads",
            "2",
            "--name",
            "test-worker",
        ])
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ops = OperatorServiceClient::connect(c.url.clone()).await.unwrap();
    let spec = PlanSpec {
        n: Size::new(13).unwrap(),
        strategy: Strategy::Frame,
        depth: 0,
        tasks: 50,
    };
    let job = ops
        .submit_job(v1::SubmitJobRequest {
            plan: Some((&spec).into()),
        })
        .await
        .unwrap()
        .into_inner();
    let mut watch = ops
        .watch_job(v1::JobRef { job_id: job.job_id })
        .await
        .unwrap()
        .into_inner();
    let mut last = None;
    while let Some(j) = watch.message().await.unwrap() {
        last = Some(j);
    }
    let j = last.unwrap();
    assert_eq!(j.state, v1::JobState::Done as i32);
    assert_eq!(
        (
            u128_from_wire(j.total.as_ref()),
            u128_from_wire(j.unique.as_ref())
        ),
        (73_712, 9_233)
    );
    let workers = ops
        .list_workers(v1::ListWorkersRequest {})
        .await
        .unwrap()
        .into_inner()
        .workers;
    assert_eq!(
        workers
            .iter()
            .find(|w| w.worker_id == "test-worker")
            .unwrap()
            .tasks_done,
        j.tasks
    );

    common::terminate(&worker);
    let status = worker.wait().unwrap();
    let mut log = String::new();
    worker
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(status.success(), "{status:?}\n{log}");
    for line in [
        "self-test passed",
        "connected to",
        "leased",
        "draining",
        "stopped",
    ] {
        assert!(
            log.contains(line),
            "'{line}' missing from the worker's log:\n{log}"
        );
    }
}
