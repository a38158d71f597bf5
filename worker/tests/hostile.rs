//! The worker against a coordinator that misbehaves: a call left
//! unanswered on a live connection (its pings answered, so keep-alive sees
//! nothing wrong), or a lease answer with more tasks than asked for and
//! the same lease twice.

use nqueens_common::engine::join::Budget;
use nqueens_proto::refusal::Refusal;
use nqueens_proto::v1::worker_service_server::{WorkerService, WorkerServiceServer};
use nqueens_proto::v1::{self, ReportOutcome};
use nqueens_worker::run::{run, Config, SelfTest, WorkerError};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, Notify};
use tonic::{Request, Response, Status};

type Answer<T> = Result<Response<T>, Status>;

/// A coordinator that answers what it is set to.
#[derive(Default)]
struct Hostile {
    /// Refuse every register as a proxy between would (401, unmarked),
    /// or as the coordinator itself does (marked).
    refuse_register: Option<Refuser>,
    registers: AtomicUsize,
    /// Never answer the first heartbeat.
    hold_a_heartbeat: bool,
    heard: AtomicBool,
    /// The first lease call's answer (later ones lease nothing).
    leases: Mutex<Vec<v1::Lease>>,
    /// Lease calls answered with as many tasks as asked for (of job 2,
    /// every third answer of jobs 1 and 2), before the later ones lease
    /// nothing.
    mixed_answers: AtomicUsize,
    next_id: AtomicU64,
    /// How many tasks each lease call asked for.
    asked: Mutex<Vec<u32>>,
    /// The lease ids reported, and handed back.
    reported: Mutex<Vec<u64>>,
    released: Mutex<Vec<u64>>,
    /// Told when the first heartbeat is held, and at each report.
    news: Arc<Notify>,
}

/// Who refuses a worker's credential.
#[derive(Clone, Copy)]
enum Refuser {
    Proxy,
    Coordinator,
}

#[tonic::async_trait]
impl WorkerService for Hostile {
    async fn register(&self, _: Request<v1::RegisterRequest>) -> Answer<v1::RegisterResponse> {
        self.registers.fetch_add(1, Ordering::SeqCst);
        self.news.notify_one();
        match self.refuse_register {
            Some(Refuser::Proxy) => return Err(Status::unauthenticated("HTTP 401 Unauthorized")),
            Some(Refuser::Coordinator) => {
                return Err(Refusal::Unauthenticated.status("the worker token is wrong"))
            }
            None => {}
        }
        Ok(Response::new(v1::RegisterResponse {
            heartbeat_interval_ms: 100,
            lease_ttl_ms: 60_000,
        }))
    }
    async fn lease(&self, r: Request<v1::LeaseRequest>) -> Answer<v1::LeaseResponse> {
        let asked = r.into_inner().max_tasks;
        self.asked.lock().unwrap().push(asked);
        let mut leases = std::mem::take(&mut *self.leases.lock().unwrap());
        let left = self
            .mixed_answers
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1));
        if let Ok(left) = left {
            // Every third answer starts with job 1's tasks; the others
            // are all job 2's.
            let mixed = left % 3 == 0;
            leases = (0..asked)
                .map(|i| {
                    let id = self.next_id.fetch_add(1, SeqCst) + 1;
                    v1::Lease {
                        job_id: 1 + u64::from(!mixed || 2 * i >= asked),
                        ..lease(id)
                    }
                })
                .collect();
        }
        Ok(Response::new(v1::LeaseResponse {
            leases,
            register_again: false,
        }))
    }
    async fn heartbeat(&self, _: Request<v1::HeartbeatRequest>) -> Answer<v1::HeartbeatResponse> {
        if self.hold_a_heartbeat && !self.heard.swap(true, Ordering::SeqCst) {
            self.news.notify_one();
            std::future::pending::<()>().await;
        }
        Ok(Response::new(Default::default()))
    }
    async fn report(&self, _: Request<v1::ReportRequest>) -> Answer<v1::ReportResponse> {
        Err(Status::unimplemented("the worker reports with ReportMany"))
    }
    async fn report_many(
        &self,
        r: Request<v1::ReportManyRequest>,
    ) -> Answer<v1::ReportManyResponse> {
        let reports = r.into_inner().reports;
        let ids = reports.iter().map(|i| i.lease.unwrap().lease_id);
        self.reported.lock().unwrap().extend(ids);
        self.news.notify_one();
        let accepted = v1::ReportItemAnswer {
            outcome: ReportOutcome::Accepted as i32,
            ..Default::default()
        };
        Ok(Response::new(v1::ReportManyResponse {
            answers: vec![accepted; reports.len()],
        }))
    }
    async fn release(&self, r: Request<v1::ReleaseRequest>) -> Answer<v1::ReleaseResponse> {
        let leases = r.into_inner().leases;
        let ids = leases.iter().map(|l| l.lease_id);
        self.released.lock().unwrap().extend(ids);
        Ok(Response::new(v1::ReleaseResponse {
            released: leases.len() as u32,
        }))
    }
}

/// A worker of one thread against `coordinator`, and its drain.
async fn worker(
    coordinator: Arc<Hostile>,
) -> (
    tokio::task::JoinHandle<Result<nqueens_worker::run::Summary, nqueens_worker::run::WorkerError>>,
    mpsc::UnboundedSender<()>,
) {
    // Calls give up after twice this (see `worker_client.rs`); set before
    // any call of this test binary.
    std::env::set_var("NQUEENS_KEEPALIVE", "2");
    let incoming = tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().unwrap())
        .expect("a loopback port");
    let addr = incoming.local_addr().unwrap();
    let server =
        tonic::transport::Server::builder().add_service(WorkerServiceServer::from_arc(coordinator));
    tokio::spawn(server.serve_with_incoming(incoming));
    let config = Config {
        coordinator: format!("http://{addr}"),
        threads: 1,
        token: None,
        tls_ca: None,
        tls_identity: None,
        name: None,
        grace: Duration::from_secs(30),
        self_test: SelfTest::Passed,
        core: None,
        devices: Vec::new(),
        budget: Budget::default(),
    };
    let (drain, signals) = mpsc::unbounded_channel();
    (tokio::spawn(run(config, signals)), drain)
}

/// A heartbeat never answered: the call gives up after twice the
/// keep-alive (here 2 s, so 4 s), and the worker, asked to drain
/// meanwhile, ends. Before, it waited on that call for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_unanswered_heartbeat_cannot_hold_the_worker() {
    let coordinator = Arc::new(Hostile {
        hold_a_heartbeat: true,
        ..Hostile::default()
    });
    let (running, drain) = worker(coordinator.clone()).await;
    coordinator.news.notified().await;
    drain.send(()).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(60), running).await;
    assert!(ended.is_ok(), "the worker still waits on the heartbeat");
}

/// One N=8 frame of lease `id`.
fn lease(id: u64) -> v1::Lease {
    let frame = 2u64 << 60;
    let plan = v1::PlanSpec {
        n: 8,
        strategy: v1::Strategy::Frame as i32,
        depth: 1,
        tasks: 16,
        mode: v1::Mode::Backtrack as i32,
        cut: 1,
    };
    let task = v1::Task {
        plan: Some(plan),
        index: id % 16,
        lo: frame,
        hi: 2 * frame,
        skip: id % 16,
        take: 1,
        subproblems: 1,
        work: 1.0,
    };
    v1::Lease {
        job_id: 1,
        task: Some(task),
        lease_id: id,
        deadline_unix_ms: u64::MAX,
        count_on: 0,
    }
}

/// A lease answer of 40 tasks, each lease twice, to a worker that asked
/// for fewer: it takes as many as it asked for, each once; every lease it
/// took is reported or handed back once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_takes_no_more_leases_than_it_asked_for_each_once() {
    let coordinator = Arc::new(Hostile::default());
    let twice = (1..=20).flat_map(|id| [lease(id), lease(id)]).collect();
    *coordinator.leases.lock().unwrap() = twice;
    let (running, drain) = worker(coordinator.clone()).await;
    while coordinator.reported.lock().unwrap().is_empty() {
        coordinator.news.notified().await;
    }
    drain.send(()).unwrap();
    running.await.unwrap().unwrap();
    let asked = coordinator.asked.lock().unwrap()[0] as u64;
    assert!(asked < 20, "the worker asked for {asked} tasks");
    let mut seen = coordinator.reported.lock().unwrap().clone();
    seen.extend(coordinator.released.lock().unwrap().iter());
    seen.sort();
    assert_eq!(seen, (1..=asked).collect::<Vec<_>>());
}

/// A 401 from a proxy between is not the coordinator refusing the token:
/// the worker tries again (here three times) and drains when asked, where
/// the coordinator's own refusal ends it at once as refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxys_401_is_retried_and_the_coordinators_refusal_ends_the_worker() {
    let proxied = Arc::new(Hostile {
        refuse_register: Some(Refuser::Proxy),
        ..Hostile::default()
    });
    let (mut running, drain) = worker(proxied.clone()).await;
    while proxied.registers.load(Ordering::SeqCst) < 3 {
        tokio::select! {
            ended = &mut running => panic!("the worker gave up on a proxy's 401: {ended:?}"),
            () = proxied.news.notified() => {}
        }
    }
    drain.send(()).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(60), running).await;
    assert!(
        matches!(ended, Ok(Ok(Ok(_)))),
        "drained, not refused: {ended:?}"
    );

    let refusing = Arc::new(Hostile {
        refuse_register: Some(Refuser::Coordinator),
        ..Hostile::default()
    });
    let (running, _drain) = worker(refusing.clone()).await;
    let ended = tokio::time::timeout(Duration::from_secs(60), running).await;
    assert!(
        matches!(ended, Ok(Ok(Err(WorkerError::Refused(_))))),
        "{ended:?}"
    );
    assert_eq!(refusing.registers.load(Ordering::SeqCst), 1);
}

/// Lease answers that bring tasks of two jobs in turn (as a coordinator's
/// do when one job's tasks were handed back and the next job's follow):
/// the worker keeps each job's pace, so after job 1 is first seen it
/// keeps what it asked for. Before, each answer after a change of job
/// looked like a new job's, was cut to a fresh pace and mostly handed
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_mixing_two_jobs_are_kept_whole() {
    let coordinator = Arc::new(Hostile {
        mixed_answers: AtomicUsize::new(61),
        ..Hostile::default()
    });
    let (running, drain) = worker(coordinator.clone()).await;
    while coordinator.mixed_answers.load(SeqCst) > 0 {
        coordinator.news.notified().await;
    }
    drain.send(()).unwrap();
    let summary = running.await.unwrap().unwrap();
    let leased = coordinator.next_id.load(SeqCst);
    assert!(summary.cut <= 1, "{summary:?} of {leased} leased");
    let released = coordinator.released.lock().unwrap().len() as u64;
    assert_eq!(summary.reported + released, leased, "{summary:?}");
}
