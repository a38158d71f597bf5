//! `nqueens plan N --estimate`: the core-time a whole plan would take on
//! this machine, projected from a seeded random sample, for any N up to 32
//! in well under a minute.
//!
//! Three measured factors:
//! - **subproblems**: exact for plans small enough to enumerate (rings,
//!   and frames or prefixes up to N=18), else the fraction of random line
//!   positions (or row columns) that decode to a subproblem of the plan,
//!   times the number of such draws;
//! - **nodes per subproblem**: Knuth's estimator (random descents, each
//!   weighted by the product of the branching factors it met: an unbiased
//!   estimate of a search tree's size) on random subproblems of the plan;
//! - **nodes per second**: the engine counting random deep pieces of the
//!   same plan on the chosen path (a descent stopped `CALIBRATION_ROWS`
//!   free rows early, then counted exactly).
//!
//! The half- and quarter-turn subproblems (2N small searches) are left
//! out: they are a vanishing part of the work.
//!
//! A plan in join mode is timed directly instead: random subproblems (or
//! choices of east rows) counted by the join, the mean time times their
//! number, plus, for a halves plan, building each piece's quarter tables.
//! The largest tables and halves met give the memory a task needs.

use crate::engine::interior::{Interior, Start};
use crate::engine::join::{whole_pieces, Halves, Join, Shape};
use crate::engine::lanes::{count_interiors, Path};
use crate::plan::{Kind, Mode, Plan, PlanError, Strategy, Subproblem, KIND_SHIFT};
use serde::Serialize;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// Free rows left to the engine in a calibration piece: enough that lanes
/// run long jobs, few enough that a piece takes about a millisecond.
const CALIBRATION_ROWS: usize = 13;

/// Plans with at most this many subproblems are counted exactly.
const ENUMERATE_UP_TO: u64 = 2_000_000;

/// Most groups of subproblems a plan may hold while it is scheduled (one
/// record each, about 32 bytes).
pub const MAX_GROUPS: f64 = 1e7;

/// Most subproblems a plan may enumerate while it is scheduled (about a
/// quarter of an hour of planning on one core).
pub const MAX_SUBPROBLEMS: f64 = 2e10;

/// What the estimate found.
#[derive(Clone, Debug, Serialize)]
pub struct Estimate {
    /// How the plan counts: "backtrack" or "join".
    pub mode: &'static str,
    pub path: &'static str,
    /// Subproblems of the plan (exact, or estimated by sampling).
    pub subproblems: f64,
    pub subproblems_exact: bool,
    /// Mean nodes per subproblem, and its standard error.
    pub nodes_per_subproblem: f64,
    pub nodes_per_subproblem_error: f64,
    /// The engine's rate on this plan's pieces, on `path`, one thread.
    pub nodes_per_second: f64,
    /// Projected core-seconds for the whole plan, one standard error.
    pub core_seconds: f64,
    pub core_seconds_error: f64,
    /// Subproblems sampled, descents per subproblem.
    pub sampled: u64,
    pub probes: u64,
    pub seconds_spent: f64,
    /// Join mode: the most memory one task needed in the sample (its
    /// quarter tables and one thread's halves), in bytes; 0 when
    /// backtracking (a task's lanes hold a few MB).
    pub task_bytes: u64,
    /// Join mode: the share of the sampled subproblems' choices counted
    /// (1: each sampled subproblem counted whole; less where one would
    /// outlast the budget, and its counted choices stand for the rest).
    pub counted_share: f64,
}

/// A small deterministic generator (xorshift64*): the same seed gives the
/// same sample on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

impl Plan {
    /// Refuses a plan too large to schedule, before anything is built:
    /// its subproblems, and for a prefix plan its groups (the prefixes one
    /// row shorter), are counted or sampled first (well under a second).
    pub fn check_size(&self) -> Result<(), PlanError> {
        if self.whole() || self.derived_tasks().is_some() {
            return Ok(());
        }
        let mut rng = Rng(1);
        let too_big = |what, estimated: f64, max: f64| {
            if estimated > max {
                Err(PlanError::TooBig {
                    what,
                    estimated: estimated as u64,
                    max: max as u64,
                })
            } else {
                Ok(())
            }
        };
        too_big(
            "subproblems",
            self.subproblem_count(&mut rng).0,
            MAX_SUBPROBLEMS,
        )?;
        if self.spec.strategy == Strategy::Prefix && self.spec.depth > 2 {
            let shorter = Plan::new(crate::plan::PlanSpec {
                depth: self.spec.depth - 1,
                ..self.spec
            })?;
            too_big("groups", shorter.subproblem_count(&mut rng).0, MAX_GROUPS)?;
        }
        Ok(())
    }

    /// Projects the plan's core-time on this machine from a sample drawn
    /// with `seed`, spending about `budget` (a third on calibration).
    pub fn estimate(&self, seed: u64, budget: Duration) -> Result<Estimate, PlanError> {
        let started = Instant::now();
        let mut rng = Rng(seed | 1);
        if self.derived_tasks().is_some() {
            return Err(PlanError::Synthetic);
        }
        if self.whole() {
            return Err(PlanError::Inconsistent(
                "this plan is one whole-board search: count it instead",
            ));
        }
        if self.spec.mode == Mode::Join {
            return self.estimate_join(&mut rng, budget, started);
        }
        let (subproblems, exact) = self.subproblem_count(&mut rng);
        if self.spec.strategy == Strategy::Rings {
            // The parts of the rings are the rings' search cut up: the
            // same nodes, over more subproblems.
            let whole = self.ring_plan().estimate(seed, budget)?;
            let per = whole.subproblems / subproblems;
            return Ok(Estimate {
                subproblems,
                subproblems_exact: exact && whole.subproblems_exact,
                nodes_per_subproblem: whole.nodes_per_subproblem * per,
                nodes_per_subproblem_error: whole.nodes_per_subproblem_error * per,
                seconds_spent: started.elapsed().as_secs_f64(),
                ..whole
            });
        }
        let (path, rate) = self.calibrate(&mut rng, budget / 3)?;

        // Knuth's estimator on random subproblems, until the budget ends.
        let probes = 64u64;
        let mut per: Vec<f64> = Vec::new();
        while per.len() < 8 || (started.elapsed() < budget && per.len() < 100_000) {
            let (_, it) = self.random_subproblem(&mut rng);
            let sum: f64 = (0..probes)
                .map(|_| it.knuth_descent(|c| rng.below(c)))
                .sum();
            per.push(sum / probes as f64);
        }
        let m = per.len() as f64;
        let mean = per.iter().sum::<f64>() / m;
        let var = per.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (m - 1.0);
        let err = (var / m).sqrt();
        Ok(Estimate {
            mode: Mode::Backtrack.name(),
            path: path.name(),
            subproblems,
            subproblems_exact: exact,
            nodes_per_subproblem: mean,
            nodes_per_subproblem_error: err,
            nodes_per_second: rate,
            core_seconds: subproblems * mean / rate,
            core_seconds_error: subproblems * err / rate,
            sampled: per.len() as u64,
            probes,
            seconds_spent: started.elapsed().as_secs_f64(),
            task_bytes: 0,
            counted_share: 1.0,
        })
    }

    /// [`Plan::estimate`] of a plan in join mode: subproblems drawn at
    /// random and counted by the join, until `budget` is spent (at least 8
    /// per piece of a halves plan, else 2 in all).
    fn estimate_join(
        &self,
        rng: &mut Rng,
        budget: Duration,
        started: Instant,
    ) -> Result<Estimate, PlanError> {
        let mut s = JoinSample::default();
        let (subproblems, exact) = if self.spec.strategy == Strategy::Halves {
            (self.sample_halves(&mut s, rng, budget, started)?, true)
        } else {
            self.sample_interiors(&mut s, rng, budget, started)?
        };
        Ok(Estimate {
            mode: Mode::Join.name(),
            path: s.path.unwrap_or(Path::Scalar).name(),
            subproblems,
            subproblems_exact: exact,
            nodes_per_subproblem: s.nodes / subproblems,
            nodes_per_subproblem_error: s.nodes * (s.variance.sqrt() / s.seconds) / subproblems,
            nodes_per_second: s.nodes / s.seconds.max(1e-12),
            core_seconds: s.seconds + s.build_seconds,
            core_seconds_error: s.variance.sqrt(),
            sampled: s.sampled,
            probes: 1,
            seconds_spent: started.elapsed().as_secs_f64(),
            task_bytes: s.table_bytes + s.halves.bytes(),
            counted_share: match s.choices {
                0 => 1.0,
                all => s.choices_counted as f64 / all as f64,
            },
        })
    }

    /// Samples a halves plan into `s`, each piece apart (stratified): its
    /// tables built once, timed, then its choices drawn with an equal share
    /// of the budget. Returns the plan's choices (exact).
    fn sample_halves(
        &self,
        s: &mut JoinSample,
        rng: &mut Rng,
        budget: Duration,
        started: Instant,
    ) -> Result<f64, PlanError> {
        let n = self.spec.n.n();
        let pieces = whole_pieces(n);
        let mut total = 0u64;
        for piece in 0..pieces {
            let (shape, _) = Shape::piece(n, piece);
            let mut choices = Vec::new();
            shape.for_each_choice(|c, _| choices.push(c));
            total += choices.len() as u64;
            let t = Instant::now();
            let join = shape.build(self.budget)?.on(self.path);
            s.build_seconds += t.elapsed().as_secs_f64();
            s.table_bytes = s.table_bytes.max(join.table_bytes());
            s.path = Some(join.path());
            let until = budget.mul_f64((piece + 1) as f64 / pieces as f64);
            let mut taken = Vec::new();
            while !choices.is_empty()
                && (taken.len() < 8 || (started.elapsed() < until && taken.len() < 100_000))
            {
                let c = choices[rng.below(choices.len() as u64) as usize];
                taken.push(s.time(|h| join.count_choice(c, h))?);
            }
            s.add_stratum(&taken, choices.len() as f64);
        }
        Ok(total as f64)
    }

    /// Samples a prefix, frame or rings plan into `s`: random subproblems
    /// counted by the join. Returns the plan's subproblems and whether that
    /// number is exact.
    fn sample_interiors(
        &self,
        s: &mut JoinSample,
        rng: &mut Rng,
        budget: Duration,
        started: Instant,
    ) -> Result<(f64, bool), PlanError> {
        let (subproblems, exact) = self.subproblem_count(rng);
        // A subproblem drawn with probability p weighs 1 / p: a ring
        // part's time counts for all its ring's parts, and the sum over
        // draws is scaled to the plan's rings (or subproblems).
        let (units, _) = match self.spec.strategy {
            Strategy::Rings => self.ring_plan().subproblem_count(rng),
            _ => (subproblems, exact),
        };
        // At least two draws for an error bar, more while the budget
        // lasts: at record N one draw counts a part of 20 free rows,
        // tens of seconds.
        let mut taken = Vec::new();
        while taken.len() < 2 || (started.elapsed() < budget && taken.len() < 100_000) {
            // The first two draws share the budget; later ones take what
            // is left.
            let share = budget.mul_f64(((taken.len() + 1) as f64 / 2.0).min(1.0));
            taken.push(self.time_random_join(s, rng, started + share)?);
        }
        s.add_stratum(&taken, units);
        Ok((subproblems, exact))
    }

    /// Counts one random subproblem by the join (its tables built for it)
    /// and returns its seconds and nodes, times the subproblems it stands
    /// for in the draw. Its choices are counted in a random order until
    /// `until`; past it (a record N's subproblem takes minutes), those
    /// counted (at least 4) stand for all of them.
    fn time_random_join(
        &self,
        s: &mut JoinSample,
        rng: &mut Rng,
        until: Instant,
    ) -> Result<(f64, f64), PlanError> {
        let (it, start, times) = self.random_start(rng);
        let built = Instant::now();
        let join = Join::within(&it, &start, self.budget)?.on(self.path);
        let build = built.elapsed().as_secs_f64();
        s.table_bytes = s.table_bytes.max(join.table_bytes());
        s.path = Some(join.path());
        let mut choices = join.choices();
        let all = choices.len();
        let (mut secs, mut nodes, mut counted) = (0.0, 0.0, 0);
        while counted < all && (counted < 4 || Instant::now() < until) {
            // A random choice of those left (a partial Fisher-Yates shuffle).
            let k = counted + rng.below((all - counted) as u64) as usize;
            choices.swap(counted, k);
            let t = Instant::now();
            nodes += join.count_choice(choices[counted].0, &mut s.halves)?.nodes as f64;
            secs += t.elapsed().as_secs_f64();
            counted += 1;
        }
        s.sampled += 1;
        s.choices += all as u64;
        s.choices_counted += counted as u64;
        let scale = all as f64 / counted.max(1) as f64;
        Ok(((build + secs * scale) * times, nodes * scale * times))
    }

    /// A random subproblem of a prefix, frame or rings plan, as an interior
    /// and a start, with the number of subproblems it stands for in the
    /// draw (a ring's parts: a ring is drawn uniformly, then one part).
    fn random_start(&self, rng: &mut Rng) -> (Interior, Start, f64) {
        if self.spec.strategy != Strategy::Rings {
            let (_, it) = self.random_subproblem(rng);
            return (it, Start::default(), 1.0);
        }
        let rings = self.ring_plan();
        let (lines, bits) = rings.id_shape();
        let frames = self.frames.as_ref().expect("a rings plan has rings");
        loop {
            let Ok(Subproblem::Frame { frame, .. }) =
                rings.decode(rings.random_id(rng, lines, bits))
            else {
                continue;
            };
            let mut starts = Vec::new();
            self.for_each_part(frames, frame, |_, start| starts.push(start));
            if starts.is_empty() {
                continue;
            }
            let start = starts[rng.below(starts.len() as u64) as usize];
            return (frames.interior(&frame), start, starts.len() as f64);
        }
    }
    /// The number of prefix or frame subproblems: enumerated when the plan
    /// is small, else the acceptance rate of random ids times their range.
    fn subproblem_count(&self, rng: &mut Rng) -> (f64, bool) {
        if self.spec.strategy == Strategy::Rings {
            return self.ring_parts_count(rng);
        }
        let (lines, bits) = self.id_shape();
        let draws_space = (self.spec.n.get() as f64).powi(lines as i32);
        if draws_space <= ENUMERATE_UP_TO as f64 {
            let schedule = self.schedule();
            let symmetric = 2 * u64::from(self.spec.n.get());
            return ((schedule.subproblems - symmetric) as f64, true);
        }
        let draws = 1_000_000u64;
        let hits = (0..draws)
            .filter(|_| self.decode(self.random_id(rng, lines, bits)).is_ok())
            .count();
        (draws_space * hits as f64 / draws as f64, false)
    }

    /// The plan of this one's rings, uncut (a rings plan's parts are their
    /// searches cut up).
    fn ring_plan(&self) -> Plan {
        Plan::new(crate::plan::PlanSpec {
            strategy: Strategy::Frame,
            depth: 1,
            ..self.spec
        })
        .expect("a rings plan's N makes rings")
        .with_path(self.path)
    }

    /// The parts of a rings plan: every ring's when the rings are few,
    /// else the rings' count times the mean parts of a sample of rings.
    fn ring_parts_count(&self, rng: &mut Rng) -> (f64, bool) {
        let rings = self.ring_plan();
        let frames = self.frames.as_ref().expect("a rings plan has rings");
        let parts = |ring| {
            let mut k = 0u64;
            self.for_each_part(frames, ring, |_, _| k += 1);
            k as f64
        };
        let (count, exact) = rings.subproblem_count(rng);
        const SAMPLE: usize = 2_000;
        if exact && count <= SAMPLE as f64 {
            let mut total = 0.0;
            frames.for_each_in(0, u64::MAX, |ring, _, _| total += parts(ring));
            return (total, true);
        }
        let (lines, bits) = rings.id_shape();
        let mut sum = 0.0;
        for _ in 0..SAMPLE {
            let ring = loop {
                if let Ok(Subproblem::Frame { frame, .. }) =
                    rings.decode(rings.random_id(rng, lines, bits))
                {
                    break frame;
                }
            };
            sum += parts(ring);
        }
        (count * sum / SAMPLE as f64, false)
    }

    /// Positions in an id, and bits per position (of a prefix or frame
    /// plan: a rings plan is sampled through [`Plan::ring_plan`]).
    fn id_shape(&self) -> (usize, u32) {
        let lines = match self.spec.strategy {
            Strategy::Prefix => self.spec.depth as usize,
            Strategy::Frame | Strategy::Rings => self.frames.as_ref().expect("frame plan").lines(),
            Strategy::Synthetic | Strategy::Halves => 0,
        };
        (lines, crate::engine::border::POS_BITS)
    }

    /// An id of the plan's kind with uniform random positions (it may not
    /// decode: the caller rejects those).
    fn random_id(&self, rng: &mut Rng, lines: usize, bits: u32) -> u64 {
        let n = u64::from(self.spec.n.get());
        let kind = match self.spec.strategy {
            Strategy::Prefix => Kind::Prefix,
            Strategy::Frame | Strategy::Rings => Kind::Frame,
            Strategy::Synthetic | Strategy::Halves => Kind::Whole,
        };
        let payload = (0..lines).fold(0u64, |k, _| k << bits | rng.below(n));
        (kind as u64) << KIND_SHIFT | payload
    }

    /// Seeded random subproblems of this prefix or frame plan, each taken
    /// down by random queens to `free_rows` free rows (draws that cannot
    /// reach it are dropped): pieces of real plans small enough to count
    /// at any N, for tests that hold a counting device to the CPU's lanes.
    pub fn random_pieces(&self, seed: u64, count: usize, free_rows: usize) -> Vec<Interior> {
        let n = self.spec.n.n();
        let mut rng = Rng(seed | 1);
        let mut pieces = Vec::with_capacity(count);
        while pieces.len() < count {
            let (mut queens, _) = self.random_subproblem(&mut rng);
            if descend(n, &mut queens, free_rows, &mut rng) {
                pieces.push(Interior::new(n, &queens));
            }
        }
        pieces
    }

    /// A uniformly random subproblem of the plan (rejection sampling), with
    /// its interior.
    fn random_subproblem(&self, rng: &mut Rng) -> (Vec<(usize, usize)>, Interior) {
        let (lines, bits) = self.id_shape();
        loop {
            if let Ok(s) = self.decode(self.random_id(rng, lines, bits)) {
                let it = self
                    .interior(&s)
                    .expect("prefix and frame subproblems have one");
                return (self.queens(&s), it);
            }
        }
    }

    /// The engine's rate on deep pieces of this plan: random subproblems
    /// descended until `CALIBRATION_ROWS` free rows remain, counted exactly.
    fn calibrate(&self, rng: &mut Rng, budget: Duration) -> Result<(Path, f64), PlanError> {
        let n = self.spec.n.n();
        let never = AtomicBool::new(false);
        let (mut nodes, mut spent, mut path) = (0u128, Duration::ZERO, Path::Scalar);
        while spent < budget || nodes < 1_000_000 {
            let mut pieces = Vec::with_capacity(256);
            while pieces.len() < 256 {
                let (mut queens, _) = self.random_subproblem(rng);
                if descend(n, &mut queens, CALIBRATION_ROWS, rng) {
                    pieces.push(Interior::new(n, &queens));
                }
            }
            let t = Instant::now();
            let (counted, used) =
                count_interiors(&pieces, self.path, &never)?.expect("never stopped");
            spent += t.elapsed();
            nodes += counted.iter().map(|c| u128::from(c.nodes)).sum::<u128>();
            path = used;
        }
        Ok((path, nodes as f64 / spent.as_secs_f64().max(1e-9)))
    }
}

/// What the join's sample has gathered: projected sums over the plan.
#[derive(Default)]
struct JoinSample {
    /// Projected core-seconds of the counts, their variance, and nodes.
    seconds: f64,
    variance: f64,
    nodes: f64,
    /// Core-seconds building quarter tables (a halves plan's pieces).
    build_seconds: f64,
    sampled: u64,
    table_bytes: u64,
    halves: Halves,
    path: Option<Path>,
    /// Of the subproblems drawn whole or in part: their choices, and
    /// those counted.
    choices: u64,
    choices_counted: u64,
}

impl JoinSample {
    /// Times one count, returning its seconds and nodes.
    fn time(
        &mut self,
        count: impl FnOnce(
            &mut Halves,
        )
            -> Result<crate::engine::counts::PieceCounts, crate::engine::join::TooLarge>,
    ) -> Result<(f64, f64), PlanError> {
        let t = Instant::now();
        let c = count(&mut self.halves)?;
        self.sampled += 1;
        Ok((t.elapsed().as_secs_f64(), c.nodes as f64))
    }

    /// Adds a stratum of `units` subproblems from draws (seconds, nodes).
    fn add_stratum(&mut self, draws: &[(f64, f64)], units: f64) {
        let m = draws.len() as f64;
        if m == 0.0 {
            return;
        }
        let mean = draws.iter().map(|d| d.0).sum::<f64>() / m;
        let var = if m > 1.0 {
            draws
                .iter()
                .map(|d| (d.0 - mean) * (d.0 - mean))
                .sum::<f64>()
                / (m - 1.0)
        } else {
            0.0
        };
        self.seconds += units * mean;
        self.variance += units * units * var / m;
        self.nodes += units * draws.iter().map(|d| d.1).sum::<f64>() / m;
    }
}

/// Places random non-attacking queens on the topmost free rows until
/// `left` free rows remain; false at a dead end.
fn descend(n: usize, queens: &mut Vec<(usize, usize)>, left: usize, rng: &mut Rng) -> bool {
    while n - queens.len() > left {
        let row = (0..n)
            .find(|r| queens.iter().all(|q| q.0 != *r))
            .expect("a free row");
        let open: Vec<usize> = (0..n)
            .filter(|&c| {
                queens
                    .iter()
                    .all(|&(r, q)| q != c && r.abs_diff(row) != q.abs_diff(c))
            })
            .collect();
        if open.is_empty() {
            return false;
        }
        queens.push((row, open[rng.below(open.len() as u64) as usize]));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::PlanSpec;
    use crate::Size;

    /// Knuth's estimator is unbiased: over many descents its mean is the
    /// exact node count of the scalar search, here within 2%.
    #[test]
    fn knuth_descents_average_to_the_exact_node_count() {
        let plan = Plan::new(PlanSpec {
            n: Size::new(12).unwrap(),
            strategy: Strategy::Frame,
            depth: 1,
            tasks: 10,
            mode: Mode::Backtrack,
            cut: crate::plan::CUT,
        })
        .unwrap();
        let mut rng = Rng(7);
        let (mut exact, mut est) = (0.0, 0.0);
        for _ in 0..20 {
            let (_, it) = plan.random_subproblem(&mut rng);
            exact += it.count().nodes as f64;
            est += (0..20_000)
                .map(|_| it.knuth_descent(|c| rng.below(c)))
                .sum::<f64>()
                / 20_000.0;
        }
        assert!(
            (est / exact - 1.0).abs() < 0.02,
            "estimated {est}, exact {exact}"
        );
    }

    /// Completions of `queens` by plain recursion with a full attack check
    /// per square: shares nothing with the engine.
    fn reference(n: usize, queens: &mut Vec<(usize, usize)>) -> u64 {
        let Some(row) = (0..n).find(|r| queens.iter().all(|q| q.0 != *r)) else {
            return 1;
        };
        let mut found = 0;
        for col in 0..n {
            if queens
                .iter()
                .all(|&(r, c)| c != col && r.abs_diff(row) != c.abs_diff(col))
            {
                queens.push((row, col));
                found += reference(n, queens);
                queens.pop();
            }
        }
        found
    }

    /// Seeded random subproblems of real plans of N=19..=32, both
    /// strategies (frames of depth 1 and 2), taken down to 10 free rows:
    /// every path this CPU has gives the reference's completions and the
    /// scalar loop's node counts, and the join (a second algorithm) gives
    /// the same completions on each of its pair loops.
    #[test]
    fn every_path_matches_the_reference_on_random_pieces_of_real_plans() {
        let never = AtomicBool::new(false);
        let mut completions = 0;
        for n in 19..=32u32 {
            for (strategy, depth) in [
                (Strategy::Prefix, 4),
                (Strategy::Frame, 1),
                (Strategy::Frame, 2),
            ] {
                let plan = Plan::new(PlanSpec {
                    n: Size::new(n).unwrap(),
                    strategy,
                    depth,
                    tasks: 1,
                    mode: Mode::Backtrack,
                    cut: crate::plan::CUT,
                })
                .unwrap();
                let mut rng = Rng(u64::from(n) * 1000 + u64::from(depth));
                let (mut pieces, mut want) = (Vec::new(), Vec::new());
                while pieces.len() < 4 {
                    let (mut queens, _) = plan.random_subproblem(&mut rng);
                    if descend(n as usize, &mut queens, 10, &mut rng) {
                        pieces.push(Interior::new(n as usize, &queens));
                        want.push(reference(n as usize, &mut queens));
                    }
                }
                let scalar = count_interiors(&pieces, Some(Path::Scalar), &never)
                    .unwrap()
                    .unwrap()
                    .0;
                for path in Path::ALL {
                    let (got, used) = count_interiors(&pieces, Some(path), &never)
                        .unwrap()
                        .unwrap();
                    if used != path {
                        println!(
                            "N={n}: path {} not run here (CPU or lane width)",
                            path.name()
                        );
                        continue;
                    }
                    let c1: Vec<u64> = got.iter().map(|c| c.c1).collect();
                    assert_eq!(
                        c1,
                        want,
                        "N={n} {strategy} depth {depth} path {}",
                        path.name()
                    );
                    assert_eq!(got, scalar, "N={n} nodes on path {}", path.name());
                }
                for (piece, &w) in pieces.iter().zip(&want) {
                    for path in crate::engine::join::pair_loops() {
                        let joined = crate::engine::join::count_within(
                            piece,
                            &Start::default(),
                            crate::engine::join::Budget::default(),
                            Some(path),
                        )
                        .unwrap();
                        assert_eq!(joined.c1, w, "N={n} {strategy} depth {depth} join {path}");
                    }
                }
                completions += want.iter().sum::<u64>();
            }
        }
        println!("{completions} completions compared");
        assert!(
            completions > 0,
            "the sample must hold completions to compare"
        );
    }

    /// A runaway plan is refused before it is built; ordinary ones pass.
    #[test]
    fn oversized_plans_are_refused_before_they_are_built() {
        let spec = |n, strategy, depth| PlanSpec {
            n: Size::new(n).unwrap(),
            strategy,
            depth,
            tasks: 1000,
            mode: Mode::Backtrack,
            cut: crate::plan::CUT,
        };
        for (n, depth) in [(32, 11), (32, 9), (26, 11)] {
            let e = Plan::new(spec(n, Strategy::Prefix, depth))
                .unwrap()
                .check_size()
                .unwrap_err();
            assert!(matches!(e, PlanError::TooBig { .. }), "{e}");
            assert!(e.to_string().contains("use a smaller --depth"), "{e}");
        }
        // The largest frame plan (N=32, 8 lines: about 10^10 frames) is
        // bounded: minutes of planning in one record per ring.
        for (n, strategy, depth) in [
            (18, Strategy::Prefix, 4),
            (27, Strategy::Frame, 2),
            (32, Strategy::Frame, 1),
            (32, Strategy::Frame, 2),
        ] {
            Plan::new(spec(n, strategy, depth))
                .unwrap()
                .check_size()
                .unwrap();
        }
    }

    /// The sampled subproblem count agrees with the enumeration.
    #[test]
    fn sampled_counts_match_enumerated_ones() {
        for (strategy, depth) in [(Strategy::Frame, 1), (Strategy::Prefix, 3)] {
            let plan = Plan::new(PlanSpec {
                n: Size::new(11).unwrap(),
                strategy,
                depth,
                tasks: 10,
                mode: Mode::Backtrack,
                cut: crate::plan::CUT,
            })
            .unwrap();
            let (lines, bits) = plan.id_shape();
            let mut rng = Rng(3);
            let draws = 400_000;
            let hits = (0..draws)
                .filter(|_| plan.decode(plan.random_id(&mut rng, lines, bits)).is_ok())
                .count();
            let sampled = 11f64.powi(lines as i32) * hits as f64 / draws as f64;
            let (exact, is_exact) = plan.subproblem_count(&mut rng);
            assert!(is_exact);
            assert!(
                (sampled / exact - 1.0).abs() < 0.05,
                "{strategy}: {sampled} vs {exact}"
            );
        }
    }
}
