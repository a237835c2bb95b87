//! manifest.json, the record of one `jury run`: what ran, with what, and how long it
//! took. The runner fills it, the report reads it, both through these types.
//!
//! Invariant: what the runner serialises reads back into the same record; a number
//! that may be undefined is an `Option` (written as `null`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::IoError;

/// manifest.json.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub experiment: String,
    pub jury_version: String,
    pub template: ManifestTemplate,
    pub dataset: ManifestDataset,
    pub dequantized_weights: bool,
    pub judges: Vec<ManifestJudge>,
    /// Each judge's mean P(positive) + P(negative): how much of the next-token
    /// distribution the verdict tokens took (null for a judge with no verdict).
    pub mean_captured_mass: BTreeMap<String, Option<f64>>,
    /// The whole command's time, aggregation included.
    pub total_seconds: f64,
    /// An adaptive run's settings and calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<ManifestAdaptive>,
}

impl Manifest {
    /// Reads a manifest.json.
    pub fn read(path: &Path) -> Result<Self, IoError> {
        crate::read_json(path)
    }

    /// Writes this record as manifest.json at `path`.
    pub fn write(&self, path: &Path) -> Result<(), IoError> {
        crate::write_json(path, self)
    }
}

/// A prompt template and the SHA-256 of its file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestTemplate {
    pub path: PathBuf,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestDataset {
    pub name: String,
    pub path: PathBuf,
    pub examples: usize,
}

/// The token ids each verdict word maps to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerdictTokenIds {
    pub positive: Vec<u32>,
    pub negative: Vec<u32>,
    pub tie: Vec<u32>,
}

/// One judge of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestJudge {
    pub name: String,
    /// What the judgment cache keys its model by (a weights hash, or a server model's
    /// identity).
    pub model_sha256: String,
    pub engine: String,
    pub extraction_rule: String,
    pub load_seconds: f64,
    pub judge_seconds: f64,
    pub scored: usize,
    pub from_cache: usize,
    pub failed: usize,
    /// Share of verdicts whose every verdict token was observed (server judges reading
    /// top-k log-probabilities may not); null for a judge with no verdict.
    pub exact_share: Option<f64>,
    /// How many finished judgments' KV caches the in-process engine keeps for prefix
    /// reuse; null with the prefix cache off and for a server judge.
    pub prefix_cache_entries: Option<usize>,
    pub verdict_token_ids: VerdictTokenIds,
    /// The judge's own template, when it has one.
    pub template: Option<ManifestTemplate>,
    /// A server judge's replicas and what they did.
    pub server: Option<ManifestServer>,
}

/// A server judge in the manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestServer {
    /// How the judge reads its verdict from the server (`jury_judge::ServerJudge::mode`).
    pub mode: String,
    pub stats: PoolStats,
}

/// What a server judge's pool of replicas did, for the progress line and the manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolStats {
    pub retried: u64,
    pub servers: Vec<ServerStats>,
}

/// Counters of one server, for the progress line and the manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerStats {
    pub url: String,
    pub ok: u64,
    pub errors: u64,
    pub rejected: u64,
    pub times_set_aside: u64,
    pub down: bool,
}

/// An adaptive run: its settings, order and the calls it made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestAdaptive {
    pub target: f64,
    pub min_judges: usize,
    pub warmup_examples: usize,
    /// Rounds run, the warm-up's included (each asks every judge with open examples).
    pub rounds: usize,
    pub order: Vec<String>,
    /// Judge calls made (the warm-up's included) and those of the full jury.
    pub calls: usize,
    pub full_calls: usize,
    /// Share of the full jury's calls not made.
    pub calls_saved: f64,
    pub calls_per_judge: BTreeMap<String, usize>,
    pub cost: f64,
    pub full_cost: f64,
    /// Examples per stop reason (warm-up, settled, every-judge).
    pub stops: BTreeMap<String, usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_reads_back_as_written() {
        let m = Manifest {
            experiment: "demo".into(),
            jury_version: "0.1.0".into(),
            template: ManifestTemplate { path: "prompts/p.yaml".into(), sha256: "ab".into() },
            dataset: ManifestDataset { name: "facts".into(), path: "d.csv".into(), examples: 3 },
            dequantized_weights: true,
            judges: vec![ManifestJudge {
                name: "j".into(),
                model_sha256: "cd".into(),
                engine: "llama-server".into(),
                extraction_rule: "r".into(),
                load_seconds: 0.5,
                judge_seconds: 2.0,
                scored: 3,
                from_cache: 0,
                failed: 0,
                exact_share: None,
                prefix_cache_entries: None,
                verdict_token_ids: VerdictTokenIds { positive: vec![1], negative: vec![2], tie: vec![] },
                template: None,
                server: Some(ManifestServer {
                    mode: "logprobs".into(),
                    stats: PoolStats {
                        retried: 1,
                        servers: vec![ServerStats {
                            url: "http://127.0.0.1:1".into(),
                            ok: 3,
                            errors: 1,
                            rejected: 0,
                            times_set_aside: 0,
                            down: false,
                        }],
                    },
                }),
            }],
            mean_captured_mass: BTreeMap::from([("j".into(), Some(0.9))]),
            total_seconds: 4.0,
            adaptive: Some(ManifestAdaptive {
                target: 0.9,
                min_judges: 2,
                warmup_examples: 1,
                rounds: 2,
                order: vec!["j".into()],
                calls: 3,
                full_calls: 3,
                calls_saved: 0.0,
                calls_per_judge: BTreeMap::from([("j".into(), 3)]),
                cost: 3.0,
                full_cost: 3.0,
                stops: BTreeMap::from([("every-judge".into(), 3)]),
            }),
        };
        let text = serde_json::to_string_pretty(&m).unwrap();
        assert_eq!(serde_json::from_str::<Manifest>(&text).unwrap(), m);
    }
}
