//! `nqueens bench N --core gpu --tune`: the card's count of N under a few
//! settings, one knob turned at a time from the fastest so far, and the
//! environment that gives the fastest.
//!
//! Cards differ (multiprocessors, memory, drivers), and so does the best
//! way to feed them; each knob is one `NQUEENS_GPU_*` variable a worker
//! reads. The wgpu path's knobs are its [`Tuning`]'s; with
//! `NQUEENS_GPU_API=cuda`, the CUDA path's (`Cuda`: threads per block,
//! jobs per batch, feeding threads). Every count is checked against the
//! published one.

use crate::exit::Failure;
use crate::format::{json_line, si, thousands};
use crate::gpu;
use crate::opts::PlanShape;
use nqueens_common::engine::device::{Busy, Device};
use nqueens_common::known::known;
use nqueens_common::plan::solve::solve_plan;
use nqueens_common::plan::Strategy;
use nqueens_common::Size;
use nqueens_gpu::{first_card, Choice, Overrides, Tuning};
use std::io::{self, Write};
use std::sync::Arc;

/// A knob: its name, and the settings one turn of it away from `s`.
struct Knob<S> {
    name: &'static str,
    turns: fn(&S) -> Vec<S>,
}

/// A card's settings as the tuner turns them.
trait Settings: Copy + PartialEq + 'static {
    /// The knobs in the order they are turned.
    const KNOBS: &'static [Knob<Self>];
    /// The `NQUEENS_GPU_*` environment that gives them to a worker.
    fn env(&self) -> Vec<(&'static str, String)>;
    /// Their columns' names in the table, and these settings' values.
    fn header() -> String;
    fn columns(&self) -> String;
    /// Threads that feed the card.
    fn feeders(&self) -> usize;
    /// What the start's count settles (a batch's jobs, from the searches
    /// the card ran at once).
    fn settle(&mut self, _start: &Trial) {}
}

impl Settings for Tuning {
    const KNOBS: &'static [Knob<Tuning>] = &[
        Knob {
            name: "loop",
            turns: |t| flipped(t, |u| &mut u.launch.nested),
        },
        Knob {
            name: "tables",
            turns: |t| flipped(t, |u| &mut u.launch.rows_in_group),
        },
        Knob {
            name: "step",
            turns: |t| flipped(t, |u| &mut u.launch.flat),
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

    fn env(&self) -> Vec<(&'static str, String)> {
        Tuning::env(self)
    }

    fn header() -> String {
        format!(
            "{:>6} {:>9} {:>6} {:>8} {:>7} {:>8} {:>8}",
            "loop", "step", "steps", "tables", "feeders", "jobs", "launches"
        )
    }

    fn columns(&self) -> String {
        let tables = tables(self.launch.rows_in_group);
        let form = if self.launch.nested {
            "nested"
        } else {
            "single"
        };
        format!(
            "{:>6} {:>9} {:>6} {:>8} {:>7} {:>8} {:>8}",
            form,
            step(self.launch.flat),
            self.launch.steps,
            tables,
            self.feeders,
            match self.jobs {
                0 => "auto".to_string(),
                jobs => jobs.to_string(),
            },
            self.launch.max_launches
        )
    }

    fn feeders(&self) -> usize {
        self.feeders
    }

    fn settle(&mut self, start: &Trial) {
        if self.jobs == 0 {
            // As many jobs a batch as the card's width gave the start.
            self.jobs = (start.searches as usize / 4).max(1);
        }
    }
}

/// The CUDA path's settings (`NQUEENS_GPU_API=cuda`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cuda {
    /// Threads per block (`NQUEENS_GPU_BLOCK`, 32 to 1,024).
    block: u32,
    /// Jobs a batch is cut into, at least (`NQUEENS_GPU_JOBS`).
    jobs: usize,
    /// Feeding threads (`NQUEENS_GPU_FEEDERS`, 1 to 256).
    feeders: usize,
    /// Whether threads keep their jobs' pairs in their block's memory
    /// (`NQUEENS_GPU_TABLES`).
    tables: bool,
    /// Whether threads step on one path (`NQUEENS_GPU_STEP`).
    flat: bool,
}

impl Settings for Cuda {
    const KNOBS: &'static [Knob<Cuda>] = &[
        Knob {
            name: "block",
            turns: |c| {
                scaled(c, [c.block / 2, c.block * 2], |u, v| {
                    u.block = v.clamp(32, 1024)
                })
            },
        },
        Knob {
            name: "feeders",
            turns: |c| {
                scaled(c, [c.feeders / 2, c.feeders * 2], |u, v| {
                    u.feeders = v.clamp(1, 256)
                })
            },
        },
        Knob {
            name: "jobs",
            turns: |c| {
                scaled(c, [c.jobs / 4, c.jobs * 4], |u, v| {
                    u.jobs = v.clamp(1, 1 << 24)
                })
            },
        },
        Knob {
            name: "tables",
            turns: |c| flipped(c, |u| &mut u.tables),
        },
        Knob {
            name: "step",
            turns: |c| flipped(c, |u| &mut u.flat),
        },
    ];

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("NQUEENS_GPU_API", "cuda".into()),
            ("NQUEENS_GPU_BLOCK", self.block.to_string()),
            ("NQUEENS_GPU_FEEDERS", self.feeders.to_string()),
            ("NQUEENS_GPU_JOBS", self.jobs.to_string()),
            ("NQUEENS_GPU_TABLES", tables(self.tables).into()),
            ("NQUEENS_GPU_STEP", step(self.flat).into()),
        ]
    }

    fn header() -> String {
        format!(
            "{:>6} {:>7} {:>9} {:>7} {:>9}",
            "block", "feeders", "jobs", "tables", "step"
        )
    }

    fn columns(&self) -> String {
        format!(
            "{:>6} {:>7} {:>9} {:>7} {:>9}",
            self.block,
            self.feeders,
            self.jobs,
            tables(self.tables),
            step(self.flat)
        )
    }

    fn feeders(&self) -> usize {
        self.feeders
    }
}

impl Cuda {
    /// The first CUDA card, opened with these settings.
    fn open(&self) -> Result<Arc<dyn Device>, Failure> {
        let env = self.env();
        let given = Overrides::from_lookup(|name| {
            env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone())
        })
        .map_err(Failure::BadInput)?;
        let (mut cards, _) = nqueens_gpu::cuda::cards(&Choice::Listed(vec![0]), &given)
            .map_err(|e| Failure::BadInput(format!("--core gpu: {e}")))?;
        Ok(Arc::new(cards.remove(0)))
    }
}

/// `NQUEENS_GPU_TABLES`'s word for whether threads keep their jobs' table
/// rows in their workgroup's (block's) memory.
fn tables(kept: bool) -> &'static str {
    if kept {
        "group"
    } else {
        "storage"
    }
}

/// `NQUEENS_GPU_STEP`'s word for whether a card's threads step on one
/// path.
fn step(flat: bool) -> &'static str {
    if flat {
        "flat"
    } else {
        "branching"
    }
}

/// `s` with the switch `flag` points at turned the other way.
fn flipped<S: Copy>(s: &S, flag: fn(&mut S) -> &mut bool) -> Vec<S> {
    let mut u = *s;
    let f = flag(&mut u);
    *f = !*f;
    vec![u]
}

/// `s` with each of `values` set by `set`, those that differ from `s`.
fn scaled<S: Copy + PartialEq, V>(s: &S, values: [V; 2], set: fn(&mut S, V)) -> Vec<S> {
    let mut out: Vec<S> = Vec::new();
    for v in values {
        let mut u = *s;
        set(&mut u, v);
        if u != *s && !out.contains(&u) {
            out.push(u);
        }
    }
    out
}

/// One count under one setting.
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
    fn header<S: Settings>() -> String {
        format!(
            "{:<9} {} {:>9} {:>8} {:>9} {:>6}",
            "turned",
            S::header(),
            "searches",
            "seconds",
            "nodes/s",
            "busy"
        )
    }

    fn text<S: Settings>(&self, s: &S) -> String {
        let busy = self
            .busy
            .map_or("-".into(), |b| format!("{:.1}%", 100.0 * b));
        format!(
            "{:<9} {} {:>9} {:>8.3} {:>9} {:>6}",
            self.knob,
            s.columns(),
            thousands(self.searches.into()),
            self.seconds,
            si(self.nodes_per_second).trim_end(),
            busy
        )
    }
}

/// Counts N on `card` under `settings` as `solve --core gpu` does, `runs`
/// times; the median run, or a failure where a count differs from the
/// published one.
fn trial<S: Settings>(
    card: Arc<dyn Device>,
    settings: &S,
    n: Size,
    plan: &(Strategy, PlanShape),
    runs: u32,
) -> Result<Trial, Failure> {
    let before = card.busy().unwrap_or_default();
    let mut times: Vec<(f64, f64)> = Vec::new();
    for _ in 0..runs.max(1) {
        let plan = (plan.1.local_plan(n, plan.0)?).with_device(Some(Arc::clone(&card)));
        let s = solve_plan(&plan, &plan.schedule(), settings.feeders())
            .map_err(|e| Failure::Failed(format!("N={n}: {e}")))?;
        let total = s.total().map_err(|e| Failure::Failed(e.to_string()))?;
        if let Some(k) = known(n.get()).filter(|k| k.total != total) {
            return Err(Failure::Failed(format!(
                "N={n} counted {total} on the card, where {} is published, with {:?}",
                k.total,
                settings.env()
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
        env: settings.env(),
        seconds,
        nodes_per_second,
        busy: spent.share(),
        searches: spent.searches,
    })
}

/// Tunes the best card here on N: each knob turned from the fastest
/// settings so far, then the environment that gives the fastest.
pub fn tune(n: Size, runs: u32, json: bool) -> Result<(), Failure> {
    let given = Overrides::from_env().map_err(Failure::BadInput)?;
    let bad = |e: String| Failure::BadInput(format!("--core gpu: {e}"));
    if given.cuda() {
        let (mut cards, _) =
            nqueens_gpu::cuda::cards(&Choice::Listed(vec![0]), &given).map_err(bad)?;
        let card = cards.remove(0);
        let start = Cuda {
            block: given.block().unwrap_or(nqueens_gpu::cuda::driver::BLOCK),
            jobs: card.jobs_per_batch(),
            feeders: card.feeders(),
            tables: given.cuda_kernel().keep,
            flat: given.cuda_kernel().flat,
        };
        let name = card.name().to_string();
        // Each setting opens the card anew (its kernel built for the block).
        drop(card);
        return tuned(name, start, Cuda::open, n, runs, json);
    }
    let card = first_card().map_err(bad)?;
    let open = |t: &Tuning| Ok(Arc::new(card.tuned(*t)) as Arc<dyn Device>);
    tuned(card.name().to_string(), card.tuning(), open, n, runs, json)
}

/// The tuner's loop over `S`'s knobs from `start`, each setting counted on
/// the card `open` gives for it.
fn tuned<S: Settings>(
    name: String,
    start: S,
    open: impl Fn(&S) -> Result<Arc<dyn Device>, Failure>,
    n: Size,
    runs: u32,
    json: bool,
) -> Result<(), Failure> {
    let (strategy, shape) = gpu::backtracking(n, None, PlanShape::none(), true)?;
    let plan = (strategy.expect("a card's count has a plan"), shape);
    let mut out = io::stdout().lock();
    if !json {
        writeln!(out, "{name}: N={n}, the {:?} plan", plan.0)?;
        writeln!(out, "{}", Trial::header::<S>())?;
    }
    let mut show = |trial: &Trial, s: &S| -> Result<(), Failure> {
        if json {
            json_line(&mut out, &serde_json::to_value(trial).expect("plain data"))?;
        } else {
            writeln!(out, "{}", trial.text(s))?;
        }
        Ok(out.flush()?)
    };
    let mut best = start;
    let mut fastest = Trial {
        knob: "start",
        ..trial(open(&best)?, &best, n, &plan, runs)?
    };
    show(&fastest, &best)?;
    best.settle(&fastest);
    let first = fastest.seconds;
    for knob in S::KNOBS {
        for s in (knob.turns)(&best) {
            let tried = Trial {
                knob: knob.name,
                ..trial(open(&s)?, &s, n, &plan, runs)?
            };
            show(&tried, &s)?;
            if tried.seconds < fastest.seconds {
                (best, fastest) = (s, tried);
            }
        }
    }
    let env: Vec<String> = best.env().iter().map(|(k, v)| format!("{k}={v}")).collect();
    let gain = first / fastest.seconds;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Each CUDA knob turns one setting half or double (a batch's jobs a
    /// quarter or four times), within what the settings take, and a turn
    /// that changes nothing is left out.
    #[test]
    fn the_cuda_knobs_turn_one_setting_within_its_range() {
        let c = Cuda {
            block: 1024,
            jobs: 1 << 20,
            feeders: 1,
            tables: true,
            flat: true,
        };
        let turned: Vec<Vec<Cuda>> = Cuda::KNOBS.iter().map(|k| (k.turns)(&c)).collect();
        assert_eq!(turned[0], [Cuda { block: 512, ..c }], "no block past 1,024");
        assert_eq!(turned[1], [Cuda { feeders: 2, ..c }], "no feeders below 1");
        assert_eq!(
            turned[2],
            [Cuda { jobs: 1 << 18, ..c }, Cuda { jobs: 1 << 22, ..c }]
        );
        assert_eq!(turned[3], [Cuda { tables: false, ..c }]);
        assert_eq!(turned[4], [Cuda { flat: false, ..c }]);
        for s in turned.iter().flatten() {
            let env = s.env();
            let given = Overrides::from_lookup(|name| {
                env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone())
            });
            assert!(given.is_ok_and(|g| g.cuda()), "{env:?}");
        }
    }
}
