//! What a worker has done, for its Prometheus page (`nqueens worker
//! --metrics ADDR`). Counters only grow; `rate()` makes them rates
//! (subproblems or nodes per second), so the worker keeps no rates itself.
//!
//! The names start with `nqueens_worker_process_`: the coordinator's own
//! page has `nqueens_worker_*{worker}` series, its view of each worker
//! (what it credited), which must not be mixed up with what a worker says
//! of itself.

use nqueens_metrics::{Kind, Page};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// The outcomes of a report, as the coordinator answered (or `refused`:
/// an error that will not change by retrying, the result dropped).
pub const OUTCOMES: [&str; 6] = [
    "accepted",
    "duplicate",
    "conflict",
    "awaiting_check",
    "not_counted",
    "refused",
];

/// The coordinator calls a worker makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Register,
    Lease,
    Heartbeat,
    Report,
    Release,
}

const CALLS: [&str; 5] = ["register", "lease", "heartbeat", "report", "release"];

/// Who this worker is, known once it has started.
#[derive(Clone, Debug)]
struct Info {
    id: String,
    name: String,
    path: String,
    threads: usize,
}

/// A worker's counters, shared by its loop and its metrics endpoint.
#[derive(Debug)]
pub struct Stats {
    info: OnceLock<Info>,
    started_ms: u64,
    tasks_counted: AtomicU64,
    tasks_stopped: AtomicU64,
    subproblems: AtomicU64,
    nodes: AtomicU64,
    counting_us: AtomicU64,
    results: [AtomicU64; OUTCOMES.len()],
    errors: [AtomicU64; CALLS.len()],
    leases: AtomicU64,
    last_result_ms: AtomicU64,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Stats {
    pub fn new() -> Arc<Stats> {
        Arc::new(Stats {
            info: OnceLock::new(),
            started_ms: now_ms(),
            tasks_counted: AtomicU64::new(0),
            tasks_stopped: AtomicU64::new(0),
            subproblems: AtomicU64::new(0),
            nodes: AtomicU64::new(0),
            counting_us: AtomicU64::new(0),
            results: Default::default(),
            errors: Default::default(),
            leases: AtomicU64::new(0),
            last_result_ms: AtomicU64::new(0),
        })
    }

    pub(crate) fn started(&self, id: &str, name: &str, path: &str, threads: usize) {
        let _ = self.info.set(Info {
            id: id.to_string(),
            name: name.to_string(),
            path: path.to_string(),
            threads,
        });
    }

    /// A task counted to its end.
    pub(crate) fn counted(&self, subproblems: u64, nodes: u128, elapsed: std::time::Duration) {
        self.tasks_counted.fetch_add(1, Ordering::Relaxed);
        self.subproblems.fetch_add(subproblems, Ordering::Relaxed);
        let nodes = u64::try_from(nodes).unwrap_or(u64::MAX);
        let _ = self
            .nodes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_add(nodes))
            });
        self.counting_us
            .fetch_add(elapsed.as_micros() as u64, Ordering::Relaxed);
    }

    /// A task that ended without a result (stopped, or not decodable).
    pub(crate) fn stopped(&self) {
        self.tasks_stopped.fetch_add(1, Ordering::Relaxed);
    }

    /// A report's outcome, one of [`OUTCOMES`].
    pub(crate) fn reported(&self, outcome: &str) {
        if let Some(i) = OUTCOMES.iter().position(|&o| o == outcome) {
            self.results[i].fetch_add(1, Ordering::Relaxed);
        }
        self.last_result_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// A failed call to the coordinator.
    pub(crate) fn failed(&self, call: Call) {
        self.errors[call as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_leases(&self, n: usize) {
        self.leases.store(n as u64, Ordering::Relaxed);
    }

    /// Tasks counted to their end so far.
    pub fn tasks_counted(&self) -> u64 {
        self.tasks_counted.load(Ordering::Relaxed)
    }

    /// Results the coordinator has answered (refused ones left out).
    pub fn results_answered(&self) -> u64 {
        OUTCOMES
            .iter()
            .zip(&self.results)
            .filter(|(o, _)| **o != "refused")
            .map(|(_, n)| n.load(Ordering::Relaxed))
            .sum()
    }

    /// The metrics page.
    pub fn render(&self) -> String {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let mut page = Page::new();
        page.build_info("worker");
        if let Some(i) = self.info.get() {
            page.family(
                "nqueens_worker_process_info",
                Kind::Gauge,
                "This worker (always 1): its id and name, the engine path it counts with, its counting threads.",
            )
            .sample(
                "nqueens_worker_process_info",
                &[
                    ("worker", &i.id),
                    ("name", &i.name),
                    ("path", &i.path),
                    ("threads", &i.threads.to_string()),
                ],
                1.0,
            );
            page.single(
                "nqueens_worker_process_threads",
                Kind::Gauge,
                "Counting threads.",
                i.threads as f64,
            );
        }
        page.single(
            "nqueens_worker_process_start_timestamp_seconds",
            Kind::Gauge,
            "Unix time this worker started.",
            self.started_ms as f64 / 1000.0,
        )
        .single(
            "nqueens_worker_process_tasks_counted_total",
            Kind::Counter,
            "Tasks counted to their end.",
            get(&self.tasks_counted),
        )
        .single(
            "nqueens_worker_process_tasks_stopped_total",
            Kind::Counter,
            "Tasks ended without a result (cancelled, reassigned, stopped by a drain, or not decodable).",
            get(&self.tasks_stopped),
        )
        .single(
            "nqueens_worker_process_subproblems_total",
            Kind::Counter,
            "Subproblems counted (rate() is the worker's speed).",
            get(&self.subproblems),
        )
        .single(
            "nqueens_worker_process_nodes_total",
            Kind::Counter,
            "Search nodes visited by the counted tasks.",
            get(&self.nodes),
        )
        .single(
            "nqueens_worker_process_counting_seconds_total",
            Kind::Counter,
            "Thread-seconds spent counting tasks (rate() over threads is the busy share).",
            get(&self.counting_us) / 1e6,
        );
        // A counter family with one label, a sample per (value, counter).
        let mut by =
            |name: &str, help: &str, label: &str, values: &[&str], counts: &[AtomicU64]| {
                page.family(name, Kind::Counter, help);
                for (v, n) in values.iter().zip(counts) {
                    page.sample(name, &[(label, v)], get(n));
                }
            };
        by(
            "nqueens_worker_process_results_total",
            "Results reported, by the coordinator's answer (refused: dropped after an error retrying cannot fix).",
            "outcome",
            &OUTCOMES,
            &self.results,
        );
        by(
            "nqueens_worker_process_errors_total",
            "Failed calls to the coordinator, by call (retries count each time).",
            "call",
            &CALLS,
            &self.errors,
        );
        page.single(
            "nqueens_worker_process_leases",
            Kind::Gauge,
            "Leases held: tasks queued or being counted.",
            get(&self.leases),
        )
        .single(
            "nqueens_worker_process_last_result_timestamp_seconds",
            Kind::Gauge,
            "Unix time of the latest answer to a report (0: none yet).",
            get(&self.last_result_ms) / 1000.0,
        );
        page.finish()
    }
}
