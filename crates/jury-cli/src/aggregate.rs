//! `jury aggregate`: judgments file in, posteriors, labels and scores out.
//!
//! Order of work is the no-half-written invariant: read and validate every input, run
//! every method, and only then create the output directory and write each file
//! atomically.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use jury_aggregate::{
    Aggregation, Aggregator, AverageProb, ClassPrior, DawidSkene, DawidSkeneConfig, EmInit, MajorityVote, TieBreak,
};
use jury_core::{Judgments, Labels};
use jury_io::{read_judgments, read_labels, write_atomic};

use crate::report;

#[derive(clap::Args)]
pub struct Args {
    /// Long judgments table: example_id, judge, p (or probs / p0..pC-1); .csv, .jsonl, .json or .parquet.
    #[arg(long)]
    judgments: PathBuf,
    /// Reference labels (example_id, label), used only for scoring.
    #[arg(long)]
    labels: Option<PathBuf>,
    /// Comma-separated methods: avg, mv, ds.
    #[arg(long, default_value = "avg,mv,ds")]
    methods: String,
    /// Output directory for metrics.json and predictions.csv.
    #[arg(long)]
    out: PathBuf,
    /// Tie rule for avg and mv (and ds's final labels): positive, negative or random.
    #[arg(long, default_value = "positive")]
    ties: String,
    /// Seed for random tie-breaking and random EM initialisation.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Dawid-Skene class prior: uniform (the paper) or learned.
    #[arg(long, default_value = "uniform")]
    ds_prior: String,
    /// Dawid-Skene start: mv (majority-vote posteriors) or random (paper Algorithm 3, seeded).
    #[arg(long, default_value = "mv")]
    ds_init: String,
    /// Dawid-Skene iteration cap.
    #[arg(long, default_value_t = 100)]
    ds_max_iter: usize,
    /// Dawid-Skene tolerance on parameter change; 0 runs exactly --ds-max-iter iterations.
    #[arg(long, default_value_t = 1e-6)]
    ds_tol: f64,
}

/// The aggregation methods this command knows, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Avg,
    Mv,
    Ds,
}

impl Method {
    const ALL: [(&'static str, Method); 3] = [("avg", Method::Avg), ("mv", Method::Mv), ("ds", Method::Ds)];

    fn parse_list(s: &str) -> Result<Vec<Method>> {
        let mut out = Vec::new();
        for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let Some(&(_, m)) = Self::ALL.iter().find(|(n, _)| *n == name) else {
                let known: Vec<&str> = Self::ALL.iter().map(|(n, _)| *n).collect();
                bail!("unknown method `{name}` in --methods (known: {})", known.join(", "));
            };
            if !out.contains(&m) {
                out.push(m);
            }
        }
        if out.is_empty() {
            bail!("--methods is empty");
        }
        Ok(out)
    }
}

/// The aggregation options as written by a user (flags or a YAML config).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Options {
    pub methods: String,
    pub ties: String,
    pub seed: u64,
    pub ds_prior: String,
    pub ds_init: String,
    pub ds_max_iter: usize,
    pub ds_tol: f64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            methods: "avg,mv,ds".into(),
            ties: "positive".into(),
            seed: 0,
            ds_prior: "uniform".into(),
            ds_init: "mv".into(),
            ds_max_iter: 100,
            ds_tol: 1e-6,
        }
    }
}

impl From<&Args> for Options {
    fn from(a: &Args) -> Self {
        Self {
            methods: a.methods.clone(),
            ties: a.ties.clone(),
            seed: a.seed,
            ds_prior: a.ds_prior.clone(),
            ds_init: a.ds_init.clone(),
            ds_max_iter: a.ds_max_iter,
            ds_tol: a.ds_tol,
        }
    }
}

/// Everything the methods need besides the data, resolved and checked.
pub struct Settings {
    methods: Vec<Method>,
    ties: TieBreak,
    ds: DawidSkeneConfig,
}

impl Settings {
    pub fn new(a: &Options) -> Result<Self> {
        let ties = match a.ties.as_str() {
            "positive" | "yes" => TieBreak::Positive,
            "negative" | "no" => TieBreak::Negative,
            "random" => TieBreak::Random { seed: a.seed },
            other => bail!("unknown --ties `{other}` (known: positive, negative, random)"),
        };
        let prior = match a.ds_prior.as_str() {
            "uniform" => ClassPrior::Uniform,
            "learned" => ClassPrior::Learned,
            other => bail!("unknown --ds-prior `{other}` (known: uniform, learned)"),
        };
        let init = match a.ds_init.as_str() {
            "mv" => EmInit::MajorityVote,
            "random" => EmInit::Random { seed: a.seed },
            other => bail!("unknown --ds-init `{other}` (known: mv, random)"),
        };
        let ds = DawidSkeneConfig { prior, init, max_iter: a.ds_max_iter, tol: a.ds_tol, ties };
        Ok(Self { methods: Method::parse_list(&a.methods)?, ties, ds })
    }

    fn aggregator(&self, m: Method) -> Box<dyn Aggregator> {
        match m {
            Method::Avg => Box::new(AverageProb { ties: self.ties }),
            Method::Mv => Box::new(MajorityVote { ties: self.ties }),
            Method::Ds => Box::new(DawidSkene::new(self.ds)),
        }
    }
}

/// One method's result and how long it took.
pub struct MethodRun {
    pub name: &'static str,
    pub aggregation: Aggregation,
    pub seconds: f64,
}

pub fn run(args: Args) -> Result<()> {
    let settings = Settings::new(&Options::from(&args))?;
    let judgments = read_judgments(&args.judgments)?;
    let labels: Option<Labels> = match &args.labels {
        Some(path) => {
            let (labels, unmatched) = read_labels(path, &judgments)?;
            if unmatched > 0 {
                eprintln!(
                    "warning: {}: {unmatched} labels are for examples with no judgments; ignored",
                    path.display()
                );
            }
            Some(labels)
        }
        None => None,
    };
    write_results(&judgments, labels.as_ref(), &settings, &args.out)
}

/// Runs every method, then writes metrics.json and predictions.csv into `out` and prints
/// the table. Nothing is written unless every method succeeded.
pub fn write_results(judgments: &Judgments, labels: Option<&Labels>, settings: &Settings, out: &Path) -> Result<()> {
    let mut runs = Vec::with_capacity(settings.methods.len());
    for &m in &settings.methods {
        let aggregator = settings.aggregator(m);
        let start = Instant::now();
        let aggregation = aggregator.aggregate(judgments)?;
        runs.push(MethodRun { name: aggregator.name(), aggregation, seconds: start.elapsed().as_secs_f64() });
    }
    let metrics = report::metrics_json(judgments, labels, &runs);
    let predictions = report::predictions_csv(judgments, labels, &runs);
    std::fs::create_dir_all(out).with_context(|| format!("creating output directory {}", out.display()))?;
    let metrics_text = serde_json::to_string_pretty(&metrics).context("serialising metrics")?;
    write_atomic(&out.join("metrics.json"), metrics_text.as_bytes())?;
    write_atomic(&out.join("predictions.csv"), predictions.as_bytes())?;
    print!("{}", report::table(judgments, labels, &runs));
    println!("wrote {} and {}", out.join("metrics.json").display(), out.join("predictions.csv").display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_list_parsing() {
        assert_eq!(Method::parse_list("avg, ds,avg").unwrap(), vec![Method::Avg, Method::Ds]);
        let err = Method::parse_list("avg,skill").unwrap_err().to_string();
        assert_eq!(err, "unknown method `skill` in --methods (known: avg, mv, ds)");
        assert!(Method::parse_list(",").is_err());
    }
}
