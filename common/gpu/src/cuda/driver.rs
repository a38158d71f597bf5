//! A card through the CUDA driver (`libcuda`, installed with NVIDIA's
//! driver), the kernel compiled for it by NVRTC (`libnvrtc`, from the CUDA
//! toolkit) when the card is opened. Both are opened at run time: a
//! machine without them has no CUDA cards, and says which is missing.

use super::Runner;
use crate::jobs::TABLE_WORDS;
use crate::stream::InteriorCounts;
use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
use nqueens_common::engine::device::DeviceError;
use std::sync::{Arc, Mutex};

/// The kernel's source (see its header).
pub const SOURCE: &str = include_str!("count.cu");

/// Bytes of shared memory a thread's stack takes per row below its top.
const RECORD_BYTES: u32 = 16;

/// Threads per block unless `NQUEENS_GPU_BLOCK` says otherwise (the
/// peer's fastest configurations on an H100 run 128 to 192).
const BLOCK: u32 = 128;

/// CUDA cards on this machine; an error naming what is missing where the
/// driver or NVRTC cannot be opened.
pub fn count() -> Result<usize, String> {
    // SAFETY: these only try to open the libraries.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(
            "the CUDA driver library (libcuda.so, installed with NVIDIA's driver) \
                    was not found"
                .into(),
        );
    }
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(
            "NVRTC (libnvrtc.so, from the CUDA toolkit) was not found: add its \
                    folder (such as /usr/local/cuda/lib64) to LD_LIBRARY_PATH"
                .into(),
        );
    }
    let n = CudaContext::device_count().map_err(|e| format!("the CUDA driver: {e}"))?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// One card: its context, the kernel built for it, and a stream for each
/// feeding thread counting at once.
pub struct Cuda {
    ctx: Arc<CudaContext>,
    func: CudaFunction,
    streams: Mutex<Vec<Arc<CudaStream>>>,
    sms: u32,
    threads_per_sm: u32,
    block: u32,
    most_shared: u32,
}

fn failed(what: &str) -> impl Fn(cudarc::driver::DriverError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

impl Cuda {
    /// Opens card `ordinal` and builds the kernel for it: its name (as
    /// [`nqueens_common::engine::device::Device::name`] gives it) and the
    /// card.
    pub fn open(ordinal: usize, block: Option<u32>) -> Result<(String, Cuda), String> {
        let ctx = CudaContext::new(ordinal).map_err(failed("opening the card"))?;
        // Feeding threads waiting on the card sleep, where by default they
        // would spin on the cores that prepare batches and count on the
        // CPU. A driver before 12.1 cannot set it: they spin there.
        let _ = ctx.set_blocking_synchronize();
        let (major, minor) = ctx
            .compute_capability()
            .map_err(failed("its compute capability"))?;
        let func = build(&ctx, major, minor)?;
        let attr = |a| ctx.attribute(a).map_err(failed("its limits"));
        let most_shared =
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
        func.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            most_shared,
        )
        .map_err(failed("its shared memory"))?;
        let cuda = Cuda {
            sms: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            threads_per_sm: attr(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
            )? as u32,
            block: block.unwrap_or(BLOCK),
            most_shared: most_shared as u32,
            func,
            streams: Mutex::new(Vec::new()),
            ctx,
        };
        let name = cuda.ctx.name().map_err(failed("its name"))?;
        Ok((format!("gpu:{name} (cuda)"), cuda))
    }

    fn stream(&self) -> Result<Arc<CudaStream>, DeviceError> {
        let spare = self.streams.lock().expect("stream pool").pop();
        match spare {
            Some(s) => Ok(s),
            None => self.ctx.new_stream().map_err(lost),
        }
    }

    fn run_on(
        &self,
        stream: &Arc<CudaStream>,
        tables: &[u32],
        jobs: &[[u32; 8]],
        levels: u32,
    ) -> Result<InteriorCounts, DeviceError> {
        let interiors = tables.len() / TABLE_WORDS;
        let count = u32::try_from(jobs.len()).expect("a batch's jobs fit a word");
        let tables = stream.clone_htod(tables).map_err(lost)?;
        let jobs = stream.clone_htod(jobs.as_flattened()).map_err(lost)?;
        let mut next = stream.alloc_zeros::<u32>(1).map_err(lost)?;
        let mut overflow = stream.alloc_zeros::<u32>(1).map_err(lost)?;
        let mut results = stream.alloc_zeros::<u64>(2 * interiors).map_err(lost)?;
        let (block, shared) = shape(self.block, self.most_shared, levels);
        let per_sm = self
            .func
            .occupancy_max_active_blocks_per_multiprocessor(block, shared as usize, None)
            .map_err(lost)?
            .max(1);
        let grid = (per_sm * self.sms).min(count.div_ceil(block)).max(1);
        let config = LaunchConfig {
            grid_dim: (grid, 1, 1),
            block_dim: (block, 1, 1),
            shared_mem_bytes: shared,
        };
        let mut launch = stream.launch_builder(&self.func);
        launch
            .arg(&tables)
            .arg(&jobs)
            .arg(&count)
            .arg(&mut next)
            .arg(&mut results)
            .arg(&mut overflow);
        // SAFETY: the arguments are the kernel's (count.cu's
        // `count_jobs`): every job names an interior of `tables`, and
        // `results` holds two totals for each; each thread's stack has
        // `levels - 1` records in the shared memory given.
        unsafe { launch.launch(config) }.map_err(lost)?;
        let totals = stream.clone_dtoh(&results).map_err(lost)?;
        let wrapped = stream.clone_dtoh(&overflow).map_err(lost)?;
        stream.synchronize().map_err(lost)?;
        if wrapped[0] != 0 {
            return Err(DeviceError::Overflow);
        }
        Ok(totals.chunks(2).map(|c| (c[0], c[1])).collect())
    }
}

/// Threads per block and the shared memory a block takes, for stacks of
/// `levels` rows: `block` threads, halved while their stacks would pass
/// `most_shared` bytes (32 threads at least: 30 records of 16 bytes each
/// fit any card's 48 KiB).
fn shape(block: u32, most_shared: u32, levels: u32) -> (u32, u32) {
    let per_thread = levels.saturating_sub(1).max(1) * RECORD_BYTES;
    let mut block = block;
    while block > 32 && block * per_thread > most_shared {
        block /= 2;
    }
    (block, block * per_thread)
}

fn lost(e: cudarc::driver::DriverError) -> DeviceError {
    DeviceError::Failed(format!("CUDA: {e}"))
}

/// The kernel compiled for a card of compute capability `major.minor`
/// (for the newest architecture NVRTC knows, where it does not know the
/// card's: the driver compiles it on for the card).
fn build(ctx: &Arc<CudaContext>, major: i32, minor: i32) -> Result<CudaFunction, String> {
    let for_arch = |arch: Option<String>| {
        let options = CompileOptions {
            options: arch.into_iter().collect(),
            name: Some("count.cu".into()),
            ..CompileOptions::default()
        };
        compile_ptx_with_opts(SOURCE, options)
    };
    let ptx = for_arch(Some(format!("--gpu-architecture=compute_{major}{minor}")))
        .or_else(|_| for_arch(None))
        .map_err(|e| format!("NVRTC could not compile the kernel: {e:?}"))?;
    let module = ctx.load_module(ptx).map_err(failed("loading the kernel"))?;
    module
        .load_function("count_jobs")
        .map_err(failed("finding the kernel"))
}

impl Runner for Cuda {
    fn run(
        &self,
        tables: &[u32],
        jobs: &[[u32; 8]],
        levels: u32,
    ) -> Result<InteriorCounts, DeviceError> {
        let stream = self.stream()?;
        let counted = self.run_on(&stream, tables, jobs, levels);
        self.streams.lock().expect("stream pool").push(stream);
        counted
    }

    fn width(&self) -> usize {
        (self.sms as usize) * (self.threads_per_sm as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::shape;

    #[test]
    fn a_block_shrinks_until_its_stacks_fit() {
        // 16 rows: 128 threads of 15 records each fit 48 KiB.
        assert_eq!(shape(128, 48 << 10, 16), (128, 128 * 15 * 16));
        // 31 rows at 48 KiB: 64 threads; with an H100's 227 KiB, 128.
        assert_eq!(shape(128, 48 << 10, 31), (64, 64 * 30 * 16));
        assert_eq!(shape(128, 227 << 10, 31), (128, 128 * 30 * 16));
        // A stack of one row still has a record's room.
        assert_eq!(shape(256, 48 << 10, 1), (256, 256 * 16));
    }
}
