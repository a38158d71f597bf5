//! Many interior searches stepped together in SIMD lanes.
//!
//! A scalar depth-first search spends most of its time on branches it
//! cannot predict (does this row have a candidate left?). Here sixteen
//! independent searches (jobs) share one instruction stream, one per AVX-512
//! lane: every step, each lane either places its next candidate or backs up
//! one row, under a mask instead of a branch. A lane whose job is finished
//! takes the next job, so lanes stay busy until the job list runs dry.
//!
//! Each lane keeps only the bit it placed per row on its stack. The
//! diagonal masks move by rotation, not shift, so no bit is ever lost and
//! backing up a row is exact: rotate back, take the queen off, and
//! recompute the row's candidates above it. A rotated bit must not wrap
//! onto the board: [`fits_lanes`] checks there is room. Tables pack each
//! free row's open columns with the gap to the next free row, so one
//! gather per step fetches both.
//!
//! The path is chosen at run time ([`Path::available`]); the scalar path
//! ([`crate::interior::Interior::count_from`]) is always there and gives the
//! same counts, which the tests check on every path the machine has.

use crate::counts::CountOverflow;
use crate::interior::{Interior, Start};

/// One job: a start state of one interior, counted with that interior's weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    /// Index into the interiors (and weights) the jobs are counted with.
    pub interior: u32,
    pub start: Start,
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// One job at a time, any x86-64 or other CPU.
    Scalar,
    /// Sixteen jobs in the 32-bit lanes of AVX-512 registers.
    Avx512,
}

impl Path {
    /// Every path this CPU can run, scalar first.
    pub fn available() -> Vec<Path> {
        let mut paths = vec![Path::Scalar];
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            paths.push(Path::Avx512);
        }
        paths
    }

    /// The fastest path this CPU can run.
    pub fn best() -> Path {
        *Path::available()
            .last()
            .expect("scalar is always available")
    }

    pub fn name(self) -> &'static str {
        match self {
            Path::Scalar => "scalar",
            Path::Avx512 => "avx512",
        }
    }
}

/// Whether the lanes can step this interior (otherwise its jobs are
/// counted on the scalar path): three free rows or more, gaps between free
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
    /// Built when every interior fits the lanes.
    tables: Option<Tables>,
}

impl<'a> Batch<'a> {
    /// `weights[i]` multiplies the completions of `interiors[i]`.
    pub fn new(interiors: &'a [Interior], weights: &'a [u32]) -> Batch<'a> {
        assert_eq!(interiors.len(), weights.len(), "one weight per interior");
        let fit = interiors.iter().all(fits_lanes);
        Batch {
            interiors,
            weights,
            tables: fit.then(|| Tables::new(interiors, weights)),
        }
    }

    /// The paths these interiors can be counted on, scalar first.
    pub fn paths(&self) -> Vec<Path> {
        if self.tables.is_some() {
            Path::available()
        } else {
            vec![Path::Scalar]
        }
    }

    /// Counts `jobs` on `path`: Σ weights[job.interior] × completions, and
    /// the queens placed. Every job's start must leave three free rows, as
    /// [`Interior::split`] does; `path` must be one of [`Batch::paths`].
    pub fn count(&self, path: Path, jobs: &[Job]) -> Result<Sums, CountOverflow> {
        match (path, &self.tables) {
            (Path::Scalar, _) => self.count_scalar(jobs),
            #[cfg(target_arch = "x86_64")]
            (Path::Avx512, Some(tables)) => {
                assert!(
                    std::arch::is_x86_feature_detected!("avx512f"),
                    "the AVX-512 path needs a CPU with AVX-512F"
                );
                // SAFETY: AVX-512F is present (checked above) and every
                // interior fits the lanes (tables exist).
                unsafe { avx512::count(tables, jobs) }
            }
            (p, _) => panic!("path {} is not available for this batch", p.name()),
        }
    }

    fn count_scalar(&self, jobs: &[Job]) -> Result<Sums, CountOverflow> {
        let mut sums = Sums::default();
        for j in jobs {
            let i = j.interior as usize;
            let c = self.interiors[i].count_from(&j.start);
            sums.add(
                u128::from(c.c1) * u128::from(self.weights[i]),
                c.nodes.into(),
            )?;
        }
        Ok(sums)
    }
}

/// What a lane needs of each interior, flat for gathers.
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
    weight: Vec<u32>,
    /// The relabelling: the interior's lowest open column...
    low: Vec<u32>,
    /// ...and the mask of its columns after relabelling.
    span: Vec<u32>,
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
    fn new(interiors: &[Interior], weights: &[u32]) -> Tables {
        let mut t = Tables {
            entries: vec![0u32; interiors.len() * 32],
            pen: Vec::with_capacity(interiors.len()),
            last: Vec::with_capacity(interiors.len()),
            weight: weights.to_vec(),
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
mod avx512 {
    use super::{CountOverflow, Job, Sums, Tables};
    use core::arch::x86_64::*;

    const LANES: usize = 16;
    const GROUPS: usize = 2;
    /// Lane counters are added into u64 totals this often (in steps), long
    /// before a 32-bit lane counter could wrap (at most 2 nodes per step).
    const FLUSH_EVERY: u32 = 1 << 20;

    /// Sixteen lanes: one search each. Two groups run interleaved, so
    /// the CPU overlaps one group's gathers with the other's arithmetic
    /// (each step of a group depends on its previous step).
    #[derive(Clone, Copy)]
    struct Group {
        /// Free row, and the row the job started at.
        k: __m512i,
        k0: __m512i,
        /// The job's interior's first entry.
        base: __m512i,
        /// Candidates left in row k.
        bm: __m512i,
        ld: __m512i,
        rd: __m512i,
        col: __m512i,
        /// Entry of row k.
        cur: __m512i,
        pen: __m512i,
        last: __m512i,
        weight: __m512i,
        nodes: __m512i,
        sols: __m512i,
        active: __mmask16,
        /// Where this group's stacks start (32 rows per lane).
        stack: *mut i32,
    }

    /// A group's lane state in memory, while lanes take new jobs.
    #[derive(Default)]
    struct Spill {
        k: [u32; LANES],
        k0: [u32; LANES],
        base: [u32; LANES],
        bm: [u32; LANES],
        ld: [u32; LANES],
        rd: [u32; LANES],
        col: [u32; LANES],
        cur: [u32; LANES],
        pen: [u32; LANES],
        last: [u32; LANES],
        weight: [u32; LANES],
    }

    #[target_feature(enable = "avx512f")]
    fn load(a: &[u32; LANES]) -> __m512i {
        // SAFETY: reads exactly 64 bytes from a 64-byte array.
        unsafe { _mm512_loadu_si512(a.as_ptr().cast()) }
    }

    #[target_feature(enable = "avx512f")]
    fn store(a: &mut [u32; LANES], v: __m512i) {
        // SAFETY: writes exactly 64 bytes into a 64-byte array.
        unsafe { _mm512_storeu_si512(a.as_mut_ptr().cast(), v) }
    }

    #[target_feature(enable = "avx512f")]
    fn lane_sum(v: __m512i) -> u128 {
        let mut a = [0u32; LANES];
        store(&mut a, v);
        a.iter().map(|&x| u128::from(x)).sum()
    }

    impl Group {
        #[target_feature(enable = "avx512f")]
        fn spill(&self) -> Spill {
            let mut s = Spill::default();
            for (a, v) in [
                (&mut s.k, self.k),
                (&mut s.k0, self.k0),
                (&mut s.base, self.base),
                (&mut s.bm, self.bm),
                (&mut s.ld, self.ld),
                (&mut s.rd, self.rd),
                (&mut s.col, self.col),
                (&mut s.cur, self.cur),
                (&mut s.pen, self.pen),
                (&mut s.last, self.last),
                (&mut s.weight, self.weight),
            ] {
                store(a, v);
            }
            s
        }

        #[target_feature(enable = "avx512f")]
        fn reload(&mut self, s: &Spill) {
            (self.k, self.k0, self.base) = (load(&s.k), load(&s.k0), load(&s.base));
            (self.bm, self.ld, self.rd) = (load(&s.bm), load(&s.ld), load(&s.rd));
            (self.col, self.cur, self.pen) = (load(&s.col), load(&s.cur), load(&s.pen));
            (self.last, self.weight) = (load(&s.last), load(&s.weight));
        }

        /// Gives each lane in `lanes` the next job, or retires it. Adds the
        /// lane counters into `sums` first.
        #[target_feature(enable = "avx512f")]
        fn refill(
            &mut self,
            t: &Tables,
            jobs: &[Job],
            next: &mut usize,
            lanes: __mmask16,
            sums: &mut Sums,
        ) -> Result<(), CountOverflow> {
            self.flush(sums)?;
            let mut s = self.spill();
            for lane in 0..LANES {
                if lanes >> lane & 1 == 0 {
                    continue;
                }
                let Some(job) = jobs.get(*next) else {
                    self.active &= !(1 << lane);
                    continue;
                };
                *next += 1;
                self.active |= 1 << lane;
                let i = job.interior as usize;
                let (row, lo, on) = (u32::from(job.start.row), t.low[i], t.span[i]);
                // The start's masks in the interior's own columns; bits off
                // its columns never come back on (the lane never backs above
                // its start).
                let (l, d, r) = (
                    job.start.l >> lo & on,
                    job.start.d >> lo & on,
                    job.start.r >> lo & on,
                );
                let entry = t.entries[i * 32 + row as usize];
                s.k[lane] = row;
                s.k0[lane] = row;
                s.base[lane] = (i * 32) as u32;
                s.ld[lane] = l;
                s.rd[lane] = r;
                s.col[lane] = d;
                s.cur[lane] = entry;
                s.bm[lane] = entry & ((1 << 30) - 1) & !(l | d | r);
                s.pen[lane] = t.pen[i];
                s.last[lane] = t.last[i];
                s.weight[lane] = t.weight[i];
            }
            self.reload(&s);
            Ok(())
        }

        #[target_feature(enable = "avx512f")]
        fn flush(&mut self, sums: &mut Sums) -> Result<(), CountOverflow> {
            sums.add(lane_sum(self.sols), lane_sum(self.nodes))?;
            self.sols = _mm512_setzero_si512();
            self.nodes = _mm512_setzero_si512();
            Ok(())
        }

        /// One step of every lane; returns the lanes whose job is done.
        #[inline]
        #[target_feature(enable = "avx512f")]
        fn step(&mut self, entries: *const i32) -> __mmask16 {
            let zero = _mm512_setzero_si512();
            let one = _mm512_set1_epi32(1);
            let low30 = _mm512_set1_epi32((1 << 30) - 1);
            let lane_off = _mm512_setr_epi32(
                0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448, 480,
            );
            let g = self;

            // Lanes out of candidates back up a row first: pop the row's
            // candidate set (its lowest bit is the queen that was placed),
            // take the queen off (rotations undo exactly) and keep the
            // candidates above it. Every other lane looks one row down. One
            // gather serves both: the row above's entry, or the row below's.
            let empty = _mm512_mask_testn_epi32_mask(g.active, g.bm, g.bm);
            let done = _mm512_mask_cmpeq_epi32_mask(empty, g.k, g.k0);
            let back = empty & !done;
            let live = g.active & !done;
            let kk = _mm512_mask_sub_epi32(_mm512_add_epi32(g.k, one), back, g.k, one);
            // SAFETY: base + kk indexes this lane's interior's 32 entries.
            let ent = unsafe {
                _mm512_mask_i32gather_epi32::<4>(zero, live, _mm512_add_epi32(g.base, kk), entries)
            };
            // SAFETY: lane_off + kk < 16 * 32 (kk < 32): this group's stacks.
            let popped = unsafe {
                _mm512_mask_i32gather_epi32::<4>(
                    zero,
                    back,
                    _mm512_add_epi32(lane_off, kk),
                    g.stack,
                )
            };
            let pbit = _mm512_and_si512(popped, _mm512_sub_epi32(zero, popped));
            let psh = _mm512_srli_epi32::<30>(ent);
            g.col = _mm512_mask_xor_epi32(g.col, back, g.col, pbit);
            g.ld = _mm512_mask_xor_epi32(g.ld, back, _mm512_rorv_epi32(g.ld, psh), pbit);
            g.rd = _mm512_mask_xor_epi32(g.rd, back, _mm512_rolv_epi32(g.rd, psh), pbit);
            g.bm = _mm512_mask_xor_epi32(g.bm, back, popped, pbit);
            g.k = _mm512_mask_mov_epi32(g.k, back, kk);
            // The entry of the row below: gathered, or (after backing up)
            // the row the lane just left.
            let below = _mm512_mask_blend_epi32(back, ent, g.cur);
            g.cur = _mm512_mask_mov_epi32(g.cur, back, ent);

            // Then every lane with a candidate places it (lowest first), in
            // the same step, so backing up costs no step of its own.
            let has = _mm512_mask_test_epi32_mask(live, g.bm, g.bm);
            let bit = _mm512_and_si512(g.bm, _mm512_sub_epi32(zero, g.bm));
            let sh = _mm512_srli_epi32::<30>(g.cur);
            let nl = _mm512_rolv_epi32(_mm512_or_si512(g.ld, bit), sh);
            let nr = _mm512_rorv_epi32(_mm512_or_si512(g.rd, bit), sh);
            let nc = _mm512_or_si512(g.col, bit);
            let attacked = _mm512_ternarylogic_epi32::<0xFE>(nl, nr, nc);
            g.nodes = _mm512_mask_add_epi32(g.nodes, has, g.nodes, one);

            // A queen in the second-to-last row: the last row has at most
            // one square left; count it here instead of moving down.
            let at_pen = _mm512_mask_cmpeq_epi32_mask(has, g.k, g.pen);
            let fits =
                _mm512_mask_test_epi32_mask(at_pen, _mm512_andnot_si512(attacked, g.last), low30);
            g.nodes = _mm512_mask_add_epi32(g.nodes, fits, g.nodes, one);
            g.sols = _mm512_mask_add_epi32(g.sols, fits, g.sols, g.weight);

            // The others push the row's candidates (placed bit included)
            // and move down a row.
            let push = has & !at_pen;
            // SAFETY: lane_off + k < 16 * 32 (k < 32): this group's stacks.
            unsafe {
                _mm512_mask_i32scatter_epi32::<4>(
                    g.stack,
                    push,
                    _mm512_add_epi32(lane_off, g.k),
                    g.bm,
                );
            }
            g.bm = _mm512_mask_xor_epi32(g.bm, has, g.bm, bit);
            g.k = _mm512_mask_add_epi32(g.k, push, g.k, one);
            g.ld = _mm512_mask_mov_epi32(g.ld, push, nl);
            g.rd = _mm512_mask_mov_epi32(g.rd, push, nr);
            g.col = _mm512_mask_mov_epi32(g.col, push, nc);
            g.bm = _mm512_mask_and_epi32(g.bm, push, _mm512_andnot_si512(attacked, below), low30);
            g.cur = _mm512_mask_mov_epi32(g.cur, push, below);
            done
        }
    }

    /// # Safety
    /// The CPU must support AVX-512F; every job's interior must fit the
    /// lanes and its start leave three free rows.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn count(t: &Tables, jobs: &[Job]) -> Result<Sums, CountOverflow> {
        let mut sums = Sums::default();
        let mut stacks = vec![0i32; GROUPS * LANES * 32];
        let entries = t.entries.as_ptr().cast::<i32>();
        let zero = _mm512_setzero_si512();
        let fresh = |stack: *mut i32| Group {
            k: zero,
            k0: zero,
            base: zero,
            bm: zero,
            ld: zero,
            rd: zero,
            col: zero,
            cur: zero,
            pen: zero,
            last: zero,
            weight: zero,
            nodes: zero,
            sols: zero,
            active: 0,
            stack,
        };
        let mut groups: [Group; GROUPS] = core::array::from_fn(|_| fresh(core::ptr::null_mut()));
        for (g, c) in groups.iter_mut().zip(stacks.chunks_mut(LANES * 32)) {
            g.stack = c.as_mut_ptr();
        }
        let mut next = 0usize;
        for g in &mut groups {
            g.refill(t, jobs, &mut next, 0xFFFF, &mut sums)?;
        }
        let mut steps = 0u32;
        while groups.iter().any(|g| g.active != 0) {
            let mut done = [0 as __mmask16; GROUPS];
            for (g, d) in groups.iter_mut().zip(&mut done) {
                *d = g.step(entries);
            }
            for (g, d) in groups.iter_mut().zip(done) {
                if d != 0 {
                    g.refill(t, jobs, &mut next, d, &mut sums)?;
                }
            }
            steps += 1;
            if steps == FLUSH_EVERY {
                for g in &mut groups {
                    g.flush(&mut sums)?;
                }
                steps = 0;
            }
        }
        for g in &mut groups {
            g.flush(&mut sums)?;
        }
        Ok(sums)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::RingJobs;
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

    #[test]
    fn lanes_cover_ring_interiors_up_to_eighteen() {
        for n in [8, 13, 17, 18] {
            let rj = RingJobs::new(Size::new(n).unwrap());
            assert!(rj.interiors.iter().all(fits_lanes), "N={n}");
        }
        let rj = RingJobs::new(Size::new(19).unwrap());
        assert!(!rj.interiors.iter().all(fits_lanes));
        assert_eq!(
            Batch::new(&rj.interiors, &rj.weights).paths(),
            vec![Path::Scalar]
        );
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
