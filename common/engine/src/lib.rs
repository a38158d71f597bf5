//! nqueens-engine: boards and bitmaps, border placement, symmetry, and
//! the lanes that count many subproblems at once. It knows nothing of
//! plans, tasks or output (it depends on no other nqueens crate, so Cargo
//! keeps it that way); everything above it counts through it.
//!
//! - [`board`]: board sizes, boards, the 8 symmetries.
//! - [`counts`]: class counts per piece (u64) and aggregated (u128, checked).
//! - [`device`]: the seam for counting devices beyond the CPU (GPUs).
//! - [`border`]: frames (queens pre-placed on the border lines), canonical
//!   under the 8 symmetries, with their weights.
//! - [`interior`]: the board a pre-placement leaves, and its scalar search.
//! - [`join`]: the join mode, an interior counted by halves of its
//!   columns.
//! - [`pairs`]: pairs of disjoint bitsets counted 512 at a time (the
//!   join's inner loop).
//! - [`lanes`]: many interior searches stepped together in SIMD lanes
//!   (AVX-512, AVX2, scalar; chosen at run time).
//! - [`symmetric`]: solutions fixed by a half or quarter turn (Burnside).
//! - [`search`]: the classic symmetry-pruned search (small N, and a check
//!   that classes agree).
//! - [`reference`](mod@reference): a naive brute-force counter, for tests.
//! - [`baseline`]: the plain bitmap mirror counter benchmarks compare with.
//! - [`boards`]: streaming every solution in lexicographic order.
//! - [`complete`]: completing a board from given queens.
//! - [`threads`]: work spread over threads.
//! - [`known`]: the published counts every layer checks against.

pub mod baseline;
pub mod board;
pub mod boards;
pub mod border;
pub mod complete;
pub mod counts;
pub mod device;
pub mod interior;
pub mod join;
pub mod known;
pub mod lanes;
pub mod pairs;
pub mod reference;
pub mod search;
pub mod symmetric;
pub mod threads;

pub use board::{Board, Size, MAX_N};
pub use counts::{PieceCounts, Totals};
