//! Human-labeled pairwise data with LLM evaluators' verdicts as `jury winrate`'s
//! comparisons (vote 1: generator_1's output preferred, 0: generator_0's, none for a tie
//! or an unreadable verdict; human labels under the evaluator `human`): PandaLM's test
//! set, the LLMBar-processed MT-Bench, LLMEval2 and FairEval sets, and HANNA's stories.

use std::path::Path;

use jury_core::Comparison;
use serde_json::Value;

use super::{Row, delimited, fail, json, listing, number, text};
use crate::DatasetError;

fn row(id: impl ToString, g0: &str, g1: &str, evaluator: &str, vote: Option<bool>) -> Comparison {
    Comparison {
        comparison_id: id.to_string(),
        generator_0: g0.to_owned(),
        generator_1: g1.to_owned(),
        evaluator: evaluator.to_owned(),
        vote,
    }
}

/// A verdict naming response 1 or 2 (text or number): generator_1 preferred for 2.
fn one_or_two(v: &str) -> Option<bool> {
    match v {
        "1" => Some(false),
        "2" => Some(true),
        _ => None,
    }
}

/// PandaLM: one generator pair per `cmp_key` ("a_b": response 1 is a's); human, the
/// majority of the three annotators (0, a tie, is no vote); evaluators gpt-3.5-turbo and
/// pandalm-7b.
pub fn winrate_pandalm(dir: &Path) -> Result<Vec<Comparison>, DatasetError> {
    let (gpt, panda) = super::pairwise::pandalm_verdicts(dir)?;
    let tests_path = dir.join("testset-v1.json");
    let tests = json(&tests_path)?;
    let mut out = Vec::new();
    for t in tests.as_array().ok_or_else(|| fail(&tests_path, "not a JSON array"))? {
        let idx = t.get("idx").and_then(Value::as_i64).ok_or_else(|| fail(&tests_path, "a row without idx"))?;
        let key = t.get("cmp_key").and_then(Value::as_str).unwrap_or_default();
        let Some((g0, g1)) = key.split_once('_') else {
            return Err(fail(&tests_path, format!("idx {idx}: cmp_key `{key}` is not a_b")));
        };
        let majority = super::pairwise::annotator_majority(t).flatten();
        let majority = majority.ok_or_else(|| fail(&tests_path, format!("idx {idx}: no human majority")))?;
        out.push(row(idx, g0, g1, "human", one_or_two(&majority.to_string())));
        for (who, verdicts) in [("gpt-3.5-turbo", &gpt), ("pandalm-7b", &panda)] {
            let verdict =
                verdicts.get(&idx).ok_or_else(|| fail(&tests_path, format!("idx {idx}: no {who} verdict")))?;
            out.push(row(idx, g0, g1, who, one_or_two(verdict)));
        }
    }
    Ok(out)
}

/// The LLMBar-processed `sets` (each of Processed/<set> one "pair", <set>/output_1 against
/// <set>/output_2): human, the `label`; evaluators, each LLM's `strategy` in the original
/// order (`<LLM>`) and the reversed one (`<LLM>/swapped`, its winner already numbered as
/// the original).
pub fn winrate_llmbar(dir: &Path, strategy: &str, sets: &[String]) -> Result<Vec<Comparison>, DatasetError> {
    let mut out = Vec::new();
    for name in sets {
        let folder = dir.join("Processed").join(name);
        let data_path = folder.join("dataset.json");
        let data = json(&data_path)?;
        let data = data.as_array().ok_or_else(|| fail(&data_path, "not a JSON array"))?;
        let (g0, g1) = (format!("{name}/output_1"), format!("{name}/output_2"));
        for (i, d) in data.iter().enumerate() {
            let vote = match d.get("label").and_then(number) {
                Some(1.0) => false,
                Some(2.0) => true,
                _ => return Err(fail(&data_path, format!("pair {i}: label is not 1 or 2"))),
            };
            out.push(row(i, &g0, &g1, "human", Some(vote)));
        }
        for (llm, path) in listing(&folder.join("evaluators"), |_| true)? {
            let result_path = path.join(strategy).join("result.json");
            let results = json(&result_path)?;
            let results = results.as_array().ok_or_else(|| fail(&result_path, "not a JSON array"))?;
            if results.len() != data.len() {
                return Err(fail(&result_path, format!("{} results for {} pairs", results.len(), data.len())));
            }
            for (i, r) in results.iter().enumerate() {
                let last = r.get("results").and_then(Value::as_array).and_then(|l| l.last());
                let last = last.ok_or_else(|| fail(&result_path, format!("pair {i}: no results")))?;
                for (key, evaluator) in [("swap = False", llm.clone()), ("swap = True", format!("{llm}/swapped"))] {
                    let winner = last.get(key).and_then(|o| o.get("winner"));
                    let winner = winner.ok_or_else(|| fail(&result_path, format!("pair {i}: no `{key}` winner")))?;
                    out.push(row(i, &g0, &g1, &evaluator, one_or_two(&text(winner))));
                }
            }
        }
    }
    Ok(out)
}

const HANNA_CRITERIA: [&str; 6] = ["Relevance", "Coherence", "Empathy", "Surprise", "Engagement", "Complexity"];
const HANNA_LLMS: [&str; 5] = ["Beluga-13B", "ChatGPT", "Llama-13B", "Mistral-7B", "OrcaPlatypus"];
const HANNA_STORIES: usize = 96;

/// HANNA: `anchor` against each other story generator on the 96 prompts. Human, which
/// story has the higher sum of the six criteria (each the raters' mean; equal sums are
/// no vote); each LLM, the same from its six-criterion mean averaged over its 4 prompt
/// variants (HANNA's pointwise ratings turned into pairwise votes).
pub fn winrate_hanna(dir: &Path, anchor: &str) -> Result<Vec<Comparison>, DatasetError> {
    let path = dir.join("hanna_metric_scores_llm.csv");
    let (_, rows) = delimited(&path, b',')?;
    let mut models: Vec<(String, Row)> = Vec::new();
    for r in rows {
        let model = r.get("Model").cloned().unwrap_or_default();
        match models.iter_mut().find(|(m, _)| *m == model) {
            Some(slot) => slot.1 = r,
            None => models.push((model, r)),
        }
    }
    let column = |r: &Row, model: &str, name: &str| -> Result<Vec<f64>, DatasetError> {
        let cell = r.get(name).ok_or_else(|| fail(&path, format!("{model}, column `{name}`: missing")))?;
        let values: Vec<f64> =
            serde_json::from_str(cell).map_err(|e| fail(&path, format!("{model}, column `{name}`: {e}")))?;
        if values.len() != HANNA_STORIES {
            return Err(fail(&path, format!("{model}, column `{name}`: {} stories, expected 96", values.len())));
        }
        Ok(values)
    };
    // Per story: the human criteria's sum, and each LLM's mean over its prompt variants
    // of its criteria's sum.
    let scores = |(model, r): &(String, Row)| -> Result<(Vec<f64>, Vec<Vec<f64>>), DatasetError> {
        let sum_of = |names: &[String]| -> Result<Vec<f64>, DatasetError> {
            let cols = names.iter().map(|n| column(r, model, n)).collect::<Result<Vec<_>, _>>()?;
            Ok((0..HANNA_STORIES).map(|i| cols.iter().fold(0.0, |acc, c| acc + c[i])).collect())
        };
        let human = sum_of(&HANNA_CRITERIA.map(str::to_owned))?;
        let llms = HANNA_LLMS
            .iter()
            .map(|e| {
                Ok(sum_of(&(1..=4).map(|p| format!("{e} AVG {p}")).collect::<Vec<_>>())?
                    .iter()
                    .map(|s| s / 4.0)
                    .collect())
            })
            .collect::<Result<Vec<Vec<f64>>, DatasetError>>()?;
        Ok((human, llms))
    };
    let Some(base) = models.iter().find(|(m, _)| m == anchor) else {
        let have: Vec<&str> = models.iter().map(|(m, _)| m.as_str()).collect();
        return Err(fail(&path, format!("no generator `{anchor}` (have {})", have.join(", "))));
    };
    let (base_human, base_llms) = scores(base)?;
    let vote = |a: f64, b: f64| (a != b).then_some(b > a);
    let mut out = Vec::new();
    for other in models.iter().filter(|(m, _)| m != anchor) {
        let (human, llms) = scores(other)?;
        for i in 0..HANNA_STORIES {
            out.push(row(i, anchor, &other.0, "human", vote(base_human[i], human[i])));
            for (e, llm) in HANNA_LLMS.iter().enumerate() {
                out.push(row(i, anchor, &other.0, llm, vote(base_llms[e][i], llms[e][i])));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pandalm_pairs_vote_for_the_second_response_on_2_and_none_on_a_tie() {
        let dir = tempfile::tempdir().unwrap();
        let test = r#"[{"idx": 0, "cmp_key": "a_b_c", "annotator1": 2, "annotator2": 2, "annotator3": 1},
                       {"idx": 1, "cmp_key": "a_b_c", "annotator1": 0, "annotator2": 1, "annotator3": 0}]"#;
        std::fs::write(dir.path().join("testset-v1.json"), test).unwrap();
        let gpt = r#"[{"idx": 0, "gpt_result": "1"}, {"idx": 1, "gpt_result": "Tie"}]"#;
        std::fs::write(dir.path().join("gpt-3.5-turbo-testset-v1.json"), gpt).unwrap();
        let panda = r#"[{"idx": 0, "pandalm_result": 2}, {"idx": 1, "pandalm_result": 0}]"#;
        std::fs::write(dir.path().join("pandalm-7b-testset-v1.json"), panda).unwrap();
        let rows = winrate_pandalm(dir.path()).unwrap();
        let votes: Vec<(&str, &str, Option<bool>)> =
            rows.iter().map(|r| (r.comparison_id.as_str(), r.evaluator.as_str(), r.vote)).collect();
        assert_eq!(
            votes,
            [
                ("0", "human", Some(true)),
                ("0", "gpt-3.5-turbo", Some(false)),
                ("0", "pandalm-7b", Some(true)),
                ("1", "human", None),
                ("1", "gpt-3.5-turbo", None),
                ("1", "pandalm-7b", None),
            ]
        );
        assert_eq!((rows[0].generator_0.as_str(), rows[0].generator_1.as_str()), ("a", "b_c"));
        let three = crate::pandalm_three_class(dir.path()).unwrap();
        assert_eq!(three.labels, [("pandalm-0".to_owned(), 2), ("pandalm-1".to_owned(), 0)]);
        assert_eq!(three.judgments[2], ("pandalm-1".to_owned(), "gpt-3.5-turbo".to_owned(), Some(0)));
        assert_eq!(three.contexts[0].1, "|| Response 1: || Response 2:");
    }
}
