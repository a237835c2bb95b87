//! Durable, append-only cache of finished results, so a run killed at any moment (even
//! `kill -9`) resumes without redoing or losing finished work and without duplicates.
//!
//! Format: JSON Lines, one `{"key": ..., "value": ...}` object per finished result,
//! each written with a single `write` of a whole line and flushed. Invariants:
//! - only whole lines count: on open, a torn last line (the process died mid-write) is
//!   cut off before anything new is appended;
//! - a key is written at most once per file (`insert` of a present key is a no-op), so
//!   reruns never add duplicate rows;
//! - keys are content hashes ([`key`]) of everything that changes the answer, so a changed
//!   model file, template or prompt misses the cache instead of returning a stale value.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{} line {line}: not a cache record: {source}", path.display())]
    Parse { path: PathBuf, line: usize, source: serde_json::Error },
}

/// Hex SHA-256 over the parts, each length-prefixed so `("ab", "c")` and `("a", "bc")`
/// differ.
pub fn key(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Hex SHA-256 of a file's bytes, streamed.
pub fn file_sha256(path: &Path) -> Result<String, CacheError> {
    let err = |source| CacheError::Io { path: path.to_owned(), source };
    let mut f = File::open(path).map_err(err)?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).map_err(err)?;
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

#[derive(Serialize, serde::Deserialize)]
struct Line<T> {
    key: String,
    value: T,
}

/// An open cache file.
pub struct Cache<T> {
    path: PathBuf,
    file: File,
    entries: HashMap<String, T>,
}

impl<T: Serialize + DeserializeOwned + Clone> Cache<T> {
    /// Opens (creating if needed) the cache at `path` and loads its whole lines.
    pub fn open(path: &Path) -> Result<Self, CacheError> {
        let err = |source| CacheError::Io { path: path.to_owned(), source };
        let mut file = OpenOptions::new().create(true).read(true).append(true).open(path).map_err(err)?;
        let mut entries = HashMap::new();
        let mut good_len = 0u64;
        let mut reader = BufReader::new(&mut file);
        let mut buf = String::new();
        let mut line_no = 0;
        loop {
            buf.clear();
            let n = reader.read_line(&mut buf).map_err(err)?;
            if n == 0 {
                break;
            }
            line_no += 1;
            if !buf.ends_with('\n') {
                break; // torn final write: dropped below
            }
            let line: Line<T> = serde_json::from_str(buf.trim_end()).map_err(|source| CacheError::Parse {
                path: path.to_owned(),
                line: line_no,
                source,
            })?;
            entries.entry(line.key).or_insert(line.value);
            good_len += n as u64;
        }
        drop(reader);
        if file.metadata().map_err(err)?.len() != good_len {
            file.set_len(good_len).map_err(err)?;
        }
        file.seek(SeekFrom::End(0)).map_err(err)?;
        Ok(Self { path: path.to_owned(), file, entries })
    }

    pub fn get(&self, key: &str) -> Option<&T> {
        self.entries.get(key)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Appends a finished result durably (one whole-line write, then flush).
    pub fn insert(&mut self, key: String, value: T) -> Result<(), CacheError> {
        if self.entries.contains_key(&key) {
            return Ok(());
        }
        let mut text = serde_json::to_string(&Line { key: key.clone(), value: value.clone() })
            .map_err(|source| CacheError::Parse { path: self.path.clone(), line: 0, source })?;
        text.push('\n');
        let err = |source| CacheError::Io { path: self.path.clone(), source };
        self.file.write_all(text.as_bytes()).map_err(err)?;
        self.file.flush().map_err(err)?;
        self.entries.insert(key, value);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn survives_reopen_and_drops_a_torn_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.jsonl");
        let mut c: Cache<f64> = Cache::open(&p).unwrap();
        c.insert("a".into(), 0.25).unwrap();
        c.insert("b".into(), 0.5).unwrap();
        c.insert("a".into(), 0.9).unwrap(); // no duplicate, first value kept
        drop(c);
        // Simulate a crash mid-write.
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"key\":\"c\",\"val").unwrap();
        drop(f);
        let mut c: Cache<f64> = Cache::open(&p).unwrap();
        assert_eq!((c.get("a"), c.get("b"), c.get("c")), (Some(&0.25), Some(&0.5), None));
        c.insert("c".into(), 0.75).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(text.ends_with("{\"key\":\"c\",\"value\":0.75}\n"));
    }

    #[test]
    fn keys_separate_parts() {
        assert_ne!(key(&[b"ab", b"c"]), key(&[b"a", b"bc"]));
        assert_eq!(key(&[b"x"]).len(), 64);
    }
}
