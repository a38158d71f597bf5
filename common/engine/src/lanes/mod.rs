//! Many interior searches stepped together in SIMD lanes.
//!
//! A scalar depth-first search spends most of its time on branches it
//! cannot predict (does this row have a candidate left?). Here sixteen
//! independent searches (jobs) share one instruction stream, two groups of
//! eight 32-bit lanes: every step, each lane either places its next
//! candidate or backs up one row, under a mask instead of a branch. A lane
//! whose job is finished takes the next job, so lanes stay busy until the
//! job list runs dry.
//!
//! Two kernels, each built for AVX2 and for AVX-512 (the same source; the
//! AVX-512 build has 32 registers, rotates and masks):
//! - `narrow`: diagonals rotate instead of shifting, so no bit is lost
//!   and a lane's stack keeps one word per row. A rotated bit must not
//!   wrap onto the board: [`fits_lanes`] checks there is room (ring
//!   interiors up to N=18).
//! - `wide`: plain shifts and a 16-byte record per row, for any interior
//!   up to N=32.
//!
//! The path is chosen at run time ([`Path::ranked`]); the scalar path
//! ([`crate::interior::Interior::count_from`]) is always there and
//! gives the same counts, which the tests check on every path the machine
//! has.

use crate::counts::{CountOverflow, PieceCounts};
use crate::interior::{Interior, Start};

/// One job: a start state of one interior, counted with that interior's weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    /// Index into the interiors (and weights) the jobs are counted with.
    pub interior: u32,
    pub start: Start,
}

/// Completions (unweighted, in `c1`) and queens placed, per interior of a
/// batch: what a plan needs to report each subproblem on its own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counted {
    pub per_interior: Vec<PieceCounts>,
}

impl Counted {
    fn new(interiors: usize) -> Counted {
        Counted {
            per_interior: vec![PieceCounts::default(); interiors],
        }
    }

    /// Adds a lane's counters to its interior's, checked.
    pub(crate) fn add(
        &mut self,
        interior: usize,
        completions: u64,
        nodes: u64,
    ) -> Result<(), CountOverflow> {
        let c = &mut self.per_interior[interior];
        c.c1 = c.c1.checked_add(completions).ok_or(CountOverflow)?;
        c.nodes = c.nodes.checked_add(nodes).ok_or(CountOverflow)?;
        Ok(())
    }

    /// Adds each lane's counters to the interior of the job it is on: a
    /// lane's `base` is its interior's first table entry, 32 per interior.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn add_lanes(
        &mut self,
        sols: &[u32],
        nodes: &[u32],
        base: &[u32],
    ) -> Result<(), CountOverflow> {
        for ((&s, &n), &b) in sols.iter().zip(nodes).zip(base) {
            if (s, n) != (0, 0) {
                self.add(b as usize / 32, s.into(), n.into())?;
            }
        }
        Ok(())
    }

    /// Σ `weights[i] × completions[i]`, and every node, checked.
    pub fn weighted(&self, weights: &[u32]) -> Result<Sums, CountOverflow> {
        let mut sums = Sums::default();
        for (c, &w) in self.per_interior.iter().zip(weights) {
            let wc = u128::from(c.c1)
                .checked_mul(w.into())
                .ok_or(CountOverflow)?;
            sums.add(wc, c.nodes.into())?;
        }
        Ok(sums)
    }
}

/// Weighted completions and queens placed, summed over jobs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sums {
    pub weighted: u128,
    pub nodes: u128,
}

impl Sums {
    /// Adds `weighted` and `nodes`, checked (never expected to overflow).
    pub fn add(&mut self, weighted: u128, nodes: u128) -> Result<(), CountOverflow> {
        self.weighted = self.weighted.checked_add(weighted).ok_or(CountOverflow)?;
        self.nodes = self.nodes.checked_add(nodes).ok_or(CountOverflow)?;
        Ok(())
    }
}

/// How the jobs are stepped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Path {
    /// One job at a time, any CPU.
    Scalar,
    /// Two groups of eight jobs in the 32-bit lanes of AVX2 registers,
    /// any N up to 32.
    Avx2,
    /// The same kernels built for AVX-512 (F, VL, BW, DQ), any N up to 32.
    Avx512,
    /// One search per thread of a graphics card (`common/gpu`), any N up
    /// to 32: counted through the [`crate::device::Device`] a plan
    /// was given, never by these lanes (no CPU runs it).
    Gpu,
}

impl Path {
    /// Every CPU path, in the order of preference (worst first).
    pub const ALL: [Path; 3] = [Path::Scalar, Path::Avx2, Path::Avx512];

    /// Whether this CPU can run the path.
    pub fn supported(self) -> bool {
        match self {
            Path::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Path::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Path::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512dq")
                    && std::arch::is_x86_feature_detected!("avx2")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Path::Avx2 | Path::Avx512 => false,
            Path::Gpu => false,
        }
    }

    /// The fastest path this CPU can run: the first of [`Path::ranked`].
    pub fn fastest() -> Path {
        Path::ranked()[0]
    }

    /// Every path this CPU can run, fastest first, scalar last. A CPU with
    /// both AVX-512 and AVX2 has them raced once per process (about 12 ms,
    /// `race_avx512_against_avx2`): the AVX-512 build is the faster on a
    /// Zen 4 (N=17, one thread: 2.84 s against 3.42 s), but a CPU that
    /// slows its clock for AVX-512 code may not gain. (An earlier AVX-512
    /// kernel, with gathers and scatters, took 4.88 s there: a Zen 4
    /// scatters slowly.)
    pub fn ranked() -> &'static [Path] {
        static RANKED: std::sync::OnceLock<Vec<Path>> = std::sync::OnceLock::new();
        RANKED.get_or_init(|| {
            let have = Path::available();
            let both = have.contains(&Path::Avx512) && have.contains(&Path::Avx2);
            rank(&have, both && race_avx512_against_avx2())
        })
    }

    /// Every path this CPU can run, scalar first.
    pub fn available() -> Vec<Path> {
        Path::ALL.into_iter().filter(|p| p.supported()).collect()
    }

    /// What to name a count made of parts counted on `self` and `other`:
    /// the card, if one took part (the rest is the CPU's small work, such
    /// as the Burnside searches); else the slower CPU path.
    pub fn with(self, other: Path) -> Path {
        if self == Path::Gpu || other == Path::Gpu {
            Path::Gpu
        } else {
            self.min(other)
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Path::Scalar => "scalar",
            Path::Avx2 => "avx2",
            Path::Avx512 => "avx512",
            Path::Gpu => "gpu",
        }
    }
}

impl std::str::FromStr for Path {
    type Err = String;
    fn from_str(s: &str) -> Result<Path, String> {
        Path::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown core '{s}': use scalar, avx2 or avx512"))
    }
}

impl std::fmt::Display for Path {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `available` (scalar first, as [`Path::available`] lists them) fastest
/// first: in order of preference, except that AVX2 goes before AVX-512
/// when `avx2_faster`.
fn rank(available: &[Path], avx2_faster: bool) -> Vec<Path> {
    let mut ranked: Vec<Path> = available.iter().rev().copied().collect();
    if avx2_faster {
        ranked.sort_by_key(|&p| match p {
            Path::Avx2 => 0,
            Path::Avx512 => 1,
            Path::Scalar => 2,
            Path::Gpu => 3,
        });
    }
    ranked
}

/// The board whose ring interiors the race counts. On a Zen 4 a run takes
/// 1.2 ms (AVX2) and 1.1 ms (AVX-512): the ratio, 0.87 to 0.91 over runs,
/// picks as N=13's (0.85 to 0.90, at 3 times the cost) and N=17's (0.83)
/// do, at a third of the cost: about 12 ms for [`RACE_RUNS`] each, at
/// every start of a process that counts (a short `solve --state` or a
/// worker start pays it).
const RACE_N: u32 = 12;

/// Runs of each build in the race: the best counts, so a run that another
/// process interrupted does not decide (three were too few under the test
/// suite's load, which once made AVX2 win on a Zen 4).
const RACE_RUNS: usize = 5;

/// Whether AVX2 counts the ring interiors of [`RACE_N`] faster than
/// AVX-512 (best of [`RACE_RUNS`] each, in turn, so a change of clock
/// speed hits both). The CPU must have both.
fn race_avx512_against_avx2() -> bool {
    use crate::border::Frames;
    let frames =
        Frames::new(crate::Size::new(RACE_N).expect("a board size"), 1).expect("rings of N=12");
    let mut interiors = Vec::new();
    frames.for_each_in(0, u64::MAX, |f, _, _| interiors.push(frames.interior(&f)));
    let never = std::sync::atomic::AtomicBool::new(false);
    let mut best = [std::time::Duration::MAX; 2];
    for _ in 0..RACE_RUNS {
        for (b, path) in best.iter_mut().zip([Path::Avx512, Path::Avx2]) {
            let t = std::time::Instant::now();
            let counted = count_interiors(&interiors, Some(path), &never);
            debug_assert!(matches!(counted, Ok(Some((_, p))) if p == path));
            *b = (*b).min(t.elapsed());
        }
    }
    best[1] < best[0]
}

/// Whether the narrow (rotating) lanes can step this interior (otherwise
/// the wide kernel takes it): three free rows or more, gaps between free
/// rows that fit in two bits, and room in 32 bits for every diagonal to
/// rotate through: a diagonal bit moves one column per row, so from the
/// first free row to the last it travels at most the row span, and it must
/// not wrap round onto the interior's columns. For ring interiors this
/// holds up to N=18.
pub fn fits_lanes(it: &Interior) -> bool {
    if it.rows < 3 || it.shift[..it.rows - 1].iter().any(|&s| s > 3) {
        return false;
    }
    let (lo, hi) = column_range(it);
    let travel: u32 = it.shift[..it.rows - 1].iter().sum();
    (hi - lo) + travel <= 31
}

/// Interiors with their weights, ready to count jobs on any path.
pub struct Batch<'a> {
    interiors: &'a [Interior],
    weights: &'a [u32],
    /// For the AVX-512 kernel: built when every interior fits its lanes.
    tables: Option<Tables>,
    /// For the AVX2 kernel: any interior.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    wide: WideTables,
}

impl<'a> Batch<'a> {
    /// `weights[i]` multiplies the completions of `interiors[i]`.
    pub fn new(interiors: &'a [Interior], weights: &'a [u32]) -> Batch<'a> {
        assert_eq!(interiors.len(), weights.len(), "one weight per interior");
        let fit = interiors.iter().all(fits_lanes);
        Batch {
            interiors,
            weights,
            tables: fit.then(|| Tables::new(interiors)),
            wide: WideTables::new(interiors),
        }
    }

    /// The paths these interiors can be counted on, scalar first: every
    /// path the CPU has.
    pub fn paths(&self) -> Vec<Path> {
        Path::available()
    }

    /// The fastest path of [`Batch::paths`] (the first of
    /// [`Path::ranked`] it has), or `want` if it is one of them.
    pub fn path(&self, want: Option<Path>) -> Path {
        let paths = self.paths();
        want.filter(|p| paths.contains(p)).unwrap_or_else(|| {
            *Path::ranked()
                .iter()
                .find(|p| paths.contains(p))
                .expect("scalar is always there")
        })
    }

    /// Counts `jobs` on `path`: Σ weights[job.interior] × completions, and
    /// the queens placed. Every job's start must leave three free rows, as
    /// [`Interior::split`] does; `path` must be one of [`Batch::paths`].
    pub fn count(&self, path: Path, jobs: &[Job]) -> Result<Sums, CountOverflow> {
        self.count_each(path, jobs)?.weighted(self.weights)
    }

    /// Counts `jobs` on `path`, each interior's completions (unweighted)
    /// and queens placed apart.
    pub fn count_each(&self, path: Path, jobs: &[Job]) -> Result<Counted, CountOverflow> {
        let mut counted = Counted::new(self.interiors.len());
        match (path, &self.tables) {
            (Path::Gpu, _) => panic!("the GPU path counts through a Device, not the lanes"),
            (Path::Scalar, _) => {
                for j in jobs {
                    let i = j.interior as usize;
                    let c = self.interiors[i].count_from(&j.start);
                    counted.add(i, c.c1, c.nodes)?;
                }
            }
            #[cfg(target_arch = "x86_64")]
            (Path::Avx2 | Path::Avx512, tables) => {
                assert!(path.supported(), "the {path} path needs a CPU with it");
                // SAFETY (each call): the CPU has the kernel's features
                // (checked above); the narrow kernel gets tables only when
                // every interior fits its lanes, the wide tables cover
                // every interior; callers give starts with three free rows
                // (as Interior::split makes them).
                match (path, tables) {
                    // Rotated diagonals when every interior fits: one word
                    // per row on the stacks instead of four.
                    (Path::Avx2, Some(t)) => unsafe { narrow::avx2::count(t, jobs, &mut counted)? },
                    (_, Some(t)) => unsafe { narrow::avx512::count(t, jobs, &mut counted)? },
                    (Path::Avx2, None) => unsafe {
                        wide::avx2::count(&self.wide, jobs, &mut counted)?
                    },
                    (_, None) => unsafe { wide::avx512::count(&self.wide, jobs, &mut counted)? },
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            (p, _) => panic!("path {} is not available on this CPU", p.name()),
        }
        Ok(counted)
    }
}

/// The total of `n` (N >= 6) counted from its ring interiors (a depth-1
/// border plan: every solution has one queen on each border line, so
/// total = Σ weight × completions) on `path`, by the wide kernel even
/// where the narrow one could take every interior. Every board past N=18
/// counts with the wide kernel, but small boards never reach it: this is
/// how a worker's self-test checks it against a published total.
pub fn ring_total_by_wide_kernel(n: crate::Size, path: Path) -> Result<u128, CountOverflow> {
    let frames = crate::border::Frames::new(n, 1).expect("rings need N >= 6");
    let (mut interiors, mut weights, mut total) = (Vec::new(), Vec::new(), 0u128);
    frames.for_each_in(0, u64::MAX, |f, weight, _| {
        let it = frames.interior(&f);
        if it.rows() < 3 {
            total += u128::from(weight) * u128::from(it.count().c1);
        } else {
            interiors.push(it);
            weights.push(weight);
        }
    });
    let mut jobs = Vec::new();
    for (i, it) in interiors.iter().enumerate() {
        let (starts, _) = it.split(SPLIT_ROWS);
        jobs.extend(starts.into_iter().map(|start| Job {
            interior: i as u32,
            start,
        }));
    }
    let batch = Batch {
        tables: None,
        ..Batch::new(&interiors, &weights)
    };
    let counted = batch.count(batch.path(Some(path)), &jobs)?.weighted;
    total.checked_add(counted).ok_or(CountOverflow)
}

/// Free rows of each interior placed before its search is cut into jobs:
/// enough jobs that lanes and threads stay evenly loaded.
pub const SPLIT_ROWS: usize = 1;

/// Jobs counted between two looks at the stop flag.
pub const JOBS_PER_TAKE: usize = 1024;

/// Counts every interior's completions (in `c1`, unweighted) and queens
/// placed, on `path` (the best this batch allows when `None` or not
/// possible). Interiors are cut into jobs ([`SPLIT_ROWS`]) and counted
/// together, so lanes stay full across small interiors. Gives `None` once
/// `stop` is set (looked at between takes of [`JOBS_PER_TAKE`] jobs).
pub fn count_interiors(
    interiors: &[Interior],
    path: Option<Path>,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<Option<(Vec<PieceCounts>, Path)>, CountOverflow> {
    let whole = vec![Start::default(); interiors.len()];
    count_below(interiors, &whole, path, stop)
}

/// [`count_interiors`], each interior counted below its own start only
/// (one part of it, as [`Interior::split`] makes them; the default start
/// is the whole interior). The queens placed above a start are not in
/// its nodes.
pub fn count_below(
    interiors: &[Interior],
    froms: &[Start],
    path: Option<Path>,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<Option<(Vec<PieceCounts>, Path)>, CountOverflow> {
    assert_eq!(interiors.len(), froms.len(), "one start per interior");
    let mut out = vec![PieceCounts::default(); interiors.len()];
    let mut jobs = Vec::new();
    for (i, (it, from)) in interiors.iter().zip(froms).enumerate() {
        if it.rows() < 3 {
            out[i] = it.count();
            continue;
        }
        let (starts, nodes) = it.split_from(from, SPLIT_ROWS);
        out[i].nodes = nodes;
        jobs.extend(starts.into_iter().map(|start| Job {
            interior: i as u32,
            start,
        }));
    }
    let ones = vec![1; interiors.len()];
    let batch = Batch::new(interiors, &ones);
    let path = batch.path(path);
    for take in jobs.chunks(JOBS_PER_TAKE) {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(None);
        }
        let c = batch.count_each(path, take)?;
        for (o, c) in out.iter_mut().zip(&c.per_interior) {
            o.c1 = o.c1.checked_add(c.c1).ok_or(CountOverflow)?;
            o.nodes = o.nodes.checked_add(c.nodes).ok_or(CountOverflow)?;
        }
    }
    Ok(Some((out, path)))
}

/// What the narrow kernel needs of each interior.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct Tables {
    /// 32 entries per interior: open columns of free row k (relabelled so
    /// the interior's lowest open column is bit 0), with the gap to the
    /// next free row in bits 30..32.
    entries: Vec<u32>,
    /// Index of the second-to-last free row, finished inline.
    pen: Vec<u32>,
    /// Open columns of the last free row (relabelled).
    last: Vec<u32>,
    /// The relabelling: the interior's lowest open column...
    low: Vec<u32>,
    /// ...and the mask of its columns after relabelling.
    span: Vec<u32>,
}

/// Columns that leave room for a row's gap in the top two bits of a word.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const PACKED_COLUMNS: u32 = (1 << 30) - 1;

/// What the AVX2 kernel needs of each interior: 32 rows per interior (and
/// one spare interior of zeros at the end, so a lane may look one row past
/// any interior's last).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct WideTables {
    /// Open columns of free row k.
    allowed: Vec<u32>,
    /// Rows from free row k to free row k + 1.
    shift: Vec<u32>,
    /// `allowed | shift << 30`, when every column is below 30 and every gap
    /// below 4 (saves the kernel a gather per step).
    packed: Option<Vec<u32>>,
}

impl WideTables {
    fn new(interiors: &[Interior]) -> WideTables {
        let rows = (interiors.len() + 1) * 32;
        let mut t = WideTables {
            allowed: vec![0; rows],
            shift: vec![0; rows],
            packed: None,
        };
        for (i, it) in interiors.iter().enumerate() {
            t.allowed[i * 32..i * 32 + 32].copy_from_slice(&it.allowed);
            t.shift[i * 32..i * 32 + 32].copy_from_slice(&it.shift);
        }
        let fits =
            t.allowed.iter().all(|&a| a & !PACKED_COLUMNS == 0) && t.shift.iter().all(|&s| s < 4);
        if fits {
            let both = t.allowed.iter().zip(&t.shift).map(|(&a, &s)| a | s << 30);
            t.packed = Some(both.collect());
        }
        t
    }
}

/// The interior's open columns as (lowest, highest), over all free rows.
fn column_range(it: &Interior) -> (u32, u32) {
    let all = it.allowed[..it.rows].iter().fold(0, |a, &b| a | b);
    if all == 0 {
        return (0, 0);
    }
    (all.trailing_zeros(), 31 - all.leading_zeros())
}

impl Tables {
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn new(interiors: &[Interior]) -> Tables {
        let mut t = Tables {
            entries: vec![0u32; interiors.len() * 32],
            pen: Vec::with_capacity(interiors.len()),
            last: Vec::with_capacity(interiors.len()),
            low: Vec::with_capacity(interiors.len()),
            span: Vec::with_capacity(interiors.len()),
        };
        for (i, it) in interiors.iter().enumerate() {
            let (lo, hi) = column_range(it);
            for k in 0..it.rows {
                t.entries[i * 32 + k] = it.allowed[k] >> lo | it.shift[k] << 30;
            }
            t.pen.push(it.rows as u32 - 2);
            t.last.push(it.allowed[it.rows - 1] >> lo);
            t.low.push(lo);
            t.span.push(u32::MAX >> (31 - (hi - lo)));
        }
        t
    }
}

#[cfg(target_arch = "x86_64")]
mod narrow;
#[cfg(target_arch = "x86_64")]
mod wide;
#[cfg(target_arch = "x86_64")]
mod x86_ops;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::border::Frames;

    /// Every ring constellation of N (a depth-1 border plan), cut into jobs
    /// the way [`count_interiors`] cuts them.
    struct RingJobs {
        interiors: Vec<Interior>,
        weights: Vec<u32>,
        jobs: Vec<Job>,
    }

    impl RingJobs {
        fn new(n: Size) -> RingJobs {
            let frames = Frames::new(n, 1).unwrap();
            let mut rj = RingJobs {
                interiors: Vec::new(),
                weights: Vec::new(),
                jobs: Vec::new(),
            };
            frames.for_each_in(0, u64::MAX, |f, weight, _| {
                let it = frames.interior(&f);
                if it.rows() < 3 {
                    return;
                }
                let interior = rj.interiors.len() as u32;
                let (starts, _) = it.split(SPLIT_ROWS);
                rj.jobs
                    .extend(starts.into_iter().map(|start| Job { interior, start }));
                rj.interiors.push(it);
                rj.weights.push(weight);
            });
            rj
        }
    }
    use crate::Size;
    use proptest::prelude::*;

    fn batch_agrees(n: u32, pick: impl Fn(usize) -> bool) {
        let rj = RingJobs::new(Size::new(n).unwrap());
        let jobs: Vec<Job> = (0..rj.jobs.len())
            .filter(|&i| pick(i))
            .map(|i| rj.jobs[i])
            .collect();
        let b = Batch::new(&rj.interiors, &rj.weights);
        let want = b.count(Path::Scalar, &jobs).unwrap();
        for path in b.paths() {
            assert_eq!(
                b.count(path, &jobs).unwrap(),
                want,
                "N={n} path {}",
                path.name()
            );
        }
    }

    /// Every ring job of N=12, counted on every path this CPU has, one at
    /// a time and all together: class counts and nodes agree.
    #[test]
    fn every_path_agrees_on_every_job_of_twelve() {
        let rj = RingJobs::new(Size::new(12).unwrap());
        let b = Batch::new(&rj.interiors, &rj.weights);
        for j in &rj.jobs {
            let one = std::slice::from_ref(j);
            let want = b.count(Path::Scalar, one).unwrap();
            for path in b.paths() {
                assert_eq!(
                    b.count(path, one).unwrap(),
                    want,
                    "{j:?} on {}",
                    path.name()
                );
            }
        }
        batch_agrees(12, |_| true);
    }

    /// The wide kernel (plain shifts, row records), which the SIMD paths
    /// use only for interiors the rotating lanes cannot take, in both its
    /// builds, on every ring job of N=12 and random subsets of N=9..15: it
    /// must give the scalar loop's counts and nodes.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_wide_kernel_agrees_on_ring_jobs_in_both_builds() {
        for path in [Path::Avx2, Path::Avx512] {
            if path.supported() {
                wide_agrees(path);
            } else {
                println!("wide kernel's {path} build skipped: this CPU lacks {path}");
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn wide_agrees(path: Path) {
        for n in 9..=15 {
            let rj = RingJobs::new(Size::new(n).unwrap());
            let b = Batch::new(&rj.interiors, &rj.weights);
            let jobs: Vec<Job> = rj
                .jobs
                .iter()
                .copied()
                .step_by(if n > 12 { 7 } else { 1 })
                .collect();
            let want = b.count_each(Path::Scalar, &jobs).unwrap();
            let mut got = Counted::new(rj.interiors.len());
            // SAFETY: the CPU has the path (the caller checks); ring jobs
            // leave three free rows.
            unsafe {
                match path {
                    Path::Avx2 => wide::avx2::count(&b.wide, &jobs, &mut got).unwrap(),
                    _ => wide::avx512::count(&b.wide, &jobs, &mut got).unwrap(),
                }
            };
            assert_eq!(got, want, "N={n} {path}");
        }
    }

    /// The ranking keeps every path once, scalar last; the race's verdict
    /// only swaps AVX2 and AVX-512. A batch takes the best-ranked path, or
    /// the one asked for.
    #[test]
    fn paths_are_ranked_fastest_first_with_scalar_last() {
        use Path::{Avx2, Avx512, Scalar};
        let all = [Scalar, Avx2, Avx512];
        assert_eq!(rank(&all, false), [Avx512, Avx2, Scalar]);
        assert_eq!(rank(&all, true), [Avx2, Avx512, Scalar]);
        assert_eq!(rank(&[Scalar, Avx2], true), [Avx2, Scalar]);
        assert_eq!(rank(&[Scalar], true), [Scalar]);
        let ranked = Path::ranked();
        assert_eq!(ranked.len(), Path::available().len());
        assert_eq!(ranked.last(), Some(&Scalar));
        assert!(ranked.iter().all(|p| p.supported()));
        assert_eq!(Path::fastest(), ranked[0]);
        let rj = RingJobs::new(Size::new(19).unwrap());
        let wide = Batch::new(&rj.interiors, &rj.weights);
        assert_eq!(wide.path(None), ranked[0]);
        for &p in ranked {
            assert_eq!(wide.path(Some(p)), p);
        }
        println!("ranked on this CPU: {ranked:?}");
    }

    /// The wide kernel alone, on every path this CPU has, gives the
    /// published totals from ring interiors that all fit the narrow one.
    #[test]
    fn the_wide_kernel_alone_counts_small_boards_exactly() {
        for n in [8u32, 11, 12] {
            let want = crate::known::known(n).unwrap().total;
            for path in Path::available() {
                let got = ring_total_by_wide_kernel(Size::new(n).unwrap(), path).unwrap();
                assert_eq!(got, want, "N={n} {path}");
            }
        }
    }

    /// Ring interiors fit the rotating (narrow) lanes up to N=18; past
    /// that the wide kernel takes them, so every path counts every N.
    #[test]
    fn narrow_lanes_cover_ring_interiors_up_to_eighteen_and_every_path_every_n() {
        for n in [8, 13, 17, 18] {
            let rj = RingJobs::new(Size::new(n).unwrap());
            assert!(rj.interiors.iter().all(fits_lanes), "N={n}");
        }
        let rj = RingJobs::new(Size::new(19).unwrap());
        assert!(!rj.interiors.iter().all(fits_lanes));
        let paths = Batch::new(&rj.interiors, &rj.weights).paths();
        assert_eq!(paths, Path::available());
    }

    /// Completions of `queens` on an `n`-board by plain recursion with a
    /// full attack check per square: no bitmaps, no tables, shares nothing
    /// with the interior search.
    fn reference_completions(n: usize, queens: &mut Vec<(usize, usize)>) -> u64 {
        let Some(row) = (0..n).find(|r| queens.iter().all(|q| q.0 != *r)) else {
            return 1;
        };
        let mut found = 0;
        for col in 0..n {
            let safe = queens
                .iter()
                .all(|&(r, c)| c != col && r.abs_diff(row) != c.abs_diff(col));
            if safe {
                queens.push((row, col));
                found += reference_completions(n, queens);
                queens.pop();
            }
        }
        found
    }

    /// A seeded random subproblem of a ring plan of N with at least one
    /// completion: a random solution (randomised backtracking) with `left`
    /// of its queens off the border lines taken away again.
    fn random_subproblem(n: u32, seed: u64, left: usize) -> Vec<(usize, usize)> {
        let nn = n as usize;
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        fn place(
            n: usize,
            row: usize,
            cols: &mut Vec<usize>,
            rnd: &mut dyn FnMut() -> u64,
        ) -> bool {
            if row == n {
                return true;
            }
            let mut order: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                order.swap(i, (rnd() % (i as u64 + 1)) as usize);
            }
            for c in order {
                if cols
                    .iter()
                    .enumerate()
                    .all(|(r, &qc)| qc != c && row - r != qc.abs_diff(c))
                {
                    cols.push(c);
                    if place(n, row + 1, cols, rnd) {
                        return true;
                    }
                    cols.pop();
                }
            }
            false
        }
        let mut cols = Vec::new();
        assert!(place(nn, 0, &mut cols, &mut next));
        let mut queens: Vec<(usize, usize)> = cols.into_iter().enumerate().collect();
        let on_border = |&(r, c): &(usize, usize)| r == 0 || c == 0 || r == nn - 1 || c == nn - 1;
        for _ in 0..left {
            let inner: Vec<usize> = (0..queens.len())
                .filter(|&i| !on_border(&queens[i]))
                .collect();
            queens.swap_remove(inner[(next() % inner.len() as u64) as usize]);
        }
        queens
    }

    /// Seeded random subproblems of N=19..=32 (where the narrow lanes
    /// stop and the wide kernel counts): every path this CPU has gives the reference's count.
    #[test]
    fn every_path_matches_the_reference_on_random_subproblems_up_to_32() {
        for n in 19..=32u32 {
            let mut interiors = Vec::new();
            let mut want = 0u128;
            for seed in 0..5u64 {
                let mut queens = random_subproblem(n, seed * 7919 + u64::from(n), 11);
                want += u128::from(reference_completions(n as usize, &mut queens)) * 3;
                interiors.push(Interior::new(n as usize, &queens));
            }
            assert!(want > 0, "N={n}: the sample has no completion to compare");
            let weights = vec![3; interiors.len()];
            let jobs: Vec<Job> = (0..interiors.len() as u32)
                .map(|interior| Job {
                    interior,
                    start: Start::default(),
                })
                .collect();
            let b = Batch::new(&interiors, &weights);
            for path in b.paths() {
                let got = b.count(path, &jobs).unwrap();
                assert_eq!(got.weighted, want, "N={n} path {}", path.name());
            }
            for path in Path::ALL.into_iter().filter(|p| !b.paths().contains(p)) {
                println!("N={n}: path {} skipped (not on this CPU)", path.name());
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Random subsets of the jobs of random boards (so lanes take jobs
        /// of different interiors, sizes and start rows side by side).
        #[test]
        fn every_path_agrees_on_random_job_sets(n in 7u32..=15, seed in any::<u64>(), keep in 1u64..=16) {
            let mix = |i: usize| (i as u64 ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 60;
            batch_agrees(n, |i| mix(i) < keep);
        }
    }
}
