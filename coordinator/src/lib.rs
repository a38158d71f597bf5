//! The nqueens coordinator: persists jobs and their tasks, leases tasks to
//! workers over gRPC, and aggregates their counts exactly and durably.
//!
//! - [`journal`]: the fsynced, CRC-checked results journal (source of truth).

pub mod journal;
