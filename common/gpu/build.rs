//! Builds the CUDA kernel's source for the host (`src/cuda/host.c`), where
//! the tests run it: no NVIDIA card or CUDA toolkit needed, a C compiler
//! only.

fn main() {
    println!("cargo:rerun-if-changed=src/cuda/host.c");
    println!("cargo:rerun-if-changed=src/cuda/count.cu");
    cc::Build::new()
        .file("src/cuda/host.c")
        .std("c11")
        .warnings(true)
        .extra_warnings(true)
        .compile("nqueens_cuda_host");
}
