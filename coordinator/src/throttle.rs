//! Repeated failures logged at most once a period: a full disk fails
//! every write, and one line a minute says as much as a million.

use std::time::{Duration, Instant};

/// How often a repeated failure is logged.
pub const EVERY: Duration = Duration::from_secs(60);

/// Lets a repeated message through once per period, and counts the ones
/// it held back meanwhile.
#[derive(Debug)]
pub struct Throttle {
    every: Duration,
    last: Option<Instant>,
    held: u64,
}

impl Throttle {
    pub fn new(every: Duration) -> Throttle {
        Throttle {
            every,
            last: None,
            held: 0,
        }
    }

    /// `Some(held back since the last one let through)` if this one may
    /// be logged.
    pub fn allow(&mut self) -> Option<u64> {
        self.allow_at(Instant::now())
    }

    fn allow_at(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(t) if now.duration_since(t) < self.every => {
                self.held += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.held))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_period_with_the_count_held_back() {
        let mut t = Throttle::new(Duration::from_secs(60));
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        assert_eq!(t.allow_at(at(0)), Some(0));
        assert_eq!(t.allow_at(at(10)), None);
        assert_eq!(t.allow_at(at(59)), None);
        assert_eq!(t.allow_at(at(61)), Some(2));
        assert_eq!(t.allow_at(at(62)), None);
    }
}
