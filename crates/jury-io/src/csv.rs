//! CSV split by jury: RFC 4180 in one linear pass, every record checked against the
//! header's width, and every problem reported with the line it starts on.
//!
//! Library splitters tried before took a short row for one with nulls, named no line
//! for a bad one or slowed down quadratically on one very long line; jury's tables are
//! small enough in columns that a hand-written splitter is simple.

use crate::columns::{Columns, Value};

/// A cell of a record: a slice of the text, or (for a quoted field with `""` escapes)
/// an index into the record's unescaped strings.
#[derive(Clone, Copy)]
pub(crate) enum Cell {
    Span(u32, u32),
    Owned(u32),
}

/// One record as the scanner hands it over: the line it starts on (1-based), its cells
/// (`None` for an empty field) and the unescaped strings its `Owned` cells point into.
pub(crate) struct Record<'a> {
    pub(crate) line: usize,
    text: &'a str,
    cells: &'a [Option<Cell>],
    owned: &'a [String],
}

impl<'a> Record<'a> {
    pub(crate) fn len(&self) -> usize {
        self.cells.len()
    }

    /// The text of cell `i`; `None` when the field is empty.
    pub(crate) fn get(&self, i: usize) -> Option<&'a str> {
        match self.cells[i] {
            Some(Cell::Span(a, z)) => Some(&self.text[a as usize..z as usize]),
            Some(Cell::Owned(k)) => Some(self.owned[k as usize].as_str()),
            None => None,
        }
    }
}

/// A problem found while splitting: (line, reason).
pub(crate) type Malformed = (usize, String);

/// Splits CSV text (RFC 4180: fields on commas outside double quotes, records on line
/// breaks outside them; `\r\n` or `\n`; a leading byte-order mark is skipped) and hands
/// every non-blank record, the header first, to `on_record`. Every record must have the
/// header's number of fields. Memory is one record's cells, whatever the file's size.
pub(crate) fn scan<E>(
    text: &str,
    malformed: impl Fn(Malformed) -> E,
    mut on_record: impl FnMut(&Record<'_>) -> Result<(), E>,
) -> Result<(), E> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let b = text.as_bytes();
    if b.len() >= u32::MAX as usize {
        return Err(malformed((1, "larger than 4 GiB; split the file or use Parquet".into())));
    }
    let mut owned: Vec<String> = Vec::new();
    let mut cells: Vec<Option<Cell>> = Vec::new();
    let mut width: Option<usize> = None;
    let (mut line, mut i) = (1usize, 0usize);
    while i < b.len() {
        let record_line = line;
        cells.clear();
        owned.clear();
        // One record: fields until an unquoted line break or the end.
        loop {
            let cell = if b.get(i) == Some(&b'"') {
                let start = i + 1;
                let mut j = start;
                let mut escaped = false;
                loop {
                    match b.get(j) {
                        None => return Err(malformed((record_line, "a quoted field is never closed".into()))),
                        Some(b'"') if b.get(j + 1) == Some(&b'"') => {
                            escaped = true;
                            j += 2;
                        }
                        Some(b'"') => break,
                        Some(b'\n') => {
                            line += 1;
                            j += 1;
                        }
                        Some(_) => j += 1,
                    }
                }
                // Less the `'` that `csv_field` puts before a formula (no `"` is in it).
                let start = j - crate::write::unescape_formula(&text[start..j]).len();
                let inner = &text[start..j];
                i = j + 1;
                if escaped {
                    owned.push(inner.replace("\"\"", "\""));
                    Some(Cell::Owned((owned.len() - 1) as u32))
                } else {
                    Some(Cell::Span(start as u32, j as u32))
                }
            } else {
                let start = i;
                while i < b.len() && !matches!(b[i], b',' | b'\n') {
                    i += 1;
                }
                let end = if i > start && b[i - 1] == b'\r' && b.get(i) != Some(&b',') { i - 1 } else { i };
                (end > start).then_some(Cell::Span(start as u32, end as u32))
            };
            cells.push(cell);
            // After a quoted field: skip a `\r` before the line break.
            if b.get(i) == Some(&b'\r') && b.get(i + 1) == Some(&b'\n') {
                i += 1;
            }
            match b.get(i) {
                Some(b',') => i += 1,
                Some(b'\n') => {
                    i += 1;
                    line += 1;
                    break;
                }
                None => break,
                Some(_) => return Err(malformed((record_line, "text after a closing quote".into()))),
            }
        }
        if cells.len() == 1 && cells[0].is_none() {
            continue; // a blank line
        }
        match width {
            None => width = Some(cells.len()),
            Some(w) if w != cells.len() => {
                return Err(malformed((record_line, format!("{} fields, the header has {w}", cells.len()))));
            }
            Some(_) => {}
        }
        on_record(&Record { line: record_line, text, cells: &cells, owned: &owned })?;
    }
    Ok(())
}

/// The header's column names, checked to be distinct.
pub(crate) fn header_names(header: &Record<'_>) -> Result<Vec<String>, Malformed> {
    // A column without a name (a spreadsheet's export of once-used empty columns) is named
    // by its position, so that several are not one name twice; no reader asks for it.
    let names: Vec<String> =
        (0..header.len()).map(|i| header.get(i).map_or_else(|| format!("(column {})", i + 1), str::to_owned)).collect();
    for (k, name) in names.iter().enumerate() {
        if names[..k].contains(name) {
            return Err((header.line, format!("header: column `{name}` appears twice")));
        }
    }
    Ok(names)
}

/// The header's column names (checked distinct) without reading further; `None` for a
/// file without a record.
pub(crate) fn header(text: &str) -> Result<Option<Vec<String>>, Malformed> {
    enum Stop {
        Bad(Malformed),
        Names(Vec<String>),
    }
    match scan(text, Stop::Bad, |r| Err(header_names(r).map_or_else(Stop::Bad, Stop::Names))) {
        Ok(()) => Ok(None),
        Err(Stop::Names(names)) => Ok(Some(names)),
        Err(Stop::Bad(m)) => Err(m),
    }
}

/// The text columns of CSV text (see [`scan`]); an empty field is an empty cell.
pub(crate) fn frame(text: &str) -> Result<Columns, Malformed> {
    let mut columns: Option<Columns> = None;
    scan(
        text,
        |m| m,
        |r| {
            let Some(cols) = columns.as_mut() else {
                columns = Some(Columns::with_names(header_names(r)?).map_err(|e| (r.line, format!("header: {e}")))?);
                return Ok(());
            };
            // `scan` checked the record against the header's width.
            for (c, cells) in cols.cells.iter_mut().enumerate() {
                cells.push(r.get(c).map_or(Value::Null, |v| Value::Text(v.to_owned())));
            }
            cols.end_row();
            cols.lines.push(r.line);
            Ok(())
        },
    )?;
    Ok(columns.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::frame;
    use crate::columns::Value;

    #[test]
    fn csv_is_split_by_rfc_4180_and_a_bad_record_names_its_line() {
        let check = |t: &str| frame(t).err();
        assert_eq!(check("a,b\n1,2\n\"x,y\",3\n"), None);
        assert_eq!(check("a,b\n1,2\n3\n"), Some((3, "1 fields, the header has 2".into())));
        assert_eq!(check("a,b\n1,2\n3"), Some((3, "1 fields, the header has 2".into())));
        assert_eq!(check("a,b\n1,\"2\n3,4\n"), Some((2, "a quoted field is never closed".into())));
        assert_eq!(check("a,b\n\"multi\nline\",2\n5,6,7\n"), Some((4, "3 fields, the header has 2".into())));
        assert_eq!(check("a,a\n1,2\n"), Some((1, "header: column `a` appears twice".into())));
        let cols = frame("\u{feff}a,b\r\n1,\"say \"\"hi\"\"\"\r\n,\"x,\ny\"\r\n\n").unwrap();
        assert_eq!((cols.names.as_slice(), cols.height), (&["a".to_owned(), "b".to_owned()][..], 2));
        let text = |s: &str| Value::Text(s.into());
        assert_eq!(cols.cells[0], [text("1"), Value::Null]);
        assert_eq!(cols.cells[1], [text("say \"hi\""), text("x,\ny")]);
        // Each row's own first line, past a field's line break and a blank line.
        assert_eq!(cols.lines, [2, 3]);
        assert_eq!(frame("a,b\n\"x\ny\",1\n\n2,3\n").unwrap().lines, [2, 5]);
        // Columns without a name are kept apart by their position.
        let unnamed = frame("a,,b,\n1,,2,\n").unwrap();
        assert_eq!(unnamed.names, ["a", "(column 2)", "b", "(column 4)"]);
        assert_eq!(unnamed.cells[2], [text("2")]);
    }
}
