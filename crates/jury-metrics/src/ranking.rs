//! Agreement of an estimated ranking with a reference ranking: rank-biased overlap,
//! average precision at k and Spearman's rho. Rankings are lists of item indices, best
//! first.

use std::collections::HashSet;

/// Extrapolated rank-biased overlap (Webber, Moffat and Zobel 2010, eq. 32) of two
/// equally long rankings with persistence `p` (0 < p < 1; 0.95 in the triplet-ranking
/// paper): 1 for identical rankings, 0 for disjoint ones, top-weighted in between.
/// `None` when the lengths differ, a list is empty or `p` is out of range.
pub fn rank_biased_overlap(a: &[usize], b: &[usize], p: f64) -> Option<f64> {
    if a.len() != b.len() || a.is_empty() || !(p > 0.0 && p < 1.0) {
        return None;
    }
    let k = a.len();
    let (mut seen_a, mut seen_b) = (HashSet::new(), HashSet::new());
    let mut overlap = 0usize;
    let mut sum = 0.0;
    let mut weight = 1.0;
    for d in 1..=k {
        let (x, y) = (a[d - 1], b[d - 1]);
        if x == y {
            overlap += 1;
        } else {
            overlap += usize::from(seen_b.contains(&x)) + usize::from(seen_a.contains(&y));
        }
        seen_a.insert(x);
        seen_b.insert(y);
        weight *= p;
        sum += overlap as f64 / d as f64 * weight;
    }
    Some(overlap as f64 / k as f64 * weight + (1.0 - p) / p * sum)
}

/// Average precision at `k` of `predicted` against the top `k` of `reference` (the
/// relevant set), as `ml_metrics.apk` computes it: the mean over the hits in the top `k`
/// predictions of the precision at each hit, divided by min(k, |relevant|).
pub fn average_precision_at_k(predicted: &[usize], reference: &[usize], k: usize) -> Option<f64> {
    let relevant: HashSet<usize> = reference.iter().take(k).copied().collect();
    if k == 0 || relevant.is_empty() {
        return None;
    }
    let (mut hits, mut score) = (0usize, 0.0);
    let mut seen = HashSet::new();
    for (i, x) in predicted.iter().take(k).enumerate() {
        if relevant.contains(x) && seen.insert(*x) {
            hits += 1;
            score += hits as f64 / (i + 1) as f64;
        }
    }
    Some(score / k.min(relevant.len()) as f64)
}

/// Spearman's rank correlation of two rankings of the same items (no ties):
/// 1 - 6 sum d^2 / (n (n^2 - 1)). `None` when they are not permutations of the same
/// items or hold fewer than two.
pub fn spearman(a: &[usize], b: &[usize]) -> Option<f64> {
    let n = a.len();
    if n < 2 || b.len() != n {
        return None;
    }
    let max = *a.iter().max()?;
    let mut pos_b = vec![usize::MAX; max + 1];
    for (i, &x) in b.iter().enumerate() {
        *pos_b.get_mut(x)? = i;
    }
    let mut d2 = 0.0;
    let mut seen = HashSet::new();
    for (i, &x) in a.iter().enumerate() {
        let j = *pos_b.get(x)?;
        if j == usize::MAX || !seen.insert(x) {
            return None;
        }
        d2 += (i as f64 - j as f64).powi(2);
    }
    let n = n as f64;
    Some(1.0 - 6.0 * d2 / (n * (n * n - 1.0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// RBO_ext computed straight from the definition with set intersections, as an
    /// independent check of the incremental version.
    fn rbo_by_definition(a: &[usize], b: &[usize], p: f64) -> f64 {
        let k = a.len();
        let overlap = |d: usize| {
            let sa: HashSet<_> = a[..d].iter().collect();
            b[..d].iter().filter(|x| sa.contains(x)).count() as f64
        };
        let sum: f64 = (1..=k).map(|d| overlap(d) / d as f64 * p.powi(d as i32)).sum();
        overlap(k) / k as f64 * p.powi(k as i32) + (1.0 - p) / p * sum
    }

    #[test]
    fn rbo_known_values() {
        assert!((rank_biased_overlap(&[0, 1, 2, 3], &[0, 1, 2, 3], 0.95).unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(rank_biased_overlap(&[0, 1], &[2, 3], 0.9), Some(0.0));
        // Two items swapped at the top: depth 1 overlap 0, depth 2 overlap 2.
        // RBO_ext = (2/2) p^2 + (1-p)/p (0 + (2/2) p^2) = p^2 + (1-p) p.
        let p: f64 = 0.9;
        let want = p * p + (1.0 - p) * p;
        assert!((rank_biased_overlap(&[0, 1], &[1, 0], p).unwrap() - want).abs() < 1e-12);
        assert_eq!(rank_biased_overlap(&[0, 1], &[0], 0.9), None);
    }

    #[test]
    fn average_precision_known_values() {
        // Relevant = {0, 1, 2}; predicted 0 (hit, 1/1), 5 (miss), 2 (hit, 2/3): (1 + 2/3) / 3.
        let ap = average_precision_at_k(&[0, 5, 2, 1], &[0, 1, 2, 3], 3).unwrap();
        assert!((ap - (1.0 + 2.0 / 3.0) / 3.0).abs() < 1e-12);
        assert_eq!(average_precision_at_k(&[0, 1, 2], &[0, 1, 2], 3), Some(1.0));
        assert_eq!(average_precision_at_k(&[3, 4], &[0, 1, 2, 3, 4], 2), Some(0.0));
    }

    #[test]
    fn spearman_known_values() {
        assert_eq!(spearman(&[0, 1, 2, 3], &[0, 1, 2, 3]), Some(1.0));
        assert_eq!(spearman(&[0, 1, 2, 3], &[3, 2, 1, 0]), Some(-1.0));
        assert_eq!(spearman(&[0, 1, 2], &[0, 1, 1]), None);
        assert_eq!(spearman(&[0, 1, 2], &[0, 1, 7]), None);
    }

    proptest! {
        #[test]
        fn rbo_matches_its_definition_and_stays_in_unit_interval(
            perm in Just((0..12usize).collect::<Vec<_>>()).prop_shuffle(),
            p in 0.5f64..0.99,
        ) {
            let reference: Vec<usize> = (0..12).collect();
            let got = rank_biased_overlap(&perm, &reference, p).unwrap();
            prop_assert!((got - rbo_by_definition(&perm, &reference, p)).abs() < 1e-12);
            prop_assert!((-1e-12..=1.0 + 1e-12).contains(&got));
            prop_assert!((got - rank_biased_overlap(&reference, &perm, p).unwrap()).abs() < 1e-12, "symmetric");
            let rho = spearman(&perm, &reference).unwrap();
            prop_assert!((-1.0..=1.0).contains(&rho));
        }
    }
}
