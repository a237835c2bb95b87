//! CARE (Zhao, Shin et al., ICML 2026, "CARE: Confounder-Aware Aggregation for Reliable
//! LLM Evaluation", arXiv 2603.00039; github SprocketLab/CARE, `caresl_aggregate`):
//! each judge's score is the true quality plus shared latent confounders plus noise, so
//! the inverse of the judges' correlation matrix is a sparse part (direct dependencies)
//! minus a low-rank part (the latent factors). CARE-SVD separates the two without labels
//! and weights the judges by the low-rank part's leading factor, the quality.
//!
//! Here the scores are the judges' log-odds, correlations are over the examples both
//! judges judged, and the decomposition (a convex problem the authors hand to SCS) is
//! solved by ADMM: minimise `0.5 tr(R O R) - tr(R) + lambda (gamma |S|_1 + tr L)` with
//! `R = S - L`, `L` positive semidefinite, `lambda = 4e-3 / sqrt(judges)` as in the
//! authors' code. Two differences from that code, both because its result depended on
//! the eigen solver's arbitrary signs: the leading factor is oriented to a positive sum,
//! and the other factors are not subtracted from it (the authors' "penalize_dependency").
//! The posterior is the logistic of the weighted mean log-odds of the judges present.
//! Time is O(judgments x judges) for the correlations plus O(judges^3) per ADMM step.

use jury_core::Judgments;

use crate::gauss::log_odds;
use crate::linalg::{from_eigen, sym_eigen};
use crate::special::sigmoid;
use crate::{AggregateError, Aggregation, Aggregator, Diagnostics, SkillReport, TieBreak, finish};

/// Settings of CARE-SVD.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Care {
    pub ties: TieBreak,
    /// Weight of the sparse part's L1 penalty against the low-rank part's trace.
    pub gamma: f64,
    pub max_iter: usize,
    /// ADMM stops when the primal and dual residuals per entry fall below this.
    pub tol: f64,
}

impl Care {
    /// The default gamma (`jury aggregate --care-gamma`), chosen on HaluEval and half of
    /// TruthfulQA (docs/reproduction/label-free.md).
    pub const DEFAULT_GAMMA: f64 = 50.0;

    pub fn new(ties: TieBreak) -> Self {
        Self { ties, gamma: Self::DEFAULT_GAMMA, max_iter: 5000, tol: 1e-6 }
    }
}

/// The floor of the correlation matrix's eigenvalues in the decomposition.
const MIN_EIGENVALUE: f64 = 1e-3;

/// ADMM's penalty parameter (the correlation matrix has unit diagonal, so 1 is on scale).
const RHO: f64 = 1.0;

impl Aggregator for Care {
    fn name(&self) -> &'static str {
        "care"
    }

    fn aggregate(&self, j: &Judgments) -> Result<Aggregation, AggregateError> {
        let method = self.name();
        crate::check_correlated(method, j)?;
        if !(self.gamma > 0.0 && self.gamma.is_finite()) || self.max_iter == 0 || self.tol.is_nan() || self.tol < 0.0 {
            return Err(AggregateError::Config {
                method,
                reason: format!(
                    "gamma must be > 0, max_iter >= 1 and tol >= 0 (got {}, {} and {})",
                    self.gamma, self.max_iter, self.tol
                ),
            });
        }
        let m = j.n_judges();
        let corr = correlations(j);
        let fit = decompose(&corr, m, self.gamma, self.max_iter, self.tol);
        let weights = leading_factor(&fit.low_rank, m);
        let total: f64 = weights.iter().sum();
        let mut values = Vec::with_capacity(2 * j.n_examples());
        let mut unjudged = 0;
        for n in 0..j.n_examples() {
            let (mut num, mut den, mut size) = (0.0, 0.0, 0.0);
            for (k, p) in j.row(n) {
                num += weights[k] * log_odds(p[1]);
                den += weights[k];
                size += weights[k].abs();
            }
            if j.row(n).len() == 0 {
                unjudged += 1;
            }
            // Judges whose weights cancel out (or none at all) leave the example
            // undecided: dividing by what rounding left of their sum would pick a side
            // by the order of the additions.
            let p1 = if den.abs() > 1e-9 * size && size > 0.0 { sigmoid(num / den) } else { 0.5 };
            values.extend([1.0 - p1, p1]);
        }
        let (labels, ties) = self.ties.label_by_sides(&values, j);
        let skills = weights
            .iter()
            .zip(crate::judged_judges(j))
            .map(|(w, judged)| (judged && total.abs() > 0.0).then(|| w / total))
            .collect();
        let mut report =
            SkillReport::new("weight in the jury's mean log-odds", skills, fit.iterations, fit.converged, None);
        report.ties = ties;
        report.unjudged = unjudged;
        finish(method, 2, values, labels, Diagnostics::Skills(report))
    }
}

/// The judges' log-odds correlation matrix (m x m), each pair over the examples both
/// judged; 0 for a pair with fewer than two such examples or no variance, 1 on the
/// diagonal.
fn correlations(j: &Judgments) -> Vec<f64> {
    let m = j.n_judges();
    // Per pair (a, b): count, sum a, sum b, sum a^2, sum b^2, sum ab, over co-judged rows.
    let mut s = vec![[0.0f64; 6]; m * m];
    let mut row: Vec<(usize, f64)> = Vec::with_capacity(m);
    for n in 0..j.n_examples() {
        row.clear();
        row.extend(j.row(n).map(|(k, p)| (k, log_odds(p[1]))));
        for (i, &(a, xa)) in row.iter().enumerate() {
            for &(b, xb) in &row[i + 1..] {
                let e = &mut s[a * m + b];
                e[0] += 1.0;
                e[1] += xa;
                e[2] += xb;
                e[3] += xa * xa;
                e[4] += xb * xb;
                e[5] += xa * xb;
            }
        }
    }
    let mut corr = crate::linalg::identity(m);
    for a in 0..m {
        for b in a + 1..m {
            let [n, sa, sb, saa, sbb, sab] = s[a * m + b];
            let r = if n >= 2.0 {
                let cov = sab - sa * sb / n;
                let (va, vb) = (saa - sa * sa / n, sbb - sb * sb / n);
                if va > 1e-12 * n && vb > 1e-12 * n { (cov / (va * vb).sqrt()).clamp(-1.0, 1.0) } else { 0.0 }
            } else {
                0.0
            };
            corr[a * m + b] = r;
            corr[b * m + a] = r;
        }
    }
    corr
}

/// The sparse-plus-low-rank split of the precision matrix.
struct Decomposition {
    low_rank: Vec<f64>,
    iterations: usize,
    converged: bool,
}

/// ADMM on `0.5 tr(R O R) - tr(R) + lambda (gamma |S|_1 + tr L)`, `R = S - L`, `L` PSD.
/// The R-step is exact in O's eigenbasis: `(0.5 (l_i + l_j) + rho) R'_ij = (I + rho (Z - U))'_ij`.
fn decompose(o: &[f64], m: usize, gamma: f64, max_iter: usize, tol: f64) -> Decomposition {
    let lambda = 4e-3 / (m as f64).sqrt();
    // Pairwise correlations need not form a PSD matrix, and the loss is bounded below
    // only for a positive definite O (a singular one, as from judges that always agree,
    // lets R grow without end along its null space): its eigenvalues are floored.
    let (ol, ov) = sym_eigen(o, m);
    let ol: Vec<f64> = ol.iter().map(|&l| l.max(MIN_EIGENVALUE)).collect();
    let (mut s, mut l, mut u) = (crate::linalg::identity(m), vec![0.0; m * m], vec![0.0; m * m]);
    let (mut iterations, mut converged) = (0, false);
    let mut rhs = vec![0.0; m * m];
    while iterations < max_iter {
        iterations += 1;
        // R-step.
        for i in 0..m * m {
            rhs[i] = RHO * (s[i] - l[i] - u[i]);
        }
        (0..m).for_each(|i| rhs[i * m + i] += 1.0);
        let rotated = rotate(&rhs, &ov, m, true);
        let mut solved = vec![0.0; m * m];
        for a in 0..m {
            for b in 0..m {
                solved[a * m + b] = rotated[a * m + b] / (0.5 * (ol[a] + ol[b]) + RHO);
            }
        }
        let mut r = rotate(&solved, &ov, m, false);
        symmetrise(&mut r, m);
        let z_old: Vec<f64> = s.iter().zip(&l).map(|(s, l)| s - l).collect();
        // S-step: soft-threshold R + U + L.
        let thresh = lambda * gamma / RHO;
        for i in 0..m * m {
            let v = r[i] + u[i] + l[i];
            s[i] = v.signum() * (v.abs() - thresh).max(0.0);
        }
        // L-step: the PSD part of S - R - U with its eigenvalues shrunk by lambda / rho.
        let target: Vec<f64> = (0..m * m).map(|i| s[i] - r[i] - u[i]).collect();
        let (tl, tv) = sym_eigen(&target, m);
        l = from_eigen(&tl, &tv, |x| (x - lambda / RHO).max(0.0));
        // Dual step and residuals.
        let mut primal = 0.0;
        let mut dual = 0.0;
        for i in 0..m * m {
            let res = r[i] - s[i] + l[i];
            u[i] += res;
            primal += res * res;
            dual += (s[i] - l[i] - z_old[i]).powi(2);
        }
        let per_entry = (m * m) as f64;
        if (primal / per_entry).sqrt() < tol && RHO * (dual / per_entry).sqrt() < tol {
            converged = true;
            break;
        }
    }
    Decomposition { low_rank: l, iterations, converged }
}

/// `V^T A V` (`into_basis`) or `V A V^T`, with `V`'s columns the eigenvectors `v`.
fn rotate(a: &[f64], v: &[Vec<f64>], m: usize, into_basis: bool) -> Vec<f64> {
    // The product is M A M^T with M = V^T or V; M[i][k] is v[i][k] or v[k][i].
    let mm = |i: usize, k: usize| if into_basis { v[i][k] } else { v[k][i] };
    let mut tmp = vec![0.0; m * m];
    for i in 0..m {
        for b in 0..m {
            tmp[i * m + b] = (0..m).map(|k| mm(i, k) * a[k * m + b]).sum();
        }
    }
    let mut out = vec![0.0; m * m];
    for i in 0..m {
        for j in 0..m {
            out[i * m + j] = (0..m).map(|k| tmp[i * m + k] * mm(j, k)).sum();
        }
    }
    out
}

fn symmetrise(a: &mut [f64], m: usize) {
    for i in 0..m {
        for j in i + 1..m {
            let v = 0.5 * (a[i * m + j] + a[j * m + i]);
            a[i * m + j] = v;
            a[j * m + i] = v;
        }
    }
}

/// The leading eigenvector of `l` scaled by the root of its eigenvalue, oriented so its
/// entries sum to more than 0 (a judge that agrees with the jury's quality factor weighs
/// positively). Where that factor is not identified (one judge, no shared factor, a tie
/// for the top eigenvalue, or entries that sum to 0 so no orientation is preferred)
/// every judge weighs 1: the mean log-odds. This keeps the result independent of the
/// judges' order.
fn leading_factor(l: &[f64], m: usize) -> Vec<f64> {
    let (values, vectors) = sym_eigen(l, m);
    let uniform = vec![1.0; m];
    let (Some(&top), Some(v)) = (values.first(), vectors.first()) else { return Vec::new() };
    let second = values.get(1).copied().unwrap_or(0.0);
    let (sum, norm): (f64, f64) = (v.iter().sum(), v.iter().map(|x| x.abs()).sum());
    if top <= 1e-12 || second >= top * (1.0 - 1e-6) || sum.abs() <= 1e-6 * norm {
        return uniform;
    }
    let scale = top.sqrt() * sum.signum();
    v.iter().map(|x| scale * x).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::binary;

    fn run(rows: &[&[Option<f64>]]) -> Aggregation {
        Care::new(TieBreak::Positive).aggregate(&binary(rows)).unwrap()
    }

    fn finite(a: &Aggregation) -> bool {
        a.posteriors().rows().all(|r| r.iter().all(|p| p.is_finite()))
    }

    #[test]
    fn degenerate_juries_give_finite_posteriors() {
        let (y, n) = (Some(0.9), Some(0.1));
        let always = run(&[&[y, y, n], &[y, n, n], &[y, y, y], &[y, n, y], &[y, y, n], &[y, n, n]]);
        assert!(finite(&always));
        let single = run(&[&[y], &[n], &[y], &[Some(0.7)]]);
        assert!(finite(&single));
        assert_eq!(single.labels(), &[1, 0, 1, 1]);
        let same = run(&[&[y, y, y], &[n, n, n], &[Some(0.6), Some(0.6), Some(0.6)], &[n, n, n]]);
        assert_eq!(same.labels(), &[1, 0, 1, 0]);
        let sparse = run(&[&[y, None, n], &[None, None, None], &[n, n, None], &[y, y, y]]);
        assert!(finite(&sparse));
    }

    #[test]
    fn the_admm_split_matches_the_precision_of_an_independent_jury() {
        // Uncorrelated judges: O = I, whose inverse is all sparse part; the low-rank
        // part stays (near) zero and the ADMM residuals vanish.
        let m = 4;
        let fit = decompose(&crate::linalg::identity(m), m, 10.0, 5000, 1e-9);
        assert!(fit.converged, "{} iterations", fit.iterations);
        assert!(fit.low_rank.iter().all(|x| x.abs() < 1e-6), "{:?}", fit.low_rank);
    }

    #[test]
    fn a_strong_common_factor_gives_positive_weights_to_its_judges() {
        // Three judges that rise and fall together, one that is noise.
        let rows: Vec<Vec<Option<f64>>> = (0..60)
            .map(|i| {
                let s = if i % 2 == 0 { 0.85 } else { 0.15 };
                let noise = [0.3, 0.7, 0.5][i % 3];
                vec![Some(s), Some(s * 0.8 + 0.1), Some(s * 0.9 + 0.03), Some(noise)]
            })
            .collect();
        let refs: Vec<&[Option<f64>]> = rows.iter().map(Vec::as_slice).collect();
        let a = run(&refs);
        let Diagnostics::Skills(r) = a.diagnostics() else { panic!("skills") };
        let w: Vec<f64> = r.skills.iter().map(|s| s.unwrap()).collect();
        assert!(w[..3].iter().all(|&x| x > 0.2) && w[3].abs() < 0.1, "{w:?}");
        assert_eq!(a.labels()[..4], [1, 0, 1, 0]);
    }
}
