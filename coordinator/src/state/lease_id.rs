//! Lease ids: unguessable, bound to their worker, and recognisable after a
//! restart. A lease id is a MAC (HMAC-SHA-256 under the data directory's
//! secret key) over the boot epoch, job, task and worker, so the
//! coordinator keeps no table of the leases it ever granted: a worker that
//! shows a valid id for (epoch, job, task, itself) was granted that task.

use sha2::{Digest, Sha256};

/// Lease ids are `(boot epoch mod 2^16) << EPOCH_SHIFT | 48 bits of MAC`.
pub(super) const EPOCH_SHIFT: u32 = 48;

/// The secret behind lease ids (32 bytes).
pub type LeaseKey = [u8; 32];

/// A fresh random lease key.
pub fn random_key() -> LeaseKey {
    let mut k = [0u8; 32];
    getrandom::getrandom(&mut k).expect("the operating system's random source failed");
    k
}

/// HMAC-SHA-256 under `key` of `label` then each part (length-prefixed).
fn mac(key: &LeaseKey, label: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let (mut ipad, mut opad) = ([0x36u8; 64], [0x5cu8; 64]);
    for (i, k) in key.iter().enumerate() {
        ipad[i] ^= k;
        opad[i] ^= k;
    }
    let mut inner = Sha256::new().chain_update(ipad).chain_update(label);
    for p in parts {
        inner.update(p);
    }
    Sha256::new()
        .chain_update(opad)
        .chain_update(inner.finalize())
        .finalize()
        .into()
}

/// The lease id of `worker`'s lease on `task` of `job` in boot `epoch`:
/// HMAC-SHA-256 under `key`, never 0.
pub fn lease_id(key: &LeaseKey, epoch: u64, job: u64, task: u64, worker: &str) -> u64 {
    let mac = mac(
        key,
        b"nqueens lease v1",
        &[
            &epoch.to_le_bytes(),
            &job.to_le_bytes(),
            &task.to_le_bytes(),
            &(worker.len() as u64).to_le_bytes(),
            worker.as_bytes(),
        ],
    );
    let low = u64::from_le_bytes(mac[..8].try_into().expect("8 bytes")) & ((1 << EPOCH_SHIFT) - 1);
    ((epoch & 0xffff) << EPOCH_SHIFT | low).max(1)
}

/// A worker's public tag: stable for its id, unique in practice, and
/// useless for calling as that worker (the unauthenticated metrics page
/// shows tags, never ids).
pub fn worker_tag(key: &LeaseKey, worker: &str) -> String {
    let mac = mac(key, b"nqueens worker tag v1", &[worker.as_bytes()]);
    mac[..6].iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `id` is a lease this coordinator granted `worker` on `task` of
/// `job` in boot `epoch` or an earlier one (the id carries the epoch's low
/// 16 bits; the few epochs that share them are each tried).
pub fn granted_by_then(
    key: &LeaseKey,
    epoch: u64,
    job: u64,
    task: u64,
    worker: &str,
    id: u64,
) -> bool {
    let mut e = id >> EPOCH_SHIFT;
    while e <= epoch {
        if lease_id(key, e, job, task, worker) == id {
            return true;
        }
        e += 1 << 16;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_names_one_worker_task_and_epoch() {
        let key = [3; 32];
        let id = lease_id(&key, 5, 1, 7, "a");
        assert!(granted_by_then(&key, 5, 1, 7, "a", id));
        assert!(
            granted_by_then(&key, 9, 1, 7, "a", id),
            "a later boot knows it"
        );
        assert!(
            !granted_by_then(&key, 4, 1, 7, "a", id),
            "not before its boot"
        );
        assert!(
            !granted_by_then(&key, 5, 1, 7, "b", id),
            "bound to its worker"
        );
        assert!(!granted_by_then(&key, 5, 1, 8, "a", id));
        assert!(!granted_by_then(&key, 5, 2, 7, "a", id));
        assert!(
            !granted_by_then(&[4; 32], 5, 1, 7, "a", id),
            "needs the key"
        );
        assert!(!granted_by_then(&key, 5, 1, 7, "a", id ^ 1));
    }

    #[test]
    fn a_tag_is_stable_and_does_not_show_the_id() {
        let key = [3; 32];
        let t = worker_tag(&key, "vm-1234-abcd");
        assert_eq!(t, worker_tag(&key, "vm-1234-abcd"));
        assert_eq!(t.len(), 12);
        assert!(!t.contains("1234"));
        assert_ne!(t, worker_tag(&key, "vm-1234-abce"));
        assert_ne!(t, worker_tag(&[4; 32], "vm-1234-abcd"), "needs the key");
    }
}
