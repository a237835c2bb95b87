//! The six simple models of the label that the calibrated stack ([`crate::Calibrated`])
//! combines, and the two baselines a replay scores it against (the picked judge and
//! logistic regression on the judges' log-odds).
//!
//! Each gives a linear score over the judges' log-odds and the label-free
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

use crate::Sample;
use crate::folds::{FOLDS, argmin, fold_of, subset, weights};
use crate::log_odds::LogOdds;
use crate::logistic::{Prior, log_loss, logistic, logistic_1d, logistic_from};
use crate::sparse::{Fit, Problem, penalties};

/// The weight, in labels, of the label-free class-mean difference in `lda-shrunk`.
const SHRINK_LABELS: f64 = 300.0;

/// A linear score: `sum_k w_k x_ik + label_free * lf_i + bias`, the log-odds of class 1.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Linear {
    pub(crate) w: Vec<f64>,
    pub(crate) label_free: f64,
    pub(crate) bias: f64,
}

impl Linear {
    pub(crate) fn score(&self, d: &LogOdds, i: usize) -> f64 {
        let s: f64 = d.row(i).iter().zip(&self.w).map(|(x, w)| x * w).sum();
        s + self.label_free * d.label_free[i] + self.bias
    }

    pub(crate) fn add_scaled(&mut self, other: &Linear, c: f64) {
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
    pub(crate) fn per_judge(self) -> bool {
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
    /// labels and `w` their weights (mean 1); `seed` deals the folds of the settings'
    /// cross-validation.
    pub(crate) fn fit(self, d: &LogOdds, rows: &[usize], y: &[f64], w: &[f64], seed: u64) -> Linear {
        self.fit_at(d, rows, y, w, seed, None).0
    }

    /// [`Candidate::fit`] at `setting`, a setting chosen on other labels (no
    /// cross-validation inside `rows`), or with None at the one cross-validation inside
    /// `rows` chooses; with the setting fitted: the index of the sparse member's penalty
    /// on its path or of the exchangeable member's ridge, None for the members without one.
    pub(crate) fn fit_at(
        self,
        d: &LogOdds,
        rows: &[usize],
        y: &[f64],
        w: &[f64],
        seed: u64,
        setting: Setting,
    ) -> (Linear, Setting) {
        let k = d.k;
        let lin = match self {
            Candidate::Sparse => {
                let (lin, chosen) = fit_sparse(d, rows, y, w, seed, setting);
                return (lin, Some(chosen));
            }
            Candidate::Exchangeable => {
                let (lin, chosen) = fit_exchangeable(d, rows, y, w, seed, setting);
                return (lin, Some(chosen));
            }
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
        };
        (lin, None)
    }
}

/// A member's setting chosen by cross-validation inside its labels ([`Candidate::fit_at`]).
pub(crate) type Setting = Option<usize>;

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
///
/// With `chosen`, that penalty's index on the path, not cross-validated; returns the
/// index fitted.
fn fit_sparse(d: &LogOdds, rows: &[usize], y: &[f64], w: &[f64], seed: u64, chosen: Option<usize>) -> (Linear, usize) {
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
    let best = chosen.unwrap_or_else(|| sparse_penalty(&z, y, w, &penalised, &lambdas, seed)).min(lambdas.len() - 1);
    let fit = all.path(&lambdas[..=best]).pop().unwrap_or(Fit { beta: vec![0.0; k + 1], intercept: 0.0 });
    // The intercept stays as fitted: with several judges in, it carries their biases, and
    // 0 is no score's own threshold (shrinking it, as `shrink_intercept` does for one
    // score, cost logistic regression 1.7 points on HaluEval-10 at 100 labels).
    let lin = Linear {
        w: fit.beta[..k].iter().zip(&d.judge_sd).map(|(b, s)| b / s).collect(),
        label_free: fit.beta[k] / d.label_free_sd,
        bias: fit.intercept,
    };
    (lin, best)
}

/// The index of the sparse member's penalty among `lambdas` with the least 5-fold
/// (seeded) out-of-fold log-loss on the rows of `z`.
fn sparse_penalty(z: &[Vec<f64>], y: &[f64], w: &[f64], penalised: &[bool], lambdas: &[f64], seed: u64) -> usize {
    let m = z.len();
    let folds = fold_of(y, seed);
    // Each fold's mean out-of-fold log-loss at each penalty.
    let mut fold_loss = vec![vec![0.0; lambdas.len()]; FOLDS.min(m)];
    for (f, fl) in fold_loss.iter_mut().enumerate() {
        let (train, test): (Vec<usize>, Vec<usize>) = (0..m).partition(|&r| folds[r] != f);
        let (tz, ty, tw) = subset(z, y, w, &train);
        let path = Problem { z: &tz, y: &ty, w: &tw, penalised }.path(lambdas);
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
    argmin(&mean)
}

/// Ridges tried for the exchangeable member, on the sum of log-losses over the labels.
const EXCHANGEABLE_RIDGES: [f64; 8] = [0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0];

/// The exchangeable member: logistic regression on the judges' log-odds, each divided by
/// its standard deviation over every example, under a ridge that pulls every judge's
/// weight toward their common weight (a prior that treats the judges as exchangeable
/// until the labels tell them apart); the ridge minimises the 5-fold (seeded) out-of-fold
/// log-loss on `rows`. Its largest ridge is the judges' standardised log-odds summed with
/// one weight; its smallest, nearly logistic regression on every judge.
///
/// With `chosen`, that ridge's index, not cross-validated; returns the index fitted.
fn fit_exchangeable(
    d: &LogOdds,
    rows: &[usize],
    y: &[f64],
    w: &[f64],
    seed: u64,
    chosen: Option<usize>,
) -> (Linear, usize) {
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
    let best = chosen.unwrap_or_else(|| exchangeable_ridge(&z, y, w, seed, &prior)).min(EXCHANGEABLE_RIDGES.len() - 1);
    let beta = logistic(&z, y, w, &prior(EXCHANGEABLE_RIDGES[best]), false).beta;
    // The intercept stays as fitted, as `sparse`'s does: several judges' biases, no
    // score's own threshold.
    let lin = Linear {
        w: beta[..k].iter().zip(&d.judge_sd).map(|(b, s)| (b + beta[k] / norm) / s).collect(),
        label_free: 0.0,
        bias: beta[k + 1],
    };
    (lin, best)
}

/// The index of the exchangeable member's ridge with the least 5-fold (seeded)
/// out-of-fold log-loss on the rows of `z` (the judges' columns, then their scaled sum).
fn exchangeable_ridge(z: &[Vec<f64>], y: &[f64], w: &[f64], seed: u64, prior: &dyn Fn(f64) -> Prior) -> usize {
    let m = z.len();
    let k = z.first().map_or(1, Vec::len) - 1;
    let folds = fold_of(y, seed);
    let mut loss = [0.0; EXCHANGEABLE_RIDGES.len()];
    for f in 0..FOLDS.min(m) {
        let (train, test): (Vec<usize>, Vec<usize>) = (0..m).partition(|&r| folds[r] != f);
        let (tz, ty, tw) = subset(z, y, w, &train);
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
    argmin(&loss)
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

/// Ridge logistic regression on the judges' log-odds fitted on the same labels (the
/// baseline a user would try first): unit ridge, as scikit-learn's default.
pub fn logistic_baseline(d: &LogOdds, sample: &Sample) -> Vec<f64> {
    let y: Vec<f64> = sample.labels().iter().map(|&l| f64::from(l)).collect();
    let z: Vec<Vec<f64>> = sample.index().iter().map(|&i| d.row(i).to_vec()).collect();
    let beta = logistic(&z, &y, &weights(sample), &Prior::ridge(d.k, 1.0, 1e-6), false).beta;
    (0..d.n).map(|i| d.row(i).iter().zip(&beta).map(|(x, b)| x * b).sum::<f64>() + beta[d.k]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::tests::jury;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn the_sparse_member_lets_in_the_strong_judge_and_little_else() {
        // The label-free posterior here is the majority of four votes, three of them weak
        // (one a copy): the labels should move the weight onto judge 0.
        let (d, truth) = jury(4000, 3);
        let rows: Vec<usize> = (0..200).collect();
        let y: Vec<f64> = rows.iter().map(|&i| f64::from(truth[i])).collect();
        let lin = fit_sparse(&d, &rows, &y, &[1.0; 200], 5, None).0;
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
        let lin = fit_exchangeable(&d, &rows, &y, &[1.0; 60], 3, None).0;
        let scaled: Vec<f64> = lin.w.iter().zip(&d.judge_sd).map(|(w, s)| w * s).collect();
        let (lo, hi) = scaled.iter().fold((f64::INFINITY, 0.0f64), |(l, h), &v| (l.min(v), h.max(v)));
        assert!(lo > 0.0 && hi < 1.5 * lo, "{scaled:?}");
        // Where one judge is far stronger, 200 labels move the weight onto it.
        let (d, truth) = jury(4000, 3);
        let rows: Vec<usize> = (0..200).collect();
        let y: Vec<f64> = rows.iter().map(|&i| f64::from(truth[i])).collect();
        let lin = fit_exchangeable(&d, &rows, &y, &[1.0; 200], 5, None).0;
        let scaled: Vec<f64> = lin.w.iter().zip(&d.judge_sd).map(|(w, s)| w * s).collect();
        assert!(scaled[1..].iter().all(|&v| scaled[0] > 2.0 * v.abs()), "{scaled:?}");
    }
}
