//! `nqueens loadgen`: many simulated workers against a real coordinator,
//! over real gRPC, to measure what it sustains (acknowledged reports per
//! second, lease and report latency) and to shake it with abandoned
//! leases and dying workers.
//!
//! Simulated workers count nothing: they serve only synthetic jobs
//! (`submit --strategy synthetic`), whose answers follow from the task
//! index. A lease of any other job is handed back at once and the run
//! stops with an error, so a load test can never put made-up counts into
//! a real job.

use crate::exit::Failure;
use crate::format::dec;
use crate::opts::{positive_seconds, probability};
use nqueens_common::plan::{Plan, Strategy};
use nqueens_proto::client::connect_tls;
use nqueens_proto::refusal::Refusal;
use nqueens_proto::task_from_wire;
use nqueens_proto::v1;
use nqueens_proto::worker_client::{item_refusal, About, WorkerClient};
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What to simulate: `nqueens loadgen`'s options.
#[derive(clap::Args, Clone, Debug)]
pub struct Config {
    /// The coordinator's address.
    #[arg(
        long,
        env = "NQUEENS_COORDINATOR",
        default_value = "http://127.0.0.1:7700"
    )]
    pub coordinator: String,
    /// File holding the worker token (or the token itself in
    /// NQUEENS_WORKER_TOKEN).
    #[arg(long, value_name = "F", env = "NQUEENS_WORKER_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Trust this CA certificate (PEM) for an https:// coordinator.
    #[arg(long, value_name = "F", env = "NQUEENS_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// Simulated workers.
    #[arg(long, value_name = "W", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub workers: u32,
    /// Longest run, in seconds.
    #[arg(long, value_name = "S", default_value_t = 30.0, value_parser = positive_seconds)]
    pub seconds: f64,
    /// Stop once no task was handed out for this many seconds (longer
    /// than the coordinator's retry backoff, to finish a job's tail).
    #[arg(long, value_name = "S", default_value_t = 10.0, value_parser = positive_seconds)]
    pub idle: f64,
    /// Tasks each lease call asks for.
    #[arg(long, value_name = "B", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub batch: u32,
    /// Simulated counting time per task, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub task_ms: u64,
    /// Share of leases abandoned without a word (they expire).
    #[arg(long, value_name = "P", default_value_t = 0.0, value_parser = probability)]
    pub fail_rate: f64,
    /// Chance per lease that its worker dies holding all its leases and
    /// a new one takes its place.
    #[arg(long, value_name = "P", default_value_t = 0.0, value_parser = probability)]
    pub kill_rate: f64,
    /// Report each result in its own call instead of one call per lease
    /// batch (to measure what batching saves).
    #[arg(long)]
    pub one_report_per_call: bool,
    /// gRPC connections the simulated workers share.
    #[arg(long, value_name = "C", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub connections: u32,
    /// Give each simulated worker a connection of its own, as real
    /// workers have (a killed one dials a new one), instead of sharing
    /// --connections.
    #[arg(long, conflicts_with = "connections")]
    pub own_connections: bool,
    /// Tasks of a batch each simulated worker counts at once, as a
    /// worker's threads do (a batch of B takes ceil(B/T) task times).
    #[arg(long, value_name = "T", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub threads: u32,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// The worker token (read from --token-file or NQUEENS_WORKER_TOKEN).
    #[arg(skip)]
    pub token: Option<String>,
}

/// Latencies in microseconds.
#[derive(Default)]
struct Samples(Vec<u32>);

impl Samples {
    fn add(&mut self, d: Duration) {
        self.0.push(d.as_micros().min(u128::from(u32::MAX)) as u32);
    }

    /// The q-quantile in milliseconds (nearest rank).
    fn quantile_ms(&mut self, q: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        self.0.sort_unstable();
        let i = ((self.0.len() as f64 * q).ceil() as usize).clamp(1, self.0.len()) - 1;
        f64::from(self.0[i]) / 1000.0
    }
}

/// Counts shared by every simulated worker.
#[derive(Default)]
struct Counts {
    leased: AtomicU64,
    accepted: AtomicU64,
    duplicate: AtomicU64,
    refused: AtomicU64,
    abandoned: AtomicU64,
    killed: AtomicU64,
    errors: AtomicU64,
    /// Milliseconds since the start when a task was last granted.
    last_grant_ms: AtomicU64,
}

/// What a run measured (counts as decimal strings, like all JSON output).
#[derive(Debug, Serialize)]
pub struct Summary {
    pub workers: u32,
    /// gRPC connections they used (one each with --own-connections).
    pub connections: u32,
    /// Tasks each counted at once.
    pub threads: u32,
    pub seconds: f64,
    #[serde(serialize_with = "dec")]
    pub leased: u64,
    #[serde(serialize_with = "dec")]
    pub accepted: u64,
    pub accepted_per_second: f64,
    #[serde(serialize_with = "dec")]
    pub duplicate: u64,
    /// Reports refused (a lease that had expired and was taken by another).
    #[serde(serialize_with = "dec")]
    pub refused: u64,
    #[serde(serialize_with = "dec")]
    pub abandoned: u64,
    #[serde(serialize_with = "dec")]
    pub killed: u64,
    #[serde(serialize_with = "dec")]
    pub errors: u64,
    #[serde(serialize_with = "dec")]
    pub lease_calls: u64,
    pub lease_p50_ms: f64,
    pub lease_p99_ms: f64,
    pub lease_max_ms: f64,
    pub report_p50_ms: f64,
    pub report_p99_ms: f64,
    pub report_max_ms: f64,
}

/// Runs the simulation and prints its summary.
pub fn run(mut cfg: Config) -> Result<(), Failure> {
    cfg.token = crate::environ::read_token(cfg.token_file.as_ref(), "NQUEENS_WORKER_TOKEN")?;
    let runtime = tokio::runtime::Runtime::new()?;
    let summary = runtime.block_on(simulate(cfg.clone()))?;
    let mut out = std::io::stdout();
    if cfg.json {
        crate::format::json_line(&mut out, &summary)?;
    } else {
        writeln!(
            out,
            "{} simulated workers on {} connections for {:.1} s: {} reports acknowledged \
             ({:.0}/s), {} leased, {} duplicate, {} refused, {} abandoned, {} workers killed, \
             {} errors",
            summary.workers,
            summary.connections,
            summary.seconds,
            summary.accepted,
            summary.accepted_per_second,
            summary.leased,
            summary.duplicate,
            summary.refused,
            summary.abandoned,
            summary.killed,
            summary.errors
        )?;
        writeln!(
            out,
            "lease latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms over {} calls; \
             report latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            summary.lease_p50_ms,
            summary.lease_p99_ms,
            summary.lease_max_ms,
            summary.lease_calls,
            summary.report_p50_ms,
            summary.report_p99_ms,
            summary.report_max_ms
        )?;
    }
    Ok(())
}

/// Runs `cfg.workers` simulated workers until `cfg.seconds` have passed,
/// or until no task has been granted for `cfg.idle` seconds after some
/// were.
pub async fn simulate(cfg: Config) -> Result<Summary, Failure> {
    let shared = match cfg.own_connections {
        true => Vec::new(),
        false => (0..cfg.connections.max(1))
            .map(|_| dial(&cfg))
            .collect::<Result<Vec<_>, _>>()?,
    };
    let counts = Arc::new(Counts::default());
    let lease_ms = Arc::new(Mutex::new(Samples::default()));
    let report_ms = Arc::new(Mutex::new(Samples::default()));
    let foreign: Arc<Mutex<Option<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut sims = Vec::new();
    for k in 0..cfg.workers {
        let sim = Sim {
            client: match shared.is_empty() {
                true => dial(&cfg)?,
                false => shared[k as usize % shared.len()].clone(),
            }
            .renamed(format!("loadgen-{k}")),
            cfg: cfg.clone(),
            counts: Arc::clone(&counts),
            lease_ms: Arc::clone(&lease_ms),
            report_ms: Arc::clone(&report_ms),
            foreign: Arc::clone(&foreign),
            stop: Arc::clone(&stop),
            started,
            rng: Rng(0x9e37_79b9_7f4a_7c15 ^ u64::from(k).wrapping_mul(0xbf58_476d_1ce4_e5b9) | 1),
        };
        sims.push(tokio::spawn(sim.run(k)));
    }
    // Ctrl-C or SIGTERM ends the run early, with its summary.
    let signalled = Arc::clone(&stop);
    tokio::spawn(async move {
        crate::environ::signal().await;
        signalled.store(true, Ordering::Relaxed);
    });
    wait_for_end(&cfg, &counts, &foreign, &stop, started).await;
    stop.store(true, Ordering::Relaxed);
    for s in sims {
        s.await.expect("a simulated worker panicked");
    }
    let seconds = started.elapsed().as_secs_f64();
    if let Some(why) = foreign.lock().expect("lock").take() {
        return Err(Failure::BadInput(why));
    }
    let lease = std::mem::take(&mut *lease_ms.lock().expect("lock"));
    let report = std::mem::take(&mut *report_ms.lock().expect("lock"));
    Ok(summarise(&cfg, &counts, seconds, lease, report))
}

/// A client on a gRPC connection of its own (made on first use).
fn dial(cfg: &Config) -> Result<WorkerClient, Failure> {
    let channel = connect_tls(
        &cfg.coordinator,
        cfg.token.as_deref(),
        cfg.tls_ca.as_deref(),
        None,
    )
    .map_err(|e| Failure::BadInput(e.to_string()))?;
    Ok(WorkerClient::new(channel, "loadgen"))
}

/// Waits until the run is to end: `cfg.seconds` have passed, no task was
/// granted for `cfg.idle` seconds after some were, a signal set `stop`,
/// or a job was found not synthetic.
async fn wait_for_end(
    cfg: &Config,
    counts: &Counts,
    foreign: &Mutex<Option<String>>,
    stop: &AtomicBool,
    started: Instant,
) {
    let limit = Duration::from_secs_f64(cfg.seconds);
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let since_grant = started.elapsed().as_millis() as u64
            - counts
                .last_grant_ms
                .load(Ordering::Relaxed)
                .min(started.elapsed().as_millis() as u64);
        let idle =
            counts.leased.load(Ordering::Relaxed) > 0 && since_grant as f64 > cfg.idle * 1000.0;
        let signalled = stop.load(Ordering::Relaxed);
        if started.elapsed() >= limit
            || idle
            || signalled
            || foreign.lock().expect("lock").is_some()
        {
            return;
        }
    }
}

/// The run's summary from its counts and latencies.
fn summarise(
    cfg: &Config,
    counts: &Counts,
    seconds: f64,
    mut lease: Samples,
    mut report: Samples,
) -> Summary {
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let accepted = get(&counts.accepted);
    Summary {
        workers: cfg.workers,
        connections: match cfg.own_connections {
            true => cfg.workers,
            false => cfg.connections,
        },
        threads: cfg.threads,
        seconds,
        leased: get(&counts.leased),
        accepted,
        accepted_per_second: accepted as f64 / seconds,
        duplicate: get(&counts.duplicate),
        refused: get(&counts.refused),
        abandoned: get(&counts.abandoned),
        killed: get(&counts.killed),
        errors: get(&counts.errors),
        lease_calls: lease.0.len() as u64,
        lease_p50_ms: lease.quantile_ms(0.5),
        lease_p99_ms: lease.quantile_ms(0.99),
        lease_max_ms: lease.quantile_ms(1.0),
        report_p50_ms: report.quantile_ms(0.5),
        report_p99_ms: report.quantile_ms(0.99),
        report_max_ms: report.quantile_ms(1.0),
    }
}

/// xorshift64: each simulated worker's own stream of choices.
struct Rng(u64);

impl Rng {
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// How a simulated worker's lease batch ended.
enum Batch {
    /// The reports of the tasks it counted.
    Reports(Vec<v1::ReportItem>),
    /// The worker died holding its leases.
    Killed,
    /// A task was not of a synthetic job: the batch was handed back.
    Foreign,
}

/// One simulated worker.
struct Sim {
    client: WorkerClient,
    cfg: Config,
    counts: Arc<Counts>,
    lease_ms: Arc<Mutex<Samples>>,
    report_ms: Arc<Mutex<Samples>>,
    foreign: Arc<Mutex<Option<String>>>,
    stop: Arc<AtomicBool>,
    started: Instant,
    rng: Rng,
}

impl Sim {
    async fn register(&mut self) {
        let about = About {
            host: "loadgen".into(),
            cores: 1,
            solver_version: format!("loadgen {}", env!("CARGO_PKG_VERSION")),
            name: self.client.id().to_string(),
        };
        if self.client.register(&about).await.is_err() {
            self.counts.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Leases, counts and reports until the run stops, then adds its
    /// latencies to the run's. `k` numbers this worker; a killed one comes
    /// back under a new name.
    async fn run(mut self, k: u32) {
        let mut generation = 0;
        let (mut leases, mut reports) = (Samples::default(), Samples::default());
        self.register().await;
        while !self.stop.load(Ordering::Relaxed) {
            let Some(granted) = self.lease(&mut leases).await else {
                continue;
            };
            match self.work(&granted).await {
                Batch::Reports(batch) => self.report_batch(batch, &mut reports).await,
                Batch::Killed => {
                    // Dies with every lease it holds; a new worker starts.
                    generation += 1;
                    let name = format!("loadgen-{k}-{generation}");
                    self.client = match self.cfg.own_connections {
                        true => dial(&self.cfg)
                            .map_or_else(|_| self.client.renamed(&name), |c| c.renamed(&name)),
                        false => self.client.renamed(&name),
                    };
                    self.register().await;
                }
                Batch::Foreign => break,
            }
        }
        self.lease_ms.lock().expect("lock").0.append(&mut leases.0);
        self.report_ms
            .lock()
            .expect("lock")
            .0
            .append(&mut reports.0);
    }

    /// One lease call, timed into `leases`: the tasks granted, or `None`
    /// (after a pause) when the call failed or granted none.
    async fn lease(&mut self, leases: &mut Samples) -> Option<Vec<v1::Lease>> {
        let t0 = Instant::now();
        let answer = self.client.lease(self.cfg.batch).await;
        leases.add(t0.elapsed());
        let granted = match answer {
            Ok(r) => r.leases,
            Err(_) => {
                self.counts.errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
                return None;
            }
        };
        if granted.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
            return None;
        }
        let c = &self.counts;
        c.leased.fetch_add(granted.len() as u64, Ordering::Relaxed);
        c.last_grant_ms
            .fetch_max(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
        Some(granted)
    }

    /// Works through a lease batch, `--threads` tasks at a time: each
    /// task reported, abandoned (`--fail-rate`), or the worker killed
    /// (`--kill-rate`) with every lease it holds. A task of a job that is not synthetic hands the
    /// whole batch back.
    async fn work(&mut self, granted: &[v1::Lease]) -> Batch {
        let mut batch = Vec::new();
        for l in granted {
            let Some(report) = self.report_of(l) else {
                let refs = granted.iter().map(v1::Lease::lease_ref).collect();
                let _ = self.client.release(refs).await;
                return Batch::Foreign;
            };
            if self.rng.unit() < self.cfg.kill_rate {
                self.counts.killed.fetch_add(1, Ordering::Relaxed);
                return Batch::Killed;
            }
            if self.rng.unit() < self.cfg.fail_rate {
                self.counts.abandoned.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            batch.push(report);
        }
        // Counted `threads` at a time.
        let rounds = (batch.len() as u64).div_ceil(u64::from(self.cfg.threads));
        if self.cfg.task_ms > 0 && rounds > 0 {
            tokio::time::sleep(Duration::from_millis(self.cfg.task_ms * rounds)).await;
        }
        Batch::Reports(batch)
    }

    /// Sends a batch's reports in one call (one call each with
    /// `--one-report-per-call`), each call timed into `reports`, and
    /// counts their outcomes.
    async fn report_batch(&mut self, batch: Vec<v1::ReportItem>, reports: &mut Samples) {
        let calls: Vec<Vec<v1::ReportItem>> = if self.cfg.one_report_per_call {
            batch.into_iter().map(|r| vec![r]).collect()
        } else {
            vec![batch]
        };
        for call in calls.into_iter().filter(|c| !c.is_empty()) {
            let t0 = Instant::now();
            let answers = self.send(call).await;
            reports.add(t0.elapsed());
            let c = &self.counts;
            for a in answers {
                let counter = match a {
                    Ok(v1::ReportOutcome::Accepted) => &c.accepted,
                    Ok(v1::ReportOutcome::Duplicate) => &c.duplicate,
                    Err(Refusal::WrongState) => &c.refused,
                    _ => &c.errors,
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Sends reports (one by `Report`, several by `ReportMany`): each
    /// one's outcome, or why it was refused.
    async fn send(&mut self, call: Vec<v1::ReportItem>) -> Vec<Result<v1::ReportOutcome, Refusal>> {
        let n = call.len();
        if n == 1 {
            let item = call.into_iter().next().expect("one report");
            let sent = self.client.report(
                item.lease.unwrap_or_default(),
                item.result.unwrap_or_default(),
            );
            return vec![sent.await.map_err(|s| Refusal::of(&s))];
        }
        match self.client.report_many(call).await {
            Ok(answers) => answers
                .iter()
                .map(|a| match item_refusal(a) {
                    None => v1::ReportOutcome::try_from(a.outcome).map_err(|_| Refusal::Internal),
                    Some(s) => Err(Refusal::of(&s)),
                })
                .collect(),
            Err(s) => vec![Err(Refusal::of(&s)); n],
        }
    }

    /// The report of a synthetic task; `None` (and the run's error set)
    /// for a task of any other job.
    fn report_of(&self, l: &v1::Lease) -> Option<v1::ReportItem> {
        let task = l.task.as_ref()?;
        let counted = task_from_wire(task).ok().and_then(|(spec, t)| {
            (spec.strategy == Strategy::Synthetic)
                .then(|| Plan::new(spec).ok()?.count_task_checked(&t).ok())
                .flatten()
        });
        let Some((tally, checksum)) = counted else {
            *self.foreign.lock().expect("lock") = Some(format!(
                "job {} is not synthetic: loadgen counts nothing, so it serves only synthetic jobs \
                 (submit one with `nqueens submit 8 --strategy synthetic --tasks 1000000`); its \
                 leases were handed back",
                l.job_id
            ));
            return None;
        };
        Some(v1::ReportItem {
            lease: Some(l.lease_ref()),
            result: Some(v1::TaskResult {
                checksum,
                solver_version: format!("loadgen {}", env!("CARGO_PKG_VERSION")),
                ..nqueens_proto::v1::TaskResult::from(&tally)
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let mut s = Samples::default();
        assert_eq!(s.quantile_ms(0.99), 0.0);
        for us in 1..=100 {
            s.add(Duration::from_micros(us * 1000));
        }
        assert_eq!(s.quantile_ms(0.5), 50.0);
        assert_eq!(s.quantile_ms(0.99), 99.0);
        assert_eq!(s.quantile_ms(1.0), 100.0);
    }
}
