//! NVRTC, CUDA's run-time compiler, opened at run time from wherever an
//! install puts it: the loader's own search (`LD_LIBRARY_PATH`, the
//! system's folders), then `$CUDA_HOME` and `$CUDA_PATH` (absolute paths
//! only; their `lib64` and `lib`) and `/usr/local/cuda/lib64`. Each folder
//! is tried for the unversioned name a toolkit installs and for the
//! versioned names that a runtime-only install (NVIDIA's Python wheels, a
//! container's runtime image) has alone: CUDA 13's, 12's and 11's.
//!
//! Each NVRTC found is kept, and a card is built for by the first that
//! fits it ([`for_card`]): no newer than the driver's CUDA (whose driver
//! loads nothing a newer major version builds) and knowing the card's
//! architecture or an older one (NVRTC 13 starts at Turing).

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
    let subfolders: &[&str] = if cfg!(windows) {
        &["bin", "bin/x64"]
    } else {
        &["lib64", "lib"]
    };
    let mut out: Vec<PathBuf> = Vec::new();
    for root in ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from)
        // A relative root would be looked for wherever the process runs.
        .filter(|root| root.is_absolute())
    {
        out.extend(subfolders.iter().map(|sub| root.join(sub)));
    }
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
    /// The architectures it builds machine code for (75 for sm_75).
    pub architectures: Vec<i32>,
}

type Status = c_int;
type Program = *mut c_void;

/// Every NVRTC found, each version once, in the order tried; and those
/// found but not used, with why.
struct Found {
    usable: Vec<Nvrtc>,
    refused: Vec<String>,
}

fn found() -> &'static Found {
    static ONCE: OnceLock<Found> = OnceLock::new();
    ONCE.get_or_init(|| {
        let mut all = Found {
            usable: Vec::new(),
            refused: Vec::new(),
        };
        for path in candidates() {
            // SAFETY: NVRTC's initialisers only set up the library itself.
            let Ok(lib) = (unsafe { Library::new(&path) }) else {
                continue;
            };
            match Nvrtc::checked(lib, &path) {
                Ok(n) if all.usable.iter().all(|u| u.version != n.version) => all.usable.push(n),
                Ok(_) => {}
                Err(why) => all.refused.push(format!("{}: {why}", path.display())),
            }
        }
        all
    })
}

/// NVRTC, the first found; an error naming where it was looked for.
pub fn nvrtc() -> Result<&'static Nvrtc, String> {
    all().first().ok_or_else(not_found)
}

/// Every NVRTC found, each version once, in the order tried.
pub fn all() -> &'static [Nvrtc] {
    &found().usable
}

/// The first NVRTC found that builds for a card of architecture `arch`
/// (90 for sm_90) under a driver of CUDA `driver` (12080 for 12.8; 0 if
/// unknown).
pub fn for_card(driver: i32, arch: i32) -> Result<&'static Nvrtc, String> {
    let all = &found().usable;
    if all.is_empty() {
        return Err(not_found());
    }
    all.iter()
        .find(|n| fits(n.version, &n.architectures, driver, arch))
        .ok_or_else(|| {
            let seen: Vec<String> = all
                .iter()
                .map(|n| format!("{}.{} ({})", n.version.0, n.version.1, n.found))
                .collect();
            format!(
                "no NVRTC here builds for this card (sm_{arch}, its driver of CUDA {}.{}): \
                 found {}; NVRTC must be of the driver's CUDA version or older, and know the \
                 card's architecture or an older one (NVRTC 13 starts at sm_75, 12 at sm_50)",
                driver / 1000,
                driver % 1000 / 10,
                seen.join(", ")
            )
        })
}

/// Whether NVRTC `version`, building for `architectures`, fits a card of
/// `arch` under a driver of CUDA `driver` (0: unknown, any fits).
fn fits(version: (i32, i32), architectures: &[i32], driver: i32, arch: i32) -> bool {
    (driver <= 0 || version.0 <= driver / 1000) && architectures.iter().any(|&a| a <= arch)
}

fn not_found() -> String {
    let folders: Vec<String> = folders().iter().map(|d| d.display().to_string()).collect();
    let refused = &found().refused;
    let refused = match refused.is_empty() {
        true => String::new(),
        false => format!(" (found but not used: {})", refused.join("; ")),
    };
    format!(
        "NVRTC of CUDA 11.2 or later ({}) was not found on the loader's path nor in {}{refused}: \
         install the CUDA toolkit, or NVIDIA's nvidia-cuda-nvrtc package, and add its folder \
         to LD_LIBRARY_PATH or set CUDA_HOME",
        NAMES.join(", "),
        folders.join(", ")
    )
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
    /// `lib`, found at `path`, if it is NVRTC of CUDA 11.2 or later.
    fn checked(lib: Library, path: &std::path::Path) -> Result<Nvrtc, String> {
        let mut nvrtc = Nvrtc {
            lib,
            _builtins: builtins_beside(path),
            found: path.display().to_string(),
            version: (0, 0),
            architectures: Vec::new(),
        };
        type Version = unsafe extern "C" fn(*mut c_int, *mut c_int) -> Status;
        let (mut major, mut minor) = (0, 0);
        // SAFETY: nvrtcVersion writes two ints.
        unsafe {
            nvrtc.check(nvrtc.call::<Version>(b"nvrtcVersion")?(
                &mut major, &mut minor,
            ))
        }?;
        nvrtc.version = (major, minor);
        // SAFETY: only looked up, not called.
        unsafe { nvrtc.call::<unsafe extern "C" fn()>(b"nvrtcGetCUBIN") }
            .map_err(|_| format!("NVRTC {major}.{minor} is older than CUDA 11.2"))?;
        nvrtc.architectures = nvrtc.supported();
        if nvrtc.architectures.is_empty() {
            return Err(format!(
                "NVRTC {major}.{minor} names no architecture it builds for"
            ));
        }
        Ok(nvrtc)
    }

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

    /// The architectures it builds machine code for, where it says.
    fn supported(&self) -> Vec<i32> {
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
        // The log is best had, never what hides the compiler's verdict.
        let log = unsafe { self.output(prog, b"nvrtcGetProgramLogSize", b"nvrtcGetProgramLog") }
            .map(|log| text(&log))
            .unwrap_or_default();
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

    /// A card is built for by NVRTC no newer than its driver's CUDA that
    /// knows its architecture or an older one.
    #[test]
    fn an_nvrtc_fits_its_driver_and_card() {
        let thirteen = [75, 80, 86, 89, 90, 100, 120];
        let twelve = [50, 60, 70, 75, 80, 86, 89, 90];
        assert!(fits((13, 0), &thirteen, 13000, 90));
        assert!(
            !fits((13, 0), &thirteen, 12080, 90),
            "newer than the driver"
        );
        assert!(
            fits((12, 9), &twelve, 12020, 90),
            "a newer minor version is fine"
        );
        assert!(
            !fits((13, 0), &thirteen, 13000, 70),
            "a V100 is older than it knows"
        );
        assert!(fits((12, 9), &twelve, 13000, 70));
        assert!(
            fits((12, 9), &twelve, 13000, 120),
            "PTX for a card newer than it knows"
        );
        assert!(fits((13, 0), &thirteen, 0, 90), "an unknown driver");
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
