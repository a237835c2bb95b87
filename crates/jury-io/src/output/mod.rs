//! Output directories that a command never destroys, mixes or shares: one process at a
//! time (an advisory lock), only a folder of its own (a new or empty one, or its own
//! earlier output: a marker naming the command and what it ran), never through symbolic
//! links, and every file of a run published together at the end.
//!
//! Taking a folder: [`OutputDir::check`] makes every check without creating or writing
//! anything (a dry run's), and [`OutputDir::open`] makes them again, creates the folder,
//! locks it and makes them once more under the lock. Refused without `--force`: the
//! root folder, the home folder and the current folder (however spelled: `./`, `..`
//! from below, a link), another command's output, and a folder holding any file jury
//! did not write. Refused always: an empty path, something that is not a folder or not
//! writable, symbolic links among jury's files. `--force` lets a command write beside
//! files it did not write and replace same-named ones; it never removes any of them.
//! A refused command leaves the folder as it found it: no lock file, no marker.
//!
//! Publishing: the files of a run are written into `DIR/.jury-staging/` and moved into
//! `DIR` by rename only once the command has succeeded. The marker `DIR/.jury-output.json`
//! says `"complete": false` while the renames happen and lists the published files with
//! `"complete": true` when they are done: a reader trusts a directory whose marker is
//! complete. A command that fails before publishing leaves the previous files as they
//! were, and its staging folder is removed (by the failing process, or by the next
//! command on the directory); a folder it created and kept nothing in goes too.
//!
//! This module is the output folder's one home: the files' names ([`layout`]), taking
//! and publishing a folder ([`OutputDir`]) and where each file of `jury run` goes
//! ([`RunOutput`]).

pub mod layout;
mod run;

pub use run::RunOutput;

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Component, Path, PathBuf};

use serde_json::json;

const MARKER: &str = layout::MARKER;
const LOCK: &str = ".jury.lock";
const STAGING: &str = layout::STAGING;
/// Jury's own bookkeeping in every output folder, whoever wrote the rest.
const OWN: [&str; 3] = [LOCK, MARKER, STAGING];

/// Who writes an output directory: the command and what it ran (the experiment's
/// name, or the input file). A directory is reused only by the same owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub command: String,
    pub source: String,
}

impl Owner {
    /// Who wrote `dir`, as its marker says (none where it has no readable marker).
    pub fn of(dir: &Path) -> Option<Self> {
        read_marker(dir).map(|(owner, _)| owner)
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`jury {}` of {}", self.command, self.source)
    }
}

/// A folder no command writes into without `--force`, whatever it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protected {
    Root,
    Home,
    WorkingDir,
}

impl std::fmt::Display for Protected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Root => "the root folder",
            Self::Home => "the home folder ($HOME)",
            Self::WorkingDir => "the current folder",
        })
    }
}

/// Which protected folder `target` is. Every path is absolute and resolved (no symbolic
/// links, no `.` or `..`: `std::fs::canonicalize`'s), so that `./`, `..` from below or a
/// link to the home folder are recognised; `home` is `None` without a `$HOME`.
pub(crate) fn protected(target: &Path, cwd: &Path, home: Option<&Path>) -> Option<Protected> {
    if target.parent().is_none() {
        Some(Protected::Root)
    } else if home == Some(target) {
        Some(Protected::Home)
    } else if cwd == target {
        Some(Protected::WorkingDir)
    } else {
        None
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
    #[error("{}: holds {file}{}, which jury did not write; choose a new or empty folder, or pass --force (`overwrite: true` in an experiment) to write beside them (jury removes none of them)", path.display(), and_more(*more))]
    NotJurys { path: PathBuf, file: String, more: usize },
    #[error("{}: is {what} ({}); choose a folder of its own for the output, or pass --force (`overwrite: true` in an experiment) to write into it", path.display(), resolved.display())]
    Protected { path: PathBuf, what: Protected, resolved: PathBuf },
    #[error("the output folder is an empty path; name a folder")]
    EmptyPath,
    #[error("{}: is not a folder; choose a folder for the output", path.display())]
    NotAFolder { path: PathBuf },
    #[error("{}: is not a folder jury may write in (no write permission, or a read-only or system file system)", path.display())]
    NotWritable { path: PathBuf },
    #[error("{}: `..` after a folder that does not exist; name the output folder without it", path.display())]
    UpFromMissing { path: PathBuf },
    #[error("{}: is a symbolic link; jury does not write through links", path.display())]
    Symlink { path: PathBuf },
}

fn and_more(more: usize) -> String {
    if more == 0 { String::new() } else { format!(" (and {more} more)") }
}

/// An output directory held for one command. Dropped without [`OutputDir::publish`]
/// (a failure), it is left as [`OutputDir::abandon`] says; the lock is released on drop.
#[derive(Debug)]
pub struct OutputDir {
    dir: PathBuf,
    staging: PathBuf,
    owner: Owner,
    /// The outermost folder this open created (the output folder or one above it).
    created: Option<PathBuf>,
    /// Whether this open wrote the marker into a folder that had none.
    new_marker: bool,
    /// Whether this open made the staging folder (so a drop removes it).
    staging_made: bool,
    published: bool,
    /// Held until after the lock file is removed (see [`Self::release`]).
    lock: File,
}

fn io<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(std::io::Error) -> OutputError + 'a {
    move |source| OutputError::Io { path: path.to_owned(), what, source }
}

fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// Whether the process may create entries in the folder `dir` (`access(2)`: write and
/// search permission, not a read-only mount; /proc's folders say no even to root).
#[cfg(unix)]
fn writable(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else { return false };
    // SAFETY: `c` is a NUL-terminated path that outlives the call, which only reads it.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

#[cfg(not(unix))]
fn writable(dir: &Path) -> bool {
    std::fs::metadata(dir).is_ok_and(|m| !m.permissions().readonly())
}

/// Whether `file` (an open lock file) is still the file at `path`: a holder removes its
/// lock file before it lets go, so a lock taken on a file since removed locks nothing.
#[cfg(unix)]
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (file.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(_: &File, path: &Path) -> bool {
    path.exists()
}

/// The holder line a locking process wrote into the lock file.
fn holder(lock_path: &Path) -> String {
    let text = std::fs::read_to_string(lock_path).unwrap_or_default();
    let text = text.trim();
    if text.is_empty() { "unknown".into() } else { text.to_owned() }
}

/// Where the process stands: its working folder and `$HOME`, both resolved.
struct Place {
    cwd: PathBuf,
    home: Option<PathBuf>,
}

impl Place {
    fn here() -> Result<Self, OutputError> {
        let cwd = std::env::current_dir()
            .and_then(std::fs::canonicalize)
            .map_err(io(Path::new("."), "find the current folder"))?;
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .map(|h| std::fs::canonicalize(&h).unwrap_or(h));
        Ok(Self { cwd, home })
    }
}

/// An output folder as the checks found it.
struct Found {
    /// Its resolved path.
    resolved: PathBuf,
    /// `None` when it exists; otherwise the outermost missing folder on the way to it
    /// (as spelled), which taking it creates.
    missing_from: Option<PathBuf>,
    /// The nearest existing folder on the way (it, or the one it is created in),
    /// resolved and as spelled: it must be writable.
    base: (PathBuf, PathBuf),
}

/// Where `dir` leads: the nearest existing entry on its way (the output folder itself
/// when it exists) must be a folder.
/// Relative paths are taken from `place.cwd`.
fn locate(dir: &Path, place: &Place) -> Result<Found, OutputError> {
    if dir.as_os_str().is_empty() {
        return Err(OutputError::EmptyPath);
    }
    let real = |p: &Path| place.cwd.join(p);
    // The nearest existing entry on the way (`base`, as spelled in `dir`; the empty
    // path is the current folder) and the names of the missing folders below it.
    let mut missing: Vec<OsString> = Vec::new();
    let mut missing_from = None;
    let mut base = dir;
    loop {
        match std::fs::symlink_metadata(real(base)) {
            Ok(_) => break,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => {}
            Err(e) => return Err(io(base, "look at the output folder")(e)),
        }
        match (base.parent(), base.components().next_back()) {
            (Some(parent), Some(Component::Normal(name))) => {
                missing.push(name.to_owned());
                missing_from = Some(base.to_owned());
                base = parent;
            }
            // `new/..`: where `..` leads depends on a folder that is not there yet.
            _ => return Err(OutputError::UpFromMissing { path: dir.to_owned() }),
        }
    }
    let shown = if base.as_os_str().is_empty() { Path::new(".") } else { base };
    let resolved_base = match std::fs::canonicalize(real(base)) {
        Ok(p) => p,
        Err(_) if is_symlink(&real(base)) => return Err(OutputError::Symlink { path: shown.to_owned() }),
        Err(e) => return Err(io(shown, "look at the output folder")(e)),
    };
    if !resolved_base.is_dir() {
        return Err(OutputError::NotAFolder { path: shown.to_owned() });
    }
    let resolved = missing.iter().rev().fold(resolved_base.clone(), |p, name| p.join(name));
    Ok(Found { resolved, missing_from, base: (resolved_base, shown.to_owned()) })
}

/// Symbolic links where jury would write: its own files and `names` (`at`: the folder
/// `dir` names, for a stand-in working folder).
fn check_links(at: &Path, dir: &Path, names: &[&str]) -> Result<(), OutputError> {
    for name in OWN.iter().chain(names) {
        if is_symlink(&at.join(name)) {
            return Err(OutputError::Symlink { path: dir.join(name) });
        }
    }
    Ok(())
}

/// Whether `dir`'s lock is held by a running process, found without taking it (a
/// shared lock, dropped at once) and without creating the lock file.
fn check_unlocked(at: &Path, dir: &Path) -> Result<(), OutputError> {
    let lock_path = at.join(LOCK);
    // Only a plain file is opened (a FIFO would block a reader); `open` says the rest.
    if !std::fs::symlink_metadata(&lock_path).is_ok_and(|m| m.is_file()) {
        return Ok(());
    }
    let Ok(file) = File::open(&lock_path) else { return Ok(()) };
    match file.try_lock_shared() {
        Err(std::fs::TryLockError::WouldBlock) => {
            Err(OutputError::Locked { path: dir.to_owned(), holder: holder(&lock_path) })
        }
        // Free (a lock file a killed process left), or locking unsupported: `open` says.
        _ => Ok(()),
    }
}

/// Whether `dir` (an existing folder) may hold `owner`'s output: its marker names
/// `owner`, or it has none and holds none of `names`; and, unless `overwrite`, it holds
/// no file jury did not write (jury's own files, `names`, and with a marker the files
/// it lists and the report `jury report` adds to any output folder). `at`: the folder
/// `dir` names, for a stand-in working folder.
fn check_contents(at: &Path, dir: &Path, owner: &Owner, names: &[&str], overwrite: bool) -> Result<(), OutputError> {
    let marker = read_marker(at);
    if overwrite {
        return Ok(());
    }
    if let Some((other, _)) = &marker
        && other != owner
    {
        return Err(OutputError::Foreign { path: dir.to_owned(), other: other.to_string(), this: owner.to_string() });
    }
    if marker.is_none()
        && let Some(file) = names.iter().find(|n| std::fs::symlink_metadata(at.join(n)).is_ok())
    {
        return Err(OutputError::Occupied { path: dir.to_owned(), file: (*file).to_owned() });
    }
    let marked = marker.is_some();
    let listed = marker.map(|(_, files)| files).unwrap_or_default();
    let jurys = |name: &str| {
        OWN.contains(&name)
            || names.contains(&name)
            || marked && (listed.iter().any(|f| f == name) || name == layout::REPORT)
    };
    let mut theirs = Vec::new();
    for entry in std::fs::read_dir(at).map_err(io(dir, "list the output folder"))? {
        let name = entry.map_err(io(dir, "list the output folder"))?.file_name();
        if !name.to_str().is_some_and(jurys) {
            theirs.push(name.to_string_lossy().into_owned());
        }
    }
    theirs.sort();
    match theirs.first() {
        Some(file) => Err(OutputError::NotJurys { path: dir.to_owned(), file: file.clone(), more: theirs.len() - 1 }),
        None => Ok(()),
    }
}

impl OutputDir {
    /// Every check [`Self::open`] makes before it creates anything, creating, locking
    /// and writing nothing (a dry run's): `dir` is not empty, leads to a folder this
    /// process may write in, is not protected (root, home, current folder) unless
    /// `overwrite`, not in use by another process, holds no symbolic link where jury
    /// writes, and may hold `owner`'s output (see [`Self::open`]).
    pub fn check(dir: &Path, owner: &Owner, names: &[&str], overwrite: bool) -> Result<(), OutputError> {
        Self::check_at(dir, owner, names, overwrite, &Place::here()?).map(|_| ())
    }

    fn check_at(
        dir: &Path,
        owner: &Owner,
        names: &[&str],
        overwrite: bool,
        place: &Place,
    ) -> Result<Found, OutputError> {
        let found = locate(dir, place)?;
        if let Some(what) = protected(&found.resolved, &place.cwd, place.home.as_deref())
            && !overwrite
        {
            return Err(OutputError::Protected { path: dir.to_owned(), what, resolved: found.resolved });
        }
        if !writable(&found.base.0) {
            return Err(OutputError::NotWritable { path: found.base.1.clone() });
        }
        if found.missing_from.is_none() {
            let at = place.cwd.join(dir);
            check_unlocked(&at, dir)?;
            check_links(&at, dir, names)?;
            check_contents(&at, dir, owner, names, overwrite)?;
        }
        Ok(found)
    }

    /// Takes `dir` for `owner`, creating it if missing. `names`: every file the command
    /// may write there. Refused (see [`Self::check`]): a folder in use, another owner's
    /// output (its marker names another owner), a folder without a marker holding any
    /// of `names`, and one holding files jury did not write; the last three unless
    /// `overwrite`, which never removes such files (it replaces a same-named one).
    /// The checks are made before anything is created and again under the lock.
    pub fn open(dir: &Path, owner: Owner, names: &[&str], overwrite: bool) -> Result<Self, OutputError> {
        let found = Self::check_at(dir, &owner, names, overwrite, &Place::here()?)?;
        if let Err(e) = std::fs::create_dir_all(dir) {
            remove_empty_up_to(dir, found.missing_from.as_deref());
            return Err(io(dir, "create the output directory")(e));
        }
        let lock = match take_lock(dir, &owner) {
            Ok(lock) => lock,
            Err(e) => {
                remove_empty_up_to(dir, found.missing_from.as_deref());
                return Err(e);
            }
        };
        let mut out = Self {
            dir: dir.to_owned(),
            staging: dir.join(STAGING),
            owner,
            created: found.missing_from,
            new_marker: false,
            staging_made: false,
            published: false,
            lock,
        };
        // A refusal here drops `out`, which leaves the folder as it was found.
        out.claim(names, overwrite)?;
        Ok(out)
    }

    /// The checks again, under the lock (another process may have written meanwhile),
    /// then the claim: a fresh staging folder and the marker naming the owner.
    fn claim(&mut self, names: &[&str], overwrite: bool) -> Result<(), OutputError> {
        check_links(&self.dir, &self.dir, names)?;
        check_contents(&self.dir, &self.dir, &self.owner, names, overwrite)?;
        if self.staging.exists() {
            std::fs::remove_dir_all(&self.staging)
                .map_err(io(&self.staging, "remove an earlier run's staging folder"))?;
        }
        std::fs::create_dir(&self.staging).map_err(io(&self.staging, "create the staging folder"))?;
        self.staging_made = true;
        let marker = read_marker(&self.dir);
        if marker.as_ref().is_none_or(|(other, _)| *other != self.owner) {
            // Claimed before anything else is written, so that a run killed before it
            // publishes is resumed by its owner instead of refused as foreign files.
            write_marker(&self.dir, &self.staging, &self.owner, false, &[])?;
            self.new_marker = marker.is_none();
        }
        Ok(())
    }

    /// Gives the directory up after a failure (for example a judge's setup failing
    /// before any judgment); dropping it unpublished does the same. A directory this
    /// open created, holding nothing but jury's lock, marker and staging folder and
    /// empty files, is removed (with the folders above it this open created), so the
    /// failed command leaves no trace; a marker this open wrote into a folder that
    /// holds nothing else goes too. Any other directory stays as it is, less the lock
    /// file and the staging folder.
    pub fn abandon(self) {
        drop(self);
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
    pub fn publish(mut self) -> Result<Vec<String>, OutputError> {
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
        // From the first rename on, the folder holds this run's output: kept on failure.
        self.published = true;
        for name in &names {
            let to = self.dir.join(name);
            std::fs::rename(self.staging.join(name), &to).map_err(io(&to, "publish"))?;
        }
        // Only files the marker listed, which a jury command wrote.
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

/// Locks `dir`'s lock file (creating it) and writes the holder line into it.
fn take_lock(dir: &Path, owner: &Owner) -> Result<File, OutputError> {
    let lock_path = dir.join(LOCK);
    for _ in 0..16 {
        if is_symlink(&lock_path) {
            return Err(OutputError::Symlink { path: lock_path });
        }
        let mut lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&lock_path)
            .map_err(io(&lock_path, "open the lock file"))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(OutputError::Locked { path: dir.to_owned(), holder: holder(&lock_path) });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&lock_path, "lock")(e)),
        }
        if !same_file(&lock, &lock_path) {
            // Its holder removed it as it let go: lock the file now there instead.
            continue;
        }
        lock.set_len(0).map_err(io(&lock_path, "write the lock file"))?;
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        writeln!(lock, "pid {}, {owner}, since unix time {since}", std::process::id())
            .map_err(io(&lock_path, "write the lock file"))?;
        return Ok(lock);
    }
    Err(io(&lock_path, "lock")(std::io::Error::other("the lock file keeps being replaced")))
}

/// Removes `dir` and the folders above it up to `top` (the outermost one an open
/// created, spelled as `dir` is), each only if it is empty; nothing without a `top`.
fn remove_empty_up_to(dir: &Path, top: Option<&Path>) {
    let Some(top) = top else { return };
    for p in dir.ancestors().take_while(|p| p.starts_with(top)) {
        if std::fs::remove_dir(p).is_err() && p.exists() {
            break;
        }
    }
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        // After `publish` the folder is gone; after a failure its half-set is discarded.
        if self.staging_made {
            let _ = std::fs::remove_dir_all(&self.staging);
        }
        let lock_path = self.dir.join(LOCK);
        // Removed while still locked: a process that locks the file meanwhile finds it
        // gone (`take_lock`) and takes a new one, so two never hold the folder at once.
        if same_file(&self.lock, &lock_path) {
            let _ = std::fs::remove_file(&lock_path);
        }
        if self.published {
            return;
        }
        let only_own = |empty_files: bool| {
            std::fs::read_dir(&self.dir).is_ok_and(|mut d| {
                d.all(|e| {
                    e.is_ok_and(|e| {
                        OWN.iter().any(|n| e.file_name() == *n)
                            || empty_files && e.metadata().is_ok_and(|m| m.is_file() && m.len() == 0)
                    })
                })
            })
        };
        if self.created.is_some() && only_own(true) {
            let _ = std::fs::remove_dir_all(&self.dir);
            remove_empty_up_to(&self.dir, self.created.as_deref());
        } else if self.new_marker && only_own(false) {
            let _ = std::fs::remove_file(self.dir.join(MARKER));
        }
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
        assert_eq!(std::fs::read_dir(&before).unwrap().count(), 0, "the lock file and marker this open made go too");
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
    }

    /// A folder holding any file jury did not write is refused, before and after jury
    /// wrote there; `overwrite` writes beside such files and never removes them.
    #[test]
    fn files_jury_did_not_write_need_overwrite_which_removes_none() {
        let d = tempfile::tempdir().unwrap();
        let listing = |dir: &Path| {
            let mut v: Vec<String> =
                std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
            v.sort();
            v
        };
        std::fs::write(d.path().join("notes.txt"), "mine").unwrap();
        std::fs::write(d.path().join("zeta.txt"), "mine").unwrap();
        let e = OutputDir::open(d.path(), owner("e"), NAMES, false).unwrap_err();
        assert!(matches!(&e, OutputError::NotJurys { file, more: 1, .. } if file == "notes.txt"), "{e}");
        assert!(e.to_string().contains("--force"), "{e}");
        assert_eq!(listing(d.path()), ["notes.txt", "zeta.txt"], "a refused open leaves nothing behind");
        let o = OutputDir::open(d.path(), owner("e"), NAMES, true).unwrap();
        std::fs::write(o.staged("a.csv"), "1").unwrap();
        std::fs::write(o.staged("b.json"), "1").unwrap();
        o.publish().unwrap();
        assert!(matches!(OutputDir::open(d.path(), owner("e"), NAMES, false), Err(OutputError::NotJurys { .. })));
        // A forced run that publishes fewer files removes the previous run's, only.
        let o = OutputDir::open(d.path(), owner("e"), NAMES, true).unwrap();
        std::fs::write(o.staged("a.csv"), "2").unwrap();
        o.publish().unwrap();
        assert_eq!(listing(d.path()), [MARKER, "a.csv", "notes.txt", "zeta.txt"]);
        // In a folder of jury's own, its files and the report `jury report` adds are jury's.
        let own = d.path().join("own");
        let o = OutputDir::open(&own, owner("e"), NAMES, false).unwrap();
        std::fs::write(o.staged("a.csv"), "1").unwrap();
        o.publish().unwrap();
        std::fs::write(own.join(layout::REPORT), "<html>").unwrap();
        OutputDir::open(&own, owner("e"), NAMES, false).unwrap();
        std::fs::write(own.join("extra.txt"), "mine").unwrap();
        let e = OutputDir::open(&own, owner("e"), NAMES, false).unwrap_err();
        assert!(matches!(&e, OutputError::NotJurys { file, more: 0, .. } if file == "extra.txt"), "{e}");
    }

    fn place(cwd: &Path, home: &Path) -> Place {
        Place { cwd: cwd.canonicalize().unwrap(), home: Some(home.canonicalize().unwrap()) }
    }

    fn check(dir: &Path, overwrite: bool, place: &Place) -> Result<Found, OutputError> {
        OutputDir::check_at(dir, &owner("e"), NAMES, overwrite, place)
    }

    #[test]
    fn protection_is_decided_on_resolved_paths() {
        let (cwd, home) = (Path::new("/work/x"), Path::new("/home/u"));
        assert_eq!(protected(Path::new("/"), cwd, Some(home)), Some(Protected::Root));
        assert_eq!(protected(home, cwd, Some(home)), Some(Protected::Home));
        assert_eq!(protected(cwd, cwd, Some(home)), Some(Protected::WorkingDir));
        assert_eq!(protected(cwd, cwd, None), Some(Protected::WorkingDir));
        assert_eq!(protected(Path::new("/work/x/out"), cwd, Some(home)), None);
        assert_eq!(
            protected(Path::new("/work"), cwd, Some(home)),
            None,
            "a parent holds the current folder: not empty"
        );
    }

    /// The root, home and current folders, however spelled, need `overwrite`, even
    /// empty; nothing is created, locked or written by the check.
    #[test]
    fn the_root_home_and_current_folders_need_overwrite_however_spelled() {
        let d = tempfile::tempdir().unwrap();
        let (work, home) = (d.path().join("work"), d.path().join("home"));
        std::fs::create_dir_all(work.join("sub")).unwrap();
        std::fs::create_dir(&home).unwrap();
        std::os::unix::fs::symlink(&home, d.path().join("home-link")).unwrap();
        let at = place(&work, &home);
        let cases: [(&Path, Protected); 9] = [
            (Path::new("."), Protected::WorkingDir),
            (Path::new("./"), Protected::WorkingDir),
            (&work, Protected::WorkingDir),
            (Path::new("../work"), Protected::WorkingDir),
            (Path::new("sub/.."), Protected::WorkingDir),
            (&home, Protected::Home),
            (&d.path().join("home-link"), Protected::Home),
            (Path::new("/"), Protected::Root),
            (Path::new("/.."), Protected::Root),
        ];
        for (dir, want) in cases {
            let e = check(dir, false, &at).err();
            assert!(
                matches!(&e, Some(OutputError::Protected { what, .. }) if *what == want),
                "{}: {e:?}",
                dir.display()
            );
            assert!(e.is_some_and(|e| e.to_string().contains("--force")));
        }
        for dir in [Path::new("."), &home] {
            check(dir, true, &at).unwrap();
        }
        assert!(check(Path::new("sub"), false, &at).is_ok(), "a folder below them is not protected");
        assert!(check(Path::new("new/out"), false, &at).is_ok());
        let mut names: Vec<_> = std::fs::read_dir(&work).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.extend(std::fs::read_dir(&home).unwrap().map(|e| e.unwrap().file_name()));
        assert_eq!(names, ["sub"], "the checks wrote nothing");
    }

    /// An empty path, a file, a device, a folder no one may write in and `..` below a
    /// missing folder are refused by the check alone (a dry run's), `overwrite` or not.
    #[test]
    fn outputs_that_are_not_writable_folders_are_refused_by_the_check() {
        let d = tempfile::tempdir().unwrap();
        let at = place(d.path(), d.path());
        let file = d.path().join("f.txt");
        std::fs::write(&file, "mine").unwrap();
        std::os::unix::fs::symlink(d.path().join("gone"), d.path().join("dangling")).unwrap();
        assert!(matches!(check(Path::new(""), true, &at), Err(OutputError::EmptyPath)));
        for (dir, shown) in [(file.clone(), file.clone()), (file.join("out"), file.clone())] {
            let e = check(&dir, true, &at).err();
            assert!(matches!(&e, Some(OutputError::NotAFolder { path }) if *path == shown), "{e:?}");
        }
        assert!(matches!(check(Path::new("/dev/null"), true, &at), Err(OutputError::NotAFolder { .. })));
        #[cfg(target_os = "linux")]
        for dir in ["/proc/self", "/proc/self/out"] {
            let e = check(Path::new(dir), true, &at).err();
            assert!(matches!(e, Some(OutputError::NotWritable { .. })), "{dir}: {e:?}");
        }
        let e = check(Path::new("new/../out"), true, &at).err();
        assert!(matches!(e, Some(OutputError::UpFromMissing { .. })), "{e:?}");
        let e = check(Path::new("dangling"), true, &at).err();
        assert!(matches!(e, Some(OutputError::Symlink { .. })), "{e:?}");
        let e = OutputDir::open(&file.join("out"), owner("e"), NAMES, true).unwrap_err();
        assert!(matches!(e, OutputError::NotAFolder { .. }), "{e}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
    }

    /// The check finds a folder in use without taking its lock; a holder removes its
    /// lock file as it lets go, and a lock taken on that removed file is not trusted.
    #[test]
    fn the_lock_is_seen_by_the_check_and_its_file_goes_with_the_holder() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("out");
        let at = place(d.path(), d.path());
        let first = OutputDir::open(&out, owner("e"), NAMES, false).unwrap();
        let e = check(&out, false, &at).err();
        assert!(matches!(e, Some(OutputError::Locked { .. })), "{e:?}");
        let early = File::open(out.join(LOCK)).unwrap();
        let o = first;
        std::fs::write(o.staged("a.csv"), "1").unwrap();
        o.publish().unwrap();
        assert!(!out.join(LOCK).exists(), "no lock file is left behind");
        early.try_lock().unwrap();
        assert!(!same_file(&early, &out.join(LOCK)), "the removed file locks nothing");
        OutputDir::open(&out, owner("e"), NAMES, false).unwrap();
    }

    /// A folder created on the way to a refused or failed output goes with it.
    #[test]
    fn folders_an_open_created_go_when_it_keeps_nothing() {
        let d = tempfile::tempdir().unwrap();
        let deep = d.path().join("a/b/c");
        OutputDir::open(&deep, owner("e"), NAMES, false).unwrap().abandon();
        assert!(!d.path().join("a").exists());
        // A marker written into an empty folder of the user's goes too.
        let mine = d.path().join("mine");
        std::fs::create_dir(&mine).unwrap();
        drop(OutputDir::open(&mine, owner("e"), NAMES, false).unwrap());
        assert_eq!(std::fs::read_dir(&mine).unwrap().count(), 0);
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
