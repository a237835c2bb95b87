//! Whole-file atomic writes: readers see the old file or the new one, never a mix.

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

/// Makes `tmp`, a file a writer filled beside `path` (in the same directory, for
/// writers that take a path of their own, such as safetensors), durable and then
/// visible as `path` in one rename: `path` is the old file or the whole new one.
pub fn persist_synced(tmp: &Path, path: &Path) -> Result<(), IoError> {
    std::fs::File::open(tmp)
        .and_then(|f| f.sync_all())
        .map_err(|source| IoError::Write { path: tmp.to_owned(), source })?;
    std::fs::rename(tmp, path).map_err(|source| IoError::Write { path: path.to_owned(), source })
}

/// Quotes a CSV field when it holds a delimiter, quote or line break (RFC 4180).
pub fn csv_field(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([',', '"', '\n', '\r']) { format!("\"{}\"", s.replace('"', "\"\"")).into() } else { s.into() }
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
}
