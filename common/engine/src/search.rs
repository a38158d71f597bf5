//! The symmetry-pruned bitmap search (after Takaken's algorithm), cut into
//! pieces that threads (and later workers) count independently.
//!
//! Every orbit of solutions under the 8 symmetries is reached through one of
//! two cases, chosen by the queen in row 0:
//! - **Corner**: the queen of row 0 is in column 0. No such solution is
//!   symmetric under any non-trivial symmetry, so each one stands for an orbit
//!   of 8. The queen of row 1 sits in column `bound1`; a queen in column 1
//!   above row `bound1` would make the transposed board a smaller
//!   representative, so it is excluded.
//! - **Edge**: no queen in any corner; the queen of row 0 sits in column
//!   `bound1`, nearer the left than `bound2 = N-1-bound1` is. Rows above
//!   `bound1` and below `bound2` may not use the outer columns (another side of
//!   the board would then give a smaller representative), and at each leaf the
//!   rotations are compared to keep exactly one representative per orbit and
//!   learn its orbit size (2, 4 or 8).
//!
//! A [`Piece`] is a prefix of rows placed inside one case. The hot loop is
//! iterative, on fixed arrays, one u32 mask per row.

use crate::board::Size;
use crate::counts::PieceCounts;
use serde::{Deserialize, Serialize};

/// One of the two symmetry cases (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Case {
    Corner { bound1: u8 },
    Edge { bound1: u8 },
}

/// A subtree of the search: the rows `0..prefix.len()` placed as given.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Piece {
    pub case: Case,
    /// Column of the queen in each placed row, from row 0.
    pub prefix: Vec<u8>,
}

/// A piece that is not a valid state of the search for its N and case.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PieceError {
    #[error("case {0:?} does not exist for N={1}")]
    NoSuchCase(Case, u32),
    #[error("prefix of {len} rows does not fit N={n} (at most N-1 rows)")]
    TooLong { len: usize, n: u32 },
    #[error("row {row}: column {col} is not allowed by the search in this state")]
    NotAllowed { row: usize, col: u8 },
    #[error("prefix does not start with the rows that define case {0:?}")]
    WrongStart(Case),
}

/// Row masks and bounds of one case: everything the hot loop consults.
#[derive(Clone, Debug)]
pub struct Rules {
    case: Case,
    last: usize,
    mask: u32,
    /// Columns a queen may use in each row before attacks are considered.
    allowed: [u32; 32],
    /// The row with the `bound2` side rule (Edge only; out of range otherwise).
    bound2_row: usize,
    sidemask: u32,
    bound1: usize,
    topbit: u32,
    endbit: u32,
}

impl Rules {
    pub fn new(n: Size, case: Case) -> Result<Rules, PieceError> {
        let last = n.n() - 1;
        let mask = n.mask();
        let topbit = 1u32 << last;
        let sidemask = topbit | 1;
        let mut allowed = [mask; 32];
        let missing = PieceError::NoSuchCase(case, n.get());
        let (bound1, bound2_row, endbit) = match case {
            Case::Corner { bound1 } => {
                let b = bound1 as usize;
                if n.get() < 4 || !(2..=last.saturating_sub(1)).contains(&b) {
                    return Err(missing);
                }
                for a in &mut allowed[2..b] {
                    *a &= !2;
                }
                (b, usize::MAX, 0)
            }
            Case::Edge { bound1 } => {
                let b = bound1 as usize;
                let bound2 = last.saturating_sub(b);
                if b == 0 || b >= bound2 {
                    return Err(missing);
                }
                for a in &mut allowed[1..b] {
                    *a &= !sidemask;
                }
                // The `b` outermost columns on each side are closed in the
                // last row: a queen there would put a smaller queen on an edge.
                let low = (1u32 << b) - 1;
                let lastmask = low | (low << (n.n() - b));
                allowed[last] &= !lastmask;
                (b, bound2, topbit >> b)
            }
        };
        Ok(Rules {
            case,
            last,
            mask,
            allowed,
            bound2_row,
            sidemask,
            bound1,
            topbit,
            endbit,
        })
    }

    /// The rows that define the case: row 0, and row 1 for a corner.
    pub fn root(&self) -> Piece {
        let prefix = match self.case {
            Case::Corner { bound1 } => vec![0, bound1],
            Case::Edge { bound1 } => vec![bound1],
        };
        Piece {
            case: self.case,
            prefix,
        }
    }

    /// Free columns of row `y` given the attack masks of the rows above.
    #[inline(always)]
    fn candidates(&self, y: usize, l: u32, d: u32, r: u32) -> u32 {
        let mut bm = self.allowed[y & 31] & !(l | d | r);
        if y == self.bound2_row {
            // At row bound2 the outer columns must already hold a queen, or
            // this one must go there: otherwise the bottom edge is smaller.
            let side = d & self.sidemask;
            if side == 0 {
                return 0;
            }
            if side != self.sidemask {
                bm &= self.sidemask;
            }
        }
        bm
    }

    /// Replays `prefix` and returns the attack masks, checking that every
    /// placement is one the search itself would make.
    fn replay(&self, prefix: &[u8], board: &mut [u32; 32]) -> Result<(u32, u32, u32), PieceError> {
        if prefix.len() > self.last {
            return Err(PieceError::TooLong {
                len: prefix.len(),
                n: self.last as u32 + 1,
            });
        }
        let root = self.root().prefix;
        if prefix.len() < root.len() || prefix[..root.len()] != root[..] {
            return Err(PieceError::WrongStart(self.case));
        }
        let (mut l, mut d, mut r) = (0u32, 0u32, 0u32);
        for (y, &col) in prefix.iter().enumerate() {
            let bit = 1u32.checked_shl(col.into()).unwrap_or(0);
            // Rows fixed by the case skip the row rules (they define them).
            let free = if y < root.len() {
                self.mask & !(l | d | r)
            } else {
                self.candidates(y, l, d, r)
            };
            if bit & free == 0 {
                return Err(PieceError::NotAllowed { row: y, col });
            }
            board[y] = bit;
            (l, d, r) = ((l | bit) << 1, d | bit, (r | bit) >> 1);
        }
        Ok((l, d, r))
    }

    /// The children of `piece`: its prefix extended by one row, in column order.
    /// Also returns the placements made (one per child).
    pub fn children(&self, piece: &Piece) -> Result<Vec<Piece>, PieceError> {
        let mut board = [0u32; 32];
        let (l, d, r) = self.replay(&piece.prefix, &mut board)?;
        let y = piece.prefix.len();
        let mut bm = self.candidates(y, l, d, r);
        let mut out = Vec::with_capacity(bm.count_ones() as usize);
        while bm != 0 {
            let col = bm.trailing_zeros() as u8;
            bm &= bm - 1;
            let mut prefix = piece.prefix.clone();
            prefix.push(col);
            out.push(Piece {
                case: self.case,
                prefix,
            });
        }
        Ok(out)
    }

    /// Counts every solution below `piece`. The placements of the prefix
    /// itself are not counted as nodes: the one that made the piece did that.
    pub fn count(&self, piece: &Piece) -> Result<PieceCounts, PieceError> {
        let mut board = [0u32; 32];
        let (l, d, r) = self.replay(&piece.prefix, &mut board)?;
        Ok(self.count_from(piece.prefix.len(), l, d, r, &mut board))
    }

    /// The hot loop: depth-first from row `y0` with an explicit stack.
    /// Specialised per case (`EDGE`) so the corner loop pays nothing for the
    /// bound2 rule or the rotation checks. Indices are masked with `& 31`
    /// (every row index is below 32) so no bounds checks are left in the loop.
    fn count_from(&self, y0: usize, l: u32, d: u32, r: u32, board: &mut [u32; 32]) -> PieceCounts {
        match self.case {
            Case::Corner { .. } => self.count_case::<false>(y0, l, d, r, board),
            Case::Edge { .. } => self.count_case::<true>(y0, l, d, r, board),
        }
    }

    #[inline(always)]
    fn free<const EDGE: bool>(&self, y: usize, l: u32, d: u32, r: u32) -> u32 {
        if EDGE {
            self.candidates(y, l, d, r)
        } else {
            self.allowed[y & 31] & !(l | d | r)
        }
    }

    fn count_case<const EDGE: bool>(
        &self,
        y0: usize,
        l: u32,
        d: u32,
        r: u32,
        board: &mut [u32; 32],
    ) -> PieceCounts {
        let mut counts = PieceCounts::default();
        let last = self.last;
        if y0 == last {
            // Only the last row is open: at most one column is free.
            let bm = self.free::<EDGE>(last, l, d, r);
            if bm != 0 {
                counts.nodes += 1;
                board[last & 31] = bm;
                self.record_leaf(board, &mut counts);
            }
            return counts;
        }
        // Saved state of the rows above the current one: columns still to
        // try, then the three attack masks (one record, one address).
        let mut stack = [[0u32; 4]; 32];
        let (mut y, mut cl, mut cd, mut cr) = (y0, l, d, r);
        let mut bm = self.free::<EDGE>(y, l, d, r);
        let mut nodes = 0u64;
        loop {
            if bm == 0 {
                if y == y0 {
                    break;
                }
                y -= 1;
                [bm, cl, cd, cr] = stack[y & 31];
                continue;
            }
            let bit = bm & bm.wrapping_neg();
            bm ^= bit;
            if EDGE {
                board[y & 31] = bit; // only edge leaves look at the board
            }
            nodes += 1;
            let (nl, nd, nr) = ((cl | bit) << 1, cd | bit, (cr | bit) >> 1);
            if y + 2 >= last {
                // One or two rows left: finish them here instead of pushing
                // rows (the last row has at most one free column).
                if y + 1 == last {
                    self.finish_last::<EDGE>(nl, nd, nr, board, &mut counts, &mut nodes);
                } else {
                    let mut bm2 = self.free::<EDGE>(y + 1, nl, nd, nr);
                    while bm2 != 0 {
                        let b2 = bm2 & bm2.wrapping_neg();
                        bm2 ^= b2;
                        nodes += 1;
                        if EDGE {
                            board[(y + 1) & 31] = b2;
                        }
                        let (l2, d2, r2) = ((nl | b2) << 1, nd | b2, (nr | b2) >> 1);
                        self.finish_last::<EDGE>(l2, d2, r2, board, &mut counts, &mut nodes);
                    }
                }
                continue;
            }
            stack[y & 31] = [bm, cl, cd, cr];
            y += 1;
            (cl, cd, cr) = (nl, nd, nr);
            bm = self.free::<EDGE>(y, nl, nd, nr);
        }
        counts.nodes = nodes;
        counts
    }

    /// Places the last row's queen if its one free column is open.
    #[inline(always)]
    fn finish_last<const EDGE: bool>(
        &self,
        l: u32,
        d: u32,
        r: u32,
        board: &mut [u32; 32],
        counts: &mut PieceCounts,
        nodes: &mut u64,
    ) {
        let bm = self.free::<EDGE>(self.last, l, d, r);
        if bm != 0 {
            *nodes += 1;
            if EDGE {
                board[self.last & 31] = bm;
                self.record_leaf(board, counts);
            } else {
                counts.c8 += 1;
            }
        }
    }

    #[inline]
    fn record_leaf(&self, board: &[u32; 32], counts: &mut PieceCounts) {
        match self.case {
            Case::Corner { .. } => counts.c8 += 1,
            Case::Edge { .. } => match self.orbit_of_leaf(board) {
                Some(2) => counts.c2 += 1,
                Some(4) => counts.c4 += 1,
                Some(_) => counts.c8 += 1,
                None => {}
            },
        }
    }

    /// For an Edge leaf: `None` when a rotation or reflection of the board is
    /// a smaller representative reached elsewhere, else the orbit size.
    ///
    /// Boards are compared row by row on their bit values; a rotated board is
    /// read on the fly from the original (row `own` of the rotation is found
    /// by scanning for the queen in the matching column).
    fn orbit_of_leaf(&self, b: &[u32; 32]) -> Option<u8> {
        let last = self.last;
        // Quarter turn: only possible when the queen of row bound2 is in column 0.
        if b[self.bound2_row] == 1 {
            let mut own = 1;
            let mut ptn = 2u32;
            while own <= last {
                let mut bit = 1u32;
                let mut you = last;
                while b[you] != ptn && b[own] >= bit {
                    bit <<= 1;
                    you -= 1;
                }
                if b[own] > bit {
                    return None;
                }
                if b[own] < bit {
                    break;
                }
                own += 1;
                ptn <<= 1;
            }
            if own > last {
                return Some(2);
            }
        }
        // Half turn: only possible when the last row mirrors row 0.
        if b[last] == self.endbit {
            let mut own = 1;
            let mut you = last - 1;
            while own <= last {
                let mut bit = 1u32;
                let mut ptn = self.topbit;
                while b[you] != ptn && b[own] >= bit {
                    bit <<= 1;
                    ptn >>= 1;
                }
                if b[own] > bit {
                    return None;
                }
                if b[own] < bit {
                    break;
                }
                own += 1;
                you = you.wrapping_sub(1);
            }
            if own > last {
                return Some(4);
            }
        }
        // Three-quarter turn: only possible when row bound1's queen is in the top column.
        if b[self.bound1] == self.topbit {
            let mut own = 1;
            let mut ptn = self.topbit >> 1;
            while own <= last {
                let mut bit = 1u32;
                let mut you = 0;
                while b[you] != ptn && b[own] >= bit {
                    bit <<= 1;
                    you += 1;
                }
                if b[own] > bit {
                    return None;
                }
                if b[own] < bit {
                    break;
                }
                own += 1;
                ptn >>= 1;
            }
        }
        Some(8)
    }
}

/// All cases of the search for `n`, in a fixed order: corners by `bound1`,
/// then edges by `bound1`.
pub fn cases(n: Size) -> Vec<Case> {
    let n = n.get() as u8;
    let corners = (2..n.saturating_sub(1)).map(|bound1| Case::Corner { bound1 });
    let edges = (1..n)
        .take_while(|&b| 2 * b + 1 < n)
        .map(|bound1| Case::Edge { bound1 });
    if n < 4 {
        return Vec::new();
    }
    corners.chain(edges).collect()
}

/// The search cut into pieces, in a deterministic order.
#[derive(Clone, Debug)]
pub struct Split {
    pub pieces: Vec<Piece>,
    /// Placements made while cutting (the prefixes' own nodes), so that
    /// split nodes + piece nodes is the node count of the whole search.
    pub nodes: u64,
}

/// Cuts the search for `n` into at least `min_pieces` pieces where the board
/// allows, deepening all pieces one row at a time (so every piece has the
/// same depth and the order is the search's own order).
pub fn split(n: Size, min_pieces: usize) -> Split {
    let all_cases = cases(n);
    // The corner queen of row 0 is one placement shared by all corner cases.
    let mut nodes = u64::from(all_cases.iter().any(|c| matches!(c, Case::Corner { .. })));
    let rules: Vec<Rules> = all_cases
        .iter()
        .map(|&c| Rules::new(n, c).expect("cases() yields valid cases"))
        .collect();
    let mut pieces: Vec<(usize, Piece)> = rules
        .iter()
        .enumerate()
        .map(|(i, r)| (i, r.root()))
        .collect();
    // Each root adds one placement: the queen of row 1 (corner) or row 0 (edge).
    nodes += rules.len() as u64;
    // Deepen while too few, but never to the last row (pieces must have a row left).
    let deepenable = |ps: &[(usize, Piece)]| {
        !ps.is_empty() && ps.iter().all(|(_, p)| p.prefix.len() < n.n() - 1)
    };
    while pieces.len() < min_pieces && deepenable(&pieces) {
        let mut next = Vec::with_capacity(pieces.len() * 4);
        for (i, p) in &pieces {
            let kids = rules[*i].children(p).expect("split pieces are valid");
            nodes += kids.len() as u64;
            next.extend(kids.into_iter().map(|k| (*i, k)));
        }
        pieces = next;
    }
    Split {
        pieces: pieces.into_iter().map(|(_, p)| p).collect(),
        nodes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The same rules walked plainly: recursive, one row at a time, no
    /// unrolled rows, no per-case specialisation.
    fn plain(
        rules: &Rules,
        y: usize,
        l: u32,
        d: u32,
        r: u32,
        board: &mut [u32; 32],
        c: &mut PieceCounts,
    ) {
        let mut bm = rules.candidates(y, l, d, r);
        while bm != 0 {
            let bit = bm & bm.wrapping_neg();
            bm ^= bit;
            board[y] = bit;
            c.nodes += 1;
            if y == rules.last {
                rules.record_leaf(board, c);
            } else {
                plain(
                    rules,
                    y + 1,
                    (l | bit) << 1,
                    d | bit,
                    (r | bit) >> 1,
                    board,
                    c,
                );
            }
        }
    }

    fn plain_count(rules: &Rules, p: &Piece) -> PieceCounts {
        let mut board = [0u32; 32];
        let (l, d, r) = rules.replay(&p.prefix, &mut board).unwrap();
        let mut c = PieceCounts::default();
        plain(rules, p.prefix.len(), l, d, r, &mut board, &mut c);
        c
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// The optimised loop and the plain walk agree on every count, nodes
        /// included, for random pieces of random boards.
        #[test]
        fn fast_loop_matches_plain_walk(n in 4u32..=14, min_pieces in 1usize..5000, pick in any::<prop::sample::Index>()) {
            let size = Size::new(n).unwrap();
            let cut = split(size, min_pieces);
            prop_assume!(!cut.pieces.is_empty());
            let piece = &cut.pieces[pick.index(cut.pieces.len())];
            let rules = Rules::new(size, piece.case).unwrap();
            prop_assert_eq!(rules.count(piece).unwrap(), plain_count(&rules, piece));
        }
    }

    #[test]
    fn fast_loop_matches_plain_walk_on_every_piece_of_twelve() {
        let size = Size::new(12).unwrap();
        for depth in [1, 300, 20_000] {
            for p in split(size, depth).pieces {
                let rules = Rules::new(size, p.case).unwrap();
                assert_eq!(rules.count(&p).unwrap(), plain_count(&rules, &p), "{p:?}");
            }
        }
    }
}
