//! Listing and completing boards.

use nqueens_common::engine::boards::Solutions;
use nqueens_common::engine::complete::{complete, Queen};
use nqueens_common::known::known;
use nqueens_common::{Board, Size};
use proptest::prelude::*;
use std::collections::HashSet;

fn size(n: u32) -> Size {
    Size::new(n).unwrap()
}

#[test]
fn listing_is_valid_distinct_complete_and_ordered() {
    for n in 1..=10 {
        let boards: Vec<Board> = Solutions::new(size(n)).collect();
        assert!(
            boards
                .iter()
                .all(|b| b.cols.len() == n as usize && b.is_solution()),
            "N={n}"
        );
        let distinct: HashSet<_> = boards.iter().collect();
        assert_eq!(distinct.len(), boards.len(), "N={n} duplicates");
        assert_eq!(boards.len() as u128, known(n).unwrap().total, "N={n} count");
        assert!(boards.windows(2).all(|w| w[0] < w[1]), "N={n} order");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Keeping any subset of a real solution's queens always completes, and the
    /// completion holds every kept queen.
    #[test]
    fn subsets_of_solutions_complete(n in 4u32..=14, pick in any::<u64>(), skip in 0usize..50) {
        let Some(solution) = Solutions::new(size(n)).nth(skip) else { return Ok(()) };
        let given: Vec<Queen> = solution.cols.iter().enumerate()
            .filter(|(r, _)| pick >> r & 1 == 1)
            .map(|(row, &c)| Queen { row, col: c as usize })
            .collect();
        let b = complete(size(n), &given).expect("a completion exists");
        prop_assert!(b.is_solution());
        for q in &given {
            prop_assert_eq!(b.cols[q.row] as usize, q.col);
        }
    }
}
