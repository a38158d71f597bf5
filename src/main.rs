//! `nqueens`: the binary. Everything it does lives in the `nqueens-cli` crate.

/// jemalloc on Linux: a coordinator under a thousand connections spends
/// less in allocation than with glibc's malloc, and its background thread
/// gives a flood's memory back to the system within seconds.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's settings: a background thread returns unused pages, dirty
/// ones after a second, without a second (muzzy) stage.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

fn main() -> std::process::ExitCode {
    nqueens_cli::main()
}
