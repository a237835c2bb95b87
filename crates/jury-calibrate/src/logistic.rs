//! Penalised logistic regression by damped Newton steps: the fit under every member of
//! the calibrated stack but the sparse one ([`crate::sparse`]), and under the stack's
//! weights. A Gaussian prior per coefficient, coefficients held non-negative on request,
//! and the intercept's standard error, which decides how far a threshold read off the
//! labels is trusted.

use crate::linalg::{inverse_spd, solve_spd};
use crate::log_odds::sigmoid;

/// Weighted logistic regression of `y` on one feature, `y ~ sigmoid(a s + b)`, with a
/// unit ridge on the standardised feature's coefficient (damped Newton; the ridge keeps a
/// perfectly separating judge finite) and the intercept shrunk toward the feature's own
/// zero ([`shrink_intercept`]).
pub(crate) fn logistic_1d(s: &[f64], y: &[f64], w: &[f64]) -> (f64, f64) {
    let m = s.len() as f64;
    let mean = s.iter().sum::<f64>() / m;
    let sd = (s.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / m).sqrt().max(1e-9);
    let t: Vec<f64> = s.iter().map(|v| v / sd).collect();
    let z: Vec<Vec<f64>> = t.iter().map(|&v| vec![v]).collect();
    let fit = logistic(&z, y, w, &Prior::ridge(1, 1.0, 1e-6), false);
    (fit.beta[0] / sd, shrink_intercept(fit.beta[1], fit.intercept_se))
}

/// Positive-part James-Stein shrinkage of an intercept toward 0, the threshold of the
/// scores themselves (a judge's or the label-free posterior's own one half): kept nearly
/// whole when the labels put it many standard errors from 0, set to 0 within one. A
/// threshold read off 100 labels moves with them; the scores' own one moves with nothing.
pub(crate) fn shrink_intercept(b: f64, se: f64) -> f64 {
    if b == 0.0 {
        return 0.0;
    }
    b * (1.0 - (se * se) / (b * b)).max(0.0)
}

/// A logistic fit: the coefficients over the features, the intercept last; and the
/// intercept's standard error, from the inverse of the penalised Hessian at the fit over
/// the columns fitted (a coefficient held at 0 by `non_negative` is not estimated).
pub(crate) struct LogisticFit {
    pub(crate) beta: Vec<f64>,
    pub(crate) intercept_se: f64,
}

/// A Gaussian prior on a logistic fit: feature coefficient `c` is ridged with strength
/// `l2[c]` toward `centre[c]`, the intercept with `l2_bias` toward 0.
#[derive(Debug, Clone)]
pub(crate) struct Prior {
    l2: Vec<f64>,
    centre: Vec<f64>,
    l2_bias: f64,
}

impl Prior {
    /// Every one of `p` coefficients ridged by `l2` toward 0.
    pub(crate) fn ridge(p: usize, l2: f64, l2_bias: f64) -> Self {
        Prior { l2: vec![l2; p], centre: vec![0.0; p], l2_bias }
    }

    /// The same strengths, centred on `centre` instead.
    pub(crate) fn toward(self, centre: Vec<f64>) -> Self {
        Prior { centre, ..self }
    }

    /// Column `c` left unpenalised (a tiny ridge keeps the Hessian invertible).
    pub(crate) fn free(mut self, c: usize) -> Self {
        self.l2[c] = 1e-6;
        self
    }
}

/// Weighted penalised logistic regression of `y` on the rows of `z` plus an intercept
/// (the last coefficient) under `prior`; with `non_negative`, the feature coefficients
/// are kept at or above 0 (active set: a negative one is fixed at 0 and the rest refitted).
pub(crate) fn logistic(z: &[Vec<f64>], y: &[f64], w: &[f64], prior: &Prior, non_negative: bool) -> LogisticFit {
    // Started at the prior's centre, where its penalty is least.
    let start: Vec<f64> = prior.centre.iter().copied().chain([0.0]).collect();
    logistic_from(z, y, w, prior, non_negative, &start)
}

/// [`logistic`] started at `start` (coefficients, intercept last): a neighbouring fit's
/// solution saves most Newton steps along a path of priors.
pub(crate) fn logistic_from(
    z: &[Vec<f64>],
    y: &[f64],
    w: &[f64],
    prior: &Prior,
    non_negative: bool,
    start: &[f64],
) -> LogisticFit {
    let p = z.first().map_or(0, Vec::len);
    let mut active = vec![true; p];
    loop {
        let cols: Vec<usize> = (0..p).filter(|&c| active[c]).collect();
        let d = cols.len() + 1;
        let problem = Penalised { z, y, w, cols: &cols, prior };
        let mut beta: Vec<f64> = cols.iter().map(|&c| start[c]).chain([start[p]]).collect();
        let mut f = problem.objective(&beta);
        for _ in 0..100 {
            let (g, h) = problem.gradient_hessian(&beta);
            let step = solve_spd(&h, &g);
            // Damped step: halve until the objective does not rise.
            let mut c = 1.0;
            let (next, f_next) = loop {
                let next: Vec<f64> = beta.iter().zip(&step).map(|(b, s)| b - c * s).collect();
                let f_next = problem.objective(&next);
                if f_next <= f + 1e-12 || c < 1e-6 {
                    break (next, f_next);
                }
                c /= 2.0;
            };
            let settled = f - f_next < 1e-10 || step.iter().map(|s| (c * s).abs()).fold(0.0, f64::max) < 1e-9;
            beta = next;
            f = f_next;
            if settled {
                break;
            }
        }
        let negative: Vec<usize> = cols.iter().enumerate().filter(|(j, _)| beta[*j] < 0.0).map(|(_, &c)| c).collect();
        if !non_negative || negative.is_empty() {
            let (_, h) = problem.gradient_hessian(&beta);
            let intercept_se = inverse_spd(&h, d)[d * d - 1].max(0.0).sqrt();
            let mut full = vec![0.0; p + 1];
            cols.iter().enumerate().for_each(|(j, &c)| full[c] = beta[j]);
            full[p] = beta[d - 1];
            return LogisticFit { beta: full, intercept_se };
        }
        negative.iter().for_each(|&c| active[c] = false);
    }
}

/// The penalised log-loss of a logistic fit over the columns `cols` of `z` plus an
/// intercept (the last coefficient of each `beta` below).
struct Penalised<'a> {
    z: &'a [Vec<f64>],
    y: &'a [f64],
    w: &'a [f64],
    cols: &'a [usize],
    prior: &'a Prior,
}

impl Penalised<'_> {
    /// Coefficient `a`'s ridge and the value it is ridged toward.
    fn penalty(&self, a: usize) -> (f64, f64) {
        match self.cols.get(a) {
            Some(&c) => (self.prior.l2[c], self.prior.centre[c]),
            None => (self.prior.l2_bias, 0.0),
        }
    }

    fn score(&self, row: &[f64], beta: &[f64]) -> f64 {
        self.cols.iter().enumerate().map(|(j, &c)| beta[j] * row[c]).sum::<f64>() + beta[self.cols.len()]
    }

    fn objective(&self, beta: &[f64]) -> f64 {
        let mut f = 0.0;
        for ((row, &yi), &wi) in self.z.iter().zip(self.y).zip(self.w) {
            let s = self.score(row, beta);
            f += wi * log_loss(s, yi);
        }
        f + 0.5
            * beta
                .iter()
                .enumerate()
                .map(|(a, b)| {
                    let (l2, c) = self.penalty(a);
                    l2 * (b - c).powi(2)
                })
                .sum::<f64>()
    }

    /// The gradient and the (symmetric, row-major) Hessian at `beta`.
    fn gradient_hessian(&self, beta: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let d = self.cols.len() + 1;
        let mut g = vec![0.0; d];
        let mut h = vec![0.0; d * d];
        let mut feat = vec![1.0; d];
        for ((row, &yi), &wi) in self.z.iter().zip(self.y).zip(self.w) {
            self.cols.iter().enumerate().for_each(|(j, &c)| feat[j] = row[c]);
            let pr = sigmoid(self.score(row, beta));
            // Products in the order the plain expressions take, so the sums are unchanged.
            let (ge, he) = (wi * (pr - yi), wi * pr * (1.0 - pr));
            for a in 0..d {
                g[a] += ge * feat[a];
                let ha = he * feat[a];
                h[a * d..=a * d + a].iter_mut().zip(&feat[..=a]).for_each(|(h, fb)| *h += ha * fb);
            }
        }
        for a in 0..d {
            for b in 0..a {
                h[b * d + a] = h[a * d + b];
            }
            let (l2, c) = self.penalty(a);
            g[a] += l2 * (beta[a] - c);
            h[a * d + a] += l2;
        }
        (g, h)
    }
}

fn softplus(s: f64) -> f64 {
    if s > 30.0 { s } else { s.exp().ln_1p() }
}

/// The log-loss of log-odds `s` against label `y` (0 or 1).
pub(crate) fn log_loss(s: f64, y: f64) -> f64 {
    softplus(s) - y * s
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn a_prior_pulls_the_fit_toward_its_centre_and_a_free_column_is_not_pulled() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let z: Vec<Vec<f64>> =
            (0..200).map(|_| vec![rng.random_range(-2.0..2.0), rng.random_range(-2.0..2.0)]).collect();
        let y: Vec<f64> =
            z.iter().map(|r| f64::from(u8::from(r[0] + 0.5 * r[1] > rng.random_range(-1.0..1.0)))).collect();
        let w = vec![1.0; 200];
        let pulled = logistic(&z, &y, &w, &Prior::ridge(2, 1e9, 1e-6).toward(vec![0.3, -0.7]), false).beta;
        assert!((pulled[0] - 0.3).abs() < 1e-4 && (pulled[1] + 0.7).abs() < 1e-4, "{pulled:?}");
        let free = logistic(&z, &y, &w, &Prior::ridge(2, 1e9, 1e-6).free(0), false).beta;
        let alone =
            logistic(&z.iter().map(|r| vec![r[0]]).collect::<Vec<_>>(), &y, &w, &Prior::ridge(1, 1e-6, 1e-6), false)
                .beta;
        assert!(free[1].abs() < 1e-4 && (free[0] - alone[0]).abs() < 1e-4, "{free:?} {alone:?}");
    }

    #[test]
    fn one_feature_logistic_matches_the_closed_form_of_a_saturated_fit() {
        // Two groups: s = -1 with 1 of 4 positive, s = 1 with 3 of 4; with a tiny ridge the
        // fit is the group log-odds, +-ln 3.
        let s = [-1.0, -1.0, -1.0, -1.0, 1.0, 1.0, 1.0, 1.0];
        let y = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0];
        let z: Vec<Vec<f64>> = s.iter().map(|&v| vec![v]).collect();
        let b = logistic(&z, &y, &[1.0; 8], &Prior::ridge(1, 1e-9, 1e-9), false).beta;
        assert!((b[0] - 3f64.ln()).abs() < 1e-5 && b[1].abs() < 1e-6, "{b:?}");
        let nn = logistic(
            &z.iter().map(|r| vec![-r[0]]).collect::<Vec<_>>(),
            &y,
            &[1.0; 8],
            &Prior::ridge(1, 1e-9, 1e-9),
            true,
        )
        .beta;
        assert_eq!(nn[0], 0.0);
    }

    #[test]
    fn the_intercepts_standard_error_matches_the_closed_form_without_features() {
        // Intercept only, 30 of 100 positive: the fit is ln(0.3 / 0.7) and its standard
        // error 1 / sqrt(100 * 0.3 * 0.7).
        let y: Vec<f64> = (0..100).map(|i| f64::from(u8::from(i < 30))).collect();
        let z: Vec<Vec<f64>> = (0..100).map(|_| vec![0.0]).collect();
        let fit = logistic(&z, &y, &[1.0; 100], &Prior::ridge(1, 1.0, 1e-9), false);
        assert!((fit.beta[1] - (0.3f64 / 0.7).ln()).abs() < 1e-6, "{:?}", fit.beta);
        assert!((fit.intercept_se - 1.0 / 21f64.sqrt()).abs() < 1e-6, "{}", fit.intercept_se);
    }

    proptest::proptest! {
        #[test]
        fn a_shrunk_intercept_keeps_its_sign_never_grows_and_vanishes_within_one_error(
            b in -20.0f64..20.0, se in 0.01f64..5.0,
        ) {
            let s = shrink_intercept(b, se);
            proptest::prop_assert!(s.abs() <= b.abs() && s * b >= 0.0);
            if b.abs() <= se {
                proptest::prop_assert_eq!(s, 0.0);
            } else {
                // Within se^2 / |b| of the estimate: nearly whole far from 0.
                proptest::prop_assert!((b - s).abs() <= se * se / b.abs() + 1e-12);
            }
        }
    }
}
