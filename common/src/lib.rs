//! nqueens-common: the exact, symmetry-aware N-Queens solver core.
//!
//! - [`search`]: the symmetry-pruned bitmap search, cut into pieces.
//! - [`solve`]: counting one N on many threads.
//! - [`counts`]: class counts per piece (u64) and aggregated (u128, checked).
//! - [`board`]: board sizes, boards, the 8 symmetries.
//! - [`boards`]: streaming every solution in lexicographic order.
//! - [`complete`]: completing a board from given queens (judge format).
//! - [`known`]: published counts to check results against.
//! - [`reference`]: a naive brute-force counter, for tests.
//! - [`format`]: numbers and durations for people.
//! - [`report`]: what `solve` and `table` print, as text or JSON.

pub mod board;
pub mod boards;
pub mod complete;
pub mod counts;
pub mod format;
pub mod known;
pub mod reference;
pub mod report;
pub mod search;
pub mod solve;

pub use board::{Board, Size, MAX_N};
pub use counts::{PieceCounts, Totals};
pub use solve::{solve, Solution};
