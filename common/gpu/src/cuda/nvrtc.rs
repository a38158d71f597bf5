//! NVRTC, CUDA's run-time compiler, opened at run time from wherever an
//! install puts it: the loader's own search (`LD_LIBRARY_PATH`, the
//! system's folders), then `$CUDA_HOME/lib64`, `$CUDA_PATH/lib64` and
//! `/usr/local/cuda/lib64`. Each folder is tried for the unversioned name
//! a toolkit installs and for the versioned names that a runtime-only
//! install (NVIDIA's Python wheels, a container's runtime image) has
//! alone: CUDA 13's, 12's and 11's.

use libloading::{Library, Symbol};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::PathBuf;
use std::sync::OnceLock;

/// The names NVRTC's library has, newest first.
#[cfg(not(windows))]
const NAMES: &[&str] = &[
    "libnvrtc.so",
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libnvrtc.so.11.2",
];
#[cfg(windows)]
const NAMES: &[&str] = &[
    "nvrtc64_130_0.dll",
    "nvrtc64_120_0.dll",
    "nvrtc64_112_0.dll",
];

/// Folders tried after the loader's own search.
fn folders() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(std::env::var_os)
        .map(|root| PathBuf::from(root).join(if cfg!(windows) { "bin" } else { "lib64" }))
        .collect();
    if cfg!(not(windows)) {
        out.push("/usr/local/cuda/lib64".into());
    }
    out
}

/// Every place tried, in order.
pub fn candidates() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = NAMES.iter().map(PathBuf::from).collect();
    for dir in folders() {
        out.extend(NAMES.iter().map(|n| dir.join(n)));
    }
    out
}

/// NVRTC, opened.
pub struct Nvrtc {
    lib: Library,
    /// Its builtins, opened from its folder where it was found in one.
    _builtins: Vec<Library>,
    /// Where it was found, as tried.
    pub found: String,
    /// Its version, (13, 0) for 13.0.
    pub version: (i32, i32),
}

type Status = c_int;
type Program = *mut c_void;

/// NVRTC, opened once; an error naming where it was looked for.
pub fn nvrtc() -> Result<&'static Nvrtc, String> {
    static ONCE: OnceLock<Result<Nvrtc, String>> = OnceLock::new();
    ONCE.get_or_init(open).as_ref().map_err(Clone::clone)
}

fn open() -> Result<Nvrtc, String> {
    for path in candidates() {
        // SAFETY: NVRTC's initialisers only set up the library itself.
        let Ok(lib) = (unsafe { Library::new(&path) }) else {
            continue;
        };
        let mut nvrtc = Nvrtc {
            lib,
            _builtins: builtins_beside(&path),
            found: path.display().to_string(),
            version: (0, 0),
        };
        let (mut major, mut minor) = (0, 0);
        // SAFETY: nvrtcVersion writes two ints.
        let version = unsafe {
            nvrtc.call::<unsafe extern "C" fn(*mut c_int, *mut c_int) -> Status>(b"nvrtcVersion")
        };
        if let Ok(f) = version {
            if unsafe { f(&mut major, &mut minor) } == 0 {
                nvrtc.version = (major, minor);
                return Ok(nvrtc);
            }
        }
    }
    let folders: Vec<String> = folders().iter().map(|d| d.display().to_string()).collect();
    Err(format!(
        "NVRTC ({}) was not found on the loader's path nor in {}: install the CUDA toolkit \
         or NVIDIA's nvidia-cuda-nvrtc package, then add its folder to LD_LIBRARY_PATH or \
         set CUDA_HOME",
        NAMES.join(", "),
        folders.join(", ")
    ))
}

/// NVRTC opens its builtins (`libnvrtc-builtins.so.13.0`) by name when it
/// compiles, which the loader finds only on its own path: where NVRTC was
/// found in a folder, its builtins there are opened first, so that the
/// loader, asked for one by name, gives the one already open.
fn builtins_beside(nvrtc: &std::path::Path) -> Vec<Library> {
    let Some(dir) = nvrtc.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Vec::new();
    };
    let prefix = if cfg!(windows) {
        "nvrtc-builtins64_"
    } else {
        "libnvrtc-builtins.so"
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        // SAFETY: as for NVRTC itself.
        .filter_map(|e| unsafe { Library::new(e.path()) }.ok())
        .collect()
}

/// What one compilation gave: the compiler's log, and the image asked for
/// (a cubin, or PTX text) where it succeeded.
pub struct Compiled {
    pub log: String,
    pub image: Result<Vec<u8>, String>,
}

impl Nvrtc {
    /// # Safety
    /// `F` must be the C signature of NVRTC's function `name`.
    unsafe fn call<F: Copy>(&self, name: &[u8]) -> Result<F, String> {
        let f: Symbol<'_, F> = unsafe { self.lib.get(name) }.map_err(|e| {
            format!(
                "{} lacks {}: {e}",
                self.found,
                String::from_utf8_lossy(name)
            )
        })?;
        Ok(*f)
    }

    fn error(&self, status: Status) -> String {
        let text = unsafe {
            self.call::<unsafe extern "C" fn(Status) -> *const c_char>(b"nvrtcGetErrorString")
        };
        match text {
            // SAFETY: NVRTC's error strings are static and NUL-terminated.
            Ok(f) => unsafe { CStr::from_ptr(f(status)) }
                .to_string_lossy()
                .into_owned(),
            Err(_) => format!("NVRTC error {status}"),
        }
    }

    fn check(&self, status: Status) -> Result<(), String> {
        if status == 0 {
            Ok(())
        } else {
            Err(self.error(status))
        }
    }

    /// The architectures it compiles for (75 for sm_75), where it says.
    pub fn architectures(&self) -> Vec<i32> {
        type Count = unsafe extern "C" fn(*mut c_int) -> Status;
        type Archs = unsafe extern "C" fn(*mut c_int) -> Status;
        let mut n = 0;
        // SAFETY: both write ints, the second `n` of them.
        unsafe {
            let (Ok(count), Ok(archs)) = (
                self.call::<Count>(b"nvrtcGetNumSupportedArchs"),
                self.call::<Archs>(b"nvrtcGetSupportedArchs"),
            ) else {
                return Vec::new();
            };
            if count(&mut n) != 0 || n <= 0 {
                return Vec::new();
            }
            let mut out = vec![0; n as usize];
            if archs(out.as_mut_ptr()) != 0 {
                return Vec::new();
            }
            out
        }
    }

    /// `source` (named `name` in messages) compiled with `options`; the
    /// image is a cubin where `cubin`, else PTX.
    pub fn compile(
        &self,
        source: &str,
        name: &str,
        options: &[String],
        cubin: bool,
    ) -> Result<Compiled, String> {
        type Create = unsafe extern "C" fn(
            *mut Program,
            *const c_char,
            *const c_char,
            c_int,
            *const *const c_char,
            *const *const c_char,
        ) -> Status;
        type Destroy = unsafe extern "C" fn(*mut Program) -> Status;
        let src = CString::new(source).map_err(|_| "the source holds a NUL".to_string())?;
        let name = CString::new(name).map_err(|_| "the name holds a NUL".to_string())?;
        let mut prog: Program = std::ptr::null_mut();
        // SAFETY: both strings outlive the call; no headers are given.
        unsafe {
            let create = self.call::<Create>(b"nvrtcCreateProgram")?;
            let destroy = self.call::<Destroy>(b"nvrtcDestroyProgram")?;
            self.check(create(
                &mut prog,
                src.as_ptr(),
                name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            ))?;
            let out = self.compiled(prog, options, cubin);
            let _ = destroy(&mut prog);
            out
        }
    }

    /// # Safety
    /// `prog` must be a live program.
    unsafe fn compiled(
        &self,
        prog: Program,
        options: &[String],
        cubin: bool,
    ) -> Result<Compiled, String> {
        type Compile = unsafe extern "C" fn(Program, c_int, *const *const c_char) -> Status;
        let options: Vec<CString> = options
            .iter()
            .map(|o| CString::new(o.as_str()).map_err(|_| format!("option {o:?} holds a NUL")))
            .collect::<Result<_, _>>()?;
        let pointers: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
        let status = unsafe {
            self.call::<Compile>(b"nvrtcCompileProgram")?(
                prog,
                pointers.len() as c_int,
                pointers.as_ptr(),
            )
        };
        let log = unsafe { self.output(prog, b"nvrtcGetProgramLogSize", b"nvrtcGetProgramLog") }?;
        let log = text(&log);
        let image = match self.check(status) {
            Err(e) => Err(e),
            Ok(()) if cubin => unsafe { self.output(prog, b"nvrtcGetCUBINSize", b"nvrtcGetCUBIN") },
            Ok(()) => unsafe { self.output(prog, b"nvrtcGetPTXSize", b"nvrtcGetPTX") }
                .map(|ptx| text(&ptx).into_bytes()),
        };
        Ok(Compiled { log, image })
    }

    /// One of the program's outputs, by its size's and its getter's names.
    ///
    /// # Safety
    /// `prog` must be a live, compiled program, and the names a size
    /// getter and its getter.
    unsafe fn output(&self, prog: Program, size: &[u8], get: &[u8]) -> Result<Vec<u8>, String> {
        type Size = unsafe extern "C" fn(Program, *mut usize) -> Status;
        type Get = unsafe extern "C" fn(Program, *mut c_char) -> Status;
        let mut len = 0usize;
        unsafe {
            self.check(self.call::<Size>(size)?(prog, &mut len))?;
            let mut out = vec![0u8; len];
            self.check(self.call::<Get>(get)?(prog, out.as_mut_ptr().cast()))?;
            Ok(out)
        }
    }
}

/// NVRTC's text (NUL-terminated, or not) as a string.
fn text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvrtc_text_ends_at_its_nul() {
        assert_eq!(text(b"ptx\0junk"), "ptx");
        assert_eq!(text(b"log"), "log");
    }

    #[test]
    fn a_runtime_only_install_and_the_toolkit_folder_are_tried() {
        let tried: Vec<String> = candidates()
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        if cfg!(not(windows)) {
            assert!(tried.contains(&"libnvrtc.so.13".to_string()), "{tried:?}");
            assert!(tried.contains(&"/usr/local/cuda/lib64/libnvrtc.so".to_string()));
        }
    }
}
