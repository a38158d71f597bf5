//! The worker loop: lease enough tasks to keep every thread busy (plus a
//! batch in hand), count them, report each result until the coordinator
//! acknowledges it, heartbeat the leases held, and retry with backoff
//! whenever the coordinator is away. Stateless: a dead worker loses only
//! its running work, whose leases then expire.

use crate::backoff::Backoff;
use crate::metrics::{Call, Stats};
use crate::pace::Pace;
use crate::pool::{Pool, FEEDERS_PER_CARD};
use crate::selftest::{self_test, self_test_cards};
use nqueens_common::engine::device::Device;
use nqueens_common::engine::join::Budget;
use nqueens_common::engine::lanes::Path;
use nqueens_proto::client::{connect_tls, tls_mismatch, Authed, ClientError};
use nqueens_proto::u128_from_wire;
use nqueens_proto::v1::{self, worker_service_client::WorkerServiceClient};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tonic::{Code, Status};

/// How to run a worker.
#[derive(Clone, Debug)]
pub struct Config {
    /// `http://host:port` (or `https://`).
    pub coordinator: String,
    pub threads: usize,
    pub token: Option<String>,
    /// The CA certificate (PEM) to trust for an `https://` coordinator.
    pub tls_ca: Option<PathBuf>,
    /// A client certificate and its key (PEM), for a coordinator that
    /// requires one (mTLS).
    pub tls_identity: Option<(PathBuf, PathBuf)>,
    /// Defaults to host-pid.
    pub name: Option<String>,
    /// How long a drain waits for running tasks before handing them back.
    pub grace: Duration,
    /// The known-answer test to run before any work.
    pub self_test: SelfTest,
    /// The engine's path (`None`: the fastest this CPU has).
    pub core: Option<Path>,
    /// Graphics cards to count on beside the CPU threads (each fed by its
    /// own threads, [`crate::pool::FEEDERS_PER_CARD`]).
    pub devices: Vec<Arc<dyn Device>>,
    /// What the join may hold while it counts a task (`--memory`).
    pub budget: Budget,
}

/// The known-answer test a worker runs before it takes work
/// ([`crate::selftest`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelfTest {
    /// Run it, on the worker's threads and engine path.
    Run,
    /// Run it with one count corrupted on purpose (to test that a failing
    /// self-test stops the worker).
    Fault,
    /// This process already ran it and it passed, on the same threads and
    /// path: `solve --state` runs it while its coordinator starts, so the
    /// worker it embeds counts at once.
    Passed,
}

/// What a worker did before it stopped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub reported: u64,
    pub released: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("self-test failed: {0}")]
    SelfTest(String),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("the coordinator refused this worker: {0} (check the worker token)")]
    Refused(String),
}

type Client = WorkerServiceClient<Authed>;

/// Errors worth retrying: the coordinator is away or did not store.
fn transient(s: &Status) -> bool {
    matches!(
        s.code(),
        Code::Unavailable
            | Code::Unknown
            | Code::DeadlineExceeded
            | Code::Internal
            | Code::Cancelled
            | Code::ResourceExhausted
            | Code::Aborted
    )
}

/// The most tasks one lease call asks for (the coordinator's bound).
const MAX_LEASE_BATCH: usize = 1024;

/// The engine path and the cards a worker counts with, as the worker
/// list and the metrics show it: `avx512`, or `avx512+gpu:NVIDIA H100
/// (vulkan)` (a worker counting on cards alone still has the CPU path
/// for the tasks a card does not take, such as the join's).
fn core_name(path: Path, devices: &[Arc<dyn Device>]) -> String {
    std::iter::once(path.name())
        .chain(devices.iter().map(|d| d.name()))
        .collect::<Vec<_>>()
        .join("+")
}

fn lease_ref(l: &v1::Lease) -> v1::LeaseRef {
    v1::LeaseRef {
        job_id: l.job_id,
        task_index: l.task.as_ref().map_or(0, |t| t.index),
        lease_id: l.lease_id,
    }
}

/// Runs until the job queue is drained after a signal on `signals`.
/// (A second signal is the caller's to act on: it should exit at once.)
pub async fn run(
    config: Config,
    signals: mpsc::UnboundedReceiver<()>,
) -> Result<Summary, WorkerError> {
    run_with(config, signals, Stats::new()).await
}

/// [`run`], counting what it does in `stats` (the worker's metrics).
pub async fn run_with(
    config: Config,
    mut signals: mpsc::UnboundedReceiver<()>,
    stats: Arc<Stats>,
) -> Result<Summary, WorkerError> {
    // A worker may count on its cards alone (`--core gpu`).
    let cards = config.devices.len();
    let threads = if cards > 0 {
        config.threads
    } else {
        config.threads.max(1)
    };
    if config.self_test != SelfTest::Passed {
        let (fault, forced) = (config.self_test == SelfTest::Fault, config.core);
        let devices = config.devices.clone();
        tokio::task::spawn_blocking(move || {
            self_test(fault, threads.max(1), forced, None)?;
            self_test_cards(&devices, fault)
        })
        .await
        .expect("self-test panicked")
        .map_err(WorkerError::SelfTest)?;
        tracing::info!(
            "self-test passed (N=8..12 by backtracking and by the join, N=10..12 on each card)"
        );
    }
    // The version names the engine path and the cards too, so operators
    // see in the worker list what each machine counts with (the self-test
    // has settled the path: no second race).
    let core = core_name(config.core.unwrap_or_else(Path::fastest), &config.devices);
    let url = config.coordinator.clone();
    let mut client = WorkerServiceClient::new(connect_tls(
        &url,
        config.token.as_deref(),
        config.tls_ca.as_deref(),
        config
            .tls_identity
            .as_ref()
            .map(|(c, k)| (c.as_path(), k.as_path())),
    )?);
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    // The id is this process's own, so that two workers given the same
    // --name (or none, on one host) never merge into one; the name is
    // what the operator sees.
    let display = config.name.clone().unwrap_or_else(|| host.clone());
    let name = format!("{display}-{}", instance_suffix());
    let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(30));
    let mut summary = Summary::default();
    let mut told_tls = false;

    let version = nqueens_proto::fit_version(&format!("{} {core}", env!("CARGO_PKG_VERSION")));
    stats.started(&name, &display, &core, threads);
    // Sent again whenever the coordinator asks (it restarted, or lost us).
    let registration = v1::RegisterRequest {
        worker_id: name.clone(),
        host,
        cores: threads as u32,
        solver_version: version.clone(),
        name: display.clone(),
    };
    // Register, retrying until the coordinator answers.
    let heartbeat_every = loop {
        match client.register(registration.clone()).await {
            Ok(r) => break Duration::from_millis(r.into_inner().heartbeat_interval_ms.max(50)),
            Err(s) if matches!(s.code(), Code::Unauthenticated | Code::PermissionDenied) => {
                return Err(WorkerError::Refused(s.message().to_string()))
            }
            Err(s) => {
                stats.failed(Call::Register);
                let wait = backoff.next_delay();
                match tls_mismatch(&url, &s) {
                    // Retrying cannot help: say what to change (once).
                    Some(why) if !told_tls => {
                        told_tls = true;
                        tracing::error!("{why}; retrying in {wait:.1?} in case it changes");
                    }
                    _ => tracing::warn!(
                        "coordinator {url} unreachable ({}); retrying in {wait:.1?}",
                        s.message()
                    ),
                }
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    Some(()) = signals.recv() => return Ok(summary),
                }
            }
        }
    };
    backoff.reset();
    tracing::info!("connected to {url} as {name} ({threads} threads, core {core})");

    // Every lease handed to the pool (queued or counting), with its stop flag.
    let mut held: HashMap<u64, (v1::Lease, Arc<AtomicBool>)> = HashMap::new();
    let (counted, mut finished) = mpsc::unbounded_channel();
    let pool = Pool::new(
        threads,
        config.core,
        config.budget,
        &config.devices,
        counted,
    );
    // Tasks counted at once: every CPU thread and every card's feeders;
    // how many more are held follows the measured rate.
    let slots = threads + cards * FEEDERS_PER_CARD;
    let mut pace = Pace::new(slots);
    // Results go to a reporter task, so no thread waits for an fsync.
    let (results, to_report) = mpsc::unbounded_channel();
    let reporter = tokio::spawn(report_all(
        client.clone(),
        name.clone(),
        to_report,
        Arc::clone(&stats),
    ));
    let mut drain_deadline: Option<Instant> = None;
    let mut heartbeat = tokio::time::interval(heartbeat_every);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut next_lease_at = Instant::now();
    let mut subproblems_done = 0u64;
    let mut progress = Progress::new();

    loop {
        stats.set_leases(held.len());
        // Keep a batch queued behind the running tasks, and lease in
        // batches (once fewer than half of it is queued), so there are few
        // lease calls per task.
        let now = std::time::Instant::now();
        let want = pace
            .target(now)
            .saturating_sub(held.len())
            .min(MAX_LEASE_BATCH);
        let low = pool.queued() < pace.ahead(now).div_ceil(2) && pool.can_count();
        if drain_deadline.is_none() && low && want > 0 && Instant::now() >= next_lease_at {
            let req = v1::LeaseRequest {
                worker_id: name.clone(),
                max_tasks: want as u32,
            };
            match client.lease(req).await {
                Ok(r) => {
                    backoff.reset();
                    let r = r.into_inner();
                    if r.register_again {
                        register_again(&mut client, &registration, &stats).await;
                    }
                    let leases = r.leases;
                    if leases.is_empty() {
                        next_lease_at = Instant::now() + Duration::from_secs(1);
                    } else if progress.first_lease() {
                        tracing::info!("leased {} tasks (then a progress line a minute; each lease and report at debug level)", leases.len());
                    } else {
                        tracing::debug!("leased {} tasks", leases.len());
                    }
                    for lease in leases {
                        let stop = Arc::new(AtomicBool::new(false));
                        held.insert(lease.lease_id, (lease, Arc::clone(&stop)));
                        pool.push(lease, stop);
                    }
                }
                Err(s) if transient(&s) => {
                    stats.failed(Call::Lease);
                    let wait = backoff.next_delay();
                    tracing::warn!(
                        "coordinator unreachable ({}); reconnecting in {wait:.1?}",
                        s.message()
                    );
                    next_lease_at = Instant::now() + wait;
                }
                Err(s) => {
                    stats.failed(Call::Lease);
                    tracing::error!("lease refused: {}", s.message());
                    next_lease_at = Instant::now() + backoff.next_delay();
                }
            }
        }
        if let Some(deadline) = drain_deadline {
            if held.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                // Out of grace: hand the running tasks back and go.
                let refs: Vec<v1::LeaseRef> = held.values().map(|(l, _)| lease_ref(l)).collect();
                for (_, stop) in held.values() {
                    stop.store(true, Ordering::Relaxed);
                }
                summary.released += release(&mut client, &name, refs, &stats).await;
                break;
            }
        }
        tokio::select! {
            Some((lease, out)) = finished.recv() => {
                held.remove(&lease.lease_id);
                if let Some((result, subproblems, elapsed)) = out {
                    // Only counted tasks make the pace: tasks that fail at
                    // once must not make the worker lease more.
                    pace.finished(std::time::Instant::now());
                    subproblems_done += subproblems;
                    stats.counted(subproblems, u128_from_wire(result.nodes.as_ref()), elapsed);
                    let item = v1::ReportItem { lease: Some(lease_ref(&lease)), result: Some(result) };
                    results.send(item).expect("the reporter outlives the loop");
                } else {
                    stats.stopped();
                }
            }
            _ = heartbeat.tick() => {
                progress.tick(&stats);
                let refs: Vec<v1::LeaseRef> = held.values().map(|(l, _)| lease_ref(l)).collect();
                let req = v1::HeartbeatRequest { worker_id: name.clone(), leases: refs, subproblems_done, draining: drain_deadline.is_some() };
                match client.heartbeat(req).await {
                    Ok(r) => {
                        let r = r.into_inner();
                        if r.register_again {
                            register_again(&mut client, &registration, &stats).await;
                        }
                        for s in r.stop {
                            if let Some((_, stop)) = held.get(&s.lease_id) {
                                stop.store(true, Ordering::Relaxed);
                                tracing::info!("stopping task {} of job {}: cancelled or reassigned", s.task_index, s.job_id);
                            }
                            if pool.unqueue(s.lease_id) {
                                held.remove(&s.lease_id);
                            }
                        }
                    }
                    Err(s) => {
                        stats.failed(Call::Heartbeat);
                        tracing::warn!("heartbeat failed: {}", s.message());
                    }
                }
            }
            Some(()) = signals.recv(), if drain_deadline.is_none() => {
                drain_deadline = Some(Instant::now() + config.grace);
                let unstarted = pool.take_queued();
                for l in &unstarted {
                    held.remove(&l.lease_id);
                }
                let refs: Vec<v1::LeaseRef> = unstarted.iter().map(lease_ref).collect();
                summary.released += release(&mut client, &name, refs, &stats).await;
                tracing::info!("draining: released {} unstarted tasks; finishing {} running (up to {:?})", summary.released, held.len(), config.grace);
            }
            () = tokio::time::sleep_until(next_lease_at), if held.is_empty() && drain_deadline.is_none() => {}
            () = tokio::time::sleep_until(drain_deadline.unwrap_or_else(Instant::now)), if drain_deadline.is_some() => {}
        }
    }
    drop(pool);
    // Every result counted is reported, until the drain's grace runs out.
    drop(results);
    let deadline = drain_deadline.unwrap_or_else(Instant::now);
    match tokio::time::timeout_at(deadline.max(Instant::now()), reporter).await {
        Ok(reported) => summary.reported = reported.expect("reporter panicked"),
        Err(_) => tracing::warn!(
            "out of grace with results not yet stored; their tasks will run again elsewhere"
        ),
    }
    tracing::info!(
        "stopped: {} results reported, {} tasks handed back",
        summary.reported,
        summary.released
    );
    Ok(summary)
}

/// A line a minute on how the work goes: with short tasks, a line per
/// lease and per report would be two lines a task.
struct Progress {
    since: Instant,
    counted: u64,
    leased: bool,
}

impl Progress {
    const EVERY: Duration = Duration::from_secs(60);

    fn new() -> Progress {
        Progress {
            since: Instant::now(),
            counted: 0,
            leased: false,
        }
    }

    /// True the first time only.
    fn first_lease(&mut self) -> bool {
        !std::mem::replace(&mut self.leased, true)
    }

    /// Logs the progress line if a minute has passed since the last one.
    fn tick(&mut self, stats: &Stats) {
        let secs = self.since.elapsed();
        if secs < Self::EVERY {
            return;
        }
        let counted = stats.tasks_counted();
        tracing::info!(
            "{} tasks counted in the last {:.0?} ({counted} in all; {} results answered by the coordinator)",
            counted - self.counted,
            secs,
            stats.results_answered()
        );
        (self.since, self.counted) = (Instant::now(), counted);
    }
}

/// Report calls in flight at once: the coordinator stores concurrent
/// reports with one fsync, so short tasks are not held to one fsync each.
const REPORTS_IN_FLIGHT: usize = 16;
/// Most results in one `ReportMany` call (the coordinator's limit).
const REPORT_BATCH: usize = 1024;

/// Reports every result until the coordinator acknowledges it, the
/// results that are ready together in one `ReportMany`; returns how many
/// were acknowledged.
async fn report_all(
    client: Client,
    worker: String,
    mut results: mpsc::UnboundedReceiver<v1::ReportItem>,
    stats: Arc<Stats>,
) -> u64 {
    let mut in_flight = JoinSet::new();
    let mut reported = 0;
    loop {
        tokio::select! {
            item = results.recv(), if in_flight.len() < REPORTS_IN_FLIGHT => match item {
                Some(item) => {
                    let mut batch = vec![item];
                    while batch.len() < REPORT_BATCH {
                        match results.try_recv() {
                            Ok(item) => batch.push(item),
                            Err(_) => break,
                        }
                    }
                    let req = v1::ReportManyRequest { worker_id: worker.clone(), reports: batch };
                    in_flight.spawn(report_many(client.clone(), req, Arc::clone(&stats)));
                }
                None => break,
            },
            Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                reported += done.expect("report task panicked");
            }
        }
    }
    while let Some(done) = in_flight.join_next().await {
        reported += done.expect("report task panicked");
    }
    reported
}

/// Reports a batch of results, retrying the ones not stored while the
/// coordinator is away or busy; a result is dropped only once the
/// coordinator has answered for it. Returns how many were acknowledged.
async fn report_many(mut client: Client, mut req: v1::ReportManyRequest, stats: Arc<Stats>) -> u64 {
    let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(30));
    let mut acknowledged = 0;
    loop {
        let answers = match client.report_many(req.clone()).await {
            Ok(r) => r.into_inner().answers,
            Err(s) if transient(&s) => {
                stats.failed(Call::Report);
                let wait = backoff.next_delay();
                tracing::warn!(
                    "{} results not stored yet ({}); retrying in {wait:.1?}",
                    req.reports.len(),
                    s.message()
                );
                tokio::time::sleep(wait).await;
                continue;
            }
            Err(s) => {
                // The whole call refused (e.g. the worker id): nothing in
                // it can ever be stored.
                stats.failed(Call::Report);
                for _ in &req.reports {
                    stats.reported("refused");
                }
                tracing::error!(
                    "{} results refused, dropping them: {}",
                    req.reports.len(),
                    s.message()
                );
                return acknowledged;
            }
        };
        let mut again = Vec::new();
        let mut outcomes = std::collections::BTreeMap::<&str, u32>::new();
        for (i, item) in req.reports.into_iter().enumerate() {
            // An item without an answer was not judged: send it again.
            let Some(answer) = answers.get(i) else {
                again.push(item);
                continue;
            };
            let status = Status::new(Code::from(answer.code), answer.message.clone());
            if answer.code == 0 {
                use v1::ReportOutcome as O;
                let outcome = match O::try_from(answer.outcome) {
                    Ok(O::Accepted) => "accepted",
                    Ok(O::Duplicate) => "duplicate",
                    Ok(O::Conflict) => "conflict",
                    Ok(O::AwaitingCheck) => "awaiting_check",
                    Ok(O::NotCounted) => "not_counted",
                    _ => "?",
                };
                stats.reported(outcome);
                let l = item.lease.unwrap_or_default();
                tracing::debug!(job = l.job_id, task = l.task_index, outcome, "reported");
                *outcomes.entry(outcome).or_default() += 1;
                acknowledged += 1;
            } else if transient(&status) {
                again.push(item);
            } else {
                stats.reported("refused");
                let l = item.lease.unwrap_or_default();
                tracing::error!(
                    job = l.job_id,
                    task = l.task_index,
                    "result refused, dropping it: {}",
                    answer.message
                );
            }
        }
        if !outcomes.is_empty() {
            let said: Vec<String> = outcomes.iter().map(|(o, n)| format!("{o} {n}")).collect();
            let (n, said) = (outcomes.values().sum::<u32>(), said.join(", "));
            // Only accepted: routine, in the minute's progress line.
            if outcomes.keys().all(|&o| o == "accepted") {
                tracing::debug!("reported {n} results ({said})");
            } else {
                tracing::info!("reported {n} results ({said})");
            }
        }
        if again.is_empty() {
            return acknowledged;
        }
        stats.failed(Call::Report);
        let wait = backoff.next_delay();
        tracing::warn!(
            "{} results not stored yet; retrying in {wait:.1?}",
            again.len()
        );
        tokio::time::sleep(wait).await;
        req.reports = again;
    }
}

/// Sends the worker's description again (the coordinator asked: it
/// restarted, or lost track of this worker). One try: if it fails, the
/// next answer asks again.
async fn register_again(client: &mut Client, registration: &v1::RegisterRequest, stats: &Stats) {
    match client.register(registration.clone()).await {
        Ok(_) => tracing::info!(
            "registered again (the coordinator asked: it restarted or lost track of this worker)"
        ),
        Err(s) => {
            stats.failed(Call::Register);
            tracing::warn!("registering again failed ({}); will retry", s.message());
        }
    }
}

/// A random suffix that makes this process's worker id its own.
fn instance_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded from the OS's randomness per process.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    format!("{:08x}", h.finish() as u32)
}

/// Hands leases back; returns how many the coordinator took.
async fn release(client: &mut Client, name: &str, refs: Vec<v1::LeaseRef>, stats: &Stats) -> u64 {
    if refs.is_empty() {
        return 0;
    }
    let req = v1::ReleaseRequest {
        worker_id: name.to_string(),
        leases: refs,
    };
    match client.release(req).await {
        Ok(r) => r.into_inner().released.into(),
        Err(s) => {
            stats.failed(Call::Release);
            tracing::warn!(
                "release failed ({}); the leases will expire instead",
                s.message()
            );
            0
        }
    }
}
