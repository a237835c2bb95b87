//! The three views of an aggregation run: metrics.json, predictions.csv and the table
//! printed to the terminal. Scores come from jury-metrics; this module only lays out.

use std::fmt::Write as _;

use jury_aggregate::{Aggregation, Diagnostics};
use jury_core::{Judgments, Labels};
use jury_io::csv_field;
use jury_metrics::{accuracy, brier, expected_calibration_error, judge_accuracies};
use serde_json::{Value, json};

const ECE_BINS: usize = 10;

/// One method's result and how long it took.
pub(crate) struct MethodRun {
    pub(crate) name: &'static str,
    pub(crate) aggregation: Aggregation,
    pub(crate) seconds: f64,
}

/// Each judge's share of the examples it judged.
fn coverage(j: &Judgments) -> Vec<f64> {
    let mut count = vec![0usize; j.n_judges()];
    j.entries().for_each(|(_, k, _)| count[k] += 1);
    count.into_iter().map(|c| c as f64 / j.n_examples() as f64).collect()
}

pub(crate) fn metrics_json(j: &Judgments, labels: Option<&Labels>, runs: &[MethodRun]) -> Value {
    let judge_acc = labels.map(|l| judge_accuracies(j, l)).unwrap_or_else(|| vec![None; j.n_judges()]);
    let cover = coverage(j);
    let judges: serde_json::Map<String, Value> = j
        .judge_names()
        .iter()
        .enumerate()
        .map(|(k, name)| (name.clone(), json!({ "accuracy": judge_acc[k], "coverage": cover[k] })))
        .collect();
    let methods: serde_json::Map<String, Value> = runs
        .iter()
        .map(|r| {
            let a = &r.aggregation;
            let mut m = json!({
                "accuracy": labels.and_then(|l| accuracy(a.labels(), l)),
                "brier": labels.and_then(|l| brier(a.posteriors(), l)),
                "ece": labels.and_then(|l| expected_calibration_error(a.posteriors(), l, ECE_BINS)),
                "seconds": r.seconds,
            });
            let extra = match a.diagnostics() {
                Diagnostics::Counting { ties, unjudged } => json!({ "ties": ties, "unjudged": unjudged }),
                Diagnostics::DawidSkene(em) => {
                    let confusion: serde_json::Map<String, Value> = j
                        .judge_names()
                        .iter()
                        .zip(&em.params.confusion)
                        .map(|(name, c)| {
                            let rows: Vec<Vec<f64>> = (0..c.n_classes()).map(|t| c.row(t).to_vec()).collect();
                            (name.clone(), json!(rows))
                        })
                        .collect();
                    json!({
                        "iterations": em.iterations,
                        "converged": em.converged,
                        "log_likelihood": em.log_likelihood.last(),
                        "class_prior": em.params.class_prior,
                        "confusion": confusion,
                        "ties": em.ties,
                        "unjudged": em.unjudged,
                    })
                }
            };
            if let (Value::Object(m), Value::Object(extra)) = (&mut m, extra) {
                m.extend(extra);
            }
            (r.name.to_owned(), m)
        })
        .collect();
    json!({
        "n_examples": j.n_examples(),
        "n_judges": j.n_judges(),
        "n_classes": j.n_classes(),
        "n_labeled": labels.map(Labels::n_labeled),
        "judges": judges,
        "methods": methods,
    })
}

/// One row per example: id, reference label (when given), then per method the
/// posterior (`<m>_p`, P(positive), for binary; `<m>_p0..` otherwise) and hard label.
pub(crate) fn predictions_csv(j: &Judgments, labels: Option<&Labels>, runs: &[MethodRun]) -> String {
    let c = j.n_classes();
    let mut out = String::from("example_id");
    if labels.is_some() {
        out.push_str(",label");
    }
    for r in runs {
        if c == 2 {
            let _ = write!(out, ",{0}_p,{0}_label", r.name);
        } else {
            (0..c).for_each(|k| {
                let _ = write!(out, ",{}_p{k}", r.name);
            });
            let _ = write!(out, ",{}_label", r.name);
        }
    }
    out.push('\n');
    for (n, id) in j.example_ids().iter().enumerate() {
        out.push_str(&csv_field(id));
        if let Some(l) = labels {
            out.push(',');
            if let Some(l) = l.get(n) {
                let _ = write!(out, "{l}");
            }
        }
        for r in runs {
            let row = r.aggregation.posteriors().row(n);
            let shown = if c == 2 { &row[1..] } else { row };
            for p in shown {
                let _ = write!(out, ",{p:.6}");
            }
            let _ = write!(out, ",{}", r.aggregation.labels()[n]);
        }
        out.push('\n');
    }
    out
}

fn fmt_opt(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_owned(), |x| format!("{x:.4}"))
}

/// The longest judge name the table shows whole; longer ones are cut with an ellipsis
/// (the files keep them whole).
const NAME_WIDTH: usize = 40;

fn shown_name(name: &str) -> String {
    if name.chars().count() <= NAME_WIDTH {
        name.to_owned()
    } else {
        name.chars().take(NAME_WIDTH - 1).chain(std::iter::once('…')).collect()
    }
}

pub(crate) fn table(j: &Judgments, labels: Option<&Labels>, runs: &[MethodRun]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} examples, {} judges, {} classes, {} labeled",
        j.n_examples(),
        j.n_judges(),
        j.n_classes(),
        labels.map_or(0, Labels::n_labeled)
    );
    let judge_acc = labels.map(|l| judge_accuracies(j, l)).unwrap_or_else(|| vec![None; j.n_judges()]);
    let cover = coverage(j);
    let names: Vec<String> = j.judge_names().iter().map(|n| shown_name(n)).collect();
    let width = names.iter().map(|n| n.chars().count()).max().unwrap_or(5).max(6);
    let _ = writeln!(s, "\n{:<width$}  {:>8}  {:>8}", "judge", "accuracy", "coverage");
    for (k, name) in names.iter().enumerate() {
        let _ = writeln!(s, "{name:<width$}  {:>8}  {:>8.3}", fmt_opt(judge_acc[k]), cover[k]);
    }
    let _ = writeln!(s, "\n{:<width$}  {:>8}  {:>8}  {:>8}  notes", "method", "accuracy", "brier", "ece");
    for r in runs {
        let a = &r.aggregation;
        let acc = labels.and_then(|l| accuracy(a.labels(), l));
        let b = labels.and_then(|l| brier(a.posteriors(), l));
        let e = labels.and_then(|l| expected_calibration_error(a.posteriors(), l, ECE_BINS));
        let notes = match a.diagnostics() {
            Diagnostics::Counting { ties, .. } => format!("{ties} ties"),
            Diagnostics::DawidSkene(em) => {
                format!("{} iterations, {}", em.iterations, if em.converged { "converged" } else { "not converged" })
            }
        };
        let _ = writeln!(s, "{:<width$}  {:>8}  {:>8}  {:>8}  {notes}", r.name, fmt_opt(acc), fmt_opt(b), fmt_opt(e));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_very_long_judge_name_is_cut_in_the_table_only() {
        let long = "j".repeat(70_000);
        let mut b = jury_core::JudgmentsBuilder::new(2).unwrap();
        b.push_binary("e1", &long, Some(0.9)).unwrap();
        b.push_binary("e1", "short", Some(0.2)).unwrap();
        let t = table(&b.build(), None, &[]);
        assert!(t.contains(&format!("{}…", "j".repeat(NAME_WIDTH - 1))), "{t}");
        assert!(t.lines().all(|l| l.chars().count() < 200), "{t}");
    }
}
