//! The explicit rule that turns a posterior with a tied top into one hard label.

use jury_core::Judgments;
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
    /// For a method's own iterations; a method's final labels come from
    /// [`TieBreak::label_by_sides`].
    pub(crate) fn label_all(self, values: &[f64], n_classes: usize) -> (Vec<usize>, usize) {
        let mut rng = self.rng();
        let mut ties = 0;
        let labels = values
            .chunks_exact(n_classes)
            .map(|row| {
                let tied = top_classes(row);
                if tied.len() > 1 {
                    ties += 1;
                }
                self.pick(&tied, rng.as_mut())
            })
            .collect();
        (labels, ties)
    }

    /// A method's final labels of the N x C `values` (rows in `j`'s example order): the
    /// top class; on a tie, the tied class that most of the example's judges took
    /// ([`sides`]); and only when they split evenly too, this rule. A model that cannot
    /// tell the classes apart (Dawid-Skene on a jury that always agrees has posterior
    /// 0.5 everywhere) so defers to its judges instead of overruling all of them.
    /// Returns the labels and the number of tied posteriors, every one of them broken.
    pub(crate) fn label_by_sides(self, values: &[f64], j: &Judgments) -> (Vec<usize>, usize) {
        let c = j.n_classes();
        let mut rng = self.rng();
        let mut ties = 0;
        let labels = values
            .chunks_exact(c)
            .enumerate()
            .map(|(n, row)| {
                let tied = top_classes(row);
                if tied.len() == 1 {
                    return tied[0];
                }
                ties += 1;
                let sides = sides(j, n);
                let most = tied.iter().map(|&t| sides[t]).max().unwrap_or(0);
                let tied: Vec<usize> = tied.into_iter().filter(|&t| sides[t] == most).collect();
                self.pick(&tied, rng.as_mut())
            })
            .collect();
        (labels, ties)
    }

    fn rng(self) -> Option<ChaCha8Rng> {
        match self {
            TieBreak::Random { seed } => Some(ChaCha8Rng::seed_from_u64(seed)),
            _ => None,
        }
    }

    /// One of the `tied` classes (ascending, never empty) by this rule.
    fn pick(self, tied: &[usize], rng: Option<&mut ChaCha8Rng>) -> usize {
        match (self, rng) {
            (TieBreak::Positive, _) => tied[tied.len() - 1],
            (TieBreak::Negative, _) | (TieBreak::Random { .. }, None) => tied[0],
            (TieBreak::Random { .. }, Some(rng)) if tied.len() > 1 => tied[rng.random_range(0..tied.len())],
            (TieBreak::Random { .. }, Some(_)) => tied[0],
        }
    }
}

/// The classes within [`TIE_EPS`] of a row's highest score, ascending (never empty for
/// a non-empty row of numbers).
fn top_classes(row: &[f64]) -> Vec<usize> {
    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (0..row.len()).filter(|&c| max - row[c] < TIE_EPS).collect()
}

/// How many of example `n`'s judges took each side: a judge counts for its top class
/// when that class is its only top class, so a binary 0.5 takes no side (its hard vote,
/// 0 by `jury-core`'s rule, is a convention, not an opinion).
fn sides(j: &Judgments, n: usize) -> Vec<usize> {
    let mut counts = vec![0; j.n_classes()];
    for (_, p) in j.row(n) {
        if let [only] = top_classes(p)[..] {
            counts[only] += 1;
        }
    }
    counts
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

    fn binary(rows: &[&[f64]]) -> Judgments {
        let mut b = jury_core::JudgmentsBuilder::new(2).unwrap();
        for (n, row) in rows.iter().enumerate() {
            for (k, &p) in row.iter().enumerate() {
                b.push_binary(&format!("e{n}"), &format!("j{k}"), Some(p)).unwrap();
            }
        }
        b.build()
    }

    #[test]
    fn a_tied_posterior_goes_to_the_side_the_judges_took_then_to_the_rule() {
        // Tied posteriors on every example: a unanimous Yes, a unanimous No, a split, and
        // judges at 0.5 who take no side.
        let j = binary(&[&[1.0, 0.9, 1.0], &[0.0, 0.2, 0.1], &[0.9, 0.1, 0.5], &[0.5, 0.5, 0.5]]);
        let values = [0.5; 8];
        // An even split, and judges at 0.5 who take no side, fall to the rule.
        assert_eq!(TieBreak::Positive.label_by_sides(&values, &j), (vec![1, 0, 1, 1], 4));
        assert_eq!(TieBreak::Negative.label_by_sides(&values, &j), (vec![1, 0, 0, 0], 4));
        let (random, ties) = TieBreak::Random { seed: 3 }.label_by_sides(&values, &j);
        assert_eq!((&random[..2], ties), (&[1, 0][..], 4));
        // Posteriors that do not tie are labels as they are, whatever the judges say.
        let (labels, ties) = TieBreak::Negative.label_by_sides(&[0.8, 0.2, 0.3, 0.7, 0.5, 0.5, 0.5, 0.5], &j);
        assert_eq!((labels, ties), (vec![0, 1, 0, 0], 2));
    }
}
