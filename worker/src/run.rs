//! The worker loop: lease enough tasks to keep every thread busy (plus a
//! batch in hand), count them, report each result until the coordinator
//! acknowledges it, heartbeat the leases held, and retry with backoff
//! whenever the coordinator is away. Stateless: a dead worker loses only
//! its running work, whose leases then expire.

use crate::backoff::Backoff;
use crate::metrics::{Call, Stats};
use crate::pace::Pace;
use crate::pool::{feeders, Counted, Pool};
use crate::selftest::{self_test, self_test_cards};
use nqueens_common::engine::device::Device;
use nqueens_common::engine::join::Budget;
use nqueens_common::engine::lanes::Path;
use nqueens_proto::client::{connect_tls, explain, tls_mismatch, ClientError};
use nqueens_proto::refusal::Refusal;
use nqueens_proto::u128_from_wire;
use nqueens_proto::v1;
use nqueens_proto::worker_client::{
    item_refusal, worth_retrying, About, WorkerClient, MAX_LEASE_BATCH,
};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tonic::Status;

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
    /// own threads, [`Device::feeders`]).
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
    /// Leases handed back as the worker stopped: not started at its
    /// drain, or still running when its grace ran out.
    pub released: u64,
    /// Leases handed back at once: a lease's tasks beyond the pace of a
    /// job new to the worker.
    pub declined: u64,
    /// Lease answers whose tasks were cut so (at most one a job, while
    /// the worker keeps its rate).
    pub cut: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("self-test failed: {0}")]
    SelfTest(String),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("the coordinator refused this worker: {0} (give the worker token with --token-file F or NQUEENS_WORKER_TOKEN)")]
    Refused(String),
}

type Client = WorkerClient;

/// The engine path and the cards a worker counts with, as the worker
/// list and the metrics show it: `avx512`, or `avx512+gpu:NVIDIA H100
/// (vulkan)` (a worker counting on cards alone still has the CPU path
/// for the tasks a card does not take, such as the join's).
fn core_name(path: Option<Path>, threads: usize, devices: &[Arc<dyn Device>]) -> String {
    // Under --core gpu, CPU threads (where there are any) count on the
    // fastest path this CPU has, as without it.
    let cpu = match path {
        Some(Path::Gpu) => (threads > 0).then(Path::fastest),
        path => Some(path.unwrap_or_else(Path::fastest)),
    };
    cpu.map(Path::name)
        .into_iter()
        .chain(devices.iter().map(|d| d.name()))
        .collect::<Vec<_>>()
        .join("+")
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
    let threads = counting_threads(&config);
    // A bad address or CA file is said before the self-test's seconds.
    let mut link = Link::connect(&config, threads, stats)?;
    if config.self_test != SelfTest::Passed {
        run_self_test(&config, threads).await?;
    }
    let Some(heartbeat_every) = link.register(&mut signals).await? else {
        return Ok(Summary::default());
    };
    let session = Session::start(link, &config, heartbeat_every);
    session.run(signals).await
}

/// The CPU threads to count on: at least one, unless the worker counts on
/// its cards alone (`--core gpu`).
fn counting_threads(config: &Config) -> usize {
    if config.devices.is_empty() {
        config.threads.max(1)
    } else {
        config.threads
    }
}

/// Runs the known-answer test (faulted on purpose for
/// [`SelfTest::Fault`]) on the CPU and on each card.
async fn run_self_test(config: &Config, threads: usize) -> Result<(), WorkerError> {
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
    Ok(())
}

/// The worker's link to the coordinator: the client, who this worker is,
/// and the backoff its registration and lease calls share.
struct Link {
    client: Client,
    url: String,
    /// The worker id, unique to this process.
    name: String,
    /// The engine path and cards, as [`core_name`] gives them.
    core: String,
    threads: usize,
    /// Sent again whenever the coordinator asks (it restarted, or lost us).
    about: About,
    backoff: Backoff,
    stats: Arc<Stats>,
}

impl Link {
    /// Makes the client for the coordinator (it connects on its first call)
    /// and records who this worker is in `stats`.
    fn connect(config: &Config, threads: usize, stats: Arc<Stats>) -> Result<Link, WorkerError> {
        // The version names the engine path and the cards too, so operators
        // see in the worker list what each machine counts with (the self-test
        // has settled the path: no second race).
        let core = core_name(config.core, threads, &config.devices);
        let url = config.coordinator.clone();
        let channel = connect_tls(
            &url,
            config.token.as_deref(),
            config.tls_ca.as_deref(),
            config
                .tls_identity
                .as_ref()
                .map(|(c, k)| (c.as_path(), k.as_path())),
        )?;
        let host = gethostname::gethostname().to_string_lossy().into_owned();
        // The id is this process's own, so that two workers given the same
        // --name (or none, on one host) never merge into one; the name is
        // what the operator sees.
        let display = config
            .name
            .clone()
            .unwrap_or_else(|| format!("{host}-{}", std::process::id()));
        let name = format!("{display}-{}", instance_suffix());
        let version = nqueens_proto::fit_version(&format!("{} {core}", env!("CARGO_PKG_VERSION")));
        stats.started(&name, &display, &core, threads);
        stats.with_cards(&config.devices);
        let about = About {
            host,
            cores: threads as u32,
            solver_version: version,
            name: display,
        };
        Ok(Link {
            client: WorkerClient::new(channel, name.clone()),
            url,
            name,
            core,
            threads,
            about,
            backoff: Backoff::new(Duration::from_millis(250), Duration::from_secs(30)),
            stats,
        })
    }

    /// Registers, retrying with backoff until the coordinator answers;
    /// returns the heartbeat interval it asks for, or `None` when a signal
    /// comes first. A refused token ends the worker.
    async fn register(
        &mut self,
        signals: &mut mpsc::UnboundedReceiver<()>,
    ) -> Result<Option<Duration>, WorkerError> {
        let mut told_tls = false;
        let heartbeat_every = loop {
            match self.client.register(&self.about).await {
                Ok(r) => {
                    let ms = r.heartbeat_interval_ms.clamp(50, MOST_HEARTBEAT_MS);
                    break Duration::from_millis(ms);
                }
                Err(s) if Refusal::of(&s).about_the_token() => {
                    return Err(WorkerError::Refused(s.message().to_string()))
                }
                Err(s) => {
                    self.stats.failed(Call::Register);
                    let wait = self.backoff.next_delay();
                    self.warn_unregistered(&s, wait, &mut told_tls);
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        Some(()) = signals.recv() => return Ok(None),
                    }
                }
            }
        };
        self.backoff.reset();
        let (url, name, threads, core) = (&self.url, &self.name, self.threads, &self.core);
        let threads = match threads {
            1 => "1 thread".to_string(),
            n => format!("{n} threads"),
        };
        tracing::info!("connected to {url} as {name} ({threads}, core {core})");
        Ok(Some(heartbeat_every))
    }

    /// Says why a registration failed: a TLS mismatch once (retrying cannot
    /// help, so it says what to change), anything else on every try.
    fn warn_unregistered(&self, s: &Status, wait: Duration, told_tls: &mut bool) {
        let url = &self.url;
        match tls_mismatch(url, s) {
            Some(why) if !*told_tls => {
                *told_tls = true;
                tracing::error!("{why}; retrying in {wait:.1?} in case it changes");
            }
            // A proxy's 401 says so, rather than "unreachable".
            _ => tracing::warn!("{}; retrying in {wait:.1?}", explain(url, s)),
        }
    }

    /// Sends the worker's description again (the coordinator asked: it
    /// restarted, or lost track of this worker). One try: if it fails, the
    /// next answer asks again.
    async fn register_again(&mut self) {
        match self.client.register(&self.about).await {
            Ok(_) => tracing::info!(
                "registered again (the coordinator asked: it restarted or lost track of this worker)"
            ),
            Err(s) => {
                self.stats.failed(Call::Register);
                tracing::warn!("registering again failed ({}); will retry", s.message());
            }
        }
    }

    /// Hands leases back; returns how many the coordinator took.
    async fn release(&mut self, refs: Vec<v1::LeaseRef>) -> u64 {
        if refs.is_empty() {
            return 0;
        }
        match self.client.release(refs).await {
            Ok(released) => released.into(),
            Err(s) => {
                self.stats.failed(Call::Release);
                tracing::warn!(
                    "release failed ({}); the leases will expire instead",
                    s.message()
                );
                0
            }
        }
    }
}

/// A registered worker at work: the leases it holds, the pool counting
/// them, the reporter storing their results, and where a drain stands.
struct Session {
    link: Link,
    pool: Pool,
    pace: Pace,
    /// Every lease handed to the pool (queued or counting), with its stop flag.
    held: HashMap<u64, (v1::Lease, Arc<AtomicBool>)>,
    /// Tasks the pool has finished, counted or stopped.
    finished: mpsc::UnboundedReceiver<Counted>,
    /// Results for the reporter task, so no thread waits for an fsync.
    results: mpsc::UnboundedSender<v1::ReportItem>,
    reporter: JoinHandle<u64>,
    heartbeat: tokio::time::Interval,
    next_lease_at: Instant,
    /// Set by the first signal: when the running tasks are handed back.
    drain_deadline: Option<Instant>,
    grace: Duration,
    subproblems_done: u64,
    progress: Progress,
    summary: Summary,
    /// Why the coordinator stopped taking this worker's token (revoked,
    /// or the coordinator's changed): the session ends.
    refused: Option<String>,
}

impl Session {
    /// Starts the counting pool and the reporter for a registered worker.
    fn start(link: Link, config: &Config, heartbeat_every: Duration) -> Session {
        let (counted, finished) = mpsc::unbounded_channel();
        let pool = Pool::new(
            link.threads,
            config.core,
            config.budget,
            &config.devices,
            counted,
        );
        // Tasks counted at once: every CPU thread and every card's feeders;
        // how many more are held follows the measured rate.
        let slots = link.threads + feeders(&config.devices);
        let (results, to_report) = mpsc::unbounded_channel();
        let reporter = tokio::spawn(report_all(
            link.client.clone(),
            to_report,
            Arc::clone(&link.stats),
        ));
        let mut heartbeat = tokio::time::interval(heartbeat_every);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        Session {
            link,
            pool,
            pace: Pace::new(slots),
            held: HashMap::new(),
            finished,
            results,
            reporter,
            heartbeat,
            next_lease_at: Instant::now(),
            drain_deadline: None,
            grace: config.grace,
            subproblems_done: 0,
            progress: Progress::new(),
            summary: Summary::default(),
            refused: None,
        }
    }

    /// Leases, counts, reports and heartbeats until a drain ends; returns
    /// what the worker did. A token the coordinator no longer takes stops
    /// every task at once (no result of it could be stored) and is the
    /// error returned.
    async fn run(
        mut self,
        mut signals: mpsc::UnboundedReceiver<()>,
    ) -> Result<Summary, WorkerError> {
        loop {
            // Every task that finished meanwhile, before deciding what to
            // lease: a lease call takes a round trip, in which many short
            // tasks finish. Taken one a turn, they piled up behind the
            // calls far from the coordinator, still counted as held, so
            // the worker leased fewer and fewer (two tasks a round trip at
            // 150 ms) and its threads waited.
            while let Ok((lease, out)) = self.finished.try_recv() {
                self.task_ended(lease, out);
            }
            self.link.stats.set_leases(self.held.len());
            if let Some(want) = self.lease_wanted() {
                self.lease(want).await;
            }
            if let Some(why) = self.refused.take() {
                for (_, stop) in self.held.values() {
                    stop.store(true, Ordering::Relaxed);
                }
                tracing::error!("the coordinator no longer takes this worker's token: stopping");
                self.stop().await;
                return Err(WorkerError::Refused(why));
            }
            if self.drain_over().await {
                break;
            }
            let draining = self.drain_deadline.is_some();
            tokio::select! {
                Some((lease, out)) = self.finished.recv() => self.task_ended(lease, out),
                _ = self.heartbeat.tick() => self.send_heartbeat().await,
                Some(()) = signals.recv(), if !draining => self.start_drain().await,
                () = tokio::time::sleep_until(self.next_lease_at), if self.held.is_empty() && !draining => {}
                () = tokio::time::sleep_until(self.drain_deadline.unwrap_or_else(Instant::now)), if draining => {}
            }
        }
        Ok(self.stop().await)
    }

    /// How many tasks to lease now, if any: a batch is kept queued behind
    /// the running tasks and leased in batches (once fewer than half of it
    /// is queued), so there are few lease calls per task. None while
    /// draining, or before a failed call's backoff has passed.
    fn lease_wanted(&self) -> Option<usize> {
        let now = std::time::Instant::now();
        let want = self
            .pace
            .target(now)
            .saturating_sub(self.held.len())
            .min(MAX_LEASE_BATCH as usize);
        let low = self.pool.queued() < self.pace.ahead(now).div_ceil(2) && self.pool.can_count();
        let due = Instant::now() >= self.next_lease_at;
        (self.drain_deadline.is_none() && low && want > 0 && due).then_some(want)
    }

    /// Leases up to `want` tasks and queues them on the pool; on failure,
    /// the next lease waits out the backoff.
    async fn lease(&mut self, want: usize) {
        let asked = std::time::Instant::now();
        match self.link.client.lease(want as u32).await {
            Ok(r) => {
                self.pace.round_trip(asked.elapsed());
                self.link.backoff.reset();
                if r.register_again {
                    self.link.register_again().await;
                }
                let back = self.hold(want, r.leases);
                if !back.is_empty() {
                    self.summary.cut += 1;
                    self.summary.declined += self.link.release(back).await;
                }
            }
            Err(s) if worth_retrying(&s) => {
                self.link.stats.failed(Call::Lease);
                let wait = self.link.backoff.next_delay();
                tracing::warn!(
                    "coordinator unreachable ({}); reconnecting in {wait:.1?}",
                    s.message()
                );
                self.next_lease_at = Instant::now() + wait;
            }
            Err(s) if Refusal::of(&s).about_the_token() => {
                self.link.stats.failed(Call::Lease);
                self.refused = Some(s.message().to_string());
            }
            Err(s) => {
                self.link.stats.failed(Call::Lease);
                tracing::error!("lease refused: {}", s.message());
                self.next_lease_at = Instant::now() + self.link.backoff.next_delay();
            }
        }
    }

    /// Queues leased tasks on the pool (none leased: asks again in a second):
    /// at most `want`, each lease id once. Returns the leases to hand back:
    /// a lease asked for at one job's rate that brings another job's tasks,
    /// which may be far bigger, keeps only what the new job's fresh pace
    /// holds.
    fn hold(&mut self, want: usize, mut leases: Vec<v1::Lease>) -> Vec<v1::LeaseRef> {
        // No more than asked for, and each lease once, whatever the answer.
        let mut ids = std::collections::HashSet::new();
        leases.retain(|l| !self.held.contains_key(&l.lease_id) && ids.insert(l.lease_id));
        leases.truncate(want);
        let now = std::time::Instant::now();
        let new_job = self.pace.leased(leases.iter().map(|l| l.job_id), now);
        let room = self.pace.target(now).saturating_sub(self.held.len()).max(1);
        let back = match new_job && leases.len() > room {
            true => leases.split_off(room),
            false => Vec::new(),
        };
        if leases.is_empty() {
            self.next_lease_at = Instant::now() + Duration::from_secs(1);
        } else if self.progress.first_lease() {
            tracing::info!("leased {} tasks (then a progress line a minute; each lease and report at debug level)", leases.len());
        } else {
            tracing::debug!("leased {} tasks", leases.len());
        }
        for lease in leases {
            let stop = Arc::new(AtomicBool::new(false));
            self.held.insert(lease.lease_id, (lease, Arc::clone(&stop)));
            self.pool.push(lease, stop);
        }
        back.iter().map(v1::Lease::lease_ref).collect()
    }

    /// Whether a drain is over: every task held has ended, or the grace has
    /// run out, and then the running tasks are stopped and handed back.
    async fn drain_over(&mut self) -> bool {
        let Some(deadline) = self.drain_deadline else {
            return false;
        };
        if self.held.is_empty() {
            return true;
        }
        if Instant::now() < deadline {
            return false;
        }
        // Out of grace: hand the running tasks back (if the coordinator
        // answers at once: they expire otherwise) and go.
        let refs = self.held_refs();
        for (_, stop) in self.held.values() {
            stop.store(true, Ordering::Relaxed);
        }
        let release = tokio::time::timeout(LAST_CALL, self.link.release(refs));
        self.summary.released += release.await.unwrap_or(0);
        true
    }

    fn held_refs(&self) -> Vec<v1::LeaseRef> {
        self.held.values().map(|(l, _)| l.lease_ref()).collect()
    }

    /// A task the pool finished: its result goes to the reporter.
    fn task_ended(&mut self, lease: v1::Lease, out: Option<(v1::TaskResult, u64, Duration)>) {
        self.held.remove(&lease.lease_id);
        let Some((result, subproblems, elapsed)) = out else {
            self.link.stats.stopped();
            return;
        };
        // Only counted tasks make the pace: tasks that fail at once must
        // not make the worker lease more.
        self.pace.finished(lease.job_id, std::time::Instant::now());
        self.pace.cover(self.pool.cover());
        // As the lease said: a coordinator's number, never trusted to fit.
        self.subproblems_done = self.subproblems_done.saturating_add(subproblems);
        let nodes = u128_from_wire(result.nodes.as_ref());
        self.link.stats.counted(subproblems, nodes, elapsed);
        let item = v1::ReportItem {
            lease: Some(lease.lease_ref()),
            result: Some(result),
        };
        self.results
            .send(item)
            .expect("the reporter outlives the loop");
    }

    /// Logs progress (once a minute) and extends every lease held; stops
    /// the tasks the coordinator names.
    async fn send_heartbeat(&mut self) {
        self.progress.tick(&self.link.stats);
        let (held, draining) = (self.held_refs(), self.drain_deadline.is_some());
        let beat = self
            .link
            .client
            .heartbeat(held, self.subproblems_done, draining);
        match beat.await {
            Ok(r) => {
                if r.register_again {
                    self.link.register_again().await;
                }
                self.stop_tasks(r.stop);
            }
            Err(s) if Refusal::of(&s).about_the_token() => {
                self.link.stats.failed(Call::Heartbeat);
                self.refused = Some(s.message().to_string());
            }
            Err(s) => {
                self.link.stats.failed(Call::Heartbeat);
                tracing::warn!("heartbeat failed: {}", s.message());
            }
        }
    }

    /// Stops tasks that were cancelled or reassigned: a running one ends
    /// early with no result; a queued one is dropped.
    fn stop_tasks(&mut self, stop: Vec<v1::LeaseRef>) {
        for s in stop {
            if let Some((_, flag)) = self.held.get(&s.lease_id) {
                flag.store(true, Ordering::Relaxed);
                tracing::info!(
                    "stopping task {} of job {}: cancelled or reassigned",
                    s.task_index,
                    s.job_id
                );
            }
            if self.pool.unqueue(s.lease_id) {
                self.held.remove(&s.lease_id);
            }
        }
    }

    /// Starts a drain: hands back the tasks not started and gives the
    /// running ones until the grace runs out.
    async fn start_drain(&mut self) {
        let deadline = Instant::now() + self.grace;
        self.drain_deadline = Some(deadline);
        let unstarted = self.pool.take_queued();
        for l in &unstarted {
            self.held.remove(&l.lease_id);
        }
        let refs: Vec<v1::LeaseRef> = unstarted.iter().map(v1::Lease::lease_ref).collect();
        // A coordinator that does not answer holds the drain no longer
        // than its grace: the leases it does not hear of expire.
        let release = tokio::time::timeout_at(deadline, self.link.release(refs));
        self.summary.released += release.await.unwrap_or_else(|_| {
            tracing::warn!("the coordinator did not answer the release within the grace");
            0
        });
        // The coordinator hears of the drain now, not at the next beat
        // (which a short drain never reaches): it shows the worker as
        // draining, then as left once it falls silent, not as lost.
        let _ = tokio::time::timeout_at(deadline, self.send_heartbeat()).await;
        tracing::info!(
            "draining: released {} unstarted tasks; finishing {} running (up to {:?})",
            self.summary.released,
            self.held.len(),
            self.grace
        );
    }

    /// Ends the pool, then waits for every result counted to be reported,
    /// until the drain's grace runs out.
    async fn stop(self) -> Summary {
        let Session {
            pool,
            results,
            reporter,
            drain_deadline,
            mut summary,
            ..
        } = self;
        drop(pool);
        drop(results);
        let deadline = drain_deadline.unwrap_or_else(Instant::now);
        match tokio::time::timeout_at(deadline.max(Instant::now()), reporter).await {
            Ok(reported) => summary.reported = reported.expect("reporter panicked"),
            Err(_) => tracing::warn!(
                "out of grace with results not yet stored: their tasks will be counted again (by \
                 another worker, or when the run resumes)"
            ),
        }
        tracing::info!(
            "stopped: {} results reported, {} tasks handed back as it stopped, {} as leases \
             brought more of a new job than its pace",
            summary.reported,
            summary.released,
            summary.declined
        );
        summary
    }
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

/// The longest heartbeat interval taken from a coordinator (5 minutes: a
/// lease's life of 15 at the usual third), whatever it asks.
const MOST_HEARTBEAT_MS: u64 = 300_000;

/// How long a worker out of its drain's grace waits to hand its running
/// tasks back before it goes (their leases expire if no answer comes).
const LAST_CALL: Duration = Duration::from_secs(2);

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
                    in_flight.spawn(report_many(client.clone(), batch, Arc::clone(&stats)));
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
async fn report_many(
    mut client: Client,
    mut reports: Vec<v1::ReportItem>,
    stats: Arc<Stats>,
) -> u64 {
    let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(30));
    let mut acknowledged = 0;
    loop {
        let answers = match client.report_many(reports.clone()).await {
            Ok(answers) => answers,
            Err(s) if worth_retrying(&s) => {
                stats.failed(Call::Report);
                let wait = backoff.next_delay();
                tracing::warn!(
                    "{} results not stored yet ({}); retrying in {wait:.1?}",
                    reports.len(),
                    s.message()
                );
                tokio::time::sleep(wait).await;
                continue;
            }
            Err(s) => {
                refuse_all(&reports, &s, &stats);
                return acknowledged;
            }
        };
        let judged = judge(reports, &answers, &stats);
        acknowledged += judged.acknowledged;
        log_outcomes(&judged.outcomes);
        if judged.again.is_empty() {
            return acknowledged;
        }
        stats.failed(Call::Report);
        let wait = backoff.next_delay();
        tracing::warn!(
            "{} results not stored yet; retrying in {wait:.1?}",
            judged.again.len()
        );
        tokio::time::sleep(wait).await;
        reports = judged.again;
    }
}

/// The whole call refused (e.g. the worker id): nothing in it can ever be
/// stored, so every result in it is dropped.
fn refuse_all(reports: &[v1::ReportItem], s: &Status, stats: &Stats) {
    stats.failed(Call::Report);
    for _ in reports {
        stats.reported("refused");
    }
    tracing::error!(
        "{} results refused, dropping them: {}",
        reports.len(),
        s.message()
    );
}

/// A refusal that is no fault of the worker's: the job was cancelled or
/// finished, or the lease went to another worker meanwhile. Logged at INFO,
/// not as an error.
fn not_needed(s: &Status) -> bool {
    Refusal::of(s) == Refusal::WrongState
}

/// What the coordinator's answers to one `ReportMany` say.
struct Judged {
    /// Results to send again: not judged, or not stored for a reason
    /// retrying can fix.
    again: Vec<v1::ReportItem>,
    /// Results acknowledged, by outcome.
    outcomes: std::collections::BTreeMap<&'static str, u32>,
    acknowledged: u64,
}

/// Sorts `reports` by their answers (in the same order): acknowledged
/// (counted in `stats` by outcome), to send again, or refused and dropped.
fn judge(reports: Vec<v1::ReportItem>, answers: &[v1::ReportItemAnswer], stats: &Stats) -> Judged {
    let mut judged = Judged {
        again: Vec::new(),
        outcomes: std::collections::BTreeMap::new(),
        acknowledged: 0,
    };
    for (i, item) in reports.into_iter().enumerate() {
        // An item without an answer was not judged: send it again.
        let Some(answer) = answers.get(i) else {
            judged.again.push(item);
            continue;
        };
        let refused = item_refusal(answer);
        let l = item.lease.unwrap_or_default();
        if refused.is_none() {
            let outcome = outcome_name(answer.outcome);
            stats.reported(outcome);
            tracing::debug!(job = l.job_id, task = l.task_index, outcome, "reported");
            *judged.outcomes.entry(outcome).or_default() += 1;
            judged.acknowledged += 1;
        } else if refused.as_ref().is_some_and(worth_retrying) {
            judged.again.push(item);
        } else {
            stats.reported("refused");
            let (job, task) = (l.job_id, l.task_index);
            match refused.as_ref().is_some_and(not_needed) {
                true => tracing::info!(
                    job,
                    task,
                    "result not needed, dropping it: {}",
                    answer.message
                ),
                false => {
                    tracing::error!(job, task, "result refused, dropping it: {}", answer.message)
                }
            }
        }
    }
    judged
}

/// A report's outcome as the logs and metrics name it.
fn outcome_name(outcome: i32) -> &'static str {
    use v1::ReportOutcome as O;
    match O::try_from(outcome) {
        Ok(O::Accepted) => "accepted",
        Ok(O::Duplicate) => "duplicate",
        Ok(O::Conflict) => "conflict",
        Ok(O::AwaitingCheck) => "awaiting_check",
        Ok(O::NotCounted) => "not_counted",
        _ => "?",
    }
}

/// One line for the results one call acknowledged, by outcome: at debug
/// level when all were accepted (routine, in the minute's progress line).
fn log_outcomes(outcomes: &std::collections::BTreeMap<&'static str, u32>) {
    if outcomes.is_empty() {
        return;
    }
    let said: Vec<String> = outcomes.iter().map(|(o, n)| format!("{o} {n}")).collect();
    let (n, said) = (outcomes.values().sum::<u32>(), said.join(", "));
    if outcomes.keys().all(|&o| o == "accepted") {
        tracing::debug!("reported {n} results ({said})");
    } else {
        tracing::info!("reported {n} results ({said})");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancelled_jobs_result_is_not_needed_a_bad_one_is_an_error() {
        assert!(not_needed(&Status::failed_precondition(
            "job 3 is cancelled; it cannot be reported"
        )));
        assert!(!not_needed(&Status::invalid_argument(
            "result.c1 is implausible"
        )));
        assert!(!not_needed(&Status::permission_denied("worker id bound")));
    }
}
