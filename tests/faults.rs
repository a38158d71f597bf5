//! Whole-system fault tests: one coordinator and three workers, all real
//! processes on loopback, counting N=15 through a coordinator crash and a
//! disk that stops taking writes; and 200 simulated workers misbehaving
//! for 20 seconds (`NQUEENS_SIM_SECONDS=60`: a minute). Each test ends
//! with the job exact and an audit showing every task counted once. (A
//! worker killed mid-task and a lying worker are in `cluster.rs`;
//! partitions, stalls and slow links in `network.rs`.)

use nqueens_common::plan::Strategy;
use nqueens_proto::v1::worker_service_client::WorkerServiceClient;
use nqueens_proto::v1::{self, ReportOutcome};
use nqueens_testkit::{
    self as kit, done, free_addr, job, kill9, start_at, start_with, watchdog, worker, Coordinator,
    Worker,
};
use std::path::Path;
use std::time::{Duration, Instant};

type Ops = kit::Operators;

fn spec(n: u32, strategy: Strategy, tasks: u64) -> v1::PlanSpec {
    kit::plan_spec(n, strategy, 4, tasks)
}

/// Submits a job and waits until it is planned (its tasks can be leased).
async fn submit(ops: &mut Ops, n: u32, strategy: Strategy, tasks: u64) -> u64 {
    let req = kit::job_request(spec(n, strategy, tasks));
    kit::submit_planned(ops, req).await.job_id
}

/// Polls the job until `until` holds (bounded by [`kit::PATIENCE`]).
async fn wait_for(ops: &mut Ops, id: u64, what: &str, until: impl Fn(&v1::Job) -> bool) -> v1::Job {
    kit::eventually(what, async || {
        let j = job(ops, id).await;
        if until(&j) {
            Ok(j)
        } else {
            Err(format!("job now: {j:?}"))
        }
    })
    .await
}

/// The report a correct worker makes for a lease.
fn report_of(l: &v1::Lease, worker: &str) -> v1::ReportRequest {
    kit::report_request(worker, l.lease_ref(), kit::result_of(l))
}

/// A coordinator on a fixed port (found again after a restart) and an N=15
/// job of about 300 tasks, no worker yet.
async fn n15_job(data: &Path, log: Option<&Path>) -> (Coordinator, String, Ops, u64) {
    let addr = free_addr();
    let c = start_at(data, &addr, &[], log);
    let mut ops = kit::operators(&c.url).await;
    let id = submit(&mut ops, 15, Strategy::Frame, 300).await;
    (c, addr, ops, id)
}

/// Three one-thread workers counting at `url`.
fn three_workers(url: &str) -> Vec<Worker> {
    (1..=3).map(|k| worker(url, &format!("w{k}"), 1)).collect()
}

/// Waits until 1/`part` of the tasks are done, the job still running.
async fn mid_run(ops: &mut Ops, id: u64, part: u64) -> v1::Job {
    let j = wait_for(ops, id, "part of the tasks", |j| {
        j.tasks > 0 && j.done * part >= j.tasks
    })
    .await;
    assert!(!done(&j), "the job ended too soon: use more tasks");
    j
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coordinator_killed_mid_run_restarts_and_the_count_stays_exact() {
    let _watchdog = watchdog("the_coordinator_killed_mid_run_restarts_and_the_count_stays_exact");
    let dir = kit::tempdir();
    let data = dir.path().join("data");
    let (mut c, addr, mut ops, id) = n15_job(&data, None).await;
    let workers = three_workers(&c.url);
    // Mid-run: results stream in from three workers when the kill comes.
    let before = mid_run(&mut ops, id, 4).await;
    kill9(&mut c.child);

    let c = start_at(&data, &addr, &[], None);
    let mut ops = kit::operators(&c.url).await;
    let after = job(&mut ops, id).await;
    assert!(
        after.done >= before.done,
        "acknowledged results survive the crash"
    );
    wait_for(&mut ops, id, "the job to finish after the restart", done).await;
    kit::exact_and_audited(&mut ops, id).await;
    // The restarted coordinator knew the workers only from their results
    // (no name, no cores): each was asked to register again, and did.
    kit::eventually("every worker to register again", async || {
        let listed = kit::workers(&mut ops).await;
        ["w1", "w2", "w3"].iter().all(|name| {
            listed
                .iter()
                .any(|w| w.name == *name && w.cores == 1 && !w.solver_version.is_empty() && !w.lost)
        })
    })
    .await;
    kit::stop_workers(workers);
}

// The coordinator's stderr goes to a file under the same limit, as its
// logs would on a full disk: a failed log write must not stop anything
// (it once panicked the journal's writer thread, through tracing's
// eprintln! of its own write error).
// Over 80 lines: one scenario whose steps each build on the state the
// last one left; split, they would only pass that state along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_that_stops_taking_writes_stops_acknowledgements_and_loses_nothing() {
    let _watchdog =
        watchdog("a_disk_that_stops_taking_writes_stops_acknowledgements_and_loses_nothing");
    let dir = kit::tempdir();
    let data = dir.path().join("data");
    let log = dir.path().join("coordinator.log");
    let (mut c, addr, mut ops, id) = n15_job(&data, Some(&log)).await;
    // A probe takes a task before any worker starts (the workers lease
    // ahead, and may hold every free task by the time the disk fills); the
    // job cannot end while the probe holds it.
    let (mut w, _) = kit::clients(&c.url).await;
    let lease = kit::lease(&mut w, "probe", 1)
        .await
        .pop()
        .expect("a task to lease");
    let workers = three_workers(&c.url);
    mid_run(&mut ops, id, 5).await;

    // The disk "fills": no file of the coordinator may grow any more
    // (a file-size limit binds root too, unlike permissions).
    let journal = data.join("journal");
    let size = std::fs::metadata(&journal).unwrap().len();
    let limited = std::process::Command::new("prlimit")
        .arg(format!("--pid={}", c.child.id()))
        .arg(format!("--fsize={size}:unlimited"))
        .status()
        .expect("prlimit (util-linux)");
    assert!(limited.success());

    // The next write fails; the coordinator says so, stays up, and
    // acknowledges nothing more.
    kit::eventually("the coordinator to report the failed write", async || {
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("journal write failed")
    })
    .await;
    let stuck = job(&mut ops, id).await;
    assert!(!done(&stuck));
    let refused = ops
        .submit_job(v1::SubmitJobRequest {
            plan: Some(spec(8, Strategy::Frame, 1)),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unavailable);
    assert!(refused.message().contains("Free disk space"), "{refused:?}");
    // Health says so: NOT_SERVING while the journal cannot be written.
    let (code, _) = health(&c.url);
    assert_eq!(code, 1, "health must fail while the disk is full");
    // A correct result is refused too ("not stored, retry"), so the
    // worker keeps it.
    let report = w
        .raw()
        .report(report_of(&lease, "probe"))
        .await
        .unwrap_err();
    assert_eq!(report.code(), tonic::Code::Unavailable, "{report:?}");
    assert!(report.message().contains("not stored"), "{report:?}");
    assert_eq!(
        job(&mut ops, id).await.done,
        stuck.done,
        "nothing acknowledged after the failure"
    );

    // The disk is fixed, without a restart: the next write succeeds, health
    // is SERVING again, the workers deliver what they kept, and the count
    // is exact.
    let unlimited = std::process::Command::new("prlimit")
        .arg(format!("--pid={}", c.child.id()))
        .arg("--fsize=unlimited")
        .status()
        .expect("prlimit (util-linux)");
    assert!(unlimited.success());
    // The probe delivers the result it kept: taken now, as its lease
    // still holds (without this the job would wait out the lease).
    let retried = w
        .raw()
        .report(report_of(&lease, "probe"))
        .await
        .expect("the kept result is stored once the disk is fixed")
        .into_inner();
    assert_eq!(retried.outcome(), ReportOutcome::Accepted, "{retried:?}");
    wait_for(
        &mut ops,
        id,
        "the job to finish once the disk is fixed",
        done,
    )
    .await;
    let (code, out) = health(&c.url);
    assert_eq!(code, 0, "SERVING again: {out}");
    kit::exact_and_audited(&mut ops, id).await;
    kit::stop_workers(workers);
    // And after a restart nothing is missing.
    kill9(&mut c.child);
    let c = start_at(&data, &addr, &[], Some(&log));
    let mut ops = kit::operators(&c.url).await;
    kit::exact_and_audited(&mut ops, id).await;
}

/// `nqueens health` against `url`: its exit code and output.
fn health(url: &str) -> (i32, String) {
    let out = kit::nqueens(&["health", "--coordinator", url])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// A small deterministic generator, one per simulated worker.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The lease time of the simulated workers' coordinator.
const LEASE_TTL: Duration = Duration::from_secs(2);

/// What a simulated worker did with one lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Act {
    Report,
    ReportTwice,
    Abandon,
    Release,
    ReportLate,
}

/// One simulated worker until `until`: leases and, mostly, reports; now
/// and then reports twice, abandons a lease, hands it back, or reports
/// after the lease expired. Returns every (job, task) it saw accepted.
async fn simulated(url: String, name: String, seed: u64, until: Instant) -> Vec<(u64, u64)> {
    let mut w = WorkerServiceClient::connect(url).await.unwrap();
    let mut rng = Rng(seed | 1);
    let mut accepted = Vec::new();
    while Instant::now() < until {
        let req = v1::LeaseRequest {
            worker_id: name.clone(),
            max_tasks: 1 + rng.below(3) as u32,
        };
        // The coordinator granted these leases after this instant, so a
        // report answered later than one lease time after it may find
        // its lease expired (a late report in the same batch, or a slow
        // machine) and be refused; an earlier report must be accepted.
        let asked = Instant::now();
        let leases = w.lease(req).await.unwrap().into_inner().leases;
        if leases.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        for l in leases {
            let lease = l.lease_ref();
            let act = match rng.below(100) {
                0..=79 => Act::Report,
                80..=84 => Act::ReportTwice,
                85..=89 => Act::Abandon,
                90..=94 => Act::Release,
                _ => Act::ReportLate,
            };
            match act {
                Act::Abandon => continue,
                Act::Release => {
                    let req = v1::ReleaseRequest {
                        worker_id: name.clone(),
                        leases: vec![lease],
                    };
                    w.release(req).await.unwrap();
                    continue;
                }
                Act::ReportLate => tokio::time::sleep(LEASE_TTL + Duration::from_millis(500)).await,
                Act::Report | Act::ReportTwice => {}
            }
            let me = name.clone();
            let req = tokio::task::spawn_blocking(move || report_of(&l, &me))
                .await
                .unwrap();
            let times = if act == Act::ReportTwice { 2 } else { 1 };
            for _ in 0..times {
                let req = req.clone();
                let outcome = match w.report(req).await {
                    Ok(r) => r.into_inner().outcome,
                    // A late result for a task that another worker holds
                    // by now is refused, and nothing is counted.
                    Err(s)
                        if asked.elapsed() >= LEASE_TTL
                            && s.code() == tonic::Code::FailedPrecondition =>
                    {
                        continue
                    }
                    Err(s) => panic!(
                        "{name}: {act:?} of job {} task {}: {s}",
                        lease.job_id, lease.task_index
                    ),
                };
                match ReportOutcome::try_from(outcome).unwrap() {
                    ReportOutcome::Accepted => accepted.push((lease.job_id, lease.task_index)),
                    ReportOutcome::Duplicate => {}
                    other => panic!(
                        "{name}: {act:?} of job {} task {} got {other:?}",
                        lease.job_id, lease.task_index
                    ),
                }
            }
        }
    }
    accepted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_simulated_workers_misbehaving_lose_and_double_nothing() {
    let _watchdog = watchdog("two_hundred_simulated_workers_misbehaving_lose_and_double_nothing");
    // Each misbehaviour comes a hundred times and more in 20 seconds
    // (thousands of results, several jobs); longer runs only repeat it.
    let seconds: u64 = std::env::var("NQUEENS_SIM_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let dir = kit::tempdir();
    let ttl = LEASE_TTL.as_secs().to_string();
    let c = start_with(&dir.path().join("data"), &["--lease-ttl", &ttl]);
    let mut ops = kit::operators(&c.url).await;
    let until = Instant::now() + Duration::from_secs(seconds);

    // Jobs keep coming while the workers run: two waiting at any time.
    let sizes = [
        (11, Strategy::Frame),
        (12, Strategy::Prefix),
        (12, Strategy::Frame),
        (13, Strategy::Prefix),
    ];
    let mut jobs: Vec<(u64, u32)> = Vec::new();
    let sims: Vec<_> = (0..200u64)
        .map(|k| {
            tokio::spawn(simulated(
                c.url.clone(),
                format!("sim{k}"),
                0x9e37_79b9 * (k + 1),
                until,
            ))
        })
        .collect();
    while Instant::now() < until {
        let mut open = 0;
        for &(id, _) in &jobs {
            open += u32::from(!done(&job(&mut ops, id).await));
        }
        if open < 2 {
            let (n, strategy) = sizes[jobs.len() % sizes.len()];
            jobs.push((submit(&mut ops, n, strategy, 400).await, n));
        } else {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mut accepted = Vec::new();
    for s in sims {
        accepted.extend(s.await.unwrap());
    }
    // One well-behaved worker finishes what the simulated ones left
    // (abandoned leases expire after two seconds).
    let finisher = worker(&c.url, "finisher", 2);
    for &(id, _) in &jobs {
        wait_for(&mut ops, id, "the finisher to finish the job", done).await;
        kit::exact_and_audited(&mut ops, id).await;
    }
    kit::stop_workers([finisher]);
    // No task accepted twice among all the simulated workers.
    let count = accepted.len();
    eprintln!(
        "{} jobs, {count} results accepted from 200 simulated workers",
        jobs.len()
    );
    accepted.sort_unstable();
    accepted.dedup();
    assert_eq!(accepted.len(), count, "a task was accepted twice");
    // It did real work: more than one job, and most tasks from the
    // simulated workers rather than the finisher.
    assert!(jobs.len() >= 2, "only {} jobs ran", jobs.len());
    let tasks: u64 = {
        let mut sum = 0;
        for &(id, _) in &jobs {
            sum += job(&mut ops, id).await.tasks;
        }
        sum
    };
    assert!(
        count as u64 * 2 > tasks,
        "{count} of {tasks} results from the simulated workers"
    );
}
