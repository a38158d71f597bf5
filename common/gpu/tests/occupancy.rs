//! How busy a warp's lanes are under each form of the shader's loop (see
//! `Launch::nested`), modelled on the sizes of real jobs: no device is
//! needed, and nothing is timed.
//!
//! `NQUEENS_BENCH_N=17 cargo test --release -p nqueens-gpu --test occupancy -- --ignored --nocapture`
//!
//! The jobs are one N's rings cut as a card cuts them (16,384 a batch at
//! least, or `NQUEENS_BENCH_JOBS`: a CUDA card cuts one a thread it
//! holds), in the queue's order, each as long as the steps its search
//! takes (counted on the CPU). A warp of W lanes takes them in turn:
//!
//! - nested: a lane steps its search until it ends or the launch's steps
//!   run out, and the warp's lanes take their next jobs together once
//!   each has left its loop; the share of lane-steps that do work is the
//!   warp's occupancy;
//! - single: a lane takes its next job as soon as its search ends; every
//!   lane always has work, and what it costs is the warp iterations in
//!   which some lane takes (a taking lane waits on the card's memory).

use nqueens_common::engine::border::Frames;
use nqueens_common::engine::interior::{Interior, Start};
use nqueens_common::Size;
use nqueens_gpu::jobs::Prepared;

/// Steps of each job of N's rings, in the order a card's queue holds them.
fn job_steps(n: u32, target: usize) -> Vec<u64> {
    let frames = Frames::new(Size::new(n).unwrap(), 1).unwrap();
    let mut interiors: Vec<Interior> = Vec::new();
    frames.for_each_in(0, u64::MAX, |f, _, _| interiors.push(frames.interior(&f)));
    let mut out = Vec::new();
    for batch in interiors.chunks(nqueens_gpu::stream::MOST_INTERIORS) {
        let froms = vec![Start::default(); batch.len()];
        for job in Prepared::new(batch, &froms, target).jobs {
            let start = Start {
                row: job[1] as u8,
                l: job[2],
                d: job[3],
                r: job[4],
            };
            let c = batch[job[0] as usize].count_from(&start);
            // A step places a queen; the last row's are counted at once.
            out.push(1 + c.nodes - c.c1);
        }
    }
    out
}

/// The nested form: the share of a warp's lane-steps that do work, with
/// `steps` per launch.
fn nested(jobs: &[u64], lanes: usize, steps: u64) -> f64 {
    let mut queue = jobs.iter().copied();
    let mut left = vec![0u64; lanes];
    let (mut work, mut time) = (0u64, 0u64);
    loop {
        let mut budget = vec![steps; lanes];
        loop {
            for (l, b) in left.iter_mut().zip(&budget) {
                if *l == 0 && *b > 0 {
                    *l = queue.next().unwrap_or(0);
                }
            }
            // The warp's loop runs until its longest lane leaves it.
            let mut longest = 0;
            for (l, b) in left.iter_mut().zip(budget.iter_mut()) {
                let d = (*l).min(*b);
                (*l, *b, work, longest) = (*l - d, *b - d, work + d, longest.max(d));
            }
            time += longest;
            if longest == 0 {
                break;
            }
        }
        if left.iter().all(|&l| l == 0) {
            return work as f64 / (time * lanes as u64) as f64;
        }
    }
}

/// The single form: the share of a warp's iterations in which some lane
/// takes its next job.
fn single(jobs: &[u64], lanes: usize) -> f64 {
    let mut queue = jobs.iter().copied();
    let mut left = vec![0u64; lanes];
    let (mut taking, mut time) = (0u64, 0u64);
    loop {
        let mut took = false;
        for l in left.iter_mut().filter(|l| **l == 0) {
            if let Some(j) = queue.next() {
                (*l, took) = (j, true);
            }
        }
        taking += u64::from(took);
        let Some(&least) = left.iter().filter(|&&l| l > 0).min() else {
            return taking as f64 / time as f64;
        };
        for l in left.iter_mut().filter(|l| **l > 0) {
            *l -= least;
        }
        time += least;
    }
}

#[test]
#[ignore]
fn lane_occupancy() {
    let n = std::env::var("NQUEENS_BENCH_N").map_or(16, |v| v.parse().unwrap());
    let target = std::env::var("NQUEENS_BENCH_JOBS").map_or(16_384, |v| v.parse().unwrap());
    let jobs = job_steps(n, target);
    let mean = jobs.iter().sum::<u64>() as f64 / jobs.len() as f64;
    let most = jobs.iter().max().unwrap();
    println!(
        "N={n}: {} jobs, {mean:.0} steps each on average, {most} at most",
        jobs.len()
    );
    for lanes in [8, 32] {
        let mut occupied: Vec<String> = [2048, 16_384]
            .iter()
            .map(|&s| {
                format!(
                    "{:.0}% at {s} steps a launch",
                    100.0 * nested(&jobs, lanes, s)
                )
            })
            .collect();
        occupied.push(format!(
            "{:.0}% running each search to its end (as a CUDA launch does)",
            100.0 * nested(&jobs, lanes, u64::MAX)
        ));
        println!(
            "{lanes} lanes: nested, lanes busy {}; single, some lane takes in {:.2}% of iterations",
            occupied.join(", "),
            100.0 * single(&jobs, lanes)
        );
    }
}

/// The GPU peer's subproblems (ygch/n_queens' scheme as its paper and
/// README describe it): its host places the first `rows` rows, the first
/// row's queen in the left half (for odd N also in the middle column, the
/// second row's queen then in the left half), in depth-first order; a
/// thread searches one to its end, the last row counted at the
/// next-to-last. Each one's steps: the queens its thread places.
fn peer_steps(n: u32, rows: u32) -> Vec<u64> {
    let all = (1u32 << n) - 1;
    let mut starts = Vec::new();
    peer_prefixes(n, (0, 0, 0), rows, false, &mut starts);
    if n % 2 == 1 {
        peer_prefixes(n, (0, 0, 0), rows, true, &mut starts);
    }
    starts
        .into_iter()
        .map(|(cols, l, r)| {
            let mut stack = vec![(cols, l, r, all & !(cols | l | r))];
            let mut steps = 0;
            while let Some(&mut (c, l, r, ref mut open)) = stack.last_mut() {
                if *open == 0 {
                    stack.pop();
                    continue;
                }
                let bit = *open & open.wrapping_neg();
                *open ^= bit;
                steps += 1;
                let (c, l, r) = (c | bit, (l | bit) << 1 & all, (r | bit) >> 1);
                let next = all & !(c | l | r);
                if c.count_ones() + 1 < n && next != 0 {
                    stack.push((c, l, r, next));
                }
            }
            steps
        })
        .collect()
}

/// The peer's host's prefixes of `rows` rows from `at` (columns, left and
/// right diagonals), the middle column's if `odd`.
fn peer_prefixes(
    n: u32,
    at: (u32, u32, u32),
    rows: u32,
    odd: bool,
    out: &mut Vec<(u32, u32, u32)>,
) {
    let (c, l, r) = at;
    let half = (1u32 << (n / 2)) - 1;
    let allowed = match (c, odd) {
        (0, false) => half,
        (0, true) => 1 << (n / 2),
        (c, true) if c.is_power_of_two() => (1 << ((n - 2) / 2)) - 1,
        _ => (1u32 << n) - 1,
    };
    let mut open = allowed & !(c | l | r);
    while open != 0 {
        let bit = open & open.wrapping_neg();
        open ^= bit;
        let next = (
            c | bit,
            ((l | bit) << 1) & ((1u32 << n) - 1),
            (r | bit) >> 1,
        );
        if rows == 1 {
            out.push(next);
        } else {
            peer_prefixes(n, next, rows - 1, odd, out);
        }
    }
}

/// The peer's warps run nested (a warp's threads take their next
/// subproblems together once its longest search has ended): the share of
/// its lanes' steps that work. With it, how many of its instructions a
/// step does a useful step cost (its loop is 30 instructions on sm_90).
#[test]
#[ignore]
fn the_peers_lane_occupancy() {
    let n = std::env::var("NQUEENS_BENCH_N").map_or(16, |v| v.parse().unwrap());
    let jobs = peer_steps(n, 5);
    let total: u64 = jobs.iter().sum();
    let busy = nested(&jobs, 32, u64::MAX);
    println!(
        "N={n}: {} subproblems, {total} steps, {} at most; 32 lanes: {:.1}% busy",
        jobs.len(),
        jobs.iter().max().unwrap(),
        100.0 * busy
    );
}
