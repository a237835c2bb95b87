//! What the judging stage of `jury run` puts in its output folder: each file's rows
//! from a [`JuryRun`], written whole into the folder's staging area
//! (`jury_io::RunOutput` says where, `jury_io` how each table is written).

use std::collections::BTreeMap;
use std::path::PathBuf;

use jury_datasets::{ContextStyle, Example};
use jury_io::{
    AdaptiveDecisionRow, Manifest, ManifestAdaptive, ManifestDataset, ManifestJudge, ManifestTemplate, PromptRow,
    RunJudgment, RunOutput, VerdictTokenIds, write_atomic,
};
use serde::Serialize;

use crate::adaptive::AdaptiveRecord;
use crate::experiment::Experiment;
use crate::judging::{JurorInfo, RunError};
use crate::record::JuryRun;

fn write(path: PathBuf, text: &str) -> Result<(), RunError> {
    write_atomic(&path, text.as_bytes())?;
    Ok(())
}

/// Stages the judging stage's files: judgments, labels, failures, per-order judgments
/// and prompts when asked for, the examples' contexts in `contexts`' style when given,
/// and the resolved config.
pub fn write_judging<A: Serialize>(
    out: &RunOutput,
    exp: &Experiment<A>,
    run: &JuryRun,
    contexts: Option<ContextStyle>,
) -> Result<(), RunError> {
    let examples = &run.examples.original;
    write(out.judgments(), &jury_io::run_judgments_csv(judgment_rows(run)))?;
    write(out.labels(), &jury_io::labels_csv(examples.iter().filter_map(|e| Some((e.id.as_str(), e.label?)))))?;
    if examples.iter().any(|e| e.category.is_some()) {
        let rows = examples.iter().filter_map(|e| Some((e.id.as_str(), e.category.as_deref()?)));
        write(out.categories(), &jury_io::categories_csv(rows))?;
    }
    let failures = run.judges.iter().flat_map(|j| &j.results.failures);
    write(
        out.failures(),
        &jury_io::failures_csv(failures.map(|f| (f.example_id.as_str(), f.judge.as_str(), f.reason.as_str()))),
    )?;
    if exp.dataset.both_orders {
        write(out.by_order(), &jury_io::by_order_csv(&run.by_order()))?;
    }
    if exp.runtime.dump_prompts {
        let rows = run.judges.iter().flat_map(|j| {
            run.examples.judged.iter().filter_map(move |ex| {
                let tokens = j.results.tokens.get(&ex.id)?;
                Some(PromptRow { judge: &j.name, example_id: &ex.id, tokens })
            })
        });
        write(out.prompts(), &jury_io::prompts_jsonl(rows))?;
    }
    if let Some(style) = contexts {
        write(out.contexts(), &contexts_csv(examples, style))?;
    }
    if let Some(a) = &run.adaptive {
        write(out.adaptive(), &jury_io::adaptive_decisions_csv(decision_rows(a)))?;
    }
    let resolved = serde_yaml::to_string(exp)
        .map_err(|e| RunError::Write { path: out.resolved_config(), reason: e.to_string() })?;
    write(out.resolved_config(), &resolved)
}

/// Every judgment of `run`: examples in file order, judges in the experiment's order.
fn judgment_rows(run: &JuryRun) -> impl Iterator<Item = RunJudgment<'_>> {
    run.examples.original.iter().flat_map(move |ex| {
        run.judges.iter().filter_map(move |j| {
            let v = j.verdicts.get(&ex.id)?;
            Some(RunJudgment {
                example_id: &ex.id,
                judge: &j.name,
                p: v.y,
                p_positive: v.p_positive,
                p_negative: v.p_negative,
                p_tie: v.p_tie,
                mass: v.mass,
                n_tokens: v.n_tokens,
                truncated: v.truncated,
                exact: v.exact,
            })
        })
    })
}

fn decision_rows(a: &AdaptiveRecord) -> impl Iterator<Item = AdaptiveDecisionRow<'_>> {
    a.decisions.iter().map(|d| AdaptiveDecisionRow {
        example_id: &d.example_id,
        asked: d.asked.iter().map(|&k| a.judge_names[k].as_str()).collect(),
        answered: d.answered,
        stop: d.stop.as_str(),
        confidence: d.confidence,
    })
}

/// Each example's context for the context-dependent methods, in `style`.
fn contexts_csv(examples: &[Example], style: ContextStyle) -> String {
    let texts: Vec<String> = examples.iter().map(|e| style.text(e)).collect();
    jury_io::texts_csv(examples.iter().zip(&texts).map(|(e, t)| (e.id.as_str(), t.as_str())))
}

/// `manifest.json` of `run`: what was run, with what, and how long it took;
/// Its `total_seconds`, the whole command's time (aggregation too), is 0 here: the
/// command sets it when it ends.
pub fn manifest<A>(exp: &Experiment<A>, run: &JuryRun, dequantized_weights: bool) -> Manifest {
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
        total_seconds: 0.0,
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
