//! The nqueens coordinator: persists jobs and their tasks, leases tasks to
//! workers over gRPC, and aggregates their counts exactly and durably.
//!
//! - [`journal`]: the fsynced, CRC-checked results journal (source of truth).
//! - [`state`]: jobs, tasks, leases and workers in memory; pure, clock passed in.

pub mod journal;
pub mod state;
