//! One-coin Dawid-Skene: Dawid-Skene with one number per judge, its probability of
//! voting the true class, errors spread evenly over the other classes (crowd-kit's
//! OneCoinDawidSkene). Far fewer parameters than full confusion matrices, so it holds
//! on small or sparse juries.

use jury_core::Judgments;

use crate::votes::Votes;
use crate::{AggregateError, Aggregation, Aggregator, SkillReport, TieBreak, check_fit, finish_votes};

/// Probabilities are kept in [EPS, 1 - EPS] so that a perfect judge's log is finite.
const EPS: f64 = 1e-10;

/// Settings of one-coin Dawid-Skene: EM from majority-vote posteriors with a learned
/// class prior, stopping when crowd-kit's objective per vote (its `_evidence_lower_bound`
/// under the new skills: the prior's log counted once per vote, so it can fall, and then
/// EM stops) gains less than `tol`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OneCoinDawidSkene {
    pub ties: TieBreak,
    pub max_iter: usize,
    pub tol: f64,
}

impl OneCoinDawidSkene {
    pub fn new(ties: TieBreak) -> Self {
        Self { ties, max_iter: 100, tol: 1e-5 }
    }
}

impl Aggregator for OneCoinDawidSkene {
    fn name(&self) -> &'static str {
        "onecoin"
    }

    fn aggregate(&self, j: &Judgments) -> Result<Aggregation, AggregateError> {
        check_fit(self.name(), j, self.max_iter, self.tol)?;
        let votes = Votes::new(j);
        let per_judge = votes.votes_per_judge();
        let n_votes: f64 = per_judge.iter().sum::<f64>().max(1.0);
        let mut t = votes.vote_fractions();
        let mut prior = class_prior(&votes, &t);
        let mut skills = m_step(&votes, &t, per_judge);
        let (mut iterations, mut converged, mut last) = (0, false, f64::NEG_INFINITY);
        while iterations < self.max_iter {
            let (next, _) = e_step(&votes, &prior, &skills);
            iterations += 1;
            t = next;
            prior = class_prior(&votes, &t);
            skills = m_step(&votes, &t, per_judge);
            let objective = crowd_kit_objective(&votes, &t, &prior, &skills) / n_votes;
            let gain = objective - last;
            last = objective;
            if gain < self.tol {
                converged = true;
                break;
            }
        }
        let skills = votes.skills(skills);
        let report = SkillReport::new("P(correct vote)", skills, iterations, converged, Some(last));
        finish_votes(self.name(), j, &votes, &t, self.ties, report)
    }
}

/// The mean posterior over judged examples; uniform when none was judged.
fn class_prior(votes: &Votes, t: &[f64]) -> Vec<f64> {
    let c = votes.n_classes;
    let mut prior = vec![0.0; c];
    let mut total = 0.0;
    for p in (0..votes.n_patterns()).filter(|&p| !votes.pattern(p).is_empty()) {
        for (q, x) in prior.iter_mut().zip(&t[p * c..(p + 1) * c]) {
            *q += votes.counts[p] * x;
        }
        total += votes.counts[p];
    }
    if total > 0.0 {
        prior.iter_mut().for_each(|q| *q = (*q / total).max(EPS));
    } else {
        prior.fill(1.0 / c as f64);
    }
    prior
}

/// Each judge's mean posterior of the class it voted; 0.5 for a judge with no vote
/// (never read: it appears in no pattern).
fn m_step(votes: &Votes, t: &[f64], per_judge: &[f64]) -> Vec<f64> {
    let c = votes.n_classes;
    let mut right = vec![0.0; votes.n_judges];
    for p in 0..votes.n_patterns() {
        for &(k, v) in votes.pattern(p) {
            right[k as usize] += votes.counts[p] * t[p * c + v as usize];
        }
    }
    right.iter().zip(per_judge).map(|(r, &n)| if n > 0.0 { (r / n).clamp(EPS, 1.0 - EPS) } else { 0.5 }).collect()
}

/// crowd-kit's `_evidence_lower_bound` (not divided by the votes) with one-coin errors:
/// over judged patterns, each vote's posterior-weighted ln e(class, vote) + ln prior
/// (e = skill on the diagonal, (1 - skill) / (C - 1) off it, both in [EPS, 1 - EPS]),
/// plus the posteriors' entropy (posteriors floored at EPS there).
fn crowd_kit_objective(votes: &Votes, t: &[f64], prior: &[f64], skills: &[f64]) -> f64 {
    let c = votes.n_classes;
    let ln = |x: f64| x.clamp(EPS, 1.0 - EPS).ln();
    let right: Vec<f64> = skills.iter().map(|&s| ln(s)).collect();
    let wrong: Vec<f64> = skills.iter().map(|&s| ln((1.0 - s) / (c - 1) as f64)).collect();
    crate::dawid_skene::crowd_kit_objective(
        votes,
        t,
        prior,
        |k, class, vote| {
            if class == vote { right[k] } else { wrong[k] }
        },
    )
}

/// Posteriors per pattern (P x C) and the observed-data log-likelihood.
fn e_step(votes: &Votes, prior: &[f64], skills: &[f64]) -> (Vec<f64>, f64) {
    let c = votes.n_classes;
    let log_right: Vec<f64> = skills.iter().map(|s| s.ln()).collect();
    let log_wrong: Vec<f64> = skills.iter().map(|s| ((1.0 - s) / (c - 1) as f64).max(EPS).ln()).collect();
    let log_prior: Vec<f64> = prior.iter().map(|q| q.ln()).collect();
    let mut out = vec![0.0; votes.n_patterns() * c];
    let mut ll = 0.0;
    for (p, row) in out.chunks_exact_mut(c).enumerate() {
        let pat = votes.pattern(p);
        if pat.is_empty() {
            row.copy_from_slice(prior);
            continue;
        }
        row.copy_from_slice(&log_prior);
        for &(k, v) in pat {
            let (r, w) = (log_right[k as usize], log_wrong[k as usize]);
            for (class, l) in row.iter_mut().enumerate() {
                *l += if class == v as usize { r } else { w };
            }
        }
        ll += votes.counts[p] * crate::special::softmax_in_place(row);
    }
    (out, ll)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Diagnostics;
    use crate::testutil::binary;

    #[test]
    fn stops_where_crowd_kit_does() {
        // crowd-kit's OneCoinDawidSkene() on this jury: 10 iterations, then its objective
        // gains less than 1e-5 (run to the end, example 5 goes to 1).
        use crate::dawid_skene::tests::{crowd_kit_jury, labels_string};
        let a = OneCoinDawidSkene::new(TieBreak::Negative).aggregate(&crowd_kit_jury()).unwrap();
        assert_eq!(labels_string(&a), "0011000100100111000110001110100110000001");
        let Diagnostics::Skills(r) = a.diagnostics() else { panic!() };
        assert_eq!(r.iterations, 10);
    }

    #[test]
    fn a_perfect_and_an_always_wrong_judge_give_finite_posteriors() {
        let rows: Vec<Vec<Option<f64>>> =
            (0..40).map(|n| if n % 2 == 0 { vec![Some(0.9), Some(0.1)] } else { vec![Some(0.1), Some(0.9)] }).collect();
        let refs: Vec<&[Option<f64>]> = rows.iter().map(|r| r.as_slice()).collect();
        let a = OneCoinDawidSkene::new(TieBreak::Positive).aggregate(&binary(&refs)).unwrap();
        assert!(a.posteriors().rows().all(|r| r.iter().all(|p| p.is_finite())));
        let Diagnostics::Skills(r) = a.diagnostics() else { panic!() };
        assert!(r.converged);
    }
}
