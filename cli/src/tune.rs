//! `nqueens bench N --core gpu --tune`: the card's count of N under a few
//! tunings, one knob turned at a time from the fastest so far, and the
//! environment that gives the fastest.
//!
//! Cards differ (multiprocessors, memory, drivers), and so does the best
//! way to feed them; each knob is one `NQUEENS_GPU_*` variable a worker
//! reads. Every count is checked against the published one.

use crate::exit::Failure;
use crate::format::{json_line, si, thousands};
use crate::gpu;
use crate::opts::PlanShape;
use nqueens_common::engine::device::{Busy, Device};
use nqueens_common::known::known;
use nqueens_common::plan::solve::solve_plan;
use nqueens_common::plan::Strategy;
use nqueens_common::Size;
use nqueens_gpu::{first_card, Card, Overrides, Tuning};
use std::io::{self, Write};
use std::sync::Arc;

/// A knob: its name, and the tunings one turn of it away from `t`.
struct Knob {
    name: &'static str,
    turns: fn(&Tuning) -> Vec<Tuning>,
}

/// The knobs in the order they are turned.
const KNOBS: [Knob; 6] = [
    Knob {
        name: "loop",
        turns: |t| flipped(t, |u| &mut u.launch.nested),
    },
    Knob {
        name: "tables",
        turns: |t| flipped(t, |u| &mut u.launch.rows_in_group),
    },
    Knob {
        name: "steps",
        turns: |t| {
            let s = t.launch.steps;
            scaled(t, [s / 4, s.saturating_mul(4)], |u, v| {
                u.launch.steps = v.clamp(1, u.launch.most_steps)
            })
        },
    },
    Knob {
        name: "feeders",
        turns: |t| {
            scaled(t, [t.feeders / 2, t.feeders * 2], |u, v| {
                u.feeders = v.max(1)
            })
        },
    },
    Knob {
        name: "jobs",
        turns: |t| scaled(t, [t.jobs / 4, t.jobs * 4], |u, v| u.jobs = v.max(1)),
    },
    Knob {
        name: "launches",
        turns: |t| {
            let l = t.launch.max_launches;
            scaled(t, [l / 2, l * 2], |u, v| u.launch.max_launches = v.max(1))
        },
    },
];

/// `t` with the switch `flag` points at turned the other way.
fn flipped(t: &Tuning, flag: fn(&mut Tuning) -> &mut bool) -> Vec<Tuning> {
    let mut u = *t;
    let f = flag(&mut u);
    *f = !*f;
    vec![u]
}

/// `t` with each of `values` set by `set`, those that differ from `t`.
fn scaled<V>(t: &Tuning, values: [V; 2], set: fn(&mut Tuning, V)) -> Vec<Tuning> {
    let mut out: Vec<Tuning> = Vec::new();
    for v in values {
        let mut u = *t;
        set(&mut u, v);
        if u != *t && !out.contains(&u) {
            out.push(u);
        }
    }
    out
}

/// One count under one tuning.
#[derive(serde::Serialize)]
struct Trial {
    knob: &'static str,
    env: Vec<(&'static str, String)>,
    seconds: f64,
    nodes_per_second: f64,
    /// The share of the launches' steps the card's threads took.
    busy: Option<f64>,
    /// Searches in flight at once.
    searches: u64,
}

impl Trial {
    fn header() -> String {
        format!(
            "{:<9} {:>6} {:>6} {:>8} {:>7} {:>8} {:>8} {:>9} {:>8} {:>9} {:>6}",
            "turned",
            "loop",
            "steps",
            "tables",
            "feeders",
            "jobs",
            "launches",
            "searches",
            "seconds",
            "nodes/s",
            "busy"
        )
    }

    fn text(&self, t: &Tuning) -> String {
        let tables = if t.launch.rows_in_group {
            "group"
        } else {
            "storage"
        };
        let busy = self
            .busy
            .map_or("-".into(), |b| format!("{:.1}%", 100.0 * b));
        let form = if t.launch.nested { "nested" } else { "single" };
        format!(
            "{:<9} {:>6} {:>6} {:>8} {:>7} {:>8} {:>8} {:>9} {:>8.3} {:>9} {:>6}",
            self.knob,
            form,
            t.launch.steps,
            tables,
            t.feeders,
            match t.jobs {
                0 => "auto".to_string(),
                jobs => jobs.to_string(),
            },
            t.launch.max_launches,
            thousands(self.searches.into()),
            self.seconds,
            si(self.nodes_per_second).trim_end(),
            busy
        )
    }
}

/// Counts N on `card` as `solve --core gpu` does, `runs` times; the
/// median run, or a failure where a count differs from the published one.
fn trial(card: Card, n: Size, plan: &(Strategy, PlanShape), runs: u32) -> Result<Trial, Failure> {
    let tuning = card.tuning();
    let card: Arc<dyn Device> = Arc::new(card);
    let before = card.busy().unwrap_or_default();
    let mut times: Vec<(f64, f64)> = Vec::new();
    for _ in 0..runs.max(1) {
        let plan = (plan.1.local_plan(n, plan.0)?).with_device(Some(Arc::clone(&card)));
        let s = solve_plan(&plan, &plan.schedule(), tuning.feeders)
            .map_err(|e| Failure::Failed(format!("N={n}: {e}")))?;
        let total = s.total().map_err(|e| Failure::Failed(e.to_string()))?;
        if let Some(k) = known(n.get()).filter(|k| k.total != total) {
            return Err(Failure::Failed(format!(
                "N={n} counted {total} on the card, where {} is published, with {:?}",
                k.total,
                tuning.env()
            )));
        }
        let seconds = s.elapsed.as_secs_f64();
        times.push((seconds, s.counts.nodes as f64 / seconds.max(1e-9)));
    }
    times.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (seconds, nodes_per_second) = times[times.len() / 2];
    let after = card.busy().unwrap_or_default();
    let spent = Busy {
        taken: after.taken - before.taken,
        offered: after.offered - before.offered,
        searches: after.searches,
    };
    Ok(Trial {
        knob: "",
        env: tuning.env(),
        seconds,
        nodes_per_second,
        busy: spent.share(),
        searches: spent.searches,
    })
}

/// Tunes the best card here on N: each knob turned from the fastest
/// tuning so far, then the environment that gives the fastest.
pub fn tune(n: Size, runs: u32, json: bool) -> Result<(), Failure> {
    let given = Overrides::from_env().map_err(Failure::BadInput)?;
    if given.cuda() {
        return Err(Failure::BadInput(
            "--tune tunes the wgpu path's settings; with NQUEENS_GPU_API=cuda a card takes \
             NQUEENS_GPU_BLOCK, NQUEENS_GPU_JOBS and NQUEENS_GPU_FEEDERS: time `bench --core \
             gpu` with each"
                .into(),
        ));
    }
    let card = first_card().map_err(|e| Failure::BadInput(format!("--core gpu: {e}")))?;
    let (strategy, shape) = gpu::backtracking(n, None, PlanShape::none(), true)?;
    let plan = (strategy.expect("a card's count has a plan"), shape);
    let mut out = io::stdout().lock();
    if !json {
        writeln!(out, "{}: N={n}, the {:?} plan", card.name(), plan.0)?;
        writeln!(out, "{}", Trial::header())?;
    }
    let mut show = |trial: &Trial, t: &Tuning| -> Result<(), Failure> {
        if json {
            json_line(&mut out, &serde_json::to_value(trial).expect("plain data"))?;
        } else {
            writeln!(out, "{}", trial.text(t))?;
        }
        Ok(out.flush()?)
    };
    let mut best = card.tuning();
    let mut fastest = Trial {
        knob: "start",
        ..trial(card.tuned(best), n, &plan, runs)?
    };
    show(&fastest, &best)?;
    if best.jobs == 0 {
        // As many jobs a batch as the card's width gave the start.
        best.jobs = (fastest.searches as usize / 4).max(1);
    }
    let start = fastest.seconds;
    for knob in &KNOBS {
        for t in (knob.turns)(&best) {
            let tried = Trial {
                knob: knob.name,
                ..trial(card.tuned(t), n, &plan, runs)?
            };
            show(&tried, &t)?;
            if tried.seconds < fastest.seconds {
                (best, fastest) = (t, tried);
            }
        }
    }
    let env: Vec<String> = best.env().iter().map(|(k, v)| format!("{k}={v}")).collect();
    let gain = start / fastest.seconds;
    if json {
        let v = serde_json::json!({"fastest": env, "seconds": fastest.seconds, "gain": gain});
        json_line(&mut out, &v)?;
    } else {
        writeln!(
            out,
            "fastest: {:.3} s, {gain:.2}x the start; for workers on this card:\n  {}",
            fastest.seconds,
            env.join(" ")
        )?;
    }
    Ok(())
}
