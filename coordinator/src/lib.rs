//! The nqueens coordinator: persists jobs and their tasks, leases tasks to
//! workers over gRPC, and aggregates their counts exactly and durably.
//!
//! - [`access`]: who must authenticate, decided at start; the token checks.
//! - [`audit`]: re-checks a job from its journal alone, with a digest to compare.
//! - [`backup`]: a data directory's journal and secrets copied while it runs.
//! - [`checkpoint`]: fsynced, CRC-checked snapshots of the state, so a restart
//!   replays only the journal after the latest one.
//! - [`conns`]: bounded connections: limits, timeouts, the idlest making way.
//! - [`credentials`]: per-worker tokens issued by the operator, stored hashed.
//! - [`hub`]: the coordinator: journal-then-apply for every change, recovery at
//!   start, jobs, worker calls; the data directory lock.
//! - [`journal`]: the fsynced, CRC-checked results journal (source of truth).
//! - [`metrics`]: the Prometheus endpoint.
//! - [`owner_only`]: files and directories of the data directory, mode 0600/0700.
//! - [`rows`]: the store's compact result rows, many tasks to a block.
//! - [`seen`]: which journal records a reader has taken in.
//! - [`server`]: the gRPC server, health, reflection, tokens, lease sweeper.
//! - [`service`]: the gRPC services, request checks, errors mapped to status codes.
//! - [`state`]: jobs, tasks, leases and workers in memory; pure, clock passed in.
//! - [`store`]: the sled store of task lists and result rows, rebuilt from the journal.
//! - [`throttle`]: repeated failures logged once a minute.
//! - [`wire`]: the coordinator's jobs, workers, leases and audits on the wire.

pub mod access;
pub mod audit;
pub mod backup;
pub mod checkpoint;
pub mod conns;
pub mod credentials;
pub mod hub;
pub mod journal;
pub mod metrics;
pub mod owner_only;
pub mod rows;
pub mod seen;
pub mod server;
pub mod service;
pub mod state;
pub mod store;
pub mod throttle;
pub mod wire;
