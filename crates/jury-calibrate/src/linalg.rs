//! The small dense solves the fits need (judges x judges at most), by Cholesky with a
//! ridge that grows until the matrix factors.

/// Solves `a x = b` for a symmetric positive semi-definite `a` (row-major, `d` x `d`);
/// adds a growing ridge when `a` is singular, so it always answers.
pub(crate) fn solve_spd(a: &[f64], b: &[f64]) -> Vec<f64> {
    let d = b.len();
    let scale = (0..d).map(|i| a[i * d + i].abs()).fold(0.0, f64::max).max(1e-12);
    let mut ridge = 0.0;
    loop {
        if let Some(l) = cholesky(a, d, ridge) {
            return cholesky_solve(&l, d, b);
        }
        ridge = if ridge == 0.0 { 1e-10 * scale } else { ridge * 10.0 };
    }
}

/// The inverse of a symmetric positive semi-definite matrix, as [`solve_spd`] does it.
pub(crate) fn inverse_spd(a: &[f64], d: usize) -> Vec<f64> {
    let mut inv = vec![0.0; d * d];
    for c in 0..d {
        let mut e = vec![0.0; d];
        e[c] = 1.0;
        let col = solve_spd(a, &e);
        for r in 0..d {
            inv[r * d + c] = col[r];
        }
    }
    inv
}

fn cholesky(a: &[f64], d: usize, ridge: f64) -> Option<Vec<f64>> {
    let mut l = vec![0.0; d * d];
    for i in 0..d {
        for j in 0..=i {
            let mut s = a[i * d + j] + if i == j { ridge } else { 0.0 };
            for k in 0..j {
                s -= l[i * d + k] * l[j * d + k];
            }
            if i == j {
                if s.is_nan() || s <= 0.0 || !s.is_finite() {
                    return None;
                }
                l[i * d + i] = s.sqrt();
            } else {
                l[i * d + j] = s / l[j * d + j];
            }
        }
    }
    Some(l)
}

fn cholesky_solve(l: &[f64], d: usize, b: &[f64]) -> Vec<f64> {
    let mut y = b.to_vec();
    for i in 0..d {
        for k in 0..i {
            y[i] -= l[i * d + k] * y[k];
        }
        y[i] /= l[i * d + i];
    }
    for i in (0..d).rev() {
        for k in i + 1..d {
            y[i] -= l[k * d + i] * y[k];
        }
        y[i] /= l[i * d + i];
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solves_and_inverts() {
        let a = [4.0, 1.0, 1.0, 3.0];
        let x = solve_spd(&a, &[1.0, 2.0]);
        assert!((4.0 * x[0] + x[1] - 1.0).abs() < 1e-12 && (x[0] + 3.0 * x[1] - 2.0).abs() < 1e-12);
        let inv = inverse_spd(&a, 2);
        assert!((inv[0] - 3.0 / 11.0).abs() < 1e-12 && (inv[1] + 1.0 / 11.0).abs() < 1e-12);
        // Singular: still answers, finite.
        assert!(solve_spd(&[1.0, 1.0, 1.0, 1.0], &[1.0, 1.0]).iter().all(|v| v.is_finite()));
    }
}
