//! `jury compare-runs`: `jury run` output folders of the same judges (another device,
//! engine, server or setting) beside a reference's (jury-study's `compare_runs`); this
//! module reads the folders and prints the table.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use jury_io::{Manifest, layout, read_judgments, read_prompts};
use jury_study::{Pairing, RunFiles, compare_runs, comparison_table};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// `jury run` output folders as LABEL=DIR (a bare DIR is labelled by its folder
    /// name); prompts.jsonl, when a run kept it, gives the "same tokens" column.
    #[arg(required = true)]
    runs: Vec<String>,
    /// The run the others are compared with (default: the first).
    #[arg(long)]
    reference: Option<String>,
    /// The reference run's judge every row is compared with (default: the judge of the
    /// same name).
    #[arg(long)]
    reference_judge: Option<String>,
    /// Only these judges get a row, comma-separated (default: every judge of every run).
    #[arg(long, value_delimiter = ',')]
    judges: Vec<String>,
}

pub(crate) fn run(args: Args) -> Result<()> {
    let mut runs = Vec::with_capacity(args.runs.len());
    for arg in &args.runs {
        let (label, dir) = match arg.split_once('=') {
            Some((label, dir)) if !label.is_empty() => (label.to_owned(), PathBuf::from(dir)),
            _ => {
                let dir = PathBuf::from(arg);
                let name = dir.file_name().map_or_else(|| arg.clone(), |n| n.to_string_lossy().into_owned());
                (name, dir)
            }
        };
        if runs.iter().any(|r: &RunFiles| r.label == label) {
            bail!("two runs are labelled `{label}`: give each LABEL=DIR");
        }
        let manifest = Manifest::read(&dir.join(layout::MANIFEST))?;
        let judgments = read_judgments(&dir.join(layout::JUDGMENTS))?;
        let prompts_path = dir.join(layout::PROMPTS);
        let prompts = if prompts_path.is_file() { read_prompts(&prompts_path)? } else { Vec::new() };
        runs.push(RunFiles { label, manifest, judgments, prompts });
    }
    let reference = match args.reference {
        Some(label) => label,
        None => runs.first().map(|r| r.label.clone()).context("no run given")?,
    };
    let pairing = Pairing { reference, reference_judge: args.reference_judge, judges: args.judges };
    let rows = compare_runs(&runs, &pairing)?;
    print!("{}", comparison_table(&rows, &pairing.reference));
    Ok(())
}
