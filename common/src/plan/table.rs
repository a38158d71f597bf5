//! A plan's task list, held as *runs* rather than one record per task, so
//! that a plan of 10^8 or 10^9 tasks costs the coordinator the size of its
//! groups, not of its tasks.
//!
//! Cutting a plan makes two kinds of task (see `TaskTable::cut`): a task
//! that takes one or more whole groups, and the equal parts of a group too
//! costly for one task. A run is one of the first, or *all* the parts of
//! one group; task `i` is derived from its run on demand. The tasks are the
//! same, one for one, as a list would hold.

use super::{Group, Task};
use serde::{Deserialize, Serialize};

/// One run of the task list: tasks `first..first + tasks()`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Index of the run's first task.
    pub first: u64,
    /// The ids the run covers, `lo..hi`.
    pub lo: u64,
    pub hi: u64,
    /// Subproblems in `lo..hi`.
    pub count: u64,
    /// Their estimated work, in the plan's relative units.
    pub work: f64,
    /// 0: one task of whole groups. Otherwise one group cut by count into
    /// this many tasks.
    pub parts: u64,
}

impl Run {
    /// All of group `g`, cut by count into `parts` tasks.
    fn split(g: &Group, parts: u64) -> Run {
        Run {
            first: 0,
            lo: g.lo,
            hi: g.hi,
            count: g.count,
            work: g.work,
            parts,
        }
    }

    /// A task of whole groups, to start with `g` (taken by [`Run::take`]).
    fn merged(g: &Group) -> Run {
        Run {
            first: 0,
            lo: g.lo,
            hi: g.hi,
            count: 0,
            work: 0.0,
            parts: 0,
        }
    }

    /// Adds whole group `g`, the next after the run's, to a merged run.
    fn take(&mut self, g: &Group) {
        self.hi = g.hi;
        self.count += g.count;
        self.work += g.work;
    }

    /// Tasks in this run.
    pub fn tasks(&self) -> u64 {
        self.parts.max(1)
    }

    /// Task `k` of this run (`k < tasks()`).
    fn task(&self, k: u64) -> Task {
        if self.parts == 0 {
            return Task {
                index: self.first,
                lo: self.lo,
                hi: self.hi,
                skip: 0,
                take: u64::MAX,
                subproblems: self.count,
                work: self.work,
            };
        }
        // u128: count × part can pass 2^64 (2·10^10 subproblems × parts).
        let at = |k: u64| (u128::from(self.count) * u128::from(k) / u128::from(self.parts)) as u64;
        let (skip, end) = (at(k), at(k + 1));
        Task {
            index: self.first + k,
            lo: self.lo,
            hi: self.hi,
            skip,
            take: end - skip,
            subproblems: end - skip,
            work: self.work * (end - skip) as f64 / self.count as f64,
        }
    }

    /// Bytes of [`Run::encode`].
    pub const BYTES: usize = 48;

    /// Fixed-size little-endian bytes, for the coordinator's store.
    pub fn encode(&self) -> [u8; Run::BYTES] {
        let mut out = [0u8; Run::BYTES];
        let words = [
            self.first,
            self.lo,
            self.hi,
            self.count,
            self.work.to_bits(),
            self.parts,
        ];
        for (chunk, w) in out.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// The run [`Run::encode`] wrote (`None` for a wrong length).
    pub fn decode(bytes: &[u8]) -> Option<Run> {
        if bytes.len() != Run::BYTES {
            return None;
        }
        let w = |i: usize| u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().expect("8 bytes"));
        Some(Run {
            first: w(0),
            lo: w(1),
            hi: w(2),
            count: w(3),
            work: f64::from_bits(w(4)),
            parts: w(5),
        })
    }
}

/// Why stored runs do not make a task table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("run {run} of the task table is inconsistent: {why}")]
pub struct TableError {
    pub run: usize,
    pub why: &'static str,
}

/// A plan's tasks, as runs (see the module's comment).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskTable {
    runs: Vec<Run>,
    len: u64,
}

impl TaskTable {
    /// Cuts groups into tasks of about `target` work, the way `cut` says
    /// (see [`super::CUT`]): small groups are merged, a group above the
    /// target is split by count into equal parts.
    pub(super) fn cut(groups: &[Group], target: f64, cut: u32) -> TaskTable {
        match cut {
            0 => Self::cut_merging(groups, target),
            _ => Self::cut_evenly(groups, target),
        }
    }

    /// Cut 0: groups merged until a task reaches the target, so tasks of
    /// small groups hold up to twice the target (fewer tasks than asked).
    fn cut_merging(groups: &[Group], target: f64) -> TaskTable {
        let mut table = TaskTable::default();
        let mut open: Option<Run> = None;
        for g in groups {
            if g.work > target && g.count > 1 {
                if let Some(r) = open.take() {
                    table.push(r);
                }
                let parts = ((g.work / target).ceil() as u64).clamp(1, g.count);
                table.push(Run::split(g, parts));
                continue;
            }
            let r = open.get_or_insert(Run::merged(g));
            r.take(g);
            if r.work >= target {
                table.push(open.take().expect("open run"));
            }
        }
        if let Some(r) = open {
            table.push(r);
        }
        table
    }

    /// Cut 1: task `k` ends where the work so far comes nearest to `k + 1`
    /// targets, and the last one at the end, so the plan has as many tasks
    /// as its work holds targets (give or take two; exactly as many when
    /// its groups are small) unless a group of many targets has too few
    /// subproblems to split.
    fn cut_evenly(groups: &[Group], target: f64) -> TaskTable {
        let total: f64 = groups.iter().map(|g| g.work).sum();
        let last = ((total / target).round() as u64).max(1);
        let mut table = TaskTable::default();
        let mut open: Option<Run> = None;
        let mut through = 0.0;
        for (i, g) in groups.iter().enumerate() {
            through += g.work;
            // Tasks that should have ended once this group is counted (all
            // but the last before the last group), and how many of them
            // this group makes if the open task ends first.
            let due = match i + 1 == groups.len() {
                true => last,
                false => ((through / target).round() as u64).min(last - 1),
            };
            let parts = due.saturating_sub(table.len() + u64::from(open.is_some()));
            if parts >= 2 && g.count > 1 {
                if let Some(r) = open.take() {
                    table.push(r);
                }
                table.push(Run::split(g, parts.min(g.count)));
                continue;
            }
            let r = open.get_or_insert(Run::merged(g));
            r.take(g);
            if due > table.len() {
                table.push(open.take().expect("open run"));
            }
        }
        if let Some(r) = open {
            table.push(r);
        }
        table
    }

    /// A table of tasks that each take all `subproblems` of their range,
    /// one run (of one part) each: a synthetic plan's, when it is listed.
    pub(super) fn of(tasks: impl Iterator<Item = Task>) -> TaskTable {
        let mut table = TaskTable::default();
        for t in tasks {
            table.push(Run {
                first: 0,
                lo: t.lo,
                hi: t.hi,
                count: t.subproblems,
                work: t.work,
                parts: 1,
            });
        }
        table
    }

    fn push(&mut self, mut r: Run) {
        r.first = self.len;
        self.len += r.tasks();
        self.runs.push(r);
    }

    /// A table from stored runs, checked: consecutive task indices, ranges
    /// in order, and no run cut into more parts than it has subproblems.
    pub fn from_runs(runs: Vec<Run>) -> Result<TaskTable, TableError> {
        let mut table = TaskTable::default();
        let mut last_hi = 0;
        for (run, r) in runs.into_iter().enumerate() {
            let bad = |why| Err(TableError { run, why });
            if r.first != table.len {
                return bad("its first task does not follow the previous run's");
            }
            if r.lo >= r.hi || r.lo < last_hi {
                return bad("its id range is empty or overlaps the previous run's");
            }
            if r.count == 0 || r.parts > r.count {
                return bad("it has no subproblems, or more parts than subproblems");
            }
            if !(r.work.is_finite() && r.work >= 0.0) {
                return bad("its work is not a finite, non-negative number");
            }
            last_hi = r.hi;
            table.len = table.len.checked_add(r.tasks()).ok_or(TableError {
                run,
                why: "more than 2^64 tasks",
            })?;
            table.runs.push(r);
        }
        Ok(table)
    }

    /// How many tasks.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The runs, in task order (what the coordinator stores).
    pub fn runs(&self) -> &[Run] {
        &self.runs
    }

    /// Task `index`, derived from its run (a binary search).
    pub fn get(&self, index: u64) -> Option<Task> {
        if index >= self.len {
            return None;
        }
        let at = self.runs.partition_point(|r| r.first <= index) - 1;
        let r = &self.runs[at];
        Some(r.task(index - r.first))
    }

    /// Every task, in index order.
    pub fn iter(&self) -> impl Iterator<Item = Task> + '_ {
        self.runs
            .iter()
            .flat_map(|r| (0..r.tasks()).map(move |k| r.task(k)))
    }

    /// The estimated work of every task (as their sum: runs add up their
    /// groups' work in the same order).
    pub fn work(&self) -> f64 {
        self.runs.iter().map(|r| r.work).sum()
    }

    /// The estimated work of the tasks for which `done` holds, a run at a
    /// time (a run's parts share its work by count).
    pub fn work_of(&self, mut done: impl FnMut(u64) -> bool) -> f64 {
        let mut sum = 0.0;
        for r in &self.runs {
            if r.parts == 0 {
                if done(r.first) {
                    sum += r.work;
                }
                continue;
            }
            for k in 0..r.parts {
                if done(r.first + k) {
                    sum += r.task(k).work;
                }
            }
        }
        sum
    }
}

impl<'a> IntoIterator for &'a TaskTable {
    type Item = Task;
    type IntoIter = Box<dyn Iterator<Item = Task> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(lo: u64, count: u64, work: f64) -> Group {
        Group {
            lo,
            hi: lo + 2 * count,
            count,
            work,
        }
    }

    #[test]
    fn small_groups_merge_and_a_costly_one_is_cut_into_equal_parts() {
        let groups = [
            group(0, 3, 1.0),
            group(10, 2, 1.0),
            group(20, 10, 10.0),
            group(100, 1, 0.5),
        ];
        let t = TaskTable::cut(&groups, 2.0, 0);
        let tasks: Vec<Task> = t.iter().collect();
        // Two small groups make one task; the big one five; the last one.
        assert_eq!(t.len(), 7);
        assert_eq!(t.runs().len(), 3);
        assert_eq!((tasks[0].lo, tasks[0].hi, tasks[0].subproblems), (0, 14, 5));
        for (k, task) in tasks[1..6].iter().enumerate() {
            assert_eq!((task.lo, task.hi), (20, 40));
            assert_eq!((task.skip, task.take), (2 * k as u64, 2));
            assert_eq!(task.work, 2.0);
        }
        assert_eq!(
            (tasks[6].lo, tasks[6].skip, tasks[6].take),
            (100, 0, u64::MAX)
        );
        for (i, task) in tasks.iter().enumerate() {
            assert_eq!(task.index, i as u64);
            assert_eq!(t.get(i as u64), Some(*task));
        }
        assert_eq!(t.get(7), None);
        assert_eq!(t.work(), 12.5);
        assert_eq!(t.work_of(|i| i == 0 || i == 3), 4.0);
    }

    #[test]
    fn a_huge_group_cut_into_many_parts_stays_one_run_and_its_parts_tile_it() {
        // 2·10^10 subproblems in 10^9 parts: count × part passes 2^64.
        let g = group(0, 20_000_000_000, 1e9);
        let t = TaskTable::cut(&[g], 1.0, 1);
        assert_eq!((t.len(), t.runs().len()), (1_000_000_000, 1));
        let last = t.get(t.len() - 1).unwrap();
        assert_eq!(last.skip + last.take, g.count);
        let mid = t.get(500_000_000).unwrap();
        assert_eq!((mid.skip, mid.take), (10_000_000_000, 20));
    }

    #[test]
    fn stored_runs_round_trip_and_damaged_ones_are_refused() {
        let groups: Vec<Group> = (0..50)
            .map(|i| group(i * 100, 1 + i % 7, (i % 5) as f64 + 0.5))
            .collect();
        let t = TaskTable::cut(&groups, 3.0, 1);
        let bytes: Vec<u8> = t.runs().iter().flat_map(|r| r.encode()).collect();
        let back: Vec<Run> = bytes
            .chunks(Run::BYTES)
            .map(|c| Run::decode(c).unwrap())
            .collect();
        assert_eq!(TaskTable::from_runs(back.clone()).unwrap(), t);
        assert_eq!(Run::decode(&bytes[..Run::BYTES - 1]), None);

        let mut gap = back.clone();
        gap[2].first += 1;
        assert_eq!(TaskTable::from_runs(gap).unwrap_err().run, 2);
        let mut order = back.clone();
        order.swap(1, 2);
        assert!(TaskTable::from_runs(order).is_err());
        let mut parts = back;
        parts[0].parts = parts[0].count + 1;
        assert!(TaskTable::from_runs(parts).is_err());
    }

    /// The tasks of `t` tile `groups`: in order, every subproblem once.
    fn tiles(t: &TaskTable, groups: &[Group]) -> bool {
        let total: u64 = groups.iter().map(|g| g.count).sum();
        let taken: u64 = t.iter().map(|task| task.subproblems).sum();
        let in_order = t.iter().zip(t.iter().skip(1)).all(|(a, b)| a.lo <= b.lo);
        taken == total && in_order
    }

    #[test]
    fn the_even_cut_makes_as_many_tasks_as_asked_where_the_merging_cut_made_fewer() {
        // 300 groups of 0.6 targets: merging makes tasks of 1.2 targets.
        let groups: Vec<Group> = (0..300).map(|i| group(i * 10, 3, 0.6)).collect();
        let (merging, even) = (
            TaskTable::cut(&groups, 1.0, 0),
            TaskTable::cut(&groups, 1.0, 1),
        );
        assert_eq!((merging.len(), even.len()), (150, 180));
        assert!(tiles(&even, &groups));
    }

    proptest::proptest! {
        /// Whatever the groups (each with subproblems enough to split), the
        /// even cut makes the work's number of targets in tasks, give or
        /// take two, and its tasks tile the groups.
        #[test]
        fn the_even_cut_hits_the_asked_number_of_tasks(
            works in proptest::collection::vec(0.001f64..4.0, 1..400),
            target in 0.05f64..20.0,
        ) {
            let groups: Vec<Group> = works
                .iter()
                .enumerate()
                .map(|(i, &w)| group(i as u64 * 10_000, 4_000, w))
                .collect();
            let t = TaskTable::cut(&groups, target, 1);
            let due = (works.iter().sum::<f64>() / target).round() as u64;
            proptest::prop_assert!(t.len().abs_diff(due.max(1)) <= 2, "{} tasks for {due}", t.len());
            proptest::prop_assert!(tiles(&t, &groups));
        }
    }
}
