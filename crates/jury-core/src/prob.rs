//! A probability checked once at the boundary, so algorithms never re-check ranges.

use crate::{CoreError, SUM_TOLERANCE};

/// A finite number in [0, 1].
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Prob(f64);

impl Prob {
    pub fn new(value: f64) -> Result<Self, CoreError> {
        if value.is_finite() && (0.0..=1.0).contains(&value) {
            Ok(Prob(value))
        } else {
            Err(CoreError::ProbOutOfRange { value })
        }
    }

    pub fn get(self) -> f64 {
        self.0
    }
}

/// Checks that `v` holds `n_classes` probabilities summing to 1 (within
/// [`SUM_TOLERANCE`]) and renormalises it in place so the sum is 1 to rounding.
pub fn normalize_prob_vector(v: &mut [f64], n_classes: usize) -> Result<(), CoreError> {
    if v.len() != n_classes {
        return Err(CoreError::WrongClassCount { got: v.len(), expected: n_classes });
    }
    for &x in v.iter() {
        Prob::new(x)?;
    }
    let sum: f64 = v.iter().sum();
    if (sum - 1.0).abs() > SUM_TOLERANCE {
        return Err(CoreError::BadSum { sum });
    }
    v.iter_mut().for_each(|x| *x /= sum);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_out_of_range_and_nan() {
        assert!(Prob::new(0.0).is_ok());
        assert!(Prob::new(1.0).is_ok());
        assert!(Prob::new(-1e-9).is_err());
        assert!(Prob::new(1.000001).is_err());
        assert!(Prob::new(f64::NAN).is_err());
        assert!(Prob::new(f64::INFINITY).is_err());
    }

    #[test]
    fn renormalises_within_tolerance_only() {
        let mut v = vec![0.2, 0.3, 0.5004];
        normalize_prob_vector(&mut v, 3).unwrap();
        assert!((v.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        let mut bad = vec![0.2, 0.3, 0.6];
        assert!(matches!(normalize_prob_vector(&mut bad, 3), Err(CoreError::BadSum { .. })));
        let mut short = vec![1.0];
        assert!(matches!(
            normalize_prob_vector(&mut short, 2),
            Err(CoreError::WrongClassCount { got: 1, expected: 2 })
        ));
    }
}
