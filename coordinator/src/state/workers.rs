//! The workers the coordinator knows: what each said about itself and did,
//! and the credential its id is bound to.

use super::StateError;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Most distinct worker ids the coordinator keeps.
pub const MAX_WORKERS: usize = 10_000;

/// A worker as the coordinator sees it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerInfo {
    pub id: String,
    /// The operator's name for it (display only; several may share one).
    pub name: String,
    pub host: String,
    pub cores: u32,
    pub solver_version: String,
    pub last_seen_ms: u64,
    pub tasks_done: u64,
    pub subproblems_done: u64,
    pub errors: u64,
    /// Results of this worker that others contradicted; one is enough to
    /// stop leasing to it (quarantine).
    pub conflicts: u64,
    /// Results of this worker that another credential agreed with.
    pub checked: u64,
    /// What follows is not durable (not in a checkpoint):
    /// it registered with this coordinator since it started.
    #[serde(skip)]
    pub registered: bool,
    /// It said it is going away.
    #[serde(skip)]
    pub draining: bool,
    /// Subproblems per second between its latest heartbeats, and the
    /// latest heartbeat's (subproblems done, time).
    #[serde(skip)]
    pub rate: f64,
    #[serde(skip)]
    pub beat: (u64, u64),
    /// Already logged as lost (until it is heard from again), and as
    /// quarantined.
    #[serde(skip)]
    pub told_lost: bool,
    #[serde(skip)]
    pub told_quarantined: bool,
}

impl WorkerInfo {
    pub fn quarantined(&self) -> bool {
        self.conflicts > 0
    }

    /// Whether it counts on cards (its version names one), and on its
    /// CPU (it has counting threads, or names no card).
    pub fn devices(&self) -> (bool, bool) {
        let card = super::votes::on_card(&self.solver_version);
        (card, self.cores > 0 || !card)
    }
}

/// Every worker id seen, and who may use it.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Workers {
    known: BTreeMap<String, WorkerInfo>,
    /// Worker id → the credential it authenticated with (not durable:
    /// bound again by the first call after a restart).
    #[serde(skip)]
    bound: HashMap<String, String>,
}

impl Workers {
    /// Ties a worker id to the credential it authenticated with (empty:
    /// the shared worker token, or none); another credential may not use
    /// that id.
    pub fn bind(&mut self, worker: &str, credential: &str) -> Result<(), StateError> {
        if credential.is_empty() {
            return Ok(());
        }
        match self.bound.get(worker) {
            Some(b) if b != credential => Err(StateError::WrongCredential {
                worker: worker.to_string(),
                bound: b.clone(),
            }),
            Some(_) => Ok(()),
            None => {
                self.bound
                    .insert(worker.to_string(), credential.to_string());
                Ok(())
            }
        }
    }

    /// The credential a worker id is bound to (empty if none).
    pub fn credential_of(&self, worker: &str) -> String {
        self.bound.get(worker).cloned().unwrap_or_default()
    }

    /// Who vouches for a worker's results: its credential, else its id.
    pub fn voter(&self, worker: &str) -> String {
        self.bound
            .get(worker)
            .cloned()
            .unwrap_or_else(|| worker.to_string())
    }

    /// Refuses a worker id never seen before once `MAX_WORKERS` are known,
    /// so made-up ids cannot grow memory, replies and metrics without end.
    pub fn admit(&self, worker: &str) -> Result<(), StateError> {
        if self.known.len() >= MAX_WORKERS && !self.known.contains_key(worker) {
            return Err(StateError::TooManyWorkers(MAX_WORKERS));
        }
        Ok(())
    }

    pub fn quarantined(&self, worker: &str) -> bool {
        self.known.get(worker).is_some_and(|w| w.quarantined())
    }

    /// A worker's entry, made on first sight (also from journal records, so
    /// a quarantine survives a restart).
    pub fn entry(&mut self, id: &str) -> &mut WorkerInfo {
        self.known
            .entry(id.to_string())
            .or_insert_with(|| WorkerInfo {
                id: id.to_string(),
                ..WorkerInfo::default()
            })
    }

    /// Records a call from a worker (registering it if new).
    pub fn touch(&mut self, id: &str, now: u64) -> &mut WorkerInfo {
        let w = self.entry(id);
        w.last_seen_ms = now;
        if w.told_lost {
            w.told_lost = false;
            tracing::info!(worker = id, name = %w.name, "worker back");
        }
        w
    }

    pub fn get(&self, id: &str) -> Option<&WorkerInfo> {
        self.known.get(id)
    }

    /// Workers not heard from since `since_ms` and not yet said to be
    /// lost, and quarantined workers not yet said to be: each is marked
    /// told and returned once, for the log.
    pub fn news(&mut self, since_ms: u64) -> (Vec<WorkerInfo>, Vec<WorkerInfo>) {
        let (mut lost, mut quarantined) = (Vec::new(), Vec::new());
        for w in self.known.values_mut() {
            if w.last_seen_ms < since_ms && !w.told_lost && w.registered {
                w.told_lost = true;
                lost.push(w.clone());
            }
            if w.quarantined() && !w.told_quarantined {
                w.told_quarantined = true;
                quarantined.push(w.clone());
            }
        }
        (lost, quarantined)
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut WorkerInfo> {
        self.known.get_mut(id)
    }

    pub fn iter(&self) -> impl Iterator<Item = &WorkerInfo> {
        self.known.values()
    }

    /// Distinct credentials among the workers seen since `since_ms` that
    /// are not quarantined: the votes a redundant job can get now.
    /// Whether `id` counts on cards, and on its CPU, as its registration
    /// says (an unknown worker: a CPU).
    pub fn devices(&self, id: &str) -> (bool, bool) {
        self.known
            .get(id)
            .map_or((false, true), WorkerInfo::devices)
    }

    /// Whether any worker seen since `since_ms` (and not quarantined)
    /// counts on a card, and any on a CPU.
    pub fn devices_since(&self, since_ms: u64) -> (bool, bool) {
        self.known
            .values()
            .filter(|w| w.last_seen_ms >= since_ms && !w.quarantined())
            .map(WorkerInfo::devices)
            .fold((false, false), |(a, b), (c, d)| (a || c, b || d))
    }

    pub fn voters_since(&self, since_ms: u64) -> usize {
        self.known
            .values()
            .filter(|w| w.last_seen_ms >= since_ms && !w.quarantined())
            .map(|w| self.voter(&w.id))
            .collect::<HashSet<_>>()
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_bound_to_the_first_credential_that_uses_it() {
        let mut w = Workers::default();
        w.bind("a", "").unwrap();
        assert_eq!(w.voter("a"), "a", "no credential: the id votes");
        w.bind("a", "alice").unwrap();
        w.bind("a", "alice").unwrap();
        assert!(matches!(
            w.bind("a", "mallory"),
            Err(StateError::WrongCredential { .. })
        ));
        w.bind("b", "alice").unwrap();
        assert_eq!(w.voter("b"), "alice");
        w.touch("a", 10);
        w.touch("b", 10);
        w.touch("c", 5);
        assert_eq!(w.voters_since(10), 1, "one credential, however many ids");
        assert_eq!(w.voters_since(0), 2);
        w.entry("c").conflicts = 1;
        assert!(w.quarantined("c"));
        assert_eq!(w.voters_since(0), 1, "a quarantined worker has no vote");
    }

    #[test]
    fn new_ids_stop_at_the_limit() {
        let mut w = Workers::default();
        for i in 0..MAX_WORKERS {
            w.entry(&i.to_string());
        }
        assert!(w.admit("0").is_ok(), "a known id is always admitted");
        assert_eq!(w.admit("new"), Err(StateError::TooManyWorkers(MAX_WORKERS)));
    }
}
