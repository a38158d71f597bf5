//! Completions of a board on which some queens are already placed (a frame,
//! a ring constellation): the free rows in order, each with the columns the
//! placed queens leave open in it, and the gap to the next free row.
//!
//! Placed queens below the current row are not in the running diagonal
//! masks; their attacks on every free row are folded into that row's
//! `allowed` mask once, when the interior is built. That is what makes
//! pre-placement prune early: the bottom queen closes squares in row 1.

use crate::engine::counts::PieceCounts;

/// A state of an interior's search: free rows `0..row` placed, with the
/// attack masks they leave on free row `row`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Start {
    pub row: u8,
    pub l: u32,
    pub d: u32,
    pub r: u32,
}

/// The search below a set of placed queens.
#[derive(Clone, Debug)]
pub struct Interior {
    /// Columns open in free row `i` before the search's own queens attack.
    pub(crate) allowed: [u32; 32],
    /// Rows from free row `i` to free row `i + 1`.
    pub(crate) shift: [u32; 32],
    /// Free rows.
    pub(crate) rows: usize,
}

impl Interior {
    /// The interior of an `n`×`n` board with `queens` (row, column) placed.
    /// The queens must not attack each other (callers check).
    pub fn new(n: usize, queens: &[(usize, usize)]) -> Interior {
        let mut row_used = 0u64;
        let mut col_used = 0u32;
        for &(r, c) in queens {
            row_used |= 1 << r;
            col_used |= 1 << c;
        }
        let free_rows: Vec<usize> = (0..n).filter(|r| row_used >> r & 1 == 0).collect();
        let mask = u32::MAX >> (32 - n);
        let mut inner = Interior {
            allowed: [0; 32],
            shift: [0; 32],
            rows: free_rows.len(),
        };
        for (i, &y) in free_rows.iter().enumerate() {
            let mut blocked = col_used;
            for &(r, c) in queens {
                let d = y.abs_diff(r);
                if c + d < n {
                    blocked |= 1 << (c + d);
                }
                if c >= d {
                    blocked |= 1 << (c - d);
                }
            }
            inner.allowed[i] = mask & !blocked;
            inner.shift[i] = free_rows.get(i + 1).map_or(0, |&next| (next - y) as u32);
        }
        inner
    }

    /// Free rows left for the search.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Completions (in `c1`) and queens placed (in `nodes`), one thread.
    pub fn count(&self) -> PieceCounts {
        if self.rows < 3 {
            return self.count_short();
        }
        self.count_from(&Start::default())
    }

    /// The states after the first `depth` free rows are placed, in search
    /// order, and the queens placed to reach them. Counting every start
    /// (with [`Interior::count_from`]) counts the interior. `depth` is cut
    /// to leave three free rows, the least a start can have.
    pub fn split(&self, depth: usize) -> (Vec<Start>, u64) {
        self.split_from(&Start::default(), depth)
    }

    /// The states `rows` free rows below `from`, in search order (cut, as
    /// [`Interior::split`] is, to leave three free rows), and the queens
    /// placed to reach them: counting them all counts `from`.
    pub fn split_from(&self, from: &Start, rows: usize) -> (Vec<Start>, u64) {
        let first = usize::from(from.row);
        let depth = (first + rows).min(self.rows.saturating_sub(3).max(first));
        let mut starts = vec![*from];
        let mut nodes = 0u64;
        for k in first..depth {
            let mut next = Vec::with_capacity(starts.len() * 4);
            for s in &starts {
                let mut bm = self.allowed[k] & !(s.l | s.d | s.r);
                let sh = self.shift[k];
                while bm != 0 {
                    let bit = bm & bm.wrapping_neg();
                    bm ^= bit;
                    nodes += 1;
                    next.push(Start {
                        row: k as u8 + 1,
                        l: (s.l | bit) << sh,
                        d: s.d | bit,
                        r: (s.r | bit) >> sh,
                    });
                }
            }
            starts = next;
        }
        (starts, nodes)
    }

    /// Completions and queens placed below one start (three free rows or
    /// more must remain below it).
    ///
    /// Depth first with an explicit stack holding each row's state (its
    /// candidates left, the masks above it and its index): backing up is a
    /// load, not a chain of operations on the popped word (7% faster at
    /// N=16 on a Zen 4 than one word per row, with the queen undone by
    /// rotating 64-bit diagonals back), and the diagonals are plain 32-bit
    /// shifts. A row whose last candidate is taken is not kept, so backing
    /// up never lands on an empty row, and what a queen in a row needs of
    /// the rows below comes from one record: together 10% faster at N=16
    /// on a Zen 4 than keeping every row and reading four tables. A row is
    /// entered only if it has a candidate and the row below it is still
    /// open. The last two free rows are never entered: with two columns
    /// left, the second-to-last row has at most two candidates and the
    /// last row at most one, so both are counted without a branch.
    pub fn count_from(&self, start: &Start) -> PieceCounts {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("bmi2")
            && std::arch::is_x86_feature_detected!("popcnt")
        {
            // SAFETY: the CPU has BMI2 and POPCNT (checked above).
            return unsafe { self.count_from_bmi2(start) };
        }
        self.search(start)
    }

    /// [`Interior::search`] compiled for BMI2 and POPCNT: the same loop,
    /// with shifts that need no count register and a one-instruction
    /// popcount.
    ///
    /// # Safety
    /// The CPU must have BMI2 and POPCNT.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "bmi1,bmi2,popcnt")]
    unsafe fn count_from_bmi2(&self, start: &Start) -> PieceCounts {
        self.search(start)
    }

    /// The body of [`Interior::count_from`], inlined into each build of it.
    #[inline(always)]
    fn search(&self, start: &Start) -> PieceCounts {
        let i0 = usize::from(start.row);
        assert!(
            i0 + 3 <= self.rows,
            "a start needs three free rows below it"
        );
        let pen = self.rows - 2;
        let (last, last_shift) = (self.allowed[pen + 1], self.shift[pen]);
        let (mut solutions, mut nodes) = (0u64, 0u64);
        // The rows to come back to: candidates left (never none), the
        // masks before the row's queen, the row.
        let mut stack = [(0u32, 0u32, 0u32, 0u32, 0u32); 32];
        let seen = |l: u32, r: u32, c: u32| l | r | c;
        // What a queen in row k needs, in one record: its shift, the next
        // row's open columns and shift, and the open columns of the row
        // after.
        let mut steps = [[0u32; 4]; 32];
        for (k, step) in steps.iter_mut().enumerate().take(self.rows - 2) {
            *step = [
                self.shift[k],
                self.allowed[k + 1],
                self.shift[k + 1],
                self.allowed[k + 2],
            ];
        }
        let (mut i, mut ld, mut col, mut rd) = (i0, start.l, start.d, start.r);
        let mut bm = self.allowed[i & 31] & !(start.l | start.d | start.r);
        // Both candidates of the second-to-last row (either may be absent),
        // each with the last row's square if it is open: the completions
        // and the queens placed.
        let tail = |nl: u32, nr: u32, nc: u32, next: u32| {
            let b1 = next & next.wrapping_neg();
            let b2 = next ^ b1;
            // The last row's open squares before this row's queen; a
            // queen at b closes b and one diagonal step either side.
            let open = last & !seen(nl << last_shift, nr >> last_shift, nc);
            let fits =
                |b: u32| u64::from(b != 0 && open & !(b | b << last_shift | b >> last_shift) != 0);
            let found = fits(b1) + fits(b2);
            (found, u64::from(next.count_ones()) + found)
        };
        if i0 + 3 == self.rows {
            // The start's row is the third-to-last: each of its candidates
            // ends in the tail. (The loop below enters no row after the
            // third-to-last, so it need not look for this.)
            while bm != 0 {
                let bit = bm & bm.wrapping_neg();
                bm ^= bit;
                let sh = self.shift[i & 31];
                let (nl, nr, nc) = ((ld | bit) << sh, (rd | bit) >> sh, col | bit);
                let next = self.allowed[(i + 1) & 31] & !seen(nl, nr, nc);
                let (found, placed) = tail(nl, nr, nc, next);
                solutions += found;
                nodes += 1 + placed;
            }
            return PieceCounts {
                c1: solutions,
                nodes,
                ..PieceCounts::default()
            };
        }
        if bm == 0 {
            return PieceCounts::default();
        }
        let mut depth = 0usize;
        loop {
            let bit = bm & bm.wrapping_neg();
            bm ^= bit;
            nodes += 1;
            let [sh, open1, sh1, open2] = steps[i & 31];
            let nl = (ld | bit) << sh;
            let nr = (rd | bit) >> sh;
            let nc = col | bit;
            let next = open1 & !seen(nl, nr, nc);
            // Row i + 2 already closed, whatever row i + 1 takes: each
            // candidate of row i + 1 is a dead end, counted, not visited.
            let ahead = open2 & !seen(nl << sh1, nr >> sh1, nc);
            if next == 0 || ahead == 0 {
                nodes += u64::from(next.count_ones());
            } else if i + 2 == pen {
                // Row i + 1 is the third-to-last: its candidates are
                // counted here, each with the two rows below, not pushed.
                let mut m = next;
                while m != 0 {
                    let b = m & m.wrapping_neg();
                    m ^= b;
                    let (l2, r2, c2) = ((nl | b) << sh1, (nr | b) >> sh1, nc | b);
                    let (found, placed) = tail(l2, r2, c2, ahead & !(b | b << sh1 | b >> sh1));
                    solutions += found;
                    nodes += 1 + placed;
                }
            } else {
                stack[depth & 31] = (bm, ld, rd, col, i as u32);
                depth += usize::from(bm != 0);
                (ld, rd, col, bm) = (nl, nr, nc, next);
                i += 1;
                continue;
            }
            if bm == 0 {
                if depth == 0 {
                    break;
                }
                depth -= 1;
                let row;
                (bm, ld, rd, col, row) = stack[depth & 31];
                i = row as usize;
            }
        }
        PieceCounts {
            c1: solutions,
            nodes,
            ..PieceCounts::default()
        }
    }

    /// Two free rows or fewer (small boards only): plain recursion.
    fn count_short(&self) -> PieceCounts {
        fn walk(it: &Interior, i: usize, l: u32, d: u32, r: u32, c: &mut PieceCounts) {
            if i == it.rows {
                c.c1 += 1;
                return;
            }
            let mut bm = it.allowed[i] & !(l | d | r);
            while bm != 0 {
                let bit = bm & bm.wrapping_neg();
                bm ^= bit;
                c.nodes += 1;
                let sh = it.shift[i];
                walk(it, i + 1, (l | bit) << sh, d | bit, (r | bit) >> sh, c);
            }
        }
        let mut c = PieceCounts::default();
        walk(self, 0, 0, 0, 0, &mut c);
        c
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::border::Frames;
    use crate::Size;

    /// The portable build of the search (the one CPUs without BMI2 run)
    /// gives the counts and nodes of the dispatched one, on every job of
    /// every ring of N=11.
    #[test]
    fn the_portable_search_agrees_with_the_dispatched_one() {
        let frames = Frames::new(Size::new(11).unwrap(), 1).unwrap();
        frames.for_each_in(0, u64::MAX, |f, _, _| {
            let it = frames.interior(&f);
            if it.rows() < 3 {
                return;
            }
            for start in it.split(1).0 {
                assert_eq!(it.search(&start), it.count_from(&start), "{start:?}");
            }
        });
    }
}
