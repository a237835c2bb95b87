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
pub use log_odds::LogOdds;
pub use members::{Candidate, logistic_baseline, picked_judge};
pub use plan::{Planned, plan_labels, uniform_sample};
pub use rates::{ClassRates, Estimator, Interval, RateEstimates};
pub use replay::{BudgetReplay, EstimatorSummary, MethodAccuracy, ReplayMethod, ReplaySettings, Sampling, replay};
pub use sample::Sample;

/// Below this many calibration labels the replays of docs/reproduction/calibration.md
/// ("Fewer than 50 labels") found the calibrated method below the label-free method on
/// most juries (at 10 labels on 8 of 12); from it on, within 1.7 points of it on every
/// jury and above it on half.
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
