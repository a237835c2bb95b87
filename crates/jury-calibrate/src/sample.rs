//! A calibration sample: which examples carry a label, the label, and the probability
//! each had of being chosen, which every estimator and fit weighs by.

use crate::CalibrationError;

/// Labeled examples of one jury. Invariant: indices are distinct and in range, labels are
/// 0 or 1, inclusion probabilities are in (0, 1].
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    n_examples: usize,
    index: Vec<usize>,
    label: Vec<u8>,
    inclusion: Vec<f64>,
}

impl Sample {
    /// A sample of `index` (examples of a jury of `n_examples`) with their labels;
    /// `inclusion` is each one's probability of having been chosen (`None`: a uniform
    /// draw, `len / n_examples` each).
    pub fn new(
        n_examples: usize,
        index: Vec<usize>,
        label: Vec<u8>,
        inclusion: Option<Vec<f64>>,
    ) -> Result<Self, CalibrationError> {
        let n = index.len();
        if n < 2 {
            return Err(CalibrationError::BudgetTooSmall(n));
        }
        if n > n_examples {
            return Err(CalibrationError::BudgetTooLarge { budget: n, examples: n_examples });
        }
        let mut seen = vec![false; n_examples];
        for &i in &index {
            if i >= n_examples {
                return Err(CalibrationError::OutOfRange { index: i, examples: n_examples });
            }
            if std::mem::replace(&mut seen[i], true) {
                return Err(CalibrationError::Duplicate(i));
            }
        }
        let inclusion = inclusion.unwrap_or_else(|| vec![n as f64 / n_examples as f64; n]);
        if let Some((k, &value)) = inclusion.iter().enumerate().find(|(_, p)| !(**p > 0.0 && **p <= 1.0 + 1e-12)) {
            return Err(CalibrationError::Inclusion { index: index[k], value });
        }
        let ones = label.iter().filter(|&&l| l == 1).count();
        if ones == 0 || ones == n {
            return Err(CalibrationError::OneClass(n, label[0]));
        }
        Ok(Self { n_examples, index, label, inclusion })
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    pub fn n_examples(&self) -> usize {
        self.n_examples
    }

    pub fn index(&self) -> &[usize] {
        &self.index
    }

    pub fn labels(&self) -> &[u8] {
        &self.label
    }

    pub fn inclusion(&self) -> &[f64] {
        &self.inclusion
    }

    /// Whether labeled row `r` was sure to be in the sample (inclusion probability 1: a
    /// label had beside a plan of more), so that it stands for no other example.
    pub fn is_sure(&self, r: usize) -> bool {
        self.inclusion[r] >= 1.0 - 1e-12
    }

    /// How many labeled rows were sure to be in the sample ([`Self::is_sure`]).
    pub fn n_sure(&self) -> usize {
        (0..self.len()).filter(|&r| self.is_sure(r)).count()
    }

    /// Each labeled example's expansion factor `1 / (N q_i)`, `q_i = pi_i / n` its
    /// probability per draw: the Hansen-Hurwitz weight that makes a sample mean of
    /// `y_i * weight_i` unbiased for the population mean (1 for a uniform draw).
    pub(crate) fn expansion(&self) -> Vec<f64> {
        let n = self.len() as f64;
        let big_n = self.n_examples as f64;
        self.inclusion.iter().map(|&p| n / (big_n * p)).collect()
    }

    /// Whether example `i` of the jury is in the sample.
    pub fn mask(&self) -> Vec<bool> {
        let mut m = vec![false; self.n_examples];
        self.index.iter().for_each(|&i| m[i] = true);
        m
    }
}
