//! The `candle` engine of in-process judges: a GGUF file's llama-family decoder
//! (`decoder`) and its own tokenizer and chat template (`chat`), run on the CPU with
//! candle alone. It judges what mistral.rs judges, token for token, without mistral.rs's
//! dependency tree (about a third of a build of `jury`: docs/benchmarks/build.md).
//!
//! Invariants: one sequence runs at a time (a mutex), so the KV cache is always the last
//! sequence's; with the prefix cache on, a prompt reuses the positions it shares with
//! that sequence (the template's system prompt and instructions), else every prompt
//! starts from position 0.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::sync::{Arc, Mutex};

use candle_core::quantized::{QTensor, gguf_file};
use candle_core::{Device, Result};

use crate::chat::ChatTokenizer;
use crate::decoder::{Config, Model, Weights};

/// A GGUF file's tensors, read on demand.
struct GgufWeights<'a> {
    content: &'a gguf_file::Content,
    reader: BufReader<File>,
    device: &'a Device,
}

impl Weights for GgufWeights<'_> {
    fn get(&mut self, name: &str) -> Result<QTensor> {
        self.content.tensor(&mut self.reader, name, self.device)
    }

    fn has(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }
}

/// The decoder with the tokens its KV cache holds.
struct State {
    model: Model,
    tokens: Vec<u32>,
}

pub(crate) struct CandleEngine {
    state: Arc<Mutex<State>>,
    tokenizer: Arc<ChatTokenizer>,
    prefix_cache: bool,
    fingerprint: String,
}

impl CandleEngine {
    /// Loads `gguf` (blocking: reads the whole file), with the tokenizer folder
    /// `tokenizer` if given, else the file's own tokenizer and chat template.
    pub(crate) fn load(gguf: &Path, tokenizer: Option<&Path>, prefix_cache: bool) -> anyhow::Result<Self> {
        let file = File::open(gguf).map_err(|e| anyhow::anyhow!("{}: {e}", gguf.display()))?;
        let mut reader = BufReader::new(file);
        let content = gguf_file::Content::read(&mut reader)
            .map_err(|e| anyhow::anyhow!("{}: not a GGUF file: {e}", gguf.display()))?;
        let cfg = Config::from_gguf(&content).map_err(|e| anyhow::anyhow!("{}: {e}", gguf.display()))?;
        let tokenizer = match tokenizer {
            Some(dir) => ChatTokenizer::load(dir)?,
            None => ChatTokenizer::from_gguf(gguf, &content)?,
        };
        let device = Device::Cpu;
        let mut weights = GgufWeights { content: &content, reader, device: &device };
        let model = Model::load(&cfg, &mut weights, &device).map_err(|e| anyhow::anyhow!("{}: {e}", gguf.display()))?;
        let weights = crate::config::gguf_weights_label();
        let fingerprint = format!(
            "jury's candle decoder ({arch:?}; candle 0.10.2); cpu, f32 activations, attention by candle's matmul; weights {weights}",
            arch = cfg.arch
        );
        Ok(Self {
            state: Arc::new(Mutex::new(State { model, tokens: Vec::new() })),
            tokenizer: Arc::new(tokenizer),
            prefix_cache,
            fingerprint,
        })
    }

    pub(crate) fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    pub(crate) fn tokenizer(&self) -> &ChatTokenizer {
        &self.tokenizer
    }

    /// The next-token logits after `tokens` (blocking: the caller runs it off the async
    /// threads).
    pub(crate) fn last_logits(&self, tokens: &[u32]) -> std::result::Result<Vec<f32>, String> {
        let mut state = self.state.lock().map_err(|_| "an earlier judgment panicked".to_owned())?;
        let State { model, tokens: cached } = &mut *state;
        // At least the last token runs, so its logits are computed.
        let shared = if self.prefix_cache {
            cached.iter().zip(tokens).take_while(|(a, b)| a == b).count().min(tokens.len().saturating_sub(1))
        } else {
            0
        }
        .min(model.cached());
        cached.clear();
        let logits =
            model.forward(&tokens[shared..], shared).and_then(|l| l.to_vec1::<f32>()).map_err(|e| e.to_string())?;
        cached.extend_from_slice(tokens);
        Ok(logits)
    }

    /// A handle that [`CandleEngine::last_logits`] can run on a blocking thread.
    pub(crate) fn shared(&self) -> Self {
        Self {
            state: self.state.clone(),
            tokenizer: self.tokenizer.clone(),
            prefix_cache: self.prefix_cache,
            fingerprint: self.fingerprint.clone(),
        }
    }
}
