//! Every solution of one N, one at a time, in lexicographic order of the
//! rows format (row 0's column first). Nothing is collected: the iterator
//! holds one partial board, so listing millions of boards needs no memory.

use crate::board::{Board, Size};

/// Iterator over all solutions of an N (see the module documentation).
pub struct Solutions {
    n: usize,
    mask: u32,
    /// Row being filled; `None` once the search is exhausted.
    row: Option<usize>,
    left: [u32; 32],
    down: [u32; 32],
    right: [u32; 32],
    todo: [u32; 32],
    cols: [u8; 32],
}

impl Solutions {
    pub fn new(n: Size) -> Solutions {
        let mut s = Solutions {
            n: n.n(),
            mask: n.mask(),
            row: Some(0),
            left: [0; 32],
            down: [0; 32],
            right: [0; 32],
            todo: [0; 32],
            cols: [0; 32],
        };
        s.todo[0] = s.mask;
        s
    }
}

impl Iterator for Solutions {
    type Item = Board;

    fn next(&mut self) -> Option<Board> {
        let mut y = self.row?;
        loop {
            let bm = self.todo[y];
            if bm == 0 {
                if y == 0 {
                    self.row = None;
                    return None;
                }
                y -= 1;
                continue;
            }
            // Lowest free column first gives lexicographic order.
            let bit = bm & bm.wrapping_neg();
            self.todo[y] = bm ^ bit;
            self.cols[y] = bit.trailing_zeros() as u8;
            if y + 1 == self.n {
                self.row = Some(y);
                return Some(Board {
                    cols: self.cols[..self.n].to_vec(),
                });
            }
            let (l, d, r) = (
                (self.left[y] | bit) << 1,
                self.down[y] | bit,
                (self.right[y] | bit) >> 1,
            );
            y += 1;
            (self.left[y], self.down[y], self.right[y]) = (l, d, r);
            self.todo[y] = self.mask & !(l | d | r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_boards_of_eight() {
        let mut it = Solutions::new(Size::new(8).unwrap());
        assert_eq!(it.next().unwrap().cols, vec![0, 4, 7, 5, 2, 6, 1, 3]);
        assert_eq!(it.next().unwrap().cols, vec![0, 5, 7, 2, 6, 3, 1, 4]);
    }

    #[test]
    fn exhausted_iterator_stays_exhausted() {
        let mut it = Solutions::new(Size::new(3).unwrap());
        assert!(it.next().is_none());
        assert!(it.next().is_none());
        let one: Vec<_> = Solutions::new(Size::new(1).unwrap()).collect();
        assert_eq!(one, vec![Board { cols: vec![0] }]);
    }
}
