//! Eight 32-bit lanes per register, diagonals rotated, not shifted: for
//! batches whose interiors all [`super::fits_lanes`].
//!
//! Rotation makes backing up exact from the row's candidate set alone, so
//! a lane's stack holds one record per row. Stack and table are read and
//! written by scalar loads and stores: AVX2 has no scatter and a slow
//! gather, and AVX-512's gathers and scatters were slower still on a Zen 4
//! (an earlier kernel used them). In the AVX2 build a rotation is two
//! variable shifts.
//!
//! Each step a lane needs one 64-bit word, and the stack and the row table
//! share its layout, so one load per lane serves both: a lane that backs
//! up pops its stack record of the row above, any other lane reads its
//! current row from the table. Either way the low half is the row's
//! candidates (or open columns) with the gap to the next free row in bits
//! 30..32, and the high half the open columns of the next free row, with
//! bit 31 set on the second-to-last free row, whose next row (the last) is
//! counted inline.
//!
//! The kernel is built twice, for AVX2 and for AVX-512 ([`avx2`],
//! [`avx512`]): the same source, and on a CPU with AVX-512 the compiler
//! has 32 vector registers, rotates and masks to use (on a Zen 4 the
//! narrow kernel's AVX-512 build is 1.26× its AVX2 build at N=17, 2.72 s
//! against 3.43 s, and the wide kernel's about 1.2×: 384 against 314 M
//! nodes/s calibrating `plan 21 --estimate`).

/// The kernel, for the target features `$features` (AVX2 at least).
macro_rules! kernel {
    ($features:literal) => {
        crate::lanes::x86_ops::ops!($features);
        use crate::lanes::{CountOverflow, Counted, Job, Tables};
        use core::arch::x86_64::*;

        const LANES: usize = 8;
        /// Groups stepped interleaved, so one group's loads overlap another's
        /// arithmetic (each step of a group depends on its previous step).
        /// One group alone is 5% slower in the AVX2 build (which has too few
        /// registers for two and keeps part of them in memory) and 30% in
        /// the AVX-512 build, at N=16 on a Zen 4.
        const GROUPS: usize = 2;
        /// Stack records per lane: rows 0..32, and below them row -1 (a job
        /// that starts at row 0 has its end marker there).
        const ROWS: usize = 33;
        /// Words of every group's stacks, at the start of the kernel's memory.
        const STACKS: usize = GROUPS * LANES * ROWS;
        /// Open columns (and candidates) sit below bit 30.
        const LOW30: u32 = (1 << 30) - 1;
        /// Marks the second-to-last free row in a record's high half.
        const PEN: u32 = 1 << 31;
        /// The interior of a lane that is out of jobs.
        const PARKED: u32 = u32::MAX;

        crate::lanes::x86_ops::group!($features;
            /// Where each lane's stack record of its current row k is.
            at,
            /// From there to the table record of row k.
            to_table,
            /// Candidates left in row k.
            bm,
            ld,
            rd,
            col,
            /// Nodes (low 16 bits) and completions (high 16 bits), counted down.
            tally,
        );

        /// Which job each lane of a group is on: read only between steps.
        struct Seats {
            /// Each lane's interior (for its counters; [`PARKED`] for a lane out
            /// of jobs).
            interior: [u32; LANES],
            /// Each lane's stack's row -1.
            stack: [u32; LANES],
        }

        /// The other half of a rotation by `s` (0..=3): `-s mod 32`. Masked, so
        /// the compiler knows the count is below 32 and adds no zeroing of its own
        /// (a count of 0 gives `x | x`).
        #[inline]
        #[target_feature(enable = $features)]
        fn other(s: __m256i) -> __m256i {
            _mm256_and_si256(
                _mm256_sub_epi32(_mm256_setzero_si256(), s),
                _mm256_set1_epi32(31),
            )
        }

        /// `x` rotated left by `s` per lane; `t` is [`other`] of `s`.
        #[inline]
        #[target_feature(enable = $features)]
        fn rol(x: __m256i, s: __m256i, t: __m256i) -> __m256i {
            _mm256_or_si256(_mm256_sllv_epi32(x, s), _mm256_srlv_epi32(x, t))
        }

        /// `x` rotated right by `s` per lane; `t` is [`other`] of `s`.
        #[inline]
        #[target_feature(enable = $features)]
        fn ror(x: __m256i, s: __m256i, t: __m256i) -> __m256i {
            _mm256_or_si256(_mm256_srlv_epi32(x, s), _mm256_sllv_epi32(x, t))
        }

        /// The eight lanes' offsets as four 64-bit words (two lanes each): fewer
        /// moves out of the vector registers than one per lane.
        #[inline]
        #[target_feature(enable = $features)]
        fn halves(v: __m256i) -> [u64; 4] {
            let (lo, hi) = (_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
            [
                _mm_cvtsi128_si64(lo) as u64,
                _mm_extract_epi64::<1>(lo) as u64,
                _mm_cvtsi128_si64(hi) as u64,
                _mm_extract_epi64::<1>(hi) as u64,
            ]
        }

        /// The records at `at` per lane, split into their low and high halves.
        ///
        /// # Safety
        /// Every offset must index `mem`.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn read(mem: *const u64, at: __m256i) -> (__m256i, __m256i) {
            let [a, b, c, d] = halves(at);
            // SAFETY: in bounds (caller).
            let two = |o: u64| unsafe {
                let x = _mm_loadl_epi64(mem.add(o as u32 as usize).cast());
                _mm_castpd_si128(_mm_loadh_pd(
                    _mm_castsi128_pd(x),
                    mem.add((o >> 32) as usize).cast(),
                ))
            };
            // Lanes 0, 1, 4, 5 and lanes 2, 3, 6, 7, a record each.
            let p = _mm256_castsi256_ps(_mm256_set_m128i(two(c), two(a)));
            let q = _mm256_castsi256_ps(_mm256_set_m128i(two(d), two(b)));
            (
                _mm256_castps_si256(_mm256_shuffle_ps::<0b10_00_10_00>(p, q)),
                _mm256_castps_si256(_mm256_shuffle_ps::<0b11_01_11_01>(p, q)),
            )
        }

        /// Writes the records `(low, high)` at `at` per lane.
        ///
        /// # Safety
        /// Every offset must index `mem`.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn write(mem: *mut u64, at: __m256i, low: __m256i, high: __m256i) {
            let [a, b, c, d] = halves(at);
            // Lanes 0, 1 | 4, 5 and lanes 2, 3 | 6, 7, a record each.
            let (p, q) = (
                _mm256_unpacklo_epi32(low, high),
                _mm256_unpackhi_epi32(low, high),
            );
            // SAFETY: in bounds (caller).
            let two = |o: u64, x: __m128i| unsafe {
                let x = _mm_castsi128_pd(x);
                _mm_storel_pd(mem.add(o as u32 as usize).cast(), x);
                _mm_storeh_pd(mem.add((o >> 32) as usize).cast(), x);
            };
            two(a, _mm256_castsi256_si128(p));
            two(b, _mm256_castsi256_si128(q));
            two(c, _mm256_extracti128_si256::<1>(p));
            two(d, _mm256_extracti128_si256::<1>(q));
        }

        impl Group {
            /// One step of every lane; returns the lanes whose job is done (bits).
            ///
            /// # Safety
            /// `mem` must hold every group's stacks and the records of every
            /// interior a lane is on.
            #[inline]
            #[target_feature(enable = $features)]
            unsafe fn step(&mut self, mem: *mut u64) -> u32 {
                let zero = _mm256_setzero_si256();
                let low30 = _mm256_set1_epi32(LOW30 as i32);
                let g = self;

                // Lanes out of candidates back up a row first: pop the row's
                // record (the lowest candidate is the queen that was placed),
                // take the queen off (rotations undo exactly) and keep the
                // candidates above it. Every other lane reads its row's record
                // from the table: one load per lane either way. A lane that pops
                // its job's end marker is done: the marker has no queen to take
                // off and no candidate, so the lane changes nothing.
                let back = _mm256_cmpeq_epi32(g.bm, zero);
                // back is all ones (-1) where a lane backs up.
                g.at = _mm256_add_epi32(g.at, back);
                let at = pick(back, g.at, _mm256_add_epi32(g.at, g.to_table));
                // Every lane's record is in bounds: a lane stays within its
                // interior's 32 records and its stack's rows -1..32 (k <= pen <=
                // 30), so lanes that do not need a value read a harmless one.
                // SAFETY: as above.
                let (low, below) = unsafe { read(mem, at) };
                let sh = _mm256_srli_epi32::<30>(low);
                let st = other(sh);
                let popped = _mm256_and_si256(low, low30);
                let done = _mm256_and_si256(back, _mm256_cmpeq_epi32(popped, zero));
                let pbit = _mm256_and_si256(popped, _mm256_sub_epi32(zero, popped));
                g.col = _mm256_xor_si256(g.col, _mm256_and_si256(back, pbit));
                g.ld = pick(back, _mm256_xor_si256(ror(g.ld, sh, st), pbit), g.ld);
                g.rd = pick(back, _mm256_xor_si256(rol(g.rd, sh, st), pbit), g.rd);
                g.bm = pick(back, _mm256_xor_si256(popped, pbit), g.bm);

                // Then every lane with a candidate places it (lowest first), in
                // the same step, so backing up costs no step of its own.
                let has = _mm256_xor_si256(_mm256_cmpeq_epi32(g.bm, zero), _mm256_set1_epi32(-1));
                let bit = _mm256_and_si256(g.bm, _mm256_sub_epi32(zero, g.bm));
                let nl = rol(_mm256_or_si256(g.ld, bit), sh, st);
                let nr = ror(_mm256_or_si256(g.rd, bit), sh, st);
                let nc = _mm256_or_si256(g.col, bit);
                let attacked = _mm256_or_si256(_mm256_or_si256(nl, nr), nc);
                let open = _mm256_andnot_si256(attacked, _mm256_and_si256(below, low30));

                // A queen in the second-to-last row: the last row has at most one
                // square left; count it here instead of moving down.
                let at_pen = _mm256_and_si256(has, _mm256_srai_epi32::<31>(below));
                let fits = _mm256_andnot_si256(_mm256_cmpeq_epi32(open, zero), at_pen);
                // Counted down (a mask is -1): a node for every queen placed, and
                // a completion and its node for every last row that fits.
                g.tally = _mm256_add_epi32(
                    _mm256_add_epi32(g.tally, has),
                    _mm256_and_si256(fits, _mm256_set1_epi32(-0x1_0001)),
                );

                // Every lane writes its row's record (placed queen still in) at
                // row k; a lane that does not descend writes it again before it
                // is read, so no mask is needed.
                let rec = _mm256_or_si256(g.bm, _mm256_andnot_si256(low30, low));
                // SAFETY: as the read: this lane's stack.
                unsafe { write(mem, g.at, rec, below) };

                // A lane descends only into a row with candidates: a dead end
                // costs no step of its own to come back from.
                let push = _mm256_andnot_si256(
                    at_pen,
                    _mm256_andnot_si256(_mm256_cmpeq_epi32(open, zero), has),
                );
                g.bm = _mm256_xor_si256(g.bm, _mm256_and_si256(has, bit));
                g.at = _mm256_sub_epi32(g.at, push);
                g.ld = pick(push, nl, g.ld);
                g.rd = pick(push, nr, g.rd);
                g.col = pick(push, nc, g.col);
                g.bm = pick(push, open, g.bm);
                bits(done)
            }
        }

        impl Spill {
            /// Gives each lane in `lanes` (bits) the next job, or parks it.
            /// Adds the lane counters into `sums` first.
            ///
            /// # Safety
            /// `mem` must be `m`'s words.
            #[allow(clippy::too_many_arguments)]
            unsafe fn refill(
                &mut self,
                seats: &mut Seats,
                m: &Memory,
                mem: *mut u64,
                jobs: &[Job],
                next: &mut usize,
                lanes: u32,
                sums: &mut Counted,
            ) -> Result<(), CountOverflow> {
                self.flush(seats, sums)?;
                let t = m.tables;
                for lane in 0..LANES {
                    if lanes >> lane & 1 == 0 {
                        continue;
                    }
                    // A lane out of jobs searches the last one again, uncounted, so
                    // that the step needs no mask of busy lanes.
                    let (job, interior) = match jobs.get(*next) {
                        Some(job) => {
                            *next += 1;
                            (job, job.interior)
                        }
                        None => (jobs.last().expect("jobs are not empty"), PARKED),
                    };
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
                    // The record above the start row marks the job's end: no
                    // candidates (and no gap), so the lane that pops it stays put.
                    let above = seats.stack[lane] + row;
                    // SAFETY: row < 32, so above is in this lane's stack (caller).
                    unsafe { *mem.add(above as usize) = 0 };
                    self.at[lane] = above + 1;
                    self.to_table[lane] = m.base(i) - (seats.stack[lane] + 1);
                    seats.interior[lane] = interior;
                    self.ld[lane] = l;
                    self.rd[lane] = r;
                    self.col[lane] = d;
                    self.bm[lane] = t.entries[i * 32 + row as usize] & LOW30 & !(l | d | r);
                }
                Ok(())
            }

            /// Adds the lane counters into `sums` and clears them.
            fn flush(&mut self, seats: &Seats, sums: &mut Counted) -> Result<(), CountOverflow> {
                for (t, &i) in self.tally.iter_mut().zip(&seats.interior) {
                    // Counted down from zero.
                    let up = t.wrapping_neg();
                    if up != 0 && i != PARKED {
                        sums.add(i as usize, (up >> 16).into(), (up & 0xFFFF).into())?;
                    }
                    *t = 0;
                }
                Ok(())
            }
        }

        /// The work between steps, out of line, on groups stored to memory:
        /// refills the lanes in `done` (bits per group) and, if `flush`, adds
        /// every lane counter into `sums`. Gives whether any lane is still on
        /// a job. The stepping loop stores its groups before the call and
        /// loads them after, so no vector is live across a call (a call keeps
        /// no vector register): otherwise the compiler keeps the groups in
        /// memory, stored and reloaded every step.
        ///
        /// # Safety
        /// As [`Spill::refill`].
        #[inline(never)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn tend(
            groups: &mut [Spill; GROUPS],
            seats: &mut [Seats; GROUPS],
            m: &Memory,
            mem: *mut u64,
            jobs: &[Job],
            next: &mut usize,
            done: [u32; GROUPS],
            flush: bool,
            sums: &mut Counted,
        ) -> Result<bool, CountOverflow> {
            for ((g, seat), lanes) in groups.iter_mut().zip(seats.iter_mut()).zip(done) {
                if lanes != 0 {
                    // SAFETY: as the caller's.
                    unsafe { g.refill(seat, m, mem, jobs, next, lanes, sums)? };
                } else if flush {
                    g.flush(seat, sums)?;
                }
            }
            Ok(seats
                .iter()
                .any(|s| s.interior.iter().any(|&i| i != PARKED)))
        }

        /// The kernel's memory: every group's stacks, then a record per row of
        /// the interiors the jobs are on (`first..`, 32 rows each).
        struct Memory<'a> {
            tables: &'a Tables,
            words: Vec<u64>,
            first: usize,
        }

        impl<'a> Memory<'a> {
            fn new(t: &'a Tables, jobs: &[Job]) -> Memory<'a> {
                let first = jobs.iter().map(|j| j.interior).min().unwrap_or(0) as usize;
                let end = jobs
                    .iter()
                    .map(|j| j.interior)
                    .max()
                    .map_or(0, |i| i as usize + 1);
                let mut words = vec![0u64; STACKS + (end - first) * 32];
                for (i, rows) in (first..end).zip(words[STACKS..].chunks_exact_mut(32)) {
                    let e = &t.entries[i * 32..i * 32 + 32];
                    let pen = t.pen[i] as usize;
                    for (k, r) in rows.iter_mut().enumerate() {
                        let below = e.get(k + 1).map_or(0, |&b| b & LOW30);
                        let flag = if k == pen { PEN } else { 0 };
                        *r = u64::from(e[k]) | u64::from(below | flag) << 32;
                    }
                }
                Memory {
                    tables: t,
                    words,
                    first,
                }
            }

            /// Where interior `i`'s records start.
            fn base(&self, i: usize) -> u32 {
                (STACKS + (i - self.first) * 32) as u32
            }
        }

        /// # Safety
        /// The CPU must support AVX2; every job's interior must fit the lanes and
        /// its start leave three free rows.
        #[target_feature(enable = $features)]
        pub(in crate::lanes) unsafe fn count(
            t: &Tables,
            jobs: &[Job],
            sums: &mut Counted,
        ) -> Result<(), CountOverflow> {
            if jobs.is_empty() {
                return Ok(());
            }
            let mut m = Memory::new(t, jobs);
            let mem = m.words.as_mut_ptr();
            let mut groups: [Spill; GROUPS] = Default::default();
            let mut seats: [Seats; GROUPS] = core::array::from_fn(|g| Seats {
                interior: [0; LANES],
                stack: core::array::from_fn(|lane| ((g * LANES + lane) * ROWS) as u32),
            });
            let mut next = 0usize;
            // SAFETY: the memory holds both groups' stacks and the records of
            // every interior of the jobs; the words are not touched otherwise
            // while the kernel runs.
            unsafe {
                let all = [(1 << LANES) - 1; GROUPS];
                tend(
                    &mut groups,
                    &mut seats,
                    &m,
                    mem,
                    jobs,
                    &mut next,
                    all,
                    false,
                    sums,
                )?;
                run(&m, jobs, sums, &mut next, groups, seats, mem)
            }
        }

        /// Steps the filled groups in turn until every job is counted. The
        /// groups are locals that only [`tend`] sees in memory, so their
        /// state stays in registers from step to step.
        ///
        /// # Safety
        /// As [`Group::step`].
        #[target_feature(enable = $features)]
        unsafe fn run(
            m: &Memory,
            jobs: &[Job],
            sums: &mut Counted,
            next: &mut usize,
            mut groups: [Spill; GROUPS],
            mut seats: [Seats; GROUPS],
            mem: *mut u64,
        ) -> Result<(), CountOverflow> {
            let mut live: [Group; GROUPS] = core::array::from_fn(|g| Group::reload(&groups[g]));
            let mut steps = 0u32;
            let mut busy = true;
            while busy {
                let mut done = [0u32; GROUPS];
                for (d, g) in done.iter_mut().zip(live.iter_mut()) {
                    // SAFETY: as the caller's.
                    *d = unsafe { g.step(mem) };
                }
                steps += 1;
                let flush = steps == FLUSH_EVERY;
                if done.iter().any(|&d| d != 0) || flush {
                    groups = core::array::from_fn(|g| live[g].spill());
                    // SAFETY: as the caller's.
                    busy = unsafe {
                        tend(
                            &mut groups,
                            &mut seats,
                            m,
                            mem,
                            jobs,
                            next,
                            done,
                            flush,
                            sums,
                        )?
                    };
                    live = core::array::from_fn(|g| Group::reload(&groups[g]));
                    if flush {
                        steps = 0;
                    }
                }
            }
            groups = core::array::from_fn(|g| live[g].spill());
            for (g, seat) in groups.iter_mut().zip(&seats) {
                g.flush(seat, sums)?;
            }
            Ok(())
        }
    };
}

crate::lanes::x86_ops::builds!(kernel);
