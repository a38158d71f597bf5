//! The real `nqueens` binary as processes: coordinators, workers, CLI runs.

use crate::wait::wait_until;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

/// The `nqueens` binary under test. Cargo builds it for the root
/// package's tests and names it in `CARGO_BIN_EXE_nqueens` at run time
/// (recent Cargo); otherwise it is next to the test executable's own
/// directory (`target/<profile>/deps/<test>` → `target/<profile>/nqueens`).
pub fn binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("CARGO_BIN_EXE_nqueens") {
            return p.into();
        }
        let exe = std::env::current_exe().expect("the test's own path");
        let bin = exe
            .parent()
            .and_then(Path::parent)
            .expect("the test runs from target/<profile>/deps")
            .join(format!("nqueens{}", std::env::consts::EXE_SUFFIX));
        assert!(
            bin.is_file(),
            "no nqueens binary at {}: only the root package's tests get it built",
            bin.display()
        );
        bin
    })
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

/// A coordinator on a free loopback port with its data in `dir`.
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
        Some(path) => Stdio::from(append(path)),
        None => Stdio::inherit(),
    };
    let mut cmd = coordinator_cmd(dir, listen);
    cmd.args(extra).stderr(stderr);
    spawn_coordinator(cmd)
}

/// A coordinator on `addr` logging at INFO into `log`, once it is ready.
pub fn coordinator_logged(data: &Path, addr: &str, log: &Path) -> Coordinator {
    let mut cmd = coordinator_cmd(data, addr);
    cmd.env("RUST_LOG", "info").stderr(append(log));
    spawn_coordinator(cmd)
}

fn append(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open the coordinator's log")
}

/// `nqueens coordinator --listen LISTEN --data-dir DIR`, logging at WARN
/// (or `RUST_LOG`), its stdout piped for [`spawn_coordinator`]; add
/// options, variables and where its stderr goes.
pub fn coordinator_cmd(dir: &Path, listen: &str) -> Command {
    let mut c = Command::new(binary());
    c.args(["coordinator", "--listen", listen, "--data-dir"])
        .arg(dir)
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::piped());
    c
}

/// Starts `cmd` (a coordinator with its stdout piped) and returns once it
/// is ready.
pub fn spawn_coordinator(mut cmd: Command) -> Coordinator {
    let mut child = cmd.spawn().expect("start the coordinator");
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

/// Waits (bounded) until `log` holds `line` `times` times.
pub fn wait_for_log(log: &Path, line: &str, times: usize) {
    wait_until(&format!("{line:?} logged {times} times"), || {
        let text = std::fs::read_to_string(log).unwrap();
        if text.matches(line).count() >= times {
            Ok(())
        } else {
            Err(format!("the log:\n{text}"))
        }
    })
}

/// A loopback address with a port free at the moment.
pub fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// Waits until `child` has a handler for SIGTERM (Linux's
/// `/proc/PID/status`, `SigCgt`), or has exited.
pub fn wait_until_it_catches_sigterm(child: &mut Child) {
    const SIGTERM_BIT: u64 = 1 << (15 - 1);
    let pid = child.id();
    wait_until(&format!("process {pid} to listen for SIGTERM"), || {
        if child.try_wait().unwrap().is_some() {
            return Ok(());
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let caught = status
            .lines()
            .find_map(|l| l.strip_prefix("SigCgt:"))
            .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok());
        match caught {
            Some(mask) if mask & SIGTERM_BIT != 0 => Ok(()),
            _ => Err(format!("its status:\n{status}")),
        }
    })
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

/// Sends SIGKILL: no drain, no goodbye.
pub fn kill9(child: &mut Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The binary with these arguments, its output captured; no coordinator,
/// token or terminal width from the environment, stdin empty.
pub fn nqueens(args: &[&str]) -> Command {
    let mut c = Command::new(binary());
    c.args(args)
        .env_remove("NQUEENS_COORDINATOR")
        .env_remove("NQUEENS_OPERATOR_TOKEN")
        // Lines as a pipe gets them, whatever terminal runs the tests.
        .env_remove("COLUMNS")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null());
    c
}

/// Runs `cmd`, which must succeed (else the test fails with its stderr);
/// its standard output.
pub fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run nqueens");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{cmd:?} failed: {err}");
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// Runs an operator command with `--json` against `url`; its exit code,
/// every JSON line it printed, and its stderr.
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

/// A 64- or 128-bit integer of the JSON output, which must come as a
/// decimal string (a JSON number loses precision past 2^53 in jq).
pub fn dec(v: &serde_json::Value) -> u128 {
    v.as_str()
        .unwrap_or_else(|| panic!("not a decimal string: {v}"))
        .parse()
        .unwrap_or_else(|e| panic!("not a decimal string ({e}): {v}"))
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

/// SIGTERM to each worker: each must drain and exit 0. A worker started
/// a moment ago is first waited for until it listens for the signal (one
/// sent before would end it as the signal's default does, with no drain).
pub fn stop_workers(workers: impl IntoIterator<Item = Worker>) {
    for mut w in workers {
        wait_until_it_catches_sigterm(&mut w);
        terminate(&w);
        let status = w.wait().unwrap();
        assert!(status.success(), "a worker exited with {status}");
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

/// `nqueens worker --coordinator URL --name NAME --threads T`, to spawn
/// (wrapped in [`Worker`]) with its own log settings.
pub fn worker_cmd(url: &str, name: &str, threads: u32) -> Command {
    let mut c = nqueens(&["worker", "--coordinator", url, "--name", name]);
    c.args(["--threads", &threads.to_string()]);
    c
}

/// Whether `--core gpu` finds a device here (a GPU, or Mesa's lavapipe,
/// which CI installs). Without one the GPU tests print why and pass,
/// unless `NQUEENS_REQUIRE_GPU` is set (as CI sets it), where they fail.
pub fn gpu_here() -> bool {
    static HERE: OnceLock<bool> = OnceLock::new();
    *HERE.get_or_init(|| {
        let o = nqueens(&["solve", "6", "--core", "gpu"])
            .output()
            .expect("start nqueens");
        if o.status.success() {
            return true;
        }
        let why = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(
            std::env::var_os("NQUEENS_REQUIRE_GPU").is_none(),
            "NQUEENS_REQUIRE_GPU is set, and `solve --core gpu` failed: {why}"
        );
        println!("skipped: no GPU or software Vulkan device here ({why})");
        false
    })
}

/// `GET /metrics` at `addr` (a coordinator's or worker's `--metrics`):
/// the status line and the body.
pub fn get_metrics(addr: &str) -> std::io::Result<(String, String)> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    Ok((
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    ))
}

/// Runs the test `name` of this test binary again inside new namespaces
/// (`unshare` with `flags`, e.g. `-n` for a network of its own, `-m` for
/// mounts of its own), with `inside` set in its environment, and asserts
/// that it passed there. `false` (the caller skips, saying why) where
/// `unshare` is not allowed (it needs root).
pub fn passes_in_namespace(flags: &str, inside: &str, name: &str) -> bool {
    let allowed = Command::new("unshare")
        .args([flags, "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !allowed {
        return false;
    }
    let out = Command::new("unshare")
        .arg(flags)
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads", "1"])
        .env(inside, "1")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "inside the namespace:\n{said}\n{err}");
    assert!(said.contains("1 passed"), "{said}");
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process is waited for until it traps SIGTERM, then stopped by it
    /// as its trap says (a shell's trap: exit 0); one that has exited is
    /// not waited for.
    #[test]
    fn a_process_is_stopped_once_it_listens_for_sigterm() {
        let mut trapping = Command::new("sh")
            .args(["-c", "trap 'exit 0' TERM; while :; do sleep 0.05; done"])
            .spawn()
            .unwrap();
        wait_until_it_catches_sigterm(&mut trapping);
        terminate(&trapping);
        assert!(trapping.wait().unwrap().success());
        let mut ended = Command::new("true").spawn().unwrap();
        ended.wait().unwrap();
        wait_until_it_catches_sigterm(&mut ended);
    }
}
