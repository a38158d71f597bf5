//! The coordinator's Prometheus page (`GET /metrics`), rendered from a
//! snapshot of the state on each scrape: a [`Collector`] per part (the
//! state, the journal, gRPC). The encoder and the HTTP endpoint are
//! `nqueens_metrics`', shared with the worker; a counter is named without
//! the `_total` the encoder appends.
//!
//! Per-job series carry `job_id` (Prometheus sets `job` itself, to the
//! scrape job's name), per-worker series `name` and `worker`, a keyed tag
//! of the id (this page has no authentication, and an id is what a worker
//! calls with). Counts above 2^53 lose
//! precision as Prometheus floats; `nqueens status` has the exact values.

use crate::hub::Coordinator;
use crate::journal;
use crate::state::{Counters, JobState, JobView, WorkerInfo};
use nqueens_metrics::grpc::GrpcMetrics;
use nqueens_metrics::{family, single, BuildInfo};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::TypedMetric;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

/// The gRPC services whose methods are labelled one by one.
pub const SERVICES: [&str; 4] = [
    "nqueens.v1.WorkerService",
    "nqueens.v1.OperatorService",
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
];

/// Search nodes of the results accepted by this process, per coordinator
/// and job. Kept here rather than in the state: a Prometheus counter only
/// has to grow while the process lives (`rate()` takes a restart's reset
/// in its stride), so nothing of it needs to be journaled. Keyed by the
/// coordinator's address as well as the job, since tests run several
/// coordinators in one process.
static NODES: Mutex<BTreeMap<(usize, u64), f64>> = Mutex::new(BTreeMap::new());

/// Counts the nodes of a result just counted for `job`.
pub fn counted(core: &Coordinator, job: u64, nodes: u128) {
    let key = (core as *const Coordinator as usize, job);
    *NODES.lock().expect("nodes lock").entry(key).or_default() += nodes as f64;
}

fn state_name(s: JobState) -> &'static str {
    match s {
        JobState::Planning => "planning",
        JobState::Running => "running",
        JobState::Paused => "paused",
        JobState::Cancelled => "cancelled",
        JobState::Done => "done",
    }
}

/// The metrics text.
pub fn render(core: &Coordinator, grpc: &Arc<GrpcMetrics>) -> String {
    nqueens_metrics::render([
        Box::new(BuildInfo("coordinator")) as Box<dyn Collector>,
        Box::new(Snapshot::of(core)),
        Box::new(Journal),
        Box::new(Arc::clone(grpc)),
    ])
}

/// What one scrape shows of the coordinator's state.
#[derive(Debug)]
struct Snapshot {
    jobs: Vec<JobView>,
    /// [`NODES`] of this coordinator, by job.
    nodes: BTreeMap<u64, f64>,
    counters: Counters,
    /// Each worker by its tag (not its id: an id is what a worker calls
    /// with, and this page has no authentication), with the leases it holds.
    workers: Vec<(String, WorkerInfo, usize)>,
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let e = &mut encoder;
        self.jobs(e)?;
        self.progress(e)?;
        self.counts(e)?;
        self.results_and_leases(e)?;
        self.per_worker(e)
    }
}

impl Snapshot {
    fn of(core: &Coordinator) -> Snapshot {
        let me = core as *const Coordinator as usize;
        let nodes = {
            let all = NODES.lock().expect("nodes lock");
            let mine = all.range((me, 0)..=(me, u64::MAX));
            mine.map(|(&(_, job), &n)| (job, n)).collect()
        };
        Snapshot {
            jobs: core.jobs(),
            nodes,
            counters: core.counters(),
            workers: core
                .workers()
                .into_iter()
                .map(|(w, leases, _)| (core.worker_tag(&w.id), w, leases))
                .collect(),
        }
    }

    /// A family of one sample per job (none where `value` gives none).
    fn per_job<M: EncodeMetric + TypedMetric>(
        &self,
        e: &mut DescriptorEncoder,
        name: &str,
        help: &str,
        value: impl Fn(&JobView) -> Option<M>,
    ) -> fmt::Result {
        let samples = self
            .jobs
            .iter()
            .filter_map(|j| Some(([("job_id", j.id)], value(j)?)));
        family(e, name, help, samples)
    }

    /// `nqueens_job_info` and `nqueens_tasks`: what each job is, and its
    /// tasks by state.
    fn jobs(&self, e: &mut DescriptorEncoder) -> fmt::Result {
        let info = self.jobs.iter().map(|j| {
            let labels = [
                ("job_id", j.id.to_string()),
                ("n", j.spec.n.to_string()),
                ("strategy", j.spec.strategy.to_string()),
                ("state", state_name(j.state).to_string()),
            ];
            (labels, ConstGauge::new(1i64))
        });
        family(
            e,
            "nqueens_job_info",
            "Each job (always 1): its N, strategy and state (planning, running, paused, cancelled, done).",
            info,
        )?;
        let tasks = self.jobs.iter().flat_map(|j| {
            [
                ("pending", j.pending),
                ("leased", j.leased),
                ("done", j.done),
                ("failed", j.failed),
                ("dead", j.dead),
            ]
            .map(|(state, n)| (([("job_id", j.id)], [("state", state)]), ConstGauge::new(n)))
        });
        family(e, "nqueens_tasks", "Tasks of each job by state.", tasks)
    }

    /// How far each job is, how fast it goes, and who works on it.
    fn progress(&self, e: &mut DescriptorEncoder) -> fmt::Result {
        self.per_job(
            e,
            "nqueens_job_work_done_ratio",
            "Share of a job's estimated work that is done.",
            |j| {
                let done = match j.work_total > 0.0 {
                    true => j.work_done / j.work_total,
                    false => 0.0,
                };
                Some(ConstGauge::new(done))
            },
        )?;
        self.per_job(
            e,
            "nqueens_job_work_per_second",
            "Estimated work done per second over the latest results.",
            |j| Some(ConstGauge::new(j.work_per_second)),
        )?;
        self.per_job(
            e,
            "nqueens_job_eta_seconds",
            "Seconds a job has left at its latest rate (absent while unknown).",
            |j| j.eta_seconds.map(ConstGauge::new),
        )?;
        self.per_job(
            e,
            "nqueens_job_workers",
            "Distinct workers holding a lease on each job.",
            |j| Some(ConstGauge::new(j.workers)),
        )?;
        self.per_job(
            e,
            "nqueens_job_submitted_timestamp_seconds",
            "Unix time each job was submitted.",
            |j| Some(ConstGauge::new(j.submitted_ms as f64 / 1000.0)),
        )
    }

    /// What each job counted: its solutions and search nodes.
    fn counts(&self, e: &mut DescriptorEncoder) -> fmt::Result {
        // A counter, not a gauge: the job's total so far only grows (each
        // counted result adds its solutions, nothing ever subtracts), so
        // rate() is the job's solutions per second and increase() what a
        // window counted. Unlike most counters it does not even reset when
        // the coordinator restarts: it is re-derived from the journal.
        self.per_job(
            e,
            "nqueens_job_solutions",
            "Solutions (the total, all symmetries) counted in each job's results so far.",
            |j| Some(ConstCounter::new(j.total as f64)),
        )?;
        self.per_job(
            e,
            "nqueens_nodes",
            "Search nodes in the results this coordinator process counted, per job (starts at 0 with the process).",
            |j| Some(ConstCounter::new(self.nodes.get(&j.id).copied().unwrap_or(0.0))),
        )
    }

    /// Task results by outcome, and what became of leases.
    fn results_and_leases(&self, e: &mut DescriptorEncoder) -> fmt::Result {
        let c = &self.counters;
        let outcomes = [
            ("accepted", c.accepted),
            ("duplicate", c.duplicates),
            ("conflict", c.conflicts),
        ];
        let results = outcomes.map(|(o, n)| ([("outcome", o)], ConstCounter::new(n)));
        family(e, "nqueens_results", "Task results by outcome.", results)?;
        for (name, help, n) in [
            (
                "nqueens_leases_granted",
                "Leases granted.",
                c.leases_granted,
            ),
            (
                "nqueens_lease_expiries",
                "Leases that expired without a heartbeat.",
                c.lease_expiries,
            ),
            (
                "nqueens_lease_releases",
                "Leases handed back by workers.",
                c.releases,
            ),
        ] {
            single(e, name, help, &ConstCounter::new(n))?;
        }
        Ok(())
    }

    /// The coordinator's view of each worker: what it credited, when it
    /// last heard from it, what it holds.
    fn per_worker(&self, e: &mut DescriptorEncoder) -> fmt::Result {
        self.worker_family(
            e,
            "nqueens_worker_tasks_done",
            "Tasks each worker completed.",
            |w, _| ConstCounter::new(w.tasks_done),
        )?;
        self.worker_family(
            e,
            "nqueens_worker_subproblems_done",
            "Subproblems each worker reported finished.",
            |w, _| ConstCounter::new(w.subproblems_done),
        )?;
        self.worker_family(
            e,
            "nqueens_worker_errors",
            "Expired leases and conflicts per worker.",
            |w, _| ConstCounter::new(w.errors),
        )?;
        self.worker_family(
            e,
            "nqueens_worker_last_seen_timestamp_seconds",
            "Unix time of each worker's last call.",
            |w, _| ConstGauge::new(w.last_seen_ms as f64 / 1000.0),
        )?;
        self.worker_family(
            e,
            "nqueens_worker_leases",
            "Leases each worker holds.",
            |_, leases| ConstGauge::new(leases),
        )
    }

    /// A family of one sample per worker, labelled `worker` (its tag) and
    /// `name`.
    fn worker_family<M: EncodeMetric + TypedMetric>(
        &self,
        e: &mut DescriptorEncoder,
        name: &str,
        help: &str,
        value: impl Fn(&WorkerInfo, usize) -> M,
    ) -> fmt::Result {
        let samples = self.workers.iter().map(|(tag, w, leases)| {
            let labels = [("worker", tag.as_str()), ("name", w.name.as_str())];
            (labels, value(w, *leases))
        });
        family(e, name, help, samples)
    }
}

/// The journal's fsyncs and failed writes, and failed checkpoints
/// (process-wide, see [`journal::FSYNC_SECONDS`]).
#[derive(Debug)]
struct Journal;

impl Collector for Journal {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let e = &mut encoder;
        single(
            e,
            "nqueens_journal_fsync_duration_seconds",
            "Time of each journal fsync (one per group of appends committed together).",
            &*journal::FSYNC_SECONDS,
        )?;
        single(
            e,
            "nqueens_journal_group_records",
            "Records committed by each journal fsync.",
            &*journal::GROUP_RECORDS,
        )?;
        single(
            e,
            "nqueens_journal_write_errors",
            "Journal writes or fsyncs that failed (nothing of them was acknowledged).",
            &*journal::WRITE_ERRORS,
        )?;
        single(
            e,
            "nqueens_checkpoint_errors",
            "Checkpoints that failed (the journal still holds everything; a start replays more).",
            &*crate::checkpoint::ERRORS,
        )
    }
}
