//! `jury aggregate`: judgments file in, posteriors, labels and scores out. The study is
//! jury-study's; this module reads the inputs, hands them over, writes and prints.
//!
//! Order of work is the no-half-written invariant: check the options, read and validate
//! every input, run every method, and only then create the output directory and write
//! each file atomically.

use std::path::PathBuf;

use anyhow::Result;
use jury_core::Labels;
use jury_io::{OutputDir, Owner, read_judgments, read_labels};
use jury_neural::Note;
use jury_study::{AggregateOptions, OutputLayout, Settings, Study};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Long judgments table: example_id, judge, p (or probs / p0..pC-1); .csv, .jsonl, .json or .parquet.
    #[arg(long)]
    judgments: PathBuf,
    /// Reference labels (example_id, label), used only for scoring.
    #[arg(long)]
    labels: Option<PathBuf>,
    /// Output directory for metrics.json and predictions.csv.
    #[arg(long)]
    out: PathBuf,
    /// Replace an output directory that holds another command's output or files jury
    /// did not write.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    options: AggregateOptions,
}

pub(crate) fn run(args: Args) -> Result<()> {
    let mut settings = Settings::new(&args.options)?;
    settings.resolve_encoder()?;
    let judgments = read_judgments(&args.judgments)?;
    let labels = read_optional_labels(args.labels.as_deref(), &judgments)?;
    let study = jury_study::run(&judgments, labels.as_ref(), &settings, &print_note)?;
    let owner = Owner { command: "aggregate".into(), source: args.judgments.display().to_string() };
    let files = [OutputLayout::FILES[0], OutputLayout::FILES[1], jury_report::REPORT_FILE];
    let out = OutputDir::open(&args.out, owner, &files, args.force)?;
    write(&study, out.staging_dir(), &args.out)?;
    let texts = crate::report::read_texts(settings.contexts())?;
    crate::report::write(out.staging_dir(), &judgments, labels.as_ref(), texts.as_ref())?;
    out.publish()?;
    Ok(())
}

/// Reads reference labels for `judgments` when a file is given, warning about labels of
/// examples with no judgments.
pub(crate) fn read_optional_labels(
    path: Option<&std::path::Path>,
    judgments: &jury_core::Judgments,
) -> Result<Option<Labels>> {
    let Some(path) = path else { return Ok(None) };
    let (labels, unmatched) = read_labels(path, judgments)?;
    if unmatched > 0 {
        eprintln!("warning: {}: {unmatched} labels are for examples with no judgments; ignored", path.display());
    }
    Ok(Some(labels))
}

/// Writes a study's files into `staging` (to be published as `out`) and prints its table.
pub(crate) fn write(study: &Study, staging: &std::path::Path, out: &std::path::Path) -> Result<()> {
    study.write(staging)?;
    print!("{}", study.table());
    let [metrics, predictions] = OutputLayout::FILES.map(|f| out.join(f));
    println!("wrote {} and {}", metrics.display(), predictions.display());
    Ok(())
}

/// What the context-dependent methods say while they train, on stderr.
pub(crate) fn print_note(note: &Note) {
    eprintln!("{note}");
}
