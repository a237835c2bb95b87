//! The Hugging Face hub cache, for users who have a hub: the one crate that reads
//! `HF_HOME` and `HF_HUB_OFFLINE`, finds a repository's file in the cache and, unless
//! offline, downloads it there. Encoders, judges and data sets all come through here.
//!
//! Invariant: offline, nothing is fetched and no network call is made.

use std::path::{Path, PathBuf};

use hf_hub::{Cache, Repo, RepoType};

/// Whether `HF_HUB_OFFLINE` forbids the hub (`1` or `true`, as huggingface_hub reads it).
pub fn offline() -> bool {
    std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// The hub cache of the environment (`HF_HOME`, default `~/.cache/huggingface`).
pub fn cache_root() -> PathBuf {
    Cache::from_env().path().to_owned()
}

/// What kind of repository a hub id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepoKind {
    Model,
    Dataset,
}

/// A file of a hub repository (`id` is `OWNER/NAME`; no revision: `main`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HubFile<'a> {
    pub kind: RepoKind,
    pub id: &'a str,
    pub revision: Option<&'a str>,
    pub file: &'a str,
}

/// Why a hub file is not on disk.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HubError {
    #[error("{file} not in the hub cache and HF_HUB_OFFLINE is set")]
    Offline { file: String },
    #[error("{file}: {reason}")]
    Download { file: String, reason: String },
}

impl HubFile<'_> {
    fn repo(&self) -> Repo {
        let kind = match self.kind {
            RepoKind::Model => RepoType::Model,
            RepoKind::Dataset => RepoType::Dataset,
        };
        match self.revision {
            Some(r) => Repo::with_revision(self.id.to_owned(), kind, r.to_owned()),
            None => Repo::new(self.id.to_owned(), kind),
        }
    }

    /// The file's path in the hub cache at `cache`, downloaded into it first when it is
    /// missing, unless `offline`.
    pub fn fetch(&self, cache: &Path, offline: bool) -> Result<PathBuf, HubError> {
        let c = Cache::new(cache.to_owned());
        if let Some(p) = c.repo(self.repo()).get(self.file) {
            return Ok(p);
        }
        let file = self.file.to_owned();
        if offline {
            return Err(HubError::Offline { file });
        }
        let download = |reason: String| HubError::Download { file: file.clone(), reason };
        let api = hf_hub::api::sync::ApiBuilder::from_cache(c).build().map_err(|e| download(e.to_string()))?;
        api.repo(self.repo()).get(self.file).map_err(|e| download(e.to_string()))
    }
}

/// A hub repository named `OWNER/NAME` or `OWNER/NAME@REVISION`: the one parser of the
/// ids a user writes for models (`model_id:`, an encoder) and inside data set addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepoId<'a> {
    /// `OWNER/NAME`.
    pub id: &'a str,
    pub revision: Option<&'a str>,
}

impl<'a> RepoId<'a> {
    /// `None` unless the owner, the name and (where an `@` is written) the revision are
    /// all non-empty, with exactly one `/`.
    pub fn parse(text: &'a str) -> Option<Self> {
        let (id, revision) = match text.split_once('@') {
            Some((id, rev)) => (id, Some(rev)),
            None => (text, None),
        };
        let mut parts = id.split('/');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(owner), Some(name), None) if !owner.is_empty() && !name.is_empty() && revision != Some("") => {
                Some(Self { id, revision })
            }
            _ => None,
        }
    }
}

/// The snapshot folder of model `id` at `main` in the hub cache at `cache`, when one
/// holding a `config.json` is there (laid out as `models--OWNER--NAME/refs/main` naming
/// `snapshots/COMMIT/`).
pub fn model_snapshot(cache: &Path, id: &str) -> Option<PathBuf> {
    let repo = cache.join(format!("models--{}", id.replace('/', "--")));
    std::fs::read_to_string(repo.join("refs/main"))
        .ok()
        .map(|commit| repo.join("snapshots").join(commit.trim()))
        .filter(|dir| dir.join("config.json").is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids_parse_with_and_without_a_revision() {
        assert_eq!(RepoId::parse("org/name"), Some(RepoId { id: "org/name", revision: None }));
        assert_eq!(RepoId::parse("org/name@v1"), Some(RepoId { id: "org/name", revision: Some("v1") }));
        for bad in ["name", "org/", "/name", "org/name@", "a/b/c", ""] {
            assert_eq!(RepoId::parse(bad), None, "{bad}");
        }
    }
}
