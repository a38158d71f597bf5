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
