//! A job's accounts: the running sum of the counted results, the tasks
//! given up on, the disagreements, the results kept for the audit but never
//! counted, and the counted results themselves — all of them for an audit,
//! only the latest ones in a coordinator (older ones are in the store), so
//! that its memory does not grow with the job.

use nqueens_common::plan::{PlanError, Tally};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Results of one worker id kept for the audit but never counted, per job,
/// beyond which its reports are answered as the kept ones were, without a
/// record (one call counts its own; concurrent calls in one disk write may
/// each add theirs), so a quarantined id reporting every lease it held
/// grows neither the journal nor this ledger.
pub const MOST_KEPT_PER_WORKER: u32 = 16;

/// A stored task result and who produced it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conflict {
    pub task: u64,
    pub worker: String,
    pub tally: Tally,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Ledger {
    /// Counted results in memory: every one when `keep` is `None`, else
    /// the latest `keep` (in `order`, oldest first).
    results: BTreeMap<u64, StoredResult>,
    keep: Option<usize>,
    order: VecDeque<u64>,
    /// Counted results, in memory or not.
    done: u64,
    /// Tasks out of retries, with why.
    dead: BTreeMap<u64, String>,
    conflicts: Vec<Conflict>,
    /// Results journaled but never counted (from a quarantined worker, or
    /// arriving after a cancel), kept for the audit: (task, result).
    ignored: Vec<(u64, StoredResult)>,
    /// The conflicts by (task, worker), the kept results by (task, worker,
    /// lease) and their number by worker: what a report is checked
    /// against, each in a step whatever the lists' lengths.
    conflicted: BTreeSet<(u64, String)>,
    kept: BTreeSet<(u64, String, u64)>,
    kept_by: BTreeMap<String, u32>,
    /// Sum of every counted result (checked arithmetic).
    tally: Tally,
}

impl Ledger {
    /// A ledger that keeps only the latest `keep` counted results in
    /// memory (`None`: all of them).
    pub fn keeping(keep: Option<usize>) -> Ledger {
        Ledger {
            keep,
            ..Ledger::default()
        }
    }

    /// Counts a task's result: added to the sum (checked: an overflow
    /// changes nothing), and no longer dead if it was.
    pub fn count(&mut self, task: u64, result: StoredResult) -> Result<(), PlanError> {
        let mut sum = self.tally;
        sum.merge(&result.tally)?;
        self.tally = sum;
        self.done += 1;
        self.results.insert(task, result);
        self.dead.remove(&task);
        if let Some(keep) = self.keep {
            self.order.push_back(task);
            while self.order.len() > keep {
                let old = self.order.pop_front().expect("longer than keep");
                self.results.remove(&old);
            }
        }
        Ok(())
    }

    /// Whether every counted result is in memory.
    pub fn complete(&self) -> bool {
        self.results.len() as u64 == self.done
    }

    pub fn is_dead(&self, task: u64) -> bool {
        self.dead.contains_key(&task)
    }

    /// Gives up on a task without a result; false if it has one.
    pub fn bury(&mut self, task: u64, why: &str) -> bool {
        if self.results.contains_key(&task) {
            return false;
        }
        self.dead.insert(task, why.to_string());
        true
    }

    /// Forgets every dead task (the operator retries them); returns them.
    pub fn revive_all(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.dead).into_keys().collect()
    }

    pub fn result(&self, task: u64) -> Option<&StoredResult> {
        self.results.get(&task)
    }

    /// Counted results in memory, in task order.
    pub fn results(&self) -> impl Iterator<Item = (&u64, &StoredResult)> {
        self.results.iter()
    }

    pub fn done(&self) -> u64 {
        self.done
    }

    /// Records a result that disagreed.
    pub fn conflict(&mut self, c: Conflict) {
        self.conflicted.insert((c.task, c.worker.clone()));
        self.conflicts.push(c);
    }

    pub fn conflicts(&self) -> &[Conflict] {
        &self.conflicts
    }

    /// Whether `worker` disagreed on `task`.
    pub fn has_conflict(&self, task: u64, worker: &str) -> bool {
        self.conflicted.contains(&(task, worker.to_string()))
    }

    /// Keeps a result for the audit, never counted.
    pub fn keep(&mut self, task: u64, result: StoredResult) {
        let key = (task, result.worker.clone(), result.lease_id);
        if self.kept.insert(key) {
            *self.kept_by.entry(result.worker.clone()).or_default() += 1;
        }
        self.ignored.push((task, result));
    }

    pub fn ignored(&self) -> &[(u64, StoredResult)] {
        &self.ignored
    }

    /// Whether `worker`'s result for `task` under `lease_id` is kept.
    pub fn has_kept(&self, task: u64, worker: &str, lease_id: u64) -> bool {
        self.kept.contains(&(task, worker.to_string(), lease_id))
    }

    /// Results of `worker` kept.
    pub fn kept_of(&self, worker: &str) -> u32 {
        self.kept_by.get(worker).copied().unwrap_or(0)
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
        assert!(l.complete());
    }

    #[test]
    fn a_coordinators_ledger_keeps_only_the_latest_results_but_counts_all() {
        let mut l = Ledger::keeping(Some(3));
        for t in 0..10 {
            l.count(t, result(u128::from(t))).unwrap();
        }
        assert_eq!((l.done(), l.tally().weighted), (10, 45));
        assert_eq!(
            l.results().map(|(&t, _)| t).collect::<Vec<_>>(),
            vec![7, 8, 9]
        );
        assert!(l.result(6).is_none() && !l.complete());
    }
}
