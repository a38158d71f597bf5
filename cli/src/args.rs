//! The command line: every subcommand, its options and its `--help`.

use crate::opts::*;
use clap::{Parser, Subcommand};
use nqueens_common::plan::Strategy;
use nqueens_common::Size;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "nqueens",
    version,
    about = "Count the solutions of the N-Queens problem exactly",
    long_about = "Count the solutions of the N-Queens problem exactly: all of them (total) and \
                  those distinct up to rotation and reflection (unique), with a multithreaded, \
                  symmetry-aware bitmap search.",
    after_help = "Examples:\
        \n  nqueens solve 16\
        \n  nqueens solve 18 --state ./run18      (resumable after Ctrl-C or a crash)\
        \n  nqueens plan 20 --strategy frame\
        \n  nqueens table 4..14\
        \n  nqueens coordinator --data-dir ./nq-data\
        \n  nqueens worker --coordinator http://127.0.0.1:7700\
        \n  nqueens submit 20 --strategy frame && nqueens watch 1\
        \n\
        \nExit codes: 0 success, 1 failed (wrong count, no completion, job cancelled), 2 \
        bad input, 3 coordinator unreachable, 4 unknown job, 5 token refused, 130 \
        interrupted."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Count the total and unique solutions of one N.
    #[command(after_help = "Examples:\
        \n  nqueens solve 16\
        \n  nqueens solve 17 --threads 1\
        \n  nqueens solve 12 --json\
        \n  nqueens solve 17 --strategy frame\
        \n  nqueens solve 19 --state ./run19\
        \n\
        \nWithout --strategy the whole search is cut into pieces in memory. With --strategy \
        the count goes through a plan's tasks, as a cluster would run it (see `nqueens \
        plan`).\
        \n\
        \nWith --state DIR the run is durable: a coordinator and a worker run inside this \
        process, every finished task is on disk in DIR, and the same command after Ctrl-C, \
        kill -9 or a power cut continues where it stopped (the plan `submit` would make: \
        see `nqueens submit --help`).\
        \n\
        \nThe result is compared with the published counts (OEIS A000170, A002562) up to \
        N=27; a difference is reported as an error (exit code 1).")]
    Solve(SolveArgs),
    /// Split one N into subproblems and tasks, and summarise (or list) them.
    #[command(after_help = "Examples:\
        \n  nqueens plan 20 --strategy frame\
        \n  nqueens plan 16 --strategy prefix --depth 5 --tasks 200\
        \n  nqueens plan 10 --strategy frame --list\
        \n  nqueens plan 27 --strategy frame --tasks 100000 --task 42\
        \n  nqueens plan 28 --strategy frame --estimate\
        \n\
        \nframe: one queen on each border line, --depth 1 the 4 outer lines (rows and \
        columns 0 and N-1: rings), --depth 2 the 8 lines 0, 1, N-2, N-1; one frame per \
        symmetry orbit with its weight (2, 4 or 8; 1 if fully symmetric). rings: rings cut \
        into parts by the queens of their first K free rows (--depth 1 to 3), for tasks of \
        minutes at record sizes. prefix: the first K rows of the symmetry-pruned search \
        (--depth 2 to 11); each subproblem's class counts add up directly. halves (join mode \
        only, N=4 to 24): the whole board's choices of east rows. The unique count comes \
        from the half- and quarter-turn symmetric searches (Burnside).\
        \n\
        \nSubproblem ids are stable: the same N and options always give the same ids and \
        tasks.")]
    Plan(PlanArgs),
    /// Time the solver core against the plain bitmap baseline kept in the repo.
    #[command(after_help = "Examples:\
        \n  nqueens bench\
        \n  nqueens bench 14..18 --runs 3\
        \n  nqueens bench 17 --no-baseline --json\
        \n  nqueens bench 19 --core gpu --tune\
        \n\
        \nEach N is counted by the fast core on one thread and on T threads (default: all \
        cores), then by the baseline (a Somers-style bitmap search using only the mirror \
        symmetry) on one thread. Times are medians of --runs in-process runs; every count \
        is checked. speedup = baseline time / fast core time, both on one thread. The core \
        column says which inner loop counted: avx512 or avx2 (16 searches in lanes; the \
        faster of the two on this CPU unless --core says), scalar, or search (N < 6).\
        \n\
        \n--tune counts N (the range's last) on the card as `solve --core gpu` does, once per \
        tuning: the start (the card's defaults and any NQUEENS_GPU_* set), then each knob \
        turned from the fastest so far (where the rows' tables live, steps per launch, \
        feeding threads, jobs per batch, launches per round; under NQUEENS_GPU_API=cuda \
        threads per block, feeding threads and jobs per batch). It prints each count's time, \
        rate, the card's busy share and searches at once, then the NQUEENS_GPU_* settings \
        of the fastest, for the workers on that card. Pick an N the card counts in a few \
        seconds (19 or 20 on a datacenter GPU).")]
    Bench(BenchArgs),
    /// Run the coordinator: durable jobs, task leases over gRPC, exact totals.
    #[command(after_help = "Examples:\
        \n  nqueens coordinator --data-dir ./nq-data\
        \n  nqueens coordinator --listen 0.0.0.0:7700 --data-dir /var/lib/nqueens \\\
        \n      --worker-token-file /etc/nqueens/worker.token \\\
        \n      --operator-token-file /etc/nqueens/operator.token\
        \n\
        \nEvery result is on disk (fsync) before a worker is told it was stored. After a \
        crash or kill -9, start it again on the same --data-dir: every job continues where \
        it was. Tokens can also come from NQUEENS_WORKER_TOKEN and NQUEENS_OPERATOR_TOKEN. \
        Listening beyond loopback without both tokens is refused unless --insecure is \
        given. Every option can also be set by the NQUEENS_* variable its help names (a \
        flag given on the command line wins). Logs: --log-level and --log-format; RUST_LOG, \
        when set, wins (e.g. RUST_LOG=info,nqueens_coordinator=debug).")]
    Coordinator(CoordinatorArgs),
    /// Run a worker: lease tasks from a coordinator and count them on every core.
    #[command(after_help = "Examples:\
        \n  nqueens worker --coordinator http://127.0.0.1:7700\
        \n  NQUEENS_COORDINATOR=http://coord:7700 nqueens worker \\\
        \n      --token-file /etc/nqueens/worker.token\
        \n\
        \nThe worker first checks itself on N=8..12 (and each card on N=10..12) and refuses \
        to work if it miscounts. It counts on every thread and every hardware GPU (--gpus), \
        keeps about 5 seconds of tasks in hand at its measured rate, heartbeats its leases, \
        and keeps each result until the coordinator has stored it, reconnecting with \
        backoff when it is away. SIGTERM or Ctrl-C: stop leasing, hand back unstarted \
        tasks, finish running ones within --grace, exit 0. A second signal exits at once \
        (code 130). It writes nothing to disk. Every option can also be set by the \
        NQUEENS_* variable its help names (a flag given on the command line wins); `nqueens \
        doctor --role worker` checks this machine's setup.")]
    Worker(WorkerArgs),
    /// Submit a job to a coordinator: count one N on its workers.
    #[command(after_help = "Examples:\
        \n  nqueens submit 18\
        \n  nqueens submit 24 --strategy frame --tasks 100000 --watch\
        \n  nqueens submit 18 --redundancy 2\
        \n  NQUEENS_COORDINATOR=http://coord:7700 nqueens submit 20 --json\
        \n\
        \nprints the job id; follow it with `nqueens watch JOB`. Submitting the same N \
        twice makes two jobs. Beyond N=21 the default rings plans cut the work into tasks \
        of minutes however large N is (see `nqueens plan`).")]
    Submit(SubmitArgs),
    /// Show one job in detail, or the coordinator's jobs and workers in brief.
    #[command(
        after_help = "Examples:\n  nqueens status\n  nqueens status 3\n  nqueens status 3 --json"
    )]
    Status {
        /// The job id (all jobs when omitted).
        #[arg(value_parser = crate::opts::job_id)]
        job: Option<u64>,
        #[command(flatten)]
        connect: Connect,
    },
    /// Follow a job until it ends: progress by expected work, rate, ETA, counts so far.
    #[command(after_help = "Examples:\
        \n  nqueens watch 3\
        \n  nqueens watch 3 --json | jq .done\
        \n  nqueens watch 3 --interval 60 > progress.log\
        \n\
        \nOn a terminal: a progress bar. Otherwise: one line every --interval seconds (JSON \
        lines with --json) and a last one when the job ends. Exit code 0 when the job is \
        done and its counts match the published ones, 1 when it was cancelled or differs.")]
    Watch {
        /// The job id.
        #[arg(value_parser = crate::opts::job_id)]
        job: u64,
        #[command(flatten)]
        progress: Progress,
        #[command(flatten)]
        connect: Connect,
    },
    /// List the coordinator's jobs.
    #[command(after_help = "Examples:\n  nqueens jobs\n  nqueens jobs --json")]
    Jobs {
        #[command(flatten)]
        connect: Connect,
    },
    /// List the workers the coordinator has seen.
    #[command(after_help = "Examples:\n  nqueens workers\n  nqueens workers --json")]
    Workers {
        #[command(flatten)]
        connect: Connect,
    },
    /// Ask a coordinator whether it is serving (gRPC health): for container
    /// health checks and scripts that wait for a coordinator to come up.
    #[command(after_help = "Examples:\
        \n  nqueens health --coordinator http://coord:7700\
        \n  until nqueens health 2>/dev/null; do sleep 1; done\
        \n\
        \nExit code 0 when the coordinator answers SERVING, 1 when it answers otherwise, 3 \
        when it cannot be reached. Needs no token.")]
    Health {
        #[command(flatten)]
        connect: Connect,
    },
    /// Re-check a job from its journal: CRCs, plan, every result, the sums,
    /// the published counts; with a digest another site can compare.
    #[command(after_help = "Examples:\
        \n  nqueens audit 3\
        \n  nqueens audit 3 --data-dir /var/lib/nqueens   (no coordinator needed)\
        \n  nqueens audit 3 --json | jq -r .digest\
        \n\
        \nThe audit reads the journal file, not the coordinator's memory: every record's \
        CRC, the plan re-computed and compared with the digest journaled when the job was \
        planned, each counted result checked against its task, the totals summed again from \
        nothing (checked 128-bit arithmetic) and compared with the running totals and the \
        published counts. The digest (SHA-256 of the plan and every counted result, without \
        node counts or timings) is the same at any site that counted the same plan \
        correctly. Exit code 0 when nothing is wrong (a job still running is audited so \
        far), 1 otherwise.")]
    Audit {
        /// The job id (`submit` prints it; `nqueens jobs` lists them).
        #[arg(value_parser = crate::opts::job_id)]
        job: u64,
        /// Read the journal in this coordinator data directory instead of
        /// asking a coordinator (works while one runs, or with none).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        #[command(flatten)]
        connect: Connect,
    },
    /// Stream every counted task of a job (CSV or JSON lines) for a third
    /// party to re-add and re-audit.
    #[command(after_help = "Examples:\
        \n  nqueens export 3 > job3.csv\
        \n  nqueens export 3 --format jsonl --output job3.jsonl\
        \n\
        \nOne row per counted task, in task order: the task and its subproblem range (lo, \
        hi, skip, take, subproblems, as `nqueens plan N ... --task I` shows them), its \
        counts (c1, c2, c4, c8, weighted, half, quarter, nodes), checksum, worker, unix_ms, \
        elapsed_ms and solver_version. Every integer in JSON lines is a decimal string. At \
        the end the rows are re-added and the sum compared with the job's counts (on \
        standard error); exit code 1 if they differ. A running job exports the tasks \
        counted so far.")]
    Export {
        /// The job id (`submit` prints it; `nqueens jobs` lists them).
        #[arg(value_parser = crate::opts::job_id)]
        job: u64,
        /// csv or jsonl (`--json` means jsonl).
        #[arg(long, value_enum, default_value = "csv", conflicts_with = "json")]
        format: crate::export::Format,
        /// Write here instead of standard output.
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
        #[command(flatten)]
        connect: Connect,
    },
    /// Copy a coordinator's data directory while it runs: its journal (every
    /// acknowledged result) and secrets, read back and checked.
    #[command(after_help = "Examples:\
        \n  nqueens backup /mnt/other-disk/nq-$(date +%F) --data-dir /var/lib/nqueens\
        \n  nqueens coordinator --data-dir /mnt/other-disk/nq-2026-11-29   (to restore)\
        \n\
        \nThe copy holds every record the journal held when the backup began (and those \
        written while it ran, up to its end), as a kill -9 would leave them: the sealed \
        segments, the live journal's whole records, lease.key, worker-tokens and the \
        worker-auth mark. The store and checkpoints are left out: a coordinator started \
        on the copy (with the original's flags: operator token file, TLS files) rebuilds \
        them from the journal (replaying it whole once). Every record \
        is read back from the copy with its CRC before the backup is called made; it is \
        made beside DEST as .DEST.partial and renamed to DEST only then, so a backup cut \
        short leaves no DEST. DEST must be new or empty, outside DIR; put it on another \
        disk. Safe while the coordinator runs; takes no lock. Exit code 2 if DEST is not \
        empty or inside DIR, or DIR is no data directory; 1 if the journal is damaged or \
        the copy cannot be written.")]
    Backup {
        /// The new directory to copy into.
        dest: PathBuf,
        /// The coordinator's data directory.
        #[arg(long, value_name = "DIR", env = "NQUEENS_DATA_DIR")]
        data_dir: PathBuf,
    },
    /// Issue, revoke or list per-worker tokens, stored hashed in a coordinator's data directory.
    #[command(after_help = "Examples:\
        \n  nqueens token issue rack1-node07 --data-dir /var/lib/nqueens > node07.token\
        \n  nqueens token revoke rack1-node07 --data-dir /var/lib/nqueens\
        \n  nqueens token list --data-dir /var/lib/nqueens\
        \n  nqueens token issue node01 --data-dir /var/lib/nqueens --new > node01.token\
        \n\
        \nAn issued token is printed once; the data directory keeps only its SHA-256. A \
        running coordinator accepts it (as a worker token) and forgets a revoked one within \
        seconds. The first token issued for a coordinator whose workers were open makes it \
        refuse workers without a token from then on (within seconds, and after restarts). \
        DIR must be a coordinator's data directory (exit code 2 if it holds no journal and no \
        tokens); --new issues into one whose coordinator has not started yet. Redundancy counts votes by credential: two worker ids under one token are \
        one vote.")]
    Token {
        #[command(subcommand)]
        action: TokenAction,
    },
    /// Stop handing out a job's tasks (running ones finish); `resume` undoes it.
    #[command(after_help = "Examples:\
        \n  nqueens pause 3\
        \n  nqueens resume 3\
        \n\
        \nDurable (journaled): a paused job stays paused across restarts. Workers finish \
        and report the tasks they hold; `status` shows the job as paused.")]
    Pause {
        /// The job id (`submit` prints it; `nqueens jobs` lists them).
        #[arg(value_parser = crate::opts::job_id)]
        job: u64,
        #[command(flatten)]
        connect: Connect,
    },
    /// Hand out a paused job's tasks again.
    #[command(after_help = "Example:\
        \n  nqueens resume 3")]
    Resume {
        /// The job id (`submit` prints it; `nqueens jobs` lists them).
        #[arg(value_parser = crate::opts::job_id)]
        job: u64,
        #[command(flatten)]
        connect: Connect,
    },
    /// End a job for good: workers stop its tasks at their next heartbeat.
    #[command(after_help = "Examples:\
        \n  nqueens cancel 3\
        \n  nqueens export 3 > job3.csv && nqueens delete 3 --yes\
        \n\
        \nDurable and final: a cancelled job is never resumed (submit it again to count it); \
        its counted tasks stay for `export` and `audit` until `delete`.")]
    Cancel {
        /// The job id (`submit` prints it; `nqueens jobs` lists them).
        #[arg(value_parser = crate::opts::job_id)]
        job: u64,
        #[command(flatten)]
        connect: Connect,
    },
    /// Delete a finished or cancelled job, its task list and its results.
    #[command(after_help = "Examples:\
        \n  nqueens export 3 > job3.csv && nqueens delete 3 --yes\
        \n\
        \nThe job leaves the coordinator's state and store (journaled: a restart does not \
        bring it back, and its id is never given again); `status`, `export` and `audit` \
        then say it was deleted. The journal's old segments still hold its records. A \
        running or paused job is refused: cancel it first.")]
    Delete {
        /// The job id (`submit` prints it; `nqueens jobs` lists them).
        #[arg(value_parser = crate::opts::job_id)]
        job: u64,
        /// Confirm: without it nothing is deleted.
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        connect: Connect,
    },
    /// Put a job's dead tasks (out of retries) back in its schedule.
    #[command(
        after_help = "A task whose leases kept expiring (a worker crashing on it, a network that drops \
        its results) is marked dead after the retry budget and the job cannot finish. Once \
        the cause is fixed, `nqueens retry JOB` hands those tasks out again, first in line, \
        each with a fresh budget. Durable (journaled); refused for a cancelled job or one \
        with no dead tasks.\
        \n\
        \nExample:\
        \n  nqueens retry 3"
    )]
    Retry {
        /// The job id (`submit` prints it; `nqueens jobs` lists them).
        #[arg(value_parser = crate::opts::job_id)]
        job: u64,
        #[command(flatten)]
        connect: Connect,
    },
    /// Check this machine's setup against a coordinator: reachable, TLS,
    /// health, the token's role, the CPU and engine path, a speed sample.
    #[command(after_help = "Examples:\
        \n  nqueens doctor\
        \n  nqueens doctor --coordinator https://coord:7700 --tls-ca ca.pem \\\
        \n      --token-file op.token\
        \n  nqueens doctor --role worker --token-file /etc/nqueens/worker.token\
        \n  nqueens doctor --json \\\
        \n      | jq -r '.checks[] | select(.outcome == \"fail\") | .detail'\
        \n\
        \nOne line per check: ok, FAIL, skip (an earlier check failed) or info. The token \
        check makes one call only its role may make (operator: list the jobs; worker: a \
        heartbeat naming no worker, which records nothing). The speed sample counts N=15 on \
        one thread for --seconds, every count checked, as a worker here would count. Exit \
        code 0 when no check failed, 1 otherwise.")]
    Doctor {
        /// Whose token to check: an operator's (NQUEENS_OPERATOR_TOKEN) or a
        /// worker's (NQUEENS_WORKER_TOKEN).
        #[arg(long, value_enum, default_value = "operator")]
        role: Role,
        /// Seconds for the speed sample.
        #[arg(long, value_name = "S", default_value_t = 5.0, value_parser = positive_seconds)]
        seconds: f64,
        #[command(flatten)]
        core: CoreArg,
        #[command(flatten)]
        connect: Connect,
    },
    /// Load-test a coordinator: many simulated workers over real gRPC.
    ///
    /// The simulated workers count nothing: they serve only synthetic jobs
    /// (submit one with `--strategy synthetic`), whose answers follow from
    /// the task index, and stop with an error, handing the lease back, at
    /// the first task of any other job. The run ends after --seconds, or
    /// --idle seconds after the last task was handed out, or on Ctrl-C or
    /// SIGTERM; it prints reports
    /// acknowledged per second and lease and report latencies.
    #[command(
        after_help = "Examples:\n  nqueens submit 8 --strategy synthetic --tasks 1000000\n  \
        nqueens loadgen --workers 1000 --seconds 30\n  \
        nqueens loadgen --workers 1000 --own-connections --threads 4 --task-ms 30\n  \
        nqueens loadgen --workers 200 --fail-rate 0.05 --kill-rate 0.01 --json"
    )]
    Loadgen(crate::loadgen::Config),
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  nqueens completions bash > ~/.local/share/bash-completion/completions/nqueens\n  \
        nqueens completions zsh > ~/.zfunc/_nqueens\n  nqueens completions fish > ~/.config/fish/completions/nqueens.fish"
    )]
    Completions { shell: clap_complete::Shell },
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
        after_help = "Input (the classic judge format): a line with k, then k lines 'row col' (0-based) \
        of the given queens. Output: one full board holding them, 'Q' and '.'.\
        \n\
        \nExample:\
        \n  printf '2\\n2 2\\n5 3\\n' | nqueens complete\
        \n\
        \nExit codes: 0 completed, 1 no completion exists, 2 bad input (malformed, off the board, or queens that attack each other)."
    )]
    Complete {
        /// Board size, 1 to 32.
        #[arg(long, default_value = "8")]
        n: Size,
    },
}

/// `nqueens solve`'s options.
#[derive(clap::Args)]
pub struct SolveArgs {
    /// Board size, 1 to 32.
    #[arg(allow_negative_numbers = true)]
    pub n: Size,
    #[command(flatten)]
    pub threads: Threads,
    /// Count through a plan of this strategy.
    #[arg(long, value_parser = strategies())]
    pub strategy: Option<Strategy>,
    #[command(flatten)]
    pub shape: PlanShape,
    /// Keep the run in DIR, so it can stop and resume.
    #[arg(long, value_name = "DIR")]
    pub state: Option<PathBuf>,
    /// Memory the join may use in all (e.g. 512M, 4G): five eighths for
    /// its quarter tables, the rest shared by the threads. A board that
    /// needs more is refused (exit code 2) before it is counted.
    /// Default: 2^26 quarter placements and 2^24 halves per side.
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    pub memory: Option<u64>,
    #[command(flatten)]
    pub core: CoreArg,
    #[command(flatten)]
    pub progress: Progress,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// With --state: corrupt the self-test (to check that a bad build
    /// refuses to count).
    #[arg(long, hide = true, requires = "state")]
    pub self_test_fault: bool,
}

/// `nqueens plan`'s options.
#[derive(clap::Args)]
pub struct PlanArgs {
    /// Board size, 1 to 32.
    #[arg(allow_negative_numbers = true)]
    pub n: Size,
    /// How to split the search [default: as `solve --state` and
    /// `submit` do: frame by backtracking up to N=21, halves by the join
    /// up to N=21, else rings; with no --mode, N=18..21 are counted by
    /// the join].
    #[arg(long, value_parser = strategies())]
    pub strategy: Option<Strategy>,
    #[command(flatten)]
    pub shape: PlanShape,
    /// List every subproblem (id and description), task by task.
    #[arg(long, conflicts_with = "task")]
    pub list: bool,
    /// List the subproblems of this task only.
    #[arg(long, value_name = "I")]
    pub task: Option<u64>,
    /// Project the whole plan's core-time on this machine from a seeded
    /// random sample counted with the engine (backtracking: Knuth's
    /// estimator; join: random subproblems counted and timed), with an
    /// error bar, the path used and, for the join, the memory a task
    /// needs. Without --mode, both modes, each with its own default
    /// strategy unless --strategy is given.
    #[arg(long, conflicts_with_all = ["list", "task"])]
    pub estimate: bool,
    /// Seconds to spend on --estimate (more: a smaller error bar).
    #[arg(long, value_name = "S", default_value_t = 20, requires = "estimate")]
    pub seconds: u64,
    /// Seed of the --estimate sample (the same seed draws the same sample).
    #[arg(long, default_value_t = 1, requires = "estimate")]
    pub seed: u64,
    /// Memory the join may use for one task in --estimate (as `solve
    /// --memory` with one thread).
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes, requires = "estimate")]
    pub memory: Option<u64>,
    /// A graphics card's rate in nodes per second (the nodes/s of `nqueens bench --core
    /// gpu` at a large N): --estimate then also projects the backtracking in GPU-hours.
    #[arg(long, value_name = "NODES/S", requires = "estimate", value_parser = parse_rate)]
    pub gpu_rate: Option<f64>,
    #[command(flatten)]
    pub core: CoreArg,
    /// Print JSON (one object; with --list or --task, one per subproblem).
    #[arg(long)]
    pub json: bool,
}

/// `nqueens bench`'s options.
#[derive(clap::Args)]
pub struct BenchArgs {
    /// Range of N, both ends included: FROM..TO (or a single N).
    #[arg(default_value = "14..16")]
    pub range: SizeRange,
    #[command(flatten)]
    pub threads: Threads,
    /// Runs per figure; the median is reported.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub runs: u32,
    /// Skip the baseline (it is several times slower).
    #[arg(long)]
    pub no_baseline: bool,
    /// Inner loop for the fast core (N >= 6).
    #[arg(
        long,
        value_enum,
        default_value = "auto",
        conflicts_with = "every_core"
    )]
    pub core: Core,
    /// Time every core this CPU has, one row each.
    #[arg(long)]
    pub every_core: bool,
    /// With --core gpu: find the card's fastest tuning on the range's
    /// last N (see below).
    #[arg(long, conflicts_with = "every_core")]
    pub tune: bool,
    /// Print one JSON object per N.
    #[arg(long)]
    pub json: bool,
}

/// `nqueens coordinator`'s options.
#[derive(clap::Args)]
pub struct CoordinatorArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "NQUEENS_LISTEN", default_value = "127.0.0.1:7700", value_parser = crate::opts::socket_addr)]
    pub listen: std::net::SocketAddr,
    /// Directory for the journal, the store and the lock.
    #[arg(long, value_name = "DIR", env = "NQUEENS_DATA_DIR")]
    pub data_dir: PathBuf,
    /// File holding the token workers must present (or the token
    /// itself in NQUEENS_WORKER_TOKEN).
    #[arg(long, value_name = "F", env = "NQUEENS_WORKER_TOKEN_FILE")]
    pub worker_token_file: Option<PathBuf>,
    /// File holding the token operators must present (or the token
    /// itself in NQUEENS_OPERATOR_TOKEN).
    #[arg(long, value_name = "F", env = "NQUEENS_OPERATOR_TOKEN_FILE")]
    pub operator_token_file: Option<PathBuf>,
    /// Allow a non-loopback address without tokens.
    #[arg(long, env = "NQUEENS_INSECURE", value_parser = clap::builder::BoolishValueParser::new())]
    pub insecure: bool,
    /// Seconds a lease lives without a heartbeat.
    #[arg(
        long,
        value_name = "S",
        env = "NQUEENS_LEASE_TTL",
        default_value_t = 60
    )]
    pub lease_ttl: u64,
    /// Serve Prometheus metrics at http://ADDR/metrics (loopback only, unless --metrics-public).
    #[arg(long, value_name = "ADDR", env = "NQUEENS_METRICS", value_parser = crate::opts::socket_addr)]
    pub metrics: Option<std::net::SocketAddr>,
    /// Allow --metrics on a non-loopback address: the page carries no
    /// authentication, so guard it with a firewall or network policy.
    #[arg(
        long,
        requires = "metrics",
        env = "NQUEENS_METRICS_PUBLIC",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub metrics_public: bool,
    /// Refuse a job whose plan has more tasks than this (the coordinator
    /// keeps a bit per task; a plan's table grows with its groups).
    #[arg(long, value_name = "M", env = "NQUEENS_MAX_TASKS", default_value_t = nqueens_coordinator::state::Limits::default().max_tasks)]
    pub max_tasks: u64,
    /// Checkpoint the state after this many journal records (and every
    /// 5 minutes if anything changed): a restart reads the checkpoint
    /// and replays only the records after it.
    #[arg(long, value_name = "RECORDS", env = "NQUEENS_CHECKPOINT_EVERY", default_value_t = nqueens_coordinator::server::Checkpoints::default().records)]
    pub checkpoint_every: u64,
    /// Serve TLS with this certificate chain (PEM).
    #[arg(long, value_name = "F", requires = "tls_key", env = "NQUEENS_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "F", requires = "tls_cert", env = "NQUEENS_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM).
    #[arg(
        long,
        value_name = "F",
        requires = "tls_cert",
        env = "NQUEENS_TLS_CLIENT_CA"
    )]
    pub tls_client_ca: Option<PathBuf>,
    /// Start although exactly N acknowledged records are lost (the
    /// refusal names N): cut off the journal's end, or inside it (damage,
    /// a sealed segment deleted). Every record that still reads is kept at
    /// its number and the lost ones rebuilt (a job one defined is restated
    /// from the checkpoint); each file rewritten is kept as *.damaged-*,
    /// the checkpoints and the store are moved aside (*.lost-*) and rebuilt
    /// from the journal, and the lost results' tasks are counted again.
    #[arg(long, value_name = "N")]
    pub accept_lost_records: Option<u64>,
    #[command(flatten)]
    pub logs: Logs,
}

/// `nqueens worker`'s options.
#[derive(clap::Args)]
pub struct WorkerArgs {
    /// The coordinator's address.
    #[arg(
        long,
        env = "NQUEENS_COORDINATOR",
        default_value = "http://127.0.0.1:7700"
    )]
    pub coordinator: String,
    /// Counting threads [default: all cores].
    #[arg(long, value_name = "T", env = "NQUEENS_THREADS", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub threads: Option<u32>,
    /// File holding the worker token (or the token itself in
    /// NQUEENS_WORKER_TOKEN).
    #[arg(long, value_name = "F", env = "NQUEENS_WORKER_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Trust this CA certificate (PEM) for an https:// coordinator.
    #[arg(long, value_name = "F", env = "NQUEENS_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// Present this client certificate (PEM) to a coordinator that requires one (mTLS).
    #[arg(
        long,
        value_name = "F",
        requires = "tls_key",
        env = "NQUEENS_CLIENT_CERT"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(
        long,
        value_name = "F",
        requires = "tls_cert",
        env = "NQUEENS_CLIENT_KEY"
    )]
    pub tls_key: Option<PathBuf>,
    /// Name shown to operators [default: host-pid].
    #[arg(long, env = "NQUEENS_WORKER_NAME", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub name: Option<String>,
    /// Seconds a drain waits for running tasks before handing them back.
    #[arg(long, value_name = "S", env = "NQUEENS_GRACE", default_value_t = 300)]
    pub grace: u64,
    /// Serve this worker's Prometheus metrics at http://ADDR/metrics (rate, tasks, errors,
    /// leases, engine path; loopback only, unless --metrics-public).
    #[arg(long, value_name = "ADDR", env = "NQUEENS_WORKER_METRICS", value_parser = crate::opts::socket_addr)]
    pub metrics: Option<std::net::SocketAddr>,
    /// Allow --metrics on a non-loopback address: the page carries no
    /// authentication, so guard it with a firewall or network policy.
    #[arg(
        long,
        requires = "metrics",
        env = "NQUEENS_WORKER_METRICS_PUBLIC",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub metrics_public: bool,
    #[command(flatten)]
    pub core: CoreArg,
    /// Graphics cards to count on beside the CPU threads: auto (every hardware GPU; none
    /// if the machine has no Vulkan, Metal or DX12 driver), none, or card numbers such
    /// as 0,1 (software devices too). Each card gets its own stream of tasks.
    #[arg(
        long,
        value_name = "LIST",
        env = "NQUEENS_GPUS",
        default_value = "auto"
    )]
    pub gpus: nqueens_gpu::Choice,
    /// Memory the join may use in all while it counts a task (e.g. 4G):
    /// five eighths for its quarter tables, the rest shared by the
    /// threads. A task that needs more is not counted here: its lease
    /// runs out and another worker takes it.
    /// Default: 2^26 quarter placements and 2^24 halves per side.
    #[arg(long, value_name = "SIZE", env = "NQUEENS_MEMORY", value_parser = parse_bytes)]
    pub memory: Option<u64>,
    #[command(flatten)]
    pub logs: Logs,
    /// Corrupt the self-test (to check that a bad build refuses to work).
    #[arg(long, hide = true)]
    pub self_test_fault: bool,
}

/// `nqueens submit`'s options.
#[derive(clap::Args)]
pub struct SubmitArgs {
    /// Board size, 1 to 32.
    #[arg(allow_negative_numbers = true)]
    pub n: Size,
    /// How to split the search [default: frame up to N=17, halves (by
    /// the join) for N=18..21, rings from N=22; with --mode, frame by
    /// backtracking and halves by the join up to N=21].
    ///
    /// `nqueens plan N` shows the default plan for N.
    #[arg(long, value_parser = strategies())]
    pub strategy: Option<Strategy>,
    #[command(flatten)]
    pub shape: PlanShape,
    #[command(flatten)]
    pub check: Check,
    /// Follow the job until it ends, as `nqueens watch` does.
    #[arg(long)]
    pub watch: bool,
    #[command(flatten)]
    pub progress: Progress,
    #[command(flatten)]
    pub connect: Connect,
}
