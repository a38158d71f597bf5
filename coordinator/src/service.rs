//! The gRPC services over [`Coordinator`]: request checks, and errors
//! mapped to precise status codes (conversions to the wire: [`crate::wire`]).

use crate::audit::{self, AuditError};
use crate::hub::{CoordError, Coordinator};
use crate::journal::JournalError;
use crate::state::{Checking, JobState, LeaseRef, Outcome, StateError, Verdict};
use crate::store::StoreError;
use crate::wire::worker_to_wire;
use nqueens_common::plan::{Mode, PlanSpec};
use nqueens_proto::refusal::Refusal;
use nqueens_proto::v1::{
    self, operator_service_server::OperatorService, worker_service_server::WorkerService,
};
use nqueens_proto::{task_to_wire, u128_from_wire};
use std::pin::Pin;
use std::sync::Arc;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

/// Most workers that may be asked to agree on one task.
pub const MAX_REDUNDANCY: u32 = 3;

/// Most tasks one lease call may ask for.
pub const MAX_LEASE_BATCH: u32 = 1024;

/// Size limits of request fields (bytes for strings, entries for lists).
pub const MAX_WORKER_ID: usize = 128;
pub const MAX_HOST: usize = 256;
pub const MAX_VERSION: usize = nqueens_proto::MAX_VERSION;
pub const MAX_LEASE_REFS: usize = 4096;
pub const MAX_CORES: u32 = 1 << 16;
/// Most entries in one ListJobs or ListWorkers reply (the rest are counted).
pub const MAX_LISTED: usize = 1000;

/// Refuses a string field longer than `max` bytes, or holding control
/// characters, naming the field and the limit.
fn text<'a>(field: &str, v: &'a str, max: usize) -> Result<&'a str, Status> {
    if v.len() > max {
        return Err(
            Refusal::BadRequest.status(format!("{field} is {} bytes; the limit is {max}", v.len()))
        );
    }
    if v.chars().any(char::is_control) {
        return Err(Refusal::BadRequest.status(format!(
            "{field} holds control characters; only printable text is accepted (at most {max} bytes)"
        )));
    }
    Ok(v)
}

/// Refuses a list of more than `max` entries, naming the field.
fn list<T>(field: &str, v: &[T], max: usize) -> Result<(), Status> {
    if v.len() > max {
        return Err(Refusal::BadRequest.status(format!(
            "{field} has {} entries; the limit is {max}",
            v.len()
        )));
    }
    Ok(())
}

impl From<CoordError> for Status {
    fn from(e: CoordError) -> Status {
        let refusal = refusal(&e);
        match refusal {
            // Not stored: the caller keeps its result and retries.
            Refusal::NotNow if matches!(e, CoordError::Journal(_)) => {
                refusal.status(format!("not stored, retry later: {e}"))
            }
            _ => refusal.status(e.to_string()),
        }
    }
}

/// What each coordinator error tells its caller.
fn refusal(e: &CoordError) -> Refusal {
    match e {
        CoordError::State(s) => match s {
            StateError::UnknownJob(_) | StateError::UnknownTask { .. } | StateError::Deleted(_) => {
                Refusal::Unknown
            }
            StateError::NotPlanned(_) | StateError::ResultNotInMemory { .. } => Refusal::NotNow,
            StateError::NotLeased { .. }
            | StateError::Finished { .. }
            | StateError::NothingToRetry { .. }
            | StateError::NotDeletable { .. } => Refusal::WrongState,
            StateError::Implausible { .. } => Refusal::BadRequest,
            StateError::TooManyWorkers(_) => Refusal::Full,
            StateError::WrongCredential { .. } => Refusal::Forbidden,
            StateError::BadRecord(_) | StateError::PlanChanged { .. } => Refusal::Internal,
        },
        CoordError::Journal(JournalError::TooLarge(_)) => Refusal::BadRequest,
        CoordError::Journal(_) => Refusal::NotNow,
        CoordError::Plan(_) | CoordError::TooManyTasks { .. } => Refusal::BadRequest,
        CoordError::Store(StoreError::Behind { .. }) => Refusal::NotNow,
        CoordError::DataDir { .. }
        | CoordError::Verify { .. }
        | CoordError::Store(_)
        | CoordError::JournalBehind { .. }
        | CoordError::JournalLost { .. } => Refusal::Internal,
    }
}

impl From<AuditError> for Status {
    fn from(e: AuditError) -> Status {
        let refusal = match &e {
            AuditError::UnknownJob(_) | AuditError::Deleted(_) => Refusal::Unknown,
            AuditError::NotPlanned(_) => Refusal::WrongState,
            AuditError::Journal(
                JournalError::Corrupt { .. }
                | JournalError::MissingSegment { .. }
                | JournalError::MissingRecords { .. }
                | JournalError::DamagedSegment { .. },
            )
            | AuditError::Lost { .. } => Refusal::DataLoss,
            AuditError::Journal(_) | AuditError::Replay(_) | AuditError::Plan(_) => {
                Refusal::Internal
            }
        };
        refusal.status(e.to_string())
    }
}

/// The name of the issued credential a call authenticated with, if any
/// (set by the worker token check).
#[derive(Clone, Debug)]
pub struct Credential(pub String);

fn credential<T>(req: &Request<T>) -> String {
    req.extensions()
        .get::<Credential>()
        .map(|c| c.0.clone())
        .unwrap_or_default()
}

fn worker_id(id: &str) -> Result<&str, Status> {
    if id.is_empty() {
        return Err(Refusal::BadRequest.status(format!(
            "worker_id is empty; it must be 1 to {MAX_WORKER_ID} bytes"
        )));
    }
    text("worker_id", id, MAX_WORKER_ID)
}

/// A task result's own strings.
fn result_fields(r: &v1::TaskResult) -> Result<(), Status> {
    text("result.solver_version", &r.solver_version, MAX_VERSION).map(|_| ())
}

/// Judges a worker's reports: each one's verdict or why it was refused;
/// the error of the whole call when the worker is not admitted or nothing
/// can be journaled. The valid ones are stored together (one fsync).
async fn judge(
    core: &Coordinator,
    worker: &str,
    credential: &str,
    items: Vec<(Option<v1::LeaseRef>, Option<v1::TaskResult>)>,
) -> Result<Vec<Result<Verdict, Status>>, Status> {
    let mut answers: Vec<Result<Verdict, Status>> = Vec::with_capacity(items.len());
    let (mut valid, mut at) = (Vec::new(), Vec::new());
    // A lease once a call: its copies would each be checked against the
    // state before any is applied, and each journaled.
    let mut seen = std::collections::HashSet::new();
    for (i, (lease, result)) in items.into_iter().enumerate() {
        let checked = lease_ref(lease.as_ref()).and_then(|lease| {
            let result = result.ok_or_else(|| Refusal::BadRequest.status("result is missing"))?;
            result_fields(&result)?;
            if !seen.insert(lease) {
                return Err(Refusal::BadRequest.status(format!(
                    "task {} of job {} under lease {} is reported earlier in this call",
                    lease.task, lease.job, lease.lease_id
                )));
            }
            Ok((lease, result))
        });
        match checked {
            Ok((lease, result)) => {
                let nodes = u128_from_wire(result.nodes.as_ref());
                valid.push((lease, Outcome::from(&result)));
                at.push((i, lease.job, nodes));
                answers.push(Ok(Verdict::NotCounted));
            }
            Err(s) => answers.push(Err(s)),
        }
    }
    let judged = core.report_all(worker, credential, valid).await?;
    for ((i, job, nodes), verdict) in at.into_iter().zip(judged) {
        if matches!(verdict, Ok(Verdict::New)) {
            crate::metrics::counted(core, job, nodes);
        }
        answers[i] = verdict.map_err(Status::from);
    }
    Ok(answers)
}

fn lease_ref(r: Option<&v1::LeaseRef>) -> Result<LeaseRef, Status> {
    let r = r.ok_or_else(|| Refusal::BadRequest.status("lease is missing"))?;
    Ok(r.into())
}

fn lease_refs(rs: &[v1::LeaseRef]) -> Vec<LeaseRef> {
    rs.iter().map(LeaseRef::from).collect()
}

/// The coordinator once it has recovered its state. The server answers
/// (health NOT_SERVING, every other call UNAVAILABLE) while the journal is
/// replayed, so that probes and operators are told what is happening.
#[derive(Clone, Default)]
pub struct Ready(Arc<std::sync::OnceLock<Arc<Coordinator>>>);

impl Ready {
    /// Called once, when start-up is over.
    pub fn set(&self, core: Arc<Coordinator>) {
        let _ = self.0.set(core);
    }

    pub fn get(&self) -> Option<&Arc<Coordinator>> {
        self.0.get()
    }

    fn core(&self) -> Result<&Arc<Coordinator>, Status> {
        self.get().ok_or_else(|| {
            Refusal::NotNow.status(
                "the coordinator is starting: it is replaying its journal and checking its \
                 jobs; try again in a few seconds (`nqueens health` says SERVING once it is ready)",
            )
        })
    }
}

/// The worker-facing service.
#[derive(Clone)]
pub struct Workers(pub Ready);

#[tonic::async_trait]
impl WorkerService for Workers {
    async fn register(
        &self,
        req: Request<v1::RegisterRequest>,
    ) -> Result<Response<v1::RegisterResponse>, Status> {
        let cred = credential(&req);
        let r = req.into_inner();
        if r.cores > MAX_CORES {
            return Err(Refusal::BadRequest
                .status(format!("cores is {}; the limit is {MAX_CORES}", r.cores)));
        }
        self.0
            .core()?
            .register(
                worker_id(&r.worker_id)?,
                &cred,
                text("name", &r.name, MAX_HOST)?,
                text("host", &r.host, MAX_HOST)?,
                r.cores,
                text("solver_version", &r.solver_version, MAX_VERSION)?,
            )
            .await?;
        let ttl = self.0.core()?.limits().lease_ttl_ms;
        Ok(Response::new(v1::RegisterResponse {
            heartbeat_interval_ms: ttl / 4,
            lease_ttl_ms: ttl,
        }))
    }

    async fn lease(
        &self,
        req: Request<v1::LeaseRequest>,
    ) -> Result<Response<v1::LeaseResponse>, Status> {
        let cred = credential(&req);
        let r = req.into_inner();
        if !(1..=MAX_LEASE_BATCH).contains(&r.max_tasks) {
            return Err(Refusal::BadRequest.status(format!(
                "max_tasks must be 1 to {MAX_LEASE_BATCH}, got {}",
                r.max_tasks
            )));
        }
        let worker = worker_id(&r.worker_id)?;
        let granted = self
            .0
            .core()?
            .lease(worker, &cred, r.max_tasks as usize)
            .await?;
        Ok(Response::new(v1::LeaseResponse {
            leases: granted.iter().map(v1::Lease::from).collect(),
            register_again: !self.0.core()?.registered(worker),
        }))
    }

    async fn heartbeat(
        &self,
        req: Request<v1::HeartbeatRequest>,
    ) -> Result<Response<v1::HeartbeatResponse>, Status> {
        let cred = credential(&req);
        let r = req.into_inner();
        list("leases", &r.leases, MAX_LEASE_REFS)?;
        let worker = worker_id(&r.worker_id)?;
        let (extended, deadline, stop) = self
            .0
            .core()?
            .heartbeat(
                worker,
                &cred,
                &lease_refs(&r.leases),
                r.subproblems_done,
                r.draining,
            )
            .await?;
        Ok(Response::new(v1::HeartbeatResponse {
            extended: extended.iter().map(v1::LeaseRef::from).collect(),
            deadline_unix_ms: deadline,
            stop: stop.iter().map(v1::LeaseRef::from).collect(),
            register_again: !self.0.core()?.registered(worker),
        }))
    }

    async fn report(
        &self,
        req: Request<v1::ReportRequest>,
    ) -> Result<Response<v1::ReportResponse>, Status> {
        let cred = credential(&req);
        let r = req.into_inner();
        let worker = worker_id(&r.worker_id)?;
        let verdict = judge(self.0.core()?, worker, &cred, vec![(r.lease, r.result)])
            .await?
            .pop()
            .expect("one report, one answer")?;
        Ok(Response::new(v1::ReportResponse {
            outcome: v1::ReportOutcome::from(verdict) as i32,
        }))
    }

    async fn report_many(
        &self,
        req: Request<v1::ReportManyRequest>,
    ) -> Result<Response<v1::ReportManyResponse>, Status> {
        let cred = credential(&req);
        let r = req.into_inner();
        let worker = worker_id(&r.worker_id)?;
        list("reports", &r.reports, MAX_LEASE_BATCH as usize)?;
        let core = self.0.core()?;
        let n = r.reports.len();
        let items = r.reports.into_iter().map(|i| (i.lease, i.result)).collect();
        // A refusal of the whole batch is each item's answer.
        let answers = judge(core, worker, &cred, items)
            .await
            .unwrap_or_else(|s| vec![Err(s); n])
            .into_iter()
            .map(|judged| match judged {
                Ok(v) => v1::ReportItemAnswer {
                    outcome: v1::ReportOutcome::from(v) as i32,
                    ..Default::default()
                },
                Err(s) => v1::ReportItemAnswer {
                    outcome: 0,
                    code: s.code() as i32,
                    message: s.message().to_string(),
                },
            })
            .collect();
        Ok(Response::new(v1::ReportManyResponse { answers }))
    }

    async fn release(
        &self,
        req: Request<v1::ReleaseRequest>,
    ) -> Result<Response<v1::ReleaseResponse>, Status> {
        let cred = credential(&req);
        let r = req.into_inner();
        list("leases", &r.leases, MAX_LEASE_REFS)?;
        let released = self
            .0
            .core()?
            .release(worker_id(&r.worker_id)?, &cred, &lease_refs(&r.leases))
            .await?;
        Ok(Response::new(v1::ReleaseResponse { released }))
    }
}

/// The operator-facing service.
#[derive(Clone)]
pub struct Operators(pub Ready);

type JobStream = Pin<Box<dyn Stream<Item = Result<v1::Job, Status>> + Send>>;
type ExportStream = Pin<Box<dyn Stream<Item = Result<v1::ExportRow, Status>> + Send>>;

/// Rows an export reads from the store at a time.
const EXPORT_PAGE: usize = 4096;

#[tonic::async_trait]
impl OperatorService for Operators {
    async fn submit_job(
        &self,
        req: Request<v1::SubmitJobRequest>,
    ) -> Result<Response<v1::Job>, Status> {
        let req = req.into_inner();
        let plan = req
            .plan
            .ok_or_else(|| Refusal::BadRequest.status("plan is missing"))?;
        let spec =
            PlanSpec::try_from(&plan).map_err(|e| Refusal::BadRequest.status(e.to_string()))?;
        if req.redundancy > MAX_REDUNDANCY {
            return Err(Refusal::BadRequest.status(format!(
                "redundancy {} is out of range: 1 (no check) to {MAX_REDUNDANCY}",
                req.redundancy
            )));
        }
        if !(0.0..=1.0).contains(&req.verify_fraction)
            || (req.verify_fraction > 0.0 && req.verify_fraction < 1.0 && req.redundancy < 2)
        {
            return Err(Refusal::BadRequest.status(format!(
                "verify_fraction {} is out of range: a share between 0 and 1, with redundancy 2 or 3",
                req.verify_fraction
            )));
        }
        if req.cross_device && req.redundancy < 2 {
            return Err(Refusal::BadRequest.status(
                "cross_device checks a task on a card and on a CPU: it needs redundancy 2 or 3",
            ));
        }
        if req.cross_device && spec.mode == Mode::Join {
            return Err(Refusal::BadRequest.status(
                "cross_device checks a task on a card and on a CPU, and the join counts on CPUs \
                 only: submit the job with mode backtrack",
            ));
        }
        let checking = Checking {
            redundancy: req.redundancy.max(1),
            fraction: req.verify_fraction,
            cross_device: req.cross_device,
        };
        let job = self.0.core()?.submit(spec, checking).await?;
        Ok(Response::new(v1::Job::from(&job)))
    }

    async fn get_job(&self, req: Request<v1::JobRef>) -> Result<Response<v1::Job>, Status> {
        Ok(Response::new(v1::Job::from(
            &self.0.core()?.job(req.into_inner().job_id)?,
        )))
    }

    async fn list_jobs(
        &self,
        _: Request<v1::ListJobsRequest>,
    ) -> Result<Response<v1::ListJobsResponse>, Status> {
        let jobs = self.0.core()?.jobs();
        // The newest jobs, when there are more than a reply may hold.
        let skip = jobs.len().saturating_sub(MAX_LISTED);
        Ok(Response::new(v1::ListJobsResponse {
            jobs: jobs[skip..].iter().map(v1::Job::from).collect(),
            total: jobs.len() as u64,
        }))
    }

    type WatchJobStream = JobStream;

    async fn watch_job(&self, req: Request<v1::JobRef>) -> Result<Response<JobStream>, Status> {
        let id = req.into_inner().job_id;
        self.0.core()?.job(id)?;
        let core = Arc::clone(self.0.core()?);
        let mut changes = core.subscribe();
        let mut closing = core.closing();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let spacing = std::time::Duration::from_millis(core.limits().watch_spacing_ms);
        let ended = move |core: &Coordinator| {
            core.job(id)
                .is_ok_and(|v| matches!(v.state, JobState::Done | JobState::Cancelled))
        };
        tokio::spawn(async move {
            while let Ok(view) = core.job(id) {
                let over = matches!(view.state, JobState::Done | JobState::Cancelled);
                if tx.send(Ok(v1::Job::from(&view))).await.is_err() || over {
                    break;
                }
                // A shutdown ends the watch, saying so.
                let closed = *closing.borrow_and_update();
                if closed {
                    let _ = tx.send(Err(Refusal::closing())).await;
                    break;
                }
                // Wait for a change, for the client to go away (so no task
                // outlives its watcher), or for a shutdown.
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { break },
                    () = tx.closed() => break,
                    _ = closing.changed() => continue,
                }
                // Coalesce the changes of the next moment into one
                // snapshot, but send a job's last snapshot at once, even
                // when it ends in the middle of the pause (a run that
                // waits on it would otherwise wait out the pause).
                let until = tokio::time::Instant::now() + spacing;
                while !ended(&core) {
                    tokio::select! {
                        () = tokio::time::sleep_until(until) => break,
                        changed = changes.changed() => if changed.is_err() { break },
                        () = tx.closed() => return,
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn pause_job(&self, req: Request<v1::JobRef>) -> Result<Response<v1::Job>, Status> {
        Ok(Response::new(v1::Job::from(
            &self
                .0
                .core()?
                .set_state(req.into_inner().job_id, JobState::Paused)
                .await?,
        )))
    }

    async fn resume_job(&self, req: Request<v1::JobRef>) -> Result<Response<v1::Job>, Status> {
        Ok(Response::new(v1::Job::from(
            &self
                .0
                .core()?
                .set_state(req.into_inner().job_id, JobState::Running)
                .await?,
        )))
    }

    async fn cancel_job(&self, req: Request<v1::JobRef>) -> Result<Response<v1::Job>, Status> {
        Ok(Response::new(v1::Job::from(
            &self
                .0
                .core()?
                .set_state(req.into_inner().job_id, JobState::Cancelled)
                .await?,
        )))
    }

    async fn list_workers(
        &self,
        _: Request<v1::ListWorkersRequest>,
    ) -> Result<Response<v1::ListWorkersResponse>, Status> {
        let core = self.0.core()?;
        let mut workers = core.workers();
        // The most recently seen, when there are more than a reply may hold.
        let total = workers.len() as u64;
        workers.sort_by_key(|(w, _, _)| std::cmp::Reverse(w.last_seen_ms));
        workers.truncate(MAX_LISTED);
        let lost_before = core.now_ms().saturating_sub(core.limits().lease_ttl_ms);
        Ok(Response::new(v1::ListWorkersResponse {
            workers: workers
                .iter()
                .map(|(w, leases, in_hand)| {
                    let mut wire = worker_to_wire(w, *leases);
                    wire.in_hand = in_hand.as_ref().map(v1::LeaseRef::from);
                    wire.lost = w.heard && w.last_seen_ms < lost_before;
                    // Measured between its latest heartbeats: what it
                    // counts now only while it holds work and is heard.
                    if wire.lost || wire.unheard || *leases == 0 {
                        wire.subproblems_per_second = 0.0;
                    }
                    wire
                })
                .collect(),
            total,
        }))
    }

    async fn retry_job(&self, req: Request<v1::JobRef>) -> Result<Response<v1::Job>, Status> {
        let id = req.into_inner().job_id;
        Ok(Response::new(v1::Job::from(
            &self.0.core()?.retry(id).await?,
        )))
    }

    async fn delete_job(
        &self,
        req: Request<v1::JobRef>,
    ) -> Result<Response<v1::DeleteJobResponse>, Status> {
        let id = req.into_inner().job_id;
        let results = self.0.core()?.delete(id).await?;
        Ok(Response::new(v1::DeleteJobResponse { results }))
    }

    type ExportJobStream = ExportStream;

    async fn export_job(&self, req: Request<v1::JobRef>) -> Result<Response<ExportStream>, Status> {
        let id = req.into_inner().job_id;
        let core = Arc::clone(self.0.core()?);
        let view = core.job(id)?;
        let spec = view.spec;
        let mut whole = Whole::of(&view, core.data_dir());
        let (tx, rx) = tokio::sync::mpsc::channel(EXPORT_PAGE);
        tokio::spawn(async move {
            // Every result counted before the call is in the store, or the
            // export is refused: never a short one that looks whole.
            if let Err(e) = core.sync_store().await {
                let _ = tx.send(Err(Status::from(e))).await;
                return;
            }
            let mut from = 0;
            let mut plan = Some(v1::PlanSpec::from(&spec));
            loop {
                let c = Arc::clone(&core);
                let page =
                    tokio::task::spawn_blocking(move || c.export_page(id, from, EXPORT_PAGE))
                        .await
                        .map_err(|e| Refusal::Internal.status(format!("the export stopped: {e}")))
                        .and_then(|p| p.map_err(Status::from));
                let page = match page {
                    Ok(p) if p.is_empty() => {
                        if let Err(e) = whole.end() {
                            let _ = tx.send(Err(e)).await;
                        }
                        return;
                    }
                    Ok(p) => p,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                };
                for (task, d) in page {
                    if let Err(e) = whole.row(d.task) {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                    from = d.task + 1;
                    let mut task = task.map(|t| task_to_wire(&spec, &t)).unwrap_or_default();
                    task.index = d.task;
                    task.plan = plan.take();
                    let row = v1::ExportRow {
                        task: Some(task),
                        result: Some(v1::TaskResult::from(&d.outcome)),
                        worker_id: d.worker,
                        unix_ms: d.unix_ms,
                    };
                    if tx.send(Ok(row)).await.is_err() {
                        return; // the caller went away
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn audit_job(
        &self,
        req: Request<v1::JobRef>,
    ) -> Result<Response<v1::AuditReport>, Status> {
        let id = req.into_inner().job_id;
        self.0.core()?.job(id)?;
        // The file on disk, not memory: that is what a restart would read.
        let journal = self.0.core()?.data_dir().join("journal");
        let audit = tokio::task::spawn_blocking(move || audit::audit(&journal, id))
            .await
            .map_err(|e| Refusal::Internal.status(format!("the audit stopped: {e}")))??;
        Ok(Response::new(v1::AuditReport::from(&audit)))
    }
}

/// What an export of a done job must hold: a row for each of its tasks,
/// in order. The store's rows are copies of the journal's results, and a
/// damaged store can lose some that its reads then skip; an export that
/// would be short says so instead of looking whole.
struct Whole {
    /// The job's tasks, if it is done (every task counted).
    tasks: Option<u64>,
    next: u64,
    store: std::path::PathBuf,
}

impl Whole {
    fn of(view: &crate::state::JobView, data_dir: &std::path::Path) -> Whole {
        Whole {
            tasks: (view.state == JobState::Done).then_some(view.tasks),
            next: 0,
            store: data_dir.join("store"),
        }
    }

    /// The next row's task.
    fn row(&mut self, task: u64) -> Result<(), Status> {
        if self.tasks.is_some() && task != self.next {
            return Err(self.missing(self.next, task));
        }
        self.next = task + 1;
        Ok(())
    }

    /// The rows ended.
    fn end(&self) -> Result<(), Status> {
        match self.tasks {
            Some(tasks) if self.next != tasks => Err(self.missing(self.next, tasks)),
            _ => Ok(()),
        }
    }

    fn missing(&self, from: u64, to: u64) -> Status {
        Refusal::DataLoss.status(format!(
            "the store has no result row for tasks {from}..{to} of this done job, whose journal \
             holds every result (`nqueens audit` reads it): the store is damaged. Stop the \
             coordinator, move {} aside and start it again: the store is rebuilt from the journal",
            self.store.display()
        ))
    }
}
