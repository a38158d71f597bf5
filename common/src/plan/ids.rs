//! Subproblem ids: the kind in the top 4 bits and a payload in
//! enumeration order, so a task is an id range.

use super::*;

/// Bits of a ring part's number, under its ring's key in the id.
pub(super) const PART_BITS: u32 = 16;

/// Kinds of subproblem (the top 4 bits of an id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum Kind {
    /// The whole search, for boards too small to split.
    Whole = 0,
    Prefix = 1,
    Frame = 2,
    HalfTurn = 3,
    QuarterTurn = 4,
    RingPart = 5,
    /// A choice of east rows of a halves plan.
    Choice = 6,
}

pub(crate) const KIND_SHIFT: u32 = 60;
pub(super) const PAYLOAD: u64 = (1 << KIND_SHIFT) - 1;

/// One unit of counting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subproblem {
    Whole,
    /// The columns of the queens of rows `0..cols.len()`.
    Prefix {
        cols: Vec<u8>,
        weight: u32,
    },
    Frame {
        frame: Frame,
        weight: u32,
    },
    Symmetric {
        turn: Turn,
        first: u8,
    },
    /// Part `part` of a ring: the states below `start` (its first free
    /// rows placed), counted with the ring's weight.
    RingPart {
        ring: Frame,
        weight: u32,
        part: u32,
        start: Start,
    },
    /// East rows `choice` of piece `piece` of the whole board (see
    /// [`Shape::piece`]), standing for `weight` choices of boards.
    Choice {
        piece: u8,
        choice: u32,
        weight: u32,
    },
}

impl Subproblem {
    pub fn kind(&self) -> Kind {
        match self {
            Subproblem::Whole => Kind::Whole,
            Subproblem::Prefix { .. } => Kind::Prefix,
            Subproblem::Frame { .. } => Kind::Frame,
            Subproblem::Symmetric {
                turn: Turn::Half, ..
            } => Kind::HalfTurn,
            Subproblem::Symmetric {
                turn: Turn::Quarter,
                ..
            } => Kind::QuarterTurn,
            Subproblem::RingPart { .. } => Kind::RingPart,
            Subproblem::Choice { .. } => Kind::Choice,
        }
    }

    /// The stable id: kind tag, then a payload ordered like the enumeration.
    pub fn id(&self) -> u64 {
        let payload = match self {
            Subproblem::Whole => 0,
            Subproblem::Prefix { cols, .. } => pack_cols(cols),
            Subproblem::Frame { frame, .. } => frame.key(),
            Subproblem::Symmetric { first, .. } => u64::from(*first),
            Subproblem::RingPart { ring, part, .. } => ring.key() << PART_BITS | u64::from(*part),
            Subproblem::Choice { piece, choice, .. } => choice_id(*piece, *choice) & PAYLOAD,
        };
        (self.kind() as u64) << KIND_SHIFT | payload
    }
}

pub(super) fn pack_cols(cols: &[u8]) -> u64 {
    cols.iter().fold(0, |k, &c| k << POS_BITS | u64::from(c))
}

/// The id of choice `choice` of piece `piece` of a halves plan.
pub(super) fn choice_id(piece: u8, choice: u32) -> u64 {
    (Kind::Choice as u64) << KIND_SHIFT | u64::from(piece) << 32 | u64::from(choice)
}

/// The id of the prefix with these columns.
pub(super) fn prefix_id(cols: &[u8]) -> u64 {
    (Kind::Prefix as u64) << KIND_SHIFT | pack_cols(cols)
}
