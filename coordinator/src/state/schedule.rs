//! Which task of a job goes out next, and who holds which.
//!
//! Pending work is a cursor over the plan's task order plus small sets of
//! exceptions — tasks handed back (released, expired after their backoff,
//! or needing another worker's check), tasks waiting out a backoff, tasks
//! leased now — and one bit per task for the finished ones. Memory follows
//! the active work, not the size of the job: a job of 10^8 tasks costs
//! 12.5 MB of bits, whatever has been handed out.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Bit words as raw little-endian bytes: 8 bytes a word in any format
/// (a varint format would spend 10 on a full one).
mod words {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(words: &[u64], s: S) -> Result<S::Ok, S::Error> {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        s.serialize_bytes(&bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
        let bytes: &[u8] = Deserialize::deserialize(d)?;
        if !bytes.len().is_multiple_of(8) {
            return Err(serde::de::Error::custom(
                "bit words are not a multiple of 8 bytes",
            ));
        }
        Ok(bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect())
    }
}

/// A task lent to a worker.
#[derive(Clone, Debug, PartialEq)]
pub struct Lease {
    pub lease_id: u64,
    pub worker: String,
    /// Who vouches for the worker: its credential, else its id.
    pub voter: String,
    pub deadline: u64,
}

/// A lease that ran out, and whether its task is out of retries.
#[derive(Debug, PartialEq)]
pub struct Expired {
    pub task: u64,
    pub lease: Lease,
    pub dying: bool,
}

/// One bit per task, grown on demand.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Bits(#[serde(with = "words")] Vec<u64>);

impl Bits {
    fn get(&self, i: u64) -> bool {
        self.0
            .get((i / 64) as usize)
            .is_some_and(|w| w >> (i % 64) & 1 == 1)
    }

    /// Clears bit `i`; false if it was clear.
    fn unset(&mut self, i: u64) -> bool {
        let was = self.get(i);
        if let Some(w) = self.0.get_mut((i / 64) as usize) {
            *w &= !(1 << (i % 64));
        }
        was
    }

    /// Sets bit `i`; false if it was set already.
    fn set(&mut self, i: u64) -> bool {
        let word = (i / 64) as usize;
        if word >= self.0.len() {
            self.0.resize(word + 1, 0);
        }
        let was = self.0[word] >> (i % 64) & 1 == 1;
        self.0[word] |= 1 << (i % 64);
        !was
    }
}

/// A backoff's end that never comes: the task waits to be journaled dead.
const FOREVER: u64 = u64::MAX;

/// Only the finished bits are durable (in a checkpoint): after a restart
/// every other task is pending again, as after a replay of the journal.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Schedule {
    /// The plan's task count, once planned.
    #[serde(skip)]
    tasks: Option<u64>,
    /// Tasks from here on have not been handed out (unless an exception
    /// set below holds them).
    #[serde(skip)]
    cursor: u64,
    /// Tasks ready again, handed out before the cursor's.
    #[serde(skip)]
    returned: BTreeSet<u64>,
    /// Where the next look through `returned` starts: after the last
    /// task found, or where the last look ran out of budget (the oldest
    /// after a whole round found nothing), so that a taker that may take
    /// few of them (it voted on the rest) reaches every one over its
    /// calls, whoever else takes meanwhile.
    #[serde(skip)]
    scan_from: u64,
    /// Tasks waiting out a retry backoff: (not before, task), and by task.
    #[serde(skip)]
    waiting: BTreeSet<(u64, u64)>,
    #[serde(skip)]
    backoff: HashMap<u64, u64>,
    #[serde(skip)]
    leases: BTreeMap<u64, Lease>,
    /// Leases in `leases` per worker, and per voter.
    #[serde(skip)]
    held: HashMap<String, usize>,
    #[serde(skip)]
    held_voter: HashMap<String, usize>,
    /// Expired leases per task.
    #[serde(skip)]
    attempts: HashMap<u64, u32>,
    finished: Bits,
    finished_count: u64,
}

impl Schedule {
    /// The job's tasks are known: `0..tasks` (tasks finished before, from
    /// the journal, are skipped).
    pub fn plan(&mut self, tasks: u64) {
        self.tasks = Some(tasks);
    }

    /// Done or dead: never handed out again.
    pub fn finish(&mut self, task: u64) {
        if self.finished.set(task) {
            self.finished_count += 1;
        }
        self.returned.remove(&task);
        self.unwait(task);
        self.end_lease(task);
        self.attempts.remove(&task);
    }

    /// A dead task (finished without a result) is pending again, first
    /// in line, with a fresh retry budget.
    pub fn revive(&mut self, task: u64) {
        if self.finished.unset(task) {
            self.finished_count -= 1;
        }
        self.attempts.remove(&task);
        self.returned.insert(task);
    }

    pub fn finished(&self, task: u64) -> bool {
        self.finished.get(task)
    }

    #[cfg(test)]
    pub fn finished_count(&self) -> u64 {
        self.finished_count
    }

    /// Tasks ready to be handed out.
    pub fn pending(&self) -> u64 {
        self.tasks.map_or(0, |t| {
            t.saturating_sub(
                self.finished_count + self.leases.len() as u64 + self.waiting.len() as u64,
            )
        })
    }

    /// Tasks waiting out a retry backoff.
    pub fn backing_off(&self) -> u64 {
        self.waiting.len() as u64
    }

    pub fn lease(&self, task: u64) -> Option<&Lease> {
        self.leases.get(&task)
    }

    pub fn lease_mut(&mut self, task: u64) -> Option<&mut Lease> {
        self.leases.get_mut(&task)
    }

    pub fn leases(&self) -> impl Iterator<Item = (&u64, &Lease)> {
        self.leases.iter()
    }

    /// The leases `worker` holds here.
    pub fn held_by(&self, worker: &str) -> usize {
        self.held.get(worker).copied().unwrap_or(0)
    }

    /// The leases the workers `voter` vouches for hold here.
    pub fn held_by_voter(&self, voter: &str) -> usize {
        self.held_voter.get(voter).copied().unwrap_or(0)
    }

    /// Tasks whose backoff is over become ready again.
    pub fn wake(&mut self, now: u64) {
        while let Some(&(until, task)) = self.waiting.first() {
            if until > now {
                break;
            }
            self.unwait(task);
            self.returned.insert(task);
        }
    }

    /// [`Schedule::next_within`] with no bound.
    #[cfg(test)]
    pub fn next(&mut self, skip: impl Fn(u64) -> bool) -> Option<u64> {
        let mut unbounded = usize::MAX;
        self.next_within(skip, &mut unbounded)
    }

    /// Takes the next ready task that `skip` does not refuse (tasks handed
    /// back first, then the cursor's), looking at no more than `budget`
    /// tasks handed back (less what it looked at: a lease call's cost is
    /// bounded however many of them its taker may not take); the caller
    /// leases it with [`Schedule::hold`].
    pub fn next_within(&mut self, skip: impl Fn(u64) -> bool, budget: &mut usize) -> Option<u64> {
        let from = self.scan_from;
        let ring = self
            .returned
            .range(from..)
            .chain(self.returned.range(..from));
        let (mut found, mut stopped) = (None, None);
        for &task in ring {
            if *budget == 0 {
                stopped = Some(task);
                break;
            }
            *budget -= 1;
            if !skip(task) {
                found = Some(task);
                break;
            }
        }
        // Round the ring: on after a find, or where the budget ran out;
        // from the oldest after a whole round found nothing.
        self.scan_from = match (found, stopped) {
            (Some(task), _) => task + 1,
            (None, Some(task)) => task,
            (None, None) => 0,
        };
        if let Some(task) = found {
            self.returned.remove(&task);
            return Some(task);
        }
        let tasks = self.tasks?;
        while self.cursor < tasks {
            let task = self.cursor;
            self.cursor += 1;
            let elsewhere = self.finished(task)
                || self.leases.contains_key(&task)
                || self.backoff.contains_key(&task)
                || self.returned.contains(&task);
            if elsewhere {
                continue;
            }
            if skip(task) {
                // Someone else will take it.
                self.returned.insert(task);
                continue;
            }
            return Some(task);
        }
        None
    }

    /// Lends an unfinished task (from [`Schedule::next_within`], or a lease of an
    /// earlier boot adopted by its holder).
    pub fn hold(&mut self, task: u64, lease: Lease) {
        debug_assert!(!self.finished(task));
        self.returned.remove(&task);
        self.unwait(task);
        self.end_lease(task);
        *self.held.entry(lease.worker.clone()).or_default() += 1;
        *self.held_voter.entry(lease.voter.clone()).or_default() += 1;
        self.leases.insert(task, lease);
    }

    /// Ends a lease with no penalty; the task is ready again at once.
    pub fn give_back(&mut self, task: u64) -> Option<Lease> {
        let lease = self.end_lease(task)?;
        self.returned.insert(task);
        Some(lease)
    }

    /// A task that is not finished and nobody holds is ready again at once
    /// (a checked task that needs another worker's result).
    pub fn requeue(&mut self, task: u64) {
        self.end_lease(task);
        if !self.finished(task) && !self.backoff.contains_key(&task) {
            self.returned.insert(task);
        }
    }

    /// Ends every lease (a cancelled job).
    pub fn drop_leases(&mut self) -> Vec<Lease> {
        self.held.clear();
        std::mem::take(&mut self.leases).into_values().collect()
    }

    /// Ends the leases due by `now`: their tasks wait out a backoff of
    /// `backoff(attempts)`, or, after `budget` expiries, are dying (the
    /// caller journals them dead).
    pub fn expire(&mut self, now: u64, budget: u32, backoff: impl Fn(u32) -> u64) -> Vec<Expired> {
        let due: Vec<u64> = self
            .leases
            .iter()
            .filter(|(_, l)| l.deadline <= now)
            .map(|(&t, _)| t)
            .collect();
        let mut out = Vec::with_capacity(due.len());
        for task in due {
            let lease = self.end_lease(task).expect("listed above");
            let attempts = self.attempts.entry(task).or_insert(0);
            *attempts += 1;
            let dying = *attempts >= budget;
            let until = if dying {
                FOREVER
            } else {
                now.saturating_add(backoff(*attempts))
            };
            self.waiting.insert((until, task));
            self.backoff.insert(task, until);
            out.push(Expired { task, lease, dying });
        }
        out
    }

    /// Ends the lease on `task`, if any.
    fn end_lease(&mut self, task: u64) -> Option<Lease> {
        let lease = self.leases.remove(&task)?;
        for (held, who) in [
            (&mut self.held, &lease.worker),
            (&mut self.held_voter, &lease.voter),
        ] {
            if let Some(n) = held.get_mut(who) {
                *n -= 1;
                if *n == 0 {
                    held.remove(who);
                }
            }
        }
        Some(lease)
    }

    fn unwait(&mut self, task: u64) {
        if let Some(until) = self.backoff.remove(&task) {
            self.waiting.remove(&(until, task));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(w: &str, deadline: u64) -> Lease {
        Lease {
            lease_id: 1,
            worker: w.into(),
            voter: w.into(),
            deadline,
        }
    }

    fn take(s: &mut Schedule, deadline: u64) -> Option<u64> {
        let t = s.next(|_| false)?;
        s.hold(t, lease("w", deadline));
        Some(t)
    }

    /// The leases held per worker follow every way a lease starts and
    /// ends, a lease taken over by another worker included.
    #[test]
    fn leases_held_per_worker_follow_every_change() {
        let mut s = Schedule::default();
        s.plan(100);
        let mut seed = 7u64;
        for step in 0..2_000u64 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let (op, task, who) = (
                seed >> 60,
                (seed >> 20) % 100,
                ["a", "b", "c"][(seed >> 8) as usize % 3],
            );
            match op {
                0..=5 => {
                    if let Some(t) = s.next(|_| false) {
                        s.hold(t, lease(who, step + 50));
                    }
                }
                6 if !s.finished(task) => s.hold(task, lease(who, step + 50)),
                7 => s.finish(task),
                8 => drop(s.give_back(task)),
                9 => s.requeue(task),
                10 => drop(s.expire(step, 1_000, |_| 3)),
                11 if step % 50 == 0 => drop(s.drop_leases()),
                12 => s.revive(task),
                _ => {}
            }
            for w in ["a", "b", "c"] {
                let listed = s.leases().filter(|(_, l)| l.worker == w).count();
                assert_eq!(s.held_by(w), listed, "step {step}, worker {w}");
            }
        }
    }

    #[test]
    fn tasks_go_out_in_order_once_each_and_finished_ones_never() {
        let mut s = Schedule::default();
        s.finish(2); // from the journal, before planning
        assert_eq!(s.next(|_| false), None, "nothing before planning");
        s.plan(5);
        assert_eq!(s.pending(), 4);
        let got: Vec<u64> = std::iter::from_fn(|| take(&mut s, 10)).collect();
        assert_eq!(got, vec![0, 1, 3, 4]);
        assert_eq!(s.pending(), 0);
        s.finish(1);
        assert!(s.lease(1).is_none());
        assert_eq!(s.finished_count(), 2);
    }

    #[test]
    fn handed_back_tasks_go_first_and_skipped_ones_wait_for_another_taker() {
        let mut s = Schedule::default();
        s.plan(4);
        assert_eq!(s.next(|t| t == 0), Some(1), "0 is not for this taker");
        s.hold(1, lease("a", 10));
        assert_eq!(s.give_back(1).map(|l| l.worker), Some("a".into()));
        assert_eq!(s.pending(), 4);
        let got: Vec<u64> = std::iter::from_fn(|| take(&mut s, 10)).collect();
        assert_eq!(got, vec![0, 1, 2, 3], "nothing lost, nothing twice");
    }

    /// A taker that may take only the last of 10,000 tasks handed back
    /// looks at no more than its budget of them a call, and reaches it in
    /// as many calls as the budget divides them into.
    #[test]
    fn a_look_through_handed_back_tasks_is_bounded_and_goes_on() {
        let mut s = Schedule::default();
        s.plan(10_000);
        let skipped: Vec<u64> = std::iter::from_fn(|| s.next(|_| true)).collect();
        assert!(skipped.is_empty());
        let looked = std::cell::Cell::new(0);
        let only_last = |t: u64| {
            looked.set(looked.get() + 1);
            t != 9_999
        };
        for call in 0..10 {
            let mut budget = 1_000;
            let got = s.next_within(only_last, &mut budget);
            assert!(looked.replace(0) <= 1_000, "call {call}");
            assert_eq!(got, (call == 9).then_some(9_999), "call {call}");
        }
    }

    #[test]
    fn expired_tasks_back_off_then_return_and_die_after_the_budget() {
        let mut s = Schedule::default();
        s.plan(2);
        take(&mut s, 100);
        take(&mut s, 200);
        let gone = s.expire(150, 2, |a| 1_000 * u64::from(a));
        assert_eq!(gone.len(), 1);
        assert_eq!((gone[0].task, gone[0].dying), (0, false));
        assert_eq!(s.backing_off(), 1);
        assert_eq!(s.next(|_| false), None, "backing off");
        s.wake(1_149);
        assert_eq!(s.next(|_| false), None);
        s.wake(1_150);
        assert_eq!(take(&mut s, 2_000), Some(0));
        let gone = s.expire(2_000, 2, |a| 1_000 * u64::from(a));
        assert_eq!(gone.len(), 2);
        assert!(gone.iter().any(|e| e.task == 0 && e.dying), "second expiry");
        s.wake(u64::MAX - 1);
        assert_eq!(
            s.next(|_| false),
            Some(1),
            "only the task with retries left"
        );
        s.finish(0); // journaled dead
        assert_eq!(s.backing_off(), 0);
    }

    #[test]
    fn an_adopted_task_beyond_the_cursor_is_not_handed_out_again() {
        let mut s = Schedule::default();
        s.plan(3);
        s.hold(2, lease("old", 10));
        let got: Vec<u64> = std::iter::from_fn(|| take(&mut s, 10)).collect();
        assert_eq!(got, vec![0, 1]);
        s.requeue(2);
        assert_eq!(s.next(|_| false), Some(2));
    }
}
