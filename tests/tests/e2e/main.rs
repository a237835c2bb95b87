//! The end-to-end tests as one test binary (one link instead of one per file): each module
//! runs the real `jury` program (this package's `jury-e2e` binary) on real files, the way
//! a user does.

mod common;

mod aggregate_cli;
mod architecture;
mod calibration_cli;
mod report_browser;
mod run_cli;
mod safety_cli;
mod server_faults_cli;
mod servers_cli;
mod tools_cli;
mod torture_cli;
mod winrate_rank_cli;
