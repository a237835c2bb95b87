//! `jury label-plan`: which examples to label for calibration. The plan is
//! jury-study's (the label-free recommended method's uncertainty, jury-calibrate's
//! draw); this module reads the judgments and writes the plan.

use std::path::PathBuf;

use anyhow::{Context, Result};
use jury_io::{read_judgments, write_atomic};
use jury_study::{AggregateOptions, Settings};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Judgments table (binary), as for `jury aggregate`.
    #[arg(long)]
    judgments: PathBuf,
    /// How many examples to label.
    #[arg(long)]
    budget: usize,
    /// Seeds the draw (and the label-free method's random starts); the same seed plans
    /// the same examples.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The plan to write: example_id, inclusion_probability and plan_size; add a `label`
    /// column and pass it to `jury aggregate --calibration`.
    #[arg(long)]
    out: PathBuf,
    /// Replace an existing plan file.
    #[arg(long)]
    force: bool,
}

pub(crate) fn run(args: Args) -> Result<()> {
    if args.out.exists() && !args.force {
        anyhow::bail!("{} exists: pass --force to replace it", args.out.display());
    }
    let judgments = read_judgments(&args.judgments)?;
    let settings = Settings::new(&AggregateOptions { seed: args.seed, ..Default::default() })?;
    let plan = jury_study::label_plan(&judgments, &settings, args.budget, args.seed)
        .with_context(|| format!("planning {} labels for {}", args.budget, args.judgments.display()))?;
    let rows: Vec<(&str, f64)> = plan.iter().map(|(id, p)| (id.as_str(), *p)).collect();
    let text = jury_io::label_plan_csv(&rows);
    write_atomic(&args.out, text.as_bytes())?;
    println!(
        "wrote {} examples of {} to label to {} (add a label column and label every row, then pass it to \
         jury aggregate --calibration {}, or to a run as `calibration: {{labels: {}}}`)",
        plan.len(),
        judgments.n_examples(),
        args.out.display(),
        args.out.display(),
        args.out.display()
    );
    Ok(())
}
