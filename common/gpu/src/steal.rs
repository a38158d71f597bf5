//! Long searches split while the card idles: the end of a count.
//!
//! A count lasts as long as its longest job, and jobs differ by orders of
//! magnitude, so once the queue is empty most of the card waits on a few
//! searches. Between launches nothing runs on the card, so the host can
//! read the searches still going (each slot's stack: the rows with
//! candidates left, the shallowest at the bottom) and take from each one
//! the candidates left on its bottom row: each becomes a job of its own,
//! starting one row down with that queen placed, in the same interior and
//! batch, and the row leaves the slot's stack. Every square the search
//! would have visited is visited once, by the slot or by one new job; the
//! queens the host placed to start the new jobs are counted to their
//! interior.

use crate::jobs::{shift_word, TABLE_WORDS};

/// Words of a slot's record on the card (see `Slot` in count.wgsl): the
/// rows on its stack, its queens' columns less its row, three words of
/// padding, its job's interior | batch << 16 ([`NONE`] when idle), its
/// start row | next-to-last row << 8, and a word of padding.
pub const SLOT_WORDS: usize = 8;

/// A slot without a job.
pub const NONE: u32 = u32::MAX;

/// Words of a stack record: a row's candidates left and its masks.
pub const RECORD_WORDS: usize = 4;

/// Takes the candidates of each running slot's bottom row, where that
/// row is above its next-to-last, as new jobs (at most `room` of them,
/// laid out as the card reads them), and takes those rows off the slots'
/// stacks (in `slots`, and in `stacks`: `levels` records per slot).
/// `tables` are the interiors' tables, [`TABLE_WORDS`] words each, where
/// the slots' interiors name them.
pub fn steal(
    slots: &mut [u32],
    stacks: &mut [u32],
    levels: usize,
    tables: &[u32],
    room: usize,
) -> Vec<[u32; 8]> {
    let mut out = Vec::new();
    for (me, slot) in slots.chunks_exact_mut(SLOT_WORDS).enumerate() {
        let [top, base, _, _, _, owner, info, _] = (*slot).try_into().expect("eight words");
        if owner == NONE || top == 0 {
            continue;
        }
        let (interior, tag, pen) = (owner & 0xffff, owner >> 16, info >> 8);
        let records = &mut stacks[me * levels * RECORD_WORDS..][..levels * RECORD_WORDS];
        let [mut bm, l, d, r] = records[..RECORD_WORDS].try_into().expect("four words");
        let row = d.count_ones().wrapping_sub(base);
        if row >= pen {
            // Its last two rows: less than a job's worth.
            continue;
        }
        if out.len() + bm.count_ones() as usize > room {
            break;
        }
        let sh = tables[shift_word(interior * TABLE_WORDS as u32, row)];
        while bm != 0 {
            let bit = bm & bm.wrapping_neg();
            bm ^= bit;
            let (l, d, r) = ((l | bit) << sh, d | bit, (r | bit) >> sh);
            out.push([interior, row + 1, l, d, r, pen, tag, 0]);
        }
        records.copy_within(RECORD_WORDS..top as usize * RECORD_WORDS, 0);
        slot[0] = top - 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slot of interior 1 (batch 5, start row 1, next-to-last row 7)
    /// with rows 2 (two candidates left) and 3 (one) on its stack; an idle
    /// slot; a slot whose only row is its next-to-last.
    #[test]
    fn the_bottom_row_of_each_stack_becomes_jobs_one_row_down() {
        let mut tables = vec![0u32; 2 * TABLE_WORDS];
        tables[shift_word(TABLE_WORDS as u32, 2)] = 1; // row 2 to row 3: one row
        let owner = 1 | 5 << 16;
        let info = 1 | 7 << 8;
        #[rustfmt::skip]
        let mut slots = vec![
            2, 0, 0, 0, 0, owner, info, 0,
            0, 0, 0, 0, 0, NONE, 0, 0,
            1, 0, 0, 0, 0, owner, info, 0,
        ];
        let levels = 4;
        let mut stacks = vec![0u32; 3 * levels * RECORD_WORDS];
        stacks[..8].copy_from_slice(&[0b1010_0000, 0b10, 0b11, 0b1000, 0b1, 0, 0b111, 0]);
        stacks[16] = 0b1; // the idle slot's: ignored
        stacks[32..36].copy_from_slice(&[0b110, 0, 0x7f, 0]); // row 7: its next-to-last
        let mut take = || steal(&mut slots, &mut stacks, levels, &tables, 100);
        // Each queen of row 2 placed: masks shifted one row, row 3 next.
        let placed = |q: u32| [1, 3, (0b10 | q) << 1, 0b11 | q, (0b1000 | q) >> 1, 7, 5, 0];
        assert_eq!(take(), vec![placed(0b10_0000), placed(0b1000_0000)]);
        // Row 3 (no shift to row 4 in its table) goes next.
        assert_eq!(take(), vec![[1, 4, 0b1, 0b111, 0b1, 7, 5, 0]]);
        assert!(take().is_empty(), "nothing left above a next-to-last row");
        assert_eq!((slots[0], slots[16]), (0, 1), "rows taken off the stack");
        assert_eq!(stacks[16], 0b1, "an idle slot's stack is left alone");
        assert_eq!(stacks[32], 0b110, "a next-to-last row is left alone");
    }

    #[test]
    fn a_steal_stops_where_the_room_ends() {
        let tables = vec![1u32; TABLE_WORDS];
        let mut slots = [1, 0, 0, 0, 0, 0, 9 << 8, 0, 1, 0, 0, 0, 0, 0, 9 << 8, 0];
        let mut stacks = vec![0u32; 2 * RECORD_WORDS];
        stacks[0] = 0b11;
        stacks[4] = 0b111;
        let got = steal(&mut slots, &mut stacks, 1, &tables, 4);
        assert_eq!(got.len(), 2, "the second slot's three do not fit");
        assert_eq!((slots[0], slots[8]), (0, 1));
        assert_eq!(stacks[4], 0b111);
    }
}
