//! The `jury` binary; everything lives in the `jury_cli` library.

fn main() -> std::process::ExitCode {
    jury_cli::main()
}
