//! The explicit rule that turns a posterior with a tied top into one hard label.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Two classes whose scores differ by less than this are tied (averages of float
/// probabilities rarely tie exactly even when they are equal in exact arithmetic).
const TIE_EPS: f64 = 1e-12;

/// How a tie for the highest posterior is decided.
///
/// The SkillAggregation paper's MajorityVote figures correspond to `Positive`; its
/// AverageProb rule `mean > 0.5` corresponds to `Negative`. With C > 2 classes,
/// `Positive` takes the highest tied class index and `Negative` the lowest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TieBreak {
    Positive,
    Negative,
    /// A seeded uniform draw among the tied classes; the same seed gives the same labels.
    Random {
        seed: u64,
    },
}

impl TieBreak {
    /// Labels every row of the N x C `values`; returns the labels and the number of ties.
    pub(crate) fn label_all(self, values: &[f64], n_classes: usize) -> (Vec<usize>, usize) {
        let mut rng = match self {
            TieBreak::Random { seed } => Some(ChaCha8Rng::seed_from_u64(seed)),
            _ => None,
        };
        let mut ties = 0;
        let labels = values
            .chunks_exact(n_classes)
            .map(|row| {
                let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let tied: Vec<usize> = (0..n_classes).filter(|&c| max - row[c] < TIE_EPS).collect();
                if tied.len() > 1 {
                    ties += 1;
                }
                match (self, rng.as_mut()) {
                    (TieBreak::Positive, _) => tied[tied.len() - 1],
                    (TieBreak::Negative, _) | (TieBreak::Random { .. }, None) => tied[0],
                    (TieBreak::Random { .. }, Some(rng)) if tied.len() > 1 => tied[rng.random_range(0..tied.len())],
                    (TieBreak::Random { .. }, Some(_)) => tied[0],
                }
            })
            .collect();
        (labels, ties)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_differ_only_on_ties() {
        let v = [0.5, 0.5, 0.2, 0.8, 0.5, 0.5 + 1e-15];
        assert_eq!(TieBreak::Positive.label_all(&v, 2), (vec![1, 1, 1], 2));
        assert_eq!(TieBreak::Negative.label_all(&v, 2), (vec![0, 1, 0], 2));
        let (a, _) = TieBreak::Random { seed: 7 }.label_all(&[0.5; 2000], 2);
        let (b, _) = TieBreak::Random { seed: 7 }.label_all(&[0.5; 2000], 2);
        assert_eq!(a, b);
        let ones = a.iter().filter(|&&l| l == 1).count();
        assert!((400..600).contains(&ones), "{ones}");
    }

    #[test]
    fn multiclass_positive_takes_highest_tied_index() {
        let v = [0.4, 0.4, 0.2];
        assert_eq!(TieBreak::Positive.label_all(&v, 3).0, vec![1]);
        assert_eq!(TieBreak::Negative.label_all(&v, 3).0, vec![0]);
    }
}
