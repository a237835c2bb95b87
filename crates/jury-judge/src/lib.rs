//! LLM judges through mistral.rs: render a task's prompt with the model's own chat
//! template, append the forced answer prefix, and read the verdict tokens' probabilities
//! from the full next-token distribution. The only crate that knows mistralrs.
//!
//! Invariants:
//! - probabilities come from our own softmax over the full vocabulary at the last
//!   position, read by a per-request logits processor (mistral.rs's built-in logprobs
//!   are log10 and, under greedy sampling, not probabilities; see SPEC.md section 1);
//! - the exact token sequence is ours (`CompletionTokens`), so it can be compared with
//!   another engine token for token and hashed into the cache key;
//! - a local model path that does not exist is an error here, never a hub download.

mod judge;
mod template;

pub use judge::{EXTRACTION_RULE, Judge, JudgeConfig, ModelSource, Verdict, local_model_dir, verdict_from_logits};
pub use template::Template;

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    #[error("{}: prompt template: {reason}", path.display())]
    Template { path: PathBuf, reason: String },
    #[error("judge `{judge}`: model file {} does not exist (run scripts/fetch-judges.sh?)", path.display())]
    ModelMissing { judge: String, path: PathBuf },
    #[error("judge `{judge}`: loading the model: {reason}")]
    Load { judge: String, reason: String },
    #[error("judge `{judge}`: verdict word `{word}` is not a single token for this tokenizer")]
    VerdictToken { judge: String, word: String },
    #[error("judge `{judge}`, example `{example}`: {reason}")]
    Example { judge: String, example: String, reason: String },
    #[error("judge `{judge}`: {reason}")]
    Engine { judge: String, reason: String },
}
