//! Whole-file atomic writes: readers see the old file or the new one, never a mix. And
//! text made safe for where it goes: CSV cells a spreadsheet will not run, terminal text
//! that cannot move the cursor or retitle the window.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;

use crate::IoError;

/// Writes `contents` to `path` through a temporary file in the same directory and a
/// rename. The parent directory must exist.
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<(), IoError> {
    let err = |source| IoError::Write { path: path.to_owned(), source };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(err)?;
    tmp.write_all(contents).map_err(err)?;
    tmp.as_file().sync_all().map_err(err)?;
    tmp.persist(path).map_err(|e| err(e.error))?;
    Ok(())
}

/// Writes `value` as pretty-printed JSON to `path`, atomically: every JSON record a
/// command leaves in its folder (metrics.json, manifest.json, winrate.json, ...).
pub fn write_json<T: serde::Serialize + ?Sized>(path: &Path, value: &T) -> Result<(), IoError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| IoError::Write { path: path.to_owned(), source: std::io::Error::other(e) })?;
    write_atomic(path, text.as_bytes())
}

/// Reads a JSON record written by [`write_json`] (within the input size limit).
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, IoError> {
    let read = |source: Box<dyn std::error::Error + Send + Sync>| IoError::Read { path: path.to_owned(), source };
    let text = crate::read_input_to_string(path).map_err(|e| read(Box::new(e)))?;
    serde_json::from_str(&text).map_err(|e| read(Box::new(e)))
}

/// Makes `tmp`, a file a writer filled beside `path` (in the same directory, for
/// writers that take a path of their own, such as safetensors), durable and then
/// visible as `path` in one rename: `path` is the old file or the whole new one.
pub fn persist_synced(tmp: &Path, path: &Path) -> Result<(), IoError> {
    std::fs::File::open(tmp)
        .and_then(|f| f.sync_all())
        .map_err(|source| IoError::Write { path: tmp.to_owned(), source })?;
    std::fs::rename(tmp, path).map_err(|source| IoError::Write { path: path.to_owned(), source })
}

/// A text cell (an id, a judge or category name, a reason; never a number jury
/// formatted) as a CSV field: quoted when it holds a delimiter, quote or line break
/// (RFC 4180), and kept from being run as a spreadsheet formula, as OWASP advises for
/// CSV injection.
///
/// The formula rule: a cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage
/// return after any run of single quotes (`'`), and is not a number (`-0.5` and `+3`
/// are harmless and stay as they are), is written quoted with one more `'` in front:
/// `=cmd|' /C calc'!A0` becomes `"'=cmd|' /C calc'!A0"`, which a spreadsheet shows as
/// text. jury's CSV reader takes one `'` off a quoted cell of that shape
/// ([`unescape_formula`]), so every id reads back as it was before writing; the run of
/// quotes makes the rule reversible for an id that itself starts with `'=`. A hand-written
/// quoted cell such as `"'=x"` therefore reads as `=x`.
pub fn csv_field(s: &str) -> Cow<'_, str> {
    if is_formula(s) {
        format!("\"'{}\"", s.replace('"', "\"\"")).into()
    } else if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\"")).into()
    } else {
        s.into()
    }
}

/// Whether [`csv_field`] puts a `'` in front of `s`.
fn is_formula(s: &str) -> bool {
    s.trim_start_matches('\'').starts_with(['=', '+', '-', '@', '\t', '\r']) && s.parse::<f64>().is_err()
}

/// The text of a quoted CSV cell with [`csv_field`]'s formula mark taken off: one
/// leading `'` where the cell starts with `'`s and then a formula character. (The
/// number exception needs no check here: a number never starts with `'`.)
pub(crate) fn unescape_formula(quoted: &str) -> &str {
    match quoted.strip_prefix('\'') {
        Some(rest) if is_formula(rest) => rest,
        _ => quoted,
    }
}

/// `s` made safe to print on a terminal: control characters (C0 but line feed and tab,
/// DEL, C1, which hold the ESC of ANSI colours, cursor moves and OSC window titles) and
/// the bidirectional overrides that reorder what is shown are written as escapes, `\x1b`
/// or `\u{202e}`. For every text from a file, a server or a command line that jury
/// prints: judge names, example ids, error messages that quote them.
pub fn terminal_text(s: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| {
        (c.is_control() && c != '\n' && c != '\t') || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !s.contains(unsafe_char) {
        return s.into();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !unsafe_char(c) {
            out.push(c);
        } else if (c as u32) < 0x100 {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_synced_file_replaces_the_old_one_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (tmp, path) = (dir.path().join("x.tmp"), dir.path().join("x.bin"));
        std::fs::write(&path, b"old").unwrap();
        std::fs::write(&tmp, b"new contents").unwrap();
        persist_synced(&tmp, &path).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new contents");
        assert!(!tmp.exists());
        let e = persist_synced(&dir.path().join("absent"), &path).unwrap_err().to_string();
        assert!(e.contains("absent"), "{e}");
    }

    #[test]
    fn atomic_write_replaces_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.txt");
        write_atomic(&p, b"first version, long").unwrap();
        write_atomic(&p, b"second").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "second");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file left behind");
        let missing = dir.path().join("no/such/dir/x.txt");
        assert!(write_atomic(&missing, b"x").unwrap_err().to_string().contains("no/such/dir/x.txt"));
    }

    #[test]
    fn csv_quoting() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }

    /// OWASP's CSV injection rule, reversed by the reader's [`unescape_formula`]; numbers
    /// and ordinary text are left alone.
    #[test]
    fn a_formula_cell_is_written_as_text_and_reads_back() {
        for (id, written) in [
            ("=cmd|' /C calc'!A0", "\"'=cmd|' /C calc'!A0\""),
            ("+1+1", "\"'+1+1\""),
            ("-2+3", "\"'-2+3\""),
            ("@SUM(A1)", "\"'@SUM(A1)\""),
            ("\tx", "\"'\tx\""),
            ("\r=x", "\"'\r=x\""),
            ("'=x", "\"''=x\""),
            ("=a,\"b\"", "\"'=a,\"\"b\"\"\""),
            ("-0.5", "-0.5"),
            ("+3", "+3"),
            ("a=b", "a=b"),
            ("'quoted'", "'quoted'"),
            ("", ""),
        ] {
            assert_eq!(csv_field(id), written, "{id:?}");
            let inner = written.strip_prefix('"').and_then(|w| w.strip_suffix('"'));
            let read = inner.map_or(written.to_owned(), |i| unescape_formula(&i.replace("\"\"", "\"")).to_owned());
            assert_eq!(read, id, "{written:?}");
        }
        // A quoted cell starting with `'` and no formula character keeps its quote.
        assert_eq!(unescape_formula("'quoted'"), "'quoted'");
    }

    #[test]
    fn control_characters_are_escaped_for_the_terminal() {
        assert_eq!(terminal_text("judge-1 é ✓\tok\nnext"), "judge-1 é ✓\tok\nnext");
        assert!(matches!(terminal_text("plain"), Cow::Borrowed(_)));
        assert_eq!(terminal_text("j\x1b]0;pwned\x07"), "j\\x1b]0;pwned\\x07");
        assert_eq!(terminal_text("\x1b[2J\r\x7f\u{9b}31m"), "\\x1b[2J\\x0d\\x7f\\x9b31m");
        assert_eq!(terminal_text("a\u{202e}b"), "a\\u{202e}b");
    }
}
