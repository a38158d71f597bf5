//! nqueens-common: the exact, symmetry-aware N-Queens solver core.
//!
//! - [`search`]: the symmetry-pruned bitmap search, cut into pieces.
//! - [`solve`]: counting one N on many threads.
//! - [`frame`]: frame (carry-chain) pre-placements, canonical under symmetry.
//! - [`ring`]: ring constellations (queens on the 4 border lines), weighted.
//! - [`interior`]: completing pre-placed queens, the fast counting loop.
//! - [`lanes`]: many interior searches stepped together in SIMD lanes.
//! - [`symmetric`]: solutions fixed by a half or quarter turn (for Burnside).
//! - [`counts`]: class counts per piece (u64) and aggregated (u128, checked).
//! - [`board`]: board sizes, boards, the 8 symmetries.
//! - [`boards`]: streaming every solution in lexicographic order.
//! - [`complete`]: completing a board from given queens (judge format).
//! - [`plan`]: one N split into subproblems with stable ids, grouped into tasks.
//! - [`known`]: published counts to check results against.
//! - [`reference`]: a naive brute-force counter, for tests.
//! - [`bench`]: the benchmark behind `nqueens bench`.
//! - [`baseline`]: the plain bitmap mirror counter that benchmarks compare with.
//! - [`format`]: numbers and durations for people.
//! - [`report`]: what `solve` and `table` print, as text or JSON.

pub mod baseline;
pub mod bench;
pub mod board;
pub mod boards;
pub mod complete;
pub mod counts;
pub mod format;
pub mod frame;
pub mod interior;
pub mod known;
pub mod lanes;
pub mod plan;
pub mod reference;
pub mod report;
pub mod ring;
pub mod search;
pub mod solve;
pub mod symmetric;

pub use board::{Board, Size, MAX_N};
pub use counts::{PieceCounts, Totals};
pub use solve::{solve, Solution};
