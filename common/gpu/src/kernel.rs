//! The counting shader on one wgpu device: its pipelines, built for each
//! shape of stack, and reading buffers back. [`crate::stream`] launches it.

use nqueens_common::engine::device::{Busy, DeviceError};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The shader, before its constants are prepended.
const SOURCE: &str = include_str!("count.wgsl");

/// Bytes of one stack record (the row's candidates and three masks).
const RECORD: u32 = 16;

/// Bytes of one row's pair of table words (its shift and the next row's
/// open columns), where a thread keeps a copy of its job's.
const PAIR: u32 = 8;

/// Bytes of workgroup memory a workgroup shares, whatever its size: its
/// busiest slot and its steps taken.
const GROUP_SHARED: u32 = 8;

/// How a count is launched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    /// Steps each thread takes per launch, at most `most_steps`.
    pub steps: u32,
    /// The most steps per launch this device counts exactly (see
    /// [`crate::cards::SOFTWARE_STEPS`]).
    pub most_steps: u32,
    /// Threads (searches in flight) at most.
    pub slots: u32,
    /// Whether the searches in flight are as many as the card runs at
    /// once (at most `slots`), measured for each shader (see
    /// [`crate::width`]); otherwise `slots` of them.
    pub fill: bool,
    /// Launches in one round, at most.
    pub max_launches: u32,
    /// Added to every job's two counters before the count and taken off
    /// after: a test that counters carry past 32 bits (0 otherwise).
    pub bias: u64,
    /// Jobs the card's queue holds at most (a power of two at most this,
    /// fewer where the card's buffer limits say so); more wait on the
    /// host for room.
    pub queue_jobs: usize,
    /// Whether long searches are split among idle threads once the queue
    /// is empty (see [`crate::steal`]).
    pub steal: bool,
    /// Whether the shader keeps the bounds checks naga adds to every
    /// array index. Without them the inner loop is shorter; every index
    /// the shader forms is in range by construction (a stack level below
    /// `LEVELS` in the buffer and below `BELOW` in workgroup memory, a
    /// copied row below `LEVELS`, a table pair below 33, a
    /// job masked to the queue's ring, an interior and a batch where the
    /// host put them).
    pub checked: bool,
    /// Whether each thread copies its job's table rows to workgroup
    /// memory when it takes the job, and reads them there at every step.
    /// Without the copy, the threads of a warp counting different
    /// interiors read as many places of the card's memory at each step.
    pub rows_in_group: bool,
    /// Whether a thread steps its search in a loop of its own until the
    /// search ends (or the launch's steps run out) before it takes its
    /// next job. A warp's threads then take their next jobs together,
    /// once its longest search has ended: with searches differing by
    /// orders of magnitude, up to half of a warp's lanes idle (see
    /// tests/occupancy.rs). Without it, one loop steps or takes, so a
    /// thread takes its next job as soon as its search ends, while the
    /// rest of its warp steps on. Lavapipe, which runs every branch of a
    /// loop's body for all its lanes at every iteration, counts twice as
    /// fast with it.
    pub nested: bool,
    /// Whether a thread keeps its stack's top record in workgroup memory
    /// with the others, and steps on one path (`FLAT` in
    /// count.wgsl): a warp then runs each instruction of a step once,
    /// where the branching step runs each way its threads go in turn.
    pub flat: bool,
}

/// What a pipeline is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Threads per workgroup.
    pub wg: u32,
    /// Rows a thread's stack holds.
    pub levels: u32,
    /// As in [`Launch`].
    pub checked: bool,
    /// As in [`Launch`].
    pub rows_in_group: bool,
    /// As in [`Launch`].
    pub nested: bool,
    /// As in [`Launch`].
    pub flat: bool,
    /// The job ring's size less one.
    pub mask: u32,
}

impl Shape {
    /// The shape of the pipeline that runs `launch` with `wg` threads per
    /// workgroup, stacks of `levels` rows and a ring of `mask + 1` jobs.
    pub fn new(wg: u32, levels: u32, mask: u32, launch: &Launch) -> Shape {
        Shape {
            wg,
            levels,
            checked: launch.checked,
            rows_in_group: launch.rows_in_group,
            nested: launch.nested,
            flat: launch.flat,
            mask,
        }
    }

    /// The shader: its constants, then count.wgsl.
    pub fn source(&self) -> String {
        format!(
            "const WG: u32 = {}u;\nconst LEVELS: u32 = {}u;\nconst BELOW: u32 = {}u;\n\
             const ROWS_IN_GROUP: bool = {};\nconst ROWS: u32 = {}u;\n\
             const JOB_MASK: u32 = {}u;\nconst NESTED: bool = {};\nconst FLAT: bool = {};\n\
             {SOURCE}",
            self.wg,
            self.levels,
            in_group(self.levels, self.flat),
            self.rows_in_group,
            kept_rows(self.levels, self.rows_in_group),
            self.mask,
            self.nested,
            self.flat,
        )
    }
}

/// A device, its queue and the shader's pipelines.
pub struct Kernel {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) layout: wgpu::BindGroupLayout,
    pipelines: Mutex<HashMap<Shape, wgpu::ComputePipeline>>,
    /// Workgroups the card runs at once, by pipeline shape (its ring's
    /// mask set to 0: it changes nothing the card holds) and the most
    /// workgroups asked for.
    widths: Mutex<HashMap<(Shape, u32), u32>>,
    /// Searches in flight in the latest queue (its threads per launch).
    pub(crate) searches: AtomicU64,
    pub(crate) limits: wgpu::Limits,
    /// Jobs split off long searches so far (see [`crate::steal`]).
    pub(crate) split: AtomicU64,
    /// Launches so far.
    pub(crate) launched: AtomicU64,
    /// Steps the launches offered (their threads times the steps each may
    /// take), and the steps the threads took.
    pub(crate) offered: AtomicU64,
    pub(crate) taken: AtomicU64,
}

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
            storage(7, false),
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
            widths: Mutex::new(HashMap::new()),
            searches: AtomicU64::new(0),
            limits,
            split: AtomicU64::new(0),
            launched: AtomicU64::new(0),
            offered: AtomicU64::new(0),
            taken: AtomicU64::new(0),
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

    /// The steps the card's threads took since it was opened, against the
    /// steps its launches offered.
    pub fn busy(&self) -> Busy {
        Busy {
            taken: self.taken.load(Ordering::Relaxed),
            offered: self.offered.load(Ordering::Relaxed),
            searches: self.searches.load(Ordering::Relaxed),
        }
    }

    /// The workgroups, at most `most`, that the pipeline for stacks of
    /// `levels` rows and a ring of `ring` jobs runs at once on this card:
    /// measured once per pipeline (see [`crate::width`]).
    pub fn width(
        &self,
        levels: u32,
        ring: u32,
        launch: &Launch,
        most: u32,
    ) -> Result<u32, DeviceError> {
        let (wg, pipeline) = self.prepare(levels, ring, launch)?;
        let key = (Shape::new(wg, levels, 0, launch), most);
        if let Some(&w) = self
            .widths
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(w);
        }
        let w = crate::width::measure(self, &pipeline, wg, levels, most)?;
        let mut widths = self.widths.lock().unwrap_or_else(|e| e.into_inner());
        widths.insert(key, w);
        Ok(w)
    }

    /// The workgroup size and pipeline for jobs whose stacks hold
    /// `levels` rows, from a queue of `ring` jobs (a power of two),
    /// launched as `launch` says; an error (not a panic) where the device
    /// refuses the shader.
    pub fn prepare(
        &self,
        levels: u32,
        ring: u32,
        launch: &Launch,
    ) -> Result<(u32, wgpu::ComputePipeline), DeviceError> {
        let wg = threads_per_group(&self.limits, levels, launch.rows_in_group, launch.flat)?;
        let shape = Shape::new(wg, levels, ring - 1, launch);
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

    /// Builds the pipeline of `shape`.
    fn build(&self, shape: Shape) -> wgpu::ComputePipeline {
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some("count.wgsl"),
            source: wgpu::ShaderSource::Wgsl(shape.source().into()),
        };
        let module = if shape.checked {
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

    /// A buffer of `bytes` (16 at least: the smallest a binding takes).
    pub(crate) fn buffer(
        &self,
        label: &str,
        bytes: u64,
        usage: wgpu::BufferUsages,
    ) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.max(16),
            usage,
            mapped_at_creation: false,
        })
    }

    /// The shader's bind group: `buffers` at bindings 0, 1, ...
    pub(crate) fn bind(&self, buffers: &[&wgpu::Buffer]) -> wgpu::BindGroup {
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.as_entire_binding(),
            })
            .collect();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("count"),
            layout: &self.layout,
            entries: &entries,
        })
    }

    /// Submits `encoder` with a copy of each of `ranges` (a buffer, its
    /// first byte and its bytes) behind the other, and reads them back.
    pub(crate) fn read(
        &self,
        mut encoder: wgpu::CommandEncoder,
        ranges: &[(&wgpu::Buffer, u64, u64)],
    ) -> Result<Vec<u32>, DeviceError> {
        let pending = self.read_later(&mut encoder, ranges);
        let index = self.queue.submit([encoder.finish()]);
        pending.wait(self, index)
    }

    /// Adds to `encoder` copies of `ranges` into one buffer, to be read
    /// once the encoder's submission is done.
    pub(crate) fn read_later(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        ranges: &[(&wgpu::Buffer, u64, u64)],
    ) -> Readback {
        let bytes: u64 = ranges.iter().map(|r| r.2).sum();
        let back = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size: bytes.max(4),
            usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
            mapped_at_creation: false,
        });
        let mut at = 0;
        for &(from, first, n) in ranges {
            encoder.copy_buffer_to_buffer(from, first, &back, at, n);
            at += n;
        }
        Readback { back }
    }
}

/// Words copied on the card, to be read once their submission is done.
pub(crate) struct Readback {
    back: wgpu::Buffer,
}

impl Readback {
    /// Waits for submission `index` (and no later one), then maps and
    /// reads the words.
    pub(crate) fn wait(
        self,
        kernel: &Kernel,
        index: wgpu::SubmissionIndex,
    ) -> Result<Vec<u32>, DeviceError> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.back
            .slice(..)
            .map_async(wgpu::MapMode::Read, move |r| drop(tx.send(r)));
        let failed = |e: &dyn std::fmt::Display| DeviceError::Failed(e.to_string());
        let wait = wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        };
        kernel.device.poll(wait).map_err(|e| failed(&e))?;
        // The map is done with the submission, its callback called by the poll.
        rx.try_recv()
            .map_err(|e| failed(&e))?
            .map_err(|e| failed(&e))?;
        let view = self
            .back
            .slice(..)
            .get_mapped_range()
            .map_err(|e| failed(&e))?;
        let words = view
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        drop(view);
        self.back.unmap();
        Ok(words)
    }
}

/// Threads per workgroup for stacks of `levels` rows (and copies of as
/// many rows' tables, if kept; the top records too, if flat): the most (a
/// power of two, 256 at most) whose workgroup memory fits the card's.
/// Its drivers, not wgpu, refuse a shader past that (lavapipe takes any).
pub fn threads_per_group(
    limits: &wgpu::Limits,
    levels: u32,
    rows_in_group: bool,
    flat: bool,
) -> Result<u32, DeviceError> {
    let rows = PAIR * kept_rows(levels, rows_in_group);
    let room = limits
        .max_compute_workgroup_storage_size
        .saturating_sub(GROUP_SHARED);
    let fit = room / (RECORD * in_group(levels, flat) + rows);
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

/// Records each thread keeps in workgroup memory for stacks of `levels`
/// rows: all of them if flat, else all but the top one, which it keeps in
/// registers (one, unused, for stacks of one row: WGSL has no empty
/// arrays).
fn in_group(levels: u32, flat: bool) -> u32 {
    if flat {
        levels.max(1)
    } else {
        levels.saturating_sub(1).max(1)
    }
}

/// Pairs of table words each thread keeps in workgroup memory: a row's
/// for every level of its stack, or one (unused: WGSL has no empty
/// arrays) where the threads read them in place.
fn kept_rows(levels: u32, rows_in_group: bool) -> u32 {
    if rows_in_group {
        levels
    } else {
        1
    }
}

/// The bytes of `words`, little-endian (as shaders read them): the words'
/// own memory on a little-endian host, a copy elsewhere.
pub(crate) fn as_bytes(words: &[u32]) -> Cow<'_, [u8]> {
    if cfg!(target_endian = "little") {
        Cow::Borrowed(bytemuck::cast_slice(words))
    } else {
        Cow::Owned(words.iter().flat_map(|w| w.to_le_bytes()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workgroup memory a shader declares, as naga lays it out (the
    /// shader validated first, as wgpu validates it).
    fn declared(wgsl: &str) -> u32 {
        let module = naga::front::wgsl::parse_str(wgsl).unwrap();
        let flags = naga::valid::ValidationFlags::all();
        let all = naga::valid::Capabilities::all();
        if let Err(e) = naga::valid::Validator::new(flags, all).validate(&module) {
            panic!("{}", e.emit_to_string(wgsl));
        }
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
    /// fails, one that does), with the rows' tables in either place,
    /// either form of loop and either form of step.
    #[test]
    fn the_workgroup_chosen_fits_what_the_shader_declares() {
        for kb in [16, 32, 48, 64] {
            let limits = wgpu::Limits {
                max_compute_workgroup_storage_size: kb << 10,
                ..wgpu::Limits::default()
            };
            for levels in 1..=30 {
                let forms = [
                    (false, true, false),
                    (true, false, false),
                    (true, false, true),
                ];
                for (rows_in_group, nested, flat) in forms {
                    let wg = threads_per_group(&limits, levels, rows_in_group, flat).unwrap();
                    let shape = |wg| Shape {
                        wg,
                        levels,
                        checked: true,
                        rows_in_group,
                        nested,
                        flat,
                        mask: 1023,
                    };
                    let bytes = declared(&shape(wg).source());
                    let at = format!("{kb} KB: {:?}", shape(wg));
                    assert!(bytes <= kb << 10, "{at} declare {bytes} bytes");
                    // And the next size up would not fit.
                    let wider = declared(&shape(wg * 2).source());
                    assert!(wg == 256 || wider > kb << 10, "{at}: twice as many fit");
                }
            }
        }
    }
}
