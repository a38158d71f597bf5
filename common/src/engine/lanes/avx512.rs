//! Sixteen 32-bit lanes per AVX-512 register, diagonals rotated (see the
//! parent module): for interiors that [`super::fits_lanes`].
use super::{CountOverflow, Counted, Job, Tables};
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
        sums: &mut Counted,
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
    fn flush(&mut self, sums: &mut Counted) -> Result<(), CountOverflow> {
        let (mut sols, mut nodes, mut base) = ([0u32; LANES], [0u32; LANES], [0u32; LANES]);
        store(&mut sols, self.sols);
        store(&mut nodes, self.nodes);
        store(&mut base, self.base);
        sums.add_lanes(&sols, &nodes, &base)?;
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
            _mm512_mask_i32gather_epi32::<4>(zero, back, _mm512_add_epi32(lane_off, kk), g.stack)
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
            _mm512_mask_i32scatter_epi32::<4>(g.stack, push, _mm512_add_epi32(lane_off, g.k), g.bm);
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
pub(super) unsafe fn count(
    t: &Tables,
    jobs: &[Job],
    sums: &mut Counted,
) -> Result<(), CountOverflow> {
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
        g.refill(t, jobs, &mut next, 0xFFFF, sums)?;
    }
    let mut steps = 0u32;
    while groups.iter().any(|g| g.active != 0) {
        let mut done = [0 as __mmask16; GROUPS];
        for (g, d) in groups.iter_mut().zip(&mut done) {
            *d = g.step(entries);
        }
        for (g, d) in groups.iter_mut().zip(done) {
            if d != 0 {
                g.refill(t, jobs, &mut next, d, sums)?;
            }
        }
        steps += 1;
        if steps == FLUSH_EVERY {
            for g in &mut groups {
                g.flush(sums)?;
            }
            steps = 0;
        }
    }
    for g in &mut groups {
        g.flush(sums)?;
    }
    Ok(())
}
