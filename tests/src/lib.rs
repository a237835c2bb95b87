//! Helpers for the end-to-end tests: find (building if needed) the real `jury` binary and
//! run it the way a user does.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Path of the `jury` binary in the same target directory and profile as the running
/// test, built first (a no-op when up to date) so `cargo test -p jury-tests` works alone.
pub fn jury_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable path");
        // target/<profile>/deps/<test> -> target/<profile>
        let profile_dir = exe.parent().and_then(Path::parent).expect("target profile directory").to_owned();
        // `--workspace --all-targets` resolves features exactly as `cargo test --workspace`
        // does, so this only links the binary instead of rebuilding dependencies.
        let mut build = Command::new(env!("CARGO"));
        build.args(["build", "-q", "--workspace", "--all-targets"]).current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let status = build.status().expect("running cargo build for the jury binary");
        assert!(status.success(), "building the jury binary failed");
        profile_dir.join(format!("jury{}", std::env::consts::EXE_SUFFIX))
    })
}

/// Runs `jury` with `args`.
pub fn jury(args: &[&str]) -> Output {
    Command::new(jury_bin()).args(args).output().expect("starting jury")
}

/// Repository root (for committed data sets and configs).
pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repository root")
}
