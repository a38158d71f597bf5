//! What the GPU tests share: plans and pieces of plans counted on a
//! device and on the CPU.

use nqueens_common::engine::counts::PieceCounts;
use nqueens_common::engine::device::Device;
use nqueens_common::engine::interior::{Interior, Start};
use nqueens_common::engine::lanes::{count_below, Path};
use nqueens_common::known::known;
use nqueens_common::plan::{Plan, PlanSpec, Strategy};
use nqueens_common::Size;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

pub fn spec(n: u32, strategy: Strategy, depth: u32, tasks: u64) -> PlanSpec {
    PlanSpec::backtracking(Size::new(n).unwrap(), strategy, depth, tasks)
}

/// Every task of a plan: the same tally and checksum on the card as on the
/// CPU, and the published counts at the end.
pub fn same_as_cpu(card: &Arc<dyn Device>, spec: PlanSpec) {
    let cpu = Plan::new(spec).unwrap().with_path(Some(Path::Scalar));
    let gpu = Plan::new(spec).unwrap().with_device(Some(Arc::clone(card)));
    let schedule = cpu.schedule();
    let mut tally = nqueens_common::plan::Tally::default();
    for task in &schedule.tasks {
        let want = cpu.count_task_checked(&task).unwrap();
        let got = gpu.count_task_checked(&task).unwrap();
        assert_eq!(got, want, "{spec:?} task {task:?}");
        tally.merge(&got.0).unwrap();
    }
    let totals = gpu.finish(&tally).unwrap();
    let k = known(spec.n.get()).unwrap();
    let got = (totals.total().unwrap(), totals.unique().unwrap());
    assert_eq!(got, (k.total, k.unique), "{spec:?}");
}

/// Seeded random pieces of a real plan (`count` of them, taken down to
/// `free_rows` free rows), their starts, and the CPU lanes' counts of them.
pub fn pieces_and_cpu_counts(
    spec: PlanSpec,
    seed: u64,
    count: usize,
    free_rows: usize,
) -> (Vec<Interior>, Vec<Start>, Vec<PieceCounts>) {
    let pieces = Plan::new(spec)
        .unwrap()
        .random_pieces(seed, count, free_rows);
    let froms = vec![Start::default(); pieces.len()];
    let never = AtomicBool::new(false);
    let (want, _) = count_below(&pieces, &froms, Some(Path::Scalar), &never)
        .unwrap()
        .unwrap();
    (pieces, froms, want)
}

/// Every strategy of every N from 4 to `most` on `card`, as the CPU
/// counts it ([`same_as_cpu`]).
pub fn plans_up_to(card: &Arc<dyn Device>, most: u32) {
    for n in 4..=most {
        same_as_cpu(card, spec(n, Strategy::Frame, 1, 3));
        if n >= 8 {
            same_as_cpu(card, spec(n, Strategy::Prefix, 3, 2));
            same_as_cpu(card, spec(n, Strategy::Frame, 2, 2));
            same_as_cpu(card, spec(n, Strategy::Rings, 2, 2));
        }
    }
}

/// Seeded random pieces of real prefix, frame and ring plans of
/// N = 19..=32 (taken down to 11 free rows): `card`'s completions and
/// queens placed are the CPU lanes', interior by interior.
pub fn random_pieces_up_to_32(card: &dyn Device) {
    let never = AtomicBool::new(false);
    for n in 19..=32u32 {
        for (strategy, depth) in [
            (Strategy::Prefix, 4),
            (Strategy::Frame, 1),
            (Strategy::Frame, 2),
            (Strategy::Rings, 2),
        ] {
            let seed = u64::from(n) * 7919 + u64::from(depth);
            let (pieces, froms, want) =
                pieces_and_cpu_counts(spec(n, strategy, depth, 1), seed, 6, 11);
            let got = card.count_below(&pieces, &froms, &never).unwrap().unwrap();
            assert_eq!(got, want, "N={n} {strategy} depth {depth}");
        }
    }
}
