//! What calls are journaling now, claimed until applied, so that two
//! calls at once (in one fsync window, neither applied yet) do not both
//! write what may be written once: a record for the audit alone (a
//! conflict, a quarantined worker's result; once applied,
//! [`crate::state::State::on_record`] sees it), or a worker id's binding
//! to a credential (two credentials never race for one id: the journal's
//! last binding of an id is the one that holds).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::state::{Done, Verdict};

/// What makes two records for the audit one: the job, task and worker,
/// and for a kept result its lease (a conflict is one per worker and task).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Record {
    job: u64,
    task: u64,
    worker: String,
    lease: Option<u64>,
}

impl Record {
    pub fn of(v: Verdict, d: &Done) -> Record {
        Record {
            job: d.job,
            task: d.task,
            worker: d.worker.clone(),
            lease: (v != Verdict::Conflict).then_some(d.lease_id),
        }
    }
}

/// Keys being written now, each with what it is claimed for.
#[derive(Debug)]
pub(super) struct Claims<K, V>(Arc<Mutex<HashMap<K, V>>>);

impl<K, V> Default for Claims<K, V> {
    fn default() -> Self {
        Claims(Arc::new(Mutex::new(HashMap::new())))
    }
}

impl<K: Clone + Eq + Hash, V: Clone> Claims<K, V> {
    /// Claims `key` for `value` until the claim is dropped; while another
    /// call holds it, what that call claimed it for.
    pub fn claim(&self, key: K, value: V) -> Result<Claim<K, V>, V> {
        let mut held = lock(&self.0);
        if let Some(v) = held.get(&key) {
            return Err(v.clone());
        }
        held.insert(key.clone(), value);
        Ok(Claim {
            of: Arc::clone(&self.0),
            key,
        })
    }
}

/// How many records of each key calls are writing now, each reserved
/// until applied: so that calls at once, none applied yet, cannot together
/// pass a limit that each checks alone (a quarantined worker's results
/// kept for the audit, [`crate::state::State::room_to_keep`]).
#[derive(Debug)]
pub(super) struct Counts<K>(Arc<Mutex<HashMap<K, u32>>>);

impl<K> Default for Counts<K> {
    fn default() -> Self {
        Counts(Arc::new(Mutex::new(HashMap::new())))
    }
}

impl<K: Clone + Eq + Hash> Counts<K> {
    /// Reserves one more record of `key` if `room` allows one more beside
    /// those being written now (the count it is given); the reservation
    /// ends when dropped.
    pub fn reserve(&self, key: K, room: impl FnOnce(u32) -> bool) -> Option<Reserved<K>> {
        let mut held = lock(&self.0);
        let writing = held.get(&key).copied().unwrap_or(0);
        if !room(writing) {
            return None;
        }
        *held.entry(key.clone()).or_default() += 1;
        Some(Reserved {
            of: Arc::clone(&self.0),
            key,
        })
    }
}

/// One record of a key a call writes: held by the write until it is
/// applied (or failed).
#[derive(Debug)]
pub(super) struct Reserved<K: Eq + Hash> {
    of: Arc<Mutex<HashMap<K, u32>>>,
    key: K,
}

impl<K: Eq + Hash> Drop for Reserved<K> {
    fn drop(&mut self) {
        let mut held = lock(&self.of);
        if let Some(n) = held.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}

fn lock<K, V>(m: &Mutex<HashMap<K, V>>) -> MutexGuard<'_, HashMap<K, V>> {
    m.lock().expect("claims lock poisoned")
}

/// A key a call writes: held by the write until it is applied (or
/// failed), even when the call itself is dropped meanwhile.
#[derive(Debug)]
pub(super) struct Claim<K: Eq + Hash, V> {
    of: Arc<Mutex<HashMap<K, V>>>,
    key: K,
}

impl<K: Eq + Hash, V> Drop for Claim<K, V> {
    fn drop(&mut self) {
        lock(&self.of).remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::Counts;

    /// Reservations of a key stop where `room` says, counting every one
    /// not yet dropped (two calls' alike); a dropped one makes room again,
    /// and each key counts its own.
    #[test]
    fn reservations_count_until_dropped() {
        let counts = Counts::default();
        let room = |writing: u32| writing < 3;
        let mut first: Vec<_> = (0..2).filter_map(|_| counts.reserve("a", room)).collect();
        let second: Vec<_> = (0..2).filter_map(|_| counts.reserve("a", room)).collect();
        assert_eq!((first.len(), second.len()), (2, 1));
        assert!(counts.reserve("b", room).is_some());
        first.pop();
        assert!(counts.reserve("a", room).is_some());
        drop((first, second));
        let all: Vec<_> = (0..5).filter_map(|_| counts.reserve("a", room)).collect();
        assert_eq!(all.len(), 3, "every reservation dropped is given back");
    }
}
