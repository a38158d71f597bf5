//! How many workgroups of one pipeline a card runs at once, measured.
//!
//! A launch lasts as long as its last wave of workgroups: with more
//! searches in flight than the card holds at once, the workgroups past
//! its width wait for a second wave, and the launch takes two waves'
//! time for little more than one wave's work (on an H200, 65,536
//! searches counted N=19 in 2.5 s, 131,072 in 3.3 s). What the card
//! holds depends on the pipeline (its workgroup memory, its registers)
//! and on the card (its multiprocessors), and no graphics API says it.
//! So it is measured: one launch of many workgroups, each thread a
//! search of an empty board checked against the CPU's count of it, and
//! the shader records the most workgroups that ran at once (`control[6]`
//! and `[7]` in count.wgsl). For stacks of 7 rows or more (every count
//! worth a card) the board is 8×8, and each search lasts about 2,000
//! steps, so every workgroup of the first wave is still running when the
//! last one starts. A shallower stack's board is smaller and its searches
//! short: its width may come out low, costing small counts some speed.

use crate::jobs::table;
use crate::kernel::{as_bytes, Kernel};
use nqueens_common::engine::device::DeviceError;
use nqueens_common::engine::interior::Interior;

/// The board each thread of the probe counts, at most: 2,056 queens
/// placed, 92 completions.
const PROBE_N: u32 = 8;

/// Bytes of a slot's record and of a stack record on the card.
const SLOT_BYTES: u64 = 32;
const RECORD_BYTES: u64 = 16;

/// Steps the probe's launch offers: more than its searches take (its
/// loops run as long as the searches, about 2,000 steps, well within what
/// a software device counts exactly).
const PROBE_STEPS: u32 = 4096;

/// Workgroups the probe launches at most (a card with more at once runs
/// that many): an H100 holds at most 2,112 of 128 threads or more.
const PROBE_GROUPS: u32 = 4096;

/// The most workgroups of `wg` threads, at most `groups` (and at most
/// [`PROBE_GROUPS`] and what the card's buffers hold), that `pipeline`
/// (built for stacks of `levels` rows) runs at once on `kernel`'s card.
/// An error where the card miscounts the probe's searches.
pub(crate) fn measure(
    kernel: &Kernel,
    pipeline: &wgpu::ComputePipeline,
    wg: u32,
    levels: u32,
    groups: u32,
) -> Result<u32, DeviceError> {
    let limits = &kernel.limits;
    let room = limits
        .max_storage_buffer_binding_size
        .min(limits.max_buffer_size);
    // The slots and stacks of the searches in flight are read back
    // together when long searches are split: both fit one buffer.
    let fit = room / (u64::from(wg) * (SLOT_BYTES + u64::from(levels) * RECORD_BYTES));
    let groups = groups
        .min(PROBE_GROUPS)
        .min(u32::try_from(fit).unwrap_or(u32::MAX))
        .max(1);
    let threads = groups * wg;
    let n = PROBE_N.min(levels + 1);
    let board = Interior::new(n as usize, &[]);
    let words = launch(kernel, pipeline, &board, groups, threads, levels)?;
    let (control, results, done) = (&words[..8], &words[8..12], words[12]);
    let total = |lo: u32, hi: u32| u64::from(lo) | u64::from(hi) << 32;
    let each = board.count();
    let due = (
        each.c1 * u64::from(threads),
        each.nodes * u64::from(threads),
    );
    let got = (total(results[0], results[1]), total(results[2], results[3]));
    let (running, most) = (control[6], control[7]);
    if done != threads || got != due {
        return Err(DeviceError::Failed(format!(
            "the card miscounted its width probe: {done} of {threads} searches of an empty \
             {n}x{n} board done; completions and queens placed {got:?} where {due:?} were due"
        )));
    }
    if running != 0 || most == 0 || most > groups {
        return Err(DeviceError::Failed(format!(
            "the card's width probe of {groups} workgroups saw {most} at once at most, \
             and {running} still running after the launch"
        )));
    }
    Ok(most)
}

/// Launches `groups` workgroups of `pipeline`, its `threads` each
/// counting `board` with stacks of `levels` rows, and reads back the
/// card's counters, the board's counts and the jobs done (8, 4 and 1
/// words).
fn launch(
    kernel: &Kernel,
    pipeline: &wgpu::ComputePipeline,
    board: &Interior,
    groups: u32,
    threads: u32,
    levels: u32,
) -> Result<Vec<u32>, DeviceError> {
    let pen = board.rows() as u32 - 2;
    let table = table(board);
    let buffer = |label, words: &[u32], usage| {
        let b = kernel.buffer(label, words.len() as u64 * 4, usage);
        kernel.queue.write_buffer(&b, 0, &as_bytes(words));
        b
    };
    use wgpu::BufferUsages as U;
    let rw = U::STORAGE | U::COPY_DST | U::COPY_SRC;
    // Every thread starts with the board's search in hand (its first row
    // on its stack, as if resumed) and takes no job: it ends the search
    // well within the launch's steps, so none is left to resume.
    let params = buffer("probe params", &[0, PROBE_STEPS, 0, 0], {
        U::UNIFORM | U::COPY_DST
    });
    let tables = buffer("probe tables", &table, rw);
    let jobs = buffer("probe jobs", &[0; 8], rw);
    let search = [1, 0, 0, 0, 0, 0, pen << 8, 0];
    let slots = buffer("probe slots", &search.repeat(threads as usize), rw);
    let mut first = vec![0u32; (threads * levels) as usize * 4];
    first
        .chunks_exact_mut(levels as usize * 4)
        .for_each(|s| s[0] = table[1]);
    let stacks = buffer("probe stacks", &first, rw);
    let results = buffer("probe results", &[0; 4], rw);
    let control = buffer("probe control", &[0; 8], rw);
    let done = buffer("probe done", &[0], rw);
    let bind = kernel.bind(&[
        &params, &tables, &jobs, &slots, &stacks, &results, &control, &done,
    ]);
    let mut encoder = kernel.device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &bind, &[]);
        pass.dispatch_workgroups(groups, 1, 1);
    }
    kernel.read(
        encoder,
        &[(&control, 0, 32), (&results, 0, 16), (&done, 0, 4)],
    )
}
