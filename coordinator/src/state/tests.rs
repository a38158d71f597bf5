//! Tests of the state as a whole: the records and calls of whole jobs.

/// The task table a coordinator keeps for `plan`.
fn table_of(plan: &super::Plan) -> super::TaskTable {
    plan.schedule().tasks
}

mod whole {
    use super::super::lease_id::EPOCH_SHIFT;
    use super::super::*;
    use super::table_of;
    use nqueens_common::plan::{Mode, Strategy};
    use nqueens_common::Size;
    use std::collections::BTreeSet;

    const TTL: u64 = 10_000;
    const KEY: LeaseKey = [7; 32];

    fn spec(n: u32, strategy: Strategy, tasks: u64) -> PlanSpec {
        PlanSpec {
            n: Size::new(n).unwrap(),
            strategy,
            depth: 3,
            tasks,
            mode: Mode::Backtrack,
            cut: nqueens_common::plan::CUT,
        }
    }

    /// A state with one planned, running job (id 1), booted in `epoch`.
    fn running(spec: PlanSpec, epoch: u64) -> (State, Plan, Vec<Task>) {
        running_checked(spec, epoch, 0, 1.0, false)
    }

    /// [`running`] with every task needing `redundancy` agreeing workers.
    fn running_checked(
        spec: PlanSpec,
        epoch: u64,
        redundancy: u32,
        verify_fraction: f64,
        cross_device: bool,
    ) -> (State, Plan, Vec<Task>) {
        let mut s = State::new(Limits {
            lease_ttl_ms: TTL,
            retry_budget: 3,
            backoff_base_ms: 1_000,
            backoff_max_ms: 4_000,
            ..Limits::default()
        });
        s.set_lease_key(KEY);
        s.apply(&Event::Boot { epoch, unix_ms: 0 }).unwrap();
        s.apply(&Event::JobSubmitted {
            job: 1,
            spec,
            unix_ms: 5,
            checking: Checking {
                redundancy,
                fraction: verify_fraction,
                cross_device,
            },
        })
        .unwrap();
        let plan = Plan::new(spec).unwrap();
        let table = table_of(&plan);
        let tasks: Vec<Task> = table.iter().collect();
        s.apply(&Event::JobPlanned {
            job: 1,
            tasks: tasks.len() as u64,
            digest: digest(&table),
        })
        .unwrap();
        s.attach_tasks(1, TaskList::Listed(table)).unwrap();
        (s, plan, tasks)
    }

    fn done(job: u64, task: u64, t: &Tally, worker: &str, lease_id: u64) -> Event {
        Event::TaskDone(Done {
            job,
            task,
            outcome: Outcome {
                tally: *t,
                ..Outcome::default()
            },
            worker: worker.into(),
            lease_id,
            unix_ms: 1,
            credential: String::new(),
        })
    }

    fn lref(g: &Granted) -> LeaseRef {
        LeaseRef {
            job: g.job,
            task: g.task.index,
            lease_id: g.lease_id,
        }
    }

    /// Leases, counts and reports every task as one worker would.
    fn run_all(s: &mut State, plan: &Plan, worker: &str, now: u64) {
        loop {
            let g = s.lease(worker, 3, now);
            if g.is_empty() {
                break;
            }
            for g in g {
                let t = plan.count_task(&g.task).unwrap();
                assert_eq!(s.check_report(worker, &lref(&g), &t, 0), Ok(Verdict::New));
                assert_eq!(
                    s.apply(&done(g.job, g.task.index, &t, worker, g.lease_id))
                        .unwrap(),
                    Some(Verdict::New)
                );
            }
        }
    }

    /// Leases one task to `worker` and reports `tally` for it.
    fn report_one(s: &mut State, worker: &str, tally: &Tally) -> (u64, Verdict) {
        let g = s.lease(worker, 1, 0).remove(0);
        let v = s.check_report(worker, &lref(&g), tally, 7).unwrap();
        assert_eq!(v, Verdict::New, "not yet stored");
        let applied = s.apply(&done(1, g.task.index, tally, worker, g.lease_id));
        (g.task.index, applied.unwrap().unwrap())
    }

    /// A worker whose result waits for a check cannot take the task back
    /// by heartbeating its old lease: another credential must count it.
    #[test]
    fn a_heartbeat_never_adopts_a_task_its_worker_voted_on() {
        let (mut s, plan, tasks) = running_checked(spec(8, Strategy::Frame, 3), 1, 2, 1.0, false);
        let g = s.lease("a", 1, 0).remove(0);
        let t = plan.count_task(&tasks[g.task.index as usize]).unwrap();
        let v = s.apply(&done(1, g.task.index, &t, "a", g.lease_id));
        assert_eq!(v, Ok(Some(Verdict::AwaitingCheck)));
        let (extended, _, stop) = s.heartbeat("a", &[lref(&g)], 0, 1);
        assert_eq!((extended, stop), (vec![], vec![lref(&g)]));
        let h = s.lease("b", 1, 2).remove(0);
        assert_eq!(
            h.task.index, g.task.index,
            "the check goes to another worker"
        );
    }

    /// The ids of one issued credential hold `MOST_HELD_PER_VOTER` leases
    /// at most, all together; another credential still gets tasks, and a
    /// lease handed back makes room again.
    #[test]
    fn one_credentials_ids_together_hold_at_most_their_share() {
        let (mut s, _, tasks) = running(spec(20, Strategy::Rings, 70_000), 1);
        assert!(
            tasks.len() > MOST_HELD_PER_VOTER + 10,
            "{} tasks",
            tasks.len()
        );
        let mut held = Vec::new();
        for i in 0..=MOST_HELD_PER_VOTER / MOST_HELD {
            let id = format!("m{i}");
            s.bind(&id, "mallory").unwrap();
            loop {
                let g = s.lease(&id, 1024, 0);
                if g.is_empty() {
                    break;
                }
                held.extend(g.iter().map(|g| (id.clone(), lref(g))));
            }
        }
        assert_eq!(held.len(), MOST_HELD_PER_VOTER);
        s.bind("a", "alice").unwrap();
        assert_eq!(s.lease("a", 10, 0).len(), 10);
        let (id, r) = &held[0];
        s.release(id, &[*r], 0);
        assert_eq!(s.lease("m16", 10, 0).len(), 1);
    }

    /// A credential that voted on more tasks of an older job than a lease
    /// call looks at (they wait for another credential) still gets a task
    /// handed back in a later job: each job has its own look.
    #[test]
    fn many_tasks_awaiting_a_check_in_one_job_never_starve_the_next() {
        let (mut s, _, tasks) = running_checked(spec(20, Strategy::Rings, 9_000), 1, 2, 1.0, false);
        assert!(tasks.len() > LOOK_PER_LEASE, "{} tasks", tasks.len());
        let zero = Tally::default();
        loop {
            let g = s.lease("a", 1024, 0);
            if g.is_empty() {
                break;
            }
            for g in g {
                let v = s.apply(&done(1, g.task.index, &zero, "a", g.lease_id));
                assert_eq!(v, Ok(Some(Verdict::AwaitingCheck)));
            }
        }
        let small = spec(8, Strategy::Frame, 3);
        s.apply(&Event::JobSubmitted {
            job: 2,
            spec: small,
            unix_ms: 6,
            checking: Checking {
                redundancy: 0,
                fraction: 1.0,
                cross_device: false,
            },
        })
        .unwrap();
        let table = table_of(&Plan::new(small).unwrap());
        s.apply(&Event::JobPlanned {
            job: 2,
            tasks: table.len(),
            digest: digest(&table),
        })
        .unwrap();
        s.attach_tasks(2, TaskList::Listed(table)).unwrap();
        let g = s.lease("a", 1024, 0);
        assert!(!g.is_empty() && g.iter().all(|g| g.job == 2));
        s.release("a", &[lref(&g[0])], 0);
        let again = s.lease("a", 1, 0);
        assert_eq!(
            again
                .iter()
                .map(|g| (g.job, g.task.index))
                .collect::<Vec<_>>(),
            [(2, g[0].task.index)]
        );
    }

    #[test]
    fn redundancy_counts_a_task_once_two_workers_agree_and_quarantines_a_liar() {
        let (mut s, plan, tasks) = running_checked(spec(8, Strategy::Frame, 3), 1, 2, 1.0, false);
        let right = plan.count_task(&tasks[0]).unwrap();
        let mut wrong = right;
        wrong.weighted += 8; // plausible, but not the truth
                             // The liar goes first: stored, not counted, and back in the queue.
        let (t, v) = report_one(&mut s, "liar", &wrong);
        assert_eq!((t, v), (0, Verdict::AwaitingCheck));
        assert_eq!(s.job(1).unwrap().view().done, 0);
        assert_eq!(s.job(1).unwrap().view().checking, 1);
        // An honest worker disagrees: still not counted (one each).
        assert_eq!(
            report_one(&mut s, "w1", &right),
            (0, Verdict::AwaitingCheck)
        );
        // A worker never checks its own result: w1 gets task 1, not 0.
        let g = s.lease("w1", 1, 0);
        assert_eq!(g[0].task.index, 1);
        s.release("w1", &[lref(&g[0])], 0);
        // A third worker agrees with w1: counted once; the liar is the odd
        // one out, recorded and quarantined.
        assert_eq!(report_one(&mut s, "w2", &right), (0, Verdict::New));
        let v = s.job(1).unwrap().view();
        assert_eq!((v.done, v.checking, v.conflicts), (1, 0, 1));
        let liar = s.workers().find(|w| w.id == "liar").unwrap();
        assert!(liar.quarantined());
        assert!(s.lease("liar", 5, 0).is_empty(), "no work for a liar");
        // The rest, each by two workers, gives the exact counts.
        loop {
            let g = s.lease("w1", 1, 0);
            let Some(g) = g.first() else { break };
            let t = plan.count_task(&g.task).unwrap();
            s.apply(&done(1, g.task.index, &t, "w1", g.lease_id))
                .unwrap();
            let h = s.lease("w2", 1, 0).remove(0);
            assert_eq!(h.task.index, g.task.index);
            let v = s
                .apply(&done(1, h.task.index, &t, "w2", h.lease_id))
                .unwrap();
            assert_eq!(v, Some(Verdict::New));
        }
        let v = s.job(1).unwrap().view();
        assert_eq!((v.state, v.total, v.unique), (JobState::Done, 92, 12));
        // Both honest workers computed every task: both get the credit;
        // the liar gets none.
        let done = |id: &str| s.workers().find(|w| w.id == id).unwrap().tasks_done;
        assert_eq!(
            (done("w1"), done("w2"), done("liar")),
            (tasks.len() as u64, tasks.len() as u64, 0)
        );
    }

    #[test]
    fn a_verify_fraction_checks_a_stable_share_of_the_tasks() {
        let (mut s, plan, tasks) = running_checked(spec(10, Strategy::Frame, 40), 1, 2, 0.5, false);
        let checked: Vec<u64> = (0..tasks.len() as u64)
            .filter(|&t| s.job(1).unwrap().needs(t) == 2)
            .collect();
        let n = tasks.len();
        assert!(
            checked.len() > n / 5 && checked.len() < n * 4 / 5,
            "{checked:?} of {n}"
        );
        // Two workers take turns: unchecked tasks count at once, checked
        // ones when the second worker agrees.
        for (w, other) in [("w1", "w2"), ("w2", "w1")].into_iter().cycle() {
            let Some(g) = s.lease(w, 1, 0).pop() else {
                let Some(g) = s.lease(other, 1, 0).pop() else {
                    break;
                };
                let t = plan.count_task(&g.task).unwrap();
                s.apply(&done(1, g.task.index, &t, other, g.lease_id))
                    .unwrap();
                continue;
            };
            let t = plan.count_task(&g.task).unwrap();
            let v = s.apply(&done(1, g.task.index, &t, w, g.lease_id)).unwrap();
            let want = if checked.contains(&g.task.index) && s.job(1).unwrap().view().checking > 0 {
                Verdict::AwaitingCheck
            } else {
                Verdict::New
            };
            assert_eq!(v, Some(want), "task {}", g.task.index);
        }
        let v = s.job(1).unwrap().view();
        assert_eq!((v.state, v.total, v.unique), (JobState::Done, 724, 92));
    }

    #[test]
    fn a_job_runs_to_exact_counts() {
        for strategy in [Strategy::Frame, Strategy::Prefix] {
            let (mut s, plan, tasks) = running(spec(10, strategy, 7), 1);
            assert_eq!(s.job(1).unwrap().view().pending, tasks.len() as u64);
            run_all(&mut s, &plan, "w1", 100);
            let v = s.job(1).unwrap().view();
            assert_eq!(v.state, JobState::Done);
            assert_eq!((v.total, v.unique), (724, 92), "{strategy}");
            assert_eq!((v.done, v.pending, v.leased), (tasks.len() as u64, 0, 0));
            assert!((v.work_done - v.work_total).abs() < 1e-6 * v.work_total);
            let w = s.workers().next().unwrap();
            assert_eq!(w.tasks_done, tasks.len() as u64);
            let subproblems: u64 = tasks.iter().map(|t| t.subproblems).sum();
            assert_eq!(w.subproblems_done, subproblems);
        }
    }

    /// A state with one synthetic job (id 1) of `tasks` tasks, planned.
    fn synthetic(tasks: u64) -> (State, Plan) {
        synthetic_keeping(tasks, Limits::default().results_in_memory)
    }

    /// [`synthetic`], keeping `keep` counted results in memory.
    fn synthetic_keeping(tasks: u64, keep: Option<usize>) -> (State, Plan) {
        let mut s = State::new(Limits {
            lease_ttl_ms: TTL,
            retry_budget: 100,
            results_in_memory: keep,
            ..Limits::default()
        });
        s.set_lease_key(KEY);
        let spec = PlanSpec {
            n: Size::new(8).unwrap(),
            strategy: Strategy::Synthetic,
            depth: 0,
            tasks,
            mode: Mode::Backtrack,
            cut: nqueens_common::plan::CUT,
        };
        s.apply(&Event::JobSubmitted {
            job: 1,
            spec,
            unix_ms: 0,
            checking: Checking {
                redundancy: 1,
                fraction: 1.0,
                cross_device: false,
            },
        })
        .unwrap();
        let plan = Plan::new(spec).unwrap();
        let list = TaskList::of(&plan, &std::sync::atomic::AtomicBool::new(false)).unwrap();
        assert!(matches!(list, TaskList::Derived(..)), "never listed");
        s.apply(&Event::JobPlanned {
            job: 1,
            tasks,
            digest: list.digest(),
        })
        .unwrap();
        s.attach_tasks(1, list).unwrap();
        (s, plan)
    }

    #[test]
    fn a_synthetic_job_sums_exactly_through_expiries_releases_and_retries() {
        let (mut s, plan) = synthetic(1_000);
        let mut now = 0;
        let mut round = 0u64;
        while s.job(1).unwrap().state() != JobState::Done {
            round += 1;
            for (k, g) in s
                .lease(&format!("w{}", round % 7), 16, now)
                .into_iter()
                .enumerate()
            {
                match (k as u64 + round) % 5 {
                    0 => {} // abandoned: expires
                    1 => {
                        s.release(&format!("w{}", round % 7), &[lref(&g)], now);
                    }
                    _ => {
                        let t = plan.count_task(&g.task).unwrap();
                        let w = format!("w{}", round % 7);
                        assert_eq!(s.check_report(&w, &lref(&g), &t, 0), Ok(Verdict::New));
                        s.apply(&done(1, g.task.index, &t, &w, g.lease_id)).unwrap();
                    }
                }
            }
            now += TTL / 3;
            assert!(
                s.expire(now).iter().all(|e| !e.dying),
                "no task runs out of retries"
            );
            assert!(round < 10_000, "the job never ends");
        }
        let v = s.job(1).unwrap().view();
        let sum = nqueens_common::plan::synthetic_sum(1_000);
        assert_eq!((v.total, v.unique), (sum, sum));
        assert_eq!((v.done, v.pending, v.leased, v.failed), (1_000, 0, 0, 0));
    }

    #[test]
    fn a_synthetic_job_of_a_hundred_million_tasks_is_planned_at_once_and_checked_exactly() {
        let (mut s, plan) = synthetic(100_000_000);
        let v = s.job(1).unwrap().view();
        assert_eq!(
            (v.tasks, v.pending, v.state),
            (100_000_000, 100_000_000, JobState::Running)
        );
        let g = s.lease("w", 3, 0);
        assert_eq!(
            g.iter().map(|g| g.task.index).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        let mut wrong = plan.count_task(&g[0].task).unwrap();
        wrong.weighted += 1;
        assert!(matches!(
            s.check_report("w", &lref(&g[0]), &wrong, 0),
            Err(StateError::Implausible { .. })
        ));
        let right = plan.count_task(&g[1].task).unwrap();
        assert_eq!(right.weighted, nqueens_common::plan::synthetic_answer(1));
        s.apply(&done(1, 1, &right, "w", g[1].lease_id)).unwrap();
        let v = s.job(1).unwrap().view();
        assert_eq!((v.done, v.leased, v.pending), (1, 2, 100_000_000 - 3));
        assert_eq!(v.total, right.weighted);
    }

    #[test]
    fn old_results_leave_memory_but_are_never_counted_twice() {
        let (mut s, plan) = synthetic_keeping(10, Some(2));
        let g = s.lease("w", 10, 0);
        for g in &g {
            let t = plan.count_task(&g.task).unwrap();
            s.apply(&done(1, g.task.index, &t, "w", g.lease_id))
                .unwrap();
        }
        let job = s.job(1).unwrap();
        assert_eq!(job.results().count(), 2, "only the latest in memory");
        assert!(job.counted(0) && job.result(0).is_none());
        let t0 = plan.count_task(&g[0].task).unwrap();
        // The same report again: the store must be asked.
        assert_eq!(
            s.check_report("w", &lref(&g[0]), &t0, 0),
            Err(StateError::ResultNotInMemory { job: 1, task: 0 })
        );
        // A forged one is still refused outright.
        let forged = LeaseRef {
            lease_id: g[0].lease_id ^ 1,
            ..lref(&g[0])
        };
        assert!(matches!(
            s.check_report("w", &forged, &t0, 0),
            Err(StateError::NotLeased { .. })
        ));
        // A record that lost a race adds nothing.
        let before = *s.job(1).unwrap().tally();
        assert_eq!(
            s.apply(&done(1, 0, &t0, "w", g[0].lease_id)).unwrap(),
            Some(Verdict::Duplicate)
        );
        let v = s.job(1).unwrap().view();
        assert_eq!(*s.job(1).unwrap().tally(), before);
        let sum = nqueens_common::plan::synthetic_sum(10);
        assert_eq!((v.done, v.total, v.state), (10, sum, JobState::Done));
    }

    #[test]
    fn rate_and_eta_follow_the_results() {
        let (mut s, plan, tasks) = running(spec(12, Strategy::Frame, 40), 1);
        assert!(tasks.len() >= 30, "{} tasks", tasks.len());
        assert_eq!(
            s.job(1).unwrap().view().eta_seconds,
            None,
            "no rate before two results"
        );
        // Results at one unit of estimated work per second.
        let granted = s.lease("w", tasks.len(), 0);
        let mut clock = 0.0;
        for (k, g) in granted.iter().enumerate() {
            let t = plan.count_task(&g.task).unwrap();
            clock += g.task.work;
            let mut r = done(1, g.task.index, &t, "w", g.lease_id);
            if let Event::TaskDone(d) = &mut r {
                d.unix_ms = (clock * 1_000.0) as u64;
            }
            s.apply(&r).unwrap();
            let v = s.job(1).unwrap().view();
            if k == 1 {
                assert!(v.work_per_second > 0.0, "a rate from two results");
                assert_eq!(v.eta_seconds, None, "but no ETA from so few");
            }
            if k == granted.len() - 3 {
                let (eta, error) = (v.eta_seconds.unwrap(), v.eta_error_seconds.unwrap());
                let left = v.work_total - v.work_done;
                assert!((eta - left).abs() < 0.05 * left, "{eta} vs {left}");
                assert!(error < 0.05 * eta, "{error}");
                // While its worker calls, the job goes on and has an ETA;
                // with none heard from within a lease's life, it waits for
                // workers and has none.
                let now = (clock * 1_000.0) as u64;
                s.touch_worker("w", now);
                assert!(s.job_view(1, now).unwrap().eta_seconds.is_some());
                let later = s.job_view(1, now + TTL + 1).unwrap();
                assert!(later.waiting_for.is_some() && later.eta_seconds.is_none());
                return;
            }
        }
        unreachable!("the ETA was checked");
    }

    #[test]
    fn duplicates_never_add_and_differences_are_conflicts() {
        let (mut s, plan, _) = running(spec(8, Strategy::Frame, 3), 1);
        let g = s.lease("w1", 1, 0).remove(0);
        let t = plan.count_task(&g.task).unwrap();
        s.apply(&done(1, g.task.index, &t, "w1", g.lease_id))
            .unwrap();
        let before = *s.job(1).unwrap().tally();
        // The same result again (a lost answer): a duplicate, nothing added.
        assert_eq!(
            s.check_report("w1", &lref(&g), &t, 0),
            Ok(Verdict::Duplicate)
        );
        // Anyone else, with that lease: refused.
        assert!(matches!(
            s.check_report("w2", &lref(&g), &t, 0),
            Err(StateError::NotLeased { .. })
        ));
        assert_eq!(
            s.apply(&done(1, g.task.index, &t, "w2", 99)).unwrap(),
            Some(Verdict::Duplicate)
        );
        // A different result: a conflict, recorded, nothing added.
        let mut wrong = t;
        wrong.weighted += 8;
        assert_eq!(
            s.check_report("w1", &lref(&g), &wrong, 0),
            Ok(Verdict::Conflict)
        );
        assert_eq!(
            s.apply(&done(1, g.task.index, &wrong, "w2", 99)).unwrap(),
            Some(Verdict::Conflict)
        );
        assert_eq!(*s.job(1).unwrap().tally(), before);
        assert_eq!(s.job(1).unwrap().conflicts().len(), 1);
        // A report that passed its check before the counted one was
        // applied (two calls racing) is contradicted all the same.
        assert!(s.quarantined("w2"));
        assert!(!s.quarantined("w1"));
    }

    #[test]
    fn expired_leases_go_back_after_a_backoff_and_late_results_count_only_while_unclaimed() {
        let (mut s, plan, _) = running(spec(8, Strategy::Frame, 2), 1);
        let first = s.lease("slow", 1, 0).remove(0);
        // Heartbeats keep it alive past the original deadline.
        let (ext, deadline, stop) = s.heartbeat("slow", &[lref(&first)], 0, TTL - 1);
        assert_eq!((ext.len(), deadline, stop.len()), (1, 2 * TTL - 1, 0));
        assert!(s.expire(TTL + 1).is_empty());
        assert_eq!(s.job(1).unwrap().view().leased, 1);
        // Silence past the deadline: the task leaves the lease...
        let gone = s.expire(2 * TTL);
        assert_eq!(
            gone,
            vec![Expiry {
                job: 1,
                task: first.task.index,
                worker: "slow".into(),
                dying: false
            }]
        );
        let v = s.job(1).unwrap().view();
        assert_eq!((v.leased, v.failed), (0, 1));
        // ...and waits out its backoff (1 s) before anyone gets it again.
        let others: Vec<u64> = s
            .lease("fast", 10, 2 * TTL)
            .iter()
            .map(|g| g.task.index)
            .collect();
        assert!(!others.contains(&first.task.index));
        let again = s.lease("fast", 10, 2 * TTL + 1_000);
        let second = again
            .iter()
            .find(|g| g.task.index == first.task.index)
            .expect("re-leased after backoff")
            .clone();
        // The old holder is told to stop at its next heartbeat.
        let (_, _, stop) = s.heartbeat("slow", &[lref(&first)], 0, 2 * TTL + 1_001);
        assert_eq!(stop, vec![lref(&first)]);
        // Its late result is refused now that another worker holds the task...
        let t = plan.count_task(&first.task).unwrap();
        assert!(matches!(
            s.check_report("slow", &lref(&first), &t, 0),
            Err(StateError::NotLeased { .. })
        ));
        assert_eq!(
            s.check_report("fast", &lref(&second), &t, 0),
            Ok(Verdict::New)
        );
        // ...but welcome while nobody holds it (first valid result wins).
        let (mut s, plan, _) = running(spec(8, Strategy::Frame, 2), 1);
        let first = s.lease("slow", 1, 0).remove(0);
        s.expire(TTL);
        let t = plan.count_task(&first.task).unwrap();
        assert_eq!(
            s.check_report("slow", &lref(&first), &t, 0),
            Ok(Verdict::New)
        );
        assert!(matches!(
            s.check_report("other", &lref(&first), &t, 0),
            Err(StateError::NotLeased { .. })
        ));
    }

    #[test]
    fn a_task_out_of_retries_is_reported_dying() {
        let (mut s, _, _) = running(spec(8, Strategy::Frame, 1), 1);
        let mut now = 0;
        for attempt in 1..=3 {
            let g = s.lease("w", 1, now);
            assert_eq!(g.len(), 1, "attempt {attempt}");
            now += TTL;
            let gone = s.expire(now);
            assert_eq!(gone.len(), 1);
            assert_eq!((gone[0].job, gone[0].task), (1, g[0].task.index));
            if attempt < 3 {
                assert!(!gone[0].dying);
                now += 4_000; // past the longest backoff
            } else {
                assert!(gone[0].dying);
            }
        }
        s.apply(&Event::TaskDead {
            job: 1,
            task: 0,
            reason: "out of retries".into(),
        })
        .unwrap();
        let v = s.job(1).unwrap().view();
        assert_eq!((v.dead, v.pending, v.failed), (1, 0, 0));
        assert!(s.lease("w", 1, now + 10_000).is_empty());
    }

    #[test]
    fn retried_dead_tasks_are_handed_out_again_and_the_job_finishes() {
        let (mut s, plan, tasks) = running(spec(8, Strategy::Frame, 3), 1);
        for t in [0, 2] {
            s.apply(&Event::TaskDead {
                job: 1,
                task: t,
                reason: "out of retries".into(),
            })
            .unwrap();
        }
        run_all(&mut s, &plan, "w", 0);
        let v = s.job(1).unwrap().view();
        assert_eq!(
            (v.state, v.dead, v.done),
            (JobState::Running, 2, tasks.len() as u64 - 2)
        );
        let retried = Event::TasksRetried { job: 1, unix_ms: 9 };
        s.apply(&retried).unwrap();
        let v = s.job(1).unwrap().view();
        assert_eq!((v.dead, v.pending), (0, 2));
        let again: Vec<u64> = s.lease("w", 9, 1).iter().map(|g| g.task.index).collect();
        assert_eq!(again, vec![0, 2], "the dead ones, and only they");
        let (mut fresh, _, _) = running(spec(8, Strategy::Frame, 3), 1);
        for t in [0, 2] {
            fresh
                .apply(&Event::TaskDead {
                    job: 1,
                    task: t,
                    reason: "out of retries".into(),
                })
                .unwrap();
        }
        fresh.apply(&retried).unwrap();
        // A replay of the same records (no leases) schedules them too.
        let mut pending: Vec<u64> = fresh
            .lease("x", 9, 1)
            .iter()
            .map(|g| g.task.index)
            .collect();
        pending.sort();
        assert_eq!(pending, (0..tasks.len() as u64).collect::<Vec<_>>());
        for g in s
            .job(1)
            .unwrap()
            .schedule
            .leases()
            .map(|(t, _)| *t)
            .collect::<Vec<_>>()
        {
            let t = plan.count_task(&tasks[g as usize]).unwrap();
            s.apply(&done(1, g, &t, "w", 0)).unwrap();
        }
        let v = s.job(1).unwrap().view();
        assert_eq!((v.state, v.total, v.unique), (JobState::Done, 92, 12));
    }

    #[test]
    fn leases_from_before_a_restart_are_adopted_by_their_heartbeat() {
        let (mut s, _, _) = running(spec(8, Strategy::Frame, 3), 2);
        let old = LeaseRef {
            job: 1,
            task: 1,
            lease_id: lease_id(&KEY, 1, 1, 1, "w"),
        };
        // Another worker cannot adopt it, nor anyone a made-up id.
        assert_eq!(s.heartbeat("x", &[old], 0, 9).2, vec![old]);
        for id in [
            0,
            1,
            old.lease_id + 1,
            old.lease_id ^ 1 << 60,
            1 << EPOCH_SHIFT,
        ] {
            let forged = LeaseRef {
                lease_id: id,
                ..old
            };
            assert_eq!(s.heartbeat("w", &[forged], 0, 9).2, vec![forged], "{id:#x}");
        }
        let (ext, _, stop) = s.heartbeat("w", &[old], 0, 10);
        assert_eq!((ext, stop), (vec![old], vec![]));
        let others: Vec<u64> = s.lease("x", 10, 11).iter().map(|g| g.task.index).collect();
        assert!(!others.contains(&1), "the adopted task is not lent again");
        // A lease of this boot that is not current is not adopted.
        let forged = LeaseRef {
            lease_id: lease_id(&KEY, 2, 1, 2, "w"),
            task: 2,
            ..old
        };
        assert_eq!(s.heartbeat("w", &[forged], 0, 12).2, vec![forged]);
    }

    #[test]
    fn a_late_heartbeat_keeps_an_expired_lease_nobody_else_took() {
        let (mut s, _, _) = running(spec(8, Strategy::Frame, 2), 1);
        let g = s.lease("slow", 1, 0).remove(0);
        s.expire(TTL); // the heartbeat came too late
        let (ext, _, stop) = s.heartbeat("slow", &[lref(&g)], 0, TTL + 1);
        assert_eq!((ext, stop), (vec![lref(&g)], vec![]));
        assert!(s
            .lease("other", 5, TTL + 10_000)
            .iter()
            .all(|o| o.task.index != g.task.index));
        // Once someone else holds the task, the late holder is told to stop.
        let (mut s, _, _) = running(spec(8, Strategy::Frame, 1), 1);
        let g = s.lease("slow", 1, 0).remove(0);
        s.expire(TTL);
        let taken = s.lease("other", 1, TTL + 1_000);
        assert_eq!(taken.len(), 1);
        assert_eq!(
            s.heartbeat("slow", &[lref(&g)], 0, TTL + 1_001).2,
            vec![lref(&g)]
        );
    }

    #[test]
    fn release_returns_tasks_at_once_without_penalty() {
        let (mut s, _, _) = running(spec(8, Strategy::Frame, 3), 1);
        let g = s.lease("w1", 2, 0);
        let refs: Vec<LeaseRef> = g.iter().map(lref).collect();
        assert_eq!(s.release("w2", &refs, 1), 0, "only the holder can release");
        assert_eq!(s.release("w1", &refs, 1), 2);
        let again: BTreeSet<u64> = s.lease("w2", 10, 2).iter().map(|g| g.task.index).collect();
        assert!(g.iter().all(|g| again.contains(&g.task.index)));
    }

    #[test]
    fn pause_stops_new_leases_and_cancel_stops_running_ones() {
        let (mut s, _, _) = running(spec(8, Strategy::Frame, 5), 1);
        let held = s.lease("w", 1, 0).remove(0);
        let state = |st: JobState| Event::JobControlled { job: 1, state: st };
        s.apply(&state(JobState::Paused)).unwrap();
        assert_eq!(s.job(1).unwrap().state(), JobState::Paused);
        assert!(s.lease("w", 5, 1).is_empty());
        assert_eq!(
            s.heartbeat("w", &[lref(&held)], 0, 2).0.len(),
            1,
            "running work may finish"
        );
        s.apply(&state(JobState::Running)).unwrap();
        assert!(!s.lease("w", 1, 3).is_empty());
        s.apply(&state(JobState::Cancelled)).unwrap();
        assert_eq!(s.job(1).unwrap().state(), JobState::Cancelled);
        let (ext, _, stop) = s.heartbeat("w", &[lref(&held)], 0, 4);
        assert!(ext.is_empty());
        assert_eq!(stop, vec![lref(&held)]);
        assert!(s.lease("w", 5, 5).is_empty());
    }

    #[test]
    fn reports_without_a_lease_or_with_impossible_counts_are_refused() {
        let (mut s, plan, tasks) = running(spec(8, Strategy::Frame, 3), 2);
        let g = s.lease("w1", 1, 0).remove(0);
        let t = plan.count_task(&g.task).unwrap();
        // Another worker, or a lease id this boot never granted for it.
        assert!(matches!(
            s.check_report("w2", &lref(&g), &t, 0),
            Err(StateError::NotLeased { .. })
        ));
        for id in [0, g.lease_id + 1, g.lease_id - 1, (2 << EPOCH_SHIFT) + 777] {
            let forged = LeaseRef {
                lease_id: id,
                ..lref(&g)
            };
            assert!(matches!(
                s.check_report("w1", &forged, &t, 0),
                Err(StateError::NotLeased { .. })
            ));
        }
        // This worker's lease from before the restart (epoch 1) is
        // accepted on a task nobody holds: its result is still valid work.
        let free = (g.task.index + 1) % tasks.len() as u64;
        let tf = plan.count_task(&tasks[free as usize]).unwrap();
        let old = LeaseRef {
            job: 1,
            task: free,
            lease_id: lease_id(&KEY, 1, 1, free, "w3"),
        };
        assert_eq!(s.check_report("w3", &old, &tf, 0), Ok(Verdict::New));
        assert!(matches!(
            s.check_report("w4", &old, &tf, 0),
            Err(StateError::NotLeased { .. })
        ));
        // Not on a task another worker holds.
        let held = LeaseRef {
            lease_id: lease_id(&KEY, 1, 1, g.task.index, "w3"),
            ..lref(&g)
        };
        assert!(matches!(
            s.check_report("w3", &held, &t, 0),
            Err(StateError::NotLeased { .. })
        ));
        // Unknown job and task.
        assert_eq!(
            s.check_report("w1", &LeaseRef { job: 9, ..lref(&g) }, &t, 0),
            Err(StateError::UnknownJob(9))
        );
        let far = LeaseRef {
            task: 999,
            ..lref(&g)
        };
        let count = tasks.len() as u64;
        assert!(
            matches!(s.check_report("w1", &far, &t, 0), Err(StateError::UnknownTask { tasks, .. }) if tasks == count)
        );
        // Class counts in a frame task, or more solutions than N=8 has.
        let mut bad = t;
        bad.classes.c8 = 1;
        assert!(matches!(
            s.check_report("w1", &lref(&g), &bad, 0),
            Err(StateError::Implausible { .. })
        ));
        let mut big = t;
        big.weighted = 93;
        assert!(matches!(
            s.check_report("w1", &lref(&g), &big, 0),
            Err(StateError::Implausible { .. })
        ));
        // A node count past what any task has (N=8 has no known bound on
        // nodes; every N has this one).
        let mut busy = t;
        busy.classes.nodes = MOST_PER_TASK + 1;
        assert!(matches!(
            s.check_report("w1", &lref(&g), &busy, 0),
            Err(StateError::Implausible { .. })
        ));
        busy.classes.nodes = MOST_PER_TASK;
        assert_eq!(s.check_report("w1", &lref(&g), &busy, 0), Ok(Verdict::New));
    }

    /// One worker id holds at most `MOST_HELD` leases, over all its calls
    /// and jobs; each task it hands in makes room for one more, and one
    /// more id gets the rest.
    #[test]
    fn one_worker_id_holds_at_most_what_one_heartbeat_renews() {
        let (mut s, _, _) = running(spec(8, Strategy::Synthetic, 20_000), 1);
        let mut got = Vec::new();
        for _ in 0..10 {
            got.extend(s.lease("hoarder", 1024, 0));
        }
        assert_eq!(got.len(), MOST_HELD);
        assert!(s.lease("hoarder", 1024, 0).is_empty());
        // A lease ended (handed back, or expired) makes room for one more;
        // another id has its own room.
        assert_eq!(s.release("hoarder", &[lref(&got[0])], 0), 1);
        assert_eq!(s.lease("hoarder", 1024, 0).len(), 1);
        assert_eq!(s.lease("other", 100_000, 0).len(), MOST_HELD);
        // Past their lifetime, its leases are gone: room for as many again.
        s.expire(TTL + 1);
        assert_eq!(
            s.lease("hoarder", MOST_HELD - 1, TTL + 2).len(),
            MOST_HELD - 1
        );
        // A heartbeat adopts the id's own expired leases only while it
        // holds fewer than the bound.
        let late = [lref(&got[1]), lref(&got[2])];
        let (extended, _, stop) = s.heartbeat("hoarder", &late, 0, TTL + 3);
        assert_eq!((extended, stop), (vec![late[0]], vec![late[1]]));
    }

    /// A job's rate is its latest results' pace while it runs, and zero
    /// once it has ended.
    #[test]
    fn an_ended_job_counts_nothing_now() {
        let (mut s, plan, _) = running(spec(9, Strategy::Frame, 4), 1);
        let g = s.lease("w", 100, 0);
        for (i, g) in g.iter().enumerate() {
            let t = plan.count_task(&g.task).unwrap();
            let Event::TaskDone(mut d) = done(1, g.task.index, &t, "w", g.lease_id) else {
                unreachable!()
            };
            d.unix_ms = 1_000 * (i as u64 + 1);
            s.apply(&Event::TaskDone(d)).unwrap();
            let view = s.job(1).unwrap().view();
            match view.state {
                JobState::Done => assert_eq!(view.work_per_second, 0.0),
                _ => assert!(i == 0 || view.work_per_second > 0.0, "{i}: {view:?}"),
            }
        }
        assert_eq!(s.job(1).unwrap().state(), JobState::Done);
    }

    /// Forgetting spares a worker whose result waits for a check, however
    /// long silent: the vote and its binding stay. A worker that left
    /// nothing goes, and so does one whose result is kept for the audit:
    /// the result stays in the ledger, with who made it, and a report of
    /// it again is still answered without a record.
    #[test]
    fn forgetting_spares_a_voter_and_keeps_what_the_audit_needs() {
        let (mut s, plan, tasks) = running_checked(spec(8, Strategy::Frame, 3), 1, 2, 1.0, false);
        s.bind("a", "alice").unwrap();
        let g = s.lease("a", 1, 0).remove(0);
        let t = plan.count_task(&tasks[g.task.index as usize]).unwrap();
        let v = s.apply(&done(1, g.task.index, &t, "a", g.lease_id));
        assert_eq!(v, Ok(Some(Verdict::AwaitingCheck)));
        // A result kept for the audit only (a count no task can have, from
        // an older journal).
        let h = s.lease("old", 1, 0).remove(0);
        let mut big = plan.count_task(&h.task).unwrap();
        big.classes.nodes = u128::MAX;
        let v = s.apply(&done(1, h.task.index, &big, "old", h.lease_id));
        assert_eq!(v, Ok(Some(Verdict::NotCounted)));
        s.expire(TTL + 1);
        s.touch_worker("idle", 0);
        assert_eq!(s.forget_workers(u64::MAX, usize::MAX, Forget::Settled), 2);
        assert!(s.worker("idle").is_none() && s.worker("old").is_none());
        assert!(s.worker("a").is_some());
        assert_eq!(s.may_bind("a", "mallory").ok(), None, "still alice's");
        // What the audit needs stays in the ledger, whoever is forgotten.
        let kept = s.job(1).unwrap().ignored();
        assert!(kept.len() == 1 && kept[0].1.worker == "old");
        let d = Done {
            job: 1,
            task: h.task.index,
            worker: "old".into(),
            lease_id: h.lease_id,
            ..Done::default()
        };
        assert!(
            s.on_record(Verdict::NotCounted, &d),
            "answered without a record"
        );
    }

    /// A journal written before results were bounded may hold one whose
    /// count no task can have (a node count of 2^128 - 1 once wedged its
    /// job: every honest result after it overflowed the job's sum, and
    /// the replay stopped at the first). It is kept for the audit only:
    /// the replay goes on and the job ends exact.
    #[test]
    fn a_journaled_count_past_any_tasks_is_kept_for_the_audit_only() {
        let (mut s, plan, _) = running(spec(9, Strategy::Frame, 4), 1);
        let g = s.lease("evil", 1, 0).remove(0);
        let mut evil = plan.count_task(&g.task).unwrap();
        evil.classes.nodes = u128::MAX;
        let record = done(1, g.task.index, &evil, "evil", g.lease_id);
        assert_eq!(s.apply(&record), Ok(Some(Verdict::NotCounted)));
        assert_eq!(s.job(1).unwrap().ignored().len(), 1);
        // Its lease lapses, and an honest worker counts every task (once
        // the lapsed one is past its back-off).
        s.expire(TTL + 1);
        run_all(&mut s, &plan, "honest", 2 * TTL);
        let job = s.job(1).unwrap();
        assert_eq!(job.state(), JobState::Done);
        assert_eq!(job.view().total, 352);
        assert!(job.tally().classes.nodes < MOST_PER_TASK);
    }

    #[test]
    fn redundancy_needs_votes_from_distinct_credentials() {
        let (mut s, plan, tasks) = running_checked(spec(8, Strategy::Frame, 2), 1, 2, 1.0, false);
        let right = plan.count_task(&tasks[0]).unwrap();
        s.bind("a1", "alice").unwrap();
        s.bind("a2", "alice").unwrap();
        s.bind("b1", "bob").unwrap();
        assert!(matches!(
            s.bind("a1", "bob"),
            Err(StateError::WrongCredential { .. })
        ));
        let vote = |s: &mut State, w: &str, task: u64, t: &Tally| {
            let mut d = done(1, task, t, w, 0);
            if let Event::TaskDone(d) = &mut d {
                d.credential = s.credential_of(w);
            }
            s.apply(&d).unwrap().unwrap()
        };
        assert_eq!(vote(&mut s, "a1", 0, &right), Verdict::AwaitingCheck);
        // The same credential under another worker id is not a second vote,
        // and is not even offered the task.
        assert!(s.lease("a2", 5, 0).iter().all(|g| g.task.index != 0));
        assert_eq!(vote(&mut s, "a2", 0, &right), Verdict::AwaitingCheck);
        assert_eq!(s.job(1).unwrap().view().done, 0);
        assert_eq!(vote(&mut s, "b1", 0, &right), Verdict::New);
        assert_eq!(s.job(1).unwrap().view().done, 1);
    }

    #[test]
    fn a_running_job_says_when_no_worker_is_there() {
        let (mut s, _, _) = running(spec(8, Strategy::Frame, 3), 1);
        let why = s.waiting_for(1, 0).expect("no worker ever called");
        assert!(why.contains("none that takes tasks has called"), "{why}");
        s.touch_worker("w", 0);
        assert_eq!(s.waiting_for(1, 0), None);
        // Silent for longer than a lease: none again.
        assert!(s.waiting_for(1, TTL + 1).is_some());
        // Going away while it finishes a lease: the job goes on.
        let held = s.lease("w", 1, TTL + 1);
        assert_eq!(held.len(), 1);
        s.touch_worker("w", TTL + 1).draining = true;
        assert_eq!(s.waiting_for(1, TTL + 1), None);
        // Its lease handed back: it takes no new task, so none.
        let refs = [LeaseRef {
            job: 1,
            task: held[0].task.index,
            lease_id: held[0].lease_id,
        }];
        assert_eq!(s.release("w", &refs, TTL + 1), 1);
        let why = s
            .waiting_for(1, TTL + 1)
            .expect("the only worker is draining");
        assert!(why.contains("draining"), "{why}");
    }

    #[test]
    fn a_job_says_when_its_redundancy_cannot_be_met_by_the_connected_credentials() {
        let (mut s, plan, tasks) = running_checked(spec(8, Strategy::Frame, 2), 1, 2, 1.0, false);
        let now = 5 * TTL;
        for (w, cred) in [("a1", "alice"), ("a2", "alice")] {
            s.bind(w, cred).unwrap();
            s.touch_worker(w, now);
        }
        let why = s
            .waiting_for(1, now)
            .expect("one credential cannot give two votes");
        assert!(
            why.contains("needs 2 distinct worker credentials, and 1 connected"),
            "{why}"
        );
        s.bind("b1", "bob").unwrap();
        s.touch_worker("b1", now);
        assert_eq!(s.waiting_for(1, now), None);
        // Bob is not heard from for longer than a lease: waiting again.
        s.touch_worker("a1", now + TTL + 1);
        assert!(s.waiting_for(1, now + TTL + 1).is_some());
        // Agreeing results are "checked" for both voters.
        let right = plan.count_task(&tasks[0]).unwrap();
        for w in ["a1", "b1"] {
            let mut d = done(1, 0, &right, w, 0);
            if let Event::TaskDone(d) = &mut d {
                d.credential = s.credential_of(w);
            }
            s.apply(&d).unwrap();
        }
        let checked = |s: &State, id: &str| s.workers().find(|w| w.id == id).unwrap().checked;
        assert_eq!(
            (checked(&s, "a1"), checked(&s, "b1"), checked(&s, "a2")),
            (1, 1, 0)
        );
        // Redundancy 1 never waits for credentials: one worker is enough.
        let (mut s, _, _) = running(spec(8, Strategy::Frame, 2), 1);
        s.touch_worker("a1", now);
        assert_eq!(s.waiting_for(1, now), None);
    }

    #[test]
    fn a_job_says_when_disagreeing_results_wait_for_another_credential() {
        let (mut s, plan, tasks) = running_checked(spec(8, Strategy::Frame, 2), 1, 2, 1.0, false);
        let now = 5 * TTL;
        for (w, cred) in [("a1", "alice"), ("m1", "mallory")] {
            s.bind(w, cred).unwrap();
            s.touch_worker(w, now);
        }
        let right = plan.count_task(&tasks[0]).unwrap();
        let mut wrong = right;
        wrong.weighted += 2;
        for (w, t) in [("a1", &right), ("m1", &wrong)] {
            let mut d = done(1, 0, t, w, 0);
            if let Event::TaskDone(d) = &mut d {
                d.credential = s.credential_of(w);
            }
            assert_eq!(s.apply(&d).unwrap(), Some(Verdict::AwaitingCheck));
        }
        let why = s.waiting_for(1, now).expect("two credentials disagree");
        assert!(why.contains("disagree on 1 task"), "{why}");
    }

    /// A binding holds until its id is forgotten; then another credential
    /// may bind the id, and replaying the journal (which forgets nothing)
    /// gives the id to the latest (claimed) binding, as it was before the
    /// restart. An earlier version's journal, whose bindings were not
    /// claimed, could hold two that raced: the first one held then, and
    /// holds in its replay.
    #[test]
    fn a_worker_id_binding_is_replayed_as_it_ran() {
        let mut s = State::new(Limits::default());
        let bound = |cred: &str, ms, claimed| Event::WorkerBound {
            worker: "w1".into(),
            credential: cred.into(),
            unix_ms: ms,
            claimed,
        };
        let journal = [bound("alice", 7, true), bound("mallory", 9, true)];
        s.apply(&journal[0]).unwrap();
        assert_eq!(s.credential_of("w1"), "alice");
        assert!(matches!(
            s.may_bind("w1", "mallory"),
            Err(StateError::WrongCredential { .. })
        ));
        assert_eq!(s.worker("w1").unwrap().last_seen_ms, 7);
        // Silent, nothing counted, no lease: forgotten with its binding.
        assert_eq!(s.forget_workers(8, usize::MAX, Forget::Idle), 1);
        assert_eq!(s.may_bind("w1", "mallory"), Ok(true));
        s.apply(&journal[1]).unwrap();
        assert_eq!(s.credential_of("w1"), "mallory");
        let replay = |journal: &[Event]| {
            let mut replayed = State::new(Limits::default());
            for e in journal {
                replayed.apply(e).unwrap();
            }
            replayed.credential_of("w1")
        };
        assert_eq!(replay(&journal), "mallory");
        let raced = [bound("alice", 7, false), bound("mallory", 7, false)];
        assert_eq!(replay(&raced), "alice");
    }

    /// Under `--cross-device`, a task one kind of device counted is
    /// offered only to a worker with the other kind, is done only once a
    /// card and a CPU agree, and a job without both kinds connected says so.
    #[test]
    fn cross_device_checks_go_to_the_kind_of_device_a_task_lacks() {
        let (mut s, plan, tasks) = running_checked(spec(8, Strategy::Frame, 1), 1, 2, 1.0, true);
        let now = 5 * TTL;
        let join = |s: &mut State, w: &str, version: &str, cores: u32| {
            let info = s.touch_worker(w, now);
            (info.solver_version, info.cores) = (version.into(), cores);
        };
        join(&mut s, "cpu-1", "0.1.0 avx2", 2);
        join(&mut s, "cpu-2", "0.1.0 avx512", 2);
        let why = s.waiting_for(1, now).expect("no card is connected");
        assert!(why.contains("no connected worker counts on a GPU"), "{why}");
        join(&mut s, "card", "0.1.0 avx2+gpu:llvmpipe (vulkan)", 1);
        assert_eq!(s.waiting_for(1, now), None);

        let right = plan.count_task(&tasks[0]).unwrap();
        let vote = |s: &mut State, w: &str, on: &str| {
            let g = s.lease(w, 1, now).remove(0);
            let mut d = done(1, g.task.index, &right, w, g.lease_id);
            if let Event::TaskDone(d) = &mut d {
                d.outcome.solver_version = on.into();
            }
            (s.apply(&d).unwrap().unwrap(), g.count_on)
        };
        let cpu = vote(&mut s, "cpu-1", "0.1.0 avx2");
        assert_eq!(cpu, (Verdict::AwaitingCheck, CountOn::Cpu));
        assert!(
            s.lease("cpu-2", 5, now).is_empty(),
            "a second CPU adds nothing"
        );
        // The card worker has CPU threads too: it is asked for its card.
        let card = vote(&mut s, "card", "0.1.0 gpu:llvmpipe (vulkan)");
        assert_eq!(card, (Verdict::New, CountOn::Card));
        assert_eq!(s.job(1).unwrap().view().state, JobState::Done);
        assert!(s.job(1).unwrap().view().cross_device);
    }

    #[test]
    fn a_quarantined_workers_results_are_kept_but_never_counted() {
        let (mut s, plan, _) = running(spec(8, Strategy::Frame, 3), 1);
        let g = s.lease("liar", 2, 0);
        s.apply(&Event::TaskConflict {
            job: 1,
            task: 2,
            outcome: Outcome::default(),
            worker: "liar".into(),
            unix_ms: 0,
        })
        .unwrap();
        assert!(s.quarantined("liar"));
        let t = plan.count_task(&g[0].task).unwrap();
        assert_eq!(
            s.check_report("liar", &lref(&g[0]), &t, 0),
            Ok(Verdict::NotCounted)
        );
        assert_eq!(
            s.apply(&done(1, g[0].task.index, &t, "liar", g[0].lease_id))
                .unwrap(),
            Some(Verdict::NotCounted)
        );
        let v = s.job(1).unwrap().view();
        assert_eq!((v.done, v.total), (0, 0));
        assert_eq!(s.job(1).unwrap().ignored().len(), 1);
        // The same report again is answered without a second record.
        assert_eq!(
            s.check_report("liar", &lref(&g[0]), &t, 0),
            Ok(Verdict::NotCounted)
        );
        // Its other lease is not extended.
        assert_eq!(
            s.heartbeat("liar", &[lref(&g[1])], 0, 1).2,
            vec![lref(&g[1])]
        );
    }

    /// A quarantined id reporting every lease it held: the first
    /// `MOST_KEPT_PER_WORKER` results are kept for the audit (each once),
    /// the rest are answered alike without a record; another worker's
    /// first is still recorded.
    #[test]
    fn a_quarantined_workers_kept_results_stop_at_their_cap() {
        let (mut s, plan, _) = running(spec(12, Strategy::Frame, 40), 1);
        let g = s.lease("liar", 20, 0);
        s.apply(&Event::TaskConflict {
            job: 1,
            task: g[19].task.index,
            outcome: Outcome::default(),
            worker: "liar".into(),
            unix_ms: 0,
        })
        .unwrap();
        let most = ledger::MOST_KEPT_PER_WORKER as usize;
        for (k, lease) in g.iter().take(most + 2).enumerate() {
            let t = plan.count_task(&lease.task).unwrap();
            let Event::TaskDone(d) = done(1, lease.task.index, &t, "liar", lease.lease_id) else {
                unreachable!()
            };
            assert_eq!(s.on_record(Verdict::NotCounted, &d), k >= most, "{k}");
            if k < most {
                let v = s.apply(&Event::TaskDone(d.clone())).unwrap();
                assert_eq!(v, Some(Verdict::NotCounted));
                assert!(s.on_record(Verdict::NotCounted, &d), "kept once");
            }
        }
        assert_eq!(s.job(1).unwrap().ignored().len(), most);
        let other = Done {
            worker: "other".into(),
            ..Done::default()
        };
        assert!(!s.on_record(Verdict::NotCounted, &Done { job: 1, ..other }));
    }

    #[test]
    fn nothing_counts_for_a_cancelled_job() {
        let (mut s, plan, _) = running(spec(8, Strategy::Frame, 3), 1);
        let g = s.lease("w", 1, 0).remove(0);
        s.apply(&Event::JobControlled {
            job: 1,
            state: JobState::Cancelled,
        })
        .unwrap();
        let t = plan.count_task(&g.task).unwrap();
        assert!(matches!(
            s.check_report("w", &lref(&g), &t, 0),
            Err(StateError::Finished { .. })
        ));
        // A result journaled just after the cancel (a race) is not counted.
        assert_eq!(
            s.apply(&done(1, g.task.index, &t, "w", g.lease_id))
                .unwrap(),
            Some(Verdict::NotCounted)
        );
        assert_eq!(s.job(1).unwrap().view().total, 0);
    }

    #[test]
    fn replaying_the_same_records_gives_the_same_state() {
        let (mut s, plan, tasks) = running(spec(9, Strategy::Frame, 4), 1);
        let mut log = Vec::new();
        for g in s.lease("w", 10, 0) {
            let t = plan.count_task(&g.task).unwrap();
            let r = done(1, g.task.index, &t, "w", g.lease_id);
            s.apply(&r).unwrap();
            log.push(r.clone());
            log.push(r); // a duplicate in the journal must not double-count
        }
        let (mut fresh, _, _) = running(spec(9, Strategy::Frame, 4), 1);
        for r in &log {
            fresh.apply(r).unwrap();
        }
        let (a, b) = (s.job(1).unwrap().view(), fresh.job(1).unwrap().view());
        assert_eq!((a.total, a.unique, a.done), (b.total, b.unique, b.done));
        assert_eq!(a.total, 352);
        assert_eq!(a.done, tasks.len() as u64);
    }

    /// Everything about a state that records decide.
    fn durable(s: &State) -> String {
        let c = &s.counters;
        let mut out = format!(
            "epoch {} {} {} {}\n",
            s.epoch(),
            c.accepted,
            c.duplicates,
            c.conflicts
        );
        for j in s.jobs() {
            let results: Vec<_> = j.results().collect();
            out += &format!(
                "{:?}\n{results:?}\n{:?}\n{:?}\n",
                j.view(),
                j.conflicts(),
                j.ignored()
            );
        }
        for w in s.workers() {
            // Whether it called since the start is not durable.
            let w = WorkerInfo {
                heard: false,
                ..w.clone()
            };
            out += &format!("{w:?}\n");
        }
        out
    }

    /// A worker known from a checkpoint only has not called this
    /// coordinator: it is no worker a job can count on until it calls
    /// (before, one that had gone away counted as connected for a lease's
    /// lifetime after a restart, and the job said nothing of waiting).
    #[test]
    fn a_worker_known_only_from_the_records_is_unheard_until_it_calls() {
        use crate::checkpoint;
        use crate::seen::Seen;
        let (mut s, plan, _) = running(spec(8, Strategy::Frame, 8), 1);
        s.touch_worker("w1", 1_000);
        assert!(s.worker("w1").unwrap().heard);
        assert_eq!(s.waiting_for(1, 2_000), None);
        let dir = tempfile::tempdir().unwrap();
        checkpoint::save(dir.path(), &checkpoint::encode(&Seen::upto(3), &s, 3)).unwrap();
        let mut back = checkpoint::load(dir.path())
            .unwrap()
            .state
            .with_limits(s.limits());
        back.attach_tasks(1, TaskList::Listed(table_of(&plan)))
            .unwrap();
        let w1 = back.worker("w1").unwrap();
        assert!(!w1.heard && w1.last_seen_ms == 1_000);
        let why = back.waiting_for(1, 2_000).expect("no worker heard");
        assert!(why.starts_with("workers: none"), "{why}");
        back.touch_worker("w1", 2_000);
        assert_eq!(back.waiting_for(1, 2_000), None);
    }

    #[test]
    fn a_state_restored_from_a_checkpoint_goes_on_as_the_original() {
        use crate::checkpoint;
        use crate::seen::Seen;
        let (mut s, plan, tasks) = running_checked(spec(8, Strategy::Frame, 8), 1, 2, 1.0, false);
        assert!(tasks.len() > 4);
        let right = plan.count_task(&tasks[0]).unwrap();
        let mut wrong = right;
        wrong.weighted += 8;
        // Before the checkpoint: a vote waiting, a liar quarantined, a
        // conflict, a dead task, a counted one.
        report_one(&mut s, "liar", &wrong);
        report_one(&mut s, "w1", &right);
        let g = s.lease("w2", 1, 0).remove(0);
        assert_eq!(g.task.index, 0);
        s.apply(&done(1, 0, &right, "w2", g.lease_id)).unwrap();
        s.apply(&Event::TaskDead {
            job: 1,
            task: 2,
            reason: "out of retries".into(),
        })
        .unwrap();
        let t1 = plan.count_task(&tasks[1]).unwrap();
        s.apply(&done(1, 1, &t1, "w1", 0)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        checkpoint::save(dir.path(), &checkpoint::encode(&Seen::upto(9), &s, 3)).unwrap();
        let loaded = checkpoint::load(dir.path()).unwrap();
        assert_eq!(loaded.seen, Seen::upto(9));
        let mut back = loaded.state.with_limits(s.limits());
        back.set_lease_key(KEY);
        back.attach_tasks(1, TaskList::Listed(table_of(&plan)))
            .unwrap();
        assert_eq!(durable(&back), durable(&s));
        // Leases are not durable: every unfinished task is pending again.
        let leased = back.lease("w3", 99, 0);
        let pending: Vec<u64> = leased.iter().map(|g| g.task.index).collect();
        let unfinished: Vec<u64> = (0..tasks.len() as u64)
            .filter(|&t| !s.job(1).unwrap().counted(t) && t != 2)
            .collect();
        assert_eq!(pending, unfinished);
        let refs: Vec<LeaseRef> = leased.iter().map(lref).collect();
        back.release("w3", &refs, 0);
        // The same records after it give the same state, to the exact end.
        for t in tasks.iter().filter(|t| t.index != 0 && t.index != 2) {
            let c = plan.count_task(t).unwrap();
            for w in ["w2", "w1"] {
                let r = done(1, t.index, &c, w, 0);
                assert_eq!(s.apply(&r).unwrap(), back.apply(&r).unwrap());
            }
        }
        s.touch_worker("w3", 0);
        assert_eq!(durable(&back), durable(&s));
        let v = back.job(1).unwrap().view();
        assert_eq!(v.done, tasks.len() as u64 - 1, "all but the dead one");
        assert_eq!(v.dead, 1);
    }

    #[test]
    fn a_re_plan_that_differs_from_the_journal_is_refused() {
        let (mut s, plan, _) = running(spec(9, Strategy::Frame, 4), 1);
        let mut runs = table_of(&plan).runs().to_vec();
        runs[0].lo += 1;
        let other = TaskTable::from_runs(runs).unwrap();
        assert!(matches!(
            s.attach_tasks(1, TaskList::Listed(other)),
            Err(StateError::PlanChanged { .. })
        ));
    }

    /// A job planned before task tables journaled the digest of its tasks
    /// listed one by one: the same plan, now a table, is still accepted.
    #[test]
    fn a_job_journaled_with_a_listed_digest_takes_its_table() {
        let mut s = State::new(Limits::default());
        let spec = spec(10, Strategy::Frame, 30);
        s.apply(&Event::JobSubmitted {
            job: 1,
            spec,
            unix_ms: 5,
            checking: Checking {
                redundancy: 1,
                fraction: 0.0,
                cross_device: false,
            },
        })
        .unwrap();
        let plan = Plan::new(spec).unwrap();
        let tasks: Vec<Task> = plan.schedule().tasks.iter().collect();
        let old = listed_digest(tasks.iter().copied());
        assert_ne!(old, digest(&table_of(&plan)));
        s.apply(&Event::JobPlanned {
            job: 1,
            tasks: tasks.len() as u64,
            digest: old,
        })
        .unwrap();
        s.attach_tasks(1, TaskList::Listed(table_of(&plan)))
            .unwrap();
        assert_eq!(s.job(1).unwrap().task(3), Some(tasks[3]));
    }
}

/// Hostile reports against the lease rules, with random workers, lease ids
/// and task indices: nothing but a report under a lease granted to its
/// worker ever changes a total.
mod forged {
    use super::super::*;
    use super::table_of;
    use nqueens_common::Size;
    use proptest::prelude::*;

    const WORKERS: [&str; 3] = ["a", "b", "c"];

    #[derive(Clone, Debug)]
    enum Op {
        Lease(usize, usize),
        /// A report under a lease once granted (by index), from worker `w`
        /// (the holder or not), honest only when from the holder.
        Granted(usize, usize),
        /// A report with a made-up lease id: random, or a neighbour of a
        /// granted one.
        Forged(usize, u64, u64, bool),
        Heartbeat(usize, usize, u64),
        Expire(u64),
        Release(usize),
        Cancel,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        prop_oneof![
            3 => (0..3usize, 1..4usize).prop_map(|(w, m)| Op::Lease(w, m)),
            4 => (0..64usize, 0..3usize).prop_map(|(g, w)| Op::Granted(g, w)),
            4 => (0..3usize, 0..12u64, any::<u64>(), any::<bool>()).prop_map(|(w, t, id, n)| Op::Forged(w, t, id, n)),
            2 => (0..3usize, 0..64usize, any::<u64>()).prop_map(|(w, g, id)| Op::Heartbeat(w, g, id)),
            1 => (0..30_000u64).prop_map(Op::Expire),
            1 => (0..64usize).prop_map(Op::Release),
            1 => Just(Op::Cancel),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        // Over 80 lines: one scenario whose steps each build on the state the
        // last one left; split, they would only pass that state along.
        #[test]
        fn no_unleased_report_changes_a_total(
            redundancy in 1..3u32,
            epoch in 1..4u64,
            ops in proptest::collection::vec(op(), 1..120),
        ) {
            let spec = PlanSpec { n: Size::new(8).unwrap(), strategy: nqueens_common::plan::Strategy::Frame, depth: 3, tasks: 8, mode: nqueens_common::plan::Mode::Backtrack, cut: nqueens_common::plan::CUT };
            let mut s = State::new(Limits { lease_ttl_ms: 10_000, retry_budget: 100, backoff_base_ms: 10, backoff_max_ms: 10, ..Limits::default() });
            s.apply(&Event::Boot { epoch, unix_ms: 0 }).unwrap();
            s.apply(&Event::JobSubmitted { job: 1, spec, unix_ms: 0, checking: Checking { redundancy, fraction: 1.0, cross_device: false } }).unwrap();
            let plan = Plan::new(spec).unwrap();
            let table = table_of(&plan);
            let tasks: Vec<Task> = table.iter().collect();
            s.apply(&Event::JobPlanned { job: 1, tasks: tasks.len() as u64, digest: digest(&table) }).unwrap();
            s.attach_tasks(1, TaskList::Listed(table)).unwrap();
            let truth: Vec<Tally> = tasks.iter().map(|t| plan.count_task(t).unwrap()).collect();
            let mut grants: Vec<(String, LeaseRef)> = Vec::new();
            let mut now = 0;
            // Reports one result as the coordinator would (check, journal, apply).
            let report = |s: &mut State, w: &str, r: LeaseRef, t: Tally, now: u64| {
                if let Ok(Verdict::New | Verdict::NotCounted) = s.check_report(w, &r, &t, 0) {
                    let d = Done { job: r.job, task: r.task, outcome: Outcome { tally: t, ..Outcome::default() }, worker: w.into(), lease_id: r.lease_id, unix_ms: now, credential: String::new() };
                    s.apply(&Event::TaskDone(d)).unwrap();
                }
            };
            for op in ops {
                now += 1;
                match op {
                    Op::Lease(w, m) => {
                        for g in s.lease(WORKERS[w], m, now) {
                            grants.push((WORKERS[w].into(), LeaseRef { job: g.job, task: g.task.index, lease_id: g.lease_id }));
                        }
                    }
                    Op::Granted(g, w) => {
                        let Some((holder, r)) = grants.get(g % grants.len().max(1)).cloned() else { continue };
                        let mut t = truth[r.task as usize];
                        if holder != WORKERS[w] {
                            t.weighted += 1; // a thief's lie
                        }
                        report(&mut s, WORKERS[w], r, t, now);
                    }
                    Op::Forged(w, task, id, near) => {
                        let id = match (near, grants.last()) {
                            (true, Some((_, r))) => r.lease_id.wrapping_add(id % 5).wrapping_sub(2),
                            _ => id,
                        };
                        let r = LeaseRef { job: 1, task, lease_id: id };
                        if grants.iter().any(|(h, g)| h == WORKERS[w] && *g == r) {
                            continue; // guessed a real one: not a forgery
                        }
                        let mut t = truth.get(task as usize).copied().unwrap_or_default();
                        t.weighted += 1;
                        report(&mut s, WORKERS[w], r, t, now);
                    }
                    Op::Heartbeat(w, g, id) => {
                        let mut refs = vec![LeaseRef { job: 1, task: id % 12, lease_id: id }];
                        if let Some((_, r)) = grants.get(g % grants.len().max(1)) {
                            refs.push(*r);
                        }
                        let (extended, _, _) = s.heartbeat(WORKERS[w], &refs, 0, now);
                        for e in extended {
                            prop_assert!(grants.iter().any(|(h, g)| h == WORKERS[w] && *g == e), "extended a lease never granted: {e:?}");
                        }
                    }
                    Op::Expire(ms) => {
                        now += ms;
                        s.expire(now);
                    }
                    Op::Release(g) => {
                        if let Some((h, r)) = grants.get(g % grants.len().max(1)).cloned() {
                            s.release(&h, &[r], now);
                        }
                    }
                    Op::Cancel => {
                        if s.job(1).unwrap().state() != JobState::Done {
                            s.apply(&Event::JobControlled { job: 1, state: JobState::Cancelled }).unwrap();
                        }
                    }
                }
                // Every counted result is the truth, granted to its worker.
                let job = s.job(1).unwrap();
                let mut sum = Tally::default();
                for (&task, r) in job.results() {
                    prop_assert_eq!(r.tally, truth[task as usize], "task {} counted a lie", task);
                    prop_assert!(grants.iter().any(|(h, g)| *h == r.worker && g.task == task && g.lease_id == r.lease_id));
                    sum.merge(&r.tally).unwrap();
                }
                prop_assert_eq!(*job.tally(), sum);
            }
        }
    }
}
