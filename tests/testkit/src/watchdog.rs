//! A hang becomes a failure with a reason.

use std::process::{Command, Stdio};
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
/// after `test_limit`, prints the stacks of every process this test binary
/// started (and its own) with gdb where the machine has it, kills them, and
/// exits the test binary with an error. A hang must never become a CI
/// timeout with nothing to read.
pub fn watchdog(test: &'static str) -> Watchdog {
    watchdog_within(test, test_limit())
}

/// [`watchdog`] for a test that takes minutes by design (an `#[ignore]`d
/// long run): it fails after `limit`, or `test_limit` if that is longer.
pub fn watchdog_within(test: &'static str, limit: Duration) -> Watchdog {
    let (tx, rx) = mpsc::channel::<()>();
    let limit = limit.max(test_limit());
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
