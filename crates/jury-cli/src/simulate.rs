//! `jury simulate`: writes a simulated jury with known skills as real input files, for
//! demos and benchmarks that must run without downloaded judge outputs.

use std::path::PathBuf;

use anyhow::{Context, Result};
use jury_aggregate::{AdaptiveConfig, StoppingModel};
use jury_io::{OutputDir, Owner, layout, write_atomic};
use jury_sim::{JuryConfig, simulate};
use jury_study::{AdaptiveSettings, adaptive_study, adaptive_table};

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct Args {
    #[command(subcommand)]
    what: Option<What>,
    #[command(flatten)]
    jury: JuryArgs,
}

#[derive(clap::Subcommand)]
enum What {
    /// Replay the adaptive jury on a judgments file recorded with every judge: judge
    /// calls and accuracy had each example stopped once its posterior was settled.
    Adaptive(AdaptiveArgs),
    /// Replay calibration labels on the labeled examples of a jury: calibration sets of
    /// each budget drawn from the labels (uniformly and by plan), each method's accuracy
    /// outside them and each rate estimator's coverage (calibration.json and a page).
    Calibration(CalibrationArgs),
}

#[derive(clap::Args)]
struct CalibrationArgs {
    /// The judgments (binary) and the labels of every example; the output directory gets
    /// calibration.json.
    #[command(flatten)]
    files: crate::aggregate::Files,
    /// Calibration budgets (labels per draw), comma-separated.
    #[arg(long = "budget", value_delimiter = ',', default_values_t = [50, 100, 250])]
    budgets: Vec<usize>,
    /// Draws per budget and sampling.
    #[arg(long, default_value_t = 200)]
    trials: usize,
    /// Seeds the draws, folds and bootstrap; the same seed writes the same file.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

#[derive(clap::Args)]
struct JuryArgs {
    /// Number of examples.
    #[arg(long, default_value_t = 1000)]
    examples: usize,
    /// Random seed; the same seed writes the same files.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output directory (created if needed; required).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Replace an output directory that holds another command's output or files jury
    /// did not write.
    #[arg(long)]
    force: bool,
}

#[derive(clap::Args)]
struct AdaptiveArgs {
    /// The judgments must be recorded with every judge; the labels only score; the output
    /// directory gets adaptive.json.
    #[command(flatten)]
    files: crate::aggregate::Files,
    /// An example stops once the model's probability that the judges left would not
    /// change its verdict reaches this.
    #[arg(long, default_value_t = AdaptiveConfig::default().target)]
    target: f64,
    /// The model whose predictive stops examples and labels them: auto (gauss for two
    /// classes, ds otherwise), gauss, care-gauss or ds.
    #[arg(long, default_value = "auto", value_parser = StoppingModel::from_name)]
    stopping_model: StoppingModel,
    /// Share of the examples every judge answers first (drawn by --seed).
    #[arg(long, default_value_t = AdaptiveConfig::default().warmup)]
    warmup: f64,
    /// Judges asked on every example before it may stop.
    #[arg(long, default_value_t = AdaptiveConfig::default().min_judges)]
    min_judges: usize,
    /// Draws the warm-up and the order of the other examples.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Targets of the curve, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [0.8, 0.9, 0.95, 0.99])]
    targets: Vec<f64>,
    /// Warm-up shares of the curve, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [0.05, 0.1, 0.2])]
    warmups: Vec<f64>,
    /// A judge's cost per call, `JUDGE=COST` (a live run's `cost:`), repeated for each
    /// judge: the cheaper are asked first and the curve weighs calls by cost. Without
    /// it every judge costs 1.
    #[arg(long = "cost", value_name = "JUDGE=COST", value_parser = judge_cost)]
    costs: Vec<(String, f64)>,
}

/// `JUDGE=COST` with a positive cost (the last `=` splits, so judge names may hold one).
fn judge_cost(s: &str) -> Result<(String, f64), String> {
    let (name, cost) = s.rsplit_once('=').ok_or_else(|| format!("`{s}` is not JUDGE=COST"))?;
    match cost.trim().parse::<f64>() {
        Ok(c) if c.is_finite() && c > 0.0 && !name.is_empty() => Ok((name.to_owned(), c)),
        _ => Err(format!("`{s}`: the cost must be a positive number after a judge name")),
    }
}

/// One cost per judge of `judges`, in their order, from `--cost` pairs that name each
/// judge once; `None` when no pair is given.
fn costs_per_judge(judges: &[String], pairs: &[(String, f64)]) -> Result<Option<Vec<f64>>> {
    if pairs.is_empty() {
        return Ok(None);
    }
    for (name, _) in pairs {
        if !judges.contains(name) {
            anyhow::bail!("--cost {name}=...: no judge `{name}` in the judgments (judges: {})", judges.join(", "));
        }
    }
    judges
        .iter()
        .map(|judge| {
            let mut given = pairs.iter().filter(|(n, _)| n == judge).map(|&(_, c)| c);
            match (given.next(), given.next()) {
                (Some(c), None) => Ok(c),
                (None, _) => anyhow::bail!("--cost gives no cost for judge `{judge}`: give every judge one, or none"),
                (Some(_), Some(_)) => anyhow::bail!("--cost names judge `{judge}` twice"),
            }
        })
        .collect::<Result<Vec<f64>>>()
        .map(Some)
}

pub(crate) fn run(args: Args) -> Result<()> {
    match args.what {
        Some(What::Adaptive(a)) => adaptive(a),
        Some(What::Calibration(a)) => calibration(a),
        None => jury(args.jury),
    }
}

fn adaptive(args: AdaptiveArgs) -> Result<()> {
    let (judgments, labels) = args.files.read()?;
    let settings = AdaptiveSettings {
        chosen: AdaptiveConfig {
            target: args.target,
            warmup: args.warmup,
            min_judges: args.min_judges,
            seed: args.seed,
            stopping_model: args.stopping_model,
            ..AdaptiveConfig::default()
        },
        targets: args.targets,
        warmups: args.warmups,
        costs: costs_per_judge(judgments.judge_names(), &args.costs)?,
    };
    let study = adaptive_study(&judgments, labels.as_ref(), &settings)?;
    let out = args.files.open_out("simulate adaptive", &[layout::ADAPTIVE_REPLAY, jury_report::REPORT_FILE])?;
    study.write(out.staging_dir())?;
    jury_report::write_page(out.staging_dir(), &jury_report::render_adaptive(out.staging_dir())?)?;
    out.publish()?;
    print!("{}", adaptive_table(&study));
    println!(
        "wrote {} and {}",
        args.files.out.join(layout::ADAPTIVE_REPLAY).display(),
        args.files.out.join(jury_report::REPORT_FILE).display()
    );
    Ok(())
}

fn calibration(args: CalibrationArgs) -> Result<()> {
    if args.trials == 0 {
        anyhow::bail!("--trials must be at least 1");
    }
    let Some(labels_path) = &args.files.labels else {
        anyhow::bail!("jury simulate calibration needs --labels FILE (the examples' labels, to draw from)");
    };
    let out = args.files.open_out("simulate calibration", &[layout::CALIBRATION_REPLAY, jury_report::REPORT_FILE])?;
    let (judgments, labels) = args.files.read()?;
    let labels = labels.with_context(|| format!("reading {}", labels_path.display()))?;
    let settings = jury_study::Settings::new(&jury_study::AggregateOptions { seed: args.seed, ..Default::default() })?;
    // The replay knows how many draws it makes; the bar starts at its first report.
    let bar = std::sync::OnceLock::new();
    let progress = |_: usize, total: usize| {
        bar.get_or_init(|| {
            jury_progress::Progress::new(
                "calibration replay draws",
                total as u64,
                "{bar:30} {pos}/{len} draws ({per_sec}, ETA {eta})",
            )
        })
        .inc(1);
    };
    let replay = jury_study::calibration_replay(
        &judgments,
        &labels,
        &settings,
        &args.budgets,
        args.trials,
        args.seed,
        &progress,
    )
    .with_context(|| format!("replaying calibration labels on {}", args.files.judgments.display()))?;
    if let Some(bar) = bar.get() {
        bar.finish_and_clear();
    }
    if replay.jury.unlabeled_left_out > 0 {
        eprintln!(
            "warning: {}: {} judged examples have no label; the replay is of the {} that do",
            labels_path.display(),
            replay.jury.unlabeled_left_out,
            replay.jury.n_examples
        );
    }
    replay.write(out.staging_dir())?;
    jury_report::write_page(out.staging_dir(), &jury_report::render_calibration(out.staging_dir())?)?;
    out.publish()?;
    print!("{}", jury_study::calibration_table(&replay));
    println!(
        "wrote {} and {}",
        args.files.out.join(layout::CALIBRATION_REPLAY).display(),
        args.files.out.join(jury_report::REPORT_FILE).display()
    );
    Ok(())
}

fn jury(args: JuryArgs) -> Result<()> {
    let Some(out_path) = args.out else {
        anyhow::bail!("jury simulate needs --out DIR (or a subcommand: adaptive)");
    };
    let cfg = JuryConfig::mixed_binary(args.examples, args.seed);
    let jury = simulate(&cfg).context("simulating the jury")?;
    let j = &jury.judgments;
    let ids = j.example_ids();
    let names = j.judge_names();
    let judgments = jury_io::judgments_csv((0..j.n_examples()).flat_map(|n| {
        (0..j.n_judges()).filter_map(move |k| Some((ids[n].as_str(), names[k].as_str(), j.get(n, k)?[1])))
    }));
    let labels = jury_io::labels_csv(ids.iter().map(String::as_str).zip(jury.truth.iter().copied()));
    let owner = Owner { command: "simulate".into(), source: "a simulated jury".into() };
    let out = OutputDir::open(&out_path, owner, &[layout::JUDGMENTS, layout::LABELS], args.force)?;
    write_atomic(&out.staged(layout::JUDGMENTS), judgments.as_bytes())?;
    write_atomic(&out.staged(layout::LABELS), labels.as_bytes())?;
    out.publish()?;
    println!(
        "wrote {} examples x {} judges ({} entries) to {}",
        j.n_examples(),
        j.n_judges(),
        j.n_present(),
        out_path.display()
    );
    Ok(())
}
