//! `nqueens`: the binary. Everything it does lives in the `nqueens-cli` crate.

fn main() -> std::process::ExitCode {
    nqueens_cli::main()
}
