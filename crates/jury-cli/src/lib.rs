//! `jury`: the command-line layer. Parses arguments, wires the library crates together
//! and turns every failure into a one-line error with exit code 2. A library so that the
//! end-to-end test crate can build the very same program as its own binary target.

mod aggregate;
mod check_recommended;
mod compare_runs;
mod import;
mod label_plan;
mod malloc;
mod pool_seeds;
mod rank;
mod report;
#[cfg(feature = "judges")]
mod run;
mod score_epochs;
mod simulate;
mod winrate;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "jury", version, about = "Judge with a jury of LLMs: aggregate, calibrate and score judgments.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The largest input file jury reads (judgments, labels, contexts, comparisons,
    /// responses, data sets, experiments, prompts): bytes, or with K, M, G or T (powers of
    /// 1024). Only regular files are read; a FIFO, device or directory is refused.
    #[arg(long, global = true, value_name = "SIZE", default_value = "4G", value_parser = jury_io::parse_size)]
    max_input_size: u64,
}

#[derive(Subcommand)]
enum Command {
    /// Combine judges without reference labels; score against labels when given.
    Aggregate(Box<aggregate::Args>),
    /// Write a simulated jury with known skills (judgments.csv, labels.csv).
    Simulate(simulate::Args),
    /// Choose examples to label for calibration: more where the jury is unsure, each with
    /// its inclusion probability (plan.csv: example_id, inclusion_probability).
    LabelPlan(label_plan::Args),
    /// Run a YAML experiment: judges over a data set, then aggregation and scoring.
    #[cfg(feature = "judges")]
    Run(run::Args),
    /// Run a YAML experiment (not in this build: it has no LLM judges).
    #[cfg(not(feature = "judges"))]
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        args: Vec<String>,
    },
    /// Win rate between generator pairs from evaluator votes, calibrated (BWRS, Bayesian Dawid-Skene).
    Winrate(winrate::Args),
    /// Rank models from their responses without ground truth (triplet ranking, most common answer).
    Rank(rank::Args),
    /// The triplet-ranking paper's multiple-choice simulation: RBO and MAP@5 of MCA, FTR and GTR.
    RankSim(rank::SimArgs),
    /// Pool the seeds of several `jury aggregate --first-seed N --seeds M` runs into the
    /// mean and deviation one run over all of them reports.
    PoolSeeds(pool_seeds::Args),
    /// Hold the recommended method to the validation suite's bar on each jury's labeled
    /// `jury aggregate` run: at or above Dawid-Skene, at or above the lower of majority
    /// vote and AverageProb, at most 0.5 points below the best crowd-kit method.
    CheckRecommended(check_recommended::Args),
    /// Compare `jury run` outputs of the same judges (another device, engine, server or
    /// setting) with a reference run: speed, closeness of P(positive), same tokens.
    CompareRuns(compare_runs::Args),
    /// Score every epoch a fine-tuning run left in its checkpoint folder on one seed's dev
    /// set and test split, beside the run's methods on the same split.
    ScoreEpochs(score_epochs::Args),
    /// Write another tool's released judge outputs as a jury folder for `jury aggregate`
    /// (judgments.csv, labels.csv, contexts.csv) or comparisons for `jury winrate`.
    Import(import::Args),
    /// Write DIR/report.html, one self-contained page of a run's results (aggregate and run write it too).
    Report(report::Args),
}

/// The whole `jury` program.
pub fn main() -> ExitCode {
    malloc::tune();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version: clap's own text on stdout.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {}", jury_io::terminal_text(&usage_error(&e)));
            return ExitCode::from(2);
        }
    };
    // Set once, before any input is read; every reader in jury-io checks against it.
    jury_io::set_max_input_size(cli.max_input_size);
    let result = match cli.command {
        Command::Aggregate(args) => aggregate::run(*args),
        Command::Simulate(args) => simulate::run(args),
        Command::LabelPlan(args) => label_plan::run(args),
        #[cfg(feature = "judges")]
        Command::Run(args) if args.dry_run => run::dry_run(&args),
        #[cfg(feature = "judges")]
        Command::Run(args) if args.vllm_serve_lines => run::vllm_serve_lines(&args),
        #[cfg(feature = "judges")]
        Command::Run(args) => run::prepare(&args).and_then(run::run),
        #[cfg(not(feature = "judges"))]
        Command::Run { .. } => Err(without_judges("`jury run`")),
        Command::Winrate(args) => winrate::run(args),
        Command::Rank(args) => rank::prepare(args).and_then(rank::run),
        Command::RankSim(args) => rank::run_sim(args),
        Command::PoolSeeds(args) => pool_seeds::run(args),
        Command::Import(args) => import::run(args),
        Command::CheckRecommended(args) => check_recommended::run(args),
        Command::CompareRuns(args) => compare_runs::run(args),
        Command::ScoreEpochs(args) => score_epochs::run(args),
        Command::Report(args) => report::run(args),
    };
    let code = match result {
        Ok(()) => 0,
        Err(e) => {
            // Errors quote ids, names and file contents: escaped, they cannot drive the
            // terminal.
            eprintln!("error: {}", jury_io::terminal_text(&one_line(&e)));
            2
        }
    };
    exit_after_gpu_work(code);
    ExitCode::from(code)
}

/// In a CUDA build, ends the process without its exit handlers once every output is
/// written: mistral.rs's engine threads stop on their own after their model is dropped,
/// and the CUDA driver's exit handlers tore the device down under them (seen on an H200:
/// a judge run that had written all its files exited with SIGSEGV, another printed a
/// panic from an engine thread).
#[cfg(feature = "cuda")]
fn exit_after_gpu_work(code: u8) {
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: `_exit` only ends the process; every file this program wrote was closed
    // when its writer was dropped, before the command returned.
    unsafe { libc::_exit(i32::from(code)) }
}

#[cfg(not(feature = "cuda"))]
fn exit_after_gpu_work(_code: u8) {}

/// The error of a command that needs the LLM judges in a build without them.
#[cfg(not(feature = "judges"))]
fn without_judges(what: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{what} runs LLM judges, and this jury was built without them (--no-default-features); \
         build it with the default features (cargo build -p jury-cli)"
    )
}

/// A flag clap refused, on one line like every other error: its message and what it
/// lists (possible values, tips), without the usage and the pointer to --help.
fn usage_error(e: &clap::Error) -> String {
    e.to_string()
        .lines()
        .map(|l| l.trim().trim_start_matches("error: "))
        .filter(|l| !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The whole context chain on one line, "outer: inner: cause", leaving out a cause whose
/// text the message before it already holds (library errors quote their source).
fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for part in e.chain().map(|c| without_backtrace(&c.to_string())) {
        if !out.contains(&part) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&part);
        }
    }
    out
}

/// An error text's lines up to a backtrace (candle puts one inside its errors' text),
/// joined by spaces.
fn without_backtrace(text: &str) -> String {
    let frame = |line: &str| {
        let t = line.trim_start();
        t.len() < line.len()
            && t.split_once(": ").is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    let lines: Vec<&str> = text.lines().take_while(|l| !frame(l)).map(str::trim).filter(|l| !l.is_empty()).collect();
    lines.join(" ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_error_with_a_backtrace_inside_is_one_line() {
        let e = anyhow::anyhow!(
            "loading the model: Critical failure!\nCheck the format: unknown magic\n   0: bt\n             at src/error.rs:264:25\n   1: try_from"
        )
        .context("judge `j`");
        assert_eq!(
            super::one_line(&e),
            "judge `j`: loading the model: Critical failure! Check the format: unknown magic"
        );
    }

    #[test]
    fn a_refused_flag_is_one_line() {
        use clap::Parser;
        let e =
            super::Cli::try_parse_from(["jury", "aggregate", "--judgments", "j", "--out", "o", "--methods", "avg,x"])
                .err()
                .unwrap();
        let line = super::usage_error(&e);
        assert!(line.starts_with("invalid value 'x' for '--methods <METHODS>'"), "{line}");
        assert!(
            line.contains(
                "[possible values: recommended, avg, mv, ds, wawa, zbs, onecoin, glad, mace, mmsr, kos, care, gauss, \
                 care-gauss, train-on-mv, crowdlayer, \
                 skillagg-noreg, skillagg, skillagg-x]"
            ),
            "{line}"
        );
        assert!(!line.contains('\n') && !line.contains("Usage"), "{line}");
    }

    #[test]
    fn the_input_size_flag_is_global_and_defaults_to_the_library_limit() {
        use clap::Parser;
        let cli = super::Cli::try_parse_from(["jury", "report", "d"]).ok().unwrap();
        assert_eq!(cli.max_input_size, jury_io::DEFAULT_MAX_INPUT_SIZE);
        let cli = super::Cli::try_parse_from(["jury", "report", "d", "--max-input-size", "10M"]).ok().unwrap();
        assert_eq!(cli.max_input_size, 10 << 20);
        let cli = super::Cli::try_parse_from(["jury", "--max-input-size", "512", "report", "d"]).ok().unwrap();
        assert_eq!(cli.max_input_size, 512);
        let e = super::Cli::try_parse_from(["jury", "report", "d", "--max-input-size", "lots"]).err().unwrap();
        assert!(super::usage_error(&e).contains("`lots` is not a size"), "{}", super::usage_error(&e));
    }

    #[test]
    fn a_quoted_cause_is_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let e = anyhow::Error::new(io).context("a.csv: cannot read: No such file").context("reading judgments");
        assert_eq!(super::one_line(&e), "reading judgments: a.csv: cannot read: No such file");
    }
}
