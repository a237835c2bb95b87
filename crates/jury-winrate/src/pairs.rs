//! A win-rate study over a table of comparisons: rows grouped into generator pairs, the
//! human labels split into the reference (all of a pair's labels) and what the estimator
//! may see (a revealed share, or other pairs' labels as an out-of-distribution prior),
//! one estimate per pair and the mean error against the reference.
//!
//! Invariant: the two roles of human labels never mix. The reference win rate uses all
//! of a pair's labels; only the revealed share (drawn with the seed) or labels of other
//! generator pairs reach the estimators.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use jury_core::Comparison;

use crate::{
    AccuracyPrior, Confusion, Outcome, PairVotes, SamplingConfig, WinRateError, bayesian_dawid_skene, bwrs, observed,
};

/// How a pair's win rate is estimated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum WinRateMethod {
    /// The evaluators' pooled vote share, uncalibrated.
    Observed,
    /// Bayesian Win-Rate Sampling: each evaluator's rate corrected by its accuracies.
    Bwrs,
    /// Bayesian Dawid-Skene by Gibbs sampling.
    BayesianDs,
}

impl WinRateMethod {
    pub fn name(self) -> &'static str {
        match self {
            WinRateMethod::Observed => "observed",
            WinRateMethod::Bwrs => "bwrs",
            WinRateMethod::BayesianDs => "bayesian-ds",
        }
    }
}

/// What the estimators know of the evaluators' accuracies beyond their votes.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum Prior {
    /// Nothing: votes alone.
    None,
    /// That share of each pair's human labels is revealed to the estimator.
    InDist(f64),
    /// Human-labeled comparisons of other generator pairs (a pair also present there is
    /// left out of its own prior).
    Ood(PathBuf),
}

impl FromStr for Prior {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "none" {
            return Ok(Prior::None);
        }
        if let Some(r) = s.strip_prefix("in-dist:") {
            let ratio: f64 = r.parse().map_err(|_| format!("`{r}` is not a number"))?;
            if !(ratio > 0.0 && ratio <= 1.0) {
                return Err(format!("in-distribution ratio {ratio} is not in (0, 1]"));
            }
            return Ok(Prior::InDist(ratio));
        }
        if let Some(f) = s.strip_prefix("ood:") {
            return Ok(Prior::Ood(PathBuf::from(f)));
        }
        Err(format!("`{s}` is not none, in-dist:RATIO or ood:FILE"))
    }
}

impl TryFrom<String> for Prior {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl fmt::Display for Prior {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Prior::None => f.write_str("none"),
            Prior::InDist(r) => write!(f, "in-dist:{r}"),
            Prior::Ood(p) => write!(f, "ood:{}", p.display()),
        }
    }
}

/// The options of a study, as flags (`jury winrate`) or YAML.
#[derive(Debug, Clone, clap::Args, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct StudyOptions {
    /// How each pair's win rate is estimated.
    #[arg(long, value_enum, default_value = "bayesian-ds")]
    #[serde(default = "default_method")]
    pub method: WinRateMethod,
    /// none, in-dist:RATIO (that share of each pair's human labels is revealed to the
    /// estimator) or ood:FILE (human-labeled comparisons of other generator pairs; a pair
    /// also present in FILE is left out of its own prior).
    #[arg(long, default_value = "none")]
    #[serde(default = "default_prior")]
    pub prior: Prior,
    /// Evaluator name of the human-label rows (default `human`; a name given here must
    /// have rows).
    #[arg(long)]
    #[serde(default)]
    pub human: Option<String>,
    /// Only these evaluators (comma-separated names); all by default.
    #[arg(long, value_delimiter = ',')]
    #[serde(default)]
    pub evaluators: Option<Vec<String>>,
    /// Seed of the revealed labels and of the samplers.
    #[arg(long, default_value_t = 0)]
    #[serde(default)]
    pub seed: u64,
    /// Monte-Carlo draws (BWRS, per evaluator) or kept Gibbs sweeps (bayesian-ds).
    #[arg(long, default_value_t = 4000)]
    #[serde(default = "default_draws")]
    pub draws: usize,
    /// Gibbs sweeps discarded first (bayesian-ds).
    #[arg(long, default_value_t = 500)]
    #[serde(default = "default_burn_in")]
    pub burn_in: usize,
    /// Credible interval level.
    #[arg(long, default_value_t = 0.95)]
    #[serde(default = "default_level")]
    pub level: f64,
}

fn default_method() -> WinRateMethod {
    WinRateMethod::BayesianDs
}
fn default_prior() -> Prior {
    Prior::None
}
fn default_draws() -> usize {
    4000
}
fn default_burn_in() -> usize {
    500
}
fn default_level() -> f64 {
    0.95
}

impl StudyOptions {
    /// Checks the options on their own (no file is read).
    pub fn check(&self) -> Result<(), WinRateError> {
        if self.method == WinRateMethod::Bwrs && self.prior == Prior::None {
            return Err(WinRateError::BwrsNeedsPrior);
        }
        self.sampling().check()
    }

    fn sampling(&self) -> SamplingConfig {
        SamplingConfig { draws: self.draws, burn_in: self.burn_in, level: self.level, seed: self.seed }
    }

    /// The evaluator name of the human-label rows.
    pub fn human(&self) -> &str {
        self.human.as_deref().unwrap_or("human")
    }

    /// The rows a study reads: all, or the human rows and those of the chosen evaluators.
    fn keep(&self, rows: &[Comparison]) -> Vec<Comparison> {
        match &self.evaluators {
            Some(k) => {
                rows.iter().filter(|r| r.evaluator == self.human() || k.contains(&r.evaluator)).cloned().collect()
            }
            None => rows.to_vec(),
        }
    }
}

/// One generator pair's result (a pair without a single evaluator vote has no
/// estimate and says why).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PairEstimate {
    pub generator_0: String,
    pub generator_1: String,
    pub n_comparisons: usize,
    pub evaluators: Vec<String>,
    pub n_human_labels: usize,
    pub n_revealed_labels: usize,
    /// What the revealed labels alone say, the baseline any calibration must beat.
    pub revealed_win_rate: Option<f64>,
    /// All of the pair's human labels: the reference the estimate is scored against.
    pub human_win_rate: Option<f64>,
    pub observed: Option<f64>,
    pub observed_interval: Option<[f64; 2]>,
    pub observed_abs_error: Option<f64>,
    pub estimate: Option<f64>,
    pub interval: Option<[f64; 2]>,
    pub abs_error: Option<f64>,
    pub unidentifiable: Option<String>,
    pub excluded_evaluators: Vec<String>,
}

/// The result of [`study`], and winrate.json's record: `jury winrate` writes it, the
/// report reads it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WinRateStudy {
    pub method: String,
    pub prior: String,
    pub seed: u64,
    pub level: f64,
    pub n_pairs: usize,
    /// Mean |estimate - human rate| over the pairs with both.
    pub mean_abs_error: Option<f64>,
    /// The same for the uncalibrated observed rate.
    pub observed_mean_abs_error: Option<f64>,
    pub pairs: Vec<PairEstimate>,
}

/// Progress of one pair's sampler: (pair as "G0 vs G1", sweeps done, sweeps in all).
pub type PairProgress<'a> = &'a mut dyn FnMut(&str, usize, usize);

/// Estimates every generator pair's win rate in `rows` (pairs in order of first
/// appearance, those without a single evaluator vote last). `ood` holds the rows of the
/// prior's file when `options.prior` is [`Prior::Ood`].
pub fn study(
    rows: &[Comparison],
    ood: Option<&[Comparison]>,
    options: &StudyOptions,
    progress: PairProgress<'_>,
) -> Result<WinRateStudy, WinRateError> {
    options.check()?;
    let human = options.human();
    let rows = options.keep(rows);
    if let Some(name) = &options.human
        && !rows.iter().any(|r| &r.evaluator == name)
    {
        let mut known: Vec<String> = rows.iter().map(|r| r.evaluator.clone()).collect();
        known.sort_unstable();
        known.dedup();
        return Err(WinRateError::UnknownHuman { name: name.clone(), known: known.join(", ") });
    }
    if let Some(missing) = options.evaluators.iter().flatten().find(|name| !rows.iter().any(|r| &r.evaluator == *name))
    {
        return Err(WinRateError::UnknownEvaluator(missing.clone()));
    }
    let (pairs, unvoted) = group(&rows, human)?;
    let ood = match (&options.prior, ood) {
        (Prior::Ood(_), Some(o)) => Some(group(&options.keep(o), human)?.0),
        (Prior::Ood(_), None) => return Err(WinRateError::NoOodRows),
        _ => None,
    };
    let mut out = Vec::with_capacity(pairs.len() + unvoted.len());
    for (pi, pair) in pairs.iter().enumerate() {
        let cfg = SamplingConfig { seed: options.seed.wrapping_add(pi as u64), ..options.sampling() };
        out.push(estimate_pair(pair, ood.as_deref(), options, &cfg, progress)?);
    }
    out.extend(unvoted.into_iter().map(|u| PairEstimate {
        generator_0: u.g0,
        generator_1: u.g1,
        n_comparisons: u.n_comparisons,
        evaluators: vec![],
        n_human_labels: u.human.iter().flatten().count(),
        n_revealed_labels: 0,
        revealed_win_rate: None,
        human_win_rate: rate(&u.human),
        observed: None,
        observed_interval: None,
        observed_abs_error: None,
        estimate: None,
        interval: None,
        abs_error: None,
        unidentifiable: Some("no evaluator votes (only human rows or ties)".into()),
        excluded_evaluators: vec![],
    }));
    let mean = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    Ok(WinRateStudy {
        method: options.method.name().to_owned(),
        prior: options.prior.to_string(),
        seed: options.seed,
        level: options.level,
        n_pairs: out.len(),
        mean_abs_error: mean(out.iter().filter_map(|p| p.abs_error).collect()),
        observed_mean_abs_error: mean(out.iter().filter_map(|p| p.observed_abs_error).collect()),
        pairs: out,
    })
}

/// One voted pair's estimate.
fn estimate_pair(
    pair: &Pair,
    ood: Option<&[Pair]>,
    options: &StudyOptions,
    cfg: &SamplingConfig,
    progress: PairProgress<'_>,
) -> Result<PairEstimate, WinRateError> {
    let human_rate = rate(&pair.human);
    let obs = observed(&pair.votes, cfg)?;
    let revealed = match options.prior {
        Prior::InDist(ratio) => reveal(&pair.human, ratio, cfg.seed),
        _ => vec![None; pair.human.len()],
    };
    let ood_counts = ood.map(|o| ood_confusion(o, pair));
    let label = format!("{} vs {}", pair.g0, pair.g1);
    let outcome = match options.method {
        WinRateMethod::Observed => Outcome::Estimate(obs.clone()),
        WinRateMethod::Bwrs => {
            let acc = match &ood_counts {
                Some(c) => c.clone(),
                None => pair.votes.confusion(&revealed)?,
            };
            bwrs(&pair.votes, &acc, cfg)?
        }
        WinRateMethod::BayesianDs => {
            let priors: Vec<AccuracyPrior> = match &ood_counts {
                Some(c) => c
                    .iter()
                    .map(|&c| if c.total() > 0 { AccuracyPrior::from_counts(c) } else { AccuracyPrior::weak() })
                    .collect(),
                None => vec![AccuracyPrior::weak(); pair.votes.evaluators().len()],
            };
            let total = cfg.burn_in + cfg.draws;
            bayesian_dawid_skene(&pair.votes, &revealed, &priors, cfg, &mut |done, _| progress(&label, done, total))?
        }
    };
    let (estimate, interval, why, excluded) = match outcome {
        Outcome::Estimate(e) => (Some(e.mean), Some([e.lo, e.hi]), None, e.excluded),
        Outcome::Unidentifiable(why) => (None, None, Some(why), vec![]),
    };
    Ok(PairEstimate {
        generator_0: pair.g0.clone(),
        generator_1: pair.g1.clone(),
        n_comparisons: pair.votes.n_items(),
        evaluators: pair.votes.evaluators().to_vec(),
        n_human_labels: pair.human.iter().flatten().count(),
        n_revealed_labels: revealed.iter().flatten().count(),
        revealed_win_rate: rate(&revealed),
        human_win_rate: human_rate,
        observed: Some(obs.mean),
        observed_interval: Some([obs.lo, obs.hi]),
        observed_abs_error: human_rate.map(|h| (obs.mean - h).abs()),
        estimate,
        interval,
        abs_error: estimate.zip(human_rate).map(|(e, h)| (e - h).abs()),
        unidentifiable: why,
        excluded_evaluators: excluded,
    })
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

/// Share of the given labels that prefer G1; `None` without labels.
fn rate(labels: &[Option<bool>]) -> Option<f64> {
    let n = labels.iter().flatten().count();
    (n > 0).then(|| labels.iter().flatten().filter(|&&h| h).count() as f64 / n as f64)
}

/// Groups rows into generator pairs (in order of first appearance). Evaluators are
/// sorted by name; an evaluator without a single vote on a pair is left out of it.
fn group(rows: &[Comparison], human: &str) -> Result<(Vec<Pair>, Vec<Unvoted>), WinRateError> {
    let mut order: Vec<(&str, &str)> = Vec::new();
    let mut by_pair: HashMap<(&str, &str), Vec<&Comparison>> = HashMap::new();
    for r in rows {
        let key = (r.generator_0.as_str(), r.generator_1.as_str());
        by_pair
            .entry(key)
            .or_insert_with(|| {
                order.push(key);
                Vec::new()
            })
            .push(r);
    }
    let (mut pairs, mut unvoted) = (Vec::new(), Vec::new());
    for key in order {
        let rows = &by_pair[&key];
        let (g0, g1) = (key.0.to_owned(), key.1.to_owned());
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
            unvoted.push(Unvoted { g0, g1, n_comparisons: items.len(), human: labels });
            continue;
        }
        let votes = votes.into_iter().map(|row| keep.iter().map(|&e| row[e]).collect()).collect();
        let evaluators = keep.iter().map(|&e| names[e].to_owned()).collect();
        let votes = PairVotes::new(evaluators, votes)
            .map_err(|e| WinRateError::Pair { pair: format!("{g0} vs {g1}"), source: Box::new(e) })?;
        pairs.push(Pair { g0, g1, votes, human: labels });
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, g: (&str, &str), evaluator: &str, vote: Option<bool>) -> Comparison {
        Comparison {
            comparison_id: id.into(),
            generator_0: g.0.into(),
            generator_1: g.1.into(),
            evaluator: evaluator.into(),
            vote,
        }
    }

    fn options(method: WinRateMethod, prior: Prior) -> StudyOptions {
        StudyOptions { method, prior, human: None, evaluators: None, seed: 3, draws: 200, burn_in: 50, level: 0.9 }
    }

    /// Pairs keep their order of first appearance; a pair with only human rows is last,
    /// unidentifiable, and its human rate is still the reference.
    #[test]
    fn pairs_in_order_and_an_unvoted_pair_last() {
        let rows = vec![
            row("1", ("b", "c"), "human", Some(true)),
            row("2", ("a", "b"), "e1", Some(true)),
            row("2", ("a", "b"), "human", Some(true)),
            row("3", ("a", "b"), "e1", Some(false)),
            row("3", ("a", "b"), "human", Some(false)),
        ];
        let s = study(&rows, None, &options(WinRateMethod::Observed, Prior::None), &mut |_, _, _| {}).unwrap();
        assert_eq!(s.n_pairs, 2);
        assert_eq!((s.pairs[0].generator_0.as_str(), s.pairs[0].n_comparisons), ("a", 2));
        assert_eq!(s.pairs[0].human_win_rate, Some(0.5));
        assert_eq!(s.pairs[1].generator_0, "b");
        assert!(s.pairs[1].unidentifiable.as_deref().unwrap().contains("no evaluator votes"));
        assert_eq!(s.pairs[1].human_win_rate, Some(1.0));
        assert_eq!(s.mean_abs_error, s.observed_mean_abs_error, "observed: the estimate is the observed rate");
    }

    /// The revealed share is round(ratio x labeled) of each pair's labels, and the same
    /// for the same seed.
    #[test]
    fn in_distribution_reveals_a_share_of_the_labels() {
        let mut rows = Vec::new();
        for i in 0..10 {
            let id = i.to_string();
            rows.push(row(&id, ("a", "b"), "e1", Some(i % 3 == 0)));
            rows.push(row(&id, ("a", "b"), "human", Some(i % 2 == 0)));
        }
        let o = options(WinRateMethod::Bwrs, Prior::InDist(0.3));
        let s = study(&rows, None, &o, &mut |_, _, _| {}).unwrap();
        assert_eq!(s.pairs[0].n_revealed_labels, 3);
        assert_eq!(study(&rows, None, &o, &mut |_, _, _| {}).unwrap(), s);
    }

    #[test]
    fn options_are_checked_before_any_row_is_read() {
        assert_eq!(options(WinRateMethod::Bwrs, Prior::None).check(), Err(WinRateError::BwrsNeedsPrior));
        assert!("in-dist:0".parse::<Prior>().is_err());
        assert!("in-dist:x".parse::<Prior>().is_err());
        assert_eq!("ood:f.csv".parse::<Prior>(), Ok(Prior::Ood("f.csv".into())));
        let rows = vec![row("1", ("a", "b"), "e1", Some(true))];
        let mut o = options(WinRateMethod::Observed, Prior::None);
        o.human = Some("people".into());
        let e = study(&rows, None, &o, &mut |_, _, _| {}).unwrap_err();
        assert_eq!(e.to_string(), "--human `people`: no rows of that evaluator (evaluators there: e1)");
        let ood = options(WinRateMethod::BayesianDs, Prior::Ood("x.csv".into()));
        assert_eq!(study(&rows, None, &ood, &mut |_, _, _| {}).unwrap_err(), WinRateError::NoOodRows);
    }
}
