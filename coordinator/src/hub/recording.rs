//! Records a report journals for the audit alone (a conflict, a
//! quarantined worker's result) while a call is writing them: a second
//! call with the same record meanwhile journals nothing, as it journals
//! nothing once the record is applied ([`crate::state::State::on_record`]).

use std::collections::HashSet;
use std::sync::Mutex;

use crate::state::{Done, Verdict};

/// What makes two such records one: the job, task and worker, and for a
/// kept result its lease (a conflict is one per worker and task).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Key {
    job: u64,
    task: u64,
    worker: String,
    lease: Option<u64>,
}

impl Key {
    pub fn of(v: Verdict, d: &Done) -> Key {
        Key {
            job: d.job,
            task: d.task,
            worker: d.worker.clone(),
            lease: (v != Verdict::Conflict).then_some(d.lease_id),
        }
    }
}

/// The records being written now.
#[derive(Debug, Default)]
pub(super) struct Recording(Mutex<HashSet<Key>>);

impl Recording {
    /// Claims `key` until the claim is dropped; `None` while another
    /// call holds it.
    pub fn claim(&self, key: Key) -> Option<Claim<'_>> {
        // Made only when fresh: a claim dropped ends the key's claim.
        let fresh = self.set().insert(key.clone());
        fresh.then(|| Claim { of: self, key })
    }

    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<Key>> {
        self.0.lock().expect("recording lock poisoned")
    }
}

/// A record this call writes: dropped once it is applied (or failed).
#[derive(Debug)]
pub(super) struct Claim<'a> {
    of: &'a Recording,
    key: Key,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.of.set().remove(&self.key);
    }
}
