//! What `jury run` writes, and where: one [`OutputLayout`] names every file of an
//! output directory, and the judging stage's files are written from a [`JuryRun`].
//!
//! Every file is written whole into a staging folder and published with the rest at
//! the end; `cache.jsonl` is the one file appended to in place.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use jury_datasets::{ContextStyle, Example};
use jury_io::layout::{
    ADAPTIVE_DECISIONS as ADAPTIVE, CACHE, CATEGORIES, CONTEXTS, FAILURES, JUDGMENTS, JUDGMENTS_BY_ORDER as BY_ORDER,
    LABELS, MANIFEST, PROMPTS, RESOLVED_CONFIG as RESOLVED,
};
use jury_io::{
    Manifest, ManifestAdaptive, ManifestDataset, ManifestJudge, ManifestTemplate, OutputDir, Owner, VerdictTokenIds,
    csv_field, write_atomic,
};
use serde::Serialize;

use crate::adaptive::AdaptiveRecord;
use crate::experiment::Experiment;
use crate::judging::{JurorInfo, RunError};
use crate::record::JuryRun;

/// The files of a `jury run` output directory, held for one run (`jury_io::OutputDir`:
/// a lock, refusal of another experiment's output, no symbolic links). Every file but
/// the cache is written into the staging folder and published together by
/// [`OutputLayout::publish`] once the whole run has succeeded; `cache.jsonl` is appended
/// to in place as judgments finish.
#[derive(Debug)]
pub struct OutputLayout {
    out: OutputDir,
}

/// Written by aggregation into [`OutputLayout::staging_dir`].
const AGGREGATION: [&str; 3] = [jury_io::layout::METRICS, jury_io::layout::PREDICTIONS, jury_io::layout::REPORT];

impl OutputLayout {
    /// Every file a run may write.
    pub fn names() -> Vec<&'static str> {
        let mut v = vec![
            CACHE, JUDGMENTS, LABELS, FAILURES, BY_ORDER, PROMPTS, CONTEXTS, CATEGORIES, RESOLVED, MANIFEST, ADAPTIVE,
        ];
        v.extend(AGGREGATION);
        v
    }

    fn owner(experiment: &str) -> Owner {
        Owner { command: "run".into(), source: format!("experiment `{experiment}`") }
    }

    /// Takes `dir` for the experiment `experiment` (see `jury_io::OutputDir::open`).
    pub fn open(dir: &Path, experiment: &str, overwrite: bool) -> Result<Self, RunError> {
        Ok(Self { out: OutputDir::open(dir, Self::owner(experiment), &Self::names(), overwrite)? })
    }

    /// The checks [`Self::open`] makes, creating and writing nothing: the dry run's
    /// (see `jury_io::OutputDir::check`).
    pub fn check(dir: &Path, experiment: &str, overwrite: bool) -> Result<(), RunError> {
        Ok(OutputDir::check(dir, &Self::owner(experiment), &Self::names(), overwrite)?)
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
    /// truncated, exact.
    pub fn judgments(&self) -> PathBuf {
        self.out.staged(JUDGMENTS)
    }
    /// example_id, label.
    pub fn labels(&self) -> PathBuf {
        self.out.staged(LABELS)
    }
    /// example_id, judge, reason: the examples a server rejected (missing from judgments.csv).
    pub fn failures(&self) -> PathBuf {
        self.out.staged(FAILURES)
    }
    /// With `both_orders`: example_id, judge, order (ab|ba), p oriented as the original order.
    pub fn by_order(&self) -> PathBuf {
        self.out.staged(BY_ORDER)
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
        self.out.staged(RESOLVED)
    }
    /// Versions, model identities and template hashes, timings, per-server counters.
    pub fn manifest(&self) -> PathBuf {
        self.out.staged(MANIFEST)
    }
    /// An adaptive run's decisions: example_id, asked (judges in the order asked, `;`
    /// between them), answered, stop (warm-up, settled, every-judge), confidence.
    pub fn adaptive(&self) -> PathBuf {
        self.out.staged(ADAPTIVE)
    }

    /// Gives the directory up after a failure that kept nothing (see
    /// `jury_io::OutputDir::abandon`).
    pub fn abandon(self) {
        self.out.abandon();
    }

    /// Publishes every staged file at once (see `jury_io::OutputDir::publish`).
    pub fn publish(self) -> Result<(), RunError> {
        self.out.publish()?;
        Ok(())
    }
}

fn fmt_p(p: Option<f64>) -> String {
    p.map_or(String::new(), |y| format!("{y:.6}"))
}

fn write(path: PathBuf, text: &str) -> Result<(), RunError> {
    write_atomic(&path, text.as_bytes())?;
    Ok(())
}

/// Stages the judging stage's files: judgments, labels, failures, per-order judgments
/// and prompts when asked for, the examples' contexts in `contexts`' style when given,
/// and the resolved config.
pub fn write_judging<A: Serialize>(
    layout: &OutputLayout,
    exp: &Experiment<A>,
    run: &JuryRun,
    contexts: Option<ContextStyle>,
) -> Result<(), RunError> {
    let examples = &run.examples.original;
    write(layout.judgments(), &judgments_csv(run))?;
    let mut labels = String::from("example_id,label\n");
    for e in examples {
        if let Some(l) = e.label {
            let _ = writeln!(labels, "{},{l}", csv_field(&e.id));
        }
    }
    write(layout.labels(), &labels)?;
    if examples.iter().any(|e| e.category.is_some()) {
        let mut categories = String::from("example_id,category\n");
        for e in examples {
            if let Some(c) = &e.category {
                let _ = writeln!(categories, "{},{}", csv_field(&e.id), csv_field(c));
            }
        }
        write(layout.out.staged(CATEGORIES), &categories)?;
    }
    let mut failures = String::from("example_id,judge,reason\n");
    for j in &run.judges {
        for f in &j.results.failures {
            let _ = writeln!(failures, "{},{},{}", csv_field(&f.example_id), csv_field(&f.judge), csv_field(&f.reason));
        }
    }
    write(layout.failures(), &failures)?;
    if exp.dataset.both_orders {
        write(layout.by_order(), &jury_io::by_order_csv(&run.by_order()))?;
    }
    if exp.runtime.dump_prompts {
        let mut prompts = String::new();
        for j in &run.judges {
            for ex in run.examples.judged.iter() {
                if let Some(t) = j.results.tokens.get(&ex.id) {
                    let line = serde_json::json!({"judge": j.name, "example_id": ex.id, "tokens": t});
                    let _ = writeln!(prompts, "{line}");
                }
            }
        }
        write(layout.prompts(), &prompts)?;
    }
    if let Some(style) = contexts {
        write(layout.contexts(), &contexts_csv(examples, style))?;
    }
    if let Some(a) = &run.adaptive {
        write(layout.adaptive(), &adaptive_csv(a))?;
    }
    let resolved = serde_yaml::to_string(exp)
        .map_err(|e| RunError::Write { path: layout.resolved_config(), reason: e.to_string() })?;
    write(layout.resolved_config(), &resolved)
}

fn judgments_csv(run: &JuryRun) -> String {
    let mut table = String::from("example_id,judge,p,p_positive,p_negative,p_tie,mass,n_tokens,truncated,exact\n");
    for ex in &run.examples.original {
        for j in &run.judges {
            let Some(v) = j.verdicts.get(&ex.id) else { continue };
            let _ = writeln!(
                table,
                "{},{},{},{:e},{:e},{},{:e},{},{},{}",
                csv_field(&ex.id),
                csv_field(&j.name),
                fmt_p(v.y),
                v.p_positive,
                v.p_negative,
                v.p_tie.map_or(String::new(), |t| format!("{t:e}")),
                v.mass,
                v.n_tokens,
                v.truncated,
                v.exact
            );
        }
    }
    table
}

fn adaptive_csv(a: &AdaptiveRecord) -> String {
    let mut rows = String::from("example_id,asked,answered,stop,confidence\n");
    for d in &a.decisions {
        let asked: Vec<&str> = d.asked.iter().map(|&k| a.judge_names[k].as_str()).collect();
        let _ = writeln!(
            rows,
            "{},{},{},{},{}",
            csv_field(&d.example_id),
            csv_field(&asked.join(";")),
            d.answered,
            d.stop.as_str(),
            fmt_p(d.confidence)
        );
    }
    rows
}

/// Each example's context for the context-dependent methods, in `style`.
fn contexts_csv(examples: &[Example], style: ContextStyle) -> String {
    let mut out = String::from("example_id,text\n");
    for e in examples {
        let _ = writeln!(out, "{},{}", csv_field(&e.id), csv_field(&style.text(e)));
    }
    out
}

/// `manifest.json` of `run`: what was run, with what, and how long it took;
/// `total_seconds` covers the whole command (aggregation too).
pub fn manifest<A>(exp: &Experiment<A>, run: &JuryRun, dequantized_weights: bool, total_seconds: f64) -> Manifest {
    let judges = run
        .judges
        .iter()
        .map(|j| {
            let JurorInfo { model_identity, engine, extraction_rule, load_seconds, prefix_cache_entries, .. } = &j.info;
            let (positive, negative, tie) = &j.info.verdict_token_ids;
            let s = &j.results.summary;
            ManifestJudge {
                name: j.name.clone(),
                model_sha256: model_identity.clone(),
                engine: engine.clone(),
                extraction_rule: extraction_rule.clone(),
                load_seconds: *load_seconds,
                judge_seconds: s.seconds,
                scored: s.scored,
                from_cache: s.from_cache,
                failed: s.failed,
                exact_share: defined(j.exact_share()),
                prefix_cache_entries: *prefix_cache_entries,
                verdict_token_ids: VerdictTokenIds {
                    positive: positive.clone(),
                    negative: negative.clone(),
                    tie: tie.clone(),
                },
                template: j
                    .own_template
                    .as_ref()
                    .map(|(path, sha256)| ManifestTemplate { path: path.clone(), sha256: sha256.clone() }),
                server: j.info.server.clone(),
            }
        })
        .collect();
    Manifest {
        experiment: exp.name.clone(),
        jury_version: env!("CARGO_PKG_VERSION").to_owned(),
        template: ManifestTemplate { path: exp.prompt.clone(), sha256: run.template_sha256.clone() },
        dataset: ManifestDataset {
            name: exp.dataset.name.clone(),
            path: exp.dataset.path.clone(),
            examples: run.examples.original.len(),
        },
        dequantized_weights,
        judges,
        mean_captured_mass: run.mean_captured_mass().into_iter().map(|(k, m)| (k.to_owned(), defined(m))).collect(),
        total_seconds,
        adaptive: run.adaptive.as_ref().map(adaptive_manifest),
    }
}

/// A number that is `None` where it is undefined (NaN: no verdict to average over).
fn defined(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// An adaptive run in the manifest: its settings, order and the calls it made.
fn adaptive_manifest(a: &AdaptiveRecord) -> ManifestAdaptive {
    let (calls, full_calls) = (a.calls(), a.full_calls());
    let (cost, full_cost) = a.cost();
    let mut stops = BTreeMap::new();
    a.decisions.iter().for_each(|d| *stops.entry(d.stop.as_str().to_owned()).or_insert(0) += 1);
    ManifestAdaptive {
        target: a.settings.target,
        min_judges: a.settings.min_judges,
        warmup_examples: a.warmup_examples,
        rounds: a.rounds,
        order: a.order.clone(),
        calls,
        full_calls,
        calls_saved: if full_calls > 0 { 1.0 - calls as f64 / full_calls as f64 } else { 0.0 },
        calls_per_judge: a.judge_names.iter().cloned().zip(a.calls_per_judge()).collect(),
        cost,
        full_cost,
        stops,
    }
}

/// Writes `manifest` into the staging folder.
pub fn write_manifest(layout: &OutputLayout, manifest: &Manifest) -> Result<(), RunError> {
    let text = serde_json::to_string_pretty(manifest)
        .map_err(|e| RunError::Write { path: layout.manifest(), reason: e.to_string() })?;
    write(layout.manifest(), &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_put_short_fields_first_and_quote_csv() {
        let e = Example {
            id: "q,1".into(),
            fields: BTreeMap::from([
                ("answer".into(), "Paris".into()),
                ("question".into(), "What is the capital?".into()),
            ]),
            label: Some(1),
            category: None,
        };
        assert_eq!(
            contexts_csv(std::slice::from_ref(&e), ContextStyle::Fields),
            "example_id,text\n\"q,1\",Paris || What is the capital?\n"
        );
        assert_eq!(
            contexts_csv(&[e], ContextStyle::Paper),
            "example_id,text\n\"q,1\",\"Query: What is the capital?\nResponse: Paris\nIs the answer truthful to the question?\"\n"
        );
    }
}
