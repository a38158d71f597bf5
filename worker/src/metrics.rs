//! What a worker has done, for its Prometheus page (`nqueens worker
//! --metrics ADDR`). Counters only grow; `rate()` makes them rates
//! (subproblems or nodes per second), so the worker keeps no rates itself.
//!
//! The names start with `nqueens_worker_process_`: the coordinator's own
//! page has `nqueens_worker_*{worker}` series, its view of each worker
//! (what it credited), which must not be mixed up with what a worker says
//! of itself. A counter is named without the `_total` the encoder appends.

use nqueens_common::engine::device::Device;
use nqueens_metrics::{family, single, BuildInfo};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use std::fmt;
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

/// A worker's counters, shared by its loop and its metrics endpoint (a
/// [`Collector`] of its page).
#[derive(Debug)]
pub struct Stats {
    info: OnceLock<Info>,
    /// Unix time this worker started, in seconds.
    started: f64,
    tasks_counted: Counter,
    tasks_stopped: Counter,
    subproblems: Counter,
    nodes: Counter,
    counting_seconds: Counter<f64, AtomicU64>,
    results: [Counter; OUTCOMES.len()],
    errors: [Counter; CALLS.len()],
    leases: Gauge,
    /// Unix time of the latest answer to a report, in seconds (0: none yet).
    last_result: Gauge<f64, AtomicU64>,
    /// The cards it counts on, read at each scrape.
    cards: OnceLock<Vec<Arc<dyn Device>>>,
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_millis() as f64 / 1000.0)
}

impl Stats {
    pub fn new() -> Arc<Stats> {
        Arc::new(Stats {
            info: OnceLock::new(),
            started: now(),
            tasks_counted: Counter::default(),
            tasks_stopped: Counter::default(),
            subproblems: Counter::default(),
            nodes: Counter::default(),
            counting_seconds: Counter::default(),
            results: Default::default(),
            errors: Default::default(),
            leases: Gauge::default(),
            last_result: Gauge::default(),
            cards: OnceLock::new(),
        })
    }

    /// The cards this worker counts on, for its page.
    pub(crate) fn with_cards(&self, cards: &[Arc<dyn Device>]) {
        let _ = self.cards.set(cards.to_vec());
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
        self.tasks_counted.inc();
        self.subproblems.inc_by(subproblems);
        let nodes = u64::try_from(nodes).unwrap_or(u64::MAX);
        let _ = self
            .nodes
            .inner()
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_add(nodes))
            });
        self.counting_seconds.inc_by(elapsed.as_secs_f64());
    }

    /// A task that ended without a result (stopped, or not decodable).
    pub(crate) fn stopped(&self) {
        self.tasks_stopped.inc();
    }

    /// A report's outcome, one of [`OUTCOMES`].
    pub(crate) fn reported(&self, outcome: &str) {
        if let Some(i) = OUTCOMES.iter().position(|&o| o == outcome) {
            self.results[i].inc();
        }
        self.last_result.set(now());
    }

    /// A failed call to the coordinator.
    pub(crate) fn failed(&self, call: Call) {
        self.errors[call as usize].inc();
    }

    pub(crate) fn set_leases(&self, n: usize) {
        self.leases.set(n as i64);
    }

    /// Tasks counted to their end so far.
    pub fn tasks_counted(&self) -> u64 {
        self.tasks_counted.get()
    }

    /// Results the coordinator has answered (refused ones left out).
    pub fn results_answered(&self) -> u64 {
        OUTCOMES
            .iter()
            .zip(&self.results)
            .filter(|(o, _)| **o != "refused")
            .map(|(_, n)| n.get())
            .sum()
    }

    /// The metrics page.
    pub fn render(self: &Arc<Self>) -> String {
        nqueens_metrics::render([
            Box::new(BuildInfo("worker")) as Box<dyn Collector>,
            Box::new(Arc::clone(self)),
        ])
    }

    /// Who this worker is (once it has started) and since when.
    fn identity(&self, e: &mut DescriptorEncoder) -> fmt::Result {
        if let Some(i) = self.info.get() {
            let threads = i.threads.to_string();
            let labels = [
                ("worker", i.id.as_str()),
                ("name", &i.name),
                ("path", &i.path),
                ("threads", &threads),
            ];
            family(
                e,
                "nqueens_worker_process_info",
                "This worker (always 1): its id and name, the engine path it counts with, its counting threads.",
                [(labels, ConstGauge::new(1i64))],
            )?;
            single(
                e,
                "nqueens_worker_process_threads",
                "Counting threads.",
                &ConstGauge::new(i.threads),
            )?;
        }
        single(
            e,
            "nqueens_worker_process_start_timestamp_seconds",
            "Unix time this worker started.",
            &ConstGauge::new(self.started),
        )
    }

    /// The tasks counted, and what counting them took.
    fn work(&self, e: &mut DescriptorEncoder) -> fmt::Result {
        for (name, help, counter) in [
            (
                "nqueens_worker_process_tasks_counted",
                "Tasks counted to their end.",
                &self.tasks_counted,
            ),
            (
                "nqueens_worker_process_tasks_stopped",
                "Tasks ended without a result (cancelled, reassigned, stopped by a drain, or not decodable).",
                &self.tasks_stopped,
            ),
            (
                "nqueens_worker_process_subproblems",
                "Subproblems counted (rate() is the worker's speed).",
                &self.subproblems,
            ),
            (
                "nqueens_worker_process_nodes",
                "Search nodes visited by the counted tasks.",
                &self.nodes,
            ),
        ] {
            single(e, name, help, counter)?;
        }
        single(
            e,
            "nqueens_worker_process_counting_seconds",
            "Thread-seconds spent counting tasks (rate() over threads is the busy share).",
            &self.counting_seconds,
        )
    }

    /// The coordinator's answers and failed calls, and the leases held.
    fn calls(&self, e: &mut DescriptorEncoder) -> fmt::Result {
        let results = OUTCOMES.iter().zip(&self.results);
        family(
            e,
            "nqueens_worker_process_results",
            "Results reported, by the coordinator's answer (refused: dropped after an error retrying cannot fix).",
            results.map(|(&outcome, n)| ([("outcome", outcome)], n.clone())),
        )?;
        let errors = CALLS.iter().zip(&self.errors);
        family(
            e,
            "nqueens_worker_process_errors",
            "Failed calls to the coordinator, by call (retries count each time).",
            errors.map(|(&call, n)| ([("call", call)], n.clone())),
        )?;
        single(
            e,
            "nqueens_worker_process_leases",
            "Leases held: tasks queued or being counted.",
            &self.leases,
        )?;
        single(
            e,
            "nqueens_worker_process_last_result_timestamp_seconds",
            "Unix time of the latest answer to a report (0: none yet).",
            &self.last_result,
        )
    }

    /// Each card's steps, by its place among this worker's cards and its name:
    /// taken by its threads, and offered by its launches.
    fn cards(&self, e: &mut DescriptorEncoder) -> fmt::Result {
        let Some(cards) = self.cards.get().filter(|c| !c.is_empty()) else {
            return Ok(());
        };
        let mut samples = Vec::new();
        for (i, card) in cards.iter().enumerate() {
            let busy = card.busy().unwrap_or_default();
            for (steps, n) in [("taken", busy.taken), ("offered", busy.offered)] {
                let labels = [
                    ("card", i.to_string()),
                    ("name", card.name().to_string()),
                    ("steps", steps.to_string()),
                ];
                samples.push((labels, ConstCounter::new(n)));
            }
        }
        family(
            e,
            "nqueens_worker_process_card_steps",
            "Steps of each card's threads: taken searching, and offered by its launches (rate(taken) / rate(offered) is the card's busy share).",
            samples,
        )
    }
}

impl Collector for Stats {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        self.identity(&mut encoder)?;
        self.work(&mut encoder)?;
        self.calls(&mut encoder)?;
        self.cards(&mut encoder)
    }
}
