//! The output folder of one `jury run`: where each of its files goes, staged until the
//! whole run has succeeded ([`OutputDir`]), the cache appended to in place.

use std::path::{Path, PathBuf};

use super::layout::{
    ADAPTIVE_DECISIONS, CACHE, CATEGORIES, CONTEXTS, FAILURES, JUDGMENTS, JUDGMENTS_BY_ORDER, LABELS, MANIFEST,
    PROMPTS, RESOLVED_CONFIG, RUN,
};
use super::{OutputDir, OutputError, Owner};

/// The files of a `jury run` output directory, held for one run (a lock, refusal of
/// another experiment's output, no symbolic links: [`OutputDir`]). Every file but the
/// cache is written into the staging folder and published together by
/// [`RunOutput::publish`] once the whole run has succeeded; `cache.jsonl` is appended
/// to in place as judgments finish.
#[derive(Debug)]
pub struct RunOutput {
    out: OutputDir,
}

impl RunOutput {
    fn owner(experiment: &str) -> Owner {
        Owner { command: "run".into(), source: format!("experiment `{experiment}`") }
    }

    /// Takes `dir` for the experiment `experiment` (see [`OutputDir::open`]).
    pub fn open(dir: &Path, experiment: &str, overwrite: bool) -> Result<Self, OutputError> {
        Ok(Self { out: OutputDir::open(dir, Self::owner(experiment), &RUN, overwrite)? })
    }

    /// The checks [`Self::open`] makes, creating and writing nothing: the dry run's
    /// (see [`OutputDir::check`]).
    pub fn check(dir: &Path, experiment: &str, overwrite: bool) -> Result<(), OutputError> {
        OutputDir::check(dir, &Self::owner(experiment), &RUN, overwrite)
    }

    /// Where a published run's manifest.json is.
    pub fn published_manifest(dir: &Path) -> PathBuf {
        dir.join(MANIFEST)
    }

    /// Where the examples' contexts file of an output directory is published: the
    /// `aggregate.contexts` a config gets when it asks for context-dependent methods
    /// without naming a file.
    pub fn published_contexts(dir: &Path) -> PathBuf {
        dir.join(CONTEXTS)
    }

    pub fn dir(&self) -> &Path {
        self.out.dir()
    }
    /// The folder aggregation writes its files into before publishing.
    pub fn staging_dir(&self) -> &Path {
        self.out.staging_dir()
    }
    /// The durable per-judgment cache (JSON Lines, appended to in place).
    pub fn cache(&self) -> PathBuf {
        self.out.path(CACHE)
    }
    /// Long format: example_id, judge, p, p_positive, p_negative, p_tie, mass, n_tokens,
    /// truncated, exact ([`crate::run_judgments_csv`]).
    pub fn judgments(&self) -> PathBuf {
        self.out.staged(JUDGMENTS)
    }
    /// example_id, label.
    pub fn labels(&self) -> PathBuf {
        self.out.staged(LABELS)
    }
    /// example_id, category: when the data set has categories (TruthfulQA).
    pub fn categories(&self) -> PathBuf {
        self.out.staged(CATEGORIES)
    }
    /// example_id, judge, reason: the examples a server rejected (missing from judgments.csv).
    pub fn failures(&self) -> PathBuf {
        self.out.staged(FAILURES)
    }
    /// With `both_orders`: example_id, judge, order (ab|ba), p oriented as the original order.
    pub fn by_order(&self) -> PathBuf {
        self.out.staged(JUDGMENTS_BY_ORDER)
    }
    /// With `dump_prompts`: each judged token sequence.
    pub fn prompts(&self) -> PathBuf {
        self.out.staged(PROMPTS)
    }
    /// Each example's context (example_id, text) for the context-dependent methods,
    /// when the experiment names no contexts file (staged; read by this run's
    /// aggregation from here).
    pub fn contexts(&self) -> PathBuf {
        self.out.staged(CONTEXTS)
    }
    /// The experiment as run (API key variable names only, never keys).
    pub fn resolved_config(&self) -> PathBuf {
        self.out.staged(RESOLVED_CONFIG)
    }
    /// Versions, model identities and template hashes, timings, per-server counters.
    pub fn manifest(&self) -> PathBuf {
        self.out.staged(MANIFEST)
    }
    /// An adaptive run's decisions ([`crate::adaptive_decisions_csv`]).
    pub fn adaptive(&self) -> PathBuf {
        self.out.staged(ADAPTIVE_DECISIONS)
    }

    /// Gives the directory up after a failure that kept nothing (see
    /// [`OutputDir::abandon`]).
    pub fn abandon(self) {
        self.out.abandon();
    }

    /// Publishes every staged file at once (see [`OutputDir::publish`]).
    pub fn publish(self) -> Result<(), OutputError> {
        self.out.publish()?;
        Ok(())
    }
}
