//! The counting threads. Each is long-lived and takes the next queued task
//! the moment it finishes one, so a core never waits for the async side
//! (or the scheduler's wake-up latency) between tasks.

use nqueens_common::engine::join::Budget;
use nqueens_common::engine::lanes::Path;
use nqueens_common::plan::{Plan, PlanSpec};
use nqueens_proto::v1;
use nqueens_proto::{tally_to_wire, task_from_wire};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// A counted task: its lease and, unless it was stopped or did not
/// decode, its result, number of subproblems and counting time.
pub type Counted = (v1::Lease, Option<(v1::TaskResult, u64, Duration)>);

/// The threads and the tasks waiting for them.
pub struct Pool {
    shared: Arc<Shared>,
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
    /// The engine's path (`None`: the fastest this CPU has).
    core: Option<Path>,
    /// What the join may hold.
    budget: Budget,
    /// The plan of the last task, kept for the next of the same job: a
    /// halves plan's quarter tables are built once, not per task.
    plan: Mutex<Option<Plan>>,
}

#[derive(Default)]
struct Queue {
    tasks: VecDeque<(v1::Lease, Arc<AtomicBool>)>,
    closed: bool,
}

impl Pool {
    /// Starts `threads` counting threads; each result goes to `done`.
    /// `core` is the engine's path (`None`: the fastest this CPU has);
    /// `budget` bounds the join's tables.
    pub fn new(
        threads: usize,
        core: Option<Path>,
        budget: Budget,
        done: mpsc::UnboundedSender<Counted>,
    ) -> Pool {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
            core,
            budget,
            plan: Mutex::new(None),
        });
        for i in 0..threads.max(1) {
            let (shared, done) = (Arc::clone(&shared), done.clone());
            std::thread::Builder::new()
                .name(format!("count-{i}"))
                .spawn(move || count_loop(&shared, &done))
                .expect("cannot start a counting thread");
        }
        Pool { shared }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.shared
            .queue
            .lock()
            .expect("a counting thread panicked")
    }

    /// Queues a task; `stop` set later makes it end early with no result.
    pub fn push(&self, lease: v1::Lease, stop: Arc<AtomicBool>) {
        self.queue().tasks.push_back((lease, stop));
        self.shared.ready.notify_one();
    }

    /// Tasks queued and not yet started.
    pub fn queued(&self) -> usize {
        self.queue().tasks.len()
    }

    /// Takes back every task not yet started.
    pub fn take_queued(&self) -> Vec<v1::Lease> {
        self.queue().tasks.drain(..).map(|(l, _)| l).collect()
    }

    /// Takes back one task if it has not started; whether it had not.
    pub fn unqueue(&self, lease_id: u64) -> bool {
        let mut q = self.queue();
        let before = q.tasks.len();
        q.tasks.retain(|(l, _)| l.lease_id != lease_id);
        q.tasks.len() < before
    }
}

impl Drop for Pool {
    /// Threads end after their current task (stop it first to end sooner).
    fn drop(&mut self) {
        self.queue().closed = true;
        self.shared.ready.notify_all();
    }
}

fn count_loop(shared: &Shared, done: &mpsc::UnboundedSender<Counted>) {
    loop {
        let (lease, stop) = {
            let mut q = shared.queue.lock().expect("queue lock");
            loop {
                if q.closed {
                    return;
                }
                if let Some(t) = q.tasks.pop_front() {
                    break t;
                }
                q = shared.ready.wait(q).expect("queue lock");
            }
        };
        let out = count(shared, &lease, &stop);
        if done.send((lease, out)).is_err() {
            return;
        }
    }
}

impl Shared {
    /// The plan of `spec`: the kept one if it is the same.
    fn plan(&self, spec: PlanSpec) -> Option<Plan> {
        let mut kept = self.plan.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = kept.as_ref().filter(|p| p.spec == spec) {
            return Some(p.clone());
        }
        let plan = Plan::new(spec)
            .ok()?
            .with_path(self.core)
            .with_budget(self.budget);
        *kept = Some(plan.clone());
        Some(plan)
    }
}

/// Counts one task; `None` when stopped or when the task does not decode
/// or cannot be counted here (its lease then runs out, and the task goes
/// to another worker).
fn count(
    shared: &Shared,
    lease: &v1::Lease,
    stop: &AtomicBool,
) -> Option<(v1::TaskResult, u64, Duration)> {
    if stop.load(Ordering::Relaxed) {
        return None;
    }
    let started = std::time::Instant::now();
    let (spec, task) = match task_from_wire(lease.task.as_ref()?) {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(error = %e, "the coordinator sent a task that does not decode; skipping it");
            return None;
        }
    };
    let plan = shared.plan(spec)?;
    let (tally, checksum) = match plan.count_task_until(&task, stop) {
        Ok(counted) => counted?,
        Err(e) => {
            tracing::error!(
                task = task.index,
                "cannot count this task here: {e}; it goes back to the coordinator when its lease \
                 runs out"
            );
            return None;
        }
    };
    let elapsed = started.elapsed();
    let result = v1::TaskResult {
        checksum,
        elapsed_ms: elapsed.as_millis() as u64,
        solver_version: env!("CARGO_PKG_VERSION").to_string(),
        ..tally_to_wire(&tally)
    };
    Some((result, task.subproblems, elapsed))
}
