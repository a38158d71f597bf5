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
    let mut child = Command::new(env!("CARGO_BIN_EXE_nqueens"))
        .args(["coordinator", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir)
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
