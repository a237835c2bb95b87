//! MajorityVote (the SkillAggregation paper's Algorithm 2): each judge's hard vote counts once.

use jury_core::{Judgments, argmax};

use crate::{AggregateError, Aggregation, Aggregator, TieBreak, mean_over_judges};

/// The posterior is the fraction of present judges voting for each class; a judge's vote
/// is its argmax (`y > 0.5` for binary). Ties go by `ties`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MajorityVote {
    pub ties: TieBreak,
}

impl Aggregator for MajorityVote {
    fn name(&self) -> &'static str {
        "mv"
    }

    fn aggregate(&self, j: &Judgments) -> Result<Aggregation, AggregateError> {
        mean_over_judges(self.name(), j, self.ties, |p, row| row[argmax(p)] += 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Diagnostics;
    use crate::testutil::binary;

    #[test]
    fn counts_votes_and_applies_tie_rule() {
        // Votes: 1,0 (tie); 1,1,0 (1); 0.5 votes 0, so 0,0 (0).
        let j =
            binary(&[&[Some(0.9), Some(0.2), None], &[Some(0.6), Some(0.7), Some(0.1)], &[Some(0.5), None, Some(0.4)]]);
        let pos = MajorityVote { ties: TieBreak::Positive }.aggregate(&j).unwrap();
        assert_eq!(pos.labels(), &[1, 1, 0]);
        assert_eq!(pos.diagnostics(), &Diagnostics::Counting { ties: 1, unjudged: 0 });
        let neg = MajorityVote { ties: TieBreak::Negative }.aggregate(&j).unwrap();
        assert_eq!(neg.labels(), &[0, 1, 0]);
        assert!((pos.posteriors().row(1)[1] - 2.0 / 3.0).abs() < 1e-12);
    }
}
