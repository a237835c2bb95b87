//! Pairwise judges (which of two responses is better): JudgeBench's judges and reward
//! models on GPT-4o's response pairs, LLMBar's evaluators and PandaLM's two judges.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{Builder, fail, json, listing, number, sigmoid, six_significant, text};
use crate::{DatasetError, ReleasedJury, read};

const JUDGEBENCH_PREFIX: &str = "dataset=judgebench,response_model=gpt-4o-2024-05-13,judge_name=";

fn judgebench_short(model: &str) -> &str {
    match model {
        "Ray2333_GRM-Gemma-2B-rewardmodel-ft" => "GRM-Gemma-2B",
        "Skywork_Skywork-Reward-Gemma-2-27B" => "Skywork-Reward-Gemma-2-27B",
        "Skywork_Skywork-Reward-Llama-3.1-8B" => "Skywork-Reward-Llama-3.1-8B",
        "internlm_internlm2-20b-reward" => "internlm2-20b-reward",
        "internlm_internlm2-7b-reward" => "internlm2-7b-reward",
        "o1-mini-2024-09-12" => "o1-mini",
        other => other,
    }
}

/// JudgeBench: on GPT-4o's response pairs, each LLM judge's verdict in both orders (a
/// judge per order) and each reward model's P(A) = logistic(score A - score B); the
/// label is A better.
pub fn judgebench(input: &Path) -> Result<ReleasedJury, DatasetError> {
    let dir = input.join("outputs");
    let files = listing(&dir, |n| {
        n.strip_prefix(JUDGEBENCH_PREFIX)
            .and_then(|r| r.strip_suffix(".jsonl"))
            .is_some_and(|r| r.contains(",judge_model="))
    })?;
    if files.is_empty() {
        return Err(fail(&dir, format!("no {JUDGEBENCH_PREFIX}*,judge_model=*.jsonl")));
    }
    let mut b = Builder::default();
    for (name, path) in files {
        let stem = name.strip_suffix(".jsonl").unwrap_or(&name);
        let field = |key: &str| stem.split(',').find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')).unwrap_or("");
        let (judge_name, model) = (field("judge_name"), judgebench_short(field("judge_model")));
        for (n, line) in read(&path)?.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let bad = |reason: String| DatasetError::Line { path: path.clone(), line: n as u64 + 1, reason };
            let pair: Value = serde_json::from_str(line).map_err(|e| bad(format!("not JSON: {e}")))?;
            let ex = pair.get("pair_id").map(text).ok_or_else(|| bad("no pair_id".into()))?;
            let label = match pair.get("label").and_then(Value::as_str) {
                Some("A>B") => 1,
                Some("B>A") => 0,
                other => return Err(bad(format!("label {other:?} is not A>B or B>A"))),
            };
            if *b.labels.entry(ex.clone()).or_insert(label) != label {
                return Err(bad(format!("{ex}: labels disagree across files")));
            }
            let judgments = pair.get("judgments").and_then(Value::as_array).cloned().unwrap_or_default();
            if judge_name == "reward_model" {
                let scores = judgments.first().and_then(|j| j.get("judgment")?.get("scores")?.as_array().cloned());
                if let Some([a, b_score]) = scores.as_deref()
                    && let (Some(a), Some(s)) = (number(a), number(b_score))
                {
                    b.vote(&ex, model, six_significant(sigmoid(a - s)));
                }
                continue;
            }
            for (k, order) in ["AB", "BA"].into_iter().enumerate() {
                let decision = judgments.get(k).and_then(|j| j.get("decision")?.as_str().map(str::to_owned));
                let v = match decision.as_deref() {
                    Some("A>B" | "A>>B") => 1.0,
                    Some("B>A" | "B>>A") => 0.0,
                    _ => continue,
                };
                let v = if k == 1 { 1.0 - v } else { v };
                b.vote(&ex, &format!("{model}/{judge_name}/order={order}"), v);
            }
        }
    }
    Ok(b.finish())
}

/// The folders under `dir` (itself included, hidden ones not) that hold `file`, sorted.
fn folders_with(dir: &Path, file: &str) -> Result<Vec<PathBuf>, DatasetError> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        if d.join(file).is_file() {
            out.push(d.clone());
        }
        for (_, path) in listing(&d, |n| !n.starts_with('.'))? {
            if path.is_dir() {
                todo.push(path);
            }
        }
    }
    // By the path's text, as Python sorts the paths this reproduces.
    out.sort_by_key(|p| p.to_string_lossy().into_owned());
    Ok(out)
}

/// LLMBar (and the sets processed like it: MT-Bench, FairEval, LLMEval2): every
/// evaluator's and strategy's verdict in both orders on each `dataset.json` below
/// `input`; the label is output 1 better.
pub fn llmbar_jury(input: &Path) -> Result<ReleasedJury, DatasetError> {
    let sets = folders_with(input, "dataset.json")?;
    if sets.is_empty() {
        return Err(fail(input, "no dataset.json below it"));
    }
    let mut b = Builder::default();
    for set in sets {
        let name = set.strip_prefix(input).unwrap_or(&set).to_string_lossy().replace(std::path::MAIN_SEPARATOR, "/");
        let prefix = if name.is_empty() { String::new() } else { format!("{name}-") };
        let data_path = set.join("dataset.json");
        let data = json(&data_path)?;
        let data = data.as_array().ok_or_else(|| fail(&data_path, "not a JSON array"))?;
        for (i, d) in data.iter().enumerate() {
            let one = matches!(d.get("label"), Some(Value::Bool(true))) || d.get("label").and_then(number) == Some(1.0);
            b.labels.insert(format!("{prefix}{i:04}"), usize::from(one));
        }
        let mut results = Vec::new();
        let visible = |n: &str| !n.starts_with('.');
        for (_, evaluator) in listing(&set.join("evaluators"), visible).unwrap_or_default() {
            for (_, strategy) in listing(&evaluator, visible).unwrap_or_default() {
                if strategy.join("result.json").is_file() {
                    results.push(strategy);
                }
            }
        }
        results.sort_by_key(|p| p.to_string_lossy().into_owned());
        for strategy in results {
            let evaluator = strategy.parent().and_then(Path::file_name).unwrap_or_default().to_string_lossy();
            let judge = format!("{evaluator}/{}", strategy.file_name().unwrap_or_default().to_string_lossy());
            let result_path = strategy.join("result.json");
            let res = json(&result_path)?;
            let res = res.as_array().ok_or_else(|| fail(&result_path, "not a JSON array"))?;
            if res.len() != data.len() {
                return Err(fail(&result_path, format!("{} rows, {} in dataset.json", res.len(), data.len())));
            }
            for (i, r) in res.iter().enumerate() {
                let last = r.get("results").and_then(Value::as_array).and_then(|l| l.last());
                for order in ["swap = False", "swap = True"] {
                    let winner = last.and_then(|l| l.get(order)?.get("winner")?.as_str());
                    if let Some(w @ ("1" | "2")) = winner {
                        let p = if w == "1" { 1.0 } else { 0.0 };
                        b.vote(&format!("{prefix}{i:04}"), &format!("{judge}/{}", order.replace(' ', "")), p);
                    }
                }
            }
        }
    }
    Ok(b.finish())
}

/// PandaLM's GPT-3.5-turbo and PandaLM-7B verdicts by test item (`idx`), as text.
pub(super) type Verdicts = std::collections::HashMap<i64, String>;

pub(super) fn pandalm_verdicts(input: &Path) -> Result<(Verdicts, Verdicts), DatasetError> {
    let read = |file: &str, key: &str| -> Result<Verdicts, DatasetError> {
        let path = input.join(file);
        let rows = json(&path)?;
        let rows = rows.as_array().ok_or_else(|| fail(&path, "not a JSON array"))?;
        rows.iter()
            .map(|r| Some((r.get("idx")?.as_i64()?, text(r.get(key)?))))
            .collect::<Option<_>>()
            .ok_or_else(|| fail(&path, format!("a row without idx or {key}")))
    };
    Ok((read("gpt-3.5-turbo-testset-v1.json", "gpt_result")?, read("pandalm-7b-testset-v1.json", "pandalm_result")?))
}

/// The verdict at least two of a PandaLM item's three annotators give (0 a tie, 1 or 2
/// the better response): `None` when an annotator's verdict is not an integer,
/// `Some(None)` when no two agree.
pub(super) fn annotator_majority(t: &Value) -> Option<Option<i64>> {
    let votes: Vec<i64> =
        ["annotator1", "annotator2", "annotator3"].iter().map(|a| t.get(*a)?.as_i64()).collect::<Option<_>>()?;
    Some(votes.iter().copied().find(|v| votes.iter().filter(|w| *w == v).count() >= 2))
}

/// PandaLM's test set: GPT-3.5-turbo's and PandaLM-7B's verdicts on the pairs where at
/// least two of the three annotators agree on a winner (a tie left out); the label is
/// response 1 better.
pub fn pandalm(input: &Path) -> Result<ReleasedJury, DatasetError> {
    let tests_path = input.join("testset-v1.json");
    let (gpt, panda) = pandalm_verdicts(input)?;
    let tests = json(&tests_path)?;
    let mut b = Builder::default();
    for t in tests.as_array().ok_or_else(|| fail(&tests_path, "not a JSON array"))? {
        let (Some(idx), Some(majority)) = (t.get("idx").and_then(Value::as_i64), annotator_majority(t)) else {
            return Err(fail(&tests_path, "a row without idx or an annotator"));
        };
        let Some(top) = majority.filter(|v| *v != 0) else { continue };
        let ex = format!("pandalm-{idx:04}");
        b.labels.insert(ex.clone(), usize::from(top == 1));
        for (judge, verdict) in [("gpt-3.5-turbo", gpt.get(&idx)), ("pandalm-7b", panda.get(&idx))] {
            let verdict = verdict.ok_or_else(|| fail(&tests_path, format!("{judge} has no verdict for idx {idx}")))?;
            if verdict == "1" || verdict == "2" {
                b.vote(&ex, judge, if verdict == "1" { 1.0 } else { 0.0 });
            }
        }
    }
    Ok(b.finish())
}

/// A jury of one-hot class votes with contexts.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassJury {
    pub n_classes: usize,
    /// (example id, judge, the class it chose; `None` for no usable verdict).
    pub judgments: Vec<(String, String, Option<usize>)>,
    /// Every example's id and label, in the data set's order.
    pub labels: Vec<(String, usize)>,
    /// Every example's id and context text, in the same order.
    pub contexts: Vec<(String, String)>,
}

/// PandaLM's test set with three classes (0 a tie, 1 response 1 better, 2 response 2
/// better): GPT-3.5-turbo's verdict ("Tie", "1", "2"; anything else no verdict) and
/// PandaLM-7B's (0, 1, 2); the label the majority of the three annotators; the context
/// the instruction, input and both responses.
pub fn pandalm_three_class(input: &Path) -> Result<ClassJury, DatasetError> {
    let tests_path = input.join("testset-v1.json");
    let (gpt, panda) = pandalm_verdicts(input)?;
    let tests = json(&tests_path)?;
    let mut jury = ClassJury { n_classes: 3, judgments: Vec::new(), labels: Vec::new(), contexts: Vec::new() };
    for t in tests.as_array().ok_or_else(|| fail(&tests_path, "not a JSON array"))? {
        let idx = t.get("idx").and_then(Value::as_i64).ok_or_else(|| fail(&tests_path, "a row without idx"))?;
        let label = annotator_majority(t).flatten().and_then(|l| usize::try_from(l).ok()).filter(|l| *l < 3);
        let label =
            label.ok_or_else(|| fail(&tests_path, format!("idx {idx}: no annotator majority among 0, 1, 2")))?;
        let ex = format!("pandalm-{idx}");
        let verdict = |m: &Verdicts, who: &str| {
            m.get(&idx).cloned().ok_or_else(|| fail(&tests_path, format!("idx {idx}: no {who} verdict")))
        };
        let gpt_class = match verdict(&gpt, "gpt-3.5-turbo")?.as_str() {
            "Tie" => Some(0),
            "1" => Some(1),
            "2" => Some(2),
            _ => None,
        };
        let panda_verdict = verdict(&panda, "pandalm-7b")?;
        let panda_class = panda_verdict.parse::<usize>().ok().filter(|c| *c < 3);
        let panda_class =
            panda_class.ok_or_else(|| fail(&tests_path, format!("idx {idx}: pandalm-7b said {panda_verdict}")))?;
        jury.labels.push((ex.clone(), label));
        jury.judgments.push((ex.clone(), "gpt-3.5-turbo".into(), gpt_class));
        jury.judgments.push((ex.clone(), "pandalm-7b".into(), Some(panda_class)));
        let field = |k: &str| t.get(k).map(text).unwrap_or_default();
        let context = format!(
            "{} {} || Response 1: {} || Response 2: {}",
            field("instruction"),
            field("input"),
            field("response1"),
            field("response2")
        );
        jury.contexts.push((ex, context.split_whitespace().collect::<Vec<_>>().join(" ")));
    }
    Ok(jury)
}
