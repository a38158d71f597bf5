//! The seam for counting devices outside the CPU's lanes (graphics cards).
//!
//! A plan counts its backtracking subproblems in one place
//! (`nqueens_common::plan::Plan`'s counting loop): on the CPU through
//! [`crate::lanes::count_below`], or, when the plan was given a
//! [`Device`], through it. A device gives exactly what the lanes give for
//! the same interiors and starts (completions and queens placed per
//! interior), so a task counted on a card and on a CPU has the same tally
//! and checksum, and either can recount the other's. A new kind of device
//! implements this trait in its own crate (`common/gpu` for wgpu) and
//! touches nothing else of the engine.

use crate::counts::PieceCounts;
use crate::interior::{Interior, Start};
use std::sync::atomic::AtomicBool;

/// Why a device could not count (its results are never partial).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// The device failed or went away (a lost device, a failed map).
    #[error("the counting device failed: {0}")]
    Failed(String),
    /// A count outgrew its 64-bit counter.
    #[error("a count outgrew its 64-bit counter on the device")]
    Overflow,
}

/// The steps a device's threads took searching, against the steps its
/// launches offered them: a thread with no search in a launch is a part
/// of the device idle, whatever the device's speed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Busy {
    pub taken: u64,
    pub offered: u64,
    /// Searches in flight at once: the threads of the device's latest
    /// launches.
    pub searches: u64,
}

impl Busy {
    /// The share of the offered steps taken (`None` before any launch).
    pub fn share(&self) -> Option<f64> {
        (self.offered > 0).then(|| self.taken as f64 / self.offered as f64)
    }
}

/// A device that counts interior searches, as the CPU's lanes do.
pub trait Device: Send + Sync + std::fmt::Debug {
    /// What to call it where the CPU path is named: the card and its API,
    /// e.g. `gpu:NVIDIA H100 80GB HBM3 (vulkan)`.
    fn name(&self) -> &str;

    /// Completions (in `c1`, unweighted) and queens placed below each
    /// interior's start, exactly as
    /// [`crate::lanes::count_below`] counts them. `None` once
    /// `stop` is set (looked at between the device's rounds of work).
    fn count_below(
        &self,
        interiors: &[Interior],
        froms: &[Start],
        stop: &AtomicBool,
    ) -> Result<Option<Vec<PieceCounts>>, DeviceError>;

    /// How busy its threads were since it was opened (see [`Busy`]);
    /// `None` where it does not tell.
    fn busy(&self) -> Option<Busy> {
        None
    }

    /// Threads that should count on it at once: each hands in one task's
    /// work and waits for its counts, so the device needs several to have
    /// work queued while some wait for their last, longest searches.
    fn feeders(&self) -> usize {
        1
    }
}
