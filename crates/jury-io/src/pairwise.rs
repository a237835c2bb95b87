//! Tables for win-rate calibration and ranking: pairwise comparisons with evaluator votes
//! and human labels, and model responses to shared prompts.

use std::collections::HashMap;
use std::path::Path;

use jury_core::Comparison;

use crate::table::Table;
use crate::{IoError, csv_field};

/// The comparisons table's columns, for its reader and its writer.
const COMPARISON_ID: &str = "comparison_id";
const GENERATOR_0: &str = "generator_0";
const GENERATOR_1: &str = "generator_1";
const EVALUATOR: &str = "evaluator";
const VOTE: &str = "vote";

/// A comparisons table ([`read_comparisons`]'s columns): vote 1, 0, or empty for none.
pub fn comparisons_csv<'a>(rows: impl IntoIterator<Item = &'a Comparison>) -> String {
    let mut table = format!("{COMPARISON_ID},{GENERATOR_0},{GENERATOR_1},{EVALUATOR},{VOTE}\n");
    for r in rows {
        let vote = r.vote.map_or("", |v| if v { "1" } else { "0" });
        table.push_str(&format!(
            "{},{},{},{},{vote}\n",
            csv_field(&r.comparison_id),
            csv_field(&r.generator_0),
            csv_field(&r.generator_1),
            csv_field(&r.evaluator)
        ));
    }
    table
}

/// Reads a comparisons table: columns `comparison_id`, `generator_0`, `generator_1`,
/// `evaluator`, `vote` (1: generator_1 preferred, 0: generator_0 preferred, `tie` or
/// empty: no preference). One row per (generator pair, comparison, evaluator); a repeat
/// is an error naming both rows.
pub fn read_comparisons(path: &Path) -> Result<Vec<Comparison>, IoError> {
    let t = Table::load(path)?;
    let ids = t.required_text(COMPARISON_ID)?;
    let g0 = t.required_text(GENERATOR_0)?;
    let g1 = t.required_text(GENERATOR_1)?;
    let evaluators = t.required_text(EVALUATOR)?;
    let votes = t.strings(VOTE)?;
    let mut seen: HashMap<(String, String, String, String), usize> = HashMap::new();
    let mut out = Vec::with_capacity(votes.len());
    for (i, vote) in votes.iter().enumerate() {
        let text = |c: &[String]| c[i].trim().to_owned();
        let vote = vote.as_deref();
        let row = Comparison {
            comparison_id: text(&ids),
            generator_0: text(&g0),
            generator_1: text(&g1),
            evaluator: text(&evaluators),
            vote: parse_vote(vote).ok_or_else(|| {
                t.field_err(i, VOTE, format!("`{}` is not 0, 1, tie or empty", vote.unwrap_or_default()))
            })?,
        };
        if row.generator_0 == row.generator_1 {
            return Err(t.field_err(i, GENERATOR_1, "the same generator as generator_0"));
        }
        let key = (row.generator_0.clone(), row.generator_1.clone(), row.comparison_id.clone(), row.evaluator.clone());
        if let Some(first) = seen.insert(key, i) {
            return Err(t.field_err(
                i,
                EVALUATOR,
                format!(
                    "a second vote by `{}` on comparison `{}` (first at {})",
                    row.evaluator,
                    row.comparison_id,
                    t.locate(first)
                ),
            ));
        }
        out.push(row);
    }
    Ok(out)
}

fn parse_vote(v: Option<&str>) -> Option<Option<bool>> {
    match v.map(str::trim).map(str::to_ascii_lowercase).as_deref() {
        None | Some("" | "tie") => Some(None),
        Some("1" | "1.0") => Some(Some(true)),
        Some("0" | "0.0") => Some(Some(false)),
        _ => None,
    }
}

/// Model responses to shared prompts.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseTable {
    /// Model names in order of first appearance.
    pub models: Vec<String>,
    /// Prompt ids in order of first appearance.
    pub prompt_ids: Vec<String>,
    /// Each prompt's text, when the table has a `prompt` column (an LLM judge needs it).
    pub prompt_texts: Option<Vec<String>>,
    /// `cells[model][prompt]`: missing where a model has no row for a prompt (an empty
    /// response is a response).
    pub cells: Vec<Vec<Option<String>>>,
}

/// Reads a responses table: columns `prompt_id`, `model`, `response`, and optionally
/// `prompt` (the prompt's text, the same on every row of a prompt). A second response
/// by one model to one prompt, or two texts for one prompt, is an error naming the rows.
pub fn read_responses(path: &Path) -> Result<ResponseTable, IoError> {
    let t = Table::load(path)?;
    let prompts = t.required_text("prompt_id")?;
    let models = t.required_text("model")?;
    let responses = t.strings("response")?;
    let texts = if t.has("prompt") { Some(t.strings("prompt")?) } else { None };
    let (mut model_ix, mut prompt_ix): (HashMap<String, usize>, HashMap<String, usize>) = Default::default();
    let (mut model_names, mut prompt_names) = (Vec::new(), Vec::new());
    let mut entries = Vec::with_capacity(responses.len());
    for (i, response) in responses.into_iter().enumerate() {
        let m = models[i].trim().to_owned();
        let d = prompts[i].trim().to_owned();
        let mi = *model_ix.entry(m.clone()).or_insert_with(|| {
            model_names.push(m.clone());
            model_names.len() - 1
        });
        let di = *prompt_ix.entry(d.clone()).or_insert_with(|| {
            prompt_names.push(d.clone());
            prompt_names.len() - 1
        });
        entries.push((i, mi, di, response.unwrap_or_default()));
    }
    let mut cells = vec![vec![None; prompt_names.len()]; model_names.len()];
    let mut first_row = vec![vec![0usize; prompt_names.len()]; model_names.len()];
    for (i, mi, di, response) in entries {
        if cells[mi][di].is_some() {
            return Err(t.field_err(
                i,
                "prompt_id",
                format!(
                    "a second response by `{}` to prompt `{}` (first at {})",
                    model_names[mi],
                    prompt_names[di],
                    t.locate(first_row[mi][di])
                ),
            ));
        }
        first_row[mi][di] = i;
        cells[mi][di] = Some(response);
    }
    let prompt_texts = match texts {
        None => None,
        Some(texts) => {
            let mut out: Vec<Option<(usize, String)>> = vec![None; prompt_names.len()];
            for (i, text) in texts.into_iter().enumerate() {
                let di = prompt_ix[prompts[i].trim()];
                let text = text.unwrap_or_default();
                match &out[di] {
                    Some((first, seen)) if *seen != text => {
                        return Err(t.field_err(
                            i,
                            "prompt",
                            format!("prompt `{}` has another text at {}", prompt_names[di], t.locate(*first)),
                        ));
                    }
                    Some(_) => {}
                    None => out[di] = Some((i, text)),
                }
            }
            Some(out.into_iter().map(|x| x.map(|(_, t)| t).unwrap_or_default()).collect())
        }
    };
    Ok(ResponseTable { models: model_names, prompt_ids: prompt_names, prompt_texts, cells })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons_parse_votes_and_reject_repeats_with_both_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.csv");
        std::fs::write(&p, "comparison_id,generator_0,generator_1,evaluator,vote\n1,a,b,gpt,1\n1,a,b,human,0\n2,a,b,gpt,tie\n2,a,b,human,\n").unwrap();
        let rows = read_comparisons(&p).unwrap();
        assert_eq!(rows.iter().map(|r| r.vote).collect::<Vec<_>>(), [Some(true), Some(false), None, None]);
        let written = comparisons_csv(&rows);
        assert!(written.ends_with("2,a,b,gpt,\n2,a,b,human,\n"), "{written}");
        std::fs::write(&p, &written).unwrap();
        assert_eq!(read_comparisons(&p).unwrap(), rows);
        std::fs::write(&p, "comparison_id,generator_0,generator_1,evaluator,vote\n1,a,b,gpt,1\n1,a,b,gpt,0\n").unwrap();
        let e = read_comparisons(&p).unwrap_err().to_string();
        assert!(e.contains("line 3") && e.contains("first at line 2"), "{e}");
        std::fs::write(&p, "comparison_id,generator_0,generator_1,evaluator,vote\n1,a,b,gpt,yes\n").unwrap();
        let e = read_comparisons(&p).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("`vote`") && e.contains("`yes`"), "{e}");
    }

    #[test]
    fn responses_form_a_model_by_prompt_table() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.jsonl");
        std::fs::write(
            &p,
            "{\"prompt_id\":\"q1\",\"model\":\"m1\",\"response\":\"A\"}\n{\"prompt_id\":\"q2\",\"model\":\"m2\",\"response\":\"B\"}\n{\"prompt_id\":\"q1\",\"model\":\"m2\",\"response\":\"C\"}\n",
        )
        .unwrap();
        let t = read_responses(&p).unwrap();
        assert_eq!(t.models, ["m1", "m2"]);
        assert_eq!(t.prompt_ids, ["q1", "q2"]);
        assert_eq!(t.prompt_texts, None);
        assert_eq!(t.cells, vec![vec![Some("A".to_owned()), None], vec![Some("C".to_owned()), Some("B".to_owned())]]);
        let csv = dir.path().join("r.csv");
        std::fs::write(&csv, "prompt_id,prompt,model,response\nq1,Why?,m1,A\nq1,Why?,m2,B\nq2,How?,m1,C\n").unwrap();
        assert_eq!(read_responses(&csv).unwrap().prompt_texts, Some(vec!["Why?".to_owned(), "How?".to_owned()]));
        std::fs::write(&csv, "prompt_id,prompt,model,response\nq1,Why?,m1,A\nq1,How?,m2,B\n").unwrap();
        let e = read_responses(&csv).unwrap_err().to_string();
        assert!(e.contains("line 3") && e.contains("another text at line 2"), "{e}");
        std::fs::write(&p, "{\"prompt_id\":\"q1\",\"model\":\"m1\",\"response\":\"A\"}\n{\"prompt_id\":\"q1\",\"model\":\"m1\",\"response\":\"B\"}\n").unwrap();
        let e = read_responses(&p).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("first at line 1"), "{e}");
    }
}
