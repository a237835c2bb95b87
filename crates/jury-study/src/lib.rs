//! An aggregation study of one jury: every method its options name (jury-aggregate's
//! label-free methods and jury-neural's context-dependent ones) over one judgments
//! matrix, scored against labels when there are any, as typed results ([`Study`]) and the files they become
//! (metrics.json as `jury_io::Metrics`, predictions.csv). `jury aggregate` and the end
//! of `jury run` are this crate; the algorithms are not.
//!
//! Invariants: options are checked without reading any file; a study writes nothing
//! until every method has run; labels only score (and, for the context-dependent
//! methods, choose lambda and the epoch on each seed's dev set).

mod adaptive;
mod bar;
mod calibration;
mod compare;
mod epochs;
mod options;
mod pool;
mod study;
mod views;

use std::path::PathBuf;

pub use adaptive::{AdaptiveSettings, adaptive_study, adaptive_table};
pub use bar::{BarCheck, BarError, CROWD_KIT, bar_tables};
pub use calibration::{calibration_replay, calibration_table, label_plan, label_plan_more, scoring_labels};
pub use compare::{CLOSE, CompareError, Comparison, Pairing, RunFiles, compare_runs, comparison_table};
pub use epochs::{EpochError, epoch_table};
pub use options::{
    AggregateOptions, DsInit, DsPrior, DsStop, EncoderMode, Method, RecipeName, Settings, SkillStart, Ties,
};
pub use pool::{PoolError, SeedRun, pool_seeds};
pub use study::{MethodRun, NeuralStudy, Recommendation, Study, run, run_calibrated};

/// What a study could not do.
#[derive(Debug, thiserror::Error)]
pub enum StudyError {
    #[error("{flag} {reason}")]
    Option { flag: &'static str, reason: String },
    #[error("encoder {}: {source}", spec.display())]
    Encoder { spec: PathBuf, source: Box<jury_neural::NeuralError> },
    #[error("the context-dependent methods need --labels (the dev set that chooses lambda and the epoch)")]
    NeedsLabels,
    #[error("the context-dependent methods need --contexts FILE")]
    NeedsContexts,
    #[error("{labeled} labeled examples: not enough for a dev set of {dev_size} (--dev-size)")]
    TooFewLabels { labeled: usize, dev_size: usize },
    #[error("{}: no context for example `{example}`", path.display())]
    NoContext { path: PathBuf, example: String },
    #[error("{method}: the posterior of example `{example}` is not a number; no accuracy is reported")]
    NotANumber { method: &'static str, example: String },
    #[error(transparent)]
    Aggregate(#[from] jury_aggregate::AggregateError),
    #[error(transparent)]
    Neural(Box<jury_neural::NeuralError>),
    #[error(transparent)]
    Io(#[from] jury_io::IoError),
}

impl From<jury_neural::NeuralError> for StudyError {
    fn from(e: jury_neural::NeuralError) -> Self {
        StudyError::Neural(Box::new(e))
    }
}
