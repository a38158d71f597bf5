//! The batches of every feeding thread, counted together.
//!
//! A card runs one launch at a time (wgpu puts a barrier between launches
//! that write the same buffers, and a barrier waits for all earlier work
//! on the queue), and a launch lasts as long as its busiest thread. One
//! feeding thread's batch is rarely enough to keep every thread of a
//! launch busy for the whole launch. So a thread that hands in a batch
//! while the card is busy leaves it waiting, and the next run takes every
//! batch waiting at its start: a few large runs instead of many small
//! ones. Two runs are in flight at most, so one is being gathered and
//! written to the card while the other counts, and the launches of one
//! fill the card while the other waits on its last searches.

use crate::kernel::JobCounts;
use nqueens_common::engine::device::DeviceError;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// How often a waiting thread looks at its stop flag.
const STOP_LOOK: Duration = Duration::from_millis(20);

/// What a card counts in one run: jobs as [`crate::jobs::Prepared`] lays
/// them out (each naming its interior's first word in `tables`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    pub tables: Vec<u32>,
    pub jobs: Vec<[u32; 8]>,
    /// Rows a thread's stack must hold.
    pub levels: u32,
}

impl Batch {
    /// One batch of all of `batches`, their jobs moved to their tables'
    /// new places.
    fn merge(batches: &[&Batch]) -> Batch {
        let mut out = Batch::default();
        for b in batches {
            let base = out.tables.len() as u32;
            out.tables.extend_from_slice(&b.tables);
            out.jobs.extend(b.jobs.iter().map(|j| {
                let mut j = *j;
                j[0] += base;
                j
            }));
            out.levels = out.levels.max(b.levels);
        }
        out
    }
}

type Answer = Result<Option<JobCounts>, DeviceError>;

/// A batch handed in and not yet counted.
struct Waiting {
    id: u64,
    batch: Batch,
    given_up: Arc<AtomicBool>,
}

#[derive(Default)]
struct State {
    waiting: Vec<Waiting>,
    answers: HashMap<u64, Answer>,
    next: u64,
    /// Runs in flight.
    running: usize,
}

/// The batches handed in to one card.
pub struct Gather {
    state: Mutex<State>,
    changed: Condvar,
    /// Runs in flight at most.
    runs: usize,
    /// Jobs waiting that start a run beside one in flight.
    fill: usize,
    /// Jobs one run takes at most (more wait for the next).
    most_jobs: usize,
}

impl Gather {
    /// Up to `runs` runs in flight, a second one started once `fill`
    /// jobs wait, each of `most_jobs` jobs at most.
    pub fn new(runs: usize, fill: usize, most_jobs: usize) -> Gather {
        Gather {
            state: Mutex::default(),
            changed: Condvar::new(),
            runs: runs.max(1),
            fill,
            most_jobs: most_jobs.max(1),
        }
    }

    /// Whether a run starts now: with none in flight, as soon as a batch
    /// waits (the card would idle otherwise); beside one, only once the
    /// jobs waiting fill the card. A run of fewer would take its turns at
    /// the card with most threads idle, and the batches still to come
    /// would wait for it.
    fn starts_run(&self, state: &State) -> bool {
        let waiting: usize = state.waiting.iter().map(|w| w.batch.jobs.len()).sum();
        !state.waiting.is_empty()
            && (state.running == 0 || (state.running < self.runs && waiting >= self.fill))
    }

    /// Batches waiting for a run.
    pub fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts `batch`, in a run with the batches of other threads: `run`
    /// counts one run's batch (looking at its stop function between
    /// rounds). `None` once `stop` is set (looked at every few
    /// milliseconds while waiting; a run stops once every batch in it is
    /// given up).
    pub fn count(
        &self,
        batch: Batch,
        stop: &AtomicBool,
        run: impl Fn(&Batch, &dyn Fn() -> bool) -> Answer,
    ) -> Answer {
        let given_up = Arc::new(AtomicBool::new(false));
        let mut state = self.lock();
        let id = state.next;
        state.next += 1;
        state.waiting.push(Waiting {
            id,
            batch,
            given_up: Arc::clone(&given_up),
        });
        loop {
            if let Some(answer) = state.answers.remove(&id) {
                return answer;
            }
            if stop.load(Ordering::Relaxed) {
                given_up.store(true, Ordering::Relaxed);
                state.waiting.retain(|w| w.id != id);
                return Ok(None);
            }
            if self.starts_run(&state) {
                state.running += 1;
                let taken = self.take(&mut state);
                drop(state);
                // This thread's own batch is given up once it is told to stop.
                let gone = |w: &Waiting| {
                    w.given_up.load(Ordering::Relaxed)
                        || (w.id == id && stop.load(Ordering::Relaxed))
                };
                // A run that panics fails every batch in it (rather than
                // leaving their threads to wait for answers never given).
                let counted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    Self::counted(&taken, &gone, &run)
                }));
                let answers = counted.unwrap_or_else(|_| {
                    let failed = DeviceError::Failed("the card's run panicked".into());
                    taken.iter().map(|w| (w.id, Err(failed.clone()))).collect()
                });
                state = self.lock();
                state.running -= 1;
                // A thread gives up holding the lock: the answers of those
                // gone are dropped here, never left behind.
                for (w, answer) in taken.iter().zip(answers) {
                    if !w.given_up.load(Ordering::Relaxed) {
                        state.answers.insert(answer.0, answer.1);
                    }
                }
                self.changed.notify_all();
                continue;
            }
            state = self
                .changed
                .wait_timeout(state, STOP_LOOK)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The batches waiting longest, up to a run's jobs (one at least).
    fn take(&self, state: &mut State) -> Vec<Waiting> {
        let mut jobs = 0;
        let mut end = 0;
        for w in &state.waiting {
            if end > 0 && jobs + w.batch.jobs.len() > self.most_jobs {
                break;
            }
            jobs += w.batch.jobs.len();
            end += 1;
        }
        state.waiting.drain(..end).collect()
    }

    /// One run of `taken` (stopped once every batch is `gone`): each
    /// batch's answer, by its id.
    fn counted(
        taken: &[Waiting],
        gone: &dyn Fn(&Waiting) -> bool,
        run: &impl Fn(&Batch, &dyn Fn() -> bool) -> Answer,
    ) -> Vec<(u64, Answer)> {
        let batches: Vec<&Batch> = taken.iter().map(|w| &w.batch).collect();
        let merged = Batch::merge(&batches);
        let all_given_up = || taken.iter().all(gone);
        let answer = run(&merged, &all_given_up);
        let mut first = 0;
        taken
            .iter()
            .map(|w| {
                let n = w.batch.jobs.len();
                let part = match &answer {
                    Ok(Some(counts)) => Ok(Some(counts[first..first + n].to_vec())),
                    Ok(None) => Ok(None),
                    Err(e) => Err(e.clone()),
                };
                first += n;
                (w.id, part)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A batch of `jobs` jobs over one interior of `words` words of
    /// tables; each job names its table's first word and its own number.
    fn batch(words: usize, jobs: u32, levels: u32) -> Batch {
        Batch {
            tables: vec![7; words],
            jobs: (0..jobs).map(|i| [0, i, 0, 0, 0, 0, 0, 0]).collect(),
            levels,
        }
    }

    /// A run's counts: per job, its table's first word and its number.
    fn echo(b: &Batch) -> JobCounts {
        b.jobs
            .iter()
            .map(|j| (u64::from(j[0]), u64::from(j[1])))
            .collect()
    }

    /// While one run holds the card, the batches handed in wait, and the
    /// next run takes them all: one run, each thread its own counts, each
    /// job moved to where its tables went.
    #[test]
    fn batches_handed_in_during_a_run_share_the_next() {
        let gather = Gather::new(1, 0, 1000);
        let (release, held) = mpsc::channel::<()>();
        let held = Mutex::new(held);
        let runs = Mutex::new(Vec::new());
        let never = AtomicBool::new(false);
        let run = |b: &Batch, _: &dyn Fn() -> bool| {
            runs.lock()
                .unwrap()
                .push((b.jobs.len(), b.tables.len(), b.levels));
            if runs.lock().unwrap().len() == 1 {
                held.lock().unwrap().recv().unwrap();
            }
            Ok(Some(echo(b)))
        };
        std::thread::scope(|s| {
            let first = s.spawn(|| gather.count(batch(64, 3, 2), &never, run));
            while runs.lock().unwrap().is_empty() {
                std::thread::yield_now();
            }
            let second = s.spawn(|| gather.count(batch(64, 2, 5), &never, run));
            let third = s.spawn(|| gather.count(batch(128, 4, 3), &never, run));
            while gather.waiting() < 2 {
                std::thread::yield_now();
            }
            release.send(()).unwrap();
            let got =
                |h: std::thread::ScopedJoinHandle<Answer>| h.join().unwrap().unwrap().unwrap();
            assert_eq!(got(first), vec![(0, 0), (0, 1), (0, 2)]);
            let (b, c) = (got(second), got(third));
            // The later run put one batch's tables after the other's.
            let bases = (b[0].0, c[0].0);
            assert!(bases == (0, 64) || bases == (128, 0), "{bases:?}");
            assert_eq!(b.iter().map(|x| x.1).collect::<Vec<_>>(), vec![0, 1]);
            assert_eq!(c.iter().map(|x| x.1).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        });
        assert_eq!(*runs.lock().unwrap(), vec![(3, 64, 2), (6, 192, 5)]);
    }

    /// Beside a run in flight, a second starts only once the jobs
    /// waiting fill the card; with none in flight, any batch starts one.
    #[test]
    fn a_second_run_waits_for_jobs_that_fill_the_card() {
        let gather = Gather::new(2, 10, 1000);
        let mut state = gather.lock();
        assert!(!gather.starts_run(&state), "nothing waits");
        let wait = |state: &mut State, id, jobs| {
            state.waiting.push(Waiting {
                id,
                batch: batch(64, jobs, 1),
                given_up: Arc::default(),
            })
        };
        wait(&mut state, 0, 3);
        assert!(gather.starts_run(&state), "the card is idle");
        state.running = 1;
        assert!(!gather.starts_run(&state), "3 jobs beside a run");
        wait(&mut state, 1, 7);
        assert!(gather.starts_run(&state), "10 jobs fill the card");
        state.running = 2;
        assert!(!gather.starts_run(&state), "two runs in flight");
    }

    /// A run takes batches up to its most jobs; the rest wait for the next.
    #[test]
    fn a_run_takes_batches_up_to_its_most_jobs() {
        let gather = Gather::new(1, 0, 5);
        let mut state = gather.lock();
        for (id, jobs) in [(0, 3), (1, 2), (2, 1)] {
            let waiting = Waiting {
                id,
                batch: batch(64, jobs, 1),
                given_up: Arc::default(),
            };
            state.waiting.push(waiting);
        }
        let ids = |t: Vec<Waiting>| t.iter().map(|w| w.id).collect::<Vec<_>>();
        assert_eq!(ids(gather.take(&mut state)), vec![0, 1]);
        assert_eq!(ids(gather.take(&mut state)), vec![2]);
        // A batch larger than a run still goes, alone.
        state.waiting.push(Waiting {
            id: 3,
            batch: batch(64, 9, 1),
            given_up: Arc::default(),
        });
        assert_eq!(ids(gather.take(&mut state)), vec![3]);
    }

    /// A thread told to stop while its batch waits leaves at once; its
    /// batch is never counted, and a run whose batches are all given up
    /// is told to stop.
    #[test]
    fn a_batch_given_up_is_not_counted() {
        let gather = Gather::new(1, 0, 1000);
        let (release, held) = mpsc::channel::<()>();
        let held = Mutex::new(held);
        let counted = Mutex::new(Vec::new());
        let stop = AtomicBool::new(false);
        let leader_stop = AtomicBool::new(false);
        let told = AtomicBool::new(false);
        std::thread::scope(|s| {
            let first = s.spawn(|| {
                gather.count(batch(64, 3, 1), &leader_stop, |b, stop| {
                    counted.lock().unwrap().push(b.jobs.len());
                    held.lock().unwrap().recv().unwrap();
                    told.store(stop(), Ordering::Relaxed);
                    Ok(Some(echo(b)))
                })
            });
            while counted.lock().unwrap().is_empty() {
                std::thread::yield_now();
            }
            let second = s.spawn(|| gather.count(batch(64, 2, 1), &stop, |b, _| Ok(Some(echo(b)))));
            while gather.waiting() < 1 {
                std::thread::yield_now();
            }
            stop.store(true, Ordering::Relaxed);
            assert_eq!(second.join().unwrap(), Ok(None));
            assert_eq!(gather.waiting(), 0);
            leader_stop.store(true, Ordering::Relaxed);
            release.send(()).unwrap();
            assert!(first.join().unwrap().is_ok());
        });
        assert_eq!(
            *counted.lock().unwrap(),
            vec![3],
            "the batch given up was not run"
        );
        assert!(
            told.load(Ordering::Relaxed),
            "the run of a batch given up is told to stop"
        );
    }

    /// A run that panics fails its batches, and the next run goes ahead.
    #[test]
    fn a_run_that_panics_fails_its_batches_and_the_card_goes_on() {
        let gather = Gather::new(1, 0, 1000);
        let never = AtomicBool::new(false);
        let failed = gather.count(batch(64, 2, 1), &never, |_, _| panic!("lost device"));
        assert!(matches!(failed, Err(DeviceError::Failed(_))), "{failed:?}");
        let next = gather.count(batch(64, 2, 1), &never, |b, _| Ok(Some(echo(b))));
        assert_eq!(next, Ok(Some(vec![(0, 0), (0, 1)])));
    }
}
