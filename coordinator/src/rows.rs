//! The store's compact result rows: the counted results of up to
//! [`BLOCK`] consecutive tasks of a job in one sled value, each result
//! about 30 bytes (who reported it as a small number into a table of
//! reporters, counts as variable-length integers), so that a job of 10^8
//! tasks costs a few GB on disk and its store only 2·10^5 keys.
//!
//! A block is a run of entries sorted by task:
//! `[task mod BLOCK: u16][payload length: u8][payload]`, the payload being
//! `[reporter: varint][lease id: u64][unix ms: varint][elapsed ms: varint]
//! [checksum: u64][mask of non-zero counts: u8][each non-zero count: varint]`
//! (integers little endian; counts in the order c1, c2, c4, c8, nodes,
//! weighted, half, quarter).

use crate::state::{Done, Outcome};
use nqueens_common::plan::Tally;
use nqueens_common::Totals;

/// Tasks per block.
pub const BLOCK: u64 = 512;

/// Who reported a result: a row of the reporters' table.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Reporter {
    pub worker: String,
    pub credential: String,
    pub solver_version: String,
}

impl Reporter {
    pub fn of(d: &Done) -> Reporter {
        Reporter {
            worker: d.worker.clone(),
            credential: d.credential.clone(),
            solver_version: d.outcome.solver_version.clone(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::new();
        for s in [&self.worker, &self.credential, &self.solver_version] {
            varint(&mut v, s.len() as u128);
            v.extend_from_slice(s.as_bytes());
        }
        v
    }

    pub fn decode(mut b: &[u8]) -> Option<Reporter> {
        let mut text = || -> Option<String> {
            let n = usize::try_from(read_varint(&mut b)?).ok()?;
            let s = String::from_utf8(b.get(..n)?.to_vec()).ok()?;
            b = &b[n..];
            Some(s)
        };
        Some(Reporter {
            worker: text()?,
            credential: text()?,
            solver_version: text()?,
        })
    }
}

fn varint(v: &mut Vec<u8>, mut x: u128) {
    loop {
        let byte = (x & 0x7f) as u8;
        x >>= 7;
        if x == 0 {
            v.push(byte);
            return;
        }
        v.push(byte | 0x80);
    }
}

fn read_varint(b: &mut &[u8]) -> Option<u128> {
    let mut x = 0u128;
    for shift in (0..128).step_by(7) {
        let (&byte, rest) = b.split_first()?;
        *b = rest;
        x |= u128::from(byte & 0x7f).checked_shl(shift)?;
        if byte & 0x80 == 0 {
            return Some(x);
        }
    }
    None
}

fn read_u64(b: &mut &[u8]) -> Option<u64> {
    let (head, rest) = b.split_at_checked(8)?;
    *b = rest;
    Some(u64::from_le_bytes(head.try_into().ok()?))
}

/// A tally's counts in the rows' order.
fn counts(t: &Tally) -> [u128; 8] {
    let c = &t.classes;
    [
        c.c1, c.c2, c.c4, c.c8, c.nodes, t.weighted, t.half, t.quarter,
    ]
}

/// One result's payload, its reporter given as `who`.
pub fn encode(d: &Done, who: u32) -> Vec<u8> {
    let r = &d.outcome;
    let mut v = Vec::with_capacity(40);
    varint(&mut v, who.into());
    v.extend_from_slice(&d.lease_id.to_le_bytes());
    varint(&mut v, d.unix_ms.into());
    varint(&mut v, r.elapsed_ms.into());
    v.extend_from_slice(&r.checksum.to_le_bytes());
    let values = counts(&r.tally);
    let mask = values
        .iter()
        .enumerate()
        .fold(0u8, |m, (i, &x)| m | u8::from(x != 0) << i);
    v.push(mask);
    for x in values.into_iter().filter(|&x| x != 0) {
        varint(&mut v, x);
    }
    v
}

/// A payload back into the row of task `task` of job `job`, with its
/// reporter looked up by `reporter`.
pub fn decode(
    job: u64,
    task: u64,
    mut b: &[u8],
    reporter: impl Fn(u32) -> Option<Reporter>,
) -> Option<Done> {
    let who = u32::try_from(read_varint(&mut b)?).ok()?;
    let lease_id = read_u64(&mut b)?;
    let unix_ms = u64::try_from(read_varint(&mut b)?).ok()?;
    let elapsed_ms = u64::try_from(read_varint(&mut b)?).ok()?;
    let checksum = read_u64(&mut b)?;
    let (&mask, mut rest) = b.split_first()?;
    let mut values = [0u128; 8];
    for (i, slot) in values.iter_mut().enumerate() {
        if mask >> i & 1 == 1 {
            *slot = read_varint(&mut rest)?;
        }
    }
    let [c1, c2, c4, c8, nodes, weighted, half, quarter] = values;
    let who = reporter(who)?;
    Some(Done {
        job,
        task,
        outcome: Outcome {
            tally: Tally {
                classes: Totals {
                    c1,
                    c2,
                    c4,
                    c8,
                    nodes,
                },
                weighted,
                half,
                quarter,
            },
            checksum,
            elapsed_ms,
            solver_version: who.solver_version,
        },
        worker: who.worker,
        lease_id,
        unix_ms,
        credential: who.credential,
    })
}

/// The entries of a block: (task mod BLOCK, payload), sorted by task.
pub fn entries(block: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let mut b = block;
    while let [lo, hi, len, rest @ ..] = b {
        let len = usize::from(*len);
        let Some(payload) = rest.get(..len) else {
            break; // a damaged tail: the journal rebuilds what is missing
        };
        out.push((u16::from_le_bytes([*lo, *hi]), payload));
        b = &rest[len..];
    }
    out
}

/// A change to one task's entry in a block.
#[derive(Clone, Debug, PartialEq)]
pub enum Edit {
    /// Sets the entry unless it has one (the first result of a task wins).
    Add(Vec<u8>),
    /// Sets the entry, replacing any.
    Put(Vec<u8>),
    Remove,
}

/// A block with `edits` applied in order (task mod BLOCK, edit).
pub fn merge(block: &[u8], edits: Vec<(u16, Edit)>) -> Vec<u8> {
    let mut all: std::collections::BTreeMap<u16, Vec<u8>> = entries(block)
        .into_iter()
        .map(|(t, p)| (t, p.to_vec()))
        .collect();
    for (task, edit) in edits {
        match edit {
            Edit::Add(p) => {
                all.entry(task).or_insert(p);
            }
            Edit::Put(p) => {
                all.insert(task, p);
            }
            Edit::Remove => {
                all.remove(&task);
            }
        }
    }
    let mut out = Vec::with_capacity(all.values().map(|p| p.len() + 3).sum());
    for (task, p) in all {
        out.extend_from_slice(&task.to_le_bytes());
        out.push(u8::try_from(p.len()).expect("a row payload is under 256 bytes"));
        out.extend_from_slice(&p);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(task: u64, weighted: u128, nodes: u128) -> Done {
        let tally = Tally {
            weighted,
            classes: Totals {
                nodes,
                ..Default::default()
            },
            ..Tally::default()
        };
        Done {
            job: 3,
            task,
            outcome: Outcome {
                tally,
                elapsed_ms: 1_234,
                solver_version: "nqueens 0.1.0".into(),
                checksum: 0xdead_beef_0bad_f00d,
            },
            worker: "rack1-node07".into(),
            lease_id: 0x0001_2345_6789_abcd,
            unix_ms: 1_795_000_000_000,
            credential: "rack1".into(),
        }
    }

    #[test]
    fn a_row_round_trips_in_about_thirty_bytes() {
        let d = done(7, u128::MAX, 1 << 40);
        let who = Reporter::of(&d);
        let p = encode(&d, 5);
        assert!(p.len() <= 64, "{} bytes", p.len());
        let back = decode(3, 7, &p, |i| (i == 5).then(|| who.clone())).unwrap();
        assert_eq!(back, d);
        assert_eq!(Reporter::decode(&who.encode()), Some(who));
        let small = encode(&done(7, 400_000, 0), 5);
        assert!(small.len() <= 32, "{} bytes", small.len());
    }

    #[test]
    fn damaged_bytes_never_panic_and_never_make_a_row_up() {
        let good = merge(&[], vec![(3, Edit::Add(encode(&done(3, 9, 9), 0)))]);
        let who = |_| Some(Reporter::default());
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for round in 0..2_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut bytes = good.clone();
            // A flipped byte, or a cut, anywhere.
            let at = (x as usize) % bytes.len();
            if round % 2 == 0 {
                bytes[at] ^= (x >> 32) as u8 | 1;
            } else {
                bytes.truncate(at);
            }
            for (t, payload) in entries(&bytes) {
                let _ = decode(1, u64::from(t), payload, who);
            }
        }
        assert!(entries(&[0xff; 2]).is_empty(), "a header cut short");
        assert_eq!(
            decode(1, 3, &[0x80; 40], who),
            None,
            "a varint that never ends"
        );
    }

    #[test]
    fn blocks_merge_first_wins_replace_and_remove() {
        let a = encode(&done(1, 1, 1), 0);
        let b = encode(&done(2, 2, 2), 0);
        let block = merge(
            &[],
            vec![(9, Edit::Add(b.clone())), (2, Edit::Add(a.clone()))],
        );
        assert_eq!(entries(&block), vec![(2, &a[..]), (9, &b[..])]);
        let same = merge(&block, vec![(2, Edit::Add(b.clone()))]);
        assert_eq!(same, block, "the first result of a task wins");
        let replaced = merge(&block, vec![(2, Edit::Put(b.clone())), (9, Edit::Remove)]);
        assert_eq!(entries(&replaced), vec![(2, &b[..])]);
        assert_eq!(
            entries(&replaced[..replaced.len() - 1]),
            vec![],
            "a torn entry is dropped"
        );
    }
}
