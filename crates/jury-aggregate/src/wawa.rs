//! Agreement-weighted votes (crowd-kit's Wawa and ZeroBasedSkill): each judge's weight is
//! its share of votes that agree with the jury's own answer, found once from the plain
//! majority (Wawa) or refined by a decaying step (ZeroBasedSkill).

use jury_core::Judgments;

use crate::votes::Votes;
use crate::{AggregateError, Aggregation, Aggregator, SkillReport, TieBreak, finish_votes};

const SKILL: &str = "share of votes agreeing with the aggregate";

/// Worker Agreement with Aggregate: majority vote, each judge's agreement with it, then
/// the vote weighted by those agreements. The posterior is the weighted vote share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wawa {
    pub ties: TieBreak,
}

/// ZeroBasedSkill: skills start at 1/C (plus 1e-5) and move `lr` of the way towards each
/// judge's agreement with the current weighted vote, `lr` halving every
/// `lr_steps_to_reduce` iterations (crowd-kit's defaults: 100 iterations, 1.0, 20, 0.5).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ZeroBasedSkill {
    pub ties: TieBreak,
    pub n_iter: usize,
    pub lr_init: f64,
    pub lr_steps_to_reduce: usize,
    pub lr_reduce_factor: f64,
}

impl ZeroBasedSkill {
    pub fn new(ties: TieBreak) -> Self {
        Self { ties, n_iter: 100, lr_init: 1.0, lr_steps_to_reduce: 20, lr_reduce_factor: 0.5 }
    }
}

/// The weighted vote's share per pattern (P x C): weights summed per class over the sum
/// of all; uniform where no positive weight voted.
fn vote_shares(votes: &Votes, weights: &[f64]) -> Vec<f64> {
    let c = votes.n_classes;
    let mut s = votes.weighted_sums(weights);
    for row in s.chunks_exact_mut(c) {
        let total: f64 = row.iter().sum();
        if total > 0.0 {
            row.iter_mut().for_each(|x| *x /= total);
        } else {
            row.fill(1.0 / c as f64);
        }
    }
    s
}

/// Skills as weights: a judge with no vote weighs nothing (it appears in no pattern).
fn weights(skills: &[Option<f64>]) -> Vec<f64> {
    skills.iter().map(|s| s.unwrap_or(0.0)).collect()
}

impl Aggregator for Wawa {
    fn name(&self) -> &'static str {
        "wawa"
    }

    fn aggregate(&self, j: &Judgments) -> Result<Aggregation, AggregateError> {
        if j.n_examples() == 0 {
            return Err(AggregateError::Empty { method: self.name() });
        }
        let votes = Votes::new(j);
        let majority = vote_shares(&votes, &vec![1.0; votes.n_judges]);
        let skills = votes.agreement(&votes.label_counts(&majority, self.ties));
        let shares = vote_shares(&votes, &weights(&skills));
        let report = SkillReport::new(SKILL, skills, 1, true, None);
        finish_votes(self.name(), j, &votes, &shares, self.ties, report)
    }
}

impl Aggregator for ZeroBasedSkill {
    fn name(&self) -> &'static str {
        "zbs"
    }

    fn aggregate(&self, j: &Judgments) -> Result<Aggregation, AggregateError> {
        if j.n_examples() == 0 {
            return Err(AggregateError::Empty { method: self.name() });
        }
        let ok = self.n_iter > 0
            && self.lr_steps_to_reduce > 0
            && self.lr_init.is_finite()
            && self.lr_init > 0.0
            && self.lr_reduce_factor > 0.0
            && self.lr_reduce_factor <= 1.0;
        if !ok {
            return Err(AggregateError::Config {
                method: self.name(),
                reason: "n_iter and lr_steps_to_reduce must be >= 1, lr_init > 0, lr_reduce_factor in (0, 1]".into(),
            });
        }
        let votes = Votes::new(j);
        let start = 1.0 / votes.n_classes as f64 + 1e-5;
        let mut skills = votes.skills(std::iter::repeat(start));
        let mut lr = self.lr_init;
        let mut moved = f64::INFINITY;
        for iteration in 1..=self.n_iter {
            if iteration % self.lr_steps_to_reduce == 0 {
                lr *= self.lr_reduce_factor;
            }
            let shares = vote_shares(&votes, &weights(&skills));
            let agreement = votes.agreement(&votes.label_counts(&shares, self.ties));
            moved = 0.0;
            for (s, a) in skills.iter_mut().zip(agreement) {
                if let (Some(s), Some(a)) = (s.as_mut(), a) {
                    let step = lr * (a - *s);
                    *s += step;
                    moved = f64::max(moved, step.abs());
                }
            }
        }
        let shares = vote_shares(&votes, &weights(&skills));
        let report = SkillReport::new(SKILL, skills, self.n_iter, moved < 1e-6, None);
        finish_votes(self.name(), j, &votes, &shares, self.ties, report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Diagnostics;
    use crate::testutil::binary;

    fn skills(a: &Aggregation) -> Vec<Option<f64>> {
        match a.diagnostics() {
            Diagnostics::Skills(r) => r.skills.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn wawa_weighs_by_agreement_with_the_majority() {
        // j0 and j1 agree with the majority everywhere, j2 on 1 of 4 examples.
        let j = binary(&[
            &[Some(0.9), Some(0.8), Some(0.1)],
            &[Some(0.2), Some(0.1), Some(0.9)],
            &[Some(0.7), Some(0.9), Some(0.8)],
            &[Some(0.1), Some(0.3), Some(0.6)],
        ]);
        let a = Wawa { ties: TieBreak::Negative }.aggregate(&j).unwrap();
        assert_eq!(a.labels(), &[1, 0, 1, 0]);
        assert_eq!(skills(&a), vec![Some(1.0), Some(1.0), Some(0.25)]);
        // Example 0: weights 1 + 1 for Yes, 0.25 for No.
        assert!((a.posteriors().row(0)[1] - 2.0 / 2.25).abs() < 1e-12);
    }

    #[test]
    fn zbs_skills_converge_to_agreement_and_a_missing_judge_has_none() {
        let j = binary(&[
            &[Some(0.9), Some(0.8), None],
            &[Some(0.2), Some(0.1), None],
            &[Some(0.7), Some(0.3), None],
            &[Some(0.1), Some(0.3), None],
        ]);
        let a = ZeroBasedSkill::new(TieBreak::Positive).aggregate(&j).unwrap();
        let s = skills(&a);
        assert_eq!(s[2], None);
        // Example 2 is a tie at equal weights, then goes to Yes: j0 agrees 4/4, j1 3/4.
        assert!((s[0].unwrap() - 1.0).abs() < 1e-3 && (s[1].unwrap() - 0.75).abs() < 1e-3, "{s:?}");
        assert_eq!(a.labels(), &[1, 0, 1, 0]);
    }
}
