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
    match cubin(nvrtc, major, minor) {
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

/// The kernel's machine code for a card of compute capability
/// `major.minor` (what `nvdisasm` reads).
pub fn cubin(nvrtc: &Nvrtc, major: i32, minor: i32) -> Result<Vec<u8>, String> {
    image(nvrtc, &[arch(major, minor), REGISTERS.into()], true)
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

/// At most 32 registers a thread, so that a card's multiprocessors hold
/// as many threads as their shared memory allows on every architecture,
/// even those that run 2,048 threads (65,536 registers over 2,048): left
/// to itself, the assembler takes up to 41 for some kernels on some
/// architectures (sm_75, sm_86 to sm_89 and sm_110 to sm_121), and the
/// tests check that none spills under the cap. PTX built for an architecture
/// NVRTC does not know carries no cap: the driver's assembler chooses.
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
