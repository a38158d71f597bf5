//! The operator's commands against real processes: submit, watch (JSON
//! lines), status, jobs, workers, pause, resume, cancel; the exit code of
//! each failure; and the resumable embedded solve surviving `kill -9`.

use nqueens_testkit::{self as kit, nqueens, operator};
use std::io::{BufRead, BufReader};
use std::process::Stdio;

// Over 80 lines: one scenario whose steps each build on the state the
// last one left; split, they would only pass that state along.
#[test]
fn submit_watch_status_jobs_workers_pause_resume_cancel() {
    let _watchdog = kit::watchdog("submit_watch_status_jobs_workers_pause_resume_cancel");
    let dir = kit::tempdir();
    let c = kit::start(&dir.path().join("data"));

    let (code, _, err) = operator(&c.url, &["status", "7"]);
    assert_eq!(code, 4, "unknown job: {err}");
    assert!(err.contains("job 7 does not exist"), "{err}");

    let (code, lines, err) = operator(
        &c.url,
        &["submit", "12", "--strategy", "frame", "--tasks", "30"],
    );
    assert_eq!(code, 0, "{err}");
    let id = kit::dec(&lines[0]["job"]).to_string();
    let mut w = kit::worker(&c.url, "w1", 2);

    let (code, lines, err) = operator(&c.url, &["watch", &id, "--interval", "0.1"]);
    assert_eq!(code, 0, "{err}");
    let last = lines.last().unwrap();
    assert_eq!(last["state"], "done");
    assert_eq!(
        (kit::dec(&last["total"]), kit::dec(&last["unique"])),
        (14_200, 1_787)
    );
    assert_eq!(last["done"], last["tasks"]);
    assert_eq!(last["matches_known"], true);

    let (_, lines, _) = operator(&c.url, &["status", &id]);
    assert_eq!(
        (lines[0]["state"].as_str(), kit::dec(&lines[0]["total"])),
        (Some("done"), 14_200)
    );
    let (_, jobs, _) = operator(&c.url, &["jobs"]);
    assert_eq!(jobs.len(), 1);
    let (_, workers, _) = operator(&c.url, &["workers"]);
    let w1 = workers
        .iter()
        .find(|w| w["name"] == "w1")
        .expect("w1 listed");
    assert_eq!(w1["tasks_done"], last["tasks"]);

    // The audit, through the coordinator and from the data directory alone.
    let (code, lines, err) = operator(&c.url, &["audit", &id]);
    assert_eq!(code, 0, "{err}");
    let audit = &lines[0];
    assert_eq!(
        (audit["passed"].as_bool(), audit["matches_known"].as_bool()),
        (Some(true), Some(true))
    );
    assert_eq!(
        (kit::dec(&audit["total"]), kit::dec(&audit["unique"])),
        (14_200, 1_787)
    );
    assert_eq!(audit["counted"], last["tasks"]);
    let data = dir.path().join("data");
    let (code, offline, err) = operator(
        &c.url,
        &["audit", &id, "--data-dir", data.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(offline[0]["digest"], audit["digest"]);
    let (code, _, err) = operator(
        &c.url,
        &["audit", "99", "--data-dir", data.to_str().unwrap()],
    );
    assert_eq!(code, 4, "{err}");

    // A second job, paused at once, resumed, then cancelled: watch fails.
    let (_, lines, _) = operator(&c.url, &["submit", "17"]);
    let id2 = kit::dec(&lines[0]["job"]).to_string();
    let (code, lines, err) = operator(&c.url, &["pause", &id2]);
    assert_eq!(
        (code, lines[0]["state"].as_str()),
        (0, Some("paused")),
        "{err}"
    );
    let (_, lines, _) = operator(&c.url, &["resume", &id2]);
    // Still planning (N=17 takes a moment to plan), or running.
    let resumed = lines[0]["state"].as_str();
    assert!(
        matches!(resumed, Some("running" | "planning")),
        "{resumed:?}"
    );
    let (_, lines, _) = operator(&c.url, &["cancel", &id2]);
    assert_eq!(lines[0]["state"], "cancelled");
    let (code, _, err) = operator(&c.url, &["watch", &id2]);
    assert_eq!(code, 1);
    assert!(err.contains("was cancelled"), "{err}");
    // Cancelling twice: the job as it is (a script may ask again).
    let (code, lines, err) = operator(&c.url, &["cancel", &id2]);
    assert_eq!(
        (code, &lines[0]["state"]),
        (0, &"cancelled".into()),
        "{err}"
    );
    let (code, _, err) = operator(&c.url, &["pause", &id2]);
    assert_eq!(code, 1, "pausing a cancelled job: {err}");
    assert!(err.contains("is cancelled; it cannot be paused"), "{err}");

    // Redundancy options reach the coordinator; a bad share is refused.
    let (code, lines, err) = operator(
        &c.url,
        &[
            "submit",
            "12",
            "--redundancy",
            "2",
            "--verify-fraction",
            "0.25",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (
            lines[0]["redundancy"].as_u64().unwrap(),
            lines[0]["verify_fraction"].as_f64()
        ),
        (2, Some(0.25))
    );
    let (code, _, _) = operator(&c.url, &["submit", "12", "--verify-fraction", "2"]);
    assert_eq!(code, 2);
    let (code, _, err) = operator(&c.url, &["submit", "12", "--verify-fraction", "0.5"]);
    assert_eq!(code, 2, "a share without redundancy checks nothing: {err}");
    assert!(err.contains("--redundancy 2"), "{err}");

    // Delete: only with --yes, then the job is gone (exit 4 when asked).
    let (code, _, err) = operator(&c.url, &["delete", &id]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--yes") && err.contains("nqueens export"),
        "{err}"
    );
    let (code, lines, err) = operator(&c.url, &["delete", &id, "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(lines[0]["results"], last["tasks"]);
    let (code, _, err) = operator(&c.url, &["status", &id]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("was deleted"), "{err}");
    // The same from the journal itself.
    let data = dir.path().join("data");
    let (code, _, err) = operator(
        &c.url,
        &["audit", &id, "--data-dir", data.to_str().unwrap()],
    );
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("was deleted"), "{err}");

    kit::terminate(&w);
    assert!(w.wait().unwrap().success());
}

#[test]
fn failures_have_their_own_exit_codes_and_say_what_to_do() {
    let _watchdog = kit::watchdog("failures_have_their_own_exit_codes_and_say_what_to_do");
    // Nothing listens on port 1.
    let (code, _, err) = operator("http://127.0.0.1:1", &["jobs"]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("cannot reach the coordinator at http://127.0.0.1:1"),
        "{err}"
    );
    let (code, _, err) = operator("not a url", &["jobs"]);
    assert_eq!(code, 2, "{err}");

    let dir = kit::tempdir();
    let token = dir.path().join("operator.token");
    std::fs::write(&token, "s3cret-operator-token\n").unwrap();
    let token = token.to_str().unwrap();
    let c = kit::start_with(&dir.path().join("data"), &["--operator-token-file", token]);
    let (code, _, err) = operator(&c.url, &["jobs"]);
    assert_eq!(code, 5, "no token: {err}");
    assert!(err.contains("token is required"), "{err}");
    let out = nqueens(&["jobs", "--coordinator", &c.url])
        .env("NQUEENS_OPERATOR_TOKEN", "wrong")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    assert!(String::from_utf8_lossy(&out.stderr).contains("token is wrong"));
    let (code, _, err) = operator(&c.url, &["jobs", "--token-file", token]);
    assert_eq!(code, 0, "{err}");

    // Bad plans are refused before any call.
    let (code, _, err) = operator(
        &c.url,
        &["submit", "12", "--depth", "40", "--token-file", token],
    );
    assert_eq!(code, 2, "{err}");
    let (code, _, _) = operator(&c.url, &["submit", "33"]);
    assert_eq!(code, 2);
}

/// The "(123/1,235 tasks)" of a progress line.
fn tasks_done(line: &str) -> Option<u64> {
    let inside = line.split_once(" (")?.1.split_once(" tasks)")?.0;
    inside.split_once('/')?.0.replace(',', "").parse().ok()
}

// Over 80 lines: one scenario whose steps each build on the state the
// last one left; split, they would only pass that state along.
#[test]
fn a_resumable_solve_survives_kill_9_and_redoes_nothing_it_stored() {
    let _watchdog = kit::watchdog("a_resumable_solve_survives_kill_9_and_redoes_nothing_it_stored");
    let dir = kit::tempdir();
    let state = dir.path().join("run17");
    let state = state.to_str().unwrap();
    let solve = |extra: &[&str]| {
        let mut c = nqueens(&[
            "solve",
            "17",
            "--state",
            state,
            "--threads",
            "2",
            "--tasks",
            "1000",
        ]);
        c.args(extra);
        c
    };
    // Run until some tasks are stored, then kill -9.
    let mut first = solve(&["--interval", "0.1"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen = 0;
    for line in BufReader::new(first.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(done) = tasks_done(&line) {
            if done >= 100 {
                seen = done;
                break;
            }
        }
    }
    assert!(seen >= 100, "no progress line with 100 tasks done");
    kit::kill9(&mut first);

    // SIGTERM on the second run: it stops and says how to continue.
    let mut second = solve(&["--interval", "0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(second.stdout.take().unwrap()).lines();
    let resumed_at = loop {
        let line = lines.next().expect("a progress line").unwrap();
        if let Some(done) = tasks_done(&line) {
            break done;
        }
    };
    assert!(resumed_at >= seen, "resumed at {resumed_at}, had {seen}");
    kit::terminate(&second);
    let out = second.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        err.contains("run the same command again to continue"),
        "{err}"
    );

    let r: serde_json::Value =
        serde_json::from_str(&kit::stdout_of(&mut solve(&["--json"]))).unwrap();
    assert_eq!(
        (kit::dec(&r["total"]), kit::dec(&r["unique"])),
        (95_815_104, 11_977_939)
    );
    let (tasks, before, counted) = (
        kit::dec(&r["tasks"]),
        kit::dec(&r["run"]["tasks_before"]),
        kit::dec(&r["run"]["tasks_counted"]),
    );
    assert!(before >= u128::from(seen) && before < tasks, "{r}");
    assert_eq!(before + counted, tasks);

    // Done: a further run answers from the store, counting nothing.
    let out = solve(&["--json"]).output().unwrap();
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (kit::dec(&r["run"]["tasks_counted"]), kit::dec(&r["total"])),
        (0, 95_815_104)
    );

    // Another plan in the same directory is refused, not mixed in.
    let out = nqueens(&["solve", "12", "--state", state])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("holds a run of N=17"));
    // The same N with other options: the refusal names what differs.
    let out = nqueens(&["solve", "17", "--state", state, "--tasks", "999"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("(--tasks 1000 there, 999 here)"), "{err}");
}

/// SIGTERM with watches connected: the coordinator exits cleanly (the
/// watches do not hold it), and every watch says the coordinator shut
/// down and exits 3 (unreachable) instead of waiting for it.
#[test]
fn a_sigterm_ends_the_coordinator_and_every_watch_says_why() {
    let _watchdog = kit::watchdog("a_sigterm_ends_the_coordinator_and_every_watch_says_why");
    let dir = kit::tempdir();
    let mut c = kit::start(&dir.path().join("data"));
    // No worker: the job never ends on its own.
    let (code, lines, err) = operator(&c.url, &["submit", "12", "--tasks", "30"]);
    assert_eq!(code, 0, "{err}");
    let id = kit::dec(&lines[0]["job"]).to_string();
    let mut watches: Vec<_> = (0..8)
        .map(|_| {
            nqueens(&["watch", &id, "--interval", "0.1"])
                .args(["--coordinator", &c.url, "--json"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // Each watch has its stream once it prints a line.
    for w in &mut watches {
        let mut first = String::new();
        let mut out = BufReader::new(w.stdout.as_mut().unwrap());
        out.read_line(&mut first).unwrap();
        assert!(first.contains("\"job\""), "{first}");
    }
    kit::terminate(&c.child);
    let status = c.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    // What it left is its user's only: the data directory, the journal,
    // the checkpoint written at the stop.
    use std::os::unix::fs::PermissionsExt;
    let data = dir.path().join("data");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    for d in [&data, &data.join("store")] {
        assert_eq!(mode(d), 0o700, "{}", d.display());
    }
    for f in ["journal", "checkpoint"] {
        assert_eq!(mode(&data.join(f)), 0o600, "{f}");
    }
    for w in watches {
        let out = w.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{err}");
        assert!(err.contains("shut down while job"), "{err}");
    }
}
