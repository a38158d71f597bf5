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
