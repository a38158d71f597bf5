//! Counting on graphics cards: the engine's interior search as a WGSL
//! compute shader, run through wgpu on Vulkan, Metal or DX12.
//!
//! A [`Card`] is a [`Device`]: a plan given one counts its backtracking
//! subproblems here instead of in the CPU's lanes, with the same
//! completions and queens placed (so the same tallies and checksums).
//!
//! - [`cards`](mod@cards): the adapters this machine has, opened as cards.
//! - [`kernel`]: the shader, its buffers and the launches (a bounded
//!   number of steps each, every thread's search resumed from a buffer).
//! - [`stream`]: one queue per card, topped up from every feeding
//!   thread, so the card's threads never wait for a batch to end.
//! - [`jobs`]: interiors cut into enough start states to fill a card.
//! - [`steal`]: the searches still going once the queue is empty, split
//!   among the idle threads.
//! - [`cuda`]: NVIDIA cards through CUDA (`NQUEENS_GPU_API=cuda`), the
//!   same jobs counted by a kernel of the fast CUDA counters' design.
//! - [`width`]: how many workgroups the card runs at once, measured, so
//!   a launch's searches fill one wave of them.
//!
//! Nothing here needs a GPU SDK to build: the Vulkan loader (and CUDA's
//! driver and NVRTC) are opened at run time, and a machine without one (or without any adapter) simply
//! has no cards.

pub mod cards;
pub mod cuda;
pub mod jobs;
pub mod kernel;
pub mod steal;
pub mod stream;
pub mod width;

pub use cards::{
    adapters, cards, describe, devices, first_card, first_device, Card, Choice, Overrides, Tuning,
};
pub use nqueens_common::engine::device::{Device, DeviceError};
