//! Real juries that others released, read from their repositories' files for `jury
//! import`: relevance judges (TREC DL), QA-correctness judges (TriviaQA, NQ), pairwise
//! judges and reward models (JudgeBench, LLMBar, PandaLM), faithfulness and summarisation
//! metrics (FaithBench, FRANK), code metrics (HumanEval ICE-Score), zero-shot classifiers
//! (SALT's CSS tasks), MT metrics (WMT20 DARR) and the CARE authors' CivilComments
//! raters. docs/reproduction/real-juries.md says what each reads: the repository and
//! commit, the items, the judges, what p and the label are, and the example ids.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::{DatasetError, PValues, ReleasedJury, read};

mod comparisons;
mod pairwise;
mod qa;
mod scores;
mod trec;

pub use comparisons::{winrate_hanna, winrate_llmbar, winrate_pandalm};
pub use pairwise::{ClassJury, judgebench, llmbar_jury, pandalm, pandalm_three_class};
pub use qa::{nq_qa_eval, triviaqa_judges};
pub use scores::{care_civilcomments, faithbench, frank, humaneval_ice, salt_css, wmt20_darr};
pub use trec::{llmjudge, trecdl_llm_qrels};

/// A jury being read: judgments in the source's order, labels by example id.
#[derive(Default)]
struct Builder {
    judgments: Vec<(String, String, f64)>,
    labels: BTreeMap<String, usize>,
    notes: Vec<String>,
}

impl Builder {
    fn vote(&mut self, example: &str, judge: &str, p: f64) {
        self.judgments.push((example.to_owned(), judge.to_owned(), p));
    }

    fn finish(self) -> ReleasedJury {
        ReleasedJury {
            judgments: self.judgments,
            p_values: PValues::Released,
            labels: self.labels.into_iter().collect(),
            examples: None,
            notes: self.notes,
        }
    }
}

/// A row of a delimited file by column name.
type Row = HashMap<String, String>;

/// A delimited file's header and rows (quoted fields may span lines).
fn delimited(path: &Path, delimiter: u8) -> Result<(Vec<String>, Vec<Row>), DatasetError> {
    let text = read(path)?;
    let mut r = csv::ReaderBuilder::new().delimiter(delimiter).flexible(true).from_reader(text.as_bytes());
    let err = |e: csv::Error| DatasetError::Line {
        path: path.to_owned(),
        line: e.position().map_or(0, |p| p.line()),
        reason: e.to_string(),
    };
    let header: Vec<String> = r.headers().map_err(err)?.iter().map(str::to_owned).collect();
    let mut rows = Vec::new();
    for record in r.records() {
        let record = record.map_err(err)?;
        rows.push(header.iter().cloned().zip(record.iter().map(str::to_owned)).collect());
    }
    Ok((header, rows))
}

fn fail(path: &Path, reason: impl Into<String>) -> DatasetError {
    DatasetError::File { path: path.to_owned(), reason: reason.into() }
}

fn json(path: &Path) -> Result<Value, DatasetError> {
    serde_json::from_str(&read(path)?).map_err(|e| DatasetError::Line {
        path: path.to_owned(),
        line: e.line() as u64,
        reason: format!("not JSON: {e}"),
    })
}

/// A JSON object's members in the file's order (serde_json's map sorts them).
type Ordered = jury_io::Named<Value>;

/// The entries of `dir` whose names pass `keep`, sorted by name.
fn listing(dir: &Path, keep: impl Fn(&str) -> bool) -> Result<Vec<(String, PathBuf)>, DatasetError> {
    let entries = std::fs::read_dir(dir).map_err(|source| DatasetError::Read { path: dir.to_owned(), source })?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| DatasetError::Read { path: dir.to_owned(), source })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if keep(&name) {
            out.push((name, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// `x` rounded to six significant digits, as `format(x, ".6g")` prints it.
fn six_significant(x: f64) -> f64 {
    format!("{x:.5e}").parse().unwrap_or(x)
}

/// The logistic function, without overflow for large |x|.
fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 { 1.0 / (1.0 + (-x).exp()) } else { x.exp() / (1.0 + x.exp()) }
}

/// A number as a JSON value or a numeric string holds it.
fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A JSON value as text, as Python's `str` prints it (strings bare, True/False).
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        other => other.to_string(),
    }
}

/// Each judge's scores as the logistic of the standardised score (0.5 at the judge's
/// mean, population deviation), rows by example then judge in `names`' order; the labels
/// of the examples some judge scored.
fn standardised(
    path: &Path,
    scores: &[(String, Vec<(String, f64)>)],
    labels: BTreeMap<String, usize>,
) -> Result<ReleasedJury, DatasetError> {
    let mut rows: Vec<(usize, String, f64)> = Vec::new();
    for (order, (_, values)) in scores.iter().enumerate() {
        if values.is_empty() {
            continue;
        }
        let n = values.len() as f64;
        let mean = values.iter().map(|(_, x)| x).sum::<f64>() / n;
        let sd = (values.iter().map(|(_, x)| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
        if sd == 0.0 {
            return Err(fail(path, format!("judge `{}` gives one score to every item", scores[order].0)));
        }
        rows.extend(values.iter().map(|(ex, x)| (order, ex.clone(), 1.0 / (1.0 + (-(x - mean) / sd).exp()))));
    }
    rows.sort_by(|a, b| (&a.1, a.0).cmp(&(&b.1, b.0)));
    let mut b = Builder::default();
    for (order, ex, p) in rows {
        b.vote(&ex, &scores[order].0, p);
    }
    let seen: std::collections::HashSet<&str> = b.judgments.iter().map(|(e, _, _)| e.as_str()).collect();
    b.labels = labels.into_iter().filter(|(ex, _)| seen.contains(ex.as_str())).collect();
    Ok(b.finish())
}

/// Values by key in first-seen order; a later value for a key replaces the earlier one
/// in place (a Python dict's order).
#[derive(Default)]
struct Insertion {
    index: HashMap<String, usize>,
    values: Vec<(String, f64)>,
}

impl Insertion {
    fn set(&mut self, key: String, value: f64) {
        match self.index.get(&key) {
            Some(&i) => self.values[i].1 = value,
            None => {
                self.index.insert(key.clone(), self.values.len());
                self.values.push((key, value));
            }
        }
    }
}
