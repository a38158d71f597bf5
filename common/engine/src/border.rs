//! Border placement: one queen on each border line, in one ring of lines
//! (depth 1: rows 0 and N-1, columns 0 and N-1, the ring constellations
//! local `solve` counts) or two (depth 2: also rows 1, N-2 and columns 1,
//! N-2, the carry-chain frames of the Q27 project). One queen may serve a
//! row and a column line at once. Every solution has exactly one queen on
//! each border line, so the solutions split by their frame.
//!
//! The 8 symmetries map border lines to border lines, so they act on frames.
//! Only *canonical* frames are kept (the smallest key of their orbit), each
//! with its weight = orbit size = 8 / |stabiliser|, so
//! `total = Σ weight × completions`. The unique count is NOT Σ completions
//! of canonical frames (a completion can be symmetric when its frame is
//! not); [`crate::symmetric`] gives it by Burnside.
//!
//! A frame's key packs its 8 line positions, 5 bits each, **outer ring
//! first** (rows 0 and N-1, columns 0 and N-1). So a canonical frame has a
//! canonical outer ring, and only the outer ring's stabiliser (almost
//! always trivial) needs a full comparison.

use crate::board::{Size, Symmetry};
use crate::counts::PieceCounts;
use crate::interior::Interior;
use std::ops::ControlFlow;

/// Smallest N with a frame plan: below it the 8 lines cover the whole board.
pub const MIN_FRAME_N: u32 = 6;

/// The 8 border lines, in key order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Line {
    Row(usize),
    Col(usize),
}

fn lines(n: usize) -> [Line; 8] {
    use Line::{Col, Row};
    [
        Row(0),
        Row(n - 1),
        Col(0),
        Col(n - 1),
        Row(1),
        Row(n - 2),
        Col(1),
        Col(n - 2),
    ]
}

/// Bits of one position in a key.
pub const POS_BITS: u32 = 5;

/// Border lines per ring of depth.
const LINES_PER_RING: usize = 4;

/// One queen per border line: `pos[i]` is the queen's column on a row line,
/// or its row on a column line, in key order; `len` lines (4 per ring).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    pos: [u8; 8],
    len: u8,
}

impl Frame {
    pub fn key(&self) -> u64 {
        self.positions()
            .iter()
            .fold(0, |k, &p| k << POS_BITS | u64::from(p))
    }

    fn from_key(key: u64, len: usize) -> Frame {
        let mut pos = [0u8; 8];
        for (i, p) in pos[..len].iter_mut().enumerate() {
            *p = (key >> (POS_BITS * (len - 1 - i) as u32) & 31) as u8;
        }
        Frame {
            pos,
            len: len as u8,
        }
    }

    /// The queen's position on each line, in key order.
    pub fn positions(&self) -> &[u8] {
        &self.pos[..usize::from(self.len)]
    }

    /// The queens, without repeats (a corner-region queen serves two lines).
    pub fn queens(&self, n: usize) -> Vec<(usize, usize)> {
        let mut q: Vec<(usize, usize)> = lines(n)
            .iter()
            .zip(self.positions())
            .map(|(l, &p)| queen_on(*l, p))
            .collect();
        q.sort_unstable();
        q.dedup();
        q
    }
}

fn queen_on(line: Line, pos: u8) -> (usize, usize) {
    match line {
        Line::Row(r) => (r, pos as usize),
        Line::Col(c) => (pos as usize, c),
    }
}

fn attacks(a: (usize, usize), b: (usize, usize)) -> bool {
    a != b && (a.0 == b.0 || a.1 == b.1 || a.0.abs_diff(b.0) == a.1.abs_diff(b.1))
}

/// Frame geometry for one N and depth: the lines and how each symmetry
/// permutes them.
#[derive(Clone, Debug)]
pub struct Frames {
    n: usize,
    /// Lines in a frame: 4 per ring of depth.
    len: usize,
    lines: [Line; 8],
    /// `image_line[s][i]`: the line that symmetry `s` maps line `i` to.
    image_line: [[usize; 8]; 8],
}

/// What is wrong with a frame key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frames need N >= {MIN_FRAME_N}, got {0}")]
    TooSmall(u32),
    #[error("border depth must be 1 (4 lines) or 2 (8 lines), got {0}")]
    BadDepth(u32),
    #[error("frame key {0:#x} has a position off the board or unused bits set")]
    OffBoard(u64),
    #[error("frame key {0:#x} places two attacking queens")]
    Attacking(u64),
    #[error("frame key {0:#x} is not the canonical member of its symmetry orbit")]
    NotCanonical(u64),
}

impl Frames {
    /// Frames of `depth` rings of lines (1 or 2).
    pub fn new(n: Size, depth: u32) -> Result<Frames, FrameError> {
        if n.get() < MIN_FRAME_N {
            return Err(FrameError::TooSmall(n.get()));
        }
        if !(1..=2).contains(&depth) {
            return Err(FrameError::BadDepth(depth));
        }
        let n = n.n();
        let lines = lines(n);
        let mut image_line = [[0usize; 8]; 8];
        for (s, sym) in Symmetry::ALL.iter().enumerate() {
            for (i, &line) in lines.iter().enumerate() {
                // Two squares of the line fix its image line.
                let (a, b) = match line {
                    Line::Row(r) => ((r, 2), (r, 3)),
                    Line::Col(c) => ((2, c), (3, c)),
                };
                let (a, b) = (sym.apply(n, a.0, a.1), sym.apply(n, b.0, b.1));
                let img = if a.0 == b.0 {
                    Line::Row(a.0)
                } else {
                    Line::Col(a.1)
                };
                image_line[s][i] = lines
                    .iter()
                    .position(|&l| l == img)
                    .expect("border maps to border");
            }
        }
        Ok(Frames {
            n,
            len: LINES_PER_RING * depth as usize,
            lines,
            image_line,
        })
    }

    pub fn n(&self) -> usize {
        self.n
    }

    /// Lines in each frame (4 per ring of depth).
    pub fn lines(&self) -> usize {
        self.len
    }

    /// The frame after symmetry number `s` (index into [`Symmetry::ALL`]).
    pub fn image(&self, f: &Frame, s: usize) -> Frame {
        let sym = Symmetry::ALL[s];
        let mut pos = [0u8; 8];
        for i in 0..self.len {
            let (r, c) = queen_on(self.lines[i], f.pos[i]);
            let (r2, c2) = sym.apply(self.n, r, c);
            let j = self.image_line[s][i];
            pos[j] = match self.lines[j] {
                Line::Row(_) => c2 as u8,
                Line::Col(_) => r2 as u8,
            };
        }
        Frame { pos, len: f.len }
    }

    /// Orbit size of a frame (its weight): 8 / |symmetries that fix it|.
    pub fn weight(&self, f: &Frame) -> u32 {
        8 / (0..8).filter(|&s| self.image(f, s) == *f).count() as u32
    }

    /// Checks that `key` names a valid canonical frame and returns it.
    pub fn decode(&self, key: u64) -> Result<Frame, FrameError> {
        let f = Frame::from_key(key, self.len);
        let bits = self.len as u32 * POS_BITS;
        if key >> bits != 0 || f.positions().iter().any(|&p| p as usize >= self.n) {
            return Err(FrameError::OffBoard(key));
        }
        let q: Vec<_> = lines(self.n)
            .iter()
            .zip(f.positions())
            .map(|(l, &p)| queen_on(*l, p))
            .collect();
        if q.iter()
            .enumerate()
            .any(|(i, &a)| q[..i].iter().any(|&b| attacks(a, b)))
        {
            return Err(FrameError::Attacking(key));
        }
        if (1..8).any(|s| self.image(&f, s).key() < key) {
            return Err(FrameError::NotCanonical(key));
        }
        Ok(f)
    }

    /// Visits every canonical frame whose key is in `lo..hi`, in key order,
    /// with its weight and its number of distinct queens. Subtrees outside
    /// the range are skipped whole, so a narrow range is cheap wherever it lies.
    pub fn for_each_in(&self, lo: u64, hi: u64, mut visit: impl FnMut(Frame, u32, usize)) {
        let _ = self.try_for_each_in(lo, hi, |f, w, q| {
            visit(f, w, q);
            ControlFlow::Continue(())
        });
    }

    /// [`Frames::for_each_in`], ended early once `visit` breaks.
    pub fn try_for_each_in(
        &self,
        lo: u64,
        hi: u64,
        mut visit: impl FnMut(Frame, u32, usize) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let mut walk = Walk {
            frames: self,
            lo,
            hi,
            pos: [0; 8],
            queens: [(0, 0); 8],
            stab_outer: Vec::new(),
            broken: false,
        };
        walk.level(0, 0, 0, &mut visit);
        match walk.broken {
            true => ControlFlow::Break(()),
            false => ControlFlow::Continue(()),
        }
    }

    /// The board a frame leaves to fill: queens on the rows and columns it
    /// leaves free (weights are applied by the caller). Every image of the
    /// frame has as many completions, but not as cheap a search: the image
    /// whose row N-1 queen is nearest a corner lets that queen's long
    /// diagonal prune every row above (at N=15, rings searched this way
    /// visit 62% of the nodes of the canonical image). The key breaks ties,
    /// so the choice is deterministic.
    pub fn interior(&self, f: &Frame) -> Interior {
        let last = self.n as u8 - 1;
        let order = |g: &Frame| {
            let bottom = g.pos[1];
            (
                bottom.min(last - bottom),
                std::cmp::Reverse(bottom),
                g.key(),
            )
        };
        let best = (0..8)
            .map(|s| self.image(f, s))
            .min_by_key(order)
            .expect("eight images");
        Interior::new(self.n, &best.queens(self.n))
    }

    /// Counts the completions of a frame on one thread, without lanes
    /// (in `c1`), and the placements made (in `nodes`).
    pub fn count(&self, f: &Frame) -> PieceCounts {
        self.interior(f).count()
    }
}

/// Depth-first enumeration of frames in key order (one level per line).
struct Walk<'a> {
    frames: &'a Frames,
    lo: u64,
    hi: u64,
    pos: [u8; 8],
    queens: [(usize, usize); 8],
    /// Symmetries fixing the current outer ring (set at level 4).
    stab_outer: Vec<usize>,
    /// The visitor ended the walk.
    broken: bool,
}

impl Walk<'_> {
    /// Returns false once keys reach `hi`, or the visitor breaks (the walk
    /// is over).
    fn level(
        &mut self,
        i: usize,
        prefix: u64,
        distinct: usize,
        visit: &mut impl FnMut(Frame, u32, usize) -> ControlFlow<()>,
    ) -> bool {
        let fr = self.frames;
        if i == 4 && !self.outer_is_canonical() {
            return true;
        }
        if i == fr.len {
            let f = Frame {
                pos: self.pos,
                len: fr.len as u8,
            };
            let key = f.key();
            let mut fixed = 1;
            for &s in &self.stab_outer {
                let img = fr.image(&f, s).key();
                if img < key {
                    return true;
                }
                fixed += u32::from(img == key);
            }
            self.broken = visit(f, 8 / fixed, distinct).is_break();
            return !self.broken;
        }
        let rest = POS_BITS * (fr.len - 1 - i) as u32;
        for p in 0..fr.n as u8 {
            let sub = prefix << POS_BITS | u64::from(p);
            let (first, end) = (sub << rest, (sub + 1) << rest);
            if end <= self.lo {
                continue;
            }
            if first >= self.hi {
                return false;
            }
            let q = queen_on(fr.lines[i], p);
            if self.queens[..i].iter().any(|&b| attacks(q, b)) {
                continue;
            }
            self.pos[i] = p;
            self.queens[i] = q;
            let new = usize::from(!self.queens[..i].contains(&q));
            if !self.level(i + 1, sub, distinct + new, visit) {
                return false;
            }
        }
        true
    }

    /// The outer ring (lines 0..4) is the smallest in its orbit; records the
    /// symmetries that fix it.
    fn outer_is_canonical(&mut self) -> bool {
        let fr = self.frames;
        let f = Frame {
            pos: self.pos,
            len: fr.len as u8,
        };
        let outer = |g: &Frame| g.key() >> ((fr.len - LINES_PER_RING) as u32 * POS_BITS);
        let mine = outer(&f);
        self.stab_outer.clear();
        for s in 1..8 {
            // Inner positions are still 0 here; the outer lines' images come
            // only from outer lines, so their positions are exact.
            let o = outer(&fr.image(&f, s));
            if o < mine {
                return false;
            }
            if o == mine {
                self.stab_outer.push(s);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::known::known;

    fn frames(n: u32) -> Frames {
        Frames::new(Size::new(n).unwrap(), 2).unwrap()
    }

    #[test]
    fn weighted_completions_sum_to_the_total_at_both_depths() {
        for depth in [1, 2] {
            for n in MIN_FRAME_N..=13 {
                let fr = Frames::new(Size::new(n).unwrap(), depth).unwrap();
                let mut total = 0u128;
                fr.for_each_in(0, u64::MAX, |f, w, _| {
                    total += u128::from(w) * u128::from(fr.count(&f).c1)
                });
                assert_eq!(total, known(n).unwrap().total, "N={n} depth {depth}");
            }
        }
    }

    #[test]
    fn ring_orbits_cover_every_valid_ring_once() {
        // Σ weights = number of valid rings (one queen on each outer line,
        // corners shared, none attacking): each orbit counted by its size.
        let n = 9;
        let fr = Frames::new(Size::new(n as u32).unwrap(), 1).unwrap();
        let mut valid = 0;
        for t in 0..n {
            for b in 0..n {
                for l in 0..n {
                    for r in 0..n {
                        let q = [(0, t), (n - 1, b), (l, 0), (r, n - 1)];
                        let corners_agree = (t == 0) == (l == 0)
                            && (t == n - 1) == (r == 0)
                            && (b == 0) == (l == n - 1)
                            && (b == n - 1) == (r == n - 1);
                        let peaceful = q
                            .iter()
                            .enumerate()
                            .all(|(i, &a)| q[..i].iter().all(|&c| !attacks(a, c)));
                        valid += u32::from(corners_agree && peaceful);
                    }
                }
            }
        }
        let mut weights = 0;
        fr.for_each_in(0, u64::MAX, |_, w, _| weights += w);
        assert_eq!(weights, valid);
    }

    #[test]
    fn depth_must_be_one_or_two() {
        let n = Size::new(10).unwrap();
        assert_eq!(Frames::new(n, 3).unwrap_err(), FrameError::BadDepth(3));
        assert_eq!(Frames::new(n, 0).unwrap_err(), FrameError::BadDepth(0));
    }

    #[test]
    fn keys_round_trip_and_forgeries_are_caught() {
        let fr = frames(10);
        let mut keys = Vec::new();
        fr.for_each_in(0, u64::MAX, |f, w, q| {
            assert_eq!(fr.weight(&f), w);
            assert_eq!(f.queens(10).len(), q);
            keys.push(f.key());
        });
        assert!(keys.windows(2).all(|k| k[0] < k[1]), "key order");
        for &k in &keys {
            assert_eq!(fr.decode(k).unwrap().key(), k);
        }
        // A non-canonical image of a canonical frame is refused.
        let f = Frame::from_key(keys[keys.len() / 2], 8);
        let img = (1..8)
            .map(|s| fr.image(&f, s).key())
            .find(|&k| k != f.key())
            .unwrap();
        assert_eq!(fr.decode(img), Err(FrameError::NotCanonical(img)));
        assert!(matches!(fr.decode(u64::MAX), Err(FrameError::OffBoard(_))));
        assert!(matches!(fr.decode(0), Err(FrameError::Attacking(_))));
    }

    #[test]
    fn ranges_partition_the_enumeration() {
        let fr = frames(9);
        let mut all = Vec::new();
        fr.for_each_in(0, u64::MAX, |f, _, _| all.push(f.key()));
        let cut = [0, all[3], all[3] + 1, all[all.len() / 2], u64::MAX];
        let mut joined = Vec::new();
        for w in cut.windows(2) {
            fr.for_each_in(w[0], w[1], |f, _, _| joined.push(f.key()));
        }
        assert_eq!(joined, all);
    }
}
