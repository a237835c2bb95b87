//! Judgment, label, comparison and response tables on disk (CSV, JSON Lines, JSON, Parquet) and atomic output
//! files. The only crate that knows file formats (and the parquet crate).
//!
//! Invariant: every error names the file, and for bad values the line (CSV, JSON Lines)
//! or row (JSON array, Parquet) and column, so a user can fix the input without
//! guessing. Outputs are written to a temporary file in the target directory and renamed
//! into place, so a reader never sees a half-written file.

mod calibration;
mod columns;
mod csv;
mod input;
mod manifest;
mod metrics;
mod output;
mod pairwise;
mod predictions;
mod records;
mod run_tables;
mod table;
mod write;

pub use calibration::{
    BalanceCovariate, CalibrationBalance, CalibrationMetrics, CalibrationReplay, JudgeClassRates, RateInterval,
    ReplayAccuracy, ReplayBudget, ReplayCoverage, ReplayJury,
};
pub use input::{
    DEFAULT_MAX_INPUT_SIZE, MAX_INPUT_SIZE_FLAG, format_size, max_input_size, parse_size, read_input,
    read_input_to_string, set_max_input_size,
};
pub use manifest::{
    Manifest, ManifestAdaptive, ManifestDataset, ManifestJudge, ManifestServer, ManifestTemplate, PoolStats,
    ServerStats, VerdictTokenIds,
};
pub use metrics::{
    AgreementMetrics, Chosen, ContextFreeMetrics, DiagnosticMetrics, ErrorCorrelationMetrics, JudgeMetrics,
    MethodMetrics, Metrics, NeuralMetrics, OverSeeds, PooledMethod, PooledSeeds, RecommendationMetrics,
};
pub use output::{OutputDir, OutputError, Owner, Protected, RunOutput, layout};
pub use pairwise::{ResponseTable, comparisons_csv, read_comparisons, read_responses};
pub use predictions::{
    MethodPredictions, OrderedJudgment, Predictions, by_order_csv, parse_by_order, parse_predictions, read_by_order,
    read_prediction_labels, read_predictions, six_decimals,
};
pub use records::{AdaptivePoint, AdaptiveStudy, Named};
pub use run_tables::{
    AdaptiveDecisionRow, INCLUSION_COLUMN, PlanRow, PromptRow, RunJudgment, adaptive_decisions_csv, categories_csv,
    failures_csv, judgments_csv, judgments_csv_as_given, label_plan_csv, labels_csv, one_hot_judgments_csv,
    prompts_jsonl, run_judgments_csv, texts_csv,
};
pub use table::{
    CalibrationLabels, PromptRecord, read_calibration, read_calibration_among, read_categories, read_judgments,
    read_labeled, read_labels, read_prompts, read_texts,
};
pub use write::{csv_field, persist_synced, read_json, terminal_text, write_atomic, write_json};

use std::path::PathBuf;

/// A problem with an input or output file.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    #[error("{}: unsupported file type (expected .csv, .jsonl, .ndjson, .json or .parquet)", path.display())]
    UnknownFormat { path: PathBuf },
    #[error("{}: cannot read: {source}", path.display())]
    Read { path: PathBuf, source: Box<dyn std::error::Error + Send + Sync> },
    #[error("{}: missing column `{column}` (columns found: {found})", path.display())]
    MissingColumn { path: PathBuf, column: String, found: String },
    #[error("{}: no probability columns: expected `p` (binary), `probs` (a list) or `p0`, `p1`, ... (columns found: {found})", path.display())]
    NoProbColumns { path: PathBuf, found: String },
    #[error("{}: has no rows", path.display())]
    Empty { path: PathBuf },
    #[error("{}: holds no judgment: every probability is empty", path.display())]
    NoJudgment { path: PathBuf },
    #[error("{}: judge `{judge}` has no judgment: the probability is empty on each of its rows", path.display())]
    JudgeWithoutJudgment { path: PathBuf, judge: String },
    #[error("{} {row}: column `{column}`: {reason}", path.display())]
    Field { path: PathBuf, row: String, column: String, reason: String },
    #[error("{} {row}: {source}", path.display())]
    Entry { path: PathBuf, row: String, source: jury_core::CoreError },
    #[error("{}: cannot write: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
    #[error("{} line {line}: {reason}", path.display())]
    Malformed { path: PathBuf, line: usize, reason: String },
}
