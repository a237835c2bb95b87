//! Runs a jury experiment: the YAML schema and its checks ([`Experiment`]), the
//! examples and jurors it names, every juror's pass through the durable cache (server
//! judges all at once, in-process ones one at a time), the collected verdicts as a
//! judgments matrix ([`JuryRun`]) and the files of an output directory
//! ([`OutputLayout`]). Aggregation is not here: a caller hands [`JuryRun::judgments`]
//! to it, with its own options carried through [`Experiment`]'s type parameter.

mod adaptive;
mod dry_run;
mod experiment;
mod judging;
mod output;
mod record;
mod stages;

pub use adaptive::{AdaptiveRecord, Decision};
pub use dry_run::{DryRun, JudgePlan, RateSource, TokenStats, dry_run};
pub use experiment::{Adaptive, DatasetConfig, Experiment, ExperimentError, JudgeEntry, Runtime, ServerEntry};
pub use judging::{
    Failure, JudgeResults, JudgeSpec, JudgeSummary, Juror, JurorInfo, JurorOutcome, RunError,
    any_judgment_key, judgment_key, run_judge, run_jury, run_jury_each, server_counters,
};
pub use output::{OutputLayout, manifest, write_judging, write_manifest};
pub use record::{Examples, JudgeRecord, JuryRun};
pub use stages::{Prepared, jurors, prepare, sample_examples};
