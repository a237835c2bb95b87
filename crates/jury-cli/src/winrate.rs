//! `jury winrate`: reads the comparisons (and the prior's), runs the library's study,
//! writes winrate.json and prints one line per generator pair.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use indicatif::ProgressBar;
use jury_io::read_comparisons;
use jury_winrate::{PairEstimate, Prior, StudyOptions, study};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Comparisons table: comparison_id, generator_0, generator_1, evaluator, vote
    /// (1 = generator_1 preferred, 0 = generator_0, tie or empty = none); human labels
    /// are the rows of the evaluator named by --human.
    #[arg(long)]
    comparisons: PathBuf,
    /// Output directory for winrate.json.
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    options: StudyOptions,
}

pub(crate) fn run(args: Args) -> Result<()> {
    let options = args.options;
    options.check()?;
    let rows = read_comparisons(&args.comparisons)?;
    let ood = match &options.prior {
        Prior::Ood(path) => Some(read_comparisons(path)?),
        _ => None,
    };
    let bar = ProgressBar::no_length()
        .with_style(jury_progress::style("{msg} {bar:30} {pos}/{len} sweeps ({per_sec}, ETA {eta})"));
    let mut current = String::new();
    let mut progress = |pair: &str, done: usize, total: usize| {
        if current != pair {
            current = pair.to_owned();
            bar.reset();
            bar.set_length(total as u64);
            bar.set_message(current.clone());
        }
        bar.set_position(done as u64);
    };
    let result = study(&rows, ood.as_deref(), &options, &mut progress)
        .with_context(|| format!("{}", args.comparisons.display()))?;
    bar.finish_and_clear();
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let path = args.out.join(jury_io::layout::WINRATE);
    jury_io::write_json(&path, &result)?;
    jury_report::write_page(&args.out, &jury_report::render_winrate(&args.out)?)?;
    print!("{}", table(&result.pairs));
    let with_human = result.pairs.iter().filter(|p| p.abs_error.is_some()).count();
    if let (Some(e), Some(o)) = (result.mean_abs_error, result.observed_mean_abs_error) {
        println!("mean |error| over {with_human} pairs with human labels: {} {e:.4}, observed {o:.4}", result.method);
    }
    println!("wrote {} and {}", path.display(), args.out.join(jury_report::REPORT_FILE).display());
    Ok(())
}

/// One line per pair: size, human rate, observed rate, estimate and interval, errors.
fn table(pairs: &[PairEstimate]) -> String {
    let mut table = String::new();
    let _ = writeln!(
        table,
        "{:<44} {:>5} {:>6} {:>8} {:>10} {:>16} {:>8} {:>8}",
        "generator pair (p = P(G1 preferred))", "n", "human", "observed", "estimate", "interval", "|err|", "|obs err|"
    );
    let fmt = |x: Option<f64>| x.map_or("-".to_owned(), |x| format!("{x:.3}"));
    for p in pairs {
        let _ = writeln!(
            table,
            "{:<44} {:>5} {:>6} {:>8} {:>10} {:>16} {:>8} {:>8}",
            truncate(&format!("{} vs {}", p.generator_0, p.generator_1), 44),
            p.n_comparisons,
            fmt(p.human_win_rate),
            fmt(p.observed),
            p.estimate.map_or("unidentif.".to_owned(), |e| format!("{e:.3}")),
            p.interval.map_or("-".to_owned(), |[l, h]| format!("[{l:.3}, {h:.3}]")),
            fmt(p.abs_error),
            fmt(p.observed_abs_error),
        );
    }
    table
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_owned() } else { s.chars().take(n - 1).chain(['…']).collect() }
}
