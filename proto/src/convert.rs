//! Every conversion between the wire types (`v1::*`) and the domain types
//! of `nqueens-common` (plans, tasks, subproblems, tallies, 128-bit counts,
//! strategies, the check against the published counts), in one place,
//! each with a round-trip test below. `From`/`TryFrom` where the orphan
//! rule allows it (one side is a wire type, local to this crate), and the
//! named functions the crates call.
//!
//! Conversions of the coordinator's own types (its job and worker views,
//! leases, audits) live in `nqueens_coordinator::wire`: this crate cannot
//! depend on the coordinator. Conversions *from* the wire never trust the
//! sender: a subproblem is re-derived from its id by the plan and must
//! equal the payload sent.

use crate::v1;
use nqueens_common::engine::board::SizeError;
use nqueens_common::engine::symmetric::Turn;
use nqueens_common::plan::{Mode, Plan, PlanError, PlanSpec, Strategy, Subproblem, Tally, Task};
use nqueens_common::{Size, Totals};

/// What is wrong with a message received from the wire.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("message is not valid protobuf: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("field '{0}' is missing")]
    Missing(&'static str),
    #[error(
        "unknown strategy value {0}: expected STRATEGY_PREFIX, STRATEGY_FRAME, STRATEGY_RINGS, \
         STRATEGY_HALVES or STRATEGY_SYNTHETIC"
    )]
    Strategy(i32),
    #[error("unknown mode value {0}: expected MODE_BACKTRACK or MODE_JOIN")]
    Mode(i32),
    #[error(transparent)]
    Size(#[from] SizeError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("subproblem {0:#x}: the payload does not match what the id names")]
    Mismatch(u64),
    #[error("task: the range [{lo:#x}, {hi:#x}) is empty or reversed")]
    EmptyRange { lo: u64, hi: u64 },
}

impl From<Strategy> for v1::Strategy {
    fn from(s: Strategy) -> Self {
        match s {
            Strategy::Prefix => v1::Strategy::Prefix,
            Strategy::Frame => v1::Strategy::Frame,
            Strategy::Synthetic => v1::Strategy::Synthetic,
            Strategy::Rings => v1::Strategy::Rings,
            Strategy::Halves => v1::Strategy::Halves,
        }
    }
}

/// A strategy from the wire (an enum field arrives as its number).
pub fn strategy_from_wire(w: i32) -> Result<Strategy, WireError> {
    match v1::Strategy::try_from(w) {
        Ok(v1::Strategy::Prefix) => Ok(Strategy::Prefix),
        Ok(v1::Strategy::Frame) => Ok(Strategy::Frame),
        Ok(v1::Strategy::Synthetic) => Ok(Strategy::Synthetic),
        Ok(v1::Strategy::Rings) => Ok(Strategy::Rings),
        Ok(v1::Strategy::Halves) => Ok(Strategy::Halves),
        _ => Err(WireError::Strategy(w)),
    }
}

impl From<&PlanSpec> for v1::PlanSpec {
    fn from(s: &PlanSpec) -> Self {
        v1::PlanSpec {
            n: s.n.get(),
            strategy: v1::Strategy::from(s.strategy) as i32,
            depth: s.depth,
            tasks: s.tasks,
            mode: match s.mode {
                Mode::Backtrack => v1::Mode::Backtrack,
                Mode::Join => v1::Mode::Join,
            } as i32,
            cut: s.cut,
        }
    }
}

impl TryFrom<&v1::PlanSpec> for PlanSpec {
    type Error = WireError;
    fn try_from(w: &v1::PlanSpec) -> Result<Self, WireError> {
        let strategy = strategy_from_wire(w.strategy)?;
        let spec = PlanSpec {
            n: Size::new(w.n)?,
            strategy,
            depth: w.depth,
            tasks: w.tasks,
            mode: match v1::Mode::try_from(w.mode) {
                Ok(v1::Mode::Backtrack) => Mode::Backtrack,
                Ok(v1::Mode::Join) => Mode::Join,
                Err(_) => return Err(WireError::Mode(w.mode)),
            },
            cut: w.cut,
        };
        Plan::new(spec)?; // the spec itself must be valid (a known cut too)
        Ok(spec)
    }
}

/// A u128 from the wire (absent means 0, as proto3 leaves zero values out).
pub fn u128_from_wire(w: Option<&v1::U128>) -> u128 {
    w.map_or(0, u128::from)
}

/// A u128 on the wire.
impl From<u128> for v1::U128 {
    fn from(x: u128) -> Self {
        v1::U128 {
            hi: (x >> 64) as u64,
            lo: x as u64,
        }
    }
}

impl From<&v1::U128> for u128 {
    fn from(w: &v1::U128) -> Self {
        u128::from(w.hi) << 64 | u128::from(w.lo)
    }
}

/// The counts of a task result (elapsed time, solver version and checksum
/// are the caller's to fill in).
impl From<&Tally> for v1::TaskResult {
    fn from(t: &Tally) -> Self {
        let u = |x| Some(v1::U128::from(x));
        v1::TaskResult {
            c1: u(t.classes.c1),
            c2: u(t.classes.c2),
            c4: u(t.classes.c4),
            c8: u(t.classes.c8),
            nodes: u(t.classes.nodes),
            weighted: u(t.weighted),
            half: u(t.half),
            quarter: u(t.quarter),
            elapsed_ms: 0,
            solver_version: String::new(),
            checksum: 0,
        }
    }
}

/// The counts of a task result from the wire.
impl From<&v1::TaskResult> for Tally {
    fn from(r: &v1::TaskResult) -> Self {
        Tally {
            classes: Totals {
                c1: u128_from_wire(r.c1.as_ref()),
                c2: u128_from_wire(r.c2.as_ref()),
                c4: u128_from_wire(r.c4.as_ref()),
                c8: u128_from_wire(r.c8.as_ref()),
                nodes: u128_from_wire(r.nodes.as_ref()),
            },
            weighted: u128_from_wire(r.weighted.as_ref()),
            half: u128_from_wire(r.half.as_ref()),
            quarter: u128_from_wire(r.quarter.as_ref()),
        }
    }
}

/// The wire form of a subproblem.
impl From<&Subproblem> for v1::Subproblem {
    fn from(s: &Subproblem) -> Self {
        use v1::subproblem::Payload;
        let payload = match s {
            Subproblem::Whole => Payload::Whole(v1::Whole {}),
            Subproblem::Prefix { cols, .. } => Payload::Prefix(v1::Prefix {
                columns: cols.clone(),
            }),
            Subproblem::Frame { frame, weight } => Payload::Frame(v1::Frame {
                positions: frame.positions().to_vec(),
                weight: *weight,
            }),
            Subproblem::Symmetric { turn, first } => Payload::Symmetric(v1::Symmetric {
                turn: match turn {
                    Turn::Half => v1::Turn::Half,
                    Turn::Quarter => v1::Turn::Quarter,
                } as i32,
                first_column: (*first).into(),
            }),
            Subproblem::RingPart {
                ring, weight, part, ..
            } => Payload::RingPart(v1::RingPart {
                positions: ring.positions().to_vec(),
                weight: *weight,
                part: *part,
            }),
            Subproblem::Choice {
                piece,
                choice,
                weight,
            } => Payload::Choice(v1::Choice {
                piece: (*piece).into(),
                east_rows: *choice,
                weight: *weight,
            }),
        };
        v1::Subproblem {
            id: s.id(),
            payload: Some(payload),
        }
    }
}

/// A subproblem received from the wire, re-derived from its id by `plan`
/// and checked against the payload.
pub fn subproblem_from_wire(plan: &Plan, w: &v1::Subproblem) -> Result<Subproblem, WireError> {
    if w.payload.is_none() {
        return Err(WireError::Missing("payload"));
    }
    let s = plan.decode(w.id)?;
    if v1::Subproblem::from(&s) != *w {
        return Err(WireError::Mismatch(w.id));
    }
    Ok(s)
}

/// The wire form of a task of the plan `spec`.
pub fn task_to_wire(spec: &PlanSpec, t: &Task) -> v1::Task {
    v1::Task {
        plan: Some(spec.into()),
        index: t.index,
        lo: t.lo,
        hi: t.hi,
        skip: t.skip,
        take: t.take,
        subproblems: t.subproblems,
        work: t.work,
    }
}

/// A task received from the wire, with its plan's spec.
pub fn task_from_wire(w: &v1::Task) -> Result<(PlanSpec, Task), WireError> {
    let spec = PlanSpec::try_from(w.plan.as_ref().ok_or(WireError::Missing("plan"))?)?;
    if w.lo >= w.hi {
        return Err(WireError::EmptyRange { lo: w.lo, hi: w.hi });
    }
    let task = Task {
        index: w.index,
        lo: w.lo,
        hi: w.hi,
        skip: w.skip,
        take: w.take,
        subproblems: w.subproblems,
        work: w.work,
    };
    Ok((spec, task))
}

/// Whether counts equal the published ones (`None`: no published value,
/// or not final) as the wire says it.
pub fn known_to_wire(matches: Option<bool>) -> v1::KnownCheck {
    match matches {
        None => v1::KnownCheck::Unspecified,
        Some(true) => v1::KnownCheck::Matches,
        Some(false) => v1::KnownCheck::Differs,
    }
}

/// [`known_to_wire`] read back (an unknown value reads as `None`).
pub fn known_from_wire(w: i32) -> Option<bool> {
    match v1::KnownCheck::try_from(w) {
        Ok(v1::KnownCheck::Matches) => Some(true),
        Ok(v1::KnownCheck::Differs) => Some(false),
        _ => None,
    }
}

impl v1::Lease {
    /// The reference a worker names this lease by in heartbeats, reports
    /// and releases (task index 0 when the lease carries no task).
    pub fn lease_ref(&self) -> v1::LeaseRef {
        v1::LeaseRef {
            job_id: self.job_id,
            task_index: self.task.as_ref().map_or(0, |t| t.index),
            lease_id: self.lease_id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn plan(n: u32, strategy: Strategy) -> Plan {
        Plan::new(PlanSpec {
            n: Size::new(n).unwrap(),
            strategy,
            depth: match strategy {
                Strategy::Rings => 2,
                Strategy::Halves => 0,
                _ => 4,
            },
            tasks: 10,
            // The halves strategy is counted only by the join.
            mode: if strategy == Strategy::Halves {
                Mode::Join
            } else {
                Mode::Backtrack
            },
            cut: nqueens_common::plan::CUT,
        })
        .unwrap()
    }

    fn subproblems(p: &Plan) -> Vec<Subproblem> {
        let mut v = Vec::new();
        for t in &p.schedule().tasks {
            p.for_each_subproblem(&t, |s| v.push(s));
        }
        v
    }

    #[test]
    fn subproblems_round_trip_through_bytes() {
        for strategy in [
            Strategy::Prefix,
            Strategy::Frame,
            Strategy::Rings,
            Strategy::Halves,
        ] {
            for n in [3, 4, 9] {
                if strategy == Strategy::Halves && n < 4 {
                    continue; // the join takes boards from N=4
                }
                let p = plan(n, strategy);
                for s in subproblems(&p) {
                    let bytes = v1::Subproblem::from(&s).encode_to_vec();
                    let back = v1::Subproblem::decode(bytes.as_slice()).unwrap();
                    assert_eq!(subproblem_from_wire(&p, &back).unwrap(), s);
                }
            }
        }
    }

    #[test]
    fn corrupt_subproblems_are_refused() {
        for strategy in [Strategy::Frame, Strategy::Rings, Strategy::Halves] {
            corrupt_subproblems_of(&plan(9, strategy));
        }
    }

    fn corrupt_subproblems_of(p: &Plan) {
        let p = p.clone();
        let subs = subproblems(&p);
        let ids: std::collections::HashSet<u64> = subs.iter().map(Subproblem::id).collect();
        for s in subs.iter().step_by(5) {
            let bytes = v1::Subproblem::from(s).encode_to_vec();
            // Every single-bit flip and every truncation: refused, or (when
            // the flip lands on an unused bit of the encoding) the same
            // subproblem; never a different one accepted.
            let mut variants: Vec<Vec<u8>> = (0..bytes.len() * 8)
                .map(|b| {
                    let mut v = bytes.clone();
                    v[b / 8] ^= 1 << (b % 8);
                    v
                })
                .collect();
            variants.extend((0..bytes.len()).map(|k| bytes[..k].to_vec()));
            for v in variants {
                if let Ok(w) = v1::Subproblem::decode(v.as_slice()) {
                    if let Ok(got) = subproblem_from_wire(&p, &w) {
                        assert!(ids.contains(&got.id()));
                        assert_eq!(v1::Subproblem::from(&got), w);
                    }
                }
            }
        }
        // A payload that disagrees with its id.
        let mut w = v1::Subproblem::from(&subs[0]);
        w.id = subs[1].id();
        assert!(matches!(
            subproblem_from_wire(&p, &w),
            Err(WireError::Mismatch(_))
        ));
        w.payload = None;
        assert!(matches!(
            subproblem_from_wire(&p, &w),
            Err(WireError::Missing("payload"))
        ));
    }

    #[test]
    fn counts_round_trip_at_full_width() {
        for x in [
            0,
            1,
            u128::from(u64::MAX),
            u128::from(u64::MAX) + 1,
            u128::MAX,
        ] {
            assert_eq!(u128_from_wire(Some(&v1::U128::from(x))), x);
        }
        let p = plan(9, Strategy::Frame);
        let t = p.count_task(&p.schedule().tasks.get(0).unwrap()).unwrap();
        assert_eq!(Tally::from(&v1::TaskResult::from(&t)), t);
    }

    #[test]
    fn tasks_round_trip_and_bad_specs_are_refused() {
        let p = plan(10, Strategy::Frame);
        for t in &p.schedule().tasks {
            let w = task_to_wire(&p.spec, &t);
            let back = v1::Task::decode(w.encode_to_vec().as_slice()).unwrap();
            assert_eq!(task_from_wire(&back).unwrap(), (p.spec, t));
        }
        let mut spec = v1::PlanSpec::from(&p.spec);
        spec.n = 40;
        assert!(matches!(PlanSpec::try_from(&spec), Err(WireError::Size(_))));
        spec.n = 10;
        spec.strategy = 9;
        assert!(matches!(
            PlanSpec::try_from(&spec),
            Err(WireError::Strategy(9))
        ));
        spec.strategy = v1::Strategy::Frame as i32;
        spec.mode = 7;
        assert!(matches!(PlanSpec::try_from(&spec), Err(WireError::Mode(7))));
        spec.mode = v1::Mode::Backtrack as i32;
        spec.strategy = v1::Strategy::Halves as i32;
        assert!(matches!(
            PlanSpec::try_from(&spec),
            Err(WireError::Plan(PlanError::HalvesByBacktracking))
        ));
        spec.mode = v1::Mode::Join as i32;
        assert!(matches!(
            PlanSpec::try_from(&spec),
            Err(WireError::Plan(PlanError::HalvesDepth(4)))
        ));
        spec.depth = 0;
        let halves = PlanSpec::try_from(&spec).unwrap();
        assert_eq!(halves.cut, nqueens_common::plan::CUT);
        // A spec journaled before plans named their cut was cut the first
        // way; a cut from a newer version is refused.
        spec.cut = 0;
        assert_eq!(PlanSpec::try_from(&spec).unwrap().cut, 0);
        spec.cut = 1 << 20;
        assert!(matches!(
            PlanSpec::try_from(&spec),
            Err(WireError::Plan(PlanError::UnknownCut(_)))
        ));
        spec.cut = halves.cut;
        assert_eq!(
            (halves.strategy, halves.mode),
            (Strategy::Halves, Mode::Join)
        );
        spec.strategy = v1::Strategy::Prefix as i32;
        spec.mode = v1::Mode::Backtrack as i32;
        spec.depth = 0;
        assert!(matches!(
            PlanSpec::try_from(&spec),
            Err(WireError::Plan(PlanError::BadDepth(0)))
        ));
    }

    #[test]
    fn strategies_and_plan_specs_round_trip() {
        for strategy in [Strategy::Prefix, Strategy::Frame, Strategy::Rings] {
            let w = v1::Strategy::from(strategy);
            assert_eq!(strategy_from_wire(w as i32).unwrap(), strategy);
            for (n, depth, tasks) in [(1, 4, 1), (12, 3, 40), (32, 2, 1_000_000)] {
                let spec = PlanSpec {
                    n: Size::new(n).unwrap(),
                    strategy,
                    // A rings plan places 1 to 3 rows inside each ring.
                    depth: if strategy == Strategy::Rings {
                        1 + depth % 3
                    } else {
                        depth
                    },
                    tasks,
                    mode: Mode::Backtrack,
                    cut: nqueens_common::plan::CUT,
                };
                let w = v1::PlanSpec::from(&spec);
                let back = v1::PlanSpec::decode(w.encode_to_vec().as_slice()).unwrap();
                assert_eq!(PlanSpec::try_from(&back).unwrap(), spec);
            }
        }
        for bad in [v1::Strategy::Unspecified as i32, 7, -1] {
            assert!(matches!(strategy_from_wire(bad), Err(WireError::Strategy(b)) if b == bad));
        }
    }

    #[test]
    fn a_real_tasks_counts_round_trip_through_bytes() {
        for x in [0, 7, u128::from(u64::MAX) + 5, u128::MAX] {
            assert_eq!(u128::from(&v1::U128::from(x)), x);
        }
        assert_eq!(u128_from_wire(None), 0);
        let p = plan(10, Strategy::Prefix);
        let t = p.count_task(&p.schedule().tasks.get(1).unwrap()).unwrap();
        let w = v1::TaskResult::from(&t);
        let back = v1::TaskResult::decode(w.encode_to_vec().as_slice()).unwrap();
        assert_eq!(Tally::from(&back), t);
    }

    #[test]
    fn the_known_check_round_trips() {
        for m in [None, Some(true), Some(false)] {
            assert_eq!(known_from_wire(known_to_wire(m) as i32), m);
        }
        assert_eq!(known_from_wire(99), None);
    }

    #[test]
    fn a_lease_names_its_task() {
        let p = plan(9, Strategy::Frame);
        let t = p.schedule().tasks.get(2).unwrap();
        let mut l = v1::Lease {
            job_id: 5,
            task: Some(task_to_wire(&p.spec, &t)),
            lease_id: 0xfeed,
            deadline_unix_ms: 1,
            count_on: 0,
        };
        let r = l.lease_ref();
        assert_eq!((r.job_id, r.task_index, r.lease_id), (5, t.index, 0xfeed));
        l.task = None;
        assert_eq!(l.lease_ref().task_index, 0);
    }
}
