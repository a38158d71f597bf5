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
//! A worker checks both searches, since any job may come to it; `solve
//! --state` checks only the one its plan counts with (a join run then
//! skips the race that picks the backtracking path, about 12 ms).
//!
//! It runs on the worker's threads and takes about 14 ms of CPU, a start-up
//! cost every short run (and every `solve --state`) pays: ring parts rather
//! than depth-2 frames, whose 50,000 tiny pieces at N=12 cost more to set up
//! than to count (140 ms on one thread); and N=12's ring parts and frames
//! (17 of 40 ms) left out, since N=8..11 take the same code paths. Each
//! check counts on one thread and the threads share the checks out: the
//! plans are too small for their tasks to be worth spreading (two threads
//! started per plan took about 16 ms on a Zen 4, against 10 ms this way).

use nqueens_common::engine::device::Device;
use nqueens_common::engine::lanes::{ring_total_by_wide_kernel, Path};
use nqueens_common::engine::threads::on_threads;
use nqueens_common::known::known;
use nqueens_common::plan::solve::solve_plan;
use nqueens_common::plan::{Mode, Plan, PlanSpec, Strategy};
use nqueens_common::Size;
use std::sync::Arc;

/// One check of the self-test.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Check {
    /// Settle the backtracking path: on a CPU with AVX-512 and AVX2, the
    /// race between them (about 12 ms), made while other threads count
    /// the join's checks rather than by whichever check needs it first.
    Path,
    Plan(PlanSpec),
    WideKernel,
}

/// Runs the self-test on `threads` threads, of the searches of `mode`
/// (`None`: both); backtracking is checked on `path` (`None`: the fastest
/// this CPU has). `fault` deliberately corrupts one count (to test that a
/// failing self-test stops the worker).
pub fn self_test(
    fault: bool,
    threads: usize,
    path: Option<Path>,
    mode: Option<Mode>,
) -> Result<(), String> {
    let checks = checks(mode);
    let settled = || path.unwrap_or_else(Path::fastest);
    on_threads(threads, checks.len(), |(): &mut (), i| match checks[i] {
        Check::Path => {
            settled();
            Ok(())
        }
        Check::Plan(spec) => plan(spec, path, fault),
        Check::WideKernel => wide_kernel(settled()),
    })
    .map(drop)
}

/// The checks of `mode`'s searches (`None`: both), in the order threads
/// take them.
fn checks(mode: Option<Mode>) -> Vec<Check> {
    let wants = |m: Mode| mode.is_none_or(|want| want == m);
    let plans = |strategy, mode, depth, largest: u32| {
        (8..=largest).rev().map(move |n| {
            Check::Plan(PlanSpec {
                n: Size::new(n).expect("8..=12"),
                strategy,
                depth,
                tasks: 16,
                mode,
                cut: nqueens_common::plan::CUT,
            })
        })
    };
    // The path first, on one thread, while the others count the join's
    // checks (they need no path); then the ones that wait for it. Largest
    // first, so no thread is left with a long check at the end.
    let mut checks = Vec::new();
    if wants(Mode::Backtrack) {
        checks.push(Check::Path);
    }
    if wants(Mode::Join) {
        checks.extend(plans(Strategy::Halves, Mode::Join, 0, 12));
        checks.extend(plans(Strategy::Frame, Mode::Join, 1, 11));
    }
    if wants(Mode::Backtrack) {
        checks.push(Check::WideKernel);
        checks.extend(plans(Strategy::Prefix, Mode::Backtrack, 3, 12));
        checks.extend(plans(Strategy::Rings, Mode::Backtrack, 2, 11));
    }
    checks
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

/// Every card counts N = 10..=12 through ring parts and N=12 through
/// prefixes (the same kernel every board up to 32 runs, stacks of every
/// height up to 9 rows, with resumed searches), each against the
/// published totals; `fault` adds one to N=12's. A card that miscounts
/// stops the worker before it takes work, naming the card.
pub fn self_test_cards(devices: &[Arc<dyn Device>], fault: bool) -> Result<(), String> {
    for device in devices {
        for (n, strategy, depth) in [
            (12, Strategy::Prefix, 3),
            (12, Strategy::Rings, 2),
            (11, Strategy::Rings, 2),
            (10, Strategy::Rings, 2),
        ] {
            let spec = PlanSpec {
                n: Size::new(n).expect("10..=12"),
                strategy,
                depth,
                tasks: 4,
                mode: Mode::Backtrack,
                cut: nqueens_common::plan::CUT,
            };
            let plan = Plan::new(spec)
                .map_err(|e| e.to_string())?
                .with_device(Some(Arc::clone(device)));
            let on = format!("on {}", device.name());
            checked(&plan, fault, &on)?;
        }
    }
    Ok(())
}

/// One plan counted on one thread, on `path` (`None`: the fastest);
/// `fault` adds one to N=12's total.
fn plan(spec: PlanSpec, path: Option<Path>, fault: bool) -> Result<(), String> {
    let plan = Plan::new(spec).map_err(|e| e.to_string())?.with_path(path);
    checked(&plan, fault, "")
}

/// `plan` counted on one thread against the published counts; `fault`
/// adds one to N=12's total; `on` says where it counted, for the message.
fn checked(plan: &Plan, fault: bool, on: &str) -> Result<(), String> {
    let (n, strategy, mode) = (plan.spec.n.get(), plan.spec.strategy, plan.spec.mode);
    let s = solve_plan(plan, &plan.schedule(), 1)
        .map_err(|e| format!("N={n} by the {strategy} strategy {on}: {e}"))?;
    let mut total = s.total().map_err(|e| e.to_string())?;
    if fault && n == 12 {
        total += 1;
    }
    let want = known(n).expect("known up to 27");
    if (total, s.unique().map_err(|e| e.to_string())?) != (want.total, want.unique) {
        return Err(format!(
            "N={n} by the {strategy} strategy ({}{}{on}) counted total {total}, expected {}: this \
             machine or build miscounts, so it must not report results",
            mode.name(),
            if on.is_empty() { "" } else { " " },
            want.total
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A join run's self-test checks the join's plans only, and never
    /// races the backtracking paths (about 12 ms of its start-up).
    #[test]
    fn a_join_run_checks_the_join_alone_and_a_worker_checks_both_searches() {
        let join = checks(Some(Mode::Join));
        assert!(!join.is_empty());
        assert!(
            join.iter()
                .all(|c| matches!(c, Check::Plan(s) if s.mode == Mode::Join)),
            "{join:?}"
        );
        let backtrack = checks(Some(Mode::Backtrack));
        assert_eq!(backtrack[0], Check::Path);
        assert!(backtrack.contains(&Check::WideKernel));
        assert!(
            backtrack
                .iter()
                .all(|c| !matches!(c, Check::Plan(s) if s.mode == Mode::Join)),
            "{backtrack:?}"
        );
        // A worker, which any job may reach: the path is settled first,
        // while the other threads count the join's checks.
        let all = checks(None);
        assert_eq!(all.len(), join.len() + backtrack.len());
        assert_eq!(all[0], Check::Path);
        assert!(matches!(all[1], Check::Plan(s) if s.mode == Mode::Join));
        for s in [
            Strategy::Prefix,
            Strategy::Rings,
            Strategy::Halves,
            Strategy::Frame,
        ] {
            assert!(
                all.iter()
                    .any(|c| matches!(c, Check::Plan(p) if p.strategy == s && p.n.get() >= 11)),
                "{s:?}"
            );
        }
    }

    #[test]
    fn a_fault_fails_the_self_test_of_either_search() {
        for mode in [Mode::Join, Mode::Backtrack] {
            let e = self_test(true, 2, None, Some(mode)).unwrap_err();
            assert!(e.contains("N=12") && e.contains(mode.name()), "{e}");
            self_test(false, 2, None, Some(mode)).unwrap();
        }
    }
}
