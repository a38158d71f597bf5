//! Counting one N on many threads.
//!
//! A local run is a plan run in memory: from N=6, a frame plan of depth 1
//! (ring constellations: queens pre-placed on the 4 outer lines, one ring
//! per symmetry orbit, weighted), whose tasks threads take one at a time
//! and count in the engine's lanes, exactly as workers count a cluster
//! job's tasks. The unique count follows by Burnside from the plan's half-
//! and quarter-turn subproblems. Below N=6 the symmetry-pruned search
//! ([`crate::engine::search`]) counts the classes directly.

use crate::engine::board::Size;
use crate::engine::border::MIN_FRAME_N;
use crate::engine::counts::{CountOverflow, Inconsistent, Totals};
use crate::engine::device::Device;
use crate::engine::join::{Budget, TooLarge, MAX_WHOLE_N};
use crate::engine::lanes::Path;
use crate::engine::search::{split, Rules};
use crate::engine::threads::on_threads;
use crate::plan::{Mode, Plan, PlanError, PlanSpec, Schedule, Strategy, Tally};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Tasks per thread in a local run: enough that threads finish together,
/// few enough that each task fills its lanes for a long while.
const TASKS_PER_THREAD: usize = 64;

/// Pieces to cut the small-board search into.
pub const MIN_PIECES: usize = 4096;

/// The result of counting one N.
#[derive(Clone, Debug)]
pub struct Solution {
    pub n: Size,
    pub counts: Totals,
    pub threads: usize,
    pub pieces: usize,
    /// How the pieces were counted: "avx512", "avx2", "scalar", "join/…"
    /// or (small N) "search".
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
    #[error(transparent)]
    Join(#[from] TooLarge),
    #[error("the join counts whole boards from N=4 to N={MAX_WHOLE_N}; N={0} is outside")]
    JoinSize(u32),
}

/// Counts all solutions of `n` with `threads` threads (at least one), on
/// the fastest path this CPU has.
pub fn solve(n: Size, threads: usize) -> Result<Solution, SolveError> {
    solve_on(n, threads, None)
}

/// [`solve`] with the lanes' path chosen (`None`: the best available).
/// A path the CPU lacks is not taken: ask [`crate::engine::lanes::Path::available`].
pub fn solve_on(n: Size, threads: usize, path: Option<Path>) -> Result<Solution, SolveError> {
    solve_with(n, threads, path, None)
}

/// [`solve_on`], the backtracking counted on `device` (a graphics card)
/// when one is given: the same plan, the same counts.
pub fn solve_with(
    n: Size,
    threads: usize,
    path: Option<Path>,
    device: Option<Arc<dyn Device>>,
) -> Result<Solution, SolveError> {
    let start = Instant::now();
    let threads = threads.max(1);
    if n.get() < MIN_FRAME_N {
        return solve_small(n, threads, start);
    }
    let plan = Plan::new(PlanSpec {
        n,
        strategy: Strategy::Frame,
        depth: 1,
        tasks: (TASKS_PER_THREAD * threads) as u64,
        mode: Mode::Backtrack,
        cut: crate::plan::CUT,
    })?
    .with_path(path)
    .with_device(device);
    let mut s = solve_plan(&plan, &plan.schedule(), threads)?;
    s.elapsed = start.elapsed();
    Ok(s)
}

/// Counts all solutions of `n` by the join (see [`crate::engine::join`]):
/// a plan of the halves strategy, its choices of east rows taken by the
/// threads task by task. The unique count follows by Burnside from the
/// half- and quarter-turn symmetric searches, as in a border plan.
pub fn solve_join(n: Size, threads: usize) -> Result<Solution, SolveError> {
    solve_join_within(n, threads, Budget::default(), None)
}

/// [`solve_join`] within `budget` (see [`Budget::from_bytes`]), its pairs
/// counted on `path` (`None`: the fastest; see [`crate::engine::join::Join::on`]).
pub fn solve_join_within(
    n: Size,
    threads: usize,
    budget: Budget,
    path: Option<Path>,
) -> Result<Solution, SolveError> {
    let threads = threads.max(1);
    if !(4..=MAX_WHOLE_N).contains(&n.get()) {
        return Err(SolveError::JoinSize(n.get()));
    }
    let plan = Plan::new(PlanSpec {
        n,
        strategy: Strategy::Halves,
        depth: 0,
        tasks: (TASKS_PER_THREAD * threads) as u64,
        mode: Mode::Join,
        cut: crate::plan::CUT,
    })?
    .with_budget(budget)
    .with_path(path);
    solve_plan(&plan, &plan.schedule(), threads).map_err(|e| match e {
        PlanError::Join(e) => SolveError::Join(e),
        e => e.into(),
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
    let never = std::sync::atomic::AtomicBool::new(false);
    let tasks =
        usize::try_from(schedule.tasks.len()).expect("a table's tasks fit memory's indices");
    let parts = on_threads(threads, tasks, |mine: &mut Counted, i| {
        let task = schedule.tasks.get(i as u64).expect("i < tasks");
        let (tally, _, path) = plan.count_task_on(&task, &never)?.expect("never stopped");
        mine.tally.merge(&tally)?;
        // The slowest path any task took is the one to name (or the card).
        mine.path = Some(mine.path.map_or(path, |p: Path| p.with(path)));
        Ok::<(), PlanError>(())
    })?;
    let mut tally = Tally::default();
    let mut path: Option<Path> = None;
    for p in &parts {
        tally.merge(&p.tally)?;
        path = match (path, p.path) {
            (Some(a), Some(b)) => Some(a.with(b)),
            (a, b) => a.or(b),
        };
    }
    Ok(Solution {
        n: plan.spec.n,
        counts: plan.finish(&tally)?,
        threads,
        pieces: schedule.subproblems as usize,
        core: core_name(plan.spec.mode, path),
        elapsed: start.elapsed(),
    })
}

/// What a count names as its core: the lanes' path (or "search" for the
/// whole search of small boards), or the join and its pair loop's path.
fn core_name(mode: Mode, path: Option<Path>) -> &'static str {
    match (mode, path) {
        (Mode::Join, Some(Path::Scalar)) => "join/scalar",
        (Mode::Join, Some(_)) => "join/avx2",
        (_, path) => path.map_or("search", Path::name),
    }
}

/// What one thread of [`solve_plan`] gathers.
#[derive(Default)]
struct Counted {
    tally: Tally,
    path: Option<Path>,
}
