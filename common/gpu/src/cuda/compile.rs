//! The kernel compiled for one card by NVRTC: machine code for the card's
//! own architecture (a cubin, which a driver older than NVRTC still loads
//! within one major version, where it would refuse PTX too new for it),
//! or, where NVRTC does not know the card's architecture, PTX for the
//! newest it knows, which the driver compiles on for the card.

use cudarc::nvrtc::{result, sys, Ptx};
use std::ffi::{c_char, CString};

/// The kernel's source (see its header).
pub const SOURCE: &str = include_str!("count.cu");

/// The kernel for a card of compute capability `major.minor`.
pub fn for_card(major: i32, minor: i32) -> Result<Ptx, String> {
    let arch = format!("--gpu-architecture=sm_{major}{minor}");
    program(&[arch], true).or_else(|first| {
        program(&[], false).map_err(|e| {
            format!(
                "NVRTC could not compile the kernel for sm_{major}{minor} ({first}), nor as \
                 PTX ({e})"
            )
        })
    })
}

/// `SOURCE` compiled with `options`: a cubin, or PTX.
fn program(options: &[String], cubin: bool) -> Result<Ptx, String> {
    let src = CString::new(SOURCE).expect("the source has no NUL");
    let prog = result::create_program(&src, Some(c"count.cu")).map_err(|e| format!("{e:?}"))?;
    // SAFETY: `prog` was just created, and is destroyed once, below.
    let out = unsafe { compiled(prog, options, cubin) };
    // SAFETY: as above; `src` outlives the program.
    let _ = unsafe { result::destroy_program(prog) };
    out
}

/// # Safety
/// `prog` must be a live program.
unsafe fn compiled(
    prog: sys::nvrtcProgram,
    options: &[String],
    cubin: bool,
) -> Result<Ptx, String> {
    if let Err(e) = unsafe { result::compile_program(prog, options) } {
        let log = unsafe { result::get_program_log(prog) }
            .map(|l| text(&l))
            .unwrap_or_default();
        return Err(format!("{e:?}: {log}"));
    }
    if !cubin {
        let ptx = unsafe { result::get_ptx(prog) }.map_err(|e| format!("{e:?}"))?;
        return Ok(Ptx::from_src(text(&ptx)));
    }
    let mut size = 0usize;
    unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) }
        .result()
        .map_err(|e| format!("{e:?}"))?;
    let mut image = vec![0u8; size];
    unsafe { sys::nvrtcGetCUBIN(prog, image.as_mut_ptr().cast()) }
        .result()
        .map_err(|e| format!("{e:?}"))?;
    Ok(Ptx::from_binary(image))
}

/// NVRTC's text (NUL-terminated, or not) as a string.
fn text(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvrtc_text_ends_at_its_nul() {
        let chars: Vec<c_char> = b"ptx\0junk".iter().map(|&b| b as c_char).collect();
        assert_eq!(text(&chars), "ptx");
        let unterminated: Vec<c_char> = b"log".iter().map(|&b| b as c_char).collect();
        assert_eq!(text(&unterminated), "log");
    }
}
