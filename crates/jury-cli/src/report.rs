//! `jury report DIR`: (re)writes DIR/report.html from a run's files; `aggregate` and
//! `run` write the same page from the same values, in memory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use jury_core::{Judgments, Labels};
use jury_io::layout;
use jury_report::{Inputs, REPORT_FILE, RunResults};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// An output folder of `jury run` or `jury aggregate` (metrics.json, predictions.csv),
    /// `jury winrate` (winrate.json), `jury rank` (ranking.json), `jury simulate adaptive`
    /// (adaptive.json) or `jury simulate calibration` (calibration.json).
    dir: PathBuf,
    /// The judgments the folder's results came from (default: DIR/judgments.csv, which
    /// `jury run` writes; a `jury aggregate` folder holds none: name the file it read).
    #[arg(long)]
    judgments: Option<PathBuf>,
    /// Reference labels (default: DIR/labels.csv when present).
    #[arg(long)]
    labels: Option<PathBuf>,
    /// Example texts shown beside the hardest examples (default: DIR/contexts.csv when
    /// present).
    #[arg(long)]
    contexts: Option<PathBuf>,
}

/// `given`, else `dir/name` when that file exists.
fn or_in(dir: &Path, given: Option<PathBuf>, name: &str) -> Option<PathBuf> {
    given.or_else(|| Some(dir.join(name)).filter(|p| p.is_file()))
}

pub(crate) fn run(args: Args) -> Result<()> {
    // A win-rate, ranking or replay folder has its own page; aggregation's needs the
    // judgments.
    for (file, render) in [
        (layout::WINRATE, jury_report::render_winrate as fn(&Path) -> Result<String, jury_report::ReportError>),
        (layout::RANKING, jury_report::render_ranking),
        (layout::ADAPTIVE_REPLAY, jury_report::render_adaptive),
        (layout::CALIBRATION_REPLAY, jury_report::render_calibration),
    ] {
        if args.dir.join(file).is_file() {
            jury_report::write_page(&args.dir, &render(&args.dir)?)?;
            println!("wrote {}", args.dir.join(REPORT_FILE).display());
            return Ok(());
        }
    }
    let judgments_path = args.judgments.clone().unwrap_or_else(|| args.dir.join(layout::JUDGMENTS));
    if args.judgments.is_none() && !judgments_path.is_file() {
        // `jury aggregate` reads its judgments where they are and copies none into its
        // folder; its marker names them.
        if let Some(owner) = jury_io::Owner::of(&args.dir).filter(|o| o.command == "aggregate") {
            anyhow::bail!(
                "{}: no such file: `jury aggregate` leaves its judgments where they are (this folder's came from \
                 {}); pass --judgments with them, and --labels with the labels it was scored on, if any",
                judgments_path.display(),
                owner.source
            );
        }
    }
    let judgments = jury_io::read_judgments(&judgments_path)?;
    let labels = match or_in(&args.dir, args.labels, layout::LABELS) {
        Some(p) => Some(jury_io::read_labels(&p, &judgments)?.0),
        None => None,
    };
    let texts = read_texts(or_in(&args.dir, args.contexts, layout::CONTEXTS).as_deref())?;
    let results = RunResults::read(&args.dir, labels.is_some())?;
    write(&args.dir, &results, &judgments, labels.as_ref(), texts.as_ref())?;
    println!("wrote {}", args.dir.join(REPORT_FILE).display());
    Ok(())
}

/// The example texts of a contexts file, when one is named.
pub(crate) fn read_texts(path: Option<&Path>) -> Result<Option<HashMap<String, String>>> {
    Ok(match path {
        Some(p) => Some(jury_io::read_texts(p)?),
        None => None,
    })
}

/// Writes `dir/report.html` from a run's results and the inputs they came from.
pub(crate) fn write(
    dir: &Path,
    results: &RunResults,
    judgments: &Judgments,
    labels: Option<&Labels>,
    texts: Option<&HashMap<String, String>>,
) -> Result<()> {
    let inputs = Inputs { results, judgments, labels, contexts: texts };
    jury_report::write(&inputs, dir).context("writing report.html")
}
