//! A job's rate: estimated work per second over its latest results.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Results the rate is measured over.
const WINDOW: usize = 256;

/// Results (after the first) a steady rate needs at least.
const STEADY_RESULTS: usize = 12;

/// The largest relative error (one standard deviation) of a rate called
/// steady.
const STEADY_ERROR: f64 = 0.2;

/// The largest relative error of a rate that was steady at the result
/// before: once shown, an ETA stays through the swings of results that
/// arrive in bursts (its error says how far to trust it), and goes only
/// when the rate has truly changed.
const HELD_ERROR: f64 = 0.5;

/// Parts of the window whose rates are compared.
const PARTS: usize = 4;

/// The latest results' (time in ms, estimated work).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Rate {
    recent: VecDeque<(u64, f64)>,
    /// Whether the rate was steady at the latest result.
    held: bool,
}

impl Rate {
    pub fn add(&mut self, unix_ms: u64, work: f64) {
        // A pause longer than a part of the window (an outage, a job
        // paused) is a change of rate: steady again only as at first.
        let paused = match (self.recent.front(), self.recent.back()) {
            (Some(&(first, _)), Some(&(last, _))) => {
                unix_ms.saturating_sub(last) > (last - first.min(last)) / PARTS as u64
            }
            _ => false,
        };
        self.recent.push_back((unix_ms, work));
        if self.recent.len() > WINDOW {
            self.recent.pop_front();
        }
        let most = if self.held && !paused {
            HELD_ERROR
        } else {
            STEADY_ERROR
        };
        self.held = self.measured().is_some_and(|(_, error)| error <= most);
    }

    /// Work per second between the oldest and newest of the latest results
    /// (the oldest one's work was done before the window opened).
    pub fn per_second(&self) -> f64 {
        match (self.recent.front(), self.recent.back()) {
            (Some(&(t0, _)), Some(&(t1, _))) if t1 > t0 => {
                let work: f64 = self.recent.iter().skip(1).map(|&(_, w)| w).sum();
                work * 1000.0 / (t1 - t0) as f64
            }
            _ => 0.0,
        }
    }

    /// The rate and its relative error, once steady: enough results, and
    /// the rates of [`PARTS`] consecutive parts of the window agree (their
    /// standard error within [`STEADY_ERROR`] of the whole window's rate,
    /// or [`HELD_ERROR`] where it was steady at the result before). `None`
    /// while results arrive in bursts or too few have arrived: an ETA from
    /// them would swing by orders of magnitude.
    pub fn steady(&self) -> Option<(f64, f64)> {
        self.measured().filter(|_| self.held)
    }

    /// The rate and the standard error of its parts' rates, relative to it,
    /// where there are enough results for parts.
    fn measured(&self) -> Option<(f64, f64)> {
        let k = self.recent.len().checked_sub(1)?;
        if k < STEADY_RESULTS {
            return None;
        }
        let rate = self.per_second();
        let mut parts = [0.0; PARTS];
        let mut from = self.recent[0].0;
        for (p, part) in parts.iter_mut().enumerate() {
            let (lo, hi) = (1 + p * k / PARTS, 1 + (p + 1) * k / PARTS);
            let work: f64 = self.recent.range(lo..hi).map(|&(_, w)| w).sum();
            let to = self.recent[hi - 1].0;
            if to <= from {
                return None;
            }
            *part = work * 1000.0 / (to - from) as f64;
            from = to;
        }
        let n = PARTS as f64;
        let mean = parts.iter().sum::<f64>() / n;
        let var = parts.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (n - 1.0);
        let error = var.sqrt() / n.sqrt() / rate;
        (rate > 0.0).then_some((rate, error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_steady_only_once_enough_results_arrive_evenly() {
        let mut r = Rate::default();
        // Every worker's first task ends at about the same time: a burst
        // says nothing of the rate.
        for i in 0..40 {
            r.add(20_000 + i % 2, 1.0);
        }
        assert_eq!(r.steady(), None, "a burst");
        let mut r = Rate::default();
        for i in 0..8 {
            r.add(i * 1_000, 1.0);
        }
        assert_eq!(r.steady(), None, "too few results");
        for i in 8..40 {
            r.add(i * 1_000 + (i % 3) * 100, 1.0);
        }
        let (rate, error) = r.steady().expect("even results");
        assert!((rate - 1.0).abs() < 0.05 && error < 0.05, "{rate} {error}");
        // Results that come ten times faster in the second half: the
        // parts disagree, the rate is not steady.
        let mut r = Rate::default();
        for i in 0..20 {
            r.add(i * 1_000, 1.0);
        }
        for i in 0..20 {
            r.add(20_000 + i * 100, 1.0);
        }
        assert_eq!(r.steady(), None, "a rate that changes");
    }

    /// Sixteen workers, each task taking 2 to 30 s (seeded): the parts'
    /// rates swing past what first makes a rate steady, and an ETA once
    /// shown stays, its rate near the workers' 1.0 per second.
    #[test]
    fn an_eta_once_shown_stays_while_results_come_unevenly() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut ends: Vec<u64> = (0..16).map(|w| 1_000 * w).collect();
        let mut r = Rate::default();
        let (mut shown, mut swung) = (false, 0.0f64);
        for _ in 0..2_000 {
            let (w, &t) = ends.iter().enumerate().min_by_key(|&(_, t)| *t).unwrap();
            r.add(t, 1.0);
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            ends[w] = t + 2_000 + seed % 28_000;
            match r.steady() {
                Some((rate, error)) => {
                    assert!((rate - 1.0).abs() < 0.5, "{rate}");
                    swung = swung.max(error);
                    shown = true;
                }
                None => assert!(!shown, "the ETA went at {t} ms"),
            }
        }
        assert!(shown && swung > STEADY_ERROR, "{shown} {swung}");
    }

    /// Results stopped for three parts of the window, then resumed as
    /// before: the window's rate is far below the workers', and the ETA
    /// goes until the parts agree as they must at first.
    #[test]
    fn a_pause_in_the_results_takes_the_eta_away() {
        let mut r = Rate::default();
        for i in 0..300 {
            r.add(i * 1_000, 1.0);
        }
        assert!(r.steady().is_some());
        let resumed = 300_000 + 192_000;
        r.add(resumed, 1.0);
        assert_eq!(r.steady(), None, "{:?}", r.measured());
        for i in 1..300 {
            r.add(resumed + i * 1_000, 1.0);
        }
        assert!(r.steady().is_some(), "steady again");
    }

    #[test]
    fn the_rate_is_work_over_the_window() {
        let mut r = Rate::default();
        assert_eq!(r.per_second(), 0.0);
        r.add(1_000, 5.0);
        assert_eq!(r.per_second(), 0.0, "one result is no interval");
        r.add(3_000, 4.0);
        r.add(5_000, 4.0);
        assert_eq!(r.per_second(), 2.0);
        for i in 0..1_000 {
            r.add(10_000 + i * 100, 1.0);
        }
        assert!(
            (r.per_second() - 10.0).abs() < 1e-9,
            "old results leave the window"
        );
    }
}
