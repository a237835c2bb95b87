//! `jury run CONFIG`: one YAML experiment end to end, read top to bottom in [`run`]:
//! jury-runner checks the config and judges through the durable cache (so a killed run
//! resumes) and writes the judging files, jury-study aggregates, jury-report draws the
//! page, and the output folder is published at once.
//!
//! Relative paths in the config are relative to the directory `jury run` is started in.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::MultiProgress;
use jury_datasets::ContextStyle;
use jury_io::RunOutput;
use jury_report::RunResults;
use jury_runner::JuryRun;

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
    /// Judge nothing and write nothing: print one `vllm serve` command per server judge
    /// (the hub model its `tokenizer` names, on its first base URL's port, one GPU each).
    #[arg(long, conflicts_with = "dry_run")]
    pub(crate) vllm_serve_lines: bool,
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

/// `jury run --vllm-serve-lines`: the commands that start the config's server judges.
pub(crate) fn vllm_serve_lines(args: &Args) -> Result<()> {
    let exp: Experiment = jury_runner::Experiment::read_unchecked(&args.config)?;
    for line in jury_runner::vllm_serve_lines(&exp, &args.config)? {
        println!("{line}");
    }
    Ok(())
}

/// Reads and checks the experiment, resolves its aggregation settings (once: this may
/// read the hub cache for the encoder) and prepares the process environment. Called
/// before any thread starts: candle reads `CANDLE_DEQUANTIZE_ALL` once per thread.
pub(crate) fn prepare(args: &Args) -> Result<(Experiment, Settings)> {
    let mut exp = Experiment::read(&args.config)?;
    exp.overwrite |= args.force;
    if exp.aggregate.contexts.is_none() && exp.aggregate.wants_contexts() {
        exp.aggregate.contexts = Some(RunOutput::published_contexts(&exp.output));
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

/// Runs an experiment returned by [`prepare`], top to bottom: examples and jurors
/// checked, every judge's pass through the cache, the judging files, the aggregation
/// study, the manifest and the page staged, and the whole folder published at once (a
/// failure before that leaves it as it was).
pub(crate) fn run((exp, mut settings): (Experiment, Settings)) -> Result<()> {
    let started = Instant::now();
    let in_aggregate = |e: jury_study::StudyError| anyhow::Error::from(e).context("`aggregate`");

    // Examples and jurors, checked before any model loads or file is written.
    let prepared = jury_runner::prepare(&exp)?;
    let labeled = prepared.examples().original.iter().filter(|e| e.label.is_some()).count();
    let positive_word = prepared.positive_word().to_owned();
    settings.check_labeled(labeled).map_err(in_aggregate)?;

    // Judging: the output folder is taken first, then every judge's verdicts.
    let (out, run) = prepared.judge(&MultiProgress::new(), &|d| eprintln!("warning: {d}; judged again"))?;
    // Contexts the run derives itself are staged with the judging files.
    let own_contexts = exp.aggregate.contexts == Some(RunOutput::published_contexts(&exp.output));
    let contexts = settings.context_style().filter(|_| own_contexts);
    jury_runner::write_judging(&out, &exp, &run, contexts)?;
    let dequantized = std::env::var_os("CANDLE_DEQUANTIZE_ALL").is_some();
    let mut manifest = jury_runner::manifest(&exp, &run, dequantized);
    print_judged(&run);

    // Aggregation, with the calibration labels left out of scoring.
    if contexts.is_some() {
        settings.read_contexts_from(out.contexts());
    }
    let calibration = exp.calibration.as_ref().map(|c| c.labels.as_path());
    let (labels, calibration) = aggregate::with_calibration(&run.judgments, Some(run.labels.clone()), calibration)?;
    let mut study = jury_study::run_calibrated(
        &run.judgments,
        labels.as_ref(),
        calibration.as_ref().map(|(c, dropped)| (c, *dropped)),
        &settings,
        &aggregate::print_note,
    )?;
    if let Some(c) = study.calibration.as_mut() {
        c.positive_word = Some(positive_word);
    }
    let (metrics, predictions) = aggregate::write(&study, out.staging_dir(), out.dir())?;
    println!("mean captured mass P(positive)+P(negative): {:?}", run.mean_captured_mass());
    let exact = run.exact_shares();
    if exact.values().any(|&e| e < 1.0) {
        println!("share of exact verdicts (every verdict token observed): {exact:?}");
    }

    // The manifest (its time the whole command's), the page (the hardest examples shown
    // with their fields) and publishing.
    manifest.total_seconds = started.elapsed().as_secs_f64();
    manifest.write(&out.manifest())?;
    let texts: HashMap<String, String> =
        run.examples.original.iter().map(|e| (e.id.clone(), ContextStyle::Fields.text(e))).collect();
    let results = RunResults {
        metrics,
        predictions: Some(predictions),
        by_order: exp.dataset.both_orders.then(|| run.by_order()),
        categories: run.categories(),
        manifest: Some(manifest),
    };
    crate::report::write(out.staging_dir(), &results, &run.judgments, labels.as_ref(), Some(&texts))?;
    out.publish()?;
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
