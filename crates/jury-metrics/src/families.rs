//! Which judges make the same mistakes, label-free: the judges' pairwise error
//! correlation given a fitted model's posteriors, grouped into families. A family counted
//! as independent judges is what makes a jury over-confident (six HaluEval judges are
//! fine-tunes of one model), so users see how the fitted model sees it.

use jury_core::{Judgments, Posteriors};

/// Pairwise error correlations under a model's posteriors, and the families they form.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorCorrelations {
    /// `matrix[a][b]`: the class-conditional correlation of judges `a` and `b`'s errors
    /// over the examples both judged, each example weighing on each class by its
    /// posterior. `None` on the diagonal, for pairs with under two shared examples, and
    /// where a judge's errors do not vary within the classes (an always-Yes judge).
    pub matrix: Vec<Vec<Option<f64>>>,
    /// Groups of two or more judges whose mean pairwise error correlation is at least
    /// [`FAMILY_CORRELATION`] (average linkage); each group's judges in index order,
    /// groups by their first judge.
    pub families: Vec<Vec<usize>>,
}

/// The mean error correlation at which judges are grouped into one family. Under
/// Dawid-Skene's posteriors on the HaluEval judges the strongest pairs reach 0.2-0.3
/// (docs/reproduction/label-free.md); the model's own truth absorbs part of a family's shared
/// errors, so the view shows the dependence the model did not explain.
pub const FAMILY_CORRELATION: f64 = 0.2;

/// Juries larger than this get no matrix (it grows with the square of the judges).
pub const MAX_JUDGES_FOR_CORRELATIONS: usize = 500;

/// Per pair and class: weight, sum of a's errors, b's, a's squared, b's squared, a*b.
#[derive(Clone, Copy, Default)]
struct Sums {
    w: f64,
    a: f64,
    b: f64,
    aa: f64,
    bb: f64,
    ab: f64,
}

/// [`ErrorCorrelations`] of a jury under posteriors over the same examples; `None` for
/// juries over [`MAX_JUDGES_FOR_CORRELATIONS`] judges or posteriors of another shape.
pub fn error_correlations(j: &Judgments, posteriors: &Posteriors) -> Option<ErrorCorrelations> {
    let (m, c) = (j.n_judges(), j.n_classes());
    if m > MAX_JUDGES_FOR_CORRELATIONS || posteriors.len() != j.n_examples() || posteriors.n_classes() != c {
        return None;
    }
    let mut sums = vec![Sums::default(); m * m * c];
    let mut votes: Vec<(usize, usize)> = Vec::new();
    for n in 0..j.n_examples() {
        votes.clear();
        votes.extend(j.row(n).map(|(k, p)| (k, jury_core::argmax(p))));
        for (class, &w) in posteriors.row(n).iter().enumerate() {
            if w <= 0.0 {
                continue;
            }
            for (i, &(a, va)) in votes.iter().enumerate() {
                let ea = f64::from(u8::from(va != class));
                for &(b, vb) in &votes[i + 1..] {
                    let eb = f64::from(u8::from(vb != class));
                    let (lo, hi, x, y) = if a < b { (a, b, ea, eb) } else { (b, a, eb, ea) };
                    let s = &mut sums[(lo * m + hi) * c + class];
                    s.w += w;
                    s.a += w * x;
                    s.b += w * y;
                    s.aa += w * x * x;
                    s.bb += w * y * y;
                    s.ab += w * x * y;
                }
            }
        }
    }
    let mut matrix = vec![vec![None; m]; m];
    for a in 0..m {
        for b in a + 1..m {
            let (mut cov, mut va, mut vb, mut w) = (0.0, 0.0, 0.0, 0.0);
            for s in &sums[(a * m + b) * c..(a * m + b + 1) * c] {
                if s.w <= 0.0 {
                    continue;
                }
                w += s.w;
                cov += s.ab - s.a * s.b / s.w;
                va += s.aa - s.a * s.a / s.w;
                vb += s.bb - s.b * s.b / s.w;
            }
            // Relative floor: variances that are rounding noise count as none.
            let r = (w >= 2.0 && va > 1e-9 * w && vb > 1e-9 * w).then(|| (cov / (va * vb).sqrt()).clamp(-1.0, 1.0));
            matrix[a][b] = r;
            matrix[b][a] = r;
        }
    }
    let families = families(&matrix, FAMILY_CORRELATION);
    Some(ErrorCorrelations { matrix, families })
}

/// Average-linkage grouping: merges the two groups with the highest mean correlation
/// over their defined cross pairs while that mean is at least `threshold`.
fn families(matrix: &[Vec<Option<f64>>], threshold: f64) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = (0..matrix.len()).map(|k| vec![k]).collect();
    loop {
        let mut best: Option<(f64, usize, usize)> = None;
        for x in 0..groups.len() {
            for y in x + 1..groups.len() {
                let rs: Vec<f64> =
                    groups[x].iter().flat_map(|&a| groups[y].iter().filter_map(move |&b| matrix[a][b])).collect();
                if rs.is_empty() {
                    continue;
                }
                let mean = rs.iter().sum::<f64>() / rs.len() as f64;
                if mean >= threshold && best.is_none_or(|(s, _, _)| mean > s) {
                    best = Some((mean, x, y));
                }
            }
        }
        let Some((_, x, y)) = best else { break };
        let merged = groups.remove(y);
        groups[x].extend(merged);
        groups[x].sort_unstable();
    }
    let mut out: Vec<Vec<usize>> = groups.into_iter().filter(|g| g.len() > 1).collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// A binary jury from each judge's votes per example (`None` = not judged).
    fn jury(votes: &[Vec<Option<usize>>]) -> Judgments {
        let mut b = jury_core::JudgmentsBuilder::new(2).unwrap();
        for n in 0..votes[0].len() {
            for (k, row) in votes.iter().enumerate() {
                if let Some(v) = row[n] {
                    let p = if v == 1 { vec![0.1, 0.9] } else { vec![0.9, 0.1] };
                    b.push(&format!("e{n:04}"), &format!("j{k}"), Some(p)).unwrap();
                }
            }
        }
        b.build()
    }

    fn one_hot(truth: &[usize]) -> Posteriors {
        Posteriors::new(2, truth.iter().flat_map(|&t| if t == 1 { [0.0, 1.0] } else { [1.0, 0.0] }).collect()).unwrap()
    }

    /// Two families of three judges that share their mistakes (each family errs
    /// together on its own 25% of the examples, plus 5% of independent noise), and two
    /// independent judges: the families are found, the independent judges stay alone.
    #[test]
    fn recovers_simulated_families_and_leaves_independent_judges_alone() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let n = 3000;
        let truth: Vec<usize> = (0..n).map(|_| rng.random_range(0..2)).collect();
        let shared: Vec<[bool; 2]> = (0..n).map(|_| [rng.random_bool(0.25), rng.random_bool(0.25)]).collect();
        let mut votes = Vec::new();
        for k in 0..8 {
            let row = (0..n)
                .map(|e| {
                    let wrong = match k {
                        0..=2 => shared[e][0] ^ rng.random_bool(0.05),
                        3..=5 => shared[e][1] ^ rng.random_bool(0.05),
                        _ => rng.random_bool(0.25),
                    };
                    // Judge 7 misses a third of the examples.
                    (k != 7 || e % 3 != 0).then_some(truth[e] ^ usize::from(wrong))
                })
                .collect();
            votes.push(row);
        }
        let e = error_correlations(&jury(&votes), &one_hot(&truth)).unwrap();
        assert_eq!(e.families, vec![vec![0, 1, 2], vec![3, 4, 5]]);
        let r = |a: usize, b: usize| e.matrix[a][b].unwrap();
        assert!(r(0, 1) > 0.7 && r(3, 5) > 0.7, "{:?}", e.matrix);
        assert!(r(0, 3).abs() < 0.1 && r(6, 7).abs() < 0.1, "{:?}", e.matrix);
        assert_eq!(e.matrix[2][2], None);
    }

    /// An always-Yes judge's errors do not vary within a class: no correlation, no NaN;
    /// a single judge and identical judges give a result too.
    #[test]
    fn degenerate_juries_give_none_or_a_number_never_nan() {
        let truth = vec![0, 1, 0, 1, 1, 0];
        let always_yes = vec![Some(1); 6];
        let judge = vec![Some(0), Some(1), Some(1), Some(1), Some(0), Some(0)];
        let e = error_correlations(&jury(&[always_yes, judge.clone(), judge.clone()]), &one_hot(&truth)).unwrap();
        assert_eq!((e.matrix[0][1], e.matrix[0][2]), (None, None));
        assert_eq!(e.matrix[1][2], Some(1.0));
        assert_eq!(e.families, vec![vec![1, 2]]);
        let single = error_correlations(&jury(&[judge]), &one_hot(&truth)).unwrap();
        assert_eq!((single.matrix, single.families), (vec![vec![None]], vec![]));
        // Posteriors of another length are refused.
        assert!(error_correlations(&jury(&[vec![Some(1); 6]]), &one_hot(&[0, 1])).is_none());
    }
}
