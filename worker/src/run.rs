//! The worker loop: lease enough tasks to keep every thread busy (plus a
//! batch in hand), count them, report each result until the coordinator
//! acknowledges it, heartbeat the leases held, and retry with backoff
//! whenever the coordinator is away. Stateless: a dead worker loses only
//! its running work, whose leases then expire.

use crate::backoff::Backoff;
use crate::selftest::self_test;
use nqueens_common::plan::Plan;
use nqueens_proto::v1::{self, worker_service_client::WorkerServiceClient};
use nqueens_proto::{tally_to_wire, task_from_wire};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

/// How to run a worker.
#[derive(Clone, Debug)]
pub struct Config {
    /// `http://host:port` (or `https://`).
    pub coordinator: String,
    pub threads: usize,
    pub token: Option<String>,
    /// Defaults to host-pid.
    pub name: Option<String>,
    /// How long a drain waits for running tasks before handing them back.
    pub grace: Duration,
    /// Corrupt the self-test on purpose (to test that it stops the worker).
    pub self_test_fault: bool,
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
    #[error("bad coordinator address '{0}': {1} (expected http://host:port or https://host:port)")]
    Address(String, String),
    #[error("the token cannot be sent in a header: {0}")]
    Token(String),
    #[error("the coordinator refused this worker: {0} (check the worker token)")]
    Refused(String),
}

/// Adds the bearer token to every call.
#[derive(Clone)]
struct Auth(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

type Client = WorkerServiceClient<InterceptedService<Channel, Auth>>;

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

fn lease_ref(l: &v1::Lease) -> v1::LeaseRef {
    v1::LeaseRef {
        job_id: l.job_id,
        task_index: l.task.as_ref().map_or(0, |t| t.index),
        lease_id: l.lease_id,
    }
}

/// Counts one task on a blocking thread; `None` when stopped or invalid.
fn count(lease: &v1::Lease, stop: &AtomicBool) -> Option<(v1::TaskResult, u64)> {
    let started = std::time::Instant::now();
    let (spec, task) = match task_from_wire(lease.task.as_ref()?) {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(error = %e, "the coordinator sent a task that does not decode; skipping it");
            return None;
        }
    };
    let plan = Plan::new(spec).ok()?;
    let (tally, checksum) = plan.count_task_until(&task, stop).ok()??;
    let result = v1::TaskResult {
        checksum,
        elapsed_ms: started.elapsed().as_millis() as u64,
        solver_version: env!("CARGO_PKG_VERSION").to_string(),
        ..tally_to_wire(&tally)
    };
    Some((result, task.subproblems))
}

/// Runs until the job queue is drained after a signal on `signals`.
/// (A second signal is the caller's to act on: it should exit at once.)
pub async fn run(
    config: Config,
    mut signals: mpsc::UnboundedReceiver<()>,
) -> Result<Summary, WorkerError> {
    let fault = config.self_test_fault;
    tokio::task::spawn_blocking(move || self_test(fault))
        .await
        .expect("self-test panicked")
        .map_err(WorkerError::SelfTest)?;
    tracing::info!("self-test passed (N=8..12 by both strategies)");
    let url = config.coordinator.clone();
    let channel = Channel::from_shared(url.clone())
        .map_err(|e| WorkerError::Address(url.clone(), e.to_string()))?
        .connect_lazy();
    let token = config
        .token
        .as_ref()
        .map(|t| format!("Bearer {t}").parse())
        .transpose()
        .map_err(|e: tonic::metadata::errors::InvalidMetadataValue| {
            WorkerError::Token(e.to_string())
        })?;
    let mut client: Client = WorkerServiceClient::with_interceptor(channel, Auth(token));
    let name = config.name.clone().unwrap_or_else(|| {
        format!(
            "{}-{}",
            gethostname::gethostname().to_string_lossy(),
            std::process::id()
        )
    });
    let threads = config.threads.max(1);
    let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(30));
    let mut summary = Summary::default();

    // Register, retrying until the coordinator answers.
    let heartbeat_every = loop {
        let req = v1::RegisterRequest {
            worker_id: name.clone(),
            host: gethostname::gethostname().to_string_lossy().into_owned(),
            cores: threads as u32,
            solver_version: env!("CARGO_PKG_VERSION").to_string(),
        };
        match client.register(req).await {
            Ok(r) => break Duration::from_millis(r.into_inner().heartbeat_interval_ms.max(50)),
            Err(s) if s.code() == Code::Unauthenticated => {
                return Err(WorkerError::Refused(s.message().to_string()))
            }
            Err(s) => {
                let wait = backoff.next_delay();
                tracing::warn!(
                    "coordinator {url} unreachable ({}); retrying in {wait:.1?}",
                    s.message()
                );
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    Some(()) = signals.recv() => return Ok(summary),
                }
            }
        }
    };
    backoff.reset();
    tracing::info!("connected to {url} as {name} ({threads} threads)");

    let mut queue: VecDeque<v1::Lease> = VecDeque::new();
    let mut running: HashMap<u64, (v1::Lease, Arc<AtomicBool>)> = HashMap::new();
    let mut tasks: JoinSet<(v1::Lease, Option<(v1::TaskResult, u64)>)> = JoinSet::new();
    let mut unreported: VecDeque<v1::ReportRequest> = VecDeque::new();
    let mut drain_deadline: Option<Instant> = None;
    let mut heartbeat = tokio::time::interval(heartbeat_every);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut next_lease_at = Instant::now();
    let mut subproblems_done = 0u64;

    loop {
        // Keep every thread busy and one batch in hand, so no core waits
        // between tasks.
        let want = (2 * threads).saturating_sub(queue.len() + running.len());
        if drain_deadline.is_none() && want > 0 && Instant::now() >= next_lease_at {
            let req = v1::LeaseRequest {
                worker_id: name.clone(),
                max_tasks: want as u32,
            };
            match client.lease(req).await {
                Ok(r) => {
                    backoff.reset();
                    let leases = r.into_inner().leases;
                    if leases.is_empty() {
                        next_lease_at = Instant::now() + Duration::from_secs(1);
                    } else {
                        tracing::info!("leased {} tasks", leases.len());
                    }
                    queue.extend(leases);
                }
                Err(s) if transient(&s) => {
                    let wait = backoff.next_delay();
                    tracing::warn!(
                        "coordinator unreachable ({}); reconnecting in {wait:.1?}",
                        s.message()
                    );
                    next_lease_at = Instant::now() + wait;
                }
                Err(s) => {
                    tracing::error!("lease refused: {}", s.message());
                    next_lease_at = Instant::now() + backoff.next_delay();
                }
            }
        }
        while running.len() < threads {
            let Some(lease) = queue.pop_front() else {
                break;
            };
            let stop = Arc::new(AtomicBool::new(false));
            running.insert(lease.lease_id, (lease, Arc::clone(&stop)));
            tasks.spawn_blocking(move || {
                let out = count(&lease, &stop);
                (lease, out)
            });
        }
        // Report what is counted; keep it until it is acknowledged.
        while let Some(req) = unreported.front().cloned() {
            match client.report(req).await {
                Ok(r) => {
                    backoff.reset();
                    unreported.pop_front();
                    summary.reported += 1;
                    let outcome = v1::ReportOutcome::try_from(r.into_inner().outcome)
                        .map_or("?".into(), |o| format!("{o:?}").to_lowercase());
                    tracing::info!("reported a task ({outcome})");
                }
                Err(s) if transient(&s) => {
                    let wait = backoff.next_delay();
                    tracing::warn!(
                        "result not stored yet ({}); retrying in {wait:.1?}",
                        s.message()
                    );
                    tokio::time::sleep(wait).await;
                    break;
                }
                Err(s) => {
                    tracing::error!("result refused, dropping it: {}", s.message());
                    unreported.pop_front();
                }
            }
        }
        if let Some(deadline) = drain_deadline {
            if running.is_empty() && unreported.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                // Out of grace: hand the running tasks back and go.
                let refs: Vec<v1::LeaseRef> = running.values().map(|(l, _)| lease_ref(l)).collect();
                for (_, stop) in running.values() {
                    stop.store(true, Ordering::Relaxed);
                }
                summary.released += release(&mut client, &name, refs).await;
                break;
            }
        }
        let idle = queue.is_empty() && running.is_empty() && unreported.is_empty();
        tokio::select! {
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                let (lease, out) = done.expect("counting task panicked");
                running.remove(&lease.lease_id);
                if let Some((result, subproblems)) = out {
                    subproblems_done += subproblems;
                    unreported.push_back(v1::ReportRequest { worker_id: name.clone(), lease: Some(lease_ref(&lease)), result: Some(result) });
                }
            }
            _ = heartbeat.tick() => {
                let refs: Vec<v1::LeaseRef> = running.values().map(|(l, _)| l).chain(queue.iter()).map(lease_ref).collect();
                let req = v1::HeartbeatRequest { worker_id: name.clone(), leases: refs, subproblems_done };
                match client.heartbeat(req).await {
                    Ok(r) => {
                        for s in r.into_inner().stop {
                            if let Some((_, stop)) = running.get(&s.lease_id) {
                                stop.store(true, Ordering::Relaxed);
                                tracing::info!("stopping task {} of job {}: cancelled or reassigned", s.task_index, s.job_id);
                            }
                            queue.retain(|l| l.lease_id != s.lease_id);
                        }
                    }
                    Err(s) => tracing::warn!("heartbeat failed: {}", s.message()),
                }
            }
            Some(()) = signals.recv(), if drain_deadline.is_none() => {
                drain_deadline = Some(Instant::now() + config.grace);
                let refs: Vec<v1::LeaseRef> = queue.drain(..).map(|l| lease_ref(&l)).collect();
                summary.released += release(&mut client, &name, refs).await;
                tracing::info!("draining: released {} unstarted tasks; finishing {} running (up to {:?})", summary.released, running.len(), config.grace);
            }
            () = tokio::time::sleep_until(next_lease_at), if idle && drain_deadline.is_none() => {}
            () = tokio::time::sleep_until(drain_deadline.unwrap_or_else(Instant::now)), if drain_deadline.is_some() => {}
        }
    }
    tracing::info!(
        "stopped: {} results reported, {} tasks handed back",
        summary.reported,
        summary.released
    );
    Ok(summary)
}

/// Hands leases back; returns how many the coordinator took.
async fn release(client: &mut Client, name: &str, refs: Vec<v1::LeaseRef>) -> u64 {
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
            tracing::warn!(
                "release failed ({}); the leases will expire instead",
                s.message()
            );
            0
        }
    }
}
