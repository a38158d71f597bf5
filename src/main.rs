//! `nqueens`: the binary. Everything it does lives in the `nqueens-cli` crate.

/// mimalloc instead of the system allocator: the coordinator allocates
/// and frees a few small buffers per call (HTTP/2 frames, protobuf
/// messages, futures), and glibc's malloc took about a tenth of its time
/// under load (see MEASUREMENTS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    nqueens_cli::main()
}
