//! Which tasks a worker's CPU threads take when it also counts on cards.
//!
//! A card finishes a task a hundred times sooner than a CPU thread or
//! more (an H200 against one of its Xeon cores: about 140 times). A CPU
//! thread that takes one of a job's last tasks holds the job's end for as
//! long as it counts it, while the cards sit idle: at N=21 (2,109 tasks)
//! a task is several seconds on one core and the whole job some seconds
//! on the card.
//!
//! So, once both rates are measured, a CPU thread takes a task only while
//! the other tasks queued keep the cards busy at least as long as the
//! thread will count it. Mid-job the queue holds that much (the worker
//! keeps it so: [`Share::cover`]) and the CPU threads count beside the
//! cards; at a job's end the queue drains, the CPU threads stop taking,
//! and the cards count the tail.
//!
//! CPU threads of a worker with cards also run at a lower priority than
//! its card feeders ([`yield_to_feeders`]): a feeder cuts the next batch
//! and reads the last one back, and a card waits for it.

use crate::pace::Latest;
use std::time::{Duration, Instant};

/// Card tasks the card rate is measured over.
const CARD_WINDOW: usize = 256;

/// CPU tasks the CPU time per task is the mean of.
const CPU_WINDOW: usize = 16;

/// What the counting threads measured of each other.
#[derive(Debug)]
pub struct Share {
    /// When the latest card tasks finished.
    card_done: Latest<Instant>,
    /// How long the latest CPU tasks took.
    cpu_took: Latest<Duration>,
}

impl Default for Share {
    fn default() -> Share {
        Share {
            card_done: Latest::new(CARD_WINDOW),
            cpu_took: Latest::new(CPU_WINDOW),
        }
    }
}

impl Share {
    /// A card's feeder finished a task at `at`.
    pub fn card_finished(&mut self, at: Instant) {
        self.card_done.push(at);
    }

    /// A CPU thread counted a task in `took`.
    pub fn cpu_finished(&mut self, took: Duration) {
        self.cpu_took.push(took);
    }

    /// Tasks the cards finish while one CPU thread counts one, once both
    /// are measured (two card tasks, one CPU task).
    fn cards_per_cpu_task(&self, now: Instant) -> Option<f64> {
        let card_rate = self.card_done.rate(now)?;
        if self.cpu_took.is_empty() {
            return None;
        }
        let cpu = self.cpu_took.iter().sum::<Duration>() / self.cpu_took.len() as u32;
        Some(card_rate * cpu.as_secs_f64())
    }

    /// Whether a CPU thread takes a task that either kind may count, with
    /// `others` tasks queued besides it: until both rates are measured,
    /// yes; then only if the others keep the cards busy while it counts.
    pub fn cpu_may_take(&self, others: usize, now: Instant) -> bool {
        self.cards_per_cpu_task(now)
            .is_none_or(|cards| others as f64 >= cards)
    }

    /// Tasks to keep queued so that the CPU threads may take tasks while
    /// the coordinator has more (0 until measured).
    pub fn cover(&self, now: Instant) -> usize {
        self.cards_per_cpu_task(now)
            .map_or(0, |cards| cards.ceil().min(u32::MAX as f64) as usize + 1)
    }
}

/// Lowers the calling thread's scheduling priority (Linux: nice 10), so
/// that it yields the processor to a card's feeders when both are ready.
/// Elsewhere a no-op.
pub fn yield_to_feeders() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain system calls with no pointers; `gettid` names the
        // calling thread, and raising one's own nice value needs no
        // privilege.
        let changed = unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, 10)
        };
        if changed != 0 {
            tracing::debug!("could not lower a CPU counting thread's priority");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Nothing measured: the CPU threads take tasks as the cards do.
    #[test]
    fn before_both_rates_are_measured_a_cpu_thread_takes_any_task() {
        let t0 = Instant::now();
        let mut s = Share::default();
        assert!(s.cpu_may_take(0, t0));
        s.card_finished(t0);
        s.card_finished(t0 + ms(10));
        assert!(s.cpu_may_take(0, t0 + ms(20)), "no CPU task measured yet");
        assert_eq!(s.cover(t0 + ms(20)), 0);
        let mut s = Share::default();
        s.cpu_finished(ms(7_000));
        assert!(s.cpu_may_take(0, t0), "no card rate measured yet");
    }

    /// Cards at 100 tasks a second, CPU tasks of 2 s: a CPU thread takes a
    /// task only with 200 others queued, and the worker keeps 201 queued.
    #[test]
    fn a_cpu_thread_leaves_the_last_tasks_to_the_cards() {
        let t0 = Instant::now();
        let mut s = Share::default();
        for i in 0..=100 {
            s.card_finished(t0 + ms(10 * i));
        }
        s.cpu_finished(ms(1_000));
        s.cpu_finished(ms(3_000));
        let now = t0 + ms(1_000);
        assert!(!s.cpu_may_take(0, now));
        assert!(!s.cpu_may_take(199, now));
        assert!(s.cpu_may_take(200, now));
        assert_eq!(s.cover(now), 201);
    }

    /// A slow card (2 tasks a second) against CPU tasks of 1 s: a CPU
    /// thread takes a task with two others queued.
    #[test]
    fn beside_a_slow_card_the_cpu_threads_count_almost_to_the_end() {
        let t0 = Instant::now();
        let mut s = Share::default();
        for i in 0..=10 {
            s.card_finished(t0 + ms(500 * i));
        }
        s.cpu_finished(ms(1_000));
        let now = t0 + ms(5_000);
        assert!(!s.cpu_may_take(1, now));
        assert!(s.cpu_may_take(2, now));
    }

    /// The window keeps the latest tasks only: a card that got faster is
    /// measured at its new rate.
    #[test]
    fn the_rates_follow_the_latest_tasks() {
        let t0 = Instant::now();
        let mut s = Share::default();
        for i in 0..CARD_WINDOW as u64 {
            s.card_finished(t0 + ms(1_000 * i));
        }
        let later = t0 + ms(1_000 * CARD_WINDOW as u64);
        for i in 0..CARD_WINDOW as u64 {
            s.card_finished(later + ms(i));
        }
        for _ in 0..CPU_WINDOW {
            s.cpu_finished(ms(1_000));
        }
        s.cpu_finished(ms(500));
        let now = later + ms(CARD_WINDOW as u64 - 1);
        // About 1,000 card tasks a second; the CPU mean of 15 × 1 s and 0.5 s.
        let cards = s.cards_per_cpu_task(now).unwrap();
        assert!((cards - 968.75).abs() < 1.0, "{cards}");
    }
}
