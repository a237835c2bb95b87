//! Output directories that a command never destroys, mixes or shares: one process at a
//! time (an advisory lock), only over its own earlier output (a marker naming the
//! command and what it ran), never through symbolic links, and every file of a run
//! published together at the end.
//!
//! Publishing: the files of a run are written into `DIR/.jury-staging/` and moved into
//! `DIR` by rename only once the command has succeeded. The marker `DIR/.jury-output.json`
//! says `"complete": false` while the renames happen and lists the published files with
//! `"complete": true` when they are done: a reader trusts a directory whose marker is
//! complete. A command that fails before publishing leaves the previous files as they
//! were, and its staging folder is removed (by the failing process, or by the next
//! command on the directory).

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::json;

const MARKER: &str = crate::layout::MARKER;
const LOCK: &str = ".jury.lock";
const STAGING: &str = crate::layout::STAGING;

/// Who writes an output directory: the command and what it ran (the experiment's
/// name, or the input file). A directory is reused only by the same owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub command: String,
    pub source: String,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`jury {}` of {}", self.command, self.source)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("{}: cannot {what}: {source}", path.display())]
    Io { path: PathBuf, what: &'static str, source: std::io::Error },
    #[error("{}: in use by another jury process ({holder}); wait for it to finish or choose another output", path.display())]
    Locked { path: PathBuf, holder: String },
    #[error("{}: holds the output of {other}, not of {this}; choose another output, or pass --force (`overwrite: true` in an experiment) to replace it", path.display())]
    Foreign { path: PathBuf, other: String, this: String },
    #[error("{}: already holds {file} but no marker of a jury output (.jury-output.json; an older jury wrote none); choose another output, or pass --force (`overwrite: true` in an experiment) to replace it", path.display())]
    Occupied { path: PathBuf, file: String },
    #[error("{}: is a symbolic link; jury does not write through links", path.display())]
    Symlink { path: PathBuf },
}

/// An output directory held for one command (the lock is released on drop).
#[derive(Debug)]
pub struct OutputDir {
    dir: PathBuf,
    staging: PathBuf,
    owner: Owner,
    /// Whether this open created the directory.
    created: bool,
    /// Whether this open created the lock file.
    lock_created: bool,
    _lock: File,
}

fn io<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(std::io::Error) -> OutputError + 'a {
    move |source| OutputError::Io { path: path.to_owned(), what, source }
}

fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

impl OutputDir {
    /// Takes `dir` for `owner`, creating it if missing. `names`: every file the command
    /// may write there; in a directory without a marker, any of them already present is
    /// refused unless `overwrite`, and a symbolic link among them always is. A directory
    /// whose marker names another owner is refused unless `overwrite`.
    pub fn open(dir: &Path, owner: Owner, names: &[&str], overwrite: bool) -> Result<Self, OutputError> {
        let created = !dir.exists();
        std::fs::create_dir_all(dir).map_err(io(dir, "create the output directory"))?;
        let lock_path = dir.join(LOCK);
        if is_symlink(&lock_path) {
            return Err(OutputError::Symlink { path: lock_path });
        }
        let lock_existed = lock_path.exists();
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&lock_path)
            .map_err(io(&lock_path, "open the lock file"))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(&lock_path).unwrap_or_default();
                let holder = holder.trim();
                return Err(OutputError::Locked {
                    path: dir.to_owned(),
                    holder: if holder.is_empty() { "unknown".into() } else { holder.to_owned() },
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&lock_path, "lock")(e)),
        }
        match Self::claim(dir, owner, names, overwrite, lock, &lock_path, created) {
            Ok(mut out) => {
                out.lock_created = !lock_existed;
                Ok(out)
            }
            Err(e) => {
                // A refused command leaves the directory as it found it: no lock file it
                // made (it holds the lock, so no other process is using that file), and
                // no directory it created.
                if !lock_existed {
                    let _ = std::fs::remove_file(&lock_path);
                }
                if created {
                    let _ = std::fs::remove_dir(dir);
                }
                Err(e)
            }
        }
    }

    /// The checks and the claim of [`Self::open`], with the lock held.
    fn claim(
        dir: &Path,
        owner: Owner,
        names: &[&str],
        overwrite: bool,
        mut lock: File,
        lock_path: &Path,
        created: bool,
    ) -> Result<Self, OutputError> {
        lock.set_len(0).map_err(io(lock_path, "write the lock file"))?;
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        writeln!(lock, "pid {}, {owner}, since unix time {since}", std::process::id())
            .map_err(io(lock_path, "write the lock file"))?;
        for name in names {
            let p = dir.join(name);
            if is_symlink(&p) {
                return Err(OutputError::Symlink { path: p });
            }
        }
        match read_marker(dir) {
            Some((other, _)) if other != owner && !overwrite => {
                return Err(OutputError::Foreign {
                    path: dir.to_owned(),
                    other: other.to_string(),
                    this: owner.to_string(),
                });
            }
            None if !overwrite => {
                if let Some(file) = names.iter().find(|n| dir.join(n).exists()) {
                    return Err(OutputError::Occupied { path: dir.to_owned(), file: (*file).to_owned() });
                }
            }
            _ => {}
        }
        let staging = dir.join(STAGING);
        if is_symlink(&staging) {
            return Err(OutputError::Symlink { path: staging });
        }
        if staging.exists() {
            std::fs::remove_dir_all(&staging).map_err(io(&staging, "remove an earlier run's staging folder"))?;
        }
        std::fs::create_dir(&staging).map_err(io(&staging, "create the staging folder"))?;
        if read_marker(dir).is_none_or(|(other, _)| other != owner) {
            // Claimed before anything else is written, so that a run killed before it
            // publishes is resumed by its owner instead of refused as foreign files.
            write_marker(dir, &staging, &owner, false, &[])?;
        }
        Ok(Self { dir: dir.to_owned(), staging, owner, created, lock_created: false, _lock: lock })
    }

    /// Gives the directory up after a failure that kept nothing (for example a judge's
    /// setup failing before any judgment): a directory this open created, holding
    /// nothing but jury's lock, marker and staging folder and empty files, is removed,
    /// so the failed command leaves no trace. Any other directory stays as it is, less
    /// the lock file if this open made it.
    pub fn abandon(self) {
        let unused = |entry: &std::fs::DirEntry| {
            let name = entry.file_name();
            [LOCK, MARKER, STAGING].iter().any(|n| name == *n)
                || entry.metadata().is_ok_and(|m| m.is_file() && m.len() == 0)
        };
        let only_unused = std::fs::read_dir(&self.dir).is_ok_and(|mut d| d.all(|e| e.as_ref().is_ok_and(unused)));
        if self.created && only_unused {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else if self.lock_created {
            let _ = std::fs::remove_file(self.dir.join(LOCK));
        }
    }

    /// The output directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where a file is written before publishing.
    pub fn staged(&self, name: &str) -> PathBuf {
        self.staging.join(name)
    }

    /// The folder of staged files (for writers that take a directory).
    pub fn staging_dir(&self) -> &Path {
        &self.staging
    }

    /// Where a file lives in the output directory once published (or, for files kept
    /// up to date in place such as an append-only cache, always).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Moves every staged file into the directory, removes files the previous complete
    /// run of this owner published and this one did not, and marks the set complete.
    /// Returns the published names, sorted.
    pub fn publish(self) -> Result<Vec<String>, OutputError> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&self.staging).map_err(io(&self.staging, "list the staging folder"))? {
            let entry = entry.map_err(io(&self.staging, "list the staging folder"))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            // Dot files are jury's own temporaries, never outputs.
            if !name.starts_with('.') {
                names.push(name);
            }
        }
        names.sort();
        let previous = read_marker(&self.dir).map(|(_, files)| files).unwrap_or_default();
        write_marker(&self.dir, &self.staging, &self.owner, false, &names)?;
        for name in &names {
            let to = self.dir.join(name);
            std::fs::rename(self.staging.join(name), &to).map_err(io(&to, "publish"))?;
        }
        for old in previous.iter().filter(|f| !names.contains(f)) {
            let p = self.dir.join(old);
            if p.is_file() && !is_symlink(&p) {
                std::fs::remove_file(&p).map_err(io(&p, "remove a file of the previous run"))?;
            }
        }
        if let Ok(d) = File::open(&self.dir) {
            // Directory entries (the renames) reach the disk before the marker says so.
            let _ = d.sync_all();
        }
        write_marker(&self.dir, &self.staging, &self.owner, true, &names)?;
        std::fs::remove_dir_all(&self.staging).map_err(io(&self.staging, "remove the staging folder"))?;
        Ok(names)
    }
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        // After `publish` the folder is gone; after a failure its half-set is discarded.
        let _ = std::fs::remove_dir_all(&self.staging);
    }
}

/// The marker's owner and published files, when the directory has a readable marker.
fn read_marker(dir: &Path) -> Option<(Owner, Vec<String>)> {
    let text = std::fs::read_to_string(dir.join(MARKER)).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let owner = Owner { command: v["command"].as_str()?.to_owned(), source: v["source"].as_str()?.to_owned() };
    let files = v["files"].as_array().map_or_else(Vec::new, |a| {
        a.iter()
            .filter_map(|f| f.as_str())
            .filter(|f| !f.contains('/') && !f.starts_with('.'))
            .map(str::to_owned)
            .collect()
    });
    Some((owner, files))
}

/// Writes the marker through a temporary file in the staging folder (which a killed
/// command leaves for the next one to clear) and a rename.
fn write_marker(
    dir: &Path,
    staging: &Path,
    owner: &Owner,
    complete: bool,
    files: &[String],
) -> Result<(), OutputError> {
    let path = dir.join(MARKER);
    if is_symlink(&path) {
        return Err(OutputError::Symlink { path });
    }
    let doc = json!({"command": owner.command, "source": owner.source, "complete": complete, "files": files});
    let text = serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n";
    let tmp = staging.join(".marker");
    std::fs::write(&tmp, text).map_err(io(&tmp, "write the output marker"))?;
    crate::persist_synced(&tmp, &path).map_err(|e| match e {
        crate::IoError::Write { path, source } => OutputError::Io { path, what: "write the output marker", source },
        other => {
            OutputError::Io { path, what: "write the output marker", source: std::io::Error::other(other.to_string()) }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(source: &str) -> Owner {
        Owner { command: "run".into(), source: source.into() }
    }

    const NAMES: &[&str] = &["a.csv", "b.json", "cache.jsonl"];

    /// A directory the failed command created and kept nothing in goes; one with a
    /// judgment in its cache, or one that was there before, stays.
    #[test]
    fn abandoning_removes_only_a_directory_this_open_created_and_left_empty() {
        let root = tempfile::tempdir().unwrap();
        let fresh = root.path().join("fresh");
        let out = OutputDir::open(&fresh, owner("e"), NAMES, false).unwrap();
        std::fs::write(out.path("cache.jsonl"), "").unwrap();
        out.abandon();
        assert!(!fresh.exists());
        let out = OutputDir::open(&fresh, owner("e"), NAMES, false).unwrap();
        std::fs::write(out.path("cache.jsonl"), "{}\n").unwrap();
        out.abandon();
        assert_eq!(std::fs::read_to_string(fresh.join("cache.jsonl")).unwrap(), "{}\n");
        let before = root.path().join("before");
        std::fs::create_dir(&before).unwrap();
        OutputDir::open(&before, owner("e"), NAMES, false).unwrap().abandon();
        assert!(before.is_dir());
        assert!(!before.join(LOCK).exists(), "the lock file this open made goes too");
    }

    #[test]
    fn nothing_is_replaced_until_publish_and_then_all_at_once() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("out");
        let o = OutputDir::open(&out, owner("e"), NAMES, false).unwrap();
        std::fs::write(o.staged("a.csv"), "1").unwrap();
        std::fs::write(o.staged("b.json"), "1").unwrap();
        assert_eq!(o.publish().unwrap(), ["a.csv", "b.json"]);
        // A second run that fails after staging one file leaves the first run's files.
        let o = OutputDir::open(&out, owner("e"), NAMES, false).unwrap();
        std::fs::write(o.staged("a.csv"), "2").unwrap();
        drop(o);
        assert_eq!(std::fs::read_to_string(out.join("a.csv")).unwrap(), "1");
        assert!(!out.join(STAGING).exists(), "a failed run leaves no staging folder");
        // A run that publishes fewer files removes the rest of the previous set.
        let o = OutputDir::open(&out, owner("e"), NAMES, false).unwrap();
        std::fs::write(o.staged("a.csv"), "3").unwrap();
        o.publish().unwrap();
        assert_eq!(std::fs::read_to_string(out.join("a.csv")).unwrap(), "3");
        assert!(!out.join("b.json").exists());
        let marker = std::fs::read_to_string(out.join(MARKER)).unwrap();
        assert!(marker.contains("\"complete\": true"), "{marker}");
    }

    #[test]
    fn a_run_killed_before_publishing_is_resumed_by_its_owner_only() {
        let d = tempfile::tempdir().unwrap();
        let o = OutputDir::open(d.path(), owner("e"), NAMES, false).unwrap();
        std::fs::write(o.path("cache.jsonl"), "{}\n").unwrap();
        std::mem::forget(o); // killed: no drop, no publish (the lock goes with the process)
        let _ = std::fs::remove_file(d.path().join(LOCK));
        assert!(matches!(OutputDir::open(d.path(), owner("x"), NAMES, false), Err(OutputError::Foreign { .. })));
        let o = OutputDir::open(d.path(), owner("e"), NAMES, false).unwrap();
        assert!(!o.staging_dir().read_dir().unwrap().any(|_| true), "the killed run's staging folder is cleared");
    }

    #[test]
    fn another_owner_or_foreign_files_are_refused_unless_overwriting() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("out");
        OutputDir::open(&out, owner("e"), NAMES, false).unwrap().publish().unwrap();
        let e = OutputDir::open(&out, owner("other"), NAMES, false).unwrap_err();
        assert!(matches!(e, OutputError::Foreign { .. }), "{e}");
        assert!(e.to_string().contains("--force"), "{e}");
        OutputDir::open(&out, owner("other"), NAMES, true).unwrap().publish().unwrap();
        let plain = d.path().join("plain");
        std::fs::create_dir(&plain).unwrap();
        std::fs::write(plain.join("a.csv"), "mine").unwrap();
        std::fs::write(plain.join("notes.txt"), "mine").unwrap();
        let e = OutputDir::open(&plain, owner("e"), NAMES, false).unwrap_err();
        assert!(matches!(&e, OutputError::Occupied { file, .. } if file == "a.csv"), "{e}");
        assert_eq!(std::fs::read_to_string(plain.join("a.csv")).unwrap(), "mine");
        assert!(!plain.join(LOCK).exists(), "a refused command leaves no lock file behind");
        // Unrelated files do not stop a run.
        std::fs::remove_file(plain.join("a.csv")).unwrap();
        OutputDir::open(&plain, owner("e"), NAMES, false).unwrap();
    }

    #[test]
    fn a_second_process_on_the_same_directory_is_refused_with_the_holder() {
        let d = tempfile::tempdir().unwrap();
        let first = OutputDir::open(d.path(), owner("e"), NAMES, false).unwrap();
        let e = OutputDir::open(d.path(), owner("e"), NAMES, false).unwrap_err();
        assert!(matches!(e, OutputError::Locked { .. }), "{e}");
        assert!(e.to_string().contains(&format!("pid {}", std::process::id())), "{e}");
        drop(first);
        OutputDir::open(d.path(), owner("e"), NAMES, false).unwrap();
    }

    #[test]
    fn symbolic_links_are_refused_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("precious.txt");
        std::fs::write(&target, "keep").unwrap();
        let out = d.path().join("out");
        std::fs::create_dir(&out).unwrap();
        std::os::unix::fs::symlink(&target, out.join("cache.jsonl")).unwrap();
        let e = OutputDir::open(&out, owner("e"), NAMES, true).unwrap_err();
        assert!(matches!(e, OutputError::Symlink { .. }), "{e}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    }
}
