//! The known-answer test a worker runs before taking work: N = 8..=12
//! counted through the prefix and ring plans by backtracking, and through
//! the halves and frame plans by the join, must give the published totals
//! (N=12 only where it is cheap: ring parts and frames stop at N=11).
//! A machine or build that miscounts must never report a result.
//!
//! The plans of small boards count on the narrow lanes kernel only, so
//! N=12 is also counted by the wide kernel alone (every board past N=18
//! counts with it), on the engine path the worker counts with.
//!
//! It runs on the worker's threads and takes about 14 ms of CPU, a start-up
//! cost every short run (and every `solve --state`) pays: ring parts rather
//! than depth-2 frames, whose 50,000 tiny pieces at N=12 cost more to set up
//! than to count (140 ms on one thread); and N=12's ring parts and frames
//! (17 of 40 ms) left out, since N=8..11 take the same code paths. Each
//! check counts on one thread and the threads share the checks out: the
//! plans are too small for their tasks to be worth spreading (two threads
//! started per plan took about 16 ms on a Zen 4, against 10 ms this way).

use nqueens_common::engine::lanes::{ring_total_by_wide_kernel, Path};
use nqueens_common::engine::threads::on_threads;
use nqueens_common::known::known;
use nqueens_common::plan::solve::solve_plan;
use nqueens_common::plan::{Mode, Plan, PlanSpec, Strategy};
use nqueens_common::Size;

/// Runs the self-test on `threads` threads; `fault` deliberately corrupts
/// one count (to test that a failing self-test stops the worker).
pub fn self_test(fault: bool, threads: usize, path: Path) -> Result<(), String> {
    // Largest boards first, so no thread is left with a long check at the end.
    let mut specs = Vec::new();
    for n in (8..=12u32).rev() {
        for (strategy, mode, depth, largest) in [
            (Strategy::Prefix, Mode::Backtrack, 3, 12),
            (Strategy::Rings, Mode::Backtrack, 2, 11),
            (Strategy::Halves, Mode::Join, 0, 12),
            (Strategy::Frame, Mode::Join, 1, 11),
        ] {
            if n <= largest {
                specs.push(PlanSpec {
                    n: Size::new(n).expect("8..=12"),
                    strategy,
                    depth,
                    tasks: 16,
                    mode,
                });
            }
        }
    }
    // Check 0 is the wide kernel's; check i > 0 is plan i - 1's.
    on_threads(threads, specs.len() + 1, |(): &mut (), i| match i {
        0 => wide_kernel(path),
        i => plan(specs[i - 1], fault),
    })
    .map(drop)
}

/// N=12 by the wide kernel alone, on `path`.
fn wide_kernel(path: Path) -> Result<(), String> {
    let want = known(12).expect("known up to 27").total;
    let got = ring_total_by_wide_kernel(Size::new(12).expect("a board size"), path)
        .map_err(|e| e.to_string())?;
    if got != want {
        return Err(format!(
            "N=12 by the wide kernel on the {path} path counted total {got}, expected {want}: \
             this machine or build miscounts, so it must not report results"
        ));
    }
    Ok(())
}

/// One plan counted on one thread; `fault` adds one to N=12's total.
fn plan(spec: PlanSpec, fault: bool) -> Result<(), String> {
    let (n, strategy, mode) = (spec.n.get(), spec.strategy, spec.mode);
    let plan = Plan::new(spec).map_err(|e| e.to_string())?;
    let s = solve_plan(&plan, &plan.schedule(), 1).map_err(|e| e.to_string())?;
    let mut total = s.total().map_err(|e| e.to_string())?;
    if fault && n == 12 {
        total += 1;
    }
    let want = known(n).expect("known up to 27");
    if (total, s.unique().map_err(|e| e.to_string())?) != (want.total, want.unique) {
        return Err(format!(
            "N={n} by the {strategy} strategy ({}) counted total {total}, expected {}: this \
             machine or build miscounts, so it must not report results",
            mode.name(),
            want.total
        ));
    }
    Ok(())
}
