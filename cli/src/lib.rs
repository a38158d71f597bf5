//! The `nqueens` command line. The root package's `main` calls [`main`];
//! everything else is here, one module per kind of command:
//!
//! - [`args`]: every subcommand and its `--help`; [`opts`]: the option
//!   groups and value parsers the subcommands share.
//! - [`local`]: counting on this machine in memory (solve, plan, table, bench, boards, complete).
//! - [`embedded`]: `solve --state DIR`, a resumable run with an in-process coordinator.
//! - [`serve`]: the coordinator and worker processes.
//! - [`client`]: the operator's connection to a coordinator; [`operator`]:
//!   the operator's commands (submit, status, watch, jobs, workers, ...).
//! - [`progress`]: following a job (bar, lines or JSON).
//! - [`human`]: jobs and workers as people and scripts read them;
//!   [`format`](mod@format): numbers, durations and JSON lines.
//! - [`environ`]: tokens from files or variables, and signals.
//! - [`doctor`]: a self-check of a machine's setup against a coordinator.
//! - [`exit`]: failures and their exit codes.
//!
//! Modules import in one direction (no circle): commands → `client`,
//! `progress`, `human` → `opts`, `format`, `environ`, `exit`.

/// `eprintln!` that never panics: a note or an error that cannot be
/// written (stderr on a full disk, or closed) is lost, and the run goes
/// on to its own exit code.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod args;
pub mod bench;
pub mod client;
pub mod doctor;
pub mod embedded;
pub mod environ;
pub mod exit;
pub mod export;
pub mod format;
pub mod gpu;
pub mod human;
pub mod loadgen;
pub mod local;
pub mod operator;
pub mod opts;
pub mod progress;
pub mod report;
pub mod serve;
pub mod tune;

use args::{BenchArgs, Cli, Command, CoordinatorArgs, PlanArgs, SolveArgs, SubmitArgs, WorkerArgs};
use clap::{CommandFactory, Parser};
use environ::read_token;
use exit::Failure;
use nqueens_common::engine::join::Budget;
use nqueens_common::engine::lanes::Path;
use nqueens_common::plan::{Mode, Strategy};
use nqueens_common::Size;
use operator::Control;
use opts::PlanShape;
use std::io::Write;
use std::process::ExitCode;

/// Parses the command line, runs the command, and gives the exit code.
pub fn main() -> ExitCode {
    environ::quiet_vulkan_layers();
    match run(Cli::parse().command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => f.report(),
    }
}

/// Runs one subcommand: each has its function here or in its module.
fn run(command: Command) -> Result<(), Failure> {
    match command {
        // Counting on this machine.
        Command::Solve(args) => solve(args),
        Command::Plan(args) if args.estimate => estimate(args),
        Command::Plan(args) => plan(args),
        Command::Table {
            range,
            threads,
            json,
        } => local::table(range, threads.get(), json),
        Command::Bench(args) => benchmark(args),
        Command::Boards { n, limit, format } => local::boards(n, limit, format),
        Command::Complete { n } => local::complete(n),
        // The long-running processes.
        Command::Coordinator(args) => coordinator(args),
        Command::Worker(args) => worker(args),
        // An operator's calls to a coordinator (or its data directory).
        Command::Submit(args) => submit(args),
        Command::Status { job, connect } => operator::status(job, &connect),
        Command::Watch {
            job,
            progress,
            connect,
        } => operator::watch(job, progress, &connect),
        Command::Jobs { connect } => operator::jobs(&connect),
        Command::Workers { connect } => operator::workers(&connect),
        Command::Health { connect } => operator::health(&connect),
        Command::Token { action } => token(action),
        Command::Backup { dest, data_dir } => backup(&data_dir, &dest),
        Command::Audit {
            job,
            data_dir,
            connect,
        } => operator::audit(job, data_dir.as_deref(), &connect),
        Command::Export {
            job,
            format,
            output,
            connect,
        } => {
            // `--json` asks for JSON output, as everywhere else.
            let format = if connect.json {
                export::Format::Jsonl
            } else {
                format
            };
            export::export(job, format, output.as_deref(), &connect)
        }
        Command::Pause { job, connect } => operator::control(job, Control::Pause, &connect),
        Command::Resume { job, connect } => operator::control(job, Control::Resume, &connect),
        Command::Cancel { job, connect } => operator::control(job, Control::Cancel, &connect),
        Command::Delete { job, yes, connect } => operator::delete(job, yes, &connect),
        Command::Retry { job, connect } => operator::control(job, Control::Retry, &connect),
        // Checks and tools.
        Command::Doctor {
            role,
            seconds,
            core,
            connect,
        } => doctor::doctor(&connect, role, seconds, core.core.path()?),
        Command::Loadgen(cfg) => loadgen::run(cfg),
        Command::Completions { shell } => completions(shell),
    }
}

/// `nqueens solve`: a resumable run with `--state`, else a count in memory.
fn solve(args: SolveArgs) -> Result<(), Failure> {
    let n = args.n;
    let core = args.core.core.path()?;
    let on_card = core == Some(Path::Gpu);
    let (strategy, shape) = gpu::backtracking(n, args.strategy, args.shape, on_card)?;
    let device = gpu::forced(core)?;
    // A card is fed by as many threads as it asks for, unless --threads says.
    let threads = match (&device, args.threads.threads) {
        (Some(card), None) => card.feeders(),
        _ => args.threads.get(),
    };
    let join = shape.mode(n, strategy) == Mode::Join;
    if args.memory.is_some() && !join {
        return Err(Failure::BadInput(
            "--memory bounds the join: add --mode join, or leave --memory out".into(),
        ));
    }
    let budget = args
        .memory
        .map_or_else(Budget::default, |b| Budget::from_bytes(b, threads));
    let Some(dir) = args.state else {
        let run = local::Counting {
            threads,
            core,
            device,
            budget,
        };
        return solve_in_memory(n, strategy, &shape, run, args.json);
    };
    let run = embedded::Run {
        threads,
        core,
        device,
        budget,
        progress: args.progress,
        json: args.json,
        self_test_fault: args.self_test_fault,
    };
    embedded::solve(n, strategy, &shape, dir, run)
}

/// `nqueens solve` without `--state`: the join's own count, the whole
/// search cut into pieces, or a plan's tasks (with `--strategy` or
/// `--tasks`).
fn solve_in_memory(
    n: Size,
    strategy: Option<Strategy>,
    shape: &PlanShape,
    run: local::Counting,
    json: bool,
) -> Result<(), Failure> {
    if strategy.is_none() && shape.depth.is_some() {
        return Err(Failure::BadInput(
            "--depth shapes a plan, and without --strategy (or --state) solve counts \
             without one: add --strategy frame (depth 1 or 2) or --strategy prefix \
             (depth 2 to 11), or leave --depth out"
                .into(),
        ));
    }
    let join = shape.mode(n, strategy) == Mode::Join;
    if join && strategy.is_none() && shape.tasks.is_none() {
        return local::solve_join(n, run.threads, run.budget, run.core, json);
    }
    // --tasks shapes a plan: without --strategy, the default one of N and
    // the mode (as `solve --state` and `submit` take).
    let strategy = match (strategy, shape.tasks) {
        (None, Some(_)) => Some(shape.strategy(n, None)),
        (s, _) => s,
    };
    local::solve(n, strategy, shape, run, json)
}

/// `nqueens plan N --estimate`: a sampled projection of the plan's time.
fn estimate(args: PlanArgs) -> Result<(), Failure> {
    let budget = args
        .memory
        .map_or_else(Budget::default, |b| Budget::from_bytes(b, 1));
    let sample = local::Sample {
        seconds: args.seconds,
        seed: args.seed,
        core: args.core.core.path()?,
        budget,
        gpu_rate: args.gpu_rate,
    };
    local::estimate(args.n, args.strategy, &args.shape, &sample, args.json)
}

/// `nqueens plan`: the plan's summary, or its subproblems.
fn plan(args: PlanArgs) -> Result<(), Failure> {
    local::plan(
        args.n,
        args.strategy,
        &args.shape,
        args.list,
        args.task,
        args.json,
    )
}

/// `nqueens bench`: on the core asked for, or on every core this CPU has.
fn benchmark(args: BenchArgs) -> Result<(), Failure> {
    if args.tune {
        if args.core.path()? != Some(Path::Gpu) {
            return Err(Failure::BadInput(
                "--tune tunes a graphics card: add --core gpu".into(),
            ));
        }
        return tune::tune(args.range.1, args.runs, args.json);
    }
    let paths = if args.every_core {
        Path::available().into_iter().map(Some).collect()
    } else {
        vec![args.core.path()?]
    };
    let threads = args.threads.get();
    let baseline = !args.no_baseline;
    local::bench_range(args.range, threads, args.runs, baseline, &paths, args.json)
}

/// `nqueens coordinator`: the server's configuration from the options.
fn coordinator(args: CoordinatorArgs) -> Result<(), Failure> {
    use nqueens_coordinator::server::{Checkpoints, Config, Tls};
    let config = Config {
        listen: args.listen,
        data_dir: args.data_dir,
        worker_token: read_token(args.worker_token_file.as_ref(), "NQUEENS_WORKER_TOKEN")?,
        operator_token: read_token(args.operator_token_file.as_ref(), "NQUEENS_OPERATOR_TOKEN")?,
        insecure: args.insecure,
        metrics: args.metrics,
        metrics_public: args.metrics_public,
        tls: args.tls_cert.map(|cert| Tls {
            cert,
            key: args
                .tls_key
                .expect("clap requires --tls-key with --tls-cert"),
            client_ca: args.tls_client_ca,
        }),
        limits: nqueens_coordinator::state::Limits {
            lease_ttl_ms: args.lease_ttl.max(1) * 1000,
            max_tasks: args.max_tasks,
            ..Default::default()
        },
        checkpoints: Checkpoints {
            records: args.checkpoint_every,
            ..Default::default()
        },
        audit_when_done: true,
        accept_lost_records: args.accept_lost_records,
    };
    serve::coordinator(config, args.logs)
}

/// `nqueens worker`: the worker's configuration from the options.
fn worker(args: WorkerArgs) -> Result<(), Failure> {
    use nqueens_worker::run::{Config, SelfTest};
    let core = args.core.core.path()?;
    let devices = gpu::for_worker(core, &args.gpus)?;
    let threads = args.threads;
    // With --core gpu the cards count alone, unless --threads asks for CPU
    // threads beside them.
    let cpu_threads = match (core, threads) {
        (Some(Path::Gpu), None) => 0,
        _ => opts::Threads { threads }.get(),
    };
    let config = Config {
        coordinator: args.coordinator,
        threads: cpu_threads,
        token: read_token(args.token_file.as_ref(), "NQUEENS_WORKER_TOKEN")?,
        tls_ca: args.tls_ca,
        tls_identity: args.tls_cert.zip(args.tls_key),
        name: args.name,
        grace: std::time::Duration::from_secs(args.grace),
        self_test: if args.self_test_fault {
            SelfTest::Fault
        } else {
            SelfTest::Run
        },
        core,
        devices,
        budget: args.memory.map_or_else(Budget::default, |b| {
            Budget::from_bytes(b, opts::Threads { threads }.get())
        }),
    };
    let metrics = args.metrics.map(|at| serve::Metrics {
        at,
        public: args.metrics_public,
    });
    serve::worker(config, metrics, args.logs)
}

/// `nqueens submit`: the plan's strategy (its default unless given), then
/// the submission.
fn submit(args: SubmitArgs) -> Result<(), Failure> {
    let strategy = args.shape.strategy(args.n, args.strategy);
    operator::submit(
        args.n,
        strategy,
        &args.shape,
        args.check,
        args.watch,
        args.progress,
        &args.connect,
    )
}

/// `nqueens completions SHELL`: the completion script on stdout.
fn completions(shell: clap_complete::Shell) -> Result<(), Failure> {
    clap_complete::generate(
        shell,
        &mut Cli::command(),
        "nqueens",
        &mut std::io::stdout(),
    );
    Ok(())
}

/// `nqueens token issue|revoke|list`: per-worker credentials in a data
/// directory (no coordinator needed; a running one picks changes up).
/// `nqueens backup`: the data directory's journal and secrets copied.
fn backup(data_dir: &std::path::Path, dest: &std::path::Path) -> Result<(), Failure> {
    use nqueens_coordinator::backup::{backup, BackupError};
    let made = backup(data_dir, dest).map_err(|e| match e {
        BackupError::NoJournal(_) | BackupError::NotEmpty(_) | BackupError::Inside { .. } => {
            Failure::BadInput(e.to_string())
        }
        _ => Failure::Failed(e.to_string()),
    })?;
    let j = made.journal;
    let mut also = made.beside.join(", ");
    if also.is_empty() {
        also = "nothing else".into();
    }
    say!(
        "backed up {} to {}: journal records 1..={} ({} sealed segments, {} bytes), {also}; \
         restore with: nqueens coordinator --data-dir {}",
        data_dir.display(),
        dest.display(),
        j.records,
        j.segments,
        j.bytes,
        dest.display()
    );
    Ok(())
}

fn token(action: opts::TokenAction) -> Result<(), Failure> {
    use nqueens_coordinator::credentials::{is_data_dir, issue, list, revoke, CredentialError};
    let fail = |e: CredentialError| match e {
        CredentialError::Io { .. } | CredentialError::Damaged { .. } => {
            Failure::Failed(e.to_string())
        }
        _ => Failure::BadInput(e.to_string()),
    };
    let (data_dir, new) = match &action {
        opts::TokenAction::Issue { data_dir, new, .. } => (data_dir, *new),
        opts::TokenAction::Revoke { data_dir, .. } | opts::TokenAction::List { data_dir } => {
            (data_dir, false)
        }
    };
    if !new && !is_data_dir(data_dir) {
        return Err(Failure::BadInput(format!(
            "{} is not a coordinator's data directory (it holds no journal and no worker \
             tokens): give the --data-dir the coordinator runs with{}",
            data_dir.display(),
            match action {
                opts::TokenAction::Issue { .. } =>
                    ", or add --new to issue tokens before its first start",
                _ => "",
            }
        )));
    }
    match action {
        opts::TokenAction::Issue { name, data_dir, .. } => {
            let token = issue(&data_dir, &name).map_err(fail)?;
            if let Err(e) = writeln!(std::io::stdout(), "{token}") {
                // It is shown only here: a token nobody saw must not stay valid.
                revoke(&data_dir, &name).map_err(fail)?;
                return Err(Failure::Failed(format!(
                    "could not print the new token ({e}), so it was revoked: issue it again with \
                     the output going to a terminal or a file"
                )));
            }
            say!("issued worker token '{name}': give it to that worker with --token-file (it is not shown again)");
        }
        opts::TokenAction::Revoke { name, data_dir } => {
            revoke(&data_dir, &name).map_err(fail)?;
            say!("revoked worker token '{name}'");
        }
        opts::TokenAction::List { data_dir } => {
            for name in list(&data_dir).map_err(fail)? {
                writeln!(std::io::stdout(), "{name}")?;
            }
        }
    }
    Ok(())
}
