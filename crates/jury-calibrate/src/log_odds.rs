//! The judges' log-odds as every calibration fit reads them: a dense examples x judges
//! matrix, with what the fits take from every example, labeled or not (means, the inverse
//! total covariance, the label-free posterior and whether the votes confirm its model).

use jury_core::Judgments;

use crate::CalibrationError;
use crate::independence::votes_independent_given_class;
use crate::linalg::inverse_spd;

/// Log-odds are clipped to this probability from 0 and 1 (a hard verdict reads as
/// +-6.9), so a confident judge does not decide alone by an infinite margin.
pub(crate) const CLIP: f64 = 1e-3;

/// The judges' log-odds as a dense examples x judges matrix (a missing judgment reads as
/// 0, no evidence), with what the fits need from all examples: the mean, the inverse
/// total covariance and the label-free posterior's log-odds and class-mean difference.
#[derive(Debug, Clone)]
pub struct LogOdds {
    pub(crate) n: usize,
    pub(crate) k: usize,
    pub(crate) x: Vec<f64>,
    pub(crate) mean: Vec<f64>,
    pub(crate) inv_cov: Vec<f64>,
    pub(crate) label_free: Vec<f64>,
    pub(crate) label_free_diff: Vec<f64>,
    /// Over every example, which no calibration sample changes: each judge's share of
    /// positive votes and mean probability, and the label-free posterior's mean.
    pub(crate) judge_positive: Vec<f64>,
    pub(crate) judge_mean: Vec<f64>,
    pub(crate) label_free_mean: f64,
    /// Standard deviations over every example of each judge's log-odds and of the
    /// label-free log-odds: the sparse member's penalty treats the columns on one scale.
    pub(crate) judge_sd: Vec<f64>,
    pub(crate) label_free_sd: f64,
    /// Whether the judges' hard verdicts are as independent given the label-free classes
    /// as the label-free model says ([`crate::independence`]): the calibrated method then
    /// keeps the label-free posterior, its classes named by the labels.
    pub(crate) label_free_holds: bool,
    /// How many judges judged each example: a missing judgment reads as log-odds 0, which
    /// a judgment of exactly one half also gives, so only this tells them apart.
    pub(crate) present: Vec<usize>,
}

impl LogOdds {
    /// Reads `j` (binary) with the label-free recommended method's probability of class 1
    /// for each example.
    pub fn new(j: &Judgments, label_free: &[f64]) -> Result<Self, CalibrationError> {
        let (x, present) = dense(j)?;
        Self::build(j.n_examples(), j.n_judges(), x, present, label_free)
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

    pub(crate) fn row(&self, i: usize) -> &[f64] {
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
        (0..self.n).map(|i| mean_present(self.row(i), self.present[i])).collect()
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

    /// Examples `keep` only, in that order, with everything taken over every example
    /// (means, covariance, the independence check) taken again over them.
    pub(crate) fn restrict(&self, keep: &[usize]) -> Result<Self, CalibrationError> {
        let x = keep.iter().flat_map(|&i| self.row(i).iter().copied()).collect();
        let present = keep.iter().map(|&i| self.present[i]).collect();
        let label_free: Vec<f64> = keep.iter().map(|&i| self.label_free_probability(i)).collect();
        Self::build(keep.len(), self.k, x, present, &label_free)
    }
}

/// [`LogOdds::mean_judge_probabilities`] read straight from binary judgments, without the
/// label-free posterior a [`LogOdds`] is built with: what `jury label-plan` follows, which
/// needs nothing else.
pub fn mean_judge_probabilities(j: &Judgments) -> Result<Vec<f64>, CalibrationError> {
    let (x, present) = dense(j)?;
    let k = j.n_judges();
    Ok(present.iter().enumerate().map(|(i, &p)| mean_present(&x[i * k..(i + 1) * k], p)).collect())
}

/// Binary judgments as a row-major examples x judges matrix of clipped log-odds (0 where
/// a judge did not judge), with how many judged each example.
fn dense(j: &Judgments) -> Result<(Vec<f64>, Vec<usize>), CalibrationError> {
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
    Ok((x, present))
}

/// The mean probability of the `present` judges of one row of log-odds (its missing
/// entries are 0, one half each, taken back out); one half where none judged.
fn mean_present(row: &[f64], present: usize) -> f64 {
    let missing = (row.len() - present) as f64;
    let sum = row.iter().map(|&x| sigmoid(x)).sum::<f64>() - 0.5 * missing;
    if present == 0 { 0.5 } else { sum / present as f64 }
}

pub(crate) fn logit(p: f64, clip: f64) -> f64 {
    let p = p.clamp(clip, 1.0 - clip);
    (p / (1.0 - p)).ln()
}

pub(crate) fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z.clamp(-50.0, 50.0)).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let j = b.build();
        let m = LogOdds::new(&j, &[0.5, 0.9]).unwrap().mean_judge_probabilities();
        assert!((m[0] - 3.3 / 6.0).abs() < 1e-9, "{m:?}");
        assert!((m[1] - 0.9).abs() < 1e-9, "{m:?}");
        // Read without a label-free posterior: the same numbers, to the bit.
        assert_eq!(mean_judge_probabilities(&j).unwrap(), m);
    }
}
