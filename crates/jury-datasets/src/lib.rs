//! Data set loaders: each turns its source files into [`Example`]s (an id, the text
//! fields a prompt template fills in, and an optional label) in a fixed, documented order.
//!
//! Invariants: example ids are stable across runs (they key the judge cache); labels use
//! class 1 for the positive verdict of the task's prompt (Yes / A); parse errors name the
//! file, line and field.

mod context;
mod dataset_address;
mod juries;
mod released;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use context::ContextStyle;
pub use dataset_address::{HubAddress, resolve, resolve_local};
pub use juries::{
    ClassJury, care_civilcomments, faithbench, frank, humaneval_ice, judgebench, llmbar_jury, llmjudge, nq_qa_eval,
    pandalm, pandalm_three_class, salt_css, trecdl_llm_qrels, triviaqa_judges, winrate_hanna, winrate_llmbar,
    winrate_pandalm, wmt20_darr,
};
pub use released::{PValues, ReleasedJury, skillagg_halueval, skillagg_truthfulqa};

/// One item to judge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    pub id: String,
    /// Template variables, e.g. `question` and `answer`.
    pub fields: BTreeMap<String, String>,
    pub label: Option<usize>,
    /// The data set's own grouping of the example (TruthfulQA's `Category`), for
    /// accuracy by subset; never shown to a judge.
    pub category: Option<String>,
}

/// A problem with a data set file.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("{}: cannot read: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{} line {line}: field `{field}`: {reason}", path.display())]
    Field { path: PathBuf, line: u64, field: String, reason: String },
    #[error("{} line {line}: {reason}", path.display())]
    Line { path: PathBuf, line: u64, reason: String },
    #[error("{}: {reason}", path.display())]
    File { path: PathBuf, reason: String },
    #[error("unknown data set `{0}` (known: {KNOWN})")]
    Unknown(String),
    #[error("`{address}` is not a hub address of the form hf://datasets/OWNER/NAME[@REVISION]/FILE")]
    HubAddress { address: String },
    #[error("{address} (hub cache {}): {reason}", cache.display())]
    Hub { address: String, cache: PathBuf, reason: String },
    #[error("{}: `{id}`: swapping answer order needs a pairwise example (fields answer_a and answer_b)", path.display())]
    NotPairwise { path: PathBuf, id: String },
}

/// Names accepted by [`load`].
pub const KNOWN: &str = "demo-facts, truthfulqa, halueval-dialogue, chatbot-arena, llmbar";

/// The data sets this crate can load, by the name configs use. `path` is a local file
/// or a hub address (`hf://datasets/OWNER/NAME[@REVISION]/FILE`, see [`resolve`]).
pub fn load(name: &str, path: &Path) -> Result<Vec<Example>, DatasetError> {
    if !KNOWN.split(", ").any(|k| k == name) {
        return Err(DatasetError::Unknown(name.to_owned()));
    }
    let local = resolve(path)?;
    let path = local.as_path();
    match name {
        "demo-facts" => demo_facts(path),
        "truthfulqa" => truthfulqa(path),
        "halueval-dialogue" => halueval_dialogue(path),
        "chatbot-arena" => chatbot_arena(path),
        "llmbar" => llmbar(path),
        other => Err(DatasetError::Unknown(other.to_owned())),
    }
}

/// A data set file's text: a regular file within jury's input size limit
/// (`jury_io::read_input`), so a FIFO or /dev/zero given as a data set is refused.
fn read(path: &Path) -> Result<String, DatasetError> {
    let text =
        jury_io::read_input_to_string(path).map_err(|source| DatasetError::Read { path: path.to_owned(), source })?;
    Ok(text.strip_prefix('\u{feff}').map(str::to_owned).unwrap_or(text))
}

fn csv_records(path: &Path) -> Result<(csv::StringRecord, Vec<(u64, csv::StringRecord)>), DatasetError> {
    let text = read(path)?;
    let mut r = csv::ReaderBuilder::new().has_headers(true).from_reader(text.as_bytes());
    let line_err = |line: u64, e: csv::Error| DatasetError::Line { path: path.to_owned(), line, reason: e.to_string() };
    let headers = r.headers().map_err(|e| line_err(1, e))?.clone();
    let mut rows = Vec::new();
    for rec in r.records() {
        let rec = rec.map_err(|e| line_err(e.position().map_or(0, |p| p.line()), e))?;
        rows.push((rec.position().map_or(0, |p| p.line()), rec));
    }
    Ok((headers, rows))
}

fn column(path: &Path, headers: &csv::StringRecord, name: &str) -> Result<usize, DatasetError> {
    headers.iter().position(|h| h.trim() == name).ok_or_else(|| DatasetError::Field {
        path: path.to_owned(),
        line: 1,
        field: name.to_owned(),
        reason: format!("missing column (found: {})", headers.iter().collect::<Vec<_>>().join(", ")),
    })
}

/// The team's demo set (`datasets/demo-facts.csv`): `id,statement,label` with label
/// `true`/`false` (true = 1).
pub fn demo_facts(path: &Path) -> Result<Vec<Example>, DatasetError> {
    let (headers, rows) = csv_records(path)?;
    let (id, st, lab) =
        (column(path, &headers, "id")?, column(path, &headers, "statement")?, column(path, &headers, "label")?);
    rows.into_iter()
        .map(|(line, r)| {
            let label = match r.get(lab).map(str::trim) {
                Some("true") => 1,
                Some("false") => 0,
                other => {
                    return Err(DatasetError::Field {
                        path: path.to_owned(),
                        line,
                        field: "label".into(),
                        reason: format!("{other:?} is not true or false"),
                    });
                }
            };
            Ok(Example {
                id: r.get(id).unwrap_or_default().trim().to_owned(),
                fields: BTreeMap::from([("statement".to_owned(), r.get(st).unwrap_or_default().trim().to_owned())]),
                label: Some(label),
                category: None,
            })
        })
        .collect()
}

/// The id of TruthfulQA's unrolled example `n`.
fn truthfulqa_id(n: usize) -> String {
    format!("truthfulqa-{n:05}")
}

/// The id of HaluEval dialogue's example `n` (item n / 2's right or hallucinated response).
fn halueval_dialogue_id(n: usize) -> String {
    format!("halueval-dialogue-{n:05}")
}

/// TruthfulQA v0 (`TruthfulQA.csv`, 817 questions) unrolled as the SkillAggregation paper did: per
/// question, one example per `Correct Answers` entry (label 1, truthful) then one per
/// `Incorrect Answers` entry (label 0), splitting on `;`, trimming, and keeping empty
/// pieces. The v0 file gives exactly 5,918 examples. Ids: `truthfulqa-00000`, ...
pub fn truthfulqa(path: &Path) -> Result<Vec<Example>, DatasetError> {
    let (headers, rows) = csv_records(path)?;
    let q = column(path, &headers, "Question")?;
    let category = headers.iter().position(|h| h == "Category");
    let correct = column(path, &headers, "Correct Answers")?;
    let incorrect = column(path, &headers, "Incorrect Answers")?;
    let mut out = Vec::new();
    for (_, r) in rows {
        let question = r.get(q).unwrap_or_default().trim().to_owned();
        for (col, label) in [(correct, 1), (incorrect, 0)] {
            for answer in r.get(col).unwrap_or_default().trim().split(';') {
                out.push(Example {
                    id: truthfulqa_id(out.len()),
                    fields: BTreeMap::from([
                        ("question".to_owned(), question.clone()),
                        ("answer".to_owned(), answer.trim().to_owned()),
                    ]),
                    label: Some(label),
                    category: category.and_then(|c| r.get(c)).map(|c| c.trim().to_owned()).filter(|c| !c.is_empty()),
                });
            }
        }
    }
    Ok(out)
}

#[derive(serde::Deserialize)]
struct HaluDialogue {
    dialogue_history: String,
    right_response: String,
    hallucinated_response: String,
}

/// HaluEval dialogue (`dialogue_data.json`, JSON Lines, 10,000 items): example 2i is
/// item i's right response (label 0), 2i+1 its hallucinated one (label 1 = Yes).
/// Ids `halueval-dialogue-00000`, ..., as [`skillagg_halueval`] gives the authors' judges.
pub fn halueval_dialogue(path: &Path) -> Result<Vec<Example>, DatasetError> {
    let text = read(path)?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let item: HaluDialogue = serde_json::from_str(line).map_err(|e| DatasetError::Line {
            path: path.to_owned(),
            line: i as u64 + 1,
            reason: e.to_string(),
        })?;
        for (response, label) in [(item.right_response, 0), (item.hallucinated_response, 1)] {
            out.push(Example {
                id: halueval_dialogue_id(out.len()),
                fields: BTreeMap::from([
                    ("history".to_owned(), item.dialogue_history.clone()),
                    ("response".to_owned(), response),
                ]),
                label: Some(label),
                category: None,
            });
        }
    }
    Ok(out)
}

/// Chatbot Arena, Kaggle `lmsys-chatbot-arena` `train.csv` (columns `id`, `model_a`,
/// `model_b`, `prompt`, `response_a`, `response_b`, `winner_model_a`, `winner_model_b`,
/// `winner_tie`; `prompt` and the responses are JSON lists of turns). Kept as the SkillAggregation paper
/// did: single-turn conversations without a tie (34,297 rows of the full file). Label 1 =
/// A won. Ids `arena-<id>`; `model_a` / `model_b` ride along as fields.
pub fn chatbot_arena(path: &Path) -> Result<Vec<Example>, DatasetError> {
    let (headers, rows) = csv_records(path)?;
    let col = |name: &str| column(path, &headers, name);
    let (id, ma, mb, prompt, ra, rb, wa, wb, wt) = (
        col("id")?,
        col("model_a")?,
        col("model_b")?,
        col("prompt")?,
        col("response_a")?,
        col("response_b")?,
        col("winner_model_a")?,
        col("winner_model_b")?,
        col("winner_tie")?,
    );
    let mut out = Vec::new();
    for (line, r) in rows {
        let field_err = |field: &str, reason: String| DatasetError::Field {
            path: path.to_owned(),
            line,
            field: field.to_owned(),
            reason,
        };
        let turns = |c: usize, field: &str| -> Result<Vec<String>, DatasetError> {
            let v: Vec<Option<String>> = serde_json::from_str(r.get(c).unwrap_or_default())
                .map_err(|e| field_err(field, format!("not a JSON list of strings: {e}")))?;
            Ok(v.into_iter().map(Option::unwrap_or_default).collect())
        };
        let flag = |c: usize, field: &str| -> Result<bool, DatasetError> {
            match r.get(c).map(str::trim) {
                Some("1") => Ok(true),
                Some("0") => Ok(false),
                other => Err(field_err(field, format!("{other:?} is not 0 or 1"))),
            }
        };
        let (a, b, tie) = (flag(wa, "winner_model_a")?, flag(wb, "winner_model_b")?, flag(wt, "winner_tie")?);
        if [a, b, tie].iter().filter(|&&x| x).count() != 1 {
            return Err(DatasetError::Line {
                path: path.to_owned(),
                line,
                reason: "exactly one winner flag must be 1".into(),
            });
        }
        let question = turns(prompt, "prompt")?;
        if tie || question.len() != 1 {
            continue;
        }
        let (resp_a, resp_b) = (turns(ra, "response_a")?, turns(rb, "response_b")?);
        let first = |v: Vec<String>| v.into_iter().next().unwrap_or_default();
        out.push(Example {
            id: format!("arena-{}", r.get(id).unwrap_or_default().trim()),
            fields: BTreeMap::from([
                ("question".to_owned(), first(question)),
                ("answer_a".to_owned(), first(resp_a)),
                ("answer_b".to_owned(), first(resp_b)),
                ("model_a".to_owned(), r.get(ma).unwrap_or_default().trim().to_owned()),
                ("model_b".to_owned(), r.get(mb).unwrap_or_default().trim().to_owned()),
            ]),
            label: Some(usize::from(a)),
            category: None,
        });
    }
    Ok(out)
}

#[derive(serde::Deserialize)]
struct BarPair {
    input: String,
    output_1: String,
    output_2: String,
    label: u8,
}

/// LLMBar-style pairs (`dataset.json` of LLMBar and its processed MT-Bench, LLMEval2,
/// FairEval sets): a JSON array of `{input, output_1, output_2, label: 1|2}`. Output 1 is
/// shown as A; label 1 (A better) is class 1. Ids `llmbar-00000`, ... in file order.
pub fn llmbar(path: &Path) -> Result<Vec<Example>, DatasetError> {
    let text = read(path)?;
    let pairs: Vec<BarPair> = serde_json::from_str(&text).map_err(|e| DatasetError::Line {
        path: path.to_owned(),
        line: e.line() as u64,
        reason: e.to_string(),
    })?;
    pairs
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let label = match p.label {
                1 => 1,
                2 => 0,
                other => {
                    return Err(DatasetError::Field {
                        path: path.to_owned(),
                        line: 0,
                        field: format!("[{i}].label"),
                        reason: format!("{other} is not 1 or 2"),
                    });
                }
            };
            Ok(Example {
                id: format!("llmbar-{i:05}"),
                fields: BTreeMap::from([
                    ("question".to_owned(), p.input),
                    ("answer_a".to_owned(), p.output_1),
                    ("answer_b".to_owned(), p.output_2),
                ]),
                label: Some(label),
                category: None,
            })
        })
        .collect()
}

/// Suffix of the id of an example shown with its answers swapped.
pub const SWAPPED_SUFFIX: &str = "~swapped";

/// The same pairwise example with answers A and B exchanged (id + [`SWAPPED_SUFFIX`],
/// label flipped), for judging both orders (position-bias de-biasing). `path` names the
/// data set in the error for a non-pairwise example.
pub fn swapped(example: &Example, path: &Path) -> Result<Example, DatasetError> {
    let not_pairwise = || DatasetError::NotPairwise { path: path.to_owned(), id: example.id.clone() };
    let mut fields = example.fields.clone();
    let a = fields.remove("answer_a").ok_or_else(not_pairwise)?;
    let b = fields.remove("answer_b").ok_or_else(not_pairwise)?;
    fields.insert("answer_a".to_owned(), b);
    fields.insert("answer_b".to_owned(), a);
    if let (Some(ma), Some(mb)) = (fields.remove("model_a"), fields.remove("model_b")) {
        fields.insert("model_a".to_owned(), mb);
        fields.insert("model_b".to_owned(), ma);
    }
    Ok(Example {
        id: format!("{}{SWAPPED_SUFFIX}", example.id),
        fields,
        label: example.label.map(|l| 1 - l.min(1)),
        category: example.category.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// A data set path that is a device or a FIFO is refused at once (/dev/zero grew
    /// without end, a FIFO blocked for ever), naming the path and what it is.
    #[test]
    fn a_device_or_fifo_is_not_read_as_a_data_set() {
        let e = load("demo-facts", Path::new("/dev/zero")).unwrap_err().to_string();
        assert_eq!(e, "/dev/zero: cannot read: a character device, not a regular file; jury reads only regular files");
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("facts.csv");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        let e = load("demo-facts", &fifo).unwrap_err().to_string();
        assert!(
            e.ends_with(
                "facts.csv: cannot read: a FIFO (named pipe), not a regular file; jury reads only regular files"
            ),
            "{e}"
        );
    }

    #[test]
    fn truthfulqa_unrolls_keeping_empty_pieces() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "t.csv",
            "\u{feff}Type,Category,Question,Best Answer,Correct Answers,Incorrect Answers,Source\n\
             A,Misc,\"Is water wet?\",Yes,\"Yes; It is;\",\"No\",x\n",
        );
        let ex = truthfulqa(&p).unwrap();
        let answers: Vec<(&str, Option<usize>)> = ex.iter().map(|e| (e.fields["answer"].as_str(), e.label)).collect();
        assert_eq!(answers, vec![("Yes", Some(1)), ("It is", Some(1)), ("", Some(1)), ("No", Some(0))]);
        assert_eq!(ex[3].id, "truthfulqa-00003");
        assert!(ex.iter().all(|e| e.category.as_deref() == Some("Misc")), "the Category column");
    }

    #[test]
    fn halueval_pairs_right_then_hallucinated() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "d.json",
            "{\"knowledge\":\"k\",\"dialogue_history\":\"[Human]: hi\",\"right_response\":\"r\",\"hallucinated_response\":\"h\"}\n",
        );
        let ex = halueval_dialogue(&p).unwrap();
        assert_eq!(ex.len(), 2);
        assert_eq!((ex[0].fields["response"].as_str(), ex[0].label), ("r", Some(0)));
        assert_eq!((ex[1].fields["response"].as_str(), ex[1].label), ("h", Some(1)));
        let bad = write(dir.path(), "b.json", "{\"dialogue_history\": 3}\n");
        assert!(halueval_dialogue(&bad).unwrap_err().to_string().contains("b.json line 1"));
    }

    #[test]
    fn demo_labels_must_be_true_or_false() {
        let dir = tempfile::tempdir().unwrap();
        let p =
            write(dir.path(), "f.csv", "id,statement,label\nf1,Water boils at 100 C at sea level.,true\nf2,x,maybe\n");
        let e = demo_facts(&p).unwrap_err().to_string();
        assert!(e.contains("f.csv line 3: field `label`"), "{e}");
    }

    #[test]
    fn arena_keeps_single_turn_non_ties() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "train.csv",
            "id,model_a,model_b,prompt,response_a,response_b,winner_model_a,winner_model_b,winner_tie\n\
             1,m1,m2,\"[\"\"Hi?\"\"]\",\"[\"\"a\"\"]\",\"[null]\",0,1,0\n\
             2,m1,m2,\"[\"\"Hi?\"\", \"\"More\"\"]\",\"[\"\"a\"\",\"\"b\"\"]\",\"[\"\"c\"\",\"\"d\"\"]\",1,0,0\n\
             3,m1,m2,\"[\"\"Q\"\"]\",\"[\"\"a\"\"]\",\"[\"\"b\"\"]\",0,0,1\n\
             4,m3,m4,\"[\"\"Q2\"\"]\",\"[\"\"x\"\"]\",\"[\"\"y\"\"]\",1,0,0\n",
        );
        let ex = chatbot_arena(&p).unwrap();
        assert_eq!(ex.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(), ["arena-1", "arena-4"]);
        assert_eq!((ex[0].label, ex[0].fields["answer_b"].as_str()), (Some(0), ""));
        assert_eq!((ex[1].label, ex[1].fields["question"].as_str()), (Some(1), "Q2"));
        let s = swapped(&ex[1], &p).unwrap();
        assert_eq!((s.id.as_str(), s.label), ("arena-4~swapped", Some(0)));
        assert_eq!((s.fields["answer_a"].as_str(), s.fields["model_a"].as_str()), ("y", "m4"));
        let bad = write(
            dir.path(),
            "bad.csv",
            "id,model_a,model_b,prompt,response_a,response_b,winner_model_a,winner_model_b,winner_tie\n\
             1,m1,m2,not json,x,y,0,1,0\n",
        );
        let e = chatbot_arena(&bad).unwrap_err().to_string();
        assert!(e.contains("bad.csv line 2: field `prompt`"), "{e}");
    }

    #[test]
    fn llmbar_label_one_is_a() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "dataset.json",
            r#"[{"input":"q","output_1":"o1","output_2":"o2","label":2},{"input":"q2","output_1":"a","output_2":"b","label":1}]"#,
        );
        let ex = llmbar(&p).unwrap();
        assert_eq!(ex.iter().map(|e| e.label).collect::<Vec<_>>(), [Some(0), Some(1)]);
        assert_eq!(ex[0].fields["answer_a"], "o1");
        let bad = write(dir.path(), "bad.json", r#"[{"input":"q","output_1":"a","output_2":"b","label":3}]"#);
        assert!(llmbar(&bad).unwrap_err().to_string().contains("[0].label"));
        let demo = Example { id: "d".into(), fields: BTreeMap::new(), label: Some(1), category: None };
        assert!(swapped(&demo, &p).unwrap_err().to_string().contains("pairwise"));
    }

    /// The real files, when this checkout sits beside ../shared (skipped otherwise).
    #[test]
    fn real_data_counts() {
        let root =
            Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()))
                .join("../../../shared/data");
        let tqa = root.join("truthfulqa/v0/TruthfulQA.csv");
        if tqa.exists() {
            let ex = truthfulqa(&tqa).unwrap();
            assert_eq!(ex.len(), 5918);
            assert_eq!(ex.iter().filter(|e| e.label == Some(1)).count(), 2600);
        }
        let halu = root.join("halueval/dialogue_data.json");
        if halu.exists() {
            assert_eq!(halueval_dialogue(&halu).unwrap().len(), 20_000);
        }
        let mt = root.join("llmbar/Processed/MT-Bench/dataset.json");
        if mt.exists() {
            let ex = llmbar(&mt).unwrap();
            assert_eq!((ex.len(), ex.iter().filter(|e| e.label == Some(1)).count()), (200, 101));
        }
    }
}
