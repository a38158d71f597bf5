//! Which journal records a reader has taken in, by sequence number: all up
//! to `upto`, and some beyond. Records are fsynced in order but reach their
//! readers (the state, the store's thread) in any order, so "caught up to"
//! is the contiguous part only.

use std::collections::BTreeSet;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// Every record from 1 to here.
    pub upto: u64,
    /// Records after `upto + 1` (which is missing).
    pub beyond: BTreeSet<u64>,
}

impl Seen {
    /// Every record up to `upto`, none after.
    pub fn upto(upto: u64) -> Seen {
        Seen {
            upto,
            beyond: BTreeSet::new(),
        }
    }

    pub fn add(&mut self, seq: u64) {
        if seq > self.upto {
            self.beyond.insert(seq);
        }
        while self.beyond.remove(&(self.upto + 1)) {
            self.upto += 1;
        }
    }

    pub fn contains(&self, seq: u64) -> bool {
        seq <= self.upto || self.beyond.contains(&seq)
    }

    /// The highest record taken in.
    pub fn last(&self) -> u64 {
        self.beyond.last().copied().unwrap_or(self.upto)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contiguous_part_grows_only_when_the_gap_fills() {
        let mut seen = Seen::upto(3);
        seen.add(5);
        seen.add(6);
        assert_eq!((seen.upto, seen.last()), (3, 6));
        assert!(seen.contains(5) && !seen.contains(4));
        seen.add(4);
        assert_eq!(seen, Seen::upto(6));
        seen.add(2); // already in
        assert_eq!(seen, Seen::upto(6));
    }
}
