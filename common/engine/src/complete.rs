//! Completing a board from given queens, and the classic judge input format:
//! a line with k, then k lines `r c` (0-based row and column of a queen).

use crate::board::{Board, Size};

/// A queen given by the user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Queen {
    pub row: usize,
    pub col: usize,
}

/// What is wrong with the given queens or their input text. Each message
/// names the line and says what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error(
        "empty input: expected a first line with the number of queens k, then k lines 'row col'"
    )]
    Empty,
    #[error("line 1: expected the number of queens k (a whole number), found '{0}'")]
    BadCount(String),
    #[error("k = {k} queens cannot fit on a {n}x{n} board (at most {n})")]
    TooMany { k: usize, n: usize },
    #[error("expected {expected} queen lines after the first line, found only {found}")]
    MissingLines { expected: usize, found: usize },
    #[error("line {line}: expected 'row col' (two whole numbers), found '{text}'")]
    BadLine { line: usize, text: String },
    #[error("line {line}: queen at ({row}, {col}) is off the {n}x{n} board (rows and columns are 0..{max})", max = n - 1)]
    OffBoard {
        line: usize,
        row: usize,
        col: usize,
        n: usize,
    },
    #[error("line {line}: row {row} already holds the queen of line {other}")]
    SameRow {
        line: usize,
        other: usize,
        row: usize,
    },
    #[error("line {line}: column {col} already holds the queen of line {other}")]
    SameColumn {
        line: usize,
        other: usize,
        col: usize,
    },
    #[error("line {line}: queen at ({r1}, {c1}) attacks the queen of line {other} at ({r2}, {c2}) along a diagonal")]
    Diagonal {
        line: usize,
        other: usize,
        r1: usize,
        c1: usize,
        r2: usize,
        c2: usize,
    },
    #[error("line {line}: unexpected text after the {k} queen lines: '{text}'")]
    Trailing { line: usize, k: usize, text: String },
}

/// Parses the judge format for an n×n board and checks that the queens are
/// on the board and do not attack each other.
pub fn parse_queens(text: &str, n: Size) -> Result<Vec<Queen>, InputError> {
    let n = n.n();
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty());
    let (_, first) = lines.next().ok_or(InputError::Empty)?;
    let k: usize = first
        .parse()
        .map_err(|_| InputError::BadCount(first.to_string()))?;
    if k > n {
        return Err(InputError::TooMany { k, n });
    }
    let mut queens: Vec<(usize, Queen)> = Vec::with_capacity(k);
    for found in 0..k {
        let (line, text) = lines
            .next()
            .ok_or(InputError::MissingLines { expected: k, found })?;
        let bad = || InputError::BadLine {
            line,
            text: text.to_string(),
        };
        let nums: Vec<usize> = text
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|_| bad())?;
        let [row, col] = nums[..] else {
            return Err(bad());
        };
        if row >= n || col >= n {
            return Err(InputError::OffBoard { line, row, col, n });
        }
        for &(other, q) in &queens {
            if q.row == row {
                return Err(InputError::SameRow { line, other, row });
            }
            if q.col == col {
                return Err(InputError::SameColumn { line, other, col });
            }
            if q.row.abs_diff(row) == q.col.abs_diff(col) {
                return Err(InputError::Diagonal {
                    line,
                    other,
                    r1: row,
                    c1: col,
                    r2: q.row,
                    c2: q.col,
                });
            }
        }
        queens.push((line, Queen { row, col }));
    }
    if let Some((line, text)) = lines.next() {
        return Err(InputError::Trailing {
            line,
            k,
            text: text.to_string(),
        });
    }
    Ok(queens.into_iter().map(|(_, q)| q).collect())
}

/// One full solution that keeps every given queen, or `None` if there is
/// none. The queens must not attack each other (as [`parse_queens`] checks).
///
/// Rows are filled most-constrained first (fewest free columns), which finds
/// completions of large boards quickly where row-by-row order would stall.
pub fn complete(n: Size, given: &[Queen]) -> Option<Board> {
    let n = n.n();
    let mut s = State {
        n,
        cols: vec![None; n],
        col_used: 0,
        diag: 0,
        anti: 0,
    };
    for q in given {
        s.place(q.row, q.col);
    }
    s.search().then(|| Board {
        cols: s
            .cols
            .iter()
            .map(|c| c.expect("complete board") as u8)
            .collect(),
    })
}

/// A partial board with column and diagonal occupancy as bit sets
/// (diagonals are indexed r+c and r-c+n-1, so 63 bits suffice for n<=32).
struct State {
    n: usize,
    cols: Vec<Option<usize>>,
    col_used: u64,
    diag: u64,
    anti: u64,
}

impl State {
    fn place(&mut self, r: usize, c: usize) {
        self.cols[r] = Some(c);
        self.flip(r, c);
    }
    fn remove(&mut self, r: usize, c: usize) {
        self.cols[r] = None;
        self.flip(r, c);
    }
    fn flip(&mut self, r: usize, c: usize) {
        self.col_used ^= 1 << c;
        self.diag ^= 1 << (r + c);
        self.anti ^= 1 << (r + self.n - 1 - c);
    }
    fn free(&self, r: usize) -> u64 {
        (0..self.n)
            .filter(|&c| {
                self.col_used >> c & 1 == 0
                    && self.diag >> (r + c) & 1 == 0
                    && self.anti >> (r + self.n - 1 - c) & 1 == 0
            })
            .fold(0, |m, c| m | 1 << c)
    }
    fn search(&mut self) -> bool {
        let open = (0..self.n)
            .filter(|&r| self.cols[r].is_none())
            .map(|r| (self.free(r), r));
        let Some((mut free, row)) = open.min_by_key(|(f, r)| (f.count_ones(), *r)) else {
            return true;
        };
        while free != 0 {
            let c = free.trailing_zeros() as usize;
            free &= free - 1;
            self.place(row, c);
            if self.search() {
                return true;
            }
            self.remove(row, c);
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(x: u32) -> Size {
        Size::new(x).unwrap()
    }

    #[test]
    fn issue_example_completes() {
        let q = parse_queens("2\n2 2\n5 3\n", n(8)).unwrap();
        let b = complete(n(8), &q).unwrap();
        assert!(b.is_solution());
        assert_eq!((b.cols[2], b.cols[5]), (2, 3));
    }

    #[test]
    fn empty_given_completes_large_boards() {
        for size in [1, 4, 8, 20, 32] {
            assert!(complete(n(size), &[]).unwrap().is_solution(), "N={size}");
        }
        assert_eq!(complete(n(3), &[]), None);
    }

    #[test]
    fn impossible_given_is_none() {
        // A corner queen on a 4x4 board has no completion.
        assert_eq!(complete(n(4), &[Queen { row: 0, col: 0 }]), None);
    }

    // Over 80 lines: one scenario whose steps each build on the state the
    // last one left; split, they would only pass that state along.
    #[test]
    fn every_bad_input_names_its_problem() {
        let cases: &[(&str, InputError)] = &[
            ("", InputError::Empty),
            ("x\n", InputError::BadCount("x".into())),
            ("9\n", InputError::TooMany { k: 9, n: 8 }),
            (
                "2\n0 0\n",
                InputError::MissingLines {
                    expected: 2,
                    found: 1,
                },
            ),
            (
                "1\n0\n",
                InputError::BadLine {
                    line: 2,
                    text: "0".into(),
                },
            ),
            (
                "1\n0 a\n",
                InputError::BadLine {
                    line: 2,
                    text: "0 a".into(),
                },
            ),
            (
                "1\n-1 2\n",
                InputError::BadLine {
                    line: 2,
                    text: "-1 2".into(),
                },
            ),
            (
                "1\n8 0\n",
                InputError::OffBoard {
                    line: 2,
                    row: 8,
                    col: 0,
                    n: 8,
                },
            ),
            (
                "2\n1 0\n1 5\n",
                InputError::SameRow {
                    line: 3,
                    other: 2,
                    row: 1,
                },
            ),
            (
                "2\n1 5\n3 5\n",
                InputError::SameColumn {
                    line: 3,
                    other: 2,
                    col: 5,
                },
            ),
            (
                "2\n0 0\n3 3\n",
                InputError::Diagonal {
                    line: 3,
                    other: 2,
                    r1: 3,
                    c1: 3,
                    r2: 0,
                    c2: 0,
                },
            ),
            (
                "1\n0 0\n1 2\n",
                InputError::Trailing {
                    line: 3,
                    k: 1,
                    text: "1 2".into(),
                },
            ),
        ];
        for (text, want) in cases {
            assert_eq!(
                parse_queens(text, n(8)).as_ref(),
                Err(want),
                "input {text:?}"
            );
        }
    }
}
