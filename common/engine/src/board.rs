//! Boards, board sizes and the 8 symmetries of the square.

use std::fmt;

/// The largest N: a row of the board is held in a u32 mask.
pub const MAX_N: u32 = 32;

/// A board size that was checked to be in 1..=32 (also when deserialized).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "u32", into = "u32")]
pub struct Size(u32);

impl TryFrom<u32> for Size {
    type Error = SizeError;
    fn try_from(n: u32) -> Result<Size, SizeError> {
        Size::new(n)
    }
}

impl From<Size> for u32 {
    fn from(s: Size) -> u32 {
        s.0
    }
}

/// N outside 1..=32.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("N must be between 1 and {MAX_N} (a row is held in a 32-bit mask), got {0}")]
pub struct SizeError(pub u64);

impl Size {
    pub fn new(n: u32) -> Result<Size, SizeError> {
        if (1..=MAX_N).contains(&n) {
            Ok(Size(n))
        } else {
            Err(SizeError(n.into()))
        }
    }

    pub fn get(self) -> u32 {
        self.0
    }

    /// N as an index bound.
    pub fn n(self) -> usize {
        self.0 as usize
    }

    /// The mask of the N columns.
    pub fn mask(self) -> u32 {
        u32::MAX >> (32 - self.0)
    }
}

impl std::str::FromStr for Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Size, String> {
        let n: u64 = s
            .trim()
            .parse()
            .map_err(|_| format!("N must be a whole number between 1 and {MAX_N}, got '{s}'"))?;
        u32::try_from(n)
            .map_err(|_| SizeError(n))
            .and_then(Size::new)
            .map_err(|e| e.to_string())
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A full or partial placement: `cols[r]` is the column of the queen in row r.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Board {
    pub cols: Vec<u8>,
}

impl Board {
    /// True when the queens are N in number, one per row and column, and no
    /// two share a diagonal.
    pub fn is_solution(&self) -> bool {
        let n = self.cols.len();
        self.cols.iter().all(|&c| (c as usize) < n) && self.non_attacking()
    }

    /// True when no two queens share a column or a diagonal.
    pub fn non_attacking(&self) -> bool {
        let q = &self.cols;
        (0..q.len()).all(|i| {
            (i + 1..q.len()).all(|j| q[i] != q[j] && q[i].abs_diff(q[j]) as usize != j - i)
        })
    }

    /// The board after `sym`.
    pub fn transformed(&self, sym: Symmetry) -> Board {
        let n = self.cols.len();
        let mut cols = vec![0u8; n];
        for (r, &c) in self.cols.iter().enumerate() {
            let (r2, c2) = sym.apply(n, r, c as usize);
            cols[r2] = c2 as u8;
        }
        Board { cols }
    }

    /// The rows format: `0 2 4 1 3`.
    pub fn rows_line(&self) -> String {
        let cols: Vec<String> = self.cols.iter().map(u8::to_string).collect();
        cols.join(" ")
    }

    /// The board format: one line per row, `Q` for a queen, `.` otherwise.
    pub fn diagram(&self) -> String {
        let n = self.cols.len();
        let mut s = String::with_capacity(n * (n + 1));
        for &c in &self.cols {
            s.extend((0..n).map(|x| if x == c as usize { 'Q' } else { '.' }));
            s.push('\n');
        }
        s
    }
}

/// The 8 symmetries of the square (the dihedral group D4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Symmetry {
    Identity,
    Rot90,
    Rot180,
    Rot270,
    /// Left-right mirror.
    FlipColumns,
    /// Top-bottom mirror.
    FlipRows,
    /// Mirror in the main diagonal.
    Transpose,
    /// Mirror in the anti-diagonal.
    AntiTranspose,
}

impl Symmetry {
    pub const ALL: [Symmetry; 8] = [
        Symmetry::Identity,
        Symmetry::Rot90,
        Symmetry::Rot180,
        Symmetry::Rot270,
        Symmetry::FlipColumns,
        Symmetry::FlipRows,
        Symmetry::Transpose,
        Symmetry::AntiTranspose,
    ];

    /// Where square (row, col) of an n×n board goes.
    pub fn apply(self, n: usize, r: usize, c: usize) -> (usize, usize) {
        let m = n - 1;
        match self {
            Symmetry::Identity => (r, c),
            Symmetry::Rot90 => (c, m - r),
            Symmetry::Rot180 => (m - r, m - c),
            Symmetry::Rot270 => (m - c, r),
            Symmetry::FlipColumns => (r, m - c),
            Symmetry::FlipRows => (m - r, c),
            Symmetry::Transpose => (c, r),
            Symmetry::AntiTranspose => (m - c, m - r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_bounds() {
        assert!(Size::new(0).is_err());
        assert!(Size::new(33).is_err());
        assert_eq!(Size::new(32).unwrap().mask(), u32::MAX);
        assert_eq!(Size::new(1).unwrap().mask(), 1);
        assert_eq!("8".parse::<Size>().unwrap().get(), 8);
        let e = "x".parse::<Size>().unwrap_err();
        assert!(e.contains("whole number"), "{e}");
        let e = "99999999999".parse::<Size>().unwrap_err();
        assert!(e.contains("between 1 and 32"), "{e}");
    }

    #[test]
    fn symmetries_form_a_group_of_eight_distinct_maps() {
        let b = Board {
            cols: vec![1, 3, 0, 2],
        };
        assert!(b.is_solution());
        for s in Symmetry::ALL {
            assert!(b.transformed(s).is_solution(), "{s:?}");
        }
        // On an asymmetric pattern of points, the 8 images differ.
        let n = 5;
        let img = |s: Symmetry| [(0, 1), (2, 4)].map(|(r, c)| s.apply(n, r, c));
        let images: std::collections::HashSet<_> = Symmetry::ALL.into_iter().map(img).collect();
        assert_eq!(images.len(), 8);
        // Four quarter turns are the identity.
        let mut p = (1, 3);
        for _ in 0..4 {
            p = Symmetry::Rot90.apply(n, p.0, p.1);
        }
        assert_eq!(p, (1, 3));
    }

    #[test]
    fn formats() {
        let b = Board {
            cols: vec![1, 3, 0, 2],
        };
        assert_eq!(b.rows_line(), "1 3 0 2");
        assert_eq!(b.diagram(), ".Q..\n...Q\nQ...\n..Q.\n");
    }
}
