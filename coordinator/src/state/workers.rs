//! The workers the coordinator knows: what each said about itself and did,
//! and the credential its id is bound to.

use super::StateError;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// Most distinct worker ids the coordinator keeps.
pub const MAX_WORKERS: usize = 10_000;

/// How long a worker that left nothing durable behind (no result, check
/// or conflict) and holds no lease is remembered after its last call.
pub const FORGET_AFTER_MS: u64 = 3_600_000;

/// Which silent workers that hold nothing may be forgotten.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forget {
    /// Only those that left nothing durable behind (the sweep's, an hour
    /// after their last call).
    Idle,
    /// Those first, then those whose results are all settled, none
    /// contradicted (their results carry their credential themselves, and
    /// only their figures go), then quarantined ones. For a newcomer when
    /// the table is full, so that a run of weeks, each worker process a
    /// new id, never locks its workers out, nor do ids quarantined on
    /// purpose. (A quarantined worker still calling is never silent long
    /// enough to be forgotten.)
    Settled,
}

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
    /// It called this coordinator since it started: one known only from
    /// the records (it may have gone away since) counts as no connected
    /// worker, and shows as unheard.
    #[serde(skip)]
    pub heard: bool,
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

    /// Nothing of it needs remembering: no result counted, checked or
    /// contradicted.
    fn forgettable(&self) -> bool {
        self.tasks_done == 0 && self.checked == 0 && self.conflicts == 0
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
    /// Worker id → the issued credential it first authenticated with
    /// (durable: journaled as `WorkerBound`, kept in checkpoints).
    bound: BTreeMap<String, String>,
    /// Quarantined ids forgotten to make room: still quarantined if they
    /// call again (as a replay of their conflicts would find them).
    quarantined_gone: BTreeSet<String>,
}

impl Workers {
    /// Whether `credential` may use the id: `Ok(true)` when it is bound
    /// to none yet and `credential` is an issued one (empty: the shared
    /// worker token, or none, which binds nothing); an error when another
    /// credential holds it.
    pub fn may_bind(&self, worker: &str, credential: &str) -> Result<bool, StateError> {
        match self.bound.get(worker) {
            Some(b) if b != credential => Err(StateError::WrongCredential {
                worker: worker.to_string(),
                bound: b.clone(),
            }),
            Some(_) => Ok(false),
            None => Ok(!credential.is_empty()),
        }
    }

    /// Ties a worker id to the credential it authenticated with (after
    /// [`Workers::may_bind`] said so): another credential may not use it.
    pub fn bind(&mut self, worker: &str, credential: &str) {
        self.bound
            .insert(worker.to_string(), credential.to_string());
    }

    /// Whether a worker id is bound to `credential`.
    pub fn bound_to(&self, worker: &str, credential: &str) -> bool {
        self.bound.get(worker).is_some_and(|b| b == credential)
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

    /// Forgets up to `most` workers that `which` allows, were last heard
    /// from before `before_ms` and hold nothing (`holding` says who holds
    /// a lease or a result still needed), with their bindings: those that
    /// left nothing behind first, then settled ones, then quarantined
    /// ones, each kind the longest silent first. Returns how many.
    pub fn forget(
        &mut self,
        before_ms: u64,
        holding: impl Fn(&str) -> bool,
        most: usize,
        which: Forget,
    ) -> usize {
        let rank = |w: &WorkerInfo| match (w.forgettable(), w.quarantined()) {
            (true, _) => 0,
            (false, false) => 1,
            (false, true) => 2,
        };
        let allowed = |w: &WorkerInfo| which == Forget::Settled || w.forgettable();
        let mut idle: Vec<(u8, u64, String)> = self
            .known
            .values()
            .filter(|w| allowed(w) && w.last_seen_ms < before_ms && !holding(&w.id))
            .map(|w| (rank(w), w.last_seen_ms, w.id.clone()))
            .collect();
        idle.sort_unstable();
        idle.truncate(most);
        for (_, _, id) in &idle {
            if self.known.remove(id).is_some_and(|w| w.quarantined()) {
                self.quarantined_gone.insert(id.clone());
            }
            self.bound.remove(id);
        }
        idle.len()
    }

    pub fn quarantined(&self, worker: &str) -> bool {
        match self.known.get(worker) {
            Some(w) => w.quarantined(),
            None => self.quarantined_gone.contains(worker),
        }
    }

    /// A worker's entry, made on first sight (also from journal records, so
    /// a quarantine survives a restart; and quarantined again if it was
    /// forgotten quarantined).
    pub fn entry(&mut self, id: &str) -> &mut WorkerInfo {
        let gone = self.quarantined_gone.remove(id);
        self.known
            .entry(id.to_string())
            .or_insert_with(|| WorkerInfo {
                id: id.to_string(),
                conflicts: u64::from(gone),
                ..WorkerInfo::default()
            })
    }

    /// Records a call from a worker (registering it if new).
    pub fn touch(&mut self, id: &str, now: u64) -> &mut WorkerInfo {
        let w = self.entry(id);
        w.last_seen_ms = now;
        w.heard = true;
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

    /// The workers that may take a task: heard from since `since_ms` (and
    /// since this coordinator started), neither quarantined nor draining
    /// (one going away takes no new task).
    fn taking_since(&self, since_ms: u64) -> impl Iterator<Item = &WorkerInfo> {
        self.known.values().filter(move |w| {
            w.heard && w.last_seen_ms >= since_ms && !w.quarantined() && !w.draining
        })
    }

    /// Whether any worker that may take a task ([`Workers::taking_since`])
    /// counts on a card, and any on a CPU.
    pub fn devices_since(&self, since_ms: u64) -> (bool, bool) {
        self.taking_since(since_ms)
            .map(WorkerInfo::devices)
            .fold((false, false), |(a, b), (c, d)| (a || c, b || d))
    }

    /// The credentials of the workers that may take a task.
    pub fn voters_since(&self, since_ms: u64) -> usize {
        self.taking_since(since_ms)
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
        assert_eq!(
            w.may_bind("a", ""),
            Ok(false),
            "no credential binds nothing"
        );
        assert_eq!(w.voter("a"), "a", "no credential: the id votes");
        assert_eq!(w.may_bind("a", "alice"), Ok(true));
        w.bind("a", "alice");
        assert_eq!(w.may_bind("a", "alice"), Ok(false), "bound already");
        assert!(matches!(
            w.may_bind("a", "mallory"),
            Err(StateError::WrongCredential { .. })
        ));
        assert!(matches!(
            w.may_bind("a", ""),
            Err(StateError::WrongCredential { .. })
        ));
        w.bind("b", "alice");
        assert_eq!(w.voter("b"), "alice");
        w.touch("a", 10);
        w.touch("b", 10);
        w.touch("c", 5);
        assert_eq!(w.voters_since(10), 1, "one credential, however many ids");
        assert_eq!(w.voters_since(0), 2);
        w.entry("c").conflicts = 1;
        assert!(w.quarantined("c"));
        assert_eq!(w.voters_since(0), 1, "a quarantined worker has no vote");
        w.entry("a").draining = true;
        assert_eq!(w.voters_since(0), 1);
        w.entry("b").draining = true;
        assert_eq!(w.voters_since(0), 0, "nor one going away");
        assert_eq!(w.devices_since(0), (false, false));
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

    #[test]
    fn only_idle_workers_that_left_nothing_behind_are_forgotten() {
        let mut w = Workers::default();
        for (id, seen) in [("old", 5), ("older", 1), ("fresh", 50), ("busy", 1)] {
            w.touch(id, seen);
        }
        w.entry("counted").tasks_done = 1;
        w.entry("liar").conflicts = 1;
        w.bind("older", "alice");
        let holding = |id: &str| id == "busy";
        assert_eq!(w.forget(10, holding, 1, Forget::Idle), 1, "at most one");
        assert!(w.get("older").is_none(), "the longest silent first");
        assert_eq!(
            w.may_bind("older", "mallory"),
            Ok(true),
            "its binding went too"
        );
        assert_eq!(w.forget(10, holding, usize::MAX, Forget::Idle), 1);
        assert!(w.get("old").is_none());
        for kept in ["fresh", "busy", "counted", "liar"] {
            assert!(w.get(kept).is_some(), "{kept}");
        }
    }

    /// A table full of workers whose results are counted, long silent:
    /// the sweep keeps them all, and a newcomer's place is the longest
    /// silent one's, a quarantined worker's only when no other can make
    /// room, never one still holding something, however silent.
    #[test]
    fn a_full_table_of_settled_workers_makes_room() {
        let mut w = Workers::default();
        for i in 0..MAX_WORKERS {
            let t = (i + 10) as u64;
            w.touch(&i.to_string(), t).tasks_done = 1;
        }
        w.touch("0", 0).conflicts = 1;
        w.touch("1", 1);
        assert_eq!(w.admit("new"), Err(StateError::TooManyWorkers(MAX_WORKERS)));
        let holding = |id: &str| id == "1";
        assert_eq!(w.forget(u64::MAX, holding, 1, Forget::Idle), 0);
        assert_eq!(w.forget(u64::MAX, holding, 1, Forget::Settled), 1);
        assert!(w.get("2").is_none(), "the longest silent settled one");
        assert!(w.get("0").is_some_and(|w| w.quarantined()) && w.get("1").is_some());
        assert_eq!(w.admit("new"), Ok(()));
        let more = MAX_WORKERS;
        assert_eq!(
            w.forget(u64::MAX, holding, more, Forget::Settled),
            MAX_WORKERS - 2
        );
        assert!(w.get("0").is_none(), "the quarantined one went last");
        assert!(w.get("1").is_some(), "holding");
    }

    /// A table of quarantined ids makes room too, and an id forgotten
    /// quarantined is quarantined again when it calls.
    #[test]
    fn the_table_of_quarantined_ids_makes_room() {
        let mut w = Workers::default();
        for i in 0..MAX_WORKERS {
            w.touch(&i.to_string(), i as u64).conflicts = 1;
        }
        assert_eq!(w.forget(u64::MAX, |_| false, 1, Forget::Idle), 0);
        assert_eq!(w.forget(u64::MAX, |_| false, 1, Forget::Settled), 1);
        assert!(w.get("0").is_none() && w.admit("new").is_ok());
        assert!(w.quarantined("0"), "forgotten, still quarantined");
        assert!(w.touch("0", MAX_WORKERS as u64).quarantined());
        assert!(!w.quarantined("new"));
    }
}
