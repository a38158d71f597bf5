//! Eight 32-bit lanes per register, for every interior up to N=32.
//!
//! Unlike the narrow kernel, diagonals move by plain shifts: bits pushed
//! off the board are lost, so backing up a row restores the row's masks
//! from the lane's stack instead of undoing the shift. A stack record is
//! one 16-byte row: `[candidates, left diagonal, right diagonal, shift]`.
//! AVX2 has gathers but no scatter, so records move as whole rows: eight
//! 16-byte loads (or stores) at each lane's own row, transposed to (or
//! from) four registers. Every step writes every lane's record at the row
//! it is on; for a lane that does not descend that row is dead, so the
//! write is harmless and needs no mask.
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
        use crate::lanes::{CountOverflow, Counted, Job, WideTables, PACKED_COLUMNS};
        use core::arch::x86_64::*;

        const LANES: usize = 8;
        /// Groups stepped interleaved, so one group's loads overlap another's
        /// arithmetic (each step of a group depends on its previous step).
        const GROUPS: usize = 2;
        const _: () = assert!(GROUPS == 2, "run steps two groups");
        /// Stack rows per lane: row r lives in slot r + 1, so a lane on row 0 can
        /// read "the row above" (slot 0) without a bounds check.
        const SLOTS: usize = 34;
        /// u32 words per record.
        const REC: usize = 4;

        crate::lanes::x86_ops::group!($features;
            /// Free row, and the row the job started at.
            k,
            k0,
            /// The job's interior's first entry.
            base,
            /// Candidates left in row k (the placed queen of row k is already out).
            bm,
            l,
            r,
            col,
            /// Rows from row k to the next free row.
            sh,
            /// Nodes (low 16 bits) and completions (high 16 bits).
            tally,
            /// Lanes holding a job, as an all-ones/all-zeros mask per lane.
            active,
        );

        /// Each lane's record at `slot`, as u32 offsets into the group's stacks.
        #[inline]
        #[target_feature(enable = $features)]
        fn record_offsets(slot: __m256i) -> [usize; LANES] {
            let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            let v = _mm256_slli_epi32::<2>(_mm256_add_epi32(
                _mm256_mullo_epi32(lane, _mm256_set1_epi32(SLOTS as i32)),
                slot,
            ));
            let lo = _mm256_castsi256_si128(v);
            let hi = _mm256_extracti128_si256::<1>(v);
            [
                _mm_cvtsi128_si32(lo) as usize,
                _mm_extract_epi32::<1>(lo) as usize,
                _mm_extract_epi32::<2>(lo) as usize,
                _mm_extract_epi32::<3>(lo) as usize,
                _mm_cvtsi128_si32(hi) as usize,
                _mm_extract_epi32::<1>(hi) as usize,
                _mm_extract_epi32::<2>(hi) as usize,
                _mm_extract_epi32::<3>(hi) as usize,
            ]
        }

        impl Spill {
            /// Gives each lane in `lanes` (bits) the next job, or retires it.
            /// Adds the lane counters into `sums` first.
            fn refill(
                &mut self,
                t: &WideTables,
                jobs: &[Job],
                next: &mut usize,
                lanes: u32,
                sums: &mut Counted,
            ) -> Result<(), CountOverflow> {
                self.flush(sums)?;
                let s = self;
                for lane in 0..LANES {
                    if lanes >> lane & 1 == 0 {
                        continue;
                    }
                    let Some(job) = jobs.get(*next) else {
                        s.active[lane] = 0;
                        // A retired lane idles on row 0 of interior 0: every load
                        // and gather it still makes stays in bounds.
                        (s.k[lane], s.k0[lane], s.base[lane], s.bm[lane]) = (0, 0, 0, 0);
                        continue;
                    };
                    *next += 1;
                    let i = job.interior as usize;
                    let row = usize::from(job.start.row);
                    let (l, d, r) = (job.start.l, job.start.d, job.start.r);
                    s.active[lane] = u32::MAX;
                    s.k[lane] = row as u32;
                    s.k0[lane] = row as u32;
                    s.base[lane] = (i * 32) as u32;
                    s.l[lane] = l;
                    s.r[lane] = r;
                    s.col[lane] = d;
                    s.bm[lane] = t.allowed[i * 32 + row] & !(l | d | r);
                    s.sh[lane] = t.shift[i * 32 + row];
                }
                Ok(())
            }

            /// Adds the lane counters into `sums` and clears them.
            fn flush(&mut self, sums: &mut Counted) -> Result<(), CountOverflow> {
                let nodes = self.tally.map(|t| t & 0xFFFF);
                let sols = self.tally.map(|t| t >> 16);
                sums.add_lanes(&sols, &nodes, &self.base)?;
                self.tally = [0; LANES];
                Ok(())
            }
        }

        /// The work between steps, out of line, on groups stored to memory
        /// (see [`super::x86_ops`]): refills the lanes in `done` (bits per
        /// group) and, if `flush`, adds every lane counter into `sums`.
        /// Gives whether any lane still holds a job.
        #[inline(never)]
        fn tend(
            groups: &mut [Spill; GROUPS],
            t: &WideTables,
            jobs: &[Job],
            next: &mut usize,
            done: [u32; GROUPS],
            flush: bool,
            sums: &mut Counted,
        ) -> Result<bool, CountOverflow> {
            for (g, lanes) in groups.iter_mut().zip(done) {
                if lanes != 0 {
                    g.refill(t, jobs, next, lanes, sums)?;
                } else if flush {
                    g.flush(sums)?;
                }
            }
            Ok(groups.iter().any(|g| g.active.iter().any(|&a| a != 0)))
        }

        impl Group {
            /// The records of every lane's row `k - 1` (slot `k`), as
            /// `[candidates, left, right, shift]` registers.
            ///
            /// # Safety
            /// Every lane's `k` must be below `SLOTS`.
            #[inline]
            #[target_feature(enable = $features)]
            unsafe fn pop(stack: *mut u32, slot: __m256i) -> [__m256i; 4] {
                let at = record_offsets(slot);
                // SAFETY: slot < SLOTS in every lane (caller), so each 16-byte read
                // lies in that lane's own stack.
                let rec =
                    |off: usize| unsafe { _mm_loadu_si128(stack.add(off).cast::<__m128i>()) };
                let a = _mm256_set_m128i(rec(at[4]), rec(at[0]));
                let b = _mm256_set_m128i(rec(at[5]), rec(at[1]));
                let c = _mm256_set_m128i(rec(at[6]), rec(at[2]));
                let d = _mm256_set_m128i(rec(at[7]), rec(at[3]));
                let t0 = _mm256_unpacklo_epi32(a, b);
                let t1 = _mm256_unpacklo_epi32(c, d);
                let t2 = _mm256_unpackhi_epi32(a, b);
                let t3 = _mm256_unpackhi_epi32(c, d);
                [
                    _mm256_unpacklo_epi64(t0, t1),
                    _mm256_unpackhi_epi64(t0, t1),
                    _mm256_unpacklo_epi64(t2, t3),
                    _mm256_unpackhi_epi64(t2, t3),
                ]
            }

            /// Writes every lane's record `[bm, l, r, sh]` into its slot.
            ///
            /// # Safety
            /// Every `slot[i]` must be below `SLOTS`.
            #[inline]
            #[target_feature(enable = $features)]
            unsafe fn push(stack: *mut u32, slot: __m256i, rec: [__m256i; 4]) {
                let at = record_offsets(slot);
                let t0 = _mm256_unpacklo_epi32(rec[0], rec[1]);
                let t1 = _mm256_unpackhi_epi32(rec[0], rec[1]);
                let t2 = _mm256_unpacklo_epi32(rec[2], rec[3]);
                let t3 = _mm256_unpackhi_epi32(rec[2], rec[3]);
                let rows = [
                    _mm256_unpacklo_epi64(t0, t2),
                    _mm256_unpackhi_epi64(t0, t2),
                    _mm256_unpacklo_epi64(t1, t3),
                    _mm256_unpackhi_epi64(t1, t3),
                ];
                // SAFETY: slot < SLOTS in every lane (caller): each write stays in
                // that lane's own stack.
                let put = |i: usize, v: __m128i| unsafe {
                    _mm_storeu_si128(stack.add(at[i]).cast::<__m128i>(), v)
                };
                for (i, v) in rows.into_iter().enumerate() {
                    put(i, _mm256_castsi256_si128(v));
                    put(i + 4, _mm256_extracti128_si256::<1>(v));
                }
            }

            /// One step of every lane; returns the lanes whose job is done (bits).
            ///
            /// # Safety
            /// `allowed` and `shift` must hold 32 entries for every interior a lane
            /// is on (plus one spare row), and `stack` the group's stacks,
            /// `LANES * SLOTS` records.
            #[inline]
            #[target_feature(enable = $features)]
            unsafe fn step<const PACKED: bool>(
                &mut self,
                stack: *mut u32,
                allowed: *const i32,
                shift: *const i32,
            ) -> u32 {
                let zero = _mm256_setzero_si256();
                let one = _mm256_set1_epi32(1);
                let g = self;

                // Lanes out of candidates back up a row: their row's record (the
                // queen placed there is its lowest candidate) comes off the stack.
                let empty = _mm256_and_si256(g.active, _mm256_cmpeq_epi32(g.bm, zero));
                let done = _mm256_and_si256(empty, _mm256_cmpeq_epi32(g.k, g.k0));
                let back = _mm256_andnot_si256(done, empty);
                let live = _mm256_andnot_si256(done, g.active);
                // SAFETY: k < 32 < SLOTS for every lane.
                let [pbm, pl, pr, psh] = unsafe { Group::pop(stack, g.k) };
                let pbit = _mm256_and_si256(pbm, _mm256_sub_epi32(zero, pbm));
                g.col = _mm256_xor_si256(g.col, _mm256_and_si256(back, pbit));
                g.l = pick(back, pl, g.l);
                g.r = pick(back, pr, g.r);
                g.sh = pick(back, psh, g.sh);
                g.bm = pick(back, _mm256_xor_si256(pbm, pbit), g.bm);
                // back is all ones (-1) where a lane backs up.
                g.k = _mm256_add_epi32(g.k, back);

                // The row below each lane's row: its open columns and its gap.
                let below = _mm256_add_epi32(_mm256_add_epi32(g.base, g.k), one);
                // SAFETY: base + k + 1 indexes this lane's interior's entries (k <= pen < 31).
                let (open, gap) = unsafe {
                    let open = _mm256_i32gather_epi32::<4>(allowed, below);
                    if PACKED {
                        // Up to N=30 the gap rides in the two bits above the board.
                        (
                            _mm256_and_si256(open, _mm256_set1_epi32(PACKED_COLUMNS as i32)),
                            _mm256_srli_epi32::<30>(open),
                        )
                    } else {
                        (open, _mm256_i32gather_epi32::<4>(shift, below))
                    }
                };

                // Every lane with a candidate places it (lowest first), in the
                // same step, so backing up costs no step of its own.
                let has = _mm256_andnot_si256(_mm256_cmpeq_epi32(g.bm, zero), live);
                let bit = _mm256_and_si256(g.bm, _mm256_sub_epi32(zero, g.bm));
                let nl = _mm256_sllv_epi32(_mm256_or_si256(g.l, bit), g.sh);
                let nr = _mm256_srlv_epi32(_mm256_or_si256(g.r, bit), g.sh);
                let nc = _mm256_or_si256(g.col, bit);
                let attacked = _mm256_or_si256(_mm256_or_si256(nl, nr), nc);
                g.tally = _mm256_sub_epi32(g.tally, has);

                // A queen in the second-to-last row: the last row has at most one
                // square left; count it here instead of moving down.
                // The row below is the last exactly when its gap is 0 (no
                // row follows it), and its open columns are then the last
                // row's: neither needs a register of its own.
                let at_pen = _mm256_and_si256(has, _mm256_cmpeq_epi32(gap, zero));
                let left = _mm256_andnot_si256(attacked, open);
                let fits = _mm256_andnot_si256(_mm256_cmpeq_epi32(left, zero), at_pen);
                // A completion and its node: 1 in each half.
                let found = _mm256_and_si256(fits, _mm256_set1_epi32(0x1_0001));
                g.tally = _mm256_add_epi32(g.tally, found);

                // Every lane writes its row's record (candidates with the placed
                // queen still in); the others' slot is dead, so no mask is needed.
                // SAFETY: k + 1 <= 32 < SLOTS.
                unsafe { Group::push(stack, _mm256_add_epi32(g.k, one), [g.bm, g.l, g.r, g.sh]) };

                let push = _mm256_andnot_si256(at_pen, has);
                g.bm = _mm256_xor_si256(g.bm, _mm256_and_si256(has, bit));
                g.k = _mm256_sub_epi32(g.k, push);
                g.l = pick(push, nl, g.l);
                g.r = pick(push, nr, g.r);
                g.col = pick(push, nc, g.col);
                g.sh = pick(push, gap, g.sh);
                g.bm = pick(push, _mm256_andnot_si256(attacked, open), g.bm);
                bits(done)
            }
        }

        /// # Safety
        /// The CPU must support AVX2; every job's start must leave three free rows
        /// of its interior.
        #[target_feature(enable = $features)]
        pub(in crate::lanes) unsafe fn count(
            t: &WideTables,
            jobs: &[Job],
            sums: &mut Counted,
        ) -> Result<(), CountOverflow> {
            let mut stacks = vec![0u32; GROUPS * LANES * SLOTS * REC];
            let packed = t.packed.is_some();
            let (allowed, shift) = (
                t.packed
                    .as_ref()
                    .unwrap_or(&t.allowed)
                    .as_ptr()
                    .cast::<i32>(),
                t.shift.as_ptr().cast::<i32>(),
            );
            let mut groups: [Spill; GROUPS] = Default::default();
            let mut next = 0usize;
            let all = [(1 << LANES) - 1; GROUPS];
            tend(&mut groups, t, jobs, &mut next, all, false, sums)?;
            let mut chunks = stacks.chunks_mut(LANES * SLOTS * REC);
            let mut stack = || chunks.next().expect("a stack per group").as_mut_ptr();
            let stacks: [*mut u32; GROUPS] = core::array::from_fn(|_| stack());
            // SAFETY: the tables hold every interior's 32 rows plus a spare; the
            // stacks were sized above.
            unsafe {
                if packed {
                    run::<true>(t, jobs, sums, &mut next, groups, stacks, allowed, shift)
                } else {
                    run::<false>(t, jobs, sums, &mut next, groups, stacks, allowed, shift)
                }
            }
        }

        /// Steps the two filled groups in turn until every job is counted. The
        /// groups are locals that only [`tend`] sees in memory, so their
        /// state stays in registers from step to step.
        ///
        /// # Safety
        /// As [`Group::step`].
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $features)]
        unsafe fn run<const PACKED: bool>(
            t: &WideTables,
            jobs: &[Job],
            sums: &mut Counted,
            next: &mut usize,
            mut groups: [Spill; GROUPS],
            stacks: [*mut u32; GROUPS],
            allowed: *const i32,
            shift: *const i32,
        ) -> Result<(), CountOverflow> {
            // Two named groups, not an array of them as in the narrow kernel:
            // with this kernel's many live vectors the array's loop came out
            // slower (N=17: 4.17-4.29 s against 3.85-3.97 s).
            let (mut a, mut b) = (Group::reload(&groups[0]), Group::reload(&groups[1]));
            let mut steps = 0u32;
            let mut busy = groups.iter().any(|g| g.active.iter().any(|&a| a != 0));
            while busy {
                // SAFETY: as the caller's.
                let (da, db) = unsafe {
                    (
                        a.step::<PACKED>(stacks[0], allowed, shift),
                        b.step::<PACKED>(stacks[1], allowed, shift),
                    )
                };
                steps += 1;
                let flush = steps == FLUSH_EVERY;
                if da | db != 0 || flush {
                    groups = [a.spill(), b.spill()];
                    busy = tend(&mut groups, t, jobs, next, [da, db], flush, sums)?;
                    (a, b) = (Group::reload(&groups[0]), Group::reload(&groups[1]));
                    if flush {
                        steps = 0;
                    }
                }
            }
            groups = [a.spill(), b.spill()];
            for g in &mut groups {
                g.flush(sums)?;
            }
            Ok(())
        }
    };
}

crate::lanes::x86_ops::builds!(kernel);
