//! nqueens-common: the exact, symmetry-aware N-Queens counting engine and
//! the planner that splits one N into subproblems.
//!
//! Layers point one way: [`engine`] (boards, border placement, symmetry,
//! lanes, counts) ← [`plan`] (strategies, tasks, ids, local runs) ← the
//! coordinator, the worker and the CLI. [`known`] holds the published
//! counts every layer checks against.

pub mod plan;

/// The counting engine (the `nqueens-engine` crate).
pub use nqueens_engine as engine;
pub use nqueens_engine::known;

pub use engine::board::{Board, Size, MAX_N};
pub use engine::counts::{PieceCounts, Totals};
pub use plan::solve::{solve, Solution};
