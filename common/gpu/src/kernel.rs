//! The counting shader and its launches on one wgpu device.
//!
//! A count is a series of *rounds*: each submits some launches of the
//! shader (every thread stepping its search at most `steps` times per
//! launch, resuming from its slot) and reads back how many jobs are done.
//! Rounds double their launches up to a bound, so a small count ends
//! after one short round and a long one spends little time reading back.

use crate::gather::Batch;
use crate::steal::{steal, NONE, SLOT_WORDS};
use nqueens_common::engine::device::DeviceError;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use wgpu::util::DeviceExt;

/// The shader, before its constants are prepended.
const SOURCE: &str = include_str!("count.wgsl");

/// Bytes of one stack record (the row's candidates and three masks).
const RECORD: u32 = 16;

/// Bytes of one row's pair of table words (its shift and the next row's
/// open columns), where a thread keeps a copy of its job's.
const PAIR: u32 = 8;

/// How a count is launched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    /// Steps each thread takes per launch, at most (below 65,536: lavapipe
    /// ends longer loops silently).
    pub steps: u32,
    /// Threads (searches in flight) at most.
    pub slots: u32,
    /// Launches in one round, at most.
    pub max_launches: u32,
    /// Added to every job's two counters before the count and taken off
    /// after: a test that counters carry past 32 bits (0 otherwise).
    pub bias: u64,
    /// Jobs in one set of buffers at most (fewer where the card's buffer
    /// limits say so); more jobs go in several runs.
    pub run_jobs: usize,
    /// Whether long searches are split among idle threads once the queue
    /// is empty (see [`crate::steal`]).
    pub steal: bool,
    /// Whether the shader keeps the bounds checks naga adds to every
    /// array index. Without them the inner loop is shorter; every index
    /// the shader forms is in range by construction (a stack level below
    /// `LEVELS`, a copied row at most `LEVELS`, a table pair below 33, a
    /// job below `params.jobs`).
    pub checked: bool,
    /// Whether each thread copies its job's table rows to workgroup
    /// memory when it takes the job, and reads them there at every step.
    /// Without the copy, the threads of a warp counting different
    /// interiors read as many places of the card's memory at each step.
    pub rows_in_group: bool,
}

/// What a pipeline is built for: threads per workgroup, stack rows,
/// bounds checks, rows kept in workgroup memory.
type Shape = (u32, u32, bool, bool);

/// A device, its queue and the shader's pipelines.
pub struct Kernel {
    device: wgpu::Device,
    queue: wgpu::Queue,
    layout: wgpu::BindGroupLayout,
    pipelines: Mutex<HashMap<Shape, wgpu::ComputePipeline>>,
    limits: wgpu::Limits,
    /// Jobs split off long searches so far (see [`crate::steal`]).
    split: AtomicU64,
    /// Launches so far.
    launched: AtomicU64,
}

/// Per job: completions and queens placed.
pub type JobCounts = Vec<(u64, u64)>;

impl Kernel {
    /// Opens `adapter` with every limit it has.
    pub fn open(adapter: &wgpu::Adapter) -> Result<Kernel, String> {
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("nqueens"),
            required_features: wgpu::Features::empty(),
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| e.to_string())?;
        let storage = |binding, read_only| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let mut entries = vec![wgpu::BindGroupLayoutEntry {
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Uniform,
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            ..storage(0, true)
        }];
        entries.extend([
            storage(1, true),
            storage(2, true),
            storage(3, false),
            storage(4, false),
            storage(5, false),
            storage(6, false),
        ]);
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("count"),
            entries: &entries,
        });
        Ok(Kernel {
            device,
            queue,
            layout,
            pipelines: Mutex::new(HashMap::new()),
            limits,
            split: AtomicU64::new(0),
            launched: AtomicU64::new(0),
        })
    }

    /// Jobs split off long searches since the card was opened.
    pub fn jobs_split(&self) -> u64 {
        self.split.load(Ordering::Relaxed)
    }

    /// Launches of the shader since the card was opened: each lasts as
    /// long as its busiest thread, so fewer for the same count means less
    /// of the card idle.
    pub fn launches(&self) -> u64 {
        self.launched.load(Ordering::Relaxed)
    }

    /// The workgroup size and pipeline for jobs whose stacks hold
    /// `levels` rows, launched as `launch` says; an error (not a panic)
    /// where the device refuses the shader.
    pub fn prepare(
        &self,
        levels: u32,
        launch: &Launch,
    ) -> Result<(u32, wgpu::ComputePipeline), DeviceError> {
        let wg = threads_per_group(&self.limits, levels, launch.rows_in_group)?;
        let shape = (wg, levels, launch.checked, launch.rows_in_group);
        let mut kept = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = kept.get(&shape) {
            return Ok((wg, p.clone()));
        }
        let invalid = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let internal = self.device.push_error_scope(wgpu::ErrorFilter::Internal);
        let pipeline = self.build(shape);
        // Scopes pop in the reverse order of their pushes.
        for scope in [internal, invalid] {
            if let Some(e) = pollster::block_on(scope.pop()) {
                return Err(DeviceError::Failed(format!(
                    "the card refused the shader for {wg} threads of {levels} rows: {e}"
                )));
            }
        }
        kept.insert(shape, pipeline.clone());
        Ok((wg, pipeline))
    }

    /// Builds the pipeline for `wg` threads with stacks of `levels` rows,
    /// with or without naga's bounds checks and copies of the rows' tables.
    fn build(&self, (wg, levels, checked, in_group): Shape) -> wgpu::ComputePipeline {
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some("count.wgsl"),
            source: wgpu::ShaderSource::Wgsl(source(wg, levels, in_group).into()),
        };
        let module = if checked {
            self.device.create_shader_module(desc)
        } else {
            // SAFETY: every index in count.wgsl is in range by
            // construction (see `Launch::checked`); `Prepared` sizes
            // `LEVELS` to the deepest job, and the tests run this module
            // against the CPU's counts.
            unsafe {
                self.device
                    .create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked())
            }
        };
        let layout = self
            .device
            .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some("count"),
                bind_group_layouts: &[Some(&self.layout)],
                immediate_size: 0,
            });
        self.device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some("count"),
                layout: Some(&layout),
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            })
    }

    /// Counts every job of `batch`: completions and queens placed per job.
    /// `None` once `stop` says so (asked between rounds).
    pub fn count(
        &self,
        p: &Batch,
        launch: &Launch,
        stop: &dyn Fn() -> bool,
    ) -> Result<Option<JobCounts>, DeviceError> {
        // The jobs go in runs that fit the card's buffers (32 bytes a job).
        let fit = self
            .limits
            .max_storage_buffer_binding_size
            .min(self.limits.max_buffer_size)
            / 32;
        // Room is kept for the jobs split off long searches.
        let most = usize::try_from(fit)
            .unwrap_or(usize::MAX)
            .saturating_sub(room(launch))
            .min(launch.run_jobs)
            .max(1);
        let mut out = Vec::with_capacity(p.jobs.len());
        for part in p.jobs.chunks(most) {
            let Some(counted) = self.count_run(p, part, launch, stop)? else {
                return Ok(None);
            };
            out.extend(counted);
        }
        Ok(Some(out))
    }

    /// Counts `part` of the jobs of `p`, in one set of buffers.
    fn count_run(
        &self,
        p: &Batch,
        part: &[[u32; 8]],
        launch: &Launch,
        stop: &dyn Fn() -> bool,
    ) -> Result<Option<JobCounts>, DeviceError> {
        let (wg, pipeline) = self.prepare(p.levels, launch)?;
        let jobs = u32::try_from(part.len())
            .map_err(|_| DeviceError::Failed("too many jobs for one count".into()))?;
        let groups = jobs
            .min(launch.slots)
            .div_ceil(wg)
            .min(self.limits.max_compute_workgroups_per_dimension)
            .max(1);
        let mut run = Run::new(self, p, part, launch, (wg, groups))?;
        let slots = groups * wg;
        let mut launches = 1;
        loop {
            if stop() {
                return Ok(None);
            }
            let (head, done) = run.round(&pipeline, groups, launches)?;
            let jobs = run.jobs.len() as u32;
            // Each slot takes from the queue at most once after it is
            // empty: a counter past that has wrapped or been overrun, and
            // a job may have been counted twice.
            if u64::from(head) > u64::from(jobs) + u64::from(slots) || done > jobs {
                return Err(DeviceError::Failed(format!(
                    "the card's job queue overran ({head} taken, {done} done of {jobs} jobs)"
                )));
            }
            if done == jobs {
                break;
            }
            if head < jobs {
                launches = (launches * 2).min(launch.max_launches.max(1));
                continue;
            }
            // The queue is empty: short rounds, and once half the threads
            // idle, the searches still going are split among them.
            launches = (launches / 2).max(1);
            if launch.steal && (jobs - done) * 2 <= slots {
                run.steal(p, slots)?;
            }
        }
        run.results(launch.bias).map(Some)
    }
}

/// Threads per workgroup for stacks of `levels` rows (and copies of
/// `levels + 1` rows' tables, if kept): the most (a power of two, 256 at
/// most) whose workgroup memory fits the card's. Its drivers, not wgpu,
/// refuse a shader past that (lavapipe takes any).
pub fn threads_per_group(
    limits: &wgpu::Limits,
    levels: u32,
    rows_in_group: bool,
) -> Result<u32, DeviceError> {
    let rows = PAIR * kept_rows(levels, rows_in_group);
    let fit = limits.max_compute_workgroup_storage_size / (RECORD * levels + rows);
    let most = fit
        .min(256)
        .min(limits.max_compute_invocations_per_workgroup)
        .min(limits.max_compute_workgroup_size_x);
    if most == 0 {
        return Err(DeviceError::Failed(format!(
            "a stack of {levels} rows does not fit this card's workgroup memory"
        )));
    }
    Ok(1 << (31 - most.leading_zeros()))
}

/// The shader for `wg` threads with stacks of `levels` rows, with or
/// without copies of the rows' tables: its constants, then count.wgsl.
pub fn source(wg: u32, levels: u32, rows_in_group: bool) -> String {
    let rows = kept_rows(levels, rows_in_group);
    format!(
        "const WG: u32 = {wg}u;\nconst LEVELS: u32 = {levels}u;\n\
         const ROWS_IN_GROUP: bool = {rows_in_group};\nconst ROWS: u32 = {rows}u;\n{SOURCE}"
    )
}

/// Pairs of table words each thread keeps in workgroup memory: a row's
/// for every level of its stack and the row below, or one (unused: WGSL
/// has no empty arrays) where the threads read them in place.
fn kept_rows(levels: u32, rows_in_group: bool) -> u32 {
    if rows_in_group {
        levels + 1
    } else {
        1
    }
}

/// Jobs a count may split off long searches, beyond its own.
fn room(launch: &Launch) -> usize {
    if launch.steal {
        launch.slots as usize * 4
    } else {
        0
    }
}

/// The buffers of one count, and the jobs split off its searches.
struct Run<'k> {
    kernel: &'k Kernel,
    bind: wgpu::BindGroup,
    params: wgpu::Buffer,
    jobs_buf: wgpu::Buffer,
    slots: wgpu::Buffer,
    stacks: wgpu::Buffer,
    control: wgpu::Buffer,
    results: wgpu::Buffer,
    /// The count's own jobs, then the jobs split off (each with the job
    /// of `part` it came from, and one queen placed by the host).
    jobs: Jobs<'k>,
    levels: u32,
}

/// A count's jobs: its own, then those split off long searches.
struct Jobs<'k> {
    part: &'k [[u32; 8]],
    split: Vec<[u32; 8]>,
    /// Per split job, the job of `part` it came from.
    origin: Vec<u32>,
    /// Jobs split off at most.
    room: usize,
}

impl Jobs<'_> {
    fn len(&self) -> usize {
        self.part.len() + self.split.len()
    }

    fn get(&self, i: u32) -> [u32; 8] {
        let i = i as usize;
        self.part
            .get(i)
            .copied()
            .unwrap_or_else(|| self.split[i - self.part.len()])
    }

    /// The job of `part` that job `i` is, or came from.
    fn origin(&self, i: u32) -> u32 {
        match (i as usize).checked_sub(self.part.len()) {
            Some(j) => self.origin[j],
            None => i,
        }
    }
}

impl<'k> Run<'k> {
    fn new(
        kernel: &'k Kernel,
        p: &Batch,
        part: &'k [[u32; 8]],
        launch: &Launch,
        (wg, groups): (u32, u32),
    ) -> Result<Run<'k>, DeviceError> {
        let device = &kernel.device;
        let slots = (groups * wg) as usize;
        let room = room(launch).min(slots * 4);
        let words = |data: &[u32], label, usage| {
            device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: &as_bytes(data),
                usage,
            })
        };
        let storage = wgpu::BufferUsages::STORAGE;
        let (copy_in, copy_out) = (wgpu::BufferUsages::COPY_DST, wgpu::BufferUsages::COPY_SRC);
        let params = words(
            &[part.len() as u32, launch.steps, 0, 0],
            "params",
            wgpu::BufferUsages::UNIFORM | copy_in,
        );
        let tables = words(&p.tables, "tables", storage);
        let zeroed = |label, bytes: u64, usage| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes.max(16),
                usage,
                mapped_at_creation: false,
            })
        };
        // The jobs are copied once, into the queue's staging memory; the
        // room behind them (for jobs split off) is zeroed on the card, as
        // a new buffer is.
        let jobs_buf = zeroed("jobs", (part.len() + room) as u64 * 32, storage | copy_in);
        kernel
            .queue
            .write_buffer(&jobs_buf, 0, &as_bytes(part.as_flattened()));
        let mut idle = vec![0u32; slots * SLOT_WORDS];
        idle.iter_mut().step_by(SLOT_WORDS).for_each(|w| *w = NONE);
        let slot_buf = words(&idle, "slots", storage | copy_out);
        let stacks = zeroed(
            "stacks",
            slots as u64 * u64::from(p.levels) * u64::from(RECORD),
            storage | copy_in | copy_out,
        );
        // Every count starts at the bias (zero but in tests): a new
        // buffer is zeroed on the card, with nothing sent from the host.
        let results_bytes = (part.len() + room) as u64 * 16;
        let results = if launch.bias == 0 {
            zeroed("results", results_bytes, storage | copy_out)
        } else {
            let (lo, hi) = (launch.bias as u32, (launch.bias >> 32) as u32);
            words(
                &[lo, hi, lo, hi].repeat(part.len() + room),
                "results",
                storage | copy_out,
            )
        };
        let control = words(&[0, 0], "control", storage | copy_in | copy_out);
        let buffers = [
            &params, &tables, &jobs_buf, &slot_buf, &stacks, &results, &control,
        ];
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.as_entire_binding(),
            })
            .collect();
        let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("count"),
            layout: &kernel.layout,
            entries: &entries,
        });
        Ok(Run {
            kernel,
            bind,
            params,
            jobs_buf,
            slots: slot_buf,
            stacks,
            control,
            results,
            jobs: Jobs {
                part,
                split: Vec::new(),
                origin: Vec::new(),
                room,
            },
            levels: p.levels,
        })
    }

    /// Splits the searches still going (between rounds: nothing runs on
    /// the card) and puts the new jobs in the queue behind the last.
    fn steal(&mut self, p: &Batch, slots: u32) -> Result<(), DeviceError> {
        let room = self.jobs.room - self.jobs.split.len();
        if room == 0 {
            return Ok(());
        }
        let encoder = || {
            self.kernel
                .device
                .create_command_encoder(&Default::default())
        };
        let running = self.read(encoder(), &self.slots, u64::from(slots) * 32)?;
        let bytes = self.stacks.size();
        let mut stacks = self.read(encoder(), &self.stacks, bytes)?;
        let jobs = &self.jobs;
        let stolen = steal(
            &running,
            &mut stacks,
            self.levels as usize,
            |i| jobs.get(i),
            &p.tables,
            room,
        );
        if stolen.jobs.is_empty() {
            return Ok(());
        }
        let first = self.jobs.len() as u32;
        let queue = &self.kernel.queue;
        let flat = as_bytes(stolen.jobs.as_flattened());
        queue.write_buffer(&self.jobs_buf, u64::from(first) * 32, &flat);
        queue.write_buffer(&self.stacks, 0, &as_bytes(&stacks));
        let added = stolen.jobs.len() as u64;
        self.kernel.split.fetch_add(added, Ordering::Relaxed);
        let origins: Vec<u32> = stolen.from.iter().map(|&j| self.jobs.origin(j)).collect();
        self.jobs.origin.extend(origins);
        self.jobs.split.extend(stolen.jobs);
        let total = self.jobs.len() as u32;
        queue.write_buffer(&self.params, 0, &as_bytes(&[total]));
        // The queue's head goes back to the first new job (idle threads
        // moved it past the old end once each).
        queue.write_buffer(&self.control, 0, &as_bytes(&[first]));
        Ok(())
    }

    /// Submits `launches` launches, then reads how many jobs were taken
    /// from the queue and how many are done.
    fn round(
        &self,
        pipeline: &wgpu::ComputePipeline,
        groups: u32,
        launches: u32,
    ) -> Result<(u32, u32), DeviceError> {
        let mut encoder = self
            .kernel
            .device
            .create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, &self.bind, &[]);
            for _ in 0..launches {
                pass.dispatch_workgroups(groups, 1, 1);
            }
            let n = u64::from(launches);
            self.kernel.launched.fetch_add(n, Ordering::Relaxed);
        }
        let words = self.read(encoder, &self.control, 8)?;
        Ok((words[0], words[1]))
    }

    /// Every job's counts, less the bias, with the jobs split off a job
    /// (and the queens placed to start them) counted to it.
    fn results(&self, bias: u64) -> Result<JobCounts, DeviceError> {
        let encoder = self
            .kernel
            .device
            .create_command_encoder(&Default::default());
        let words = self.read(encoder, &self.results, self.jobs.len() as u64 * 16)?;
        let mut out = Vec::with_capacity(self.jobs.part.len());
        for (i, w) in words.chunks_exact(4).enumerate() {
            let wide = |lo: u32, hi: u32| (u64::from(hi) << 32 | u64::from(lo)).checked_sub(bias);
            let (Some(s), Some(n)) = (wide(w[0], w[1]), wide(w[2], w[3])) else {
                return Err(DeviceError::Overflow);
            };
            if i < self.jobs.part.len() {
                out.push((s, n));
                continue;
            }
            let o = &mut out[self.jobs.origin(i as u32) as usize];
            let sum = |a: u64, b: u64| a.checked_add(b).ok_or(DeviceError::Overflow);
            *o = (sum(o.0, s)?, sum(o.1, sum(n, 1)?)?);
        }
        Ok(out)
    }

    /// Finishes `encoder` with a copy of `bytes` of `from`, submits it and
    /// reads the copy back.
    fn read(
        &self,
        mut encoder: wgpu::CommandEncoder,
        from: &wgpu::Buffer,
        bytes: u64,
    ) -> Result<Vec<u32>, DeviceError> {
        let device = &self.kernel.device;
        let back = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size: bytes,
            usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
            mapped_at_creation: false,
        });
        encoder.copy_buffer_to_buffer(from, 0, &back, 0, bytes);
        self.kernel.queue.submit([encoder.finish()]);
        let (tx, rx) = std::sync::mpsc::channel();
        back.slice(..)
            .map_async(wgpu::MapMode::Read, move |r| drop(tx.send(r)));
        let failed = |e: &dyn std::fmt::Display| DeviceError::Failed(e.to_string());
        device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| failed(&e))?;
        rx.recv().map_err(|e| failed(&e))?.map_err(|e| failed(&e))?;
        let view = back.slice(..).get_mapped_range().map_err(|e| failed(&e))?;
        let words = view
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        drop(view);
        back.unmap();
        Ok(words)
    }
}

/// The bytes of `words`, little-endian (as shaders read them): the words'
/// own memory on a little-endian host, a copy elsewhere.
fn as_bytes(words: &[u32]) -> Cow<'_, [u8]> {
    if cfg!(target_endian = "little") {
        Cow::Borrowed(bytemuck::cast_slice(words))
    } else {
        Cow::Owned(words.iter().flat_map(|w| w.to_le_bytes()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workgroup memory a shader declares, as naga lays it out.
    fn declared(wgsl: &str) -> u32 {
        let module = naga::front::wgsl::parse_str(wgsl).unwrap();
        let mut layouter = naga::proc::Layouter::default();
        layouter.update(module.to_ctx()).unwrap();
        module
            .global_variables
            .iter()
            .filter(|(_, v)| v.space == naga::AddressSpace::WorkGroup)
            .map(|(_, v)| layouter[v.ty].size)
            .sum()
    }

    /// For cards with 16 to 64 KB of workgroup memory and every stack a
    /// count may need, the shader at the workgroup size chosen declares
    /// no more workgroup memory than the card has (a driver refuses, or
    /// fails, one that does), with the rows' tables in either place.
    #[test]
    fn the_workgroup_chosen_fits_what_the_shader_declares() {
        for kb in [16, 32, 48, 64] {
            let limits = wgpu::Limits {
                max_compute_workgroup_storage_size: kb << 10,
                ..wgpu::Limits::default()
            };
            for levels in 1..=30 {
                for in_group in [false, true] {
                    let wg = threads_per_group(&limits, levels, in_group).unwrap();
                    let bytes = declared(&source(wg, levels, in_group));
                    let at = format!("{kb} KB, {levels} rows, in group {in_group}: {wg} threads");
                    assert!(bytes <= kb << 10, "{at} declare {bytes} bytes");
                    // And the next size up would not fit.
                    let wider = declared(&source(wg * 2, levels, in_group));
                    assert!(wg == 256 || wider > kb << 10, "{at}: twice as many fit");
                }
            }
        }
    }
}
