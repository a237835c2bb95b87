//! Dawid-Skene by EM: per-judge confusion matrices over hard votes, C classes.
//!
//! The default is crowd-kit 1.4.2's `DawidSkene`: start from majority-vote posteriors,
//! learn the class prior, stop on [`EmStop::Objective`] with tol 1e-5, at most 100
//! E-steps, every confusion count floored at 1e-10 before it is normalised. The SkillAggregation paper's
//! binary form (Algorithm 3: per-judge P(b=1|c=1) and P(b=0|c=0), uniform class prior,
//! stop when no parameter moves more than tol) is the C = 2 case with
//! [`ClassPrior::Uniform`] and [`EmStop::Params`].
//!
//! Numerical invariants: the E-step works in log space with a log-sum-exp per example;
//! confusion counts are floored at [`EPS`] (crowd-kit's clip), so no entry is 0 and every
//! log is finite. A class or judge row with no weight is uniform.

use jury_core::Judgments;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::votes::Votes;
use crate::{AggregateError, Aggregation, Aggregator, Diagnostics, TieBreak, finish};

/// How the class prior P(c) is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassPrior {
    /// Fixed at 1/C, as in the SkillAggregation paper.
    Uniform,
    /// Re-estimated at every M-step (classic Dawid-Skene, crowd-kit).
    Learned,
}

/// Confusion counts and the class prior are floored at this before their logs are
/// taken (crowd-kit's `_EPS`).
const EPS: f64 = 1e-10;

/// When EM stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmStop {
    /// crowd-kit's rule: after each E- and M-step, its objective per vote, the expected
    /// log-likelihood of votes and classes under the new parameters with the class
    /// prior's log counted once per vote, plus the posteriors' entropy, gains less than
    /// tol over the last iteration's. That objective is not EM's bound (the prior
    /// counts per vote, not per example), so it can fall, and EM then stops early.
    Objective,
    /// The SkillAggregation paper's rule: no confusion or prior entry moves more than
    /// tol in one iteration.
    Params,
}

/// Where EM starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmInit {
    /// First M-step from majority-vote fractions (deterministic; crowd-kit's choice).
    MajorityVote,
    /// The SkillAggregation paper's Algorithm 3: each judge's correct-class probabilities drawn uniformly
    /// in [0.5, 1) from this seed, the rest of each row spread evenly.
    Random { seed: u64 },
}

/// Settings of one Dawid-Skene run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DawidSkeneConfig {
    pub prior: ClassPrior,
    pub init: EmInit,
    /// Maximum number of E-steps.
    pub max_iter: usize,
    /// Converged when the `stop` rule's change is below this; `0.0` always runs
    /// `max_iter` iterations (crowd-kit's `tol=-inf`).
    pub tol: f64,
    pub stop: EmStop,
    /// Labels ties of the final posterior.
    pub ties: TieBreak,
}

impl Default for DawidSkeneConfig {
    fn default() -> Self {
        Self::crowd_kit()
    }
}

impl DawidSkeneConfig {
    /// crowd-kit 1.4.2's `DawidSkene()` (the default).
    pub fn crowd_kit() -> Self {
        Self {
            prior: ClassPrior::Learned,
            init: EmInit::MajorityVote,
            max_iter: 100,
            tol: 1e-5,
            stop: EmStop::Objective,
            ties: TieBreak::Positive,
        }
    }

    /// The SkillAggregation paper's binary form: uniform class prior, stop when no
    /// parameter moves more than 1e-6.
    pub fn paper() -> Self {
        Self { prior: ClassPrior::Uniform, tol: 1e-6, stop: EmStop::Params, ..Self::crowd_kit() }
    }
}

/// One judge's C x C confusion matrix: `get(true_class, vote)` = P(vote | true class).
/// Invariant: rows sum to 1.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfusionMatrix {
    n_classes: usize,
    values: Vec<f64>,
}

impl ConfusionMatrix {
    /// From row-major values; each row must be a probability vector.
    pub fn new(n_classes: usize, mut values: Vec<f64>) -> Result<Self, jury_core::CoreError> {
        if values.len() != n_classes * n_classes {
            return Err(jury_core::CoreError::Shape {
                what: "confusion matrix",
                expected: n_classes * n_classes,
                got: values.len(),
            });
        }
        for row in values.chunks_exact_mut(n_classes) {
            jury_core::normalize_prob_vector(row, n_classes)?;
        }
        Ok(Self { n_classes, values })
    }

    pub fn n_classes(&self) -> usize {
        self.n_classes
    }

    pub fn get(&self, true_class: usize, vote: usize) -> f64 {
        self.values[true_class * self.n_classes + vote]
    }

    pub fn row(&self, true_class: usize) -> &[f64] {
        &self.values[true_class * self.n_classes..(true_class + 1) * self.n_classes]
    }
}

/// The model's parameters: one confusion matrix per judge plus the class prior.
#[derive(Debug, Clone, PartialEq)]
pub struct DsParams {
    pub confusion: Vec<ConfusionMatrix>,
    pub class_prior: Vec<f64>,
}

/// What an EM run did.
#[derive(Debug, Clone, PartialEq)]
pub struct EmReport {
    /// E-steps run.
    pub iterations: usize,
    pub converged: bool,
    /// Observed-data log-likelihood at the parameters of each E-step; never decreases.
    pub log_likelihood: Vec<f64>,
    /// Final parameters, judges in the matrix's order.
    pub params: DsParams,
    /// Examples with no judgment (their posterior is the class prior).
    pub unjudged: usize,
    /// Examples whose final posterior had a tied top class.
    pub ties: usize,
}

/// Dawid-Skene aggregation.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DawidSkene {
    pub config: DawidSkeneConfig,
}

impl DawidSkene {
    pub fn new(config: DawidSkeneConfig) -> Self {
        Self { config }
    }

    /// Posteriors of every example under fixed parameters (one E-step). With the true
    /// parameters of a simulated jury this is the Bayes-optimal rule.
    pub fn posteriors_given(params: &DsParams, j: &Judgments) -> Result<Aggregation, AggregateError> {
        check_params(params, j)?;
        let votes = Votes::new(j);
        let values = votes.expand(&e_step(&votes, &Flat::of(params)).0);
        let (labels, ties) = TieBreak::Negative.label_by_sides(&values, j);
        finish("ds", j.n_classes(), values, labels, Diagnostics::Counting { ties, unjudged: 0 })
    }

    fn random_params(&self, seed: u64, c: usize, k: usize) -> DsParams {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let confusion = (0..k)
            .map(|_| {
                let mut values = vec![0.0; c * c];
                for t in 0..c {
                    let diag: f64 = rng.random_range(0.5..1.0);
                    for v in 0..c {
                        values[t * c + v] = if v == t { diag } else { (1.0 - diag) / (c - 1) as f64 };
                    }
                }
                ConfusionMatrix { n_classes: c, values }
            })
            .collect();
        DsParams { confusion, class_prior: vec![1.0 / c as f64; c] }
    }
}

impl Aggregator for DawidSkene {
    fn name(&self) -> &'static str {
        "ds"
    }

    fn aggregate(&self, j: &Judgments) -> Result<Aggregation, AggregateError> {
        let cfg = &self.config;
        if j.n_examples() == 0 {
            return Err(AggregateError::Empty { method: self.name() });
        }
        if cfg.max_iter == 0 || cfg.tol.is_nan() || cfg.tol < 0.0 {
            return Err(AggregateError::Config {
                method: self.name(),
                reason: format!("max_iter must be >= 1 and tol >= 0 (got {} and {})", cfg.max_iter, cfg.tol),
            });
        }
        let c = j.n_classes();
        let votes = Votes::new(j);
        let unjudged = votes.unjudged();
        let uniform = vec![1.0 / c as f64; c];
        let mut params = match cfg.init {
            EmInit::MajorityVote => m_step(&votes, &votes.vote_fractions(), cfg.prior, &uniform, None),
            EmInit::Random { seed } => Flat::of(&self.random_params(seed, c, j.n_judges())),
        };
        let mut trace = Vec::with_capacity(cfg.max_iter);
        let mut converged = false;
        let mut posteriors = Vec::new();
        let n_votes = votes.votes_per_judge().iter().sum::<f64>().max(1.0);
        let mut last = f64::NEG_INFINITY;
        while trace.len() < cfg.max_iter {
            let (t, ll) = e_step(&votes, &params);
            trace.push(ll);
            let next = m_step(&votes, &t, cfg.prior, &uniform, Some(&params));
            let change = match cfg.stop {
                EmStop::Params => max_change(&params, &next),
                EmStop::Objective => {
                    let now = objective(&votes, &t, &next) / n_votes;
                    let gain = now - last;
                    last = now;
                    gain
                }
            };
            posteriors = t;
            params = next;
            if cfg.tol > 0.0 && change < cfg.tol {
                converged = true;
                break;
            }
        }
        let posteriors = votes.expand(&posteriors);
        let (labels, ties) = cfg.ties.label_by_sides(&posteriors, j);
        let params = params.params(c);
        let report = EmReport { iterations: trace.len(), converged, log_likelihood: trace, params, unjudged, ties };
        finish(self.name(), c, posteriors, labels, Diagnostics::DawidSkene(report))
    }
}

fn check_params(params: &DsParams, j: &Judgments) -> Result<(), AggregateError> {
    let ok = params.confusion.len() == j.n_judges()
        && params.class_prior.len() == j.n_classes()
        && params.confusion.iter().all(|m| m.n_classes == j.n_classes());
    if ok {
        Ok(())
    } else {
        Err(AggregateError::Config {
            method: "ds",
            reason: format!("parameters do not match {} judges x {} classes", j.n_judges(), j.n_classes()),
        })
    }
}

/// Posteriors per pattern (P x C) and the observed-data log-likelihood under `params`.
/// [`DsParams`] as EM iterates on them: every confusion matrix in one K x C x C table,
/// so an iteration over a jury of 200,000 judges allocates a few vectors, not 600,000.
#[derive(Debug, Clone, PartialEq)]
struct Flat {
    confusion: Vec<f64>,
    class_prior: Vec<f64>,
}

impl Flat {
    fn of(p: &DsParams) -> Self {
        Self {
            confusion: p.confusion.iter().flat_map(|m| m.values.iter().copied()).collect(),
            class_prior: p.class_prior.clone(),
        }
    }

    fn params(self, c: usize) -> DsParams {
        let confusion =
            self.confusion.chunks_exact(c * c).map(|v| ConfusionMatrix { n_classes: c, values: v.to_vec() }).collect();
        DsParams { confusion, class_prior: self.class_prior }
    }
}

fn e_step(votes: &Votes, params: &Flat) -> (Vec<f64>, f64) {
    let c = votes.n_classes;
    let cc = c * c;
    let log_conf: Vec<f64> = params.confusion.iter().map(|x| x.ln()).collect();
    let log_prior: Vec<f64> = params.class_prior.iter().map(|x| x.max(EPS).ln()).collect();
    let mut out = vec![0.0; votes.n_patterns() * c];
    let mut ll = 0.0;
    let mut lp = vec![0.0; c];
    for (p, row) in out.chunks_exact_mut(c).enumerate() {
        lp.copy_from_slice(&log_prior);
        for &(k, v) in votes.pattern(p) {
            let lc = &log_conf[k as usize * cc..(k as usize + 1) * cc];
            for (t, l) in lp.iter_mut().enumerate() {
                *l += lc[t * c + v as usize];
            }
        }
        let max = lp.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if max == f64::NEG_INFINITY {
            // Unreachable after an M-step (see module docs); kept total for safety.
            row.copy_from_slice(&params.class_prior);
            continue;
        }
        for (r, l) in row.iter_mut().zip(&lp) {
            *r = (l - max).exp();
        }
        let sum: f64 = row.iter().sum();
        row.iter_mut().for_each(|r| *r /= sum);
        ll += votes.counts[p] * (max + sum.ln());
    }
    (out, ll)
}

/// Maximum-likelihood confusion matrices (and prior, if learned) given per-pattern
/// posteriors `t`, every count floored at [`EPS`] before a row is normalised (crowd-kit's
/// clip), so a row with no weight is uniform. A learned prior with no judged example
/// keeps its previous value, or uniform on the first step.
fn m_step(votes: &Votes, t: &[f64], prior: ClassPrior, uniform: &[f64], prev: Option<&Flat>) -> Flat {
    let c = votes.n_classes;
    let cc = c * c;
    let mut counts = vec![0.0; votes.n_judges * cc];
    let mut class_weight = vec![0.0; c];
    for p in 0..votes.n_patterns() {
        let pat = votes.pattern(p);
        if pat.is_empty() {
            continue;
        }
        let weight = votes.counts[p];
        let tp = &t[p * c..(p + 1) * c];
        for (w, x) in class_weight.iter_mut().zip(tp) {
            *w += weight * x;
        }
        for &(k, v) in pat {
            let ck = &mut counts[k as usize * cc..(k as usize + 1) * cc];
            for (true_c, x) in tp.iter().enumerate() {
                ck[true_c * c + v as usize] += weight * x;
            }
        }
    }
    let mut confusion = counts;
    for row in confusion.chunks_exact_mut(c) {
        row.iter_mut().for_each(|x| *x = x.max(EPS));
        let total: f64 = row.iter().sum();
        row.iter_mut().for_each(|x| *x /= total);
    }
    let total: f64 = class_weight.iter().sum();
    let class_prior = match prior {
        ClassPrior::Learned if total > 0.0 => class_weight.iter().map(|w| w / total).collect(),
        ClassPrior::Learned => prev.map_or_else(|| uniform.to_vec(), |p| p.class_prior.clone()),
        ClassPrior::Uniform => uniform.to_vec(),
    };
    Flat { confusion, class_prior }
}

/// crowd-kit's `_evidence_lower_bound` (not divided by the votes): over judged patterns,
/// the posterior-weighted log of each vote's confusion entry plus the log prior (once per
/// vote, as crowd-kit joins it), plus the posteriors' entropy (posteriors floored at
/// [`EPS`] there).
fn objective(votes: &Votes, t: &[f64], params: &Flat) -> f64 {
    let c = votes.n_classes;
    let cc = c * c;
    crowd_kit_objective(votes, t, &params.class_prior, |k, class, vote| {
        params.confusion[k * cc + class * c + vote].ln()
    })
}

/// The body of crowd-kit's `_evidence_lower_bound`, shared by Dawid-Skene and one-coin:
/// `ln_confusion(judge, class, vote)` is the log of the judge's confusion entry.
pub(crate) fn crowd_kit_objective(
    votes: &Votes,
    t: &[f64],
    prior: &[f64],
    ln_confusion: impl Fn(usize, usize, usize) -> f64,
) -> f64 {
    let c = votes.n_classes;
    let log_prior: Vec<f64> = prior.iter().map(|x| x.max(EPS).ln()).collect();
    let mut total = 0.0;
    for p in 0..votes.n_patterns() {
        let pat = votes.pattern(p);
        if pat.is_empty() {
            continue;
        }
        let tp = &t[p * c..(p + 1) * c];
        let mut q = 0.0;
        for &(k, v) in pat {
            for (class, x) in tp.iter().enumerate() {
                q += x * (ln_confusion(k as usize, class, v as usize) + log_prior[class]);
            }
        }
        let entropy: f64 = tp.iter().map(|&x| -x.max(EPS) * x.max(EPS).ln()).sum();
        total += votes.counts[p] * (q + entropy);
    }
    total
}

fn max_change(a: &Flat, b: &Flat) -> f64 {
    let conf = a.confusion.iter().zip(&b.confusion);
    conf.chain(a.class_prior.iter().zip(&b.class_prior)).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::testutil::binary;

    fn report(a: &Aggregation) -> &EmReport {
        match a.diagnostics() {
            Diagnostics::DawidSkene(r) => r,
            other => panic!("unexpected diagnostics {other:?}"),
        }
    }

    #[test]
    fn perfect_and_always_wrong_judges_give_no_nan() {
        // j0 perfect, j1 always wrong, j2 perfect; truth alternates 1, 0.
        let rows: Vec<Vec<Option<f64>>> = (0..50)
            .map(|n| {
                let y = if n % 2 == 0 { 0.95 } else { 0.05 };
                vec![Some(y), Some(1.0 - y), Some(y)]
            })
            .collect();
        let refs: Vec<&[Option<f64>]> = rows.iter().map(|r| r.as_slice()).collect();
        let j = binary(&refs);
        for init in [EmInit::MajorityVote, EmInit::Random { seed: 3 }] {
            for prior in [ClassPrior::Uniform, ClassPrior::Learned] {
                let cfg = DawidSkeneConfig { init, prior, ..Default::default() };
                let a = DawidSkene::new(cfg).aggregate(&j).unwrap();
                let want: Vec<usize> = (0..50).map(|n| usize::from(n % 2 == 0)).collect();
                assert_eq!(a.labels(), want.as_slice(), "{init:?} {prior:?}");
                let r = report(&a);
                assert!(r.log_likelihood.iter().all(|l| !l.is_nan()));
                assert!((r.params.confusion[0].get(1, 1) - 1.0).abs() < 1e-9);
                assert!((r.params.confusion[1].get(1, 0) - 1.0).abs() < 1e-9);
                assert!(r.converged);
            }
        }
    }

    /// A jury of 6 judges x 40 examples (rows: judges; `.`: no vote) with two judges
    /// that copy a coin 70% of the time, and crowd-kit 1.4.2's labels on it (generated
    /// by a seeded numpy draw; the judges' votes as a data frame in row order).
    pub(crate) const CROWD_KIT_JURY: [&str; 6] = [
        "001.010100100.11.0.11000111010.1..0..001",
        "0011000.100001100.01100.111010.1100.0011",
        "100001.111.0.111..0010.1000.0.10...0.001",
        "1.001010.01011.100010110111.101011000001",
        "101001001100010111001.010101011111001100",
        ".0001..1111001001101001.0.0101110011.0..",
    ];

    pub(crate) fn crowd_kit_jury() -> Judgments {
        let rows: Vec<Vec<Option<f64>>> = (0..40)
            .map(|e| {
                CROWD_KIT_JURY
                    .iter()
                    .map(|judge| match judge.as_bytes()[e] {
                        b'0' => Some(0.2),
                        b'1' => Some(0.8),
                        _ => None,
                    })
                    .collect()
            })
            .collect();
        let refs: Vec<&[Option<f64>]> = rows.iter().map(|r| r.as_slice()).collect();
        binary(&refs)
    }

    pub(crate) fn labels_string(a: &Aggregation) -> String {
        a.labels().iter().map(|l| l.to_string()).collect()
    }

    #[test]
    fn default_is_crowd_kits_dawid_skene() {
        // crowd-kit's DawidSkene() stops after 9 E-steps, before EM converges (run to the
        // end, example 7 and 30 go to 0); the SkillAggregation paper's form labels otherwise too.
        let a = DawidSkene::default().aggregate(&crowd_kit_jury()).unwrap();
        assert_eq!(labels_string(&a), "0011010110100111000110001110101110000001");
        assert_eq!(report(&a).iterations, 9);
        let full = DawidSkeneConfig { tol: 0.0, ..Default::default() };
        let a = DawidSkene::new(full).aggregate(&crowd_kit_jury()).unwrap();
        assert_eq!(labels_string(&a), "0011010100100111000110001110100110000001");
    }

    #[test]
    fn unjudged_examples_get_the_prior() {
        let j = binary(&[&[Some(0.9), Some(0.8)], &[None, None], &[Some(0.1), Some(0.2)]]);
        let a = DawidSkene::new(DawidSkeneConfig::paper()).aggregate(&j).unwrap();
        assert_eq!(a.posteriors().row(1), &[0.5, 0.5]);
        assert_eq!(report(&a).unjudged, 1);
    }

    #[test]
    fn rejects_bad_config() {
        let j = binary(&[&[Some(0.9)]]);
        let cfg = DawidSkeneConfig { max_iter: 0, ..Default::default() };
        assert!(matches!(DawidSkene::new(cfg).aggregate(&j), Err(AggregateError::Config { .. })));
    }
}
