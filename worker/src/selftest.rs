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
//! It runs on the worker's threads and takes about 20 ms, a start-up cost
//! every short run (and every `solve --state`) pays: ring parts rather than
//! depth-2 frames, whose 50,000 tiny pieces at N=12 cost more to set up
//! than to count (140 ms on one thread); and N=12's ring parts and frames
//! (17 of 40 ms) left out, since N=8..11 take the same code paths.

use nqueens_common::engine::lanes::{ring_total_by_wide_kernel, Path};
use nqueens_common::known::known;
use nqueens_common::plan::solve::solve_plan;
use nqueens_common::plan::{Mode, Plan, PlanSpec, Strategy};
use nqueens_common::Size;

/// Runs the self-test on `threads` threads; `fault` deliberately corrupts
/// one count (to test that a failing self-test stops the worker).
pub fn self_test(fault: bool, threads: usize, path: Path) -> Result<(), String> {
    let n12 = Size::new(12).expect("a board size");
    let want = known(12).expect("known up to 27").total;
    let got = ring_total_by_wide_kernel(n12, path).map_err(|e| e.to_string())?;
    if got != want {
        return Err(format!(
            "N=12 by the wide kernel on the {path} path counted total {got}, expected {want}: \
             this machine or build miscounts, so it must not report results"
        ));
    }
    for n in 8..=12u32 {
        for (strategy, mode, depth, largest) in [
            (Strategy::Prefix, Mode::Backtrack, 3, 12),
            (Strategy::Rings, Mode::Backtrack, 2, 11),
            (Strategy::Halves, Mode::Join, 0, 12),
            (Strategy::Frame, Mode::Join, 1, 11),
        ] {
            if n > largest {
                continue;
            }
            let spec = PlanSpec {
                n: Size::new(n).expect("8..=12"),
                strategy,
                depth,
                tasks: 16,
                mode,
            };
            let plan = Plan::new(spec).map_err(|e| e.to_string())?;
            let s = solve_plan(&plan, &plan.schedule(), threads).map_err(|e| e.to_string())?;
            let mut total = s.total().map_err(|e| e.to_string())?;
            if fault && n == 12 {
                total += 1;
            }
            let want = known(n).expect("known up to 27");
            if (total, s.unique().map_err(|e| e.to_string())?) != (want.total, want.unique) {
                return Err(format!(
                    "N={n} by the {strategy} strategy ({}) counted total {total}, expected {}: this machine or build miscounts, \
                     so it must not report results",
                    mode.name(),
                    want.total
                ));
            }
        }
    }
    Ok(())
}
