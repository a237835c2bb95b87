//! What configures an in-process judge, checked without loading anything: where its
//! weights come from (and where a hub id resolves locally), the device, number format and
//! engine it runs with, and the prompt and cache settings.

use std::path::{Path, PathBuf};

/// Where a judge's weights come from.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelSource {
    /// A local GGUF file (CPU, the default on these machines).
    Gguf(PathBuf),
    /// A safetensors model directory, or a hub model id for users with a hub (GPU with
    /// the `cuda` feature).
    Pretrained(String),
}

/// Where an in-process judge runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JudgeDevice {
    /// The first CUDA GPU in a `cuda` build on a machine with one, else the CPU.
    #[default]
    Auto,
    /// The CPU with f32 activations, also in a `cuda` build (the same numbers as a CPU
    /// build gives).
    Cpu,
}

/// The number format an in-process judge computes in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JudgePrecision {
    /// f32 on a CPU; on a GPU mistral.rs's automatic dtype (bf16 where the GPU has it),
    /// whose verdicts differ from the CPU's by up to a few hundredths.
    #[default]
    Auto,
    /// f32 weights and activations on every device: a GPU gives the CPU's verdicts.
    F32,
}

/// Settings of one judge.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeConfig {
    pub name: String,
    pub source: ModelSource,
    /// Prompts longer than this are truncated (see [`Judge::render`]).
    pub max_prompt_tokens: usize,
    /// Cache the KV of shared prompt prefixes (the system prompt) across examples.
    pub prefix_cache: bool,
    /// Requests in flight at once (batched by mistral.rs).
    pub max_concurrency: usize,
    /// GGUF judges only: a Hugging Face tokenizer directory (`tokenizer.json`,
    /// `tokenizer_config.json`) used instead of the tokenizer mistral.rs builds from the
    /// GGUF metadata. mistral.rs 0.8.1 builds every byte-level BPE tokenizer with Qwen2's
    /// pre-tokenizer rules whatever the GGUF's `tokenizer.ggml.pre` says; for SmolLM2
    /// (GPT-2 rules) that merges a blank line into one token where llama.cpp and the
    /// model's own tokenizer give two.
    pub tokenizer: Option<PathBuf>,
    pub device: JudgeDevice,
    pub precision: JudgePrecision,
    /// What computes the next-token distribution.
    pub engine: LocalEngine,
}

/// Where a `Pretrained` model is read from: an existing directory as is; a hub id
/// (`org/name`) whose snapshot is in the local hub cache (`cache`, laid out as
/// `models--org--name/refs/main` naming `snapshots/<commit>/`) as that snapshot directory,
/// so a cached model loads without any network call; anything else is passed to
/// mistral.rs as a hub id to download.
pub(crate) fn resolve_model_id(id: &str, cache: &std::path::Path) -> PathBuf {
    let path = PathBuf::from(id);
    if path.is_dir() {
        return path;
    }
    jury_hub::model_snapshot(cache, id).unwrap_or(path)
}

/// The local directory a `Pretrained` id loads from (an existing directory, or its
/// snapshot in the hub cache named by `HF_HOME`), if there is one.
pub fn local_model_dir(id: &str) -> Option<PathBuf> {
    Some(resolve_model_id(id, &jury_hub::cache_root())).filter(|dir| dir.is_dir())
}

/// Why `path` cannot be a judge's GGUF file (missing, unreadable, or not starting with
/// the GGUF magic), found without loading it.
pub fn gguf_problem(path: &Path) -> Option<String> {
    use std::io::Read as _;
    if !path.is_file() {
        return Some(format!("model file {} does not exist (run scripts/fetch-judges.sh)", path.display()));
    }
    let mut magic = [0u8; 4];
    match std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)) {
        Ok(()) if &magic == b"GGUF" => None,
        Ok(()) => Some(format!("model file {} is not a GGUF file (it does not start with `GGUF`)", path.display())),
        Err(e) => Some(format!("model file {}: cannot read it as GGUF: {e}", path.display())),
    }
}

/// How many finished judgments' KV caches mistral.rs keeps for prefix reuse (its
/// `prefix_cache_n`), on every device (crates/vendor/README.md: mistral.rs 0.8.1 kept
/// every one on a CPU). The prefix cache runs one request at a time and every judgment
/// of a run starts with the template's system prompt and instructions, so the last
/// judgment's cache always holds that shared prefix: one entry gives the whole reuse
/// (measured with 1, 2 and 16: docs/benchmarks/judges.md, "Judges: memory with the prefix
/// cache").
pub const PREFIX_CACHE_ENTRIES: usize = 1;

/// Why an in-process judge cannot run with these settings, if it cannot: mistral.rs 0.8.1
/// panics batching sequences restored from its prefix cache ("shape mismatch on dim 2,
/// 512 <> 1024" in kv_cache/mod.rs, seen with 8 requests in flight), which takes the
/// whole engine down, so the prefix cache needs one request at a time.
pub fn runtime_conflict(prefix_cache: bool, max_concurrency: usize) -> Option<&'static str> {
    (prefix_cache && max_concurrency > 1).then_some(
        "`prefix_cache: true` needs `max_concurrency: 1` (mistral.rs 0.8.1 crashes batching cached prefixes); set one of them",
    )
}

/// What computes an in-process judge's next-token distribution.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LocalEngine {
    /// mistral.rs 0.8.1: every architecture it knows, GGUF files or safetensors folders,
    /// on the CPU or a CUDA GPU (builds with the `mistralrs` feature, the default).
    #[default]
    Mistralrs,
    /// jury's own llama-family decoder on candle: GGUF `llama` and `qwen2` files
    /// (SmolLM2, Qwen2.5) on the CPU, the same token ids and verdicts as mistral.rs
    /// without its dependency tree (every build).
    Candle,
}

impl LocalEngine {
    /// Whether this build can run the engine.
    pub fn built(self) -> bool {
        match self {
            LocalEngine::Mistralrs => cfg!(feature = "mistralrs"),
            LocalEngine::Candle => true,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LocalEngine::Mistralrs => "mistralrs",
            LocalEngine::Candle => "candle",
        }
    }
}

/// Why a judge with this engine and source cannot run in this build, found without
/// loading anything.
pub fn engine_problem(engine: LocalEngine, source: &ModelSource) -> Option<String> {
    if !engine.built() {
        return Some(format!(
            "this build of jury has no `{}` engine (built without the `mistralrs` feature); set `runtime.engine: candle`",
            engine.as_str()
        ));
    }
    match (engine, source) {
        (LocalEngine::Candle, ModelSource::Pretrained(_)) => {
            Some("the `candle` engine loads GGUF files only (`gguf:`); use `engine: mistralrs` for `model_id`".into())
        }
        _ => None,
    }
}

/// How a GGUF judge's weights are computed with, for the engine fingerprint: dense f32
/// when `CANDLE_DEQUANTIZE_ALL` is set (`runtime.dequantize`; candle's `QMatMul` reads it
/// in either engine), else candle's quantized kernels.
pub(crate) fn gguf_weights_label() -> &'static str {
    if std::env::var_os("CANDLE_DEQUANTIZE_ALL").is_some() {
        "gguf dequantized to dense"
    } else {
        "gguf quantized kernels"
    }
}
