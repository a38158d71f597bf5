//! Plans: exact for both strategies, deterministic, ids that round-trip and
//! catch forgeries, tasks that partition the enumeration.

use nqueens_common::engine::lanes::Path;
use nqueens_common::known::known;
use nqueens_common::plan::solve::solve_plan;
use nqueens_common::plan::{Kind, Mode, Plan, PlanError, PlanSpec, Strategy, Subproblem, Tally};
use nqueens_common::Size;
use proptest::prelude::*;

fn spec(n: u32, strategy: Strategy, depth: u32, tasks: u64) -> PlanSpec {
    PlanSpec::backtracking(Size::new(n).unwrap(), strategy, depth, tasks)
}

/// A plan of every kind of subproblem: prefixes, rings, frames, ring parts.
const EVERY_KIND: [(Strategy, u32); 4] = [
    (Strategy::Prefix, 3),
    (Strategy::Frame, 1),
    (Strategy::Frame, 2),
    (Strategy::Rings, 2),
];

fn all_ids(plan: &Plan) -> Vec<u64> {
    let mut ids = Vec::new();
    for t in &plan.schedule().tasks {
        plan.for_each_subproblem(&t, |s| ids.push(s.id()));
    }
    ids
}

fn assert_exact(plan: &Plan) {
    let n = plan.spec.n.get();
    let s = solve_plan(plan, &plan.schedule(), 2).unwrap();
    let k = known(n).unwrap();
    assert_eq!(s.total().unwrap(), k.total, "total {:?}", plan.spec);
    assert_eq!(s.unique().unwrap(), k.unique, "unique {:?}", plan.spec);
}

#[test]
fn prefix_plans_are_exact_at_several_depths() {
    for n in 1..=15 {
        for depth in [2, 3, 5] {
            assert_exact(&Plan::new(spec(n, Strategy::Prefix, depth, 64)).unwrap());
        }
    }
}

#[test]
fn frame_plans_are_exact() {
    for n in 1..=15 {
        for depth in [1, 2] {
            assert_exact(&Plan::new(spec(n, Strategy::Frame, depth, 200)).unwrap());
        }
    }
    // Specs stored before depth applied to frames (depth 0 or 3..=11)
    // still plan 8-line frames.
    let legacy = Plan::new(spec(12, Strategy::Frame, 0, 20)).unwrap();
    let frames = Plan::new(spec(12, Strategy::Frame, 2, 20)).unwrap();
    assert_eq!(all_ids(&legacy), all_ids(&frames));
    assert_exact(&legacy);
}

/// Rings cut into parts count exactly at every cut, with the nodes of the
/// uncut rings (the queens above each part's start aside) and the same
/// classes.
#[test]
fn ring_parts_are_exact_at_every_cut() {
    for n in 1..=14 {
        let uncut = solve_plan_of(n, Strategy::Frame, 1);
        for depth in 1..=3 {
            let plan = Plan::new(spec(n, Strategy::Rings, depth, 300)).unwrap();
            assert_exact(&plan);
            let parts = solve_plan(&plan, &plan.schedule(), 2).unwrap();
            let classes = |s: &nqueens_common::plan::solve::Solution| {
                (s.counts.c1, s.counts.c2, s.counts.c4, s.counts.c8)
            };
            assert_eq!(classes(&parts), classes(&uncut), "N={n} depth {depth}");
            assert!(
                parts.counts.nodes <= uncut.counts.nodes,
                "N={n} depth {depth}"
            );
        }
    }
    // More rows placed, more parts (at N=12: every ring has free rows to spare).
    let parts = |depth| {
        Plan::new(spec(12, Strategy::Rings, depth, 1))
            .unwrap()
            .schedule()
            .subproblems
    };
    assert!(parts(1) < parts(2) && parts(2) < parts(3));
    for depth in [0, 4] {
        assert_eq!(
            Plan::new(spec(12, Strategy::Rings, depth, 1)).err(),
            Some(PlanError::BadRingSplit(depth))
        );
    }
}

fn solve_plan_of(n: u32, strategy: Strategy, depth: u32) -> nqueens_common::plan::solve::Solution {
    let plan = Plan::new(spec(n, strategy, depth, 50)).unwrap();
    solve_plan(&plan, &plan.schedule(), 2).unwrap()
}

/// N=16 by both decompositions (seconds): kept apart so it is easy to spot.
#[test]
fn plans_are_exact_for_16() {
    assert_exact(&Plan::new(spec(16, Strategy::Frame, 1, 500)).unwrap());
    assert_exact(&Plan::new(spec(16, Strategy::Prefix, 4, 500)).unwrap());
    assert_exact(&Plan::new(spec(16, Strategy::Rings, 2, 500)).unwrap());
}

#[test]
fn frame_classes_match_the_direct_solver() {
    for n in [8, 10, 12, 13] {
        let plan = Plan::new(spec(n, Strategy::Frame, 0, 50)).unwrap();
        let frame = solve_plan(&plan, &plan.schedule(), 2).unwrap();
        let direct = nqueens_common::solve(Size::new(n).unwrap(), 2).unwrap();
        let classes = |t: &nqueens_common::Totals| (t.c1, t.c2, t.c4, t.c8);
        assert_eq!(classes(&frame.counts), classes(&direct.counts), "N={n}");
    }
}

#[test]
fn small_boards_fall_back_to_one_subproblem() {
    for strategy in [Strategy::Prefix, Strategy::Frame] {
        for n in 1..=3 {
            let plan = Plan::new(spec(n, strategy, 2, 10)).unwrap();
            assert_eq!(plan.schedule().subproblems, 1);
            assert_eq!(all_ids(&plan), vec![Subproblem::Whole.id()]);
        }
    }
}

#[test]
fn plans_are_deterministic() {
    for (strategy, depth) in [(Strategy::Prefix, 4), (Strategy::Frame, 0)] {
        let a = Plan::new(spec(12, strategy, depth, 100)).unwrap();
        let b = Plan::new(spec(12, strategy, depth, 100)).unwrap();
        assert_eq!(a.schedule().tasks, b.schedule().tasks);
        assert_eq!(all_ids(&a), all_ids(&b));
    }
}

#[test]
fn tasks_partition_the_enumeration_in_id_order() {
    for (strategy, depth) in [
        (Strategy::Prefix, 3),
        (Strategy::Prefix, 6),
        (Strategy::Frame, 0),
    ] {
        let whole = Plan::new(spec(11, strategy, depth, 1)).unwrap();
        let many = Plan::new(spec(11, strategy, depth, 300)).unwrap();
        let ids = all_ids(&many);
        let many = many.schedule();
        assert_eq!(ids, all_ids(&whole), "{strategy} depth {depth}");
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "sorted and distinct");
        assert_eq!(ids.len() as u64, many.subproblems);
        let per_task: u64 = many.tasks.iter().map(|t| t.subproblems).sum();
        assert_eq!(per_task, many.subproblems);
        assert!(many.tasks.len() > 50, "{} tasks", many.tasks.len());
    }
}

#[test]
fn ids_decode_to_their_subproblems_and_forgeries_are_refused() {
    for (strategy, depth) in [
        (Strategy::Prefix, 4),
        (Strategy::Frame, 0),
        (Strategy::Rings, 2),
    ] {
        let plan = Plan::new(spec(10, strategy, depth, 20)).unwrap();
        let mut subs = Vec::new();
        for t in &plan.schedule().tasks {
            plan.for_each_subproblem(&t, |s| subs.push(s));
        }
        for s in &subs {
            assert_eq!(&plan.decode(s.id()).unwrap(), s);
        }
        let ids: std::collections::HashSet<u64> = subs.iter().map(Subproblem::id).collect();
        // Flip each low bit of some ids: the result is either another real
        // subproblem of the plan or refused, never a new one.
        for s in subs.iter().step_by(7) {
            for bit in 0..40 {
                let forged = s.id() ^ (1 << bit);
                if let Ok(d) = plan.decode(forged) {
                    assert!(ids.contains(&d.id()), "forged id {forged:#x} accepted");
                }
            }
        }
    }
    let prefix = Plan::new(spec(10, Strategy::Prefix, 4, 20)).unwrap();
    let frame_id = (Kind::Frame as u64) << 60;
    assert!(matches!(
        prefix.decode(frame_id),
        Err(PlanError::WrongKind(_))
    ));
    // A ring's part past its last is refused, and a frames plan has no
    // ring parts.
    let rings = Plan::new(spec(10, Strategy::Rings, 1, 20)).unwrap();
    let mut last = None;
    for t in &rings.schedule().tasks {
        rings.for_each_subproblem(&t, |s| {
            if matches!(s, Subproblem::RingPart { .. }) {
                last = Some(s.id());
            }
        });
    }
    let past = last.expect("ring parts") + 1;
    assert_eq!(rings.decode(past).err(), Some(PlanError::BadPart(past)));
    let frames = Plan::new(spec(10, Strategy::Frame, 1, 20)).unwrap();
    assert!(matches!(
        frames.decode(past - 1),
        Err(PlanError::WrongKind(_))
    ));
}

#[test]
fn bad_specs_are_refused() {
    assert_eq!(
        Plan::new(spec(10, Strategy::Prefix, 1, 5)).unwrap_err(),
        PlanError::BadDepth(1)
    );
    assert_eq!(
        Plan::new(spec(10, Strategy::Prefix, 12, 5)).unwrap_err(),
        PlanError::BadDepth(12)
    );
    assert_eq!(
        Plan::new(spec(10, Strategy::Frame, 0, 0)).unwrap_err(),
        PlanError::NoTasks
    );
}

#[test]
fn task_work_estimates_cover_the_plan() {
    let plan = Plan::new(spec(13, Strategy::Frame, 0, 100))
        .unwrap()
        .schedule();
    let sum: f64 = plan.tasks.iter().map(|t| t.work).sum();
    assert!((sum - plan.work).abs() / plan.work < 1e-9);
    assert!(plan.tasks.iter().all(|t| t.work > 0.0));
}

#[test]
fn tallies_merge_like_one_tally() {
    let plan = Plan::new(spec(9, Strategy::Frame, 0, 20)).unwrap();
    let mut merged = Tally::default();
    for t in &plan.schedule().tasks {
        merged.merge(&plan.count_task(&t).unwrap()).unwrap();
    }
    let one = Plan::new(spec(9, Strategy::Frame, 0, 1)).unwrap();
    assert_eq!(
        merged,
        one.count_task(&one.schedule().tasks.get(0).unwrap())
            .unwrap()
    );
}

/// A spec of strategy number `kind` (prefix, frame, rings), `depth` brought
/// into the strategy's range.
fn any_spec(n: u32, kind: usize, depth: u32, tasks: u64) -> PlanSpec {
    match kind {
        0 => spec(n, Strategy::Prefix, depth, tasks),
        1 => spec(n, Strategy::Frame, depth, tasks),
        _ => spec(n, Strategy::Rings, 1 + depth % 3, tasks),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// The table a coordinator keeps derives every task as the list does,
    /// and the tasks tile the plan's subproblems in id order.
    #[test]
    fn a_task_table_derives_the_listed_tasks(n in 6u32..=13, depth in 2u32..=6, tasks in 1u64..100_000, kind in 0..3usize) {
        let plan = Plan::new(any_spec(n, kind, depth, tasks)).unwrap();
        let s = plan.schedule();
        let table = &s.tasks;
        let mut listed = 0;
        for (i, t) in table.iter().enumerate() {
            prop_assert_eq!(t.index, i as u64);
            prop_assert_eq!(table.get(i as u64), Some(t));
            listed += 1;
        }
        prop_assert_eq!(table.len(), listed);
        prop_assert_eq!(table.get(table.len()), None);
        let counted: u64 = table.iter().map(|t| t.subproblems).sum();
        prop_assert_eq!(counted, s.subproblems);
        let mut ids = Vec::new();
        for t in table {
            plan.for_each_subproblem(&t, |s| ids.push(s.id()));
        }
        prop_assert!(ids.windows(2).all(|w| w[0] < w[1]), "in id order, none twice");
        prop_assert_eq!(ids.len() as u64, s.subproblems);
    }

    #[test]
    fn random_plans_are_exact(n in 4u32..=11, depth in 2u32..=8, tasks in 1u64..500, kind in 0..3usize) {
        let plan = Plan::new(any_spec(n, kind, depth, tasks)).unwrap();
        let s = solve_plan(&plan, &plan.schedule(), 1).unwrap();
        let k = known(n).unwrap();
        prop_assert_eq!((s.total().unwrap(), s.unique().unwrap()), (k.total, k.unique));
    }
}

/// Counts `n` through a plan of `strategy`/`depth` on `path` (when this
/// CPU and the plan's subproblems allow it) and checks it against OEIS.
fn exact_on(n: u32, strategy: Strategy, depth: u32, path: Path) {
    let plan = Plan::new(spec(n, strategy, depth, 64))
        .unwrap()
        .with_path(Some(path));
    let s = solve_plan(&plan, &plan.schedule(), 2).unwrap();
    let k = known(n).unwrap();
    assert_eq!(
        (s.total().unwrap(), s.unique().unwrap()),
        (k.total, k.unique),
        "N={n} {strategy} depth {depth} on {}",
        s.core
    );
    if s.core != path.name() && n >= 6 {
        println!(
            "N={n} {strategy} depth {depth}: {} not run here, counted on {}",
            path.name(),
            s.core
        );
    }
}

/// Both decompositions, at every depth, on every path this CPU has.
#[test]
fn both_strategies_are_exact_on_every_path_up_to_13() {
    for path in Path::ALL {
        if !path.supported() {
            println!("path {} skipped: this CPU lacks it", path.name());
            continue;
        }
        for n in 4..=13 {
            for (strategy, depth) in EVERY_KIND {
                exact_on(n, strategy, depth, path);
            }
        }
    }
}

/// `cargo test --profile ci -p nqueens-common --test plan -- --ignored`:
/// N=14..=17 by both strategies, and N=18, on every path (minutes).
#[test]
#[ignore]
fn both_strategies_are_exact_on_every_path_14_to_18() {
    for path in Path::available() {
        for n in 14..=17 {
            for (strategy, depth) in [
                (Strategy::Prefix, 4),
                (Strategy::Frame, 1),
                (Strategy::Frame, 2),
                (Strategy::Rings, 3),
            ] {
                exact_on(n, strategy, depth, path);
            }
        }
        exact_on(18, Strategy::Frame, 1, path);
        exact_on(18, Strategy::Rings, 2, path);
    }
}

/// N=19 and N=20 on the fastest path (tens of minutes on 2 cores).
#[test]
#[ignore]
fn rings_are_exact_for_19_and_20() {
    for n in [19, 20] {
        exact_on(n, Strategy::Frame, 1, Path::fastest());
    }
}

/// Default task counts give tasks of about 2^(N-18) core-seconds: a few
/// dozen at N=18 (each about a second on one core, so a task's round trip
/// is a small share of it), growing with N up to the cap.
#[test]
fn default_task_counts_grow_with_n_between_their_bounds() {
    use nqueens_common::plan::{default_tasks, MAX_DEFAULT_TASKS};
    let tasks = |n: u32| default_tasks(Size::new(n).unwrap());
    assert_eq!(tasks(18), 40);
    assert_eq!(tasks(4), 16, "small jobs still spread over workers");
    assert_eq!(tasks(32), MAX_DEFAULT_TASKS);
    for n in 4..32 {
        assert!(tasks(n) <= tasks(n + 1), "N={n}");
    }
    // Per task, the model's work doubles per N until the cap, then grows 7.5×.
    assert!(tasks(22) > 20 * tasks(18));
}

#[test]
fn a_synthetic_plan_derives_its_tasks_and_answers_a_fixed_function_of_the_index() {
    use nqueens_common::plan::{synthetic_answer, synthetic_sum, MAX_TASKS};
    let plan = Plan::new(spec(8, Strategy::Synthetic, 0, 1_000)).unwrap();
    assert_eq!(plan.derived_tasks(), Some(1_000));
    let listed = plan.schedule().tasks;
    assert_eq!(listed.len(), 1_000);
    let mut sum = Tally::default();
    for (i, t) in listed.iter().enumerate() {
        assert_eq!(t, plan.derived_task(i as u64), "listed = derived");
        let (tally, _) = plan.count_task_checked(&t).unwrap();
        assert_eq!(tally.weighted, synthetic_answer(i as u64));
        assert!((1..=1 << 20).contains(&tally.weighted));
        sum.merge(&tally).unwrap();
    }
    let totals = plan.finish(&sum).unwrap();
    assert_eq!(totals.total().unwrap(), synthetic_sum(1_000));
    assert_ne!(
        synthetic_answer(0),
        synthetic_answer(1),
        "the index matters"
    );
    assert_eq!(
        plan.estimate(1, std::time::Duration::from_secs(1)).err(),
        Some(PlanError::Synthetic)
    );
    assert_eq!(
        Plan::new(spec(8, Strategy::Synthetic, 0, MAX_TASKS + 1)).err(),
        Some(PlanError::TooManySynthetic(MAX_TASKS + 1))
    );
    assert_eq!("synthetic".parse::<Strategy>(), Ok(Strategy::Synthetic));
}

/// Without a strategy, a plan of N takes frames (rings, at their default
/// depth) while rings are many enough, then rings cut into parts: rings'
/// nodes, where 8-line frames would count about twice as many. In join
/// mode: whole boards cut into halves up to N=21 (their tables past it
/// outgrow the default memory bound), then ring parts.
#[test]
fn the_default_strategy_is_rings_cut_into_parts_beyond_21() {
    use nqueens_common::plan::{default_depth, default_strategy, RING_DEFAULT_MAX_N};
    let size = |n| Size::new(n).unwrap();
    for n in 1..=RING_DEFAULT_MAX_N {
        assert_eq!(default_strategy(size(n), Mode::Backtrack), Strategy::Frame);
    }
    for n in RING_DEFAULT_MAX_N + 1..=32 {
        let strategy = default_strategy(size(n), Mode::Backtrack);
        assert_eq!(strategy, Strategy::Rings);
        let depth = default_depth(strategy, size(n));
        assert!(Plan::new(spec(n, strategy, depth, 1000)).is_ok(), "N={n}");
    }
    for n in 1..=32 {
        let strategy = default_strategy(size(n), Mode::Join);
        let want = match n {
            4..=21 => Strategy::Halves,
            1..=3 => Strategy::Frame,
            _ => Strategy::Rings,
        };
        assert_eq!(strategy, want, "N={n}");
        let depth = default_depth(strategy, size(n));
        let join = PlanSpec {
            mode: Mode::Join,
            ..spec(n, strategy, depth, 1000)
        };
        assert!(Plan::new(join).is_ok(), "N={n}");
    }
}

/// Without a mode, N=18 to 21 are joined by halves (faster, and their
/// tables fit the default bound), N=25 to 28 join their ring parts (as
/// fast or faster by the estimate, and their tables fit); the others
/// backtrack.
#[test]
fn the_default_mode_is_the_join_where_it_is_faster_and_fits() {
    use nqueens_common::plan::{default_mode, default_strategy, JOIN_DEFAULT, JOIN_RINGS_DEFAULT};
    for n in 1..=32 {
        let size = Size::new(n).unwrap();
        let mode = default_mode(size);
        let want = if (18..=21).contains(&n) || (25..=28).contains(&n) {
            Mode::Join
        } else {
            Mode::Backtrack
        };
        assert_eq!(mode, want, "N={n}");
        if JOIN_DEFAULT.contains(&n) {
            assert_eq!(default_strategy(size, mode), Strategy::Halves, "N={n}");
            // The halves' tables fit the default bound.
            let (shape, _) = nqueens_common::engine::join::Shape::piece(n as usize, 0);
            assert!(shape.build(Default::default()).is_ok(), "N={n}");
        }
        if JOIN_RINGS_DEFAULT.contains(&n) {
            assert_eq!(default_strategy(size, mode), Strategy::Rings, "N={n}");
        }
    }
}

fn halves(n: u32, tasks: u64) -> Plan {
    Plan::new(PlanSpec {
        mode: Mode::Join,
        ..spec(n, Strategy::Halves, 0, tasks)
    })
    .unwrap()
}

/// The halves plan (whole boards' choices of east rows, counted by the
/// join) is exact, total and unique, from N=4 to N=16, whatever its tasks.
#[test]
fn halves_plans_are_exact() {
    for n in 4..=16 {
        for tasks in [1, 7, 200] {
            assert_exact(&halves(n, tasks));
        }
    }
}

/// Every plan can be counted in either mode: the join on the interiors
/// of prefixes, frames and ring parts agrees with the published counts,
/// as the backtracking does, on each path of the join's pair loop.
#[test]
fn every_strategy_is_exact_in_join_mode() {
    for n in 4..=13 {
        for (strategy, depth) in EVERY_KIND {
            for path in [Path::Scalar, Path::fastest()] {
                let plan = Plan::new(PlanSpec {
                    mode: Mode::Join,
                    ..spec(n, strategy, depth, 16)
                })
                .unwrap()
                .with_path(Some(path));
                assert_exact(&plan);
            }
        }
    }
}

/// A halves plan's ids are stable and decode to what its tasks list;
/// any other id (a choice off the list, a missing piece, a forged weight
/// or a kind of another plan) is refused, and the halves strategy takes
/// neither backtracking nor boards past the join's size.
#[test]
fn halves_ids_decode_and_forgeries_are_refused() {
    for n in [9, 12, 13] {
        let plan = halves(n, 50);
        let mut listed = Vec::new();
        for t in &plan.schedule().tasks {
            plan.for_each_subproblem(&t, |s| listed.push(s));
        }
        assert_eq!(
            all_ids(&halves(n, 50)),
            listed.iter().map(|s| s.id()).collect::<Vec<_>>()
        );
        let mut ids = std::collections::HashSet::new();
        for s in &listed {
            assert_eq!(plan.decode(s.id()).unwrap(), *s, "N={n}");
            assert!(ids.insert(s.id()), "N={n}: id {:#x} listed twice", s.id());
        }
        let choices: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|id| id >> 60 == Kind::Choice as u64)
            .collect();
        // Every other value of the low 20 bits of each piece is refused.
        let mut refused = 0;
        for piece in 0..n as u64 / 2 + 2 {
            for low in 0..1u64 << n.min(14) {
                let id = (Kind::Choice as u64) << 60 | piece << 32 | low;
                match plan.decode(id) {
                    Ok(_) => assert!(choices.contains(&id), "N={n}: {id:#x} decoded"),
                    Err(e) => {
                        assert!(matches!(e, PlanError::BadChoice(_)), "{e}");
                        refused += 1;
                    }
                }
            }
        }
        assert!(refused > 0);
        let frame_id = (Kind::Frame as u64) << 60 | 1;
        assert!(matches!(
            plan.decode(frame_id),
            Err(PlanError::WrongKind(_))
        ));
    }
    assert_eq!(
        Plan::new(spec(12, Strategy::Halves, 0, 10)).err(),
        Some(PlanError::HalvesByBacktracking)
    );
    for n in [1, 3, 25, 32] {
        let e = Plan::new(PlanSpec {
            mode: Mode::Join,
            ..spec(n, Strategy::Halves, 0, 10)
        });
        assert_eq!(e.err(), Some(PlanError::HalvesSize(n)));
    }
    let e = Plan::new(PlanSpec {
        mode: Mode::Join,
        ..spec(12, Strategy::Synthetic, 0, 10)
    });
    assert_eq!(e.err(), Some(PlanError::SyntheticMode));
    let e = Plan::new(PlanSpec {
        mode: Mode::Join,
        ..spec(12, Strategy::Halves, 2, 10)
    });
    assert_eq!(e.err(), Some(PlanError::HalvesDepth(2)));
}

/// A join plan whose tables do not fit its budget is refused with the
/// join's error, never counted wrong: and a larger budget counts it.
#[test]
fn a_join_plan_past_its_budget_is_refused_then_counted_with_more() {
    use nqueens_common::engine::join::Budget;
    let small = Budget {
        quarters: 100,
        halves: 1 << 20,
        threads: 1,
    };
    let plan = halves(14, 10).with_budget(small);
    let e = solve_plan(&plan, &plan.schedule(), 2).unwrap_err();
    assert!(matches!(e, PlanError::Join(_)), "{e}");
    assert_exact(&halves(14, 10).with_budget(Budget::from_bytes(64 << 20, 2)));
}

/// `--tasks T` makes T tasks where the plan has the subproblems for them; a job planned with the first cut (`cut` 0, what a
/// journal written before the field holds) keeps exactly its tasks.
#[test]
fn a_plan_has_the_tasks_asked_for_and_the_first_cut_keeps_its_own() {
    let halves = PlanSpec {
        mode: Mode::Join,
        ..spec(18, Strategy::Halves, 0, 2000)
    };
    let cases = [
        (spec(17, Strategy::Frame, 1, 2000), 1510),
        (spec(20, Strategy::Prefix, 4, 2000), 1242),
        (halves, 2001),
    ];
    for (asked, first_cut) in cases {
        let tasks = Plan::new(asked).unwrap().schedule().tasks.len();
        assert_eq!(tasks, 2000, "{asked:?}");
        let old = PlanSpec { cut: 0, ..asked };
        let tasks = Plan::new(old).unwrap().schedule().tasks.len();
        assert_eq!(tasks, first_cut, "{old:?}");
    }
    // Every subproblem its own task when there are fewer than asked.
    let few = Plan::new(spec(14, Strategy::Frame, 1, 2000))
        .unwrap()
        .schedule();
    assert_eq!(few.tasks.len(), few.subproblems);
    // A cut this version does not know is refused.
    let unknown = PlanSpec {
        cut: nqueens_common::plan::CUT + 1,
        ..spec(12, Strategy::Frame, 1, 10)
    };
    assert!(Plan::new(unknown).is_err());
}

/// A task over every id there is (as a hostile coordinator may send):
/// only this plan's own kinds are walked, so the plan is counted once,
/// not once more as a whole search or a prefix walk.
#[test]
fn a_task_over_every_id_counts_the_plan_once() {
    for (strategy, depth) in EVERY_KIND {
        let plan = Plan::new(spec(8, strategy, depth, 4)).unwrap();
        let everything = nqueens_common::plan::Task {
            index: 0,
            lo: 0,
            hi: u64::MAX,
            skip: 0,
            take: u64::MAX,
            subproblems: 1,
            work: 1.0,
        };
        let tally = plan.count_task(&everything).unwrap();
        let totals = plan.finish(&tally).unwrap();
        assert_eq!(
            (totals.total().unwrap(), totals.unique().unwrap()),
            (92, 12),
            "{strategy:?}"
        );
    }
}

/// A task that takes nothing, or skips past everything, over the ids of
/// N=32's deepest prefix plan (about 10^13 placements to walk) ends at
/// once: once it has taken its share, or once it is stopped, whether or
/// not it has taken anything.
#[test]
fn a_walk_that_takes_nothing_ends_when_done_or_stopped() {
    let plan = Plan::new(spec(32, Strategy::Prefix, 11, 1)).unwrap();
    let kind = (Kind::Prefix as u64) << 60;
    let task = move |skip, take| nqueens_common::plan::Task {
        index: 0,
        lo: kind,
        hi: 2 * kind,
        skip,
        take,
        subproblems: 1,
        work: 1.0,
    };
    let (ended, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let nothing = plan.count_task(&task(0, 0)).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(true);
        let stopped = plan.count_task_until(&task(u64::MAX, u64::MAX), &stop);
        ended.send((nothing, stopped.unwrap())).unwrap();
    });
    let limit = std::time::Duration::from_secs(120);
    let (nothing, stopped) = finished.recv_timeout(limit).expect("the walk went on");
    assert_eq!(nothing, Tally::default());
    assert_eq!(stopped, None);
}
