//! The nqueens worker.
//!
//! It will lease tasks from a coordinator, count them on every core with
//! [`nqueens_common`] and report the results. Nothing is implemented yet: the
//! work is tracked in the worker issue, and this crate exists so the workspace
//! layout (one crate per role) is fixed from the start.
