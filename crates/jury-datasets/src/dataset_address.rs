//! Data set files named by hub address (`hf://datasets/OWNER/NAME[@REVISION]/FILE`), for
//! users with a Hugging Face hub: taken from the local hub cache when present, else
//! downloaded into it. Plain paths pass through unchanged.
//!
//! Invariant: with `HF_HUB_OFFLINE=1` (or no network) nothing is fetched; a file missing
//! from the cache is an error naming the address and the cache folder.

use std::path::{Path, PathBuf};

use crate::DatasetError;

const SCHEME: &str = "hf://datasets/";

/// A file in a hub data set repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubAddress {
    pub repo: String,
    pub revision: Option<String>,
    pub file: String,
}

impl HubAddress {
    /// Parses `hf://datasets/OWNER/NAME[@REVISION]/FILE`; `None` for any other path.
    pub fn parse(path: &Path) -> Option<Result<HubAddress, DatasetError>> {
        let rest = path.to_str()?.strip_prefix(SCHEME)?;
        let bad = || DatasetError::HubAddress { address: path.display().to_string() };
        // OWNER/NAME[@REVISION], then the file's path inside the repository.
        let repo_end = rest.match_indices('/').nth(1).map(|(i, _)| i);
        let parsed = repo_end.and_then(|end| Some((jury_hub::RepoId::parse(&rest[..end])?, &rest[end + 1..])));
        match parsed {
            Some((repo, file)) if !file.is_empty() => Some(Ok(HubAddress {
                repo: repo.id.to_owned(),
                revision: repo.revision.map(str::to_owned),
                file: file.to_owned(),
            })),
            _ => Some(Err(bad())),
        }
    }

    /// The file's local path: from the hub cache at `cache`, else (unless `offline`)
    /// downloaded into it.
    pub fn fetch(&self, cache: &Path, offline: bool) -> Result<PathBuf, DatasetError> {
        let file = jury_hub::HubFile {
            kind: jury_hub::RepoKind::Dataset,
            id: &self.repo,
            revision: self.revision.as_deref(),
            file: &self.file,
        };
        file.fetch(cache, offline).map_err(|e| DatasetError::Hub {
            address: self.to_string(),
            cache: cache.to_owned(),
            reason: match e {
                jury_hub::HubError::Offline { .. } => "not in the hub cache and HF_HUB_OFFLINE is set".into(),
                jury_hub::HubError::Download { reason, .. } => reason,
            },
        })
    }
}

impl std::fmt::Display for HubAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.revision {
            Some(r) => write!(f, "{SCHEME}{}@{r}/{}", self.repo, self.file),
            None => write!(f, "{SCHEME}{}/{}", self.repo, self.file),
        }
    }
}

/// A data set path as given in a config: a local path, or a hub address resolved
/// through the hub cache of the environment (`HF_HOME`, default `~/.cache/huggingface`).
pub fn resolve(path: &Path) -> Result<PathBuf, DatasetError> {
    match HubAddress::parse(path) {
        None => Ok(path.to_owned()),
        Some(hub) => hub?.fetch(&jury_hub::cache_root(), jury_hub::offline()),
    }
}

/// [`resolve`] without the network: the local file, or `None` when a local path does
/// not exist or a hub address is not in the local hub cache.
pub fn resolve_local(path: &Path) -> Result<Option<PathBuf>, DatasetError> {
    match HubAddress::parse(path) {
        None => Ok(Some(path.to_owned()).filter(|p| p.exists())),
        Some(hub) => Ok(hub?.fetch(&jury_hub::cache_root(), true).ok()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder laid out like the hub cache: refs/REV holds the commit, the file lies
    /// under snapshots/COMMIT/.
    fn hub_cache(root: &Path, repo_folder: &str, rev: &str, file: &str, text: &str) {
        let repo = root.join(repo_folder);
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs").join(rev), "0123abcd").unwrap();
        let snap = repo.join("snapshots/0123abcd");
        std::fs::create_dir_all(snap.join(Path::new(file).parent().unwrap())).unwrap();
        std::fs::write(snap.join(file), text).unwrap();
    }

    #[test]
    fn parses_addresses_and_passes_plain_paths() {
        assert!(HubAddress::parse(Path::new("data/train.csv")).is_none());
        let h = HubAddress::parse(Path::new("hf://datasets/lmsys/arena@v2/data/train.csv")).unwrap().unwrap();
        assert_eq!(
            (h.repo.as_str(), h.revision.as_deref(), h.file.as_str()),
            ("lmsys/arena", Some("v2"), "data/train.csv")
        );
        assert_eq!(h.to_string(), "hf://datasets/lmsys/arena@v2/data/train.csv");
        for bad in ["hf://datasets/lmsys", "hf://datasets/lmsys/arena", "hf://datasets/lmsys/@/f"] {
            assert!(HubAddress::parse(Path::new(bad)).unwrap().is_err(), "{bad}");
        }
    }

    #[test]
    fn reads_from_a_hub_layout_cache_and_stays_offline() {
        let dir = tempfile::tempdir().unwrap();
        let rows = "id,model_a,model_b,prompt,response_a,response_b,winner_model_a,winner_model_b,winner_tie\n\
                    7,m1,m2,\"[\"\"Q\"\"]\",\"[\"\"a\"\"]\",\"[\"\"b\"\"]\",1,0,0\n";
        hub_cache(dir.path(), "datasets--team--arena", "main", "train.csv", rows);
        let h = HubAddress::parse(Path::new("hf://datasets/team/arena/train.csv")).unwrap().unwrap();
        let p = h.fetch(dir.path(), true).unwrap();
        let ex = crate::chatbot_arena(&p).unwrap();
        assert_eq!((ex[0].id.as_str(), ex[0].label), ("arena-7", Some(1)));
        let missing = HubAddress::parse(Path::new("hf://datasets/team/arena/test.csv")).unwrap().unwrap();
        let e = missing.fetch(dir.path(), true).unwrap_err().to_string();
        assert!(e.contains("hf://datasets/team/arena/test.csv") && e.contains("HF_HUB_OFFLINE"), "{e}");
    }
}
