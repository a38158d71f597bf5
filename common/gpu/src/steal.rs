//! Long searches split while the card idles: the end of a count.
//!
//! A count lasts as long as its longest job, and jobs differ by orders of
//! magnitude, so once the queue is empty most of the card waits on a few
//! searches. Between launches nothing runs on the card, so the host can
//! read the searches still going (each slot's row, its candidates and the
//! records of the rows above it) and take from each one the candidates
//! left on its shallowest row that has any: each becomes a job of its own,
//! starting one row down with that queen placed, in the same interior and
//! batch, and the slot's record of that row is emptied, so its search
//! backs past it. Every square the search would have visited is visited
//! once, by the slot or by one new job; the queens the host placed to
//! start the new jobs are counted to their interior.

use crate::jobs::{shift_word, TABLE_WORDS};

/// Words of a slot's record on the card (see `Slot` in count.wgsl): its
/// row, that row's candidates and masks, its job's interior | batch << 16
/// ([`NONE`] when idle), its start row | next-to-last row << 8, and a
/// word of padding.
pub const SLOT_WORDS: usize = 8;

/// A slot without a job.
pub const NONE: u32 = u32::MAX;

/// Words of a stack record: a row's candidates left and its masks.
pub const RECORD_WORDS: usize = 4;

/// Takes the candidates of each running slot's shallowest row that has
/// any, as new jobs (at most `room` of them, laid out as the card reads
/// them), and empties those rows' records in `stacks` (`levels` records
/// per slot). `tables` are the interiors' tables, [`TABLE_WORDS`] words
/// each, where the slots' interiors name them.
pub fn steal(
    slots: &[u32],
    stacks: &mut [u32],
    levels: usize,
    tables: &[u32],
    room: usize,
) -> Vec<[u32; 8]> {
    let mut out = Vec::new();
    for (me, slot) in slots.chunks_exact(SLOT_WORDS).enumerate() {
        let [k, _, _, _, _, owner, info, _] = slot.try_into().expect("eight words");
        if owner == NONE {
            continue;
        }
        let (interior, tag) = (owner & 0xffff, owner >> 16);
        let (start, pen) = (info & 0xff, info >> 8);
        let records = &mut stacks[me * levels * RECORD_WORDS..][..levels * RECORD_WORDS];
        let Some(row) = (start..k).find(|&i| records[rec(i - start)] != 0) else {
            continue;
        };
        let r = &mut records[rec(row - start)..][..RECORD_WORDS];
        let mut bm = r[0];
        if out.len() + bm.count_ones() as usize > room {
            break;
        }
        let sh = tables[shift_word(interior * TABLE_WORDS as u32, row)];
        while bm != 0 {
            let bit = bm & bm.wrapping_neg();
            bm ^= bit;
            let (l, d, rr) = ((r[1] | bit) << sh, r[2] | bit, (r[3] | bit) >> sh);
            out.push([interior, row + 1, l, d, rr, pen, tag, 0]);
        }
        r[0] = 0;
    }
    out
}

/// The first word of record `i` of a slot's stack.
fn rec(i: u32) -> usize {
    i as usize * RECORD_WORDS
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One slot standing on row 3 of a job of interior 1 (batch 5) that
    /// started on row 1: its records of rows 1 and 2; row 1 has no
    /// candidates left, row 2 two.
    #[test]
    fn the_shallowest_row_with_candidates_becomes_jobs_one_row_down() {
        let mut tables = vec![0u32; 2 * TABLE_WORDS];
        tables[shift_word(TABLE_WORDS as u32, 2)] = 1; // row 2 to row 3: one row
        let slots = [
            3,
            0b1,
            0,
            0,
            0,
            1 | 5 << 16,
            1 | 7 << 8,
            0,
            0,
            0,
            0,
            0,
            0,
            NONE,
            0,
            0,
        ];
        let levels = 4;
        let mut stacks = vec![0u32; 2 * levels * RECORD_WORDS];
        stacks[4..8].copy_from_slice(&[0b1010_0000, 0b10, 0b100, 0b1000]);
        stacks[16..20].copy_from_slice(&[0b1, 0, 0, 0]); // the idle slot's: ignored
        let take = |stacks: &mut [u32]| steal(&slots, stacks, levels, &tables, 100);
        let got = take(&mut stacks);
        // Each queen of row 2 placed: masks shifted one row, row 3 next.
        let placed = |q: u32| [1, 3, (0b10 | q) << 1, 0b100 | q, (0b1000 | q) >> 1, 7, 5, 0];
        assert_eq!(got, vec![placed(0b10_0000), placed(0b1000_0000)]);
        assert_eq!(stacks[4..8], [0, 0b10, 0b100, 0b1000], "the row is emptied");
        assert_eq!(stacks[16], 0b1, "an idle slot's stack is left alone");
        // Nothing is left above row 3 now: a second steal takes nothing.
        assert!(take(&mut stacks).is_empty());
    }

    #[test]
    fn a_steal_stops_where_the_room_ends() {
        let tables = vec![1u32; TABLE_WORDS];
        let slots = [1, 0, 0, 0, 0, 0, 9 << 8, 0, 1, 0, 0, 0, 0, 0, 9 << 8, 0];
        let mut stacks = vec![0u32; 2 * RECORD_WORDS];
        stacks[0] = 0b11;
        stacks[4] = 0b111;
        let got = steal(&slots, &mut stacks, 1, &tables, 4);
        assert_eq!(got.len(), 2, "the second slot's three do not fit");
        assert_eq!((stacks[0], stacks[4]), (0, 0b111));
    }
}
