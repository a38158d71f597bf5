//! Counting one N on many threads: the search is cut into many small pieces
//! that threads take one at a time from a shared counter, so a thread that
//! drew cheap pieces takes more (piece costs vary by orders of magnitude).

use crate::board::Size;
use crate::counts::{CountOverflow, Totals};
use crate::plan::{Plan, PlanError, Schedule, Tally};
use crate::search::{split, Rules};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Pieces to cut the search into: enough that the largest piece is a small
/// fraction of the whole for any thread count a machine has. Fixed, not
/// derived from the thread count, so every run cuts the same pieces.
pub const MIN_PIECES: usize = 4096;

/// The result of counting one N.
#[derive(Clone, Debug)]
pub struct Solution {
    pub n: Size,
    pub counts: Totals,
    pub threads: usize,
    pub pieces: usize,
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

/// The number of threads to use by default: every core.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Counts all solutions of `n` with `threads` threads (at least one).
pub fn solve(n: Size, threads: usize) -> Result<Solution, CountOverflow> {
    let start = Instant::now();
    let threads = threads.max(1);
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
        elapsed: start.elapsed(),
    })
}

/// Runs `each(acc, i)` for every i in 0..items on up to `threads` threads.
/// Each thread takes the next index from a shared counter and folds into
/// its own accumulator; the accumulators are returned (or the first error).
fn on_threads<A, E>(
    threads: usize,
    items: usize,
    each: impl Fn(&mut A, usize) -> Result<(), E> + Sync,
) -> Result<Vec<A>, E>
where
    A: Default + Send,
    E: Send,
{
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.clamp(1, items.max(1)))
            .map(|_| {
                s.spawn(|| {
                    let mut acc = A::default();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= items {
                            return Ok(acc);
                        }
                        each(&mut acc, i)?;
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("solver thread panicked"))
            .collect()
    })
}
