//! The nqueens worker: leases tasks from a coordinator, counts them on every
//! core, and reports each result until it is acknowledged.
//!
//! - [`run`]: the worker loop (lease, count, heartbeat, report, drain).
//! - [`metrics`]: what the worker did, for its Prometheus page.
//! - [`pool`]: the counting threads (and each card's feeders), fed from a queue.
//! - [`pace`]: how many tasks to hold, from the measured rate.
//! - [`share`]: which tasks CPU threads leave to the cards.
//! - [`selftest`]: the known-answer test run before any work.
//! - [`backoff`]: exponential backoff with jitter.

pub mod backoff;
pub mod metrics;
pub mod pace;
pub mod pool;
pub mod run;
pub mod selftest;
pub mod share;
