//! Commands that count on this machine alone, in memory: solve (without a
//! state directory), plan, table, bench, boards, complete.

use crate::bench::{bench, BenchRow};
use crate::exit::Failure;
use crate::format::json_line;
use crate::format::{human_duration, si, thousands};
use crate::opts::{Format, Mode as ModeArg, PlanShape, SizeRange};
use crate::report::{describe, PlanSummary, Report};
use nqueens_common::engine::boards::Solutions;
use nqueens_common::engine::complete::{complete as complete_board, parse_queens};
use nqueens_common::engine::device::Device;
use nqueens_common::engine::join::Budget;
use nqueens_common::engine::lanes::Path;
use nqueens_common::plan::estimate::Estimate;
use nqueens_common::plan::solve::{solve_join_within, solve_on, solve_plan, SolveError};
use nqueens_common::plan::{Mode, Plan, Strategy, Task};
use nqueens_common::Size;
use std::io::{self, BufWriter, Read, Write};
use std::sync::Arc;
use std::time::Duration;

fn stdout() -> BufWriter<io::StdoutLock<'static>> {
    BufWriter::new(io::stdout().lock())
}

/// How a local count runs: threads, the CPU path, a card.
pub struct Counting {
    pub threads: usize,
    /// The engine's path (`None`: the fastest this CPU has).
    pub core: Option<Path>,
    /// The card that counts the backtracking (`--core gpu`).
    pub device: Option<Arc<dyn Device>>,
    pub budget: Budget,
}

pub fn solve(
    n: Size,
    strategy: Option<Strategy>,
    shape: &PlanShape,
    run: Counting,
    json: bool,
) -> Result<(), Failure> {
    let Counting {
        threads,
        core,
        device,
        budget,
    } = run;
    let plan = match strategy {
        Some(strategy) => Some(
            shape
                .local_plan(n, strategy)?
                .with_path(core)
                .with_budget(budget)
                .with_device(device.clone()),
        ),
        None => None,
    };
    let path = match (&plan, &device) {
        (Some(p), _) if p.spec.mode == Mode::Join => "join",
        (_, Some(card)) => card.name(),
        _ => core.unwrap_or_else(Path::fastest).name(),
    };
    announce_long_run(n, threads, path);
    let mut report = match plan {
        None => count(n, threads, core)?,
        Some(plan) => {
            let failed = |e: String| Failure::Failed(format!("N={n}: {e}"));
            let schedule = plan.schedule();
            let solution =
                solve_plan(&plan, &schedule, threads).map_err(|e| failed(e.to_string()))?;
            let mut report = Report::new(&solution).map_err(|e| failed(e.to_string()))?;
            report.plan = Some(format!(
                "{} (depth {}) by {}, {} tasks",
                plan.spec.strategy,
                plan.spec.depth,
                plan.spec.mode.name(),
                thousands(schedule.tasks.len() as u128)
            ));
            report
        }
    };
    if let Some(card) = device.filter(|_| report.core == Path::Gpu.name()) {
        report.core = card.name().to_string();
        let busy = card.busy();
        report.card_busy = busy.and_then(|b| b.share());
        report.card_searches = busy.map(|b| b.searches).filter(|&s| s > 0);
    }
    print_report(&report, json)
}

/// From this N on a count takes long enough (tens of seconds and more on
/// a laptop; each N costs about 6 times the one before) that `solve` says
/// what it started, and what a Ctrl-C loses.
pub const LONG_RUN: u32 = 18;

/// On a long count: a line on stderr saying what runs and how to make it
/// resumable, and a Ctrl-C (or SIGTERM) handler that says what was lost
/// before exiting 130. Nothing for a short count.
fn announce_long_run(n: Size, threads: usize, path: &str) {
    if n.get() < LONG_RUN {
        return;
    }
    let command = format!("nqueens solve {n} --state DIR");
    let hint = command.clone();
    // The handler is in place before the line is printed, so a signal
    // sent by whoever reads the line is caught.
    let (ready, armed) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        runtime.block_on(async {
            let stop = crate::environ::signal();
            tokio::pin!(stop);
            // The first poll registers the handlers; then say so.
            let fired = poll_once(&mut stop).await;
            let _ = ready.send(());
            if !fired {
                stop.await;
            }
        });
        say!(
            "interrupted: a count in memory keeps nothing, so this one is lost; \
             `{hint}` would have kept every finished task (run it again to continue)"
        );
        std::process::exit(130);
    });
    let _ = armed.recv();
    say!(
        "counting N={n} on {threads} threads ({path} path); this takes a while. Ctrl-C loses \
         it: `{command}` keeps finished tasks on disk and can resume"
    );
}

/// Polls a future once (so a signal stream registers its handler) and
/// gives whether it was ready.
async fn poll_once<F: std::future::Future + Unpin>(f: &mut F) -> bool {
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(std::pin::Pin::new(&mut *f).poll(cx).is_ready())
    })
    .await
}

/// How `plan --estimate` samples, and the card rate it projects with.
pub struct Sample {
    pub seconds: u64,
    pub seed: u64,
    pub core: Option<Path>,
    pub budget: Budget,
    /// A card's nodes per second (`--gpu-rate`).
    pub gpu_rate: Option<f64>,
}

/// `plan N --estimate`: the projected core-time of the whole plan, in the
/// mode asked for or (without `--mode`) in both, then which is faster.
pub fn estimate(
    n: Size,
    strategy: Option<Strategy>,
    shape: &PlanShape,
    sample: &Sample,
    json: bool,
) -> Result<(), Failure> {
    let modes = estimate_modes(shape.mode, strategy);
    let each = Duration::from_secs(sample.seconds.max(1)).div_f64(modes.len() as f64);
    let mut out = stdout();
    let mut best: Option<(f64, &'static str)> = None;
    let mut failed = None;
    for (i, mode) in modes.iter().enumerate() {
        let shape = PlanShape {
            mode: Some(*mode),
            ..shape.clone()
        };
        let strategy = shape.strategy(n, strategy);
        let (plan, e) = match estimate_mode(n, strategy, &shape, sample, each) {
            Ok(pe) => pe,
            // One mode that cannot take this N (or this memory) leaves the other.
            Err(f) if modes.len() > 1 => {
                say!(
                    "{} mode: {}",
                    shape.mode(n, Some(strategy)).name(),
                    f.message()
                );
                failed = Some(f);
                continue;
            }
            Err(f) => return Err(f),
        };
        if best.is_none_or(|(s, _)| e.core_seconds < s) {
            best = Some((e.core_seconds, e.mode));
        }
        if json {
            json_line(&mut out, &estimate_json(&plan, &e, sample.gpu_rate))?;
            continue;
        }
        if i > 0 {
            writeln!(out)?;
        }
        write_estimate(&mut out, &plan, &e, sample.seed)?;
        write_gpu_time(&mut out, &e, sample.gpu_rate)?;
    }
    match (best, failed) {
        (None, Some(f)) => return Err(f),
        (Some((_, mode)), _) if modes.len() > 1 && !json => {
            writeln!(out, "\nfaster here: {mode}")?;
        }
        _ => {}
    }
    Ok(out.flush()?)
}

/// The modes to estimate: the one asked for, else the join alone for the
/// halves strategy, else both.
fn estimate_modes(mode: Option<ModeArg>, strategy: Option<Strategy>) -> Vec<ModeArg> {
    match mode {
        Some(m) => vec![m],
        None if strategy == Some(Strategy::Halves) => vec![ModeArg::Join],
        None => vec![ModeArg::Backtrack, ModeArg::Join],
    }
}

/// One mode's plan and its estimate from a sample of `each`, taken on the
/// CPU (a card's time comes from `--gpu-rate`).
fn estimate_mode(
    n: Size,
    strategy: Strategy,
    shape: &PlanShape,
    sample: &Sample,
    each: Duration,
) -> Result<(Plan, Estimate), Failure> {
    let core = sample.core.filter(|p| *p != Path::Gpu);
    let plan = shape
        .local_plan(n, strategy)?
        .with_path(core)
        .with_budget(sample.budget);
    let e = plan
        .estimate(sample.seed, each)
        .map_err(|e| Failure::BadInput(format!("N={n}: {e}")))?;
    Ok((plan, e))
}

/// One mode's estimate as a JSON object: its counts as decimal strings,
/// the plan's strategy and, with a card's rate, its GPU-hours.
fn estimate_json(plan: &Plan, e: &Estimate, gpu_rate: Option<f64>) -> serde_json::Value {
    let mut v = serde_json::to_value(e).expect("our types serialize");
    for key in ["sampled", "probes", "task_bytes"] {
        v[key] = v[key].to_string().into();
    }
    // A count, as `plan --json` gives it: a decimal string (rounded when
    // estimated; `subproblems_exact` says which).
    v["subproblems"] = format!("{:.0}", e.subproblems).into();
    v["strategy"] = plan.spec.strategy.name().into();
    if let Some(h) = gpu_hours(e, gpu_rate) {
        v["gpu_nodes_per_second"] = gpu_rate.into();
        v["gpu_hours"] = h.into();
    }
    v
}

/// The backtracking's projected time on a card, as text (nothing without
/// `--gpu-rate`, or for the join).
fn write_gpu_time(
    out: &mut impl Write,
    e: &Estimate,
    gpu_rate: Option<f64>,
) -> Result<(), Failure> {
    if let (Some(h), Some(rate)) = (gpu_hours(e, gpu_rate), gpu_rate) {
        writeln!(
            out,
            "gpu time    {h:.4e} GPU-hours ± {:.1}% (≈ {}) at {}nodes/s per card (--gpu-rate)",
            100.0 * e.nodes_per_subproblem_error / e.nodes_per_subproblem,
            human_duration(Duration::from_secs_f64((h * 3600.0).min(1e15))),
            si(rate)
        )?;
    }
    Ok(())
}

/// The backtracking's projected time on one card of `rate` nodes/s:
/// every node the plan places, at that rate (none for the join, which
/// counts on the CPU).
fn gpu_hours(e: &Estimate, rate: Option<f64>) -> Option<f64> {
    let rate = rate?;
    (e.mode != "join").then(|| e.subproblems * e.nodes_per_subproblem / rate / 3600.0)
}

/// One mode's estimate, as text.
fn write_estimate(
    out: &mut impl Write,
    plan: &Plan,
    e: &Estimate,
    seed: u64,
) -> Result<(), Failure> {
    let spec = &plan.spec;
    let n = spec.n;
    let exact = if e.subproblems_exact {
        "exact"
    } else {
        "sampled"
    };
    let years = e.core_seconds / (365.25 * 86400.0);
    writeln!(
        out,
        "plan        N={n} {} depth {}, counted by {}",
        spec.strategy, spec.depth, e.mode
    )?;
    if e.mode == "join" {
        writeln!(
            out,
            "path        join/{} ({:.1} M quarter pairs/s per core, on this plan)",
            e.path,
            e.nodes_per_second / 1e6
        )?;
    } else {
        writeln!(
            out,
            "path        {} ({:.1} M nodes/s per core, calibrated on this plan)",
            e.path,
            e.nodes_per_second / 1e6
        )?;
    }
    let subproblems = if e.subproblems_exact {
        thousands(e.subproblems as u128)
    } else {
        format!("{:.4e}", e.subproblems)
    };
    writeln!(out, "subproblems {subproblems} ({exact})")?;
    if e.mode == "join" {
        writeln!(
            out,
            "work        {:.3e} quarter pairs per subproblem ({} counted)",
            e.nodes_per_subproblem, e.sampled
        )?;
        writeln!(
            out,
            "memory      {}B per task at most in the sample (quarter tables and one thread's halves)",
            si(e.task_bytes as f64)
        )?;
    } else {
        writeln!(
            out,
            "nodes       {:.3e} per subproblem ± {:.1}% ({} sampled, {} descents each)",
            e.nodes_per_subproblem,
            100.0 * e.nodes_per_subproblem_error / e.nodes_per_subproblem,
            e.sampled,
            e.probes
        )?;
    }
    writeln!(
        out,
        "core time   {:.4e} s ± {:.1}% on this machine, one thread (≈ {}; {:.3e} core-years)",
        e.core_seconds,
        100.0 * e.core_seconds_error / e.core_seconds,
        human_duration(Duration::from_secs_f64(e.core_seconds.min(1e15))),
        years
    )?;
    writeln!(out, "sampled in  {:.1} s (seed {seed})", e.seconds_spent)?;
    Ok(())
}

pub fn plan(
    n: Size,
    strategy: Option<Strategy>,
    shape: &PlanShape,
    list: bool,
    task: Option<u64>,
    json: bool,
) -> Result<(), Failure> {
    let start = std::time::Instant::now();
    let plan = shape.local_plan(n, shape.strategy(n, strategy))?;
    let schedule = plan.schedule();
    let mut out = stdout();
    let tasks: Box<dyn Iterator<Item = Task>> = match task {
        Some(i) => {
            let t = schedule.tasks.get(i).ok_or_else(|| {
                Failure::BadInput(format!(
                    "task {i} does not exist: this plan has tasks 0 to {}",
                    schedule.tasks.len() - 1
                ))
            })?;
            Box::new(std::iter::once(t))
        }
        None if list => Box::new(schedule.tasks.iter()),
        None => {
            let summary = PlanSummary::new(&plan, &schedule, start.elapsed());
            if json {
                json_line(&mut out, &summary)?;
            } else {
                write!(out, "{}", summary.text())?;
            }
            return Ok(out.flush()?);
        }
    };
    let mut result = Ok(());
    for t in tasks {
        plan.for_each_subproblem(&t, |s| {
            if result.is_ok() {
                result = if json {
                    let line = serde_json::json!({
                        "task": t.index.to_string(),
                        "id": s.id().to_string(),
                        "subproblem": describe(&s),
                    });
                    writeln!(out, "{line}")
                } else {
                    writeln!(out, "task {} id {:#018x} {}", t.index, s.id(), describe(&s))
                };
            }
        });
    }
    result?;
    Ok(out.flush()?)
}

pub fn table(range: SizeRange, threads: usize, json: bool) -> Result<(), Failure> {
    let mut out = stdout();
    if !json {
        writeln!(out, "{}", Report::table_header())?;
    }
    for n in range.0.get()..=range.1.get() {
        let report = count(Size::new(n).expect("inside a checked range"), threads, None)?;
        if json {
            json_line(&mut out, &report)?;
        } else {
            writeln!(out, "{}", report.table_row())?;
        }
        out.flush()?;
        check_known(report.n, report.total, report.unique)?;
    }
    Ok(())
}

pub fn bench_range(
    range: SizeRange,
    threads: usize,
    runs: u32,
    baseline: bool,
    paths: &[Option<Path>],
    json: bool,
) -> Result<(), Failure> {
    let mut out = stdout();
    let cpu = crate::bench::cpu_model();
    let device = crate::gpu::forced(paths.contains(&Some(Path::Gpu)).then_some(Path::Gpu))?;
    if !json {
        // Every speed figure names the CPU (or card) it came from.
        writeln!(out, "cpu: {cpu}")?;
        if let Some(card) = &device {
            writeln!(out, "{}", card.name())?;
        }
        writeln!(out, "{}", BenchRow::header())?;
    }
    for n in range.0.get()..=range.1.get() {
        let n = Size::new(n).expect("inside a checked range");
        for &path in paths {
            let on = device.as_ref().filter(|_| path == Some(Path::Gpu));
            let row = bench(n, threads, runs as usize, baseline, path, on)
                .map_err(|e| Failure::Failed(e.to_string()))?;
            if json {
                let mut v = serde_json::to_value(&row).expect("our types serialize");
                v["cpu"] = cpu.clone().into();
                if let Some(card) = on {
                    v["gpu"] = card.name().into();
                }
                json_line(&mut out, &v)?;
            } else {
                writeln!(out, "{}", row.text())?;
            }
            out.flush()?;
        }
    }
    Ok(())
}

pub fn boards(n: Size, limit: Option<u64>, format: Format) -> Result<(), Failure> {
    let mut out = stdout();
    for (i, b) in Solutions::new(n)
        .take(limit.map_or(usize::MAX, |k| k as usize))
        .enumerate()
    {
        match format {
            Format::Rows => writeln!(out, "{}: {}", i + 1, b.rows_line())?,
            Format::Board => writeln!(out, "# {}\n{}", i + 1, b.diagram())?,
        }
    }
    Ok(out.flush()?)
}

pub fn complete(n: Size) -> Result<(), Failure> {
    let mut text = String::new();
    io::stdin().read_to_string(&mut text)?;
    let queens = parse_queens(&text, n).map_err(|e| Failure::BadInput(e.to_string()))?;
    let board = complete_board(n, &queens)
        .ok_or_else(|| Failure::Failed(format!("no {n}x{n} board holds all the given queens")))?;
    let mut out = stdout();
    write!(out, "{}", board.diagram())?;
    Ok(out.flush()?)
}

/// Prints a count (text or one JSON line) and checks it against the
/// published values.
fn print_report(report: &Report, json: bool) -> Result<(), Failure> {
    let mut out = stdout();
    if json {
        json_line(&mut out, report)?;
    } else {
        write!(out, "{}", report.text())?;
    }
    out.flush()?;
    check_known(report.n, report.total, report.unique)
}

/// `solve N --mode join`: the whole board counted by the join.
pub fn solve_join(
    n: Size,
    threads: usize,
    budget: Budget,
    core: Option<Path>,
    json: bool,
) -> Result<(), Failure> {
    announce_long_run(n, threads, "join");
    let report = solve_join_within(n, threads, budget, core)
        .map_err(|e| match e {
            SolveError::JoinSize(_) => Failure::BadInput(format!(
                "{e}: count N={n} by backtracking (--mode backtrack takes any N)"
            )),
            SolveError::Join(_) => Failure::BadInput(format!("N={n}: {e}")),
            e => Failure::Failed(format!("N={n}: {e}")),
        })
        .and_then(|s| Report::new(&s).map_err(|e| Failure::Failed(format!("N={n}: {e}"))))?;
    print_report(&report, json)
}

fn count(n: Size, threads: usize, core: Option<Path>) -> Result<Report, Failure> {
    solve_on(n, threads, core)
        .and_then(|s| Ok(Report::new(&s)?))
        .map_err(|e| Failure::Failed(format!("N={n}: {e}")))
}

/// A count that differs from the published one is a bug: say so loudly.
pub fn check_known(n: u32, total: u128, unique: u128) -> Result<(), Failure> {
    match nqueens_common::known::known(n) {
        Some(k) if (k.total, k.unique) != (total, unique) => Err(Failure::Failed(format!(
            "N={n} counted total {total} unique {unique}, which differs from the published values \
             (total {}, unique {}); please report this bug",
            k.total, k.unique
        ))),
        _ => Ok(()),
    }
}
