//! `jury score-epochs`: every epoch of a fine-tuning run scored on one seed's split
//! (jury-study's `epoch_table` over the run's predictions.csv and metrics.json and
//! jury-neural's checkpoint files); this module reads them and prints.

use std::path::PathBuf;

use anyhow::{Context, Result};
use jury_io::{Metrics, layout, read_prediction_labels, read_predictions};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The `jury aggregate --encoder finetune` run's output folder (with labels).
    #[arg(long)]
    run: PathBuf,
    /// One method, seed and lambda's checkpoint folder (under the fine-tuning cache; the
    /// run prints where).
    #[arg(long)]
    checkpoints: PathBuf,
    /// Whose dev set and test split.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

pub(crate) fn run(args: Args) -> Result<()> {
    let predictions_path = args.run.join(layout::PREDICTIONS);
    let predictions = read_predictions(&predictions_path)?;
    let gold = read_prediction_labels(&predictions_path).context("the run had no labels")?;
    let metrics = Metrics::read(&args.run.join(layout::METRICS))?;
    let epochs = jury_neural::read_epoch_posteriors(&args.checkpoints)?;
    let table = jury_study::epoch_table(&predictions, &gold, &metrics, &epochs, args.seed)
        .with_context(|| format!("{} with {}", args.run.display(), args.checkpoints.display()))?;
    print!("{table}");
    Ok(())
}
