//! The tables jury writes for itself and reads back (a run's judgments, labels,
//! categories, contexts, failures and adaptive decisions; a simulated jury; a label
//! plan): each table's columns are named here once, for its writer below and for the
//! readers in `table.rs`, so a file a command writes is one contract.

use std::fmt::Write as _;

use crate::csv_field;

/// Every table's key column.
pub(crate) const EXAMPLE_ID: &str = "example_id";
/// The judgments tables' judge column.
pub(crate) const JUDGE: &str = "judge";
/// The binary judgments' probability of the positive verdict.
pub(crate) const P: &str = "p";
/// A multi-class judgments table's probability list (a JSON array per cell in CSV).
pub(crate) const PROBS: &str = "probs";
/// prompts.jsonl's token ids.
pub(crate) const TOKENS: &str = "tokens";
/// The labels table's class column.
pub(crate) const LABEL: &str = "label";
/// The contexts table's text column.
pub(crate) const TEXT: &str = "text";
/// The categories table's column.
pub(crate) const CATEGORY: &str = "category";
/// The label plan's column: each example's probability of being in the plan, which the
/// calibration estimators read.
pub const INCLUSION_COLUMN: &str = "inclusion_probability";
/// The label plan's column giving how many examples it drew, on every row: a plan's
/// estimators count on every planned row, so the reader refuses a plan with rows removed.
pub(crate) const PLAN_SIZE_COLUMN: &str = "plan_size";
/// The label plan's column giving how many examples it was drawn from, on every row: its
/// inclusion probabilities are chances among those, so the reader refuses the plan
/// against judgments of another number of examples.
pub(crate) const PLANNED_FROM_COLUMN: &str = "planned_from";

/// One judgment as `jury run` records it: the verdict probability and the numbers
/// behind it.
#[derive(Debug, Clone, Copy)]
pub struct RunJudgment<'a> {
    pub example_id: &'a str,
    pub judge: &'a str,
    /// P(positive) among the verdict tokens; `None` when both underflow to 0.
    pub p: Option<f64>,
    pub p_positive: f64,
    pub p_negative: f64,
    pub p_tie: Option<f64>,
    /// P(positive) + P(negative).
    pub mass: f64,
    pub n_tokens: usize,
    pub truncated: bool,
    /// Whether every verdict token's probability was observed.
    pub exact: bool,
}

/// One example's decision in an adaptive run.
#[derive(Debug, Clone)]
pub struct AdaptiveDecisionRow<'a> {
    pub example_id: &'a str,
    /// The judges asked, in the order asked.
    pub asked: Vec<&'a str>,
    /// How many of them answered.
    pub answered: usize,
    /// Why the example stopped (warm-up, settled, every-judge).
    pub stop: &'a str,
    /// The stopping model's probability after the last answer (`None` in the warm-up).
    pub confidence: Option<f64>,
}

/// Six decimals, or empty for a missing value.
fn six(p: Option<f64>) -> String {
    p.map_or(String::new(), |y| format!("{y:.6}"))
}

/// judgments.csv of `jury run`: example_id, judge, p, p_positive, p_negative, p_tie,
/// mass, n_tokens, truncated, exact.
pub fn run_judgments_csv<'a>(rows: impl IntoIterator<Item = RunJudgment<'a>>) -> String {
    let mut table = format!("{EXAMPLE_ID},{JUDGE},{P},p_positive,p_negative,p_tie,mass,n_tokens,truncated,exact\n");
    for r in rows {
        let _ = writeln!(
            table,
            "{},{},{},{:e},{:e},{},{:e},{},{},{}",
            csv_field(r.example_id),
            csv_field(r.judge),
            six(r.p),
            r.p_positive,
            r.p_negative,
            r.p_tie.map_or(String::new(), |t| format!("{t:e}")),
            r.mass,
            r.n_tokens,
            r.truncated,
            r.exact
        );
    }
    table
}

/// A binary judgments table: example_id, judge, p (six decimals).
pub fn judgments_csv<'a>(rows: impl IntoIterator<Item = (&'a str, &'a str, f64)>) -> String {
    let mut table = format!("{EXAMPLE_ID},{JUDGE},{P}\n");
    for (id, judge, p) in rows {
        let _ = writeln!(table, "{},{},{p:.6}", csv_field(id), csv_field(judge));
    }
    table
}

/// A multi-class judgments table: example_id, judge, probs (a JSON array of `n_classes`
/// probabilities: 1 for the judge's class, 0 for the others; empty for no judgment).
pub fn one_hot_judgments_csv<'a>(
    n_classes: usize,
    rows: impl IntoIterator<Item = (&'a str, &'a str, Option<usize>)>,
) -> String {
    let mut table = format!("{EXAMPLE_ID},{JUDGE},{PROBS}\n");
    for (id, judge, class) in rows {
        let probs = class.map_or(String::new(), |c| {
            let cells: Vec<&str> = (0..n_classes).map(|k| if k == c { "1.0" } else { "0.0" }).collect();
            csv_field(&format!("[{}]", cells.join(", "))).into_owned()
        });
        let _ = writeln!(table, "{},{},{probs}", csv_field(id), csv_field(judge));
    }
    table
}

/// [`judgments_csv`] with each p in the shortest text that reads back as the same number:
/// for probabilities taken from another tool's files, which keep every digit.
pub fn judgments_csv_as_given<'a>(rows: impl IntoIterator<Item = (&'a str, &'a str, f64)>) -> String {
    let mut table = format!("{EXAMPLE_ID},{JUDGE},{P}\n");
    for (id, judge, p) in rows {
        let _ = writeln!(table, "{},{},{p:?}", csv_field(id), csv_field(judge));
    }
    table
}

/// A labels table: example_id, label (the class index).
pub fn labels_csv<'a>(rows: impl IntoIterator<Item = (&'a str, usize)>) -> String {
    let mut table = format!("{EXAMPLE_ID},{LABEL}\n");
    for (id, label) in rows {
        let _ = writeln!(table, "{},{label}", csv_field(id));
    }
    table
}

/// A contexts table: example_id, text.
pub fn texts_csv<'a>(rows: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    keyed_csv(TEXT, rows)
}

/// A categories table: example_id, category.
pub fn categories_csv<'a>(rows: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    keyed_csv(CATEGORY, rows)
}

fn keyed_csv<'a>(column: &str, rows: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut table = format!("{EXAMPLE_ID},{column}\n");
    for (id, value) in rows {
        let _ = writeln!(table, "{},{}", csv_field(id), csv_field(value));
    }
    table
}

/// failures.csv of `jury run`: example_id, judge, reason (the examples a server
/// rejected for good).
pub fn failures_csv<'a>(rows: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>) -> String {
    let mut table = format!("{EXAMPLE_ID},{JUDGE},reason\n");
    for (id, judge, reason) in rows {
        let _ = writeln!(table, "{},{},{}", csv_field(id), csv_field(judge), csv_field(reason));
    }
    table
}

/// adaptive.csv of `jury run`: example_id, asked (`;` between judges), answered, stop,
/// confidence.
pub fn adaptive_decisions_csv<'a>(rows: impl IntoIterator<Item = AdaptiveDecisionRow<'a>>) -> String {
    let mut table = format!("{EXAMPLE_ID},asked,answered,stop,confidence\n");
    for r in rows {
        let _ = writeln!(
            table,
            "{},{},{},{},{}",
            csv_field(r.example_id),
            csv_field(&r.asked.join(";")),
            r.answered,
            r.stop,
            six(r.confidence)
        );
    }
    table
}

/// One judged prompt of prompts.jsonl (a run with `dump_prompts`); its field names are
/// the reader's ([`crate::read_prompts`]).
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct PromptRow<'a> {
    pub judge: &'a str,
    pub example_id: &'a str,
    /// The token ids the judge scored.
    pub tokens: &'a [u32],
}

/// prompts.jsonl: one JSON object per judged prompt, fields in [`PromptRow`]'s order.
pub fn prompts_jsonl<'a>(rows: impl IntoIterator<Item = PromptRow<'a>>) -> String {
    let mut lines = String::new();
    for r in rows {
        // A struct of strings and integers always serialises.
        let _ = writeln!(lines, "{}", serde_json::to_string(&r).unwrap_or_default());
    }
    lines
}

/// One row of a label plan: the example, its probability of being in the plan, and
/// what whoever labels it reads (the example's fields, in the order of
/// [`label_plan_csv`]'s text columns; none when the plan has none).
#[derive(Debug, Clone)]
pub struct PlanRow<'a> {
    pub example_id: &'a str,
    pub inclusion_probability: f64,
    /// The label it already has (a plan of more beside labels had), if any.
    pub label: Option<u8>,
    pub text: Vec<&'a str>,
}

/// A label plan drawn from `planned_from` examples: example_id, inclusion_probability
/// (nine decimals), plan_size (the number of rows), planned_from, `label` where a row has
/// one already (empty on the others, for whoever labels them), then `text_columns`, the
/// examples' fields for whoever labels them (the calibration reader skips them). A field
/// named as one of the plan's own columns or `label` is written `field_NAME`, so that it
/// is never read as one.
pub fn label_plan_csv(planned_from: usize, text_columns: &[&str], rows: &[PlanRow<'_>]) -> String {
    let labeled = rows.iter().any(|r| r.label.is_some());
    let mut table = format!("{EXAMPLE_ID},{INCLUSION_COLUMN},{PLAN_SIZE_COLUMN},{PLANNED_FROM_COLUMN}");
    if labeled {
        let _ = write!(table, ",{LABEL}");
    }
    for name in text_columns {
        let taken = [EXAMPLE_ID, INCLUSION_COLUMN, PLAN_SIZE_COLUMN, PLANNED_FROM_COLUMN, LABEL].contains(name);
        let _ = write!(table, ",{}", if taken { format!("field_{name}") } else { csv_field(name).into_owned() });
    }
    table.push('\n');
    for r in rows {
        let _ =
            write!(table, "{},{:.9},{},{planned_from}", csv_field(r.example_id), r.inclusion_probability, rows.len());
        if labeled {
            let _ = write!(table, ",{}", r.label.map(|l| l.to_string()).unwrap_or_default());
        }
        for i in 0..text_columns.len() {
            let _ = write!(table, ",{}", csv_field(r.text.get(i).copied().unwrap_or_default()));
        }
        table.push('\n');
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PromptRecord, read_categories, read_judgments, read_labels, read_prompts, read_texts};

    fn write(dir: &std::path::Path, name: &str, text: &str) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn what_the_writers_write_the_readers_read() {
        let dir = tempfile::tempdir().unwrap();
        let run = run_judgments_csv([
            RunJudgment {
                example_id: "a,1",
                judge: "j",
                p: Some(0.75),
                p_positive: 0.3,
                p_negative: 0.1,
                p_tie: None,
                mass: 0.4,
                n_tokens: 12,
                truncated: false,
                exact: true,
            },
            RunJudgment {
                example_id: "b",
                judge: "j",
                p: None,
                p_positive: 0.0,
                p_negative: 0.0,
                p_tie: Some(0.5),
                mass: 0.0,
                n_tokens: 3,
                truncated: true,
                exact: false,
            },
        ]);
        assert_eq!(
            run,
            "example_id,judge,p,p_positive,p_negative,p_tie,mass,n_tokens,truncated,exact\n\
             \"a,1\",j,0.750000,3e-1,1e-1,,4e-1,12,false,true\nb,j,,0e0,0e0,5e-1,0e0,3,true,false\n"
        );
        let judgments = read_judgments(&write(dir.path(), "run.csv", &run)).unwrap();
        assert_eq!(judgments.example_ids(), ["a,1", "b"]);
        let one_hot = one_hot_judgments_csv(3, [("q", "j", Some(2)), ("q", "k", None), ("r", "k", Some(0))]);
        assert_eq!(one_hot, "example_id,judge,probs\nq,j,\"[0.0, 0.0, 1.0]\"\nq,k,\nr,k,\"[1.0, 0.0, 0.0]\"\n");
        let classes = read_judgments(&write(dir.path(), "m.csv", &one_hot)).unwrap();
        assert_eq!((classes.n_classes(), classes.get(0, 0)), (3, Some(&[0.0, 0.0, 1.0][..])));
        let simple =
            read_judgments(&write(dir.path(), "j.csv", &judgments_csv([("a,1", "j", 0.25), ("b", "j", 1.0 / 3.0)])))
                .unwrap();
        assert_eq!(simple.get(1, 0).map(|p| p[1]), Some(0.333333));
        let given = [0.18477262556552887, 1e-7, 1.0, 1.0 / 3.0];
        let rows: Vec<String> = (0..given.len()).map(|n| format!("e{n}")).collect();
        let text = judgments_csv_as_given(rows.iter().zip(given).map(|(e, p)| (e.as_str(), "j", p)));
        let exact = read_judgments(&write(dir.path(), "g.csv", &text)).unwrap();
        for (n, p) in given.iter().enumerate() {
            assert_eq!(exact.get(n, 0).map(|q| q[1].to_bits()), Some(p.to_bits()), "{text}");
        }
        let labels = write(dir.path(), "l.csv", &labels_csv([("a,1", 1), ("b", 0)]));
        let (labels, extra) = read_labels(&labels, &simple).unwrap();
        assert_eq!((labels.get(0), labels.get(1), extra), (Some(1), Some(0), 0));
        let texts = read_texts(&write(dir.path(), "t.csv", &texts_csv([("a,1", "x \"y\"\nz")]))).unwrap();
        assert_eq!(texts["a,1"], "x \"y\"\nz");
        let categories = read_categories(&write(dir.path(), "c.csv", &categories_csv([("b", "Law")]))).unwrap();
        assert_eq!(categories["b"], "Law");
    }

    #[test]
    fn decisions_failures_and_plans_keep_their_columns() {
        let row = AdaptiveDecisionRow {
            example_id: "q",
            asked: vec!["a", "b"],
            answered: 2,
            stop: "settled",
            confidence: Some(0.95),
        };
        assert_eq!(
            adaptive_decisions_csv([row]),
            "example_id,asked,answered,stop,confidence\nq,a;b,2,settled,0.950000\n"
        );
        assert_eq!(failures_csv([("q", "j", "400: too long")]), "example_id,judge,reason\nq,j,400: too long\n");
        let plan = |id, p| PlanRow { example_id: id, inclusion_probability: p, label: None, text: vec![] };
        assert_eq!(
            label_plan_csv(4, &[], &[plan("q", 0.5), plan("r", 0.25)]),
            "example_id,inclusion_probability,plan_size,planned_from\nq,0.500000000,2,4\nr,0.250000000,2,4\n"
        );
        // Beside labels had, the plan carries them and leaves the new rows' cells empty.
        let had = PlanRow { label: Some(1), ..plan("p", 1.0) };
        assert_eq!(
            label_plan_csv(4, &[], &[had, plan("r", 0.25)]),
            "example_id,inclusion_probability,plan_size,planned_from,label\np,1.000000000,2,4,1\nr,0.250000000,2,4,\n"
        );
        let prompt = PromptRow { judge: "j", example_id: "q\"1", tokens: &[1, 20] };
        let lines = prompts_jsonl([prompt, PromptRow { tokens: &[], ..prompt }]);
        assert_eq!(lines.lines().next(), Some("{\"judge\":\"j\",\"example_id\":\"q\\\"1\",\"tokens\":[1,20]}"));
        let dir = tempfile::tempdir().unwrap();
        let read = read_prompts(&write(dir.path(), "prompts.jsonl", &lines)).unwrap();
        let record = |tokens: Vec<u32>| PromptRecord { judge: "j".into(), example_id: "q\"1".into(), tokens };
        assert_eq!(read, [record(vec![1, 20]), record(vec![])]);
        let bad = write(dir.path(), "bad.jsonl", "{\"judge\":\"j\",\"example_id\":\"q\",\"tokens\":[1.5]}\n");
        let err = read_prompts(&bad).unwrap_err().to_string();
        assert!(err.contains("line 1") && err.contains("tokens") && err.contains("1.5 is not a token id"), "{err}");
    }
}
