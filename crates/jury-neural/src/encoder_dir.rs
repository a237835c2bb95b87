//! Encoder folders named by hub model id (`openai-community/gpt2[@REVISION]`), for users
//! with a Hugging Face hub: the SkillAggregation paper's GPT-2 encoder has no registry package, so it
//! comes from the hub cache, downloaded into it when missing. Existing folders pass
//! through unchanged.
//!
//! Invariant: with `offline` (`HF_HUB_OFFLINE=1`) nothing is fetched; a file missing
//! from the cache is an error naming the model id and the cache folder.

use std::path::{Path, PathBuf};

use jury_hub::{HubFile, RepoId, RepoKind};

use crate::NeuralError;

/// The files an encoder folder must hold.
pub const ENCODER_FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

/// The local folder for `spec`: `spec` itself when it is a folder; for a hub model id
/// (`OWNER/NAME` or `OWNER/NAME@REVISION`), its snapshot in the hub cache at `cache`,
/// with [`ENCODER_FILES`] downloaded into it first unless `offline`.
pub fn model_dir(spec: &Path, cache: &Path, offline: bool) -> Result<PathBuf, NeuralError> {
    if spec.is_dir() {
        return Ok(spec.to_owned());
    }
    let err = |reason: String| NeuralError::File { path: spec.to_owned(), reason };
    // A path that names a place on disk (absolute, `./`, `../`, or under this
    // repository's `models/`) is a folder that is missing, never a hub id.
    let first = spec.components().next();
    let local = spec.is_absolute()
        || matches!(first, Some(std::path::Component::CurDir | std::path::Component::ParentDir))
        || first.is_some_and(|c| c.as_os_str() == "models");
    if local {
        return Err(err("no such folder (scripts/fetch-encoder.sh fetches models/all-MiniLM-L6-v2)".into()));
    }
    let text = spec.to_str().ok_or_else(|| err("not a folder".into()))?;
    let Some(RepoId { id, revision }) = RepoId::parse(text) else {
        return Err(err("neither a folder nor a hub model id (OWNER/NAME[@REVISION])".into()));
    };
    let hub_err = |reason: String| err(format!("hub model (cache {}): {reason}", cache.display()));
    let mut paths = Vec::new();
    for file in ENCODER_FILES {
        let hub = HubFile { kind: RepoKind::Model, id, revision, file };
        paths.push(hub.fetch(cache, offline).map_err(|e| hub_err(e.to_string()))?);
    }
    let dir = paths[0].parent().map(Path::to_owned).ok_or_else(|| hub_err("snapshot has no folder".into()))?;
    if paths.iter().any(|p| p.parent() != Some(dir.as_path())) {
        return Err(hub_err("the files lie in different snapshots; fetch them again".into()));
    }
    Ok(dir)
}

/// [`model_dir`] with the hub cache of the environment (`HF_HOME`, default
/// `~/.cache/huggingface`) and `HF_HUB_OFFLINE`.
pub fn resolve(spec: &Path) -> Result<PathBuf, NeuralError> {
    model_dir(spec, &jury_hub::cache_root(), jury_hub::offline())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tiny GPT-2 fixture laid out as the hub cache lays out `team/tiny-gpt2` at
    /// revision `rev`.
    pub(crate) fn hub_cache(root: &Path, rev: &str) {
        let repo = root.join("models--team--tiny-gpt2");
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs").join(rev), "c0ffee").unwrap();
        let snap = repo.join("snapshots/c0ffee");
        std::fs::create_dir_all(&snap).unwrap();
        let fixture = crate::crate_dir().join("testdata/tiny-gpt2");
        for f in ENCODER_FILES {
            std::fs::copy(fixture.join(f), snap.join(f)).unwrap();
        }
    }

    #[test]
    fn a_missing_local_folder_is_not_taken_for_a_hub_id() {
        let cache = tempfile::tempdir().unwrap();
        for spec in ["models/all-MiniLM-L6-v2", "./enc", "../enc", "/nonexistent/enc"] {
            let e = model_dir(Path::new(spec), cache.path(), false).unwrap_err().to_string();
            assert!(e.contains("no such folder"), "{spec}: {e}");
        }
    }

    #[test]
    fn a_hub_model_id_resolves_to_its_cached_snapshot_and_loads() {
        let cache = tempfile::tempdir().unwrap();
        hub_cache(cache.path(), "main");
        let dir = model_dir(Path::new("team/tiny-gpt2"), cache.path(), true).unwrap();
        assert!(dir.ends_with("snapshots/c0ffee"), "{}", dir.display());
        let enc = crate::Encoder::load(&dir).unwrap();
        assert!(matches!(enc.architecture, crate::Architecture::Gpt2(_)));
        let x = enc.embed(&["the answer is good", "", "paris is the capital of france yes"], 4, 2, |_| {}).unwrap();
        assert_eq!(x.dims(), &[3, 16]);
        let norms: Vec<f32> = x.sqr().unwrap().sum(1).unwrap().to_vec1().unwrap();
        assert!(norms.iter().all(|n| (n - 1.0).abs() < 1e-5), "{norms:?}");
        // A folder passes through; a revision picks its ref.
        assert_eq!(model_dir(&dir, Path::new("/nonexistent"), true).unwrap(), dir);
        hub_cache(cache.path(), "v1");
        assert!(model_dir(Path::new("team/tiny-gpt2@v1"), cache.path(), true).is_ok());
    }

    #[test]
    fn a_missing_model_offline_or_a_bad_id_is_an_error_naming_it() {
        let cache = tempfile::tempdir().unwrap();
        let e = model_dir(Path::new("team/absent"), cache.path(), true).unwrap_err().to_string();
        assert!(e.contains("team/absent") && e.contains("HF_HUB_OFFLINE") && e.contains("config.json"), "{e}");
        for bad in ["no-slash", "a/b/c", "team/x@", "/nonexistent/folder/at/all"] {
            let e = model_dir(Path::new(bad), cache.path(), true).unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
    }
}
