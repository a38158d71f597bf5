//! The coordinator's Prometheus page (`GET /metrics`), rendered from a
//! snapshot of the state on each scrape. The exposition format and the
//! HTTP endpoint are `nqueens_metrics`', shared with the worker.
//!
//! Per-job series carry `job_id` (Prometheus sets `job` itself, to the
//! scrape job's name), per-worker series `name` and `worker`, a keyed tag
//! of the id (this page has no authentication, and an id is what a worker
//! calls with). Counts above 2^53 lose
//! precision as Prometheus floats; `nqueens status` has the exact values.

use crate::hub::Coordinator;
use crate::journal;
use crate::state::JobState;
use nqueens_metrics::grpc::GrpcMetrics;
use nqueens_metrics::{Kind, Page};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

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
pub fn render(core: &Coordinator, grpc: &GrpcMetrics) -> String {
    let mut page = Page::new();
    page.build_info("coordinator");
    let jobs = core.jobs();
    let per_job = |page: &mut Page,
                   name: &str,
                   kind: Kind,
                   help: &str,
                   f: &dyn Fn(&crate::state::JobView) -> Option<f64>| {
        page.family(name, kind, help);
        for j in &jobs {
            if let Some(v) = f(j) {
                page.sample(name, &[("job_id", &j.id.to_string())], v);
            }
        }
    };

    page.family(
        "nqueens_job_info",
        Kind::Gauge,
        "Each job (always 1): its N, strategy and state (planning, running, paused, cancelled, done).",
    );
    for j in &jobs {
        page.sample(
            "nqueens_job_info",
            &[
                ("job_id", &j.id.to_string()),
                ("n", &j.spec.n.to_string()),
                ("strategy", &j.spec.strategy.to_string()),
                ("state", state_name(j.state)),
            ],
            1.0,
        );
    }
    page.family("nqueens_tasks", Kind::Gauge, "Tasks of each job by state.");
    for j in &jobs {
        for (state, n) in [
            ("pending", j.pending),
            ("leased", j.leased),
            ("done", j.done),
            ("failed", j.failed),
            ("dead", j.dead),
        ] {
            let id = j.id.to_string();
            page.sample(
                "nqueens_tasks",
                &[("job_id", &id), ("state", state)],
                n as f64,
            );
        }
    }
    per_job(
        &mut page,
        "nqueens_job_work_done_ratio",
        Kind::Gauge,
        "Share of a job's estimated work that is done.",
        &|j| {
            Some(if j.work_total > 0.0 {
                j.work_done / j.work_total
            } else {
                0.0
            })
        },
    );
    per_job(
        &mut page,
        "nqueens_job_work_per_second",
        Kind::Gauge,
        "Estimated work done per second over the latest results.",
        &|j| Some(j.work_per_second),
    );
    per_job(
        &mut page,
        "nqueens_job_eta_seconds",
        Kind::Gauge,
        "Seconds a job has left at its latest rate (absent while unknown).",
        &|j| j.eta_seconds,
    );
    per_job(
        &mut page,
        "nqueens_job_workers",
        Kind::Gauge,
        "Distinct workers holding a lease on each job.",
        &|j| Some(j.workers as f64),
    );
    per_job(
        &mut page,
        "nqueens_job_submitted_timestamp_seconds",
        Kind::Gauge,
        "Unix time each job was submitted.",
        &|j| Some(j.submitted_ms as f64 / 1000.0),
    );
    // A counter, not a gauge: the job's total so far only grows (each
    // counted result adds its solutions, nothing ever subtracts), so
    // rate() is the job's solutions per second and increase() what a
    // window counted. Unlike most counters it does not even reset when the
    // coordinator restarts: it is re-derived from the journal.
    per_job(
        &mut page,
        "nqueens_job_solutions_total",
        Kind::Counter,
        "Solutions (the total, all symmetries) counted in each job's results so far.",
        &|j| Some(j.total as f64),
    );
    {
        let me = core as *const Coordinator as usize;
        let nodes = NODES.lock().expect("nodes lock");
        per_job(
            &mut page,
            "nqueens_nodes_total",
            Kind::Counter,
            "Search nodes in the results this coordinator process counted, per job (starts at 0 with the process).",
            &|j| Some(nodes.get(&(me, j.id)).copied().unwrap_or(0.0)),
        );
    }

    let c = core.counters();
    page.family(
        "nqueens_results_total",
        Kind::Counter,
        "Task results by outcome.",
    );
    for (o, n) in [
        ("accepted", c.accepted),
        ("duplicate", c.duplicates),
        ("conflict", c.conflicts),
    ] {
        page.sample("nqueens_results_total", &[("outcome", o)], n as f64);
    }
    page.single(
        "nqueens_leases_granted_total",
        Kind::Counter,
        "Leases granted.",
        c.leases_granted as f64,
    );
    page.single(
        "nqueens_lease_expiries_total",
        Kind::Counter,
        "Leases that expired without a heartbeat.",
        c.lease_expiries as f64,
    );
    page.single(
        "nqueens_lease_releases_total",
        Kind::Counter,
        "Leases handed back by workers.",
        c.releases as f64,
    );

    // Tags, not ids: an id is what a worker calls with, and this page has
    // no authentication.
    let workers: Vec<_> = core
        .workers()
        .into_iter()
        .map(|(w, leases, _)| (core.worker_tag(&w.id), w, leases))
        .collect();
    let mut per_worker =
        |name: &str,
         kind: Kind,
         help: &str,
         f: &dyn Fn(&crate::state::WorkerInfo, usize) -> f64| {
            page.family(name, kind, help);
            for (tag, w, leases) in &workers {
                page.sample(name, &[("worker", tag), ("name", &w.name)], f(w, *leases));
            }
        };
    per_worker(
        "nqueens_worker_tasks_done_total",
        Kind::Counter,
        "Tasks each worker completed.",
        &|w, _| w.tasks_done as f64,
    );
    per_worker(
        "nqueens_worker_subproblems_done_total",
        Kind::Counter,
        "Subproblems each worker reported finished.",
        &|w, _| w.subproblems_done as f64,
    );
    per_worker(
        "nqueens_worker_errors_total",
        Kind::Counter,
        "Expired leases and conflicts per worker.",
        &|w, _| w.errors as f64,
    );
    per_worker(
        "nqueens_worker_last_seen_timestamp_seconds",
        Kind::Gauge,
        "Unix time of each worker's last call.",
        &|w, _| w.last_seen_ms as f64 / 1000.0,
    );
    per_worker(
        "nqueens_worker_leases",
        Kind::Gauge,
        "Leases each worker holds.",
        &|_, n| n as f64,
    );

    page.family(
        "nqueens_journal_fsync_duration_seconds",
        Kind::Histogram,
        "Time of each journal fsync (one per group of appends committed together).",
    )
    .histogram(
        "nqueens_journal_fsync_duration_seconds",
        &[],
        &journal::FSYNC_SECONDS,
    );
    page.family(
        "nqueens_journal_group_records",
        Kind::Histogram,
        "Records committed by each journal fsync.",
    )
    .histogram(
        "nqueens_journal_group_records",
        &[],
        &journal::GROUP_RECORDS,
    );
    page.single(
        "nqueens_journal_write_errors_total",
        Kind::Counter,
        "Journal writes or fsyncs that failed (nothing of them was acknowledged).",
        journal::WRITE_ERRORS.load(Ordering::Relaxed) as f64,
    );
    grpc.render(&mut page);
    page.finish()
}
