//! Bayesian Win-Rate Sampling: push posterior draws of each evaluator's observed rate and
//! accuracies through p = (k + q0 - 1) / (q0 + q1 - 1) and pool the evaluators.

use rand_distr::Distribution;

use crate::{Confusion, Estimate, Outcome, PairVotes, SamplingConfig, WinRateError, beta, check_len, interval};

/// Slopes q0 + q1 - 1 below this in size amplify the error of k more than tenfold.
pub const MIN_SLOPE: f64 = 0.1;

/// BWRS. `accuracy[e]` is evaluator e's agreement with human labels (from labeled
/// comparisons of this pair, or of other pairs for an out-of-distribution prior). Per
/// evaluator and draw: k ~ Beta(1 + votes G1, 1 + votes G0), q0 ~ Beta(1 + h0_v0, 1 +
/// h0_v1), q1 ~ Beta(1 + h1_v1, 1 + h1_v0); draws that land outside (0, 1) are dropped.
/// An evaluator without labeled comparisons, or whose q0 + q1 - 1 is more likely than
/// not within `MIN_SLOPE` of zero, is left out (named in `excluded`): dividing by such a
/// slope turns noise into any number. With none left, the outcome is `Unidentifiable`.
/// (A merely uncertain slope, as a handful of labels leaves, is kept: its draws widen
/// the interval instead.)
pub fn bwrs(votes: &PairVotes, accuracy: &[Confusion], cfg: &SamplingConfig) -> Result<Outcome, WinRateError> {
    cfg.check()?;
    check_len("evaluator accuracies", accuracy.len(), votes.evaluators().len(), "evaluator")?;
    let mut rng = cfg.rng();
    let mut pooled = Vec::with_capacity(cfg.draws * accuracy.len());
    let mut excluded = Vec::new();
    for (e, acc) in accuracy.iter().enumerate() {
        let name = &votes.evaluators()[e];
        if acc.total() == 0 {
            excluded.push(name.clone());
            continue;
        }
        let (n0, n1) = votes.counts(e);
        let k = beta(1.0 + f64::from(n1), 1.0 + f64::from(n0));
        let q0 = beta(1.0 + f64::from(acc.h0_v0), 1.0 + f64::from(acc.h0_v1));
        let q1 = beta(1.0 + f64::from(acc.h1_v1), 1.0 + f64::from(acc.h1_v0));
        let mut slopes = Vec::with_capacity(cfg.draws);
        let mut kept = Vec::with_capacity(cfg.draws);
        for _ in 0..cfg.draws {
            let (k, q0, q1) = (k.sample(&mut rng), q0.sample(&mut rng), q1.sample(&mut rng));
            let slope = q0 + q1 - 1.0;
            slopes.push(slope);
            let p = (k + q0 - 1.0) / slope;
            if p > 0.0 && p < 1.0 {
                kept.push(p);
            }
        }
        let near_zero = slopes.iter().filter(|s| s.abs() < MIN_SLOPE).count() as f64 / slopes.len() as f64;
        if near_zero > 0.5 {
            excluded.push(name.clone());
        } else {
            pooled.extend(kept);
        }
    }
    if pooled.is_empty() {
        return Ok(Outcome::Unidentifiable(format!(
            "every evaluator's q0 + q1 - 1 is more likely than not within {MIN_SLOPE} of 0 or unknown (left out: {}), \
             so p = (k + q0 - 1) / (q0 + q1 - 1) is not determined",
            excluded.join(", ")
        )));
    }
    let mean = pooled.iter().sum::<f64>() / pooled.len() as f64;
    let (lo, hi) = interval(&mut pooled, cfg.level);
    Ok(Outcome::Estimate(Estimate { mean, lo, hi, draws: pooled.len(), excluded }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{reveal, simulate};

    /// The recovery setting: q0 = 0.9, q1 = 0.6, p = 0.3 (so k = 0.25), 1,000
    /// comparisons, 10% human-labeled, 20 seeds; three such evaluators pooled. (With one
    /// evaluator the 100 labels, about 30 of them G1 wins, leave q1 uncertain by +-0.09,
    /// which moves p by +-0.05: BWRS's mean error is then 0.063, Bayesian Dawid-Skene's,
    /// which also learns from the unlabeled votes, below 0.05.)
    #[test]
    fn bwrs_recovers_a_biased_win_rate() {
        let (mut err, mut covered, mut observed_err) = (0.0, 0, 0.0);
        for seed in 0..20 {
            let (votes, human) = simulate(0.3, &[(0.9, 0.6); 3], 1000, seed);
            let acc = votes.confusion(&reveal(&human, 0.1)).unwrap();
            let cfg = SamplingConfig { seed, ..SamplingConfig::default() };
            let est = bwrs(&votes, &acc, &cfg).unwrap().estimate().cloned().expect("identifiable");
            err += (est.mean - 0.3).abs();
            covered += usize::from(est.lo <= 0.3 && 0.3 <= est.hi);
            observed_err += (crate::observed(&votes, &cfg).unwrap().mean - 0.3).abs();
        }
        let (err, observed_err) = (err / 20.0, observed_err / 20.0);
        eprintln!("BWRS mean abs error {err:.4}, observed {observed_err:.4}, covered {covered}/20");
        assert!(err < 0.05, "mean |error| {err}");
        assert!(covered >= 17, "95% intervals covered p in {covered} of 20 seeds");
        assert!(observed_err > 0.04, "the uncalibrated rate is off by about 0.05: {observed_err}");
    }

    #[test]
    fn a_slope_near_zero_is_unidentifiable() {
        // q0 + q1 = 1: the votes carry no information about the human preference.
        let (votes, human) = simulate(0.3, &[(0.7, 0.3), (0.5, 0.5)], 2000, 3);
        let acc = votes.confusion(&reveal(&human, 0.1)).unwrap();
        let out = bwrs(&votes, &acc, &SamplingConfig::default()).unwrap();
        let Outcome::Unidentifiable(why) = out else { panic!("{out:?}") };
        assert!(why.contains("e0, e1"), "{why}");
    }

    #[test]
    fn an_evaluator_without_labels_is_left_out_by_name() {
        let (votes, human) = simulate(0.6, &[(0.9, 0.8), (0.8, 0.9)], 500, 4);
        let mut acc = votes.confusion(&reveal(&human, 0.2)).unwrap();
        acc[1] = Confusion::default();
        let est = bwrs(&votes, &acc, &SamplingConfig::default()).unwrap().estimate().cloned().unwrap();
        assert_eq!(est.excluded, ["e1"]);
        assert!((est.mean - 0.6).abs() < 0.08, "{est:?}");
    }
}
