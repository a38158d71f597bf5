//! A worker's CPU threads beside a card: they leave the last tasks to the
//! card once both rates are measured, and yield the processor to its
//! feeders.

use nqueens_common::engine::counts::PieceCounts;
use nqueens_common::engine::device::{Device, DeviceError};
use nqueens_common::engine::interior::{Interior, Start};
use nqueens_common::engine::join::Budget;
use nqueens_common::engine::lanes;
use nqueens_common::plan::{Plan, PlanSpec, Strategy};
use nqueens_common::Size;
use nqueens_proto::{task_to_wire, v1};
use nqueens_worker::pool::{Counted, Pool};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex};
use tokio::sync::mpsc;

/// A card that counts as the CPU's lanes do, but only while its gate is
/// open; it tells how many counts wait at the gate.
#[derive(Debug, Default)]
struct Gated {
    /// Whether the gate is open, and the counts waiting at it.
    state: Mutex<(bool, usize)>,
    changed: Condvar,
}

impl Gated {
    fn set_open(&self, open: bool) {
        self.state.lock().unwrap().0 = open;
        self.changed.notify_all();
    }

    /// Waits until `n` counts wait at the closed gate.
    fn wait_for_waiting(&self, n: usize) {
        let s = self.state.lock().unwrap();
        drop(self.changed.wait_while(s, |s| s.1 < n).unwrap());
    }
}

impl Device for Gated {
    fn name(&self) -> &str {
        "gpu:gated (test)"
    }

    /// Several, as a hardware card asks for: the pool starts them all.
    fn feeders(&self) -> usize {
        4
    }

    fn count_below(
        &self,
        interiors: &[Interior],
        froms: &[Start],
        stop: &AtomicBool,
    ) -> Result<Option<Vec<PieceCounts>>, DeviceError> {
        let mut s = self.state.lock().unwrap();
        s.1 += 1;
        self.changed.notify_all();
        s = self.changed.wait_while(s, |s| !s.0).unwrap();
        s.1 -= 1;
        drop(s);
        let counted =
            lanes::count_below(interiors, froms, None, stop).map_err(|_| DeviceError::Overflow)?;
        Ok(counted.map(|(c, _)| c))
    }
}

/// Leases of every task of an N-queens frame plan cut into about `tasks`
/// tasks, each to count on `on`.
fn leases(n: u32, tasks: u64, on: v1::CountOn) -> Vec<v1::Lease> {
    let n = Size::new(n).unwrap();
    let plan = Plan::new(PlanSpec::backtracking(n, Strategy::Frame, 0, tasks)).unwrap();
    let tasks = plan.schedule().tasks;
    (0..tasks.len())
        .map(|i| v1::Lease {
            job_id: 1,
            task: Some(task_to_wire(&plan.spec, &tasks.get(i).unwrap())),
            lease_id: i + 1,
            deadline_unix_ms: u64::MAX,
            count_on: on as i32,
        })
        .collect()
}

fn push(pool: &Pool, lease: &v1::Lease) {
    pool.push(*lease, Arc::new(AtomicBool::new(false)));
}

/// What counted a task: the card or the CPU.
fn on_card(c: &Counted) -> bool {
    let (result, _, _) = c.1.as_ref().expect("counted");
    result.solver_version.contains("gpu:gated")
}

/// The nice value of this process's thread named `name`, once a thread
/// has that name (a thread names itself as it starts).
#[cfg(target_os = "linux")]
fn nice_of(name: &str) -> Option<i64> {
    for entry in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = entry.unwrap().path();
        // A thread that ended since the directory was read has no files.
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        if comm.trim_end() == name {
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            // Fields after the command's closing parenthesis start at the
            // third; the nice value is the nineteenth.
            let after = &stat[stat.rfind(')').unwrap() + 2..];
            return Some(after.split(' ').nth(16).unwrap().parse().unwrap());
        }
    }
    None
}

/// Waits (10 s at most) until the CPU thread `count-0` runs at a nice 10
/// above the feeder `gpu-0-0`'s: each thread sets its own as it starts.
#[cfg(target_os = "linux")]
fn cpu_thread_yields_to_the_feeders() {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (cpu, feeder) = (nice_of("count-0"), nice_of("gpu-0-0"));
        if let (Some(cpu), Some(feeder)) = (cpu, feeder) {
            if cpu == (feeder + 10).min(19) {
                return;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the CPU thread yields to the feeders: nice {cpu:?}, feeder's {feeder:?}"
        );
        std::thread::yield_now();
    }
}

/// With the card's rate and the CPU's time per task measured, a task for
/// either kind with one other queued is left to the card: the CPU thread
/// passes it by and counts the CPU-only task behind it. Without the rule
/// it would take the first task it may count.
///
/// The CPU's task (all of N=14) is measured first, then twenty of the
/// card's (N=12 pieces): the card's rate is counted from its first
/// finish, so it finishes many tasks in the time of one CPU task, however
/// slow the machine running the test.
#[test]
fn the_cpu_thread_leaves_a_lone_task_to_the_card() {
    let card = Arc::new(Gated::default());
    let (done, mut counted) = mpsc::unbounded_channel();
    let devices: Vec<Arc<dyn Device>> = vec![card.clone()];
    let pool = Pool::new(1, None, Budget::default(), &devices, done);
    #[cfg(target_os = "linux")]
    cpu_thread_yields_to_the_feeders();
    let (cpu, cards, any) = (
        leases(12, 64, v1::CountOn::Cpu),
        leases(12, 64, v1::CountOn::Card),
        leases(12, 64, v1::CountOn::Any),
    );
    const MEASURED: usize = 20;
    assert!(
        cards.len() >= MEASURED + card.feeders(),
        "{} tasks",
        cards.len()
    );

    // Measure both: a long CPU task, then twenty card tasks.
    push(&pool, &leases(14, 1, v1::CountOn::Cpu)[0]);
    assert!(!on_card(&counted.blocking_recv().unwrap()));
    card.set_open(true);
    for lease in &cards[..MEASURED] {
        push(&pool, lease);
    }
    for _ in 0..MEASURED {
        assert!(on_card(&counted.blocking_recv().unwrap()));
    }

    // Every feeder held at the gate; then a task for either, and one for
    // the CPU behind it.
    card.set_open(false);
    for lease in &cards[MEASURED..MEASURED + card.feeders()] {
        push(&pool, lease);
    }
    card.wait_for_waiting(card.feeders());
    push(&pool, &any[0]);
    push(&pool, &cpu[1]);
    let next = counted.blocking_recv().unwrap();
    assert_eq!(
        next.0.lease_id, cpu[1].lease_id,
        "the CPU counted the task for either"
    );
    assert!(!on_card(&next));
    assert_eq!(pool.queued(), 1, "the task for either waits for the card");

    card.set_open(true);
    let rest: Vec<Counted> = (0..=card.feeders())
        .map(|_| counted.blocking_recv().unwrap())
        .collect();
    let last = rest.iter().find(|c| c.0.lease_id == any[0].lease_id);
    assert!(on_card(last.expect("the task for either was counted")));
    assert!(rest.iter().all(on_card));
}
