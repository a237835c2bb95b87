//! `jury run CONFIG`: one YAML experiment end to end. The runner (jury-runner) checks
//! the config, judges through the durable cache (so a killed run resumes) and writes
//! the judging files of its `OutputLayout`; this module adds the aggregation options'
//! checks, hands the judgments to aggregation and prints.
//!
//! Relative paths in the config are relative to the directory `jury run` is started in.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::MultiProgress;
use jury_runner::OutputLayout;

use jury_study::{AggregateOptions, Settings};

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
    let report = jury_runner::dry_run::<AggregateOptions>(&args.config)?;
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

/// Runs an experiment returned by [`prepare`]. Every output file but the judgment
/// cache is staged and published only when aggregation has succeeded too.
pub(crate) fn run((exp, mut settings): (Experiment, Settings)) -> Result<()> {
    let started = Instant::now();
    let prepared = jury_runner::prepare(&exp)?;
    let labeled = prepared.examples().original.iter().filter(|e| e.label.is_some()).count();
    settings.check_labeled(labeled).context("`aggregate`")?;
    let (layout, run) = prepared.judge(&MultiProgress::new(), &|d| eprintln!("warning: {d}; judged again"))?;
    // Contexts the run derives itself are staged with the rest; aggregation reads them there.
    let own_contexts = exp.aggregate.contexts == Some(OutputLayout::published_contexts(&exp.output));
    jury_runner::write_judging(&layout, &exp, &run, settings.context_style().filter(|_| own_contexts))?;
    if own_contexts {
        settings.read_contexts_from(layout.contexts());
    }
    println!();
    for j in &run.judges {
        let s = &j.results.summary;
        println!(
            "{:>20}: {} scored, {} from cache, {} failed, {:.1} s",
            s.judge, s.scored, s.from_cache, s.failed, s.seconds
        );
    }
    if let Some(a) = &run.adaptive {
        let (calls, full) = (a.calls(), a.full_calls());
        let per: Vec<String> =
            a.judge_names.iter().zip(a.calls_per_judge()).map(|(name, n)| format!("{name} {n}")).collect();
        println!(
            "adaptive: {calls} of the full jury's {full} judge calls ({:.1}% saved; {} warm-up examples); per judge: {}",
            if full > 0 { 100.0 * (1.0 - calls as f64 / full as f64) } else { 0.0 },
            a.warmup_examples,
            per.join(", ")
        );
    }
    println!();
    let study = jury_study::run(&run.judgments, Some(&run.labels), &settings, &aggregate::print_note)?;
    aggregate::write(&study, layout.staging_dir(), layout.dir())?;
    println!("mean captured mass P(positive)+P(negative): {:?}", run.mean_captured_mass());
    let exact = run.exact_shares();
    if exact.values().any(|&e| e < 1.0) {
        println!("share of exact verdicts (every verdict token observed): {exact:?}");
    }
    let dequantized = std::env::var_os("CANDLE_DEQUANTIZE_ALL").is_some();
    jury_runner::write_manifest(&layout, &jury_runner::manifest(&exp, &run, dequantized, started.elapsed().as_secs_f64()))?;
    // The page shows the hardest examples with their fields, as jury-v1's contexts join them.
    let texts: std::collections::HashMap<String, String> =
        run.examples.original.iter().map(|e| (e.id.clone(), jury_datasets::ContextStyle::Fields.text(e))).collect();
    crate::report::write(layout.staging_dir(), &run.judgments, Some(&run.labels), Some(&texts))?;
    layout.publish()?;
    Ok(())
}
