//! What the tests of the nqueens crates share, instead of copying it:
//!
//! - [`process`]: the real `nqueens` binary: a coordinator process on a
//!   free port (killed when dropped), worker processes, CLI runs and their
//!   JSON, signals.
//! - [`inproc`]: a coordinator inside the test (`server::start`) on a free
//!   loopback port with a temporary data directory.
//! - [`client`]: a raw gRPC client of either: submit, lease, count a lease
//!   as an honest (or lying) worker would, report, read and watch jobs.
//! - [`proxy`]: a TCP proxy with faults changed while it runs (delay,
//!   jitter, bandwidth, loss as TCP shows it, stalls, partitions, resets).
//! - [`wait`]: polling until a condition holds, always with a deadline
//!   (never a sleep standing in for synchronisation).
//! - [`watchdog`](mod@watchdog): a hung whole-system test fails with the stacks of its
//!   processes instead of hanging CI.
//!
//! Everything is re-exported at the top, so a test file says
//! `use nqueens_testkit as kit;` and calls `kit::start(..)`.
//!
//! It is a dev-dependency of the crates whose tests use it; the
//! coordinator's own tests use it too (Cargo allows that cycle for
//! dev-dependencies: integration tests link the one coordinator library).

pub mod client;
pub mod h2;
pub mod inproc;
pub mod process;
pub mod proxy;
pub mod wait;
pub mod watchdog;

pub use client::*;
pub use inproc::*;
pub use process::*;
pub use proxy::Proxy;
pub use wait::*;
pub use watchdog::*;

/// A fresh temporary directory, removed when dropped.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("create a temporary directory")
}
