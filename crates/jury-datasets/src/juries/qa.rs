//! Judges of short answers to open questions: the TriviaQA judges with human
//! judgements (llm_eval) and NQ-open's 301 answers (qa-eval).

use std::collections::HashMap;
use std::path::Path;

use super::{Builder, Row, delimited, fail, listing};
use crate::{DatasetError, ReleasedJury};

/// The TriviaQA judges of llm_eval: each judge's True/False on a model's answer, the
/// label the human judgement. `version` V1 or V2 (its file and label column).
pub fn triviaqa_judges(input: &Path, version: &str) -> Result<ReleasedJury, DatasetError> {
    let (file, label_col, skip): (&str, &str, &[&str]) = match version {
        "V1" => ("TriviaQA_Judges_w_HumanJudgement_V1.csv", "HumanJudgement", &[]),
        "V2" => ("TriviaQA_Judges_w_HumanJudgement_V2.csv", "Human-Eval", &["Human-Eval_Confidence"]),
        other => return Err(fail(input, format!("unknown version `{other}` (V1 or V2)"))),
    };
    let path = input.join("results").join(file);
    let (header, rows) = delimited(&path, b',')?;
    let meta = ["model", "response", "question", "references", "benchmark", label_col];
    let judges: Vec<&String> =
        header.iter().filter(|c| !meta.contains(&c.as_str()) && !skip.contains(&c.as_str())).collect();
    if !header.iter().any(|c| c == label_col) || judges.is_empty() {
        return Err(fail(&path, format!("unexpected columns {header:?}")));
    }
    let verdict = |v: Option<&String>| match v.map(String::as_str) {
        Some("True") => Some(1.0),
        Some("False") => Some(0.0),
        _ => None,
    };
    let mut b = Builder::default();
    for (i, r) in rows.iter().enumerate() {
        let Some(label) = verdict(r.get(label_col)) else { continue };
        let ex = format!("tqa-{}-{i:04}", version.to_lowercase());
        let votes: Vec<(&String, f64)> = judges.iter().filter_map(|j| Some((*j, verdict(r.get(*j))?))).collect();
        if !votes.is_empty() {
            b.labels.insert(ex.clone(), label as usize);
            for (j, v) in votes {
                b.vote(&ex, j, v);
            }
        }
    }
    Ok(b.finish())
}

/// SQuAD's answer normalisation: lower case, ASCII punctuation removed, the articles
/// a, an and the dropped as words, whitespace collapsed.
fn squad_normalize(s: &str) -> String {
    let s: String = s.to_lowercase().chars().filter(|c| !c.is_ascii_punctuation()).collect();
    let mut out = String::with_capacity(s.len());
    let mut word = String::new();
    let word_char = |c: char| c.is_alphanumeric() || c == '_';
    for c in s.chars().chain(std::iter::once(' ')) {
        if word_char(c) {
            word.push(c);
            continue;
        }
        if !matches!(word.as_str(), "a" | "an" | "the") {
            out.push_str(&word);
        } else {
            out.push(' ');
        }
        word.clear();
        out.push(c);
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// SQuAD's token F1 of a prediction against one gold answer.
fn token_f1(pred: &str, gold: &str) -> f64 {
    let (p, g) = (squad_normalize(pred), squad_normalize(gold));
    let (p, g): (Vec<&str>, Vec<&str>) = (p.split_whitespace().collect(), g.split_whitespace().collect());
    let mut counts: HashMap<&str, i64> = HashMap::new();
    for t in &g {
        *counts.entry(t).or_default() += 1;
    }
    let mut same = 0;
    for t in &p {
        if let Some(c) = counts.get_mut(t).filter(|c| **c > 0) {
            *c -= 1;
            same += 1;
        }
    }
    if same == 0 {
        return 0.0;
    }
    let (precision, recall) = (same as f64 / p.len() as f64, same as f64 / g.len() as f64);
    2.0 * precision * recall / (precision + recall)
}

/// A question as the files' rows are matched on: lower-case ASCII letters and digits.
fn question_key(q: &str) -> String {
    q.to_lowercase().chars().filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit()).collect()
}

fn yes_no(v: Option<&String>) -> Option<f64> {
    match v.map(String::as_str) {
        Some("Yes") => Some(1.0),
        Some("No") => Some(0.0),
        _ => None,
    }
}

/// qa-eval's NQ301: exact match, token F1 and BEM against the gold answers, and the
/// InstructGPT, GPT-4 and Vicuna evaluators' Yes/No, on each model answer the human
/// raters judged acceptable or not (the label).
pub fn nq_qa_eval(input: &Path) -> Result<ReleasedJury, DatasetError> {
    let data = input.join("data");
    let mut files = Vec::new();
    for name in ["human", "BEM", "gpt-4", "text-davinci-003"] {
        files.push(delimited(&data.join(format!("NQ301_{name}.tsv")), b'\t')?.1);
    }
    let n = files[0].len();
    if files.iter().any(|f| f.len() != n) {
        return Err(fail(&data, "the four NQ301 files differ in length"));
    }
    let field = |r: &Row, c: &str| r.get(c).cloned().unwrap_or_default();
    let [human, bem, gpt4, davinci] = &files[..] else { unreachable!("four files were read") };
    for (i, h) in human.iter().enumerate() {
        let key = question_key(&field(h, "Question"));
        if files.iter().any(|f| question_key(&field(&f[i], "Question")) != key) {
            return Err(fail(&data, format!("row {i}: the files are not in the same order")));
        }
    }
    let outputs = data.join("model_outputs");
    let vicuna_files = listing(&outputs, |n| n.starts_with("NQ301_") && n.ends_with("_eval-vicuna.tsv"))?;
    if vicuna_files.is_empty() {
        return Err(fail(&outputs, "no NQ301_*_eval-vicuna.tsv"));
    }
    let mut vicuna: HashMap<(String, String), Vec<f64>> = HashMap::new();
    for (_, path) in vicuna_files {
        for r in delimited(&path, b'\t')?.1 {
            let v = field(&r, "vicuna");
            if v == "0" || v == "1" {
                let key = (question_key(&field(&r, "Question")), field(&r, "Model answer").trim().to_owned());
                vicuna.entry(key).or_default().push(if v == "1" { 1.0 } else { 0.0 });
            }
        }
    }
    let mut b = Builder::default();
    for (i, (((h, bem_row), g), d)) in human.iter().zip(bem).zip(gpt4).zip(davinci).enumerate() {
        let Some(label) = yes_no(h.get("Acceptable?")) else { continue };
        let (ex, answer) = (format!("nq301-{i:04}"), field(h, "Model answer"));
        let gold_text = field(bem_row, "Gold answers");
        let golds: Vec<&str> = gold_text.split(" | ").map(str::trim).filter(|x| !x.is_empty()).collect();
        if golds.is_empty() {
            return Err(fail(&data, format!("row {i}: no gold answers")));
        }
        let normal = squad_normalize(&answer);
        let em = if golds.iter().any(|x| squad_normalize(x) == normal) { 1.0 } else { 0.0 };
        let probs: Vec<Vec<serde_json::Value>> = serde_json::from_str(&field(bem_row, "BEM probs per gold answer"))
            .map_err(|e| fail(&data, format!("row {i}: BEM probs: {e}")))?;
        let bem = probs.iter().filter_map(|p| super::number(p.get(1)?)).fold(f64::NEG_INFINITY, f64::max);
        b.vote(&ex, "em", em);
        b.vote(&ex, "f1", golds.iter().map(|x| token_f1(&answer, x)).fold(f64::NEG_INFINITY, f64::max));
        b.vote(&ex, "bem", bem);
        if let Some(v) = yes_no(d.get("Acceptable?")) {
            b.vote(&ex, "instructgpt-eval", v);
        }
        if let Some(v) = yes_no(g.get("Acceptable?")) {
            b.vote(&ex, "gpt4-eval", v);
        }
        if let Some(v) = vicuna.get(&(question_key(&field(h, "Question")), answer.trim().to_owned())) {
            b.vote(&ex, "vicuna-eval", v.iter().sum::<f64>() / v.len() as f64);
        }
        b.labels.insert(ex, label as usize);
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_normalised_and_scored_as_squad_does() {
        assert_eq!(squad_normalize("The Eiffel-Tower, in a  city!"), "eiffeltower in city");
        assert_eq!(squad_normalize("Anne and an apple"), "anne and apple");
        assert_eq!(token_f1("the cat sat", "a cat sat down"), 2.0 * (2.0 / 2.0) * (2.0 / 3.0) / (1.0 + 2.0 / 3.0));
        assert_eq!(token_f1("dog", "cat"), 0.0);
        assert_eq!(question_key("Who's there? 2 B"), "whosthere2b");
    }
}
