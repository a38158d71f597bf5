//! What an operator of a long run reads, from the real binary: JSON with
//! big integers as strings and one job object everywhere, watch lines with
//! time, rate and state, tables that fit 80 columns, errors that say what
//! to fix, completion of enumerated flags, environment variables of the
//! long-lived processes, JSON logs, and `nqueens doctor`.

use nqueens_testkit::{self as kit, nqueens, operator};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;

fn keys(v: &serde_json::Value) -> BTreeSet<String> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect()
}

/// Runs the binary; exit code, stdout, stderr.
fn run(args: &[&str]) -> (i32, String, String) {
    let out = nqueens(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every 64-bit field of the job object.
const JOB_INTEGERS: [&str; 12] = [
    "job",
    "tasks",
    "done",
    "leased",
    "pending",
    "failed",
    "dead",
    "total",
    "unique",
    "conflicts",
    "checking",
    "submitted_unix_ms",
];

// Over 80 lines: one scenario whose steps each build on the state the
// last one left; split, they would only pass that state along.
#[test]
fn json_integers_are_strings_and_every_command_prints_the_same_job_object() {
    let _watchdog = kit::watchdog("json_integers_are_strings");
    let dir = kit::tempdir();
    let c = kit::start(&dir.path().join("data"));

    let (code, submitted, err) = operator(&c.url, &["submit", "12", "--tasks", "30"]);
    assert_eq!(code, 0, "{err}");
    let id = submitted[0]["job"].as_str().expect("the id as a string");
    let _w = kit::worker(&c.url, "json-worker", 2);
    let (code, watched, err) = operator(&c.url, &["watch", id, "--interval", "0.1"]);
    assert_eq!(code, 0, "{err}");
    let (code, status, err) = operator(&c.url, &["status", id]);
    assert_eq!(code, 0, "{err}");
    let (_, jobs, _) = operator(&c.url, &["jobs"]);
    let state = dir.path().join("state");
    let (code, solved, err) = run(&["solve", "10", "--state", state.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let solved: serde_json::Value = serde_json::from_str(solved.trim()).unwrap();

    // One job object, the same keys from every command.
    let want = keys(&status[0]);
    for (what, v) in [
        ("submit", &submitted[0]),
        ("watch", watched.last().unwrap()),
        ("jobs", &jobs[0]),
        ("solve --state", &solved),
    ] {
        assert_eq!(keys(v), want, "{what} prints another job object: {v}");
    }
    for v in [&status[0], &solved] {
        for key in JOB_INTEGERS {
            kit::dec(&v[key]);
        }
    }
    // A finished job: exactly 100%, no ETA, the counts exact.
    let done = &status[0];
    assert_eq!(done["state"], "done");
    assert_eq!(done["progress"].as_f64(), Some(1.0), "{done}");
    assert!(done["eta_seconds"].is_null(), "{done}");
    assert_eq!(
        (kit::dec(&done["total"]), kit::dec(&done["unique"])),
        (14_200, 1_787)
    );
    assert_eq!(done["run"], serde_json::Value::Null);
    assert_eq!(solved["progress"].as_f64(), Some(1.0));
    assert_eq!(kit::dec(&solved["total"]), 724);
    let this_run = &solved["run"];
    assert_eq!(
        kit::dec(&this_run["tasks_before"]) + kit::dec(&this_run["tasks_counted"]),
        kit::dec(&solved["tasks"])
    );

    let (_, workers, _) = operator(&c.url, &["workers"]);
    let w = &workers[0];
    for key in [
        "tasks_done",
        "subproblems_done",
        "errors",
        "conflicts",
        "last_seen_unix_ms",
    ] {
        kit::dec(&w[key]);
    }
    assert_eq!(kit::dec(&w["tasks_done"]), kit::dec(&done["tasks"]));
    assert_eq!(w["name"], "json-worker");
    assert_ne!(
        w["worker"], "json-worker",
        "the id is the name and a suffix"
    );
    assert_eq!(w["state"], "idle");
    let (code, audit, err) = operator(&c.url, &["audit", id]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(kit::dec(&audit[0]["total"]), 14_200);

    // Export: every counted task, which re-added here gives the counts.
    let csv = dir.path().join("job.csv");
    let (code, _, err) = run(&[
        "export",
        id,
        "--output",
        csv.to_str().unwrap(),
        "--coordinator",
        &c.url,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("total 14,200, unique 1,787 (equal to the job's)"),
        "{err}"
    );
    assert!(
        !dir.path().join("job.csv.partial").exists(),
        "written as .partial, renamed once whole"
    );
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let mut sum = nqueens_common::plan::Tally::default();
    let mut tasks = BTreeSet::new();
    let mut total = 0;
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        let n = |name: &str| f[col(name)].parse::<u128>().unwrap();
        // Each row's share of the total, summed by a third party as is.
        total += n("total");
        assert!(
            f[col("take")] == "all" || n("take") < u128::from(u64::MAX),
            "{line}"
        );
        let mut t = nqueens_common::plan::Tally {
            weighted: n("weighted"),
            half: n("half"),
            quarter: n("quarter"),
            ..Default::default()
        };
        (t.classes.c1, t.classes.c2, t.classes.c4, t.classes.c8) =
            (n("c1"), n("c2"), n("c4"), n("c8"));
        t.classes.nodes = n("nodes");
        sum.merge(&t).unwrap();
        assert!(n("hi") >= n("lo") && n("subproblems") > 0, "{line}");
        assert!(f[col("worker")].starts_with("json-worker-"), "{line}");
        tasks.insert(n("task"));
    }
    assert_eq!(
        tasks.len() as u128,
        kit::dec(&done["tasks"]),
        "one row per task"
    );
    let spec = nqueens_common::plan::PlanSpec {
        n: nqueens_common::Size::new(12).unwrap(),
        strategy: done["strategy"].as_str().unwrap().parse().unwrap(),
        depth: done["depth"].as_u64().unwrap() as u32,
        tasks: 30,
        mode: nqueens_common::plan::Mode::Backtrack,
        cut: nqueens_common::plan::CUT,
    };
    let t = nqueens_common::plan::Plan::new(spec)
        .unwrap()
        .finish(&sum)
        .unwrap();
    assert_eq!((t.total().unwrap(), t.unique().unwrap()), (14_200, 1_787));
    assert_eq!(total, 14_200, "the total column sums to the job's total");
    // `--json` writes JSON lines, as `--format jsonl` does; they end with
    // a trailer saying the export is complete.
    for format in [&["--format", "jsonl"][..], &["--json"][..]] {
        let (code, jsonl, err) =
            run(&[&["export", id, "--coordinator", &c.url][..], format].concat());
        assert_eq!(code, 0, "{err}");
        let mut rows: Vec<serde_json::Value> = jsonl
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let end = rows.pop().unwrap();
        assert_eq!(end["complete"], true, "{end}");
        assert_eq!(
            (kit::dec(&end["rows"]), kit::dec(&end["total"])),
            (tasks.len() as u128, 14_200)
        );
        assert_eq!(rows.len(), tasks.len());
        assert!(rows
            .iter()
            .all(|r| r["weighted"].is_string() && r["task"].is_string()));
    }
    // A reader that stops after one line (`| head -1`): no panic, exit 0.
    let mut head = nqueens(&["export", id, "--coordinator", &c.url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(head.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("task,"), "{first}");
    let out = head.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");

    // Subproblem ids pass 2^53: as numbers, jq would round them.
    let (_, listed, _) = run(&["plan", "10", "--strategy", "frame", "--list", "--json"]);
    let ids: Vec<u128> = listed
        .lines()
        .map(|l| kit::dec(&serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]))
        .collect();
    assert!(ids.iter().any(|&i| i > 1 << 53), "no id above 2^53");
    assert_eq!(ids.iter().collect::<BTreeSet<_>>().len(), ids.len());

    // Redundancy 2 with one credential among the workers: the job says
    // what it waits for, in JSON, in `status` and in `watch` lines.
    let (_, lines, _) = operator(&c.url, &["submit", "12", "--redundancy", "2"]);
    let stalled = lines[0]["job"].as_str().unwrap().to_string();
    let mut watch = nqueens(&["watch", &stalled, "--json", "--interval", "0.05"])
        .args(["--coordinator", &c.url])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut snapshots = BufReader::new(watch.stdout.take().unwrap())
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(&l.unwrap()).unwrap());
    let waiting = snapshots
        .find(|j| j["state"] == "running")
        .expect("a running snapshot");
    let why = waiting["waiting_for"]
        .as_str()
        .unwrap_or_else(|| panic!("{waiting}"));
    assert!(why.contains("redundancy 2 needs 2 distinct"), "{why}");
    let (_, text, _) = run(&["status", &stalled, "--coordinator", &c.url]);
    assert!(
        text.contains("state     running, waiting for workers: redundancy 2"),
        "{text}"
    );
    operator(&c.url, &["cancel", &stalled]);
    let last = snapshots.last().expect("a last snapshot");
    assert_eq!(
        (&last["state"], &last["waiting_for"]),
        (&"cancelled".into(), &serde_json::Value::Null)
    );
    assert_eq!(watch.wait().unwrap().code(), Some(1));
}

/// `2026-11-23T18:40:05Z` at the start of a line.
fn timestamped(line: &str) -> bool {
    let b = line.as_bytes();
    b.len() > 21
        && b[..20].iter().enumerate().all(|(i, &c)| match i {
            4 | 7 => c == b'-',
            10 => c == b'T',
            13 | 16 => c == b':',
            19 => c == b'Z',
            _ => c.is_ascii_digit(),
        })
        && b[20] == b' '
}

// Over 80 lines: one scenario whose steps each build on the state the
// last one left; split, they would only pass that state along.
#[test]
fn watch_lines_carry_time_state_and_rate_and_a_finished_job_is_exactly_done() {
    let _watchdog = kit::watchdog("watch_lines_carry_time_state_and_rate");
    let dir = kit::tempdir();
    let c = kit::start(&dir.path().join("data"));
    let (_, lines, _) = operator(&c.url, &["submit", "17", "--tasks", "400"]);
    let id = lines[0]["job"].as_str().unwrap().to_string();
    let (code, _, err) = operator(&c.url, &["pause", &id]);
    assert_eq!(code, 0, "{err}");

    let mut watch = nqueens(&["watch", &id, "--interval", "0.05", "--coordinator", &c.url])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut next = || lines.next().expect("a line").unwrap();
    let paused = next();
    assert!(timestamped(&paused), "{paused}");
    assert!(paused.contains(&format!(" job {id} ")), "{paused}");
    assert!(paused.contains(": paused "), "{paused}");
    assert!(paused.contains("ETA paused"), "{paused}");

    // Resumed with a worker: lines until one shows a measured rate.
    let (code, _, err) = operator(&c.url, &["resume", &id]);
    assert_eq!(code, 0, "{err}");
    let _w = kit::worker(&c.url, "rate-worker", 1);
    let running = loop {
        let line = next();
        assert!(timestamped(&line), "{line}");
        if line.contains(": running ") && line.contains(" tasks/s,") {
            break line;
        }
    };
    let rate: f64 = running
        .split(" tasks/s,")
        .next()
        .unwrap()
        .rsplit(' ')
        .next()
        .unwrap()
        .replace(',', "")
        .parse()
        .unwrap_or_else(|e| panic!("no rate ({e}) in {running}"));
    assert!(rate > 0.0, "{running}");

    // On a terminal (a pty of 80 columns, made by util-linux `script`):
    // a progress bar and a counts line with the rate, within 80 columns.
    let pty = nqueens_on_a_terminal(&format!("watch {id} --coordinator {}", c.url));
    if let Some((_, screen)) = &pty {
        kit::wait_until("the bar to show a rate", || {
            String::from_utf8_lossy(&screen.lock().unwrap()).contains(" tasks/s")
        });
    }

    // Cancelled: the last line says so, and watch fails.
    let (code, _, err) = operator(&c.url, &["cancel", &id]);
    assert_eq!(code, 0, "{err}");
    let last = loop {
        let line = next();
        if line.contains(": cancelled ") {
            break line;
        }
    };
    assert!(timestamped(&last) && last.contains("ETA -"), "{last}");
    assert_eq!(watch.wait().unwrap().code(), Some(1));
    if let Some((mut child, screen)) = pty {
        child.wait().unwrap();
        let text = String::from_utf8_lossy(&screen.lock().unwrap()).into_owned();
        let shown = visible_lines(&text);
        // The bar fills its line exactly (80 columns), and the terminal
        // wraps to the counts line: cut them apart at the percentage.
        let mut bars = 0;
        for l in shown.iter().filter(|l| l.contains("] ") && l.contains('%')) {
            bars += 1;
            let (bar, counts) = l.split_at(l.find('%').unwrap() + 1);
            assert!(bar.chars().count() <= 80, "{bar}");
            assert!(counts.chars().count() <= 80, "{counts}");
        }
        assert!(bars > 0, "a bar: {shown:?}");
        assert!(
            shown
                .iter()
                .any(|l| l.contains("running · ETA ") && l.contains(" tasks/s")),
            "{shown:?}"
        );
    }

    // A finished job: exactly 100.0%, no ETA but "done".
    let (_, lines, _) = operator(&c.url, &["submit", "10", "--tasks", "5"]);
    let small = lines[0]["job"].as_str().unwrap().to_string();
    let (code, out, err) = run(&["watch", &small, "--coordinator", &c.url]);
    assert_eq!(code, 0, "{err}");
    let last = out.lines().last().unwrap();
    assert!(timestamped(last), "{last}");
    assert!(last.contains(": done 100.0% ("), "{last}");
    assert!(last.contains("ETA done"), "{last}");
    let (_, status, _) = operator(&c.url, &["status", &small]);
    assert_eq!(status[0]["progress"].as_f64(), Some(1.0));
    assert!(status[0]["eta_seconds"].is_null());
}

/// `nqueens ARGS` under a pseudo-terminal of 80 by 24 (util-linux
/// `script`), its screen bytes gathered as they come; `None` (said) where
/// `script` is missing.
fn nqueens_on_a_terminal(
    args: &str,
) -> Option<(
    std::process::Child,
    std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
)> {
    use std::io::Read;
    let command = format!("stty cols 80 rows 24; {} {args}", kit::binary().display());
    let mut child = match std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("skipped the terminal check: no util-linux `script` ({e})");
            return None;
        }
    };
    let screen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (mut out, into) = (child.stdout.take().unwrap(), screen.clone());
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            into.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    Some((child, screen))
}

/// What a terminal shows line by line: escape sequences dropped, carriage
/// returns and cursor moves taken as line starts.
fn visible_lines(screen: &str) -> Vec<String> {
    let mut lines = vec![String::new()];
    let mut chars = screen.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => {
                // CSI: ESC [ parameters final-byte.
                if chars.peek() == Some(&'[') {
                    chars.next();
                    for f in chars.by_ref() {
                        if f.is_ascii_alphabetic() {
                            break;
                        }
                    }
                }
                lines.push(String::new());
            }
            '\r' | '\n' => lines.push(String::new()),
            c => lines.last_mut().unwrap().push(c),
        }
    }
    lines
        .into_iter()
        .map(|l| l.trim_end().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

fn widest(text: &str) -> usize {
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

#[test]
fn tables_fit_an_80_column_terminal() {
    let _watchdog = kit::watchdog("tables_fit_an_80_column_terminal");
    let dir = kit::tempdir();
    let c = kit::start(&dir.path().join("data"));
    // A paused job (an unfinished row), then one counted to its end.
    let (_, lines, _) = operator(&c.url, &["submit", "18", "--strategy", "prefix"]);
    let paused = lines[0]["job"].as_str().unwrap().to_string();
    let (code, _, err) = operator(&c.url, &["pause", &paused]);
    assert_eq!(code, 0, "{err}");
    let (_, lines, _) = operator(&c.url, &["submit", "13", "--tasks", "20"]);
    let id = lines[0]["job"].as_str().unwrap().to_string();
    let _w = kit::worker(&c.url, "a-worker-with-a-rather-long-name", 1);
    let (code, _, err) = operator(&c.url, &["watch", &id]);
    assert_eq!(code, 0, "{err}");

    let mut shown = Vec::new();
    for args in [
        vec!["jobs"],
        vec!["workers"],
        vec!["status"],
        vec!["status", &id],
        vec!["status", &paused],
    ] {
        let mut full = args.clone();
        full.extend(["--coordinator", &c.url]);
        let (code, out, err) = run(&full);
        assert_eq!(code, 0, "{args:?}: {err}");
        shown.push((args.join(" "), out));
    }
    let (code, out, err) = run(&["table", "4..12"]);
    assert_eq!(code, 0, "{err}");
    shown.push(("table".into(), out));
    let (code, out, err) = run(&["bench", "9..10", "--threads", "2"]);
    assert_eq!(code, 0, "{err}");
    shown.push(("bench".into(), out));
    for (what, out) in &shown {
        assert!(out.lines().count() >= 2, "{what}: {out}");
        assert!(
            widest(out) <= 80,
            "{what} is {} columns wide:\n{out}",
            widest(out)
        );
    }
    let workers = &shown[1].1;
    assert!(
        workers.contains("a-worker-wi~"),
        "a long name is cut: {workers}"
    );
    assert!(
        workers.lines().nth(1).unwrap().ends_with("idle"),
        "{workers}"
    );
    let jobs = &shown[0].1;
    assert!(
        jobs.contains("paused") && jobs.contains("done") && jobs.contains("100.0%"),
        "{jobs}"
    );
    assert!(jobs.contains("73,712"), "{jobs}");
}

#[test]
fn slips_health_json_tls_mismatch_depth_without_strategy_and_ctrl_c_of_a_long_solve() {
    let _watchdog = kit::watchdog("slips");
    // health --json when nothing answers: an object saying so, exit 3.
    let dead = format!("http://{}", kit::free_addr());
    let (code, lines, err) = operator(&dead, &["health"]);
    assert_eq!(code, 3, "{err}");
    assert_eq!(lines.len(), 1, "one JSON object: {lines:?}");
    assert_eq!(lines[0]["serving"], false);
    assert!(
        lines[0]["error"].as_str().unwrap().contains("cannot reach"),
        "{}",
        lines[0]
    );

    // https:// against a plain-text coordinator says so.
    let dir = kit::tempdir();
    let c = kit::start(&dir.path().join("data"));
    let https = c.url.replace("http://", "https://");
    let (code, _, err) = run(&["jobs", "--coordinator", &https]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("answers without TLS"), "{err}");
    assert!(err.contains(&format!("use {}", c.url)), "{err}");
    // So does a worker, in its log, while it keeps trying.
    let log = dir.path().join("worker.log");
    let _w = kit::worker_logged(&https, "tls-slip", 1, &log);
    kit::wait_for_log(&log, "answers without TLS", 1);

    // http:// against a TLS coordinator says so too.
    let (cert, key) = self_signed(dir.path());
    let tls = kit::start_with(
        &dir.path().join("tls-data"),
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let (code, _, err) = run(&["jobs", "--coordinator", &tls.url]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("probably speaks TLS"), "{err}");
    assert!(
        err.contains(&tls.url.replace("http://", "https://")),
        "{err}"
    );
    // A host name that does not resolve is said to be one, not TLS.
    let (code, _, err) = run(&["jobs", "--coordinator", "http://nosuchhost.invalid:7700"]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("cannot be found") && !err.contains("TLS"),
        "{err}"
    );

    // --depth alone does nothing without a plan: refused, with the fix.
    let (code, _, err) = run(&["solve", "10", "--depth", "2"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("add --strategy frame"), "{err}");

    // A long count says what it is and what Ctrl-C loses.
    let mut solve = nqueens(&["solve", "23", "--threads", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut errs = BufReader::new(solve.stderr.take().unwrap());
    let mut first = String::new();
    errs.read_line(&mut first).unwrap();
    assert!(
        first.contains("counting N=23") && first.contains("--state DIR"),
        "{first}"
    );
    kit::terminate(&solve);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut errs, &mut rest).unwrap();
    assert_eq!(solve.wait().unwrap().code(), Some(130), "{rest}");
    assert!(
        rest.contains("`nqueens solve 23 --state DIR` would have kept"),
        "{rest}"
    );
}

/// A self-signed certificate for 127.0.0.1 and localhost, as PEM files.
fn self_signed(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (c, k)
}

#[test]
fn completion_lists_the_values_of_enumerated_flags() {
    let (code, script, err) = run(&["completions", "bash"]);
    assert_eq!(code, 0, "{err}");
    for (flag, values) in [
        ("--strategy", "frame rings prefix halves synthetic"),
        ("--mode", "backtrack join"),
        ("--core", "auto scalar avx2 avx512 gpu"),
        ("--format", "rows board"),
        ("--log-format", "text json"),
        ("--log-level", "error warn info debug trace"),
        ("--role", "operator worker"),
    ] {
        let case = format!("{flag})\n                    COMPREPLY=($(compgen -W \"{values}\"");
        assert!(
            script.contains(&case),
            "{flag} does not complete to {values}"
        );
    }
}

/// The long options of a `--help` text, each with its description.
fn options(help: &str) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = Vec::new();
    let section = help
        .split_once("\nOptions:\n")
        .expect("an Options section")
        .1;
    // The section ends at the next heading (Examples:, ...).
    let section = section
        .lines()
        .take_while(|l| l.is_empty() || l.starts_with(' '));
    for line in section {
        let t = line.trim_start();
        let long = t.strip_prefix("-h, ").unwrap_or(t);
        if line.starts_with("  ") && long.starts_with("--") && line.len() - t.len() <= 6 {
            let name = long.split([' ', '<']).next().unwrap().to_string();
            found.push((name, String::new()));
        } else if let Some((_, text)) = found.last_mut() {
            *text += " ";
            *text += t;
        }
    }
    found
}

#[test]
fn every_flag_of_the_coordinator_and_the_worker_reads_an_environment_variable() {
    for sub in ["coordinator", "worker"] {
        let (code, help, err) = run(&[sub, "--help"]);
        assert_eq!(code, 0, "{err}");
        let opts = options(&help);
        assert!(opts.len() >= 10, "{sub}: {opts:?}");
        for (name, text) in opts {
            // A one-time recovery decision has no variable: one left set
            // in an environment would outlive the decision.
            if name == "--help" || name == "--accept-lost-records" {
                continue;
            }
            let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(
                text.contains("[env: NQUEENS_"),
                "{sub} {name} has no variable: {text}"
            );
        }
    }
    // And they are read: a coordinator configured by variables alone.
    let dir = kit::tempdir();
    let mut child = nqueens(&["coordinator"])
        .env("NQUEENS_LISTEN", "127.0.0.1:0")
        .env("NQUEENS_DATA_DIR", dir.path().join("data"))
        .env("NQUEENS_LOG_FORMAT", "json")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let url = kit::url_once_ready(&mut child);
    let (code, lines, err) = operator(&url, &["health"]);
    assert_eq!(
        (code, &lines[0]["serving"]),
        (0, &serde_json::Value::Bool(true)),
        "{err}"
    );
    kit::terminate(&child);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    // --log-format json (from NQUEENS_LOG_FORMAT): every log line is an object.
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.lines().count() >= 2, "{log}");
    for line in log.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(
            v["level"].is_string() && v["fields"]["message"].is_string(),
            "{line}"
        );
    }
    assert!(log.contains("\"message\":\"shutting down\""), "{log}");
}

// Over 80 lines: one scenario whose steps each build on the state the
// last one left; split, they would only pass that state along.
#[test]
fn doctor_checks_a_live_coordinator_and_fails_on_a_dead_one() {
    let _watchdog = kit::watchdog("doctor_checks_a_live_coordinator");
    let dir = kit::tempdir();
    let token = dir.path().join("operator.token");
    std::fs::write(&token, "doctor-operator-token-0123456789\n").unwrap();
    let worker_token = dir.path().join("worker.token");
    std::fs::write(&worker_token, "doctor-worker-token-0123456789ab\n").unwrap();
    let c = kit::start_with(
        &dir.path().join("data"),
        &[
            "--operator-token-file",
            token.to_str().unwrap(),
            "--worker-token-file",
            worker_token.to_str().unwrap(),
        ],
    );
    let doctor = |args: &[&str]| {
        let mut all = vec!["doctor", "--seconds", "0.1", "--coordinator", &c.url];
        all.extend(args);
        run(&all)
    };
    let (code, out, err) = doctor(&["--token-file", token.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    for (i, check) in [
        "coordinator",
        "health",
        "access",
        "token",
        "version",
        "clock",
        "cpu",
        "speed",
    ]
    .iter()
    .enumerate()
    {
        assert!(lines[i].contains(check), "line {i} is not {check}: {out}");
        assert!(!lines[i].starts_with("FAIL"), "{out}");
    }
    assert!(lines[0].contains("plain text"), "{out}");
    assert!(lines[1].contains("SERVING"), "{out}");
    assert!(
        lines[2].contains("workers need a token, operators need a token"),
        "the coordinator says which roles are protected: {out}"
    );
    assert!(lines[3].contains("accepted for operator calls"), "{out}");
    assert!(
        lines[4].starts_with("ok") && lines[4].contains(env!("CARGO_PKG_VERSION")),
        "the coordinator says its version: {out}"
    );
    assert!(
        lines[5].starts_with("ok")
            && (lines[5].contains("ms ahead of") || lines[5].contains("ms behind")),
        "one machine, one clock: {out}"
    );
    assert!(lines[7].contains("nodes/s on one thread"), "{out}");

    // The worker token, checked as a worker's; an operator token is not one.
    let (code, out, err) = doctor(&[
        "--role",
        "worker",
        "--token-file",
        worker_token.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("accepted for worker calls"), "{out}");
    let (code, out, _) = doctor(&["--role", "worker", "--token-file", token.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.lines().any(|l| l.starts_with("FAIL  token")), "{out}");
    // The worker token given where the operator's is checked: named as such.
    let (code, out, _) = doctor(&["--token-file", worker_token.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("the token given is a worker token"), "{out}");

    // JSON: one object, the speed sample as a number and a string.
    let (code, out, err) = doctor(&["--token-file", token.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["passed"], true);
    let speed = v["checks"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(speed["check"], "speed");
    assert!(speed["nodes_per_second"].as_f64().unwrap() > 0.0);
    assert!(kit::dec(&speed["nodes"]) > 0);

    // Nothing listening: the coordinator check fails, the rest is skipped
    // or about this machine, and the exit code says so.
    let dead = format!("http://{}", kit::free_addr());
    let (code, out, err) = run(&[
        "doctor",
        "--seconds",
        "0.1",
        "--coordinator",
        &dead,
        "--json",
    ]);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["passed"], false);
    let outcome = |name: &str| {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == name)
            .unwrap_or_else(|| panic!("no {name} check: {v}"))["outcome"]
            .clone()
    };
    assert_eq!(outcome("coordinator"), "fail");
    assert_eq!(outcome("token"), "skip");
    assert_eq!(outcome("speed"), "ok");
    assert!(err.contains("checks failed: coordinator"), "{err}");
}

/// The coordinator's log tells an operator a job's life (submitted,
/// planned, done with its totals), who joined, and what a restart
/// recovered, at INFO.
#[test]
fn the_coordinator_logs_each_jobs_life_and_what_it_recovered() {
    let _watchdog = kit::watchdog("the_coordinator_logs_each_jobs_life");
    let dir = kit::tempdir();
    let (data, log) = (dir.path().join("data"), dir.path().join("log"));
    let addr = kit::free_addr();
    let mut c = kit::coordinator_logged(&data, &addr, &log);
    let w = kit::worker(&c.url, "w-log", 1);
    let (code, _, err) = kit::operator(&c.url, &["submit", "12", "--watch"]);
    assert_eq!(code, 0, "{err}");
    kit::wait_for_log(&log, "job done", 1);
    let text = std::fs::read_to_string(&log).unwrap();
    for event in ["job submitted", "job planned", "worker joined"] {
        assert!(text.contains(event), "no {event:?} in:\n{text}");
    }
    let done = text.lines().find(|l| l.contains("job done")).unwrap();
    assert!(
        done.contains("total=14200") && done.contains("unique=1787"),
        "{done}"
    );
    // Then audited in the background, with the digest `nqueens audit` gives.
    kit::wait_for_log(&log, "job audited", 1);
    let (code, audit, err) = kit::operator(&c.url, &["audit", "1"]);
    assert_eq!(code, 0, "{err}");
    let digest = audit[0]["digest"].as_str().unwrap().to_string();
    let text = std::fs::read_to_string(&log).unwrap();
    let audited = text.lines().find(|l| l.contains("job audited")).unwrap();
    assert!(audited.contains("passed=true"), "{audited}");
    assert!(
        audited.contains(digest.trim_start_matches("sha256:")),
        "{audited} vs {digest}"
    );
    drop(w);
    kit::kill9(&mut c.child);
    let _c = kit::coordinator_logged(&data, &addr, &log);
    let text = std::fs::read_to_string(&log).unwrap();
    let restored = text
        .lines()
        .rfind(|l| l.contains("coordinator state restored"))
        .unwrap();
    assert!(restored.contains("jobs=1"), "{restored}");
    assert_eq!(text.matches("job done").count(), 1, "logged once");
}

/// A reader that goes away (`nqueens submit ... | head -1`, a closed
/// pager) ends a command quietly with success, never with a panic: every
/// command's output goes through writes whose errors it handles.
#[test]
fn commands_whose_reader_has_gone_end_quietly() {
    let _watchdog = kit::watchdog("commands_whose_reader_has_gone_end_quietly");
    let dir = kit::tempdir();
    let c = kit::start(&dir.path().join("data"));
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let tokens = dir.path().join("tokens");
    let tokens = tokens.to_str().unwrap();
    // The pipe's reading end is closed before the command starts, so its
    // first write fails (EPIPE) whatever the timing.
    let unread = |args: &[&str]| {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = nqueens(args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        (out.status, err)
    };
    let commands: [&[&str]; 5] = [
        &[
            "submit",
            "8",
            "--strategy",
            "frame",
            "--coordinator",
            &c.url,
        ],
        &["health", "--coordinator", &c.url],
        &["token", "list", "--data-dir", data],
        &["solve", "8"],
        &["plan", "10", "--strategy", "frame", "--list"],
    ];
    for args in commands {
        let (status, err) = unread(args);
        assert!(status.success(), "{args:?}: {status:?} {err}");
    }
    // A new token is printed once and only kept if it was: one that could
    // not be shown is revoked, and the command fails saying so.
    let (status, err) = unread(&["token", "issue", "alpha", "--data-dir", tokens, "--new"]);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("revoked"), "{err}");
    let listed = nqueens(&["token", "list", "--data-dir", tokens])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&listed.stdout).contains("alpha"));
}

/// At `COLUMNS=80`, what `status`, `jobs`, `workers` and `watch` print
/// fits: long reasons and big counts wrap, under their column.
#[test]
fn operator_output_fits_80_columns() {
    let _watchdog = kit::watchdog("operator_output_fits_80_columns");
    let dir = kit::tempdir();
    let c = kit::start(&dir.path().join("data"));
    let narrow = |args: &[&str]| {
        let out = nqueens(args)
            .args(["--coordinator", &c.url])
            .env("COLUMNS", "80")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    // A job that waits (redundancy 2, one credential): the longest reason.
    let (_, lines, _) = operator(&c.url, &["submit", "12", "--redundancy", "2"]);
    let stalled = kit::dec(&lines[0]["job"]).to_string();
    let (_, lines, _) = operator(&c.url, &["submit", "10", "--tasks", "20"]);
    let done = kit::dec(&lines[0]["job"]).to_string();
    let _w = kit::worker(&c.url, "a-worker-with-a-rather-long-name", 1);
    let watched = narrow(&["watch", &done, "--interval", "0.05"]);
    assert!(watched.contains("ETA done"), "{watched}");
    let status = narrow(&["status", &stalled]);
    assert!(status.contains("redundancy 2 needs"), "{status}");
    for out in [
        watched,
        status,
        narrow(&["jobs"]),
        narrow(&["workers"]),
        narrow(&["status"]),
    ] {
        for line in out.lines() {
            assert!(
                line.chars().count() <= 80,
                "{} columns: {line}",
                line.chars().count()
            );
        }
    }
}

/// An export killed mid-stream (its link stalled with rows on disk, then
/// `kill -9`) leaves only FILE.partial, never a FILE a reader could take
/// for the whole export; the next export writes FILE whole and leaves no
/// partial file behind.
#[test]
fn an_export_killed_mid_stream_leaves_no_file_taken_for_complete() {
    let _watchdog = kit::watchdog("an_export_killed_mid_stream");
    let dir = kit::tempdir();
    let c = kit::start(&dir.path().join("data"));
    let (code, lines, err) = operator(&c.url, &["submit", "13", "--tasks", "400"]);
    assert_eq!(code, 0, "{err}");
    let id = kit::dec(&lines[0]["job"]).to_string();
    let _w = kit::worker(&c.url, "export-worker", 2);
    let (code, lines, err) = operator(&c.url, &["watch", &id, "--interval", "0.05"]);
    assert_eq!(code, 0, "{err}");
    let tasks = kit::dec(&lines.last().unwrap()["tasks"]) as usize;
    // Over 8 KB of rows (the export's write buffer) at 4 KB/s: the first
    // rows reach the file while most are still on the way.
    let link = kit::Proxy::start(&c.url);
    link.set_bandwidth(Some(4096));
    let file = dir.path().join("rows.csv");
    let partial = dir.path().join("rows.csv.partial");
    let mut export = nqueens(&["export", &id, "--coordinator", &link.url()])
        .args(["--output".as_ref(), file.as_os_str()])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    kit::wait_until("rows written to the partial file", || {
        partial.metadata().is_ok_and(|m| m.len() > 0)
    });
    link.stall();
    kit::kill9(&mut export);
    assert!(!file.exists(), "a killed export left {}", file.display());
    let cut = std::fs::read_to_string(&partial).unwrap();
    assert!(cut.starts_with("task,"), "{cut:.200}");
    assert!(cut.lines().count() - 1 < tasks, "the stream was not cut");

    let out = nqueens(&["export", &id, "--coordinator", &c.url])
        .args(["--output".as_ref(), file.as_os_str()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!partial.exists(), "the partial file is still there");
    let whole = std::fs::read_to_string(&file).unwrap();
    assert_eq!(whole.lines().count() - 1, tasks, "{err}");
}

/// The README's audit example is what `audit` prints for the same
/// commands, digest included (a site compares digests against it): every
/// line but the journal's size, which follows the engine path's name.
#[test]
fn the_readmes_audit_example_is_what_audit_prints() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let shown: Vec<&str> = readme
        .split("$ nqueens audit 1 --data-dir ./s13\n")
        .nth(1)
        .expect("the README shows an audit")
        .lines()
        .take_while(|l| !l.starts_with("```"))
        .collect();
    assert!(readme.contains("$ nqueens solve 13 --state ./s13 > /dev/null\n"));
    let dir = kit::tempdir();
    let s13 = dir.path().join("s13");
    let s13 = s13.to_str().unwrap();
    let (code, _, err) = run(&["solve", "13", "--state", s13]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(&["audit", "1", "--data-dir", s13]);
    assert_eq!(code, 0, "{err}");
    let printed: Vec<&str> = out.lines().collect();
    assert_eq!(printed.len(), shown.len(), "{out}");
    for (p, s) in printed.iter().zip(&shown) {
        if s.starts_with("journal ") {
            assert!(p.starts_with("journal  19 records, "), "{p}");
        } else {
            assert_eq!(p, s, "README.md's audit example is out of date");
        }
    }
}
