//! Win rate of one generator over another from LLM evaluators' votes, calibrated for the
//! evaluators' errors: the observed rate, Bayesian Win-Rate Sampling (BWRS) and Bayesian
//! Dawid-Skene by Gibbs sampling (Gao et al. 2024, "Bayesian Calibration of Win Rate
//! Estimation with LLM Evaluators").
//!
//! Plain data in, estimates out; no files. Conventions: a vote or human label is `true`
//! when generator G1's output is preferred; p = P(human prefers G1) is the win rate;
//! an evaluator's accuracies are q0 = P(vote G0 | human G0) and q1 = P(vote G1 | human G1),
//! so its observed rate is k = p q1 + (1 - p)(1 - q0) and p = (k + q0 - 1) / (q0 + q1 - 1).
//!
//! Invariant: a method answers `Outcome::Unidentifiable` (with the reason) instead of a
//! number when the data cannot determine p: every evaluator's q0 + q1 - 1 is probably
//! near zero (BWRS), or, without human labels or an informative accuracy prior, the
//! evaluators agree no more than chance (Bayesian Dawid-Skene).

mod bwrs;
mod gibbs;
mod pairs;

pub use bwrs::{MIN_SLOPE, bwrs};
pub use gibbs::{AccuracyPrior, bayesian_dawid_skene};
pub use jury_core::Comparison;
pub use pairs::{PairEstimate, PairProgress, Prior, StudyOptions, WinRateMethod, WinRateStudy, study};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Beta, Distribution};

/// What can be wrong with win-rate inputs or settings.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WinRateError {
    #[error("no evaluators")]
    NoEvaluators,
    #[error("no comparisons")]
    NoItems,
    #[error("comparison {item}: {got} votes, expected one (or none) per evaluator: {expected}")]
    Ragged { item: usize, got: usize, expected: usize },
    #[error("{what}: {got} entries, expected one per {per}: {expected}")]
    Length { what: &'static str, got: usize, expected: usize, per: &'static str },
    #[error("evaluator `{0}` has no votes")]
    NoVotes(String),
    #[error("interval level {0} is not in (0, 1)")]
    BadLevel(f64),
    #[error("sampling needs at least one draw")]
    NoDraws,
    #[error(
        "--method bwrs needs evaluator accuracies from human labels: give --prior in-dist:RATIO or ood:FILE \
         (without them q0 and q1 are unknown and p = (k + q0 - 1) / (q0 + q1 - 1) is not determined)"
    )]
    BwrsNeedsPrior,
    #[error("--human `{name}`: no rows of that evaluator (evaluators there: {known})")]
    UnknownHuman { name: String, known: String },
    #[error("--evaluators: `{0}` has no rows")]
    UnknownEvaluator(String),
    #[error("--prior ood: the prior's comparisons were not given")]
    NoOodRows,
    #[error("generator pair {pair}: {source}")]
    Pair { pair: String, source: Box<WinRateError> },
}

/// The evaluators' votes on the comparisons of one generator pair.
#[derive(Debug, Clone, PartialEq)]
pub struct PairVotes {
    evaluators: Vec<String>,
    /// `votes[item][evaluator]`; `None` for no usable verdict (tie, parse failure).
    votes: Vec<Vec<Option<bool>>>,
}

impl PairVotes {
    /// Validates the table: at least one evaluator and comparison, one (possibly missing)
    /// vote per evaluator and comparison, and every evaluator voting at least once.
    pub fn new(evaluators: Vec<String>, votes: Vec<Vec<Option<bool>>>) -> Result<Self, WinRateError> {
        if evaluators.is_empty() {
            return Err(WinRateError::NoEvaluators);
        }
        if votes.is_empty() {
            return Err(WinRateError::NoItems);
        }
        for (item, row) in votes.iter().enumerate() {
            if row.len() != evaluators.len() {
                return Err(WinRateError::Ragged { item, got: row.len(), expected: evaluators.len() });
            }
        }
        for (e, name) in evaluators.iter().enumerate() {
            if votes.iter().all(|row| row[e].is_none()) {
                return Err(WinRateError::NoVotes(name.clone()));
            }
        }
        Ok(Self { evaluators, votes })
    }

    pub fn evaluators(&self) -> &[String] {
        &self.evaluators
    }

    pub fn n_items(&self) -> usize {
        self.votes.len()
    }

    pub fn vote(&self, item: usize, evaluator: usize) -> Option<bool> {
        self.votes[item][evaluator]
    }

    /// (votes for G0, votes for G1) of one evaluator.
    pub fn counts(&self, evaluator: usize) -> (u32, u32) {
        self.votes.iter().fold((0, 0), |(n0, n1), row| match row[evaluator] {
            Some(true) => (n0, n1 + 1),
            Some(false) => (n0 + 1, n1),
            None => (n0, n1),
        })
    }

    /// Each evaluator's agreement with human labels, counted over the comparisons whose
    /// label is given (`human` is in item order).
    pub fn confusion(&self, human: &[Option<bool>]) -> Result<Vec<Confusion>, WinRateError> {
        check_len("human labels", human.len(), self.n_items(), "comparison")?;
        let mut out = vec![Confusion::default(); self.evaluators.len()];
        for (row, h) in self.votes.iter().zip(human) {
            let Some(h) = *h else { continue };
            for (c, v) in out.iter_mut().zip(row) {
                if let Some(v) = *v {
                    c.add(h, v);
                }
            }
        }
        Ok(out)
    }
}

/// Counts of (human label, evaluator vote) on human-labeled comparisons: the evidence
/// about an evaluator's q0 and q1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Confusion {
    /// Human G0, vote G0 (correct).
    pub h0_v0: u32,
    /// Human G0, vote G1.
    pub h0_v1: u32,
    /// Human G1, vote G0.
    pub h1_v0: u32,
    /// Human G1, vote G1 (correct).
    pub h1_v1: u32,
}

impl Confusion {
    pub fn add(&mut self, human: bool, vote: bool) {
        match (human, vote) {
            (false, false) => self.h0_v0 += 1,
            (false, true) => self.h0_v1 += 1,
            (true, false) => self.h1_v0 += 1,
            (true, true) => self.h1_v1 += 1,
        }
    }

    pub fn merge(self, o: Self) -> Self {
        Self {
            h0_v0: self.h0_v0 + o.h0_v0,
            h0_v1: self.h0_v1 + o.h0_v1,
            h1_v0: self.h1_v0 + o.h1_v0,
            h1_v1: self.h1_v1 + o.h1_v1,
        }
    }

    pub fn total(&self) -> u32 {
        self.h0_v0 + self.h0_v1 + self.h1_v0 + self.h1_v1
    }
}

/// Settings shared by the samplers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingConfig {
    /// Monte-Carlo draws per evaluator (BWRS) or kept Gibbs sweeps (Bayesian Dawid-Skene).
    pub draws: usize,
    /// Gibbs sweeps discarded before keeping any.
    pub burn_in: usize,
    /// Central credible interval level, e.g. 0.95.
    pub level: f64,
    pub seed: u64,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        Self { draws: 4000, burn_in: 500, level: 0.95, seed: 0 }
    }
}

impl SamplingConfig {
    pub(crate) fn check(&self) -> Result<(), WinRateError> {
        if !(self.level > 0.0 && self.level < 1.0) {
            return Err(WinRateError::BadLevel(self.level));
        }
        if self.draws == 0 {
            return Err(WinRateError::NoDraws);
        }
        Ok(())
    }

    fn rng(&self) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(self.seed)
    }
}

/// A win-rate estimate: posterior mean and central credible interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    pub mean: f64,
    pub lo: f64,
    pub hi: f64,
    /// Draws behind the estimate (BWRS keeps only draws that map into (0, 1)).
    pub draws: usize,
    /// Evaluators left out because their q0 + q1 - 1 could not be told from zero.
    pub excluded: Vec<String>,
}

/// A number, or the reason there is none.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Estimate(Estimate),
    Unidentifiable(String),
}

impl Outcome {
    pub fn estimate(&self) -> Option<&Estimate> {
        match self {
            Outcome::Estimate(e) => Some(e),
            Outcome::Unidentifiable(_) => None,
        }
    }
}

/// The uncalibrated win rate leaderboards report: the mean over evaluators of each
/// one's share of votes for G1. The interval comes from each rate's Beta(1 + votes for
/// G1, 1 + votes for G0) posterior, averaged draw by draw.
pub fn observed(votes: &PairVotes, cfg: &SamplingConfig) -> Result<Estimate, WinRateError> {
    cfg.check()?;
    let mut rng = cfg.rng();
    let counts: Vec<(u32, u32)> = (0..votes.evaluators().len()).map(|e| votes.counts(e)).collect();
    let posteriors: Vec<Beta<f64>> =
        counts.iter().map(|&(n0, n1)| beta(1.0 + f64::from(n1), 1.0 + f64::from(n0))).collect();
    // Every evaluator voted at least once (`PairVotes::new`), so no rate divides by 0.
    let mean = counts.iter().map(|&(n0, n1)| f64::from(n1) / f64::from(n0 + n1)).sum::<f64>() / counts.len() as f64;
    let mut draws: Vec<f64> = (0..cfg.draws)
        .map(|_| posteriors.iter().map(|b| b.sample(&mut rng)).sum::<f64>() / posteriors.len() as f64)
        .collect();
    let (lo, hi) = interval(&mut draws, cfg.level);
    Ok(Estimate { mean, lo, hi, draws: cfg.draws, excluded: vec![] })
}

/// Beta(a, b) for a, b >= 1 (always valid parameters here, so the constructor cannot fail).
pub(crate) fn beta(a: f64, b: f64) -> Beta<f64> {
    Beta::new(a, b).unwrap_or_else(|_| unreachable!("Beta({a}, {b}) with parameters >= 1"))
}

/// Central interval of the draws at `level` (sorts them in place).
pub(crate) fn interval(draws: &mut [f64], level: f64) -> (f64, f64) {
    draws.sort_by(f64::total_cmp);
    let q = |f: f64| {
        let pos = f * (draws.len() - 1) as f64;
        let (i, frac) = (pos.floor() as usize, pos - pos.floor());
        let next = draws[(i + 1).min(draws.len() - 1)];
        draws[i] + frac * (next - draws[i])
    };
    let tail = (1.0 - level) / 2.0;
    (q(tail), q(1.0 - tail))
}

pub(crate) fn check_len(
    what: &'static str,
    got: usize,
    expected: usize,
    per: &'static str,
) -> Result<(), WinRateError> {
    if got == expected { Ok(()) } else { Err(WinRateError::Length { what, got, expected, per }) }
}

#[cfg(test)]
pub(crate) mod testutil {
    use super::PairVotes;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Comparisons with true win rate `p` judged by evaluators with accuracies (q0, q1);
    /// returns the votes and every comparison's human label.
    pub(crate) fn simulate(p: f64, evaluators: &[(f64, f64)], n: usize, seed: u64) -> (PairVotes, Vec<bool>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let human: Vec<bool> = (0..n).map(|_| rng.random_bool(p)).collect();
        let votes = human
            .iter()
            .map(|&h| {
                evaluators
                    .iter()
                    .map(|&(q0, q1)| Some(if h { rng.random_bool(q1) } else { !rng.random_bool(q0) }))
                    .collect()
            })
            .collect();
        let names = (0..evaluators.len()).map(|e| format!("e{e}")).collect();
        (PairVotes::new(names, votes).unwrap(), human)
    }

    /// The first `ratio` share of the labels revealed, the rest hidden (items are
    /// exchangeable in a simulation, so the first ones are a random subset).
    pub(crate) fn reveal(human: &[bool], ratio: f64) -> Vec<Option<bool>> {
        let k = (ratio * human.len() as f64).round() as usize;
        human.iter().enumerate().map(|(i, &h)| (i < k).then_some(h)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::simulate;
    use super::*;

    #[test]
    fn observed_rate_is_biased_the_way_the_formula_says() {
        // q0 = 0.9, q1 = 0.6, p = 0.3: k = 0.3 * 0.6 + 0.7 * 0.1 = 0.25.
        let (votes, _) = simulate(0.3, &[(0.9, 0.6)], 20_000, 1);
        let est = observed(&votes, &SamplingConfig::default()).unwrap();
        assert!((est.mean - 0.25).abs() < 0.01, "{est:?}");
        assert!(est.lo < est.mean && est.mean < est.hi && est.hi - est.lo < 0.02);
    }

    #[test]
    fn tables_are_validated() {
        assert_eq!(PairVotes::new(vec![], vec![vec![]]), Err(WinRateError::NoEvaluators));
        assert_eq!(PairVotes::new(vec!["a".into()], vec![]), Err(WinRateError::NoItems));
        assert!(matches!(
            PairVotes::new(vec!["a".into()], vec![vec![Some(true), None]]),
            Err(WinRateError::Ragged { item: 0, got: 2, expected: 1 })
        ));
        assert_eq!(PairVotes::new(vec!["a".into()], vec![vec![None]]), Err(WinRateError::NoVotes("a".into())));
    }

    #[test]
    fn confusion_counts_only_labeled_comparisons() {
        let v = PairVotes::new(vec!["a".into()], vec![vec![Some(true)], vec![Some(false)], vec![Some(true)]]).unwrap();
        let c = v.confusion(&[Some(true), Some(true), None]).unwrap();
        assert_eq!(c[0], Confusion { h0_v0: 0, h0_v1: 0, h1_v0: 1, h1_v1: 1 });
        assert!(v.confusion(&[None]).is_err());
    }
}
