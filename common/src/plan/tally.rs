//! Counts gathered from subproblems, before the plan turns them into
//! classes.

use super::*;

/// Counts gathered from subproblems, before the plan turns them into classes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// Class counts of a whole-board subproblem, and every node count.
    pub classes: Totals,
    /// Σ weight × completions over prefixes and frames.
    pub weighted: u128,
    /// Solutions fixed by a half turn.
    pub half: u128,
    /// Solutions fixed by a quarter turn.
    pub quarter: u128,
}

impl Tally {
    /// Adds the counts of one subproblem.
    pub fn add(&mut self, s: &Subproblem, c: &PieceCounts) -> Result<(), PlanError> {
        let add = |a: u128, b: u128| a.checked_add(b).ok_or(CountOverflow);
        match s {
            Subproblem::Whole => self.classes.add_piece(c)?,
            Subproblem::Prefix { weight, .. }
            | Subproblem::Frame { weight, .. }
            | Subproblem::RingPart { weight, .. }
            | Subproblem::Choice { weight, .. } => {
                let w = u128::from(c.c1)
                    .checked_mul((*weight).into())
                    .ok_or(CountOverflow)?;
                self.weighted = add(self.weighted, w)?;
                self.classes.nodes = add(self.classes.nodes, c.nodes.into())?;
            }
            Subproblem::Symmetric { turn, .. } => {
                let slot = if *turn == Turn::Half {
                    &mut self.half
                } else {
                    &mut self.quarter
                };
                *slot = add(*slot, c.c1.into())?;
                self.classes.nodes = add(self.classes.nodes, c.nodes.into())?;
            }
        }
        Ok(())
    }

    /// Its largest count, of every kind (nodes included).
    pub fn largest(&self) -> u128 {
        let c = &self.classes;
        [
            c.c1,
            c.c2,
            c.c4,
            c.c8,
            c.nodes,
            self.weighted,
            self.half,
            self.quarter,
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
    }

    /// Adds another tally (another task's).
    pub fn merge(&mut self, o: &Tally) -> Result<(), PlanError> {
        let add = |a: u128, b: u128| a.checked_add(b).ok_or(CountOverflow);
        self.classes.add(&o.classes)?;
        self.weighted = add(self.weighted, o.weighted)?;
        self.half = add(self.half, o.half)?;
        self.quarter = add(self.quarter, o.quarter)?;
        Ok(())
    }
}
