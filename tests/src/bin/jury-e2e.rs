//! The `jury` program, built inside the test crate (see Cargo.toml).

fn main() -> std::process::ExitCode {
    jury_cli::main()
}
