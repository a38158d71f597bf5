//! Helpers shared by the whole-system tests: real processes of the binary.

// Each test file uses only some of these.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long any one whole-system test may take before the watchdog fails
/// it (seconds; `NQUEENS_TEST_LIMIT` overrides). Each takes seconds here;
/// the margin is for slow machines.
fn test_limit() -> Duration {
    let secs = std::env::var("NQUEENS_TEST_LIMIT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(240);
    Duration::from_secs(secs)
}

/// Disarms the watchdog when the test ends (passing or panicking).
pub struct Watchdog(#[allow(dead_code)] mpsc::Sender<()>);

/// Turns a hang into a failure with a reason: if the test is still running
/// after [`test_limit`], prints the stacks of every process this test binary
/// started (and its own) with gdb where the machine has it, kills them, and
/// exits the test binary with an error. A hang must never become a CI
/// timeout with nothing to read.
pub fn watchdog(test: &'static str) -> Watchdog {
    let (tx, rx) = mpsc::channel::<()>();
    let limit = test_limit();
    std::thread::spawn(move || {
        if rx.recv_timeout(limit) != Err(mpsc::RecvTimeoutError::Timeout) {
            return;
        }
        eprintln!("WATCHDOG: {test} still running after {limit:?}; stacks follow");
        let me = std::process::id();
        let children = descendants(me);
        for pid in children.iter().copied().chain([me]) {
            eprintln!("--- process {pid}");
            let _ = Command::new("timeout")
                .args(["60", "gdb", "-nx", "-batch", "-p", &pid.to_string()])
                .args(["-ex", "thread apply all bt 30"])
                .stdin(Stdio::null())
                .status();
        }
        for pid in children {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        std::process::exit(101);
    });
    Watchdog(tx)
}

/// Every live process below `pid` (from /proc).
fn descendants(pid: u32) -> Vec<u32> {
    let parent_of = |p: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        // The command name is in parentheses and may hold spaces.
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let all: Vec<u32> = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(all.iter().filter(|&&c| parent_of(c) == Some(p)));
        i += 1;
    }
    found.remove(0);
    found
}

/// A coordinator process and the address it printed.
pub struct Coordinator {
    pub child: Child,
    pub url: String,
}

impl Drop for Coordinator {
    /// A failing test must not leave a coordinator running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start(dir: &Path) -> Coordinator {
    start_with(dir, &[])
}

/// A coordinator with extra options (e.g. `--lease-ttl 2`).
pub fn start_with(dir: &Path, extra: &[&str]) -> Coordinator {
    start_at(dir, "127.0.0.1:0", extra, None)
}

/// A coordinator listening on `listen` (a fixed address lets workers find
/// it again after a restart), its log in `log` when given.
pub fn start_at(dir: &Path, listen: &str, extra: &[&str], log: Option<&Path>) -> Coordinator {
    let stderr = match log {
        Some(path) => Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .expect("open the coordinator's log"),
        ),
        None => Stdio::inherit(),
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_nqueens"))
        .args(["coordinator", "--listen", listen, "--data-dir"])
        .arg(dir)
        .args(extra)
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("start the coordinator");
    let url = url_once_ready(&mut child);
    Coordinator { child, url }
}

/// Reads a starting coordinator's stdout: the address it printed at once,
/// then waits for its "ready" line (its state recovered; before it, calls
/// are answered UNAVAILABLE). A thread drains the rest of its output.
pub fn url_once_ready(child: &mut Child) -> String {
    let mut lines = BufReader::new(child.stdout.take().expect("stdout piped")).lines();
    let mut next = || lines.next().and_then(Result::ok);
    let Some(first) = next() else {
        let _ = child.kill();
        panic!("the coordinator printed no address");
    };
    let addr = first
        .trim()
        .rsplit(' ')
        .next()
        .filter(|a| a.contains(':'))
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_string();
    loop {
        match next() {
            Some(l) if l.contains("ready") => break,
            Some(_) => {}
            None => {
                let _ = child.kill();
                panic!("the coordinator exited before it was ready");
            }
        }
    }
    std::thread::spawn(move || lines.for_each(drop));
    format!("http://{addr}")
}

/// A coordinator on `addr` logging at INFO into `log`, once it is ready.
pub fn coordinator_logged(
    data: &std::path::Path,
    addr: &str,
    log: &std::path::Path,
) -> Coordinator {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nqueens"))
        .args(["coordinator", "--listen", addr, "--data-dir"])
        .arg(data)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let url = url_once_ready(&mut child);
    Coordinator { child, url }
}

/// Waits (bounded) until `log` holds `line` `times` times.
pub fn wait_for_log(log: &std::path::Path, line: &str, times: usize) {
    let start = std::time::Instant::now();
    while std::fs::read_to_string(log).unwrap().matches(line).count() < times {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "never logged {line:?}: {}",
            std::fs::read_to_string(log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A loopback address with a port free at the moment.
pub fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// Sends SIGTERM (with the system's `kill`, present on every Linux).
pub fn terminate(child: &Child) {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -TERM failed");
}

/// The binary with these arguments, its output captured.
pub fn nqueens(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nqueens"));
    c.args(args)
        .env_remove("NQUEENS_COORDINATOR")
        .env_remove("NQUEENS_OPERATOR_TOKEN")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null());
    c
}

/// Runs an operator command with `--json` against `url`; its exit code and
/// every JSON line it printed.
pub fn operator(url: &str, args: &[&str]) -> (i32, Vec<serde_json::Value>, String) {
    let out = nqueens(args)
        .args(["--coordinator", url, "--json"])
        .output()
        .expect("run nqueens");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    (
        out.status.code().unwrap_or(-1),
        lines,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A worker process, killed when dropped: a worker outliving its test
/// would retry forever and hold the test runner's output open.
pub struct Worker(pub Child);

impl std::ops::Deref for Worker {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Worker {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A worker process; its warnings go to the test's stderr.
pub fn worker(url: &str, name: &str, threads: u32) -> Worker {
    let child = worker_cmd(url, name, threads)
        .env("RUST_LOG", "warn")
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start a worker");
    Worker(child)
}

/// A worker process logging what it does into the file `log` (a pipe
/// nobody reads would fill and stop it).
pub fn worker_logged(url: &str, name: &str, threads: u32, log: &Path) -> Worker {
    let file = std::fs::File::create(log).expect("create the worker's log");
    let child = worker_cmd(url, name, threads)
        .env("RUST_LOG", "info")
        .stderr(file)
        .spawn()
        .expect("start a worker");
    Worker(child)
}

fn worker_cmd(url: &str, name: &str, threads: u32) -> Command {
    let mut c = nqueens(&["worker", "--coordinator", url, "--name", name]);
    c.args(["--threads", &threads.to_string()]);
    c
}

/// Sends SIGKILL: no drain, no goodbye.
pub fn kill9(child: &mut Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}
