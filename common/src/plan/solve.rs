//! Counting one N on many threads.
//!
//! From N=6 the total comes from ring constellations ([`crate::engine::ring`]):
//! queens pre-placed on the border, one ring per symmetry orbit, its
//! completions counted in SIMD lanes when the CPU has them
//! ([`crate::engine::lanes`]). The unique count follows by Burnside from the
//! solutions fixed by a half or quarter turn ([`crate::engine::symmetric`]), a tiny
//! search of its own. Below N=6 the symmetry-pruned search ([`crate::engine::search`])
//! counts the classes directly.
//!
//! Work is cut into many small pieces that threads take from a shared
//! counter, so a thread that drew cheap pieces takes more.

use crate::engine::board::Size;
use crate::engine::counts::{CountOverflow, Inconsistent, Totals};
use crate::engine::lanes::Path;
use crate::engine::ring::{self, MIN_RING_N};
use crate::engine::search::{split, Rules};
use crate::engine::symmetric::{count_symmetric, Turn};
use crate::engine::threads::on_threads;
use crate::plan::{Plan, PlanError, Schedule, Subproblem, Tally};
use std::time::{Duration, Instant};

/// Pieces to cut the small-board search into.
pub const MIN_PIECES: usize = 4096;

/// The result of counting one N.
#[derive(Clone, Debug)]
pub struct Solution {
    pub n: Size,
    pub counts: Totals,
    pub threads: usize,
    pub pieces: usize,
    /// How the pieces were counted: "avx512", "scalar" or (small N) "search".
    pub core: &'static str,
    pub elapsed: Duration,
}

impl Solution {
    pub fn total(&self) -> Result<u128, CountOverflow> {
        self.counts.total()
    }
    pub fn unique(&self) -> Result<u128, CountOverflow> {
        self.counts.unique()
    }
}

/// Counting went wrong: never expected, reported rather than printed as a count.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SolveError {
    #[error(transparent)]
    Overflow(#[from] CountOverflow),
    #[error("{0}; please report this bug")]
    Inconsistent(#[from] Inconsistent),
    #[error(transparent)]
    Tally(#[from] PlanError),
}

/// Counts all solutions of `n` with `threads` threads (at least one), on
/// the fastest path this CPU has.
pub fn solve(n: Size, threads: usize) -> Result<Solution, SolveError> {
    solve_on(n, threads, None)
}

/// [`solve`] with the lanes' path chosen (`None`: the best available).
/// A path the CPU lacks is not taken: ask [`crate::engine::lanes::Path::available`].
pub fn solve_on(n: Size, threads: usize, path: Option<Path>) -> Result<Solution, SolveError> {
    let start = Instant::now();
    let threads = threads.max(1);
    if n.get() < MIN_RING_N {
        return solve_small(n, threads, start);
    }
    let (sums, pieces, used) = ring::count(n, threads, path)?;
    // Solutions fixed by a half or a quarter turn, by the first row's
    // queen: the plan's symmetric subproblems, tallied the plan's way.
    let turns: Vec<(Turn, u8)> = [Turn::Half, Turn::Quarter]
        .into_iter()
        .flat_map(|turn| (0..n.get() as u8).map(move |first| (turn, first)))
        .collect();
    let parts = on_threads(threads, turns.len(), |acc: &mut Tally, i| {
        let (turn, first) = turns[i];
        acc.add(
            &Subproblem::Symmetric { turn, first },
            &count_symmetric(n, turn, first),
        )
    })?;
    let mut tally = Tally {
        weighted: sums.weighted,
        ..Tally::default()
    };
    tally.classes.nodes = sums.nodes;
    for p in &parts {
        tally.merge(p)?;
    }
    Ok(Solution {
        n,
        counts: Totals::from_turns(
            tally.weighted,
            tally.half,
            tally.quarter,
            tally.classes.nodes,
        )?,
        threads,
        pieces,
        core: used.name(),
        elapsed: start.elapsed(),
    })
}

/// Small boards: the symmetry-pruned search, which sorts each solution
/// into its class at the leaf.
fn solve_small(n: Size, threads: usize, start: Instant) -> Result<Solution, SolveError> {
    let mut counts = Totals::default();
    if n.get() == 1 {
        // One queen, fixed by all 8 symmetries: the only orbit of size 1.
        counts.c1 = 1;
        counts.nodes = 1;
        return Ok(Solution {
            n,
            counts,
            threads,
            pieces: 1,
            core: "search",
            elapsed: start.elapsed(),
        });
    }
    let cut = split(n, MIN_PIECES);
    counts.nodes = cut.nodes.into();
    let rules: Vec<_> = cut
        .pieces
        .iter()
        .map(|p| Rules::new(n, p.case).expect("split yields valid cases"))
        .collect();
    let parts = on_threads(threads, cut.pieces.len(), |mine: &mut Totals, i| {
        mine.add_piece(
            &rules[i]
                .count(&cut.pieces[i])
                .expect("split yields valid pieces"),
        )
    })?;
    for p in parts {
        counts.add(&p)?;
    }
    Ok(Solution {
        n,
        counts,
        threads,
        pieces: cut.pieces.len(),
        core: "search",
        elapsed: start.elapsed(),
    })
}

/// Counts a whole plan with `threads` threads, each taking one task at a
/// time: the way a worker will, and with memory bounded by one task.
pub fn solve_plan(plan: &Plan, schedule: &Schedule, threads: usize) -> Result<Solution, PlanError> {
    let start = Instant::now();
    let threads = threads.max(1);
    let parts = on_threads(threads, schedule.tasks.len(), |mine: &mut Tally, i| {
        mine.merge(&plan.count_task(&schedule.tasks[i])?)
    })?;
    let mut tally = Tally::default();
    for p in &parts {
        tally.merge(p)?;
    }
    Ok(Solution {
        n: plan.spec.n,
        counts: plan.finish(&tally)?,
        threads,
        pieces: schedule.subproblems as usize,
        core: "plan",
        elapsed: start.elapsed(),
    })
}
