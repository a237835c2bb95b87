//! LLM judges: in process (through mistral.rs, or jury's own llama-family decoder on
//! candle), or on OpenAI-compatible inference servers over HTTP. Renders a task's prompt
//! with the model's own chat template, appends the forced answer prefix, and reads the
//! verdict tokens' probabilities from the next-token distribution. The only crate that
//! knows mistralrs (the `mistralrs` feature, on by default).
//!
//! Invariants:
//! - in process, probabilities come from our own softmax over the full vocabulary at the
//!   last position (under mistral.rs read by a per-request logits processor: its built-in
//!   logprobs are log10 and, under greedy sampling, the log of the raw logit rather than a
//!   probability: read in mistralrs-core 0.8.1's sampler);
//! - the exact token sequence is ours (`CompletionTokens` in process, a token-id prompt
//!   to a server with a tokenizer), so it can be compared with another engine token for
//!   token and hashed into the cache key; both kinds share one truncation rule;
//! - a server judge's verdict says whether every verdict token was observed (`exact`);
//! - a local model path that does not exist is an error here, never a hub download;
//! - an API key is never printed, serialised or put in an error.

mod backend;
mod candle_engine;
mod chat;
mod config;
mod decoder;
mod judge;
mod logprobs;
#[cfg(feature = "mistralrs")]
mod mistralrs_engine;
mod pool;
mod render;
mod server;
mod template;
#[cfg(test)]
mod testutil;

pub use backend::{AnyJudge, Prompt};
pub use chat::{ChatTokenizer, ChatTokenizerError};
pub use config::{
    JudgeConfig, JudgeDevice, JudgePrecision, LocalEngine, ModelSource, PREFIX_CACHE_ENTRIES, engine_problem,
    gguf_problem, local_model_dir, runtime_conflict,
};
pub use judge::{EXTRACTION_RULE, Judge, Verdict, verdict_from_logits};
pub use pool::{ApiKey, PoolConfig, display_url, parse_base_url, without_password};
pub use server::{
    ServerEngine, ServerJudge, ServerJudgeConfig, ServerMode, check_budget_with_tokenizer, prompt_lengths,
};
pub use template::Template;

use std::path::PathBuf;

/// Version of the rule that turns a server's log-probabilities into a verdict (see
/// `logprobs`); part of every server judgment's cache key.
pub const SERVER_EXTRACTION_RULE: &str = "verdict variants: word, ' word', lowercase, ' lowercase' (single tokens, summed); unreturned variants 0 with a bound; v1";

#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    #[error("{}: prompt template: {reason}", path.display())]
    Template { path: PathBuf, reason: String },
    #[error("judge `{judge}`: model file {} does not exist (run scripts/fetch-judges.sh)", path.display())]
    ModelMissing { judge: String, path: PathBuf },
    #[error("judge `{judge}`: loading the model: {reason}")]
    Load { judge: String, reason: String },
    #[error("judge `{judge}`: verdict word `{word}` is not a single token for this tokenizer")]
    VerdictToken { judge: String, word: String },
    #[error("judge `{judge}`, example `{example}`: {reason}")]
    Example { judge: String, example: String, reason: String },
    /// The server refused this example for good (for example a prompt longer than the
    /// model's context): a missing judgment, not a failed run.
    #[error("judge `{judge}`, example `{example}`: {reason}")]
    Rejected { judge: String, example: String, reason: String },
    /// The judge's servers cannot be used (all down past the patience, key refused).
    #[error("judge `{judge}`: {reason}")]
    Servers { judge: String, reason: String },
    #[error("judge `{judge}`: {reason}")]
    Engine { judge: String, reason: String },
    /// Even an example whose every field is empty would not fit: every example would
    /// fail, so the run stops before judging any.
    #[error(
        "judge `{judge}`: the prompt with every example field empty is already {tokens} tokens, over `max_prompt_tokens` ({max_tokens}); raise `runtime.max_prompt_tokens`"
    )]
    Budget { judge: String, tokens: usize, max_tokens: usize },
}
