//! `nqueens bench`: the fast core on one thread and on all threads, beside
//! the plain bitmap baseline ([`nqueens_common::engine::baseline`]) in the same run, so a
//! speed ratio is always at hand. Each figure is the median of `runs`
//! in-process runs; every count is checked against the known values.

use crate::format::si;
use nqueens_common::engine::baseline::mirror_count;
use nqueens_common::engine::board::Size;
use nqueens_common::engine::device::Device;
use nqueens_common::engine::lanes::Path;
use nqueens_common::known::known;
use nqueens_common::plan::solve::solve_with;
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;

/// The CPU's model name (Linux: /proc/cpuinfo), with the engine paths it
/// can run.
pub fn cpu_model() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| format!("unknown {} CPU", std::env::consts::ARCH));
    let paths: Vec<&str> = Path::available().iter().map(|p| p.name()).collect();
    format!("{model} (cores: {})", paths.join(", "))
}

/// One N's figures.
#[derive(Clone, Debug, Serialize)]
pub struct BenchRow {
    pub n: u32,
    pub threads: usize,
    /// The inner loop that counted (see [`nqueens_common::plan::solve::Solution::core`]).
    pub core: &'static str,
    /// Fast core, one thread.
    pub seconds_1t: f64,
    #[serde(serialize_with = "crate::format::dec")]
    pub nodes: u128,
    pub nodes_per_second_1t: f64,
    /// Fast core, `threads` threads.
    pub seconds_mt: f64,
    /// seconds_1t / seconds_mt.
    pub scaling: f64,
    /// Baseline, one thread (absent when skipped).
    pub baseline_seconds: Option<f64>,
    #[serde(serialize_with = "crate::format::dec_opt")]
    pub baseline_nodes: Option<u64>,
    /// baseline_seconds / seconds_1t: how many times faster per core.
    pub speedup_vs_baseline: Option<f64>,
}

/// A count that disagrees with the published one: the benchmark stops.
#[derive(Debug, Clone, thiserror::Error)]
#[error("N={n}: {what} counted {got}, expected {want}")]
pub struct BenchError {
    pub n: u32,
    pub what: &'static str,
    pub got: u128,
    pub want: u128,
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Times one N: fast core on 1 and `threads` threads, and the baseline
/// unless `baseline` is false. `path` picks the lanes' path (`None`: the
/// best this CPU has); with `device`, the card counts the backtracking,
/// fed by 1 and `threads` threads.
pub fn bench(
    n: Size,
    threads: usize,
    runs: usize,
    baseline: bool,
    path: Option<Path>,
    device: Option<&Arc<dyn Device>>,
) -> Result<BenchRow, BenchError> {
    let runs = runs.max(1);
    let want = known(n.get()).map(|k| k.total);
    let check = |what, got: u128| match want {
        Some(w) if w != got => Err(BenchError {
            n: n.get(),
            what,
            got,
            want: w,
        }),
        _ => Ok(()),
    };
    let time_fast = |t: usize| -> Result<(f64, u128, &'static str), BenchError> {
        let mut secs = Vec::with_capacity(runs);
        let (mut nodes, mut core) = (0, "");
        for _ in 0..runs {
            let s =
                solve_with(n, t, path, device.cloned()).expect("the core's counts are consistent");
            check("fast core", s.total().expect("checked"))?;
            secs.push(s.elapsed.as_secs_f64());
            (nodes, core) = (s.counts.nodes, s.core);
        }
        Ok((median(secs), nodes, core))
    };
    // Untimed first: what a process sets up once (tables, threads, a
    // card's pipelines, first-touched pages) would be charged to the first
    // timed count, making a small N's one-thread time many times its own
    // (and the scaling against it absurd).
    for t in [1, threads] {
        let small = Size::new(8).expect("8 is a size");
        solve_with(small, t, path, device.cloned()).expect("the core's counts are consistent");
    }
    let (seconds_1t, nodes, core) = time_fast(1)?;
    let (seconds_mt, _, _) = time_fast(threads)?;
    let (baseline_seconds, baseline_nodes) = if baseline {
        let mut secs = Vec::with_capacity(runs);
        let mut placed = 0;
        for _ in 0..runs {
            let start = Instant::now();
            let (total, p) = mirror_count(n);
            secs.push(start.elapsed().as_secs_f64());
            check("baseline", total)?;
            placed = p;
        }
        (Some(median(secs)), Some(placed))
    } else {
        (None, None)
    };
    Ok(BenchRow {
        n: n.get(),
        threads,
        core,
        seconds_1t,
        nodes,
        nodes_per_second_1t: nodes as f64 / seconds_1t,
        seconds_mt,
        scaling: seconds_1t / seconds_mt,
        baseline_seconds,
        baseline_nodes,
        speedup_vs_baseline: baseline_seconds.map(|b| b / seconds_1t),
    })
}

impl BenchRow {
    /// The header of `nqueens bench` (under 80 columns; exact node
    /// counts are in `--json`).
    pub fn header() -> String {
        format!(
            "{:>2}  {:>6}  {:>8}  {:>8}  {:>8}  {:>8}  {:>7}  {:>8}  {:>7}",
            "N", "core", "1 thr s", "nodes/s", "nodes", "T thr s", "scaling", "base s", "speedup"
        )
    }

    pub fn text(&self) -> String {
        let opt = |x: Option<f64>, f: &dyn Fn(f64) -> String| x.map_or("-".to_string(), f);
        format!(
            "{:>2}  {:>6}  {:>8.3}  {:>8}  {:>8}  {:>8.3}  {:>6.2}x  {:>8}  {:>7}",
            self.n,
            self.core,
            self.seconds_1t,
            si(self.nodes_per_second_1t).trim_end(),
            si(self.nodes as f64).trim_end(),
            self.seconds_mt,
            self.scaling,
            opt(self.baseline_seconds, &|b| format!("{b:.3}")),
            opt(self.speedup_vs_baseline, &|s| format!("{s:.2}x")),
        )
    }
}
