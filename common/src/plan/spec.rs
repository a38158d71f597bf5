//! What a plan is asked for: strategy, mode, depth and tasks, with the
//! defaults for each board size and the limits.

use super::*;

/// How a plan splits the search.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Strategy {
    Prefix,
    Frame,
    /// Rings (frames of the 4 border lines), each cut into parts by the
    /// queens of its first `depth` free rows: rings' node count (about half
    /// that of 8-line frames) in tasks as small as a record attempt needs.
    Rings,
    /// Counts no queens: task `i` answers [`synthetic_answer`]`(i)`, so a
    /// load test can run millions of tasks through a coordinator and check
    /// the exact sum. Its tasks are derived from their index, never listed.
    Synthetic,
    /// The whole board's choices of east rows, counted by the join.
    Halves,
}

impl std::str::FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "prefix" => Ok(Strategy::Prefix),
            "frame" => Ok(Strategy::Frame),
            "rings" => Ok(Strategy::Rings),
            "synthetic" => Ok(Strategy::Synthetic),
            "halves" => Ok(Strategy::Halves),
            _ => Err(format!(
                "unknown strategy '{s}': use 'frame', 'rings', 'prefix', 'halves' (join mode) \
                 or (load tests) 'synthetic'"
            )),
        }
    }
}

impl Strategy {
    /// The name `--strategy` takes.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Prefix => "prefix",
            Strategy::Frame => "frame",
            Strategy::Rings => "rings",
            Strategy::Synthetic => "synthetic",
            Strategy::Halves => "halves",
        }
    }
}

/// How a plan's subproblems are counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Mode {
    /// Every completion walked, many subproblems at once in SIMD lanes.
    #[default]
    Backtrack,
    /// The half-board join ([`crate::engine::join`]): halves enumerated
    /// from quarter tables, compatible pairs counted.
    Join,
}

impl Mode {
    /// The name `--mode` takes.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Backtrack => "backtrack",
            Mode::Join => "join",
        }
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What to plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanSpec {
    pub n: Size,
    pub strategy: Strategy,
    /// Prefix strategy: rows placed in each subproblem (at least 2).
    pub depth: u32,
    /// About how many tasks to make.
    pub tasks: u64,
    /// How subproblems are counted (the halves strategy: only by the join).
    #[serde(default)]
    pub mode: Mode,
    /// How the plan is cut into tasks (see [`CUT`]): kept with the job, so
    /// a job planned by an older version gets the same tasks again.
    #[serde(default)]
    pub cut: u32,
}

/// How new plans are cut into tasks. A job keeps the cut it was planned
/// with, and every cut stays known, because a job's results are kept by
/// task index:
/// - 0: groups merged until a task reaches the target, so tasks of small
///   groups hold up to twice the target (`--tasks 2000` made 1,200–2,000);
/// - 1: each task ends where the work so far comes nearest to a multiple
///   of the target, the last at the end (as many tasks as asked, unless
///   the plan's subproblems are too few to split).
pub const CUT: u32 = 1;

impl PlanSpec {
    /// A plan of `n` by `strategy` at `depth` in about `tasks` tasks,
    /// counted by backtracking.
    pub fn backtracking(n: Size, strategy: Strategy, depth: u32, tasks: u64) -> PlanSpec {
        PlanSpec {
            n,
            strategy,
            depth,
            tasks,
            mode: Mode::Backtrack,
            cut: CUT,
        }
    }
}

/// Default prefix depth: deep enough for thousands of subproblems.
pub const DEFAULT_DEPTH: u32 = 4;

/// Largest N whose frame plans place one ring of border lines by default:
/// rings are the cheapest decomposition to count (about half the nodes of
/// 8-line frames), but past this N they are too few and too large to make
/// tasks of minutes.
pub const RING_DEFAULT_MAX_N: u32 = 21;

/// The boards counted by the join when no mode is asked for: from N=18,
/// where it is 9× the backtracking (one thread, N=18 on a Zen 4: 3.7 s
/// against 34.5 s on AVX-512), to N=21, the last whose whole-board tables fit the
/// join's default memory bound. Below, a count takes seconds either way and
/// the classic search stays the one benchmarks and lessons measure; above,
/// records are cut into ring parts (see [`JOIN_RINGS_DEFAULT`] for the
/// mode that counts them).
pub const JOIN_DEFAULT: std::ops::RangeInclusive<u32> = 18..=21;

/// The record boards whose ring parts are counted by the join when no
/// mode is asked for: from N=25, where `plan N --estimate` finds the join
/// as fast as backtracking (2-core Zen 4, AVX2 path: 8.4 against 8.7
/// core-years) and faster beyond (N=28: 1.8·10^3 against 1.1·10^4), to
/// N=28, whose sampled ring parts need 0.5 GB per task, well inside the
/// join's default memory bound (N=29 needs 1.3 GB and is left to `--mode
/// join`; N=30 is past the bound). Past it, backtracking.
pub const JOIN_RINGS_DEFAULT: std::ops::RangeInclusive<u32> = 25..=28;

/// The mode a plan of N counts with when none is given: the join over
/// [`JOIN_DEFAULT`] and [`JOIN_RINGS_DEFAULT`], backtracking elsewhere.
pub fn default_mode(n: Size) -> Mode {
    if JOIN_DEFAULT.contains(&n.get()) || JOIN_RINGS_DEFAULT.contains(&n.get()) {
        Mode::Join
    } else {
        Mode::Backtrack
    }
}

/// The strategy a plan of N uses when none is given. Backtracking: frames
/// up to [`RING_DEFAULT_MAX_N`] (rings, at their default depth), then rings
/// cut into parts, which count rings' nodes (about half of 8-line frames')
/// in tasks as small as a record attempt needs. The join: whole boards cut
/// into halves while their tables fit the default memory bound (up to the
/// end of [`JOIN_DEFAULT`]; `--strategy halves` takes them on to
/// [`join::MAX_WHOLE_N`] with more `--memory`), then ring parts.
pub fn default_strategy(n: Size, mode: Mode) -> Strategy {
    if mode == Mode::Join && (4..=*JOIN_DEFAULT.end()).contains(&n.get()) {
        Strategy::Halves
    } else if n.get() <= RING_DEFAULT_MAX_N {
        Strategy::Frame
    } else {
        Strategy::Rings
    }
}

/// The depth a strategy uses when none is given.
pub fn default_depth(strategy: Strategy, n: Size) -> u32 {
    match strategy {
        Strategy::Prefix => DEFAULT_DEPTH,
        Strategy::Frame if n.get() <= RING_DEFAULT_MAX_N => 1,
        Strategy::Frame => 2,
        Strategy::Rings if n.get() <= 18 => 1,
        Strategy::Rings if n.get() <= 23 => 2,
        Strategy::Rings => MAX_RING_SPLIT,
        Strategy::Synthetic | Strategy::Halves => 0,
    }
}

/// The most tasks a synthetic plan may have, and a coordinator accepts by
/// default for any plan: it keeps one bit per task (125 MB at this size),
/// and of a listed plan a [`TaskTable`] whose size follows the plan's
/// groups, not its tasks.
pub const MAX_TASKS: u64 = 1_000_000_000;

/// The answer of task `index` of a synthetic plan: between 1 and 2^20,
/// a mix of the index so that a lost, doubled or misplaced task changes
/// the sum.
pub fn synthetic_answer(index: u64) -> u128 {
    let mut x = index.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    u128::from(x % (1 << 20)) + 1
}

/// The sum of the answers of tasks `0..tasks` of a synthetic plan,
/// added up one by one: the reference a load test compares with.
pub fn synthetic_sum(tasks: u64) -> u128 {
    (0..tasks).map(synthetic_answer).sum()
}
/// The most tasks a default plan has: beyond about N=25 default tasks grow
/// longer instead.
pub const MAX_DEFAULT_TASKS: u64 = 1_000_000;

/// Core-seconds a whole count of N takes on one AVX2 core, measured on an
/// AMD EPYC (Zen 3): N=16 0.84 s, N=17 5.5 s, N=18 40 s, N=19 ≈ 300 s; grown
/// by 7.5 per N beyond. A model for sizing tasks, not a promise.
fn model_core_seconds(n: u32) -> f64 {
    40.0 * 7.5f64.powi(n as i32 - 18)
}

/// The number of tasks a plan of N gets when none is asked for: tasks of
/// about 2^(N-18) core-seconds (1 s at N=18, a minute at N=24, several
/// minutes beyond), so that a task's round trip to the coordinator stays a
/// small share of it; at least 16, so that small jobs still spread over
/// workers, and at most [`MAX_DEFAULT_TASKS`].
pub fn default_tasks(n: Size) -> u64 {
    let task_seconds = 2f64.powi(n.get() as i32 - 18);
    ((model_core_seconds(n.get()) / task_seconds).round() as u64).clamp(16, MAX_DEFAULT_TASKS)
}
/// Most rows a prefix id can hold (5 bits each under the kind tag).
pub const MAX_DEPTH: u32 = 11;

/// Most free rows a rings plan places to cut a ring into parts: at most
/// 30^3 parts, inside `PART_BITS`.
pub const MAX_RING_SPLIT: u32 = 3;
