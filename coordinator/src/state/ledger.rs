//! A job's accounts: the counted result of each task, their running sum,
//! the tasks given up on, the disagreements, and the results kept for the
//! audit but never counted.

use nqueens_common::plan::{PlanError, Tally};
use std::collections::BTreeMap;

/// A stored task result and who produced it.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredResult {
    pub tally: Tally,
    pub checksum: u64,
    pub worker: String,
    /// Who vouches for it: the worker's credential, else its id.
    pub credential: String,
    pub lease_id: u64,
    pub unix_ms: u64,
    pub elapsed_ms: u64,
    pub solver_version: String,
}

impl StoredResult {
    /// Equal counts and checksum: a duplicate, not a conflict.
    pub fn same(&self, tally: &Tally, checksum: u64) -> bool {
        self.tally == *tally && self.checksum == checksum
    }
}

/// A result that disagreed with the stored one.
#[derive(Clone, Debug, PartialEq)]
pub struct Conflict {
    pub task: u64,
    pub worker: String,
    pub tally: Tally,
}

#[derive(Clone, Debug, Default)]
pub struct Ledger {
    results: BTreeMap<u64, StoredResult>,
    /// Tasks out of retries, with why.
    dead: BTreeMap<u64, String>,
    pub conflicts: Vec<Conflict>,
    /// Results journaled but never counted (from a quarantined worker, or
    /// arriving after a cancel), kept for the audit: (task, result).
    pub ignored: Vec<(u64, StoredResult)>,
    /// Sum of every counted result (checked arithmetic).
    tally: Tally,
}

impl Ledger {
    /// Counts a task's result: added to the sum (checked: an overflow
    /// changes nothing), and no longer dead if it was.
    pub fn count(&mut self, task: u64, result: StoredResult) -> Result<(), PlanError> {
        let mut sum = self.tally;
        sum.merge(&result.tally)?;
        self.tally = sum;
        self.results.insert(task, result);
        self.dead.remove(&task);
        Ok(())
    }

    /// Gives up on a task without a result; false if it has one.
    pub fn bury(&mut self, task: u64, why: &str) -> bool {
        if self.results.contains_key(&task) {
            return false;
        }
        self.dead.insert(task, why.to_string());
        true
    }

    pub fn result(&self, task: u64) -> Option<&StoredResult> {
        self.results.get(&task)
    }

    /// Counted results in task order.
    pub fn results(&self) -> impl Iterator<Item = (&u64, &StoredResult)> {
        self.results.iter()
    }

    pub fn done(&self) -> u64 {
        self.results.len() as u64
    }

    pub fn dead(&self) -> u64 {
        self.dead.len() as u64
    }

    pub fn tally(&self) -> &Tally {
        &self.tally
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(weighted: u128) -> StoredResult {
        StoredResult {
            tally: Tally {
                weighted,
                ..Tally::default()
            },
            checksum: 0,
            worker: "w".into(),
            credential: "w".into(),
            lease_id: 1,
            unix_ms: 0,
            elapsed_ms: 0,
            solver_version: String::new(),
        }
    }

    #[test]
    fn counting_adds_with_checked_arithmetic_and_revives_the_dead() {
        let mut l = Ledger::default();
        assert!(l.bury(2, "out of retries"));
        assert_eq!(l.dead(), 1);
        l.count(2, result(5)).unwrap();
        l.count(3, result(7)).unwrap();
        assert_eq!((l.done(), l.dead(), l.tally().weighted), (2, 0, 12));
        assert!(!l.bury(3, "late"), "a task with a result is not dead");
        assert!(l.count(4, result(u128::MAX)).is_err());
        assert_eq!(
            (l.done(), l.tally().weighted),
            (2, 12),
            "an overflow changes nothing"
        );
    }
}
