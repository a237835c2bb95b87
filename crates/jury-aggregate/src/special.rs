//! Numerical helpers shared by the probabilistic methods.

/// Replaces log-weights by their softmax; returns the log of their sum (log-sum-exp).
/// A row of all `-inf` becomes uniform and returns `-inf`.
/// The share of `draws` Monte Carlo draws for which `agrees` holds, as the rule of
/// succession's `(agreeing + 1) / (draws + 2)` (never 0 or 1, so a target of 1 is never
/// reached); the count stops once that cannot reach `floor`, and returns the best value
/// still possible, which is below it.
pub(crate) fn agreeing_share(draws: usize, floor: f64, mut agrees: impl FnMut() -> bool) -> f64 {
    let share = |disagree: usize| (draws - disagree + 1) as f64 / (draws + 2) as f64;
    let mut disagree = 0;
    for _ in 0..draws {
        if !agrees() {
            disagree += 1;
            if share(disagree) < floor {
                break;
            }
        }
    }
    share(disagree)
}

pub(crate) fn softmax_in_place(row: &mut [f64]) -> f64 {
    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY {
        let u = 1.0 / row.len() as f64;
        row.fill(u);
        return f64::NEG_INFINITY;
    }
    row.iter_mut().for_each(|l| *l = (*l - max).exp());
    let sum: f64 = row.iter().sum();
    row.iter_mut().for_each(|r| *r /= sum);
    max + sum.ln()
}

/// ln(1 + e^x) without overflow.
pub(crate) fn softplus(x: f64) -> f64 {
    if x > 30.0 {
        x
    } else if x < -30.0 {
        x.exp()
    } else {
        x.exp().ln_1p()
    }
}

/// The logistic function.
pub(crate) fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 { 1.0 / (1.0 + (-x).exp()) } else { x.exp() / (1.0 + x.exp()) }
}

/// The digamma function for x > 0: the recurrence up to x >= 10, then the asymptotic
/// series (absolute error below 1e-12 there).
pub(crate) fn digamma(mut x: f64) -> f64 {
    let mut shift = 0.0;
    while x < 10.0 {
        shift -= 1.0 / x;
        x += 1.0;
    }
    let inv = 1.0 / x;
    let inv2 = inv * inv;
    let series =
        inv2 * (1.0 / 12.0 - inv2 * (1.0 / 120.0 - inv2 * (1.0 / 252.0 - inv2 * (1.0 / 240.0 - inv2 / 132.0))));
    shift + x.ln() - 0.5 * inv - series
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digamma_matches_known_values() {
        // psi(1) = -gamma, psi(0.5) = -gamma - 2 ln 2, psi(10) from scipy.special.
        let gamma = 0.577_215_664_901_532_9;
        assert!((digamma(1.0) + gamma).abs() < 1e-12);
        assert!((digamma(0.5) + gamma + 2.0 * 2f64.ln()).abs() < 1e-12);
        assert!((digamma(10.0) - 2.251_752_589_066_721).abs() < 1e-12);
    }

    #[test]
    fn softmax_is_stable_and_total() {
        let mut r = [1000.0, 1000.0];
        assert!((softmax_in_place(&mut r) - (1000.0 + 2f64.ln())).abs() < 1e-9);
        assert_eq!(r, [0.5, 0.5]);
        let mut r = [f64::NEG_INFINITY; 3];
        assert_eq!(softmax_in_place(&mut r), f64::NEG_INFINITY);
        assert!((r[0] - 1.0 / 3.0).abs() < 1e-15);
        assert!((softplus(800.0) - 800.0).abs() < 1e-12 && softplus(-800.0) == 0.0);
        assert!((sigmoid(-800.0)).abs() < 1e-300 && sigmoid(800.0) == 1.0);
    }
}
