//! MajorityVote (paper Algorithm 2): each judge's hard vote counts once.

use jury_core::Judgments;

use crate::{AggregateError, Aggregation, Aggregator, Diagnostics, TieBreak, finish};

/// The posterior is the fraction of present judges voting for each class; a judge's vote
/// is its argmax (`y > 0.5` for binary). Ties go by `ties`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MajorityVote {
    pub ties: TieBreak,
}

impl MajorityVote {
    /// Writes the fraction of `votes` for each class into the zeroed `row`; uniform when
    /// there is no vote. Returns whether there was any. Also Dawid-Skene's EM start.
    pub(crate) fn fraction_row(votes: impl Iterator<Item = usize>, row: &mut [f64]) -> bool {
        let mut count = 0usize;
        for v in votes {
            row[v] += 1.0;
            count += 1;
        }
        if count == 0 {
            row.fill(1.0 / row.len() as f64);
        } else {
            row.iter_mut().for_each(|r| *r /= count as f64);
        }
        count > 0
    }
}

impl Aggregator for MajorityVote {
    fn name(&self) -> &'static str {
        "mv"
    }

    fn aggregate(&self, j: &Judgments) -> Result<Aggregation, AggregateError> {
        if j.n_examples() == 0 {
            return Err(AggregateError::Empty { method: self.name() });
        }
        let c = j.n_classes();
        let mut values = vec![0.0; j.n_examples() * c];
        let mut unjudged = 0;
        for (n, row) in values.chunks_exact_mut(c).enumerate() {
            if !Self::fraction_row((0..j.n_judges()).filter_map(|k| j.vote(n, k)), row) {
                unjudged += 1;
            }
        }
        let (labels, ties) = self.ties.label_all(&values, j.n_classes());
        finish(self.name(), j.n_classes(), values, labels, Diagnostics::Counting { ties, unjudged })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::binary;

    #[test]
    fn counts_votes_and_applies_tie_rule() {
        // Votes: 1,0 (tie); 1,1,0 (1); 0.5 votes 0, so 0,0 (0).
        let j = binary(&[&[Some(0.9), Some(0.2), None], &[Some(0.6), Some(0.7), Some(0.1)], &[Some(0.5), None, Some(0.4)]]);
        let pos = MajorityVote { ties: TieBreak::Positive }.aggregate(&j).unwrap();
        assert_eq!(pos.labels(), &[1, 1, 0]);
        assert_eq!(pos.diagnostics(), &Diagnostics::Counting { ties: 1, unjudged: 0 });
        let neg = MajorityVote { ties: TieBreak::Negative }.aggregate(&j).unwrap();
        assert_eq!(neg.labels(), &[0, 1, 0]);
        assert!((pos.posteriors().row(1)[1] - 2.0 / 3.0).abs() < 1e-12);
    }
}
