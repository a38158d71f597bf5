//! Coordinators and workers, all real processes of the binary: a worker
//! counts a job and drains on SIGTERM; a worker killed with SIGKILL loses
//! only its leases, which another worker finishes.

use nqueens_common::plan::Strategy;
use nqueens_proto::v1;
use nqueens_testkit as kit;
use std::io::Read;
use std::process::Stdio;

/// SIGTERM to a worker as it starts (once it listens for the signal, in
/// its self-test or as it registers): it stops at once, exit 0, having
/// taken nothing.
#[test]
fn a_worker_stopped_as_it_starts_exits_cleanly() {
    let _watchdog = kit::watchdog("a_worker_stopped_as_it_starts_exits_cleanly");
    let dir = kit::tempdir();
    let c = kit::start(&dir.path().join("data"));
    for k in 0..3 {
        let w = kit::worker(&c.url, &format!("brief-{k}"), 1);
        kit::stop_workers([w]);
    }
}

/// SIGTERM to a worker whose coordinator has stopped answering (here,
/// SIGSTOP): it goes within about its grace, the leases it could not hand
/// back left to expire, not after its calls' 40 s timeouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_drains_within_its_grace_when_the_coordinator_hangs() {
    let _watchdog = kit::watchdog("a_worker_drains_within_its_grace_when_the_coordinator_hangs");
    let dir = kit::tempdir();
    let c = kit::start(&dir.path().join("data"));
    let mut cmd = kit::worker_cmd(&c.url, "stuck", 1);
    let mut worker = kit::Worker(cmd.args(["--grace", "1"]).spawn().unwrap());
    let mut ops = kit::operators(&c.url).await;
    let plan = kit::plan_spec(17, Strategy::Frame, 0, 4);
    kit::submit(&mut ops, kit::job_request(plan)).await;
    kit::eventually("the worker to hold a lease", async || {
        let workers = kit::workers(&mut ops).await;
        workers.iter().any(|w| w.name == "stuck" && w.leases > 0)
    })
    .await;
    let signal = |sig: &str| {
        let pid = c.child.id().to_string();
        let sent = std::process::Command::new("kill")
            .args([sig, &pid])
            .status();
        assert!(sent.unwrap().success(), "kill {sig}");
    };
    signal("-STOP");
    kit::terminate(&worker);
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let status = worker.wait();
        let _ = tx.send(());
        status
    });
    let gone = rx.recv_timeout(std::time::Duration::from_secs(20));
    signal("-CONT");
    assert!(
        gone.is_ok(),
        "still draining 20 s after SIGTERM, with a grace of 1 s"
    );
    assert!(waiter.join().unwrap().unwrap().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_process_counts_a_job_and_drains_on_sigterm() {
    let _watchdog = kit::watchdog("a_worker_process_counts_a_job_and_drains_on_sigterm");
    let dir = kit::tempdir();
    let c = kit::start(&dir.path().join("data"));
    let mut worker = kit::Worker(
        kit::worker_cmd(&c.url, "test-worker", 2)
            .env("RUST_LOG", "info")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut ops = kit::operators(&c.url).await;
    let plan = kit::plan_spec(13, Strategy::Frame, 0, 50);
    let job = kit::submit(&mut ops, kit::job_request(plan)).await;
    let watch = ops
        .watch_job(v1::JobRef { job_id: job.job_id })
        .await
        .unwrap()
        .into_inner();
    let j = kit::last(watch).await;
    assert_eq!(j.state, v1::JobState::Done as i32);
    assert_eq!(kit::counts(&j), (73_712, 9_233));
    let workers = kit::workers(&mut ops).await;
    assert_eq!(
        workers
            .iter()
            .find(|w| w.name == "test-worker")
            .unwrap()
            .tasks_done,
        j.tasks
    );

    kit::terminate(&worker);
    let status = worker.wait().unwrap();
    let mut log = String::new();
    worker
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(status.success(), "{status:?}\n{log}");
    // The coordinator heard of the drain: the worker shows as draining,
    // and, holding nothing, as left (not idle, nor lost later).
    let workers = kit::workers(&mut ops).await;
    let me = workers.iter().find(|w| w.name == "test-worker").unwrap();
    assert!(me.draining && me.leases == 0, "{me:?}");
    let (_, rows, _) = kit::operator(&c.url, &["workers"]);
    let row = rows.iter().find(|w| w["name"] == "test-worker").unwrap();
    assert_eq!(row["state"], "left", "{row}");
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
    // Routine leases and reports are not a line each (50 tasks would be
    // about 100 lines): the log stays readable at record sizes.
    assert!(
        log.lines().count() < 20,
        "{} lines:\n{log}",
        log.lines().count()
    );
}

#[test]
fn a_worker_killed_mid_task_loses_only_its_leases_which_another_finishes() {
    let _watchdog =
        kit::watchdog("a_worker_killed_mid_task_loses_only_its_leases_which_another_finishes");
    let dir = kit::tempdir();
    let c = kit::start_with(&dir.path().join("data"), &["--lease-ttl", "2"]);
    let (code, lines, err) = kit::operator(&c.url, &["submit", "16", "--tasks", "40"]);
    assert_eq!(code, 0, "{err}");
    let id = lines[0]["job"].as_str().unwrap().to_string();
    let mut doomed = kit::worker(&c.url, "doomed", 1);
    // Poll until it holds leases, then kill it without a goodbye.
    let holds = |name: &str| {
        let (_, workers, _) = kit::operator(&c.url, &["workers"]);
        workers
            .iter()
            .any(|w| w["name"] == name && w["leases"].as_u64() > Some(0))
    };
    kit::wait_until("the doomed worker to hold leases", || holds("doomed"));
    kit::kill9(&mut doomed);
    // Two workers given the same name: two workers all the same.
    let rescuers = [
        kit::worker(&c.url, "rescuer", 1),
        kit::worker(&c.url, "rescuer", 1),
    ];
    let (code, lines, err) = kit::operator(&c.url, &["watch", &id, "--interval", "0.2"]);
    assert_eq!(code, 0, "{err}");
    let job = lines.last().unwrap();
    assert_eq!(kit::dec(&job["total"]), 14_772_512);
    assert_eq!(kit::dec(&job["unique"]), 1_846_955);

    let (_, workers, _) = kit::operator(&c.url, &["workers"]);
    let get = |name: &str| workers.iter().find(|w| w["name"] == name).unwrap().clone();
    let done = |w: &serde_json::Value| kit::dec(&w["tasks_done"]);
    let doomed = get("doomed");
    let rescued: Vec<_> = workers.iter().filter(|w| w["name"] == "rescuer").collect();
    assert_eq!(
        rescued.len(),
        2,
        "one row each, under their own ids: {workers:?}"
    );
    assert_ne!(rescued[0]["worker"], rescued[1]["worker"]);
    // Its leases expired (counted as errors) and their tasks ran elsewhere:
    // every task was counted once, by one of the three (which rescuer
    // took how many depends on which finished its self-test first).
    assert!(kit::dec(&doomed["errors"]) > 0, "{doomed}");
    assert_eq!(
        done(&doomed) + rescued.iter().map(|w| done(w)).sum::<u128>(),
        kit::dec(&job["tasks"])
    );
    for mut r in rescuers {
        kit::terminate(&r);
        assert!(r.wait().unwrap().success());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redundancy_catches_a_lying_worker_and_the_count_stays_exact() {
    let _watchdog = kit::watchdog("redundancy_catches_a_lying_worker_and_the_count_stays_exact");
    let dir = kit::tempdir();
    let c = kit::start(&dir.path().join("data"));
    let (code, lines, err) = kit::operator(
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
    let id = u64::try_from(kit::dec(&lines[0]["job"])).unwrap();
    // A worker speaking the API that inflates every count it reports.
    let (mut liar, _) = kit::clients(&c.url).await;
    liar.raw()
        .register(v1::RegisterRequest {
            worker_id: "liar".into(),
            host: "test".into(),
            cores: 1,
            solver_version: "0".into(),
            name: "liar".into(),
        })
        .await
        .unwrap();
    // Empty while the job is being planned.
    let leases = kit::eventually("the liar's leases", async || {
        Some(kit::lease(&mut liar, "liar", 2).await).filter(|l| !l.is_empty())
    })
    .await;
    for lease in &leases {
        let outcome = kit::report(
            &mut liar,
            "liar",
            lease.lease_ref(),
            kit::inflated(lease, 8),
        );
        assert_eq!(outcome.await.unwrap(), v1::ReportOutcome::AwaitingCheck);
    }
    let mut honest = [
        kit::worker(&c.url, "honest-1", 1),
        kit::worker(&c.url, "honest-2", 1),
    ];
    let (code, lines, err) =
        kit::operator(&c.url, &["watch", &id.to_string(), "--interval", "0.2"]);
    assert_eq!(code, 0, "{err}");
    let job = lines.last().unwrap();
    assert_eq!(
        (kit::dec(&job["total"]), kit::dec(&job["unique"])),
        (365_596, 45_752)
    );
    assert_eq!(kit::dec(&job["conflicts"]), leases.len() as u128, "{job}");
    let (_, workers, _) = kit::operator(&c.url, &["workers"]);
    let liar = workers.iter().find(|w| w["name"] == "liar").unwrap();
    assert_eq!(liar["quarantined"], true, "{liar}");
    assert!(kit::dec(&liar["tasks_done"]) == 0, "{liar}");
    for name in ["honest-1", "honest-2"] {
        let w = workers.iter().find(|w| w["name"] == name).unwrap();
        assert_eq!(w["quarantined"], false, "{w}");
        // Every task needed both: both are credited with every task.
        assert_eq!(kit::dec(&w["tasks_done"]), kit::dec(&job["tasks"]), "{w}");
    }
    for w in &mut honest {
        kit::terminate(w);
        assert!(w.wait().unwrap().success());
    }
}

/// A worker counting on a card (`--core gpu`: lavapipe in CI) and one
/// counting on the CPU, under redundancy 2 with `--cross-device`: every
/// task is counted by both kinds of device and their results (counts and
/// checksums) agree, so the job ends exact with no conflict; the card is
/// named in the worker list, and its busy steps are on the worker's page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_and_a_cpu_agree_on_every_task() {
    if !kit::gpu_here() {
        return;
    }
    let _watchdog = kit::watchdog("a_card_and_a_cpu_agree_on_every_task");
    let dir = kit::tempdir();
    let c = kit::start(&dir.path().join("data"));
    let (code, lines, err) = kit::operator(
        &c.url,
        &[
            "submit",
            "13",
            "--strategy",
            "rings",
            "--tasks",
            "12",
            "--redundancy",
            "2",
            "--cross-device",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let id = kit::dec(&lines[0]["job"]).to_string();
    let log = |name: &str| std::fs::File::create(dir.path().join(name)).unwrap();
    let metrics = kit::free_addr();
    let mut card = kit::Worker(
        kit::worker_cmd(&c.url, "card", 1)
            .args(["--core", "gpu", "--gpus", "auto", "--metrics", &metrics])
            .stderr(log("card.log"))
            .spawn()
            .unwrap(),
    );
    let mut cpu = kit::Worker(
        kit::worker_cmd(&c.url, "cpu", 1)
            .args(["--gpus", "none"])
            .stderr(log("cpu.log"))
            .spawn()
            .unwrap(),
    );
    let (code, lines, err) = kit::operator(&c.url, &["watch", &id, "--interval", "0.2"]);
    assert_eq!(code, 0, "{err}");
    let job = lines.last().unwrap();
    assert_eq!(
        (kit::dec(&job["total"]), kit::dec(&job["unique"])),
        (73_712, 9_233)
    );
    assert_eq!(kit::dec(&job["conflicts"]), 0, "{job}");
    assert_eq!(job["cross_device"], true, "{job}");
    let (_, workers, _) = kit::operator(&c.url, &["workers"]);
    for (name, gpu) in [("card", true), ("cpu", false)] {
        let w = workers.iter().find(|w| w["name"] == name).unwrap();
        assert_eq!(kit::dec(&w["tasks_done"]), kit::dec(&job["tasks"]), "{w}");
        let version = w["solver_version"].as_str().unwrap();
        assert_eq!(version.contains("gpu:"), gpu, "{w}");
        // The card worker's CPU thread is named by the path it counts on.
        assert!(!version.contains(" gpu+"), "{w}");
    }
    let (_, page) = kit::get_metrics(&metrics).unwrap();
    let steps = |kind: &str| -> f64 {
        page.lines()
            .filter(|l| l.starts_with("nqueens_worker_process_card_steps_total{"))
            .filter(|l| l.contains("name=\"gpu:") && l.contains(&format!("steps=\"{kind}\"")))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum()
    };
    let (taken, offered) = (steps("taken"), steps("offered"));
    assert!(taken > 0.0 && taken <= offered, "{page}");
    for (name, w) in [("card", &mut card), ("cpu", &mut cpu)] {
        kit::terminate(w);
        let status = w.wait().unwrap();
        let log = std::fs::read_to_string(dir.path().join(format!("{name}.log"))).unwrap();
        assert!(
            status.success(),
            "the {name} worker ended {status:?}:\n{log}"
        );
    }
}
