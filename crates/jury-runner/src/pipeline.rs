//! `jury run` from start to end, in one place: the experiment's examples judged through
//! the durable cache, the judging files staged, the judgments handed to the caller's
//! aggregation, the manifest written and the whole output folder published at once.
//!
//! The runner knows no aggregation method and none of its files: the caller supplies
//! them as an [`Aggregation`], which is why `Experiment<A>` is generic.

use std::path::Path;
use std::time::Instant;

use indicatif::MultiProgress;
use jury_datasets::ContextStyle;
use serde::Serialize;

use crate::experiment::Experiment;
use crate::judging::RunError;
use crate::output::{manifest, write_judging, write_manifest};
use crate::record::JuryRun;
use crate::stages::prepare;

/// What a run does with its judgments once judged, and how it reports them.
pub trait Aggregation {
    /// Checks, before any judge loads, that `labeled` examples with labels are enough.
    fn check_labeled(&self, labeled: usize) -> Result<(), RunError>;
    /// The style of the examples' contexts file the run should write for aggregation
    /// (`None`: it reads a file of its own, or none).
    fn contexts_to_stage(&self) -> Option<ContextStyle>;
    /// Aggregates the judged run, writing its files into `staging` (published later as
    /// `out`); `staged_contexts` is the contexts file the run staged for it.
    fn aggregate(
        &mut self,
        run: &JuryRun,
        staged_contexts: Option<&Path>,
        staging: &Path,
        out: &Path,
    ) -> Result<(), RunError>;
    /// Writes the run's page into `staging`, once the manifest is there.
    fn report(&mut self, run: &JuryRun, staging: &Path) -> Result<(), RunError>;
}

/// Runs `exp` end to end: every output file but the judgment cache is staged and
/// published only when aggregation has succeeded too. `judged` hears of the run once
/// every judge is done, before aggregation; `dropped` of each cache line that could not
/// be read back (judged again).
pub fn run_experiment<A: Serialize>(
    exp: &Experiment<A>,
    aggregation: &mut dyn Aggregation,
    bars: &MultiProgress,
    dropped: &dyn Fn(&jury_cache::DroppedRecord),
    judged: &mut dyn FnMut(&JuryRun),
) -> Result<JuryRun, RunError> {
    let started = Instant::now();
    let prepared = prepare(exp)?;
    let labeled = prepared.examples().original.iter().filter(|e| e.label.is_some()).count();
    aggregation.check_labeled(labeled)?;
    let (layout, run) = prepared.judge(bars, dropped)?;
    let contexts = aggregation.contexts_to_stage();
    write_judging(&layout, exp, &run, contexts)?;
    judged(&run);
    let staged = contexts.map(|_| layout.contexts());
    aggregation.aggregate(&run, staged.as_deref(), layout.staging_dir(), layout.dir())?;
    write_manifest(&layout, &manifest(exp, &run, dequantized_weights(), started.elapsed().as_secs_f64()))?;
    aggregation.report(&run, layout.staging_dir())?;
    layout.publish()?;
    Ok(run)
}

/// Whether candle dequantizes every GGUF tensor in this process (the experiment's
/// `dequantize`, set before any thread starts).
fn dequantized_weights() -> bool {
    std::env::var_os("CANDLE_DEQUANTIZE_ALL").is_some()
}
