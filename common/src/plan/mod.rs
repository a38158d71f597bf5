//! Plans: one N split into subproblems with stable ids, grouped into tasks.
//!
//! A subproblem id is a u64: the kind in the top 4 bits and a payload whose
//! order is the enumeration order, so a task is just an id range (plus, for
//! a group too costly for one task, a skip/take within it). Listing a task
//! walks only the part of the enumeration inside its range, and an id can be
//! decoded and checked back into its subproblem (see [`Plan::decode`]), so a
//! corrupt or forged id is detected.
//!
//! Strategies (both counted by the engine's lanes, [`crate::engine::lanes`]):
//! - **prefix**: the queens of the first K rows, the row-0 queen in the
//!   left half (weight 2; the middle column of an odd board weight 1).
//! - **frame**: canonical frames ([`crate::engine::border`]) weighted by orbit size.
//!
//! - **halves** (join mode only, N=4..24): the whole board's choices of
//!   east rows ([`crate::engine::join::Shape::choices`]), one per symmetry
//!   class, weighted by its size; odd N one set per row of the middle
//!   queen.
//!
//! A plan also names its [`Mode`]: prefixes, frames and ring parts are
//! counted by backtracking in lanes or by the join on their interiors.
//!
//! All add the half- and quarter-turn symmetric counts
//! ([`crate::engine::symmetric`]), from which the classes (and the unique count)
//! follow by Burnside. The two decompositions share no subproblem, so a
//! count made with one can be cross-checked with the other.
//!
//! Planning keeps one record per *group* (frames sharing an outer ring, or
//! prefix pieces sharing all but their last row), never one per subproblem,
//! so memory stays bounded at record sizes.

pub mod estimate;
mod ids;
mod joins;
pub mod solve;
mod spec;
pub mod table;
mod tally;

use crate::engine::board::Size;
use crate::engine::border::{Frame, FrameError, Frames, MIN_FRAME_N, POS_BITS};
use crate::engine::counts::{CountOverflow, PieceCounts, Totals};
use crate::engine::device::{Device, DeviceError};
use crate::engine::interior::{Interior, Start};
use crate::engine::join::{
    self, whole_pieces, Budget, Halves, Join, Quarter, Room, Shape, TooLarge, QUARTERS,
};
use crate::engine::lanes::{count_below, Path};
use crate::engine::symmetric::{count_symmetric, Turn};
pub(crate) use ids::KIND_SHIFT;
use ids::*;
pub use ids::{Kind, Subproblem};
use joins::*;
use serde::{Deserialize, Serialize};
pub use spec::*;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
pub use table::TaskTable;
pub use tally::Tally;

/// Estimated cost growth per free row of a frame (measured at N=16:
/// mean inner nodes grow 3.5–4× per free row). Relative only: it orders
/// and sizes tasks; time estimates come from observed rates.
const FRAME_ROW_FACTOR: f64 = 4.0;

/// Why an id does not name a subproblem of a plan.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("prefix depth must be between 2 and {max}, got {0}", max = MAX_DEPTH)]
    BadDepth(u32),
    #[error("the number of tasks must be at least 1")]
    NoTasks,
    #[error("id {0:#x} has a kind this plan does not use")]
    WrongKind(u64),
    #[error("id {0:#x}: {1}")]
    BadPrefix(u64, &'static str),
    #[error("id {0:#x}: {1}")]
    BadFrame(u64, FrameError),
    #[error("id {0:#x}: first column out of range")]
    BadColumn(u64),
    #[error("id {0:#x}: its ring has no part with this number")]
    BadPart(u64),
    #[error("a rings plan places 1 to {max} rows inside each ring, got {0}", max = MAX_RING_SPLIT)]
    BadRingSplit(u32),
    #[error(transparent)]
    Overflow(#[from] CountOverflow),
    #[error("results do not add up: {0}")]
    Inconsistent(&'static str),
    #[error(
        "this plan would hold about {estimated} {what} while it is planned (at most {max}): \
         use a smaller --depth (or, for prefix plans, the frame strategy)"
    )]
    TooBig {
        what: &'static str,
        estimated: u64,
        max: u64,
    },
    #[error("planning was stopped before it finished")]
    Stopped,
    #[error("a synthetic plan counts no queens (it is for load tests: submit it to a coordinator, or run `nqueens loadgen`)")]
    Synthetic,
    #[error("a synthetic plan has at most {max} tasks, got {0}", max = MAX_TASKS)]
    TooManySynthetic(u64),
    #[error("plans are cut into tasks in ways 0 to {CUT}, not {0} (a newer version made this plan: upgrade)")]
    UnknownCut(u32),
    #[error(
        "the halves strategy cuts whole boards from N=4 to N={max}, not N={0}: use the rings \
         strategy (its ring parts can be counted by the join too)",
        max = join::MAX_WHOLE_N
    )]
    HalvesSize(u32),
    #[error("the halves strategy is counted only by the join (mode join)")]
    HalvesByBacktracking,
    #[error("the halves strategy always cuts the whole board: its depth is 0, got {0}")]
    HalvesDepth(u32),
    #[error("a synthetic plan counts no queens, so it has no mode but backtrack")]
    SyntheticMode,
    #[error("id {0:#x}: not a choice of east rows of this board")]
    BadChoice(u64),
    #[error(transparent)]
    Join(#[from] TooLarge),
    #[error(transparent)]
    Device(#[from] DeviceError),
}

/// A contiguous part of the enumeration: the subproblems with ids in
/// `lo..hi`, skipping the first `skip` and taking at most `take`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub index: u64,
    pub lo: u64,
    pub hi: u64,
    pub skip: u64,
    pub take: u64,
    pub subproblems: u64,
    /// Estimated work, in the plan's relative units.
    pub work: f64,
}

/// A run of subproblems planned as one unit (never split across tasks
/// except by skip/take when alone too big).
#[derive(Clone, Copy, Debug)]
struct Group {
    lo: u64,
    hi: u64,
    count: u64,
    work: f64,
}

/// Subproblems counted by class (e.g. frames by weight), for the summary.
type Classes = Vec<(String, u64)>;

/// A plan's groups, and its classes.
type GroupsAndClasses = (Vec<Group>, Classes);

/// One N and how it is split: cheap to make, so a worker can decode, list
/// and count subproblems without enumerating the plan.
#[derive(Clone, Debug)]
pub struct Plan {
    pub spec: PlanSpec,
    frames: Option<Frames>,
    /// The engine's path for counting (`None`: the fastest available).
    path: Option<Path>,
    /// Where backtracking subproblems are counted instead of the CPU's
    /// lanes (a graphics card), if anywhere.
    device: Option<Arc<dyn Device>>,
    /// What the join may hold while it counts a subproblem.
    budget: Budget,
    /// Halves plans: the pieces' built joins, shared by clones of the plan.
    joins: Arc<Joins>,
}

/// A plan's tasks, made by enumerating it once (see [`Plan::schedule`]).
#[derive(Clone, Debug)]
pub struct Schedule {
    /// Held as runs: its memory grows with the plan's groups, not its
    /// tasks (a plan of 10^8 tasks cuts a few thousand groups into parts).
    pub tasks: TaskTable,
    pub subproblems: u64,
    pub work: f64,
    /// Subproblems by class (e.g. frames by weight), for the summary.
    pub classes: Classes,
}

impl Plan {
    /// Checks the spec; enumerates nothing.
    pub fn new(spec: PlanSpec) -> Result<Plan, PlanError> {
        if spec.tasks == 0 {
            return Err(PlanError::NoTasks);
        }
        if spec.cut > CUT {
            return Err(PlanError::UnknownCut(spec.cut));
        }
        if spec.strategy == Strategy::Prefix && !(2..=MAX_DEPTH).contains(&spec.depth) {
            return Err(PlanError::BadDepth(spec.depth));
        }
        if spec.strategy == Strategy::Frame && spec.depth > MAX_DEPTH {
            return Err(PlanError::BadDepth(spec.depth));
        }
        if spec.strategy == Strategy::Rings && !(1..=MAX_RING_SPLIT).contains(&spec.depth) {
            return Err(PlanError::BadRingSplit(spec.depth));
        }
        if spec.strategy == Strategy::Synthetic && spec.tasks > MAX_TASKS {
            return Err(PlanError::TooManySynthetic(spec.tasks));
        }
        if spec.strategy == Strategy::Synthetic && spec.mode != Mode::Backtrack {
            return Err(PlanError::SyntheticMode);
        }
        if spec.strategy == Strategy::Halves {
            if !(4..=join::MAX_WHOLE_N).contains(&spec.n.get()) {
                return Err(PlanError::HalvesSize(spec.n.get()));
            }
            if spec.mode != Mode::Join {
                return Err(PlanError::HalvesByBacktracking);
            }
            if spec.depth != 0 {
                return Err(PlanError::HalvesDepth(spec.depth));
            }
        }
        let lines = match spec.strategy {
            Strategy::Frame => Some(border_depth(spec.depth)),
            Strategy::Rings => Some(1),
            _ => None,
        };
        let frames = lines
            .filter(|_| spec.n.get() >= MIN_FRAME_N)
            .map(|d| Frames::new(spec.n, d).expect("N and depth checked"));
        Ok(Plan {
            spec,
            frames,
            path: None,
            device: None,
            budget: Budget::default(),
            joins: Arc::default(),
        })
    }

    /// Counts by the join within `budget` (see [`Budget::from_bytes`]).
    pub fn with_budget(mut self, budget: Budget) -> Plan {
        self.budget = budget;
        self.joins = Arc::default();
        self
    }

    /// Counts on `path` when the CPU and the subproblems allow it, else on
    /// the fastest path they do.
    pub fn with_path(mut self, path: Option<Path>) -> Plan {
        self.path = path;
        self.joins = Arc::default();
        self
    }

    /// Counts backtracking subproblems on `device` (a graphics card)
    /// instead of the CPU's lanes; a join plan still counts on the CPU.
    /// The tallies and checksums are those of the CPU (the device counts
    /// the same completions and queens placed).
    pub fn with_device(mut self, device: Option<Arc<dyn Device>>) -> Plan {
        self.device = device;
        self
    }

    /// The device backtracking subproblems are counted on, if not the CPU.
    pub fn device(&self) -> Option<&Arc<dyn Device>> {
        self.device.as_ref()
    }

    /// Enumerates the plan once and cuts it into about `spec.tasks` tasks of
    /// similar estimated work. Memory: one record per group.
    pub fn schedule(&self) -> Schedule {
        self.schedule_until(&AtomicBool::new(false))
            .expect("never stopped")
    }

    /// [`Plan::schedule`], giving up with [`PlanError::Stopped`] soon after
    /// `stop` is set (a cancelled job, a coordinator shutting down): a
    /// large plan takes minutes to enumerate.
    pub fn schedule_until(&self, stop: &AtomicBool) -> Result<Schedule, PlanError> {
        if let Some(tasks) = self.derived_tasks() {
            // Tabled only when asked (a coordinator derives them).
            return Ok(Schedule {
                tasks: TaskTable::of((0..tasks).map(|i| self.derived_task(i))),
                subproblems: tasks,
                work: tasks as f64,
                classes: vec![("synthetic tasks".into(), tasks)],
            });
        }
        let (groups, classes) = self.groups(stop)?;
        let work: f64 = groups.iter().map(|g| g.work).sum();
        Ok(Schedule {
            tasks: TaskTable::cut(&groups, work / self.spec.tasks as f64, self.spec.cut),
            subproblems: groups.iter().map(|g| g.count).sum(),
            work,
            classes,
        })
    }

    /// Whether the plan falls back to one whole-search subproblem.
    pub fn whole(&self) -> bool {
        let n = self.spec.n.get();
        match self.spec.strategy {
            Strategy::Prefix => n < 4 || self.spec.depth as usize >= self.spec.n.n() - 1,
            Strategy::Frame | Strategy::Rings => self.frames.is_none(),
            Strategy::Synthetic | Strategy::Halves => false,
        }
    }

    /// For a plan whose tasks follow from their index alone (synthetic),
    /// how many it has: it is never enumerated, so any size is planned at
    /// once.
    pub fn derived_tasks(&self) -> Option<u64> {
        (self.spec.strategy == Strategy::Synthetic).then_some(self.spec.tasks)
    }

    /// Task `index` of a plan with [`Plan::derived_tasks`]: one unit of
    /// work each.
    pub fn derived_task(&self, index: u64) -> Task {
        Task {
            index,
            lo: index,
            hi: index + 1,
            skip: 0,
            take: 1,
            subproblems: 1,
            work: 1.0,
        }
    }

    /// The exact tally a synthetic task must report.
    pub fn synthetic_tally(&self, task: &Task) -> Option<Tally> {
        (self.spec.strategy == Strategy::Synthetic).then(|| Tally {
            weighted: synthetic_answer(task.index),
            ..Tally::default()
        })
    }

    /// The plan's groups in id order, and its subproblems by class.
    fn groups(&self, stop: &AtomicBool) -> Result<GroupsAndClasses, PlanError> {
        if self.whole() {
            let id = Subproblem::Whole.id();
            let whole = Group {
                lo: id,
                hi: id + 1,
                count: 1,
                work: 1.0,
            };
            return Ok((vec![whole], vec![("whole search".into(), 1)]));
        }
        let mut groups = Vec::new();
        let mut classes = match (self.spec.strategy, &self.frames) {
            (Strategy::Prefix, _) => self.prefix_groups(stop, &mut groups)?,
            (Strategy::Frame, Some(frames)) => self.frame_groups(frames, stop, &mut groups)?,
            (Strategy::Rings, Some(frames)) => self.ring_groups(frames, stop, &mut groups)?,
            (Strategy::Halves, _) => self.halves_groups(stop, &mut groups)?,
            (Strategy::Frame | Strategy::Rings, None) => {
                unreachable!("whole() covers border plans without frames")
            }
            (Strategy::Synthetic, _) => unreachable!("synthetic plans are never enumerated"),
        };
        self.symmetric_groups(&mut groups, &mut classes);
        // In id order (a ring part's kind sorts after the symmetric ones):
        // tasks are id ranges.
        groups.sort_by_key(|g| g.lo);
        Ok((groups, classes))
    }

    /// A prefix plan's groups: the pieces that share all rows but the last.
    fn prefix_groups(
        &self,
        stop: &AtomicBool,
        groups: &mut Vec<Group>,
    ) -> Result<Classes, PlanError> {
        let mut by_weight = [0u64; 3];
        let tag = (Kind::Prefix as u64) << KIND_SHIFT;
        let below = POS_BITS * (self.spec.depth - 2);
        for_each_chunk(stop, |chunk| {
            let (lo, hi) = (tag | chunk << below, tag | (chunk + 1) << below);
            let _ = self.for_each_prefix(lo, hi, |cols, weight, work| {
                by_weight[weight as usize] += 1;
                add_to_group(groups, prefix_id(cols), POS_BITS, work);
                ControlFlow::Continue(())
            });
        })?;
        Ok(vec![
            ("prefixes of weight 2".into(), by_weight[2]),
            ("prefixes of weight 1".into(), by_weight[1]),
        ])
    }

    /// A frame plan's groups: the frames that share an outer ring (a
    /// depth-1 frame is its ring: each is a group of its own).
    fn frame_groups(
        &self,
        frames: &Frames,
        stop: &AtomicBool,
        groups: &mut Vec<Group>,
    ) -> Result<Classes, PlanError> {
        let mut by_weight = [0u64; 9];
        let tag = (Kind::Frame as u64) << KIND_SHIFT;
        let nn = self.spec.n.n();
        for_each_border(frames, stop, |f, w, queens| {
            by_weight[w as usize] += 1;
            let id = tag | f.key();
            let work = FRAME_ROW_FACTOR.powi((nn - queens) as i32);
            let inner = (frames.lines() - 4) as u32 * POS_BITS;
            add_to_group(groups, id, inner, work);
        })?;
        Ok(weight_classes("frames", &by_weight))
    }

    /// A rings plan's groups: a ring's parts are one group.
    fn ring_groups(
        &self,
        frames: &Frames,
        stop: &AtomicBool,
        groups: &mut Vec<Group>,
    ) -> Result<Classes, PlanError> {
        let mut by_weight = [0u64; 9];
        let tag = (Kind::RingPart as u64) << KIND_SHIFT;
        let nn = self.spec.n.n();
        for_each_border(frames, stop, |ring, w, queens| {
            let free = nn - queens;
            self.for_each_part(frames, ring, |part, start| {
                by_weight[w as usize] += 1;
                let id = tag | ring.key() << PART_BITS | u64::from(part);
                let work = FRAME_ROW_FACTOR.powi((free - usize::from(start.row)) as i32);
                add_to_group(groups, id, PART_BITS, work);
            });
        })?;
        Ok(weight_classes("ring parts", &by_weight))
    }

    /// A halves plan's groups: a piece's choices of east rows are one
    /// group. A choice's work is the model's unit of a board of N rows,
    /// shared out, so the symmetric searches weigh next to nothing.
    fn halves_groups(
        &self,
        stop: &AtomicBool,
        groups: &mut Vec<Group>,
    ) -> Result<Classes, PlanError> {
        let nn = self.spec.n.n();
        let mut choices = 0u64;
        for piece in 0..whole_pieces(nn) {
            if stop.load(Ordering::Relaxed) {
                return Err(PlanError::Stopped);
            }
            let (shape, _) = Shape::piece(nn, piece);
            shape.for_each_choice(|s, _| {
                choices += 1;
                let id = choice_id(piece as u8, s);
                add_to_group(groups, id, 32, 2f64.powi(nn as i32));
            });
        }
        Ok(vec![("choices of east rows".into(), choices)])
    }

    /// The half- and quarter-turn symmetric searches, each a group of its
    /// own (no other id shares its bits), and their classes.
    fn symmetric_groups(&self, groups: &mut Vec<Group>, classes: &mut Classes) {
        let n = self.spec.n;
        // A symmetric search chooses about N/2 (half) or N/4 (quarter) queens.
        let nn = n.n();
        for (turn, rows) in [(Turn::Half, nn / 2), (Turn::Quarter, nn / 4)] {
            for first in 0..n.get() as u8 {
                let id = Subproblem::Symmetric { turn, first }.id();
                add_to_group(groups, id, 0, FRAME_ROW_FACTOR.powi(rows as i32));
            }
        }
        classes.push(("half-turn searches".into(), n.get().into()));
        classes.push(("quarter-turn searches".into(), n.get().into()));
    }

    /// Prefixes at the plan's depth with ids in `lo..hi`, in id order, with
    /// their weight and estimated work. Rows are placed in column order, so
    /// the walk is in id order and skips every subtree outside the range.
    /// Ends early once `visit` breaks.
    fn for_each_prefix(
        &self,
        lo: u64,
        hi: u64,
        mut visit: impl FnMut(&[u8], u32, f64) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let n = self.spec.n;
        let depth = self.spec.depth as usize;
        let mut cols = Vec::with_capacity(depth);
        // Row 0 in the left half; the mirror image counts the right half.
        for first in 0..n.get().div_ceil(2) as u8 {
            cols.push(first);
            let weight = if 2 * u32::from(first) + 1 == n.get() {
                1
            } else {
                2
            };
            self.walk_prefix(&mut cols, lo, hi, weight, &mut visit)?;
            cols.pop();
        }
        ControlFlow::Continue(())
    }

    fn walk_prefix(
        &self,
        cols: &mut Vec<u8>,
        lo: u64,
        hi: u64,
        weight: u32,
        visit: &mut impl FnMut(&[u8], u32, f64) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let depth = self.spec.depth as usize;
        // Ids of the prefixes below: these columns, then anything.
        let rest = POS_BITS * (depth - cols.len()) as u32;
        let tag = (Kind::Prefix as u64) << KIND_SHIFT;
        let (first, end) = (
            tag | pack_cols(cols) << rest,
            tag | (pack_cols(cols) + 1) << rest,
        );
        if end <= lo || first >= hi {
            return ControlFlow::Continue(());
        }
        if cols.len() == depth {
            return visit(cols, weight, prefix_work(self.spec.n, cols));
        }
        for c in 0..self.spec.n.get() as u8 {
            if safe_below(cols, c) {
                cols.push(c);
                self.walk_prefix(cols, lo, hi, weight, visit)?;
                cols.pop();
            }
        }
        ControlFlow::Continue(())
    }

    /// The parts a ring is cut into (by the queens of its first `depth`
    /// free rows), each with its start.
    fn for_each_part(&self, frames: &Frames, ring: Frame, mut visit: impl FnMut(u32, Start)) {
        let (starts, _) = frames.interior(&ring).split(self.spec.depth as usize);
        for (part, start) in starts.into_iter().enumerate() {
            visit(part as u32, start);
        }
    }

    /// Visits the subproblems of `task`, in id order.
    pub fn for_each_subproblem(&self, task: &Task, mut visit: impl FnMut(Subproblem)) {
        let _ = self.try_for_each_subproblem(task, |s| {
            s.map(&mut visit);
            ControlFlow::Continue(())
        });
    }

    /// Walks the ids of `task` and visits its subproblems, in id order,
    /// until it has taken them all, or `walk` breaks: `walk` is called for
    /// every subproblem walked, `Some` for those the task takes, `None`
    /// for those it skips (so a caller can end even a long walk that takes
    /// nothing: a task from the wire may skip or range over anything).
    /// Only the kinds this plan's ids are of are walked.
    pub fn try_for_each_subproblem(
        &self,
        task: &Task,
        mut walk: impl FnMut(Option<Subproblem>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let (mut seen, mut taken) = (0u64, 0u64);
        let mut each = |s: Subproblem| {
            if taken == task.take {
                return ControlFlow::Break(());
            }
            seen += 1;
            if seen <= task.skip {
                return walk(None);
            }
            taken += 1;
            walk(Some(s))
        };
        for kind in [
            Kind::Whole,
            Kind::Prefix,
            Kind::Frame,
            Kind::HalfTurn,
            Kind::QuarterTurn,
            Kind::RingPart,
            Kind::Choice,
        ] {
            let base = (kind as u64) << KIND_SHIFT;
            let (lo, hi) = (task.lo.max(base), task.hi.min(base | PAYLOAD));
            if lo < hi && self.uses(kind) {
                self.for_each_of_kind(kind, lo, hi, &mut each)?;
            }
        }
        ControlFlow::Continue(())
    }

    /// Whether this plan's ids include any of `kind` (as [`Plan::groups`]
    /// makes them).
    fn uses(&self, kind: Kind) -> bool {
        if self.whole() {
            return kind == Kind::Whole;
        }
        match kind {
            Kind::Whole => false,
            Kind::Prefix => self.spec.strategy == Strategy::Prefix,
            Kind::Frame => self.spec.strategy == Strategy::Frame,
            Kind::RingPart => self.spec.strategy == Strategy::Rings,
            Kind::Choice => self.spec.strategy == Strategy::Halves,
            Kind::HalfTurn | Kind::QuarterTurn => self.spec.strategy != Strategy::Synthetic,
        }
    }

    /// Visits this plan's subproblems of `kind` with ids in `lo..hi` (a
    /// non-empty range within the kind's ids), in id order, until `each`
    /// breaks.
    fn for_each_of_kind(
        &self,
        kind: Kind,
        lo: u64,
        hi: u64,
        each: &mut impl FnMut(Subproblem) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let base = (kind as u64) << KIND_SHIFT;
        // The range's payloads.
        let (from, to) = (lo & PAYLOAD, (hi - base).min(PAYLOAD));
        match (kind, &self.frames) {
            (Kind::Whole, _) => each(Subproblem::Whole),
            (Kind::Prefix, _) => self.for_each_prefix(lo, hi, |cols, weight, _| {
                each(Subproblem::Prefix {
                    cols: cols.to_vec(),
                    weight,
                })
            }),
            (Kind::Frame, Some(fr)) => fr.try_for_each_in(from, to, |frame, weight, _| {
                each(Subproblem::Frame { frame, weight })
            }),
            (Kind::RingPart, Some(fr)) => self.for_each_ring_part_in(fr, from, to, each),
            (Kind::Choice, _) => self.for_each_choice_in(from, to, each),
            (Kind::HalfTurn | Kind::QuarterTurn, _) => {
                let turn = if kind == Kind::HalfTurn {
                    Turn::Half
                } else {
                    Turn::Quarter
                };
                for first in from..to.min(self.spec.n.get().into()) {
                    each(Subproblem::Symmetric {
                        turn,
                        first: first as u8,
                    })?;
                }
                ControlFlow::Continue(())
            }
            (Kind::Frame | Kind::RingPart, None) => ControlFlow::Continue(()),
        }
    }

    /// Visits the ring parts with payloads in `lo..hi`, in id order.
    fn for_each_ring_part_in(
        &self,
        fr: &Frames,
        lo: u64,
        hi: u64,
        each: &mut impl FnMut(Subproblem) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        // Every ring with a part in lo..hi.
        let rings = (lo >> PART_BITS, ((hi - 1) >> PART_BITS) + 1);
        fr.try_for_each_in(rings.0, rings.1, |ring, weight, _| {
            let first = ring.key() << PART_BITS;
            let mut flow = ControlFlow::Continue(());
            self.for_each_part(fr, ring, |part, start| {
                if flow.is_continue() && (lo..hi).contains(&(first | u64::from(part))) {
                    flow = each(Subproblem::RingPart {
                        ring,
                        weight,
                        part,
                        start,
                    });
                }
            });
            flow
        })
    }

    /// Visits the choices of east rows with payloads in `lo..hi` (a
    /// piece in the high 32 bits, a choice in the low), in id order.
    fn for_each_choice_in(
        &self,
        lo: u64,
        hi: u64,
        each: &mut impl FnMut(Subproblem) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let nn = self.spec.n.n();
        let last = whole_pieces(nn) as u64 - 1;
        for piece in lo >> 32..=((hi - 1) >> 32).min(last) {
            let (shape, times) = Shape::piece(nn, piece as usize);
            let first = piece << 32;
            let (from, to) = (lo.max(first) - first, hi.min(first + (1 << 32)) - first);
            shape.try_for_each_choice_in(from, to, |choice, w| {
                each(Subproblem::Choice {
                    piece: piece as u8,
                    choice,
                    weight: w * times,
                })
            })?;
        }
        ControlFlow::Continue(())
    }

    /// The subproblem an id names, checked against this plan: the id must be
    /// one the plan itself enumerates.
    pub fn decode(&self, id: u64) -> Result<Subproblem, PlanError> {
        let payload = id & PAYLOAD;
        let kind = id >> KIND_SHIFT;
        match kind {
            0 if self.whole() && payload == 0 => Ok(Subproblem::Whole),
            1 if !self.whole() && self.spec.strategy == Strategy::Prefix => {
                self.decode_prefix(id, payload)
            }
            2 => {
                let fr = self.frames.as_ref().ok_or(PlanError::WrongKind(id))?;
                let frame = fr.decode(payload).map_err(|e| PlanError::BadFrame(id, e))?;
                Ok(Subproblem::Frame {
                    frame,
                    weight: fr.weight(&frame),
                })
            }
            5 if !self.whole() && self.spec.strategy == Strategy::Rings => {
                self.decode_ring_part(id, payload)
            }
            6 if self.spec.strategy == Strategy::Halves => self.decode_choice(id, payload),
            3 | 4 if !self.whole() => {
                if payload >= self.spec.n.get().into() {
                    return Err(PlanError::BadColumn(id));
                }
                let turn = if kind == 3 { Turn::Half } else { Turn::Quarter };
                Ok(Subproblem::Symmetric {
                    turn,
                    first: payload as u8,
                })
            }
            _ => Err(PlanError::WrongKind(id)),
        }
    }

    /// The prefix `id` (its `payload`) names, checked: one column per row
    /// of the plan's depth, on the board, row 0's queen in the left half,
    /// no two queens attacking.
    fn decode_prefix(&self, id: u64, payload: u64) -> Result<Subproblem, PlanError> {
        let n = self.spec.n;
        let depth = self.spec.depth as usize;
        let bad = |why| PlanError::BadPrefix(id, why);
        if payload >> (POS_BITS as usize * depth) != 0 {
            return Err(bad("more rows than the plan's depth"));
        }
        let cols: Vec<u8> = (0..depth)
            .rev()
            .map(|i| (payload >> (POS_BITS as usize * i) & 31) as u8)
            .collect();
        if cols.iter().any(|&c| u32::from(c) >= n.get()) {
            return Err(bad("a column off the board"));
        }
        if 2 * u32::from(cols[0]) + 1 > n.get() {
            return Err(bad(
                "row 0's queen is in the right half (the mirror image counts it)",
            ));
        }
        if (1..depth).any(|i| !safe_below(&cols[..i], cols[i])) {
            return Err(bad("two queens attack each other"));
        }
        let weight = if 2 * u32::from(cols[0]) + 1 == n.get() {
            1
        } else {
            2
        };
        Ok(Subproblem::Prefix { cols, weight })
    }

    /// The ring part `id` (its `payload`) names, checked: a canonical ring
    /// and one of its parts' numbers.
    fn decode_ring_part(&self, id: u64, payload: u64) -> Result<Subproblem, PlanError> {
        let fr = self.frames.as_ref().ok_or(PlanError::WrongKind(id))?;
        let ring = fr
            .decode(payload >> PART_BITS)
            .map_err(|e| PlanError::BadFrame(id, e))?;
        let want = (payload & ((1 << PART_BITS) - 1)) as u32;
        let mut found = None;
        self.for_each_part(fr, ring, |part, start| {
            if part == want {
                found = Some(start);
            }
        });
        let start = found.ok_or(PlanError::BadPart(id))?;
        Ok(Subproblem::RingPart {
            ring,
            weight: fr.weight(&ring),
            part: want,
            start,
        })
    }

    /// The choice of east rows `id` (its `payload`) names, checked: a
    /// piece of the board, and a choice its shape lists.
    fn decode_choice(&self, id: u64, payload: u64) -> Result<Subproblem, PlanError> {
        let (piece, choice) = (payload >> 32, payload as u32);
        let nn = self.spec.n.n();
        if piece >= whole_pieces(nn) as u64 {
            return Err(PlanError::BadChoice(id));
        }
        let (shape, times) = Shape::piece(nn, piece as usize);
        let w = shape.weight(choice).ok_or(PlanError::BadChoice(id))?;
        Ok(Subproblem::Choice {
            piece: piece as u8,
            choice,
            weight: w * times,
        })
    }

    /// The queens a prefix or frame subproblem places (none for the others).
    fn queens(&self, s: &Subproblem) -> Vec<(usize, usize)> {
        match s {
            Subproblem::Prefix { cols, .. } => cols
                .iter()
                .enumerate()
                .map(|(r, &c)| (r, c.into()))
                .collect(),
            Subproblem::Frame { frame, .. } => frame.queens(self.spec.n.n()),
            Subproblem::RingPart { ring, .. } => ring.queens(self.spec.n.n()),
            Subproblem::Whole | Subproblem::Symmetric { .. } | Subproblem::Choice { .. } => {
                Vec::new()
            }
        }
    }

    /// The board a prefix or frame subproblem leaves to fill, for the engine.
    fn interior(&self, s: &Subproblem) -> Option<Interior> {
        let n = self.spec.n.n();
        match s {
            Subproblem::Prefix { .. } => Some(Interior::new(n, &self.queens(s))),
            Subproblem::Frame { frame, .. } | Subproblem::RingPart { ring: frame, .. } => {
                Some(self.frames.as_ref().expect("frame plan").interior(frame))
            }
            Subproblem::Whole | Subproblem::Symmetric { .. } | Subproblem::Choice { .. } => None,
        }
    }

    /// Counts subproblems on one thread: prefixes and frames together in
    /// the engine's lanes, the rest by their own small searches. The
    /// completions of a prefix or a frame are in `c1`, unweighted
    /// ([`Tally::add`] weights them). `None` once `stop` is set.
    fn count_all(
        &self,
        subs: &[Subproblem],
        joined: &mut JoinRun,
        stop: &AtomicBool,
    ) -> Result<Option<(Vec<PieceCounts>, Path)>, PlanError> {
        let mut out = vec![PieceCounts::default(); subs.len()];
        let Some(batch) = self.count_apart(subs, joined, stop, &mut out)? else {
            return Ok(None);
        };
        let counted = if self.spec.mode == Mode::Join {
            self.count_joined(&batch, stop)?
                .map(|counted| (counted, joined.path(self.path)))
        } else {
            self.count_backtracking(&batch, stop)?
        };
        let Some((counted, path)) = counted else {
            return Ok(None);
        };
        for (i, c) in batch.at.into_iter().zip(counted) {
            out[i] = c;
        }
        Ok(Some((out, path)))
    }

    /// Counts the subproblems of `subs` that have no interior into `out`
    /// (choices of east rows by the join, symmetric and whole searches by
    /// their own searches) and gathers the interiors of the others, to be
    /// counted together. `None` once `stop` is set.
    fn count_apart(
        &self,
        subs: &[Subproblem],
        joined: &mut JoinRun,
        stop: &AtomicBool,
        out: &mut [PieceCounts],
    ) -> Result<Option<Batch>, PlanError> {
        let mut batch = Batch::default();
        let mut last_ring: Option<(Frame, Interior)> = None;
        for (i, s) in subs.iter().enumerate() {
            if let Subproblem::Choice { piece, choice, .. } = s {
                if stop.load(Ordering::Relaxed) {
                    return Ok(None);
                }
                out[i] = joined.choice(self, *piece, *choice)?;
                continue;
            }
            if let Subproblem::RingPart { ring, start, .. } = s {
                // A ring's parts come together: its interior is made once.
                let it = match &last_ring {
                    Some((r, it)) if r == ring => it.clone(),
                    _ => {
                        let it = self.interior(s).expect("a ring part has one");
                        last_ring = Some((*ring, it.clone()));
                        it
                    }
                };
                batch.push(it, *start, i);
                continue;
            }
            if let Some(it) = self.interior(s) {
                batch.push(it, Start::default(), i);
                continue;
            }
            if stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            out[i] = self.count_search(s)?;
        }
        Ok(Some(batch))
    }

    /// A symmetric search's counts, or the whole board's (the one
    /// subproblem of a whole plan).
    fn count_search(&self, s: &Subproblem) -> Result<PieceCounts, PlanError> {
        let n = self.spec.n;
        if let Subproblem::Symmetric { turn, first } = s {
            return Ok(count_symmetric(n, *turn, *first));
        }
        let c = crate::plan::solve::solve_on(n, 1, self.path)
            .map_err(|_| PlanError::Inconsistent("whole search"))?
            .counts;
        let small = |x: u128| u64::try_from(x).map_err(|_| CountOverflow);
        Ok(PieceCounts {
            c1: small(c.c1)?,
            c2: small(c.c2)?,
            c4: small(c.c4)?,
            c8: small(c.c8)?,
            nodes: small(c.nodes)?,
        })
    }

    /// A batch's interiors counted by the join, in order, each by its own
    /// tables. `None` once `stop` is set.
    fn count_joined(
        &self,
        batch: &Batch,
        stop: &AtomicBool,
    ) -> Result<Option<Vec<PieceCounts>>, PlanError> {
        let mut counted = Vec::with_capacity(batch.interiors.len());
        for (it, from) in batch.interiors.iter().zip(&batch.froms) {
            if stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            // Each thread builds its own tables: its share of the budget.
            let budget = self.budget.per_thread();
            counted.push(join::count_within(it, from, budget, self.path)?);
        }
        Ok(Some(counted))
    }

    /// A batch's interiors counted by backtracking, in order, on the card
    /// if the plan has one, else in the CPU's lanes, with the path that
    /// counted them. `None` once `stop` is set.
    fn count_backtracking(
        &self,
        batch: &Batch,
        stop: &AtomicBool,
    ) -> Result<Option<(Vec<PieceCounts>, Path)>, PlanError> {
        // A card's thread names the card even for a chunk with no
        // interior (only the Burnside searches, which every task counts on
        // the CPU): such a task has nothing a card could count, and a
        // cross-device check of it must not wait for one.
        Ok(match &self.device {
            Some(device) => device
                .count_below(&batch.interiors, &batch.froms, stop)?
                .map(|counted| (counted, Path::Gpu)),
            None => count_below(&batch.interiors, &batch.froms, self.path, stop)?,
        })
    }

    /// Counts every subproblem of a task.
    pub fn count_task(&self, task: &Task) -> Result<Tally, PlanError> {
        self.count_task_checked(task).map(|(tally, _)| tally)
    }

    /// Counts a task and returns a checksum of every subproblem's id and
    /// counts (FNV-1a, in order), so two results can be compared beyond
    /// their sums: a redundant run that agrees on totals by accident will
    /// still differ here.
    pub fn count_task_checked(&self, task: &Task) -> Result<(Tally, u64), PlanError> {
        let never = std::sync::atomic::AtomicBool::new(false);
        Ok(self.count_task_until(task, &never)?.expect("never stopped"))
    }

    /// [`Plan::count_task_checked`] that gives up (returning `None`) once
    /// `stop` is set, checked between subproblems.
    pub fn count_task_until(
        &self,
        task: &Task,
        stop: &std::sync::atomic::AtomicBool,
    ) -> Result<Option<(Tally, u64)>, PlanError> {
        Ok(self
            .count_task_on(task, stop)?
            .map(|(tally, checksum, _)| (tally, checksum)))
    }

    /// [`Plan::count_task_until`], also naming the engine path that counted.
    pub fn count_task_on(
        &self,
        task: &Task,
        stop: &std::sync::atomic::AtomicBool,
    ) -> Result<Option<(Tally, u64, Path)>, PlanError> {
        if let Some(tally) = self.synthetic_tally(task) {
            let checksum = (tally.weighted as u64).wrapping_mul(0x0100_0000_01b3);
            return Ok(Some((tally, checksum, Path::Scalar)));
        }
        // Subproblems are counted a chunk at a time, so a task of millions
        // of frames never holds them (or their jobs) all at once.
        let mut run = TaskRun {
            plan: self,
            stop,
            subs: Vec::with_capacity(CHUNK),
            joined: JoinRun::default(),
            tally: Tally::default(),
            checksum: 0xcbf2_9ce4_8422_2325,
            path: None,
            outcome: Ok(true),
        };
        // The walk ends at a failure, or once `stop` is set, whether or not
        // it takes anything meanwhile.
        let _ = self.try_for_each_subproblem(task, |s| {
            if stop.load(Ordering::Relaxed) {
                run.outcome = Ok(false);
            }
            if let (Ok(true), Some(s)) = (&run.outcome, s) {
                run.subs.push(s);
                if run.subs.len() == CHUNK {
                    run.outcome = run.flush();
                }
            }
            match run.outcome {
                Ok(true) => ControlFlow::Continue(()),
                _ => ControlFlow::Break(()),
            }
        });
        if matches!(run.outcome, Ok(true)) {
            run.outcome = run.flush();
        }
        Ok(run.outcome?.then(|| {
            let path = run.path.unwrap_or(Path::Scalar);
            (run.tally, run.checksum, path)
        }))
    }

    /// A task's share of the total: summed over every task, the job's
    /// total (what [`Plan::finish`] gives for the sum). A whole-board plan
    /// counts classes (`c1 + 2·c2 + 4·c4 + 8·c8`); every other plan
    /// counts weighted boards.
    pub fn total_of(&self, t: &Tally) -> Result<u128, CountOverflow> {
        if self.whole() {
            t.classes.total()
        } else {
            Ok(t.weighted)
        }
    }

    /// The class counts of the whole N from the tally of every task.
    pub fn finish(&self, t: &Tally) -> Result<Totals, PlanError> {
        if self.whole() {
            return Ok(t.classes);
        }
        if self.spec.strategy == Strategy::Synthetic {
            // No symmetry: the sum is both the total and the unique count.
            return Ok(Totals {
                c1: t.weighted,
                ..Totals::default()
            });
        }
        Totals::from_turns(t.weighted, t.half, t.quarter, t.classes.nodes)
            .map_err(|e| PlanError::Inconsistent(e.0))
    }
}

/// The join's state while a chunk of choices is counted: the piece's
/// join, and the halves' memory kept from one choice to the next.
#[derive(Default)]
struct JoinRun {
    join: Option<(u8, Arc<Join>)>,
    halves: Halves,
}

impl JoinRun {
    /// Counts east rows `choice` of piece `piece`.
    fn choice(&mut self, plan: &Plan, piece: u8, choice: u32) -> Result<PieceCounts, PlanError> {
        if self.join.as_ref().is_none_or(|(p, _)| *p != piece) {
            // This task is done with its last piece's tables.
            self.join = None;
            let j = plan
                .joins
                .get(plan.spec.n.n(), piece, plan.budget, plan.path)?;
            self.join = Some((piece, j));
        }
        let (_, join) = self.join.as_ref().expect("set above");
        Ok(join.count_choice(choice, &mut self.halves)?)
    }

    /// The path the join's pairs were counted on (the one it would take,
    /// if no choice came).
    fn path(&self, want: Option<Path>) -> Path {
        self.join
            .as_ref()
            .map_or_else(|| join::pair_path(want), |(_, j)| j.path())
    }
}

/// Subproblems counted together (their interiors and jobs in memory at
/// once): plenty to keep the lanes full, a few MB at most.
const CHUNK: usize = 4096;

/// A chunk's prefixes, frames and ring parts, counted together: their
/// interiors, the start below which each is counted, and each one's
/// place in the chunk.
#[derive(Default)]
struct Batch {
    interiors: Vec<Interior>,
    froms: Vec<Start>,
    at: Vec<usize>,
}

impl Batch {
    /// Adds the interior `it` of the chunk's subproblem `i`, counted below `from`.
    fn push(&mut self, it: Interior, from: Start, i: usize) {
        self.interiors.push(it);
        self.froms.push(from);
        self.at.push(i);
    }
}

/// A task being counted, chunk by chunk, in id order.
struct TaskRun<'a> {
    plan: &'a Plan,
    stop: &'a std::sync::atomic::AtomicBool,
    subs: Vec<Subproblem>,
    /// The join's state, kept from chunk to chunk (its piece's tables
    /// stay alive while the task needs them).
    joined: JoinRun,
    tally: Tally,
    /// FNV-1a over every subproblem's id and counts, in order.
    checksum: u64,
    /// The slowest path any chunk was counted on (the card, if one took
    /// part: see [`Path::with`]).
    path: Option<Path>,
    /// Still counting (`Ok(true)`), stopped (`Ok(false)`) or failed.
    outcome: Result<bool, PlanError>,
}

impl TaskRun<'_> {
    /// Counts the buffered subproblems into the tally and the checksum.
    fn flush(&mut self) -> Result<bool, PlanError> {
        let Some((counts, path)) = self
            .plan
            .count_all(&self.subs, &mut self.joined, self.stop)?
        else {
            return Ok(false);
        };
        self.path = Some(self.path.map_or(path, |p| p.with(path)));
        for (s, c) in self.subs.iter().zip(&counts) {
            for x in [s.id(), c.c1, c.c2, c.c4, c.c8, c.nodes] {
                for b in x.to_le_bytes() {
                    self.checksum = (self.checksum ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
                }
            }
            self.tally.add(s, c)?;
        }
        self.subs.clear();
        Ok(true)
    }
}

/// Rings of border lines a frame plan places: depth 1 is the 4 outer lines
/// (ring constellations), 2 the 8 lines of a carry-chain frame. Specs
/// stored before depth applied to frames carry other values; they meant 2.
fn border_depth(depth: u32) -> u32 {
    if depth == 1 {
        1
    } else {
        2
    }
}

/// Whether a queen in column `c` of the row below `cols` is safe from them.
fn safe_below(cols: &[u8], c: u8) -> bool {
    let row = cols.len();
    cols.iter()
        .enumerate()
        .all(|(r, &q)| q != c && row - r != usize::from(q.abs_diff(c)))
}

/// Runs `part` on each of the 1,024 slices of an enumeration (the values
/// of its first two positions, in id order), checking `stop` between
/// slices: no slice of a plan within the size limit takes long.
fn for_each_chunk(stop: &AtomicBool, mut part: impl FnMut(u64)) -> Result<(), PlanError> {
    for chunk in 0..1u64 << (2 * POS_BITS) {
        if stop.load(Ordering::Relaxed) {
            return Err(PlanError::Stopped);
        }
        part(chunk);
    }
    Ok(())
}

/// Every canonical frame (or ring) of `frames` in key order, with its weight
/// and queens, a slice of the key space at a time (`stop` is looked at
/// between slices).
fn for_each_border(
    frames: &Frames,
    stop: &AtomicBool,
    mut visit: impl FnMut(Frame, u32, usize),
) -> Result<(), PlanError> {
    let below = POS_BITS * (frames.lines() as u32 - 2);
    for_each_chunk(stop, |chunk| {
        frames.for_each_in(chunk << below, (chunk + 1) << below, &mut visit)
    })
}

/// Subproblems counted by orbit weight, as the summary's classes.
fn weight_classes(what: &str, by_weight: &[u64; 9]) -> Classes {
    [8, 4, 2, 1]
        .into_iter()
        .map(|w| (format!("{what} of weight {w}"), by_weight[w]))
        .collect()
}

/// Adds a subproblem to the last group when their ids agree above the low
/// `shift` bits (consecutive ids of one group), else starts a group.
fn add_to_group(groups: &mut Vec<Group>, id: u64, shift: u32, work: f64) {
    match groups.last_mut() {
        Some(g) if shift > 0 && g.lo >> shift == id >> shift => {
            g.hi = id + 1;
            g.count += 1;
            g.work += work;
        }
        _ => groups.push(Group {
            lo: id,
            hi: id + 1,
            count: 1,
            work,
        }),
    }
}

/// Estimated work of a prefix piece: the square root of the product of the
/// free columns left in each open row by the placed queens. Cheap, and it
/// ranks pieces by how constrained they are.
fn prefix_work(n: Size, prefix: &[u8]) -> f64 {
    let (mut l, mut d, mut r) = (0u32, 0u32, 0u32);
    for &c in prefix {
        let bit = 1u32 << c;
        (l, d, r) = ((l | bit) << 1, d | bit, (r | bit) >> 1);
    }
    let mut log = 0.0;
    for _ in prefix.len()..n.n() {
        log += f64::from((n.mask() & !(l | d | r)).count_ones().max(1)).ln();
        (l, r) = (l << 1, r >> 1);
    }
    (0.5 * log).exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tables of every piece of N=13 (seven pieces) built by four
    /// threads at once, each thread asking for the pieces in turn as tasks
    /// do: all get one join per piece, and it counts as one built alone.
    #[test]
    fn threads_that_need_a_piece_build_it_together_and_count_alike() {
        let (n, budget) = (13, Budget::default());
        let joins = Joins::default();
        let got: Vec<Vec<Arc<Join>>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        (0..whole_pieces(n))
                            .map(|p| joins.get(n, p as u8, budget, None).unwrap())
                            .collect()
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let mut halves = Halves::default();
        let mut total = 0;
        for p in 0..whole_pieces(n) {
            let alone = Shape::piece(n, p).0.build(budget).unwrap();
            let count = |j: &Join, halves: &mut Halves| -> Vec<u64> {
                j.choices()
                    .iter()
                    .map(|&(c, _)| j.count_choice(c, halves).unwrap().c1)
                    .collect()
            };
            let want = count(&alone, &mut halves);
            for thread in &got {
                assert_eq!(count(&thread[p], &mut halves), want, "piece {p}");
            }
            let (_, weight) = Shape::piece(n, p);
            let choices = alone.choices();
            total += want
                .iter()
                .zip(&choices)
                .map(|(c, &(_, w))| c * u64::from(w) * u64::from(weight))
                .sum::<u64>();
        }
        assert_eq!(u128::from(total), crate::known::known(13).unwrap().total);
        // One set of tables kept: the last piece's.
        assert_eq!(joins.state.lock().unwrap().kept.len(), JOINS_KEPT);
    }

    /// A piece past the budget fails for every thread that needs it, with
    /// the budget's limit, and is not built again for each of them.
    #[test]
    fn a_piece_past_the_budget_fails_for_every_thread_that_needs_it() {
        let budget = Budget {
            quarters: 100,
            ..Budget::default()
        };
        let joins = Joins::default();
        let answers: Vec<_> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|_| s.spawn(|| joins.get(14, 0, budget, None).map(drop)))
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        assert!(
            answers.iter().all(|a| *a == Err(TooLarge { limit: 100 })),
            "{answers:?}"
        );
        let s = joins.state.lock().unwrap();
        assert!(s.building.is_none() && s.kept.is_empty());
        assert_eq!(s.failed, Some((0, TooLarge { limit: 100 })));
    }
}
