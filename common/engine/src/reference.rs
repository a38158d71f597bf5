//! A deliberately naive reference counter, sharing no code with the fast
//! search: it walks every permutation of columns, keeps those with no two
//! queens on a diagonal, and sorts each solution into its orbit by applying
//! the 8 symmetries to it. Only for small N (N! permutations).

use crate::board::{Board, Symmetry};
use crate::counts::Totals;

/// Largest N the reference accepts (10! = 3.6 M permutations).
pub const MAX_REFERENCE_N: usize = 11;

/// Class counts of all solutions for `n` by brute force (nodes left at 0).
pub fn brute_force(n: usize) -> Totals {
    assert!(
        (1..=MAX_REFERENCE_N).contains(&n),
        "reference is for N <= {MAX_REFERENCE_N}"
    );
    let mut totals = Totals::default();
    let mut perm: Vec<u8> = (0..n as u8).collect();
    loop {
        let b = Board { cols: perm.clone() };
        if b.non_attacking() {
            let images: Vec<Board> = Symmetry::ALL.iter().map(|&s| b.transformed(s)).collect();
            // Count each orbit once, at its smallest member.
            if images.iter().all(|i| b <= *i) {
                let mut distinct = images.clone();
                distinct.sort();
                distinct.dedup();
                match distinct.len() {
                    1 => totals.c1 += 1,
                    2 => totals.c2 += 1,
                    4 => totals.c4 += 1,
                    8 => totals.c8 += 1,
                    k => unreachable!("orbit of size {k}"),
                }
            }
        }
        if !next_permutation(&mut perm) {
            return totals;
        }
    }
}

/// Advances to the next permutation in lexicographic order; false after the last.
fn next_permutation(p: &mut [u8]) -> bool {
    let Some(i) = (1..p.len()).rev().find(|&i| p[i - 1] < p[i]) else {
        return false;
    };
    let j = (i..p.len())
        .rev()
        .find(|&j| p[j] > p[i - 1])
        .expect("p[i] is larger");
    p.swap(i - 1, j);
    p[i..].reverse();
    true
}
