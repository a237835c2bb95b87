//! Runs a jury experiment: the YAML schema and its checks ([`Experiment`]), the
//! examples and jurors it names, every juror's pass through the durable cache (server
//! judges all at once, in-process ones one at a time), the collected verdicts as a
//! judgments matrix ([`JuryRun`]), the files of an output directory ([`OutputLayout`]),
//! and the whole of `jury run` in that order ([`run_experiment`]). Aggregation is not
//! here: the caller supplies it as an [`Aggregation`], its options carried through
//! [`Experiment`]'s type parameter. Also `rank --eval llm:`'s judge ([`LlmEvaluation`]).

mod adaptive;
mod dry_run;
mod experiment;
mod judging;
mod llm_eval;
mod output;
mod pipeline;
mod record;
mod stages;

pub use adaptive::{AdaptiveRecord, Decision};
pub use dry_run::{DryRun, JudgePlan, RateSource, TokenStats, dry_run};
pub use experiment::{Adaptive, DatasetConfig, Experiment, ExperimentError, JudgeEntry, Runtime, ServerEntry};
pub use judging::{
    Failure, JudgeResults, JudgeSpec, JudgeSummary, Juror, JurorInfo, JurorOutcome, RunError, any_judgment_key,
    judgment_key, server_counters,
};
pub use llm_eval::{LlmEvalConfig, LlmEvaluation};
pub use output::{OutputLayout, manifest, write_judging, write_manifest};
pub use pipeline::{Aggregation, run_experiment};
pub use record::{Examples, JudgeRecord, JuryRun};
pub use stages::{Prepared, jurors, prepare, sample_examples};
