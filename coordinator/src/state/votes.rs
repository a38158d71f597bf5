//! Verification under redundancy: which tasks need agreeing results from
//! several credentials, and the results that wait for agreement.

use super::ledger::StoredResult;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};

/// How a job's results are checked (`submit --redundancy`,
/// `--verify-fraction`, `--cross-device`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Checking {
    /// Agreeing results from different credentials a checked task needs.
    pub redundancy: u32,
    /// The share of tasks that are checked (0 or 1: all).
    pub fraction: f64,
    /// A checked task's agreeing results must include one counted on a
    /// graphics card and one on a CPU.
    pub cross_device: bool,
}

impl Checking {
    /// One result per task, unchecked.
    pub const NONE: Checking = Checking {
        redundancy: 1,
        fraction: 1.0,
        cross_device: false,
    };
}

/// The device a result was counted on, as its version names it (`0.1.0
/// avx512`, `0.1.0 gpu:NVIDIA H100 (vulkan)`): a card, or a CPU.
pub fn on_card(solver_version: &str) -> bool {
    solver_version
        .split([' ', '+'])
        .any(|w| w.starts_with("gpu:"))
}

/// Where a leased task should be counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountOn {
    Any,
    Card,
    Cpu,
}

/// A job's redundancy rule and its results waiting for agreement.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Votes {
    job: u64,
    /// Agreeing results from different credentials a checked task needs.
    pub redundancy: u32,
    /// The share of tasks that are checked (the others need one result).
    pub fraction: f64,
    /// Checked tasks need agreeing results from a card and a CPU.
    #[serde(default)]
    pub cross_device: bool,
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
    pub fn new(job: u64, checking: Checking) -> Votes {
        let redundancy = checking.redundancy.max(1);
        Votes {
            job,
            redundancy,
            fraction: if checking.fraction > 0.0 && checking.fraction < 1.0 {
                checking.fraction
            } else {
                1.0
            },
            cross_device: checking.cross_device && redundancy > 1,
            candidates: HashMap::new(),
        }
    }

    /// The kinds of device the task's leading group of waiting results
    /// was counted on (cards, CPUs): the group of equal results with the
    /// most distinct credentials, results of `quarantined` workers left
    /// out. `None` while nothing counts (no result, or not `cross_device`).
    fn leading_kinds(&self, task: u64, quarantined: &dyn Fn(&str) -> bool) -> Option<(bool, bool)> {
        if !self.cross_device {
            return None;
        }
        let seen: Vec<&StoredResult> = self
            .candidates
            .get(&task)?
            .iter()
            .filter(|c| !quarantined(&c.worker))
            .collect();
        let group = |r: &StoredResult| -> Vec<&StoredResult> {
            seen.iter()
                .copied()
                .filter(|c| c.same(&r.tally, r.checksum))
                .collect()
        };
        let credentials = |g: &[&StoredResult]| {
            g.iter()
                .map(|c| c.credential.as_str())
                .collect::<HashSet<_>>()
                .len()
        };
        let lead = seen
            .iter()
            .map(|r| group(r))
            .max_by_key(|g| credentials(g))?;
        let cards = lead.iter().filter(|c| on_card(&c.solver_version)).count();
        Some((cards > 0, cards < lead.len()))
    }

    /// Where a worker that counts on cards (`card`) should count the task:
    /// under `cross_device`, on the kind of device the leading group of
    /// its results lacks (a fresh task on a card, where the worker has
    /// one); else anywhere.
    pub fn count_on(&self, task: u64, card: bool, quarantined: &dyn Fn(&str) -> bool) -> CountOn {
        if !self.cross_device {
            return CountOn::Any;
        }
        match self.leading_kinds(task, quarantined) {
            None if card => CountOn::Card,
            None => CountOn::Cpu,
            Some((false, _)) => CountOn::Card,
            Some((true, false)) => CountOn::Cpu,
            Some((true, true)) => CountOn::Any,
        }
    }

    /// Whether a worker that counts on cards (`card`) and on its CPU
    /// (`cpu`) could bring what the task's agreement lacks: under
    /// `cross_device`, once the leading group of its results came from one
    /// kind of device, only a worker with the other kind.
    pub fn wants(
        &self,
        task: u64,
        card: bool,
        cpu: bool,
        quarantined: &dyn Fn(&str) -> bool,
    ) -> bool {
        match self.leading_kinds(task, quarantined) {
            Some((false, _)) => card,
            Some((true, false)) => cpu,
            _ => true,
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

    /// Tasks whose waiting results disagree: each needs results from more
    /// credentials to settle which one is right.
    pub fn disputed(&self) -> usize {
        self.candidates
            .values()
            .filter(|c| c.iter().any(|r| !r.same(&c[0].tally, c[0].checksum)))
            .count()
    }

    /// The workers whose results wait for a check.
    pub fn voters(&self) -> impl Iterator<Item = &str> {
        self.candidates
            .values()
            .flatten()
            .map(|c| c.worker.as_str())
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
        let agreeing: Vec<&StoredResult> = seen
            .iter()
            .filter(|c| c.same(&tally, checksum) && !quarantined(&c.worker))
            .collect();
        let agree = agreeing
            .iter()
            .map(|c| c.credential.as_str())
            .collect::<HashSet<_>>()
            .len();
        let cards = agreeing
            .iter()
            .filter(|c| on_card(&c.solver_version))
            .count();
        let both = cards > 0 && cards < agreeing.len();
        if agree < needed || (self.cross_device && needed > 1 && !both) {
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

    fn check(redundancy: u32, fraction: f64) -> Checking {
        Checking {
            redundancy,
            fraction,
            cross_device: false,
        }
    }

    fn on(mut r: StoredResult, version: &str) -> StoredResult {
        r.solver_version = version.into();
        r
    }

    /// Under `cross_device`, two CPUs (or two cards) that agree are not
    /// enough: a card and a CPU are; and a task waiting on one kind is
    /// offered only to a worker with the other.
    // Over 80 lines: one scenario whose steps each build on the state the
    // last one left; split, they would only pass that state along.
    #[test]
    fn cross_device_agreement_needs_a_card_and_a_cpu() {
        let mut v = Votes::new(
            1,
            Checking {
                cross_device: true,
                ..check(2, 1.0)
            },
        );
        let none = |_: &str| false;
        let cpu = "0.1.0 avx512";
        let card = "0.1.0 gpu:llvmpipe (vulkan)";
        assert!(v.wants(0, false, true, &none), "nothing waits yet");
        assert_eq!(
            (v.count_on(0, true, &none), v.count_on(0, false, &none)),
            (CountOn::Card, CountOn::Cpu)
        );
        assert_eq!(
            v.vote(0, on(result("a", "x", 5), cpu), none),
            Ballot::Waiting
        );
        assert!(!v.wants(0, false, true, &none) && v.wants(0, true, false, &none));
        assert_eq!(
            v.count_on(0, true, &none),
            CountOn::Card,
            "a CPU counted it: a card next"
        );
        assert_eq!(
            v.vote(0, on(result("b", "y", 5), cpu), none),
            Ballot::Waiting
        );
        let Ballot::Agreed { same, odd } = v.vote(0, on(result("c", "z", 5), card), none) else {
            panic!("a card agrees with the CPUs")
        };
        assert_eq!((same.len(), odd.len()), (3, 0));

        assert_eq!(
            v.vote(1, on(result("c", "z", 7), card), none),
            Ballot::Waiting
        );
        assert!(v.wants(1, false, true, &none) && !v.wants(1, true, false, &none));
        assert_eq!(
            v.count_on(1, true, &none),
            CountOn::Cpu,
            "a card counted it: a CPU next"
        );
        assert!(matches!(
            v.vote(
                1,
                on(result("a", "x", 7), "0.1.0 avx2+gpu:x (vulkan)"),
                none
            ),
            Ballot::Waiting
        ));
        assert!(matches!(
            v.vote(1, on(result("b", "y", 7), cpu), none),
            Ballot::Agreed { .. }
        ));
        assert!(on_card(card) && !on_card(cpu) && on_card("0.1.0 avx2+gpu:x (vulkan)"));
        // A card says 9, two CPUs say 8: the CPUs lead, and what they lack
        // is a card, whatever the card that disagreed counted on.
        assert_eq!(
            v.vote(2, on(result("c", "z", 9), card), none),
            Ballot::Waiting
        );
        assert_eq!(
            v.vote(2, on(result("a", "x", 8), cpu), none),
            Ballot::Waiting
        );
        assert_eq!(
            v.vote(2, on(result("b", "y", 8), cpu), none),
            Ballot::Waiting
        );
        assert_eq!(v.count_on(2, true, &none), CountOn::Card);
        assert!(v.wants(2, true, false, &none) && !v.wants(2, false, true, &none));
        // A quarantined worker's result steers nothing.
        assert_eq!(
            v.vote(3, on(result("q", "w", 4), card), none),
            Ballot::Waiting
        );
        let q = |w: &str| w == "q";
        assert_eq!(
            v.count_on(3, true, &q),
            CountOn::Card,
            "as if nothing was counted"
        );
        assert_eq!(v.count_on(3, true, &none), CountOn::Cpu);
        let plain = Votes::new(1, check(2, 1.0));
        assert!(plain.wants(0, false, true, &none) && !plain.cross_device);
        assert_eq!(plain.count_on(0, true, &none), CountOn::Any);
    }

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
        let mut v = Votes::new(1, check(2, 1.0));
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
        let mut v = Votes::new(1, check(2, 1.0));
        let bad = |w: &str| w == "a";
        assert_eq!(v.vote(3, result("a", "x", 5), bad), Ballot::Waiting);
        assert_eq!(v.vote(3, result("b", "y", 5), bad), Ballot::Waiting);
    }

    #[test]
    fn a_fraction_checks_a_stable_share() {
        let v = Votes::new(7, check(3, 0.25));
        let checked = (0..10_000).filter(|&t| v.needs(t) == 3).count();
        assert!((2_200..2_800).contains(&checked), "{checked}");
        assert!((0..10_000).all(|t| matches!(v.needs(t), 1 | 3)));
        let again = Votes::new(7, check(3, 0.25));
        assert!((0..1_000).all(|t| v.needs(t) == again.needs(t)));
        assert_eq!(Votes::new(7, check(1, 0.0)).needs(5), 1);
    }
}
