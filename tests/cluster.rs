//! Coordinators and workers, all real processes of the binary: a worker
//! counts a job and drains on SIGTERM; a worker killed with SIGKILL loses
//! only its leases, which another worker finishes.

use nqueens_common::plan::{PlanSpec, Strategy};
use nqueens_common::Size;
use nqueens_proto::u128_from_wire;
use nqueens_proto::v1::{self, operator_service_client::OperatorServiceClient};
use std::io::Read;
use std::process::{Command, Stdio};

mod common;

/// A 64-bit integer of the JSON output (a decimal string, so jq does not
/// round it).
fn int(v: &serde_json::Value) -> Option<u64> {
    v.as_str().and_then(|s| s.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_process_counts_a_job_and_drains_on_sigterm() {
    let _watchdog = common::watchdog("a_worker_process_counts_a_job_and_drains_on_sigterm");
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

#[test]
fn a_worker_killed_mid_task_loses_only_its_leases_which_another_finishes() {
    let _watchdog =
        common::watchdog("a_worker_killed_mid_task_loses_only_its_leases_which_another_finishes");
    let dir = tempfile::tempdir().unwrap();
    let c = common::start_with(&dir.path().join("data"), &["--lease-ttl", "2"]);
    let (code, lines, err) = common::operator(&c.url, &["submit", "16", "--tasks", "40"]);
    assert_eq!(code, 0, "{err}");
    let id = lines[0]["job"].as_str().unwrap().to_string();
    let mut doomed = common::worker(&c.url, "doomed", 1);
    // Poll until it holds leases, then kill it without a goodbye.
    let holds = |name: &str| {
        let (_, workers, _) = common::operator(&c.url, &["workers"]);
        workers
            .iter()
            .any(|w| w["worker"] == name && w["leases"].as_u64() > Some(0))
    };
    while !holds("doomed") {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    common::kill9(&mut doomed);
    let rescuers = [
        common::worker(&c.url, "rescuer-1", 1),
        common::worker(&c.url, "rescuer-2", 1),
    ];
    let (code, lines, err) = common::operator(&c.url, &["watch", &id, "--interval", "0.2"]);
    assert_eq!(code, 0, "{err}");
    let job = lines.last().unwrap();
    assert_eq!(int(&job["total"]), Some(14_772_512));
    assert_eq!(int(&job["unique"]), Some(1_846_955));

    let (_, workers, _) = common::operator(&c.url, &["workers"]);
    let get = |name: &str| {
        workers
            .iter()
            .find(|w| w["worker"] == name)
            .unwrap()
            .clone()
    };
    let done = |w: &serde_json::Value| int(&w["tasks_done"]).unwrap();
    let doomed = get("doomed");
    let rescued = [get("rescuer-1"), get("rescuer-2")];
    // Its leases expired (counted as errors) and their tasks ran elsewhere:
    // every task was counted once, by one of the three.
    assert!(int(&doomed["errors"]) > Some(0), "{doomed}");
    assert!(rescued.iter().map(done).sum::<u64>() > 0);
    assert_eq!(
        done(&doomed) + rescued.iter().map(done).sum::<u64>(),
        int(&job["tasks"]).unwrap()
    );
    for mut r in rescuers {
        common::terminate(&r);
        assert!(r.wait().unwrap().success());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redundancy_catches_a_lying_worker_and_the_count_stays_exact() {
    let _watchdog = common::watchdog("redundancy_catches_a_lying_worker_and_the_count_stays_exact");
    use nqueens_common::plan::Plan;
    use nqueens_proto::v1::worker_service_client::WorkerServiceClient;
    use nqueens_proto::{tally_to_wire, task_from_wire};

    let dir = tempfile::tempdir().unwrap();
    let c = common::start(&dir.path().join("data"));
    let (code, lines, err) = common::operator(
        &c.url,
        &[
            "submit",
            "14",
            "--strategy",
            "frame",
            "--tasks",
            "20",
            "--redundancy",
            "2",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let id = int(&lines[0]["job"]).unwrap();
    // A worker speaking the API that inflates every count it reports.
    let mut liar = WorkerServiceClient::connect(c.url.clone()).await.unwrap();
    liar.register(v1::RegisterRequest {
        worker_id: "liar".into(),
        host: "test".into(),
        cores: 1,
        solver_version: "0".into(),
    })
    .await
    .unwrap();
    let leases = loop {
        let l = liar
            .lease(v1::LeaseRequest {
                worker_id: "liar".into(),
                max_tasks: 2,
            })
            .await
            .unwrap()
            .into_inner()
            .leases;
        if !l.is_empty() {
            break l; // empty while the job is being planned
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    for lease in &leases {
        let (spec, task) = task_from_wire(lease.task.as_ref().unwrap()).unwrap();
        let (mut tally, checksum) = Plan::new(spec).unwrap().count_task_checked(&task).unwrap();
        tally.weighted += 8;
        let outcome = liar
            .report(v1::ReportRequest {
                worker_id: "liar".into(),
                lease: Some(v1::LeaseRef {
                    job_id: id,
                    task_index: task.index,
                    lease_id: lease.lease_id,
                }),
                result: Some(v1::TaskResult {
                    checksum,
                    ..tally_to_wire(&tally)
                }),
            })
            .await
            .unwrap()
            .into_inner()
            .outcome;
        assert_eq!(outcome, v1::ReportOutcome::AwaitingCheck as i32);
    }
    let mut honest = [
        common::worker(&c.url, "honest-1", 1),
        common::worker(&c.url, "honest-2", 1),
    ];
    let (code, lines, err) =
        common::operator(&c.url, &["watch", &id.to_string(), "--interval", "0.2"]);
    assert_eq!(code, 0, "{err}");
    let job = lines.last().unwrap();
    assert_eq!(
        (int(&job["total"]), int(&job["unique"])),
        (Some(365_596), Some(45_752))
    );
    assert_eq!(int(&job["conflicts"]), Some(leases.len() as u64), "{job}");
    let (_, workers, _) = common::operator(&c.url, &["workers"]);
    let liar = workers.iter().find(|w| w["worker"] == "liar").unwrap();
    assert_eq!(liar["quarantined"], true, "{liar}");
    assert!(int(&liar["tasks_done"]) == Some(0), "{liar}");
    for name in ["honest-1", "honest-2"] {
        let w = workers.iter().find(|w| w["worker"] == name).unwrap();
        assert_eq!(w["quarantined"], false, "{w}");
    }
    for w in &mut honest {
        common::terminate(w);
        assert!(w.wait().unwrap().success());
    }
}
