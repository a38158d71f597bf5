//! `nqueens`: the command-line front end. Argument parsing and dispatch only;
//! the work is done by the workspace crates.

use clap::{Parser, Subcommand, ValueEnum};
use nqueens_common::bench::{bench, BenchRow};
use nqueens_common::boards::Solutions;
use nqueens_common::complete::{complete, parse_queens};
use nqueens_common::plan::{Plan, PlanSpec, Strategy, DEFAULT_DEPTH, DEFAULT_TASKS};
use nqueens_common::report::{describe, PlanSummary, Report};
use nqueens_common::solve::solve_plan;
use nqueens_common::{solve, Size};
use std::io::{self, BufWriter, Read, Write};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "nqueens",
    version,
    about = "Count the solutions of the N-Queens problem exactly",
    long_about = "Count the solutions of the N-Queens problem exactly: all of them (total) and \
                  those distinct up to rotation and reflection (unique), with a multithreaded, \
                  symmetry-aware bitmap search.",
    after_help = "Examples:\n  nqueens solve 16\n  nqueens plan 20 --strategy frame\n  nqueens table 4..14\n  nqueens boards 8 --limit 3 --format board\n  printf '1\\n0 1\\n' | nqueens complete --n 6"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Count the total and unique solutions of one N.
    #[command(
        after_help = "Examples:\n  nqueens solve 16\n  nqueens solve 17 --threads 1\n  nqueens solve 12 --json\n  \
        nqueens solve 17 --strategy frame\n\n\
        Without --strategy the whole search is cut into pieces in memory. With --strategy the\n\
        count goes through a plan's tasks, as a cluster would run it (see `nqueens plan`).\n\n\
        The result is compared with the published counts (OEIS A000170, A002562) up to N=27;\n\
        a difference is reported as an error (exit code 1)."
    )]
    Solve {
        /// Board size, 1 to 32.
        n: Size,
        #[command(flatten)]
        threads: Threads,
        /// Count through a plan of this strategy.
        #[arg(long)]
        strategy: Option<Strategy>,
        #[command(flatten)]
        shape: PlanShape,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Split one N into subproblems and tasks, and summarise (or list) them.
    #[command(
        after_help = "Examples:\n  nqueens plan 20 --strategy frame\n  nqueens plan 16 --strategy prefix --depth 5 --tasks 200\n  \
        nqueens plan 10 --strategy frame --list\n  nqueens plan 27 --strategy frame --tasks 100000 --task 42\n\n\
        prefix: the first K rows of the symmetry-pruned search; each subproblem's class counts\n\
        add up directly.\n\
        frame: one queen on each of the 8 border lines (rows and columns 0, 1, N-2, N-1), one\n\
        frame per symmetry orbit with its weight (2, 4 or 8; 1 if fully symmetric); the unique\n\
        count comes from the half- and quarter-turn symmetric searches (Burnside).\n\n\
        Subproblem ids are stable: the same N and options always give the same ids and tasks."
    )]
    Plan {
        /// Board size, 1 to 32.
        n: Size,
        /// How to split the search.
        #[arg(long)]
        strategy: Strategy,
        #[command(flatten)]
        shape: PlanShape,
        /// List every subproblem (id and description), task by task.
        #[arg(long, conflicts_with = "task")]
        list: bool,
        /// List the subproblems of this task only.
        #[arg(long, value_name = "I")]
        task: Option<u64>,
        /// Print JSON (one object; with --list or --task, one per subproblem).
        #[arg(long)]
        json: bool,
    },
    /// Time the solver core against the plain bitmap baseline kept in the repo.
    #[command(
        after_help = "Examples:\n  nqueens bench\n  nqueens bench 14..18 --runs 3\n  nqueens bench 17 --no-baseline --json\n\n\
        Each N is counted by the fast core on one thread and on T threads (default: all cores),\n\
        then by the baseline (a Somers-style bitmap search using only the mirror symmetry) on\n\
        one thread. Times are medians of --runs in-process runs; every count is checked.\n\
        speedup = baseline time / fast core time, both on one thread."
    )]
    Bench {
        /// Range of N, both ends included: FROM..TO (or a single N).
        #[arg(default_value = "14..16")]
        range: SizeRange,
        #[command(flatten)]
        threads: Threads,
        /// Runs per figure; the median is reported.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
        runs: u32,
        /// Skip the baseline (it is several times slower).
        #[arg(long)]
        no_baseline: bool,
        /// Print one JSON object per N.
        #[arg(long)]
        json: bool,
    },
    /// Run the coordinator: durable jobs, task leases over gRPC, exact totals.
    #[command(
        after_help = "Examples:\n  nqueens coordinator --data-dir ./nq-data\n  \
        nqueens coordinator --listen 0.0.0.0:7700 --data-dir /var/lib/nqueens \\\n      \
        --worker-token-file /etc/nqueens/worker.token --operator-token-file /etc/nqueens/operator.token\n\n\
        Every result is on disk (fsync) before a worker is told it was stored. After a crash or\n\
        kill -9, start it again on the same --data-dir: every job continues where it was.\n\
        Tokens can also come from NQUEENS_WORKER_TOKEN and NQUEENS_OPERATOR_TOKEN. Listening\n\
        beyond loopback without both tokens is refused unless --insecure is given.\n\
        Logs: RUST_LOG (default info), e.g. RUST_LOG=nqueens_coordinator=debug."
    )]
    Coordinator {
        /// Address to listen on (port 0 picks a free port).
        #[arg(long, default_value = "127.0.0.1:7700")]
        listen: std::net::SocketAddr,
        /// Directory for the journal, the store and the lock.
        #[arg(long, value_name = "DIR")]
        data_dir: std::path::PathBuf,
        /// File holding the token workers must present.
        #[arg(long, value_name = "F")]
        worker_token_file: Option<std::path::PathBuf>,
        /// File holding the token operators must present.
        #[arg(long, value_name = "F")]
        operator_token_file: Option<std::path::PathBuf>,
        /// Allow a non-loopback address without tokens.
        #[arg(long)]
        insecure: bool,
        /// Seconds a lease lives without a heartbeat.
        #[arg(long, value_name = "S", default_value_t = 60)]
        lease_ttl: u64,
        /// Serve Prometheus metrics at http://ADDR/metrics.
        #[arg(long, value_name = "ADDR")]
        metrics: Option<std::net::SocketAddr>,
        /// Serve TLS with this certificate chain (PEM).
        #[arg(long, value_name = "F", requires = "tls_key")]
        tls_cert: Option<std::path::PathBuf>,
        /// The private key of --tls-cert (PEM).
        #[arg(long, value_name = "F", requires = "tls_cert")]
        tls_key: Option<std::path::PathBuf>,
        /// Require client certificates signed by this CA (PEM).
        #[arg(long, value_name = "F", requires = "tls_cert")]
        tls_client_ca: Option<std::path::PathBuf>,
    },
    /// Run a worker: lease tasks from a coordinator and count them on every core.
    #[command(
        after_help = "Examples:\n  nqueens worker --coordinator http://127.0.0.1:7700\n  \
        NQUEENS_COORDINATOR=http://coord:7700 nqueens worker --token-file /etc/nqueens/worker.token\n\n\
        The worker first checks itself on N=8..12 and refuses to work if it miscounts. It keeps\n\
        every thread busy with one batch of tasks in hand, heartbeats its leases, and keeps each\n\
        result until the coordinator has stored it, reconnecting with backoff when it is away.\n\
        SIGTERM or Ctrl-C: stop leasing, hand back unstarted tasks, finish running ones within\n\
        --grace, exit 0. A second signal exits at once (code 130). It writes nothing to disk."
    )]
    Worker {
        /// The coordinator's address.
        #[arg(
            long,
            env = "NQUEENS_COORDINATOR",
            default_value = "http://127.0.0.1:7700"
        )]
        coordinator: String,
        #[command(flatten)]
        threads: Threads,
        /// File holding the worker token (or NQUEENS_WORKER_TOKEN).
        #[arg(long, value_name = "F")]
        token_file: Option<std::path::PathBuf>,
        /// Name shown to operators [default: host-pid].
        #[arg(long)]
        name: Option<String>,
        /// Seconds a drain waits for running tasks before handing them back.
        #[arg(long, value_name = "S", default_value_t = 300)]
        grace: u64,
        /// Corrupt the self-test (to check that a bad build refuses to work).
        #[arg(long, hide = true)]
        self_test_fault: bool,
    },
    /// Print the classic table of counts, one row per N as soon as it is done.
    #[command(
        after_help = "Examples:\n  nqueens table\n  nqueens table 4..17\n  nqueens table 10..12 --json"
    )]
    Table {
        /// Range of N, both ends included: FROM..TO (or a single N).
        #[arg(default_value = "4..16")]
        range: SizeRange,
        #[command(flatten)]
        threads: Threads,
        /// Print one JSON object per line instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// List solutions in lexicographic order of their rows, streamed.
    #[command(
        after_help = "Examples:\n  nqueens boards 5\n  nqueens boards 8 --limit 2 --format board\n\n\
        Rows format: '1: 0 2 4 1 3' lists, for each row from the top, the column of its queen (0-based)."
    )]
    Boards {
        /// Board size, 1 to 32.
        n: Size,
        /// Stop after this many boards.
        #[arg(long, value_name = "K")]
        limit: Option<u64>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Rows)]
        format: Format,
    },
    /// Complete a board from given queens read on standard input.
    #[command(
        after_help = "Input (the classic judge format): a line with k, then k lines 'row col'\n\
        (0-based) of the given queens. Output: one full board holding them, 'Q' and '.'.\n\n\
        Example:\n  printf '2\\n2 2\\n5 3\\n' | nqueens complete\n\n\
        Exit codes: 0 completed, 1 no completion exists, 2 bad input."
    )]
    Complete {
        /// Board size, 1 to 32.
        #[arg(long, default_value = "8")]
        n: Size,
    },
}

#[derive(clap::Args)]
struct PlanShape {
    /// Prefix strategy: rows placed in each subproblem (2 to 11).
    #[arg(long, value_name = "K", default_value_t = DEFAULT_DEPTH)]
    depth: u32,
    /// About how many tasks to cut the plan into.
    #[arg(long, value_name = "M", default_value_t = DEFAULT_TASKS)]
    tasks: u64,
}

impl PlanShape {
    fn plan(&self, n: Size, strategy: Strategy) -> Result<Plan, Failure> {
        Plan::new(PlanSpec {
            n,
            strategy,
            depth: self.depth,
            tasks: self.tasks,
        })
        .map_err(|e| Failure::BadInput(e.to_string()))
    }
}

#[derive(clap::Args)]
struct Threads {
    /// Worker threads [default: all cores].
    #[arg(long, value_name = "T", value_parser = clap::value_parser!(u32).range(1..=4096))]
    threads: Option<u32>,
}

impl Threads {
    fn get(&self) -> usize {
        self.threads
            .map_or_else(nqueens_common::solve::default_threads, |t| t as usize)
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    /// `1: 0 4 7 5 2 6 1 3`, the column of each row's queen.
    Rows,
    /// A diagram of `Q` and `.`, one line per row.
    Board,
}

/// An inclusive range of board sizes: `4..16`, `4..=16` or `12`.
#[derive(Clone, Copy)]
struct SizeRange(Size, Size);

impl std::str::FromStr for SizeRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, b) = s
            .split_once("..=")
            .or_else(|| s.split_once(".."))
            .unwrap_or((s, s));
        let (from, to): (Size, Size) = (a.parse()?, b.parse()?);
        if from > to {
            return Err(format!(
                "the range {s} is empty: write FROM..TO with FROM <= TO"
            ));
        }
        Ok(SizeRange(from, to))
    }
}

/// How a command failed, and so which exit code it gets.
enum Failure {
    /// The command ran but found nothing (or a wrong count): exit 1.
    NotFound(String),
    /// The input was wrong: exit 2.
    BadInput(String),
    Io(io::Error),
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Io(e)
    }
}

fn main() -> ExitCode {
    match run(Cli::parse().command) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`nqueens boards 12 | head`) is the reader's choice, not an error.
        Err(Failure::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(Failure::Io(e)) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
        Err(Failure::NotFound(msg)) => {
            eprintln!("{msg}");
            ExitCode::from(1)
        }
        Err(Failure::BadInput(msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(2)
        }
    }
}

fn run(command: Command) -> Result<(), Failure> {
    let mut out = BufWriter::new(io::stdout().lock());
    match command {
        Command::Solve {
            n,
            threads,
            strategy,
            shape,
            json,
        } => {
            let report = match strategy {
                None => count(n, threads.get())?,
                Some(strategy) => {
                    let plan = shape.plan(n, strategy)?;
                    let failed = |e: String| Failure::NotFound(format!("error: N={n}: {e}"));
                    let solution = solve_plan(&plan, &plan.schedule(), threads.get())
                        .map_err(|e| failed(e.to_string()))?;
                    Report::new(&solution).map_err(|e| failed(e.to_string()))?
                }
            };
            if json {
                writeln!(
                    out,
                    "{}",
                    serde_json::to_string(&report).expect("report serializes")
                )?;
            } else {
                write!(out, "{}", report.text())?;
            }
            out.flush()?;
            check_known(&report)
        }
        Command::Plan {
            n,
            strategy,
            shape,
            list,
            task,
            json,
        } => {
            let start = std::time::Instant::now();
            let plan = shape.plan(n, strategy)?;
            let schedule = plan.schedule();
            let tasks = match task {
                Some(i) => {
                    let t = schedule.tasks.get(i as usize).ok_or_else(|| {
                        Failure::BadInput(format!(
                            "task {i} does not exist: this plan has tasks 0 to {}",
                            schedule.tasks.len() - 1
                        ))
                    })?;
                    std::slice::from_ref(t)
                }
                None if list => &schedule.tasks[..],
                None => {
                    let summary = PlanSummary::new(&plan, &schedule, start.elapsed());
                    if json {
                        writeln!(
                            out,
                            "{}",
                            serde_json::to_string(&summary).expect("summary serializes")
                        )?;
                    } else {
                        write!(out, "{}", summary.text())?;
                    }
                    return Ok(out.flush()?);
                }
            };
            let mut result = Ok(());
            for t in tasks {
                plan.for_each_subproblem(t, |s| {
                    if result.is_ok() {
                        result = if json {
                            let line = serde_json::json!({"task": t.index, "id": s.id(), "subproblem": describe(&s)});
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
        Command::Table {
            range,
            threads,
            json,
        } => {
            if !json {
                writeln!(out, "{}", Report::table_header())?;
            }
            for n in range.0.get()..=range.1.get() {
                let report = count(Size::new(n).expect("inside a checked range"), threads.get())?;
                if json {
                    writeln!(
                        out,
                        "{}",
                        serde_json::to_string(&report).expect("report serializes")
                    )?;
                } else {
                    writeln!(out, "{}", report.table_row())?;
                }
                out.flush()?;
                check_known(&report)?;
            }
            Ok(())
        }
        Command::Bench {
            range,
            threads,
            runs,
            no_baseline,
            json,
        } => {
            if !json {
                writeln!(out, "{}", BenchRow::header())?;
            }
            for n in range.0.get()..=range.1.get() {
                let n = Size::new(n).expect("inside a checked range");
                let row = bench(n, threads.get(), runs as usize, !no_baseline)
                    .map_err(|e| Failure::NotFound(format!("error: {e}")))?;
                if json {
                    writeln!(
                        out,
                        "{}",
                        serde_json::to_string(&row).expect("row serializes")
                    )?;
                } else {
                    writeln!(out, "{}", row.text())?;
                }
                out.flush()?;
            }
            Ok(())
        }
        Command::Coordinator {
            listen,
            data_dir,
            worker_token_file,
            operator_token_file,
            insecure,
            lease_ttl,
            metrics,
            tls_cert,
            tls_key,
            tls_client_ca,
        } => {
            let config = nqueens_coordinator::server::Config {
                listen,
                data_dir,
                worker_token: read_token(worker_token_file, "NQUEENS_WORKER_TOKEN")?,
                operator_token: read_token(operator_token_file, "NQUEENS_OPERATOR_TOKEN")?,
                insecure,
                metrics,
                tls: tls_cert.map(|cert| nqueens_coordinator::server::Tls {
                    cert,
                    key: tls_key.expect("clap requires --tls-key with --tls-cert"),
                    client_ca: tls_client_ca,
                }),
                limits: nqueens_coordinator::state::Limits {
                    lease_ttl_ms: lease_ttl.max(1) * 1000,
                    ..Default::default()
                },
            };
            run_coordinator(config)
        }
        Command::Worker {
            coordinator,
            threads,
            token_file,
            name,
            grace,
            self_test_fault,
        } => {
            let config = nqueens_worker::run::Config {
                coordinator,
                threads: threads.get(),
                token: read_token(token_file, "NQUEENS_WORKER_TOKEN")?,
                name,
                grace: std::time::Duration::from_secs(grace),
                self_test_fault,
            };
            run_worker(config)
        }
        Command::Boards { n, limit, format } => {
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
        Command::Complete { n } => {
            let mut text = String::new();
            io::stdin().read_to_string(&mut text)?;
            let queens = parse_queens(&text, n).map_err(|e| Failure::BadInput(e.to_string()))?;
            let board = complete(n, &queens).ok_or_else(|| {
                Failure::NotFound(format!("no {n}x{n} board holds all the given queens"))
            })?;
            write!(out, "{}", board.diagram())?;
            Ok(out.flush()?)
        }
    }
}

/// A token from a file, else from an environment variable.
fn read_token(file: Option<std::path::PathBuf>, var: &str) -> Result<Option<String>, Failure> {
    match file {
        Some(f) => std::fs::read_to_string(&f)
            .map(|t| Some(t.trim().to_string()))
            .map_err(|e| Failure::BadInput(format!("cannot read token file {}: {e}", f.display()))),
        None => Ok(std::env::var(var).ok().filter(|t| !t.is_empty())),
    }
}

/// Logs on stderr, filtered by RUST_LOG (default info).
fn init_logs() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(io::stderr)
        .init();
}

/// Runs a worker until it has drained after SIGTERM or Ctrl-C; a second
/// signal exits at once.
fn run_worker(config: nqueens_worker::run::Config) -> Result<(), Failure> {
    init_logs();
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            signal().await;
            let _ = tx.send(());
            signal().await;
            eprintln!("second signal: exiting at once");
            std::process::exit(130);
        });
        nqueens_worker::run::run(config, rx)
            .await
            .map(|_| ())
            .map_err(|e| Failure::NotFound(format!("error: {e}")))
    })
}

/// Resolves on the next Ctrl-C or SIGTERM.
async fn signal() {
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminated() => {}
    }
}

/// Serves until Ctrl-C or SIGTERM. Prints the bound address on stdout
/// first, so scripts (and tests) using port 0 can find it.
fn run_coordinator(config: nqueens_coordinator::server::Config) -> Result<(), Failure> {
    init_logs();
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let clock = std::sync::Arc::new(nqueens_coordinator::core::SystemClock);
        let running = nqueens_coordinator::server::start(config, clock)
            .await
            .map_err(|e| Failure::NotFound(format!("error: {e}")))?;
        println!("nqueens coordinator listening on {}", running.addr);
        if let Some(m) = running.metrics_addr {
            println!("metrics at http://{m}/metrics");
        }
        io::stdout().flush()?;
        signal().await;
        tracing::info!("shutting down");
        running
            .shutdown()
            .await
            .map_err(|e| Failure::NotFound(format!("error: {e}")))
    })
}

/// Resolves on SIGTERM (never elsewhere).
async fn terminated() {
    #[cfg(unix)]
    if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        s.recv().await;
        return;
    }
    std::future::pending::<()>().await
}

fn count(n: Size, threads: usize) -> Result<Report, Failure> {
    solve(n, threads)
        .and_then(|s| Report::new(&s))
        .map_err(|e| Failure::NotFound(format!("error: N={n}: {e}")))
}

/// A count that differs from the published one is a bug: say so loudly.
fn check_known(r: &Report) -> Result<(), Failure> {
    match r.matches_known {
        Some(false) => Err(Failure::NotFound(format!(
            "error: N={} counted total {} unique {}, which differs from the published values; please report this bug",
            r.n, r.total, r.unique
        ))),
        _ => Ok(()),
    }
}
