//! Class counts: what a search returns, per piece (u64) and aggregated (u128).
//!
//! A solution's *orbit* under the 8 symmetries of the square has 1, 2, 4 or 8
//! members. The symmetry-pruned search visits one representative per orbit
//! and records which size its orbit has; `total` and `unique` follow from the
//! class counts. Orbit size 1 only occurs for N = 1.

use serde::{Deserialize, Serialize};

/// Counts of one piece of the search. Fits in u64: a piece is a small part
/// of one N (2^64 leaves would take centuries to visit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PieceCounts {
    pub c1: u64,
    pub c2: u64,
    pub c4: u64,
    pub c8: u64,
    /// Queen placements made (partial boards visited).
    pub nodes: u64,
}

/// Aggregated counts. u128 with checked additions everywhere: a published
/// N=24 record was once wrong because a 32-bit subtotal overflowed silently.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub c1: u128,
    pub c2: u128,
    pub c4: u128,
    pub c8: u128,
    pub nodes: u128,
}

/// An aggregate left the range of u128. Never expected for N <= 32; reported
/// rather than wrapped so a wrong count can never be printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("count overflow: an aggregate left the range of u128")]
pub struct CountOverflow;

/// Counts that cannot all be right: a bug, never a result to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("inconsistent counts: {0}")]
pub struct Inconsistent(pub &'static str);

impl Totals {
    /// The classes from the total and the solutions fixed by a half turn
    /// and by a quarter turn. Burnside (N >= 2, where no reflection fixes a
    /// solution): orbits of 2 are the quarter-turn symmetric solutions in
    /// pairs, orbits of 4 the other half-turn symmetric ones in fours, the
    /// rest in eights. Each division must be exact.
    pub fn from_turns(
        total: u128,
        half: u128,
        quarter: u128,
        nodes: u128,
    ) -> Result<Totals, Inconsistent> {
        let exact = |x: u128, d: u128, what| {
            if x.is_multiple_of(d) {
                Ok(x / d)
            } else {
                Err(Inconsistent(what))
            }
        };
        let c2 = exact(quarter, 2, "quarter-turn count is odd")?;
        let c4 = exact(
            half.checked_sub(quarter)
                .ok_or(Inconsistent("quarter > half"))?,
            4,
            "half-turn count",
        )?;
        let c8 = exact(
            total
                .checked_sub(half)
                .ok_or(Inconsistent("half > total"))?,
            8,
            "total",
        )?;
        Ok(Totals {
            c1: 0,
            c2,
            c4,
            c8,
            nodes,
        })
    }

    /// Adds one piece's counts.
    pub fn add_piece(&mut self, p: &PieceCounts) -> Result<(), CountOverflow> {
        self.add(&Totals::from(*p))
    }

    /// Adds another aggregate.
    pub fn add(&mut self, o: &Totals) -> Result<(), CountOverflow> {
        let sum = |a: u128, b: u128| a.checked_add(b).ok_or(CountOverflow);
        *self = Totals {
            c1: sum(self.c1, o.c1)?,
            c2: sum(self.c2, o.c2)?,
            c4: sum(self.c4, o.c4)?,
            c8: sum(self.c8, o.c8)?,
            nodes: sum(self.nodes, o.nodes)?,
        };
        Ok(())
    }

    /// All solutions: every orbit counted with its size.
    pub fn total(&self) -> Result<u128, CountOverflow> {
        let weighted = |c: u128, w: u128| c.checked_mul(w).ok_or(CountOverflow);
        [
            weighted(self.c1, 1)?,
            weighted(self.c2, 2)?,
            weighted(self.c4, 4)?,
            weighted(self.c8, 8)?,
        ]
        .into_iter()
        .try_fold(0u128, |acc, x| acc.checked_add(x).ok_or(CountOverflow))
    }

    /// Solutions up to rotation and reflection: one per orbit.
    pub fn unique(&self) -> Result<u128, CountOverflow> {
        [self.c1, self.c2, self.c4, self.c8]
            .into_iter()
            .try_fold(0u128, |acc, x| acc.checked_add(x).ok_or(CountOverflow))
    }
}

impl From<PieceCounts> for Totals {
    fn from(p: PieceCounts) -> Self {
        Totals {
            c1: p.c1.into(),
            c2: p.c2.into(),
            c4: p.c4.into(),
            c8: p.c8.into(),
            nodes: p.nodes.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn total_and_unique_weight_the_classes() {
        let t = Totals {
            c1: 0,
            c2: 1,
            c4: 2,
            c8: 3,
            nodes: 9,
        };
        assert_eq!(t.total().unwrap(), 2 + 8 + 24);
        assert_eq!(t.unique().unwrap(), 6);
    }

    #[test]
    fn overflow_is_an_error_not_a_wrap() {
        let mut t = Totals {
            c8: u128::MAX / 8 + 1,
            ..Totals::default()
        };
        assert_eq!(t.total(), Err(CountOverflow));
        t.c8 = u128::MAX;
        assert_eq!(
            t.add_piece(&PieceCounts {
                c8: 1,
                ..Default::default()
            }),
            Err(CountOverflow)
        );
    }
}
