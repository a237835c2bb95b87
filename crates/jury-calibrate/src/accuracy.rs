//! How accurate the verdicts are, read off the calibration labels alone: a user whose
//! only labels are the calibration set still learns how often the calibrated verdicts are
//! right on the examples outside it, and how often the label-free method's are.
//!
//! Each labeled example is judged by fits that did not see its label (the stack's
//! members fitted without its fold, under weights fitted on rows that members fitted
//! without that fold scored; the label-free method fits none) and stands for the
//! `1 / pi - 1` examples outside the set its inclusion probability `pi` says it does: the
//! estimate is their weighted share right (a ratio estimate, so a plan that labels the
//! doubtful examples, leaving the easier ones outside, is undone). Its interval is
//! Clopper-Pearson's at the effective size its linearised variance gives, times
//! `(N - K) / N`: the `N - K` examples outside are a finite set whose own share right
//! varies from draw to draw, and under uniform labels the variance is then
//! `p (1 - p) (1 / K + 1 / (N - K))`. An interval for the labels' share alone covered
//! 69-84% on juries of 350 and 419 examples at 250 labels; `N` times the share over every
//! example less the labels' right answers, over `N - K`, left the plan's weights unnormed
//! and covered 82.5% on TriviaQA V1 under a plan (docs/reproduction/calibration-rates.md).
//!
//! The effective size is at most the labels' count. A plan spreads half its labels
//! evenly, so the confident examples, most of the set and each standing for thousands,
//! get a few dozen labels, on which a jury right 99.5% of the time seldom errs; the errors
//! the labels do show then sit in rows that stand for few, the linearised variance reads
//! the confident rows' error rate as known to be 0, and the effective size ran to ten
//! times the labels: the interval covered 71.5% at 100 labels on a simulated jury of
//! 200,000 (docs/reproduction/calibration-rates.md). At the labels' count, Clopper-Pearson
//! grants the unseen errors the room it would grant uniform labels that saw none. The
//! cap also holds where no labeled verdict is wrong and the weighted share, not exactly
//! 1 in floating point, made the linearised effective size run to 1e17.
//!
//! The picked judge gets no such estimate: out of fold, each fold's judge is the one the
//! other folds pick, and which judge that is varies, so the share right out of fold
//! missed the accuracy of the judge all the labels pick more often than its interval
//! allows (87.5-92% at 100 labels on five of the six real juries of 3,000 examples or
//! more).

use crate::Sample;
use crate::fit::Calibrated;
use crate::rates::{Interval, clopper_pearson, kish};

/// The accuracy on the examples outside a calibration set, each with its 95% interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VerdictAccuracy {
    /// The calibrated method's.
    pub calibrated: Interval,
    /// The label-free recommended method's.
    pub recommended: Interval,
}

/// The accuracy of the calibrated and the label-free method on the examples outside
/// `sample`, read off its labels: `fit` fitted on `sample`, `recommended` the label-free
/// method's hard labels for every example. None where the labels cover every example:
/// there is no other to estimate for.
pub fn verdict_accuracy(sample: &Sample, fit: &Calibrated, recommended: &[u8]) -> Option<VerdictAccuracy> {
    let y = sample.labels();
    let index = sample.index();
    let (big_n, k) = (sample.n_examples() as f64, index.len() as f64);
    // How many examples outside the sample each labeled one stands for: `1 / pi - 1`.
    let outside: Vec<f64> = sample.inclusion().iter().map(|&p| (1.0 / p - 1.0).max(0.0)).collect();
    let total: f64 = outside.iter().sum();
    if big_n <= k || total <= 0.0 {
        return None;
    }
    let e: Vec<f64> = outside.iter().map(|w| w * k / total).collect();
    let right = |vote: &dyn Fn(usize) -> bool| -> Interval {
        let c: Vec<f64> = (0..y.len()).map(|r| f64::from(u8::from(vote(r) == (y[r] == 1)))).collect();
        share_right(&c, &e, big_n)
    };
    Some(VerdictAccuracy {
        calibrated: right(&|r| fit.out_of_fold()[r] > 0.0),
        recommended: right(&|r| recommended.get(index[r]) == Some(&1)),
    })
}

/// The share right `c` (0 or 1 per labeled row) over the examples outside the labels,
/// each row standing for `e` of them (the weights sum to the labels' count `k`), among
/// `big_n` examples in all.
fn share_right(c: &[f64], e: &[f64], big_n: f64) -> Interval {
    let k = c.len() as f64;
    // The weights sum to `k`: the share is a ratio estimate, whose linearised variance
    // is `sum e^2 (c - share)^2 / k^2`, read as the effective size that gives it.
    let rest = c.iter().zip(e).map(|(c, e)| c * e).sum::<f64>() / k;
    let spread: f64 = c.iter().zip(e).map(|(c, e)| (e * (c - rest)).powi(2)).sum();
    let n = if rest > 0.0 && rest < 1.0 && spread > 0.0 { k * k * rest * (1.0 - rest) / spread } else { kish(e) };
    // No more than the labels' count: see the module's note on rare errors.
    clopper_pearson(rest, n.min(k) * (big_n - k) / big_n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LogOdds;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Five judges of known accuracy.
    const FIVE: [f64; 5] = [0.8, 0.72, 0.68, 0.64, 0.6];

    /// A simulated jury with known truth: judges of accuracies `acc`, soft verdicts.
    fn jury(seed: u64, n: usize, acc: &[f64]) -> (LogOdds, Vec<u8>, Vec<u8>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (mut x, mut truth, mut vote) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..n {
            let t = u8::from(rng.random::<f64>() < 0.4);
            let mut sum = 0.0;
            for &a in acc {
                let right = rng.random::<f64>() < a;
                let p: f64 = rng.random_range(0.55..0.95);
                let p = if (t == 1) == right { p } else { 1.0 - p };
                let z = (p / (1.0 - p)).ln();
                sum += z;
                x.push(z);
            }
            truth.push(t);
            vote.push(u8::from(sum > 0.0));
        }
        let lf: Vec<f64> = vote.iter().map(|&v| if v == 1 { 0.8 } else { 0.2 }).collect();
        (LogOdds::from_dense(n, acc.len(), x, &lf).expect("a dense jury"), truth, vote)
    }

    /// Each estimate's coverage of the method's accuracy on the examples outside the set,
    /// and its mean error, over `draws` calibration sets of `budget` labels drawn
    /// uniformly or by plan from a jury of `n`.
    fn coverage(acc: &[f64], n: usize, budget: usize, planned: bool, draws: u64) -> ([f64; 2], [f64; 2]) {
        let (d, truth, recommended) = jury(5, n, acc);
        let (mut covered, mut bias) = ([0.0; 2], [0.0; 2]);
        for t in 0..draws {
            let drawn = if planned {
                crate::plan_labels(&d.mean_judge_probabilities(), budget, 1000 + t)
            } else {
                crate::uniform_sample(n, budget, 1000 + t)
            }
            .expect("a budget under n");
            let index: Vec<usize> = drawn.iter().map(|p| p.index).collect();
            let labels = index.iter().map(|&i| truth[i]).collect();
            let inclusion = drawn.iter().map(|p| p.inclusion).collect();
            let sample = Sample::new(n, index, labels, Some(inclusion)).expect("both classes");
            let fit = Calibrated::fit(&d, &sample, t);
            let mask = sample.mask();
            let rest = |f: &dyn Fn(usize) -> bool| {
                let kept: Vec<usize> = (0..n).filter(|&i| !mask[i]).collect();
                kept.iter().filter(|&&i| f(i) == (truth[i] == 1)).count() as f64 / kept.len() as f64
            };
            let truths = [rest(&|i| fit.probability(&d, i) > 0.5), rest(&|i| recommended[i] == 1)];
            let a = verdict_accuracy(&sample, &fit, &recommended).expect("examples outside the labels");
            for (m, interval) in [a.calibrated, a.recommended].iter().enumerate() {
                covered[m] += f64::from(u8::from(interval.covers(truths[m]))) / draws as f64;
                bias[m] += (interval.estimate - truths[m]) / draws as f64;
            }
        }
        (covered, bias)
    }

    /// Over many calibration sets the intervals cover the accuracy on the rest at least
    /// 93% of the time and the estimates are unbiased: from a large jury; from a small
    /// one where the labels are most of it (the rest's own share right varies, which an
    /// interval for the labels' share alone misses); and under a plan that labels the
    /// doubtful examples (the rest is then easier than the labels).
    #[test]
    fn out_of_fold_accuracy_covers_the_accuracy_on_the_rest() {
        for (n, budget, planned) in [(2000, 100, false), (300, 200, false), (600, 200, true)] {
            let (covered, bias) = coverage(&FIVE, n, budget, planned, 400);
            for m in 0..2 {
                let what = format!("{} at n {n}, budget {budget}, planned {planned}", ["calibrated", "recommended"][m]);
                assert!(covered[m] >= 0.93, "{what}: covered {}", covered[m]);
                assert!(bias[m].abs() < 0.01, "{what}: mean error {}", bias[m]);
            }
        }
    }

    /// Every labeled verdict right, under weights that are equal but not exactly 1: the
    /// share sums to 1 - 1e-16, and the interval is still Clopper-Pearson's for no error
    /// among the labels, not a point.
    #[test]
    fn no_error_among_the_labels_is_not_read_as_certainty() {
        let (k, big_n) = (50usize, 1371.0);
        let w = 1.0 / (k as f64 / big_n) - 1.0;
        // Summed as `verdict_accuracy` sums them.
        let total: f64 = (0..k).map(|_| w).sum();
        let e = vec![w * k as f64 / total; k];
        let c = vec![1.0; k];
        assert!(e.iter().sum::<f64>() / (k as f64) < 1.0, "the case this test is for");
        let a = share_right(&c, &e, big_n);
        let n = k as f64 * (big_n - k as f64) / big_n;
        assert!((a.low - 0.025f64.powf(1.0 / n)).abs() < 1e-6, "{a:?}");
        assert!(a.high > 1.0 - 1e-9, "{a:?}");
    }

    /// A jury that is nearly always right, under a plan: the few errors its labels show
    /// sit where the judges doubt, in rows that stand for few examples, and none among
    /// the confident rows that stand for most; the interval must still cover.
    #[test]
    fn a_plan_does_not_make_rare_errors_look_certain() {
        let (covered, bias) = coverage(&[0.85; 9], 4_000, 100, true, 200);
        for m in 0..2 {
            assert!(covered[m] >= 0.93, "{}: covered {}", ["calibrated", "recommended"][m], covered[m]);
            assert!(bias[m].abs() < 0.01, "mean error {}", bias[m]);
        }
    }

    /// Judges barely better than chance: members fitted on a few labels lean on their
    /// noise, and stack weights fitted on rows that members fitted with the fold's labels
    /// had scored read that noise as skill (here 2.5 points high on average, 3.6 on a
    /// real jury of near-chance judges at 50 labels). With no fit behind a fold's scores
    /// seeing its labels, 1.3 here; what is left comes from folds that hold the sample's
    /// class share (docs/reproduction/calibration-held-out.md).
    #[test]
    fn near_chance_judges_do_not_make_the_estimate_read_high() {
        let acc = [0.57, 0.56, 0.55, 0.55, 0.54, 0.54, 0.53, 0.53, 0.52, 0.52, 0.51, 0.51];
        let (_, bias) = coverage(&acc, 600, 50, false, 300);
        assert!(bias[0] < 0.02, "calibrated: mean error {}", bias[0]);
    }
}
