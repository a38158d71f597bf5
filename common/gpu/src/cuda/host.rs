//! The CUDA kernel's source run on the host (`host.c`, built by
//! `build.rs`): threads in blocks, each with its column of its block's
//! shared stack as on a card, their passes interleaved in an order a seed
//! chooses. The tests count with it as with a card; it is far slower than
//! the CPU's lanes, and nothing else uses it.

use super::driver::Kernel;
use super::{Ran, Runner};
use crate::jobs::TABLE_WORDS;
use nqueens_common::engine::device::DeviceError;
use std::sync::atomic::{AtomicU64, Ordering};

extern "C" {
    fn nqueens_host_count(
        tables: *const u32,
        jobs: *const u32,
        count: u32,
        threads: u32,
        wg: u32,
        levels: u32,
        below: u32,
        keep: i32,
        flat: i32,
        seed: u64,
        results: *mut u64,
        busiest: *mut u64,
    ) -> u32;
}

/// The kernel on the host: `threads` threads in blocks of `block`.
#[derive(Debug)]
pub struct Host {
    pub threads: u32,
    pub block: u32,
    /// The card's kernel it runs.
    pub kernel: Kernel,
    /// What each total starts from (a card's start at zero): a total
    /// near 2^32 or 2^64 shows how the kernel carries and overflows.
    pub bias: u64,
    /// The next run's seed; each run takes a new one.
    seed: AtomicU64,
}

impl Host {
    pub fn new(threads: u32, block: u32, seed: u64) -> Host {
        assert!(threads > 0 && block > 0, "a host kernel needs threads");
        Host {
            threads,
            block,
            kernel: Kernel::DEFAULT,
            bias: 0,
            seed: AtomicU64::new(seed),
        }
    }
}

impl Runner for Host {
    fn run(&self, tables: &[u32], jobs: &[[u32; 8]], levels: u32) -> Result<Ran, DeviceError> {
        let interiors = tables.len() / TABLE_WORDS;
        assert_eq!(tables.len(), interiors * TABLE_WORDS, "whole tables");
        assert!(
            jobs.iter()
                .all(|j| (j[0] as usize) < interiors && j[1] <= j[5] && j[5] < 32),
            "every job names an interior of the batch, and rows on the board"
        );
        super::rows_fit(jobs, levels)?;
        let count = u32::try_from(jobs.len()).expect("a batch's jobs fit a word");
        let mut results = vec![self.bias; 2 * interiors];
        let mut busiest = 0u64;
        // Never zero: the generator would stay there.
        let seed = self
            .seed
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            | 1;
        // SAFETY: `tables` and `jobs` are read within their lengths (each
        // job's interior is below `interiors`, its rows below 32), a
        // thread's stack and copy of its job's pairs within its `levels`
        // (checked above), and `results` has two words per interior.
        let outcome = unsafe {
            nqueens_host_count(
                tables.as_ptr(),
                jobs.as_flattened().as_ptr(),
                count,
                self.threads,
                self.block,
                levels,
                self.kernel.below(levels),
                i32::from(self.kernel.keep),
                i32::from(self.kernel.flat),
                seed,
                results.as_mut_ptr(),
                &mut busiest,
            )
        };
        match outcome {
            0 => Ok(Ran {
                counts: results
                    .chunks(2)
                    .map(|c| (c[0] - self.bias, c[1] - self.bias))
                    .collect(),
                threads: self.threads.into(),
                busiest,
            }),
            1 => Err(DeviceError::Overflow),
            2 => Err(DeviceError::Failed(format!(
                "a thread's stack outgrew the {levels} rows it was given"
            ))),
            _ => Err(DeviceError::Failed("the host ran out of memory".into())),
        }
    }

    fn width(&self) -> usize {
        self.threads as usize
    }
}
