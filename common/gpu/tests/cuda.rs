//! The CUDA kernel against the CPU engine. Everywhere: its own source
//! built for the host (`nqueens_gpu::cuda::host`), threads in blocks with
//! their stacks in a shared block's memory and their steps interleaved
//! in seeded orders. On a machine with an NVIDIA card, CUDA's driver and
//! NVRTC: the same counts on the card (`NQUEENS_REQUIRE_CUDA` makes a
//! missing card a failure).

mod support;

use nqueens_common::engine::counts::PieceCounts;
use nqueens_common::engine::device::{Device, DeviceError};
use nqueens_common::plan::Strategy;
use nqueens_gpu::cuda::driver::{self, Kernel};
use nqueens_gpu::cuda::host::Host;
use nqueens_gpu::cuda::{CudaCard, Runner};
use nqueens_gpu::jobs::Prepared;
use nqueens_gpu::{Choice, Overrides};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use support::{pieces_and_cpu_counts, plans_up_to, random_pieces_up_to_32, same_as_cpu, spec};

/// Each of the card's kernels: threads keeping their jobs' pairs in their
/// blocks' memory or not, stepping flat or branching.
const KERNELS: [Kernel; 4] = [
    Kernel::DEFAULT,
    Kernel {
        keep: true,
        flat: false,
    },
    Kernel {
        keep: false,
        flat: true,
    },
    Kernel {
        keep: false,
        flat: false,
    },
];

/// The default kernel on the host: `threads` threads in blocks of
/// `block`, batches of at least `jobs` jobs.
fn host(threads: u32, block: u32, jobs: u32, seed: u64) -> CudaCard<Host> {
    host_running(Kernel::DEFAULT, threads, block, jobs, seed)
}

/// The same, running `kernel`.
fn host_running(kernel: Kernel, threads: u32, block: u32, jobs: u32, seed: u64) -> CudaCard<Host> {
    let given = Overrides::from_lookup(|name| match name {
        "NQUEENS_GPU_JOBS" => Some(jobs.to_string()),
        _ => None,
    })
    .unwrap();
    CudaCard::new("host".into(), runner(kernel, threads, block, seed), &given)
}

fn runner(kernel: Kernel, threads: u32, block: u32, seed: u64) -> Host {
    let mut runner = Host::new(threads, block, seed);
    runner.kernel = kernel;
    runner
}

/// Every kernel.
#[test]
fn every_strategy_counts_every_n_up_to_12_as_the_cpu_does() {
    for kernel in KERNELS {
        let card: Arc<dyn Device> = Arc::new(host_running(kernel, 96, 32, 1000, 1));
        plans_up_to(&card, 12);
    }
}

/// One thread alone, blocks of one, two and eight threads (a thread's
/// stack, and its copy of its job's pairs, are its columns of its
/// block's), a block left part empty, and batches cut coarse and fine,
/// on each kernel: the same counts.
#[test]
fn every_shape_of_blocks_counts_as_the_cpu_does() {
    let shapes = [(1, 1, 1), (3, 2, 10), (37, 8, 5000), (64, 64, 100)];
    for (kernel, (threads, block, jobs)) in KERNELS.into_iter().zip(shapes) {
        let seed = u64::from(threads);
        let card: Arc<dyn Device> = Arc::new(host_running(kernel, threads, block, jobs, seed));
        for n in [9, 11] {
            same_as_cpu(&card, spec(n, Strategy::Rings, 2, 2));
            same_as_cpu(&card, spec(n, Strategy::Prefix, 3, 2));
        }
    }
}

/// Seeded random pieces of real plans of N = 19..=32, each strategy: the
/// kernel's counts are the CPU lanes', interior by interior.
#[test]
fn random_pieces_of_real_plans_up_to_32_count_as_on_the_cpu() {
    for (seed, kernel) in (7..).zip(KERNELS) {
        random_pieces_up_to_32(&host_running(kernel, 256, 64, 4096, seed));
    }
}

/// Totals that start just below 2^32 are carried exactly (a card's are
/// 64-bit words); one that passes 2^64 is an overflow, never a count.
#[test]
fn totals_carry_past_32_bits_and_an_overflow_is_an_error() {
    let mut runner = Host::new(32, 32, 3);
    runner.bias = (1 << 32) - 3;
    let card: Arc<dyn Device> =
        Arc::new(CudaCard::new("host".into(), runner, &Overrides::default()));
    same_as_cpu(&card, spec(11, Strategy::Frame, 1, 2));

    let mut runner = Host::new(32, 32, 3);
    runner.bias = u64::MAX - 2;
    let card = CudaCard::new("host".into(), runner, &Overrides::default());
    let (pieces, froms, _) = pieces_and_cpu_counts(spec(12, Strategy::Rings, 2, 1), 5, 4, 8);
    let never = AtomicBool::new(false);
    assert_eq!(
        card.count_below(&pieces, &froms, &never),
        Err(DeviceError::Overflow)
    );
}

/// A batch whose jobs' rows outgrow the rows its threads are given fails
/// before it runs, on every kernel (a card's and the host's runs check
/// alike: a card's threads would run into each other's memory). The
/// host's run also checks, at every pass, that no thread's stack outgrew
/// its rows: a kernel's fault, which no count above met.
#[test]
fn jobs_outgrowing_their_threads_rows_are_refused() {
    let (pieces, froms, _) = pieces_and_cpu_counts(spec(12, Strategy::Rings, 2, 1), 9, 4, 8);
    let p = Prepared::new(&pieces, &froms, 1);
    assert!(p.levels > 2, "the jobs need a deep stack: {}", p.levels);
    for kernel in KERNELS {
        let runner = runner(kernel, 16, 8, 1);
        assert!(runner.run(&p.tables, &p.jobs, p.levels).is_ok());
        match runner.run(&p.tables, &p.jobs, p.levels - 1) {
            Err(DeviceError::Failed(why)) => assert!(why.contains("outgrew"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}

/// A card says how busy its threads were: the steps they took are its
/// jobs' queens placed less their completions (what the CPU counts, less
/// what the host counted above the jobs), and each launch offered every
/// thread as many steps as its busiest took. One thread alone takes all
/// it is offered; 256 threads on a handful of jobs leave most idle.
#[test]
fn a_card_says_how_busy_its_threads_were() {
    let (pieces, froms, cpu) = pieces_and_cpu_counts(spec(12, Strategy::Rings, 2, 1), 9, 4, 8);
    let steps = |c: &[PieceCounts]| c.iter().map(|c| c.nodes - c.c1).sum::<u64>();
    let on_card = |jobs| steps(&cpu) - steps(&Prepared::new(&pieces, &froms, jobs).host);
    let never = AtomicBool::new(false);
    let alone = host(1, 1, 1_000, 5);
    alone.count_below(&pieces, &froms, &never).unwrap().unwrap();
    let b = alone.busy().unwrap();
    assert_eq!(
        (b.taken, b.offered, b.searches),
        (on_card(1_000), on_card(1_000), 1)
    );

    let crowd = host(256, 64, 1, 5);
    crowd.count_below(&pieces, &froms, &never).unwrap().unwrap();
    let b = crowd.busy().unwrap();
    assert_eq!((b.taken, b.searches), (on_card(1), 256));
    assert!(b.share().unwrap() < 0.5, "{b:?}");
}

/// A stop already asked for ends a count before anything is counted.
#[test]
fn a_count_stops_when_asked() {
    let card = host(8, 8, 10, 1);
    let (pieces, froms, _) = pieces_and_cpu_counts(spec(12, Strategy::Rings, 2, 1), 9, 4, 8);
    let stop = AtomicBool::new(true);
    assert_eq!(card.count_below(&pieces, &froms, &stop), Ok(None));
}

/// The CUDA cards of this machine, or `None` with the reason printed; a
/// machine without CUDA's driver or NVRTC says which is missing.
fn cuda_cards() -> Option<Vec<Arc<dyn Device>>> {
    let reason = match nqueens_gpu::cuda::cards(&Choice::Auto, &Overrides::default()) {
        Ok((cards, _)) if !cards.is_empty() => {
            return Some(cards.into_iter().map(|c| Arc::new(c) as _).collect())
        }
        Ok((_, skipped)) => format!("no CUDA card opened {skipped:?}"),
        Err(e) => {
            assert!(
                e.contains("libcuda.so") || e.contains("libnvrtc.so") || e.contains("CUDA"),
                "{e}"
            );
            e
        }
    };
    if std::env::var_os("NQUEENS_REQUIRE_CUDA").is_some() {
        panic!("NQUEENS_REQUIRE_CUDA is set, and there is no CUDA card: {reason}");
    }
    println!("skipped: {reason}");
    None
}

/// The kernel as NVRTC builds it (its CUDA C++ branch) is checked by the
/// host's C++ compiler, with what NVRTC provides stood in by plain C++
/// (`cuda_shim.h`): a mistake that only a card's build would meet is
/// found here. Skipped, with the reason printed, without a C++ compiler.
#[test]
fn the_cards_source_is_valid_cuda_cpp() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("c++")
        .args(["-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only"])
        .args(["-D__CUDACC_RTC__", "-include"])
        .arg(dir.join("tests/cuda_shim.h"))
        .args(["-x", "c++"])
        .arg(dir.join("src/cuda/count.cu"))
        .output();
    match out {
        Err(e) => println!("skipped: no C++ compiler (c++: {e})"),
        Ok(out) => assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Without CUDA's driver or NVRTC, asking for a CUDA card names the
/// library to install, `auto` finds none and says why, and asking for
/// none is never an error.
#[test]
fn a_missing_cuda_library_is_named() {
    let none = nqueens_gpu::cuda::cards(&Choice::None, &Overrides::default()).unwrap();
    assert!(none.0.is_empty() && none.1.is_empty());
    if let Err(e) = driver::count() {
        // `auto` finds no card, and says why; a card asked for by number
        // is an error naming the library.
        let (cards, why) = nqueens_gpu::cuda::cards(&Choice::Auto, &Overrides::default()).unwrap();
        assert!(cards.is_empty() && why == [format!("CUDA: {e}")], "{why:?}");
        let listed = nqueens_gpu::cuda::cards(&Choice::Listed(vec![0]), &Overrides::default());
        assert_eq!(listed.err(), Some(e.clone()));
        assert!(
            e.contains("libcuda.so") || e.contains("libnvrtc.so"),
            "the error names the library to install: {e}"
        );
    }
}

/// On every CUDA card here: every strategy of every N up to 14, and
/// random pieces of real plans up to N=32, as the CPU counts them.
#[test]
fn every_cuda_card_counts_as_the_cpu_does() {
    let Some(cards) = cuda_cards() else { return };
    for card in &cards {
        println!("counting on {}", card.name());
        plans_up_to(card, 14);
        random_pieces_up_to_32(card.as_ref());
    }
}

/// The registers a thread may take for a multiprocessor to hold as many
/// threads as it can (65,536 registers over its most threads).
fn full_occupancy_registers(arch: i32) -> u32 {
    match arch {
        75 => 64,
        // 1,536 threads: 42 registers, but a warp's are given 8 a thread
        // at a time.
        86 | 87 | 89 | 120 | 121 => 40,
        _ => 32,
    }
}

/// The figure just before `what` in an assembler's log (`Used 26
/// registers`: 26 before `registers`).
fn figure(log: &str, what: &str) -> Option<u32> {
    log[..log.find(what)?]
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

/// Writes the kernels' machine code for `NQUEENS_CUBIN_ARCH` (90 unless
/// given) to the file `NQUEENS_CUBIN`, for `nvdisasm -c` to show what a
/// card runs.
#[test]
#[ignore = "writes a file for reading: NQUEENS_CUBIN=PATH"]
fn write_the_cubin() {
    use nqueens_gpu::cuda::{compile, nvrtc};
    let path = std::env::var("NQUEENS_CUBIN").expect("NQUEENS_CUBIN names the file to write");
    let arch: i32 = std::env::var("NQUEENS_CUBIN_ARCH").map_or(90, |a| a.parse().unwrap());
    let nvrtc = nvrtc::nvrtc().unwrap();
    let cubin = compile::cubin(nvrtc, arch / 10, arch % 10).unwrap();
    std::fs::write(&path, cubin).unwrap();
    println!("sm_{arch} by NVRTC {:?}: {path}", nvrtc.version);
}

/// With NVRTC, CUDA's own compiler (CI installs it from NVIDIA's package;
/// `NQUEENS_REQUIRE_NVRTC` makes a missing one a failure): the kernel
/// compiles for every architecture it knows from Turing on, as a card
/// compiles it, with no stack frame and no spills, in registers few
/// enough for a multiprocessor full of threads.
#[test]
fn nvrtc_compiles_the_kernel_for_every_card_without_spilling() {
    use nqueens_gpu::cuda::{compile, nvrtc};
    let nvrtc = match nvrtc::nvrtc() {
        Ok(n) => n,
        Err(e) if std::env::var_os("NQUEENS_REQUIRE_NVRTC").is_some() => {
            panic!("NQUEENS_REQUIRE_NVRTC is set: {e}")
        }
        Err(e) => return println!("skipped: {e}"),
    };
    let archs: Vec<i32> = nvrtc
        .architectures
        .iter()
        .copied()
        .filter(|&a| a >= 75)
        .collect();
    assert!(archs.contains(&90), "{} knows {archs:?}", nvrtc.found);
    // A card's own architecture gets machine code; one NVRTC does not
    // know, PTX for the driver to finish.
    let cubin = compile::for_card(nvrtc, 9, 0).unwrap();
    assert!(format!("{cubin:?}").starts_with("Ptx(Binary("));
    let ptx = compile::for_card(nvrtc, 9, 9).unwrap();
    assert!(ptx.to_src().contains(".entry count_jobs"));
    for arch in archs {
        let log = compile::resources(nvrtc, arch / 10, arch % 10).unwrap();
        // The assembler's report of each entry, after its name.
        let mut entries: Vec<(&str, &str)> = log
            .split("Compiling entry function '")
            .skip(1)
            .filter_map(|e| e.split_once('\''))
            .collect();
        entries.sort_unstable();
        let names: Vec<&str> = entries.iter().map(|e| e.0).collect();
        let mut entries_wanted: Vec<&str> = KERNELS.iter().map(|k| k.entry()).collect();
        entries_wanted.sort_unstable();
        assert_eq!(names, entries_wanted, "sm_{arch}: {log}");
        for (name, said) in entries {
            let figure = |what| figure(said, what).unwrap_or_else(|| panic!("sm_{arch}: {log}"));
            let frame = figure("bytes stack frame");
            let spills = figure("bytes spill stores");
            let registers = figure("registers");
            println!(
                "sm_{arch} {name}: {registers} registers, NVRTC {:?}",
                nvrtc.version
            );
            assert_eq!((frame, spills), (0, 0), "sm_{arch}: {log}");
            assert!(
                registers <= full_occupancy_registers(arch),
                "sm_{arch}: {registers} registers leave its multiprocessors part empty: {log}"
            );
        }
    }
}
