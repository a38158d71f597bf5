//! The kernel compiled for one card by NVRTC ([`super::nvrtc`]): machine
//! code for the card's own architecture (a cubin, which a driver older
//! than NVRTC still loads within one major version, where it would refuse
//! PTX too new for it), or, where NVRTC does not know the card's
//! architecture, PTX for NVRTC's default architecture, which the driver
//! compiles on for the card.

use super::nvrtc::Nvrtc;
use cudarc::nvrtc::Ptx;

/// The kernel's source (see its header).
pub const SOURCE: &str = include_str!("count.cu");

/// The kernel built by `nvrtc` for a card of compute capability
/// `major.minor`.
pub fn for_card(nvrtc: &Nvrtc, major: i32, minor: i32) -> Result<Ptx, String> {
    match image(nvrtc, &[arch(major, minor), REGISTERS.into()], true) {
        Ok(cubin) => Ok(Ptx::from_binary(cubin)),
        Err(first) => image(nvrtc, &[REGISTERS.into()], false)
            .map(|ptx| Ptx::from_src(String::from_utf8_lossy(&ptx).into_owned()))
            .map_err(|e| {
                format!(
                    "NVRTC {}.{} could not compile the kernel for sm_{major}{minor} ({first}), \
                     nor as PTX ({e})",
                    nvrtc.version.0, nvrtc.version.1
                )
            }),
    }
}

/// What the card's assembler says of the kernel `nvrtc` builds for
/// `major.minor`: its registers, stack frame and spills per thread.
pub fn resources(nvrtc: &Nvrtc, major: i32, minor: i32) -> Result<String, String> {
    let mut options = vec![
        arch(major, minor),
        REGISTERS.into(),
        "--ptxas-options=-v".into(),
    ];
    if nvrtc.version >= (12, 9) {
        // A build found in NVRTC's cache would run no assembler to say.
        options.push("--no-cache".into());
    }
    let compiled = nvrtc.compile(SOURCE, "count.cu", &options, true)?;
    compiled.image.map(|_| compiled.log)
}

/// At most 32 registers a thread, so that every card's multiprocessors
/// can hold as many threads as they run (65,536 registers over 2,048
/// threads): the kernels need no more without spilling (checked by the
/// tests for every architecture NVRTC knows), where the assembler would
/// otherwise take up to 39 for `count_jobs_kept`.
const REGISTERS: &str = "--maxrregcount=32";

fn arch(major: i32, minor: i32) -> String {
    format!("--gpu-architecture=sm_{major}{minor}")
}

/// `SOURCE` compiled with `options`: a cubin, or PTX; an error with the
/// compiler's log.
fn image(nvrtc: &Nvrtc, options: &[String], cubin: bool) -> Result<Vec<u8>, String> {
    let compiled = nvrtc.compile(SOURCE, "count.cu", options, cubin)?;
    compiled
        .image
        .map_err(|e| format!("{e}: {}", compiled.log.trim()))
}
