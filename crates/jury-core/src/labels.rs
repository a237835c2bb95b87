//! Reference labels aligned to a judgments matrix; only scoring reads them.

use std::collections::HashMap;

use crate::{CoreError, Judgments};

/// One optional class label per example of a [`Judgments`] matrix, in its example order.
/// Invariant: every label is `< n_classes`.
#[derive(Debug, Clone, PartialEq)]
pub struct Labels {
    n_classes: usize,
    labels: Vec<Option<usize>>,
}

impl Labels {
    pub fn new(n_classes: usize, labels: Vec<Option<usize>>) -> Result<Self, CoreError> {
        if let Some((i, &Some(l))) = labels.iter().enumerate().find(|(_, l)| l.is_some_and(|l| l >= n_classes)) {
            return Err(CoreError::LabelOutOfRange { example: format!("#{i}"), label: l, n_classes });
        }
        Ok(Self { n_classes, labels })
    }

    /// Aligns `(example_id, label)` pairs to `judgments`' examples. Examples without a
    /// pair stay unlabeled; pairs for examples the judgments do not contain are ignored
    /// and counted in the second return value.
    pub fn align<'a>(
        judgments: &Judgments,
        pairs: impl IntoIterator<Item = (&'a str, usize)>,
    ) -> Result<(Self, usize), CoreError> {
        let index: HashMap<&str, usize> =
            judgments.example_ids().iter().enumerate().map(|(i, id)| (id.as_str(), i)).collect();
        let n_classes = judgments.n_classes();
        let mut labels = vec![None; judgments.n_examples()];
        let mut unmatched = 0;
        for (id, label) in pairs {
            if label >= n_classes {
                return Err(CoreError::LabelOutOfRange { example: id.to_owned(), label, n_classes });
            }
            match index.get(id) {
                Some(&n) => labels[n] = Some(label),
                None => unmatched += 1,
            }
        }
        Ok((Self { n_classes, labels }, unmatched))
    }

    pub fn n_classes(&self) -> usize {
        self.n_classes
    }

    pub fn get(&self, n: usize) -> Option<usize> {
        self.labels.get(n).copied().flatten()
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    pub fn n_labeled(&self) -> usize {
        self.labels.iter().filter(|l| l.is_some()).count()
    }

    pub fn as_slice(&self) -> &[Option<usize>] {
        &self.labels
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn align_ignores_unknown_examples_and_checks_range() {
        let j = Judgments::from_entries(vec!["a".into(), "b".into()], vec!["x".into()], 2, vec![None, None]).unwrap();
        let (l, unmatched) = Labels::align(&j, [("b", 1), ("zzz", 0)]).unwrap();
        assert_eq!(l.as_slice(), &[None, Some(1)]);
        assert_eq!(unmatched, 1);
        assert_eq!(l.n_labeled(), 1);
        assert!(Labels::align(&j, [("a", 2)]).is_err());
        assert!(Labels::new(2, vec![Some(3)]).is_err());
    }
}
