//! The regularized incomplete beta function and its inverse: the Clopper-Pearson interval
//! of a share is a pair of Beta quantiles, and no dependency here computes them.

/// `ln Gamma(x)` for `x > 0`: Stirling's series from 10 up (its error there is below
/// 1e-12 with the terms to `x^-7`), the recurrence `Gamma(x) = Gamma(x + 1) / x` below.
fn ln_gamma(x: f64) -> f64 {
    let mut shift = 0.0;
    let mut x = x;
    while x < 10.0 {
        shift -= x.ln();
        x += 1.0;
    }
    let (x2, half_ln_two_pi) = (x * x, 0.918_938_533_204_672_8);
    let series =
        1.0 / (12.0 * x) - 1.0 / (360.0 * x * x2) + 1.0 / (1260.0 * x * x2 * x2) - 1.0 / (1680.0 * x * x2 * x2 * x2);
    shift + (x - 0.5) * x.ln() - x + half_ln_two_pi + series
}

/// The continued fraction of `I_x(a, b)` (DLMF 8.17.22), `1 / (1 + d1 / (1 + d2 / ...))`,
/// by Lentz's method; it converges fast for `x < (a + 1) / (a + b + 2)`.
fn fraction(x: f64, a: f64, b: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let guard = |v: f64| if v.abs() < TINY { TINY } else { v };
    // The denominator `1 + d1 / (1 + ...)`, built up from its leading 1.
    let (mut f, mut c, mut d) = (1.0, 1.0, 0.0);
    for n in 1..1000u32 {
        let m = f64::from(n / 2);
        let term = if n % 2 == 0 {
            m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m))
        } else {
            -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0))
        };
        d = 1.0 / guard(1.0 + term * d);
        c = guard(1.0 + term / c);
        f *= c * d;
        if (c * d - 1.0).abs() < 1e-15 {
            break;
        }
    }
    1.0 / f
}

/// The regularized incomplete beta function `I_x(a, b)`, the Beta(a, b) distribution's
/// probability below `x`.
pub(crate) fn incomplete(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let log_front = a * x.ln() + b * (1.0 - x).ln() + ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b);
    if x < (a + 1.0) / (a + b + 2.0) {
        log_front.exp() * fraction(x, a, b) / a
    } else {
        1.0 - log_front.exp() * fraction(1.0 - x, b, a) / b
    }
}

/// The `q` quantile of Beta(a, b), by bisection on [`incomplete`] (increasing in `x`).
pub(crate) fn quantile(q: f64, a: f64, b: f64) -> f64 {
    let (mut lo, mut hi) = (0.0, 1.0);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if incomplete(mid, a, b) < q {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Golden values from SciPy's `gammaln` and `betainc`.
    #[test]
    fn matches_reference_values() {
        for (x, want) in [(0.3, 1.095_797_994_818_075_6), (7.5, 7.534_364_236_758_734), (123.4, 469.336_097_442_190_6)]
        {
            assert!((ln_gamma(x) - want).abs() < 1e-10, "ln_gamma({x}) = {}", ln_gamma(x));
        }
        for (x, a, b, want) in [
            (0.3, 2.5, 7.25, 0.660_482_273_581_907_1),
            (0.01, 0.5, 0.5, 0.063_768_560_858_519_85),
            (0.1, 30.0, 200.0, 0.076_889_098_159_070_19),
        ] {
            assert!((incomplete(x, a, b) - want).abs() < 1e-10, "I({x}; {a}, {b}) = {}", incomplete(x, a, b));
        }
    }

    /// Clopper-Pearson for 3 of 50 (SciPy's `beta.ppf`): (0.012549, 0.165482).
    #[test]
    fn quantiles_invert_the_function() {
        assert!((quantile(0.025, 3.0, 48.0) - 0.012_548_587_835_334_06).abs() < 1e-9);
        assert!((quantile(0.975, 4.0, 47.0) - 0.165_481_946_603_772_9).abs() < 1e-9);
        // The largest effective size a share's interval is read at (rates.rs): 30,000 of
        // 100,000, SciPy's (0.297161, 0.302851).
        assert!((quantile(0.025, 3e4, 7e4 + 1.0) - 0.297_160_575_400_564_8).abs() < 1e-8);
        assert!((quantile(0.975, 3e4 + 1.0, 7e4) - 0.302_851_028_681_074).abs() < 1e-8);
        for q in [0.01, 0.3, 0.9] {
            assert!((incomplete(quantile(q, 1.7, 0.4), 1.7, 0.4) - q).abs() < 1e-9);
        }
    }
}
