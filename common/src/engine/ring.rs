//! Ring constellations: the queens on the four border lines (row 0, row
//! N-1, column 0, column N-1), the pre-placement that lets the counting
//! core visit about half the nodes of a symmetry-pruned search.
//!
//! Every solution has exactly one queen on each border line (a corner queen
//! serves two), so the solutions split by their ring. The 8 symmetries map
//! rings to rings and completions to completions, so only the canonical
//! ring of each orbit (smallest key) is searched, weighted by its orbit
//! size: `total = Σ weight × completions`. No solution is compared with its
//! images at the leaves; the unique count comes from Burnside
//! ([`crate::engine::symmetric`]) instead.

use crate::engine::board::{Size, Symmetry};
use crate::engine::counts::CountOverflow;
use crate::engine::interior::Interior;
use crate::engine::lanes::{Batch, Job, Path, Sums, JOBS_PER_TAKE, SPLIT_ROWS};
use crate::engine::threads::on_threads;

/// Smallest N counted through rings (below it the ring is most of the board
/// and the plain search is as quick).
pub const MIN_RING_N: u32 = 6;

/// One ring: the column of the queen in row 0 (`top`) and in row N-1
/// (`bottom`), and the row of the queen in column 0 (`left`) and in
/// column N-1 (`right`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ring {
    pub top: u8,
    pub bottom: u8,
    pub left: u8,
    pub right: u8,
}

impl Ring {
    /// Orders rings; the canonical ring of an orbit has the smallest key.
    pub fn key(&self) -> u32 {
        u32::from_be_bytes([self.top, self.bottom, self.left, self.right])
    }

    /// The distinct queens, as (row, column).
    pub fn queens(&self, n: usize) -> Vec<(usize, usize)> {
        let m = n - 1;
        let mut q = vec![
            (0, self.top.into()),
            (m, self.bottom.into()),
            (self.left.into(), 0),
            (self.right.into(), m),
        ];
        q.sort_unstable();
        q.dedup();
        q
    }

    /// The ring of the image of this one's queens under `sym`.
    fn image(&self, n: usize, sym: Symmetry) -> Ring {
        let m = n - 1;
        let mut img = *self;
        for (r, c) in self.queens(n) {
            let (r, c) = sym.apply(n, r, c);
            if r == 0 {
                img.top = c as u8;
            }
            if r == m {
                img.bottom = c as u8;
            }
            if c == 0 {
                img.left = r as u8;
            }
            if c == m {
                img.right = r as u8;
            }
        }
        img
    }

    /// A valid ring: one queen per border line, corners shared consistently,
    /// and no two queens attacking.
    fn is_valid(&self, n: usize) -> bool {
        let m = n - 1;
        let (t, b, l, r) = (
            self.top as usize,
            self.bottom as usize,
            self.left as usize,
            self.right as usize,
        );
        // A corner queen is on two lines: both must name it.
        let corners_agree = (t == 0) == (l == 0)
            && (t == m) == (r == 0)
            && (b == 0) == (l == m)
            && (b == m) == (r == m);
        let q = self.queens(n);
        corners_agree
            && q.iter().enumerate().all(|(i, a)| {
                q[..i]
                    .iter()
                    .all(|b| a.0 != b.0 && a.1 != b.1 && a.0.abs_diff(b.0) != a.1.abs_diff(b.1))
            })
    }
}

/// Which image of a ring to search: every image has the same number of
/// completions, but not the same search. Putting the queen nearest a corner
/// in the bottom row, on the right, lets its long diagonal prune every row
/// above; measured at N=15 it visits 62% of the nodes of the canonical
/// image (the best of the 8 images per ring would be 57%). The ring's key
/// breaks ties so the choice is deterministic.
fn search_order(r: &Ring, n: usize) -> (u8, std::cmp::Reverse<u8>, u32) {
    let near = r.bottom.min(n as u8 - 1 - r.bottom);
    (near, std::cmp::Reverse(r.bottom), r.key())
}

/// A canonical ring with its orbit size and its search.
#[derive(Clone, Debug)]
pub struct Constellation {
    pub ring: Ring,
    /// Rings in the orbit (8 / symmetries fixing the ring): 1, 2, 4 or 8.
    pub weight: u32,
    /// The completions of the ring's image chosen by [`search_order`].
    pub interior: Interior,
}

/// Every canonical ring of `n`, in key order. Empty below [`MIN_RING_N`].
pub fn constellations(n: Size) -> Vec<Constellation> {
    if n.get() < MIN_RING_N {
        return Vec::new();
    }
    let n = n.n();
    let mut out = Vec::new();
    for top in 0..n as u8 {
        for bottom in 0..n as u8 {
            for left in 0..n as u8 {
                for right in 0..n as u8 {
                    let ring = Ring {
                        top,
                        bottom,
                        left,
                        right,
                    };
                    if !ring.is_valid(n) {
                        continue;
                    }
                    let key = ring.key();
                    let images = Symmetry::ALL.map(|s| ring.image(n, s).key());
                    if images.iter().any(|&k| k < key) {
                        continue;
                    }
                    let fixed = images.iter().filter(|&&k| k == key).count() as u32;
                    let searched = Symmetry::ALL
                        .map(|s| ring.image(n, s))
                        .into_iter()
                        .min_by_key(|r| search_order(r, n))
                        .expect("eight images");
                    let interior = Interior::new(n, &searched.queens(n));
                    out.push(Constellation {
                        ring,
                        weight: 8 / fixed,
                        interior,
                    });
                }
            }
        }
    }
    out
}

/// Every ring of `n` cut into jobs for [`Batch::count`].
pub struct RingJobs {
    pub interiors: Vec<Interior>,
    pub weights: Vec<u32>,
    pub jobs: Vec<Job>,
    /// Counted while cutting: rings too small to cut (under three free
    /// rows), and the queens placed to make the jobs.
    pub counted: Sums,
}

impl RingJobs {
    pub fn new(n: Size) -> RingJobs {
        let mut out = RingJobs {
            interiors: Vec::new(),
            weights: Vec::new(),
            jobs: Vec::new(),
            counted: Sums::default(),
        };
        for c in constellations(n) {
            if c.interior.rows() < 3 {
                let k = c.interior.count();
                out.counted.weighted += u128::from(c.weight) * u128::from(k.c1);
                out.counted.nodes += u128::from(k.nodes);
                continue;
            }
            let (starts, nodes) = c.interior.split(SPLIT_ROWS);
            // Small sums of u64 counts: a u128 cannot overflow here.
            out.counted.nodes += u128::from(nodes);
            let i = out.interiors.len() as u32;
            out.jobs
                .extend(starts.into_iter().map(|start| Job { interior: i, start }));
            out.interiors.push(c.interior);
            out.weights.push(c.weight);
        }
        out
    }
}

/// Σ weight × completions over every ring of `n` (the total number of
/// solutions) and the queens placed, on `threads` threads; also the number
/// of jobs and the path they were counted on. `path` is the lanes' path,
/// or the best one available when `None` or not available for these rings.
pub fn count(
    n: Size,
    threads: usize,
    path: Option<Path>,
) -> Result<(Sums, usize, Path), CountOverflow> {
    let rj = RingJobs::new(n);
    let batch = Batch::new(&rj.interiors, &rj.weights);
    let paths = batch.paths();
    let best = *paths.last().expect("scalar is always there");
    let path = path.filter(|p| paths.contains(p)).unwrap_or(best);
    let takes = rj.jobs.len().div_ceil(JOBS_PER_TAKE);
    let parts = on_threads(threads, takes, |acc: &mut Sums, t| {
        let end = ((t + 1) * JOBS_PER_TAKE).min(rj.jobs.len());
        let s = batch.count(path, &rj.jobs[t * JOBS_PER_TAKE..end])?;
        acc.add(s.weighted, s.nodes)
    })?;
    let mut sums = rj.counted;
    for p in parts {
        sums.add(p.weighted, p.nodes)?;
    }
    Ok((sums, rj.jobs.len(), path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::known::known;

    #[test]
    fn weighted_completions_sum_to_the_total() {
        for n in MIN_RING_N..=13 {
            let total: u128 = constellations(Size::new(n).unwrap())
                .iter()
                .map(|c| u128::from(c.weight) * u128::from(c.interior.count().c1))
                .sum();
            assert_eq!(total, known(n).unwrap().total, "N={n}");
        }
    }

    #[test]
    fn orbits_cover_every_valid_ring_once() {
        // Σ weights = number of valid rings: each orbit counted by its size.
        let n = 9;
        let size = Size::new(n as u32).unwrap();
        let mut valid = 0;
        for t in 0..n as u8 {
            for b in 0..n as u8 {
                for l in 0..n as u8 {
                    for r in 0..n as u8 {
                        let ring = Ring {
                            top: t,
                            bottom: b,
                            left: l,
                            right: r,
                        };
                        valid += u32::from(ring.is_valid(n));
                    }
                }
            }
        }
        let weights: u32 = constellations(size).iter().map(|c| c.weight).sum();
        assert_eq!(weights, valid);
    }
}
