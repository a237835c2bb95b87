//! L1-penalised logistic regression along a decreasing penalty path, for the calibrated
//! method's sparse member: a hundred labels and up to dozens of correlated judges, where
//! the labels should decide how many judges to trust beyond the label-free posterior.
//!
//! The solver is glmnet's (Friedman, Hastie and Tibshirani 2010, "Regularization Paths for
//! Generalized Linear Models via Coordinate Descent"): at each penalty, iteratively
//! reweighted least squares whose weighted quadratic is minimised by cyclic coordinate
//! descent with soft thresholding, warm-started from the previous penalty. The intercept
//! and the columns marked free are not penalised.

/// The objective at penalty `lambda`: the weighted mean log-loss plus
/// `lambda * sum |beta_j|` over the penalised columns.
pub(crate) struct Problem<'a> {
    /// Rows of features (examples x columns).
    pub(crate) z: &'a [Vec<f64>],
    pub(crate) y: &'a [f64],
    /// Example weights (any positive scale: normalised to sum 1).
    pub(crate) w: &'a [f64],
    /// Which columns carry the penalty.
    pub(crate) penalised: &'a [bool],
}

/// Coefficients (one per column) and intercept.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Fit {
    pub(crate) beta: Vec<f64>,
    pub(crate) intercept: f64,
}

impl Fit {
    pub(crate) fn score(&self, row: &[f64]) -> f64 {
        row.iter().zip(&self.beta).map(|(x, b)| x * b).sum::<f64>() + self.intercept
    }
}

const IRLS_STEPS: usize = 25;
const SWEEPS: usize = 200;

impl Problem<'_> {
    fn columns(&self) -> usize {
        self.penalised.len()
    }

    /// The fit at each penalty of `lambdas` (decreasing), each warm-started from the last.
    pub(crate) fn path(&self, lambdas: &[f64]) -> Vec<Fit> {
        let p = self.columns();
        let total: f64 = self.w.iter().sum::<f64>().max(1e-300);
        let wn: Vec<f64> = self.w.iter().map(|w| w / total).collect();
        let rate = self.y.iter().zip(&wn).map(|(y, w)| y * w).sum::<f64>().clamp(1e-6, 1.0 - 1e-6);
        let mut fit = Fit { beta: vec![0.0; p], intercept: (rate / (1.0 - rate)).ln() };
        let mut out = Vec::with_capacity(lambdas.len());
        for &lambda in lambdas {
            for _ in 0..IRLS_STEPS {
                let before = fit.beta.clone();
                self.irls_step(&wn, lambda, &mut fit);
                let moved = fit.beta.iter().zip(&before).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
                if moved < 1e-6 {
                    break;
                }
            }
            out.push(fit.clone());
        }
        out
    }

    /// The smallest penalty at which every penalised coefficient is 0: the largest
    /// gradient of the log-loss along a penalised column at the fit of the free columns
    /// alone.
    pub(crate) fn lambda_max(&self) -> f64 {
        let free = self.path(&[f64::INFINITY]).remove(0);
        let total: f64 = self.w.iter().sum::<f64>().max(1e-300);
        let mut grad = vec![0.0; self.columns()];
        for ((row, &y), &w) in self.z.iter().zip(self.y).zip(self.w) {
            let r = w / total * (y - sigmoid(free.score(row)));
            grad.iter_mut().zip(row).for_each(|(g, x)| *g += r * x);
        }
        grad.iter().zip(self.penalised).filter(|(_, p)| **p).map(|(g, _)| g.abs()).fold(0.0, f64::max)
    }

    /// One Newton step's quadratic, minimised by coordinate descent in covariance form.
    fn irls_step(&self, wn: &[f64], lambda: f64, fit: &mut Fit) {
        let p = self.columns();
        let n = self.y.len();
        let mut v = vec![0.0; n];
        let mut zr = vec![0.0; n];
        for (i, row) in self.z.iter().enumerate() {
            let s = fit.score(row);
            let pr = sigmoid(s);
            let var = (pr * (1.0 - pr)).max(1e-5);
            v[i] = wn[i] * var;
            zr[i] = s + (self.y[i] - pr) / var;
        }
        let sw: f64 = v.iter().sum::<f64>().max(1e-300);
        let mut mu = vec![0.0; p];
        for (row, vi) in self.z.iter().zip(&v) {
            mu.iter_mut().zip(row).for_each(|(m, x)| *m += vi * x / sw);
        }
        let zbar: f64 = zr.iter().zip(&v).map(|(z, v)| z * v).sum::<f64>() / sw;
        // Weighted covariance of the centred columns, and with the working response. Each
        // entry is summed over the rows in order of the plain products `(v x_a) x_b`; the
        // slices only spare the index arithmetic its checks.
        let mut g = vec![0.0; p * p];
        let mut c = vec![0.0; p];
        let mut xc = vec![0.0; p];
        for ((row, vi), zi) in self.z.iter().zip(&v).zip(&zr) {
            xc.iter_mut().zip(row).zip(&mu).for_each(|((x, r), m)| *x = r - m);
            for (a, (ga, ca)) in g.chunks_exact_mut(p).zip(c.iter_mut()).enumerate() {
                let ha = vi * xc[a];
                *ca += ha * (zi - zbar);
                ga[..=a].iter_mut().zip(&xc[..=a]).for_each(|(g, x)| *g += ha * x);
            }
        }
        for a in 0..p {
            for b in 0..a {
                g[b * p + a] = g[a * p + b];
            }
            g[a * p + a] += 1e-9;
        }
        let beta = &mut fit.beta;
        let mut q: Vec<f64> =
            g.chunks_exact(p).map(|ga| ga.iter().zip(beta.iter()).map(|(g, b)| g * b).sum()).collect();
        for _ in 0..SWEEPS {
            let mut largest = 0.0f64;
            for j in 0..p {
                let den = g[j * p + j];
                let l = if self.penalised[j] { lambda } else { 0.0 };
                let rho = c[j] - q[j] + den * beta[j];
                let next = soft_threshold(rho, l) / den;
                let step = next - beta[j];
                if step != 0.0 {
                    beta[j] = next;
                    // Row j is column j: `g` is symmetric entry for entry.
                    q.iter_mut().zip(&g[j * p..(j + 1) * p]).for_each(|(q, g)| *q += step * g);
                    largest = largest.max(step.abs() * den.sqrt());
                }
            }
            if largest < 1e-8 {
                break;
            }
        }
        fit.intercept = zbar - mu.iter().zip(beta.iter()).map(|(m, b)| m * b).sum::<f64>();
    }
}

fn soft_threshold(rho: f64, l: f64) -> f64 {
    if l.is_infinite() {
        return 0.0;
    }
    if rho > l {
        rho - l
    } else if rho < -l {
        rho + l
    } else {
        0.0
    }
}

fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z.clamp(-50.0, 50.0)).exp())
}

/// `count` penalties from `largest` down to `largest * ratio`, evenly spaced in log.
pub(crate) fn penalties(largest: f64, ratio: f64, count: usize) -> Vec<f64> {
    let step = if count > 1 { ratio.ln() / (count - 1) as f64 } else { 0.0 };
    (0..count).map(|i| largest * (step * i as f64).exp()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn data(n: usize, p: usize, seed: u64) -> (Vec<Vec<f64>>, Vec<f64>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let truth: Vec<f64> = (0..p).map(|j| if j == 0 { 2.0 } else { 0.0 }).collect();
        let mut z = Vec::new();
        let mut y = Vec::new();
        for _ in 0..n {
            let row: Vec<f64> = (0..p).map(|_| rng.random::<f64>() * 2.0 - 1.0).collect();
            let s: f64 = row.iter().zip(&truth).map(|(x, b)| x * b).sum::<f64>() + 0.3;
            y.push(f64::from(u8::from(rng.random::<f64>() < sigmoid(s))));
            z.push(row);
        }
        (z, y)
    }

    /// The penalised objective, computed directly.
    fn objective(pr: &Problem, fit: &Fit, lambda: f64) -> f64 {
        let total: f64 = pr.w.iter().sum();
        let loss: f64 =
            pr.z.iter()
                .zip(pr.y)
                .zip(pr.w)
                .map(|((row, y), w)| {
                    let s = fit.score(row);
                    w / total * ((1.0 + s.exp()).ln() - y * s)
                })
                .sum();
        let pen: f64 = fit.beta.iter().zip(pr.penalised).filter(|(_, p)| **p).map(|(b, _)| b.abs()).sum();
        loss + lambda * pen
    }

    #[test]
    fn at_lambda_max_every_penalised_coefficient_is_zero_and_below_it_one_enters() {
        let (z, y) = data(300, 4, 1);
        let w = vec![1.0; 300];
        let pen = [true, true, true, false];
        let pr = Problem { z: &z, y: &y, w: &w, penalised: &pen };
        let lmax = pr.lambda_max();
        let fits = pr.path(&[lmax * 1.0001, lmax * 0.8]);
        assert!(fits[0].beta[..3].iter().all(|b| *b == 0.0), "{:?}", fits[0]);
        assert!(fits[1].beta[0] > 0.0, "{:?}", fits[1]);
    }

    proptest! {
        /// The fit is a minimum: no small move of one coefficient or the intercept lowers
        /// the penalised objective (it is convex, so a coordinate-wise minimum is global).
        #[test]
        fn no_coordinate_move_lowers_the_objective(seed in 0u64..50, lambda in 0.001f64..0.2) {
            let (z, y) = data(120, 3, seed);
            let w: Vec<f64> = (0..120).map(|i| 0.5 + (i % 3) as f64 * 0.5).collect();
            let pen = [true, true, false];
            let pr = Problem { z: &z, y: &y, w: &w, penalised: &pen };
            let fit = pr.path(&[lambda]).remove(0);
            let f0 = objective(&pr, &fit, lambda);
            for j in 0..4 {
                for h in [-1e-3, 1e-3] {
                    let mut moved = fit.clone();
                    if j < 3 { moved.beta[j] += h } else { moved.intercept += h }
                    prop_assert!(objective(&pr, &moved, lambda) >= f0 - 1e-9, "coordinate {j} by {h}");
                }
            }
        }
    }

    #[test]
    fn penalties_fall_geometrically_from_the_largest() {
        let l = penalties(2.0, 0.01, 3);
        assert!((l[0] - 2.0).abs() < 1e-12 && (l[1] - 0.2).abs() < 1e-12 && (l[2] - 0.02).abs() < 1e-12);
    }
}
