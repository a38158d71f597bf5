//! Eight 32-bit lanes per AVX2 register, diagonals rotated as in the
//! AVX-512 kernel: for batches whose interiors all [`super::fits_lanes`].
//!
//! Rotation makes backing up exact from the row's candidate set alone, so
//! a lane's stack holds one word per row: pop is eight scalar loads, push
//! eight scalar stores (AVX2 has no scatter), instead of the wide kernel's
//! transposed four-word records. AVX2 has no rotate either: it is two
//! variable shifts and an or. Scalar loads rather than gathers, for the
//! stack and the row table alike: measured faster on Zen 3 (a gather waits
//! longer, and a stack word was often stored a step or two before).

use super::{CountOverflow, Counted, Job, Tables};
use core::arch::x86_64::*;

const LANES: usize = 8;
/// Groups stepped interleaved, so one group's loads overlap another's
/// arithmetic (each step of a group depends on its previous step).
const GROUPS: usize = 2;
const _: () = assert!(GROUPS == 2, "run steps two groups");
/// Stack rows per lane.
const ROWS: usize = 32;
/// Lane counters are added into the sums this often (in steps), long
/// before a 32-bit lane counter could wrap (at most 2 nodes per step).
const FLUSH_EVERY: u32 = 1 << 20;

/// Eight lanes, one search each.
#[derive(Clone, Copy)]
struct Group {
    /// Free row, and the row the job started at.
    k: __m256i,
    k0: __m256i,
    /// The job's interior's first entry.
    base: __m256i,
    /// Candidates left in row k.
    bm: __m256i,
    ld: __m256i,
    rd: __m256i,
    col: __m256i,
    /// Entry of row k.
    cur: __m256i,
    pen: __m256i,
    last: __m256i,
    nodes: __m256i,
    sols: __m256i,
    /// Lanes holding a job, as an all-ones/all-zeros mask per lane.
    active: __m256i,
    /// This group's stacks: `LANES * ROWS` words.
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
    active: [u32; LANES],
}

#[target_feature(enable = "avx2")]
fn load(a: &[u32; LANES]) -> __m256i {
    // SAFETY: reads exactly 32 bytes from a 32-byte array.
    unsafe { _mm256_loadu_si256(a.as_ptr().cast()) }
}

#[target_feature(enable = "avx2")]
fn store(a: &mut [u32; LANES], v: __m256i) {
    // SAFETY: writes exactly 32 bytes into a 32-byte array.
    unsafe { _mm256_storeu_si256(a.as_mut_ptr().cast(), v) }
}

/// Lanes set in a mask vector, as bits.
#[target_feature(enable = "avx2")]
fn bits(m: __m256i) -> u32 {
    _mm256_movemask_ps(_mm256_castsi256_ps(m)) as u32
}

/// `if m { a } else { b }` per lane.
#[target_feature(enable = "avx2")]
fn pick(m: __m256i, a: __m256i, b: __m256i) -> __m256i {
    _mm256_blendv_epi8(b, a, m)
}

/// The other half of a rotation by `s` (0..=3): `-s mod 32`. Masked, so
/// the compiler knows the count is below 32 and adds no zeroing of its own
/// (a count of 0 gives `x | x`).
#[inline]
#[target_feature(enable = "avx2")]
fn other(s: __m256i) -> __m256i {
    _mm256_and_si256(
        _mm256_sub_epi32(_mm256_setzero_si256(), s),
        _mm256_set1_epi32(31),
    )
}

/// `x` rotated left by `s` per lane; `t` is [`other`] of `s`.
#[inline]
#[target_feature(enable = "avx2")]
fn rol(x: __m256i, s: __m256i, t: __m256i) -> __m256i {
    _mm256_or_si256(_mm256_sllv_epi32(x, s), _mm256_srlv_epi32(x, t))
}

/// `x` rotated right by `s` per lane; `t` is [`other`] of `s`.
#[inline]
#[target_feature(enable = "avx2")]
fn ror(x: __m256i, s: __m256i, t: __m256i) -> __m256i {
    _mm256_or_si256(_mm256_srlv_epi32(x, s), _mm256_sllv_epi32(x, t))
}

/// The eight lanes as four 64-bit words (two lanes each): fewer moves out
/// of the vector registers than one per lane.
#[inline]
#[target_feature(enable = "avx2")]
fn halves(v: __m256i) -> [u64; 4] {
    let (lo, hi) = (_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    [
        _mm_cvtsi128_si64(lo) as u64,
        _mm_extract_epi64::<1>(lo) as u64,
        _mm_cvtsi128_si64(hi) as u64,
        _mm_extract_epi64::<1>(hi) as u64,
    ]
}

/// `table[at]` per lane, by scalar loads (shorter latency than a gather).
///
/// # Safety
/// Every offset must index `table`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn lookup(table: *const i32, at: __m256i) -> __m256i {
    let [a, b, c, d] = halves(at);
    // SAFETY: in bounds (caller).
    let w = |o: u64| unsafe { *table.add(o as u32 as usize) };
    let h = |o: u64| unsafe { *table.add((o >> 32) as usize) };
    _mm256_setr_epi32(w(a), h(a), w(b), h(b), w(c), h(c), w(d), h(d))
}

impl Group {
    /// Every lane's stack word at `at` (offsets into the group's stacks).
    ///
    /// # Safety
    /// Every offset must be below `LANES * ROWS`.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn pop(&self, at: __m256i) -> __m256i {
        // SAFETY: in bounds (caller).
        unsafe { lookup(self.stack, at) }
    }

    #[target_feature(enable = "avx2")]
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
            (&mut s.active, self.active),
        ] {
            store(a, v);
        }
        s
    }

    #[target_feature(enable = "avx2")]
    fn reload(&mut self, s: &Spill) {
        (self.k, self.k0, self.base) = (load(&s.k), load(&s.k0), load(&s.base));
        (self.bm, self.ld, self.rd) = (load(&s.bm), load(&s.ld), load(&s.rd));
        (self.col, self.cur, self.pen) = (load(&s.col), load(&s.cur), load(&s.pen));
        self.last = load(&s.last);
        self.active = load(&s.active);
    }

    /// Gives each lane in `lanes` (bits) the next job, or retires it. Adds
    /// the lane counters into `sums` first.
    #[target_feature(enable = "avx2")]
    fn refill(
        &mut self,
        t: &Tables,
        jobs: &[Job],
        next: &mut usize,
        lanes: u32,
        sums: &mut Counted,
    ) -> Result<(), CountOverflow> {
        self.flush(sums)?;
        let mut s = self.spill();
        for lane in 0..LANES {
            if lanes >> lane & 1 == 0 {
                continue;
            }
            let Some(job) = jobs.get(*next) else {
                s.active[lane] = 0;
                // A retired lane idles on row 0 of interior 0: the
                // loads and stores it still makes stay in bounds.
                (s.k[lane], s.k0[lane], s.base[lane], s.bm[lane]) = (0, 0, 0, 0);
                continue;
            };
            *next += 1;
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
            s.active[lane] = u32::MAX;
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
        }
        self.reload(&s);
        Ok(())
    }

    /// [`Group::refill`] by value, out of line: the caller's group stays
    /// in registers.
    #[inline(never)]
    #[target_feature(enable = "avx2")]
    fn refilled(
        mut self,
        t: &Tables,
        jobs: &[Job],
        next: &mut usize,
        lanes: u32,
        sums: &mut Counted,
    ) -> Result<Group, CountOverflow> {
        self.refill(t, jobs, next, lanes, sums)?;
        Ok(self)
    }

    #[target_feature(enable = "avx2")]
    fn flush(&mut self, sums: &mut Counted) -> Result<(), CountOverflow> {
        let (mut sols, mut nodes, mut base) = ([0u32; LANES], [0u32; LANES], [0u32; LANES]);
        store(&mut sols, self.sols);
        store(&mut nodes, self.nodes);
        store(&mut base, self.base);
        sums.add_lanes(&sols, &nodes, &base)?;
        self.sols = _mm256_setzero_si256();
        self.nodes = _mm256_setzero_si256();
        Ok(())
    }

    /// One step of every lane; returns the lanes whose job is done (bits).
    ///
    /// # Safety
    /// `entries` must hold 32 entries for every interior a lane is on, and
    /// the group's stack `LANES * ROWS` words.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn step(&mut self, entries: *const i32) -> u32 {
        let zero = _mm256_setzero_si256();
        let one = _mm256_set1_epi32(1);
        let low30 = _mm256_set1_epi32((1 << 30) - 1);
        let lane_off = _mm256_setr_epi32(0, 32, 64, 96, 128, 160, 192, 224);
        let g = self;

        // Lanes out of candidates back up a row first: pop the row's
        // candidate set (its lowest bit is the queen that was placed),
        // take the queen off (rotations undo exactly) and keep the
        // candidates above it. Every other lane looks one row down. One
        // lookup serves both: the row above's entry, or the row below's.
        let empty = _mm256_and_si256(g.active, _mm256_cmpeq_epi32(g.bm, zero));
        let done = _mm256_and_si256(empty, _mm256_cmpeq_epi32(g.k, g.k0));
        let back = _mm256_andnot_si256(done, empty);
        let live = _mm256_andnot_si256(done, g.active);
        // back is all ones (-1) where a lane backs up: k - 1 there, else k + 1.
        let kk = _mm256_add_epi32(_mm256_add_epi32(g.k, one), _mm256_add_epi32(back, back));
        // For every lane: its kk stays within its interior's 32 entries
        // and its 32 stack rows (k <= pen <= 30, retired lanes sit on row 0),
        // so lanes that do not need a value read a harmless one.
        // SAFETY: as above.
        let (ent, popped) = unsafe {
            (
                lookup(entries, _mm256_add_epi32(g.base, kk)),
                g.pop(_mm256_add_epi32(lane_off, kk)),
            )
        };
        let pbit = _mm256_and_si256(popped, _mm256_sub_epi32(zero, popped));
        let psh = _mm256_srli_epi32::<30>(ent);
        let pt = other(psh);
        let bpbit = _mm256_and_si256(back, pbit);
        g.col = _mm256_xor_si256(g.col, bpbit);
        g.ld = pick(back, _mm256_xor_si256(ror(g.ld, psh, pt), pbit), g.ld);
        g.rd = pick(back, _mm256_xor_si256(rol(g.rd, psh, pt), pbit), g.rd);
        g.bm = pick(back, _mm256_xor_si256(popped, pbit), g.bm);
        g.k = _mm256_add_epi32(g.k, back);
        // The entry of the row below: looked up, or (after backing up) the
        // row the lane just left.
        let below = pick(back, g.cur, ent);
        g.cur = pick(back, ent, g.cur);

        // Then every lane with a candidate places it (lowest first), in
        // the same step, so backing up costs no step of its own.
        let has = _mm256_andnot_si256(_mm256_cmpeq_epi32(g.bm, zero), live);
        let bit = _mm256_and_si256(g.bm, _mm256_sub_epi32(zero, g.bm));
        let sh = _mm256_srli_epi32::<30>(g.cur);
        let st = other(sh);
        let nl = rol(_mm256_or_si256(g.ld, bit), sh, st);
        let nr = ror(_mm256_or_si256(g.rd, bit), sh, st);
        let nc = _mm256_or_si256(g.col, bit);
        let attacked = _mm256_or_si256(_mm256_or_si256(nl, nr), nc);
        g.nodes = _mm256_sub_epi32(g.nodes, has);

        // A queen in the second-to-last row: the last row has at most one
        // square left; count it here instead of moving down.
        let at_pen = _mm256_and_si256(has, _mm256_cmpeq_epi32(g.k, g.pen));
        let left = _mm256_andnot_si256(attacked, g.last);
        let fits = _mm256_andnot_si256(_mm256_cmpeq_epi32(left, zero), at_pen);
        g.nodes = _mm256_sub_epi32(g.nodes, fits);
        g.sols = _mm256_sub_epi32(g.sols, fits);

        // Every lane writes its row's candidates (placed queen still in)
        // at row k; for a lane that does not descend that row is dead, so
        // no mask is needed.
        // Two lanes per 64-bit move out of the vector registers.
        let at = _mm256_add_epi32(lane_off, g.k);
        let (at, val) = (halves(at), halves(g.bm));
        for (a, v) in at.into_iter().zip(val) {
            // SAFETY: lane_off + k < LANES * ROWS (k < 32): this group's stacks.
            unsafe {
                *g.stack.add(a as u32 as usize) = v as i32;
                *g.stack.add((a >> 32) as usize) = (v >> 32) as i32;
            }
        }

        let push = _mm256_andnot_si256(at_pen, has);
        g.bm = _mm256_xor_si256(g.bm, _mm256_and_si256(has, bit));
        g.k = _mm256_sub_epi32(g.k, push);
        g.ld = pick(push, nl, g.ld);
        g.rd = pick(push, nr, g.rd);
        g.col = pick(push, nc, g.col);
        let open = _mm256_and_si256(_mm256_andnot_si256(attacked, below), low30);
        g.bm = pick(push, open, g.bm);
        g.cur = pick(push, below, g.cur);
        bits(done)
    }
}

/// # Safety
/// The CPU must support AVX2; every job's interior must fit the lanes and
/// its start leave three free rows.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn count(
    t: &Tables,
    jobs: &[Job],
    sums: &mut Counted,
) -> Result<(), CountOverflow> {
    if jobs.is_empty() {
        return Ok(());
    }
    let mut stacks = vec![0i32; GROUPS * LANES * ROWS];
    let entries = t.entries.as_ptr().cast::<i32>();
    let zero = _mm256_setzero_si256();
    let mut groups: [Group; GROUPS] = core::array::from_fn(|_| Group {
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
        nodes: zero,
        sols: zero,
        active: zero,
        stack: core::ptr::null_mut(),
    });
    for (g, c) in groups.iter_mut().zip(stacks.chunks_mut(LANES * ROWS)) {
        g.stack = c.as_mut_ptr();
    }
    let mut next = 0usize;
    for g in &mut groups {
        g.refill(t, jobs, &mut next, 0xFF, sums)?;
    }
    let [a, b] = groups;
    // SAFETY: the tables hold every interior's 32 entries (and jobs is
    // not empty, so interior 0 exists for retired lanes); the stacks were
    // sized above.
    unsafe { run(t, jobs, sums, &mut next, a, b, entries) }
}

/// Steps two filled groups in turn until every job is counted. The groups
/// are locals passed by value (not an array), so their hot state can stay
/// in registers.
///
/// # Safety
/// As [`Group::step`].
#[target_feature(enable = "avx2")]
unsafe fn run(
    t: &Tables,
    jobs: &[Job],
    sums: &mut Counted,
    next: &mut usize,
    mut a: Group,
    mut b: Group,
    entries: *const i32,
) -> Result<(), CountOverflow> {
    let mut steps = 0u32;
    // Lanes only retire at a refill, so activity is checked there.
    while bits(_mm256_or_si256(a.active, b.active)) != 0 {
        // SAFETY: as the caller's.
        let (da, db) = unsafe { (a.step(entries), b.step(entries)) };
        if da | db != 0 {
            if da != 0 {
                a = a.refilled(t, jobs, next, da, sums)?;
            }
            if db != 0 {
                b = b.refilled(t, jobs, next, db, sums)?;
            }
            if bits(_mm256_or_si256(a.active, b.active)) == 0 {
                break;
            }
        }
        steps += 1;
        if steps == FLUSH_EVERY {
            a.flush(sums)?;
            b.flush(sums)?;
            steps = 0;
        }
    }
    a.flush(sums)?;
    b.flush(sums)
}
