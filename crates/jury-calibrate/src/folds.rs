//! Cross-validation inside the calibration labels: the stratified folds every fit deals,
//! a fold's rows, the labels' fitting weights and the setting with the least loss.

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::Sample;

/// Folds of every cross-validation inside the calibration labels: the stack's out-of-fold
/// scores, the members' settings, the rate estimators' cross-fitting.
pub(crate) const FOLDS: usize = 5;

/// Each labeled example's fitting weight, `1 / pi_i` scaled to mean 1.
pub(crate) fn weights(sample: &Sample) -> Vec<f64> {
    let e = sample.expansion();
    let mean = e.iter().sum::<f64>() / e.len() as f64;
    e.iter().map(|v| v / mean).collect()
}

/// The index of the least value, the first on ties (0 when empty): a cross-validated
/// setting from its out-of-fold losses.
pub(crate) fn argmin(v: &[f64]) -> usize {
    v.iter().enumerate().min_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |(l, _)| l)
}

/// Fold of each labeled row, stratified by its label `y`: a seeded permutation with the
/// positives dealt round-robin first and the negatives continuing the count, so every
/// fold holds each class's share to within one row. Unstratified folds leave a rare
/// class out of some fold's training rows when labels are few (2 positives of 10 fall
/// into one fold one time in five), and every model fitted there then scores that fold
/// at its clip.
pub(crate) fn fold_of(y: &[f64], seed: u64) -> Vec<usize> {
    let m = y.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    // Stable: each class keeps the permutation's order.
    order.sort_by_key(|&r| y[r] <= 0.5);
    let mut fold = vec![0; m];
    order.iter().enumerate().for_each(|(pos, &r)| fold[r] = pos % FOLDS);
    fold
}

/// The rows `which` of a labeled design: their features, labels and weights.
pub(crate) fn subset(z: &[Vec<f64>], y: &[f64], w: &[f64], which: &[usize]) -> (Vec<Vec<f64>>, Vec<f64>, Vec<f64>) {
    (
        which.iter().map(|&r| z[r].clone()).collect(),
        which.iter().map(|&r| y[r]).collect(),
        which.iter().map(|&r| w[r]).collect(),
    )
}

/// The rows `which` of a labeled sample: their examples, labels and weights.
pub(crate) fn pick(rows: &[usize], y: &[f64], w: &[f64], which: &[usize]) -> (Vec<usize>, Vec<f64>, Vec<f64>) {
    (
        which.iter().map(|&r| rows[r]).collect(),
        which.iter().map(|&r| y[r]).collect(),
        which.iter().map(|&r| w[r]).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn folds_hold_each_class_evenly_and_one_seed_gives_one_split(
            labels in proptest::collection::vec(0u8..2, 2..300), seed in 0u64..1000,
        ) {
            let y: Vec<f64> = labels.iter().map(|&l| f64::from(l)).collect();
            let folds = fold_of(&y, seed);
            proptest::prop_assert_eq!(&folds, &fold_of(&y, seed));
            for class in [0.0, 1.0] {
                let counts: Vec<usize> =
                    (0..FOLDS).map(|f| (0..y.len()).filter(|&r| folds[r] == f && y[r] == class).count()).collect();
                let (lo, hi) = (counts.iter().min().copied(), counts.iter().max().copied());
                proptest::prop_assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= 1), "{:?}", counts);
            }
        }
    }
}
