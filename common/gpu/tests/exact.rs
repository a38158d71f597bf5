//! The GPU kernel against the CPU engine, on whatever device this machine
//! has (in CI: Mesa's lavapipe, a Vulkan device on the CPU). Without any
//! device every test prints why and passes.

mod support;

use nqueens_common::engine::counts::PieceCounts;
use nqueens_common::engine::device::Device;
use nqueens_common::engine::interior::{Interior, Start};
use nqueens_common::known::known;
use nqueens_common::plan::{Plan, Strategy};
use nqueens_common::Size;
use nqueens_gpu::jobs::Prepared;
use nqueens_gpu::kernel::{Kernel, Launch};
use nqueens_gpu::stream::{Batch, Feed};
use nqueens_gpu::{first_card, Card, Tuning};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;
use support::{pieces_and_cpu_counts, plans_up_to, random_pieces_up_to_32, same_as_cpu, spec};

/// The machine's card with short launches (so every search is resumed
/// many times), or `None` with the reason printed.
fn card(steps: u32) -> Option<Card> {
    match first_card() {
        Ok(card) => {
            let mut t = card.tuning();
            t.launch.steps = steps;
            println!("counting on {}", card.name());
            Some(card.tuned(t))
        }
        Err(e) if std::env::var_os("NQUEENS_REQUIRE_GPU").is_some() => {
            panic!("NQUEENS_REQUIRE_GPU is set, and there is no device: {e}")
        }
        Err(e) => {
            println!("skipped: no GPU or software Vulkan device ({e})");
            None
        }
    }
}

#[test]
fn every_strategy_counts_every_n_up_to_14_as_the_cpu_does() {
    let Some(card) = card(1000) else { return };
    plans_up_to(&(Arc::new(card) as Arc<dyn Device>), 14);
}

/// Seeded random pieces of real plans of N = 19..=32, each strategy: the
/// card's counts are the CPU lanes', interior by interior.
#[test]
fn random_pieces_of_real_plans_up_to_32_count_as_on_the_cpu() {
    let Some(card) = card(4096) else { return };
    random_pieces_up_to_32(&card);
}

/// Every job's counters start just below 2^32: the kernel carries into
/// the high words, and the counts are still exact.
#[test]
fn counters_carry_past_32_bits() {
    let Some(card) = card(4096) else { return };
    let mut t = card.tuning();
    t.launch.bias = (1 << 32) - 3;
    let card: Arc<dyn Device> = Arc::new(card.tuned(t));
    same_as_cpu(&card, spec(12, Strategy::Frame, 1, 2));
}

/// The shader without naga's bounds checks (as hardware GPUs run it),
/// with the rows' tables read where they lie and from each thread's copy:
/// every index it forms is in range, so it counts as the checked one.
#[test]
fn the_unchecked_shader_counts_as_the_cpu_does() {
    for in_group in [false, true] {
        let Some(card) = card(256) else { return };
        let mut t = card.tuning();
        (t.launch.checked, t.launch.rows_in_group) = (false, in_group);
        let card: Arc<dyn Device> = Arc::new(card.tuned(t));
        for n in [9, 12] {
            same_as_cpu(&card, spec(n, Strategy::Frame, 1, 2));
            same_as_cpu(&card, spec(n, Strategy::Prefix, 3, 2));
        }
    }
}

/// The machine's card with `turn` made to its launches (one of its
/// defaults turned the other way).
fn turned(steps: u32, turn: fn(&mut Launch)) -> Option<Arc<Card>> {
    let card = card(steps)?;
    let mut t = card.tuning();
    turn(&mut t.launch);
    println!("{:?}", t.launch);
    Some(Arc::new(card.tuned(t)))
}

/// With `turn` made to the card's launches: every strategy, searches
/// resumed after every step, counters past 32 bits in the unchecked
/// shader, and random pieces of real plans count as on the CPU.
fn turned_counts_as_the_cpu_does(turn: fn(&mut Launch)) {
    let Some(resumed) = turned(1, turn) else {
        return;
    };
    let resumed: Arc<dyn Device> = resumed;
    same_as_cpu(&resumed, spec(9, Strategy::Frame, 1, 1));
    same_as_cpu(&resumed, spec(10, Strategy::Prefix, 2, 1));
    let card = turned(1000, turn).unwrap();
    let device: Arc<dyn Device> = card.clone();
    for n in [8, 11, 13] {
        same_as_cpu(&device, spec(n, Strategy::Frame, 2, 2));
        same_as_cpu(&device, spec(n, Strategy::Rings, 2, 2));
        same_as_cpu(&device, spec(n, Strategy::Prefix, 3, 2));
    }
    let mut t = card.tuning();
    (t.launch.bias, t.launch.checked) = ((1 << 32) - 3, false);
    let biased: Arc<dyn Device> = Arc::new(card.tuned(t));
    same_as_cpu(&biased, spec(12, Strategy::Frame, 1, 2));
    let never = AtomicBool::new(false);
    for n in [19, 24, 32u32] {
        for strategy in [Strategy::Frame, Strategy::Rings] {
            let seed = u64::from(n) * 31;
            let (pieces, froms, want) = pieces_and_cpu_counts(spec(n, strategy, 1, 1), seed, 6, 11);
            let got = card.count_below(&pieces, &froms, &never).unwrap().unwrap();
            assert_eq!(got, want, "N={n} {strategy}");
        }
    }
}

/// The rows' tables where the card's default does not keep them (in
/// workgroup memory, or read from the card's memory at each step).
#[test]
fn both_places_for_the_rows_tables_count_as_the_cpu_does() {
    turned_counts_as_the_cpu_does(|l| l.rows_in_group = !l.rows_in_group);
}

/// The other form of the shader's loop than the card's default (see
/// `Launch::nested`).
#[test]
fn both_forms_of_loop_count_as_the_cpu_does() {
    turned_counts_as_the_cpu_does(|l| l.nested = !l.nested);
}

/// The other form of step than the card's default (see `Launch::flat`),
/// in either form of loop, with the rows' tables in either place.
#[test]
fn both_forms_of_step_count_as_the_cpu_does() {
    turned_counts_as_the_cpu_does(|l| l.flat = !l.flat);
    turned_counts_as_the_cpu_does(|l| (l.flat, l.nested) = (!l.flat, !l.nested));
    turned_counts_as_the_cpu_does(|l| {
        (l.nested, l.rows_in_group) = (!l.nested, !l.rows_in_group);
    });
}

/// A hardware card's switches (bounds checks, the rows' tables' place,
/// the loop's and the step's forms), all at once, as no software device
/// runs them.
#[test]
fn a_hardware_cards_switches_count_as_the_cpu_does() {
    turned_counts_as_the_cpu_does(|l| {
        let card = Tuning::new(wgpu::DeviceType::DiscreteGpu, &Default::default()).launch;
        (l.checked, l.rows_in_group, l.nested) = (card.checked, card.rows_in_group, card.nested);
        l.flat = card.flat;
    });
}

/// Every shader a count may ask for (stacks of 1 to 30 rows, the rows'
/// tables in either place, with and without bounds checks, either form
/// of loop and of step) is valid WGSL that this device builds, at the workgroup size
/// the kernel picks.
#[test]
fn every_depth_of_stack_makes_a_shader_the_device_takes() {
    let Some(adapter) = nqueens_gpu::adapters().into_iter().next() else {
        assert!(
            std::env::var_os("NQUEENS_REQUIRE_GPU").is_none(),
            "no device"
        );
        println!("skipped: no GPU or software Vulkan device");
        return;
    };
    let kernel = Kernel::open(&adapter).unwrap();
    let mut launch = Launch {
        steps: 1,
        most_steps: 1,
        slots: 1,
        fill: false,
        max_launches: 1,
        bias: 0,
        queue_jobs: 1,
        steal: false,
        checked: true,
        rows_in_group: false,
        nested: true,
        flat: false,
    };
    for levels in 1..=30 {
        for (checked, in_group) in [(true, false), (true, true), (false, false), (false, true)] {
            (launch.checked, launch.rows_in_group) = (checked, in_group);
            launch.nested = !launch.nested;
            launch.flat = levels % 2 == 1;
            if let Err(e) = kernel.prepare(levels, 1 << 22, &launch) {
                panic!("{levels} rows, {launch:?}: {e}");
            }
        }
    }
}

/// Batches of many more jobs than the card's queue holds (4) are put in
/// as the card's threads take jobs, exactly.
#[test]
fn jobs_past_the_queues_room_wait_for_it() {
    let Some(card) = card(512) else { return };
    let mut t = card.tuning();
    t.launch.queue_jobs = 7;
    let card: Arc<dyn Device> = Arc::new(card.tuned(t));
    same_as_cpu(&card, spec(11, Strategy::Frame, 1, 2));
}

/// One step per launch at the extreme: every search stops and resumes at
/// every node, and nothing is lost or counted twice.
#[test]
fn searches_resume_exactly_after_every_step() {
    let Some(card) = card(1) else { return };
    let card: Arc<dyn Device> = Arc::new(card);
    same_as_cpu(&card, spec(9, Strategy::Frame, 1, 1));
    same_as_cpu(&card, spec(10, Strategy::Prefix, 2, 1));
}

/// Threads counting on one card at once (a worker's feeders, `solve`'s
/// threads), their runs in flight together: each gets its own counts.
#[test]
fn threads_counting_at_once_each_get_their_own_counts() {
    let Some(card) = card(512) else { return };
    let card: Arc<dyn Device> = Arc::new(card);
    let plans = [
        (11, Strategy::Frame, 1),
        (12, Strategy::Prefix, 3),
        (10, Strategy::Rings, 2),
        (12, Strategy::Frame, 2),
    ];
    std::thread::scope(|s| {
        for (n, strategy, depth) in plans {
            let card = &card;
            s.spawn(move || same_as_cpu(card, spec(n, strategy, depth, 6)));
        }
    });
}

#[test]
fn a_count_stops_when_asked() {
    let Some(card) = card(16) else { return };
    let plan = Plan::new(spec(13, Strategy::Frame, 1, 1)).unwrap();
    let pieces = plan.random_pieces(1, 4, 12);
    let froms = vec![Start::default(); pieces.len()];
    let stop = AtomicBool::new(true);
    assert_eq!(card.count_below(&pieces, &froms, &stop).unwrap(), None);
}

/// A count given up while its batch is on the card (its thread stops
/// waiting; the card drops its jobs not yet started) leaves the card's
/// queue sound: the next counts on it are exact.
#[test]
fn a_batch_given_up_leaves_the_queue_counting_exactly() {
    let Some(card) = card(64) else { return };
    let (pieces, froms, want) = pieces_and_cpu_counts(spec(13, Strategy::Frame, 1, 1), 9, 8, 12);
    for _ in 0..3 {
        let stop = AtomicBool::new(false);
        let stopped = std::thread::scope(|s| {
            let counting = s.spawn(|| card.count_below(&pieces, &froms, &stop));
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            counting.join().unwrap()
        });
        // Stopped, or done before the stop was seen: never a wrong count.
        match stopped.unwrap() {
            None => {}
            Some(got) => assert_eq!(got, want),
        }
        let never = AtomicBool::new(false);
        let again = card.count_below(&pieces, &froms, &never).unwrap();
        assert_eq!(again, Some(want.clone()));
    }
}

/// A few long jobs and thousands of idle threads, one step per launch:
/// the idle threads stop taking from the empty queue (its counter would
/// otherwise grow by every idle thread at every launch until it wrapped
/// round and handed jobs out twice), and the count is exact.
#[test]
fn idle_threads_leave_an_empty_queue_alone() {
    let Some(card) = card(1) else { return };
    let mut t = card.tuning();
    t.jobs = 1;
    t.launch.slots = t.launch.slots.max(2048);
    let card = card.tuned(t);
    let never = AtomicBool::new(false);
    let (pieces, froms, want) = pieces_and_cpu_counts(spec(12, Strategy::Prefix, 2, 1), 5, 2, 10);
    let got = card.count_below(&pieces, &froms, &never).unwrap().unwrap();
    assert_eq!(got, want);
}

/// A few jobs, many idle threads and short launches: once the queue is
/// empty the searches still going are split among the idle threads (and
/// those splits split again), and every count is still the CPU's, with
/// the rows' tables in either place and either form of loop. With
/// splitting off, nothing is split and the counts are the same.
#[test]
fn long_searches_are_split_among_idle_threads_exactly() {
    let never = AtomicBool::new(false);
    let (pieces, froms, want) = pieces_and_cpu_counts(spec(14, Strategy::Frame, 1, 1), 3, 12, 12);
    let turns = [
        (true, false, true),
        (true, true, false),
        (false, false, true),
    ];
    for (steal, in_group, nested) in turns {
        let Some(card) = card(8) else { return };
        let mut t = card.tuning();
        t.jobs = 1;
        t.launch.slots = 512;
        (t.launch.steal, t.launch.rows_in_group) = (steal, in_group);
        t.launch.nested = nested;
        let card = card.tuned(t);
        let got = card.count_below(&pieces, &froms, &never).unwrap().unwrap();
        let at = format!("splitting {steal}, rows in workgroup memory {in_group}, nested {nested}");
        assert_eq!(got, want, "{at}");
        let split = card.jobs_split();
        assert_eq!(split > 0, steal, "{at}: {split} jobs split");
        println!("{at}: {split} jobs split");
    }
}

/// The card counts the steps its threads take: a step to take a job and
/// one for each queen the card places (no step backs up), never more than
/// the launches offered.
#[test]
fn the_card_counts_the_steps_its_threads_take() {
    let Some(card) = card(64) else { return };
    let mut t = card.tuning();
    t.launch.steal = false;
    let card = card.tuned(t);
    let (pieces, froms, want) = pieces_and_cpu_counts(spec(13, Strategy::Frame, 1, 1), 4, 8, 12);
    let never = AtomicBool::new(false);
    let got = card.count_below(&pieces, &froms, &never).unwrap().unwrap();
    assert_eq!(got, want);
    let host = Prepared::new(&pieces, &froms, t.jobs);
    let placed = |c: &PieceCounts| c.nodes - (c.c1 + c.c2 + c.c4 + c.c8);
    let on_card: u64 =
        got.iter().map(placed).sum::<u64>() - host.host.iter().map(placed).sum::<u64>();
    let jobs = host.jobs.len() as u64;
    let steps = card.busy().unwrap();
    println!("{steps:?}: {on_card} queens placed on the card, {jobs} jobs");
    assert!(on_card > 0 && jobs > 0);
    assert_eq!(steps.taken, on_card + jobs, "{steps:?}");
    assert!(steps.taken <= steps.offered, "{steps:?}");
}

/// Launches a whole count takes with and without its long searches
/// split, and with batches cut into fewer or more jobs (a launch lasts as
/// long as its busiest thread, so on a card fewer launches for the same
/// count is less time idle): N=16 from 8 feeding threads (and from one),
/// 2,048 searches in flight, 256 steps per launch.
/// `cargo test --release -p nqueens-gpu --test exact -- --ignored --nocapture launches`
#[test]
#[ignore]
fn launches_with_and_without_splitting() {
    let n = Size::new(16).unwrap();
    // Feeding threads, splitting, jobs per batch (512 is the default: a
    // quarter per search).
    let cases = [
        (8, true, 512),
        (8, false, 512),
        (8, true, 2048),
        (8, true, 8192),
        (1, true, 512),
        (1, false, 512),
    ];
    for (threads, steal, jobs) in cases {
        let Some(card) = card(256) else { return };
        let mut t = card.tuning();
        (t.launch.slots, t.jobs, t.launch.steal) = (2048, jobs, steal);
        let card = Arc::new(card.tuned(t));
        let device: Arc<dyn Device> = Arc::clone(&card) as _;
        let s = nqueens_common::plan::solve::solve_with(n, threads, None, Some(device)).unwrap();
        assert_eq!(s.counts.total().unwrap(), known(16).unwrap().total);
        println!(
            "{threads} threads, splitting {steal}, jobs per batch {jobs}: \
             {} launches, {} jobs split, {:.1} s",
            card.launches(),
            card.jobs_split(),
            s.elapsed.as_secs_f64()
        );
    }
}

/// A device that cuts every batch into jobs as a card's does and counts
/// nothing on a card: the jobs and interiors it was handed.
#[derive(Debug, Default)]
struct CutOnly {
    /// Jobs each batch is cut into, at least.
    target: usize,
    jobs: std::sync::atomic::AtomicU64,
    interiors: std::sync::atomic::AtomicU64,
}

impl Device for CutOnly {
    fn name(&self) -> &str {
        "cut only"
    }

    fn count_below(
        &self,
        interiors: &[Interior],
        froms: &[Start],
        _stop: &AtomicBool,
    ) -> Result<Option<Vec<PieceCounts>>, nqueens_common::engine::device::DeviceError> {
        use std::sync::atomic::Ordering::Relaxed;
        let p = Prepared::new(interiors, froms, self.target);
        self.jobs.fetch_add(p.jobs.len() as u64, Relaxed);
        self.interiors.fetch_add(interiors.len() as u64, Relaxed);
        // Completions enough that the plan's checks of its symmetric
        // counts against the total pass, and the count goes to its end.
        Ok(Some(
            p.host
                .into_iter()
                .map(|c| PieceCounts { c1: 1 << 30, ..c })
                .collect(),
        ))
    }
}

/// The host's share of a whole count on a card: the plan walked and every
/// batch cut into jobs as a card's are (16,384 a batch at least, or
/// `NQUEENS_BENCH_JOBS`: a CUDA card cuts one a thread it holds), with
/// nothing counted on a device. N from `NQUEENS_BENCH_N` (20), feeding
/// threads from `NQUEENS_BENCH_THREADS` (2).
/// `cargo test --release -p nqueens-gpu --test exact -- --ignored --nocapture hosts_share`
#[test]
#[ignore]
fn the_hosts_share_of_a_whole_count() {
    use std::sync::atomic::Ordering::Relaxed;
    let env = |name, default| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (n, threads) = (env("NQUEENS_BENCH_N", 20), env("NQUEENS_BENCH_THREADS", 2));
    let cut = Arc::new(CutOnly {
        target: env("NQUEENS_BENCH_JOBS", 16_384),
        ..CutOnly::default()
    });
    let device: Arc<dyn Device> = Arc::clone(&cut) as _;
    let t = Instant::now();
    let size = Size::new(n as u32).unwrap();
    // Only the last check may fail (Burnside's divisions of made-up
    // totals), once every batch has been cut.
    let walked = nqueens_common::plan::solve::solve_with(size, threads, None, Some(device));
    if let Err(e) = walked {
        assert!(e.to_string().contains("do not add up"), "{e}");
    }
    println!(
        "N={n}, {threads} threads: {:.2} s, {} jobs from {} interiors",
        t.elapsed().as_secs_f64(),
        cut.jobs.load(Relaxed),
        cut.interiors.load(Relaxed)
    );
}

/// The workgroups a card runs at once are measured per shader (at least
/// one, at most those asked for, the same when asked again), and a card
/// whose searches in flight fill that width counts exactly, with fewer
/// searches than asked for where the card holds fewer: in either form of
/// the shader's loop.
#[test]
fn a_card_filled_to_its_measured_width_counts_as_the_cpu_does() {
    for nested in [false, true] {
        let Some(card) = card(512) else { return };
        let mut t = card.tuning();
        (t.launch.fill, t.launch.slots, t.jobs) = (true, 1 << 12, 0);
        t.launch.nested = nested;
        filled_to_its_width(card.tuned(t));
    }
}

/// The card's measured width, once per shader, within what was asked;
/// its searches in flight that width, counting as the CPU does.
fn filled_to_its_width(card: Card) {
    let t = card.tuning();
    let adapter = nqueens_gpu::adapters().into_iter().next().unwrap();
    let kernel = Kernel::open(&adapter).unwrap();
    let mut narrow = true;
    for levels in [1, 6, 13] {
        let (wg, _) = kernel.prepare(levels, 1 << 10, &t.launch).unwrap();
        let most = (1 << 12) / wg;
        let width = kernel.width(levels, 1 << 10, &t.launch, most).unwrap();
        println!("{levels} rows: {width} workgroups of {wg} at once");
        assert!(
            (1..=most).contains(&width),
            "{levels} rows: {width} of {most}"
        );
        let again = kernel.width(levels, 1 << 10, &t.launch, most).unwrap();
        assert_eq!(again, width, "measured once per shader");
        narrow &= width < most;
    }

    let card = Arc::new(card);
    let device: Arc<dyn Device> = Arc::clone(&card) as Arc<dyn Device>;
    same_as_cpu(&device, spec(12, Strategy::Frame, 1, 2));
    let searches = card.busy().unwrap().searches;
    println!("{searches} searches at once");
    // Jobs per batch follow the width: a quarter of a job per search.
    assert_eq!(card.jobs_per_batch(), searches as usize / 4);
    assert!((1..=1 << 12).contains(&searches), "{searches}");
    if narrow {
        assert!(
            searches < 1 << 12,
            "{searches}: the card's width was not used"
        );
    }
}

/// Dropping a card's feed returns only once its driver thread has ended
/// and let go of the device (a process that exits with that thread inside
/// the device's driver can crash in the driver's exit handlers).
#[test]
fn dropping_a_feed_waits_for_its_driver_thread() {
    let Some(card) = card(64) else { return };
    let t = card.tuning();
    drop(card);
    let adapter = nqueens_gpu::adapters().into_iter().next().unwrap();
    let kernel = Arc::new(Kernel::open(&adapter).unwrap());
    let feed = Feed::start(Arc::clone(&kernel), t.launch);
    let (pieces, froms, _) = pieces_and_cpu_counts(spec(12, Strategy::Frame, 1, 1), 3, 4, 9);
    let p = Prepared::new(&pieces, &froms, t.jobs);
    let batch = Batch {
        tables: p.tables,
        jobs: p.jobs,
        levels: p.levels,
    };
    let never = AtomicBool::new(false);
    assert!(feed.count(batch, &never).unwrap().is_some());
    drop(feed);
    assert_eq!(
        Arc::strong_count(&kernel),
        1,
        "the driver thread still holds the device"
    );
}
