//! Verification under redundancy: which tasks need agreeing results from
//! several credentials, and the results that wait for agreement.

use super::ledger::StoredResult;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};

/// A job's redundancy rule and its results waiting for agreement.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Votes {
    job: u64,
    /// Agreeing results from different credentials a checked task needs.
    pub redundancy: u32,
    /// The share of tasks that are checked (the others need one result).
    pub fraction: f64,
    /// Results of tasks not yet agreed on, by task.
    candidates: HashMap<u64, Vec<StoredResult>>,
}

/// What one more result did to a checked task.
#[derive(Debug, PartialEq)]
pub enum Ballot {
    /// Not enough agreeing credentials yet.
    Waiting,
    /// Agreed: the results that agree with the deciding one, and the odd
    /// ones out (conflicts).
    Agreed {
        same: Vec<StoredResult>,
        odd: Vec<StoredResult>,
    },
}

impl Votes {
    pub fn new(job: u64, redundancy: u32, fraction: f64) -> Votes {
        Votes {
            job,
            redundancy: redundancy.max(1),
            fraction: if fraction > 0.0 && fraction < 1.0 {
                fraction
            } else {
                1.0
            },
            candidates: HashMap::new(),
        }
    }

    /// Agreeing credentials this task needs: `redundancy` for the chosen
    /// share of tasks (a hash of job and task, stable across restarts).
    pub fn needs(&self, task: u64) -> u32 {
        if self.fraction >= 1.0 {
            return self.redundancy;
        }
        let mut h = (self.job ^ task.rotate_left(32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 31;
        h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h ^= h >> 29;
        if (h >> 11) as f64 / (1u64 << 53) as f64 <= self.fraction {
            self.redundancy
        } else {
            1
        }
    }

    /// Tasks with a result waiting for another credential's agreement.
    pub fn checking(&self) -> usize {
        self.candidates.len()
    }

    /// Whether `worker` (or its credential) already gave a result for the
    /// task: a credential never checks its own result.
    pub fn voted(&self, task: u64, worker: &str, credential: &str) -> bool {
        self.candidates.get(&task).is_some_and(|c| {
            c.iter()
                .any(|c| c.worker == worker || c.credential == credential)
        })
    }

    /// A waiting result of the task that `pick` chooses.
    pub fn find(&self, task: u64, pick: impl Fn(&StoredResult) -> bool) -> Option<&StoredResult> {
        self.candidates.get(&task)?.iter().find(|c| pick(c))
    }

    /// Adds a result of a checked task; agreement needs `needs(task)`
    /// distinct credentials with equal results, not counting quarantined
    /// workers.
    pub fn vote(
        &mut self,
        task: u64,
        result: StoredResult,
        quarantined: impl Fn(&str) -> bool,
    ) -> Ballot {
        let needed = self.needs(task) as usize;
        let (tally, checksum) = (result.tally, result.checksum);
        let seen = self.candidates.entry(task).or_default();
        seen.push(result);
        let agree = seen
            .iter()
            .filter(|c| c.same(&tally, checksum) && !quarantined(&c.worker))
            .map(|c| c.credential.as_str())
            .collect::<HashSet<_>>()
            .len();
        if agree < needed {
            return Ballot::Waiting;
        }
        let (same, odd) = self
            .candidates
            .remove(&task)
            .unwrap_or_default()
            .into_iter()
            .partition(|c| c.same(&tally, checksum));
        Ballot::Agreed { same, odd }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nqueens_common::plan::Tally;

    fn result(worker: &str, credential: &str, weighted: u128) -> StoredResult {
        StoredResult {
            tally: Tally {
                weighted,
                ..Tally::default()
            },
            checksum: 1,
            worker: worker.into(),
            credential: credential.into(),
            lease_id: 1,
            unix_ms: 0,
            elapsed_ms: 0,
            solver_version: String::new(),
        }
    }

    #[test]
    fn agreement_needs_distinct_credentials_and_names_the_odd_one_out() {
        let mut v = Votes::new(1, 2, 1.0);
        let none = |_: &str| false;
        assert_eq!(v.vote(0, result("a", "x", 5), none), Ballot::Waiting);
        assert!(v.voted(0, "a", "?") && v.voted(0, "?", "x") && !v.voted(0, "b", "y"));
        assert_eq!(
            v.vote(0, result("a2", "x", 5), none),
            Ballot::Waiting,
            "same credential"
        );
        assert_eq!(v.vote(0, result("b", "y", 6), none), Ballot::Waiting);
        assert_eq!(v.checking(), 1);
        let Ballot::Agreed { same, odd } = v.vote(0, result("c", "z", 5), none) else {
            panic!("two credentials agree")
        };
        assert_eq!(same.len(), 3);
        assert_eq!(odd, vec![result("b", "y", 6)]);
        assert_eq!(v.checking(), 0);
    }

    #[test]
    fn a_quarantined_worker_does_not_vote() {
        let mut v = Votes::new(1, 2, 1.0);
        let bad = |w: &str| w == "a";
        assert_eq!(v.vote(3, result("a", "x", 5), bad), Ballot::Waiting);
        assert_eq!(v.vote(3, result("b", "y", 5), bad), Ballot::Waiting);
    }

    #[test]
    fn a_fraction_checks_a_stable_share() {
        let v = Votes::new(7, 3, 0.25);
        let checked = (0..10_000).filter(|&t| v.needs(t) == 3).count();
        assert!((2_200..2_800).contains(&checked), "{checked}");
        assert!((0..10_000).all(|t| matches!(v.needs(t), 1 | 3)));
        let again = Votes::new(7, 3, 0.25);
        assert!((0..1_000).all(|t| v.needs(t) == again.needs(t)));
        assert_eq!(Votes::new(7, 1, 0.0).needs(5), 1);
    }
}
