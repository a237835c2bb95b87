//! What a few reference labels buy a jury: a calibrated combination of the judges fitted
//! on them and on every unlabeled judgment ([`Calibrated`]), the positive rate corrected
//! four ways with 95% intervals ([`RateEstimates`]), the verdicts' accuracy read off the
//! labels out of fold ([`verdict_accuracy`]), which examples to label
//! ([`plan_labels`]) and a replay that measures all of it on a fully labeled jury
//! ([`replay`]).
//!
//! Plain data in, typed results out, no I/O. Binary juries only (class 1 positive). A
//! calibration sample carries each example's inclusion probability, so labels drawn by a
//! plan (more where the jury is unsure) give unbiased rates; uniform labels are the case
//! where every probability is equal.

mod accuracy;
mod balance;
mod beta;
mod fit;
mod folds;
mod independence;
mod linalg;
mod log_odds;
mod logistic;
mod members;
mod plan;
mod rates;
mod replay;
mod sample;
mod score;
mod sparse;

pub use accuracy::{VerdictAccuracy, verdict_accuracy};
pub use balance::{BALANCE_LIMIT, Balance, Covariate};
pub use fit::Calibrated;
pub use log_odds::{LogOdds, mean_judge_probabilities};
pub use members::{Candidate, logistic_baseline, picked_judge};
pub use plan::{Planned, plan_labels, plan_more_labels, uniform_sample};
pub use rates::{ClassRates, Estimator, Interval, RateEstimates};
pub use replay::{BudgetReplay, EstimatorSummary, MethodAccuracy, ReplayMethod, ReplaySettings, Sampling, replay};
pub use sample::Sample;

/// Below this many calibration labels the replays of docs/reproduction/calibration.md
/// ("Fewer than 50 labels") found the calibrated method below the label-free method on
/// most juries (at 10 labels on 8 of 12); from it on, within 1.7 points of it on every
/// jury and above it on half. The jury's PPI interval was wider than labels-only's on
/// most juries under 20 labels and on none at 30 (docs/reproduction/calibration-rates.md).
pub const FEW_LABELS: usize = 30;

/// What a calibration could not do with its input.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalibrationError {
    #[error("calibration needs two classes; these judgments have {0}")]
    NotBinary(usize),
    #[error("the calibration labels hold one class only ({0} examples, all labeled {1}); both are needed")]
    OneClass(usize, u8),
    #[error("a budget of {budget} labels is more than the {examples} examples judged")]
    BudgetTooLarge { budget: usize, examples: usize },
    #[error("a budget of {budget} more labels is more than the {unlabeled} examples judged that have none yet")]
    BudgetBeyondUnlabeled { budget: usize, unlabeled: usize },
    #[error("a budget of {budget} labels leaves none of the {examples} examples judged to score the methods on")]
    NothingToScore { budget: usize, examples: usize },
    #[error("a budget of {0} labels: at least 2 are needed")]
    BudgetTooSmall(usize),
    #[error("example #{index} is out of range ({examples} examples)")]
    OutOfRange { index: usize, examples: usize },
    #[error("example #{0} appears twice in the calibration labels")]
    Duplicate(usize),
    #[error("inclusion probability {value} of example #{index} is not in (0, 1]")]
    Inclusion { index: usize, value: f64 },
    #[error("{0} label-free probabilities for {1} examples")]
    Length(usize, usize),
    #[error(
        "{draws} draws of {budget} labels in a row held one class only (the rarer class has {rarer} of the \
         {examples} examples): a replay needs a budget whose draws mostly hold both"
    )]
    DrawsOneClass { budget: usize, draws: u64, rarer: usize, examples: usize },
}

/// What a jury no test saw must still get: on any small jury (one to five judges, some
/// always sure, some missing on part of the examples, a rate anywhere from rare to
/// common, labels drawn uniformly or by a plan) every fit, rate and accuracy is finite,
/// each estimate inside its interval and every interval inside [0, 1].
#[cfg(test)]
mod properties {
    use jury_core::JudgmentsBuilder;
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    fn check(what: &str, i: &Interval) -> Result<(), TestCaseError> {
        prop_assert!(i.low.is_finite() && i.high.is_finite() && i.estimate.is_finite(), "{what}: {i:?} not finite");
        prop_assert!(0.0 <= i.low && i.high <= 1.0, "{what}: {i:?} outside [0, 1]");
        prop_assert!(i.low <= i.estimate + 1e-12 && i.estimate <= i.high + 1e-12, "{what}: {i:?}");
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn any_small_jury_gets_finite_estimates_inside_their_intervals(
            n in 12usize..160,
            k in 1usize..6,
            rate in 0.03f64..0.97,
            budget_share in 0.05f64..0.95,
            planned in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let truth: Vec<u8> = (0..n).map(|_| u8::from(rng.random::<f64>() < rate)).collect();
            let mut b = JudgmentsBuilder::new(2).expect("two classes");
            for j in 0..k {
                // A judge of any accuracy, sure of every verdict (0 or 1) one time in four,
                // judging every example or about two in three.
                let accuracy: f64 = rng.random_range(0.3..1.0);
                let sure = rng.random::<f64>() < 0.25;
                let coverage = if rng.random::<f64>() < 0.5 { 1.0 } else { 0.66 };
                for (i, &t) in truth.iter().enumerate() {
                    if j > 0 && rng.random::<f64>() > coverage {
                        continue;
                    }
                    let right = rng.random::<f64>() < accuracy;
                    let p: f64 = if sure { 1.0 } else { rng.random_range(0.5..1.0) };
                    let p = if (t == 1) == right { p } else { 1.0 - p };
                    b.push_binary(&format!("e{i}"), &format!("j{j}"), Some(p)).expect("a binary judgment");
                }
            }
            let judgments = b.build();
            let mean: Vec<f64> = (0..n)
                .map(|i| {
                    let row: Vec<f64> = judgments.row(i).map(|(_, p)| p[1]).collect();
                    row.iter().sum::<f64>() / row.len().max(1) as f64
                })
                .collect();
            let d = LogOdds::new(&judgments, &mean).expect("a binary jury");
            let budget = ((n as f64 * budget_share) as usize).clamp(2, n - 1);
            let drawn = if planned { plan_labels(&mean, budget, seed) } else { uniform_sample(n, budget, seed) }
                .expect("a budget under the jury's size");
            let labels: Vec<u8> = drawn.iter().map(|p| truth[p.index]).collect();
            let inclusion = planned.then(|| drawn.iter().map(|p| p.inclusion).collect());
            let Ok(sample) = Sample::new(n, drawn.iter().map(|p| p.index).collect(), labels, inclusion) else {
                // One class only among the labels: refused, as it should be.
                return Ok(());
            };
            let fit = Calibrated::fit(&d, &sample, seed);
            for p in fit.probabilities(&d) {
                prop_assert!((0.0..=1.0).contains(&p), "calibrated probability {p}");
            }
            let rates = RateEstimates::estimate(&d, &sample, seed);
            for (e, i) in &rates.intervals {
                check(e.name(), i)?;
            }
            let c = rates.rogan_gladen_judge;
            prop_assert!((0.0..=1.0).contains(&c.sensitivity) && (0.0..=1.0).contains(&c.specificity), "{c:?}");
            let hard: Vec<u8> = mean.iter().map(|&p| u8::from(p > 0.5)).collect();
            if let Some(a) = verdict_accuracy(&sample, &fit, &hard) {
                check("calibrated accuracy", &a.calibrated)?;
                check("label-free accuracy", &a.recommended)?;
            }
            let b = Balance::check(&mean, &sample);
            prop_assert!(b.mean_probability.z.is_finite() && b.uncertainty.z.is_finite(), "{b:?}");
        }
    }
}
