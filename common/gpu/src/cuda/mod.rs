//! Counting on NVIDIA cards through CUDA (`NQUEENS_GPU_API=cuda`), beside
//! the wgpu path that every card takes.
//!
//! The kernel (`count.cu`) is the fast CUDA counters' design: one launch
//! per batch, its threads taking jobs from a counter until they run out,
//! each job one depth-first search with its stack in shared memory, and
//! several feeding threads each launching on a stream of its own, so one
//! batch's tail overlaps the next. It counts the same jobs as the wgpu
//! shader ([`crate::jobs`]), so a [`CudaCard`] gives what the CPU's lanes
//! give, as every [`Device`] must.
//!
//! - [`driver`]: a card through the CUDA driver, the kernel compiled by
//!   NVRTC at run time ([`compile`]; both libraries opened at run time, so
//!   the build needs no CUDA toolkit, and a machine without one has no
//!   CUDA cards).
//! - [`host`]: the kernel's own source compiled for the host, its threads'
//!   steps interleaved in a seeded order: how the tests check the kernel
//!   where there is no NVIDIA card.

pub mod compile;
pub mod driver;
pub mod host;
pub mod nvrtc;

use crate::cards::{Choice, Overrides};
use crate::jobs::count_in_batches;
use crate::stream::InteriorCounts;
use nqueens_common::engine::counts::PieceCounts;
use nqueens_common::engine::device::{Busy, Device, DeviceError};
use nqueens_common::engine::interior::{Interior, Start};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What one batch's launch gave.
#[derive(Debug)]
pub struct Ran {
    /// Completions and queens placed per interior.
    pub counts: InteriorCounts,
    /// Threads launched.
    pub threads: u64,
    /// The most steps one of them took: the launch lasted that long, and
    /// offered each thread as many.
    pub busiest: u64,
}

/// Refuses jobs whose rows, from the start row to the next-to-last
/// (`job[1]..=job[5]`), are more than the `levels` a thread's stack and
/// its copy of its job's pairs hold: on a card they would run into
/// another thread's.
pub(crate) fn rows_fit(jobs: &[[u32; 8]], levels: u32) -> Result<(), DeviceError> {
    match jobs.iter().find(|j| j[5] < j[1] || j[5] - j[1] >= levels) {
        Some(j) => Err(DeviceError::Failed(format!(
            "a job's rows {}..={} outgrew the {levels} a thread was given",
            j[1], j[5]
        ))),
        None => Ok(()),
    }
}

/// What counts a batch's jobs: a card ([`driver::Cuda`]) or the host
/// ([`host::Host`]).
pub trait Runner: Send + Sync {
    /// Completions and queens placed per interior of `tables`
    /// ([`crate::jobs::TABLE_WORDS`] words each) below `jobs` (as
    /// [`crate::jobs::Prepared`] makes them, none needing more than
    /// `levels` rows of stack).
    fn run(&self, tables: &[u32], jobs: &[[u32; 8]], levels: u32) -> Result<Ran, DeviceError>;

    /// Searches it runs at once.
    fn width(&self) -> usize;
}

/// A card counting through a [`Runner`].
pub struct CudaCard<R> {
    name: String,
    runner: R,
    /// Jobs a batch is cut into, at least.
    jobs: usize,
    feeders: usize,
    /// Steps taken and offered, and the most threads one launch had.
    taken: AtomicU64,
    offered: AtomicU64,
    searches: AtomicU64,
}

impl<R> std::fmt::Debug for CudaCard<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaCard")
            .field("name", &self.name)
            .field("jobs", &self.jobs)
            .field("feeders", &self.feeders)
            .finish()
    }
}

impl<R: Runner> CudaCard<R> {
    /// A card named `name` (as [`Device::name`] gives it): batches of a
    /// job for each search it runs at once, and 16 feeding threads,
    /// unless `given` says otherwise (`NQUEENS_GPU_JOBS`,
    /// `NQUEENS_GPU_FEEDERS`). The feeding threads' launches overlap, so
    /// one batch need not fill the card alone; and a job taken costs a
    /// thread's warp a wait on the card's memory, so jobs are better long:
    /// N=20 cut four a search on an H100 (1,081,344 a batch) makes
    /// 353 million jobs of about 1,900 steps each, one a search 73 million
    /// of about 9,000 (MEASUREMENTS.md). The tuner tries four times fewer
    /// and four times more.
    pub fn new(name: String, runner: R, given: &Overrides) -> CudaCard<R> {
        let jobs = match given.jobs {
            Some(j) if j > 0 => j as usize,
            _ => runner.width().max(1),
        };
        CudaCard {
            name,
            runner,
            jobs,
            feeders: given.feeders.map_or(16, |f| f as usize),
            taken: AtomicU64::new(0),
            offered: AtomicU64::new(0),
            searches: AtomicU64::new(0),
        }
    }

    /// Adds one launch to the steps taken and offered: each search's steps
    /// are its queens placed less its completions (the next-to-last row's
    /// step places the last row's queens with it).
    fn note(&self, ran: &Ran) {
        let taken = ran.counts.iter().fold(0u64, |t, &(sols, placed)| {
            t.saturating_add(placed.saturating_sub(sols))
        });
        let offered = ran.threads.saturating_mul(ran.busiest);
        self.taken.fetch_add(taken, Ordering::Relaxed);
        self.offered.fetch_add(offered, Ordering::Relaxed);
        self.searches.fetch_max(ran.threads, Ordering::Relaxed);
    }

    /// Jobs a batch is cut into, at least.
    pub fn jobs_per_batch(&self) -> usize {
        self.jobs
    }
}

impl<R: Runner> Device for CudaCard<R> {
    fn name(&self) -> &str {
        &self.name
    }

    fn count_below(
        &self,
        interiors: &[Interior],
        froms: &[Start],
        stop: &AtomicBool,
    ) -> Result<Option<Vec<PieceCounts>>, DeviceError> {
        count_in_batches(
            interiors,
            froms,
            || self.jobs,
            |tables, jobs, levels| {
                if stop.load(Ordering::Relaxed) {
                    return Ok(None);
                }
                if jobs.is_empty() {
                    return Ok(Some(vec![(0, 0); tables.len() / crate::jobs::TABLE_WORDS]));
                }
                let ran = self.runner.run(&tables, &jobs, levels)?;
                self.note(&ran);
                Ok(Some(ran.counts))
            },
        )
    }

    fn busy(&self) -> Option<Busy> {
        Some(Busy {
            taken: self.taken.load(Ordering::Relaxed),
            offered: self.offered.load(Ordering::Relaxed),
            searches: self.searches.load(Ordering::Relaxed),
        })
    }

    fn feeders(&self) -> usize {
        self.feeders
    }
}

/// The CUDA cards `choice` names (by CUDA's numbering), opened; under
/// [`Choice::Auto`] a card that fails to open, or a machine without CUDA's
/// libraries, is left out, with its reason in the second list.
pub fn cards(
    choice: &Choice,
    given: &Overrides,
) -> Result<(Vec<CudaCard<driver::Cuda>>, Vec<String>), String> {
    let count = match (choice, driver::count()) {
        (Choice::None, _) => return Ok((Vec::new(), Vec::new())),
        (_, Ok(count)) => count,
        // As with wgpu, `auto` on a machine without the libraries is no
        // cards (the CPU counts), said in the reasons.
        (Choice::Auto, Err(e)) => return Ok((Vec::new(), vec![format!("CUDA: {e}")])),
        (_, Err(e)) => return Err(e),
    };
    let wanted: Vec<usize> = match choice {
        Choice::Listed(l) => l.clone(),
        _ => (0..count).collect(),
    };
    let mut opened = Vec::new();
    let mut skipped = Vec::new();
    for i in wanted {
        if i >= count {
            return Err(format!(
                "there is no CUDA card number {i}: this machine has {count}"
            ));
        }
        match driver::Cuda::open(i, given.block, given.cuda_kernel()) {
            Ok((name, cuda)) => opened.push(CudaCard::new(name, cuda, given)),
            Err(e) if *choice == Choice::Auto => skipped.push(format!("CUDA card {i}: {e}")),
            Err(e) => return Err(format!("CUDA card {i}: {e}")),
        }
    }
    Ok((opened, skipped))
}

/// This machine's CUDA cards, for a message: how many, or why none; and
/// which NVRTC compiles for them, where one was found.
pub fn describe() -> String {
    let cards = match driver::count() {
        Ok(1) => "CUDA: 1 card (NQUEENS_GPU_API=cuda counts on it)".into(),
        Ok(n) => format!("CUDA: {n} cards (NQUEENS_GPU_API=cuda counts on them)"),
        Err(e) => format!("CUDA: none ({e})"),
    };
    let found: Vec<String> = nvrtc::all()
        .iter()
        .map(|n| format!("{}.{} ({})", n.version.0, n.version.1, n.found))
        .collect();
    match found.is_empty() {
        true => cards,
        false => format!("{cards}, NVRTC {}", found.join(", ")),
    }
}
