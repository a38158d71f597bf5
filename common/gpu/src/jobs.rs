//! Interiors and their starts cut into the start states a card counts.
//!
//! A card runs hundreds of thousands of searches at once, and one search
//! may last a million times longer than another: so each interior is cut
//! a few free rows below its start (more rows while the jobs are too few
//! to fill the card), and the card's threads take the jobs from a queue.
//! The queens placed above the jobs are counted here, so the card's
//! counts plus these are what the CPU's lanes give.

use crate::stream::{InteriorCounts, MOST_INTERIORS};
use nqueens_common::engine::counts::PieceCounts;
use nqueens_common::engine::device::DeviceError;
use nqueens_common::engine::interior::{Interior, Start};

/// Words per interior in [`Prepared::tables`]: 33 pairs of words, so
/// that a step of the search reads one pair. Pair 0 holds the first free
/// row's open columns (after a zero); pair `k + 1` holds free row `k`'s
/// shift to the next free row, then that row's open columns.
pub const TABLE_WORDS: usize = 66;

/// Where free row `k`'s shift lies in the tables of the interior whose
/// first word is `base`.
pub fn shift_word(base: u32, k: u32) -> usize {
    (base + 2 * k + 2) as usize
}

/// An interior's tables, laid out as [`TABLE_WORDS`] says.
pub(crate) fn table(it: &Interior) -> [u32; TABLE_WORDS] {
    let (allowed, shift) = it.tables();
    let mut out = [0; TABLE_WORDS];
    out[1] = allowed[0];
    for k in 0..32 {
        out[2 * k + 2] = shift[k];
        out[2 * k + 3] = allowed.get(k + 1).copied().unwrap_or(0);
    }
    out
}

/// Rows each interior is cut below its start at least (as the lanes do).
const FIRST_CUT: usize = 1;

/// Rows added to the cut, at most, while the jobs are too few.
const MORE_CUTS: usize = 4;

/// What the kernel counts, and what the host counted on the way.
#[derive(Clone, Debug, Default)]
pub struct Prepared {
    /// [`TABLE_WORDS`] words per interior.
    pub tables: Vec<u32>,
    /// Per job, as the kernel reads it: its interior (by index here; the
    /// card's feed moves it to where the interior's tables go), the start
    /// row, its masks `l`, `d`, `r`, the interior's next-to-last free row,
    /// its batch (set by the feed) and a word of padding.
    pub jobs: Vec<[u32; 8]>,
    /// Rows a thread's stack must hold: the most rows any job places
    /// a queen on, its next-to-last row included.
    pub levels: u32,
    /// Per interior, what the host counted: interiors too short for a job
    /// whole, and the queens placed above the jobs of the others.
    pub host: Vec<PieceCounts>,
}

impl Prepared {
    /// Cuts `interiors` below their `froms` into at least `target` jobs
    /// where the interiors allow it.
    pub fn new(interiors: &[Interior], froms: &[Start], target: usize) -> Prepared {
        assert_eq!(interiors.len(), froms.len(), "one start per interior");
        let mut host = vec![PieceCounts::default(); interiors.len()];
        let mut starts: Vec<(u32, Start)> = Vec::new();
        for (i, (it, from)) in interiors.iter().zip(froms).enumerate() {
            if it.rows() < 3 {
                host[i] = it.count();
                continue;
            }
            let (cut, nodes) = it.split_from(from, FIRST_CUT);
            host[i].nodes += nodes;
            starts.extend(cut.into_iter().map(|s| (i as u32, s)));
        }
        for _ in 0..MORE_CUTS {
            if starts.len() >= target {
                break;
            }
            starts = deeper(interiors, &starts, &mut host);
        }
        let mut tables = Vec::with_capacity(interiors.len() * TABLE_WORDS);
        for it in interiors {
            tables.extend_from_slice(&table(it));
        }
        let mut p = Prepared {
            tables,
            host,
            ..Prepared::default()
        };
        for (i, s) in starts {
            let pen = interiors[i as usize].rows() as u32 - 2;
            // The shader's stack holds rows start..=pen (unchecked on a card).
            debug_assert!(
                u32::from(s.row) <= pen,
                "a job starts at its next-to-last row at most"
            );
            p.levels = p.levels.max(pen + 1 - u32::from(s.row));
            p.jobs.push([i, s.row.into(), s.l, s.d, s.r, pen, 0, 0]);
        }
        p.levels = p.levels.max(1);
        p
    }
}

/// Counts `interiors` below their `froms` on a device, in batches of at
/// most [`MOST_INTERIORS`] interiors, each cut into at least `target()`
/// jobs (asked again for each batch: a card's measure of itself may
/// change once it counts): `count` takes a batch's tables, jobs and levels (as
/// [`Prepared`] has them) and gives its completions and queens placed per
/// interior, or `None` once stopped. What the host counted on the way is
/// added, so the counts are what the CPU's lanes give.
pub fn count_in_batches(
    interiors: &[Interior],
    froms: &[Start],
    target: impl Fn() -> usize,
    mut count: impl FnMut(Vec<u32>, Vec<[u32; 8]>, u32) -> Result<Option<InteriorCounts>, DeviceError>,
) -> Result<Option<Vec<PieceCounts>>, DeviceError> {
    let mut out = Vec::with_capacity(interiors.len());
    let chunks = interiors
        .chunks(MOST_INTERIORS)
        .zip(froms.chunks(MOST_INTERIORS));
    for (interiors, froms) in chunks {
        let p = Prepared::new(interiors, froms, target());
        let Some(counted) = count(p.tables, p.jobs, p.levels)? else {
            return Ok(None);
        };
        for (mut c, (sols, nodes)) in p.host.into_iter().zip(counted) {
            c.c1 = c.c1.checked_add(sols).ok_or(DeviceError::Overflow)?;
            c.nodes = c.nodes.checked_add(nodes).ok_or(DeviceError::Overflow)?;
            out.push(c);
        }
    }
    Ok(Some(out))
}

/// Every start cut one row further (a start with three free rows left
/// stays as it is); the queens placed go to `host`.
fn deeper(
    interiors: &[Interior],
    starts: &[(u32, Start)],
    host: &mut [PieceCounts],
) -> Vec<(u32, Start)> {
    let mut out = Vec::with_capacity(starts.len() * 4);
    for &(i, s) in starts {
        let (cut, nodes) = interiors[i as usize].split_from(&s, 1);
        host[i as usize].nodes += nodes;
        out.extend(cut.into_iter().map(|c| (i, c)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use nqueens_common::engine::border::Frames;
    use nqueens_common::Size;

    fn rings(n: u32) -> Vec<Interior> {
        let frames = Frames::new(Size::new(n).unwrap(), 1).unwrap();
        let mut out = Vec::new();
        frames.for_each_in(0, u64::MAX, |f, _, _| out.push(frames.interior(&f)));
        out
    }

    /// The jobs, counted one by one on the CPU, plus what the host
    /// counted, are each interior's count: at every target.
    #[test]
    fn jobs_and_host_counts_add_up_to_each_interior() {
        let interiors = rings(11);
        let froms = vec![Start::default(); interiors.len()];
        for target in [1, 100, 10_000, 1_000_000] {
            let p = Prepared::new(&interiors, &froms, target);
            let mut got = p.host.clone();
            for job in &p.jobs {
                let i = job[0];
                let it = &interiors[i as usize];
                let start = Start {
                    row: job[1] as u8,
                    l: job[2],
                    d: job[3],
                    r: job[4],
                };
                let c = it.count_from(&start);
                got[i as usize].c1 += c.c1;
                got[i as usize].nodes += c.nodes;
                assert!(job[5] + 1 - job[1] <= p.levels);
            }
            for (g, it) in got.iter().zip(&interiors) {
                assert_eq!(*g, it.count(), "target {target}");
            }
        }
    }

    /// Each free row's shift and its next row's open columns are one pair,
    /// where the kernel and the steal look for them.
    #[test]
    fn a_row_and_the_next_rows_columns_are_one_pair() {
        let interiors = rings(12);
        let froms = vec![Start::default(); interiors.len()];
        let p = Prepared::new(&interiors, &froms, 1);
        for (i, it) in interiors.iter().enumerate() {
            let base = (i * TABLE_WORDS) as u32;
            let (allowed, shift) = it.tables();
            assert_eq!(p.tables[base as usize + 1], allowed[0]);
            for k in 0..31 {
                let at = shift_word(base, k as u32);
                assert_eq!(at % 2, 0, "a pair starts on an even word");
                assert_eq!(p.tables[at..at + 2], [shift[k], allowed[k + 1]]);
            }
        }
    }

    #[test]
    fn more_jobs_are_cut_when_the_target_asks_for_them() {
        let interiors = rings(12);
        let froms = vec![Start::default(); interiors.len()];
        let few = Prepared::new(&interiors, &froms, 1).jobs.len();
        let many = Prepared::new(&interiors, &froms, 100_000).jobs.len();
        assert!(many > 10 * few, "{few} then {many}");
    }
}
