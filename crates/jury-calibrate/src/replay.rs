//! A replay on a fully labeled jury: draw calibration sets of each budget, uniformly and
//! by plan, fit and estimate on each as a user would, and score on the truth: each
//! method's accuracy on the examples outside the set, each estimator's coverage of the
//! true rate and its width.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::accuracy::verdict_accuracy;
use crate::fit::Calibrated;
use crate::log_odds::LogOdds;
use crate::members::{logistic_baseline, picked_judge};
use crate::plan::{plan_labels, uniform_sample};
use crate::rates::{Estimator, Interval, RateEstimates};
use crate::{Balance, CalibrationError, Sample};

/// How calibration sets are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sampling {
    Uniform,
    Planned,
}

impl Sampling {
    pub fn name(self) -> &'static str {
        match self {
            Sampling::Uniform => "uniform",
            Sampling::Planned => "planned",
        }
    }
}

/// The methods a replay scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayMethod {
    /// The calibrated stack ([`Calibrated`]).
    Calibrated,
    /// The label-free recommended method (no labels).
    Recommended,
    /// The single judge the same labels pick.
    PickedJudge,
    /// Ridge logistic regression on the judges' log-odds fitted on the same labels.
    Logistic,
}

/// The methods whose accuracy the calibration labels estimate ([`crate::verdict_accuracy`]).
const ESTIMATED: [ReplayMethod; 2] = [ReplayMethod::Calibrated, ReplayMethod::Recommended];

impl ReplayMethod {
    pub const ALL: [ReplayMethod; 4] =
        [ReplayMethod::Calibrated, ReplayMethod::Recommended, ReplayMethod::PickedJudge, ReplayMethod::Logistic];

    pub fn name(self) -> &'static str {
        match self {
            ReplayMethod::Calibrated => "calibrated",
            ReplayMethod::Recommended => "recommended",
            ReplayMethod::PickedJudge => "picked-judge",
            ReplayMethod::Logistic => "logistic",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ReplaySettings {
    pub budgets: Vec<usize>,
    pub trials: usize,
    pub seed: u64,
}

/// A method's accuracy over the trials, as fractions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MethodAccuracy {
    pub mean: f64,
    /// The 10th percentile.
    pub p10: f64,
}

/// An estimator's coverage of the true rate, its mean interval width, and its mean
/// error (the estimate less the truth: which side the misses fall on).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EstimatorSummary {
    pub coverage: f64,
    pub mean_width: f64,
    pub mean_error: f64,
}

impl EstimatorSummary {
    /// The sums over the draws' intervals, each against its truth.
    fn add(&mut self, s: Scored) {
        self.coverage += f64::from(u8::from(s.covered));
        self.mean_width += s.width;
        self.mean_error += s.error;
    }

    /// The sums as means over `trials` draws.
    fn over(self, trials: f64) -> Self {
        Self {
            coverage: self.coverage / trials,
            mean_width: self.mean_width / trials,
            mean_error: self.mean_error / trials,
        }
    }
}

/// One draw's interval against the truth it estimates. A draw with no interval (an
/// accuracy where the labels cover every example) scores as uncovered, of no width.
#[derive(Debug, Clone, Copy, Default)]
struct Scored {
    covered: bool,
    width: f64,
    error: f64,
}

impl Scored {
    fn of(interval: &Interval, truth: f64) -> Self {
        Self { covered: interval.covers(truth), width: interval.width(), error: interval.estimate - truth }
    }
}

/// One budget and sampling's result.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetReplay {
    pub budget: usize,
    pub sampling: Sampling,
    pub trials: usize,
    /// Draws that held one class only and were drawn again.
    pub redrawn: usize,
    /// Draws whose labels swapped the classes of the label-free posterior the calibrated
    /// method kept.
    pub label_free_swapped: usize,
    /// Draws the balance check ([`crate::Balance`]) would have reported as not drawn as
    /// stated: its false alarms, since every replay draw is.
    pub unbalanced: usize,
    pub methods: Vec<(ReplayMethod, MethodAccuracy)>,
    pub estimators: Vec<(Estimator, EstimatorSummary)>,
    /// For the calibrated and the label-free recommended method: how often the accuracy
    /// read off the labels ([`crate::verdict_accuracy`]) covers its accuracy on the rest,
    /// and the interval's mean width.
    pub accuracy_estimates: Vec<(ReplayMethod, EstimatorSummary)>,
}

/// Replays `settings` on jury `d` with its true labels `truth` and the label-free
/// recommended method's hard labels; every budget uniformly, then by plan. `progress`
/// hears (draws done, draws in all) after each draw, from whichever thread made it.
pub fn replay(
    d: &LogOdds,
    recommended: &[u8],
    truth: &[u8],
    settings: &ReplaySettings,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<BudgetReplay>, CalibrationError> {
    let n = d.n_examples();
    if truth.len() != n || recommended.len() != n {
        return Err(CalibrationError::Length(truth.len().min(recommended.len()), n));
    }
    // Each method is scored on the examples outside the calibration set: a budget of every
    // example leaves it none (the rates are still defined there, the accuracies are not).
    // A larger budget is the draw's own error (`BudgetTooLarge`).
    if let Some(&budget) = settings.budgets.iter().find(|&&b| b == n) {
        return Err(CalibrationError::NothingToScore { budget, examples: n });
    }
    let rate = truth.iter().map(|&t| f64::from(t)).sum::<f64>() / n as f64;
    let jury = Jury { d, recommended, truth, rate, posterior: d.mean_judge_probabilities() };
    let mut out = Vec::new();
    let total = settings.budgets.len() * 2 * settings.trials;
    let done = AtomicUsize::new(0);
    for &budget in &settings.budgets {
        for sampling in [Sampling::Uniform, Sampling::Planned] {
            // Draws are independent and seeded by their index: run on every core, then
            // folded in index order, so the sums do not depend on the number of cores.
            let draws = jury_core::on_threads(settings.trials, |t| {
                let draw = jury.draw(budget, sampling, settings.seed, t);
                progress(done.fetch_add(1, Ordering::Relaxed) + 1, total);
                draw
            });
            let mut acc = vec![Vec::with_capacity(settings.trials); ReplayMethod::ALL.len()];
            let mut rates = [EstimatorSummary::default(); 4];
            let mut accuracies = [EstimatorSummary::default(); ESTIMATED.len()];
            let (mut redrawn, mut label_free_swapped, mut unbalanced) = (0, 0, 0);
            for outcome in draws {
                let outcome = outcome?;
                acc.iter_mut().zip(outcome.accuracy).for_each(|(a, v)| a.push(v));
                rates.iter_mut().zip(outcome.rates).for_each(|(r, s)| r.add(s));
                accuracies.iter_mut().zip(outcome.accuracies).for_each(|(a, s)| a.add(s));
                redrawn += outcome.redrawn;
                label_free_swapped += usize::from(outcome.label_free_swapped);
                unbalanced += usize::from(outcome.unbalanced);
            }
            let trials = settings.trials.max(1) as f64;
            out.push(BudgetReplay {
                budget,
                sampling,
                trials: settings.trials,
                redrawn,
                label_free_swapped,
                unbalanced,
                methods: ReplayMethod::ALL.iter().zip(acc).map(|(&m, a)| (m, summarise(a))).collect(),
                estimators: Estimator::ALL.iter().zip(rates).map(|(&k, r)| (k, r.over(trials))).collect(),
                accuracy_estimates: ESTIMATED.iter().zip(accuracies).map(|(&k, a)| (k, a.over(trials))).collect(),
            });
        }
    }
    Ok(out)
}

/// Draws with one class only drawn again before a replay gives up: a user with such a set
/// is refused, so the replay measures draws that hold both classes.
const REDRAWS: u64 = 100;

/// What one draw of a calibration sample gives: each method's accuracy on the rest (in
/// [`ReplayMethod::ALL`] order), each estimator's interval against the true rate (in
/// [`Estimator::ALL`] order), how many draws with one class only were redrawn before it,
/// whether its labels swapped the classes of a label-free posterior kept, whether the
/// balance check flagged it, and the accuracy each of [`ESTIMATED`] reads off the labels
/// against its accuracy on the rest.
struct Draw {
    accuracy: [f64; 4],
    rates: [Scored; 4],
    accuracies: [Scored; ESTIMATED.len()],
    redrawn: usize,
    label_free_swapped: bool,
    unbalanced: bool,
}

/// The fully labeled jury a replay draws from: its log-odds, the label-free method's
/// hard labels, the truth and its positive rate, and the posterior the plan follows.
struct Jury<'a> {
    d: &'a LogOdds,
    recommended: &'a [u8],
    truth: &'a [u8],
    rate: f64,
    posterior: Vec<f64>,
}

impl Jury<'_> {
    /// Draw `t` at `budget` by `sampling`: the sample, every method fitted on it and scored
    /// on the rest, every estimator's interval.
    fn draw(&self, budget: usize, sampling: Sampling, base_seed: u64, t: usize) -> Result<Draw, CalibrationError> {
        let Jury { d, recommended, truth, rate, ref posterior } = *self;
        let n = d.n_examples();
        let mut attempt = 0u64;
        let sample = loop {
            let seed = trial_seed(base_seed, budget, sampling, t, attempt);
            let drawn = match sampling {
                Sampling::Uniform => uniform_sample(n, budget, seed)?,
                Sampling::Planned => plan_labels(posterior, budget, seed)?,
            };
            let index: Vec<usize> = drawn.iter().map(|p| p.index).collect();
            let labels = index.iter().map(|&i| truth[i]).collect();
            let inclusion = drawn.iter().map(|p| p.inclusion).collect();
            match Sample::new(n, index, labels, Some(inclusion)) {
                Ok(s) => break s,
                Err(CalibrationError::OneClass(..)) if attempt < REDRAWS => attempt += 1,
                Err(CalibrationError::OneClass(..)) => {
                    let ones = truth.iter().filter(|&&t| t == 1).count();
                    let rarer = ones.min(n - ones);
                    return Err(CalibrationError::DrawsOneClass { budget, draws: attempt + 1, rarer, examples: n });
                }
                Err(e) => return Err(e),
            }
        };
        let seed = trial_seed(base_seed, budget, sampling, t, 1000);
        let mask = sample.mask();
        let rest = |f: &dyn Fn(usize) -> bool| -> f64 {
            let (mut right, mut total) = (0usize, 0usize);
            for i in (0..n).filter(|&i| !mask[i]) {
                right += usize::from(f(i) == (truth[i] == 1));
                total += 1;
            }
            right as f64 / total.max(1) as f64
        };
        let fit = Calibrated::fit(d, &sample, seed);
        let judge = picked_judge(d, &sample);
        let logistic = logistic_baseline(d, &sample);
        let accuracy = [
            rest(&|i| fit.probability(d, i) > 0.5),
            rest(&|i| recommended[i] == 1),
            rest(&|i| d.get(i, judge) > 0.0),
            rest(&|i| logistic[i] > 0.0),
        ];
        let rates = RateEstimates::estimate(d, &sample, seed);
        let mut scored = [Scored::default(); 4];
        scored.iter_mut().zip(&rates.intervals).for_each(|(s, (_, interval))| *s = Scored::of(interval, rate));
        let mut accuracies = [Scored::default(); ESTIMATED.len()];
        if let Some(a) = verdict_accuracy(&sample, &fit, recommended) {
            // In ESTIMATED's order, the truth in ReplayMethod::ALL's.
            accuracies = [Scored::of(&a.calibrated, accuracy[0]), Scored::of(&a.recommended, accuracy[1])];
        }
        let label_free_swapped = fit.label_free_swapped();
        let unbalanced = !Balance::check(posterior, &sample).plausible();
        Ok(Draw { accuracy, rates: scored, accuracies, redrawn: attempt as usize, label_free_swapped, unbalanced })
    }
}

fn summarise(mut a: Vec<f64>) -> MethodAccuracy {
    if a.is_empty() {
        return MethodAccuracy { mean: f64::NAN, p10: f64::NAN };
    }
    a.sort_by(f64::total_cmp);
    let mean = a.iter().sum::<f64>() / a.len() as f64;
    let p10 = a[((a.len() - 1) as f64 * 0.1).floor() as usize];
    MethodAccuracy { mean, p10 }
}

/// A seed per budget, sampling, trial and attempt (a splitmix of the four).
fn trial_seed(seed: u64, budget: usize, sampling: Sampling, trial: usize, attempt: u64) -> u64 {
    let mut z = seed
        ^ (budget as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (trial as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9)
        ^ attempt.wrapping_mul(0x94d0_49bb_1331_11eb)
        ^ u64::from(sampling == Sampling::Planned) << 63;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// On a simulated jury with known truth, the estimators cover the true rate near their
    /// nominal 95% and the jury's PPI interval is narrower than labels alone.
    #[test]
    fn intervals_cover_on_a_simulated_jury() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let n = 3000;
        let acc = [0.8, 0.75, 0.7, 0.65, 0.6];
        let mut x = Vec::new();
        let mut truth = Vec::new();
        for _ in 0..n {
            let t = u8::from(rng.random::<f64>() < 0.3);
            for a in acc {
                let right = rng.random::<f64>() < a;
                let p: f64 = rng.random_range(0.55..0.95);
                let p = if (t == 1) == right { p } else { 1.0 - p };
                x.push((p / (1.0 - p)).ln());
            }
            truth.push(t);
        }
        let lf: Vec<f64> = x.chunks(5).map(|r| 1.0 / (1.0 + (-r.iter().sum::<f64>() / 2.0).exp())).collect();
        let recommended: Vec<u8> = lf.iter().map(|&p| u8::from(p > 0.5)).collect();
        let d = LogOdds::from_dense(n, 5, x, &lf).unwrap();
        let heard = AtomicUsize::new(0);
        let last = AtomicUsize::new(0);
        let progress = |done: usize, total: usize| {
            assert_eq!(total, 400);
            heard.fetch_add(1, Ordering::Relaxed);
            last.fetch_max(done, Ordering::Relaxed);
        };
        let settings = ReplaySettings { budgets: vec![100], trials: 200, seed: 1 };
        let r = replay(&d, &recommended, &truth, &settings, &progress).unwrap();
        assert_eq!((heard.into_inner(), last.into_inner()), (400, 400));
        assert_eq!(r.len(), 2);
        for b in &r {
            for (e, s) in &b.estimators {
                assert!(s.coverage >= 0.88, "{} {}: coverage {}", b.sampling.name(), e.name(), s.coverage);
                // The estimate less the true rate (about 0.3): near 0 for estimators built
                // to be unbiased, whatever the rate.
                assert!(s.mean_error.abs() < s.mean_width / 10.0, "{} {}: {s:?}", b.sampling.name(), e.name());
            }
            for (m, s) in &b.accuracy_estimates {
                assert!(s.mean_error.abs() < s.mean_width / 10.0, "{} {}: {s:?}", b.sampling.name(), m.name());
            }
            let w = |k: Estimator| b.estimators.iter().find(|(e, _)| *e == k).unwrap().1.mean_width;
            assert!(w(Estimator::PpiJury) < w(Estimator::LabelsOnly), "{b:?}");
            let a = |m: ReplayMethod| b.methods.iter().find(|(k, _)| *k == m).unwrap().1.mean;
            assert!(a(ReplayMethod::Calibrated) > a(ReplayMethod::PickedJudge), "{b:?}");
        }
    }

    /// Juries built to break a fit: a judge that always says one half (no spread to scale
    /// by), three exact copies of one judge (a singular covariance), and a judge right on
    /// every example (separable labels). Every accuracy, coverage, width and error comes
    /// out finite and in range, and the calibrated method finds the perfect judge.
    #[test]
    fn juries_built_to_break_a_fit_give_finite_results() {
        let n = 600;
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let truth: Vec<u8> = (0..n).map(|_| u8::from(rng.random::<f64>() < 0.4)).collect();
        let mut judge = |t: u8, acc: f64| -> f64 {
            let right = rng.random::<f64>() < acc;
            let p: f64 = rng.random_range(0.55..0.9);
            let p = if (t == 1) == right { p } else { 1.0 - p };
            (p / (1.0 - p)).ln()
        };
        let mut constant = Vec::new();
        let mut copies = Vec::new();
        let mut perfect = Vec::new();
        for &t in &truth {
            let (a, b, c) = (judge(t, 0.75), judge(t, 0.7), judge(t, 0.65));
            constant.extend([0.0, a, b, c]);
            copies.extend([a, a, a, b]);
            perfect.extend([if t == 1 { 5.0 } else { -5.0 }, a, b, c]);
        }
        for (name, x) in [("constant", constant), ("copies", copies), ("perfect", perfect)] {
            let lf: Vec<f64> = x.chunks(4).map(|r| 1.0 / (1.0 + (-r.iter().sum::<f64>() / 4.0).exp())).collect();
            let recommended: Vec<u8> = lf.iter().map(|&p| u8::from(p > 0.5)).collect();
            let d = LogOdds::from_dense(n, 4, x, &lf).unwrap();
            let settings = ReplaySettings { budgets: vec![50, 100], trials: 10, seed: 2 };
            let r = replay(&d, &recommended, &truth, &settings, &|_, _| {}).unwrap();
            for b in &r {
                for (m, a) in &b.methods {
                    assert!((0.0..=1.0).contains(&a.mean) && (0.0..=1.0).contains(&a.p10), "{name} {m:?}: {a:?}");
                }
                for (e, s) in &b.estimators {
                    let ok = (0.0..=1.0).contains(&s.coverage)
                        && (0.0..=1.0).contains(&s.mean_width)
                        && s.mean_error.is_finite();
                    assert!(ok, "{name} {}: {s:?}", e.name());
                }
                for (m, s) in &b.accuracy_estimates {
                    assert!((0.0..=1.0).contains(&s.coverage) && s.mean_width.is_finite(), "{name} {m:?}: {s:?}");
                }
                if name == "perfect" {
                    let calibrated = b.methods.iter().find(|(m, _)| *m == ReplayMethod::Calibrated).unwrap().1;
                    assert!(calibrated.mean > 0.99, "{name}: {calibrated:?}");
                }
            }
        }
    }

    /// A budget of every example leaves no example to score the methods on: an error
    /// naming it, not accuracies of 0.
    #[test]
    fn a_budget_of_every_example_is_refused() {
        let n = 60;
        let truth: Vec<u8> = (0..n).map(|i| u8::from(i % 3 == 0)).collect();
        let x: Vec<f64> = truth.iter().map(|&t| if t == 1 { 1.0 } else { -1.0 }).collect();
        let lf: Vec<f64> = x.iter().map(|z| 1.0 / (1.0 + (-z).exp())).collect();
        let d = LogOdds::from_dense(n, 1, x, &lf).unwrap();
        let settings = ReplaySettings { budgets: vec![30, 60], trials: 1, seed: 0 };
        let err = replay(&d, &truth, &truth, &settings, &|_, _| {}).unwrap_err();
        assert_eq!(err, CalibrationError::NothingToScore { budget: 60, examples: n });
        let settings = ReplaySettings { budgets: vec![61], trials: 1, seed: 0 };
        let err = replay(&d, &truth, &truth, &settings, &|_, _| {}).unwrap_err();
        assert_eq!(err, CalibrationError::BudgetTooLarge { budget: 61, examples: n });
    }

    /// A class too rare for the budget's draws to hold it is an error naming the budget
    /// and how rare the class is, not a calibration set's complaint.
    #[test]
    fn a_budget_whose_draws_hold_one_class_is_named() {
        let n = 20_000;
        let truth: Vec<u8> = (0..n).map(|i| u8::from(i == 7)).collect();
        let x: Vec<f64> = truth.iter().map(|&t| if t == 1 { 2.0 } else { -2.0 }).collect();
        let lf: Vec<f64> = x.iter().map(|z| 1.0 / (1.0 + (-z).exp())).collect();
        let d = LogOdds::from_dense(n, 1, x, &lf).unwrap();
        let settings = ReplaySettings { budgets: vec![2], trials: 1, seed: 0 };
        let err = replay(&d, &truth, &truth, &settings, &|_, _| {}).unwrap_err();
        assert_eq!(err, CalibrationError::DrawsOneClass { budget: 2, draws: 101, rarer: 1, examples: n });
        assert!(err.to_string().contains("the rarer class has 1 of the 20000 examples"), "{err}");
    }
}
