//! KOS (Karger, Oh and Shah, NeurIPS 2011, "Iterative learning for reliable crowdsourcing
//! systems"): belief propagation on the example-judge graph for binary votes, messages
//! from examples to judges and back, each leaving out the message it answers. The
//! answer is the sign of the judges' reliability-weighted votes (crowd-kit's KOS).
//!
//! Messages are rescaled every iteration (the signs, which are all KOS reads, do not
//! change), so no early exit on overflow is needed. The x messages are not rescaled on
//! their own: scaling them scales every y alike, which the y rescaling absorbs. Examples with the same votes send
//! the same messages, so they run over patterns; every judge-to-example message starts
//! at 1 (crowd-kit draws them from N(1, 1)).

use jury_core::Judgments;

use crate::votes::Votes;
use crate::{AggregateError, Aggregation, Aggregator, SkillReport, TieBreak, finish_votes};

/// Settings of KOS.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Kos {
    pub ties: TieBreak,
    pub n_iter: usize,
}

impl Kos {
    pub fn new(ties: TieBreak) -> Self {
        Self { ties, n_iter: 100 }
    }
}

fn rescale(x: &mut [f64]) {
    let max = x.iter().fold(0.0, |m: f64, v| m.max(v.abs()));
    if max > 0.0 {
        x.iter_mut().for_each(|v| *v /= max);
    }
}

impl Aggregator for Kos {
    fn name(&self) -> &'static str {
        "kos"
    }

    fn aggregate(&self, j: &Judgments) -> Result<Aggregation, AggregateError> {
        if j.n_examples() == 0 {
            return Err(AggregateError::Empty { method: self.name() });
        }
        if j.n_classes() != 2 {
            return Err(AggregateError::Config {
                method: self.name(),
                reason: format!("KOS is for two classes; these judgments have {}", j.n_classes()),
            });
        }
        if self.n_iter == 0 {
            return Err(AggregateError::Config { method: self.name(), reason: "n_iter must be >= 1".into() });
        }
        let votes = Votes::new(j);
        let n_patterns = votes.n_patterns();
        // One message per (pattern, judge) pair in pattern order: the judge's message to
        // the example, y. The example's message back, x = (sum over the example's judges
        // of a * y) - a * y, is computed where it is read, never stored.
        let edges: Vec<(u32, u32, f32)> = (0..n_patterns)
            .flat_map(|p| votes.pattern(p).iter().map(move |&(k, v)| (p as u32, k, if v == 1 { 1.0 } else { -1.0 })))
            .collect();
        let mut to_example = vec![1.0; edges.len()];
        let mut example_sum = vec![0.0; n_patterns];
        let mut judge_sum = vec![0.0; votes.n_judges];
        let sums = |example_sum: &mut [f64], to_example: &[f64]| {
            example_sum.fill(0.0);
            for (&(p, _, a), y) in edges.iter().zip(to_example) {
                example_sum[p as usize] += f64::from(a) * y;
            }
        };
        for _ in 0..self.n_iter {
            sums(&mut example_sum, &to_example);
            judge_sum.fill(0.0);
            for (&(p, k, a), y) in edges.iter().zip(&to_example) {
                let a = f64::from(a);
                judge_sum[k as usize] += votes.counts[p as usize] * a * (example_sum[p as usize] - a * y);
            }
            for (y, &(p, k, a)) in to_example.iter_mut().zip(&edges) {
                let a = f64::from(a);
                let x = example_sum[p as usize] - a * *y;
                *y = judge_sum[k as usize] - a * x;
            }
            rescale(&mut to_example);
        }
        // No two judges share an example (a lone judge, say): no message carries
        // information, and KOS falls back to the plain vote.
        if to_example.iter().all(|&y| y == 0.0) {
            to_example.fill(1.0);
        }
        let mut t = vec![0.5; n_patterns * 2];
        sums(&mut example_sum, &to_example);
        // A sum within rounding of 0, measured against the size of the messages it adds
        // (not against the other sums, which may all be rounding noise), is a tie.
        let mut magnitude = vec![0.0; n_patterns];
        for (&(p, _, _), y) in edges.iter().zip(&to_example) {
            magnitude[p as usize] += y.abs();
        }
        for (p, &s) in example_sum.iter().enumerate() {
            if s.abs() > 1e-9 * magnitude[p] {
                let yes = if s > 0.0 { 1.0 } else { 0.0 };
                t[p * 2..p * 2 + 2].copy_from_slice(&[1.0 - yes, yes]);
            }
        }
        // A judge's reliability: its mean message, on the scale of the largest.
        let mut total = vec![0.0; votes.n_judges];
        for (&(p, k, _), y) in edges.iter().zip(&to_example) {
            total[k as usize] += votes.counts[p as usize] * y;
        }
        let count = votes.votes_per_judge();
        let mut mean: Vec<f64> = total.iter().zip(count).map(|(t, n)| if *n > 0.0 { t / n } else { 0.0 }).collect();
        rescale(&mut mean);
        let skills = votes.skills(mean);
        let report = SkillReport::new("reliability (mean message, largest = 1)", skills, self.n_iter, true, None);
        finish_votes(self.name(), j, &votes, &t, self.ties, report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::binary;

    #[test]
    fn outvotes_a_correlated_pair_of_bad_judges_only_with_reliabilities() {
        let rows: Vec<Vec<Option<f64>>> = (0..100)
            .map(|n| {
                let y = n % 2 == 0;
                let p = |wrong: bool| Some(if y != wrong { 0.9 } else { 0.1 });
                vec![p(n % 10 == 1), p(n % 10 == 2), p(n % 10 == 3), p(n % 10 >= 6), p(n % 10 >= 6)]
            })
            .collect();
        let refs: Vec<&[Option<f64>]> = rows.iter().map(|r| r.as_slice()).collect();
        let a = Kos::new(TieBreak::Positive).aggregate(&binary(&refs)).unwrap();
        let want: Vec<usize> = (0..100).map(|n| usize::from(n % 2 == 0)).collect();
        assert_eq!(a.labels(), want.as_slice());
    }

    /// Three judges who each disagree with the others as often: every weighted sum is
    /// rounding noise (about 1e-15), and each example is a tie, not a label.
    #[test]
    fn sums_that_are_rounding_noise_are_ties() {
        let rows: Vec<Vec<Option<f64>>> = vec![
            vec![None, Some(0.0), Some(1.0)],
            vec![Some(0.0), Some(0.0), Some(1.0)],
            vec![Some(0.0), Some(1.0), Some(0.0)],
        ];
        let refs: Vec<&[Option<f64>]> = rows.iter().map(|r| r.as_slice()).collect();
        let a = Kos::new(TieBreak::Positive).aggregate(&binary(&refs)).unwrap();
        for row in a.posteriors().rows() {
            assert_eq!(row, [0.5, 0.5]);
        }
    }

    #[test]
    fn refuses_three_classes() {
        let j =
            Judgments::from_entries(vec!["e".into()], vec!["j".into()], 3, vec![Some(vec![0.2, 0.3, 0.5])]).unwrap();
        assert!(matches!(Kos::new(TieBreak::Positive).aggregate(&j), Err(AggregateError::Config { .. })));
    }
}
