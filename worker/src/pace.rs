//! How many tasks a worker keeps in hand: enough that no counting thread
//! and no card waits for its next task, and no more than its measured rate
//! finishes in [`AHEAD`]. A card finishes tasks many times faster than a
//! CPU thread, so a fixed number per thread would starve a GPU worker, and
//! a CPU worker on long tasks would hold hours of work that another worker
//! could have taken.
//!
//! The queue also covers [`ROUND_TRIPS_AHEAD`] lease round trips at the
//! measured rate, whatever the per-slot cap: a worker far from its
//! coordinator (150 ms away) on tasks of a few milliseconds would
//! otherwise ask for more only when less than one round trip of work is
//! left, and its threads would wait for every answer.
//!
//! A worker with cards and CPU threads also keeps queued what its cards
//! finish while a CPU thread counts one task ([`Pace::cover`]), so that
//! its CPU threads count while the job has more (see [`crate::share`]).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Work to keep queued beyond the running tasks, at the measured rate:
/// many lease round trips, even over a slow link, and a short tail when a
/// job ends (the last worker's queue is at most this much work).
pub const AHEAD: Duration = Duration::from_secs(5);

/// Tasks queued at most per slot, whatever the rate: a worker on tiny
/// tasks does not take a whole job from the others.
pub const MAX_AHEAD_PER_SLOT: usize = 64;

/// Tasks queued at most, whatever the rate and the slots.
pub const MAX_AHEAD: usize = 2048;

/// Tasks held at most, running and queued: a heartbeat names every lease
/// held, and a coordinator takes at most 4,096 in one.
pub const MAX_HELD: usize = 4096;

/// Lease round trips of work kept queued at least: a lease is asked for
/// once half the queue is gone, so two round trips of work are left when
/// it goes out, one to spare for a slow answer.
pub const ROUND_TRIPS_AHEAD: u32 = 4;

/// Finished tasks the rate is measured over.
const WINDOW: usize = 256;

/// Lease round trips remembered; the longest of them counts (jitter).
const TRIPS: usize = 8;

/// The latest `cap` of something measured.
#[derive(Debug)]
pub struct Latest<T> {
    cap: usize,
    kept: VecDeque<T>,
}

impl<T: Copy> Latest<T> {
    pub fn new(cap: usize) -> Latest<T> {
        Latest {
            cap: cap.max(1),
            kept: VecDeque::with_capacity(cap),
        }
    }

    /// Keeps `x`, forgetting the oldest beyond the cap.
    pub fn push(&mut self, x: T) {
        if self.kept.len() == self.cap {
            self.kept.pop_front();
        }
        self.kept.push_back(x);
    }

    pub fn iter(&self) -> impl Iterator<Item = T> + '_ {
        self.kept.iter().copied()
    }

    pub fn len(&self) -> usize {
        self.kept.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }
}

impl Latest<Instant> {
    /// Events per second from the oldest kept until `now`, once two are
    /// kept.
    pub fn rate(&self, now: Instant) -> Option<f64> {
        let first = *self.kept.front()?;
        let span = now.saturating_duration_since(first).as_secs_f64();
        (self.kept.len() >= 2 && span > 0.0).then(|| (self.kept.len() - 1) as f64 / span)
    }
}

/// Jobs whose rates are kept: a worker given tasks of a few jobs in turn
/// (a lease brings one job's tasks handed back, then the next job's)
/// keeps each one's rate, and measures again only a job it has not seen.
const JOBS: usize = 8;

/// A worker's pace: its slots (CPU threads and card feeders) and when the
/// latest tasks of each job it leased lately finished.
#[derive(Debug)]
pub struct Pace {
    slots: usize,
    /// The jobs leased lately, each with its latest tasks' ends, the one
    /// leased last at the back: its rate is the one followed.
    jobs: VecDeque<(u64, Latest<Instant>)>,
    /// The latest lease calls' round trips.
    trips: Latest<Duration>,
    /// Tasks to keep queued at least, within [`MAX_AHEAD`].
    cover: usize,
}

impl Pace {
    pub fn new(slots: usize) -> Pace {
        Pace {
            slots: slots.max(1),
            jobs: VecDeque::with_capacity(JOBS),
            trips: Latest::new(TRIPS),
            cover: 0,
        }
    }

    /// Tasks of `jobs` were leased at `now` (one lease answer). Each job
    /// keeps its rate; the one followed from now on is that of a job new
    /// among them, else of the last. Tasks of a job not seen lately may
    /// differ in size from the others' by orders of magnitude: its rate is
    /// measured from `now` (so until tasks finish, the first ones count as
    /// taking all the time since). Returns whether one of them is new.
    pub fn leased(&mut self, jobs: impl IntoIterator<Item = u64>, now: Instant) -> bool {
        let mut new = None;
        for job in jobs {
            match self.jobs.iter().position(|(j, _)| *j == job) {
                Some(i) => self.follow(i),
                None => {
                    if self.jobs.len() == JOBS {
                        self.jobs.pop_front();
                    }
                    let mut ends = Latest::new(WINDOW);
                    ends.push(now);
                    self.jobs.push_back((job, ends));
                    new = Some(job);
                }
            }
        }
        if let Some(i) = new.and_then(|job| self.jobs.iter().position(|(j, _)| *j == job)) {
            self.follow(i);
        }
        new.is_some()
    }

    /// The `i`th job kept is the one followed.
    fn follow(&mut self, i: usize) {
        let kept = self.jobs.remove(i).expect("a job kept");
        self.jobs.push_back(kept);
    }

    /// Keeps at least `tasks` queued (within [`MAX_AHEAD`]) from now on.
    pub fn cover(&mut self, tasks: usize) {
        self.cover = tasks.min(MAX_AHEAD);
    }

    /// A lease call was answered after `took`.
    pub fn round_trip(&mut self, took: Duration) {
        self.trips.push(took);
    }

    /// A task of `job` finished (counted) at `at`; a job not leased lately
    /// is not followed.
    pub fn finished(&mut self, job: u64, at: Instant) {
        if let Some((_, ends)) = self.jobs.iter_mut().find(|(j, _)| *j == job) {
            ends.push(at);
        }
    }

    /// Tasks to keep queued beyond the running ones: two per slot until a
    /// rate is known, then what the rate finishes in [`AHEAD`] (at least
    /// one, at most [`MAX_AHEAD_PER_SLOT`] a slot and [`MAX_AHEAD`]), and
    /// never less than the rate finishes in [`ROUND_TRIPS_AHEAD`] of the
    /// longest recent lease round trips (within [`MAX_HELD`]) nor than
    /// the [`Pace::cover`] asked for.
    pub fn ahead(&self, now: Instant) -> usize {
        self.by_rate(now).max(self.cover)
    }

    fn by_rate(&self, now: Instant) -> usize {
        let most = (MAX_AHEAD_PER_SLOT * self.slots).min(MAX_AHEAD);
        let Some(rate) = self.jobs.back().and_then(|(_, ends)| ends.rate(now)) else {
            return 2 * self.slots;
        };
        let trip = self.trips.iter().max().unwrap_or_default();
        let link = (rate * (trip * ROUND_TRIPS_AHEAD).as_secs_f64()).ceil() as usize;
        let link = link.min(MAX_HELD - self.slots.min(MAX_HELD));
        ((rate * AHEAD.as_secs_f64()).ceil() as usize)
            .clamp(1, most)
            .max(link)
    }

    /// Tasks to hold in all (running and queued), at most [`MAX_HELD`].
    pub fn target(&self, now: Instant) -> usize {
        (self.slots + self.ahead(now)).min(MAX_HELD)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Job 1's tasks leased at the first of `ends` and finished at the
    /// others.
    fn ran(p: &mut Pace, ends: impl IntoIterator<Item = Instant>) {
        let mut ends = ends.into_iter();
        if let Some(first) = ends.next() {
            p.leased([1], first);
        }
        for at in ends {
            p.finished(1, at);
        }
    }

    /// Before any task finished: three per slot, as a fixed rule would.
    #[test]
    fn a_new_worker_holds_three_tasks_a_slot() {
        let p = Pace::new(4);
        assert_eq!(p.target(Instant::now()), 12);
    }

    /// A card that finishes 50 tasks a second keeps 5 seconds of them
    /// queued; two threads on hour-long tasks keep one queued, not hours;
    /// a worker on tiny tasks keeps at most 64 a slot.
    #[test]
    fn what_is_held_follows_the_measured_rate() {
        let t0 = Instant::now();
        let mut fast = Pace::new(6);
        ran(
            &mut fast,
            (0..=100).map(|i| t0 + Duration::from_millis(20 * i)),
        );
        let now = t0 + Duration::from_secs(2);
        assert_eq!(fast.ahead(now), 250);
        assert_eq!(fast.target(now), 256);
        let mut one = Pace::new(1);
        ran(
            &mut one,
            (0..=100).map(|i| t0 + Duration::from_millis(20 * i)),
        );
        assert_eq!(one.ahead(now), MAX_AHEAD_PER_SLOT);

        let mut slow = Pace::new(2);
        ran(&mut slow, [t0, t0 + Duration::from_secs(1800)]);
        assert_eq!(slow.ahead(t0 + Duration::from_secs(3600)), 1);
        assert_eq!(slow.target(t0 + Duration::from_secs(3600)), 3);

        let mut flood = Pace::new(100);
        ran(&mut flood, std::iter::repeat_n(t0, WINDOW));
        assert_eq!(flood.ahead(t0 + Duration::from_millis(1)), MAX_AHEAD);
        // 150 ms from the coordinator, 1,000 tiny tasks a second: four
        // round trips of them, past the per-slot cap.
        let mut far = Pace::new(1);
        ran(&mut far, (0..=100).map(|i| t0 + Duration::from_millis(i)));
        let now = t0 + Duration::from_millis(100);
        assert_eq!(far.ahead(now), MAX_AHEAD_PER_SLOT);
        far.round_trip(Duration::from_millis(150));
        far.round_trip(Duration::from_millis(120));
        assert_eq!(far.ahead(now), 600);
        // A round trip far slower still: within what a heartbeat names.
        far.round_trip(Duration::from_secs(100));
        assert_eq!(far.target(now), MAX_HELD);

        let mut wide = Pace::new(4000);
        ran(&mut wide, [t0, t0 + Duration::from_millis(1)]);
        assert_eq!(wide.target(t0 + Duration::from_millis(1)), MAX_HELD);
    }

    /// A worker that counted a job of tiny tasks does not take the next
    /// job's tasks at that rate: the rate is measured again, from when the
    /// new job's first task was leased, so tasks finished together at the
    /// start do not look instant.
    #[test]
    fn a_new_job_is_measured_from_its_first_lease() {
        let t0 = Instant::now();
        let mut p = Pace::new(2);
        p.leased([1], t0);
        for i in 1..=200 {
            p.finished(1, t0 + Duration::from_millis(i));
        }
        let then = t0 + Duration::from_millis(200);
        assert_eq!(p.ahead(then), 2 * MAX_AHEAD_PER_SLOT);
        p.leased([1], then);
        assert_eq!(p.ahead(then), 2 * MAX_AHEAD_PER_SLOT, "the same job");
        p.leased([2], then);
        assert_eq!(p.ahead(then), 4, "two a slot until one finishes");
        // Two of its tasks finish at once, 10 s after they were leased.
        let later = then + Duration::from_secs(10);
        p.finished(2, later);
        p.finished(2, later);
        assert_eq!(p.ahead(later), 1, "0.2 tasks/s: one queued");
    }

    /// Two jobs leased in turn keep their own rates: going back to one
    /// measures nothing again, its tasks' ends are its own, a new job in
    /// an answer is followed, and only a job not among the latest
    /// [`JOBS`] starts afresh.
    #[test]
    fn jobs_leased_in_turn_keep_their_rates() {
        let t0 = Instant::now();
        let mut p = Pace::new(2);
        assert!(p.leased([1], t0));
        for i in 1..=100 {
            p.finished(1, t0 + Duration::from_millis(10 * i));
        }
        let now = t0 + Duration::from_secs(1);
        assert!(p.leased([2], now));
        assert_eq!(p.ahead(now), 4, "two a slot until one finishes");
        p.finished(2, now + Duration::from_secs(5));
        let later = now + Duration::from_secs(5);
        assert_eq!(p.ahead(later), 1, "job 2: one task in 5 s");
        assert!(!p.leased([1], later), "job 1 is not new");
        // Job 1's 100 tasks from t0 to `later`, not job 2's one.
        assert_eq!(p.ahead(later), 84);
        assert!(!p.leased([2], later));
        assert_eq!(p.ahead(later), 1);
        assert!(!p.leased([2, 1], later), "an answer of known jobs");
        assert_eq!(p.ahead(later), 84, "the last one's rate is followed");
        // An answer with a new job's tasks: the new job's pace is
        // followed, whatever came after them.
        assert!(p.leased([2, 100, 1], later));
        assert_eq!(p.ahead(later), 4);
        for job in 3..3 + JOBS as u64 {
            assert!(p.leased([job], later));
        }
        assert!(
            p.leased([1], later),
            "job 1 is forgotten past the latest {JOBS}"
        );
    }

    /// A worker whose CPU threads need 900 card tasks queued keeps them
    /// (its rate alone would keep 250), and never more than MAX_AHEAD.
    #[test]
    fn the_cover_for_cpu_threads_is_kept_queued() {
        let t0 = Instant::now();
        let mut p = Pace::new(24);
        ran(
            &mut p,
            (0..=100).map(|i| t0 + Duration::from_millis(20 * i)),
        );
        let now = t0 + Duration::from_secs(2);
        assert_eq!(p.ahead(now), 250);
        p.cover(900);
        assert_eq!(p.ahead(now), 900);
        assert_eq!(p.target(now), 924);
        p.cover(100_000);
        assert_eq!(p.ahead(now), MAX_AHEAD);
        p.cover(0);
        assert_eq!(p.ahead(now), 250);
    }
}
