//! The score interval of a mean: Wilson's principle (invert the test whose variance is
//! the one the candidate mean implies, not the one the sample shows) carried from 0/1
//! values to any finite set of weighted values, by exponential tilting.
//!
//! The mean of a few skewed values (PPI's residuals when the judge errs rarely: mostly 0,
//! now and then +1 or -lambda) has a sample variance that moves with the mean: a draw
//! that happens to miss the rare value has both a low mean and a small spread, and the
//! Wald interval then falls short on that side. For a candidate mean `mu`, the values'
//! weights are tilted, `w_i exp(t v_i)`, to the distribution nearest them (in
//! Kullback-Leibler divergence) whose mean is `mu`; `mu` is in the interval when
//! `(mean - mu)^2 <= q^2 scale sigma^2(mu)`, `sigma^2(mu)` that distribution's variance.
//! For values in {0, 1} the tilted variance is `mu (1 - mu)` whatever the weights, and
//! the interval is Wilson's.

/// Scan points per side before the endpoint is refined: the accepted set is taken to its
/// outermost scanned point, so a set with a gap is reported whole (its hull).
const SCAN: usize = 32;

/// The tilted distribution's mean and variance at `t`.
fn tilted(values: &[(f64, f64)], t: f64) -> (f64, f64) {
    let top = values.iter().map(|(v, _)| t * v).fold(f64::NEG_INFINITY, f64::max);
    let (mut s0, mut s1, mut s2) = (0.0, 0.0, 0.0);
    for &(v, w) in values {
        let a = w * (t * v - top).exp();
        s0 += a;
        s1 += a * v;
        s2 += a * v * v;
    }
    let mean = s1 / s0;
    (mean, (s2 / s0 - mean * mean).max(0.0))
}

/// The variance of the tilted distribution whose mean is `mu` (strictly between the
/// smallest and largest value); the mean grows with `t`, its slope the variance.
fn variance_at(values: &[(f64, f64)], mu: f64) -> f64 {
    let (mut lo, mut hi) = (-1.0, 1.0);
    while tilted(values, hi).0 < mu && hi < 1e12 {
        hi *= 2.0;
    }
    while tilted(values, lo).0 > mu && lo > -1e12 {
        lo *= 2.0;
    }
    let mut t = 0.5 * (lo + hi);
    for _ in 0..200 {
        let (mean, var) = tilted(values, t);
        if (mean - mu).abs() <= 1e-12 * (1.0 + mu.abs()) {
            return var;
        }
        if mean < mu {
            lo = t;
        } else {
            hi = t;
        }
        // Newton's step where it stays inside the bracket, bisection otherwise.
        let next = if var > 0.0 { t + (mu - mean) / var } else { f64::NAN };
        t = if next > lo && next < hi { next } else { 0.5 * (lo + hi) };
        if hi - lo <= 1e-14 * (1.0 + t.abs()) {
            break;
        }
    }
    tilted(values, t).1
}

/// The interval `(low, high)` of candidate means `mu` with
/// `(mean - mu)^2 <= q^2 scale sigma^2(mu)`, `values` the (value, weight) pairs the tilt
/// starts from and `mean` the estimate under test (it need not be their weighted mean:
/// PPI tests the labels' own mean with pseudo-labels in the spread only).
pub(crate) fn score_interval(values: &[(f64, f64)], mean: f64, q: f64, scale: f64) -> (f64, f64) {
    let lo_end = values.iter().map(|v| v.0).fold(f64::INFINITY, f64::min);
    let hi_end = values.iter().map(|v| v.0).fold(f64::NEG_INFINITY, f64::max);
    // One value (or a non-finite one) leaves nothing to tilt.
    let span = hi_end - lo_end;
    if !span.is_finite() || span <= 0.0 {
        return (mean, mean);
    }
    let mean = mean.clamp(lo_end, hi_end);
    let outside = |mu: f64| (mean - mu).powi(2) > q * q * scale * variance_at(values, mu);
    let side = |end: f64| -> f64 {
        // The outermost scanned candidate still accepted, then bisection to the next.
        let at = |k: usize| mean + (end - mean) * k as f64 / SCAN as f64;
        let last = (1..SCAN).rev().find(|&k| !outside(at(k))).unwrap_or(0);
        // at(SCAN) is the end itself, whose tilt has no spread left: outside.
        let (mut inside, mut out) = (at(last), at(last + 1));
        for _ in 0..60 {
            let mid = 0.5 * (inside + out);
            if outside(mid) {
                out = mid;
            } else {
                inside = mid;
            }
        }
        inside
    };
    (side(lo_end), side(hi_end))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wilson's interval from its closed form: 10 of 50, q = 1.96.
    #[test]
    fn zero_one_values_give_wilsons_interval() {
        let q: f64 = 1.959_963_984_540_054;
        let values = [(1.0, 10.0), (0.0, 40.0)];
        let (low, high) = score_interval(&values, 0.2, q, 1.0 / 50.0);
        let (p, n) = (0.2, 50.0);
        let c = q * q / n;
        let centre = (p + c / 2.0) / (1.0 + c);
        let half = q / (1.0 + c) * (p * (1.0 - p) / n + c / (4.0 * n)).sqrt();
        assert!((low - (centre - half)).abs() < 1e-7 && (high - (centre + half)).abs() < 1e-7, "{low} {high}");
        // The weights the tilt starts from do not move it: 1 of 50 with 49 behind it.
        let (low, high) = score_interval(&[(1.0, 1.0), (0.0, 49.0)], 0.2, q, 1.0 / 50.0);
        assert!((low - (centre - half)).abs() < 1e-7 && (high - (centre + half)).abs() < 1e-7, "{low} {high}");
    }

    /// A rare large value: the side it lies on reaches further than the Wald interval's,
    /// the other side less far.
    #[test]
    fn the_interval_leans_toward_a_rare_value() {
        let values = [(1.0, 2.0), (0.0, 90.0), (-0.2, 8.0)];
        let (n, mean): (f64, f64) = (100.0, (2.0 - 1.6) / 100.0);
        let var = (2.0 * (1.0 - mean).powi(2) + 90.0 * mean * mean + 8.0 * (0.2 + mean).powi(2)) / n;
        let half = 1.96 * (var / n).sqrt();
        let (low, high) = score_interval(&values, mean, 1.96, 1.0 / n);
        assert!(high - mean > half && mean - low < half, "{low} {mean} {high} +-{half}");
        assert!(low < mean && high > mean);
    }

    #[test]
    fn one_value_has_no_width() {
        assert_eq!(score_interval(&[(0.3, 5.0)], 0.3, 1.96, 0.1), (0.3, 0.3));
    }
}
