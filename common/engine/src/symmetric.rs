//! Counting the solutions that a half turn or a quarter turn maps onto
//! themselves. With them the unique count follows from the total by
//! Burnside's lemma (N >= 2, where no reflection fixes a solution):
//! `unique = (total + half + 2 * quarter) / 8`.
//!
//! The search places whole orbits of squares at once: choosing a queen in
//! the first empty row also places its images under the turn, so only about
//! N/2 (half) or N/4 (quarter) choices are made per solution.

use crate::board::{Size, Symmetry};
use crate::counts::PieceCounts;
use serde::{Deserialize, Serialize};

/// Which turn the counted solutions are symmetric under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Turn {
    Half,
    Quarter,
}

impl Turn {
    fn images(self) -> &'static [Symmetry] {
        match self {
            Turn::Half => &[Symmetry::Identity, Symmetry::Rot180],
            Turn::Quarter => &[
                Symmetry::Identity,
                Symmetry::Rot90,
                Symmetry::Rot180,
                Symmetry::Rot270,
            ],
        }
    }
}

/// Counts the solutions symmetric under `turn` whose row-0 queen is in
/// column `first` (in `c1`), and the orbit placements made (in `nodes`).
pub fn count_symmetric(n: Size, turn: Turn, first: u8) -> PieceCounts {
    let mut s = Search {
        n: n.n(),
        turn,
        rows: 0,
        cols: 0,
        diag: 0,
        anti: 0,
        counts: PieceCounts::default(),
    };
    if usize::from(first) < s.n && s.place(0, first.into()) {
        s.counts.nodes += 1;
        s.search();
    }
    s.counts
}

struct Search {
    n: usize,
    turn: Turn,
    rows: u64,
    cols: u64,
    diag: u64,
    anti: u64,
    counts: PieceCounts,
}

impl Search {
    fn search(&mut self) {
        let full = u64::MAX >> (64 - self.n);
        if self.rows == full {
            self.counts.c1 += 1;
            return;
        }
        let r = (!self.rows).trailing_zeros() as usize;
        for c in 0..self.n {
            let saved = (self.rows, self.cols, self.diag, self.anti);
            if self.place(r, c) {
                self.counts.nodes += 1;
                self.search();
            }
            (self.rows, self.cols, self.diag, self.anti) = saved;
        }
    }

    /// Places (r, c) and its images; false (state partly changed) if any
    /// image is attacked. A square that is its own image is placed once.
    fn place(&mut self, r: usize, c: usize) -> bool {
        let mut placed: [(usize, usize); 4] = [(usize::MAX, 0); 4];
        for (k, sym) in self.turn.images().iter().enumerate() {
            let (r2, c2) = sym.apply(self.n, r, c);
            if placed[..k].contains(&(r2, c2)) {
                continue;
            }
            placed[k] = (r2, c2);
            let (d, a) = (r2 + c2, r2 + self.n - 1 - c2);
            if self.rows >> r2 & 1 != 0
                || self.cols >> c2 & 1 != 0
                || self.diag >> d & 1 != 0
                || self.anti >> a & 1 != 0
            {
                return false;
            }
            self.rows |= 1 << r2;
            self.cols |= 1 << c2;
            self.diag |= 1 << d;
            self.anti |= 1 << a;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(n: u32, turn: Turn) -> u64 {
        (0..n as u8)
            .map(|c| count_symmetric(Size::new(n).unwrap(), turn, c).c1)
            .sum()
    }

    #[test]
    fn small_values() {
        // From A033148 (quarter) and A032522 (half).
        let half = [1, 0, 0, 2, 2, 4, 8, 4, 16, 12, 48, 80];
        let quarter = [1, 0, 0, 2, 2, 0, 0, 0, 0, 0, 0, 8];
        for n in 1..=12u32 {
            assert_eq!(all(n, Turn::Half), half[n as usize - 1], "half N={n}");
            assert_eq!(
                all(n, Turn::Quarter),
                quarter[n as usize - 1],
                "quarter N={n}"
            );
        }
    }
}
