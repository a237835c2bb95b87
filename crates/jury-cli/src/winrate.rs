//! `jury winrate`: comparisons with evaluator votes (and human labels) in, one calibrated
//! win rate per generator pair out, scored against the human win rate where labels exist.
//!
//! Human labels serve two separate roles and never mix: all of a pair's labels give the
//! reference win rate used for scoring; only the revealed share (`in-dist:RATIO`, drawn
//! with the seed) or other pairs' labels (`ood:FILE`) reach the estimators.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use jury_io::{ComparisonRow, read_comparisons, write_atomic};
use jury_winrate::{
    AccuracyPrior, Confusion, Outcome, PairVotes, SamplingConfig, bayesian_dawid_skene, bwrs, observed,
};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde_json::json;

#[derive(clap::Args)]
pub struct Args {
    /// Comparisons table: comparison_id, generator_0, generator_1, evaluator, vote
    /// (1 = generator_1 preferred, 0 = generator_0, tie or empty = none); human labels
    /// are the rows of the evaluator named by --human.
    #[arg(long)]
    comparisons: PathBuf,
    /// observed (uncalibrated), bwrs or bayesian-ds.
    #[arg(long, default_value = "bayesian-ds")]
    method: String,
    /// none, in-dist:RATIO (that share of each pair's human labels is revealed to the
    /// estimator) or ood:FILE (human-labeled comparisons of other generator pairs; a pair
    /// also present in FILE is left out of its own prior).
    #[arg(long, default_value = "none")]
    prior: String,
    /// Evaluator name of the human-label rows (default `human`; a name given here must
    /// have rows).
    #[arg(long)]
    human: Option<String>,
    /// Only these evaluators (comma-separated names); all by default.
    #[arg(long)]
    evaluators: Option<String>,
    /// Output directory for winrate.json.
    #[arg(long)]
    out: PathBuf,
    /// Seed of the revealed labels and of the samplers.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Monte-Carlo draws (BWRS, per evaluator) or kept Gibbs sweeps (bayesian-ds).
    #[arg(long, default_value_t = 4000)]
    draws: usize,
    /// Gibbs sweeps discarded first (bayesian-ds).
    #[arg(long, default_value_t = 500)]
    burn_in: usize,
    /// Credible interval level.
    #[arg(long, default_value_t = 0.95)]
    level: f64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Method {
    Observed,
    Bwrs,
    BayesianDs,
}

enum Prior {
    None,
    InDist(f64),
    Ood(PathBuf),
}

/// One generator pair's table: evaluators (voting at least once), votes and all human labels.
struct Pair {
    g0: String,
    g1: String,
    votes: PairVotes,
    human: Vec<Option<bool>>,
}

/// A generator pair without a single evaluator vote (only human rows, or only ties):
/// nothing can be estimated for it, and the other pairs go on.
struct Unvoted {
    g0: String,
    g1: String,
    n_comparisons: usize,
    human: Vec<Option<bool>>,
}

pub fn run(args: Args) -> Result<()> {
    let method = match args.method.as_str() {
        "observed" => Method::Observed,
        "bwrs" => Method::Bwrs,
        "bayesian-ds" => Method::BayesianDs,
        other => bail!("--method: unknown method `{other}` (expected observed, bwrs or bayesian-ds)"),
    };
    let prior = parse_prior(&args.prior)?;
    if method == Method::Bwrs && matches!(prior, Prior::None) {
        bail!(
            "--method bwrs needs evaluator accuracies from human labels: give --prior in-dist:RATIO or ood:FILE \
             (without them q0 and q1 are unknown and p = (k + q0 - 1) / (q0 + q1 - 1) is not determined)"
        );
    }
    let cfg = SamplingConfig { draws: args.draws, burn_in: args.burn_in, level: args.level, seed: args.seed };
    let keep: Option<Vec<&str>> = args.evaluators.as_deref().map(|s| s.split(',').map(str::trim).collect());
    let human = args.human.as_deref().unwrap_or("human");
    let filter = |rows: Vec<ComparisonRow>| -> Vec<ComparisonRow> {
        match &keep {
            Some(k) => rows.into_iter().filter(|r| r.evaluator == human || k.contains(&r.evaluator.as_str())).collect(),
            None => rows,
        }
    };
    let rows = filter(read_comparisons(&args.comparisons)?);
    if let Some(name) = &args.human
        && !rows.iter().any(|r| &r.evaluator == name)
    {
        let mut known: Vec<&str> = rows.iter().map(|r| r.evaluator.as_str()).collect();
        known.sort_unstable();
        known.dedup();
        bail!(
            "--human `{name}`: no rows of that evaluator in {} (evaluators there: {})",
            args.comparisons.display(),
            known.join(", ")
        );
    }
    if let Some(k) = &keep
        && let Some(missing) = k.iter().find(|name| !rows.iter().any(|r| r.evaluator == **name))
    {
        bail!("--evaluators: `{missing}` has no rows in {}", args.comparisons.display());
    }
    let (pairs, unvoted) = group(&rows, human).with_context(|| format!("{}", args.comparisons.display()))?;
    let ood = match &prior {
        Prior::Ood(path) => {
            let rows = filter(read_comparisons(path)?);
            Some(group(&rows, human).with_context(|| format!("{}", path.display()))?.0)
        }
        _ => None,
    };

    let mut results = Vec::new();
    let mut table = String::new();
    let _ = writeln!(
        table,
        "{:<44} {:>5} {:>6} {:>8} {:>10} {:>16} {:>8} {:>8}",
        "generator pair (p = P(G1 preferred))", "n", "human", "observed", "estimate", "interval", "|err|", "|obs err|"
    );
    let (mut errs, mut obs_errs) = (Vec::new(), Vec::new());
    for (pi, pair) in pairs.iter().enumerate() {
        let n_labeled = pair.human.iter().flatten().count();
        let human_rate = rate(&pair.human);
        let pair_cfg = SamplingConfig { seed: args.seed.wrapping_add(pi as u64), ..cfg };
        let obs = observed(&pair.votes, &pair_cfg)?;
        let revealed = match &prior {
            Prior::InDist(ratio) => reveal(&pair.human, *ratio, pair_cfg.seed),
            _ => vec![None; pair.human.len()],
        };
        let ood_counts = ood.as_ref().map(|o| ood_confusion(o, pair));
        let label = format!("{} vs {}", pair.g0, pair.g1);
        let outcome = match method {
            Method::Observed => Outcome::Estimate(obs.clone()),
            Method::Bwrs => {
                let acc = match &ood_counts {
                    Some(c) => c.clone(),
                    None => pair.votes.confusion(&revealed)?,
                };
                bwrs(&pair.votes, &acc, &pair_cfg)?
            }
            Method::BayesianDs => {
                let priors: Vec<AccuracyPrior> = match &ood_counts {
                    Some(c) => c
                        .iter()
                        .map(|&c| if c.total() > 0 { AccuracyPrior::from_counts(c) } else { AccuracyPrior::weak() })
                        .collect(),
                    None => vec![AccuracyPrior::weak(); pair.votes.evaluators().len()],
                };
                let bar = ProgressBar::new((cfg.burn_in + cfg.draws) as u64).with_style(
                    ProgressStyle::with_template("{msg} {bar:30} {pos}/{len} sweeps ({per_sec}, ETA {eta})")
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                );
                bar.set_message(label.clone());
                let out = bayesian_dawid_skene(&pair.votes, &revealed, &priors, &pair_cfg, &mut |done, _| {
                    bar.set_position(done as u64)
                })?;
                bar.finish_and_clear();
                out
            }
        };
        let obs_err = human_rate.map(|h| (obs.mean - h).abs());
        let (estimate, interval, why, excluded) = match &outcome {
            Outcome::Estimate(e) => (Some(e.mean), Some([e.lo, e.hi]), None, e.excluded.clone()),
            Outcome::Unidentifiable(why) => (None, None, Some(why.clone()), vec![]),
        };
        let err = estimate.zip(human_rate).map(|(e, h)| (e - h).abs());
        errs.extend(err);
        obs_errs.extend(obs_err);
        let fmt = |x: Option<f64>| x.map_or("-".to_owned(), |x| format!("{x:.3}"));
        let _ = writeln!(
            table,
            "{:<44} {:>5} {:>6} {:>8.3} {:>10} {:>16} {:>8} {:>8}",
            truncate(&label, 44),
            pair.votes.n_items(),
            fmt(human_rate),
            obs.mean,
            estimate.map_or("unidentif.".to_owned(), |e| format!("{e:.3}")),
            interval.map_or("-".to_owned(), |[l, h]| format!("[{l:.3}, {h:.3}]")),
            fmt(err),
            fmt(obs_err),
        );
        results.push(json!({
            "generator_0": pair.g0,
            "generator_1": pair.g1,
            "n_comparisons": pair.votes.n_items(),
            "evaluators": pair.votes.evaluators(),
            "n_human_labels": n_labeled,
            "n_revealed_labels": revealed.iter().flatten().count(),
            // What the revealed labels alone say, the baseline any calibration must beat.
            "revealed_win_rate": rate(&revealed),
            "human_win_rate": human_rate,
            "observed": obs.mean,
            "observed_interval": [obs.lo, obs.hi],
            "observed_abs_error": obs_err,
            "estimate": estimate,
            "interval": interval,
            "abs_error": err,
            "unidentifiable": why,
            "excluded_evaluators": excluded,
        }));
    }
    let why = "no evaluator votes (only human rows or ties)";
    for u in &unvoted {
        let human_rate = rate(&u.human);
        let _ = writeln!(
            table,
            "{:<44} {:>5} {:>6} {:>8} {:>10} {:>16} {:>8} {:>8}",
            truncate(&format!("{} vs {}", u.g0, u.g1), 44),
            u.n_comparisons,
            human_rate.map_or("-".to_owned(), |x| format!("{x:.3}")),
            "-",
            "unidentif.",
            "-",
            "-",
            "-",
        );
        results.push(json!({
            "generator_0": u.g0,
            "generator_1": u.g1,
            "n_comparisons": u.n_comparisons,
            "evaluators": [],
            "n_human_labels": u.human.iter().flatten().count(),
            "human_win_rate": human_rate,
            "observed": null,
            "estimate": null,
            "interval": null,
            "unidentifiable": why,
        }));
    }
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let doc = json!({
        "method": args.method,
        "prior": args.prior,
        "seed": args.seed,
        "level": args.level,
        "n_pairs": pairs.len() + unvoted.len(),
        "mean_abs_error": mean(&errs),
        "observed_mean_abs_error": mean(&obs_errs),
        "pairs": results,
    });
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let path = args.out.join("winrate.json");
    write_atomic(&path, serde_json::to_string_pretty(&doc)?.as_bytes())?;
    print!("{table}");
    if let (Some(e), Some(o)) = (mean(&errs), mean(&obs_errs)) {
        println!("mean |error| over {} pairs with human labels: {} {e:.4}, observed {o:.4}", errs.len(), args.method);
    }
    println!("wrote {}", path.display());
    Ok(())
}

/// Share of the given labels that prefer G1; `None` without labels.
fn rate(labels: &[Option<bool>]) -> Option<f64> {
    let n = labels.iter().flatten().count();
    (n > 0).then(|| labels.iter().flatten().filter(|&&h| h).count() as f64 / n as f64)
}

fn parse_prior(s: &str) -> Result<Prior> {
    if s == "none" {
        return Ok(Prior::None);
    }
    if let Some(r) = s.strip_prefix("in-dist:") {
        let ratio: f64 = r.parse().with_context(|| format!("--prior: `{r}` is not a number"))?;
        if !(ratio > 0.0 && ratio <= 1.0) {
            bail!("--prior: in-distribution ratio {ratio} is not in (0, 1]");
        }
        return Ok(Prior::InDist(ratio));
    }
    if let Some(f) = s.strip_prefix("ood:") {
        return Ok(Prior::Ood(PathBuf::from(f)));
    }
    bail!("--prior: `{s}` is not none, in-dist:RATIO or ood:FILE")
}

/// Groups rows into generator pairs (in order of first appearance). Evaluators are
/// sorted by name; an evaluator without a single vote on a pair is left out of it.
fn group(rows: &[ComparisonRow], human: &str) -> Result<(Vec<Pair>, Vec<Unvoted>)> {
    let mut order: Vec<(String, String)> = Vec::new();
    let mut by_pair: HashMap<(String, String), Vec<&ComparisonRow>> = HashMap::new();
    for r in rows {
        let key = (r.generator_0.clone(), r.generator_1.clone());
        if !by_pair.contains_key(&key) {
            order.push(key.clone());
        }
        by_pair.entry(key).or_default().push(r);
    }
    let (mut pairs, mut unvoted) = (Vec::new(), Vec::new());
    for key in order {
        let rows = &by_pair[&key];
        let mut items: Vec<&str> = Vec::new();
        let mut item_ix: HashMap<&str, usize> = HashMap::new();
        for r in rows {
            item_ix.entry(&r.comparison_id).or_insert_with(|| {
                items.push(&r.comparison_id);
                items.len() - 1
            });
        }
        let mut names: Vec<&str> = rows.iter().map(|r| r.evaluator.as_str()).filter(|e| *e != human).collect();
        names.sort_unstable();
        names.dedup();
        let mut votes = vec![vec![None; names.len()]; items.len()];
        let mut labels = vec![None; items.len()];
        for r in rows {
            let i = item_ix[r.comparison_id.as_str()];
            if r.evaluator == human {
                labels[i] = r.vote;
            } else if let Ok(e) = names.binary_search(&r.evaluator.as_str()) {
                votes[i][e] = r.vote;
            }
        }
        let keep: Vec<usize> = (0..names.len()).filter(|&e| votes.iter().any(|row| row[e].is_some())).collect();
        if keep.is_empty() {
            unvoted.push(Unvoted { g0: key.0, g1: key.1, n_comparisons: items.len(), human: labels });
            continue;
        }
        let votes = votes.into_iter().map(|row| keep.iter().map(|&e| row[e]).collect()).collect();
        let evaluators = keep.iter().map(|&e| names[e].to_owned()).collect();
        let votes =
            PairVotes::new(evaluators, votes).with_context(|| format!("generator pair {} vs {}", key.0, key.1))?;
        pairs.push(Pair { g0: key.0, g1: key.1, votes, human: labels });
    }
    Ok((pairs, unvoted))
}

/// Reveals round(ratio x labeled) of the pair's human labels, chosen with `seed`.
fn reveal(human: &[Option<bool>], ratio: f64, seed: u64) -> Vec<Option<bool>> {
    let mut labeled: Vec<usize> = (0..human.len()).filter(|&i| human[i].is_some()).collect();
    labeled.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    let k = (ratio * labeled.len() as f64).round() as usize;
    let mut out = vec![None; human.len()];
    for &i in &labeled[..k] {
        out[i] = human[i];
    }
    out
}

/// Each of `pair`'s evaluators' agreement with human labels on the other pairs of the
/// OOD set (matched by evaluator name; the same two generators in either order are
/// left out).
fn ood_confusion(ood: &[Pair], pair: &Pair) -> Vec<Confusion> {
    pair.votes
        .evaluators()
        .iter()
        .map(|name| {
            ood.iter()
                .filter(|o| !same_generators(o, pair))
                .filter_map(|o| {
                    let e = o.votes.evaluators().iter().position(|n| n == name)?;
                    let c = o.votes.confusion(&o.human).ok()?;
                    Some(c[e])
                })
                .fold(Confusion::default(), Confusion::merge)
        })
        .collect()
}

fn same_generators(a: &Pair, b: &Pair) -> bool {
    (a.g0 == b.g0 && a.g1 == b.g1) || (a.g0 == b.g1 && a.g1 == b.g0)
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_owned() } else { s.chars().take(n - 1).chain(['…']).collect() }
}
