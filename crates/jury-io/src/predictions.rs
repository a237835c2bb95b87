//! predictions.csv (per method, each example's posterior and hard label, for views that
//! need more than metrics.json: a reliability diagram, the hardest examples) and
//! judgments_by_order.csv: each file's writer and reader, sharing its type.

use std::fmt::Write as _;
use std::path::Path;

use jury_core::{Labels, Posteriors};

use crate::IoError;
use crate::csv::{Record, header_names, scan};
use crate::csv_field;

/// One method's columns of predictions.csv.
#[derive(Debug, Clone, PartialEq)]
pub struct MethodPredictions {
    pub method: String,
    pub posteriors: Posteriors,
    /// Hard label per example (the method's tie rule applied).
    pub labels: Vec<usize>,
}

/// predictions.csv: example ids in file order and every method's columns.
#[derive(Debug, Clone, PartialEq)]
pub struct Predictions {
    pub example_ids: Vec<String>,
    pub methods: Vec<MethodPredictions>,
}

/// One method's column indices: its posterior columns (`M_p` for binary, `M_p0..` for
/// C classes) and its `M_label`.
struct Columns {
    method: String,
    probs: Vec<usize>,
    label: usize,
}

/// Groups the header's columns by method: every `M_label` column closes method `M`,
/// whose posterior columns precede it.
fn columns(names: &[String]) -> Vec<Columns> {
    let mut out = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let Some(method) = name.strip_suffix("_label") else { continue };
        let binary = format!("{method}_p");
        let probs: Vec<usize> = match names.iter().position(|n| *n == binary) {
            Some(p) => vec![p],
            None => (0..).map_while(|c| names.iter().position(|n| *n == format!("{method}_p{c}"))).collect(),
        };
        out.push(Columns { method: method.to_owned(), probs, label: i });
    }
    out
}

impl Predictions {
    /// predictions.csv: one row per example: id, reference label (when given), then per
    /// method the posterior (`<m>_p`, P(positive), for binary; `<m>_p0..` otherwise, six
    /// decimals) and hard label.
    pub fn to_csv(&self, labels: Option<&Labels>) -> String {
        let mut out = String::from("example_id");
        if labels.is_some() {
            out.push_str(",label");
        }
        for m in &self.methods {
            if m.posteriors.n_classes() == 2 {
                let _ = write!(out, ",{}_p", m.method);
            } else {
                (0..m.posteriors.n_classes()).for_each(|k| {
                    let _ = write!(out, ",{}_p{k}", m.method);
                });
            }
            let _ = write!(out, ",{}_label", m.method);
        }
        out.push('\n');
        for (n, id) in self.example_ids.iter().enumerate() {
            out.push_str(&csv_field(id));
            if let Some(l) = labels {
                out.push(',');
                if let Some(l) = l.get(n) {
                    let _ = write!(out, "{l}");
                }
            }
            for m in &self.methods {
                let row = m.posteriors.row(n);
                for p in if row.len() == 2 { &row[1..] } else { row } {
                    let _ = write!(out, ",{p:.6}");
                }
                let _ = write!(out, ",{}", m.labels[n]);
            }
            out.push('\n');
        }
        out
    }
}

/// The reference labels of predictions.csv (its `label` column, which [`Predictions::to_csv`]
/// writes when the run had labels), in file order; `None` for an unlabeled example, an
/// error when the file has no such column.
pub fn read_prediction_labels(path: &Path) -> Result<Vec<Option<usize>>, IoError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| IoError::Read { path: path.to_owned(), source: Box::new(e) })?;
    let malformed = |(line, reason)| IoError::Malformed { path: path.to_owned(), line, reason };
    let (mut column, mut labels) = (None, Vec::new());
    scan(&text, malformed, |r: &Record<'_>| {
        let Some(c) = column else {
            let names = header_names(r).map_err(malformed)?;
            let found = names.join(", ");
            let c = names.iter().position(|n| n == "label");
            column = Some(c.ok_or_else(|| IoError::MissingColumn {
                path: path.to_owned(),
                column: "label".into(),
                found,
            })?);
            return Ok(());
        };
        let cell = r.get(c).unwrap_or_default();
        let label = (!cell.is_empty()).then(|| cell.parse::<usize>()).transpose().map_err(|e| IoError::Field {
            path: path.to_owned(),
            row: format!("line {}", r.line),
            column: "label".into(),
            reason: format!("`{cell}`: {e}"),
        })?;
        labels.push(label);
        Ok(())
    })?;
    Ok(labels)
}

/// Reads predictions.csv as [`Predictions::to_csv`] writes it.
pub fn read_predictions(path: &Path) -> Result<Predictions, IoError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| IoError::Read { path: path.to_owned(), source: Box::new(e) })?;
    parse_predictions(&text, path)
}

/// predictions.csv's `text` (from `path`, named in errors) as its reader sees it: what a
/// writer that keeps the values in memory hands on, so they are the file's to the digit.
pub fn parse_predictions(text: &str, path: &Path) -> Result<Predictions, IoError> {
    let malformed = |(line, reason)| IoError::Malformed { path: path.to_owned(), line, reason };
    let field = |row: usize, column: &str, reason: String| IoError::Field {
        path: path.to_owned(),
        row: format!("line {row}"),
        column: column.to_owned(),
        reason,
    };
    let (mut names, mut cols) = (Vec::new(), Vec::new());
    let mut ids = Vec::new();
    let mut values: Vec<(Vec<f64>, Vec<usize>)> = Vec::new();
    scan(text, malformed, |r: &Record<'_>| {
        if names.is_empty() {
            names = header_names(r).map_err(malformed)?;
            cols = columns(&names);
            values = cols.iter().map(|_| (Vec::new(), Vec::new())).collect();
            return Ok(());
        }
        ids.push(r.get(0).unwrap_or_default().to_owned());
        for (c, (probs, labels)) in cols.iter().zip(values.iter_mut()) {
            let binary = c.probs.len() == 1;
            for &i in &c.probs {
                let p: f64 =
                    r.get(i).unwrap_or_default().parse().map_err(|e| field(r.line, &names[i], format!("{e}")))?;
                if binary {
                    probs.extend([1.0 - p, p]);
                } else {
                    probs.push(p);
                }
            }
            let l = r.get(c.label).unwrap_or_default();
            labels.push(l.parse().map_err(|e| field(r.line, &names[c.label], format!("`{l}`: {e}")))?);
        }
        Ok(())
    })?;
    let methods = cols
        .into_iter()
        .zip(values)
        .map(|(c, (probs, labels))| {
            let classes = if c.probs.len() == 1 { 2 } else { c.probs.len() };
            let posteriors = Posteriors::new(classes, probs).map_err(|source| IoError::Entry {
                path: path.to_owned(),
                row: format!("column {}", c.method),
                source,
            })?;
            Ok(MethodPredictions { method: c.method, posteriors, labels })
        })
        .collect::<Result<_, IoError>>()?;
    Ok(Predictions { example_ids: ids, methods })
}

/// One row of judgments_by_order.csv.
#[derive(Debug, Clone, PartialEq)]
pub struct OrderedJudgment {
    pub example_id: String,
    pub judge: String,
    /// Judged in the swapped order (`ba`).
    pub swapped: bool,
    /// P(positive) in the original orientation.
    pub p: Option<f64>,
}

/// `p` as the per-order and predictions files hold it: the value their reader gets back
/// from six decimals.
pub fn six_decimals(p: f64) -> f64 {
    format!("{p:.6}").parse().unwrap_or(p)
}

/// judgments_by_order.csv of `rows`, each probability at six decimals.
pub fn by_order_csv(rows: &[OrderedJudgment]) -> String {
    let mut out = String::from("example_id,judge,order,p\n");
    for r in rows {
        let order = if r.swapped { "ba" } else { "ab" };
        let p = r.p.map_or(String::new(), |p| format!("{p:.6}"));
        let _ = writeln!(out, "{},{},{order},{p}", csv_field(&r.example_id), csv_field(&r.judge));
    }
    out
}

/// A run's judgments_by_order.csv (pairwise data judged in both orders): each judge's
/// P(positive) per example in the order shown first (`ab`) and swapped (`ba`), both in
/// the original orientation; `None` where the judge gave no usable answer.
pub fn read_by_order(path: &Path) -> Result<Vec<OrderedJudgment>, IoError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| IoError::Read { path: path.to_owned(), source: Box::new(e) })?;
    parse_by_order(&text, path)
}

/// judgments_by_order.csv's `text` (from `path`, named in errors) as its reader sees it:
/// what a writer that keeps the rows in memory hands on, so they are the file's to the
/// digit.
pub fn parse_by_order(text: &str, path: &Path) -> Result<Vec<OrderedJudgment>, IoError> {
    let malformed = |(line, reason)| IoError::Malformed { path: path.to_owned(), line, reason };
    let mut rows = Vec::new();
    let mut header = true;
    scan(text, malformed, |r: &Record<'_>| {
        if std::mem::take(&mut header) {
            let names = header_names(r).map_err(malformed)?;
            if names != ["example_id", "judge", "order", "p"] {
                return Err(malformed((r.line, format!("columns {names:?}, expected example_id, judge, order, p"))));
            }
            return Ok(());
        }
        let field = |i: usize| r.get(i).unwrap_or_default();
        let swapped = match field(2) {
            "ab" => false,
            "ba" => true,
            other => return Err(malformed((r.line, format!("order `{other}`, expected ab or ba")))),
        };
        let p = match field(3) {
            "" => None,
            t => Some(t.parse::<f64>().map_err(|e| malformed((r.line, format!("p `{t}`: {e}"))))?),
        };
        rows.push(OrderedJudgment { example_id: field(0).to_owned(), judge: field(1).to_owned(), swapped, p });
        Ok(())
    })?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_orders_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("judgments_by_order.csv");
        std::fs::write(&path, "example_id,judge,order,p\nq1,j,ab,0.800000\nq1,j,ba,\n").unwrap();
        let rows = read_by_order(&path).unwrap();
        let row = |swapped, p| OrderedJudgment { example_id: "q1".into(), judge: "j".into(), swapped, p };
        assert_eq!(rows, vec![row(false, Some(0.8)), row(true, None)]);
        std::fs::write(&path, "example_id,judge,order,p\nq1,j,xy,0.5\n").unwrap();
        assert!(read_by_order(&path).unwrap_err().to_string().contains("line 2"));
        let written = vec![row(false, Some(0.25)), row(true, None), row(true, Some(0.8))];
        std::fs::write(&path, by_order_csv(&written)).unwrap();
        assert_eq!(read_by_order(&path).unwrap(), written);
        let rounded = parse_by_order(&by_order_csv(&[row(false, Some(1.0 / 3.0))]), &path).unwrap();
        assert_eq!(rounded, [row(false, Some(0.333333))], "six decimals, as the file holds them");
        assert_eq!(rounded[0].p, Some(six_decimals(1.0 / 3.0)));
    }

    /// Ids written with `csv_field`'s formula mark read back as they were.
    #[test]
    fn formula_ids_read_back_unmarked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("predictions.csv");
        let ids = ["=cmd|' /C calc'!A0", "'=x", "@a,\"b\"", "-1", "'plain"];
        let mut text = String::from("example_id,avg_p,avg_label\n");
        for id in ids {
            text.push_str(&format!("{},0.5,1\n", crate::csv_field(id)));
        }
        assert!(text.contains("\n\"'=cmd|' /C calc'!A0\",0.5,1\n"), "{text}");
        std::fs::write(&path, text).unwrap();
        assert_eq!(read_predictions(&path).unwrap().example_ids, ids);
    }

    #[test]
    fn binary_and_multiclass_columns_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("predictions.csv");
        std::fs::write(&path, "example_id,label,avg_p,avg_label,ds_p0,ds_p1,ds_p2,ds_label\na,1,0.700000,1,0.2,0.5,0.3,1\n\"b,c\",,0.5,0,1,0,0,0\n").unwrap();
        let p = read_predictions(&path).unwrap();
        assert_eq!(p.example_ids, vec!["a", "b,c"]);
        assert_eq!(p.methods.len(), 2);
        assert_eq!(
            (p.methods[0].method.as_str(), p.methods[0].posteriors.row(0)),
            ("avg", &[0.30000000000000004, 0.7][..])
        );
        assert_eq!(p.methods[1].posteriors.n_classes(), 3);
        assert_eq!(p.methods[1].labels, vec![1, 0]);
        assert_eq!(read_prediction_labels(&path).unwrap(), [Some(1), None]);
        let labels = Labels::new(3, vec![Some(1), None]).unwrap();
        let again = parse_predictions(&p.to_csv(Some(&labels)), &path).unwrap();
        assert_eq!(again, p, "the writer and the reader agree");
        assert!(
            p.to_csv(Some(&labels)).starts_with("example_id,label,avg_p,avg_label,ds_p0,ds_p1,ds_p2,ds_label\na,1,")
        );
        std::fs::write(&path, "example_id,avg_p,avg_label\na,x,1\n").unwrap();
        let err = read_predictions(&path).unwrap_err().to_string();
        assert!(err.contains("line 2") && err.contains("avg_p"), "{err}");
    }
}
