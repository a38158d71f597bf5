//! What `solve` and `table` print: one record per N, as text or JSON.

use crate::format::{dec, hms, si, thousands};
use nqueens_common::engine::counts::CountOverflow;
use nqueens_common::known::{matches, verdict};
use nqueens_common::plan::solve::Solution;
use nqueens_common::plan::table::Run;
use nqueens_common::plan::{Plan, Schedule, Subproblem};
use serde::Serialize;

/// The outcome of counting one N, ready to print.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub n: u32,
    #[serde(serialize_with = "dec")]
    pub total: u128,
    #[serde(serialize_with = "dec")]
    pub unique: u128,
    /// Orbits of each size (see [`nqueens_common::engine::counts`]).
    #[serde(serialize_with = "dec")]
    pub c1: u128,
    #[serde(serialize_with = "dec")]
    pub c2: u128,
    #[serde(serialize_with = "dec")]
    pub c4: u128,
    #[serde(serialize_with = "dec")]
    pub c8: u128,
    #[serde(serialize_with = "dec")]
    pub nodes: u128,
    pub seconds: f64,
    pub nodes_per_second: f64,
    pub threads: usize,
    #[serde(serialize_with = "dec")]
    pub pieces: usize,
    /// How the pieces were counted (see [`Solution::core`]), or the card
    /// that counted them.
    pub core: String,
    /// Whether total and unique equal the published values; absent past N=27.
    pub matches_known: Option<bool>,
    /// The card's share of its threads' steps taken (see
    /// [`nqueens_common::engine::device::Device::busy`]); absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub card_busy: Option<f64>,
    /// The searches the card ran in flight at once (its threads a launch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub card_searches: Option<u64>,
    /// The plan whose tasks were counted (`frame (depth 1) by backtrack,
    /// 5 tasks`); absent where the search was cut into pieces in memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
}

impl Report {
    pub fn new(s: &Solution) -> Result<Report, CountOverflow> {
        let (total, unique) = (s.total()?, s.unique()?);
        let seconds = s.elapsed.as_secs_f64();
        Ok(Report {
            n: s.n.get(),
            total,
            unique,
            c1: s.counts.c1,
            c2: s.counts.c2,
            c4: s.counts.c4,
            c8: s.counts.c8,
            nodes: s.counts.nodes,
            seconds,
            nodes_per_second: s.counts.nodes as f64 / seconds.max(1e-9),
            threads: s.threads,
            pieces: s.pieces,
            core: s.core.to_string(),
            matches_known: matches(s.n.get(), total, unique),
            card_busy: None,
            card_searches: None,
            plan: None,
        })
    }

    /// The multi-line text of `nqueens solve`.
    pub fn text(&self) -> String {
        let check = verdict(self.matches_known);
        let card = self.card_busy.map_or(String::new(), |b| {
            let searches = self.card_searches.map_or(String::new(), |s| {
                format!(", {} searches at once", thousands(s.into()))
            });
            format!(
                "card     {:.1}% busy (its threads' steps taken, of those its launches offered){searches}\n",
                100.0 * b
            )
        });
        let text = format!(
            "N        {}\ntotal    {}\nunique   {}\nclasses  c2={} c4={} c8={}{}\nknown    {check}\ntime     {} ({:.3} s, {}, {} pieces, {})\nnodes    {} ({}nodes/s)\n",
            self.n,
            self.total,
            self.unique,
            self.c2,
            self.c4,
            self.c8,
            if self.c1 > 0 { format!(" c1={}", self.c1) } else { String::new() },
            hms(std::time::Duration::from_secs_f64(self.seconds)),
            self.seconds,
            crate::format::counted(self.threads, "thread"),
            self.pieces,
            self.core,
            thousands(self.nodes),
            si(self.nodes_per_second),
        );
        let plan = self
            .plan
            .as_ref()
            .map_or(String::new(), |p| format!("plan     {p}\n"));
        text + &plan + &card
    }

    /// The header of the classic table.
    pub fn table_header() -> String {
        format!(
            "{:>2}  {:>20}  {:>20}  {:>14}",
            "N", "Total", "Unique", "hh:mm:ss.ms"
        )
    }

    /// One row of the classic table.
    pub fn table_row(&self) -> String {
        let time = hms(std::time::Duration::from_secs_f64(self.seconds));
        format!(
            "{:>2}  {:>20}  {:>20}  {time:>14}",
            self.n, self.total, self.unique
        )
    }
}

/// What `nqueens plan` prints.
#[derive(Clone, Debug, Serialize)]
pub struct PlanSummary {
    pub n: u32,
    pub strategy: String,
    pub depth: Option<u32>,
    /// How the subproblems are counted: backtrack or join.
    pub mode: &'static str,
    #[serde(serialize_with = "dec")]
    pub subproblems: u64,
    #[serde(serialize_with = "dec")]
    pub tasks: u64,
    /// Runs of the task table a coordinator keeps for this plan (48 bytes
    /// each: it grows with the plan's groups, not its tasks).
    #[serde(serialize_with = "dec")]
    pub table_runs: u64,
    /// Subproblems of each kind: `[["frames", "123"], ...]`.
    #[serde(serialize_with = "named_counts")]
    pub classes: Vec<(String, u64)>,
    /// Estimated work, relative units (see `plan`).
    pub work: f64,
    /// Largest and smallest task estimate as a share of the whole.
    pub largest_task_share: f64,
    pub smallest_task_share: f64,
    pub seconds: f64,
}

impl PlanSummary {
    pub fn new(plan: &Plan, schedule: &Schedule, elapsed: std::time::Duration) -> PlanSummary {
        let share = |w: f64| {
            if schedule.work > 0.0 {
                w / schedule.work
            } else {
                0.0
            }
        };
        let works = || schedule.tasks.iter().map(|t| t.work);
        PlanSummary {
            n: plan.spec.n.get(),
            strategy: plan.spec.strategy.to_string(),
            depth: Some(plan.spec.depth),
            mode: plan.spec.mode.name(),
            subproblems: schedule.subproblems,
            tasks: schedule.tasks.len(),
            table_runs: schedule.tasks.runs().len() as u64,
            classes: schedule.classes.clone(),
            work: schedule.work,
            largest_task_share: share(works().fold(0.0, f64::max)),
            smallest_task_share: share(works().fold(f64::INFINITY, f64::min)),
            seconds: elapsed.as_secs_f64(),
        }
    }

    pub fn text(&self) -> String {
        let mut s = format!("N            {}\nstrategy     {}", self.n, self.strategy);
        if let Some(d) = self.depth {
            s += &format!(" (depth {d})");
        }
        s += &format!(", counted by {}", self.mode);
        s += &format!(
            "\nsubproblems  {}\ntasks        {} (largest {:.3}% of the work, smallest {:.4}%)\ntable        {} runs, {}B (what a coordinator keeps of them)\nwork         {:.4e} (estimated, relative units)\n",
            thousands(self.subproblems.into()),
            thousands(self.tasks.into()),
            100.0 * self.largest_task_share,
            100.0 * self.smallest_task_share,
            thousands(self.table_runs.into()),
            si((self.table_runs * Run::BYTES as u64) as f64),
            self.work
        );
        for (name, count) in &self.classes {
            s += &format!("  {name:<24} {}\n", thousands((*count).into()));
        }
        s += &format!(
            "planned in   {}\n",
            hms(std::time::Duration::from_secs_f64(self.seconds))
        );
        s
    }
}

/// Serde: `[(name, count)]` as `[[name, "count"]]`, counts as strings.
fn named_counts<S: serde::Serializer>(xs: &[(String, u64)], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = s.serialize_seq(Some(xs.len()))?;
    for (name, count) in xs {
        seq.serialize_element(&(name, count.to_string()))?;
    }
    seq.end()
}

/// One line describing a subproblem, for `nqueens plan --list`.
pub fn describe(s: &Subproblem) -> String {
    let cols = |c: &[u8]| c.iter().map(u8::to_string).collect::<Vec<_>>().join(" ");
    match s {
        Subproblem::Whole => "whole search".into(),
        Subproblem::Prefix { cols: c, weight } => {
            format!("prefix rows: {} weight {weight}", cols(c))
        }
        Subproblem::Frame { frame, weight } => {
            format!("frame lines: {} weight {weight}", cols(frame.positions()))
        }
        Subproblem::Symmetric { turn, first } => {
            format!("{turn:?}-turn symmetric, row 0 queen in column {first}").to_lowercase()
        }
        Subproblem::RingPart {
            ring, weight, part, ..
        } => format!(
            "ring lines: {} weight {weight} part {part}",
            cols(ring.positions())
        ),
        Subproblem::Choice {
            piece,
            choice,
            weight,
        } => {
            let rows: Vec<String> = (0..32)
                .filter(|i| choice >> i & 1 == 1)
                .map(|i: u32| i.to_string())
                .collect();
            format!(
                "east rows (of the free rows): {} piece {piece} weight {weight}",
                rows.join(" ")
            )
        }
    }
}
