//! `jury pool-seeds`: several runs' seeds as one run over all of them. The pooling and
//! its checks are jury-study's; this module reads the files and prints.

use std::path::PathBuf;

use anyhow::{Context, Result};
use jury_io::{Metrics, write_atomic};
use jury_study::SeedRun;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// metrics.json of each run (`jury aggregate --first-seed N --seeds M` on the same
    /// data with the same settings).
    #[arg(required = true)]
    metrics: Vec<PathBuf>,
    /// Also write the pooled figures here (JSON, shaped like metrics.json's method
    /// entries).
    #[arg(long)]
    out: Option<PathBuf>,
}

pub(crate) fn run(args: Args) -> Result<()> {
    let runs = args
        .metrics
        .iter()
        .map(|path| Ok(SeedRun { path: path.clone(), metrics: Metrics::read(path)? }))
        .collect::<Result<Vec<_>>>()?;
    let pooled = jury_study::pool_seeds(&runs).context("pooling seeds")?;
    for (name, m) in &pooled.methods.0 {
        let free = if m.context_free { " (context-free, same test splits)" } else { "" };
        let context = m.context_accuracy.as_ref().map_or(String::new(), |c| {
            format!("; context model alone {:.2} +- {:.2}", 100.0 * c.accuracy, 100.0 * c.std)
        });
        println!(
            "{name:<16} {:.2} +- {:.2} over seeds {:?}{free}{context}",
            100.0 * m.over.accuracy,
            100.0 * m.over.std,
            pooled.seeds
        );
    }
    if let Some(out) = &args.out {
        write_atomic(out, pooled.to_json().as_bytes())?;
    }
    Ok(())
}
