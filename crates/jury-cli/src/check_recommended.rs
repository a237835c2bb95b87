//! `jury check-recommended`: each jury's `jury aggregate` run held to the bar of the
//! validation suite (jury-study's `BarCheck`); this module reads the files and prints.

use std::path::PathBuf;

use anyhow::{Context, Result};
use jury_io::{Metrics, layout};
use jury_study::{BarCheck, bar_tables};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Output folders of `jury aggregate --labels ... --methods recommended,...`, one per
    /// jury, each holding metrics.json; shown by folder name, in name order.
    #[arg(required = true)]
    runs: Vec<PathBuf>,
    /// The methods of the second table (every method's accuracy), comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    methods: Vec<String>,
}

pub(crate) fn run(args: Args) -> Result<()> {
    let mut checks = Vec::new();
    for dir in &args.runs {
        let name = dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned());
        let metrics = Metrics::read(&dir.join(layout::METRICS))?;
        checks.push(BarCheck::new(&name, &metrics).with_context(|| format!("{}", dir.display()))?);
    }
    checks.sort_by(|a, b| a.jury.cmp(&b.jury));
    print!("{}", bar_tables(&checks, &args.methods));
    Ok(())
}
