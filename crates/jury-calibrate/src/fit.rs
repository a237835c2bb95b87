//! The calibrated combination: a stack of six simple models of the label, fitted on the
//! calibration labels with every unlabeled judgment informing four of them.
//!
//! Each model gives a linear score over the judges' log-odds and the label-free
//! posterior's log-odds, so the stack is one linear score too:
//! - `label-free`: the label-free recommended method's log-odds, rescaled and shifted by a
//!   one-feature logistic regression on the labels (what labels add to a method that
//!   needs none: its threshold and its confidence);
//! - `picked-judge`: the judge most accurate on the labels, rescaled the same way (the
//!   right answer when one judge dominates);
//! - `lda` and `lda-shrunk`: a linear discriminant whose covariance comes from all
//!   examples (it needs no labels: the total covariance gives the same direction as the
//!   within-class one) and whose class-mean difference comes from the labels, alone or
//!   shrunk toward the label-free posterior's class-mean difference with the weight of
//!   300 labels;
//! - `sparse`: the label-free log-odds (unpenalised) plus the judges' log-odds under an L1
//!   penalty chosen by cross-validation inside the labels (the labels decide how many
//!   judges to trust beyond the label-free posterior: none, one, or most of them);
//! - `exchangeable`: the judges' log-odds, each on the scale of its spread over every
//!   example, under a ridge toward one common weight chosen by cross-validation inside
//!   the labels (the judges count alike until the labels tell them apart).
//!
//! The stack's weights are a non-negative logistic regression on the six models' 5-fold
//! out-of-fold scores on the calibration labels (a super learner), ridged toward the
//! members' plain average: where 100 labels cannot tell the members apart the average
//! costs least, and the labels move the weights as far as they can. `lda`, `sparse` and
//! `exchangeable` set a coefficient per judge from the labels, so they join only when
//! every fit's labels outnumber those coefficients (the judges plus an intercept): with
//! fewer, the labels fit any of many directions exactly. Every setting is
//! chosen inside the calibration set. Where a score has a threshold of its own (the
//! label-free posterior's one half, a judge's, a discriminant's centre, the members'
//! combined), the intercept the labels fit is shrunk toward it by positive-part
//! James-Stein: a threshold read off 100 labels moves with them by a standard error that
//! costs accuracy wherever examples crowd the threshold. The first four members and
//! `lda-shrunk`'s weight were chosen on HaluEval-10 and LLMBar; `sparse`, the thresholds'
//! shrinkage, `exchangeable` and the ridge toward the average came after the report
//! juries had been seen (docs/reproduction/calibration-choices.md says how).
//!
//! Before any of it: where every judge casts hard verdicts and every pair of judges agrees
//! as often as independence given the label-free classes predicts, over enough examples
//! to have seen a 5-point excess ([`crate::independence`]), the unlabeled data confirm the
//! label-free model, and the calibrated method is its posterior as it is: each member
//! fitted on a few labels is a noisier copy of it there (calibration.md, "Simulated
//! juries"). No real jury of that page passes the check. The votes confirm the model only
//! up to the names of its two classes, so the labels name them: the posterior, or its
//! complement where that is likelier on them.

use jury_core::Judgments;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::independence::votes_independent_given_class;
use crate::linalg::{inverse_spd, solve_spd};
use crate::sparse::{Fit, Problem, penalties};
use crate::{CalibrationError, Sample};

/// Log-odds are clipped to this probability from 0 and 1 (a hard verdict reads as
/// +-6.9), so a confident judge does not decide alone by an infinite margin.
const CLIP: f64 = 1e-3;
/// Folds of the out-of-fold scores the stack is fitted on.
pub(crate) const FOLDS: usize = 5;
/// The ridge of the stack's weights toward the members' plain average (`1 / members`
/// each, over the members that join), on the summed log-loss: it counts for less as
/// labels grow. 10 and 30 tied on the tuning juries; the smaller leaves the labels more
/// say.
const STACK_RIDGE: f64 = 10.0;
/// The weight, in labels, of the label-free class-mean difference in `lda-shrunk`.
const SHRINK_LABELS: f64 = 300.0;

/// The judges' log-odds as a dense examples x judges matrix (a missing judgment reads as
/// 0, no evidence), with what the fits need from all examples: the mean, the inverse
/// total covariance and the label-free posterior's log-odds and class-mean difference.
#[derive(Debug, Clone)]
pub struct LogOdds {
    n: usize,
    k: usize,
    x: Vec<f64>,
    mean: Vec<f64>,
    inv_cov: Vec<f64>,
    label_free: Vec<f64>,
    label_free_diff: Vec<f64>,
    /// Over every example, which no calibration sample changes: each judge's share of
    /// positive votes and mean probability, and the label-free posterior's mean.
    judge_positive: Vec<f64>,
    judge_mean: Vec<f64>,
    label_free_mean: f64,
    /// Standard deviations over every example of each judge's log-odds and of the
    /// label-free log-odds: the sparse member's penalty treats the columns on one scale.
    judge_sd: Vec<f64>,
    label_free_sd: f64,
    /// Whether the judges' hard verdicts are as independent given the label-free classes
    /// as the label-free model says ([`crate::independence`]): the calibrated method then
    /// keeps the label-free posterior, its classes named by the labels.
    label_free_holds: bool,
    /// How many judges judged each example: a missing judgment reads as log-odds 0, which
    /// a judgment of exactly one half also gives, so only this tells them apart.
    present: Vec<usize>,
}

impl LogOdds {
    /// Reads `j` (binary) with the label-free recommended method's probability of class 1
    /// for each example.
    pub fn new(j: &Judgments, label_free: &[f64]) -> Result<Self, CalibrationError> {
        if j.n_classes() != 2 {
            return Err(CalibrationError::NotBinary(j.n_classes()));
        }
        let (n, k) = (j.n_examples(), j.n_judges());
        let mut x = vec![0.0; n * k];
        let mut present = vec![0; n];
        for i in 0..n {
            for (judge, p) in j.row(i) {
                x[i * k + judge] = logit(p[1], CLIP);
                present[i] += 1;
            }
        }
        Self::build(n, k, x, present, label_free)
    }

    /// From a row-major examples x judges matrix of log-odds, every judgment present.
    pub fn from_dense(n: usize, k: usize, x: Vec<f64>, label_free: &[f64]) -> Result<Self, CalibrationError> {
        Self::build(n, k, x, vec![k; n], label_free)
    }

    fn build(
        n: usize,
        k: usize,
        x: Vec<f64>,
        present: Vec<usize>,
        label_free: &[f64],
    ) -> Result<Self, CalibrationError> {
        if label_free.len() != n {
            return Err(CalibrationError::Length(label_free.len(), n));
        }
        let mut mean = vec![0.0; k];
        x.chunks_exact(k).for_each(|r| r.iter().zip(&mut mean).for_each(|(v, m)| *m += v / n as f64));
        let mut cov = vec![0.0; k * k];
        for r in x.chunks_exact(k) {
            for a in 0..k {
                let da = r[a] - mean[a];
                for b in 0..=a {
                    cov[a * k + b] += da * (r[b] - mean[b]) / n as f64;
                }
            }
        }
        for a in 0..k {
            for b in 0..a {
                cov[b * k + a] = cov[a * k + b];
            }
            cov[a * k + a] += 1e-6;
        }
        let inv_cov = inverse_spd(&cov, k);
        let (mut s1, mut s0, mut w1, mut w0) = (vec![0.0; k], vec![0.0; k], 0.0, 0.0);
        for (r, &p) in x.chunks_exact(k).zip(label_free) {
            for b in 0..k {
                s1[b] += p * r[b];
                s0[b] += (1.0 - p) * r[b];
            }
            w1 += p;
            w0 += 1.0 - p;
        }
        let label_free_diff = (0..k).map(|b| s1[b] / w1.max(1e-12) - s0[b] / w0.max(1e-12)).collect();
        let label_free_holds = votes_independent_given_class(&x, k, logit(1.0, CLIP), label_free);
        let label_free: Vec<f64> = label_free.iter().map(|&p| logit(p, 1e-4)).collect();
        let (mut judge_positive, mut judge_mean) = (vec![0.0; k], vec![0.0; k]);
        for r in x.chunks_exact(k) {
            for b in 0..k {
                judge_positive[b] += f64::from(u8::from(r[b] > 0.0)) / n as f64;
                judge_mean[b] += sigmoid(r[b]) / n as f64;
            }
        }
        let label_free_mean = label_free.iter().map(|&z| sigmoid(z)).sum::<f64>() / n as f64;
        let judge_sd = (0..k).map(|b| (cov[b * k + b] - 1e-6).max(0.0).sqrt().max(1e-9)).collect();
        let lf_avg = label_free.iter().sum::<f64>() / n as f64;
        let label_free_sd = (label_free.iter().map(|z| (z - lf_avg).powi(2)).sum::<f64>() / n as f64).sqrt().max(1e-9);
        Ok(Self {
            n,
            k,
            x,
            mean,
            inv_cov,
            label_free,
            label_free_diff,
            judge_positive,
            judge_mean,
            label_free_mean,
            judge_sd,
            label_free_sd,
            label_free_holds,
            present,
        })
    }

    pub fn n_examples(&self) -> usize {
        self.n
    }

    pub fn n_judges(&self) -> usize {
        self.k
    }

    fn row(&self, i: usize) -> &[f64] {
        &self.x[i * self.k..(i + 1) * self.k]
    }

    /// Whether the unlabeled judgments confirm the label-free model (hard verdicts of at
    /// least four judges, every pair agreeing as often as independence given the
    /// label-free classes predicts), so that the calibrated method keeps its posterior
    /// (its classes named by the labels).
    pub fn label_free_holds(&self) -> bool {
        self.label_free_holds
    }

    /// The label-free recommended method's probability of class 1 for every example.
    pub fn label_free_probabilities(&self) -> Vec<f64> {
        self.label_free.iter().map(|&z| sigmoid(z)).collect()
    }

    /// The mean probability of class 1 of the judges who judged each example (one half
    /// where none did): AverageProb's posterior, far less sure of itself than a model that
    /// multiplies the judges' evidence. Over the judges present, not all: with an adaptive
    /// jury, which stops asking once the first judges agree, counting the others as one
    /// half would make its surest examples look its least sure, and the plan would label
    /// them most.
    pub fn mean_judge_probabilities(&self) -> Vec<f64> {
        (0..self.n)
            .map(|i| {
                let missing = (self.k - self.present[i]) as f64;
                let sum = self.row(i).iter().map(|&x| sigmoid(x)).sum::<f64>() - 0.5 * missing;
                if self.present[i] == 0 { 0.5 } else { sum / self.present[i] as f64 }
            })
            .collect()
    }

    /// Judge `k`'s share of positive votes over every example.
    pub(crate) fn judge_positive(&self, k: usize) -> f64 {
        self.judge_positive[k]
    }

    /// Judge `k`'s mean probability of class 1 over every example.
    pub(crate) fn judge_mean(&self, k: usize) -> f64 {
        self.judge_mean[k]
    }

    /// The label-free posterior's mean over every example.
    pub(crate) fn label_free_mean(&self) -> f64 {
        self.label_free_mean
    }

    /// The label-free posterior's probability of class 1 for example `i`.
    pub(crate) fn label_free_probability(&self, i: usize) -> f64 {
        sigmoid(self.label_free[i])
    }

    /// Judge `k`'s log-odds on example `i`.
    pub fn get(&self, i: usize, k: usize) -> f64 {
        self.x[i * self.k + k]
    }
}

fn logit(p: f64, clip: f64) -> f64 {
    let p = p.clamp(clip, 1.0 - clip);
    (p / (1.0 - p)).ln()
}

fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z.clamp(-50.0, 50.0)).exp())
}

/// A linear score: `sum_k w_k x_ik + label_free * lf_i + bias`, the log-odds of class 1.
#[derive(Debug, Clone, PartialEq)]
struct Linear {
    w: Vec<f64>,
    label_free: f64,
    bias: f64,
}

impl Linear {
    fn score(&self, d: &LogOdds, i: usize) -> f64 {
        let s: f64 = d.row(i).iter().zip(&self.w).map(|(x, w)| x * w).sum();
        s + self.label_free * d.label_free[i] + self.bias
    }

    fn add_scaled(&mut self, other: &Linear, c: f64) {
        self.w.iter_mut().zip(&other.w).for_each(|(a, b)| *a += c * b);
        self.label_free += c * other.label_free;
        self.bias += c * other.bias;
    }
}

/// The six models the stack combines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Candidate {
    LabelFree,
    PickedJudge,
    Lda,
    LdaShrunk,
    Sparse,
    Exchangeable,
}

impl Candidate {
    pub const ALL: [Candidate; 6] = [
        Candidate::LabelFree,
        Candidate::PickedJudge,
        Candidate::Lda,
        Candidate::LdaShrunk,
        Candidate::Sparse,
        Candidate::Exchangeable,
    ];

    /// Whether the labels set one coefficient per judge (the others fit one or two
    /// numbers, or take their direction from every example: `lda-shrunk`'s is held by
    /// 300 labels' worth of the label-free posterior's).
    fn per_judge(self) -> bool {
        matches!(self, Candidate::Lda | Candidate::Sparse | Candidate::Exchangeable)
    }

    pub fn name(self) -> &'static str {
        match self {
            Candidate::LabelFree => "label-free",
            Candidate::PickedJudge => "picked-judge",
            Candidate::Lda => "lda",
            Candidate::LdaShrunk => "lda-shrunk",
            Candidate::Sparse => "sparse",
            Candidate::Exchangeable => "exchangeable",
        }
    }

    /// Fits this model on the labeled examples `rows` (indices into `d`), `y` their
    /// labels and `w` their weights (mean 1); `seed` deals the sparse member's folds.
    fn fit(self, d: &LogOdds, rows: &[usize], y: &[f64], w: &[f64], seed: u64) -> Linear {
        let k = d.k;
        match self {
            Candidate::Sparse => fit_sparse(d, rows, y, w, seed),
            Candidate::Exchangeable => fit_exchangeable(d, rows, y, w, seed),
            Candidate::LabelFree => {
                let s: Vec<f64> = rows.iter().map(|&i| d.label_free[i]).collect();
                let (a, b) = logistic_1d(&s, y, w);
                Linear { w: vec![0.0; k], label_free: a, bias: b }
            }
            Candidate::PickedJudge => {
                let best = picked_judge_rows(d, rows, y, w);
                let s: Vec<f64> = rows.iter().map(|&i| d.get(i, best)).collect();
                let (a, b) = logistic_1d(&s, y, w);
                let mut wv = vec![0.0; k];
                wv[best] = a;
                Linear { w: wv, label_free: 0.0, bias: b }
            }
            Candidate::Lda | Candidate::LdaShrunk => {
                let (mut s1, mut s0, mut w1, mut w0) = (vec![0.0; k], vec![0.0; k], 0.0, 0.0);
                for ((&i, &yi), &wi) in rows.iter().zip(y).zip(w) {
                    let (s, t) = if yi > 0.5 { (&mut s1, &mut w1) } else { (&mut s0, &mut w0) };
                    s.iter_mut().zip(d.row(i)).for_each(|(a, x)| *a += wi * x);
                    *t += wi;
                }
                let labeled: Vec<f64> = if w1 > 0.0 && w0 > 0.0 {
                    (0..k).map(|b| s1[b] / w1 - s0[b] / w0).collect()
                } else {
                    d.label_free_diff.clone()
                };
                let lambda = if self == Candidate::LdaShrunk { SHRINK_LABELS } else { 0.0 };
                let m = rows.len() as f64;
                let diff: Vec<f64> =
                    labeled.iter().zip(&d.label_free_diff).map(|(l, f)| (m * l + lambda * f) / (m + lambda)).collect();
                let v: Vec<f64> = (0..k).map(|a| (0..k).map(|b| d.inv_cov[a * k + b] * diff[b]).sum()).collect();
                let offset: f64 = v.iter().zip(&d.mean).map(|(v, m)| v * m).sum();
                let s: Vec<f64> =
                    rows.iter().map(|&i| d.row(i).iter().zip(&v).map(|(x, v)| x * v).sum::<f64>() - offset).collect();
                let (a, b) = logistic_1d(&s, y, w);
                Linear { w: v.iter().map(|v| a * v).collect(), label_free: 0.0, bias: b - a * offset }
            }
        }
    }
}

/// Penalties on the sparse member's path: this many, from the smallest that keeps every
/// judge out down to this share of it.
const SPARSE_PENALTIES: usize = 15;
const SPARSE_RATIO: f64 = 0.03;

/// The sparse member: the label-free log-odds (unpenalised) plus the judges' log-odds
/// under an L1 penalty, all on one scale (divided by their standard deviations over every
/// example); the penalty minimises the 5-fold (seeded) out-of-fold log-loss on `rows`.
/// Its largest penalty is the label-free posterior rescaled; its smallest, nearly
/// logistic regression on every judge; one judge entering alone is the picked judge's
/// case.
fn fit_sparse(d: &LogOdds, rows: &[usize], y: &[f64], w: &[f64], seed: u64) -> Linear {
    let k = d.k;
    let row = |i: usize| -> Vec<f64> {
        let mut r: Vec<f64> = d.row(i).iter().zip(&d.judge_sd).map(|(x, s)| x / s).collect();
        r.push(d.label_free[i] / d.label_free_sd);
        r
    };
    let z: Vec<Vec<f64>> = rows.iter().map(|&i| row(i)).collect();
    let mut penalised = vec![true; k + 1];
    penalised[k] = false;
    let all = Problem { z: &z, y, w, penalised: &penalised };
    let lambdas = penalties(all.lambda_max(), SPARSE_RATIO, SPARSE_PENALTIES);
    let m = rows.len();
    let folds = fold_of(y, seed);
    // Each fold's mean out-of-fold log-loss at each penalty.
    let mut fold_loss = vec![vec![0.0; lambdas.len()]; FOLDS.min(m)];
    for (f, fl) in fold_loss.iter_mut().enumerate() {
        let (train, test): (Vec<usize>, Vec<usize>) = (0..m).partition(|&r| folds[r] != f);
        let (tz, ty, tw) = subset(&z, y, w, &train);
        let path = Problem { z: &tz, y: &ty, w: &tw, penalised: &penalised }.path(&lambdas);
        let weight: f64 = test.iter().map(|&r| w[r]).sum::<f64>().max(1e-300);
        for (l, fit) in path.iter().enumerate() {
            fl[l] = test
                .iter()
                .map(|&r| {
                    let s = fit.score(&z[r]);
                    w[r] * log_loss(s, y[r])
                })
                .sum::<f64>()
                / weight;
        }
    }
    let nf = fold_loss.len() as f64;
    let mean: Vec<f64> = (0..lambdas.len()).map(|l| fold_loss.iter().map(|f| f[l]).sum::<f64>() / nf).collect();
    let best = argmin(&mean);
    let fit = all.path(&lambdas[..=best]).pop().unwrap_or(Fit { beta: vec![0.0; k + 1], intercept: 0.0 });
    // The intercept stays as fitted: with several judges in, it carries their biases, and
    // 0 is no score's own threshold (shrinking it, as `shrink_intercept` does for one
    // score, cost logistic regression 1.7 points on HaluEval-10 at 100 labels).
    Linear {
        w: fit.beta[..k].iter().zip(&d.judge_sd).map(|(b, s)| b / s).collect(),
        label_free: fit.beta[k] / d.label_free_sd,
        bias: fit.intercept,
    }
}

/// Ridges tried for the exchangeable member, on the sum of log-losses over the labels.
const EXCHANGEABLE_RIDGES: [f64; 8] = [0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0];

/// The exchangeable member: logistic regression on the judges' log-odds, each divided by
/// its standard deviation over every example, under a ridge that pulls every judge's
/// weight toward their common weight (a prior that treats the judges as exchangeable
/// until the labels tell them apart); the ridge minimises the 5-fold (seeded) out-of-fold
/// log-loss on `rows`. Its largest ridge is the judges' standardised log-odds summed with
/// one weight; its smallest, nearly logistic regression on every judge.
fn fit_exchangeable(d: &LogOdds, rows: &[usize], y: &[f64], w: &[f64], seed: u64) -> Linear {
    let k = d.k;
    let norm = (k.max(1) as f64).sqrt();
    // The judges' standardised log-odds and, unpenalised, their sum: a ridge toward 0 on
    // the judges' own columns is then a ridge toward the common weight.
    let z: Vec<Vec<f64>> = rows
        .iter()
        .map(|&i| {
            let mut r: Vec<f64> = d.row(i).iter().zip(&d.judge_sd).map(|(x, s)| x / s).collect();
            r.push(r.iter().sum::<f64>() / norm);
            r
        })
        .collect();
    let prior = |l2: f64| Prior::ridge(k + 1, l2, 1e-6).free(k);
    let m = rows.len();
    let folds = fold_of(y, seed);
    let mut loss = [0.0; EXCHANGEABLE_RIDGES.len()];
    for f in 0..FOLDS.min(m) {
        let (train, test): (Vec<usize>, Vec<usize>) = (0..m).partition(|&r| folds[r] != f);
        let (tz, ty, tw) = subset(&z, y, w, &train);
        // From the largest ridge down, each fit started at the last one's solution.
        let mut beta = vec![0.0; k + 2];
        for (l, &l2) in EXCHANGEABLE_RIDGES.iter().enumerate().rev() {
            beta = logistic_from(&tz, &ty, &tw, &prior(l2), false, &beta).beta;
            loss[l] += test
                .iter()
                .map(|&r| {
                    let s = z[r].iter().zip(&beta).map(|(x, b)| x * b).sum::<f64>() + beta[k + 1];
                    w[r] * log_loss(s, y[r])
                })
                .sum::<f64>();
        }
    }
    let best = argmin(&loss);
    let beta = logistic(&z, y, w, &prior(EXCHANGEABLE_RIDGES[best]), false).beta;
    // The intercept stays as fitted, as `sparse`'s does: several judges' biases, no
    // score's own threshold.
    Linear {
        w: beta[..k].iter().zip(&d.judge_sd).map(|(b, s)| (b + beta[k] / norm) / s).collect(),
        label_free: 0.0,
        bias: beta[k + 1],
    }
}

/// The judge whose hard votes agree most with the weighted labels (the first on ties).
pub(crate) fn picked_judge_rows(d: &LogOdds, rows: &[usize], y: &[f64], w: &[f64]) -> usize {
    let mut best = (0, f64::NEG_INFINITY);
    for k in 0..d.k {
        let acc: f64 = rows
            .iter()
            .zip(y)
            .zip(w)
            .map(|((&i, &yi), &wi)| if (d.get(i, k) > 0.0) == (yi > 0.5) { wi } else { 0.0 })
            .sum();
        if acc > best.1 {
            best = (k, acc);
        }
    }
    best.0
}

/// The judge the labels of `sample` pick: the most accurate on them (inclusion-weighted).
pub fn picked_judge(d: &LogOdds, sample: &Sample) -> usize {
    let y: Vec<f64> = sample.labels().iter().map(|&l| f64::from(l)).collect();
    picked_judge_rows(d, sample.index(), &y, &weights(sample))
}

/// Each labeled example's fitting weight, `1 / pi_i` scaled to mean 1.
pub(crate) fn weights(sample: &Sample) -> Vec<f64> {
    let e = sample.expansion();
    let mean = e.iter().sum::<f64>() / e.len() as f64;
    e.iter().map(|v| v / mean).collect()
}

/// Weighted logistic regression of `y` on one feature, `y ~ sigmoid(a s + b)`, with a
/// unit ridge on the standardised feature's coefficient (damped Newton; the ridge keeps a
/// perfectly separating judge finite) and the intercept shrunk toward the feature's own
/// zero ([`shrink_intercept`]).
fn logistic_1d(s: &[f64], y: &[f64], w: &[f64]) -> (f64, f64) {
    let m = s.len() as f64;
    let mean = s.iter().sum::<f64>() / m;
    let sd = (s.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / m).sqrt().max(1e-9);
    let t: Vec<f64> = s.iter().map(|v| v / sd).collect();
    let z: Vec<Vec<f64>> = t.iter().map(|&v| vec![v]).collect();
    let fit = logistic(&z, y, w, &Prior::ridge(1, 1.0, 1e-6), false);
    (fit.beta[0] / sd, shrink_intercept(fit.beta[1], fit.intercept_se))
}

/// Positive-part James-Stein shrinkage of an intercept toward 0, the threshold of the
/// scores themselves (a judge's or the label-free posterior's own one half): kept nearly
/// whole when the labels put it many standard errors from 0, set to 0 within one. A
/// threshold read off 100 labels moves with them; the scores' own one moves with nothing.
fn shrink_intercept(b: f64, se: f64) -> f64 {
    if b == 0.0 {
        return 0.0;
    }
    b * (1.0 - (se * se) / (b * b)).max(0.0)
}

/// A logistic fit: the coefficients over the features, the intercept last; and the
/// intercept's standard error, from the inverse of the penalised Hessian at the fit over
/// the columns fitted (a coefficient held at 0 by `non_negative` is not estimated).
struct LogisticFit {
    beta: Vec<f64>,
    intercept_se: f64,
}

/// A Gaussian prior on a logistic fit: feature coefficient `c` is ridged with strength
/// `l2[c]` toward `centre[c]`, the intercept with `l2_bias` toward 0.
#[derive(Debug, Clone)]
struct Prior {
    l2: Vec<f64>,
    centre: Vec<f64>,
    l2_bias: f64,
}

impl Prior {
    /// Every one of `p` coefficients ridged by `l2` toward 0.
    fn ridge(p: usize, l2: f64, l2_bias: f64) -> Self {
        Prior { l2: vec![l2; p], centre: vec![0.0; p], l2_bias }
    }

    /// The same strengths, centred on `centre` instead.
    fn toward(self, centre: Vec<f64>) -> Self {
        Prior { centre, ..self }
    }

    /// Column `c` left unpenalised (a tiny ridge keeps the Hessian invertible).
    fn free(mut self, c: usize) -> Self {
        self.l2[c] = 1e-6;
        self
    }
}

/// Weighted penalised logistic regression of `y` on the rows of `z` plus an intercept
/// (the last coefficient) under `prior`; with `non_negative`, the feature coefficients
/// are kept at or above 0 (active set: a negative one is fixed at 0 and the rest refitted).
fn logistic(z: &[Vec<f64>], y: &[f64], w: &[f64], prior: &Prior, non_negative: bool) -> LogisticFit {
    // Started at the prior's centre, where its penalty is least.
    let start: Vec<f64> = prior.centre.iter().copied().chain([0.0]).collect();
    logistic_from(z, y, w, prior, non_negative, &start)
}

/// [`logistic`] started at `start` (coefficients, intercept last): a neighbouring fit's
/// solution saves most Newton steps along a path of priors.
fn logistic_from(
    z: &[Vec<f64>],
    y: &[f64],
    w: &[f64],
    prior: &Prior,
    non_negative: bool,
    start: &[f64],
) -> LogisticFit {
    let p = z.first().map_or(0, Vec::len);
    let mut active = vec![true; p];
    loop {
        let cols: Vec<usize> = (0..p).filter(|&c| active[c]).collect();
        let d = cols.len() + 1;
        let problem = Penalised { z, y, w, cols: &cols, prior };
        let mut beta: Vec<f64> = cols.iter().map(|&c| start[c]).chain([start[p]]).collect();
        let mut f = problem.objective(&beta);
        for _ in 0..100 {
            let (g, h) = problem.gradient_hessian(&beta);
            let step = solve_spd(&h, &g);
            // Damped step: halve until the objective does not rise.
            let mut c = 1.0;
            let (next, f_next) = loop {
                let next: Vec<f64> = beta.iter().zip(&step).map(|(b, s)| b - c * s).collect();
                let f_next = problem.objective(&next);
                if f_next <= f + 1e-12 || c < 1e-6 {
                    break (next, f_next);
                }
                c /= 2.0;
            };
            let settled = f - f_next < 1e-10 || step.iter().map(|s| (c * s).abs()).fold(0.0, f64::max) < 1e-9;
            beta = next;
            f = f_next;
            if settled {
                break;
            }
        }
        let negative: Vec<usize> = cols.iter().enumerate().filter(|(j, _)| beta[*j] < 0.0).map(|(_, &c)| c).collect();
        if !non_negative || negative.is_empty() {
            let (_, h) = problem.gradient_hessian(&beta);
            let intercept_se = inverse_spd(&h, d)[d * d - 1].max(0.0).sqrt();
            let mut full = vec![0.0; p + 1];
            cols.iter().enumerate().for_each(|(j, &c)| full[c] = beta[j]);
            full[p] = beta[d - 1];
            return LogisticFit { beta: full, intercept_se };
        }
        negative.iter().for_each(|&c| active[c] = false);
    }
}

/// The penalised log-loss of a logistic fit over the columns `cols` of `z` plus an
/// intercept (the last coefficient of each `beta` below).
struct Penalised<'a> {
    z: &'a [Vec<f64>],
    y: &'a [f64],
    w: &'a [f64],
    cols: &'a [usize],
    prior: &'a Prior,
}

impl Penalised<'_> {
    /// Coefficient `a`'s ridge and the value it is ridged toward.
    fn penalty(&self, a: usize) -> (f64, f64) {
        match self.cols.get(a) {
            Some(&c) => (self.prior.l2[c], self.prior.centre[c]),
            None => (self.prior.l2_bias, 0.0),
        }
    }

    fn score(&self, row: &[f64], beta: &[f64]) -> f64 {
        self.cols.iter().enumerate().map(|(j, &c)| beta[j] * row[c]).sum::<f64>() + beta[self.cols.len()]
    }

    fn objective(&self, beta: &[f64]) -> f64 {
        let mut f = 0.0;
        for ((row, &yi), &wi) in self.z.iter().zip(self.y).zip(self.w) {
            let s = self.score(row, beta);
            f += wi * log_loss(s, yi);
        }
        f + 0.5
            * beta
                .iter()
                .enumerate()
                .map(|(a, b)| {
                    let (l2, c) = self.penalty(a);
                    l2 * (b - c).powi(2)
                })
                .sum::<f64>()
    }

    /// The gradient and the (symmetric, row-major) Hessian at `beta`.
    fn gradient_hessian(&self, beta: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let d = self.cols.len() + 1;
        let mut g = vec![0.0; d];
        let mut h = vec![0.0; d * d];
        let mut feat = vec![1.0; d];
        for ((row, &yi), &wi) in self.z.iter().zip(self.y).zip(self.w) {
            self.cols.iter().enumerate().for_each(|(j, &c)| feat[j] = row[c]);
            let pr = sigmoid(self.score(row, beta));
            // Products in the order the plain expressions take, so the sums are unchanged.
            let (ge, he) = (wi * (pr - yi), wi * pr * (1.0 - pr));
            for a in 0..d {
                g[a] += ge * feat[a];
                let ha = he * feat[a];
                h[a * d..=a * d + a].iter_mut().zip(&feat[..=a]).for_each(|(h, fb)| *h += ha * fb);
            }
        }
        for a in 0..d {
            for b in 0..a {
                h[b * d + a] = h[a * d + b];
            }
            let (l2, c) = self.penalty(a);
            g[a] += l2 * (beta[a] - c);
            h[a * d + a] += l2;
        }
        (g, h)
    }
}

fn softplus(s: f64) -> f64 {
    if s > 30.0 { s } else { s.exp().ln_1p() }
}

/// The log-loss of log-odds `s` against label `y` (0 or 1).
fn log_loss(s: f64, y: f64) -> f64 {
    softplus(s) - y * s
}

/// The index of the least value, the first on ties (0 when empty): a cross-validated
/// setting from its out-of-fold losses.
fn argmin(v: &[f64]) -> usize {
    v.iter().enumerate().min_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |(l, _)| l)
}

/// The calibrated combination fitted on one calibration sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibrated {
    model: Linear,
    /// Each candidate's weight in the stack, in [`Candidate::ALL`] order; `label-free` 1
    /// and the rest 0 where the label-free posterior is kept as it is
    /// ([`LogOdds::label_free_holds`]).
    pub stack: Vec<(Candidate, f64)>,
    /// Where the label-free posterior is kept: whether its classes are swapped.
    label_free: Option<bool>,
    /// The log-odds of class 1 of each labeled example (in the sample's order) from the
    /// members fitted without its fold, under stack weights fitted without it too: the
    /// verdicts' accuracy on labels nothing fitted ([`crate::verdict_accuracy`]). The
    /// members that scored the weights' rows saw the fold's labels (a nested fit of the
    /// whole stack would cost five), and each fit on four fifths of the labels is a
    /// little worse than the one on all (coverage: docs/reproduction/calibration-rates.md).
    out_of_fold: Vec<f64>,
}

impl Calibrated {
    /// Fits the stack on `sample` (seeded folds).
    pub fn fit(d: &LogOdds, sample: &Sample, seed: u64) -> Self {
        let y: Vec<f64> = sample.labels().iter().map(|&l| f64::from(l)).collect();
        Self::fit_rows(d, sample.index(), &y, &weights(sample), seed)
    }

    fn fit_rows(d: &LogOdds, rows: &[usize], y: &[f64], w: &[f64], seed: u64) -> Self {
        if d.label_free_holds {
            return Self::label_free(d, rows, labels_swap_label_free(d, rows, y, w));
        }
        let m = rows.len();
        let folds = fold_of(y, seed);
        let members = Candidate::ALL.len();
        // The fewest labels any of the member fits sees: a fold's training rows.
        let fewest = (0..FOLDS.min(m)).map(|f| folds.iter().filter(|&&g| g != f).count()).min().unwrap_or(0);
        let joins: Vec<bool> = Candidate::ALL.iter().map(|c| !c.per_judge() || fewest > d.k + 1).collect();
        let joined = joins.iter().filter(|&&j| j).count();
        // A member left out scores 0 everywhere and is ridged toward 0, so its weight is 0.
        let mut oof = vec![vec![0.0; members]; m];
        for f in 0..FOLDS.min(m) {
            let train: Vec<usize> = (0..m).filter(|&r| folds[r] != f).collect();
            let (tr, ty, tw) = pick(rows, y, w, &train);
            for (c, cand) in Candidate::ALL.iter().enumerate().filter(|(c, _)| joins[*c]) {
                let lin = cand.fit(d, &tr, &ty, &tw, seed);
                (0..m).filter(|&r| folds[r] == f).for_each(|r| oof[r][c] = lin.score(d, rows[r]).clamp(-30.0, 30.0));
            }
        }
        let centre = joins.iter().map(|&j| if j { 1.0 / joined as f64 } else { 0.0 }).collect();
        let prior = Prior::ridge(members, STACK_RIDGE, 1e-6).toward(centre);
        let LogisticFit { beta, intercept_se } = logistic(&oof, y, w, &prior, true);
        let bias = shrink_intercept(beta[members], intercept_se);
        // Each fold's rows under weights fitted on the other folds' rows: weights fitted on
        // the rows they score read 0.9 points too high on a simulated jury at 100 labels.
        let mut out_of_fold = vec![0.0; m];
        for f in 0..FOLDS.min(m) {
            let train: Vec<usize> = (0..m).filter(|&r| folds[r] != f).collect();
            let (tz, ty, tw) = subset(&oof, y, w, &train);
            let LogisticFit { beta, intercept_se } = logistic(&tz, &ty, &tw, &prior, true);
            let bias = shrink_intercept(beta[members], intercept_se);
            for r in (0..m).filter(|&r| folds[r] == f) {
                out_of_fold[r] = oof[r].iter().zip(&beta).map(|(s, b)| s * b).sum::<f64>() + bias;
            }
        }
        let mut model = Linear { w: vec![0.0; d.k], label_free: 0.0, bias };
        let mut stack = Vec::with_capacity(members);
        for (c, cand) in Candidate::ALL.iter().enumerate() {
            if beta[c] > 0.0 {
                model.add_scaled(&cand.fit(d, rows, y, w, seed), beta[c]);
            }
            stack.push((*cand, beta[c]));
        }
        Calibrated { model, stack, label_free: None, out_of_fold }
    }

    /// The label-free posterior as it is, or with its classes swapped: where the unlabeled
    /// judgments confirm its model, each member a few labels fit is a noisier copy of it.
    /// Only the classes' names come from the labels (`rows`), so every labeled example's
    /// score is its own out-of-fold one.
    fn label_free(d: &LogOdds, rows: &[usize], swapped: bool) -> Self {
        let model = Linear { w: vec![0.0; d.k], label_free: if swapped { -1.0 } else { 1.0 }, bias: 0.0 };
        let stack = Candidate::ALL.iter().map(|&c| (c, if c == Candidate::LabelFree { 1.0 } else { 0.0 })).collect();
        let out_of_fold = rows.iter().map(|&i| model.score(d, i)).collect();
        Calibrated { model, stack, label_free: Some(swapped), out_of_fold }
    }

    /// Whether this is the label-free posterior itself (its classes perhaps swapped), not
    /// the stack.
    pub fn label_free_kept(&self) -> bool {
        self.label_free.is_some()
    }

    /// Whether the labels named the label-free posterior's classes the other way round, so
    /// that this is its complement.
    pub fn label_free_swapped(&self) -> bool {
        self.label_free == Some(true)
    }

    /// The probability of class 1 for example `i`.
    pub fn probability(&self, d: &LogOdds, i: usize) -> f64 {
        sigmoid(self.model.score(d, i))
    }

    /// The probability of class 1 for every example.
    pub fn probabilities(&self, d: &LogOdds) -> Vec<f64> {
        (0..d.n).map(|i| self.probability(d, i)).collect()
    }

    /// Each labeled example's log-odds of class 1 from members that did not see its label
    /// (in the sample's order).
    pub(crate) fn out_of_fold(&self) -> &[f64] {
        &self.out_of_fold
    }
}

/// Whether the labels take the label-free posterior's class 1 for their 0: the
/// complement has the greater likelihood on them (weighted; a tie keeps the classes).
/// The unlabeled votes can confirm the label-free model but, as any latent-class model,
/// only up to the names of its classes: a question asked the other way round, or a latent
/// class every judge answers that runs against the label, give the same votes. The labels
/// name them, and nothing else about the posterior is theirs to change.
fn labels_swap_label_free(d: &LogOdds, rows: &[usize], y: &[f64], w: &[f64]) -> bool {
    let loss = |sign: f64| -> f64 {
        rows.iter().zip(y).zip(w).map(|((&i, &yi), &wi)| wi * log_loss(sign * d.label_free[i], yi)).sum()
    };
    loss(-1.0) < loss(1.0)
}

/// Ridge logistic regression on the judges' log-odds fitted on the same labels (the
/// baseline a user would try first): unit ridge, as scikit-learn's default.
pub fn logistic_baseline(d: &LogOdds, sample: &Sample) -> Vec<f64> {
    let y: Vec<f64> = sample.labels().iter().map(|&l| f64::from(l)).collect();
    let z: Vec<Vec<f64>> = sample.index().iter().map(|&i| d.row(i).to_vec()).collect();
    let beta = logistic(&z, &y, &weights(sample), &Prior::ridge(d.k, 1.0, 1e-6), false).beta;
    (0..d.n).map(|i| d.row(i).iter().zip(&beta).map(|(x, b)| x * b).sum::<f64>() + beta[d.k]).collect()
}

/// Fold of each labeled row, stratified by its label `y`: a seeded permutation with the
/// positives dealt round-robin first and the negatives continuing the count, so every
/// fold holds each class's share to within one row. Unstratified folds leave a rare
/// class out of some fold's training rows when labels are few (2 positives of 10 fall
/// into one fold one time in five), and every model fitted there then scores that fold
/// at its clip.
pub(crate) fn fold_of(y: &[f64], seed: u64) -> Vec<usize> {
    let m = y.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    // Stable: each class keeps the permutation's order.
    order.sort_by_key(|&r| y[r] <= 0.5);
    let mut fold = vec![0; m];
    order.iter().enumerate().for_each(|(pos, &r)| fold[r] = pos % FOLDS);
    fold
}

/// The rows `which` of a labeled design: their features, labels and weights.
fn subset(z: &[Vec<f64>], y: &[f64], w: &[f64], which: &[usize]) -> (Vec<Vec<f64>>, Vec<f64>, Vec<f64>) {
    (
        which.iter().map(|&r| z[r].clone()).collect(),
        which.iter().map(|&r| y[r]).collect(),
        which.iter().map(|&r| w[r]).collect(),
    )
}

/// The rows `which` of a labeled sample: their examples, labels and weights.
pub(crate) fn pick(rows: &[usize], y: &[f64], w: &[f64], which: &[usize]) -> (Vec<usize>, Vec<f64>, Vec<f64>) {
    (
        which.iter().map(|&r| rows[r]).collect(),
        which.iter().map(|&r| y[r]).collect(),
        which.iter().map(|&r| w[r]).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    /// An adaptive jury's examples: the first asked everyone, the second stopped after two
    /// sure judges. Each mean is over the judges present (the second's is not pulled to one
    /// half by the four never asked), and a judge's own one half still counts.
    #[test]
    fn mean_probability_is_over_the_judges_present() {
        let mut b = jury_core::JudgmentsBuilder::new(2).unwrap();
        for (judge, p) in [("j1", 0.9), ("j2", 0.7), ("j3", 0.5), ("j4", 0.2), ("j5", 0.6), ("j6", 0.4)] {
            b.push_binary("all", judge, Some(p)).unwrap();
        }
        for (judge, p) in [("j1", 0.95), ("j2", 0.85)] {
            b.push_binary("settled", judge, Some(p)).unwrap();
        }
        let d = LogOdds::new(&b.build(), &[0.5, 0.9]).unwrap();
        let m = d.mean_judge_probabilities();
        assert!((m[0] - 3.3 / 6.0).abs() < 1e-9, "{m:?}");
        assert!((m[1] - 0.9).abs() < 1e-9, "{m:?}");
    }

    /// A jury with one strong judge, two weak ones and a copy of a weak one, truth known.
    fn jury(n: usize, seed: u64) -> (LogOdds, Vec<u8>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let acc = [0.9, 0.65, 0.6];
        let mut x = Vec::with_capacity(n * 4);
        let mut truth = Vec::with_capacity(n);
        let mut lf = Vec::with_capacity(n);
        for _ in 0..n {
            let t = u8::from(rng.random::<f64>() < 0.4);
            let mut votes = [0.0; 4];
            for (k, a) in acc.iter().enumerate() {
                let right = rng.random::<f64>() < *a;
                votes[k] = if (t == 1) == right { 2.0 } else { -2.0 };
            }
            votes[3] = votes[2];
            x.extend_from_slice(&votes);
            lf.push(if votes.iter().sum::<f64>() > 0.0 { 0.8 } else { 0.2 });
            truth.push(t);
        }
        (LogOdds::from_dense(n, 4, x, &lf).unwrap(), truth)
    }

    #[test]
    fn recovers_the_strong_judge_from_few_labels() {
        let (d, truth) = jury(4000, 1);
        let index: Vec<usize> = (0..200).collect();
        let sample = Sample::new(4000, index.clone(), index.iter().map(|&i| truth[i]).collect(), None).unwrap();
        assert_eq!(picked_judge(&d, &sample), 0);
        let fit = Calibrated::fit(&d, &sample, 7);
        let acc = (200..4000).filter(|&i| (fit.probability(&d, i) > 0.5) == (truth[i] == 1)).count() as f64 / 3800.0;
        // The strong judge alone is right 90% of the time; the majority of the four far less.
        assert!(acc >= 0.88, "{acc}");
        assert!(fit.stack.iter().any(|(_, b)| *b > 0.0));
        // Deterministic for a seed.
        assert_eq!(fit, Calibrated::fit(&d, &sample, 7));
    }

    #[test]
    fn keeps_the_label_free_posterior_where_hard_votes_are_independent_given_its_classes() {
        // Five independent judges casting hard votes, the posterior of their exact model.
        let n = 3000;
        let (mut x, lf, truth) =
            crate::independence::tests::hard_jury(n, &[0.8, 0.75, 0.7, 0.85, 0.65], &[None; 5], logit(1.0, CLIP), 4);
        let index: Vec<usize> = (0..100).collect();
        let sample = Sample::new(n, index.clone(), index.iter().map(|&i| truth[i]).collect(), None).unwrap();
        let d = LogOdds::from_dense(n, 5, x.clone(), &lf).unwrap();
        assert!(d.label_free_holds());
        let fit = Calibrated::fit(&d, &sample, 1);
        fit.probabilities(&d).iter().zip(&lf).for_each(|(p, q)| assert!((p - q).abs() < 1e-3, "{p} {q}"));
        // The fifth judge replaced by a copy of the first: the labels decide again.
        x.chunks_exact_mut(5).for_each(|r| r[4] = r[0]);
        let d = LogOdds::from_dense(n, 5, x, &lf).unwrap();
        assert!(!d.label_free_holds());
        let fit = Calibrated::fit(&d, &sample, 1);
        assert!(fit.stack.iter().filter(|(c, _)| *c != Candidate::LabelFree).any(|(_, w)| *w > 0.0), "{:?}", fit.stack);
    }

    #[test]
    fn the_labels_name_the_classes_of_a_label_free_posterior_kept() {
        // Independent hard votes confirm the label-free model, but the labels' 1 is the
        // judges' No (a question asked the other way round): the posterior is right about
        // the votes and has the labels' classes the wrong way round.
        let n = 3000;
        let (x, lf, truth) =
            crate::independence::tests::hard_jury(n, &[0.8, 0.75, 0.7, 0.85, 0.65], &[None; 5], logit(1.0, CLIP), 4);
        let d = LogOdds::from_dense(n, 5, x, &lf).unwrap();
        assert!(d.label_free_holds());
        let index: Vec<usize> = (0..100).collect();
        let flipped: Vec<u8> = truth.iter().map(|&t| 1 - t).collect();
        let sample = Sample::new(n, index.clone(), index.iter().map(|&i| flipped[i]).collect(), None).unwrap();
        let fit = Calibrated::fit(&d, &sample, 1);
        assert!(fit.label_free_kept() && fit.label_free_swapped());
        fit.probabilities(&d).iter().zip(&lf).for_each(|(p, q)| assert!((p + q - 1.0).abs() < 1e-3, "{p} {q}"));
        let right =
            |p: &[f64]| (100..n).filter(|&i| (p[i] > 0.5) == (flipped[i] == 1)).count() as f64 / (n - 100) as f64;
        assert!(right(&lf) < 0.15 && right(&fit.probabilities(&d)) > 0.85, "{}", right(&lf));
        // The labels as the votes mean them: the posterior as it is.
        let sample = Sample::new(n, index.clone(), index.iter().map(|&i| truth[i]).collect(), None).unwrap();
        let fit = Calibrated::fit(&d, &sample, 1);
        assert!(fit.label_free_kept() && !fit.label_free_swapped());
    }

    #[test]
    fn members_with_a_coefficient_per_judge_join_once_labels_outnumber_them() {
        let (d, truth) = jury(4000, 3);
        let per_judge = |fit: &Calibrated| -> Vec<f64> {
            fit.stack.iter().filter(|(c, _)| c.per_judge()).map(|(_, w)| *w).collect()
        };
        // 6 labels, 3 of each class: each fold fits on 4 or 5, no more than 4 judges plus
        // an intercept.
        let of = |class: u8| (0..4000).filter(|&i| truth[i] == class).take(3).collect::<Vec<usize>>();
        let index: Vec<usize> = [of(1), of(0)].concat();
        let sample = Sample::new(4000, index.clone(), index.iter().map(|&i| truth[i]).collect(), None).unwrap();
        let few = Calibrated::fit(&d, &sample, 5);
        assert_eq!(per_judge(&few), vec![0.0; 3], "{:?}", few.stack);
        assert!(few.stack.iter().any(|(_, w)| *w > 0.0), "{:?}", few.stack);
        assert!(few.probabilities(&d).iter().all(|p| p.is_finite()));
        // 200 labels: they join, and the strong judge's weight reaches the stack through them.
        let index: Vec<usize> = (0..200).collect();
        let sample = Sample::new(4000, index.clone(), index.iter().map(|&i| truth[i]).collect(), None).unwrap();
        let many = Calibrated::fit(&d, &sample, 5);
        assert!(per_judge(&many).iter().any(|&w| w > 0.0), "{:?}", many.stack);
    }

    #[test]
    fn the_sparse_member_lets_in_the_strong_judge_and_little_else() {
        // The label-free posterior here is the majority of four votes, three of them weak
        // (one a copy): the labels should move the weight onto judge 0.
        let (d, truth) = jury(4000, 3);
        let rows: Vec<usize> = (0..200).collect();
        let y: Vec<f64> = rows.iter().map(|&i| f64::from(truth[i])).collect();
        let lin = fit_sparse(&d, &rows, &y, &[1.0; 200], 5);
        let strong = lin.w[0] * d.judge_sd[0];
        let others = lin.w[1..].iter().zip(&d.judge_sd[1..]).map(|(w, s)| (w * s).abs()).sum::<f64>();
        assert!(strong > 2.0 * others, "{lin:?}");
        let acc = (200..4000).filter(|&i| (lin.score(&d, i) > 0.0) == (truth[i] == 1)).count() as f64 / 3800.0;
        assert!(acc >= 0.88, "{acc}");
    }

    #[test]
    fn the_exchangeable_member_keeps_like_judges_alike_and_tells_a_strong_one_apart() {
        // Six judges of one accuracy, independent given the truth: with 60 labels the
        // member should weigh them nearly alike (logistic regression would not).
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let (n, k) = (3000, 6);
        let truth: Vec<u8> = (0..n).map(|_| u8::from(rng.random_bool(0.5))).collect();
        let mut x = vec![0.0; n * k];
        for (i, &t) in truth.iter().enumerate() {
            for j in 0..k {
                let sign = if t == 1 { 1.0 } else { -1.0 };
                x[i * k + j] = 0.8 * sign + rng.random_range(-2.5..2.5);
            }
        }
        let d = LogOdds::from_dense(n, k, x, &vec![0.5; n]).unwrap();
        let rows: Vec<usize> = (0..60).collect();
        let y: Vec<f64> = rows.iter().map(|&i| f64::from(truth[i])).collect();
        let lin = fit_exchangeable(&d, &rows, &y, &[1.0; 60], 3);
        let scaled: Vec<f64> = lin.w.iter().zip(&d.judge_sd).map(|(w, s)| w * s).collect();
        let (lo, hi) = scaled.iter().fold((f64::INFINITY, 0.0f64), |(l, h), &v| (l.min(v), h.max(v)));
        assert!(lo > 0.0 && hi < 1.5 * lo, "{scaled:?}");
        // Where one judge is far stronger, 200 labels move the weight onto it.
        let (d, truth) = jury(4000, 3);
        let rows: Vec<usize> = (0..200).collect();
        let y: Vec<f64> = rows.iter().map(|&i| f64::from(truth[i])).collect();
        let lin = fit_exchangeable(&d, &rows, &y, &[1.0; 200], 5);
        let scaled: Vec<f64> = lin.w.iter().zip(&d.judge_sd).map(|(w, s)| w * s).collect();
        assert!(scaled[1..].iter().all(|&v| scaled[0] > 2.0 * v.abs()), "{scaled:?}");
    }

    #[test]
    fn a_prior_pulls_the_fit_toward_its_centre_and_a_free_column_is_not_pulled() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let z: Vec<Vec<f64>> =
            (0..200).map(|_| vec![rng.random_range(-2.0..2.0), rng.random_range(-2.0..2.0)]).collect();
        let y: Vec<f64> =
            z.iter().map(|r| f64::from(u8::from(r[0] + 0.5 * r[1] > rng.random_range(-1.0..1.0)))).collect();
        let w = vec![1.0; 200];
        let pulled = logistic(&z, &y, &w, &Prior::ridge(2, 1e9, 1e-6).toward(vec![0.3, -0.7]), false).beta;
        assert!((pulled[0] - 0.3).abs() < 1e-4 && (pulled[1] + 0.7).abs() < 1e-4, "{pulled:?}");
        let free = logistic(&z, &y, &w, &Prior::ridge(2, 1e9, 1e-6).free(0), false).beta;
        let alone =
            logistic(&z.iter().map(|r| vec![r[0]]).collect::<Vec<_>>(), &y, &w, &Prior::ridge(1, 1e-6, 1e-6), false)
                .beta;
        assert!(free[1].abs() < 1e-4 && (free[0] - alone[0]).abs() < 1e-4, "{free:?} {alone:?}");
    }

    #[test]
    fn one_feature_logistic_matches_the_closed_form_of_a_saturated_fit() {
        // Two groups: s = -1 with 1 of 4 positive, s = 1 with 3 of 4; with a tiny ridge the
        // fit is the group log-odds, +-ln 3.
        let s = [-1.0, -1.0, -1.0, -1.0, 1.0, 1.0, 1.0, 1.0];
        let y = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0];
        let z: Vec<Vec<f64>> = s.iter().map(|&v| vec![v]).collect();
        let b = logistic(&z, &y, &[1.0; 8], &Prior::ridge(1, 1e-9, 1e-9), false).beta;
        assert!((b[0] - 3f64.ln()).abs() < 1e-5 && b[1].abs() < 1e-6, "{b:?}");
        let nn = logistic(
            &z.iter().map(|r| vec![-r[0]]).collect::<Vec<_>>(),
            &y,
            &[1.0; 8],
            &Prior::ridge(1, 1e-9, 1e-9),
            true,
        )
        .beta;
        assert_eq!(nn[0], 0.0);
    }

    #[test]
    fn the_intercepts_standard_error_matches_the_closed_form_without_features() {
        // Intercept only, 30 of 100 positive: the fit is ln(0.3 / 0.7) and its standard
        // error 1 / sqrt(100 * 0.3 * 0.7).
        let y: Vec<f64> = (0..100).map(|i| f64::from(u8::from(i < 30))).collect();
        let z: Vec<Vec<f64>> = (0..100).map(|_| vec![0.0]).collect();
        let fit = logistic(&z, &y, &[1.0; 100], &Prior::ridge(1, 1.0, 1e-9), false);
        assert!((fit.beta[1] - (0.3f64 / 0.7).ln()).abs() < 1e-6, "{:?}", fit.beta);
        assert!((fit.intercept_se - 1.0 / 21f64.sqrt()).abs() < 1e-6, "{}", fit.intercept_se);
    }

    proptest::proptest! {
        #[test]
        fn a_shrunk_intercept_keeps_its_sign_never_grows_and_vanishes_within_one_error(
            b in -20.0f64..20.0, se in 0.01f64..5.0,
        ) {
            let s = shrink_intercept(b, se);
            proptest::prop_assert!(s.abs() <= b.abs() && s * b >= 0.0);
            if b.abs() <= se {
                proptest::prop_assert_eq!(s, 0.0);
            } else {
                // Within se^2 / |b| of the estimate: nearly whole far from 0.
                proptest::prop_assert!((b - s).abs() <= se * se / b.abs() + 1e-12);
            }
        }

        #[test]
        fn folds_hold_each_class_evenly_and_one_seed_gives_one_split(
            labels in proptest::collection::vec(0u8..2, 2..300), seed in 0u64..1000,
        ) {
            let y: Vec<f64> = labels.iter().map(|&l| f64::from(l)).collect();
            let folds = fold_of(&y, seed);
            proptest::prop_assert_eq!(&folds, &fold_of(&y, seed));
            for class in [0.0, 1.0] {
                let counts: Vec<usize> =
                    (0..FOLDS).map(|f| (0..y.len()).filter(|&r| folds[r] == f && y[r] == class).count()).collect();
                let (lo, hi) = (counts.iter().min().copied(), counts.iter().max().copied());
                proptest::prop_assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= 1), "{:?}", counts);
            }
        }
    }
}
