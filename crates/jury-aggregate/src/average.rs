//! AverageProb (paper Algorithm 1): the mean of the available judges' probability vectors.

use jury_core::Judgments;

use crate::{AggregateError, Aggregation, Aggregator, Diagnostics, TieBreak, finish};

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
        if j.n_examples() == 0 {
            return Err(AggregateError::Empty { method: self.name() });
        }
        let c = j.n_classes();
        let mut values = vec![0.0; j.n_examples() * c];
        let mut unjudged = 0;
        for (n, row) in values.chunks_exact_mut(c).enumerate() {
            let mut count = 0usize;
            for p in (0..j.n_judges()).filter_map(|k| j.get(n, k)) {
                row.iter_mut().zip(p).for_each(|(r, x)| *r += x);
                count += 1;
            }
            if count == 0 {
                unjudged += 1;
                row.fill(1.0 / c as f64);
            } else {
                row.iter_mut().for_each(|r| *r /= count as f64);
            }
        }
        let (labels, ties) = self.ties.label_all(&values, c);
        finish(self.name(), c, values, labels, Diagnostics::Counting { ties, unjudged })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
