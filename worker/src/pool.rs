//! The counting threads. Each is long-lived and takes the next queued task
//! the moment it finishes one, so a core never waits for the async side
//! (or the scheduler's wake-up latency) between tasks.

use nqueens_common::engine::device::Device;
use nqueens_common::engine::join::Budget;
use nqueens_common::engine::lanes::Path;
use nqueens_common::plan::{Plan, PlanError, PlanSpec};
use nqueens_proto::task_from_wire;
use nqueens_proto::v1;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

use crate::share::{yield_to_feeders, Share};

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
    /// Whether the pool has CPU threads: a task asked for on a kind of
    /// device the pool lacks is counted on what it has.
    cpu: bool,
    /// Card feeders still running (one whose card failed stops).
    feeders: AtomicUsize,
}

#[derive(Default)]
struct Queue {
    tasks: VecDeque<(v1::Lease, Arc<AtomicBool>)>,
    closed: bool,
    /// Counting threads still running.
    alive: usize,
    /// The cards' rate and the CPU threads' time per task.
    share: Share,
}

impl Pool {
    /// Starts `threads` counting threads on the CPU and as many feeding
    /// threads as each of `devices` asks for ([`Device::feeders`]), each
    /// with its own task; each result goes to
    /// `done`. `core` is the engine's path (`None`: the fastest this CPU
    /// has); `budget` bounds the join's tables.
    pub fn new(
        threads: usize,
        core: Option<Path>,
        budget: Budget,
        devices: &[Arc<dyn Device>],
        done: mpsc::UnboundedSender<Counted>,
    ) -> Pool {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
            core,
            budget,
            plan: Mutex::new(None),
            cpu: threads > 0,
            feeders: AtomicUsize::new(feeders(devices)),
        });
        let cpu = (0..threads).map(|i| (format!("count-{i}"), None));
        let feeders = devices.iter().enumerate().flat_map(|(g, d)| {
            (0..d.feeders()).map(move |i| (format!("gpu-{g}-{i}"), Some(Arc::clone(d))))
        });
        let with_cards = !devices.is_empty();
        for (name, device) in cpu.chain(feeders) {
            let (shared, done) = (Arc::clone(&shared), done.clone());
            shared.queue.lock().expect("queue lock").alive += 1;
            std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    let _ending = Ending(&shared);
                    if with_cards && device.is_none() {
                        yield_to_feeders();
                    }
                    count_loop(&shared, device, &done);
                })
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
        // Wake them all: the first awake may be of the wrong kind for it.
        self.shared.ready.notify_all();
    }

    /// Whether any thread can still count (every card may have failed in a
    /// worker without CPU threads): a worker that cannot leases nothing.
    pub fn can_count(&self) -> bool {
        self.shared.can_count()
    }

    /// Tasks to keep queued so that the CPU threads count beside the
    /// cards while the coordinator has more (see [`crate::share`]).
    pub fn cover(&self) -> usize {
        self.queue().share.cover(Instant::now())
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
    /// Threads end after their current task (stop it first to end
    /// sooner). The drop waits for them (up to `END_WAIT`), so a card's
    /// device is closed by the thread that held it before the process
    /// exits, not torn down under it.
    fn drop(&mut self) {
        let mut q = self.queue();
        q.closed = true;
        self.shared.ready.notify_all();
        let deadline = std::time::Instant::now() + END_WAIT;
        while q.alive > 0 {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                tracing::warn!("{} counting threads still busy at exit", q.alive);
                return;
            }
            q = match self.shared.ready.wait_timeout(q, left) {
                Ok((q, _)) => q,
                Err(e) => e.into_inner().0,
            };
        }
    }
}

/// Counts a counting thread out when it ends, panicking or not (after
/// its card, if it held the last reference, is closed).
struct Ending<'a>(&'a Shared);

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        let mut q = self.0.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.alive -= 1;
        self.0.ready.notify_all();
    }
}

/// How long dropping the pool waits for its threads to end.
const END_WAIT: Duration = Duration::from_secs(10);

/// The feeding threads of every card in `devices`: each card's own
/// ([`Device::feeders`]), each thread counting its own task while the
/// card counts the others'.
pub fn feeders(devices: &[Arc<dyn Device>]) -> usize {
    devices.iter().map(|d| d.feeders()).sum()
}

/// Takes tasks until the pool closes, counting them on `device` (a card)
/// or on the CPU.
fn count_loop(
    shared: &Shared,
    device: Option<Arc<dyn Device>>,
    done: &mpsc::UnboundedSender<Counted>,
) {
    loop {
        let (lease, stop) = {
            let mut q = shared.queue.lock().expect("queue lock");
            loop {
                if q.closed {
                    return;
                }
                let card = device.is_some();
                if let Some(i) = q.tasks.iter().position(|(l, _)| shared.takes(&q, l, card)) {
                    break q.tasks.remove(i).expect("found above");
                }
                q = shared.ready.wait(q).expect("queue lock");
            }
        };
        let counted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            count(shared, device.as_ref(), &lease, &stop)
        }));
        let (out, failed) = match (counted, &device) {
            (Ok(Ok(out)), _) => {
                shared.finished(out.as_ref(), device.is_some());
                (out, None)
            }
            (Ok(Err(why)), Some(card)) => (None, Some(format!("{}: {why}", card.name()))),
            (Err(_), Some(card)) => (None, Some(format!("{} panicked", card.name()))),
            (Ok(Err(_)), None) => (None, None),
            (Err(panic), None) => std::panic::resume_unwind(panic),
        };
        if let Some(why) = failed {
            card_failed(shared, &why, (lease, stop), done);
            return;
        }
        if done.send((lease, out)).is_err() {
            return;
        }
    }
}

/// A feeder's card failed (an error or a panic while counting `task`): a
/// card that failed once is not trusted again, so this feeder stops. The
/// task goes back to the queue for the threads left; with none left, it
/// and every queued task are given up (their leases run out at the
/// coordinator, and other workers take them).
fn card_failed(
    shared: &Shared,
    why: &str,
    task: (v1::Lease, Arc<AtomicBool>),
    done: &mpsc::UnboundedSender<Counted>,
) {
    tracing::error!("graphics card failed, no more tasks go to it: {why}");
    shared.feeders.fetch_sub(1, Ordering::Relaxed);
    let orphans: Vec<_> = {
        let mut q = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.tasks.push_front(task);
        if shared.can_count() {
            Vec::new()
        } else {
            q.tasks.drain(..).collect()
        }
    };
    shared.ready.notify_all();
    for (lease, _) in orphans {
        let _ = done.send((lease, None));
    }
}

impl Shared {
    /// Whether any thread can still count: CPU threads, or a card's feeder.
    fn can_count(&self) -> bool {
        self.cpu || self.feeders.load(Ordering::Relaxed) > 0
    }

    /// Whether a thread on a card (`card`) or on the CPU takes `lease`
    /// from `q`: a task asked for on one kind of device goes to a thread
    /// of that kind, where the pool has one; a task for either goes to a
    /// CPU thread beside cards only while the cards have enough else
    /// queued (see [`crate::share`]).
    fn takes(&self, q: &Queue, lease: &v1::Lease, card: bool) -> bool {
        let (cpu, cards) = (self.cpu, self.feeders.load(Ordering::Relaxed) > 0);
        match v1::CountOn::try_from(lease.count_on).unwrap_or(v1::CountOn::Any) {
            v1::CountOn::Any if card || !cards => true,
            v1::CountOn::Any => q.share.cpu_may_take(q.tasks.len() - 1, Instant::now()),
            v1::CountOn::Card => card || !cards,
            v1::CountOn::Cpu => !card || !cpu,
        }
    }

    /// A task was counted (on a card, or on the CPU in the time given).
    fn finished(&self, out: Option<&(v1::TaskResult, u64, Duration)>, card: bool) {
        let Some((_, _, took)) = out else {
            return;
        };
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if card {
            q.share.card_finished(Instant::now());
        } else {
            q.share.cpu_finished(*took);
        }
    }

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
/// to another worker); an error when the card it was counted on failed.
fn count(
    shared: &Shared,
    device: Option<&Arc<dyn Device>>,
    lease: &v1::Lease,
    stop: &AtomicBool,
) -> Result<Option<(v1::TaskResult, u64, Duration)>, String> {
    if stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let started = std::time::Instant::now();
    let Some(wire) = lease.task.as_ref() else {
        return Ok(None);
    };
    let (spec, task) = match task_from_wire(wire) {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(error = %e, "the coordinator sent a task that does not decode; skipping it");
            return Ok(None);
        }
    };
    let Some(plan) = shared.plan(spec) else {
        return Ok(None);
    };
    let plan = plan.with_device(device.cloned());
    let (tally, checksum, path) = match plan.count_task_on(&task, stop) {
        Ok(Some(counted)) => counted,
        Ok(None) => return Ok(None),
        Err(PlanError::Device(e)) => return Err(e.to_string()),
        Err(e) => {
            tracing::error!(
                task = task.index,
                "cannot count this task here: {e}; it goes back to the coordinator when its lease \
                 runs out"
            );
            return Ok(None);
        }
    };
    let elapsed = started.elapsed();
    let result = v1::TaskResult {
        checksum,
        elapsed_ms: elapsed.as_millis() as u64,
        solver_version: result_version(path, device),
        ..nqueens_proto::v1::TaskResult::from(&tally)
    };
    Ok(Some((result, task.subproblems, elapsed)))
}

/// A result's version: the build and what counted it, `0.1.0 avx512` or
/// `0.1.0 gpu:NVIDIA H100 (vulkan)` (a cross-device check tells the kinds
/// apart by it).
fn result_version(path: Path, device: Option<&Arc<dyn Device>>) -> String {
    let on = match (path, device) {
        (Path::Gpu, Some(card)) => card.name(),
        _ => path.name(),
    };
    nqueens_proto::fit_version(&format!("{} {on}", env!("CARGO_PKG_VERSION")))
}
