//! Counting the pairs of disjoint bitsets between two lists: the inner
//! loop of the join, where an east half and a west half make a completion
//! when they share no diagonal.
//!
//! The smaller list (the *table*) is stored by bit in blocks of 512: word
//! `w` of bit `j` of a block has bit `t` set when pattern 64·w + t lacks
//! bit `j`. The patterns disjoint from an item are then the AND, over the
//! item's bits, of those rows; the ANDs are made ahead for every subset of
//! each run of `CHUNK` bits, so an item costs one 512-bit AND per run of
//! the key's width and one popcount per block.
//!
//! Three things keep that width and the work small:
//! - bits no item or no pattern has cannot clash, so they are squeezed
//!   out of both sides first;
//! - a few of the table's most frequent bits (the *cuts*) split it into
//!   parts, one per value of those bits; an item visits only the parts
//!   whose cut bits it lacks, and the cut bits leave the key;
//! - the table is walked block by block, each block's rows (at most 26 KB)
//!   staying in the L1 cache while the items stream past.

use crate::lanes::Path;

/// Words per block: 64·8 = 512 patterns, two AVX2 registers per row.
const WORDS: usize = 8;
type Row = [u64; WORDS];

/// Bits of an item looked up at once.
const CHUNK: u32 = 5;
const SUBSETS: usize = 1 << CHUNK;

/// The longest key: 64 bits in runs of `CHUNK`.
const MAX_RUNS: usize = 13;

/// Weights of pairs by the marked bits of each side (see
/// [`Pairs::count_weighted`]).
pub type Weights = [[u64; 3]; 3];

/// Tables this small are counted by a plain double loop.
const SMALL: usize = 64;

/// Reusable buffers of the pair count: one per thread, kept between calls
/// so the hot loop allocates nothing once warm.
#[derive(Default)]
pub struct Pairs {
    /// The table's patterns by the value of their cut bits (squeezed).
    parts: Vec<Vec<u64>>,
    /// The items likewise.
    groups: Vec<Vec<u64>>,
    /// One part's blocks: block b, run c, subset m at `(b·runs + c)·32 + m`.
    rows: Vec<Row>,
}

impl Pairs {
    /// Pairs (x, y), x from `a` and y from `b`, with `x & y == 0`, counted on
    /// `path` (AVX2 with POPCNT, or portable code; see `join::pair_path`).
    pub fn count(&mut self, a: &[u64], b: &[u64], path: Path) -> u64 {
        self.count_weighted(a, b, path, 0, &[[1; 3]; 3])
    }

    /// Disjoint pairs weighed by how many of the (at most two) `marked`
    /// bits each side holds: a pair (x, y) adds
    /// `weight[|x & marked|][|y & marked|]`. The marked bits cut the table
    /// (see the module notes), so a weight costs nothing per pair, and a
    /// weight of 0 skips those parts.
    pub fn count_weighted(
        &mut self,
        a: &[u64],
        b: &[u64],
        path: Path,
        marked: u64,
        weight: &Weights,
    ) -> u64 {
        assert!(marked.count_ones() <= 2, "at most two marked bits");
        #[cfg(target_arch = "x86_64")]
        if path >= Path::Avx2 {
            // SAFETY: a join takes the AVX2 path only on a CPU with AVX2 and
            // POPCNT (`join::pair_path`).
            return unsafe { self.count_avx2(a, b, marked, weight) };
        }
        let _ = path;
        self.count_body(a, b, marked, weight)
    }

    /// Bytes held between calls.
    pub fn bytes(&self) -> u64 {
        let lists = self.parts.iter().chain(&self.groups);
        let words: usize = lists.map(Vec::capacity).sum();
        (8 * words + std::mem::size_of::<Row>() * self.rows.capacity()) as u64
    }

    /// [`Pairs::count`] compiled for AVX2 and POPCNT.
    ///
    /// # Safety
    /// The CPU must have AVX2 and POPCNT.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,popcnt")]
    unsafe fn count_avx2(&mut self, a: &[u64], b: &[u64], marked: u64, weight: &Weights) -> u64 {
        self.count_body(a, b, marked, weight)
    }

    #[inline(always)]
    fn count_body(&mut self, a: &[u64], b: &[u64], marked: u64, weight: &Weights) -> u64 {
        // The table is the shorter side: weights then read (table, item).
        let mut weight = *weight;
        let (table, items) = if a.len() <= b.len() {
            (a, b)
        } else {
            weight = std::array::from_fn(|i| std::array::from_fn(|j| weight[j][i]));
            (b, a)
        };
        let class = |x: u64| (x & marked).count_ones() as usize;
        if table.len() < SMALL {
            let mut n = 0u64;
            for &x in items {
                for &y in table {
                    if x & y == 0 {
                        n += weight[class(y)][class(x)];
                    }
                }
            }
            return n;
        }
        let or = |l: &[u64]| l.iter().fold(0u64, |m, &x| m | x);
        let shared = or(table) & or(items);
        let cuts = cut_bits(table, shared, marked);
        let squeeze = Squeeze::new(shared & !cuts.mask);
        debug_assert!(squeeze.width <= 64);
        let runs = (squeeze.width.div_ceil(CHUNK) as usize).max(1);
        let parts = 1usize << cuts.bits.len();
        for lists in [&mut self.parts, &mut self.groups] {
            lists.resize_with(parts.max(lists.len()), Vec::new);
            lists.iter_mut().for_each(Vec::clear);
        }
        let (from, mask, _) = squeeze.moves[0];
        for (list, lists) in [(table, &mut self.parts), (items, &mut self.groups)] {
            if squeeze.single() {
                for &p in list {
                    lists[cuts.index(p)].push((p >> from) & mask);
                }
            } else {
                for &p in list {
                    lists[cuts.index(p)].push(squeeze.apply(p));
                }
            }
        }
        // The marked bits a part's (or group's) cut value holds.
        let marks = |v: usize| class(cuts.bits_of(v));
        let mut n = 0;
        for v in 0..parts {
            if self.parts[v].is_empty() {
                continue;
            }
            let mut built = false;
            for u in (0..parts).filter(|&u| u & v == 0) {
                let w = weight[marks(v)][marks(u)];
                if w == 0 || self.groups[u].is_empty() {
                    continue;
                }
                if !built {
                    transpose(&self.parts[v], runs, &mut self.rows);
                    built = true;
                }
                let mut lanes = [0u64; WORDS];
                count_blocks(runs, &self.rows, &self.groups[u], &mut lanes);
                n += w * lanes.iter().sum::<u64>();
            }
        }
        n
    }
}

/// The bits that cut a table into parts, lowest first.
struct Cuts {
    bits: Vec<u32>,
    mask: u64,
}

impl Cuts {
    /// The bits a part's index `v` stands for.
    fn bits_of(&self, v: usize) -> u64 {
        self.bits
            .iter()
            .enumerate()
            .filter(|&(i, _)| v >> i & 1 == 1)
            .fold(0, |m, (_, &j)| m | 1 << j)
    }

    /// The value of the cut bits of `p`, as a part's index.
    #[inline(always)]
    fn index(&self, p: u64) -> usize {
        self.bits
            .iter()
            .enumerate()
            .fold(0, |v, (i, &j)| v | ((p >> j) as usize & 1) << i)
    }
}

/// The `marked` bits, then the table's most frequent bits among `shared`
/// (in a sample of 256 of its patterns: any cut is exact, the sample only
/// has to find good ones), as many as its size pays for: each cut halves
/// the work of an item that lacks it and doubles the parts (and their
/// last, partly filled blocks).
fn cut_bits(table: &[u64], shared: u64, marked: u64) -> Cuts {
    let want: usize = match table.len() {
        0..512 => 0,
        512..2048 => 2,
        2048..8192 => 3,
        _ => 4,
    };
    let mut bits: Vec<u32> = (0..64).filter(|&j| marked >> j & 1 == 1).collect();
    let want = want.saturating_sub(bits.len());
    if want > 0 {
        let mut freq = [0u32; 64];
        for &p in table.iter().step_by((table.len() / 256).max(1)) {
            let mut m = p & shared & !marked;
            while m != 0 {
                freq[m.trailing_zeros() as usize] += 1;
                m &= m - 1;
            }
        }
        let mut order: Vec<u32> = (0..64).filter(|&j| freq[j as usize] > 0).collect();
        order.sort_by_key(|&j| std::cmp::Reverse(freq[j as usize]));
        order.truncate(want);
        bits.extend(order);
        bits.sort_unstable();
    }
    let mask = bits.iter().fold(0u64, |m, &j| m | 1 << j);
    Cuts { bits, mask }
}

/// Squeezes the bits of a mask together, lowest first: each run of
/// consecutive mask bits moves down by one shift (halves' keys have few
/// such runs: two diagonal ranges, less the cuts). When that saves no run
/// of `CHUNK` bits it makes one move of the mask's whole span: bits
/// between that no pattern or no item has, and cut bits, clash with
/// nothing, so they may stay.
struct Squeeze {
    /// (from, mask of its length, to) of each run; the first is always
    /// there (an empty mask moves nothing).
    moves: [(u32, u64, u32); 32],
    len: usize,
    width: u32,
}

impl Squeeze {
    fn new(mask: u64) -> Squeeze {
        let mut s = Squeeze {
            moves: [(0, 0, 0); 32],
            len: 0,
            width: 0,
        };
        let span = 64 - mask.leading_zeros() - mask.trailing_zeros().min(64);
        let mut m = mask;
        if span.div_ceil(CHUNK) == mask.count_ones().div_ceil(CHUNK) && mask != 0 {
            m = (u64::MAX >> (64 - span)) << mask.trailing_zeros();
        }
        while m != 0 {
            let from = m.trailing_zeros();
            let length = (m >> from).trailing_ones();
            s.moves[s.len] = (from, u64::MAX >> (64 - length), s.width);
            s.len += 1;
            s.width += length;
            m &= if from + length >= 64 {
                0
            } else {
                !((1u64 << (from + length)) - 1)
            };
        }
        s
    }

    #[inline(always)]
    fn apply(&self, x: u64) -> u64 {
        let (from, mask, _) = self.moves[0];
        let mut y = (x >> from) & mask;
        for &(from, mask, to) in &self.moves[1..self.len.max(1)] {
            y |= ((x >> from) & mask) << to;
        }
        y
    }

    /// Whether one shift does it (the common case, kept out of the loop).
    fn single(&self) -> bool {
        self.len <= 1
    }
}

/// Stores `patterns` by bit into `rows`, `runs` runs of `CHUNK` bits per
/// block; the slots past the last pattern are cleared from run 0's rows,
/// so no item counts them.
#[inline(always)]
fn transpose(patterns: &[u64], runs: usize, rows: &mut Vec<Row>) {
    rows.clear();
    for chunk in patterns.chunks(64 * WORDS) {
        let mut valid = [0u64; WORDS];
        for (w, v) in valid.iter_mut().enumerate() {
            let held = chunk.len().saturating_sub(64 * w).min(64);
            *v = if held == 64 {
                u64::MAX
            } else {
                (1u64 << held) - 1
            };
        }
        // lacks[j][w] bit t: pattern 64·w + t lacks bit j.
        let mut lacks = [[u64::MAX; WORDS]; MAX_RUNS * CHUNK as usize];
        for (w, group) in chunk.chunks(64).enumerate() {
            let mut m = [u64::MAX; 64];
            for (t, &p) in group.iter().enumerate() {
                m[t] = !p;
            }
            transpose64(&mut m);
            for (j, row) in m.iter().enumerate() {
                lacks[j][w] = *row;
            }
        }
        for c in 0..runs {
            let at = rows.len();
            rows.push(if c == 0 { valid } else { [u64::MAX; WORDS] });
            for m in 1..SUBSETS {
                let low = m & m.wrapping_neg();
                let j = c * CHUNK as usize + low.trailing_zeros() as usize;
                let mut e = rows[at + (m ^ low)];
                for w in 0..WORDS {
                    e[w] &= lacks[j][w];
                }
                rows.push(e);
            }
        }
    }
}

/// Transposes a 64×64 bit matrix in place: afterwards word j bit t is
/// what word t bit j was. Quadrants swap, then their quadrants, down to
/// single bits: six rounds of 32 swaps, against a loop per set bit.
#[inline(always)]
fn transpose64(a: &mut [u64; 64]) {
    let mut j = 32;
    let mut mask = u64::MAX >> 32;
    while j != 0 {
        for k in (0..64).filter(|k| k & j == 0) {
            let t = ((a[k] >> j) ^ a[k + j]) & mask;
            a[k] ^= t << j;
            a[k + j] ^= t;
        }
        j >>= 1;
        mask ^= mask << j;
    }
}

/// Adds the patterns of `rows` disjoint from each item to `lanes`, with
/// the number of runs fixed at compile time (so the loop over them unrolls).
#[inline(always)]
fn count_blocks(runs: usize, rows: &[Row], items: &[u64], lanes: &mut [u64; WORDS]) {
    macro_rules! by_runs {
        ($($r:literal)*) => {
            match runs {
                $($r => blocks::<$r>(rows, items, lanes),)*
                _ => unreachable!("keys have at most 64 bits"),
            }
        };
    }
    by_runs!(1 2 3 4 5 6 7 8 9 10 11 12 13)
}

#[inline(always)]
fn blocks<const R: usize>(rows: &[Row], items: &[u64], lanes: &mut [u64; WORDS]) {
    for block in rows.chunks_exact(R * SUBSETS) {
        for &x in items {
            let mut acc = block[(x as usize) & (SUBSETS - 1)];
            for c in 1..R {
                let m = ((x >> (c as u32 * CHUNK)) as usize) & (SUBSETS - 1);
                let row = &block[c * SUBSETS + m];
                for w in 0..WORDS {
                    acc[w] &= row[w];
                }
            }
            for w in 0..WORDS {
                lanes[w] += u64::from(acc[w].count_ones());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every size class (plain loop, one partial block, cut by 2, 3 and 4
    /// bits, both sides the table), sparse and dense words, words of every
    /// width up to 64 bits: the count, plain and weighed by marked bits, is
    /// a plain double loop's.
    #[test]
    fn pairs_match_a_double_loop() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut pairs = Pairs::default();
        for (a_len, b_len, shift) in [
            (0, 5, 2),
            (63, 64, 2),
            (64, 1, 0),
            (100, 300, 30),
            (511, 513, 2),
            (1025, 70, 0),
            (600, 700, 45),
            (2100, 2500, 2),
            (8200, 8300, 1),
        ] {
            // Sparse words (as halves are: a few diagonals of 62), so that
            // a fair share of pairs is disjoint.
            let mut word = || (next() & next() & next() & next()) >> shift;
            let a: Vec<u64> = (0..a_len).map(|_| word()).collect();
            let b: Vec<u64> = (0..b_len).map(|_| word()).collect();
            let want: u64 = a
                .iter()
                .map(|&p| b.iter().filter(|&&q| p & q == 0).count() as u64)
                .sum();
            assert!(a_len * b_len == 0 || want > 0, "a weak case");
            // Two marked bits (ones that words often have), weights that
            // differ by side, with zeros: weighed the same way by hand.
            let marked = 1u64 << 9 | 1 << 40 >> shift.min(30);
            let weight: Weights = [[1, 3, 5], [7, 0, 11], [13, 17, 0]];
            let class = |x: u64| (x & marked).count_ones() as usize;
            let weighed: u64 = a
                .iter()
                .flat_map(|&p| b.iter().map(move |&q| (p, q)))
                .filter(|&(p, q)| p & q == 0)
                .map(|(p, q)| weight[class(p)][class(q)])
                .sum();
            for path in crate::join::pair_loops() {
                assert_eq!(pairs.count(&a, &b, path), want, "{a_len} × {b_len} {path}");
                assert_eq!(pairs.count(&b, &a, path), want, "{b_len} × {a_len} {path}");
                let got = pairs.count_weighted(&a, &b, path, marked, &weight);
                assert_eq!(got, weighed, "{a_len} × {b_len} {path} weighed");
            }
        }
    }

    /// Word j bit t of the transpose is word t bit j.
    #[test]
    fn transpose64_swaps_rows_and_columns() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut a = [0u64; 64];
        for w in a.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *w = x;
        }
        let mut t = a;
        transpose64(&mut t);
        for (j, row) in t.iter().enumerate() {
            for (k, w) in a.iter().enumerate() {
                assert_eq!(row >> k & 1, w >> j & 1, "{j} {k}");
            }
        }
    }

    /// Squeezing keeps the mask's bits in order, in as few runs of
    /// `CHUNK` bits as the mask's own count needs, for masks with runs at
    /// both ends, in the middle, and spread (squeezed bit by bit) or dense
    /// (moved whole).
    #[test]
    fn squeeze_keeps_a_masks_bits_in_order_and_in_fewest_runs() {
        let compress = |x: u64, mask: u64| {
            let (mut y, mut k) = (0u64, 0);
            for j in (0..64).filter(|j| mask >> j & 1 == 1) {
                y |= (x >> j & 1) << k;
                k += 1;
            }
            y
        };
        let masks = [
            0u64,
            1,
            u64::MAX,
            1 << 63,
            0xF0F0_0000_0000_0F0F,
            0x8000_0001_FFFE_0001,
            0x0000_7FFF_BFFF_0000,
        ];
        for mask in masks {
            let s = Squeeze::new(mask);
            let ones = mask.count_ones();
            assert_eq!(s.width.div_ceil(CHUNK), ones.div_ceil(CHUNK), "{mask:#x}");
            let at = s.apply(mask);
            assert_eq!(at.count_ones(), ones, "{mask:#x}");
            assert_eq!(64 - at.leading_zeros(), if ones == 0 { 0 } else { s.width });
            for x in [0xDEAD_BEEF_0123_4567u64, u64::MAX, 0x5555_5555_5555_5555] {
                assert_eq!(compress(s.apply(x), at), compress(x, mask), "{mask:#x}");
            }
        }
    }
}
