//! Reads the long judgments table and the labels table.
//!
//! Judgments: one row per (example, judge) with columns `example_id`, `judge` and
//! either `p` (binary: probability of the positive class), `probs` (a list of C
//! probabilities; in CSV a JSON array in a string) or `p0`, `p1`, ... `p{C-1}`. When
//! more than one form is present, `probs` wins over `p0...` which wins over `p`. An empty
//! (null) probability records the judge as asked but without a usable answer, which
//! aggregators treat as missing.
//!
//! Labels: columns `example_id` and `label` (a class index; for two classes also
//! yes/no/true/false, yes = 1 = positive).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use jury_core::{CoreError, Judgments, JudgmentsBuilder, Labels};

use crate::IoError;
use crate::columns::{Columns, Value};
use crate::run_tables::{
    CATEGORY, EXAMPLE_ID, INCLUSION_COLUMN, JUDGE, LABEL, P, PLAN_SIZE_COLUMN, PLANNED_FROM_COLUMN, PROBS, TEXT, TOKENS,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Csv,
    JsonLines,
    JsonArray,
    Parquet,
}

impl Format {
    fn of(path: &Path) -> Result<Self, IoError> {
        let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("csv") => Ok(Format::Csv),
            Some("jsonl" | "ndjson") => Ok(Format::JsonLines),
            Some("json") => Ok(Format::JsonArray),
            Some("parquet" | "pq") => Ok(Format::Parquet),
            _ => Err(IoError::UnknownFormat { path: path.to_owned() }),
        }
    }

    /// Where data row `i` (0-based) sits in the file, in the words an editor uses.
    pub(crate) fn locate(self, i: usize) -> String {
        match self {
            Format::Csv => format!("line {}", i + 2),
            Format::JsonLines => format!("line {}", i + 1),
            Format::JsonArray => format!("record {}", i + 1),
            Format::Parquet => format!("row {}", i + 1),
        }
    }
}

/// A loaded table that knows how to describe its own rows in errors.
pub(crate) struct Table {
    path: PathBuf,
    pub(crate) format: Format,
    columns: Columns,
}

impl Table {
    pub(crate) fn load(path: &Path) -> Result<Self, IoError> {
        let format = Format::of(path)?;
        let bytes = read_bytes(path)?;
        let malformed = |(line, reason)| IoError::Malformed { path: path.to_owned(), line, reason };
        let columns = match format {
            // Every CSV column is read as text and parsed here, so a bad value is reported
            // with its line instead of silently becoming null or changing a column's type.
            Format::Csv => crate::csv::frame(&utf8(path, bytes)?).map_err(malformed)?,
            Format::JsonLines => crate::columns::json_lines(&utf8(path, bytes)?).map_err(malformed)?,
            Format::JsonArray => crate::columns::json_array(&utf8(path, bytes)?).map_err(malformed)?,
            // Parquet is binary: a file the reader refuses is not Parquet, whatever its bytes.
            Format::Parquet => crate::columns::parquet(bytes).map_err(|e| IoError::Read {
                path: path.to_owned(),
                source: format!("not a valid Parquet file ({})", e.lines().next().unwrap_or_default()).into(),
            })?,
        };
        if columns.height == 0 {
            return Err(IoError::Empty { path: path.to_owned() });
        }
        Ok(Self { path: path.to_owned(), format, columns })
    }

    /// Where data row `i` (0-based) sits in the file: the line it starts on where the
    /// format has lines (a CSV row may span several), else [`Format::locate`]'s.
    pub(crate) fn locate(&self, i: usize) -> String {
        match self.columns.lines.get(i) {
            Some(line) => format!("line {line}"),
            None => self.format.locate(i),
        }
    }

    pub(crate) fn has(&self, name: &str) -> bool {
        self.columns.names.iter().any(|n| n == name)
    }

    fn column_names(&self) -> String {
        found_columns(&self.columns.names)
    }

    fn column(&self, name: &str) -> Result<&[Value], IoError> {
        match self.columns.names.iter().position(|n| n == name) {
            Some(c) => Ok(&self.columns.cells[c]),
            None => Err(IoError::MissingColumn {
                path: self.path.clone(),
                column: name.to_owned(),
                found: self.column_names(),
            }),
        }
    }

    pub(crate) fn field_err(&self, row: usize, column: &str, reason: impl Into<String>) -> IoError {
        IoError::Field {
            path: self.path.clone(),
            row: self.locate(row),
            column: column.to_owned(),
            reason: reason.into(),
        }
    }

    fn column_err(&self, column: &str, reason: impl Into<String>) -> IoError {
        IoError::Field {
            path: self.path.clone(),
            row: "(every row)".into(),
            column: column.to_owned(),
            reason: reason.into(),
        }
    }

    fn entry_err(&self, row: usize, source: CoreError) -> IoError {
        IoError::Entry { path: self.path.clone(), row: self.locate(row), source }
    }

    /// A text column (numbers and booleans are accepted and printed as text); an empty
    /// cell stays `None`.
    pub(crate) fn strings(&self, name: &str) -> Result<Vec<Option<String>>, IoError> {
        let cells = self.column(name)?;
        cells
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::Null => Ok(None),
                Value::Text(t) => Ok(Some(t.clone())),
                Value::Int(x) => Ok(Some(x.to_string())),
                // As Rust writes a float that round-trips: 1.0 stays "1.0".
                Value::Float(x) => Ok(Some(format!("{x:?}"))),
                Value::Bool(b) => Ok(Some(b.to_string())),
                other => Err(self.field_err(i, name, format!("{}, expected text", other.kind()))),
            })
            .collect()
    }

    /// A numeric column; text cells are parsed, and a cell that is not a number is an
    /// error naming its row.
    fn floats(&self, name: &str) -> Result<Vec<Option<f64>>, IoError> {
        let cells = self.column(name)?;
        cells
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::Null => Ok(None),
                Value::Int(x) => Ok(Some(*x as f64)),
                Value::Float(x) => Ok(Some(*x)),
                Value::Bool(b) => Ok(Some(f64::from(u8::from(*b)))),
                Value::Text(t) => match t.trim() {
                    "" => Ok(None),
                    t => t
                        .parse::<f64>()
                        .map(Some)
                        .map_err(|_| self.field_err(i, name, format!("`{t}` is not a number"))),
                },
                other => Err(self.field_err(i, name, format!("{}, expected a number", other.kind()))),
            })
            .collect()
    }

    /// A list-of-numbers column; in text formats each cell holds a JSON array.
    fn float_lists(&self, name: &str) -> Result<Vec<Option<Vec<f64>>>, IoError> {
        let cells = self.column(name)?;
        let number = |i: usize, v: &Value| match v {
            Value::Int(x) => Ok(*x as f64),
            Value::Float(x) => Ok(*x),
            _ => Err(self.field_err(i, name, "list holds an empty or non-numeric value")),
        };
        cells
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::Null => Ok(None),
                Value::Text(t) => match t.trim() {
                    "" => Ok(None),
                    t => serde_json::from_str::<Vec<f64>>(t)
                        .map(Some)
                        .map_err(|_| self.field_err(i, name, format!("`{t}` is not a JSON array of numbers"))),
                },
                Value::List(items) => items.iter().map(|x| number(i, x)).collect::<Result<Vec<f64>, _>>().map(Some),
                other => Err(self.field_err(i, name, format!("{}, expected a list of numbers", other.kind()))),
            })
            .collect()
    }

    /// A text column in which every cell must be non-empty.
    pub(crate) fn required_text(&self, name: &str) -> Result<Vec<String>, IoError> {
        self.strings(name)?
            .into_iter()
            .enumerate()
            .map(|(i, v)| v.filter(|v| !v.trim().is_empty()).ok_or_else(|| self.field_err(i, name, "empty value")))
            .collect()
    }
}

/// How the probabilities are laid out in a judgments table.
enum ProbColumns {
    Binary(Vec<Option<f64>>),
    PerClass(Vec<Vec<Option<f64>>>),
    Lists(Vec<Option<Vec<f64>>>),
}

/// Reads a judgments table (CSV, JSON Lines, JSON array or Parquet, by extension).
pub fn read_judgments(path: &Path) -> Result<Judgments, IoError> {
    if Format::of(path)? == Format::Csv {
        return read_judgments_csv(path);
    }
    let t = Table::load(path)?;
    let ids = t.required_text(EXAMPLE_ID)?;
    let judges = t.required_text(JUDGE)?;
    let probs = if t.has(PROBS) {
        ProbColumns::Lists(t.float_lists(PROBS)?)
    } else if t.has("p0") {
        let names: Vec<String> = (0..).map(|c| format!("p{c}")).take_while(|n| t.has(n)).collect();
        if names.len() < 2 {
            return Err(IoError::MissingColumn { path: path.to_owned(), column: "p1".into(), found: t.column_names() });
        }
        ProbColumns::PerClass(names.iter().map(|n| t.floats(n)).collect::<Result<_, _>>()?)
    } else if t.has(P) {
        ProbColumns::Binary(t.floats(P)?)
    } else {
        return Err(IoError::NoProbColumns { path: path.to_owned(), found: t.column_names() });
    };
    let n_classes = match &probs {
        ProbColumns::Binary(_) => 2,
        ProbColumns::PerClass(cols) => cols.len(),
        ProbColumns::Lists(rows) => rows.iter().flatten().map(Vec::len).next().unwrap_or(2),
    };
    let mut builder = JudgmentsBuilder::new(n_classes).map_err(|e| t.entry_err(0, e))?;
    for (i, (id, judge)) in ids.iter().zip(&judges).enumerate() {
        let pushed = match &probs {
            ProbColumns::Binary(p) => match p[i] {
                // Checked here so the error names the `p` the user wrote, not 1 - p.
                Some(x) => jury_core::Prob::new(x).and_then(|_| builder.push_binary(id, judge, Some(x))),
                None => builder.push_binary(id, judge, None),
            },
            ProbColumns::Lists(rows) => builder.push_slice(id, judge, rows[i].as_deref()),
            ProbColumns::PerClass(cols) => {
                let row: Vec<Option<f64>> = cols.iter().map(|c| c[i]).collect();
                let probs = all_or_none(&row).ok_or_else(|| t.field_err(i, "p0", MIXED_CLASSES))?;
                builder.push_slice(id, judge, probs.as_deref())
            }
        };
        pushed.map_err(|e| t.entry_err(i, e))?;
    }
    judged(path, builder.build())
}

/// `judgments`, unless a judge, or the whole file, has no probability at all: nothing to
/// aggregate or to learn a judge's skill from, where an empty cell elsewhere is a judge
/// that was asked but gave no usable answer.
fn judged(path: &Path, judgments: Judgments) -> Result<Judgments, IoError> {
    if judgments.n_present() == 0 {
        return Err(IoError::NoJudgment { path: path.to_owned() });
    }
    let mut present = vec![false; judgments.n_judges()];
    for (_, k, _) in judgments.entries() {
        present[k] = true;
    }
    if let Some(k) = present.iter().position(|&p| !p) {
        return Err(IoError::JudgeWithoutJudgment { path: path.to_owned(), judge: judgments.judge_names()[k].clone() });
    }
    Ok(judgments)
}

/// Where a judgments CSV keeps what, from its header (the same precedence as
/// [`read_judgments`]: `probs`, then `p0...`, then `p`).
struct CsvLayout {
    id: usize,
    judge: usize,
    probs: CsvProbs,
}

enum CsvProbs {
    Binary(usize),
    PerClass(Vec<(usize, String)>),
    Lists(usize),
}

/// The columns a file was found to have, for an error naming a missing one. A single
/// column holding `;` or a tab is a whole header read as one name (a spreadsheet saved
/// where the list separator is `;`), and the message says so.
fn found_columns(names: &[String]) -> String {
    let list = names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
    match names {
        [one] if one.contains(';') || one.contains('\t') => {
            let separator = if one.contains(';') { "`;`" } else { "tabs" };
            format!("{list}; jury reads comma-separated files, and this one looks separated by {separator}")
        }
        _ => list,
    }
}

impl CsvLayout {
    fn of(path: &Path, names: &[String]) -> Result<Self, IoError> {
        let found = || found_columns(names);
        let find = |name: &str| names.iter().position(|n| n == name);
        let require = |name: &str| {
            find(name).ok_or_else(|| IoError::MissingColumn {
                path: path.to_owned(),
                column: name.into(),
                found: found(),
            })
        };
        let (id, judge) = (require(EXAMPLE_ID)?, require(JUDGE)?);
        let probs = if let Some(i) = find(PROBS) {
            CsvProbs::Lists(i)
        } else if find("p0").is_some() {
            let cols: Vec<(usize, String)> =
                (0..).map(|c| format!("p{c}")).map_while(|n| find(&n).map(|i| (i, n))).collect();
            if cols.len() < 2 {
                return Err(IoError::MissingColumn { path: path.to_owned(), column: "p1".into(), found: found() });
            }
            CsvProbs::PerClass(cols)
        } else if let Some(i) = find(P) {
            CsvProbs::Binary(i)
        } else {
            return Err(IoError::NoProbColumns { path: path.to_owned(), found: found() });
        };
        Ok(Self { id, judge, probs })
    }
}

/// Why a row of per-class columns is refused.
const MIXED_CLASSES: &str = "some class probabilities are empty and others are not";

/// A row of per-class cells: `Some(None)` when all are empty (a missing judgment),
/// `Some(Some(probs))` when all are present, `None` when some are and some are not.
fn all_or_none(row: &[Option<f64>]) -> Option<Option<Vec<f64>>> {
    match row.iter().filter(|x| x.is_some()).count() {
        0 => Some(None),
        n if n == row.len() => Some(Some(row.iter().flatten().copied().collect())),
        _ => None,
    }
}

/// Why a judgments CSV scan stopped: a problem, or (for the class count) the answer.
enum Stop {
    Failed(IoError),
    Classes(usize),
}

/// [`read_judgments`] for CSV: records go straight from the text into the builder, so
/// memory is the file's bytes plus the judgments, without a table of cells in between.
fn read_judgments_csv(path: &Path) -> Result<Judgments, IoError> {
    let text = read_text(path)?;
    let malformed = |(line, reason)| IoError::Malformed { path: path.to_owned(), line, reason };
    let field = |line: usize, column: &str, reason: String| IoError::Field {
        path: path.to_owned(),
        row: format!("line {line}"),
        column: column.to_owned(),
        reason,
    };
    let number = |r: &crate::csv::Record<'_>, i: usize, column: &str| match r.get(i).map(str::trim) {
        None | Some("") => Ok(None),
        Some(t) => t.parse::<f64>().map(Some).map_err(|_| field(r.line, column, format!("`{t}` is not a number"))),
    };
    let list = |r: &crate::csv::Record<'_>, i: usize| match r.get(i).map(str::trim) {
        None | Some("") => Ok(None),
        Some(t) => serde_json::from_str::<Vec<f64>>(t)
            .map(Some)
            .map_err(|_| field(r.line, PROBS, format!("`{t}` is not a JSON array of numbers"))),
    };
    let names =
        crate::csv::header(&text).map_err(malformed)?.ok_or_else(|| IoError::Empty { path: path.to_owned() })?;
    let layout = CsvLayout::of(path, &names)?;
    // A list column's class count is the first non-empty list's length.
    let n_classes = match &layout.probs {
        CsvProbs::Binary(_) => 2,
        CsvProbs::PerClass(cols) => cols.len(),
        CsvProbs::Lists(i) => {
            let mut header = true;
            let found = crate::csv::scan(
                &text,
                |m| Stop::Failed(malformed(m)),
                |r| match std::mem::take(&mut header) {
                    true => Ok(()),
                    false => match list(r, *i).map_err(Stop::Failed)? {
                        Some(v) => Err(Stop::Classes(v.len())),
                        None => Ok(()),
                    },
                },
            );
            match found {
                Ok(()) => 2,
                Err(Stop::Classes(n)) => n,
                Err(Stop::Failed(e)) => return Err(e),
            }
        }
    };
    let entry_err = |line: usize, source| IoError::Entry { path: path.to_owned(), row: format!("line {line}"), source };
    let mut builder = JudgmentsBuilder::new(n_classes).map_err(|e| entry_err(2, e))?;
    let mut rows = 0usize;
    let mut row = Vec::with_capacity(n_classes);
    crate::csv::scan(&text, malformed, |r| {
        rows += 1;
        if rows == 1 {
            return Ok(()); // the header
        }
        let required = |i: usize, column: &str| match r.get(i) {
            Some(v) if !v.trim().is_empty() => Ok(v),
            _ => Err(field(r.line, column, "empty value".into())),
        };
        let (id, judge) = (required(layout.id, EXAMPLE_ID)?, required(layout.judge, JUDGE)?);
        let pushed = match &layout.probs {
            CsvProbs::Binary(i) => match number(r, *i, P)? {
                // Checked here so the error names the `p` the user wrote, not 1 - p.
                Some(x) => jury_core::Prob::new(x).and_then(|_| builder.push_binary(id, judge, Some(x))),
                None => builder.push_binary(id, judge, None),
            },
            CsvProbs::Lists(i) => builder.push_slice(id, judge, list(r, *i)?.as_deref()),
            CsvProbs::PerClass(cols) => {
                row.clear();
                for (i, name) in cols {
                    row.push(number(r, *i, name)?);
                }
                let probs = all_or_none(&row).ok_or_else(|| field(r.line, "p0", MIXED_CLASSES.into()))?;
                builder.push_slice(id, judge, probs.as_deref())
            }
        };
        pushed.map_err(|e| entry_err(r.line, e))
    })?;
    if rows < 2 {
        return Err(IoError::Empty { path: path.to_owned() });
    }
    drop(text);
    judged(path, builder.build())
}

/// Reads a labels table and aligns it to `judgments`. Returns the labels and the number
/// of labeled examples that the judgments do not contain.
pub fn read_labels(path: &Path, judgments: &Judgments) -> Result<(Labels, usize), IoError> {
    let t = Table::load(path)?;
    let ids = t.strings(EXAMPLE_ID)?;
    if let Some(i) = ids.iter().position(|v| v.as_deref().is_none_or(|v| v.trim().is_empty())) {
        return Err(t.field_err(i, EXAMPLE_ID, "empty value"));
    }
    let ids: Vec<String> = ids.into_iter().flatten().collect();
    let n_classes = judgments.n_classes();
    let raw = t.strings(LABEL)?;
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut pairs = Vec::with_capacity(ids.len());
    for (i, (id, label)) in ids.iter().zip(&raw).enumerate() {
        let Some(text) = label.as_deref().map(str::trim).filter(|s| !s.is_empty()) else {
            return Err(t.field_err(i, LABEL, "empty value"));
        };
        let label = parse_label(text, n_classes).ok_or_else(|| {
            let allowed = if n_classes == 2 { "0, 1, yes, no, true or false" } else { "a class index" };
            t.field_err(i, LABEL, format!("`{text}` is not a label (expected {allowed}, below {n_classes})"))
        })?;
        if let Some(first) = seen.insert(id, i) {
            return Err(t.field_err(
                i,
                EXAMPLE_ID,
                format!("duplicate label for `{id}` (first at {})", t.locate(first)),
            ));
        }
        pairs.push((id.as_str(), label));
    }
    Labels::align(judgments, pairs).map_err(|e| t.entry_err(0, e))
}

fn parse_label(text: &str, n_classes: usize) -> Option<usize> {
    let lower = text.to_ascii_lowercase();
    let value = match lower.as_str() {
        "yes" | "true" if n_classes == 2 => 1,
        "no" | "false" if n_classes == 2 => 0,
        _ => {
            // Integers written as floats ("1.0", from numeric JSON/Parquet columns) are fine.
            let x: f64 = lower.parse().ok()?;
            if x.fract() != 0.0 || x < 0.0 {
                return None;
            }
            x as usize
        }
    };
    (value < n_classes).then_some(value)
}

/// One line of prompts.jsonl as read back (written from [`crate::PromptRow`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptRecord {
    pub judge: String,
    pub example_id: String,
    pub tokens: Vec<u32>,
}

/// A run's prompts.jsonl: the token ids each judge scored for each example.
pub fn read_prompts(path: &Path) -> Result<Vec<PromptRecord>, IoError> {
    let t = Table::load(path)?;
    let judges = t.required_text(JUDGE)?;
    let ids = t.required_text(EXAMPLE_ID)?;
    let lists = t.float_lists(TOKENS)?;
    let mut out = Vec::with_capacity(ids.len());
    for (row, ((judge, example_id), list)) in judges.into_iter().zip(ids).zip(lists).enumerate() {
        let tokens = list
            .unwrap_or_default()
            .into_iter()
            .map(|x| {
                let id = x as u32;
                (f64::from(id) == x)
                    .then_some(id)
                    .ok_or_else(|| t.field_err(row, TOKENS, format!("{x} is not a token id")))
            })
            .collect::<Result<Vec<u32>, _>>()?;
        out.push(PromptRecord { judge, example_id, tokens });
    }
    Ok(out)
}

/// Example contexts for the context-dependent aggregators: columns `example_id` and
/// `text`, any of the table formats. Duplicate ids and missing values are errors naming
/// the row.
pub fn read_texts(path: &Path) -> Result<HashMap<String, String>, IoError> {
    read_keyed(path, TEXT)
}

/// Each example's category (a run's categories.csv: `example_id`, `category`).
pub fn read_categories(path: &Path) -> Result<HashMap<String, String>, IoError> {
    read_keyed(path, CATEGORY)
}

/// `example_id` -> the `column` value, every id once, no value missing.
fn read_keyed(path: &Path, column: &str) -> Result<HashMap<String, String>, IoError> {
    let t = Table::load(path)?;
    let ids = t.strings(EXAMPLE_ID)?;
    let texts = t.strings(column)?;
    let mut out = HashMap::with_capacity(ids.len());
    for (row, (id, text)) in ids.into_iter().zip(texts).enumerate() {
        let id = id.ok_or_else(|| t.field_err(row, EXAMPLE_ID, "empty"))?;
        let text = text.ok_or_else(|| t.field_err(row, column, "empty"))?;
        if out.insert(id.clone(), text).is_some() {
            return Err(t.field_err(row, EXAMPLE_ID, format!("duplicate id `{id}`")));
        }
    }
    Ok(out)
}

/// A whole input file's bytes (a regular file within the input size limit).
fn read_bytes(path: &Path) -> Result<Vec<u8>, IoError> {
    crate::read_input(path).map_err(|e| IoError::Read { path: path.to_owned(), source: Box::new(e) })
}

/// A whole file as text; bytes that are not UTF-8 are an error naming their line.
fn read_text(path: &Path) -> Result<String, IoError> {
    utf8(path, read_bytes(path)?)
}

/// `path`'s bytes as text; bytes that are not UTF-8 are an error naming their line.
fn utf8(path: &Path, bytes: Vec<u8>) -> Result<String, IoError> {
    String::from_utf8(bytes).map_err(|e| {
        let line = line_of(e.as_bytes(), e.utf8_error().valid_up_to());
        IoError::Malformed { path: path.to_owned(), line, reason: "not UTF-8 text".to_owned() }
    })
}

/// The line (1-based) that byte `offset` of `bytes` falls on.
fn line_of(bytes: &[u8], offset: usize) -> usize {
    bytes[..offset].iter().filter(|&&b| b == b'\n').count() + 1
}

/// Calibration labels (`--calibration`, `calibration: {labels: FILE}`): the examples a
/// user labeled to calibrate the jury, in file order, with the probability each had of
/// being chosen when a label plan chose them.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrationLabels {
    /// Each label's example, as its position in the judgments.
    pub index: Vec<usize>,
    pub labels: Vec<u8>,
    /// The `inclusion_probability` column of a plan (`jury label-plan`), when present.
    pub inclusion: Option<Vec<f64>>,
}

/// Reads calibration labels for a binary `judgments`: `example_id`, `label` (0/1, yes/no)
/// and optionally [`INCLUSION_COLUMN`]. Every id must be among the judgments' examples;
/// errors name the file, line and field.
pub fn read_calibration(path: &Path, judgments: &Judgments) -> Result<CalibrationLabels, IoError> {
    read_calibration_among(path, judgments.example_ids(), judgments.n_classes())
}

/// [`read_calibration`] against the examples a run will judge (`example_ids`, the
/// judgments' order to be) and their number of classes, before any judgment exists: a
/// run checks its calibration labels before any model loads.
pub fn read_calibration_among(
    path: &Path,
    example_ids: &[String],
    n_classes: usize,
) -> Result<CalibrationLabels, IoError> {
    let (t, out) = calibration_rows(path, example_ids, n_classes, Rows::Calibration)?;
    let ones = out.labels.iter().filter(|&&l| l == 1).count();
    if ones == 0 || ones == out.labels.len() {
        let class = if ones == 0 { 0 } else { 1 };
        return Err(t.column_err(
            LABEL,
            format!("one class only ({} labels, all {class}): calibration needs examples of both", out.labels.len()),
        ));
    }
    Ok(out)
}

/// Labels already had, for a plan of more (`jury label-plan --labeled`): the rows with a
/// label, read as [`read_calibration`] reads them, but one class is enough (the failures
/// a team found), a row without a label is skipped (a plan labeled in part), and a plan's
/// columns are not read: beside a plan of more, every example labeled counts as it is,
/// however it was chosen.
pub fn read_labeled(path: &Path, judgments: &Judgments) -> Result<CalibrationLabels, IoError> {
    calibration_rows(path, judgments.example_ids(), judgments.n_classes(), Rows::Had).map(|(_, out)| out)
}

/// What a calibration file's rows are to the reader.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rows {
    /// Calibration labels: every row labeled, a plan's columns checked.
    Calibration,
    /// Labels had beside a plan of more: the labeled rows only, a plan's columns ignored.
    Had,
}

/// Every row of a calibration file, checked (ids among `example_ids`, once each; binary
/// labels; for `Rows::Calibration` a plan's columns), and the table for further errors.
fn calibration_rows(
    path: &Path,
    example_ids: &[String],
    n_classes: usize,
    rows: Rows,
) -> Result<(Table, CalibrationLabels), IoError> {
    let t = Table::load(path)?;
    let ids = t.strings(EXAMPLE_ID)?;
    let raw = t.strings(LABEL)?;
    if n_classes != 2 {
        // Every label would be refused: say why once, not that `0` is not binary.
        return Err(t.column_err(
            LABEL,
            format!("calibration labels need judgments of two classes; these judgments have {n_classes}"),
        ));
    }
    let plan = rows == Rows::Calibration;
    let inclusion = if plan && t.has(INCLUSION_COLUMN) { Some(t.floats(INCLUSION_COLUMN)?) } else { None };
    let position: HashMap<&str, usize> = example_ids.iter().enumerate().map(|(i, id)| (id.as_str(), i)).collect();
    let mut seen: HashMap<usize, usize> = HashMap::new();
    let mut out = CalibrationLabels { index: vec![], labels: vec![], inclusion: inclusion.as_ref().map(|_| vec![]) };
    for (i, (id, label)) in ids.iter().zip(&raw).enumerate() {
        let Some(id) = id.as_deref().map(str::trim).filter(|s| !s.is_empty()) else {
            return Err(t.field_err(i, EXAMPLE_ID, "empty value"));
        };
        let Some(&n) = position.get(id) else {
            return Err(t.field_err(i, EXAMPLE_ID, format!("`{id}` is not among the judgments' examples")));
        };
        let text = label.as_deref().map(str::trim).unwrap_or("");
        if text.is_empty() && !plan {
            continue;
        }
        if text.is_empty() {
            // A plan labeled in part: its estimators weigh each row by its inclusion
            // probability and count on every planned row (Horvitz-Thompson), so a row
            // removed biases them; labels without a plan are a uniform sample either way.
            let what = if inclusion.is_some() {
                "a plan needs every planned example labeled (its estimates count each row by its inclusion \
                 probability, and a row removed biases them)"
            } else {
                "give every row a label, or remove the rows you could not label"
            };
            return Err(t.field_err(i, LABEL, format!("empty: {what}; a label is 0, 1, yes or no")));
        }
        let Some(l) = parse_label(text, 2) else {
            return Err(t.field_err(i, LABEL, format!("`{text}` is not a binary label (expected 0, 1, yes or no)")));
        };
        if let Some(first) = seen.insert(n, i) {
            return Err(t.field_err(
                i,
                EXAMPLE_ID,
                format!("duplicate label for `{id}` (first at {})", t.locate(first)),
            ));
        }
        if let (Some(col), Some(out)) = (&inclusion, out.inclusion.as_mut()) {
            match col[i] {
                Some(p) if p > 0.0 && p <= 1.0 => out.push(p),
                other => {
                    let shown = other.map_or("empty".to_owned(), |p| p.to_string());
                    return Err(t.field_err(i, INCLUSION_COLUMN, format!("{shown} is not a probability in (0, 1]")));
                }
            }
        }
        out.index.push(n);
        out.labels.push(l as u8);
    }
    if plan && t.has(PLAN_SIZE_COLUMN) {
        check_plan_size(&t, out.labels.len())?;
    }
    if plan && t.has(PLANNED_FROM_COLUMN) {
        check_planned_from(&t, example_ids.len())?;
    }
    Ok((t, out))
}

/// A plan's rows against the size it was drawn at (`plan_size`, the same on every row):
/// its estimators weigh each row by `1 / pi` and count on every planned row
/// (Horvitz-Thompson), so rows removed (the examples a team could not label) would bias
/// every rate by the share removed, and nothing in the labels or the judges shows it.
fn check_plan_size(t: &Table, rows: usize) -> Result<(), IoError> {
    let planned = whole_on_every_row(t, PLAN_SIZE_COLUMN)?;
    if rows != planned {
        return Err(t.column_err(
            PLAN_SIZE_COLUMN,
            format!(
                "{rows} rows of a plan of {planned}: label every planned example (the plan's estimates count \
                 each row by its inclusion probability, and rows removed or added bias every rate)"
            ),
        ));
    }
    Ok(())
}

/// A plan against the examples it is used on (`planned_from`, the same on every row): its
/// inclusion probabilities are chances among the examples it was drawn from, so with
/// more examples (a run judged again with a larger `limit`) the new ones had none and no
/// weighing by them estimates these examples' rate.
fn check_planned_from(t: &Table, examples: usize) -> Result<(), IoError> {
    let from = whole_on_every_row(t, PLANNED_FROM_COLUMN)?;
    if from != examples {
        return Err(t.column_err(
            PLANNED_FROM_COLUMN,
            format!(
                "the plan was drawn from {from} examples, not these {examples}: its inclusion probabilities are \
                 chances among those {from}, so they weigh no rate of these {examples}; plan again with `jury \
                 label-plan` on these examples' judgments"
            ),
        ));
    }
    Ok(())
}

/// A plan's column that holds one whole number on every row.
fn whole_on_every_row(t: &Table, column: &str) -> Result<usize, IoError> {
    let values = t.floats(column)?;
    let whole = |i: usize| values[i].filter(|s| *s >= 1.0 && s.fract() == 0.0 && *s < 1e15);
    let Some(first) = whole(0) else {
        return Err(t.field_err(0, column, "not a whole number of examples"));
    };
    if let Some(i) = (1..values.len()).find(|&i| whole(i) != Some(first)) {
        return Err(t.field_err(
            i,
            column,
            format!(
                "differs from the first row's {first}: a plan's rows come from one `jury label-plan` (two plans \
                 joined are no plan their inclusion probabilities describe; plan again with the whole budget, or \
                 plan more beside the labels had with `jury label-plan --labeled`)"
            ),
        ));
    }
    Ok(first as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "example_id,judge,p\na,j1,0.9\nb,j1,0.2\n";

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// A snappy-compressed Parquet file of `example_id`, `judge` (text) and `p` (an
    /// optional double), written with the parquet crate's low-level writer.
    fn write_parquet(path: &Path, ids: &[&str], judges: &[&str], p: &[Option<f64>]) {
        use parquet::basic::Compression;
        use parquet::data_type::{ByteArray, ByteArrayType, DoubleType};
        use parquet::file::properties::WriterProperties;
        use parquet::file::writer::SerializedFileWriter;
        let schema = "message judgments { REQUIRED BYTE_ARRAY example_id (UTF8); \
                      REQUIRED BYTE_ARRAY judge (UTF8); OPTIONAL DOUBLE p; }";
        let schema = std::sync::Arc::new(parquet::schema::parser::parse_message_type(schema).unwrap());
        let props = std::sync::Arc::new(WriterProperties::builder().set_compression(Compression::SNAPPY).build());
        let mut w = SerializedFileWriter::new(std::fs::File::create(path).unwrap(), schema, props).unwrap();
        let mut group = w.next_row_group().unwrap();
        for text in [ids, judges] {
            let values: Vec<ByteArray> = text.iter().map(|t| ByteArray::from(*t)).collect();
            let mut col = group.next_column().unwrap().unwrap();
            col.typed::<ByteArrayType>().write_batch(&values, None, None).unwrap();
            col.close().unwrap();
        }
        let values: Vec<f64> = p.iter().flatten().copied().collect();
        let levels: Vec<i16> = p.iter().map(|x| i16::from(x.is_some())).collect();
        let mut col = group.next_column().unwrap().unwrap();
        col.typed::<DoubleType>().write_batch(&values, Some(&levels), None).unwrap();
        col.close().unwrap();
        group.close().unwrap();
        w.close().unwrap();
    }

    #[test]
    fn the_same_table_in_every_format_reads_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let csv = write(dir.path(), "j.csv", "example_id,judge,p\n1,a,0.9\n1,b,\n2,a,0.25\n2,b,0.5\n");
        let jsonl = write(
            dir.path(),
            "j.jsonl",
            "{\"example_id\":1,\"judge\":\"a\",\"p\":0.9}\n{\"example_id\":1,\"judge\":\"b\",\"p\":null}\n{\"example_id\":2,\"judge\":\"a\",\"p\":0.25}\n{\"example_id\":2,\"judge\":\"b\",\"p\":0.5}\n",
        );
        let json = write(
            dir.path(),
            "j.json",
            "[{\"example_id\":\"1\",\"judge\":\"a\",\"p\":0.9},{\"example_id\":\"1\",\"judge\":\"b\",\"p\":null},{\"example_id\":\"2\",\"judge\":\"a\",\"p\":0.25},{\"example_id\":\"2\",\"judge\":\"b\",\"p\":0.5}]",
        );
        let parquet = dir.path().join("j.parquet");
        write_parquet(
            &parquet,
            &["1", "1", "2", "2"],
            &["a", "b", "a", "b"],
            &[Some(0.9), None, Some(0.25), Some(0.5)],
        );

        let want = read_judgments(&csv).unwrap();
        assert_eq!(want.example_ids(), ["1", "2"]);
        assert_eq!(want.judge_names(), ["a", "b"]);
        assert_eq!(want.get(0, 1), None, "empty p is a missing entry");
        assert_eq!(want.get(1, 0), Some(&[0.75, 0.25][..]));
        for p in [jsonl, json, parquet] {
            assert_eq!(read_judgments(&p).unwrap(), want, "{}", p.display());
        }
    }

    #[test]
    fn multiclass_as_list_or_columns() {
        let dir = tempfile::tempdir().unwrap();
        let cols = write(dir.path(), "c.csv", "example_id,judge,p0,p1,p2\nx,a,0.2,0.3,0.5\nx,b,,,\ny,b,0.1,0.2,0.7\n");
        let list =
            write(dir.path(), "l.csv", "example_id,judge,probs\nx,a,\"[0.2,0.3,0.5]\"\nx,b,\ny,b,\"[0.1,0.2,0.7]\"\n");
        let jsonl = write(
            dir.path(),
            "l.jsonl",
            "{\"example_id\":\"x\",\"judge\":\"a\",\"probs\":[0.2,0.3,0.5]}\n{\"example_id\":\"x\",\"judge\":\"b\",\"probs\":null}\n{\"example_id\":\"y\",\"judge\":\"b\",\"probs\":[0.1,0.2,0.7]}\n",
        );
        let want = read_judgments(&cols).unwrap();
        assert_eq!(want.n_classes(), 3);
        assert_eq!(want.get(0, 0), Some(&[0.2, 0.3, 0.5][..]));
        assert_eq!(read_judgments(&list).unwrap(), want);
        assert_eq!(read_judgments(&jsonl).unwrap(), want);
        let bad = write(dir.path(), "b.csv", "example_id,judge,p0,p1,p2\nx,a,0.2,,0.5\n");
        let e = read_judgments(&bad).unwrap_err().to_string();
        assert!(e.ends_with("b.csv line 2: column `p0`: some class probabilities are empty and others are not"), "{e}");
        let short = write(
            dir.path(),
            "s.jsonl",
            "{\"example_id\":\"x\",\"judge\":\"a\",\"probs\":[0.2,0.3,0.5]}\n{\"example_id\":\"y\",\"judge\":\"a\",\"probs\":[0.5,0.5]}\n",
        );
        let e = read_judgments(&short).unwrap_err().to_string();
        assert!(e.ends_with("s.jsonl line 2: probability vector has 2 entries, expected 3 (one per class)"), "{e}");
    }

    #[test]
    fn csv_judgments_errors_name_the_line_a_record_starts_on() {
        let dir = tempfile::tempdir().unwrap();
        let read = |name: &str, text: &str| read_judgments(&write(dir.path(), name, text)).map_err(|e| e.to_string());
        let e = read("q.csv", "example_id,judge,p\n\"two\nlines\",a,0.5\nx,a,high\n").unwrap_err();
        assert!(e.ends_with("q.csv line 4: column `p`: `high` is not a number"), "{e}");
        let e = read("h.csv", "example_id,judge,p\n").unwrap_err();
        assert!(e.ends_with("h.csv: has no rows"), "{e}");
        let e = read("m.csv", "example_id,p\nx,0.5\n").unwrap_err();
        assert!(e.contains("missing column `judge` (columns found: `example_id`, `p`)"), "{e}");
        let e = read("s.csv", "example_id;judge;p\nx;a;0,5\n").unwrap_err();
        assert!(e.ends_with("(columns found: `example_id;judge;p`; jury reads comma-separated files, and this one looks separated by `;`)"), "{e}");
        let e = read("t.csv", "example_id\tjudge\tp\nx\ta\t0.5\n").unwrap_err();
        assert!(e.ends_with("looks separated by tabs)"), "{e}");
        let e = read("l.csv", "example_id,judge,probs\nx,a,\ny,a,[0.5\n").unwrap_err();
        assert!(e.ends_with("l.csv line 3: column `probs`: `[0.5` is not a JSON array of numbers"), "{e}");
        let e = read("e.csv", "example_id,judge,p\nx, ,0.5\n").unwrap_err();
        assert!(e.ends_with("e.csv line 2: column `judge`: empty value"), "{e}");
        // Rows out of (example, judge) order still land in their cells.
        let j = read_judgments(&write(dir.path(), "o.csv", "example_id,judge,p\nx,b,0.5\ny,a,0.25\nx,a,1\n")).unwrap();
        assert_eq!(j.get(0, 0), Some(&[0.5, 0.5][..]));
        assert_eq!(j.get(0, 1), Some(&[0.0, 1.0][..]));
        assert_eq!(j.get(1, 1), Some(&[0.75, 0.25][..]));
        assert_eq!(j.get(1, 0), None);
    }

    /// A file, or a judge, without a single probability is refused (empty cells alone
    /// once aggregated to an accuracy for every method); a judge missing on some
    /// examples is fine.
    #[test]
    fn judgments_without_any_probability_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let read = |name: &str, text: &str| read_judgments(&write(dir.path(), name, text)).map_err(|e| e.to_string());
        let e = read("e.csv", "example_id,judge,p\na,j1,\na,j2,\nb,j1,\n").unwrap_err();
        assert!(e.ends_with("e.csv: holds no judgment: every probability is empty"), "{e}");
        let e = read("e.jsonl", "{\"example_id\":\"a\",\"judge\":\"j\",\"p\":null}\n").unwrap_err();
        assert!(e.ends_with("e.jsonl: holds no judgment: every probability is empty"), "{e}");
        let e = read("l.csv", "example_id,judge,probs\na,j1,\n").unwrap_err();
        assert!(e.ends_with("l.csv: holds no judgment: every probability is empty"), "{e}");
        let e = read("k.csv", "example_id,judge,p\na,j1,0.9\na,j2,\nb,j1,0.2\nb,j2,\n").unwrap_err();
        assert!(e.ends_with("k.csv: judge `j2` has no judgment: the probability is empty on each of its rows"), "{e}");
        let e = read(
            "k.json",
            "[{\"example_id\":\"a\",\"judge\":\"j1\",\"p\":0.9},{\"example_id\":\"a\",\"judge\":\"j2\",\"p\":null}]",
        )
        .unwrap_err();
        assert!(e.contains("judge `j2` has no judgment"), "{e}");
        assert!(read("ok.csv", "example_id,judge,p\na,j1,0.9\na,j2,\nb,j2,0.3\n").is_ok());
    }

    /// A damaged Parquet file is named as not Parquet, not as text that is not UTF-8;
    /// a path that is not a regular file is refused before it is read.
    #[test]
    fn a_corrupt_parquet_file_or_a_special_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("j.parquet");
        std::fs::write(&p, b"PAR1\xff\xfe\x00garbage\x80\x81PAR1").unwrap();
        let e = read_judgments(&p).unwrap_err().to_string();
        assert!(e.contains("j.parquet: cannot read: not a valid Parquet file"), "{e}");
        assert!(!e.contains("UTF-8"), "{e}");
        let sub = dir.path().join("d.csv");
        std::fs::create_dir(&sub).unwrap();
        let e = read_judgments(&sub).unwrap_err().to_string();
        assert!(
            e.ends_with("d.csv: cannot read: a directory, not a regular file; jury reads only regular files"),
            "{e}"
        );
        let e = read_labels(&sub, &read_judgments(&write(dir.path(), "j.csv", GOOD)).unwrap()).unwrap_err().to_string();
        assert!(e.contains("d.csv: cannot read: a directory, not a regular file"), "{e}");
    }

    #[test]
    fn labels_accept_words_and_reject_out_of_range() {
        let dir = tempfile::tempdir().unwrap();
        let j = write(dir.path(), "j.csv", "example_id,judge,p\na,x,0.9\nb,x,0.1\nc,x,0.5\n");
        let judgments = read_judgments(&j).unwrap();
        let l = write(dir.path(), "l.csv", "example_id,label\na,Yes\nb,0\nzzz,1\n");
        let (labels, unmatched) = read_labels(&l, &judgments).unwrap();
        assert_eq!(labels.as_slice(), &[Some(1), Some(0), None]);
        assert_eq!(unmatched, 1);
        let bad = write(dir.path(), "bad.csv", "example_id,label\na,2\n");
        let e = read_labels(&bad, &judgments).unwrap_err().to_string();
        assert!(e.contains("bad.csv line 2: column `label`: `2` is not a label"), "{e}");
        let empty = write(dir.path(), "e.csv", "example_id,label\n");
        assert!(read_labels(&empty, &judgments).unwrap_err().to_string().ends_with("e.csv: has no rows"));
    }

    /// A plan labeled in part (a label left empty, a row removed, a size that changes
    /// between rows) is refused naming the file and line and saying what to do; plain
    /// labels with one empty say to label or remove it; the whole plan reads.
    #[test]
    fn a_plan_labeled_in_part_is_refused_saying_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let j = write(dir.path(), "j.csv", "example_id,judge,p\nx,a,0.2\ny,a,0.6\nz,a,0.7\n");
        let j = read_judgments(&j).unwrap();
        let error =
            |name: &str, text: &str| read_calibration(&write(dir.path(), name, text), &j).unwrap_err().to_string();
        let e = error("c.csv", "example_id,inclusion_probability,label\nx,0.5,0\ny,0.5,\nz,0.5,1\n");
        assert!(e.contains("c.csv line 3: column `label`: empty: a plan needs every planned example labeled"), "{e}");
        let e = error("u.csv", "example_id,label\nx,0\ny,\nz,1\n");
        assert!(e.contains("u.csv line 3: column `label`: empty: give every row a label, or remove the rows"), "{e}");
        let head = "example_id,inclusion_probability,plan_size,label\n";
        let whole = write(dir.path(), "w.csv", &format!("{head}x,0.5,3,0\ny,0.5,3,1\nz,0.5,3,1\n"));
        assert_eq!(read_calibration(&whole, &j).unwrap().labels, vec![0, 1, 1]);
        let e = error("p.csv", &format!("{head}x,0.5,3,0\nz,0.5,3,1\n"));
        assert!(e.contains("p.csv") && e.contains("2 rows of a plan of 3: label every planned example"), "{e}");
        let e = error("m.csv", &format!("{head}x,0.5,3,0\nz,0.5,2,1\n"));
        assert!(e.contains("m.csv line 3: column `plan_size`: differs from the first row's 3"), "{e}");
        // A plan drawn from another number of examples than the judgments': refused.
        let head = "example_id,inclusion_probability,plan_size,planned_from,label\n";
        let whole = write(dir.path(), "f.csv", &format!("{head}x,0.5,3,3,0\ny,0.5,3,3,1\nz,0.5,3,3,1\n"));
        assert_eq!(read_calibration(&whole, &j).unwrap().labels, vec![0, 1, 1]);
        let e = error("g.csv", &format!("{head}x,0.5,3,30,0\ny,0.5,3,30,1\nz,0.5,3,30,1\n"));
        assert!(
            e.contains("g.csv") && e.contains("`planned_from`: the plan was drawn from 30 examples, not these 3"),
            "{e}"
        );
        // Labels had, for a plan of more, may hold one class (the failures a team found);
        // as calibration labels they may not.
        let ones = write(dir.path(), "ones.csv", "example_id,label\nx,1\nz,1\n");
        assert_eq!(crate::read_labeled(&ones, &j).unwrap().index, vec![0, 2]);
        assert!(read_calibration(&ones, &j).unwrap_err().to_string().contains("one class only"));
        // A plan labeled in part, drawn from other examples: as labels had, its labeled
        // rows count (the plan's columns unread); as calibration labels it is refused.
        let part = write(dir.path(), "part.csv", &format!("{head}x,0.5,3,30,0\ny,0.5,3,30,\nz,0.5,3,30,1\n"));
        let had = crate::read_labeled(&part, &j).unwrap();
        assert_eq!((had.index, had.labels, had.inclusion), (vec![0, 2], vec![0, 1], None));
        assert!(read_calibration(&part, &j).is_err());
        let e = error("h.csv", &format!("{head}x,0.5,3,3,0\ny,0.5,3,3,1\nz,0.5,3,4,1\n"));
        assert!(e.contains("h.csv line 4: column `planned_from`: differs from the first row's 3"), "{e}");
    }

    /// A plan with the examples' text, labeled in a spreadsheet: the text columns are
    /// skipped, a field named `label` is never read as the label, and an error names the
    /// line its row starts on, past text that spans lines.
    #[test]
    fn a_plan_with_the_examples_text_reads_back_and_its_errors_name_the_row_s_line() {
        let dir = tempfile::tempdir().unwrap();
        let ids = ["x".to_owned(), "y".to_owned()];
        let row = |id, text| crate::PlanRow { example_id: id, inclusion_probability: 0.5, label: None, text };
        let plan = crate::label_plan_csv(
            2,
            &["question", "label"],
            &[row("x", vec!["Is it \"so\", or\nnot?", "old"]), row("y", vec!["=1+1", "new"])],
        );
        assert!(
            plan.starts_with("example_id,inclusion_probability,plan_size,planned_from,question,field_label\n"),
            "{plan}"
        );
        let labeled = |x: &str| {
            plan.replace("field_label\n", "field_label,label\n")
                .replace("old\n", &format!("old,{x}\n"))
                .replace("new\n", "new,1\n")
        };
        let read = read_calibration_among(&write(dir.path(), "ok.csv", &labeled("0")), &ids, 2).unwrap();
        assert_eq!((read.index, read.labels, read.inclusion), (vec![0, 1], vec![0, 1], Some(vec![0.5, 0.5])));
        // Row y starts on line 4: row x's question spans lines 2 and 3.
        let bad = plan
            .replace("field_label\n", "field_label,label\n")
            .replace("old\n", "old,0\n")
            .replace("new\n", "new,maybe\n");
        let e = read_calibration_among(&write(dir.path(), "bad.csv", &bad), &ids, 2).unwrap_err().to_string();
        assert!(e.contains("bad.csv line 4: column `label`: `maybe` is not a binary label"), "{e}");
    }

    /// Calibration labels against judgments of three classes: one message saying why,
    /// not that the first row's `0` is not binary.
    #[test]
    fn calibration_labels_for_judgments_of_three_classes_say_why() {
        let dir = tempfile::tempdir().unwrap();
        let j = write(dir.path(), "j.csv", "example_id,judge,p0,p1,p2\nx,a,0.2,0.3,0.5\ny,a,0.6,0.3,0.1\n");
        let c = write(dir.path(), "c.csv", "example_id,label\nx,0\ny,1\n");
        let e = read_calibration(&c, &read_judgments(&j).unwrap()).unwrap_err().to_string();
        assert!(e.contains("c.csv"), "{e}");
        assert!(e.ends_with("need judgments of two classes; these judgments have 3"), "{e}");
    }
}
