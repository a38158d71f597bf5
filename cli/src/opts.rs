//! Option groups and value parsers shared by the subcommands (where to
//! find the coordinator, plan shapes, threads, logs, progress): the leaf
//! every command module takes its options from; `args` puts them together.

use crate::exit::Failure;
use clap::{Subcommand, ValueEnum};
use nqueens_common::engine::lanes::Path;
use nqueens_common::plan::{
    default_depth, default_mode, default_strategy, default_tasks, Mode as PlanMode, Plan,
    PlanError, PlanSpec, Strategy, MAX_RING_SPLIT,
};
use nqueens_common::Size;
use std::path::PathBuf;

/// `--strategy`: its values named, so `--help` and shell completion list
/// them (frame, rings, prefix, synthetic).
pub(crate) fn strategies() -> impl clap::builder::TypedValueParser<Value = Strategy> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new([
        PossibleValue::new("frame").help("one queen on each border line (rings or frames)"),
        PossibleValue::new("rings").help(
            "rings (the 4 border lines) cut into parts by their first free rows: for records",
        ),
        PossibleValue::new("prefix").help("the first K rows of the symmetry-pruned search"),
        PossibleValue::new("halves").help(
            "the whole board's choices of east rows, N=4 to 24 (join mode only; its default up to N=21)",
        ),
        PossibleValue::new("synthetic")
            .help("load tests (submit only): no queens; task i answers a fixed function of i"),
    ])
    .map(|s| s.parse::<Strategy>().expect("a listed strategy parses"))
}

#[derive(clap::Args, Clone)]
pub struct PlanShape {
    /// prefix: rows placed in each subproblem (2 to 11) [default: 4].
    /// frame: rings of border lines, 1 (4 lines) or 2 (8 lines) [default: 1 up to N=21, else 2].
    /// rings: free rows placed inside each ring to cut it into parts, 1 to 3 [default: 1 up to
    /// N=18, 2 up to N=23, else 3].
    #[arg(long, value_name = "K")]
    pub depth: Option<u32>,
    /// How many tasks to cut the plan into (fewer only where its
    /// subproblems are too few to split) [default: tasks of about
    /// 2^(N-18) core-seconds: 40 at N=18, at least 16, at most 1,000,000].
    #[arg(long, value_name = "M")]
    pub tasks: Option<u64>,
    /// How to count each subproblem: search every completion (backtrack),
    /// or join halves of it (join: a second, independent algorithm, so a
    /// count made one way can be checked the other; without --strategy it
    /// cuts whole boards into halves up to N=21, then ring parts) [default: join for N=18
    /// to 21 without --strategy, where it is fastest and fits; else
    /// backtrack].
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
}

impl PlanShape {
    /// No option given: N's defaults.
    pub fn none() -> PlanShape {
        PlanShape {
            depth: None,
            tasks: None,
            mode: None,
        }
    }

    /// The mode asked for: the join for the halves strategy, which only
    /// the join counts; without a mode or a strategy, N's default.
    pub fn mode(&self, n: Size, strategy: Option<Strategy>) -> PlanMode {
        match (self.mode, strategy) {
            (Some(Mode::Join), _) | (None, Some(Strategy::Halves)) => PlanMode::Join,
            (None, None) => default_mode(n),
            _ => PlanMode::Backtrack,
        }
    }

    /// The strategy asked for, or the default of N and the mode.
    pub fn strategy(&self, n: Size, strategy: Option<Strategy>) -> Strategy {
        strategy.unwrap_or_else(|| default_strategy(n, self.mode(n, None)))
    }

    /// The spec asked for, checked (a wrong depth is bad input).
    pub fn spec(&self, n: Size, strategy: Strategy) -> Result<PlanSpec, Failure> {
        let depth = self.depth.unwrap_or_else(|| default_depth(strategy, n));
        if strategy == Strategy::Frame && !(1..=2).contains(&depth) {
            return Err(Failure::BadInput(format!(
                "--depth {depth} does not fit the frame strategy: use 1 (rings, the 4 border \
                 lines) or 2 (frames, 8 lines)"
            )));
        }
        if strategy == Strategy::Rings && !(1..=MAX_RING_SPLIT).contains(&depth) {
            return Err(Failure::BadInput(format!(
                "--depth {depth} does not fit the rings strategy: use 1 to {MAX_RING_SPLIT} (free \
                 rows placed inside each ring: more rows, more and smaller parts)"
            )));
        }
        let mode = self.mode(n, Some(strategy));
        if strategy == Strategy::Halves && self.mode == Some(Mode::Backtrack) {
            return Err(Failure::BadInput(
                "the halves strategy is counted only by the join: use --mode join, or another \
                 strategy to backtrack"
                    .into(),
            ));
        }
        if strategy == Strategy::Halves && self.depth.is_some() {
            return Err(Failure::BadInput(
                "--depth does not apply to the halves strategy (it always cuts the whole board)"
                    .into(),
            ));
        }
        Ok(PlanSpec {
            n,
            strategy,
            depth,
            tasks: self.tasks.unwrap_or_else(|| default_tasks(n)),
            mode,
            cut: nqueens_common::plan::CUT,
        })
    }

    /// The plan, checked (a wrong depth or task count, or a plan too large
    /// to schedule, is bad input).
    pub fn plan(&self, n: Size, strategy: Strategy) -> Result<Plan, Failure> {
        let plan =
            Plan::new(self.spec(n, strategy)?).map_err(|e| Failure::BadInput(e.to_string()))?;
        plan.check_size()
            .map_err(|e| Failure::BadInput(format!("N={n}: {e}")))?;
        Ok(plan)
    }

    /// [`PlanShape::plan`] for counting on this machine: a synthetic plan
    /// (which counts no queens) is bad input here.
    pub fn local_plan(&self, n: Size, strategy: Strategy) -> Result<Plan, Failure> {
        if strategy == Strategy::Synthetic {
            return Err(Failure::BadInput(PlanError::Synthetic.to_string()));
        }
        self.plan(n, strategy)
    }
}

#[derive(clap::Args)]
pub struct Threads {
    /// Worker threads [default: all cores].
    #[arg(long, value_name = "T", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub threads: Option<u32>,
}

impl Threads {
    pub fn get(&self) -> usize {
        self.threads
            .map_or_else(nqueens_common::engine::threads::default_threads, |t| {
                t as usize
            })
    }
}

/// Whose credentials `nqueens doctor` checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Role {
    /// An operator's token (submit, status, ...).
    Operator,
    /// A worker's token (register, lease, report).
    Worker,
}

/// How a long-lived process logs (on stderr).
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct Logs {
    /// Log lines as text, or as one JSON object per line (for Loki,
    /// Elasticsearch, journald's JSON and other collectors).
    #[arg(
        long,
        value_enum,
        value_name = "FORMAT",
        env = "NQUEENS_LOG_FORMAT",
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// The least important events logged. RUST_LOG, when set, wins (and
    /// can set levels per module, e.g. RUST_LOG=info,nqueens_worker=debug).
    #[arg(
        long,
        value_enum,
        value_name = "LEVEL",
        env = "NQUEENS_LOG_LEVEL",
        default_value = "info"
    )]
    pub log_level: LogLevel,
}

/// `--log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One line per event: time, level, module, message, fields.
    Text,
    /// One JSON object per event: timestamp, level, target, fields.
    Json,
}

/// `--log-level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    /// Failures only.
    Error,
    /// Failures and what may need an operator.
    Warn,
    /// What a process does: jobs, workers, leases, recovery (the default).
    Info,
    /// Per-task detail, of this program's own modules (RUST_LOG=debug
    /// adds every library's, down to each HTTP/2 frame).
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    /// As RUST_LOG would write it.
    pub fn directive(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => {
                "info,nqueens=debug,nqueens_cli=debug,nqueens_coordinator=debug,\
                 nqueens_worker=debug,nqueens_common=debug,nqueens_engine=debug,\
                 nqueens_gpu=debug,nqueens_proto=debug,nqueens_metrics=debug"
            }
            LogLevel::Trace => "trace",
        }
    }
}

/// `--core`, for every command that counts.
#[derive(clap::Args, Clone, Copy)]
pub struct CoreArg {
    /// The engine's inner loop: the fastest this CPU has, or one forced
    /// (a core this CPU lacks is refused).
    #[arg(long, value_enum, default_value = "auto", env = "NQUEENS_CORE")]
    pub core: Core,
}

/// A rate above 0: `4.2e10`, `42000000000`.
pub(crate) fn parse_rate(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!("'{s}': give nodes per second above 0, e.g. 4.2e10")),
    }
}

/// A size in bytes: digits with an optional K, M, G or T (powers of 1024).
pub(crate) fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => {
                    return Err(format!(
                        "'{s}': use a number of bytes with K, M, G or T, e.g. 4G"
                    ))
                }
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{s}': use a number of bytes with K, M, G or T, e.g. 4G"))?;
    n.checked_mul(1 << shift)
        .filter(|&b| b > 0)
        .ok_or_else(|| format!("'{s}': give a size above 0 and below 16 EiB"))
}

/// How `solve` counts (`--mode`).
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Backtracking: every completion walked, many subproblems at once in
    /// SIMD lanes.
    Backtrack,
    /// The half-board join: each half of the columns enumerated from
    /// quarter tables, and compatible halves counted in pairs.
    Join,
}

/// Which inner loop the engine counts with (`--core`).
#[derive(Clone, Copy, ValueEnum)]
pub enum Core {
    /// The fastest this CPU has: AVX-512 or AVX2 (whichever a short race at start-up finds
    /// faster), else scalar.
    Auto,
    /// One search at a time, on any CPU.
    Scalar,
    /// Sixteen searches at a time in AVX2 lanes (x86-64 CPUs since 2013), any N.
    Avx2,
    /// The AVX2 lanes built for AVX-512 (F, VL, BW, DQ: 32 registers, rotates, masks), any N.
    Avx512,
    /// The best graphics card here (Vulkan, Metal or DX12; a software device such as lavapipe
    /// if it is all there is), one search per GPU thread, by backtracking. `solve` and `bench`
    /// feed it with the threads the card asks for (16 for a hardware GPU) unless --threads
    /// says. A worker counts on its cards alone, each fed by the threads it asks for; its
    /// --threads adds that many CPU threads beside them (counting on the fastest CPU path).
    Gpu,
}

impl Core {
    /// The path asked for, checked against this CPU.
    pub fn path(self) -> Result<Option<Path>, Failure> {
        let want = match self {
            Core::Auto => return Ok(None),
            Core::Scalar => Path::Scalar,
            Core::Avx2 => Path::Avx2,
            Core::Avx512 => Path::Avx512,
            Core::Gpu => return Ok(Some(Path::Gpu)),
        };
        let have = Path::available();
        if have.contains(&want) {
            Ok(Some(want))
        } else {
            let names: Vec<&str> = have.iter().map(|p| p.name()).collect();
            Err(Failure::BadInput(format!(
                "this CPU cannot run the {} core; cores available here: {} (or leave out --core)",
                want.name(),
                names.join(", ")
            )))
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    /// `1: 0 4 7 5 2 6 1 3`, the column of each row's queen.
    Rows,
    /// A diagram of `Q` and `.`, one line per row.
    Board,
}

/// An inclusive range of board sizes: `4..16`, `4..=16` or `12`.
#[derive(Clone, Copy)]
pub struct SizeRange(pub Size, pub Size);

impl std::str::FromStr for SizeRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, b) = s
            .split_once("..=")
            .or_else(|| s.split_once(".."))
            .unwrap_or((s, s));
        let range = |e: String| format!("{e} (a size N, or a range FROM..TO such as 4..16)");
        let (from, to): (Size, Size) = (a.parse().map_err(range)?, b.parse().map_err(range)?);
        if from > to {
            return Err(format!(
                "the range {s} is empty: write FROM..TO with FROM <= TO"
            ));
        }
        Ok(SizeRange(from, to))
    }
}

/// What `nqueens token` does.
#[derive(Subcommand, Clone)]
pub enum TokenAction {
    /// Make a new worker token named NAME and print it (once).
    Issue {
        /// The credential's name: 1 to 64 letters, digits, '-', '_' or
        /// '.' (a machine's, so that `nqueens workers` and the audit say
        /// whose results are whose).
        name: String,
        /// The coordinator's data directory.
        #[arg(long, value_name = "DIR", env = "NQUEENS_DATA_DIR")]
        data_dir: PathBuf,
        /// DIR is for a coordinator not started yet: make it (its workers
        /// will need tokens from the first start).
        #[arg(long)]
        new: bool,
    },
    /// Revoke the worker token named NAME.
    Revoke {
        /// The credential's name, as `token list` shows it.
        name: String,
        /// The coordinator's data directory.
        #[arg(long, value_name = "DIR", env = "NQUEENS_DATA_DIR")]
        data_dir: PathBuf,
    },
    /// List the names of the issued worker tokens.
    List {
        /// The coordinator's data directory.
        #[arg(long, value_name = "DIR", env = "NQUEENS_DATA_DIR")]
        data_dir: PathBuf,
    },
}

/// Where the coordinator is and how to prove who we are.
#[derive(clap::Args, Clone)]
pub struct Connect {
    /// The coordinator's address.
    #[arg(
        long,
        env = "NQUEENS_COORDINATOR",
        default_value = "http://127.0.0.1:7700"
    )]
    pub coordinator: String,
    /// File holding the operator token (or NQUEENS_OPERATOR_TOKEN).
    #[arg(long, value_name = "F")]
    pub token_file: Option<PathBuf>,
    /// Trust this CA certificate (PEM) for an https:// coordinator.
    #[arg(long, value_name = "F")]
    pub tls_ca: Option<PathBuf>,
    /// Present this client certificate (PEM) to a coordinator that requires one (mTLS).
    #[arg(long, value_name = "F", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "F", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Print JSON for scripts.
    #[arg(long)]
    pub json: bool,
}

/// How progress is shown while following a job.
#[derive(clap::Args, Clone, Copy)]
pub struct Progress {
    /// Seconds between progress lines when the output is not a terminal.
    #[arg(long, value_name = "S", default_value_t = 10.0, value_parser = positive_seconds)]
    pub interval: f64,
}

pub(crate) fn share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 && x <= 1.0 => Ok(x),
        _ => Err(format!("'{s}' is not a share between 0 (excluded) and 1")),
    }
}

pub(crate) fn probability(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err(format!("'{s}' is not a probability between 0 and 1")),
    }
}

/// An address to listen on: an IP address and a port.
pub(crate) fn socket_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    s.parse().map_err(|_| {
        format!(
            "'{s}' is not an IP address and port: give one such as 127.0.0.1:7700 (this \
             machine only), 0.0.0.0:7700 (every interface) or [::1]:7700; a host name is not \
             taken, and port 0 picks a free one"
        )
    })
}

/// A job's id, as `nqueens jobs` lists them.
pub(crate) fn job_id(s: &str) -> Result<u64, String> {
    s.parse::<u64>().map_err(|_| {
        format!("'{s}' is not a job id: give a number `nqueens jobs` lists, such as 3")
    })
}

pub(crate) fn positive_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 && x <= 86_400.0 => Ok(x),
        _ => Err(format!(
            "'{s}' is not a number of seconds above 0 and at most 86400"
        )),
    }
}

/// Redundant verification of a job's tasks.
#[derive(clap::Args, Clone, Copy)]
pub struct Check {
    /// Workers that must agree on each task, 1 to 3: 2 has every task
    /// checked by a second worker (a mismatch goes to a third; the odd
    /// one out is quarantined).
    #[arg(long, value_name = "R", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=3))]
    pub redundancy: u32,
    /// With --redundancy, check only this share of the tasks (above 0, at
    /// most 1), chosen by a hash of job and task.
    #[arg(long, value_name = "F", default_value_t = 1.0, value_parser = share)]
    pub verify_fraction: f64,
    /// With --redundancy, a checked task is done only when a result counted on a graphics
    /// card and one counted on a CPU agree (each task then goes to a worker of the kind it
    /// still lacks): different hardware checks each other.
    #[arg(long)]
    pub cross_device: bool,
}

#[cfg(test)]
mod tests {
    use super::LogLevel;

    #[test]
    fn an_address_to_listen_on_says_what_it_takes() {
        assert_eq!(super::socket_addr("0.0.0.0:7700").unwrap().port(), 7700);
        for bad in ["localhost:7750", ":7750", "7750"] {
            let e = super::socket_addr(bad).unwrap_err();
            assert!(e.contains("127.0.0.1:7700") && e.contains(bad), "{e}");
        }
    }
    use std::sync::{Arc, Mutex};

    /// What a subscriber wrote.
    #[derive(Clone, Default)]
    struct Written(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Written {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// `--log-level debug` is this program's detail: a worker's leases,
    /// not the HTTP/2 library's frames (thousands a second), whose own
    /// information still shows.
    #[test]
    fn debug_is_this_programs_detail_not_every_librarys() {
        let written = Written::default();
        let out = written.clone();
        let filter = tracing_subscriber::EnvFilter::new(LogLevel::Debug.directive());
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(move || out.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::debug!(target: "h2::codec::framed_read", "a frame");
            tracing::debug!(target: "nqueens_worker::run", "leased 3 tasks");
            tracing::debug!(target: "nqueens_coordinator::hub", "a lease");
            tracing::info!(target: "h2::proto", "a library's information");
        });
        let text = String::from_utf8(written.0.lock().unwrap().clone()).unwrap();
        for shown in ["leased 3 tasks", "a lease", "a library's information"] {
            assert!(text.contains(shown), "{shown}: {text}");
        }
        assert!(!text.contains("a frame"), "{text}");
    }
}
