//! GLAD (Whitehill et al., NeurIPS 2009, "Whose vote should count more"): a judge votes
//! the true class with probability sigma(alpha_k * e^beta_n), ability alpha per judge and
//! easiness e^beta per example, errors spread evenly over the other classes; fit by EM
//! with N(1, 1) priors on alpha and beta, uniform class prior (crowd-kit's GLAD).
//!
//! Examples with the same votes share one beta: their terms in the objective are equal,
//! so from equal starts they stay equal, and EM runs over patterns.

use jury_core::Judgments;

use crate::special::{sigmoid, softmax_in_place, softplus};
use crate::votes::Votes;
use crate::{AggregateError, Aggregation, Aggregator, SkillReport, TieBreak, check_fit, finish_votes};

/// Settings of GLAD: up to `max_iter` EM iterations, stopping when the objective per
/// vote gains less than `tol`; each M-step runs up to `m_step_max_iter` Newton sweeps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Glad {
    pub ties: TieBreak,
    pub max_iter: usize,
    pub tol: f64,
    pub m_step_max_iter: usize,
}

impl Glad {
    pub fn new(ties: TieBreak) -> Self {
        Self { ties, max_iter: 100, tol: 1e-5, m_step_max_iter: 25 }
    }
}

/// A Newton step never moves a parameter by more than this (the objective is not
/// concave in beta).
const MAX_STEP: f64 = 1.0;
/// An M-step ends when no parameter moves more than this in a sweep (EM needs an
/// improvement, not the maximum; crowd-kit's conjugate gradient stops at a gradient
/// norm of 1e-2).
const M_STEP_TOL: f64 = 1e-4;

struct Model<'a> {
    votes: &'a Votes,
    /// ln(C - 1): a wrong vote's share of 1 - sigma.
    log_other: f64,
    alpha: Vec<f64>,
    /// Per pattern.
    beta: Vec<f64>,
}

impl Model<'_> {
    /// Posteriors per pattern (P x C) under a uniform class prior.
    fn e_step(&self) -> Vec<f64> {
        let c = self.votes.n_classes;
        let mut t = vec![0.0; self.votes.n_patterns() * c];
        for (p, row) in t.chunks_exact_mut(c).enumerate() {
            let x = self.beta[p].exp();
            for &(k, v) in self.votes.pattern(p) {
                let ax = self.alpha[k as usize] * x;
                // ln(1 - sigma(ax)) = ln sigma(ax) - ax.
                let right = -softplus(-ax);
                let wrong = right - ax - self.log_other;
                for (class, l) in row.iter_mut().enumerate() {
                    *l += if class == v as usize { right } else { wrong };
                }
            }
            softmax_in_place(row);
        }
        t
    }

    /// Pattern `p`'s expected log-likelihood term (one example) plus beta's log prior.
    fn pattern_q(&self, p: usize, beta: f64, t: &[f64]) -> f64 {
        let c = self.votes.n_classes;
        let x = beta.exp();
        let mut q = -0.5 * (beta - 1.0).powi(2);
        for &(k, v) in self.votes.pattern(p) {
            let ax = self.alpha[k as usize] * x;
            let tv = t[p * c + v as usize];
            let right = -softplus(-ax);
            q += tv * right + (1.0 - tv) * (right - ax - self.log_other);
        }
        q
    }

    /// The M-step objective: expected complete log-likelihood plus the priors' logs.
    fn q(&self, t: &[f64]) -> f64 {
        let betas: f64 =
            (0..self.votes.n_patterns()).map(|p| self.votes.counts[p] * self.pattern_q(p, self.beta[p], t)).sum();
        betas - 0.5 * self.alpha.iter().map(|a| (a - 1.0).powi(2)).sum::<f64>()
    }

    /// One Newton sweep: every alpha at once (the objective is concave in each), then
    /// each pattern's beta with step halving until its term does not decrease. Returns
    /// the largest move.
    fn sweep(&mut self, t: &[f64]) -> f64 {
        let c = self.votes.n_classes;
        let k_all = self.alpha.len();
        let (mut g, mut h) = (vec![0.0; k_all], vec![0.0; k_all]);
        for p in 0..self.votes.n_patterns() {
            let (x, w) = (self.beta[p].exp(), self.votes.counts[p]);
            for &(k, v) in self.votes.pattern(p) {
                let s = sigmoid(self.alpha[k as usize] * x);
                g[k as usize] += w * (t[p * c + v as usize] - s) * x;
                h[k as usize] += w * s * (1.0 - s) * x * x;
            }
        }
        let mut moved: f64 = 0.0;
        for (k, a) in self.alpha.iter_mut().enumerate() {
            let step = ((g[k] - (*a - 1.0)) / (h[k] + 1.0)).clamp(-MAX_STEP, MAX_STEP);
            *a += step;
            moved = moved.max(step.abs());
        }
        for p in 0..self.votes.n_patterns() {
            let beta = self.beta[p];
            let x = beta.exp();
            let (mut g, mut h) = (-(beta - 1.0), -1.0);
            for &(k, v) in self.votes.pattern(p) {
                let a = self.alpha[k as usize];
                let s = sigmoid(a * x);
                let r = t[p * c + v as usize] - s;
                g += r * a * x;
                h += r * a * x - a * a * x * x * s * (1.0 - s);
            }
            let newton = h < 0.0 && (g / h).abs() < MAX_STEP;
            let mut step = if h < 0.0 { -g / h } else { g.signum() * MAX_STEP };
            step = step.clamp(-MAX_STEP, MAX_STEP);
            // A Newton step where the term is locally concave is taken as is; elsewhere
            // the step halves until the term does not decrease.
            if !newton {
                let before = self.pattern_q(p, beta, t);
                while step.abs() > 1e-12 && self.pattern_q(p, beta + step, t) < before {
                    step *= 0.5;
                }
            }
            if step.abs() > 1e-12 {
                self.beta[p] = beta + step;
                moved = moved.max(step.abs());
            }
        }
        moved
    }
}

impl Aggregator for Glad {
    fn name(&self) -> &'static str {
        "glad"
    }

    fn aggregate(&self, j: &Judgments) -> Result<Aggregation, AggregateError> {
        check_fit(self.name(), j, self.max_iter, self.tol)?;
        if self.m_step_max_iter == 0 {
            return Err(AggregateError::Config { method: self.name(), reason: "m_step_max_iter must be >= 1".into() });
        }
        let votes = Votes::new(j);
        let n_votes = votes.votes_per_judge().iter().sum::<f64>().max(1.0);
        let mut m = Model {
            votes: &votes,
            log_other: ((votes.n_classes - 1) as f64).ln(),
            alpha: vec![1.0; votes.n_judges],
            beta: vec![1.0; votes.n_patterns()],
        };
        // crowd-kit's loop: an E-step, an M-step, then the objective of that E-step's
        // posteriors under the new parameters; the labels are that last E-step's (the
        // M-step after it does not move them).
        let mut t = Vec::new();
        let (mut iterations, mut converged, mut last) = (0, false, f64::NEG_INFINITY);
        while iterations < self.max_iter {
            iterations += 1;
            t = m.e_step();
            for _ in 0..self.m_step_max_iter {
                if m.sweep(&t) < M_STEP_TOL {
                    break;
                }
            }
            let q = m.q(&t) / n_votes;
            let gain = q - last;
            last = q;
            if gain < self.tol {
                converged = true;
                break;
            }
        }
        let skills = votes.skills(m.alpha.iter().copied());
        let report = SkillReport::new(
            "ability alpha (P(correct) = sigmoid(alpha * easiness))",
            skills,
            iterations,
            converged,
            Some(last),
        );
        finish_votes(self.name(), j, &votes, &t, self.ties, report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Diagnostics;
    use crate::testutil::binary;

    #[test]
    fn stops_and_labels_where_crowd_kit_does() {
        // crowd-kit's GLAD() on this jury: its objective falls at the second iteration,
        // and the labels are that iteration's E-step's.
        use crate::dawid_skene::tests::{crowd_kit_jury, labels_string};
        let a = Glad::new(TieBreak::Negative).aggregate(&crowd_kit_jury()).unwrap();
        let Diagnostics::Skills(r) = a.diagnostics() else { panic!() };
        assert_eq!(r.iterations, 2);
        assert_eq!(labels_string(&a), "1010010110100111000110001110101110000001");
    }

    #[test]
    fn an_adversarial_judge_gets_a_negative_ability() {
        // j0, j1 right on every example, j2 always wrong.
        let rows: Vec<Vec<Option<f64>>> = (0..30)
            .map(|n| {
                let y = if n % 3 == 0 { 0.9 } else { 0.2 };
                vec![Some(y), Some(y), Some(1.0 - y)]
            })
            .collect();
        let refs: Vec<&[Option<f64>]> = rows.iter().map(|r| r.as_slice()).collect();
        let a = Glad::new(TieBreak::Positive).aggregate(&binary(&refs)).unwrap();
        let want: Vec<usize> = (0..30).map(|n| usize::from(n % 3 == 0)).collect();
        assert_eq!(a.labels(), want.as_slice());
        let Diagnostics::Skills(r) = a.diagnostics() else { panic!() };
        let s: Vec<f64> = r.skills.iter().map(|s| s.unwrap()).collect();
        assert!(s[0] > 0.5 && s[1] > 0.5 && s[2] < 0.0, "{s:?}");
    }
}
