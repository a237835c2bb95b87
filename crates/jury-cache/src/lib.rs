//! Durable, append-only cache of finished results, so a run killed at any moment (even
//! `kill -9`) resumes without redoing or losing finished work and without duplicates.
//!
//! Format: JSON Lines, one `{"key": ..., "value": ..., "sum": ...}` object per finished
//! result (`sum`: a checksum of key and value),
//! each written with a single `write` of a whole line and flushed. Invariants:
//! - only whole lines count: on open, a torn last line (the process died mid-write) is
//!   cut off before anything new is appended; a damaged whole line (not a record, or a
//!   record failing its checksum) is left in place and reported, and its result computed
//!   again;
//! - a key is written at most once per file (`insert` of a present key is a no-op), so
//!   reruns never add duplicate rows;
//! - keys are content hashes ([`key`]) of everything that changes the answer, so a changed
//!   model file, template or prompt misses the cache instead of returning a stale value.
//!
//! Also the other caches' place: [`default_root`] (embeddings, fine-tuning checkpoints).

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
    #[error("{0}; stopping (the cache's bad records are set to stop the run)")]
    BadRecord(DroppedRecord),
    #[error("{}: is a symbolic link; the cache is not opened through links (it truncates a torn last line)", path.display())]
    Symlink { path: PathBuf },
}

/// The default root of jury's on-disk caches (embeddings, fine-tuning checkpoints):
/// `$XDG_CACHE_HOME/jury`, else `~/.cache/jury`, else `.cache/jury`.
pub fn default_root() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"))
        .join("jury")
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

/// The identity of a GGUF judge in cache keys: its weights' SHA-256, combined with the
/// tokenizer folder's that renders its prompts, when one does (the tokenizer changes
/// the token sequence, hence the answer). `jury run` and `jury rank --eval llm` key
/// their judgments with it.
pub fn gguf_identity(gguf: &Path, tokenizer: Option<&Path>) -> Result<String, CacheError> {
    let weights = file_sha256(gguf)?;
    Ok(match tokenizer {
        Some(dir) => key(&[weights.as_bytes(), dir_sha256(dir)?.as_bytes()]),
        None => weights,
    })
}

/// Hex SHA-256 identifying a model directory's contents: every regular file at its top
/// level (symbolic links followed), by name and content hash, in name order. A file
/// that is a link into a Hugging Face hub cache's `blobs/` folder whose target is named by
/// a 64-hex-digit SHA-256 (how the hub stores large files) is identified by that name
/// instead of being read again, so a cached 70B snapshot costs no I/O here.
pub fn dir_sha256(dir: &Path) -> Result<String, CacheError> {
    let err = |path: &Path| {
        let path = path.to_owned();
        move |source| CacheError::Io { path, source }
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(err(dir))? {
        let path = entry.map_err(err(dir))?.path();
        if std::fs::metadata(&path).map_err(err(&path))?.is_file() {
            files.push(path);
        }
    }
    files.sort();
    let mut parts = Vec::with_capacity(files.len() * 2);
    for path in &files {
        let blob = std::fs::read_link(path).ok().and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()));
        let hash = match blob {
            Some(name) if name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit()) => name,
            _ => file_sha256(path)?,
        };
        parts.push(path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
        parts.push(hash);
    }
    Ok(key(&parts.iter().map(|p| p.as_bytes()).collect::<Vec<_>>()))
}

#[derive(serde::Deserialize)]
struct Line<'a> {
    key: String,
    #[serde(borrow)]
    value: &'a serde_json::value::RawValue,
    /// [`checksum`] of the key and the value's text; absent in records written before
    /// checksums (trusted as they are).
    #[serde(default)]
    sum: Option<String>,
}

/// The record checksum: the first 16 hex digits of SHA-256 over the key and the value
/// exactly as written.
fn checksum(key_text: &str, value_text: &str) -> String {
    let mut k = key(&[key_text.as_bytes(), value_text.as_bytes()]);
    k.truncate(16);
    k
}

/// A cache record that was left out on open (and so is computed again), and why.
#[derive(Debug, Clone, PartialEq)]
pub struct DroppedRecord {
    pub path: PathBuf,
    pub line: usize,
    pub reason: String,
}

impl std::fmt::Display for DroppedRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} line {}: {}", self.path.display(), self.line, self.reason)
    }
}

/// What to do with a whole line that is not a record, or a record that fails its
/// checksum or the caller's value check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnBadRecord {
    /// Leave it out (its result is computed again) and report it in [`Cache::dropped`].
    #[default]
    Recompute,
    /// Stop with [`CacheError::BadRecord`].
    Stop,
}

/// An open cache file.
pub struct Cache<T> {
    path: PathBuf,
    file: File,
    entries: HashMap<String, T>,
    dropped: Vec<DroppedRecord>,
}

impl<T: Serialize + DeserializeOwned + Clone> Cache<T> {
    /// Opens (creating if needed) the cache at `path` and loads its whole lines.
    pub fn open(path: &Path) -> Result<Self, CacheError> {
        Self::open_checked(path, |_| Ok(()), OnBadRecord::Recompute)
    }

    /// [`Cache::open`], with `check` run on every value read: a whole line that is not a
    /// record, or a record whose checksum or check fails, is handled as `on_bad` says.
    pub fn open_checked(
        path: &Path,
        check: impl Fn(&T) -> Result<(), String>,
        on_bad: OnBadRecord,
    ) -> Result<Self, CacheError> {
        let err = |source| CacheError::Io { path: path.to_owned(), source };
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(CacheError::Symlink { path: path.to_owned() });
        }
        let mut file = OpenOptions::new().create(true).read(true).append(true).open(path).map_err(err)?;
        let mut entries = HashMap::new();
        let mut dropped = Vec::new();
        let mut good_len = 0u64;
        let mut reader = BufReader::new(&mut file);
        let mut buf = Vec::new();
        let mut line_no = 0;
        loop {
            buf.clear();
            let n = reader.read_until(b'\n', &mut buf).map_err(err)?;
            if n == 0 {
                break;
            }
            line_no += 1;
            if !buf.ends_with(b"\n") {
                break; // torn final write: dropped below
            }
            good_len += n as u64;
            // A whole line that is not a record (damaged bytes, a stray edit) is a damaged
            // record whose key is unknown: left in place, reported, and its result, never
            // found under any key, computed again.
            let text = match std::str::from_utf8(&buf) {
                Ok(t) if t.trim().is_empty() => continue,
                Ok(t) => t.trim_end(),
                Err(_) => {
                    let reason = "not a cache record: not UTF-8 text".to_owned();
                    dropped.push((None, DroppedRecord { path: path.to_owned(), line: line_no, reason }));
                    continue;
                }
            };
            let line: Line = match serde_json::from_str(text) {
                Ok(line) => line,
                Err(e) => {
                    let reason = format!("not a cache record: {e}");
                    dropped.push((None, DroppedRecord { path: path.to_owned(), line: line_no, reason }));
                    continue;
                }
            };
            let verdict = match &line.sum {
                Some(sum) if *sum != checksum(&line.key, line.value.get()) => {
                    Err("the record fails its checksum (edited or damaged)".to_owned())
                }
                _ => match serde_json::from_str::<T>(line.value.get()) {
                    Ok(v) => check(&v).map(|()| v).map_err(|e| format!("value out of range: {e}")),
                    Err(e) => Err(format!("value unreadable: {e}")),
                },
            };
            match verdict {
                Ok(v) => {
                    entries.entry(line.key).or_insert(v);
                }
                Err(reason) => {
                    dropped.push((Some(line.key), DroppedRecord { path: path.to_owned(), line: line_no, reason }))
                }
            }
        }
        // A bad record whose key a later whole record holds was computed again already.
        let dropped: Vec<DroppedRecord> = dropped
            .into_iter()
            .filter(|(k, _)| k.as_ref().is_none_or(|k| !entries.contains_key(k)))
            .map(|(_, d)| d)
            .collect();
        if on_bad == OnBadRecord::Stop
            && let Some(first) = dropped.first()
        {
            return Err(CacheError::BadRecord(first.clone()));
        }
        drop(reader);
        if file.metadata().map_err(err)?.len() != good_len {
            file.set_len(good_len).map_err(err)?;
        }
        file.seek(SeekFrom::End(0)).map_err(err)?;
        Ok(Self { path: path.to_owned(), file, entries, dropped })
    }

    /// The records left out on open (each is computed again and appended anew).
    pub fn dropped(&self) -> &[DroppedRecord] {
        &self.dropped
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
        let ser = |source| CacheError::Parse { path: self.path.clone(), line: 0, source };
        let key_json = serde_json::to_string(&key).map_err(ser)?;
        let value_text = serde_json::to_string(&value).map_err(ser)?;
        let sum = checksum(&key, &value_text);
        let text = format!("{{\"key\":{key_json},\"value\":{value_text},\"sum\":\"{sum}\"}}\n");
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
    fn directory_hash_follows_contents_and_trusts_hub_blob_names() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("model");
        std::fs::create_dir(&model).unwrap();
        std::fs::write(model.join("config.json"), "{}").unwrap();
        std::fs::write(model.join("model.safetensors"), "weights").unwrap();
        std::fs::create_dir(model.join("subdir")).unwrap();
        let first = dir_sha256(&model).unwrap();
        assert_eq!(dir_sha256(&model).unwrap(), first);
        std::fs::write(model.join("model.safetensors"), "other weights").unwrap();
        let changed = dir_sha256(&model).unwrap();
        assert_ne!(changed, first);
        // A hub snapshot's link to a blob named by its SHA-256 is identified by that name.
        let blobs = dir.path().join("blobs");
        std::fs::create_dir(&blobs).unwrap();
        let name = "ab".repeat(32);
        std::fs::write(blobs.join(&name), "never read").unwrap();
        std::fs::remove_file(model.join("model.safetensors")).unwrap();
        std::os::unix::fs::symlink(blobs.join(&name), model.join("model.safetensors")).unwrap();
        let linked = dir_sha256(&model).unwrap();
        let by_name = key(&[
            b"config.json",
            file_sha256(&model.join("config.json")).unwrap().as_bytes(),
            b"model.safetensors",
            name.as_bytes(),
        ]);
        assert_eq!(linked, by_name);
        assert!(matches!(dir_sha256(&dir.path().join("missing")), Err(CacheError::Io { .. })));
    }

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
        assert!(text.ends_with(&format!("{{\"key\":\"c\",\"value\":0.75,\"sum\":\"{}\"}}\n", checksum("c", "0.75"))));
    }

    #[test]
    fn edited_or_out_of_range_records_are_recomputed_or_stop_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.jsonl");
        let mut c: Cache<f64> = Cache::open(&p).unwrap();
        c.insert("a".into(), 0.25).unwrap();
        c.insert("b".into(), 0.5).unwrap();
        drop(c);
        // A hand edit of one value, and a record from before checksums with a value
        // outside the caller's range.
        let text = std::fs::read_to_string(&p).unwrap().replace("0.25", "0.95") + "{\"key\":\"d\",\"value\":1.5}\n";
        std::fs::write(&p, text).unwrap();
        let in_unit = |v: &f64| if (0.0..=1.0).contains(v) { Ok(()) } else { Err(format!("{v} is not in [0, 1]")) };
        let c: Cache<f64> = Cache::open_checked(&p, in_unit, OnBadRecord::Recompute).unwrap();
        assert_eq!((c.get("a"), c.get("b"), c.get("d")), (None, Some(&0.5), None));
        let shown: Vec<String> = c.dropped().iter().map(ToString::to_string).collect();
        assert!(shown[0].contains("c.jsonl line 1: the record fails its checksum"), "{shown:?}");
        assert!(shown[1].contains("line 3: value out of range: 1.5 is not in [0, 1]"), "{shown:?}");
        drop(c);
        let e = Cache::<f64>::open_checked(&p, in_unit, OnBadRecord::Stop).err().unwrap().to_string();
        assert!(e.contains("line 1") && e.contains("stopping"), "{e}");
        // A recomputed record is appended anew and then read back; the bad line it
        // replaces is no longer reported.
        let mut c: Cache<f64> = Cache::open_checked(&p, in_unit, OnBadRecord::Recompute).unwrap();
        c.insert("a".into(), 0.25).unwrap();
        drop(c);
        let c: Cache<f64> = Cache::open_checked(&p, in_unit, OnBadRecord::Recompute).unwrap();
        assert_eq!(c.get("a"), Some(&0.25));
        assert_eq!(c.dropped().len(), 1, "only line 3 (key d) is still bad");
    }

    /// A whole line that is not JSON (or not UTF-8) is a damaged record: left out,
    /// reported with its line, the records around it kept, and the run stopped instead
    /// only when bad records are set to stop it. It once stopped every rerun.
    #[test]
    fn a_line_that_is_not_a_record_is_dropped_like_a_damaged_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.jsonl");
        let mut c: Cache<f64> = Cache::open(&p).unwrap();
        c.insert("a".into(), 0.25).unwrap();
        drop(c);
        let mut bytes = std::fs::read(&p).unwrap();
        bytes.extend_from_slice(b"this is not json\n\n\xff\xfe{}\n");
        std::fs::write(&p, &bytes).unwrap();
        let mut c: Cache<f64> = Cache::open(&p).unwrap();
        c.insert("b".into(), 0.5).unwrap();
        drop(c);
        let c: Cache<f64> = Cache::open(&p).unwrap();
        assert_eq!((c.get("a"), c.get("b")), (Some(&0.25), Some(&0.5)));
        let shown: Vec<String> = c.dropped().iter().map(ToString::to_string).collect();
        assert_eq!(shown.len(), 2, "{shown:?}");
        assert!(shown[0].contains("c.jsonl line 2: not a cache record: expected ident"), "{shown:?}");
        assert!(shown[1].contains("c.jsonl line 4: not a cache record: not UTF-8 text"), "{shown:?}");
        assert!(std::fs::read(&p).unwrap().starts_with(&bytes), "the damaged lines stay as they were");
        drop(c);
        let stop = Cache::<f64>::open_checked(&p, |_| Ok(()), OnBadRecord::Stop).err().unwrap().to_string();
        assert!(stop.contains("c.jsonl line 2: not a cache record") && stop.contains("stopping"), "{stop}");
    }

    #[test]
    fn floats_round_trip_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.jsonl");
        let values = [0.1 + 0.2, 1.0 / 3.0, 2.2250738585072014e-308, 0.9999999999999999, 5e-324];
        let mut c: Cache<f64> = Cache::open(&p).unwrap();
        for (i, v) in values.iter().enumerate() {
            c.insert(i.to_string(), *v).unwrap();
        }
        drop(c);
        let c: Cache<f64> = Cache::open(&p).unwrap();
        for (i, v) in values.iter().enumerate() {
            assert_eq!(c.get(&i.to_string()).unwrap().to_bits(), v.to_bits());
        }
    }

    #[test]
    fn keys_separate_parts() {
        assert_ne!(key(&[b"ab", b"c"]), key(&[b"a", b"bc"]));
        assert_eq!(key(&[b"x"]).len(), 64);
    }
}
