//! `jury simulate`: writes a simulated jury with known skills as real input files, for
//! demos and benchmarks that must run without downloaded judge outputs.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use jury_io::{OutputDir, Owner, csv_field, write_atomic};
use jury_sim::{JuryConfig, simulate};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Number of examples.
    #[arg(long, default_value_t = 1000)]
    examples: usize,
    /// Random seed; the same seed writes the same files.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output directory (created if needed).
    #[arg(long)]
    out: PathBuf,
    /// Replace an output directory that holds another command's output or files jury
    /// did not write.
    #[arg(long)]
    force: bool,
}

pub(crate) fn run(args: Args) -> Result<()> {
    let cfg = JuryConfig::mixed_binary(args.examples, args.seed);
    let jury = simulate(&cfg).context("simulating the jury")?;
    let j = &jury.judgments;
    let mut judgments = String::from("example_id,judge,p\n");
    for n in 0..j.n_examples() {
        for k in 0..j.n_judges() {
            if let Some(p) = j.get(n, k) {
                let _ = writeln!(
                    judgments,
                    "{},{},{:.6}",
                    csv_field(&j.example_ids()[n]),
                    csv_field(&j.judge_names()[k]),
                    p[1]
                );
            }
        }
    }
    let mut labels = String::from("example_id,label\n");
    for (id, t) in j.example_ids().iter().zip(&jury.truth) {
        let _ = writeln!(labels, "{},{}", csv_field(id), t);
    }
    let owner = Owner { command: "simulate".into(), source: "a simulated jury".into() };
    let out = OutputDir::open(&args.out, owner, &["judgments.csv", "labels.csv"], args.force)?;
    write_atomic(&out.staged("judgments.csv"), judgments.as_bytes())?;
    write_atomic(&out.staged("labels.csv"), labels.as_bytes())?;
    out.publish()?;
    println!(
        "wrote {} examples x {} judges ({} entries) to {}",
        j.n_examples(),
        j.n_judges(),
        j.n_present(),
        args.out.display()
    );
    Ok(())
}
