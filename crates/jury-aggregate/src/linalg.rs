//! The small dense linear algebra the correlation-aware methods need (judges x judges
//! matrices, row-major): a symmetric eigendecomposition and a Cholesky factor. Juries
//! have tens of judges, so plain O(m^3) routines are enough and keep the crate free of a
//! linear algebra dependency.

/// Eigenvalues (descending) and unit eigenvectors (`vectors[i]` belongs to `values[i]`)
/// of the symmetric `m x m` matrix `a`, by cyclic Jacobi rotations.
pub(crate) fn sym_eigen(a: &[f64], m: usize) -> (Vec<f64>, Vec<Vec<f64>>) {
    debug_assert_eq!(a.len(), m * m);
    let mut d: Vec<f64> = a.to_vec();
    // v holds the rotations so far; its column i becomes eigenvector i.
    let mut v = identity(m);
    let scale: f64 = d.iter().map(|x| x * x).sum::<f64>().sqrt().max(f64::MIN_POSITIVE);
    for _sweep in 0..100 {
        let off: f64 = (0..m)
            .flat_map(|i| (0..m).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| d[i * m + j].powi(2))
            .sum();
        if off.sqrt() <= 1e-14 * scale {
            break;
        }
        for p in 0..m {
            for q in p + 1..m {
                let apq = d[p * m + q];
                if apq.abs() <= f64::MIN_POSITIVE {
                    continue;
                }
                let theta = (d[q * m + q] - d[p * m + p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..m {
                    let (dkp, dkq) = (d[k * m + p], d[k * m + q]);
                    d[k * m + p] = c * dkp - s * dkq;
                    d[k * m + q] = s * dkp + c * dkq;
                }
                for k in 0..m {
                    let (dpk, dqk) = (d[p * m + k], d[q * m + k]);
                    d[p * m + k] = c * dpk - s * dqk;
                    d[q * m + k] = s * dpk + c * dqk;
                }
                for k in 0..m {
                    let (vkp, vkq) = (v[k * m + p], v[k * m + q]);
                    v[k * m + p] = c * vkp - s * vkq;
                    v[k * m + q] = s * vkp + c * vkq;
                }
            }
        }
    }
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&x, &y| d[y * m + y].total_cmp(&d[x * m + x]));
    let values = order.iter().map(|&i| d[i * m + i]).collect();
    let vectors = order.iter().map(|&i| (0..m).map(|k| v[k * m + i]).collect()).collect();
    (values, vectors)
}

/// The `m x m` identity, row-major.
pub(crate) fn identity(m: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * m];
    (0..m).for_each(|i| out[i * m + i] = 1.0);
    out
}

/// `sum_i f(values[i]) v_i v_i^T`: a symmetric matrix rebuilt from its eigenpairs with
/// each eigenvalue mapped by `f`.
pub(crate) fn from_eigen(values: &[f64], vectors: &[Vec<f64>], f: impl Fn(f64) -> f64) -> Vec<f64> {
    let m = values.len();
    let mut out = vec![0.0; m * m];
    for (&l, v) in values.iter().zip(vectors) {
        let w = f(l);
        if w == 0.0 {
            continue;
        }
        for i in 0..m {
            for j in 0..m {
                out[i * m + j] += w * v[i] * v[j];
            }
        }
    }
    out
}

/// The lower Cholesky factor of the symmetric positive definite `a`, or `None` when a
/// pivot is not positive.
pub(crate) fn cholesky(a: &[f64], m: usize) -> Option<Vec<f64>> {
    let mut l = vec![0.0; m * m];
    for i in 0..m {
        for j in 0..=i {
            let s: f64 = a[i * m + j] - (0..j).map(|k| l[i * m + k] * l[j * m + k]).sum::<f64>();
            if i == j {
                if s.is_nan() || s <= 0.0 {
                    return None;
                }
                l[i * m + i] = s.sqrt();
            } else {
                l[i * m + j] = s / l[j * m + j];
            }
        }
    }
    Some(l)
}

/// `log det a` from its Cholesky factor.
pub(crate) fn log_det(l: &[f64], m: usize) -> f64 {
    2.0 * (0..m).map(|i| l[i * m + i].ln()).sum::<f64>()
}

/// `x^T a^{-1} x` from `a`'s Cholesky factor, by one forward substitution
/// (`scratch` has length m).
pub(crate) fn mahalanobis(l: &[f64], m: usize, x: &[f64], scratch: &mut [f64]) -> f64 {
    let mut total = 0.0;
    for i in 0..m {
        let s = x[i] - (0..i).map(|k| l[i * m + k] * scratch[k]).sum::<f64>();
        scratch[i] = s / l[i * m + i];
        total += scratch[i] * scratch[i];
    }
    total
}

/// Solves `a x = b` in place from `a`'s Cholesky factor (forward, then back
/// substitution).
pub(crate) fn cholesky_solve(l: &[f64], m: usize, b: &mut [f64]) {
    for i in 0..m {
        let s = b[i] - (0..i).map(|k| l[i * m + k] * b[k]).sum::<f64>();
        b[i] = s / l[i * m + i];
    }
    for i in (0..m).rev() {
        let s = b[i] - (i + 1..m).map(|k| l[k * m + i] * b[k]).sum::<f64>();
        b[i] = s / l[i * m + i];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matmul(a: &[f64], b: &[f64], m: usize) -> Vec<f64> {
        let mut out = vec![0.0; m * m];
        for i in 0..m {
            for j in 0..m {
                out[i * m + j] = (0..m).map(|k| a[i * m + k] * b[k * m + j]).sum();
            }
        }
        out
    }

    #[test]
    fn eigenpairs_rebuild_the_matrix_and_are_sorted() {
        let a = [4.0, 1.0, 0.5, 1.0, 3.0, 0.2, 0.5, 0.2, 1.0];
        let (values, vectors) = sym_eigen(&a, 3);
        assert!(values.windows(2).all(|w| w[0] >= w[1]));
        let back = from_eigen(&values, &vectors, |l| l);
        for (x, y) in a.iter().zip(&back) {
            assert!((x - y).abs() < 1e-10, "{a:?} vs {back:?}");
        }
        // Trace and the known eigenvalues of a diagonal block.
        assert!((values.iter().sum::<f64>() - 8.0).abs() < 1e-10);
        let (v2, _) = sym_eigen(&[2.0, 0.0, 0.0, 5.0], 2);
        assert_eq!(v2, vec![5.0, 2.0]);
    }

    #[test]
    fn cholesky_gives_the_inverse_quadratic_form_and_log_det() {
        let a = [4.0, 2.0, 2.0, 3.0];
        let l = cholesky(&a, 2).unwrap();
        let back = matmul(&l, &[l[0], l[2], l[1], l[3]], 2);
        assert!(back.iter().zip(&a).all(|(x, y)| (x - y).abs() < 1e-12), "{back:?}");
        assert!((log_det(&l, 2) - 8f64.ln()).abs() < 1e-12);
        // a^{-1} = [3, -2; -2, 4] / 8, so x = (1, 1) gives (3 - 4 + 4) / 8.
        let q = mahalanobis(&l, 2, &[1.0, 1.0], &mut [0.0; 2]);
        assert!((q - 3.0 / 8.0).abs() < 1e-12);
        assert!(cholesky(&[1.0, 2.0, 2.0, 1.0], 2).is_none());
        // a (1, 1) = (6, 5), solved back.
        let mut b = [6.0, 5.0];
        cholesky_solve(&l, 2, &mut b);
        assert!((b[0] - 1.0).abs() < 1e-12 && (b[1] - 1.0).abs() < 1e-12, "{b:?}");
    }
}
