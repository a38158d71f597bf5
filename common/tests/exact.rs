//! Exactness of the solver core: known values, a brute-force reference,
//! thread-count and split independence, and rejection of forged pieces.

use nqueens_common::engine::lanes::Path;
use nqueens_common::engine::reference::brute_force;
use nqueens_common::engine::search::{cases, split, Case, Piece, PieceError, Rules};
use nqueens_common::known::known;
use nqueens_common::plan::solve::{solve_join, solve_on, SolveError};
use nqueens_common::{solve, Size, Totals};
use proptest::prelude::*;

fn size(n: u32) -> Size {
    Size::new(n).unwrap()
}

/// Counts `n` piece by piece, cut into at least `min_pieces`.
fn count_split(n: u32, min_pieces: usize) -> Totals {
    let cut = split(size(n), min_pieces);
    let mut t = Totals {
        nodes: cut.nodes.into(),
        ..Totals::default()
    };
    for p in &cut.pieces {
        let c = Rules::new(size(n), p.case).unwrap().count(p).unwrap();
        t.add_piece(&c).unwrap();
    }
    t
}

#[test]
fn totals_and_unique_match_oeis_for_1_to_16() {
    for n in 1..=16 {
        let s = solve(size(n), 2).unwrap();
        let k = known(n).unwrap();
        assert_eq!(s.total().unwrap(), k.total, "total N={n}");
        assert_eq!(s.unique().unwrap(), k.unique, "unique N={n}");
    }
}

/// The join, a second algorithm, gives the published totals and unique
/// counts and the backtracking's classes for N=4..=16 (odd N through the
/// middle column's queen, even N through the mirror classes of choices),
/// and refuses boards outside its range rather than guessing.
#[test]
fn the_join_and_the_backtracking_agree_with_oeis_for_4_to_16() {
    for n in 4..=16 {
        let joined = solve_join(size(n), 2).unwrap();
        assert!(joined.core.starts_with("join/"), "{}", joined.core);
        let k = known(n).unwrap();
        assert_eq!(
            (joined.total().unwrap(), joined.unique().unwrap()),
            (k.total, k.unique),
            "N={n}"
        );
        let searched = solve(size(n), 2).unwrap().counts;
        let c = joined.counts;
        assert_eq!(
            (c.c1, c.c2, c.c4, c.c8),
            (searched.c1, searched.c2, searched.c4, searched.c8),
            "N={n}"
        );
    }
    for n in [1, 3, 25, 32] {
        assert!(
            matches!(solve_join(size(n), 1), Err(SolveError::JoinSize(m)) if m == n),
            "N={n}"
        );
    }
}

/// The whole of N=17 by the join on each pair loop this CPU has (the
/// portable one always): the published total and unique count.
#[test]
fn the_join_counts_17_exactly_on_every_pair_loop() {
    use nqueens_common::engine::join::{pair_loops, Budget};
    use nqueens_common::plan::solve::solve_join_within;
    let k = known(17).unwrap();
    for path in pair_loops() {
        let joined = solve_join_within(size(17), 2, Budget::default(), Some(path)).unwrap();
        assert_eq!(
            (joined.total().unwrap(), joined.unique().unwrap()),
            (k.total, k.unique),
            "{}",
            joined.core
        );
    }
}

/// The ring counter on every path this CPU has (scalar always, AVX2 and
/// AVX-512 where present) gives the same counts, nodes included, and the
/// same classes as the symmetry-pruned search, which sorts solutions at
/// leaves.
#[test]
fn every_path_and_the_classic_search_agree() {
    for n in 6..=14 {
        let scalar = solve_on(size(n), 2, Some(Path::Scalar)).unwrap();
        assert_eq!(scalar.core, "scalar");
        for path in Path::available() {
            let s = solve_on(size(n), 2, Some(path)).unwrap();
            assert_eq!(s.core, path.name(), "N={n}");
            assert_eq!(s.counts, scalar.counts, "N={n} path {}", path.name());
        }
        if n <= 12 {
            let classic = count_split(n, 1);
            let c = scalar.counts;
            assert_eq!(
                (c.c1, c.c2, c.c4, c.c8),
                (classic.c1, classic.c2, classic.c4, classic.c8),
                "N={n}"
            );
        }
    }
}

#[test]
fn class_counts_match_brute_force_up_to_10() {
    for n in 1..=10 {
        let fast = solve(size(n), 2).unwrap().counts;
        let slow = brute_force(n as usize);
        assert_eq!(
            (fast.c1, fast.c2, fast.c4, fast.c8),
            (slow.c1, slow.c2, slow.c4, slow.c8),
            "class counts N={n}"
        );
    }
}

#[test]
fn one_thread_and_many_threads_agree_exactly() {
    for n in 4..=13 {
        let one = solve(size(n), 1).unwrap().counts;
        for t in [2, 3, 8] {
            assert_eq!(solve(size(n), t).unwrap().counts, one, "N={n} threads={t}");
        }
    }
}

#[test]
fn split_depth_changes_nothing_nodes_included() {
    for n in 4..=12 {
        let whole = count_split(n, 1);
        for min_pieces in [2, 50, 1000, 100_000] {
            assert_eq!(
                count_split(n, min_pieces),
                whole,
                "N={n} min_pieces={min_pieces}"
            );
        }
    }
}

#[test]
fn unique_classes_relate_to_symmetric_solution_counts() {
    // Burnside: quarter-turn symmetric solutions are 2*c2 (every N > 1 here),
    // half-turn symmetric ones 2*c2 + 4*c4 (values from A033148 and A032522).
    for (n, rot90, rot180) in [(12, 8, 80), (13, 8, 136), (16, 64, 3000)] {
        let c = solve(size(n), 2).unwrap().counts;
        assert_eq!(2 * c.c2, rot90, "rot90 N={n}");
        assert_eq!(2 * c.c2 + 4 * c.c4, rot180, "rot180 N={n}");
    }
}

#[test]
fn forged_pieces_are_rejected() {
    let n = size(8);
    let rules = Rules::new(n, Case::Edge { bound1: 1 }).unwrap();
    let ok = Piece {
        case: Case::Edge { bound1: 1 },
        prefix: vec![1, 3],
    };
    assert!(rules.count(&ok).is_ok());
    let bad = |prefix: Vec<u8>| {
        rules.count(&Piece {
            case: ok.case,
            prefix,
        })
    };
    // Row 1 may not use an outer column above bound1... (bound1=1: none) but
    // attacks are always rejected: (0,1) and (1,2) share a diagonal.
    assert_eq!(
        bad(vec![1, 2]),
        Err(PieceError::NotAllowed { row: 1, col: 2 })
    );
    assert_eq!(bad(vec![2, 4]), Err(PieceError::WrongStart(ok.case)));
    assert_eq!(
        bad(vec![1, 40]),
        Err(PieceError::NotAllowed { row: 1, col: 40 })
    );
    assert!(matches!(
        bad(vec![1, 3, 5, 7, 2, 0, 6, 4]),
        Err(PieceError::TooLong { .. })
    ));
    // Cases that do not exist for this N.
    assert!(Rules::new(n, Case::Edge { bound1: 4 }).is_err());
    assert!(Rules::new(n, Case::Corner { bound1: 7 }).is_err());
    // A corner prefix whose row-1 queen breaks the corner rule above bound1.
    let corner = Rules::new(n, Case::Corner { bound1: 4 }).unwrap();
    let p = Piece {
        case: Case::Corner { bound1: 4 },
        prefix: vec![0, 4, 1],
    };
    assert_eq!(
        corner.count(&p),
        Err(PieceError::NotAllowed { row: 2, col: 1 })
    );
}

#[test]
fn cases_cover_small_boards() {
    assert!(cases(size(3)).is_empty());
    assert_eq!(
        cases(size(4)),
        vec![Case::Corner { bound1: 2 }, Case::Edge { bound1: 1 }]
    );
    // Edges stop before the middle column: N=9 has bound1 1..=3.
    let edges = cases(size(9))
        .into_iter()
        .filter(|c| matches!(c, Case::Edge { .. }))
        .count();
    assert_eq!(edges, 3);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any cut of any small board sums to the brute-force class counts.
    #[test]
    fn any_cut_sums_to_the_reference(n in 4u32..=9, min_pieces in 1usize..3000) {
        let t = count_split(n, min_pieces);
        let r = brute_force(n as usize);
        prop_assert_eq!((t.c2, t.c4, t.c8), (r.c2, r.c4, r.c8));
    }
}
