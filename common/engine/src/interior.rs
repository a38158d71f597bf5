//! Completions of a board on which some queens are already placed (a frame,
//! a ring constellation): the free rows in order, each with the columns the
//! placed queens leave open in it, and the gap to the next free row.
//!
//! Placed queens below the current row are not in the running diagonal
//! masks; their attacks on every free row are folded into that row's
//! `allowed` mask once, when the interior is built. That is what makes
//! pre-placement prune early: the bottom queen closes squares in row 1.

use crate::counts::PieceCounts;

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
    /// Columns no placed queen holds (as many as the free rows).
    pub(crate) cols: u32,
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
            cols: mask & !col_used,
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

    /// One random descent through this interior's search: the sum, over
    /// the rows it reaches, of the product of the branching factors above
    /// (Knuth, 1975). `below(c)` picks one of the `c` open columns; picked
    /// uniformly, the mean over descents is the number of queens the
    /// search places.
    pub fn knuth_descent(&self, mut below: impl FnMut(u64) -> u64) -> f64 {
        let (mut l, mut d, mut r) = (0u32, 0u32, 0u32);
        let (mut weight, mut nodes) = (1.0f64, 0.0f64);
        for i in 0..self.rows {
            let mut open = self.allowed[i] & !(l | d | r);
            let c = open.count_ones();
            if c == 0 {
                break;
            }
            weight *= f64::from(c);
            nodes += weight;
            for _ in 0..below(c.into()) {
                open &= open - 1;
            }
            let bit = open & open.wrapping_neg();
            let sh = self.shift[i];
            (l, d, r) = ((l | bit) << sh, d | bit, (r | bit) >> sh);
        }
        nodes
    }

    /// Per free row: the columns open before the search's own queens
    /// attack, and the rows to the next free row (0 after the last). What
    /// a device outside the CPU needs to run the same search.
    pub fn tables(&self) -> (&[u32; 32], &[u32; 32]) {
        (&self.allowed, &self.shift)
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
    /// open. The last three free rows are never entered: with three
    /// columns left they are counted without a branch (`LastThree`).
    ///
    /// Three builds: BMI2 (x86-64 since 2013, as AVX2), POPCNT alone (the
    /// CPUs before those, back to 2008) and portable. N=17 on a Zen 4:
    /// 7.30 s, 7.55 s and 7.74 s (medians of 7 to 9 runs).
    pub fn count_from(&self, start: &Start) -> PieceCounts {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("bmi2") && has!("popcnt") {
                // SAFETY: the CPU has BMI2 and POPCNT (checked above).
                return unsafe { self.count_from_bmi2(start) };
            }
            if has!("popcnt") {
                // SAFETY: the CPU has POPCNT (checked above).
                return unsafe { self.count_from_popcnt(start) };
            }
        }
        self.search::<false>(start)
    }

    /// [`Interior::search`] compiled for POPCNT alone.
    ///
    /// # Safety
    /// The CPU must have POPCNT.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "popcnt")]
    unsafe fn count_from_popcnt(&self, start: &Start) -> PieceCounts {
        self.search::<false>(start)
    }

    /// [`Interior::search`] compiled for BMI2 and POPCNT: the same loop,
    /// with shifts that need no count register, a one-instruction
    /// popcount, and `pext` to gather the last three rows' open columns.
    /// The tables' ways come from one lookup (no branch on the gaps and no
    /// call in the loop): 8% fewer instructions at N=14 than a cut table
    /// with a computed fallback, `pext` included.
    ///
    /// # Safety
    /// The CPU must have BMI2 and POPCNT.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "bmi1,bmi2,popcnt")]
    unsafe fn count_from_bmi2(&self, start: &Start) -> PieceCounts {
        self.search::<true>(start)
    }

    /// Fills `steps` with what a queen in row k needs, one record per row
    /// up to the third-to-last: its shift, the next row's open columns and
    /// shift, and the open columns of the row after.
    #[inline(always)]
    fn fill_steps(&self, steps: &mut [[u32; 4]; 32]) {
        for (k, step) in steps.iter_mut().enumerate().take(self.rows - 2) {
            *step = [
                self.shift[k],
                self.allowed[k + 1],
                self.shift[k + 1],
                self.allowed[k + 2],
            ];
        }
    }

    /// The body of [`Interior::count_from`], inlined into each build of it.
    // One function so the compiler keeps the search state (the masks, the
    // row, the stack depth, the counters) in registers from one queen to
    // the next: the loop calls nothing that is not `#[inline(always)]`, and
    // only the set-up done once per start ([`Interior::fill_steps`]) is a
    // function of its own.
    #[inline(always)]
    fn search<const BMI2: bool>(&self, start: &Start) -> PieceCounts {
        let i0 = usize::from(start.row);
        assert!(
            i0 + 3 <= self.rows,
            "a start needs three free rows below it"
        );
        let pen = self.rows - 2;
        let (mut solutions, mut nodes) = (0u64, 0u64);
        // The rows to come back to: candidates left (never none), the
        // masks before the row's queen, the row.
        let mut stack = [(0u32, 0u32, 0u32, 0u32, 0u32); 32];
        let seen = |l: u32, r: u32, c: u32| l | r | c;
        let mut steps = [[0u32; 4]; 32];
        self.fill_steps(&mut steps);
        let (mut i, mut ld, mut col, mut rd) = (i0, start.l, start.d, start.r);
        let mut bm = self.allowed[i & 31] & !(start.l | start.d | start.r);
        let (gap_ab, gap_bc) = LastThree::gaps(self);
        let fits = fits_kept(gap_ab, gap_bc);
        let three = LastThree::new(self, &fits);
        if i0 + 3 == self.rows {
            // The start's row is A. (The loop below enters no row after
            // the fourth-to-last, so it need not look for this.)
            let open_b = self.allowed[pen] & !seen(ld << three.gap_ab, rd >> three.gap_ab, col);
            let (found, placed) = three.count::<BMI2>(ld, rd, col, bm, open_b);
            solutions += found;
            nodes += placed;
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
                // Row i + 1 is the third-to-last: the last three rows are
                // counted here, not pushed.
                let (found, placed) = three.count::<BMI2>(nl, nr, nc, next, ahead);
                solutions += found;
                nodes += placed;
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
        self.plain(&Start::default())
    }

    /// Completions and queens placed below `start` by plain recursion, row
    /// by row: what [`Interior::count_from`] must give.
    fn plain(&self, start: &Start) -> PieceCounts {
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
        walk(self, start.row.into(), start.l, start.d, start.r, &mut c);
        c
    }
}

/// The six ways three rows A, B and C (from the top) take three columns:
/// the column each takes, 0 being the leftmost of the three.
const WAYS: [[u32; 3]; 6] = [
    [0, 1, 2],
    [0, 2, 1],
    [1, 0, 2],
    [1, 2, 0],
    [2, 0, 1],
    [2, 1, 0],
];

/// The ways whose rows take open columns: by `rows`' open columns (three
/// bits each, the first row lowest), a bit for each way.
const fn taking(rows: [usize; 2]) -> [u8; 64] {
    let mut table = [0u8; 64];
    let mut open = 0;
    while open < 64 {
        let mut way = 0;
        while way < 6 {
            let a = open >> WAYS[way][rows[0]] & 1;
            let b = open >> (3 + WAYS[way][rows[1]]) & 1;
            table[open as usize] |= ((a & b) as u8) << way;
            way += 1;
        }
        open += 1;
    }
    table
}

/// Ways whose A and B take open columns, by A's open columns | B's << 3.
const TAKE_AB: [u8; 64] = taking([0, 1]);

/// Ways whose C takes an open column, by C's open columns (the table's
/// second row: C alone, looked up with its columns shifted up by three).
const TAKE_C: [u8; 8] = {
    let both = taking([2, 2]);
    let mut table = [0u8; 8];
    let mut open = 0;
    while open < 8 {
        table[open] = both[open | open << 3];
        open += 1;
    }
    table
};

/// Which ways the diagonals allow, for rows `gap_ab` and `gap_bc` apart
/// and columns `d01` and `d12` apart: the ways whose A and B queens do not
/// attack each other, and those whose three queens do not.
fn fitting(gap_ab: u32, gap_bc: u32, d01: u32, d12: u32) -> (u8, u8) {
    let at = [0, d01, d01 + d12];
    let (mut pairs, mut ways) = (0u8, 0u8);
    for (w, &[a, b, c]) in WAYS.iter().enumerate() {
        let (ca, cb, cc) = (at[a as usize], at[b as usize], at[c as usize]);
        if ca.abs_diff(cb) != gap_ab {
            pairs |= 1 << w;
            if cb.abs_diff(cc) != gap_bc && ca.abs_diff(cc) != gap_ab + gap_bc {
                ways |= 1 << w;
            }
        }
    }
    (pairs, ways)
}

/// [`fitting`] for two gaps, by column distances `d01 << 5 | d12` (each
/// below 32 on any board).
type Fits = [(u8, u8); 1024];

fn fits(gap_ab: u32, gap_bc: u32) -> Box<Fits> {
    let mut t = Box::new([(0, 0); 1024]);
    for (d, fit) in t.iter_mut().enumerate() {
        *fit = fitting(gap_ab, gap_bc, d as u32 >> 5, d as u32 & 31);
    }
    t
}

/// Row gaps below this are kept (every plan's are: a gap is one more than
/// the queens placed between two free rows), each pair's made once.
const NEAR: u32 = 8;

static KEPT: [std::sync::OnceLock<Box<Fits>>; (NEAR * NEAR) as usize] =
    [const { std::sync::OnceLock::new() }; (NEAR * NEAR) as usize];

/// [`fits`], kept if the gaps are below [`NEAR`].
fn fits_kept(gap_ab: u32, gap_bc: u32) -> std::borrow::Cow<'static, Fits> {
    if gap_ab < NEAR && gap_bc < NEAR {
        let kept = &KEPT[(gap_ab * NEAR + gap_bc) as usize];
        std::borrow::Cow::Borrowed(kept.get_or_init(|| fits(gap_ab, gap_bc)))
    } else {
        std::borrow::Cow::Owned(*fits(gap_ab, gap_bc))
    }
}

/// The last three free rows of an interior (A, B and C), counted from
/// their open squares before any of them is taken, without a branch:
/// three columns are left, so the rows can take them in six ways, and
/// tables say which of the six the open squares allow and which the
/// diagonals between the three rows allow. Against a loop over A's
/// candidates, each with the last two rows: N=16 in 0.914 of the time on a
/// Zen 4, for about as many instructions (the loop's exit and its dead
/// ends were mispredicted branches).
struct LastThree<'a> {
    /// C's open columns before the search's queens.
    last: u32,
    /// Rows from A to B and from B to C.
    gap_ab: u32,
    gap_bc: u32,
    /// Columns no placed queen holds.
    cols: u32,
    /// The diagonals' ways for these gaps.
    fits: &'a Fits,
}

impl LastThree<'_> {
    /// The gaps between A, B and C in `it`.
    fn gaps(it: &Interior) -> (u32, u32) {
        let pen = it.rows - 2;
        (it.shift[pen - 1], it.shift[pen])
    }

    fn new<'a>(it: &Interior, fits: &'a Fits) -> LastThree<'a> {
        let (gap_ab, gap_bc) = LastThree::gaps(it);
        LastThree {
            last: it.allowed[it.rows - 1],
            gap_ab,
            gap_bc,
            cols: it.cols,
            fits,
        }
    }

    /// The completions and the queens placed (every candidate of A, each
    /// (A, B) pair that fits, each completion), as the plain search counts
    /// them, from the search's masks on A and the open squares of A and B.
    #[inline(always)]
    fn count<const BMI2: bool>(
        &self,
        l: u32,
        r: u32,
        c: u32,
        open_a: u32,
        open_b: u32,
    ) -> (u64, u64) {
        let g = self.gap_ab + self.gap_bc;
        let open_c = self.last & !(l << g | r >> g | c);
        let free = self.cols & !c;
        debug_assert_eq!(free.count_ones(), 3, "three rows, three columns");
        let (c0, c2) = (free.trailing_zeros(), 31 - free.leading_zeros());
        let c1 = (free & (free - 1)).trailing_zeros();
        let slots = |x: u32| {
            #[cfg(target_arch = "x86_64")]
            if BMI2 {
                // SAFETY: only the BMI2 build of the search sets `BMI2`.
                return unsafe { std::arch::x86_64::_pext_u32(x, free) };
            }
            (x >> c0 & 1) | (x >> c1 & 1) << 1 | (x >> c2 & 1) << 2
        };
        let (a, b) = (slots(open_a), slots(open_b));
        let fit = self.fits[((c1 - c0) << 5 | (c2 - c1)) as usize & 1023];
        let pairs = u32::from(TAKE_AB[(a | b << 3) as usize] & fit.0);
        let ways = pairs & u32::from(TAKE_C[slots(open_c) as usize] & fit.1);
        let found = u64::from(ways.count_ones());
        (
            found,
            u64::from(a.count_ones() + pairs.count_ones()) + found,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{Interior, Start};
    use crate::border::Frames;
    use crate::Size;

    /// Every start of `it`, `from` free rows placed and deeper, counted by
    /// the search and by plain recursion.
    fn check_every_start(it: &Interior, from: usize) {
        for depth in from..=it.rows() - 3 {
            for start in it.split(depth).0 {
                assert_eq!(it.count_from(&start), it.plain(&start), "{start:?}");
            }
        }
    }

    /// The search, whose last three rows come from tables, counts what
    /// plain recursion counts (completions and queens placed) below every
    /// start of every ring of N=10 to 13: starts on the third-to-last row
    /// and above, with the gaps between rows that rings leave.
    #[test]
    fn the_search_counts_what_plain_recursion_counts() {
        for n in 10..=13 {
            let frames = Frames::new(Size::new(n).unwrap(), 1).unwrap();
            frames.for_each_in(0, u64::MAX, |f, _, _| {
                let it = frames.interior(&f);
                if it.rows() >= 3 {
                    check_every_start(&it, 0);
                }
            });
        }
    }

    /// Queens placed on seven rows in a row leave a gap of eight between
    /// two of the last free rows: past the tables of gaps, still exact.
    #[test]
    fn a_wide_gap_between_the_last_rows_is_counted_exactly() {
        // Rows 8 to 14 of a solution of 16 queens; rows 0 to 7 and 15 free.
        let solution = [0, 2, 4, 1, 12, 8, 13, 11, 14, 5, 15, 6, 3, 10, 7, 9];
        let queens: Vec<(usize, usize)> = (8..15).map(|r| (r, solution[r])).collect();
        let it = Interior::new(16, &queens);
        assert_eq!(it.shift[it.rows() - 2], 8, "the gap between rows 7 and 15");
        let counted = it.count_from(&Start::default());
        assert_eq!(counted, it.plain(&Start::default()));
        assert!(counted.c1 > 0, "the solution itself completes it");
        check_every_start(&it, 0);
    }

    /// The portable build of the search and the POPCNT one (those CPUs
    /// without BMI2 run) give the counts and nodes of the dispatched one,
    /// on every job of every ring of N=11.
    #[test]
    fn the_portable_search_agrees_with_the_dispatched_one() {
        let frames = Frames::new(Size::new(11).unwrap(), 1).unwrap();
        #[cfg(target_arch = "x86_64")]
        let popcnt = std::arch::is_x86_feature_detected!("popcnt");
        #[cfg(target_arch = "x86_64")]
        if !popcnt {
            println!("skipped the POPCNT build: this CPU lacks POPCNT");
        }
        frames.for_each_in(0, u64::MAX, |f, _, _| {
            let it = frames.interior(&f);
            if it.rows() < 3 {
                return;
            }
            for start in it.split(1).0 {
                let dispatched = it.count_from(&start);
                assert_eq!(it.search::<false>(&start), dispatched, "{start:?}");
                #[cfg(target_arch = "x86_64")]
                if popcnt {
                    // SAFETY: the CPU has POPCNT (checked above).
                    let built = unsafe { it.count_from_popcnt(&start) };
                    assert_eq!(built, dispatched, "{start:?}");
                }
            }
        });
    }
}
