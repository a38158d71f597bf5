//! What `solve` and `table` print: one record per N, as text or JSON.

use crate::counts::CountOverflow;
use crate::format::{hms, si, thousands};
use crate::known::known;
use crate::solve::Solution;
use serde::Serialize;

/// The outcome of counting one N, ready to print.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub n: u32,
    pub total: u128,
    pub unique: u128,
    /// Orbits of each size (see [`crate::counts`]).
    pub c1: u128,
    pub c2: u128,
    pub c4: u128,
    pub c8: u128,
    pub nodes: u128,
    pub seconds: f64,
    pub nodes_per_second: f64,
    pub threads: usize,
    pub pieces: usize,
    /// Whether total and unique equal the published values; absent past N=27.
    pub matches_known: Option<bool>,
}

impl Report {
    pub fn new(s: &Solution) -> Result<Report, CountOverflow> {
        let (total, unique) = (s.total()?, s.unique()?);
        let seconds = s.elapsed.as_secs_f64();
        Ok(Report {
            n: s.n.get(),
            total,
            unique,
            c1: s.counts.c1,
            c2: s.counts.c2,
            c4: s.counts.c4,
            c8: s.counts.c8,
            nodes: s.counts.nodes,
            seconds,
            nodes_per_second: s.counts.nodes as f64 / seconds.max(1e-9),
            threads: s.threads,
            pieces: s.pieces,
            matches_known: known(s.n.get()).map(|k| k.total == total && k.unique == unique),
        })
    }

    /// The multi-line text of `nqueens solve`.
    pub fn text(&self) -> String {
        let check = match self.matches_known {
            Some(true) => "matches OEIS A000170 / A002562",
            Some(false) => "DIFFERS from OEIS A000170 / A002562",
            None => "no published value to compare with",
        };
        format!(
            "N        {}\ntotal    {}\nunique   {}\nclasses  c2={} c4={} c8={}{}\nknown    {check}\ntime     {} ({:.3} s, {} threads, {} pieces)\nnodes    {} ({}nodes/s)\n",
            self.n,
            self.total,
            self.unique,
            self.c2,
            self.c4,
            self.c8,
            if self.c1 > 0 { format!(" c1={}", self.c1) } else { String::new() },
            hms(std::time::Duration::from_secs_f64(self.seconds)),
            self.seconds,
            self.threads,
            self.pieces,
            thousands(self.nodes),
            si(self.nodes_per_second),
        )
    }

    /// The header of the classic table.
    pub fn table_header() -> String {
        format!(
            "{:>2}  {:>20}  {:>20}  {:>14}",
            "N", "Total", "Unique", "hh:mm:ss.ms"
        )
    }

    /// One row of the classic table.
    pub fn table_row(&self) -> String {
        let time = hms(std::time::Duration::from_secs_f64(self.seconds));
        format!(
            "{:>2}  {:>20}  {:>20}  {time:>14}",
            self.n, self.total, self.unique
        )
    }
}
