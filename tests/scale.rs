//! The coordinator under load and crashes: hundreds of simulated workers
//! (`nqueens loadgen`, which abandons leases and dies now and then) on a
//! synthetic job, whose exact sum is known, while the coordinator is
//! killed (kill -9) at random moments of the run and restarted.
//!
//! The suite runs a short version; the full one (10^6 tasks, 20
//! kills, 300 simulated workers) is `#[ignore]`d:
//! `cargo test --release --test scale -- --ignored`.

use nqueens_common::plan::synthetic_sum;
use nqueens_testkit::{
    self as kit, kill9, nqueens, operator, start_at, terminate, watchdog, Coordinator,
};
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The job as `status --json` prints it.
fn status(url: &str, id: &str) -> Value {
    let (code, out, err) = operator(url, &["status", id]);
    // Exit code 0 while running or done and right; the object in any case.
    assert!(
        code == 0 || !out.is_empty(),
        "status failed ({code}): {err}"
    );
    out.into_iter().next().expect("one job object")
}

/// Polls the job until `until` holds for it (at most `limit`).
fn wait(url: &str, id: &str, what: &str, limit: Duration, until: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let j = status(url, id);
        if until(&j) {
            return j;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {j}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn submit(url: &str, tasks: u64) -> String {
    let (code, out, err) = operator(
        url,
        &[
            "submit",
            "8",
            "--strategy",
            "synthetic",
            "--tasks",
            &tasks.to_string(),
        ],
    );
    assert_eq!(code, 0, "submit failed: {err}");
    match &out[0]["job"] {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

/// `nqueens loadgen` against `url` until it is sent SIGTERM.
fn loadgen(url: &str, workers: u32, kill_rate: &str) -> Child {
    nqueens(&[
        "loadgen",
        "--coordinator",
        url,
        "--workers",
        &workers.to_string(),
        "--seconds",
        "3600",
        // Stopped by the test once the job is done.
        "--idle",
        "3600",
        "--fail-rate",
        "0.02",
        "--kill-rate",
        kill_rate,
        "--json",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit())
    .spawn()
    .expect("start loadgen")
}

/// The audit of a finished job: it passed, every task counted once; its
/// digest.
fn audited(url: &str, id: &str, tasks: u64) -> String {
    let (code, out, err) = operator(url, &["audit", id]);
    assert_eq!(code, 0, "audit failed: {err} {out:?}");
    let a = &out[0];
    assert_eq!(a["problems"], Value::Array(vec![]), "{a}");
    assert_eq!(a["passed"], Value::Bool(true), "{a}");
    assert_eq!(a["matches_known"], Value::Bool(true), "{a}");
    assert_eq!(kit::dec(&a["counted"]), u128::from(tasks), "{a}");
    assert_eq!(kit::dec(&a["total"]), synthetic_sum(tasks), "{a}");
    a["digest"].as_str().expect("a digest").to_string()
}

/// A coordinator that checkpoints after every `every` journal records
/// (and seals a journal segment), so kills fall before, between and
/// after checkpoints.
fn restart(data: &Path, addr: &str, log: &Path, every: u64) -> Coordinator {
    let every = every.to_string();
    let extra = ["--lease-ttl", "2", "--checkpoint-every", &every];
    start_at(data, addr, &extra, Some(log))
}

/// Runs a synthetic job of `tasks` tasks with `workers` simulated workers,
/// killing the coordinator `kills` times at spread-out, randomly shifted
/// moments; then checks the exact sum, the audit, and that a run of the
/// same job without kills audits to the same digest.
fn killed_repeatedly_the_sum_stays_exact(tasks: u64, kills: u64, workers: u32, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("coordinator.log");
    let addr = kit::free_addr();
    let every = tasks / (3 * kills + 1);
    let mut c = restart(&data, &addr, &log, every);
    let url = c.url.clone();
    let id = submit(&url, tasks);
    let sims = loadgen(&url, workers, "0.002");
    let mut rng = seed | 1;
    for k in 1..=kills {
        // The k-th kill comes once k/(kills+1) of the tasks are done, plus
        // a random shift of up to 1/(2·(kills+1)): mid-stream, never idle.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let step = u128::from(tasks) / u128::from(kills + 1);
        let at = step * u128::from(k) + u128::from(rng) % (step / 2).max(1);
        wait(
            &url,
            &id,
            "progress before a kill",
            Duration::from_secs(600),
            |j| kit::dec(&j["done"]) >= at,
        );
        kill9(&mut c.child);
        c = restart(&data, &addr, &log, every);
    }
    let j = wait(
        &url,
        &id,
        "the job to finish",
        Duration::from_secs(900),
        |j| j["state"] == "done",
    );
    assert_eq!(kit::dec(&j["done"]), u128::from(tasks), "{j}");
    assert_eq!(kit::dec(&j["total"]), synthetic_sum(tasks), "{j}");
    terminate(&sims);
    let out = sims.wait_with_output().expect("loadgen ends on SIGTERM");
    assert!(out.status.success(), "loadgen failed");
    let summary: Value = serde_json::from_slice(&out.stdout).expect("loadgen's JSON");
    assert!(
        kit::dec(&summary["accepted"]) <= u128::from(tasks),
        "more acknowledgements than tasks: {summary}"
    );
    let digest = audited(&url, &id, tasks);
    // It ran through checkpoints and sealed segments, the audit reading
    // them all.
    assert!(data.join("checkpoint").is_file());
    let sealed = std::fs::read_dir(data.join("journal.d")).unwrap().count();
    assert!(sealed >= 2, "{sealed} sealed segments");

    // The same job again, without kills or dying workers: same evidence.
    let again = submit(&url, tasks);
    let sims = loadgen(&url, workers, "0");
    wait(
        &url,
        &again,
        "the second job",
        Duration::from_secs(900),
        |j| j["state"] == "done",
    );
    terminate(&sims);
    assert!(sims.wait_with_output().unwrap().status.success());
    assert_eq!(
        audited(&url, &again, tasks),
        digest,
        "a run with kills audits like one without"
    );
    drop(c);
}

#[test]
fn a_synthetic_job_survives_three_kills_of_the_coordinator_under_load() {
    let _watchdog = watchdog("a_synthetic_job_survives_three_kills_of_the_coordinator_under_load");
    killed_repeatedly_the_sum_stays_exact(20_000, 3, 100, 0x5eed);
}

#[test]
#[ignore = "minutes: a million tasks, twenty kills (cargo test --release --test scale -- --ignored)"]
fn a_million_task_synthetic_job_survives_twenty_kills_of_the_coordinator() {
    killed_repeatedly_the_sum_stays_exact(1_000_000, 20, 300, 0xdead_beef);
}
