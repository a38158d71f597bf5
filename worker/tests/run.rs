//! The worker against a coordinator started by the test (in-process, real
//! gRPC on loopback).

use nqueens_common::engine::counts::PieceCounts;
use nqueens_common::engine::device::{Device, DeviceError};
use nqueens_common::engine::interior::{Interior, Start};
use nqueens_common::engine::join::Budget;
use nqueens_common::plan::Strategy;
use nqueens_coordinator::hub::{Clock, ManualClock, SystemClock};
use nqueens_coordinator::server::{start, Config as ServerConfig, Running};
use nqueens_coordinator::state::Limits;
use nqueens_proto::v1;
use nqueens_testkit as kit;
use nqueens_worker::run::{run, run_with, Config, SelfTest, Summary, WorkerError};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

async fn coordinator(dir: &Path, listen: SocketAddr, clock: Arc<dyn Clock>) -> Running {
    let config = ServerConfig {
        listen,
        // Long leases: expiry is tested with the manual clock only, so a
        // loaded machine's late heartbeats cannot change the outcome.
        limits: Limits {
            lease_ttl_ms: 60_000,
            backoff_base_ms: 1,
            backoff_max_ms: 1,
            ..Limits::default()
        },
        ..kit::config(dir)
    };
    start(config, clock).await.unwrap()
}

fn worker_config(r: &Running, threads: usize) -> Config {
    Config {
        coordinator: kit::url(r),
        threads,
        token: None,
        tls_ca: None,
        tls_identity: None,
        name: None,
        grace: Duration::from_secs(30),
        self_test: SelfTest::Run,
        core: None,
        devices: Vec::new(),
        budget: Budget::default(),
    }
}

/// Starts a worker; the sender drains it.
fn spawn_worker(
    config: Config,
) -> (
    mpsc::UnboundedSender<()>,
    tokio::task::JoinHandle<Result<Summary, WorkerError>>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    (tx, tokio::spawn(run(config, rx)))
}

async fn submit(r: &Running, n: u32, tasks: u64) -> u64 {
    let mut ops = kit::operators(&kit::url(r)).await;
    let plan = kit::plan_spec(n, Strategy::Frame, 0, tasks);
    kit::submit(&mut ops, kit::job_request(plan)).await.job_id
}

/// Follows the job's watch stream until `until` holds for a snapshot.
async fn watch_until(r: &Running, id: u64, until: impl Fn(&v1::Job) -> bool) -> v1::Job {
    let mut ops = kit::operators(&kit::url(r)).await;
    kit::watch_until(&mut ops, id, until).await
}

/// A coordinator on a free loopback port with the real clock.
async fn on_any_port(dir: &Path) -> Running {
    coordinator(dir, "127.0.0.1:0".parse().unwrap(), Arc::new(SystemClock)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_finishes_a_job_exactly_and_drains_when_idle() {
    let dir = kit::tempdir();
    let r = on_any_port(dir.path()).await;
    let id = submit(&r, 12, 60).await;
    let (stop, worker) = spawn_worker(worker_config(&r, 2));
    let j = watch_until(&r, id, kit::done).await;
    assert_eq!(kit::counts(&j), (14_200, 1_787));
    stop.send(()).unwrap();
    let summary = worker.await.unwrap().unwrap();
    assert_eq!(summary.reported, j.tasks);
    r.shutdown().await.unwrap();
}

/// Jobs whose plan names the join are counted by the join: the halves
/// plan (whole boards' choices, its quarter tables built once per piece
/// and kept across tasks) and a rings plan's parts, exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_counts_jobs_in_join_mode_exactly() {
    let dir = kit::tempdir();
    let r = on_any_port(dir.path()).await;
    let mut ops = kit::operators(&kit::url(&r)).await;
    let mut ids = Vec::new();
    for (n, strategy, depth) in [(15, Strategy::Halves, 0), (12, Strategy::Rings, 2)] {
        let mut plan = kit::plan_spec(n, strategy, depth, 30);
        plan.mode = v1::Mode::Join as i32;
        ids.push(kit::submit(&mut ops, kit::job_request(plan)).await.job_id);
    }
    let (stop, worker) = spawn_worker(worker_config(&r, 2));
    let halves = watch_until(&r, ids[0], kit::done).await;
    assert_eq!(kit::counts(&halves), (2_279_184, 285_053));
    assert_eq!(halves.plan.unwrap().mode, v1::Mode::Join as i32);
    let rings = watch_until(&r, ids[1], kit::done).await;
    assert_eq!(kit::counts(&rings), (14_200, 1_787));
    stop.send(()).unwrap();
    worker.await.unwrap().unwrap();
    r.shutdown().await.unwrap();
}

// Over 80 lines: one scenario whose steps each build on the state the
// last one left; split, they would only pass that state along.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_workers_metrics_count_what_it_did() {
    let dir = kit::tempdir();
    let r = on_any_port(dir.path()).await;
    let id = submit(&r, 12, 40).await;
    let stats = nqueens_worker::metrics::Stats::new();
    let (stop, rx) = mpsc::unbounded_channel();
    let worker = tokio::spawn(run_with(worker_config(&r, 2), rx, Arc::clone(&stats)));
    let j = watch_until(&r, id, kit::done).await;
    stop.send(()).unwrap();
    worker.await.unwrap().unwrap();
    let page = stats.render();
    let value = |series: &str| -> f64 {
        page.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{page}"))
    };
    assert_eq!(stats.tasks_counted(), j.tasks);
    assert_eq!(
        value("nqueens_worker_process_tasks_counted_total"),
        j.tasks as f64
    );
    assert_eq!(
        value("nqueens_worker_process_results_total{outcome=\"accepted\"}"),
        j.tasks as f64
    );
    assert!(value("nqueens_worker_process_subproblems_total") > 0.0);
    assert!(value("nqueens_worker_process_nodes_total") > 0.0);
    assert_eq!(value("nqueens_worker_process_leases"), 0.0);
    assert_eq!(value("nqueens_worker_process_threads"), 2.0);
    assert!(page.contains("nqueens_build_info{version="), "{page}");
    assert!(page.contains(",path=\""), "{page}");
    r.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_carries_on_across_a_coordinator_restart() {
    let dir = kit::tempdir();
    // A port below the ephemeral range, so no parallel test binding port 0
    // can take it while the coordinator is down.
    let addr: SocketAddr = format!("127.0.0.1:{}", 20_000 + std::process::id() % 10_000)
        .parse()
        .unwrap();
    let r = coordinator(dir.path(), addr, Arc::new(SystemClock)).await;
    let id = submit(&r, 15, 300).await;
    let (stop, worker) = spawn_worker(worker_config(&r, 2));
    kit::poll_until(&r, id, |j| j.done >= 20).await;
    r.shutdown().await.unwrap();
    // The same address again: the worker reconnects by itself.
    let r = coordinator(dir.path(), addr, Arc::new(SystemClock)).await;
    let at_restart = r.core.job(id).unwrap();
    assert!(
        at_restart.done < at_restart.tasks && at_restart.done >= 20,
        "the restart must come mid-run: {at_restart:?}"
    );
    let j = watch_until(&r, id, kit::done).await;
    assert_eq!(kit::counts(&j), (2_279_184, 285_053));
    stop.send(()).unwrap();
    worker.await.unwrap().unwrap();
    r.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drain_hands_back_unstarted_work_at_once() {
    let dir = kit::tempdir();
    let r = on_any_port(dir.path()).await;
    let id = submit(&r, 16, 300).await;
    let (stop, worker) = spawn_worker(worker_config(&r, 1));
    // One running, more in hand (the prefetched batch).
    kit::poll_until(&r, id, |j| j.leased >= 2).await;
    stop.send(()).unwrap();
    let summary = worker.await.unwrap().unwrap();
    assert!(summary.released >= 1, "{summary:?}");
    let j = kit::job(&mut kit::operators(&kit::url(&r)).await, id).await;
    assert_eq!(j.leased, 0, "nothing left leased to the drained worker");
    assert_eq!(j.done + j.pending, j.tasks);
    r.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_workers_task_runs_elsewhere() {
    let dir = kit::tempdir();
    let clock = Arc::new(ManualClock::default());
    let r = coordinator(dir.path(), "127.0.0.1:0".parse().unwrap(), clock.clone()).await;
    // Big enough that one thread cannot finish it before the kill.
    let id = submit(&r, 15, 40).await;
    let (_, doomed) = spawn_worker(worker_config(&r, 1));
    kit::poll_until(&r, id, |j| j.leased >= 1).await;
    doomed.abort(); // no release, no more heartbeats: as if killed
    let _ = doomed.await;
    // Its leases expire on the coordinator's clock.
    clock.advance(60_001);
    r.core.sweep().await.unwrap();
    clock.advance(2);
    let (stop, worker) = spawn_worker(worker_config(&r, 2));
    let j = watch_until(&r, id, kit::done).await;
    assert_eq!(kit::counts(&j), (2_279_184, 285_053));
    stop.send(()).unwrap();
    worker.await.unwrap().unwrap();
    r.shutdown().await.unwrap();
}

/// A worker of one thread pointed at no coordinator: it never gets past
/// its self-test if that fails.
fn offline(self_test: SelfTest, devices: Vec<Arc<dyn Device>>) -> Config {
    Config {
        coordinator: "http://127.0.0.1:9".into(),
        threads: 1,
        token: None,
        tls_ca: None,
        tls_identity: None,
        name: None,
        grace: Duration::from_secs(1),
        self_test,
        core: None,
        devices,
        budget: Budget::default(),
    }
}

#[tokio::test]
async fn a_failing_self_test_stops_the_worker_before_any_work() {
    let config = offline(SelfTest::Fault, Vec::new());
    let (_tx, rx) = mpsc::unbounded_channel();
    let e = run(config, rx).await.unwrap_err();
    assert!(matches!(e, WorkerError::SelfTest(_)), "{e}");
    assert!(e.to_string().contains("must not report results"), "{e}");
}

/// A card that fails on every count.
#[derive(Debug)]
struct Broken;

impl Device for Broken {
    fn name(&self) -> &str {
        "gpu:broken (test)"
    }

    fn count_below(
        &self,
        _: &[Interior],
        _: &[Start],
        _: &AtomicBool,
    ) -> Result<Option<Vec<PieceCounts>>, DeviceError> {
        Err(DeviceError::Failed("device lost".into()))
    }
}

/// A card that fails while the worker counts: its feeders stop, the task
/// it failed goes back to the queue, and the CPU thread counts the whole
/// job exactly (nothing waits for a lease to run out).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_card_hands_its_tasks_to_the_cpu_threads() {
    let dir = kit::tempdir();
    let r = on_any_port(dir.path()).await;
    let id = submit(&r, 11, 30).await;
    let config = Config {
        devices: vec![Arc::new(Broken)],
        self_test: SelfTest::Passed,
        ..worker_config(&r, 1)
    };
    let (stop, worker) = spawn_worker(config);
    let j = watch_until(&r, id, kit::done).await;
    assert_eq!(kit::counts(&j), (2_680, 341));
    stop.send(()).unwrap();
    let summary = worker.await.unwrap().unwrap();
    assert_eq!(summary.reported, j.tasks);
    r.shutdown().await.unwrap();
}

/// The self-test counts on every card and names the one that fails.
#[tokio::test]
async fn a_card_that_fails_its_self_test_stops_the_worker() {
    let config = offline(SelfTest::Run, vec![Arc::new(Broken)]);
    let (_tx, rx) = mpsc::unbounded_channel();
    let e = run(config, rx).await.unwrap_err();
    assert!(matches!(e, WorkerError::SelfTest(_)), "{e}");
    assert!(e.to_string().contains("on gpu:broken (test)"), "{e}");
}

/// A worker fresh from a job of tiny tasks keeps the next job's tasks at
/// the pace of a worker that has measured nothing yet (one running, two
/// queued), not at the old job's rate (which took all 40 at once and left
/// other workers idle): its rate is measured again for each job, and what
/// a lease asked for at the old rate brings beyond that goes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_job_is_leased_at_its_own_pace_not_the_last_ones() {
    let dir = kit::tempdir();
    let r = on_any_port(dir.path()).await;
    let tiny = submit(&r, 10, 40).await;
    let config = Config {
        grace: Duration::ZERO,
        ..worker_config(&r, 1)
    };
    let (stop, worker) = spawn_worker(config);
    watch_until(&r, tiny, kit::done).await;
    // Tasks of minutes each: none finishes while the test looks.
    let long = submit(&r, 20, 40).await;
    // Leased at the old rate, the answer's tasks beyond the fresh pace go
    // back at once.
    let j = kit::poll_until(&r, long, |j| (1..=3).contains(&j.leased)).await;
    assert_eq!((j.leased, j.pending), (3, 37), "{j:?}");
    stop.send(()).unwrap();
    worker.await.unwrap().unwrap();
    r.shutdown().await.unwrap();
}

/// Two jobs at once, through a real coordinator: a lease answer may
/// bring tasks of both (the first job's handed back, then the second's);
/// the worker cuts at most one answer to the new job's pace, and both
/// jobs end exact (`hostile.rs` drives the answers that cut many before).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jobs_leased_in_turn_keep_their_pace() {
    let dir = kit::tempdir();
    let r = on_any_port(dir.path()).await;
    let first = submit(&r, 14, 400).await;
    let mut ops = kit::operators(&kit::url(&r)).await;
    let plan = kit::plan_spec(15, Strategy::Prefix, 5, 3000);
    let second = kit::submit(&mut ops, kit::job_request(plan)).await.job_id;
    let (stop, worker) = spawn_worker(worker_config(&r, 1));
    let a = watch_until(&r, first, kit::done).await;
    let b = watch_until(&r, second, kit::done).await;
    assert_eq!(kit::counts(&a), (365_596, 45_752));
    assert_eq!(kit::counts(&b), (2_279_184, 285_053));
    stop.send(()).unwrap();
    let summary = worker.await.unwrap().unwrap();
    assert_eq!(summary.reported, 3400, "{summary:?}");
    // One lease at the switch may bring more than the new job's fresh
    // pace: its tasks beyond it go back, once.
    assert!(summary.cut <= 1, "{summary:?}");
    assert_eq!(summary.released, 0, "nothing was left to hand back");
    r.shutdown().await.unwrap();
}
