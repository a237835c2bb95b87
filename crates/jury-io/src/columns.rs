//! The cells of a JSON or Parquet input table, each in the type the file gave it: read
//! without a dataframe library (one record at a time into columns), so the build stays
//! small and each column accessor of `table.rs` converts, or refuses, cell by cell with
//! the row named.

use std::collections::HashMap;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One cell as the file held it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
    List(Vec<Value>),
    /// A value no column accessor takes (a JSON object, a Parquet struct or map), named
    /// for the error that refuses it.
    Other(&'static str),
}

impl Value {
    /// What the cell holds, in an error's words.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Value::Null => "empty",
            Value::Bool(_) => "a boolean",
            Value::Int(_) | Value::Float(_) => "a number",
            Value::Text(_) => "text",
            Value::List(_) => "a list",
            Value::Other(what) => what,
        }
    }
}

/// Named columns of equal height, filled one record at a time; a key a record lacks is
/// an empty cell, and a key first seen late is empty on every earlier row.
#[derive(Debug, Default)]
pub(crate) struct Columns {
    pub(crate) names: Vec<String>,
    pub(crate) cells: Vec<Vec<Value>>,
    pub(crate) height: usize,
    /// The line each row starts on, where the source has lines that rows may span or
    /// skip (CSV: a quoted field holds line breaks; CSV and JSON Lines: a blank line is
    /// no row); empty otherwise, and rows are then located by their number alone.
    pub(crate) lines: Vec<usize>,
    index: HashMap<String, usize>,
}

impl Columns {
    /// Columns named in order with no rows yet; a repeated name is refused.
    pub(crate) fn with_names(names: Vec<String>) -> Result<Self, String> {
        let mut out = Columns::default();
        for name in names {
            out.column(&name).map_err(|_| format!("column `{name}` appears twice"))?;
        }
        Ok(out)
    }

    /// The index of column `name`, added (empty on every earlier row) when new; an
    /// error when the current record already set it.
    fn column(&mut self, name: &str) -> Result<usize, ()> {
        if let Some(&c) = self.index.get(name) {
            return if self.cells[c].len() > self.height { Err(()) } else { Ok(c) };
        }
        self.names.push(name.to_owned());
        self.cells.push(vec![Value::Null; self.height]);
        self.index.insert(name.to_owned(), self.names.len() - 1);
        Ok(self.names.len() - 1)
    }

    /// Sets `name` in the current record; a second value for one key is an error.
    pub(crate) fn set(&mut self, name: &str, value: Value) -> Result<(), String> {
        let c = self.column(name).map_err(|_| format!("key `{name}` appears twice in one record"))?;
        self.cells[c].push(value);
        Ok(())
    }

    /// Ends the current record: every column it did not set is empty there.
    pub(crate) fn end_row(&mut self) {
        self.height += 1;
        for col in &mut self.cells {
            if col.len() < self.height {
                col.push(Value::Null);
            }
        }
    }
}

/// JSON Lines: one object per non-blank line. Err: the line (1-based) and why.
pub(crate) fn json_lines(text: &str) -> Result<Columns, (usize, String)> {
    let mut cols = Columns::default();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut de = serde_json::Deserializer::from_str(line);
        RecordSeed(&mut cols).deserialize(&mut de).and_then(|()| de.end()).map_err(|e| {
            let reason = if e.is_syntax() || e.is_eof() { format!("not a JSON value: {e}") } else { e.to_string() };
            (i + 1, reason)
        })?;
        cols.lines.push(i + 1);
    }
    Ok(cols)
}

/// A JSON array of objects. Err: the line serde_json names and why.
pub(crate) fn json_array(text: &str) -> Result<Columns, (usize, String)> {
    let mut cols = Columns::default();
    let mut de = serde_json::Deserializer::from_str(text);
    ArraySeed(&mut cols).deserialize(&mut de).and_then(|()| de.end()).map_err(|e| (e.line(), e.to_string()))?;
    Ok(cols)
}

/// Reads one JSON object into the next row of the columns.
struct RecordSeed<'a>(&'a mut Columns);

impl<'de> DeserializeSeed<'de> for RecordSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RecordSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a record (a JSON object)")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value::<Value>()?;
            self.0.set(&key, value).map_err(serde::de::Error::custom)?;
        }
        self.0.end_row();
        Ok(())
    }
}

/// Reads a JSON array of objects, one row each.
struct ArraySeed<'a>(&'a mut Columns);

impl<'de> DeserializeSeed<'de> for ArraySeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ArraySeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of records (JSON objects)")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(RecordSeed(&mut *self.0))?.is_some() {}
        Ok(())
    }
}

impl<'de> serde::Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(i64::try_from(v).map_or(Value::Float(v as f64), Value::Int))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Text(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::Text(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element::<Value>()? {
            out.push(v);
        }
        Ok(Value::List(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Value::Other("a JSON object"))
    }
}

/// A Parquet file's top-level columns, row by row. Err: why the file is not readable
/// Parquet (the reader's own words).
pub(crate) fn parquet(bytes: Vec<u8>) -> Result<Columns, String> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let reader = SerializedFileReader::new(bytes::Bytes::from(bytes)).map_err(|e| e.to_string())?;
    let names = reader.metadata().file_metadata().schema_descr().root_schema().get_fields();
    let mut cols = Columns::with_names(names.iter().map(|f| f.name().to_owned()).collect())?;
    for row in reader.get_row_iter(None).map_err(|e| e.to_string())? {
        for (name, field) in row.map_err(|e| e.to_string())?.into_columns() {
            cols.set(&name, from_parquet(field))?;
        }
        cols.end_row();
    }
    Ok(cols)
}

fn from_parquet(field: parquet::record::Field) -> Value {
    use parquet::record::Field as F;
    match field {
        F::Null => Value::Null,
        F::Bool(b) => Value::Bool(b),
        F::Byte(x) => Value::Int(x.into()),
        F::Short(x) => Value::Int(x.into()),
        F::Int(x) => Value::Int(x.into()),
        F::Long(x) => Value::Int(x),
        F::UByte(x) => Value::Int(x.into()),
        F::UShort(x) => Value::Int(x.into()),
        F::UInt(x) => Value::Int(x.into()),
        F::ULong(x) => i64::try_from(x).map_or(Value::Float(x as f64), Value::Int),
        F::Float16(x) => Value::Float(x.into()),
        F::Float(x) => Value::Float(x.into()),
        F::Double(x) => Value::Float(x),
        F::Str(s) => Value::Text(s),
        F::ListInternal(list) => Value::List(list.elements().iter().cloned().map(from_parquet).collect()),
        F::Group(_) => Value::Other("a Parquet struct"),
        F::MapInternal(_) => Value::Other("a Parquet map"),
        // Decimals, dates, times and raw bytes as the reader prints them.
        other @ (F::Decimal(_)
        | F::Bytes(_)
        | F::Date(_)
        | F::TimeMillis(_)
        | F::TimeMicros(_)
        | F::TimestampMillis(_)
        | F::TimestampMicros(_)) => Value::Text(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_records_fill_columns_with_empty_cells_where_a_key_is_missing() {
        let c = json_lines("{\"a\": 1, \"b\": \"x\"}\n\n{\"b\": null, \"c\": [1, 2.5]}\n{\"a\": true}\n").unwrap();
        assert_eq!(c.names, ["a", "b", "c"]);
        assert_eq!(c.height, 3);
        // The blank line is no row: the second row is on line 3.
        assert_eq!(c.lines, [1, 3, 4]);
        assert_eq!(c.cells[0], [Value::Int(1), Value::Null, Value::Bool(true)]);
        assert_eq!(c.cells[1], [Value::Text("x".into()), Value::Null, Value::Null]);
        assert_eq!(c.cells[2], [Value::Null, Value::List(vec![Value::Int(1), Value::Float(2.5)]), Value::Null]);
        let a = json_array("[{\"a\": 1, \"b\": \"x\"},\n {\"b\": null, \"c\": [1, 2.5]},\n {\"a\": true}]").unwrap();
        assert_eq!((a.names, a.cells, a.height), (c.names, c.cells, c.height));
    }

    #[test]
    fn json_errors_name_the_line() {
        let e = json_lines("{\"a\": 1}\n{\"a\": \n").unwrap_err();
        assert_eq!(e.0, 2);
        assert!(e.1.starts_with("not a JSON value"), "{e:?}");
        let e = json_lines("{\"a\": 1}\n[1]\n").unwrap_err();
        assert_eq!(e.0, 2);
        assert!(e.1.contains("expected a record"), "{e:?}");
        let e = json_lines("{\"a\": 1, \"a\": 2}\n").unwrap_err();
        assert!(e.1.contains("key `a` appears twice in one record"), "{e:?}");
        let e = json_array("[{\"a\": 1},\n{\"a\": 2},\n3]").unwrap_err();
        assert_eq!(e.0, 3, "{e:?}");
        let e = json_array("{\"a\": 1}").unwrap_err();
        assert!(e.1.contains("expected an array of records"), "{e:?}");
    }

    #[test]
    fn a_nested_object_is_kept_as_a_value_no_accessor_takes() {
        let c = json_lines("{\"a\": {\"x\": [1, {\"y\": 2}]}}\n").unwrap();
        assert_eq!(c.cells[0], [Value::Other("a JSON object")]);
    }
}
