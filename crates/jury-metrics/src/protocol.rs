//! The evaluation protocol of every result reported over seeds: a seed's labeled
//! examples part into a dev set (which may choose settings) and a test split (which
//! scores), and a method's accuracy is read on the test split only.
//!
//! Invariant: a seed's split depends only on the labeled examples, the seed and the dev
//! size, so every method of a run (context-free or not) is scored on the same examples
//! and their accuracies pair up.

use jury_core::Labels;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

/// One seed's part of the labeled examples (indices in example order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// The first `dev_size` of a seeded shuffle of the labeled examples.
    pub dev: Vec<usize>,
    /// Every other labeled example, in example order.
    pub test: Vec<usize>,
}

impl Split {
    /// Seed `seed`'s split of the examples with a label in `labels`.
    pub fn of(labels: &Labels, seed: u64, dev_size: usize) -> Self {
        Self::of_labeled(&labeled(labels), seed, dev_size)
    }

    /// Seed `seed`'s split of `labeled` (example indices, ascending).
    pub fn of_labeled(labeled: &[usize], seed: u64, dev_size: usize) -> Self {
        let mut order = labeled.to_vec();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
        let dev: Vec<usize> = order[..dev_size.min(order.len())].to_vec();
        let mut is_dev = vec![false; labeled.iter().max().map_or(0, |m| m + 1)];
        dev.iter().for_each(|&i| is_dev[i] = true);
        let test = labeled.iter().copied().filter(|&i| !is_dev[i]).collect();
        Self { dev, test }
    }

    /// `labels` with every example outside the test split unlabeled, so any metric of
    /// this crate reads the test split only.
    pub fn test_labels(&self, labels: &Labels) -> Labels {
        let mut kept = vec![None; labels.len()];
        self.test.iter().for_each(|&i| kept[i] = labels.get(i));
        // Same classes and a subset of valid labels: cannot fail.
        Labels::new(labels.n_classes(), kept).unwrap_or_else(|_| labels.clone())
    }
}

/// Indices of the examples that have a label, ascending.
pub fn labeled(labels: &Labels) -> Vec<usize> {
    (0..labels.len()).filter(|&i| labels.get(i).is_some()).collect()
}

/// Share of the examples `idx` whose `predicted` class (in example order) is their
/// label; 0 for no examples.
pub fn accuracy_on(predicted: &[usize], labels: &Labels, idx: &[usize]) -> f64 {
    let right = idx.iter().filter(|&&i| labels.get(i) == Some(predicted[i])).count();
    right as f64 / idx.len().max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Seed 3's dev set as every recorded run drew it (metrics.json's `dev_sets`): a
    /// change of shuffle would silently move every recorded dev set.
    #[test]
    fn split_is_pinned() {
        let labeled: Vec<usize> = (0..20).collect();
        let s = Split::of_labeled(&labeled, 3, 4);
        assert_eq!(s.dev, vec![16, 11, 0, 10]);
        assert_eq!(s, Split::of_labeled(&labeled, 3, 4));
        assert_ne!(s.dev, Split::of_labeled(&labeled, 4, 4).dev);
    }

    proptest! {
        /// A seed's dev set and test split part the labeled examples, and repeat.
        #[test]
        fn splits_part_the_labeled_examples(mask in proptest::collection::vec(any::<bool>(), 1..80), seed in 0u64..50, dev in 0usize..30) {
            let labels = Labels::new(2, mask.iter().map(|&m| m.then_some(1)).collect()).unwrap();
            let s = Split::of(&labels, seed, dev);
            let labeled = labeled(&labels);
            prop_assert_eq!(s.dev.len(), dev.min(labeled.len()));
            let mut all: Vec<usize> = s.dev.iter().chain(&s.test).copied().collect();
            all.sort_unstable();
            prop_assert_eq!(&all, &labeled);
            prop_assert!(s.test.windows(2).all(|w| w[0] < w[1]));
            prop_assert_eq!(s.test_labels(&labels).n_labeled(), s.test.len());
        }
    }

    #[test]
    fn accuracy_on_reads_only_the_subset() {
        let labels = Labels::new(2, vec![Some(1), Some(0), None, Some(1)]).unwrap();
        assert_eq!(accuracy_on(&[1, 1, 0, 0], &labels, &[0, 1]), 0.5);
        assert_eq!(accuracy_on(&[1, 1, 0, 0], &labels, &[0]), 1.0);
        assert_eq!(accuracy_on(&[1, 1, 0, 0], &labels, &[]), 0.0);
    }
}
