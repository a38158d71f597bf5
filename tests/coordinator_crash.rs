//! `kill -9` of the real coordinator binary while clients report results,
//! then a restart on the same data directory: every acknowledged result is
//! still there and the final count is exact.

use nqueens_common::plan::{Plan, Strategy};
use nqueens_proto::task_from_wire;
use nqueens_proto::v1::worker_service_client::WorkerServiceClient;
use nqueens_proto::v1::{self, ReportOutcome};
use nqueens_testkit::{self as kit, start};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// A result waiting to be acknowledged (kept across crashes, like a worker).
#[derive(Clone)]
struct Pending {
    /// The worker that holds the lease (leases are bound to their worker).
    worker: String,
    lease: v1::LeaseRef,
    result: v1::TaskResult,
}

/// How the coordinator answered a report.
type Ack = (u64, ReportOutcome);

/// One client: reports what it still holds, then leases, counts and
/// reports until the job is done or the coordinator goes away. Every
/// answered report is sent to `acks`.
async fn client(
    url: String,
    name: String,
    held: Arc<Mutex<Vec<Pending>>>,
    acks: mpsc::UnboundedSender<Ack>,
) {
    let Ok(mut w) = WorkerServiceClient::connect(url).await else {
        return;
    };
    loop {
        let next = held.lock().unwrap().pop();
        let p = match next {
            Some(p) => p,
            None => {
                let req = v1::LeaseRequest {
                    worker_id: name.clone(),
                    max_tasks: 1,
                };
                let Ok(resp) = w.lease(req).await else { return };
                let Some(l) = resp.into_inner().leases.pop() else {
                    return;
                };
                let (spec, task) = task_from_wire(l.task.as_ref().unwrap()).unwrap();
                let result = tokio::task::spawn_blocking(move || {
                    Plan::new(spec).unwrap().count_task(&task).unwrap()
                })
                .await
                .unwrap();
                Pending {
                    worker: name.clone(),
                    lease: l.lease_ref(),
                    result: nqueens_proto::v1::TaskResult::from(&result),
                }
            }
        };
        match w
            .report(kit::report_request(&p.worker, p.lease, p.result.clone()))
            .await
        {
            Ok(r) => {
                let outcome = ReportOutcome::try_from(r.into_inner().outcome).unwrap();
                let _ = acks.send((p.lease.task_index, outcome));
            }
            Err(s) if s.code() == tonic::Code::FailedPrecondition => {
                // Another worker holds the task now: this result is
                // refused for good (as a real worker, drop it).
            }
            Err(_) => {
                // Not acknowledged: keep it for the next coordinator.
                held.lock().unwrap().push(p);
                return;
            }
        }
    }
}

/// Three clients sharing the held results; their answers come on the receiver.
fn clients(
    url: &str,
    held: &Arc<Mutex<Vec<Pending>>>,
) -> (
    Vec<tokio::task::JoinHandle<()>>,
    mpsc::UnboundedReceiver<Ack>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let handles = (0..3)
        .map(|k| {
            tokio::spawn(client(
                url.to_string(),
                format!("w{k}"),
                Arc::clone(held),
                tx.clone(),
            ))
        })
        .collect();
    (handles, rx)
}

async fn job(url: &str, id: u64) -> v1::Job {
    kit::job(&mut kit::operators(url).await, id).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_at_random_moments_loses_and_doubles_nothing() {
    let _watchdog = kit::watchdog("kill_9_at_random_moments_loses_and_doubles_nothing");
    let dir = kit::tempdir();
    let data = dir.path().join("data");
    let mut c = start(&data);
    let mut ops = kit::operators(&c.url).await;
    // Planning takes milliseconds; the watch stream says when it is done.
    let plan = kit::plan_spec(14, Strategy::Frame, 0, 150);
    let planned = kit::submit_planned(&mut ops, kit::job_request(plan)).await;
    let (id, tasks) = (planned.job_id, planned.tasks);

    let held = Arc::new(Mutex::new(Vec::new()));
    // Tasks whose report was ACCEPTED: each at most once, ever.
    let mut acked = BTreeSet::new();
    // Tasks whose result the coordinator confirmed (ACCEPTED, or DUPLICATE
    // when the first acknowledgement was lost in a crash).
    let mut confirmed = BTreeSet::new();
    let mut note = |(task, outcome): Ack, acked: &mut BTreeSet<u64>| {
        assert_ne!(
            outcome,
            ReportOutcome::Conflict,
            "a correct result can never conflict"
        );
        if outcome == ReportOutcome::Accepted {
            assert!(acked.insert(task), "task {task} accepted twice");
        }
        confirmed.insert(task);
    };
    // Kill points: after a pseudo-random number of acknowledgements.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..5 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let kill_after = 3 + seed % 12;
        let (clients, mut rx) = clients(&c.url, &held);
        let mut this_round = 0;
        while let Some(ack) = rx.recv().await {
            note(ack, &mut acked);
            this_round += 1;
            if this_round == kill_after {
                break;
            }
        }
        // SIGKILL, with other reports in flight (or, if the clients all
        // stopped early, on a quiet coordinator: still a crash).
        c.child.kill().unwrap();
        c.child.wait().unwrap();
        for h in clients {
            h.await.unwrap();
        }
        while let Ok(ack) = rx.try_recv() {
            note(ack, &mut acked);
        }
        c = start(&data);
        let j = job(&c.url, id).await;
        assert!(
            j.done >= acked.len() as u64,
            "round {round}: {} done after restart, {} were acknowledged",
            j.done,
            acked.len()
        );
        assert_eq!(j.tasks, tasks);
    }

    // The last run finishes the job.
    let (clients, mut rx) = clients(&c.url, &held);
    while let Some(ack) = rx.recv().await {
        note(ack, &mut acked);
    }
    for h in clients {
        h.await.unwrap();
    }
    let j = job(&c.url, id).await;
    assert_eq!(j.state, v1::JobState::Done as i32);
    assert_eq!(j.done, tasks);
    assert_eq!(confirmed.len() as u64, tasks, "every task confirmed");
    assert!(acked.len() as u64 <= tasks);
    assert_eq!(kit::counts(&j), (365_596, 45_752));
}

/// The tasks job `id` has counted, as `nqueens export` lists them.
fn exported(url: &str, id: u64) -> BTreeSet<u64> {
    let rows = kit::stdout_of(
        kit::nqueens(&["export", &id.to_string(), "--format", "jsonl"])
            .env("NQUEENS_COORDINATOR", url),
    );
    let rows = rows
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap());
    // The last line (rows and their sum) names no task.
    rows.filter(|row| row.get("task").is_some())
        .map(|row| kit::dec(&row["task"]) as u64)
        .collect()
}

/// `nqueens backup` while results arrive (and segments are sealed and
/// compressed at every checkpoint): the original's disk is then lost, and
/// a coordinator started on the backup holds every result acknowledged
/// before the backup began, and finishes the job exact, its audit passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_taken_while_results_arrive_restores_every_acknowledged_one() {
    let _watchdog = kit::watchdog("a_backup_taken_while_results_arrive_restores");
    let dir = kit::tempdir();
    let (data, copy) = (dir.path().join("data"), dir.path().join("backup"));
    let mut c = kit::start_with(&data, &["--checkpoint-every", "10"]);
    let mut ops = kit::operators(&c.url).await;
    let plan = kit::plan_spec(14, Strategy::Frame, 0, 150);
    let id = kit::submit_planned(&mut ops, kit::job_request(plan))
        .await
        .job_id;

    let held = Arc::new(Mutex::new(Vec::new()));
    let (running, mut rx) = clients(&c.url, &held);
    let mut acked = BTreeSet::new();
    while acked.len() < 40 {
        let (task, outcome) = rx.recv().await.expect("the job is not done yet");
        assert_eq!(outcome, ReportOutcome::Accepted);
        acked.insert(task);
    }
    let before = acked.clone();
    let made = kit::nqueens(&["backup", copy.to_str().unwrap(), "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&made.stderr).to_string();
    assert!(made.status.success(), "{said}");
    assert!(
        said.contains("restore with: nqueens coordinator --data-dir"),
        "{said}"
    );
    // The original runs on, then its disk is lost.
    while let Some((task, _)) = rx.recv().await {
        acked.insert(task);
    }
    for h in running {
        h.await.unwrap();
    }
    c.child.kill().unwrap();
    c.child.wait().unwrap();
    std::fs::remove_dir_all(&data).unwrap();

    // What the backup's advice says: a coordinator on the copy.
    let c = start(&copy);
    let restored = exported(&c.url, id);
    assert!(
        restored.is_superset(&before),
        "lost: {:?}",
        before.difference(&restored)
    );
    let (running, mut rx) = clients(&c.url, &held);
    while rx.recv().await.is_some() {}
    for h in running {
        h.await.unwrap();
    }
    let mut ops = kit::operators(&c.url).await;
    kit::exact_and_audited(&mut ops, id).await;
    assert_eq!(kit::counts(&job(&c.url, id).await), (365_596, 45_752));
}
