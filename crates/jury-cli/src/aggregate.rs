//! `jury aggregate`: judgments file in, posteriors, labels and scores out.
//!
//! Order of work is the no-half-written invariant: read and validate every input, run
//! every method, and only then create the output directory and write each file
//! atomically.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use jury_aggregate::{
    Aggregator, AverageProb, ClassPrior, DawidSkene, DawidSkeneConfig, EmInit, MajorityVote, TieBreak,
};
use jury_core::{Judgments, Labels};
use jury_io::{OutputDir, Owner, read_judgments, read_labels, write_atomic};
use serde_json::json;

use crate::neural::{NeuralMethod, NeuralOptions, SkillInit};
use crate::report::{self, MethodRun};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Long judgments table: example_id, judge, p (or probs / p0..pC-1); .csv, .jsonl, .json or .parquet.
    #[arg(long)]
    judgments: PathBuf,
    /// Reference labels (example_id, label), used only for scoring.
    #[arg(long)]
    labels: Option<PathBuf>,
    /// Comma-separated methods: avg, mv, ds, and the context-dependent train-on-mv,
    /// crowdlayer, skillagg-noreg, skillagg, skillagg-x (these need --contexts and labels
    /// for the dev set).
    #[arg(long, default_value = "avg,mv,ds")]
    methods: String,
    /// Example contexts for the context-dependent methods: example_id, text.
    #[arg(long)]
    contexts: Option<PathBuf>,
    /// Labeled development examples (drawn per seed) that choose lambda and the epoch.
    #[arg(long, default_value_t = 250)]
    dev_size: usize,
    /// Seeds of the context-dependent methods (mean and std reported).
    #[arg(long, default_value_t = 5)]
    seeds: usize,
    /// The first of the --seeds consecutive seeds (seeds first..first+seeds), so the
    /// seeds of a long fine-tuned run can go to separate machines or sessions.
    #[arg(long, default_value_t = 0)]
    first_seed: u64,
    /// Context encoder mode: frozen (embeddings computed once and cached) or finetune.
    #[arg(long, default_value = "frozen")]
    encoder: String,
    /// Encoder folder (config.json, tokenizer.json, model.safetensors; BERT such as
    /// all-MiniLM-L6-v2, see scripts/fetch-encoder.sh, or GPT-2), or a hub model id such as
    /// openai-community/gpt2 (the paper's encoder), taken from or fetched into the hub cache.
    #[arg(long, default_value = "models/all-MiniLM-L6-v2")]
    encoder_dir: PathBuf,
    /// Where the encoder runs: cpu, or cuda / cuda:N (GPU N) in builds with
    /// `--features jury-cli/cuda`; the heads of the frozen mode always train on the CPU.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Tokens per context kept by the encoder (all-MiniLM-L6-v2 was trained on 128).
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    /// Embed each ` || `-separated field of a context on its own (up to --max-tokens each)
    /// and concatenate the vectors in field order (frozen encoder only).
    #[arg(long)]
    split_fields: bool,
    /// Training epochs of the context-dependent methods (the dev set picks the best).
    #[arg(long, default_value_t = 20)]
    epochs: usize,
    /// Width of a ReLU hidden layer in the context model's head (0 = linear).
    #[arg(long, default_value_t = 0)]
    hidden: usize,
    /// Learning rate of the context-dependent methods' heads.
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// Examples per training step of the context-dependent methods (default 256 with the
    /// frozen encoder, 32 when fine-tuning it).
    #[arg(long)]
    batch: Option<usize>,
    /// Regulariser weights the dev set chooses from (skillagg, skillagg-x).
    #[arg(long, default_value = "0.01,0.1,1")]
    lambdas: String,
    /// Starting skills of crowdlayer and the skillagg methods: a probability in (0.5, 1)
    /// for every judge and class, or `ds`: each judge's P(b=0|c=0), P(b=1|c=1) as
    /// estimated by Dawid-Skene (with the --ds-* settings; binary judgments).
    #[arg(long, default_value = "0.8")]
    skill_init: String,
    /// Root of jury's on-disk caches: DIR/embeddings (frozen-encoder embeddings) and
    /// DIR/finetune (fine-tuning checkpoints, which a long run resumes from); put it on a
    /// disk that outlives the machine for runs that span sessions. Default
    /// $XDG_CACHE_HOME/jury, else ~/.cache/jury.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Output directory for metrics.json and predictions.csv.
    #[arg(long)]
    out: PathBuf,
    /// Replace an output directory that holds another command's output or files jury
    /// did not write.
    #[arg(long)]
    force: bool,
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

/// The context-free aggregation methods this command knows, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Avg,
    Mv,
    Ds,
}

impl Method {
    const ALL: [(&'static str, Method); 3] = [("avg", Method::Avg), ("mv", Method::Mv), ("ds", Method::Ds)];

    /// The context-free and the context-dependent methods named in `s`.
    fn parse_list(s: &str) -> Result<(Vec<Method>, Vec<NeuralMethod>)> {
        let (mut out, mut neural) = (Vec::new(), Vec::new());
        for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if let Some(&(_, m)) = NeuralMethod::ALL.iter().find(|(n, _)| *n == name) {
                if !neural.contains(&m) {
                    neural.push(m);
                }
                continue;
            }
            let Some(&(_, m)) = Self::ALL.iter().find(|(n, _)| *n == name) else {
                let known: Vec<&str> =
                    Self::ALL.iter().map(|(n, _)| *n).chain(NeuralMethod::ALL.iter().map(|(n, _)| *n)).collect();
                bail!("unknown method `{name}` in --methods (known: {})", known.join(", "));
            };
            if !out.contains(&m) {
                out.push(m);
            }
        }
        if out.is_empty() && neural.is_empty() {
            bail!("--methods is empty");
        }
        Ok((out, neural))
    }
}

/// The aggregation options as written by a user (flags or a YAML config).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct Options {
    pub methods: String,
    pub ties: String,
    pub seed: u64,
    pub ds_prior: String,
    pub ds_init: String,
    pub ds_max_iter: usize,
    pub ds_tol: f64,
    pub contexts: Option<PathBuf>,
    pub dev_size: usize,
    pub seeds: usize,
    pub first_seed: u64,
    pub encoder: String,
    pub encoder_dir: PathBuf,
    pub device: String,
    pub max_tokens: usize,
    pub split_fields: bool,
    pub epochs: usize,
    pub lambdas: String,
    pub hidden: usize,
    pub lr: f64,
    /// Examples per training step; `None`: 256 frozen, 32 fine-tuned.
    pub batch: Option<usize>,
    pub skill_init: String,
    /// Root of the embedding cache and the fine-tuning checkpoints; `None`: the user's
    /// cache folder.
    pub cache_dir: Option<PathBuf>,
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
            contexts: None,
            dev_size: 250,
            seeds: 5,
            first_seed: 0,
            encoder: "frozen".into(),
            encoder_dir: "models/all-MiniLM-L6-v2".into(),
            device: "cpu".into(),
            max_tokens: 128,
            split_fields: false,
            epochs: 20,
            lambdas: "0.01,0.1,1".into(),
            hidden: 0,
            lr: 1e-3,
            batch: None,
            skill_init: "0.8".into(),
            cache_dir: None,
        }
    }
}

impl Options {
    /// Whether `methods` names a context-dependent method (unparsable lists answer
    /// false; `Settings::new` reports them). Only `jury run` asks.
    #[cfg(feature = "judges")]
    pub(crate) fn wants_contexts(&self) -> bool {
        Method::parse_list(&self.methods).is_ok_and(|(_, neural)| !neural.is_empty())
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
            contexts: a.contexts.clone(),
            dev_size: a.dev_size,
            seeds: a.seeds,
            first_seed: a.first_seed,
            encoder: a.encoder.clone(),
            encoder_dir: a.encoder_dir.clone(),
            device: a.device.clone(),
            max_tokens: a.max_tokens,
            split_fields: a.split_fields,
            epochs: a.epochs,
            lambdas: a.lambdas.clone(),
            hidden: a.hidden,
            lr: a.lr,
            batch: a.batch,
            skill_init: a.skill_init.clone(),
            cache_dir: a.cache_dir.clone(),
        }
    }
}

/// Everything the methods need besides the data, resolved and checked.
pub(crate) struct Settings {
    methods: Vec<Method>,
    ties: TieBreak,
    ds: DawidSkeneConfig,
    neural: Vec<NeuralMethod>,
    neural_opts: Option<NeuralOptions>,
}

impl Settings {
    pub(crate) fn new(a: &Options) -> Result<Self> {
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
        if !(a.ds_tol.is_finite() && a.ds_tol >= 0.0) {
            bail!("--ds-tol {}: expected a finite number, 0 or more", a.ds_tol);
        }
        let ds = DawidSkeneConfig { prior, init, max_iter: a.ds_max_iter, tol: a.ds_tol, ties };
        let (methods, neural) = Method::parse_list(&a.methods)?;
        let neural_opts = if neural.is_empty() {
            None
        } else {
            let Some(contexts) = a.contexts.clone() else {
                bail!("--methods {}: the context-dependent methods need --contexts FILE", a.methods)
            };
            let finetune = match a.encoder.as_str() {
                "frozen" => false,
                "finetune" => true,
                other => bail!("unknown --encoder `{other}` (known: frozen, finetune)"),
            };
            let lambdas = a
                .lambdas
                .split(',')
                .map(|x| x.trim().parse::<f64>().ok().filter(|l| l.is_finite() && *l >= 0.0))
                .collect::<Option<Vec<f64>>>()
                .filter(|v| !v.is_empty());
            let Some(lambdas) = lambdas else {
                bail!("--lambdas `{}`: expected finite non-negative numbers", a.lambdas)
            };
            if !(a.lr.is_finite() && a.lr > 0.0 && a.lr <= 1.0) {
                bail!("--lr {}: expected a learning rate in (0, 1]", a.lr);
            }
            if a.first_seed.checked_add(a.seeds as u64).is_none() {
                bail!("--first-seed {} plus --seeds {} overflows", a.first_seed, a.seeds);
            }
            if a.seeds == 0 || a.epochs == 0 || a.dev_size == 0 {
                bail!("--seeds, --epochs and --dev-size must be at least 1");
            }
            if a.batch == Some(0) {
                bail!("--batch must be at least 1");
            }
            if a.split_fields && finetune {
                bail!("--split-fields takes the frozen encoder (--encoder frozen)");
            }
            let device =
                a.device.trim().parse::<jury_neural::ComputeDevice>().map_err(|e| anyhow::anyhow!("--device: {e}"))?;
            let skill_init = match a.skill_init.trim() {
                "ds" => SkillInit::DawidSkene(ds),
                other => match other.parse::<f64>() {
                    Ok(p) if p > 0.5 && p < 1.0 => SkillInit::Uniform(p),
                    _ => bail!("--skill-init `{other}`: expected a probability in (0.5, 1) or `ds`"),
                },
            };
            Some(NeuralOptions {
                contexts,
                encoder_dir: jury_neural::hub::resolve(&a.encoder_dir)
                    .with_context(|| format!("encoder {}", a.encoder_dir.display()))?,
                finetune,
                device,
                dev_size: a.dev_size,
                seeds: a.seeds,
                first_seed: a.first_seed,
                max_tokens: a.max_tokens,
                split_fields: a.split_fields,
                epochs: a.epochs,
                lambdas,
                hidden: a.hidden,
                lr: a.lr,
                batch: a.batch.unwrap_or(if finetune { 32 } else { jury_neural::skill::TrainConfig::default().batch }),
                cache_dir: a.cache_dir.clone().unwrap_or_else(crate::neural::default_cache_dir),
                skill_init,
            })
        };
        Ok(Self { methods, ties, ds, neural, neural_opts })
    }

    /// Reads the examples' contexts from `path` instead (a run's own contexts file, read
    /// from its staging folder before it is published).
    #[cfg(feature = "judges")]
    pub(crate) fn read_contexts_from(&mut self, path: std::path::PathBuf) {
        if let Some(opts) = &mut self.neural_opts {
            opts.contexts = path;
        }
    }

    /// Whether `n_labeled` labeled examples leave a test set beside the dev set of the
    /// context-dependent methods: `jury run` asks before judging (`neural::run` checks
    /// the judged examples again before any embedding).
    #[cfg(feature = "judges")]
    pub(crate) fn check_labeled(&self, n_labeled: usize) -> Result<()> {
        if let Some(opts) = &self.neural_opts
            && n_labeled <= opts.dev_size
        {
            bail!("{n_labeled} labeled examples: not enough for a dev set of {} (--dev-size)", opts.dev_size);
        }
        Ok(())
    }

    fn aggregator(&self, m: Method) -> Box<dyn Aggregator> {
        match m {
            Method::Avg => Box::new(AverageProb { ties: self.ties }),
            Method::Mv => Box::new(MajorityVote { ties: self.ties }),
            Method::Ds => Box::new(DawidSkene::new(self.ds)),
        }
    }
}

pub(crate) fn run(args: Args) -> Result<()> {
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
    let source = format!("{}", args.judgments.display());
    // Every input is read and every method run before the output directory is touched.
    let results = results(&judgments, labels.as_ref(), &settings)?;
    let out = OutputDir::open(&args.out, Owner { command: "aggregate".into(), source }, &FILES, args.force)?;
    results.write(out.staging_dir(), out.dir())?;
    out.publish()?;
    Ok(())
}

/// The files aggregation writes.
pub(crate) const FILES: [&str; 2] = ["metrics.json", "predictions.csv"];

/// Every method's results, ready to write.
pub(crate) struct Results {
    metrics: String,
    predictions: String,
    table: String,
}

impl Results {
    /// Writes metrics.json and predictions.csv into `staging` (to be published into
    /// `out`) and prints the table.
    pub(crate) fn write(&self, staging: &Path, out: &Path) -> Result<()> {
        write_atomic(&staging.join(FILES[0]), self.metrics.as_bytes())?;
        write_atomic(&staging.join(FILES[1]), self.predictions.as_bytes())?;
        print!("{}", self.table);
        println!("wrote {} and {}", out.join(FILES[0]).display(), out.join(FILES[1]).display());
        Ok(())
    }
}

/// Runs every method and scores it; writes nothing.
pub(crate) fn results(judgments: &Judgments, labels: Option<&Labels>, settings: &Settings) -> Result<Results> {
    let mut runs = Vec::with_capacity(settings.methods.len());
    for &m in &settings.methods {
        let aggregator = settings.aggregator(m);
        let start = Instant::now();
        let aggregation = aggregator.aggregate(judgments)?;
        if let Some(n) = aggregation.posteriors().rows().position(|r| r.iter().any(|p| !p.is_finite())) {
            bail!(
                "{}: the posterior of example `{}` is not a number; no accuracy is reported",
                aggregator.name(),
                judgments.example_ids()[n]
            );
        }
        runs.push(MethodRun { name: aggregator.name(), aggregation, seconds: start.elapsed().as_secs_f64() });
    }
    let mut metrics = report::metrics_json(judgments, labels, &runs);
    let mut predictions = report::predictions_csv(judgments, labels, &runs);
    let mut neural_table = String::new();
    if let Some(opts) = &settings.neural_opts {
        let Some(labels) = labels else {
            bail!("the context-dependent methods need --labels (the dev set that chooses lambda and the epoch)")
        };
        let neural_runs = crate::neural::run(judgments, labels, &settings.neural, opts)?;
        let mut lines: Vec<String> = predictions.lines().map(str::to_owned).collect();
        for r in &neural_runs {
            metrics["methods"][r.method.name()] = r.json.clone();
            let c = judgments.n_classes();
            if let Some(h) = lines.first_mut() {
                if c == 2 {
                    h.push_str(&format!(",{0}_p,{0}_label", r.method.name()));
                } else {
                    (0..c).for_each(|k| h.push_str(&format!(",{}_p{k}", r.method.name())));
                    h.push_str(&format!(",{}_label", r.method.name()));
                }
            }
            for (line, row) in lines.iter_mut().skip(1).zip(&r.posteriors) {
                let shown = if c == 2 { &row[1..] } else { &row[..] };
                shown.iter().for_each(|p| line.push_str(&format!(",{p:.6}")));
                // Binary: P(positive) > 0.5; C classes: argmax, lowest class on ties.
                let label = if c == 2 { usize::from(row[1] > 0.5) } else { jury_core::argmax(row) };
                line.push_str(&format!(",{label}"));
            }
            let (mean, std) =
                (r.json["accuracy"].as_f64().unwrap_or(f64::NAN), r.json["std"].as_f64().unwrap_or(f64::NAN));
            let context = match r.json["context_accuracy"]["accuracy"].as_f64() {
                Some(a) => format!("; context model alone {a:.4}"),
                None => String::new(),
            };
            neural_table.push_str(&format!(
                "{:<16}  {mean:.4} +- {std:.4} over {} seeds (dev set {} per seed{context})\n",
                r.method.name(),
                r.accuracies.len(),
                opts.dev_size
            ));
        }
        predictions = lines.join("\n") + "\n";
        // The context-free methods scored on the same test splits, for paired comparisons.
        let splits = crate::neural::splits(labels, judgments.n_examples(), opts);
        // Each seed's dev set by example id, so any posterior can be rescored on the splits.
        let ids = judgments.example_ids();
        metrics["seeds"] = json!(opts.seed_range().collect::<Vec<_>>());
        metrics["dev_sets"] = json!(
            splits.iter().map(|(dev, _)| dev.iter().map(|&i| ids[i].as_str()).collect::<Vec<_>>()).collect::<Vec<_>>()
        );
        for r in &runs {
            let accs: Vec<f64> = splits
                .iter()
                .map(|(_, test)| {
                    let right = test.iter().filter(|&&i| labels.get(i) == Some(r.aggregation.labels()[i])).count();
                    right as f64 / test.len().max(1) as f64
                })
                .collect();
            let (mean, std) = jury_metrics::mean_std(&accs);
            metrics["methods"][r.name]["outside_dev"] = json!({"accuracy": mean, "std": std, "seeds": accs});
            neural_table
                .push_str(&format!("{:<16}  {mean:.4} +- {std:.4} on the same test splits (context-free)\n", r.name));
        }
    }
    let metrics = serde_json::to_string_pretty(&metrics).context("serialising metrics")?;
    let mut table = report::table(judgments, labels, &runs);
    if !neural_table.is_empty() {
        table.push_str(&format!("\ncontext-dependent methods (accuracy outside each seed's dev set)\n{neural_table}"));
    }
    Ok(Results { metrics, predictions, table })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `jury run` configuration's `aggregate:` section takes the flags' settings by
    /// their snake-case names, and a bad starting skill is refused by name.
    #[test]
    fn yaml_options_reach_the_neural_settings() {
        let o: Options = serde_yaml::from_str(
            "methods: ds,skillagg-x\ncontexts: c.csv\nhidden: 256\nskill_init: ds\nsplit_fields: true\n",
        )
        .unwrap();
        assert_eq!((o.hidden, o.skill_init.as_str(), o.split_fields), (256, "ds", true));
        let cache: Options =
            serde_yaml::from_str("methods: skillagg\ncontexts: c.csv\ncache_dir: /data/jury\n").unwrap();
        let settings = Settings::new(&Options { encoder_dir: ".".into(), ..cache }).unwrap();
        let neural = settings.neural_opts.unwrap();
        assert_eq!(neural.cache_dir, Path::new("/data/jury"));
        let default = Settings::new(&Options { encoder_dir: ".".into(), cache_dir: None, ..o.clone() }).unwrap();
        assert_eq!(default.neural_opts.unwrap().cache_dir, crate::neural::default_cache_dir());
        let bad = Options { skill_init: "0.3".into(), ..o };
        let err = Settings::new(&bad).err().unwrap().to_string();
        assert!(err.contains("--skill-init `0.3`"), "{err}");
    }

    #[test]
    fn method_list_parsing() {
        assert_eq!(Method::parse_list("avg, ds,avg").unwrap(), (vec![Method::Avg, Method::Ds], vec![]));
        assert_eq!(Method::parse_list("mv,skillagg-x").unwrap(), (vec![Method::Mv], vec![NeuralMethod::SkillAggX]));
        let err = Method::parse_list("avg,skill").unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown method `skill` in --methods (known: avg, mv, ds, train-on-mv, crowdlayer, skillagg-noreg, skillagg, skillagg-x)"
        );
        assert!(Method::parse_list(",").is_err());
    }
}
