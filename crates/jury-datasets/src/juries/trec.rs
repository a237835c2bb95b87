//! Relevance judges of TREC Deep Learning passages: LLMJudge's submissions and the
//! LLM-as-a-relevance-judge comparison's qrels.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{Builder, fail, listing, six_significant};
use crate::{DatasetError, ReleasedJury, read};

/// `qid 0 docid grade` lines as {"<qid>-<docid>": grade text}; other lines skipped.
fn read_qrels(path: &Path) -> Result<BTreeMap<String, String>, DatasetError> {
    let mut out = BTreeMap::new();
    for line in read(path)?.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if let [q, _, d, grade] = parts[..] {
            out.insert(format!("{q}-{d}"), grade.to_owned());
        }
    }
    Ok(out)
}

/// LLMJudge (llm4eval): every submission's 0-3 grades on the test qrels' passages, as
/// relevant (2 or 3) or not; the label is the assessors' grade, relevant at 2.
pub fn llmjudge(input: &Path, labels_dir: &Path) -> Result<ReleasedJury, DatasetError> {
    let gold_path = labels_dir.join("data").join("llmjudge_test_qrel_idx.txt");
    let mut b = Builder::default();
    for (ex, grade) in read_qrels(&gold_path)? {
        let g: i64 = grade.parse().map_err(|_| fail(&gold_path, format!("{ex}: grade `{grade}` is not a number")))?;
        b.labels.insert(ex, usize::from(g >= 2));
    }
    if b.labels.is_empty() {
        return Err(fail(&gold_path, "no test labels read"));
    }
    let scores = input.join("submissions").join("scores");
    let runs = listing(&scores, |n| n.ends_with(".txt"))?;
    if runs.is_empty() {
        return Err(fail(&scores, "no *.txt submissions"));
    }
    for (name, path) in runs {
        let judge = name.strip_suffix(".txt").unwrap_or(&name);
        for (ex, grade) in read_qrels(&path)? {
            if b.labels.contains_key(&ex) && matches!(grade.as_str(), "0" | "1" | "2" | "3") {
                b.vote(&ex, judge, if grade.as_str() >= "2" { 1.0 } else { 0.0 });
            }
        }
    }
    Ok(b.finish())
}

const COLLECTIONS: [&str; 3] = ["dl19", "dl20", "dl21"];

/// The first collection name in a file name, as the regex
/// `(dl19|dl20|dl21|dl22|dlantique|antique)` finds it.
fn collection(name: &str) -> Option<&'static str> {
    const NAMES: [&str; 6] = ["dl19", "dl20", "dl21", "dl22", "dlantique", "antique"];
    (0..name.len())
        .filter(|&i| name.is_char_boundary(i))
        .find_map(|i| NAMES.into_iter().find(|c| name[i..].starts_with(c)))
}

/// {(qid, docid): the mean of its numeric grades} of a qrels-shaped file, by key.
fn trec_scores(path: &Path) -> Result<BTreeMap<(String, String), f64>, DatasetError> {
    let mut sums: BTreeMap<(String, String), (f64, f64)> = BTreeMap::new();
    for line in read(path)?.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if let [q, _, d, grade] = parts[..]
            && let Ok(v) = grade.parse::<f64>()
        {
            let s = sums.entry((q.to_owned(), d.to_owned())).or_default();
            *s = (s.0 + v, s.1 + 1.0);
        }
    }
    Ok(sums.into_iter().map(|(k, (sum, n))| (k, sum / n)).collect())
}

/// (judge, collection, file) for every judgment file used, sorted.
fn trec_sources(root: &Path) -> Result<Vec<(String, &'static str, PathBuf)>, DatasetError> {
    let mut out = Vec::new();
    let raw = root.join("raw qrels");
    let mut dirs = vec![(String::from("."), raw.clone())];
    while let Some((rel, dir)) = dirs.pop() {
        for (name, path) in listing(&dir, |_| true)? {
            if path.is_dir() {
                dirs.push((if rel == "." { name } else { format!("{rel}/{name}") }, path));
            } else if let Some(c) = collection(&name)
                && !matches!(rel.rsplit('/').next(), Some("weighted" | "weighted_strict"))
            {
                out.push((format!("raw/{}", rel.replace(' ', "-")), c, path));
            }
        }
    }
    let fixed = [
        ("Binary/gpt-4", "methods/gpt-4/binary"),
        ("Binary/llama3.2", "methods/llama3.2/binary"),
        ("Umbrela_zeroshot/gpt4", "methods/gpt-4/umbrela"),
        ("Exam/selfrate_binary/gpt4/exam_binary_qrels", "methods/gpt-4/exam-binary-{agg}"),
        ("Exam/selfrate_graded/gpt4/exam_graded_qrels", "methods/gpt-4/exam-graded-{agg}"),
    ];
    for (sub, judge) in fixed {
        let dir = root.join("Methods").join(sub);
        if !dir.is_dir() {
            continue;
        }
        for (name, path) in listing(&dir, |n| n.ends_with(".txt"))? {
            if let Some(c) = collection(&name) {
                let agg = if name.starts_with("qrels.max") { "max" } else { "mean" };
                out.push((judge.replace("{agg}", agg), c, path));
            }
        }
    }
    out.sort_by(|a, b| (&a.0, a.1, a.2.to_string_lossy()).cmp(&(&b.0, b.1, b.2.to_string_lossy())));
    Ok(out)
}

/// The LLM-as-a-relevance-judge comparison: every method's and raw judge's grades on
/// TREC DL 2019-2021 passages as a share of its scale's top, the label the assessors'
/// mean grade, relevant at 2.
pub fn trecdl_llm_qrels(input: &Path) -> Result<ReleasedJury, DatasetError> {
    let mut b = Builder::default();
    for c in COLLECTIONS {
        for ((q, d), g) in trec_scores(&input.join("data").join(format!("qrels.{c}-passage.txt")))? {
            b.labels.insert(format!("{c}-{q}-{d}"), usize::from(g >= 2.0));
        }
    }
    if b.labels.is_empty() {
        return Err(fail(&input.join("data"), "no qrels read"));
    }
    for (judge, c, path) in trec_sources(input)? {
        if !COLLECTIONS.contains(&c) {
            continue;
        }
        let j = judge.to_lowercase();
        let top = if j.contains("umbrela") {
            3.0
        } else if j.contains("graded") {
            5.0
        } else {
            1.0
        };
        for ((q, d), v) in trec_scores(&path)? {
            let ex = format!("{c}-{q}-{d}");
            if !b.labels.contains_key(&ex) {
                continue;
            }
            let p = v / top;
            if !(0.0..=1.0).contains(&p) {
                return Err(fail(&path, format!("score {v} outside 0..{top}")));
            }
            b.vote(&ex, &judge, six_significant(p));
        }
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_collection_named_in_a_file_name_is_found() {
        assert_eq!(collection("qrels.dl20-passage.txt"), Some("dl20"));
        assert_eq!(collection("run.dlantique.txt"), Some("dlantique"));
        assert_eq!(collection("antique-dl19.txt"), Some("antique"));
        assert_eq!(collection("notes.txt"), None);
    }
}
