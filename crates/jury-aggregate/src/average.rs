//! AverageProb (the SkillAggregation paper's Algorithm 1): the mean of the available judges' probability vectors.

use jury_core::Judgments;

use crate::{AggregateError, Aggregation, Aggregator, TieBreak, mean_over_judges};

/// Mean probability over the judges present on each example. An example no judge
/// answered gets the uniform vector and is counted as unjudged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AverageProb {
    pub ties: TieBreak,
}

impl Aggregator for AverageProb {
    fn name(&self) -> &'static str {
        "avg"
    }

    fn aggregate(&self, j: &Judgments) -> Result<Aggregation, AggregateError> {
        mean_over_judges(self.name(), j, self.ties, |p, row| row.iter_mut().zip(p).for_each(|(r, x)| *r += x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Diagnostics;
    use crate::testutil::binary;

    #[test]
    fn averages_available_judges_only() {
        let j = binary(&[&[Some(0.9), None, Some(0.3)], &[None, None, None]]);
        let a = AverageProb { ties: TieBreak::Negative }.aggregate(&j).unwrap();
        assert!((a.posteriors().row(0)[1] - 0.6).abs() < 1e-12);
        assert_eq!(a.posteriors().row(1), &[0.5, 0.5]);
        assert_eq!(a.labels(), &[1, 0]);
        assert_eq!(a.diagnostics(), &Diagnostics::Counting { ties: 1, unjudged: 1 });
    }
}
