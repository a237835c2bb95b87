//! Per-example class posteriors, the common output of every aggregator.

use crate::{CoreError, SUM_TOLERANCE, argmax};

/// An N x C row-stochastic matrix. Invariant: each row is finite, in [0, 1] and sums to 1
/// within [`SUM_TOLERANCE`].
#[derive(Debug, Clone, PartialEq)]
pub struct Posteriors {
    n_classes: usize,
    values: Vec<f64>,
}

impl Posteriors {
    pub fn new(n_classes: usize, values: Vec<f64>) -> Result<Self, CoreError> {
        if n_classes < 2 {
            return Err(CoreError::TooFewClasses(n_classes));
        }
        if !values.len().is_multiple_of(n_classes) {
            return Err(CoreError::Shape {
                what: "posterior values",
                expected: values.len().next_multiple_of(n_classes),
                got: values.len(),
            });
        }
        for (row, r) in values.chunks_exact(n_classes).enumerate() {
            if let Some(x) = r.iter().find(|x| !(x.is_finite() && (0.0..=1.0).contains(*x))) {
                return Err(CoreError::BadPosterior { row, reason: format!("entry {x} outside [0, 1]") });
            }
            let sum: f64 = r.iter().sum();
            if (sum - 1.0).abs() > SUM_TOLERANCE {
                return Err(CoreError::BadPosterior { row, reason: format!("sums to {sum}") });
            }
        }
        Ok(Self { n_classes, values })
    }

    pub fn n_classes(&self) -> usize {
        self.n_classes
    }

    pub fn len(&self) -> usize {
        self.values.len() / self.n_classes
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn row(&self, n: usize) -> &[f64] {
        &self.values[n * self.n_classes..(n + 1) * self.n_classes]
    }

    pub fn rows(&self) -> impl Iterator<Item = &[f64]> {
        self.values.chunks_exact(self.n_classes)
    }

    /// Argmax of each row, lowest class on exact ties.
    pub fn argmax_labels(&self) -> Vec<usize> {
        self.rows().map(argmax).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_rows() {
        assert!(Posteriors::new(2, vec![0.3, 0.7, 1.0, 0.0]).is_ok());
        assert!(Posteriors::new(2, vec![0.3, 0.8]).is_err());
        assert!(Posteriors::new(2, vec![f64::NAN, 1.0]).is_err());
        assert!(Posteriors::new(2, vec![0.3]).is_err());
        let p = Posteriors::new(3, vec![0.2, 0.4, 0.4]).unwrap();
        assert_eq!(p.argmax_labels(), vec![1]);
        assert_eq!(p.len(), 1);
    }
}
