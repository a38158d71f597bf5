//! A job's rate: estimated work per second over its latest results.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Results the rate is measured over.
const WINDOW: usize = 256;

/// The latest results' (time in ms, estimated work).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Rate {
    recent: VecDeque<(u64, f64)>,
}

impl Rate {
    pub fn add(&mut self, unix_ms: u64, work: f64) {
        self.recent.push_back((unix_ms, work));
        if self.recent.len() > WINDOW {
            self.recent.pop_front();
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
