//! Bayesian Dawid-Skene for one generator pair: latent human preferences, evaluator
//! accuracies and the win rate sampled jointly by Gibbs sampling (all conditionals are
//! conjugate Beta / Bernoulli, so every step is an exact draw).

use rand::Rng;
use rand_distr::Distribution;

use crate::{Confusion, Estimate, Outcome, PairVotes, SamplingConfig, WinRateError, beta, check_len, interval};

/// Beta priors on one evaluator's accuracies q0 and q1, as (alpha, beta) pairs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AccuracyPrior {
    pub q0: (f64, f64),
    pub q1: (f64, f64),
}

impl AccuracyPrior {
    /// The no-prior setting: each confusion row ~ Dirichlet(1 + identity), i.e. q0 and
    /// q1 ~ Beta(2, 1): better than chance is more likely, nothing else is assumed.
    pub fn weak() -> Self {
        Self { q0: (2.0, 1.0), q1: (2.0, 1.0) }
    }

    /// The Beta-Bernoulli posterior from human-labeled comparisons (of other generator
    /// pairs, for the out-of-distribution prior), starting from uniform.
    pub fn from_counts(c: Confusion) -> Self {
        Self {
            q0: (1.0 + f64::from(c.h0_v0), 1.0 + f64::from(c.h0_v1)),
            q1: (1.0 + f64::from(c.h1_v1), 1.0 + f64::from(c.h1_v0)),
        }
    }

    /// Whether the prior alone puts q0 + q1 - 1 credibly away from zero.
    fn informative(&self, cfg: &SamplingConfig, rng: &mut impl Rng) -> bool {
        let (b0, b1) = (beta(self.q0.0, self.q0.1), beta(self.q1.0, self.q1.1));
        let mut slopes: Vec<f64> = (0..cfg.draws.max(1000)).map(|_| b0.sample(rng) + b1.sample(rng) - 1.0).collect();
        let (lo, hi) = interval(&mut slopes, cfg.level);
        lo > 0.0 || hi < 0.0
    }
}

/// Agreement z-score above which two evaluators count as agreeing beyond chance.
const AGREEMENT_Z: f64 = 3.0;

/// Bayesian Dawid-Skene. `known[i]` is comparison i's human label where it is given (the
/// in-distribution prior: those labels are observed, not sampled); `priors[e]` is
/// evaluator e's accuracy prior (`weak()` for none, `from_counts` for out of
/// distribution). Model: p ~ Beta(1, 1), H_i ~ Bernoulli(p), vote ~ Bernoulli(q1) if H_i
/// else Bernoulli(1 - q0). The estimate is the posterior of p (mean and central
/// interval over `cfg.draws` sweeps after `cfg.burn_in`). `progress(done, total)` is
/// called every 100 sweeps.
///
/// Without any human label and without an informative prior, p is identified only by
/// the evaluators agreeing with each other more than chance; when no two do (every
/// q0 + q1 is near 1, or there is a single evaluator), the outcome is `Unidentifiable`.
pub fn bayesian_dawid_skene(
    votes: &PairVotes,
    known: &[Option<bool>],
    priors: &[AccuracyPrior],
    cfg: &SamplingConfig,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Outcome, WinRateError> {
    cfg.check()?;
    let (n, k) = (votes.n_items(), votes.evaluators().len());
    check_len("human labels", known.len(), n, "comparison")?;
    check_len("accuracy priors", priors.len(), k, "evaluator")?;
    let mut rng = cfg.rng();

    if known.iter().all(Option::is_none)
        && !priors.iter().any(|p| p.informative(cfg, &mut rng))
        && let Some(why) = no_agreement(votes)
    {
        return Ok(Outcome::Unidentifiable(why));
    }

    // Start from the majority vote (ties at random), then alternate exact conditionals.
    let mut h: Vec<bool> = (0..n)
        .map(|i| {
            known[i].unwrap_or_else(|| {
                let (n0, n1) = (0..k).fold((0, 0), |(a, b), e| match votes.vote(i, e) {
                    Some(true) => (a, b + 1),
                    Some(false) => (a + 1, b),
                    None => (a, b),
                });
                if n1 == n0 { rng.random_bool(0.5) } else { n1 > n0 }
            })
        })
        .collect();
    let total = cfg.burn_in + cfg.draws;
    let mut draws = Vec::with_capacity(cfg.draws);
    let (mut q0, mut q1) = (vec![0.0; k], vec![0.0; k]);
    for sweep in 0..total {
        for e in 0..k {
            let mut c = Confusion::default();
            for (i, &hi) in h.iter().enumerate() {
                if let Some(v) = votes.vote(i, e) {
                    c.add(hi, v);
                }
            }
            let pr = priors[e];
            q0[e] = beta(pr.q0.0 + f64::from(c.h0_v0), pr.q0.1 + f64::from(c.h0_v1)).sample(&mut rng);
            q1[e] = beta(pr.q1.0 + f64::from(c.h1_v1), pr.q1.1 + f64::from(c.h1_v0)).sample(&mut rng);
        }
        let ones = h.iter().filter(|&&x| x).count();
        let p = beta(1.0 + ones as f64, 1.0 + (n - ones) as f64).sample(&mut rng);
        let (lp, lq) = (p.ln(), (1.0 - p).ln());
        for i in 0..n {
            if known[i].is_some() {
                continue;
            }
            // Log space: accuracies drawn near 0 or 1 must not underflow a product.
            let (mut l1, mut l0) = (lp, lq);
            for e in 0..k {
                match votes.vote(i, e) {
                    Some(true) => {
                        l1 += q1[e].ln();
                        l0 += (1.0 - q0[e]).ln();
                    }
                    Some(false) => {
                        l1 += (1.0 - q1[e]).ln();
                        l0 += q0[e].ln();
                    }
                    None => {}
                }
            }
            let p1 = 1.0 / (1.0 + (l0 - l1).exp());
            h[i] = rng.random_bool(p1.clamp(0.0, 1.0));
        }
        if sweep >= cfg.burn_in {
            draws.push(p);
        }
        if (sweep + 1) % 100 == 0 || sweep + 1 == total {
            progress(sweep + 1, total);
        }
    }
    let mean = draws.iter().sum::<f64>() / draws.len() as f64;
    let (lo, hi) = interval(&mut draws, cfg.level);
    Ok(Outcome::Estimate(Estimate { mean, lo, hi, draws: cfg.draws, excluded: vec![] }))
}

/// Why agreement cannot identify p, or `None` when some pair of evaluators agrees more
/// than chance: the correlation r of their votes on shared comparisons, as z = r sqrt(n).
/// Under the model, that correlation is proportional to the product of the two slopes
/// q0 + q1 - 1, so it is what carries information about them.
fn no_agreement(votes: &PairVotes) -> Option<String> {
    let k = votes.evaluators().len();
    if k < 2 {
        return Some(format!(
            "a single evaluator (`{}`) with neither human labels nor an accuracy prior: its q0 and q1 cannot be told apart from p",
            votes.evaluators()[0]
        ));
    }
    let mut best = f64::NEG_INFINITY;
    for a in 0..k {
        for b in (a + 1)..k {
            let (xs, ys): (Vec<f64>, Vec<f64>) = (0..votes.n_items())
                .filter_map(|i| Some((f64::from(u8::from(votes.vote(i, a)?)), f64::from(u8::from(votes.vote(i, b)?)))))
                .unzip();
            if let Some(r) = jury_metrics::pearson(&xs, &ys) {
                best = best.max(r * (xs.len() as f64).sqrt());
            }
        }
    }
    (best < AGREEMENT_Z).then(|| {
        format!(
            "no human labels, no informative accuracy prior, and no two evaluators agree more than chance \
             (largest agreement z = {best:.2} < {AGREEMENT_Z}): q0 + q1 may be 1 for all of them, and then any win rate fits"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{reveal, simulate};

    fn run(votes: &PairVotes, known: &[Option<bool>], priors: &[AccuracyPrior], seed: u64) -> Outcome {
        let cfg = SamplingConfig { seed, draws: 2000, burn_in: 300, ..SamplingConfig::default() };
        bayesian_dawid_skene(votes, known, priors, &cfg, &mut |_, _| {}).unwrap()
    }

    #[test]
    fn recovers_a_biased_win_rate_with_ten_percent_labels() {
        let (mut err, mut covered) = (0.0, 0);
        for seed in 0..20 {
            let (votes, human) = simulate(0.3, &[(0.9, 0.6)], 1000, seed);
            let est = run(&votes, &reveal(&human, 0.1), &[AccuracyPrior::weak()], seed).estimate().cloned().unwrap();
            err += (est.mean - 0.3).abs();
            covered += usize::from(est.lo <= 0.3 && 0.3 <= est.hi);
        }
        eprintln!("Bayesian DS mean abs error {:.4}, covered {covered}/20", err / 20.0);
        assert!(err / 20.0 < 0.05, "mean |error| {}", err / 20.0);
        assert!(covered >= 17, "covered in {covered} of 20 seeds");
    }

    #[test]
    fn three_informative_evaluators_need_no_labels() {
        let evaluators = [(0.9, 0.6), (0.8, 0.75), (0.85, 0.7)];
        let (votes, _) = simulate(0.3, &evaluators, 2000, 5);
        let weak = vec![AccuracyPrior::weak(); 3];
        let est = run(&votes, &vec![None; 2000], &weak, 5).estimate().cloned().unwrap();
        assert!((est.mean - 0.3).abs() < 0.05, "{est:?}");
    }

    #[test]
    fn an_ood_prior_calibrates_without_in_distribution_labels() {
        // Accuracies learned on another pair (p = 0.7) carry over to this one (p = 0.3).
        let (other, other_human) = simulate(0.7, &[(0.9, 0.6)], 2000, 8);
        let labels: Vec<Option<bool>> = other_human.iter().map(|&h| Some(h)).collect();
        let prior = AccuracyPrior::from_counts(other.confusion(&labels).unwrap()[0]);
        let (votes, _) = simulate(0.3, &[(0.9, 0.6)], 1000, 9);
        let est = run(&votes, &vec![None; 1000], &[prior], 9).estimate().cloned().unwrap();
        assert!((est.mean - 0.3).abs() < 0.05, "{est:?}");
    }

    #[test]
    fn chance_level_evaluators_without_labels_are_unidentifiable() {
        let (votes, _) = simulate(0.3, &[(0.6, 0.4), (0.5, 0.5), (0.7, 0.3)], 1000, 2);
        let out = run(&votes, &vec![None; 1000], &[AccuracyPrior::weak(); 3], 2);
        assert!(matches!(&out, Outcome::Unidentifiable(why) if why.contains("agree more than chance")), "{out:?}");
        let (one, _) = simulate(0.3, &[(0.9, 0.6)], 1000, 2);
        let out = run(&one, &vec![None; 1000], &[AccuracyPrior::weak()], 2);
        assert!(matches!(&out, Outcome::Unidentifiable(why) if why.contains("single evaluator")), "{out:?}");
    }

    #[test]
    fn posterior_stays_a_probability_and_repeats_with_its_seed() {
        let (votes, human) = simulate(0.5, &[(1.0, 1.0), (0.0, 0.0)], 200, 1);
        let known = reveal(&human, 0.5);
        let a = run(&votes, &known, &[AccuracyPrior::weak(); 2], 4);
        let est = a.estimate().cloned().unwrap();
        assert!(
            est.mean.is_finite()
                && (0.0..=1.0).contains(&est.lo)
                && est.lo <= est.mean
                && est.mean <= est.hi
                && est.hi <= 1.0
        );
        assert_eq!(a, run(&votes, &known, &[AccuracyPrior::weak(); 2], 4));
    }
}
