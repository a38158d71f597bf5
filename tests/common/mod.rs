//! Helpers shared by the whole-system tests: real processes of the binary.

// Each test file uses only some of these.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

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
    let mut child = Command::new(env!("CARGO_BIN_EXE_nqueens"))
        .args(["coordinator", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir)
        .args(extra)
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the coordinator");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .rsplit(' ')
        .next()
        .filter(|a| a.contains(':'))
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    Coordinator {
        child,
        url: format!("http://{addr}"),
    }
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

/// A worker process (log on stderr, piped).
pub fn worker(url: &str, name: &str, threads: u32) -> Child {
    nqueens(&["worker", "--coordinator", url, "--name", name])
        .args(["--threads", &threads.to_string()])
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a worker")
}

/// Sends SIGKILL: no drain, no goodbye.
pub fn kill9(child: &mut Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}
