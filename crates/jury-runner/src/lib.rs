//! Judges a jury experiment: the YAML schema and its checks ([`Experiment`]), the
//! examples and jurors it names ([`prepare`]), every juror's pass through the durable
//! cache (server judges all at once, in-process ones one at a time), the collected
//! verdicts as a judgments matrix ([`JuryRun`]), and the judging files and manifest of
//! an output directory (`jury_io::RunOutput` says where each goes). Each stage returns a value; `jury run` calls
//! them in order. Aggregation is not here: its options ride through [`Experiment`]'s
//! type parameter. Also `rank --eval llm:`'s judge ([`LlmEvaluation`]), and the text of a
//! finished run's examples for whoever labels a plan of them ([`plan_text`]).

mod adaptive;
mod dry_run;
mod experiment;
mod judging;
mod llm_eval;
mod plan_text;
mod record;
mod run_files;
mod stages;
mod vllm_lines;

pub use adaptive::{AdaptiveRecord, Decision};
pub use dry_run::{CalibrationPlan, CalibrationRead, DryRun, JudgePlan, RateSource, TokenStats, dry_run};
pub use experiment::{Adaptive, DatasetConfig, Experiment, ExperimentError, JudgeEntry, Runtime, ServerEntry};
pub use judging::{
    Failure, JudgeResults, JudgeSpec, JudgeSummary, Juror, JurorInfo, JurorOutcome, RunError, any_judgment_key,
    judgment_key, server_counters,
};
pub use llm_eval::{LlmEvalConfig, LlmEvaluation};
pub use plan_text::{PlanText, plan_text};
pub use record::{Examples, JudgeRecord, JuryRun};
pub use run_files::{manifest, write_judging};
pub use stages::{Prepared, jurors, prepare, sample_examples};
pub use vllm_lines::vllm_serve_lines;
