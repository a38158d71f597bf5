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
//!   [`format`]: numbers, durations and JSON lines.
//! - [`environ`]: tokens from files or variables, and signals.
//! - [`doctor`]: a self-check of a machine's setup against a coordinator.
//! - [`exit`]: failures and their exit codes.
//!
//! Modules import in one direction (no circle): commands → `client`,
//! `progress`, `human` → `opts`, `format`, `environ`, `exit`.

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

use args::{Cli, Command};
use clap::{CommandFactory, Parser};
use environ::read_token;
use exit::Failure;
use nqueens_common::engine::join::Budget;
use operator::Control;
use std::io::Write;
use std::process::ExitCode;

/// Parses the command line, runs the command, and gives the exit code.
pub fn main() -> ExitCode {
    match run(Cli::parse().command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => f.report(),
    }
}

fn run(command: Command) -> Result<(), Failure> {
    match command {
        Command::Solve {
            n,
            threads,
            strategy,
            shape,
            state,
            memory,
            core,
            progress,
            json,
            self_test_fault,
        } => {
            let threads = threads.get();
            let core = core.core.path()?;
            let on_card = core == Some(nqueens_common::engine::lanes::Path::Gpu);
            let (strategy, shape) = gpu::backtracking(n, strategy, shape, on_card)?;
            let device = gpu::forced(core)?;
            let join = shape.mode(n, strategy) == nqueens_common::plan::Mode::Join;
            if memory.is_some() && !join {
                return Err(Failure::BadInput(
                    "--memory bounds the join: add --mode join, or leave --memory out".into(),
                ));
            }
            let budget = memory.map_or_else(Budget::default, |b| Budget::from_bytes(b, threads));
            if let Some(dir) = state {
                let run = embedded::Run {
                    threads,
                    core,
                    device,
                    budget,
                    progress,
                    json,
                    self_test_fault,
                };
                return embedded::solve(n, strategy, &shape, dir, run);
            }
            if strategy.is_none() && shape.depth.is_some() {
                return Err(Failure::BadInput(
                    "--depth shapes a plan, and without --strategy (or --state) solve counts \
                     without one: add --strategy frame (depth 1 or 2) or --strategy prefix \
                     (depth 2 to 11), or leave --depth out"
                        .into(),
                ));
            }
            if join && strategy.is_none() && shape.tasks.is_none() {
                return local::solve_join(n, threads, budget, core, json);
            }
            // --tasks shapes a plan: without --strategy, the default one
            // of N and the mode (as `solve --state` and `submit` take).
            let strategy = match (strategy, shape.tasks) {
                (None, Some(_)) => Some(shape.strategy(n, None)),
                (s, _) => s,
            };
            let run = local::Counting {
                threads,
                core,
                device,
                budget,
            };
            local::solve(n, strategy, &shape, run, json)
        }
        Command::Plan {
            n,
            strategy,
            shape,
            estimate: true,
            seconds,
            seed,
            core,
            memory,
            gpu_rate,
            json,
            ..
        } => {
            let budget = memory.map_or_else(Budget::default, |b| Budget::from_bytes(b, 1));
            let sample = local::Sample {
                seconds,
                seed,
                core: core.core.path()?,
                budget,
                gpu_rate,
            };
            local::estimate(n, strategy, &shape, &sample, json)
        }
        Command::Plan {
            n,
            strategy,
            shape,
            list,
            task,
            json,
            ..
        } => local::plan(n, strategy, &shape, list, task, json),
        Command::Table {
            range,
            threads,
            json,
        } => local::table(range, threads.get(), json),
        Command::Bench {
            range,
            threads,
            runs,
            no_baseline,
            core,
            every_core,
            json,
        } => {
            let paths = if every_core {
                nqueens_common::engine::lanes::Path::available()
                    .into_iter()
                    .map(Some)
                    .collect()
            } else {
                vec![core.path()?]
            };
            local::bench_range(range, threads.get(), runs, !no_baseline, &paths, json)
        }
        Command::Boards { n, limit, format } => local::boards(n, limit, format),
        Command::Complete { n } => local::complete(n),
        Command::Coordinator {
            listen,
            data_dir,
            worker_token_file,
            operator_token_file,
            insecure,
            lease_ttl,
            metrics,
            metrics_public,
            max_tasks,
            checkpoint_every,
            tls_cert,
            tls_key,
            tls_client_ca,
            accept_lost_records,
            logs,
        } => serve::coordinator(
            nqueens_coordinator::server::Config {
                listen,
                data_dir,
                worker_token: read_token(worker_token_file.as_ref(), "NQUEENS_WORKER_TOKEN")?,
                operator_token: read_token(operator_token_file.as_ref(), "NQUEENS_OPERATOR_TOKEN")?,
                insecure,
                metrics,
                metrics_public,
                tls: tls_cert.map(|cert| nqueens_coordinator::server::Tls {
                    cert,
                    key: tls_key.expect("clap requires --tls-key with --tls-cert"),
                    client_ca: tls_client_ca,
                }),
                limits: nqueens_coordinator::state::Limits {
                    lease_ttl_ms: lease_ttl.max(1) * 1000,
                    max_tasks,
                    ..Default::default()
                },
                checkpoints: nqueens_coordinator::server::Checkpoints {
                    records: checkpoint_every,
                    ..Default::default()
                },
                audit_when_done: true,
                accept_lost_records,
            },
            logs,
        ),
        Command::Worker {
            coordinator,
            threads,
            token_file,
            tls_ca,
            tls_cert,
            tls_key,
            name,
            grace,
            metrics,
            metrics_public,
            core,
            gpus,
            memory,
            self_test_fault,
            logs,
        } => {
            let core = core.core.path()?;
            let devices = gpu::for_worker(core, &gpus)?;
            // With --core gpu the cards count alone, unless --threads asks
            // for CPU threads beside them.
            let cpu_threads = match (core, threads) {
                (Some(nqueens_common::engine::lanes::Path::Gpu), None) => 0,
                _ => opts::Threads { threads }.get(),
            };
            serve::worker(
                nqueens_worker::run::Config {
                    coordinator,
                    threads: cpu_threads,
                    token: read_token(token_file.as_ref(), "NQUEENS_WORKER_TOKEN")?,
                    tls_ca,
                    tls_identity: tls_cert.zip(tls_key),
                    name,
                    grace: std::time::Duration::from_secs(grace),
                    self_test: if self_test_fault {
                        nqueens_worker::run::SelfTest::Fault
                    } else {
                        nqueens_worker::run::SelfTest::Run
                    },
                    core,
                    devices,
                    budget: {
                        let threads = opts::Threads { threads }.get();
                        memory.map_or_else(Budget::default, |b| Budget::from_bytes(b, threads))
                    },
                },
                metrics.map(|at| serve::Metrics {
                    at,
                    public: metrics_public,
                }),
                logs,
            )
        }
        Command::Submit {
            n,
            strategy,
            shape,
            check,
            watch,
            progress,
            connect,
        } => {
            let strategy = shape.strategy(n, strategy);
            operator::submit(n, strategy, &shape, check, watch, progress, &connect)
        }
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
        } => export::export(job, format, output.as_deref(), &connect),
        Command::Pause { job, connect } => operator::control(job, Control::Pause, &connect),
        Command::Resume { job, connect } => operator::control(job, Control::Resume, &connect),
        Command::Cancel { job, connect } => operator::control(job, Control::Cancel, &connect),
        Command::Delete { job, yes, connect } => operator::delete(job, yes, &connect),
        Command::Retry { job, connect } => operator::control(job, Control::Retry, &connect),
        Command::Doctor {
            role,
            seconds,
            core,
            connect,
        } => doctor::doctor(&connect, role, seconds, core.core.path()?),
        Command::Loadgen(cfg) => loadgen::run(cfg),
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "nqueens",
                &mut std::io::stdout(),
            );
            Ok(())
        }
    }
}

/// `nqueens token issue|revoke|list`: per-worker credentials in a data
/// directory (no coordinator needed; a running one picks changes up).
fn token(action: opts::TokenAction) -> Result<(), Failure> {
    use nqueens_coordinator::credentials::{issue, list, revoke, CredentialError};
    let fail = |e: CredentialError| match e {
        CredentialError::Io { .. } | CredentialError::Damaged { .. } => {
            Failure::Failed(e.to_string())
        }
        _ => Failure::BadInput(e.to_string()),
    };
    match action {
        opts::TokenAction::Issue { name, data_dir } => {
            let token = issue(&data_dir, &name).map_err(fail)?;
            if let Err(e) = writeln!(std::io::stdout(), "{token}") {
                // It is shown only here: a token nobody saw must not stay valid.
                revoke(&data_dir, &name).map_err(fail)?;
                return Err(Failure::Failed(format!(
                    "could not print the new token ({e}), so it was revoked: issue it again with \
                     the output going to a terminal or a file"
                )));
            }
            eprintln!("issued worker token '{name}': give it to that worker with --token-file (it is not shown again)");
        }
        opts::TokenAction::Revoke { name, data_dir } => {
            revoke(&data_dir, &name).map_err(fail)?;
            eprintln!("revoked worker token '{name}'");
        }
        opts::TokenAction::List { data_dir } => {
            for name in list(&data_dir).map_err(fail)? {
                writeln!(std::io::stdout(), "{name}")?;
            }
        }
    }
    Ok(())
}
