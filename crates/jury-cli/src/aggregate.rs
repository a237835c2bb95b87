//! `jury aggregate`: judgments file in, posteriors, labels and scores out. The study is
//! jury-study's; this module reads the inputs, hands them over, writes and prints.
//!
//! Order of work: check the options, take the output folder (checked and locked, so a
//! second command on it is refused at once, naming this one), read and validate every
//! input, run every method, and publish every file together at the end. A failure
//! before publishing drops the folder, which leaves it as it was (one this command
//! created goes).

use std::path::{Path, PathBuf};

use anyhow::Result;
use jury_core::{Judgments, Labels};
use jury_io::layout::{METRICS, PREDICTIONS};
use jury_io::{CalibrationLabels, OutputDir, Owner, read_judgments, read_labels};
use jury_neural::Note;
use jury_report::RunResults;
use jury_study::{AggregateOptions, Settings, Study};

#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    files: Files,
    #[command(flatten)]
    options: AggregateOptions,
    /// Calibration labels (example_id, label, and the inclusion_probability column of a
    /// `jury label-plan`): the calibrated method is fitted on them and recommended, the
    /// positive rate corrected with intervals; with --labels, accuracies are scored only
    /// outside them. Binary judgments only.
    #[arg(long, value_name = "FILE")]
    calibration: Option<PathBuf>,
}

/// The files of a command that reads a judgments table and writes an output directory
/// (`jury aggregate`, `jury simulate adaptive`).
#[derive(clap::Args)]
pub(crate) struct Files {
    /// Long judgments table: example_id, judge, p (or probs / p0..pC-1); .csv, .jsonl, .json or .parquet.
    #[arg(long)]
    pub(crate) judgments: PathBuf,
    /// Reference labels (example_id, label), used only for scoring.
    #[arg(long)]
    pub(crate) labels: Option<PathBuf>,
    /// Output directory (created if needed).
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// Replace an output directory that holds another command's output or files jury
    /// did not write.
    #[arg(long)]
    pub(crate) force: bool,
}

impl Files {
    /// Reads the judgments and, when given, the labels (warning about labels of examples
    /// with no judgments).
    pub(crate) fn read(&self) -> Result<(jury_core::Judgments, Option<Labels>)> {
        let judgments = read_judgments(&self.judgments)?;
        let Some(path) = &self.labels else { return Ok((judgments, None)) };
        let (labels, unmatched) = read_labels(path, &judgments)?;
        if unmatched > 0 {
            eprintln!("warning: {}: {unmatched} labels are for examples with no judgments; ignored", path.display());
        }
        Ok((judgments, Some(labels)))
    }

    /// Opens the output directory for `files`, owned by `command`.
    pub(crate) fn open_out(&self, command: &str, files: &[&str]) -> Result<OutputDir> {
        let owner = Owner { command: command.into(), source: self.judgments.display().to_string() };
        Ok(OutputDir::open(&self.out, owner, files, self.force)?)
    }
}

pub(crate) fn run(args: Args) -> Result<()> {
    let mut settings = Settings::new(&args.options)?;
    settings.resolve_encoder()?;
    let out = args.files.open_out("aggregate", &[METRICS, PREDICTIONS, jury_report::REPORT_FILE])?;
    let (judgments, labels) = args.files.read()?;
    let (labels, calibration) = with_calibration(&judgments, labels, args.calibration.as_deref())?;
    let study = jury_study::run_calibrated(
        &judgments,
        labels.as_ref(),
        calibration.as_ref().map(|(c, dropped)| (c, *dropped)),
        &settings,
        &print_note,
    )?;
    let (metrics, predictions) = write(&study, out.staging_dir(), &args.files.out)?;
    let texts = crate::report::read_texts(settings.contexts())?;
    let results =
        RunResults { metrics, predictions: Some(predictions), manifest: None, by_order: None, categories: None };
    crate::report::write(out.staging_dir(), &results, &judgments, labels.as_ref(), texts.as_ref())?;
    out.publish()?;
    Ok(())
}

/// Calibration labels, and how many reference labels they took out of scoring.
pub(crate) type Calibration = (CalibrationLabels, usize);

/// The calibration labels of `jury aggregate --calibration` and a run's `calibration:`,
/// read against `judgments`, and the reference labels left to score on: those of the
/// calibration examples are dropped (how many, beside the calibration labels).
pub(crate) fn with_calibration(
    judgments: &Judgments,
    labels: Option<Labels>,
    calibration: Option<&Path>,
) -> Result<(Option<Labels>, Option<Calibration>)> {
    let Some(path) = calibration else { return Ok((labels, None)) };
    let calibration = jury_io::read_calibration(path, judgments)?;
    Ok(match labels {
        Some(l) => {
            let (kept, dropped) = jury_study::scoring_labels(&l, &calibration);
            (Some(kept), Some((calibration, dropped)))
        }
        None => (None, Some((calibration, 0))),
    })
}

/// Writes a study's files into `staging` (to be published as `out`), prints its table
/// and returns the files' values.
pub(crate) fn write(
    study: &Study,
    staging: &std::path::Path,
    out: &std::path::Path,
) -> Result<(jury_io::Metrics, jury_io::Predictions)> {
    let written = study.write(staging)?;
    print!("{}", study.table());
    let [metrics, predictions] = [METRICS, PREDICTIONS].map(|f| out.join(f));
    println!("wrote {} and {}", metrics.display(), predictions.display());
    Ok(written)
}

/// What the context-dependent methods say while they train, on stderr.
pub(crate) fn print_note(note: &Note) {
    eprintln!("{note}");
}
