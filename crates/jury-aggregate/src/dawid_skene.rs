//! Dawid-Skene by EM: per-judge confusion matrices over hard votes, C classes.
//!
//! The paper's binary form (Algorithm 3: per-judge P(b=1|c=1) and P(b=0|c=0), uniform
//! class prior) is the C = 2 case with [`ClassPrior::Uniform`]; the general form learns
//! full C x C confusion matrices and, with [`ClassPrior::Learned`], the class prior.
//!
//! Numerical invariants: the E-step works in log space with a log-sum-exp per example,
//! so exact zeros in a confusion matrix (perfect or always-wrong judges) give `-inf` terms,
//! never NaN. After an M-step every example has at least one class with finite log
//! likelihood (the classes it put weight on saw its own votes), so the posterior is
//! always defined. A class or judge row with no weight falls back to uniform.

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

/// Where EM starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmInit {
    /// First M-step from majority-vote fractions (deterministic; crowd-kit's choice).
    MajorityVote,
    /// The paper's Algorithm 3: each judge's correct-class probabilities drawn uniformly
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
    /// Converged when no confusion or prior entry moves more than this in one iteration
    /// (the paper's termination rule). `0.0` always runs `max_iter` iterations.
    pub tol: f64,
    /// Labels ties of the final posterior.
    pub ties: TieBreak,
}

impl Default for DawidSkeneConfig {
    fn default() -> Self {
        Self {
            prior: ClassPrior::Uniform,
            init: EmInit::MajorityVote,
            max_iter: 100,
            tol: 1e-6,
            ties: TieBreak::Positive,
        }
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
        while trace.len() < cfg.max_iter {
            let (t, ll) = e_step(&votes, &params);
            trace.push(ll);
            let next = m_step(&votes, &t, cfg.prior, &uniform, Some(&params));
            let delta = max_change(&params, &next);
            posteriors = t;
            params = next;
            if delta < cfg.tol {
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
    let log_prior: Vec<f64> = params.class_prior.iter().map(|x| x.ln()).collect();
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
/// posteriors `t`.
/// A row with no weight keeps its previous value, or uniform on the first step.
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
    for (k, values) in confusion.chunks_exact_mut(cc).enumerate() {
        for true_c in 0..c {
            let row = &mut values[true_c * c..(true_c + 1) * c];
            let total: f64 = row.iter().sum();
            if total > 0.0 {
                row.iter_mut().for_each(|x| *x /= total);
            } else {
                let at = k * cc + true_c * c;
                row.copy_from_slice(prev.map_or(uniform, |p| &p.confusion[at..at + c]));
            }
        }
    }
    let total: f64 = class_weight.iter().sum();
    let class_prior = match prior {
        ClassPrior::Learned if total > 0.0 => class_weight.iter().map(|w| w / total).collect(),
        ClassPrior::Learned => prev.map_or_else(|| uniform.to_vec(), |p| p.class_prior.clone()),
        ClassPrior::Uniform => uniform.to_vec(),
    };
    Flat { confusion, class_prior }
}

fn max_change(a: &Flat, b: &Flat) -> f64 {
    let conf = a.confusion.iter().zip(&b.confusion);
    conf.chain(a.class_prior.iter().zip(&b.class_prior)).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn unjudged_examples_get_the_prior() {
        let j = binary(&[&[Some(0.9), Some(0.8)], &[None, None], &[Some(0.1), Some(0.2)]]);
        let a = DawidSkene::default().aggregate(&j).unwrap();
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
