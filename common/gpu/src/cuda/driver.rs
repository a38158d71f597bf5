//! A card through the CUDA driver (`libcuda`, installed with NVIDIA's
//! driver), the kernel compiled for it by NVRTC (`libnvrtc`, from the CUDA
//! toolkit, [`super::compile`]) when the card is opened. Both are opened
//! at run time: a machine without them has no CUDA cards, and says which
//! is missing.

use super::{compile, nvrtc, Ran, Runner};
use crate::jobs::TABLE_WORDS;
use cudarc::driver::sys::{self, CUdevice_attribute, CUfunction_attribute, CUresult};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DeviceRepr, DriverError, LaunchConfig,
    PushKernelArg, ValidAsZeroBits,
};
use nqueens_common::engine::device::DeviceError;
use std::sync::{Arc, Mutex};

/// Bytes of shared memory a record of a thread's stack takes.
const RECORD_BYTES: u32 = 16;

/// Bytes of shared memory a thread's copy of its job's pairs takes per row.
const PAIR_BYTES: u32 = 8;

/// Threads per block unless `NQUEENS_GPU_BLOCK` says otherwise (the
/// peer's fastest configurations on an H100 run 128 to 192).
pub const BLOCK: u32 = 128;

/// CUDA cards on this machine; an error naming what is missing where the
/// driver or NVRTC cannot be opened.
pub fn count() -> Result<usize, String> {
    // SAFETY: these only try to open the libraries.
    if !unsafe { sys::is_culib_present() } {
        return Err(
            "the CUDA driver library (libcuda.so, installed with NVIDIA's driver) \
                    was not found"
                .into(),
        );
    }
    nvrtc::nvrtc()?;
    match CudaContext::device_count() {
        Ok(n) => Ok(usize::try_from(n).unwrap_or(0)),
        Err(DriverError(CUresult::CUDA_ERROR_NO_DEVICE)) => Ok(0),
        Err(e) => Err(format!("the CUDA driver: {e}")),
    }
}

/// The driver's CUDA version (12010 for 12.1), 0 where it does not say.
fn driver_version() -> i32 {
    let mut v = 0;
    // SAFETY: writes one int; needs no initialised driver.
    let _ = unsafe { sys::cuDriverGetVersion(&mut v) };
    v
}

/// A feeding thread's stream, and the buffers its batches reuse (grown as
/// a batch needs).
struct Lane {
    stream: Arc<CudaStream>,
    tables: CudaSlice<u32>,
    jobs: CudaSlice<u32>,
    results: CudaSlice<u64>,
    /// The jobs taken, and the wrap flag (count.cu's `control`).
    control: CudaSlice<u32>,
    /// The most steps one thread took.
    busiest: CudaSlice<u64>,
}

/// One card: its context, the kernel built for it, and a lane for each
/// feeding thread counting at once.
pub struct Cuda {
    ctx: Arc<CudaContext>,
    func: CudaFunction,
    lanes: Mutex<Vec<Lane>>,
    sms: u32,
    threads_per_sm: u32,
    block: u32,
    most_shared: u32,
    kernel: Kernel,
}

fn failed(what: &str) -> impl Fn(DriverError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

impl Cuda {
    /// Opens card `ordinal` and builds the kernel for it: its name (as
    /// [`nqueens_common::engine::device::Device::name`] gives it) and the
    /// card. A card whose driver ends long launches (one that drives a
    /// display) is refused: a launch here lasts as long as its batch.
    /// It runs `kernel`.
    pub fn open(
        ordinal: usize,
        block: Option<u32>,
        kernel: Kernel,
    ) -> Result<(String, Cuda), String> {
        let ctx = CudaContext::new(ordinal).map_err(failed("opening the card"))?;
        let attr = |a| ctx.attribute(a).map_err(failed("its limits"));
        if attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT)? != 0 {
            return Err(
                "its driver ends long launches (the card drives a display): count on \
                        it through wgpu (NQUEENS_GPU_API=wgpu), whose launches are short"
                    .into(),
            );
        }
        // Feeding threads waiting on the card sleep, where by default they
        // would spin on the cores that prepare batches and count on the
        // CPU. A driver before 12.1 lacks the call: they spin there.
        if driver_version() >= 12010 {
            let _ = ctx.set_blocking_synchronize();
        }
        // SAFETY: each lane's buffers are made, used and freed on its own
        // stream only (see `Lane`), so no use needs an event across streams.
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = ctx
            .compute_capability()
            .map_err(failed("its compute capability"))?;
        let nvrtc = nvrtc::for_card(driver_version(), major * 10 + minor)?;
        let loading = format!(
            "loading the kernel NVRTC {}.{} built, under a driver of CUDA {}.{}",
            nvrtc.version.0,
            nvrtc.version.1,
            driver_version() / 1000,
            driver_version() % 1000 / 10
        );
        let module = ctx
            .load_module(compile::for_card(nvrtc, major, minor)?)
            .map_err(failed(&loading))?;
        let entry = kernel.entry();
        let func = module
            .load_function(entry)
            .map_err(failed("finding the kernel"))?;
        let most_shared =
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
        func.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            most_shared,
        )
        .map_err(failed("its shared memory"))?;
        let sms = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let threads_per_sm =
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?;
        let name = ctx.name().map_err(failed("its name"))?;
        let cuda = Cuda {
            sms: sms as u32,
            threads_per_sm: threads_per_sm as u32,
            block: block.unwrap_or(BLOCK),
            most_shared: most_shared as u32,
            kernel,
            func,
            lanes: Mutex::new(Vec::new()),
            ctx,
        };
        Ok((format!("gpu:{name} (cuda)"), cuda))
    }

    fn lane(&self) -> Result<Lane, DriverError> {
        if let Some(lane) = self.lanes.lock().expect("lane pool").pop() {
            return Ok(lane);
        }
        let stream = self.ctx.new_stream()?;
        Ok(Lane {
            tables: stream.alloc_zeros(1)?,
            jobs: stream.alloc_zeros(1)?,
            results: stream.alloc_zeros(1)?,
            control: stream.alloc_zeros(2)?,
            busiest: stream.alloc_zeros(1)?,
            stream,
        })
    }

    /// The launch for `count` jobs with stacks of `levels` rows: blocks
    /// as [`shape`] makes them, as many as the card holds at once (each
    /// thread takes jobs until they run out), fewer for fewer jobs.
    fn config(&self, count: u32, levels: u32) -> Result<LaunchConfig, DeviceError> {
        let (block, shared) = shape(self.kernel, self.block, self.most_shared, levels);
        let per_sm = self
            .func
            .occupancy_max_active_blocks_per_multiprocessor(block, shared as usize, None)
            .map_err(lost)?;
        if per_sm == 0 {
            return Err(DeviceError::Failed(format!(
                "the card runs no block of {block} threads with {shared} bytes of stacks \
                 and pairs: give NQUEENS_GPU_BLOCK fewer"
            )));
        }
        Ok(LaunchConfig {
            grid_dim: ((per_sm * self.sms).min(count.div_ceil(block)).max(1), 1, 1),
            block_dim: (block, 1, 1),
            shared_mem_bytes: shared,
        })
    }

    fn run_on(
        &self,
        lane: &mut Lane,
        tables: &[u32],
        jobs: &[[u32; 8]],
        levels: u32,
    ) -> Result<Ran, DeviceError> {
        let totals = 2 * (tables.len() / TABLE_WORDS);
        let count = u32::try_from(jobs.len()).expect("a batch's jobs fit a word");
        let config = self.config(count, levels)?;
        let below = self.kernel.below(levels);
        let s = Arc::clone(&lane.stream);
        put(&s, &mut lane.tables, tables).map_err(lost)?;
        put(&s, &mut lane.jobs, jobs.as_flattened()).map_err(lost)?;
        grow(&s, &mut lane.results, totals).map_err(lost)?;
        s.memset_zeros(&mut lane.results.slice_mut(0..totals))
            .map_err(lost)?;
        s.memset_zeros(&mut lane.control).map_err(lost)?;
        s.memset_zeros(&mut lane.busiest).map_err(lost)?;
        let mut launch = s.launch_builder(&self.func);
        launch
            .arg(&lane.tables)
            .arg(&lane.jobs)
            .arg(&count)
            .arg(&below)
            .arg(&mut lane.control)
            .arg(&mut lane.results)
            .arg(&mut lane.busiest);
        // SAFETY: the arguments are those of every kernel of count.cu:
        // every job names an interior of the tables given, `results` holds
        // two totals for each and `busiest` one, and each thread has
        // `below` records of stack in the shared memory given (as many as
        // its kernel needs for jobs of `levels` rows, which `run` checked
        // they are), and after them, if it keeps them, `levels` pairs.
        unsafe { launch.launch(config) }.map_err(lost)?;
        let counted = s.clone_dtoh(&lane.results.slice(0..totals)).map_err(lost)?;
        let control = s.clone_dtoh(&lane.control).map_err(lost)?;
        let busiest = s.clone_dtoh(&lane.busiest).map_err(lost)?;
        s.synchronize().map_err(lost)?;
        if control[1] != 0 {
            return Err(DeviceError::Overflow);
        }
        Ok(Ran {
            counts: counted.chunks(2).map(|c| (c[0], c[1])).collect(),
            threads: u64::from(config.grid_dim.0) * u64::from(config.block_dim.0),
            busiest: busiest[0],
        })
    }
}

/// Makes `buf` hold `len` values at least (a power of two, so a lane's
/// buffers settle after a few batches).
fn grow<T: DeviceRepr + ValidAsZeroBits>(
    s: &Arc<CudaStream>,
    buf: &mut CudaSlice<T>,
    len: usize,
) -> Result<(), DriverError> {
    if buf.len() < len {
        *buf = s.alloc_zeros(len.next_power_of_two())?;
    }
    Ok(())
}

/// Copies `src` to the start of `buf`, grown to hold it.
fn put<T: DeviceRepr + ValidAsZeroBits>(
    s: &Arc<CudaStream>,
    buf: &mut CudaSlice<T>,
    src: &[T],
) -> Result<(), DriverError> {
    grow(s, buf, src.len())?;
    s.memcpy_htod(src, buf)
}

/// Which of `count.cu`'s kernels a card runs: whether its threads keep
/// their jobs' pairs in their block's memory (`NQUEENS_GPU_TABLES`), and
/// their top records too, stepping on one path (`NQUEENS_GPU_STEP`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernel {
    pub keep: bool,
    pub flat: bool,
}

impl Kernel {
    /// Unless the settings say otherwise: both. Each new row's pair is
    /// then a read of the block's memory (a warp's threads on as many
    /// interiors would read as many places of the card's), and a warp
    /// runs each instruction once a step whichever way its threads go.
    pub const DEFAULT: Kernel = Kernel {
        keep: true,
        flat: true,
    };

    /// Its entry in `count.cu`.
    pub fn entry(self) -> &'static str {
        match (self.keep, self.flat) {
            (false, false) => "count_jobs",
            (true, false) => "count_jobs_kept",
            (false, true) => "count_jobs_flat",
            (true, true) => "count_jobs_kept_flat",
        }
    }

    /// Records of a thread's stack in its block's memory for jobs of
    /// `levels` rows: all of them if flat, else all but the top, one at
    /// least.
    pub(crate) fn below(self, levels: u32) -> u32 {
        if self.flat {
            levels.max(1)
        } else {
            levels.saturating_sub(1).max(1)
        }
    }

    /// Bytes of its block's memory a thread takes for jobs of `levels`
    /// rows: its stack, and its pairs if it keeps them.
    fn bytes(self, levels: u32) -> u32 {
        let pairs = if self.keep { levels * PAIR_BYTES } else { 0 };
        self.below(levels) * RECORD_BYTES + pairs
    }
}

/// Threads per block and the shared memory a block takes for jobs of
/// `levels` rows: `block` threads, halved while their memory would pass
/// `most_shared` bytes (32 threads at least: 32 records of 16 bytes and
/// 32 pairs of 8 each fit any card's 48 KiB).
fn shape(kernel: Kernel, block: u32, most_shared: u32, levels: u32) -> (u32, u32) {
    let per_thread = kernel.bytes(levels);
    let mut block = block;
    while block > 32 && block * per_thread > most_shared {
        block /= 2;
    }
    (block, block * per_thread)
}

fn lost(e: DriverError) -> DeviceError {
    DeviceError::Failed(format!("CUDA: {e}"))
}

impl Runner for Cuda {
    fn run(&self, tables: &[u32], jobs: &[[u32; 8]], levels: u32) -> Result<Ran, DeviceError> {
        super::rows_fit(jobs, levels)?;
        let mut lane = self.lane().map_err(lost)?;
        let counted = self.run_on(&mut lane, tables, jobs, levels);
        // A lane whose batch failed is dropped, not used again.
        if counted.is_ok() {
            self.lanes.lock().expect("lane pool").push(lane);
        }
        counted
    }

    fn width(&self) -> usize {
        (self.sms as usize) * (self.threads_per_sm as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::{shape, Kernel};

    const fn kernel(keep: bool, flat: bool) -> Kernel {
        Kernel { keep, flat }
    }

    #[test]
    fn a_block_shrinks_until_its_stacks_fit() {
        let (plain, kept) = (kernel(false, false), kernel(true, false));
        let (flat, both) = (kernel(false, true), kernel(true, true));
        // 16 rows: 128 threads of 15 records each fit 48 KiB, and with 16
        // pairs each too; flat, 16 records.
        assert_eq!(shape(plain, 128, 48 << 10, 16), (128, 128 * 15 * 16));
        assert_eq!(
            shape(kept, 128, 48 << 10, 16),
            (128, 128 * (15 * 16 + 16 * 8))
        );
        assert_eq!(shape(flat, 128, 48 << 10, 16), (128, 128 * 16 * 16));
        // 31 rows at 48 KiB: 64 threads, with their pairs or flat too;
        // with an H100's 227 KiB, 128.
        assert_eq!(shape(plain, 128, 48 << 10, 31), (64, 64 * 30 * 16));
        assert_eq!(shape(plain, 128, 227 << 10, 31), (128, 128 * 30 * 16));
        assert_eq!(
            shape(kept, 128, 48 << 10, 31),
            (64, 64 * (30 * 16 + 31 * 8))
        );
        assert_eq!(
            shape(both, 128, 48 << 10, 31),
            (64, 64 * (31 * 16 + 31 * 8))
        );
        assert_eq!(
            shape(both, 128, 227 << 10, 31),
            (128, 128 * (31 * 16 + 31 * 8))
        );
        // 32 rows, flat, and 32 pairs: 32 threads in 24 KiB.
        assert_eq!(
            shape(both, 128, 24 << 10, 32),
            (32, 32 * (32 * 16 + 32 * 8))
        );
        // A stack of one row still has a record's room.
        assert_eq!(shape(plain, 256, 48 << 10, 1), (256, 256 * 16));
        assert_eq!(shape(kept, 256, 48 << 10, 1), (256, 256 * 24));
        assert_eq!(shape(both, 256, 48 << 10, 1), (256, 256 * 24));
    }

    #[test]
    fn each_kernel_has_its_own_entry() {
        let mut entries: Vec<&str> = [false, true]
            .into_iter()
            .flat_map(|keep| [false, true].map(|flat| kernel(keep, flat).entry()))
            .collect();
        entries.sort_unstable();
        entries.dedup();
        assert_eq!(entries.len(), 4);
        assert_eq!(Kernel::DEFAULT.entry(), "count_jobs_kept_flat");
    }
}
