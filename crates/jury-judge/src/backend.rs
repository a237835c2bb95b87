//! The one interface the runner drives: an in-process mistral.rs judge or a judge on
//! inference servers, rendered, keyed and scored the same way.

use std::collections::BTreeMap;

use crate::server::{ServerJudge, ServerPrompt};
use crate::{EXTRACTION_RULE, Judge, JudgeError, Template, Verdict};

/// A judge of either kind (boxed: both are a few hundred bytes, moved between tasks).
pub enum AnyJudge {
    Local(Box<Judge>),
    Server(Box<ServerJudge>),
}

/// A rendered prompt of either kind of judge.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// The exact token sequence (in-process judges, server judges in tokens mode).
    Tokens(Vec<u32>),
    /// Chat turns (server judges without a tokenizer).
    Chat { system: String, user: String },
}

impl Prompt {
    /// The token ids, when the prompt is a token sequence.
    pub fn tokens(&self) -> Option<&[u32]> {
        match self {
            Prompt::Tokens(t) => Some(t),
            Prompt::Chat { .. } => None,
        }
    }

    /// Bytes that identify the prompt exactly (for cache keys).
    pub fn key_bytes(&self) -> Vec<u8> {
        match self {
            Prompt::Tokens(t) => t.iter().flat_map(|t| t.to_le_bytes()).collect(),
            Prompt::Chat { system, user } => {
                let mut b = Vec::with_capacity(system.len() + user.len() + 16);
                for part in [system, user] {
                    b.extend((part.len() as u64).to_le_bytes());
                    b.extend(part.as_bytes());
                }
                b
            }
        }
    }
}

impl AnyJudge {
    pub fn name(&self) -> &str {
        match self {
            AnyJudge::Local(j) => j.name(),
            AnyJudge::Server(j) => j.name(),
        }
    }

    pub fn template(&self) -> &Template {
        match self {
            AnyJudge::Local(j) => j.template(),
            AnyJudge::Server(j) => j.template(),
        }
    }

    /// What, beside the model's weights, changes this judge's numbers: the engine
    /// (in process) or the served model, engine, tokenizer, mode and top-k (server).
    pub fn engine(&self) -> &str {
        match self {
            AnyJudge::Local(j) => j.engine(),
            AnyJudge::Server(j) => j.identity(),
        }
    }

    /// The verdict-extraction rule, part of every cache key.
    pub fn extraction_rule(&self) -> String {
        match self {
            AnyJudge::Local(_) => EXTRACTION_RULE.to_owned(),
            AnyJudge::Server(j) => format!("server logprobs, {}; {}", j.mode().as_str(), crate::SERVER_EXTRACTION_RULE),
        }
    }

    /// Requests worth keeping in flight for this judge.
    pub fn concurrency(&self) -> usize {
        match self {
            AnyJudge::Local(j) => j.config().max_concurrency.max(1),
            AnyJudge::Server(j) => j.capacity(),
        }
    }

    /// Fails with [`JudgeError::Budget`] when the prompt with every one of `fields`
    /// emptied exceeds the token budget: truncation cannot make any example fit.
    pub async fn check_budget(&self, fields: &BTreeMap<String, String>) -> Result<(), JudgeError> {
        let empty = crate::render::emptied(fields);
        let (name, max_tokens, tokens) = match self {
            AnyJudge::Local(j) => (j.name(), j.config().max_prompt_tokens, Some(j.prompt_len(&empty).await?)),
            AnyJudge::Server(j) => (j.name(), j.max_prompt_tokens(), j.prompt_len(&empty)?),
        };
        tokens.map_or(Ok(()), |tokens| crate::render::check_emptied_len(name, tokens, max_tokens))
    }

    pub async fn render(&self, example: &str, fields: &BTreeMap<String, String>) -> Result<(Prompt, bool), JudgeError> {
        match self {
            AnyJudge::Local(j) => j.render(example, fields).await.map(|(t, cut)| (Prompt::Tokens(t), cut)),
            AnyJudge::Server(j) => j.render(example, fields).await.map(|(p, cut)| {
                let p = match p {
                    ServerPrompt::Tokens(t) => Prompt::Tokens(t),
                    ServerPrompt::Chat { system, user } => Prompt::Chat { system, user },
                };
                (p, cut)
            }),
        }
    }

    pub async fn score(&self, example: &str, prompt: Prompt) -> Result<Verdict, JudgeError> {
        match (self, prompt) {
            (AnyJudge::Local(j), Prompt::Tokens(t)) => j.score(example, t).await,
            (AnyJudge::Local(j), Prompt::Chat { .. }) => Err(JudgeError::Example {
                judge: j.name().to_owned(),
                example: example.to_owned(),
                reason: "an in-process judge scores token sequences only".into(),
            }),
            (AnyJudge::Server(j), Prompt::Tokens(t)) => j.score(example, &ServerPrompt::Tokens(t)).await,
            (AnyJudge::Server(j), Prompt::Chat { system, user }) => {
                j.score(example, &ServerPrompt::Chat { system, user }).await
            }
        }
    }
}
