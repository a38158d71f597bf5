//! The plain bitmap baseline (after Jeff Somers' classic program): one
//! queen per row, free columns as a bit mask, and only the left-right
//! mirror used (row 0's queen in the left half, counted twice). Kept in the
//! repository so every benchmark run can report the fast core's speed as a
//! ratio to it, with no outside code. Counts the total only.

use crate::board::Size;

/// Total solutions and queen placements, single-threaded.
pub fn mirror_count(n: Size) -> (u128, u64) {
    let (size, mask) = (n.n(), n.mask());
    if size == 1 {
        return (1, 1);
    }
    let half = size / 2;
    let mut total = 0u128;
    let mut nodes = 0u64;
    // Row 0 in the left half: every solution there has a mirror image with
    // row 0 in the right half.
    for c in 0..half {
        let (count, placed) = count_below(size, mask, &[c]);
        total += 2 * u128::from(count);
        nodes += placed + 1;
    }
    if size % 2 == 1 {
        // Row 0 in the middle: mirror on row 1 instead.
        nodes += 1;
        for c in 0..half {
            if c.abs_diff(half) <= 1 {
                continue; // attacked by the middle queen of row 0
            }
            let (count, placed) = count_below(size, mask, &[half, c]);
            total += 2 * u128::from(count);
            nodes += placed + 1;
        }
    }
    (total, nodes)
}

/// Completions of the given first rows, and the placements made below them.
fn count_below(size: usize, mask: u32, rows: &[usize]) -> (u64, u64) {
    let (mut l, mut d, mut r) = (0u32, 0u32, 0u32);
    for &c in rows {
        let bit = 1u32 << c;
        (l, d, r) = ((l | bit) << 1, d | bit, (r | bit) >> 1);
    }
    let start = rows.len();
    if start == size {
        return (1, 0);
    }
    let mut stack = [[0u32; 4]; 32];
    let mut y = start;
    let mut bm = mask & !(l | d | r);
    let (mut count, mut nodes) = (0u64, 0u64);
    loop {
        if bm == 0 {
            if y == start {
                return (count, nodes);
            }
            y -= 1;
            [bm, l, d, r] = stack[y];
            continue;
        }
        let bit = bm & bm.wrapping_neg();
        bm ^= bit;
        nodes += 1;
        if y + 1 == size {
            count += 1;
            continue;
        }
        stack[y] = [bm, l, d, r];
        (l, d, r) = ((l | bit) << 1, d | bit, (r | bit) >> 1);
        y += 1;
        bm = mask & !(l | d | r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::known::known;

    #[test]
    fn totals_match_known_values() {
        for n in 1..=13 {
            assert_eq!(
                mirror_count(Size::new(n).unwrap()).0,
                known(n).unwrap().total,
                "N={n}"
            );
        }
    }
}
