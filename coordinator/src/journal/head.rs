//! The head of every journal file, live or sealed: which format it is in
//! and, in the current format, which journal it belongs to and the number
//! of its first record.
//!
//! Current format (36 bytes): the magic [`MAGIC`], the journal's
//! [`Identity`] (16 random bytes, made with its first file and carried
//! into every file after it), the number of the file's first record
//! (u64, little endian) and a CRC-32 of those 32 bytes. The identity
//! tells a file copied in from another data directory from one of this
//! journal's, whatever its name and numbers say; the first number tells
//! where an empty live file starts, so a sealed segment numbered past it
//! is seen to be foreign. Files of the second format (the magic
//! `NQJRNL\0\x02` alone) and of the first (no head) are read as they
//! are, with nothing to check.

use super::JournalError;
use std::fmt;
use std::path::{Path, PathBuf};

/// The first bytes of a journal file in the current format.
pub const MAGIC: &[u8; 8] = b"NQJRNL\x00\x03";
/// The first bytes of a file of the second format.
pub const MAGIC_V2: &[u8; 8] = b"NQJRNL\x00\x02";
/// The length of a current head.
pub const LEN: usize = 36;

/// Which journal a file belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Identity([u8; 16]);

impl Identity {
    /// An identity of 16 bytes `b`, for tests that write journal files.
    #[cfg(test)]
    pub(crate) fn fixed(b: u8) -> Identity {
        Identity([b; 16])
    }

    /// A new journal's identity.
    pub fn random() -> Identity {
        let mut id = [0; 16];
        getrandom::getrandom(&mut id).expect("the system's random source");
        Identity(id)
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Identity({self})")
    }
}

/// What a file's first bytes say.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Head {
    /// No head: the first format, whose records carry no numbers.
    V1,
    /// The second format's magic alone.
    V2,
    /// The current format.
    V3 { id: Identity, first: u64 },
    /// Fewer bytes than a head, all of them a head's beginning (or none):
    /// a torn first write, before anything was acknowledged.
    Torn,
    /// A current head whose CRC does not match.
    Damaged,
}

impl Head {
    /// The head at the start of `bytes`.
    pub fn of(bytes: &[u8]) -> Head {
        if bytes.starts_with(MAGIC_V2) {
            return Head::V2;
        }
        // Zeros only: a file whose first write never reached the disk
        // (never a journal of the first format, whose records cannot be).
        if bytes.iter().all(|&b| b == 0) {
            return Head::Torn;
        }
        let n = bytes.len().min(LEN);
        if !bytes.starts_with(MAGIC) {
            let torn = MAGIC.starts_with(&bytes[..n.min(MAGIC.len())]);
            return if torn && n < MAGIC.len() {
                Head::Torn
            } else {
                Head::V1
            };
        }
        // Shorter than a head, or the magic and zeros only: a seal's new
        // file whose head never reached the disk before a power cut (it is
        // fsynced before any record is written after it).
        if n < LEN || bytes[MAGIC.len()..].iter().all(|&b| b == 0) {
            return Head::Torn;
        }
        let crc = u32::from_le_bytes(bytes[32..36].try_into().expect("4 bytes"));
        if crc32fast::hash(&bytes[..32]) != crc {
            return Head::Damaged;
        }
        Head::V3 {
            id: Identity(bytes[8..24].try_into().expect("16 bytes")),
            first: u64::from_le_bytes(bytes[24..32].try_into().expect("8 bytes")),
        }
    }

    /// The bytes of the head before the first record.
    pub fn size(self) -> usize {
        match self {
            Head::V1 | Head::Torn => 0,
            Head::V2 => MAGIC_V2.len(),
            Head::V3 { .. } | Head::Damaged => LEN,
        }
    }

    /// The journal a file of the current format belongs to.
    pub fn id(self) -> Option<Identity> {
        match self {
            Head::V3 { id, .. } => Some(id),
            _ => None,
        }
    }

    /// The number a file of the current format starts at.
    pub fn first(self) -> Option<u64> {
        match self {
            Head::V3 { first, .. } => Some(first),
            _ => None,
        }
    }
}

/// The head of a new file of journal `id` whose first record is `first`.
pub fn bytes(id: Identity, first: u64) -> [u8; LEN] {
    let mut b = [0; LEN];
    b[..8].copy_from_slice(MAGIC);
    b[8..24].copy_from_slice(&id.0);
    b[24..32].copy_from_slice(&first.to_le_bytes());
    let crc = crc32fast::hash(&b[..32]);
    b[32..].copy_from_slice(&crc.to_le_bytes());
    b
}

/// The identity a journal's files must carry, and the file it was read
/// from (to name it when another file differs).
#[derive(Clone, Debug)]
pub struct Expected {
    pub id: Identity,
    pub from: PathBuf,
}

impl Expected {
    /// The identity the file at `path` carries in its head, if any.
    pub fn of((path, head): (&Path, Head)) -> Option<Expected> {
        head.id().map(|id| Expected {
            id,
            from: path.to_path_buf(),
        })
    }

    /// Refuses a file (at `path`, with `head`) of another journal.
    pub fn check(&self, path: &Path, head: Head) -> Result<(), JournalError> {
        match head.id() {
            Some(id) if id != self.id => Err(JournalError::Foreign {
                path: path.to_path_buf(),
                found: id,
                want: self.id,
                from: self.from.clone(),
            }),
            _ => Ok(()),
        }
    }
}

/// Checks `head` against `want`, where there is one.
pub fn check(want: Option<&Expected>, path: &Path, head: Head) -> Result<(), JournalError> {
    want.map_or(Ok(()), |w| w.check(path, head))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_reads_back_and_every_damage_to_it_shows() {
        let id = Identity::random();
        let b = bytes(id, 77);
        assert_eq!(Head::of(&b), Head::V3 { id, first: 77 });
        for i in 8..LEN {
            let mut bad = b;
            bad[i] ^= 0x10;
            assert_eq!(Head::of(&bad), Head::Damaged, "byte {i}");
        }
        for n in 0..LEN {
            assert_eq!(Head::of(&b[..n]), Head::Torn, "{n} bytes");
        }
        let mut zeros = MAGIC.to_vec();
        zeros.resize(100, 0);
        assert_eq!(
            Head::of(&zeros),
            Head::Torn,
            "a head that never reached the disk"
        );
        zeros[99] = 1;
        assert_eq!(Head::of(&zeros), Head::Damaged);
        assert_eq!(Head::of(&[0; LEN]), Head::Torn);
        assert_eq!(Head::of(b"NQJRNL\x00\x02rest"), Head::V2);
        assert_eq!(Head::of(&[9, 0, 0, 0, 1, 2, 3, 4, 5]), Head::V1);
        assert_ne!(Identity::random(), id);
    }

    #[test]
    fn a_file_of_another_journal_is_named_with_both_identities() {
        let (ours, theirs) = (Identity::random(), Identity::random());
        let live = Path::new("journal");
        assert!(Expected::of((live, Head::V2)).is_none());
        let want = Expected::of((Path::new("d/1-2.seg"), Head::V3 { id: ours, first: 1 })).unwrap();
        assert_eq!(want.id, ours);
        let odd = Path::new("d/3-4.seg");
        assert!(want.check(odd, Head::V3 { id: ours, first: 3 }).is_ok());
        assert!(want.check(odd, Head::V2).is_ok());
        let e = want
            .check(
                odd,
                Head::V3 {
                    id: theirs,
                    first: 3,
                },
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&theirs.to_string()) && e.contains(&ours.to_string()),
            "{e}"
        );
        assert!(e.contains("d/3-4.seg") && e.contains("d/1-2.seg"), "{e}");
    }
}
