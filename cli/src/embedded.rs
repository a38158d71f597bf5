//! `nqueens solve N --state DIR`: a durable run on one machine. A
//! coordinator (the same journal and store as a cluster's) and a worker
//! run in this process and talk over loopback gRPC, so a second run with
//! the same DIR after Ctrl-C, `kill -9` or a power cut continues where the
//! first stopped and redoes none of the tasks it had stored.

use crate::client::Operator;
use crate::environ::signal;
use crate::exit::Failure;
use crate::format::json_line;
use crate::format::{human_duration, thousands};
use crate::human::{JobInfo, RunInfo};
use crate::local::check_known;
use crate::opts::{Connect, PlanShape, Progress};
use crate::progress::{follow, Show};
use crate::serve::init_logs;
use nqueens_common::engine::device::Device;
use nqueens_common::engine::join::{pair_path, Budget};
use nqueens_common::engine::lanes::Path;
use nqueens_common::known::verdict;
use nqueens_common::plan::{Mode, Plan, PlanSpec, Strategy};
use nqueens_common::Size;
use nqueens_coordinator::hub::SystemClock;
use nqueens_coordinator::server::{self, Config, Running};
use nqueens_coordinator::state::{Checking, JobState, JobView};
use nqueens_worker::run::{SelfTest, WorkerError};
use nqueens_worker::selftest::{self_test, self_test_cards};
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a finished embedded run prints as text (`--json` prints the job
/// object of `nqueens status`, its `run` filled in).
fn text(job: &JobInfo, run: &RunInfo) -> String {
    let check = verdict(job.matches_known);
    format!(
        "N        {}\ntotal    {}\nunique   {}\nknown    {check}\ntasks    {} ({} stored before this run, {} counted now)\ntime     {} this run\nstate    {}\n",
        job.n,
        job.total,
        job.unique,
        thousands(job.tasks.into()),
        thousands(run.tasks_before.into()),
        thousands(run.tasks_counted.into()),
        human_duration(Duration::from_secs_f64(run.seconds)),
        run.state_dir.display(),
    )
}

/// How an embedded run counts and reports, beside its plan and directory.
#[derive(Clone)]
pub struct Run {
    pub threads: usize,
    /// The engine's path (`None`: the fastest this CPU has).
    pub core: Option<Path>,
    /// The card that counts instead of the CPU threads (`--core gpu`).
    pub device: Option<Arc<dyn Device>>,
    pub budget: Budget,
    pub progress: Progress,
    pub json: bool,
    /// Corrupt the self-test on purpose (to test that it stops the run).
    pub self_test_fault: bool,
}

pub fn solve(
    n: Size,
    strategy: Option<Strategy>,
    shape: &PlanShape,
    state: PathBuf,
    run: Run,
) -> Result<(), Failure> {
    let plan = shape.local_plan(n, shape.strategy(n, strategy))?;
    init_logs("warn", crate::opts::LogFormat::Text);
    // One async thread serves the coordinator, the worker and the progress
    // display: a few calls a second, and the cores are left to counting.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let json = run.json;
    let job = runtime.block_on(count(plan, state, run))?;
    let mut out = io::stdout().lock();
    match (&job.run, json) {
        (_, true) => json_line(&mut out, &job)?,
        (Some(run), false) => write!(out, "{}", text(&job, run))?,
        (None, false) => unreachable!("count() fills the run in"),
    }
    out.flush()?;
    check_known(job.n, job.total, job.unique)
}

/// A state directory the coordinator would not start on; where it names
/// the flag that accepts lost records, how to give it.
fn refused(dir: &std::path::Path, why: &str) -> Failure {
    let how = match why.contains("--accept-lost-records") {
        true => format!(
            ". `solve` takes no such flag: start `nqueens coordinator --data-dir {}` once with \
             it, stop it (Ctrl-C) once it says it is serving, and run this `solve` again",
            dir.display()
        ),
        false => String::new(),
    };
    Failure::Failed(format!("state directory {}: {why}{how}", dir.display()))
}

/// Counts the plan's job in `dir` (submitting it unless the directory
/// holds it already) with an in-process coordinator and worker, following
/// it until it ends or a signal stops the run.
async fn count(plan: Plan, dir: PathBuf, run: Run) -> Result<JobInfo, Failure> {
    let started = Instant::now();
    let mode = plan.spec.mode;
    let self_test = start_self_test(&run, mode);
    let running = server::start(Config::local(&dir), Arc::new(SystemClock))
        .await
        .map_err(|e| refused(&dir, &e.to_string()))?;
    let job = open_job(&running, plan, &dir).await?;
    let tasks_before = job.done;
    if tasks_before > 0 && !run.json {
        say!(
            "resuming from {}: {} tasks already stored",
            dir.display(),
            thousands(tasks_before.into())
        );
    }
    if let Err(e) = self_test.await.expect("the self-test panicked") {
        // Nothing was counted: the plan stays as it is for a sound build.
        shut_down(running).await?;
        return Err(Failure::Failed(WorkerError::SelfTest(e).to_string()));
    }
    let url = format!("http://{}", running.addr);
    let (stop_worker, signals) = tokio::sync::mpsc::unbounded_channel();
    let worker = tokio::spawn(nqueens_worker::run::run(
        worker_config(&run, url.clone(), mode),
        signals,
    ));
    let ended = follow_job(url, job.id, &run).await?;
    let _ = stop_worker.send(());
    // A signal while the run closes (its worker drains, its store syncs for
    // the last checkpoint) stops it there: every stored task is in the
    // journal already.
    let closing = async {
        let worker = worker.await.expect("the worker task panicked");
        let last = running
            .core
            .job(job.id)
            .map_err(|e| Failure::Failed(e.to_string()))?;
        shut_down(running).await?;
        Ok::<_, Failure>((worker, last))
    };
    let (worker, last) = tokio::select! {
        closed = closing => closed?,
        () = signal() => return Err(Failure::Interrupted(format!(
            "stopped while closing {}: every task stored is in its journal; run the same \
             command again to continue",
            dir.display()
        ))),
    };
    let Some(ended) = ended else {
        return Err(interrupted(&last, &dir));
    };
    let info = ended?;
    worker.map_err(|e| Failure::Failed(e.to_string()))?;
    if info.state == "cancelled" {
        return Err(cancelled(&dir));
    }
    Ok(JobInfo {
        run: Some(RunInfo {
            state_dir: dir,
            tasks_before,
            tasks_counted: info.tasks - tasks_before,
            seconds: started.elapsed().as_secs_f64(),
        }),
        ..info
    })
}

/// Starts the worker's self-test of the search this plan counts with. It
/// runs while the coordinator opens its store and plans (it needs no
/// coordinator), and the worker then counts at once. A backtracking run's
/// self-test also races the engine paths; a join run needs no race.
fn start_self_test(run: &Run, mode: Mode) -> tokio::task::JoinHandle<Result<(), String>> {
    let (fault, threads, core) = (run.self_test_fault, run.threads.max(1), run.core);
    let cards: Vec<Arc<dyn Device>> = run.device.iter().cloned().collect();
    tokio::task::spawn_blocking(move || {
        self_test(fault, threads, core, Some(mode))?;
        self_test_cards(&cards, fault)
    })
}

/// The plan's job in the state directory, submitted if it has none yet,
/// once its tasks exist: a worker started before would find its first
/// lease empty and wait before asking again.
async fn open_job(
    running: &Running,
    plan: Plan,
    dir: &std::path::Path,
) -> Result<JobView, Failure> {
    let job = match find_job(&running.core.jobs(), &plan, dir)? {
        Some(job) => job,
        None => running
            .core
            .submit(plan.spec, Checking::NONE)
            .await
            .map_err(|e| Failure::Failed(e.to_string()))?,
    };
    let mut changes = running.core.subscribe();
    while running
        .core
        .job(job.id)
        .is_ok_and(|j| j.state == JobState::Planning)
    {
        if changes.changed().await.is_err() {
            break;
        }
    }
    Ok(job)
}

/// The in-process worker: no token or TLS on loopback, and a self-test
/// already passed.
fn worker_config(run: &Run, coordinator: String, mode: Mode) -> nqueens_worker::run::Config {
    nqueens_worker::run::Config {
        coordinator,
        // A card counts alone: the CPU threads would only slow its feeders.
        threads: if run.device.is_some() { 0 } else { run.threads },
        token: None,
        tls_ca: None,
        name: Some(format!("embedded-{}", std::process::id())),
        // Hand running tasks back at once: they are redone next time.
        grace: Duration::ZERO,
        self_test: SelfTest::Passed,
        core: worker_path(run.core, mode),
        devices: run.device.iter().cloned().collect(),
        budget: run.budget,
        tls_identity: None,
    }
}

/// Follows the job at `url` until it ends (`Some`, with how it ended) or
/// a signal stops the run (`None`).
async fn follow_job(
    url: String,
    job: u64,
    run: &Run,
) -> Result<Option<Result<JobInfo, Failure>>, Failure> {
    let mut op = Operator::new(&Connect {
        coordinator: url,
        token_file: None,
        tls_ca: None,
        tls_cert: None,
        tls_key: None,
        json: run.json,
    })?;
    let show = if run.json { Show::Nothing } else { Show::Text };
    Ok(tokio::select! {
        r = follow(&mut op, job, run.progress, show) => Some(r),
        () = signal() => None,
    })
}

/// Stops the in-process coordinator.
async fn shut_down(running: Running) -> Result<(), Failure> {
    running
        .shutdown()
        .await
        .map_err(|e| Failure::Failed(e.to_string()))
}

/// The path the embedded worker counts on and names: a join counts its
/// pairs on the join's path, and naming it spares the worker the race that
/// picks the backtracking path (about 12 ms), which a join never uses.
fn worker_path(core: Option<Path>, mode: Mode) -> Option<Path> {
    match mode {
        Mode::Join => Some(pair_path(core)),
        Mode::Backtrack => core,
    }
}

/// A run stopped by a signal, with `last` (its job then) on disk in `dir`.
fn interrupted(last: &JobView, dir: &std::path::Path) -> Failure {
    Failure::Interrupted(format!(
        "stopped: {} of {} tasks are stored in {}; run the same command again to continue",
        thousands(last.done.into()),
        thousands(last.tasks.into()),
        dir.display()
    ))
}

fn cancelled(dir: &std::path::Path) -> Failure {
    Failure::Failed(format!(
        "the run in {} was cancelled; start a new one in another directory",
        dir.display()
    ))
}

/// The job of this plan in the state directory, if it has one (planned
/// by any version's cut: the job keeps its own). A directory holding
/// another plan's run is refused rather than mixed, naming the options
/// that differ.
fn find_job(
    jobs: &[JobView],
    plan: &Plan,
    dir: &std::path::Path,
) -> Result<Option<JobView>, Failure> {
    let here = plan.spec;
    let same = |j: &&JobView| {
        PlanSpec {
            cut: here.cut,
            ..j.spec
        } == here
    };
    if let Some(job) = jobs.iter().find(same) {
        if job.state == JobState::Cancelled {
            return Err(cancelled(dir));
        }
        return Ok(Some(job.clone()));
    }
    match jobs.first() {
        None => Ok(None),
        Some(other) => {
            let there = other.spec;
            Err(Failure::BadInput(format!(
                "{} holds a run of N={} ({} strategy, depth {}, about {} tasks, counted by {}), \
                 not of this command's plan ({}); repeat that run's options, or use another \
                 --state directory",
                dir.display(),
                there.n,
                there.strategy,
                there.depth,
                there.tasks,
                there.mode.name(),
                differences(&there, &here)
            )))
        }
    }
}

/// The options in which plan `there` differs from plan `here`.
fn differences(there: &PlanSpec, here: &PlanSpec) -> String {
    let options = [
        ("N", there.n.to_string(), here.n.to_string()),
        (
            "--strategy",
            there.strategy.to_string(),
            here.strategy.to_string(),
        ),
        ("--depth", there.depth.to_string(), here.depth.to_string()),
        ("--tasks", there.tasks.to_string(), here.tasks.to_string()),
        ("--mode", there.mode.name().into(), here.mode.name().into()),
    ];
    options
        .into_iter()
        .filter(|(_, a, b)| a != b)
        .map(|(option, a, b)| format!("{option} {a} there, {b} here"))
        .collect::<Vec<_>>()
        .join("; ")
}
