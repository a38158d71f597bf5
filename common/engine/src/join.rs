//! The join mode: an interior's completions counted by halves, not by
//! walking every completion.
//!
//! The free columns are cut in two, west (the lower half) and east. A
//! completion puts exactly as many queens in the east as it has east
//! columns, so it is fixed by which free rows take them (the *east rows*),
//! an east half (one queen per east row, one per east column) and a west
//! half (the other rows, the west columns). Rows and columns of the two
//! halves can never clash, so for one choice of east rows the completions
//! are the pairs (east half, west half) whose diagonals are disjoint.
//!
//! The rows are cut in two as well (upper, lower), so the board is in
//! quarters. Each quarter's placements are enumerated once, by the set of
//! rows they use; a choice's east halves are the upper-east placements
//! joined to the lower-east ones that take the other east columns and
//! share no diagonal (west likewise). Each half is kept as a bitset of the
//! diagonals both sides can reach (at most 62 bits up to N=32), and the
//! pairs are counted 512 at a time on a transposed table of one side
//! ([`crate::pairs`]).
//!
//! The work is Σ |east halves| × |west halves| / 512 over the choices of
//! east rows, against the completions and dead ends a search visits: the
//! join wins on large boards (few queens placed) and loses on small
//! interiors. Memory is the four quarters and one choice's halves, bounded
//! by [`QUARTER_LIMIT`] and [`HALF_LIMIT`]; a board past them is refused.

use crate::counts::PieceCounts;
use crate::interior::{Interior, Start};
use crate::lanes::Path;
use crate::pairs::{Pairs, Weights};
use std::sync::atomic::{AtomicUsize, Ordering};

/// An interior's free rows from a start on, with the columns each leaves
/// open once the start's queens attack, and their places on the board.
struct Rows {
    /// Row of free row `i`, counted from the start's row.
    pos: [u32; 32],
    /// Columns open in free row `i`.
    open: [u32; 32],
    len: usize,
}

impl Rows {
    fn new(it: &Interior, start: &Start) -> Rows {
        let first = usize::from(start.row);
        let mut rows = Rows {
            pos: [0; 32],
            open: [0; 32],
            len: it.rows - first,
        };
        let mut p = 0u32;
        for i in 0..rows.len {
            let j = first + i;
            // Diagonals of the start's queens travel one column per row.
            let l = (u64::from(start.l) << p) as u32;
            let r = (u64::from(start.r) >> p) as u32;
            rows.pos[i] = p;
            rows.open[i] = it.allowed[j] & !(start.d | l | r);
            p += it.shift[j];
        }
        rows
    }
}

/// The diagonals both halves can reach, as bit ranges: a queen in row `p`
/// and column `c` is on diagonal `p + c` and anti-diagonal `c - p + 31`.
#[derive(Clone, Copy, Debug)]
struct Window {
    lo1: u32,
    width1: u32,
    lo2: u32,
    width2: u32,
}

impl Window {
    fn new(rows: &Rows, west: u32, east: u32) -> Window {
        let (min_p, max_p) = (rows.pos[0], rows.pos[rows.len - 1]);
        let (min_e, max_w) = (east.trailing_zeros(), 31 - west.leading_zeros());
        // Diagonals p + c: the east reaches from min_p + min_e, the west up
        // to max_p + max_w. Anti-diagonals c - p: the east from min_e -
        // max_p, the west up to max_w - min_p. Both spans are at most the
        // height of the rows, so the two fit one u64.
        let lo1 = min_p + min_e;
        let lo2 = min_e + 31 - max_p;
        let w = Window {
            lo1,
            width1: (max_p + max_w + 1).saturating_sub(lo1),
            lo2,
            width2: (max_w + 31 - min_p + 1).saturating_sub(lo2),
        };
        // Bit 63 stays free: the transposed table keeps its slots' marks there.
        debug_assert!(w.width1 + w.width2 <= 63, "{w:?}");
        w
    }

    /// A half's diagonals as one word: diagonals low, anti-diagonals high.
    #[inline(always)]
    fn key(&self, d1: u64, d2: u64) -> u64 {
        let mask = |w: u32| if w >= 64 { u64::MAX } else { (1u64 << w) - 1 };
        ((d1 >> self.lo1) & mask(self.width1))
            | (((d2 >> self.lo2) & mask(self.width2)) << self.width1)
    }
}

/// Halves kept for one choice of east rows, on either side: 2^24 words
/// (128 MiB). Past it a choice is refused ([`TooLarge`]), never grown.
pub const HALF_LIMIT: usize = 1 << 24;

/// Bytes a quarter placement takes while its table is built (a tuple in a
/// list, then its columns) and a half while a choice is counted (its key,
/// its copy in a class list, its share of a sieve part).
const QUARTER_BYTES: u64 = 48;
const HALF_BYTES: u64 = 32;

/// What the join may hold: quarter placements (shared by the threads) and
/// halves per side of a choice (per thread).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    pub quarters: usize,
    pub halves: usize,
    /// Threads that may each build their own tables (joins of different
    /// subproblems): each then gets its share of `quarters`.
    pub threads: usize,
}

impl Budget {
    /// `bytes` in all for `threads` threads: five eighths for the quarter
    /// tables, the rest for the threads' halves (above the defaults too).
    pub fn from_bytes(bytes: u64, threads: usize) -> Budget {
        let share = |part: u64, each: u64| usize::try_from(part / each).unwrap_or(usize::MAX);
        Budget {
            quarters: share(bytes / 8 * 5, QUARTER_BYTES),
            halves: share(bytes / 8 * 3 / threads.max(1) as u64 / 2, HALF_BYTES),
            threads: threads.max(1),
        }
    }

    /// The budget of one thread's own tables, when every thread builds
    /// its own (the join of a prefix, frame or ring part).
    pub fn per_thread(self) -> Budget {
        Budget {
            quarters: self.quarters / self.threads.max(1),
            threads: 1,
            ..self
        }
    }
}

impl Default for Budget {
    /// The default bounds, for as many threads as this machine has.
    fn default() -> Budget {
        Budget {
            quarters: QUARTER_LIMIT,
            halves: HALF_LIMIT,
            threads: crate::threads::default_threads(),
        }
    }
}

/// An interior too large for the join's memory bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "this board needs more than {limit} placements in one table of the join, past its memory \
     bound: give the join more memory (--memory), count it by backtracking (--mode \
     backtrack), or cut it into smaller subproblems (--strategy rings)"
)]
pub struct TooLarge {
    pub limit: usize,
}

/// Every placement on some of a run of free rows (one half of the rows:
/// the upper or the lower) and one side's columns, grouped by the set of
/// rows it uses and, within a set, sorted by the columns it takes. A half
/// for a choice of east rows is one placement on the upper rows joined to
/// one on the lower rows that takes the side's other columns and shares
/// no diagonal: so halves come from two small tables built once, not
/// from a search per choice.
pub struct Quarter {
    /// First row of the run, and its length.
    first: usize,
    len: usize,
    /// Placements on row set `t` (bit i: row `first + i`) are
    /// `at[t]..at[t + 1]` (64-bit: a table may pass 2^32 placements
    /// when the budget allows).
    at: Vec<u64>,
    cols: Vec<u32>,
    d1: Vec<u64>,
    d2: Vec<u64>,
}

/// Placements kept in one join's four quarters: 2^26 (1.3 GiB).
pub const QUARTER_LIMIT: usize = 1 << 26;

/// The placements one join's quarter tables may still take, shared by the
/// threads that build its quarters at once ([`Shape::quarter`]). A walk
/// takes a block at a time (one atomic operation per block, not per
/// placement) and gives back what it did not use, so quarters built one
/// after another are bound exactly.
pub struct Room {
    left: AtomicUsize,
    limit: usize,
}

/// Placements a walk takes from its [`Room`] at once.
const ROOM_BLOCK: usize = 4096;

impl Room {
    pub fn new(limit: usize) -> Room {
        Room {
            left: AtomicUsize::new(limit),
            limit,
        }
    }

    /// Up to [`ROOM_BLOCK`] placements; 0 when the room is used up.
    fn take(&self) -> usize {
        self.left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                (left > 0).then(|| left - left.min(ROOM_BLOCK))
            })
            .map_or(0, |left| left.min(ROOM_BLOCK))
    }

    fn give_back(&self, unused: usize) {
        self.left.fetch_add(unused, Ordering::Relaxed);
    }
}

/// A walk's share of a [`Room`]: the placements it has taken and not used.
struct Taken<'a> {
    room: &'a Room,
    left: usize,
}

impl Taken<'_> {
    /// Room for one more placement, if the join has any.
    fn one(&mut self) -> bool {
        if self.left == 0 {
            self.left = self.room.take();
        }
        if self.left == 0 {
            return false;
        }
        self.left -= 1;
        true
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        self.room.give_back(self.left);
    }
}

/// The walk that fills a [`Quarter`]'s lists: every placement on the run
/// of `len` free rows from `first`, in the columns of `side`, each in the
/// list of the row set it uses, while the join has room for it.
struct QuarterWalk<'a> {
    rows: &'a Rows,
    first: usize,
    len: usize,
    side: u32,
    /// Placements (columns, diagonals, anti-diagonals) by row set.
    lists: Vec<Vec<(u32, u64, u64)>>,
    taken: Taken<'a>,
}

impl QuarterWalk<'_> {
    /// Places queens on the run's rows from `i` on, given those placed on
    /// the rows before `i`: on row set `set`, taking columns `c` and
    /// diagonals `d1`, `d2`.
    fn place(
        &mut self,
        i: usize,
        set: usize,
        (c, d1, d2): (u32, u64, u64),
    ) -> Result<(), TooLarge> {
        if i == self.len {
            if !self.taken.one() {
                return Err(TooLarge {
                    limit: self.taken.room.limit,
                });
            }
            self.lists[set].push((c, d1, d2));
            return Ok(());
        }
        // Row i left empty, then each open column of it taken.
        self.place(i + 1, set, (c, d1, d2))?;
        let p = self.rows.pos[self.first + i];
        let mut open = self.rows.open[self.first + i]
            & self.side
            & !(c | (d1 >> p) as u32 | (d2 >> (31 - p)) as u32);
        while open != 0 {
            let col = open.trailing_zeros();
            open &= open - 1;
            let next = (
                c | 1 << col,
                d1 | 1u64 << (p + col),
                d2 | 1u64 << (col + 31 - p),
            );
            self.place(i + 1, set | 1 << i, next)?;
        }
        Ok(())
    }
}

impl Quarter {
    fn new(
        rows: &Rows,
        first: usize,
        len: usize,
        side: u32,
        room: &Room,
    ) -> Result<Quarter, TooLarge> {
        let mut walk = QuarterWalk {
            rows,
            first,
            len,
            side,
            lists: vec![Vec::new(); 1 << len],
            taken: Taken { room, left: 0 },
        };
        walk.place(0, 0, (0, 0, 0))?;
        let QuarterWalk { lists, taken, .. } = walk;
        drop(taken);
        Ok(Quarter::of_lists(first, len, lists))
    }

    /// The table of the placements in `lists` (those on row set `t` in
    /// `lists[t]`), each row set's sorted by the columns they take.
    fn of_lists(first: usize, len: usize, lists: Vec<Vec<(u32, u64, u64)>>) -> Quarter {
        let total: usize = lists.iter().map(Vec::len).sum();
        let mut q = Quarter {
            first,
            len,
            at: Vec::with_capacity(lists.len() + 1),
            cols: Vec::with_capacity(total),
            d1: Vec::with_capacity(total),
            d2: Vec::with_capacity(total),
        };
        for mut list in lists {
            q.at.push(q.cols.len() as u64);
            list.sort_unstable_by_key(|e| e.0);
            for (c, d1, d2) in list {
                q.cols.push(c);
                q.d1.push(d1);
                q.d2.push(d2);
            }
        }
        q.at.push(q.cols.len() as u64);
        q
    }

    /// The placements on the rows of `rows_in` that fall in this run.
    fn range(&self, rows_in: u32) -> std::ops::Range<usize> {
        let t = ((rows_in >> self.first) & ((1u32 << self.len) - 1)) as usize;
        self.at[t] as usize..self.at[t + 1] as usize
    }
}

/// How an interior (below one start) is cut for the join: its rows, its
/// column halves, the diagonals they share and its symmetries. Cheap to
/// make (no tables), so a planner lists choices of east rows with it.
pub struct Shape {
    rows: Rows,
    west: u32,
    east: u32,
    win: Window,
    /// Rows that cannot take an east (west) queen: west (east) rows.
    must_w: u32,
    must_e: u32,
    /// Whether turning the board upside down maps the interior onto
    /// itself (then a choice and its rows reversed count alike).
    flip: bool,
    /// Whether a left-to-right mirror maps the interior onto itself with
    /// west and east swapped (then a choice and the other rows count alike).
    mirror: bool,
    /// Even whole boards: the key bits of the two long diagonals (see
    /// [`Join::count_choice`]); 0 elsewhere.
    long: u64,
}

/// A [`Shape`] with its quarter tables built: ready to count choices.
pub struct Join {
    shape: Shape,
    /// Placements on the upper and lower free rows, east and west.
    quarters: [Quarter; QUARTERS],
    /// Halves a side of a choice may hold.
    half_limit: usize,
    /// How pairs are counted: AVX2 (and POPCNT) or portable code.
    path: Path,
}

/// The quarter tables of a join.
pub const QUARTERS: usize = 4;

/// The largest board [`Shape::piece`] takes: beyond it the halves of one
/// choice of east rows outgrow memory (and the choices number millions).
pub const MAX_WHOLE_N: u32 = 24;

impl Shape {
    /// The interior `it` below `start`.
    pub fn of(it: &Interior, start: &Start) -> Shape {
        let rows = Rows::new(it, start);
        let k = rows.len;
        let free = rows.open[..k].iter().fold(0u32, |a, &o| a | o);
        // West: the lowest k / 2 free columns.
        let mut west = 0u32;
        let mut m = free;
        for _ in 0..k / 2 {
            west |= m & m.wrapping_neg();
            m &= m - 1;
        }
        let east = free & !west;
        let (mut must_w, mut must_e) = (0u32, 0u32);
        for i in 0..k {
            if rows.open[i] & east == 0 {
                must_w |= 1 << i;
            }
            if rows.open[i] & west == 0 {
                must_e |= 1 << i;
            }
        }
        // A free column no row can take leaves no completion: every row
        // becomes a "must" of both sides, and no choice passes.
        if free.count_ones() as usize != k {
            must_w = u32::MAX;
            must_e = u32::MAX;
        }
        let win = if k == 0 {
            Window {
                lo1: 0,
                width1: 0,
                lo2: 0,
                width2: 0,
            }
        } else {
            Window::new(&rows, west, east)
        };
        Shape {
            rows,
            west,
            east,
            win,
            must_w,
            must_e,
            flip: false,
            mirror: false,
            long: 0,
        }
    }

    /// Piece `piece` (below [`whole_pieces`]) of the whole `n`×`n` board,
    /// with the number of boards it stands for. Even N: the empty board,
    /// symmetric both ways. Odd N: the queen of the middle column in row
    /// `piece`; the others' columns then mirror onto each other, and rows r
    /// and N-1-r count alike (the board turned upside down), so rows before
    /// the middle (r < N/2) stand for two.
    pub fn piece(n: usize, piece: usize) -> (Shape, u32) {
        assert!(
            (1..=MAX_WHOLE_N as usize).contains(&n) && piece < whole_pieces(n),
            "the join takes whole boards up to N={MAX_WHOLE_N}"
        );
        let mid = n / 2;
        if n.is_multiple_of(2) {
            let mut j = Shape::of(&Interior::new(n, &[]), &Start::default());
            (j.flip, j.mirror) = (true, true);
            // The long diagonals r = c (anti-diagonal key c - r + 31 =
            // 31) and r + c = n - 1 (diagonal key n - 1): both in the
            // window.
            let w = j.win;
            j.long = 1u64 << (n as u32 - 1 - w.lo1) | 1u64 << (w.width1 + 31 - w.lo2);
            (j, 1)
        } else {
            let r = piece;
            let queen = [(r, mid)];
            let mut j = Shape::of(&Interior::new(n, &queen), &Start::default());
            (j.flip, j.mirror) = (r == mid, true);
            (j, if r == mid { 1 } else { 2 })
        }
    }

    /// Free rows.
    pub fn rows(&self) -> usize {
        self.rows.len
    }

    /// Every choice of east rows that can hold a completion, each with the
    /// number of choices it stands for (see [`Shape::weight`]), in
    /// increasing order.
    pub fn choices(&self) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        self.for_each_choice(|s, w| out.push((s, w)));
        out
    }

    /// [`Shape::choices`], one at a time.
    pub fn for_each_choice(&self, visit: impl FnMut(u32, u32)) {
        self.for_each_choice_in(0, u64::MAX, visit)
    }

    /// [`Shape::for_each_choice`] of the choices `s` with `lo <= s < hi`.
    pub fn for_each_choice_in(&self, lo: u64, hi: u64, mut visit: impl FnMut(u32, u32)) {
        let _ = self.try_for_each_choice_in(lo, hi, |s, w| {
            visit(s, w);
            std::ops::ControlFlow::Continue(())
        });
    }

    /// [`Shape::for_each_choice_in`], ended early once `visit` breaks.
    pub fn try_for_each_choice_in(
        &self,
        lo: u64,
        hi: u64,
        mut visit: impl FnMut(u32, u32) -> std::ops::ControlFlow<()>,
    ) -> std::ops::ControlFlow<()> {
        let k = self.rows.len;
        let all = self.all_rows();
        let ke = self.east.count_ones();
        let mut s: u32 = if ke == 0 { 0 } else { all >> (k as u32 - ke) };
        loop {
            if u64::from(s) >= hi {
                break;
            }
            if u64::from(s) >= lo {
                if let Some(w) = self.weight(s) {
                    visit(s, w)?;
                }
            }
            if ke == 0 || ke as usize == k {
                break;
            }
            // The next set of as many rows (Gosper).
            let low = s & s.wrapping_neg();
            let ripple = s.wrapping_add(low);
            if ripple == 0 {
                break;
            }
            s = ripple | (((s ^ ripple) >> 2) / low);
            if s > all {
                break;
            }
        }
        std::ops::ControlFlow::Continue(())
    }

    /// Bits of the free rows.
    fn all_rows(&self) -> u32 {
        let k = self.rows.len;
        if k == 32 {
            u32::MAX
        } else {
            (1u32 << k) - 1
        }
    }

    /// The number of choices east rows `s` stand for, if `s` is one that
    /// [`Shape::choices`] lists (any other value: `None`, so an id naming a
    /// choice can be checked). On a symmetric interior a choice stands for
    /// its images: upside down (rows reversed) an east half is still an
    /// east half, and left to right east and west swap, so the east rows
    /// become the others. Only the least of each class is listed.
    pub fn weight(&self, s: u32) -> Option<u32> {
        let k = self.rows.len;
        let all = self.all_rows();
        let ke = self.east.count_ones();
        if s & !all != 0 || s.count_ones() != ke || s & self.must_w != 0 || self.must_e & !s != 0 {
            return None;
        }
        let mirror = self.mirror && ke as usize * 2 == k;
        // The images: s, flipped, and each mirrored (the other rows).
        let flipped = if self.flip && k > 0 {
            s.reverse_bits() >> (32 - k)
        } else {
            s
        };
        let mut images = [s, flipped, s, flipped];
        if mirror {
            images[2] = all & !s;
            images[3] = all & !flipped;
        }
        if images.iter().any(|&t| t < s) {
            return None;
        }
        images.sort_unstable();
        Some(1 + images.windows(2).filter(|p| p[0] != p[1]).count() as u32)
    }

    /// Builds the quarter tables within `budget`.
    pub fn build(self, budget: Budget) -> Result<Join, TooLarge> {
        let room = Room::new(budget.quarters);
        let quarters = [
            self.quarter(0, &room)?,
            self.quarter(1, &room)?,
            self.quarter(2, &room)?,
            self.quarter(3, &room)?,
        ];
        Ok(self.join(quarters, budget))
    }

    /// Quarter table `i` of [`QUARTERS`] (the east side's upper and lower
    /// free rows, then the west side's), its placements taken from `room`:
    /// threads may build a join's quarters at once.
    pub fn quarter(&self, i: usize, room: &Room) -> Result<Quarter, TooLarge> {
        let (k, h) = (self.rows.len, self.rows.len / 2);
        let (first, len) = if i.is_multiple_of(2) {
            (0, h)
        } else {
            (h, k - h)
        };
        let side = if i < 2 { self.east } else { self.west };
        Quarter::new(&self.rows, first, len, side, room)
    }

    /// The join of the quarter tables [`Shape::quarter`] built, in order.
    pub fn join(self, quarters: [Quarter; QUARTERS], budget: Budget) -> Join {
        Join {
            shape: self,
            quarters,
            half_limit: budget.halves,
            path: pair_path(None),
        }
    }
}

/// Pieces [`Shape::piece`] cuts an `n`×`n` board into: one for even N, a
/// row of the middle queen for each row down to the middle for odd N.
pub fn whole_pieces(n: usize) -> usize {
    if n.is_multiple_of(2) {
        1
    } else {
        n / 2 + 1
    }
}

impl Join {
    /// The interior `it` below `start`.
    pub fn new(it: &Interior, start: &Start) -> Result<Join, TooLarge> {
        Join::within(it, start, Budget::default())
    }

    /// [`Join::new`] within `budget`.
    pub fn within(it: &Interior, start: &Start, budget: Budget) -> Result<Join, TooLarge> {
        Shape::of(it, start).build(budget)
    }

    /// Counts pairs on `path` if this CPU has it (`None`: the fastest).
    /// The pair loop has two: AVX2 with POPCNT (taken for AVX-512 too: its
    /// wider build measured 2–3× slower), and portable code ("scalar").
    pub fn on(mut self, path: Option<Path>) -> Join {
        self.path = pair_path(path);
        self
    }

    /// The path pairs are counted on.
    pub fn path(&self) -> Path {
        self.path
    }

    /// Bytes its quarter tables hold.
    pub fn table_bytes(&self) -> u64 {
        self.quarters
            .iter()
            .map(|q| {
                8 * q.at.capacity()
                    + 4 * q.cols.capacity()
                    + 8 * (q.d1.capacity() + q.d2.capacity())
            })
            .sum::<usize>() as u64
    }

    /// Free rows.
    pub fn rows(&self) -> usize {
        self.shape.rows.len
    }

    /// See [`Shape::choices`].
    pub fn choices(&self) -> Vec<(u32, u32)> {
        self.shape.choices()
    }

    /// Completions with east rows `s` (in `c1`) and half placements
    /// enumerated (in `nodes`). `halves` holds both sides' halves between
    /// calls, so a thread allocates once.
    pub fn count_choice(&self, s: u32, halves: &mut Halves) -> Result<PieceCounts, TooLarge> {
        let shape = &self.shape;
        let all = shape.all_rows();
        let mut counts = PieceCounts::default();
        halves.east.clear();
        counts.nodes += self.join_quarters(true, s, &mut halves.east, &mut halves.keys)?;
        if !halves.east.is_empty() {
            halves.west.clear();
            counts.nodes +=
                self.join_quarters(false, all & !s, &mut halves.west, &mut halves.keys)?;
            counts.c1 += if shape.long == 0 {
                halves.pairs.count(&halves.east, &halves.west, self.path)
            } else {
                self.long_classes(halves)
            };
        }
        Ok(counts)
    }

    /// The halves of one side (east or west) on `rows_in`: each upper
    /// placement joined to every lower one that takes the rest of the
    /// side's columns and shares no diagonal, pushed as its key. `keys`
    /// holds the lower placements' keys. Returns the pairs tried.
    fn join_quarters(
        &self,
        east: bool,
        rows_in: u32,
        out: &mut Vec<u64>,
        keys: &mut Vec<u64>,
    ) -> Result<u64, TooLarge> {
        let [eu, el, wu, wl] = &self.quarters;
        let (upper, lower, side) = if east {
            (eu, el, self.shape.east)
        } else {
            (wu, wl, self.shape.west)
        };
        let (win, limit) = (&self.shape.win, self.half_limit);
        let (up, low) = (upper.range(rows_in), lower.range(rows_in));
        if up.is_empty() || low.is_empty() {
            return Ok(0);
        }
        let low_cols = &lower.cols[low.clone()];
        let mut tried = 0u64;
        let mut i = up.start;
        while i < up.end {
            let c = upper.cols[i];
            let mut j = i + 1;
            while j < up.end && upper.cols[j] == c {
                j += 1;
            }
            let need = side & !c;
            let from = low_cols.partition_point(|&x| x < need);
            let to = from + low_cols[from..].partition_point(|&x| x == need);
            if from < to {
                let r = low.start + from..low.start + to;
                let (l1, l2) = (&lower.d1[r.clone()], &lower.d2[r]);
                // Keys are OR-linear: a half's is its two placements' ORed, so
                // the lower ones are made once for every upper one.
                keys.clear();
                keys.extend(l1.iter().zip(l2).map(|(&b1, &b2)| win.key(b1, b2)));
                for a in i..j {
                    let (a1, a2) = (upper.d1[a], upper.d2[a]);
                    let ka = win.key(a1, a2);
                    tried += l1.len() as u64;
                    // Every lower placement written, only those that pass
                    // kept: no branch to mispredict on a pass rate near half.
                    out.reserve(l1.len());
                    let spare = &mut out.spare_capacity_mut()[..l1.len()];
                    let mut kept = 0;
                    for (k, ((&b1, &b2), &kb)) in l1.iter().zip(l2).zip(keys.iter()).enumerate() {
                        spare[kept.min(k)].write(ka | kb);
                        kept += usize::from((a1 & b1) | (a2 & b2) == 0);
                    }
                    // SAFETY: slots 0..kept of the spare capacity were written.
                    unsafe { out.set_len(out.len() + kept) };
                    if out.len() > limit {
                        return Err(TooLarge { limit });
                    }
                }
            }
            i = j;
        }
        Ok(tried)
    }

    /// The completions a choice stands for on an even whole board, counted
    /// through the reflections in the two long diagonals: reflecting in
    /// one moves the other's queen (if any) from east to west or back and
    /// keeps its own. So solutions whose queen on a long diagonal is east
    /// are as many as those whose queen is west, and it is enough to count
    /// those with none east, twice for each one west. The choice also
    /// stands for its mirror image (the other rows, east and west
    /// exchanged), whose count is the same sum with the sides swapped; the
    /// two sums, taken here from this choice's halves, share the mirror
    /// pair's weight: pairs weigh 1 with no long queen, 2^(j-1) with j west
    /// and none east, 2^(i-1) with i east and none west, 0 with a long
    /// queen on each side. Over the choices this adds up to the total. The
    /// weights are the pair count's: the long diagonals cut its table, so
    /// the pairs that weigh 0 are never visited.
    fn long_classes(&self, halves: &mut Halves) -> u64 {
        // Indexed by the long queens (east, west).
        const LONG: Weights = [[1, 1, 2], [1, 0, 0], [2, 0, 0]];
        let long = self.shape.long;
        halves
            .pairs
            .count_weighted(&halves.east, &halves.west, self.path, long, &LONG)
    }
}

/// The halves of one choice, kept between choices to reuse their memory.
#[derive(Default)]
pub struct Halves {
    east: Vec<u64>,
    west: Vec<u64>,
    /// Keys of the lower placements being joined.
    keys: Vec<u64>,
    pairs: Pairs,
}

impl Halves {
    /// Bytes held for halves (the most any choice so far needed).
    pub fn bytes(&self) -> u64 {
        let lists = [&self.east, &self.west, &self.keys];
        lists.iter().map(|v| 8 * v.capacity() as u64).sum::<u64>() + self.pairs.bytes()
    }
}

/// The pair loops this CPU has, the portable one first (for tests that
/// check each): the AVX2 one when there is one, else the portable one
/// again, with the reason printed.
pub fn pair_loops() -> [Path; 2] {
    let loops = [pair_path(Some(Path::Scalar)), pair_path(None)];
    if loops[1] == Path::Scalar {
        eprintln!("skipped the AVX2 pair loop: this CPU lacks AVX2 or POPCNT");
    }
    loops
}

/// The pair loop's path for a request (`None`: the fastest): AVX2 when
/// asked for AVX2 or better and the CPU has AVX2 and POPCNT, else portable.
pub fn pair_path(want: Option<Path>) -> Path {
    let has = Path::Avx2.supported() && {
        #[cfg(target_arch = "x86_64")]
        let popcnt = std::arch::is_x86_feature_detected!("popcnt");
        #[cfg(not(target_arch = "x86_64"))]
        let popcnt = false;
        popcnt
    };
    if has && want.is_none_or(|p| p >= Path::Avx2) {
        Path::Avx2
    } else {
        Path::Scalar
    }
}

/// Completions (in `c1`) and half placements enumerated (in `nodes`) of
/// `it` below `start`, by the join, on one thread.
pub fn count_from(it: &Interior, start: &Start) -> Result<PieceCounts, TooLarge> {
    count_within(it, start, Budget::default(), None)
}

/// [`count_from`] within `budget`, its pairs counted on `path`.
pub fn count_within(
    it: &Interior,
    start: &Start,
    budget: Budget,
    path: Option<Path>,
) -> Result<PieceCounts, TooLarge> {
    let join = Join::within(it, start, budget)?.on(path);
    let mut counts = PieceCounts::default();
    if join.rows() == 0 {
        counts.c1 = 1;
        return Ok(counts);
    }
    let mut halves = Halves::default();
    for (s, weight) in join.choices() {
        let c = join.count_choice(s, &mut halves)?;
        counts.c1 += c.c1 * u64::from(weight);
        counts.nodes += c.nodes;
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::border::Frames;
    use crate::Size;

    #[test]
    fn the_whole_board_joined_gives_every_total_up_to_twelve() {
        let want = [1u64, 0, 0, 2, 10, 4, 40, 92, 352, 724, 2680, 14200];
        for (i, &w) in want.iter().enumerate().skip(3) {
            let n = i + 1;
            let it = Interior::new(n, &[]);
            assert_eq!(count_from(&it, &Start::default()).unwrap().c1, w, "N={n}");
        }
    }

    #[test]
    fn whole_boards_counted_by_classes_of_choices_give_every_total_up_to_fourteen() {
        let want = [
            1u64, 0, 0, 2, 10, 4, 40, 92, 352, 724, 2680, 14200, 73712, 365596,
        ];
        for (i, &w) in want.iter().enumerate().skip(3) {
            let mut halves = Halves::default();
            let mut total = 0;
            for piece in 0..whole_pieces(i + 1) {
                let (shape, times) = Shape::piece(i + 1, piece);
                let join = shape.build(Budget::default()).unwrap();
                for (s, weight) in join.choices() {
                    total +=
                        join.count_choice(s, &mut halves).unwrap().c1 * u64::from(weight * times);
                }
            }
            assert_eq!(total, w, "N={}", i + 1);
        }
    }

    /// A seeded random partial board of `n` with `left` free rows: queens
    /// in random rows and columns, each safe from those before it (the
    /// board need not have a completion).
    fn random_board(n: usize, left: usize, seed: u64) -> Vec<(usize, usize)> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move |m: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % m as u64) as usize
        };
        let mut queens: Vec<(usize, usize)> = Vec::new();
        let mut tries = 0;
        while queens.len() < n - left && tries < 10_000 {
            tries += 1;
            let (r, c) = (next(n), next(n));
            let safe = queens
                .iter()
                .all(|&(qr, qc)| qr != r && qc != c && qr.abs_diff(r) != qc.abs_diff(c));
            if safe {
                queens.push((r, c));
            }
        }
        queens
    }

    /// Seeded random boards of N=19..=32 with 8 to 13 free rows, spread
    /// anywhere (gaps, edges): the join gives the search's count. Queens
    /// that leave no completion count 0 on both sides.
    #[test]
    fn the_join_agrees_with_the_search_on_random_boards_up_to_32() {
        let mut nonzero = 0;
        for n in 19..=32usize {
            for seed in 0..6u64 {
                let left = 8 + (seed as usize + n) % 6;
                let queens = random_board(n, left, seed * 100 + n as u64);
                let it = Interior::new(n, &queens);
                if it.rows() < 3 {
                    continue;
                }
                let want = it.count().c1;
                let got = count_from(&it, &Start::default()).unwrap().c1;
                assert_eq!(got, want, "N={n} queens {queens:?}");
                nonzero += usize::from(want > 0);
            }
        }
        assert!(
            nonzero >= 10,
            "only {nonzero} boards with completions: a weak test"
        );
    }

    /// A byte budget splits five eighths to the quarter tables and the
    /// rest among the threads, and can raise the bounds above the defaults.
    #[test]
    fn a_byte_budget_sets_both_bounds() {
        let small = Budget::from_bytes(1 << 20, 1);
        assert_eq!(small.quarters, (1 << 20) / 8 * 5 / 48);
        assert_eq!(small.halves, (1 << 20) / 8 * 3 / 2 / 32);
        assert_eq!(Budget::from_bytes(1 << 20, 2).halves, small.halves / 2);
        let big = Budget::from_bytes(8 << 30, 2);
        assert!(
            big.quarters > QUARTER_LIMIT && big.halves > HALF_LIMIT,
            "{big:?}"
        );
    }

    /// A board whose quarter tables need more placements than allowed is
    /// refused with the bound, never built past it; within the bound it
    /// counts.
    #[test]
    fn quarter_tables_past_their_bound_are_refused() {
        let it = Interior::new(12, &[]);
        let within = |quarters| Budget {
            quarters,
            halves: HALF_LIMIT,
            threads: 1,
        };
        let fits = |limit| Join::within(&it, &Start::default(), within(limit)).is_ok();
        // The least bound that fits, by bisection.
        let (mut lo, mut hi) = (0usize, 1 << 20);
        assert!(fits(hi) && !fits(lo));
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            if fits(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        assert!(hi > 100, "N=12 has {hi} quarter placements");
        assert_eq!(
            Join::within(&it, &Start::default(), within(hi - 1)).err(),
            Some(TooLarge { limit: hi - 1 })
        );
        let mut halves = Halves::default();
        let join = Join::within(&it, &Start::default(), within(hi)).unwrap();
        let total: u64 = join
            .choices()
            .iter()
            .map(|&(s, w)| join.count_choice(s, &mut halves).unwrap().c1 * u64::from(w))
            .sum();
        assert_eq!(total, 14200);
    }

    #[test]
    fn the_join_agrees_with_the_search_on_every_ring_job_of_eleven() {
        let frames = Frames::new(Size::new(11).unwrap(), 1).unwrap();
        frames.for_each_in(0, u64::MAX, |f, _, _| {
            let it = frames.interior(&f);
            if it.rows() < 3 {
                return;
            }
            assert_eq!(
                count_from(&it, &Start::default()).unwrap().c1,
                it.count().c1,
                "{f:?}"
            );
            for start in it.split(2).0 {
                assert_eq!(
                    count_from(&it, &start).unwrap().c1,
                    it.count_from(&start).c1,
                    "{f:?} {start:?}"
                );
            }
        });
    }
}
