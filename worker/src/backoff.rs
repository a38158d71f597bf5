//! Exponential backoff with jitter, for reconnecting and retrying.

use std::time::Duration;

pub struct Backoff {
    next: Duration,
    min: Duration,
    max: Duration,
    seed: u64,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Backoff {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1;
        Backoff {
            next: min,
            min,
            max,
            seed,
        }
    }

    /// The next wait: doubling up to `max`, with ±25% jitter so many
    /// workers do not retry in step.
    pub fn next_delay(&mut self) -> Duration {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let jitter = 0.75 + (self.seed % 1000) as f64 / 2000.0;
        let d = self.next.mul_f64(jitter);
        self.next = (self.next * 2).min(self.max);
        d
    }

    /// Back to the shortest wait after a success.
    pub fn reset(&mut self) {
        self.next = self.min;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_with_jitter_up_to_the_cap() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let waits: Vec<Duration> = (0..8).map(|_| b.next_delay()).collect();
        for (i, w) in waits.iter().enumerate() {
            let base = Duration::from_millis((100u64 << i).min(1000));
            assert!(
                *w >= base.mul_f64(0.75) && *w <= base.mul_f64(1.25),
                "{i}: {w:?} around {base:?}"
            );
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(125));
    }
}
