//! The nqueens coordinator.
//!
//! It will persist jobs and tasks, lease tasks to workers over gRPC and
//! aggregate their counts durably. Nothing is implemented yet: the work is
//! tracked in the coordinator issue, and this crate exists so the workspace
//! layout (one crate per role) is fixed from the start.
