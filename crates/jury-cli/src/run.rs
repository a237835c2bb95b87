//! `jury run CONFIG`: one YAML experiment end to end. The runner (jury-runner) checks
//! the config, judges through the durable cache (so a killed run resumes), writes every
//! file and publishes them; this module parses, hands it jury-combine's aggregation and
//! jury-report's page, and prints.
//!
//! Relative paths in the config are relative to the directory `jury run` is started in.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use indicatif::MultiProgress;
use jury_datasets::ContextStyle;
use jury_runner::{JuryRun, OutputLayout, RunError};

use jury_combine::{AggregateOptions, Settings};

use crate::aggregate;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Experiment file (YAML); see configs/demo.yaml.
    config: PathBuf,
    /// Replace an output directory that holds another experiment's output or files jury
    /// did not write (`overwrite: true` in the experiment).
    #[arg(long)]
    force: bool,
    /// Judge nothing and write nothing: check the whole config, then print the
    /// examples, the judge calls, each judge's prompt lengths in tokens (with its
    /// tokenizer folder), every model not on this machine and, given rates, the time.
    #[arg(long)]
    pub(crate) dry_run: bool,
}

/// The YAML experiment, with this program's aggregation options.
pub(crate) type Experiment = jury_runner::Experiment<AggregateOptions>;

/// `jury run --dry-run`: the config checked as `jury run` checks it (aggregation
/// options included), absent models listed instead of stopping at the first.
pub(crate) fn dry_run(args: &Args) -> Result<()> {
    let report = jury_runner::dry_run::<AggregateOptions>(&args.config, args.force)?;
    let exp: Experiment = jury_runner::Experiment::read_unchecked(&args.config)?;
    Settings::new(&exp.aggregate).with_context(|| format!("{}: `aggregate`", args.config.display()))?;
    print!("{report}");
    Ok(())
}

/// Reads and checks the experiment, resolves its aggregation settings (once: this may
/// read the hub cache for the encoder) and prepares the process environment. Called
/// before any thread starts: candle reads `CANDLE_DEQUANTIZE_ALL` once per thread.
pub(crate) fn prepare(args: &Args) -> Result<(Experiment, Settings)> {
    let mut exp = Experiment::read(&args.config)?;
    exp.overwrite |= args.force;
    if exp.aggregate.contexts.is_none() && exp.aggregate.wants_contexts() {
        exp.aggregate.contexts = Some(OutputLayout::published_contexts(&exp.output));
    }
    let mut settings =
        Settings::new(&exp.aggregate).with_context(|| format!("{}: `aggregate`", args.config.display()))?;
    settings.resolve_encoder().with_context(|| format!("{}: `aggregate`", args.config.display()))?;
    if exp.runtime.dequantize && std::env::var_os("CANDLE_DEQUANTIZE_ALL").is_none() {
        // SAFETY: called from `main` before the async runtime or any other thread exists.
        unsafe { std::env::set_var("CANDLE_DEQUANTIZE_ALL", "1") };
    }
    Ok((exp, settings))
}

/// Runs an experiment returned by [`prepare`] (jury-runner's `run_experiment`), with
/// jury-combine's aggregation and jury-report's page.
pub(crate) fn run((exp, settings): (Experiment, Settings)) -> Result<()> {
    // Contexts the run derives itself are staged with the rest; aggregation reads them there.
    let own_contexts = exp.aggregate.contexts == Some(OutputLayout::published_contexts(&exp.output));
    let calibration = exp.calibration.as_ref().map(|c| c.labels.clone());
    let mut aggregation = StudyAggregation { settings, own_contexts, calibration, scoring: None };
    jury_runner::run_experiment(
        &exp,
        &mut aggregation,
        &MultiProgress::new(),
        &|d| eprintln!("warning: {d}; judged again"),
        &mut print_judged,
    )?;
    Ok(())
}

/// Each judge's counters and an adaptive run's calls, once judging is done.
fn print_judged(run: &JuryRun) {
    println!();
    for j in &run.judges {
        let s = &j.results.summary;
        println!(
            "{:>20}: {} scored, {} from cache, {} failed, {:.1} s",
            jury_io::terminal_text(&s.judge),
            s.scored,
            s.from_cache,
            s.failed,
            s.seconds
        );
    }
    if let Some(a) = &run.adaptive {
        let (calls, full) = (a.calls(), a.full_calls());
        let per: Vec<String> = a
            .judge_names
            .iter()
            .zip(a.calls_per_judge())
            .map(|(name, n)| format!("{} {n}", jury_io::terminal_text(name)))
            .collect();
        println!(
            "adaptive: {calls} of the full jury's {full} judge calls ({:.1}% saved; {} warm-up examples); per judge: {}",
            if full > 0 { 100.0 * (1.0 - calls as f64 / full as f64) } else { 0.0 },
            a.warmup_examples,
            per.join(", ")
        );
    }
    println!();
}

/// jury-combine's aggregation and jury-report's page, as a run's last stages.
struct StudyAggregation {
    settings: Settings,
    /// Whether the contexts file is the one the run writes (`prepare` named it).
    own_contexts: bool,
    /// The `calibration:` labels file.
    calibration: Option<std::path::PathBuf>,
    /// The labels accuracies were scored on when calibration labels left some out.
    scoring: Option<jury_core::Labels>,
}

fn stage_error(e: anyhow::Error) -> RunError {
    RunError::Aggregation(e.into())
}

impl jury_runner::Aggregation for StudyAggregation {
    fn check_labeled(&self, labeled: usize) -> Result<(), RunError> {
        self.settings.check_labeled(labeled).context("`aggregate`").map_err(stage_error)
    }

    fn contexts_to_stage(&self) -> Option<ContextStyle> {
        self.settings.context_style().filter(|_| self.own_contexts)
    }

    fn aggregate(&mut self, run: &JuryRun, staged: Option<&Path>, staging: &Path, out: &Path) -> Result<(), RunError> {
        if let Some(contexts) = staged {
            self.settings.read_contexts_from(contexts.to_owned());
        }
        let calibration = match &self.calibration {
            Some(path) => Some(jury_io::read_calibration(path, &run.judgments).map_err(|e| stage_error(e.into()))?),
            None => None,
        };
        let dropped = calibration.as_ref().map(|c| {
            let (kept, dropped) = jury_combine::scoring_labels(&run.labels, c);
            self.scoring = Some(kept);
            dropped
        });
        let labels = self.scoring.as_ref().unwrap_or(&run.labels);
        let study = jury_combine::run_calibrated(
            &run.judgments,
            Some(labels),
            calibration.as_ref().zip(dropped),
            &self.settings,
            &aggregate::print_note,
        )
        .map_err(|e| stage_error(e.into()))?;
        aggregate::write(&study, staging, out).map_err(stage_error)?;
        println!("mean captured mass P(positive)+P(negative): {:?}", run.mean_captured_mass());
        let exact = run.exact_shares();
        if exact.values().any(|&e| e < 1.0) {
            println!("share of exact verdicts (every verdict token observed): {exact:?}");
        }
        Ok(())
    }

    fn report(&mut self, run: &JuryRun, staging: &Path) -> Result<(), RunError> {
        // The page shows the hardest examples with their fields, as jury-v1's contexts join them.
        let texts: HashMap<String, String> =
            run.examples.original.iter().map(|e| (e.id.clone(), ContextStyle::Fields.text(e))).collect();
        let labels = self.scoring.as_ref().unwrap_or(&run.labels);
        crate::report::write(staging, &run.judgments, Some(labels), Some(&texts)).map_err(stage_error)
    }
}
