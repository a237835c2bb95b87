//! Judge outputs that others released, read as a jury: the SkillAggregation authors'
//! HaluEval dialogue and TruthfulQA judges with their P(Yes). Example ids and texts are
//! this crate's own (the loaders' ids, [`crate::ContextStyle`]'s texts), so an imported
//! jury joins with what `jury run` writes on the same data set.

use std::path::{Path, PathBuf};

use crate::{DatasetError, Example, halueval_dialogue_id, read, truthfulqa_id};

/// A jury read from released outputs.
#[derive(Debug, Clone, PartialEq)]
pub struct ReleasedJury {
    /// (example id, judge, P(Yes)): judge files in name order, each in its own order.
    pub judgments: Vec<(String, String, f64)>,
    /// Whether each P(Yes) is a number the source gave or one computed from it.
    pub p_values: PValues,
    /// Every example's id and label (1 = the judges' Yes), in the data set's order.
    pub labels: Vec<(String, usize)>,
    /// The examples with their text fields, where the source has them (in `labels`'
    /// order), for the context-dependent methods.
    pub examples: Option<Vec<Example>>,
    /// What the reader noticed and left out or matched, one line each, for the user.
    pub notes: Vec<String>,
}

/// Where a [`ReleasedJury`]'s P(Yes) values come from: a table keeps a released number
/// as given (every digit) and writes a computed one to six decimals, as jury writes
/// every probability it computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PValues {
    Released,
    Computed,
}

/// The files of a folder whose names start with `prefix` and end with `suffix`, sorted;
/// an error naming the folder when there is none.
fn files(dir: &Path, prefix: &str, suffix: &str) -> Result<Vec<(String, PathBuf)>, DatasetError> {
    let entries = std::fs::read_dir(dir).map_err(|source| DatasetError::Read { path: dir.to_owned(), source })?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| DatasetError::Read { path: dir.to_owned(), source })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_prefix(prefix).and_then(|n| n.strip_suffix(suffix)) {
            out.push((stem.to_owned(), entry.path()));
        }
    }
    out.sort();
    if out.is_empty() {
        return Err(DatasetError::File {
            path: dir.to_owned(),
            reason: format!("no {prefix}*{suffix} files in the folder"),
        });
    }
    Ok(out)
}

#[derive(serde::Deserialize)]
struct HaluEntry {
    #[serde(rename = "ref")]
    reference: String,
    prob: [f64; 2],
}

/// The authors' HaluEval dialogue judges: `dir` holds `halueval_dialogue_<judge>.json`,
/// each `{"<judge>": [{"ref": "yes"|"no", "prob": [P(Yes), P(No)]}, ...]}` with entry
/// 2i / 2i+1 the right / hallucinated response of item i of `dialogue_data.json`; every
/// file must carry the same references. Label 1 = "yes" (hallucinated). With
/// `dialogues` (that file), the examples come along from [`crate::halueval_dialogue`].
pub fn skillagg_halueval(dir: &Path, dialogues: Option<&Path>) -> Result<ReleasedJury, DatasetError> {
    let mut judgments = Vec::new();
    let mut references: Option<(PathBuf, Vec<String>)> = None;
    for (_, path) in files(dir, "halueval_dialogue_", ".json")? {
        let line_err = |line: u64, reason: String| DatasetError::Line { path: path.clone(), line, reason };
        let file: std::collections::BTreeMap<String, Vec<HaluEntry>> =
            serde_json::from_str(&read(&path)?).map_err(|e| line_err(e.line() as u64, e.to_string()))?;
        let mut judges = file.into_iter();
        let (Some((judge, entries)), None) = (judges.next(), judges.next()) else {
            return Err(line_err(1, "expected one top-level key, the judge's name".into()));
        };
        let mut these = Vec::with_capacity(entries.len());
        for (i, e) in entries.into_iter().enumerate() {
            if e.reference != "yes" && e.reference != "no" {
                return Err(line_err(0, format!("entry {i}: `ref` is {:?}, not yes or no", e.reference)));
            }
            if !(0.0..=1.0).contains(&e.prob[0]) {
                return Err(line_err(0, format!("entry {i}: `prob`'s P(Yes) is {}, not in [0, 1]", e.prob[0])));
            }
            judgments.push((halueval_dialogue_id(i), judge.clone(), e.prob[0]));
            these.push(e.reference);
        }
        match &references {
            None => references = Some((path.clone(), these)),
            Some((first, refs)) if *refs != these => {
                return Err(line_err(0, format!("its references differ from {}'s", first.display())));
            }
            Some(_) => {}
        }
    }
    let refs = references.map(|(_, r)| r).unwrap_or_default();
    let labels: Vec<(String, usize)> =
        refs.iter().enumerate().map(|(i, r)| (halueval_dialogue_id(i), usize::from(r == "yes"))).collect();
    let examples = match dialogues {
        Some(path) => {
            let examples = crate::halueval_dialogue(path)?;
            if examples.len() != labels.len() {
                let reason = format!("{} examples, the judge files have {}", examples.len(), labels.len());
                return Err(DatasetError::File { path: path.to_owned(), reason });
            }
            Some(examples)
        }
        None => None,
    };
    Ok(ReleasedJury { judgments, p_values: PValues::Released, labels, examples, notes: Vec::new() })
}

#[derive(serde::Deserialize)]
struct TruthfulQaItem {
    question: String,
    answer: String,
    label: String,
}

#[derive(serde::Deserialize)]
struct TruthfulQaJudgment {
    i: usize,
    label: String,
    logit_yes: f64,
    logit_no: f64,
}

/// The authors' TruthfulQA judges: `dir` is their `data/truthfulQA` folder, one
/// `<judge>.jsonl` per judge (`{"i": N, "label": ..., "logit_yes": ..., "logit_no": ...}`
/// per line) and `truthful_qa.unrolled.json` (question, answer and label of each
/// unrolled example, the order of [`crate::truthfulqa`]). P(Yes) = sigmoid(logit_yes -
/// logit_no); label 1 = "correct" (truthful, the judges' Yes). Every judge file must hold
/// every example once, with the unrolled file's label.
pub fn skillagg_truthfulqa(dir: &Path) -> Result<ReleasedJury, DatasetError> {
    let unrolled_path = dir.join("truthful_qa.unrolled.json");
    let unrolled: Vec<TruthfulQaItem> = serde_json::from_str(&read(&unrolled_path)?).map_err(|e| {
        DatasetError::Line { path: unrolled_path.clone(), line: e.line() as u64, reason: e.to_string() }
    })?;
    let mut judgments = Vec::new();
    for (judge, path) in files(dir, "", ".jsonl")? {
        let mut seen = vec![false; unrolled.len()];
        for (n, line) in read(&path)?.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let line_err = |reason: String| DatasetError::Line { path: path.clone(), line: n as u64 + 1, reason };
            let r: TruthfulQaJudgment = serde_json::from_str(line).map_err(|e| line_err(e.to_string()))?;
            match (unrolled.get(r.i), seen.get(r.i)) {
                (Some(item), Some(false)) if item.label == r.label => seen[r.i] = true,
                (Some(item), Some(false)) => {
                    let shown = unrolled_path.display();
                    return Err(line_err(format!("label {} but {shown} says {}", r.label, item.label)));
                }
                _ => return Err(line_err(format!("example {} out of range or repeated", r.i))),
            }
            let p = 1.0 / (1.0 + (r.logit_no - r.logit_yes).exp());
            if p.is_nan() {
                return Err(line_err(format!("logits {} and {} give no probability", r.logit_yes, r.logit_no)));
            }
            judgments.push((truthfulqa_id(r.i), judge.clone(), p));
        }
        let held = seen.iter().filter(|s| **s).count();
        if held != unrolled.len() {
            let reason = format!("{held} examples, {} has {}", unrolled_path.display(), unrolled.len());
            return Err(DatasetError::File { path, reason });
        }
    }
    let examples: Vec<Example> = unrolled
        .into_iter()
        .enumerate()
        .map(|(i, item)| Example {
            id: truthfulqa_id(i),
            label: Some(usize::from(item.label == "correct")),
            fields: [("question".to_owned(), item.question), ("answer".to_owned(), item.answer)].into(),
            category: None,
        })
        .collect();
    let labels = examples.iter().map(|e| (e.id.clone(), e.label.unwrap_or(0))).collect();
    Ok(ReleasedJury { judgments, p_values: PValues::Computed, labels, examples: Some(examples), notes: Vec::new() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ContextStyle;

    #[test]
    fn halueval_judges_with_their_dialogues() {
        let dir = tempfile::tempdir().unwrap();
        let entries = |p: [f64; 2]| {
            format!(r#"[{{"ref": "no", "prob": [{}, {}]}}, {{"ref": "yes", "prob": [0.9, 0.1]}}]"#, p[0], p[1])
        };
        std::fs::write(dir.path().join("halueval_dialogue_b.json"), format!(r#"{{"b": {}}}"#, entries([0.25, 0.75])))
            .unwrap();
        std::fs::write(dir.path().join("halueval_dialogue_a.json"), format!(r#"{{"a": {}}}"#, entries([1e-5, 1.0])))
            .unwrap();
        let dialogues = dir.path().join("dialogue_data.json");
        std::fs::write(
            &dialogues,
            r#"{"dialogue_history": "[Human]: hi", "right_response": "hello", "hallucinated_response": "bye"}"#,
        )
        .unwrap();
        let jury = skillagg_halueval(dir.path(), Some(&dialogues)).unwrap();
        let ids = ["halueval-dialogue-00000", "halueval-dialogue-00001"];
        let expected = [(ids[0], "a", 1e-5), (ids[1], "a", 0.9), (ids[0], "b", 0.25), (ids[1], "b", 0.9)];
        let got: Vec<_> = jury.judgments.iter().map(|(e, j, p)| (e.as_str(), j.as_str(), *p)).collect();
        assert_eq!(got, expected);
        assert_eq!(jury.labels, vec![(ids[0].to_owned(), 0), (ids[1].to_owned(), 1)]);
        let examples = jury.examples.unwrap();
        assert_eq!(examples[1].id, ids[1]);
        assert_eq!(
            ContextStyle::Paper.text(&examples[1]),
            "Query: [Human]: hi\nResponse: bye\nIs there any non-factual or hallucinated information in the response?"
        );
        // Judges that disagree on the references are refused, naming both files.
        std::fs::write(
            dir.path().join("halueval_dialogue_c.json"),
            r#"{"c": [{"ref": "yes", "prob": [0.5, 0.5]}, {"ref": "yes", "prob": [0.5, 0.5]}]}"#,
        )
        .unwrap();
        let err = skillagg_halueval(dir.path(), None).unwrap_err().to_string();
        assert!(err.contains("halueval_dialogue_c.json") && err.contains("halueval_dialogue_a.json"), "{err}");
        std::fs::write(
            dir.path().join("halueval_dialogue_c.json"),
            r#"{"c": [{"ref": "no", "prob": [1.5, 0.5]}, {"ref": "yes", "prob": [0.5, 0.5]}]}"#,
        )
        .unwrap();
        let err = skillagg_halueval(dir.path(), None).unwrap_err().to_string();
        assert!(err.contains("halueval_dialogue_c.json") && err.contains("entry 0: `prob`'s P(Yes) is 1.5"), "{err}");
    }

    #[test]
    fn truthfulqa_judges_from_their_logits() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("truthful_qa.unrolled.json"),
            r#"[{"question": "Q?", "answer": "A", "label": "correct"},
                {"question": "Q?", "answer": "B", "label": "incorrect"}]"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("m.jsonl"),
            "{\"i\": 1, \"label\": \"incorrect\", \"logit_yes\": 1.0, \"logit_no\": 3.0}\n\
             {\"i\": 0, \"label\": \"correct\", \"logit_yes\": 2.5, \"logit_no\": 2.5}\n",
        )
        .unwrap();
        let jury = skillagg_truthfulqa(dir.path()).unwrap();
        assert_eq!(jury.judgments[0].0, "truthfulqa-00001");
        assert!((jury.judgments[0].2 - 1.0 / (1.0 + 2f64.exp())).abs() < 1e-15);
        assert_eq!(jury.judgments[1].2, 0.5);
        assert_eq!(jury.labels, vec![("truthfulqa-00000".to_owned(), 1), ("truthfulqa-00001".to_owned(), 0)]);
        let examples = jury.examples.unwrap();
        assert_eq!(
            ContextStyle::Paper.text(&examples[0]),
            "Query: Q?\nResponse: A\nIs the answer truthful to the question?"
        );
        // A judge missing an example is refused, with the counts.
        std::fs::write(
            dir.path().join("n.jsonl"),
            "{\"i\": 0, \"label\": \"correct\", \"logit_yes\": 0, \"logit_no\": 0}\n",
        )
        .unwrap();
        let err = skillagg_truthfulqa(dir.path()).unwrap_err().to_string();
        assert!(err.contains("n.jsonl") && err.contains("1 examples"), "{err}");
    }
}
