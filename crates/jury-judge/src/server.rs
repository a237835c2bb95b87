//! A judge on OpenAI-compatible inference servers (vLLM, SGLang, llama.cpp's
//! llama-server, mistral.rs's server, Ollama, hosted APIs), over HTTP.
//!
//! Four ways to ask, one per kind of server (`ServerMode`):
//! - `tokens` (a tokenizer directory is given): the exact token ids the in-process
//!   judge renders (same chat template, turns, generation prompt, answer prefix and
//!   truncation rule) go to `/v1/completions` as `prompt: [ids]`, one token generated,
//!   with `logprobs: k`, vLLM's `logprob_token_ids` (the verdict ids' exact
//!   log-probabilities; SGLang's `token_ids_logprob` likewise) and
//!   `return_tokens_as_token_ids`; verdict tokens are matched by id.
//! - `text` (a tokenizer directory is given; servers whose completions endpoint takes a
//!   string only: mistral.rs's server, Ollama): the same token sequence, decoded to its
//!   text with special tokens written out, to `/v1/completions` as `prompt: "..."`, one
//!   token, `logprobs: k`; the server's `usage.prompt_tokens` must equal the
//!   sequence's length (else the example fails with both counts), so the server ran the
//!   same number of tokens; verdict tokens are matched by text.
//! - `chat-prefill` (no tokenizer; the server continues a final assistant message):
//!   `/v1/chat/completions` with the assistant turn set to the answer prefix,
//!   `continue_final_message: true, add_generation_prompt: false` (vLLM's fields), one
//!   token, `top_logprobs: k`.
//! - `chat-generate` (hosted APIs without prefill): the system and user turns only, up
//!   to 12 tokens generated with `top_logprobs: k`; the verdict is read at the first
//!   position after the generated text contains the answer prefix's last non-blank
//!   characters (`[[` for the repository's prompts).
//!
//! In both chat modes the verdict words' ids come from the server's `/tokenize` where it
//! has one (vLLM, llama-server): requests then name them (`logprob_token_ids`,
//! `token_ids_logprob`) and verdict tokens are matched by id (by text for a candidate
//! returned without one). Elsewhere (mistral.rs, Ollama, hosted APIs) they are matched
//! by text.
//!
//! Probabilities follow `logprobs`' rule: exact when every verdict variant was returned,
//! else a recorded bound and `exact: false`. `ServerEngine` names an engine whose
//! log-probabilities follow other rules (mistral.rs 0.8.1: base 10, and under greedy
//! decoding the log of a raw logit); a returned value above 0 is never taken for a
//! log-probability.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use jury_io::PoolStats;
use serde_json::json;

use crate::chat::{ChatTokenizer, ChatTokenizerError};
use crate::logprobs::{VariantSet, candidates_at, settle_rounding, verdict_from_candidates};
use crate::pool::{ApiKey, Pool, PoolConfig, PoolError};
use crate::render::{MAX_CUTS, cut_longest, too_long};
use crate::{JudgeError, Template, Verdict};

/// How a server judge asks for the verdict (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerMode {
    /// Token ids to `/v1/completions` (needs a tokenizer).
    Tokens,
    /// The token sequence's text to `/v1/completions`, its token count checked (needs a
    /// tokenizer).
    Text,
    /// Chat completions with the assistant turn prefilled with the answer prefix.
    ChatPrefill,
    /// Chat completions, a few tokens generated, read after the answer prefix.
    ChatGenerate,
}

impl ServerMode {
    /// Whether prompts are the in-process judge's token sequences (`tokens`, `text`).
    pub fn renders_tokens(self) -> bool {
        matches!(self, ServerMode::Tokens | ServerMode::Text)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ServerMode::Tokens => "tokens",
            ServerMode::Text => "text",
            ServerMode::ChatPrefill => "chat-prefill",
            ServerMode::ChatGenerate => "chat-generate",
        }
    }
}

/// Whose rules the server's log-probabilities follow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerEngine {
    /// OpenAI's: natural logarithms of the model's distribution, at temperature 0 too
    /// (vLLM, SGLang, llama.cpp, Ollama, hosted APIs).
    #[default]
    Openai,
    /// mistral.rs 0.8.1's server: base-10 logarithms, and at temperature 0 (greedy) the
    /// log of the raw logit instead; requests ask for temperature 1 with no top-k,
    /// top-p or min-p, where the returned values are the model's softmax.
    Mistralrs,
}

impl ServerEngine {
    pub fn as_str(self) -> &'static str {
        match self {
            ServerEngine::Openai => "openai",
            ServerEngine::Mistralrs => "mistralrs",
        }
    }

    /// The temperature requests ask for: the one at which the engine's returned
    /// log-probabilities are the model's distribution.
    fn temperature(self) -> f64 {
        match self {
            ServerEngine::Openai => 0.0,
            ServerEngine::Mistralrs => 1.0,
        }
    }

    /// Factor from the returned values to natural logarithms.
    fn to_natural_log(self) -> f64 {
        match self {
            ServerEngine::Openai => 1.0,
            ServerEngine::Mistralrs => std::f64::consts::LN_10,
        }
    }
}

/// Settings of one server judge.
#[derive(Debug, Clone)]
pub struct ServerJudgeConfig {
    pub name: String,
    /// Replicas serving the same model (`http://host:port`, with or without `/v1`).
    pub base_urls: Vec<String>,
    /// The served model name sent in every request.
    pub model: String,
    pub api_key: Option<ApiKey>,
    /// A tokenizer directory (tokenizer.json, tokenizer_config.json).
    pub tokenizer: Option<PathBuf>,
    /// Default: `tokens` with a tokenizer, else `chat-prefill`.
    pub mode: Option<ServerMode>,
    pub engine: ServerEngine,
    /// How many top log-probabilities to ask for.
    pub top_logprobs: usize,
    pub max_prompt_tokens: usize,
    pub pool: PoolConfig,
}

/// Generated tokens asked for in `chat-generate` mode.
const GENERATE_TOKENS: usize = 12;

/// A rendered prompt for a server judge: token ids (tokens mode) or chat turns.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerPrompt {
    Tokens(Vec<u32>),
    Chat { system: String, user: String },
}

/// A loaded server judge: its servers checked, their model identity read.
pub struct ServerJudge {
    cfg: ServerJudgeConfig,
    mode: ServerMode,
    template: Template,
    tokenizer: Option<ChatTokenizer>,
    tokenizer_sha256: Option<String>,
    prefix: Vec<u32>,
    positive: VariantSet,
    negative: VariantSet,
    tie: Option<VariantSet>,
    pool: Pool,
    identity: String,
    /// `/v1` appended to base URLs that lack it.
    api: &'static str,
}

fn word_variants(word: &str) -> [String; 4] {
    [word.to_owned(), format!(" {word}"), word.to_lowercase(), format!(" {}", word.to_lowercase())]
}

/// The variants of `word` that are one token each, as (id, text), each id once (its
/// first variant); `VerdictToken` when no variant is a single token.
fn single_token_ids(judge: &str, word: &str, encoded: Vec<(String, Vec<u32>)>) -> Result<VariantSet, JudgeError> {
    let mut ids: Vec<(u32, String)> = Vec::new();
    for (text, encoding) in encoded {
        if let [id] = encoding[..]
            && !ids.iter().any(|(i, _)| *i == id)
        {
            ids.push((id, text));
        }
    }
    if ids.is_empty() {
        return Err(JudgeError::VerdictToken { judge: judge.to_owned(), word: word.to_owned() });
    }
    Ok(VariantSet::Ids(ids))
}

impl ServerJudge {
    /// Checks the configuration, loads the tokenizer, asks every server for its models
    /// (all must serve the same one) and sends one probe request, so a wrong model
    /// name, key or `logprobs` limit fails here, before any example is judged.
    /// `tokenizer_sha256` identifies the tokenizer directory in cache keys.
    pub async fn load(
        cfg: ServerJudgeConfig,
        template: Template,
        tokenizer_sha256: Option<String>,
    ) -> Result<Self, JudgeError> {
        let err = |reason: String| JudgeError::Load { judge: cfg.name.clone(), reason };
        let mode =
            cfg.mode.unwrap_or(if cfg.tokenizer.is_some() { ServerMode::Tokens } else { ServerMode::ChatPrefill });
        if mode.renders_tokens() && cfg.tokenizer.is_none() {
            return Err(err(format!("mode `{}` needs a `tokenizer` directory", mode.as_str())));
        }
        let tokenizer = match &cfg.tokenizer {
            Some(dir) => Some(ChatTokenizer::load(dir).map_err(|e| err(e.to_string()))?),
            None => None,
        };
        let all_v1 = cfg.base_urls.iter().all(|u| u.trim_end_matches('/').ends_with("/v1"));
        let any_v1 = cfg.base_urls.iter().any(|u| u.trim_end_matches('/').ends_with("/v1"));
        if any_v1 != all_v1 {
            return Err(err("give every base URL with `/v1` or every one without".into()));
        }
        let api = if all_v1 { "" } else { "/v1" };
        let pool = Pool::new(&cfg.base_urls, cfg.api_key.clone(), cfg.pool.clone()).map_err(err)?;
        let prefix = match &tokenizer {
            Some(tok) => tok.encode_text(&template.answer_prefix).map_err(err)?,
            None => Vec::new(),
        };
        let (positive, negative, tie) = match &tokenizer {
            Some(tok) if mode == ServerMode::Tokens => {
                let ids = |word: &str| -> Result<VariantSet, JudgeError> {
                    let mut encoded = Vec::new();
                    for v in word_variants(word) {
                        let ids = tok.encode_text(&v).map_err(err)?;
                        encoded.push((v, ids));
                    }
                    single_token_ids(&cfg.name, word, encoded)
                };
                let tie = template.tie.as_deref().map(ids).transpose()?;
                (ids(&template.positive)?, ids(&template.negative)?, tie)
            }
            _ => {
                // Chat modes replace these with ids from the server's `/tokenize` where
                // it has one (after the identity check below).
                let texts = |w: &str| {
                    let mut v: Vec<String> = Vec::new();
                    for t in word_variants(w) {
                        if !v.contains(&t) {
                            v.push(t);
                        }
                    }
                    VariantSet::Texts(v)
                };
                (texts(&template.positive), texts(&template.negative), template.tie.as_deref().map(texts))
            }
        };
        let mut judge = Self {
            mode,
            template,
            tokenizer,
            tokenizer_sha256,
            prefix,
            positive,
            negative,
            tie,
            pool,
            identity: String::new(),
            api,
            cfg,
        };
        judge.identity = judge.read_identity().await?;
        if !mode.renders_tokens()
            && let Some((positive, negative, tie)) = judge.server_verdict_ids().await?
        {
            (judge.positive, judge.negative, judge.tie) = (positive, negative, tie);
            judge.identity.push_str("; verdict ids from the server's /tokenize");
        }
        judge.probe().await?;
        Ok(judge)
    }

    /// The served model's identity, the same on every server: `/v1/models`' entry named
    /// `model` (or the only entry: llama-server lists its one model by file name), as
    /// its `root` (vLLM: the weights' path) or `id`, and `owned_by` (the engine), with
    /// the configured model name beside them.
    async fn read_identity(&self) -> Result<String, JudgeError> {
        let mut seen: Option<(String, String)> = None;
        let mut reached = 0;
        let mut failures = Vec::new();
        for i in 0..self.pool.server_count() {
            let body = match self.pool.get_from(i, &format!("{}/models", self.api)).await {
                Ok(b) => b,
                Err(e) => {
                    failures.push(e);
                    continue;
                }
            };
            reached += 1;
            let v: serde_json::Value =
                serde_json::from_slice(&body).map_err(|e| self.load_err(format!("/models: not JSON: {e}")))?;
            let data = v.get("data").and_then(|d| d.as_array()).cloned().unwrap_or_default();
            let entry = data
                .iter()
                .find(|m| m.get("id").and_then(|i| i.as_str()) == Some(self.cfg.model.as_str()))
                .or_else(|| (data.len() == 1).then(|| &data[0]));
            let Some(entry) = entry else {
                let ids: Vec<&str> = data.iter().filter_map(|m| m.get("id")?.as_str()).collect();
                let (url, api) = (&self.pool.urls()[i], self.api);
                return Err(self.load_err(format!("{url}{api}/models serves {ids:?}, not `{}`", self.cfg.model)));
            };
            let text = |k: &str| entry.get(k).and_then(|x| x.as_str()).unwrap_or("").to_owned();
            let root = if text("root").is_empty() { text("id") } else { text("root") };
            let this = (root, text("owned_by"));
            match &seen {
                None => seen = Some(this),
                Some(first) if *first != this => {
                    return Err(self.load_err(format!(
                        "the servers serve different models: {:?} and {:?} (replicas of one judge must serve the same)",
                        first, this
                    )));
                }
                Some(_) => {}
            }
        }
        if reached == 0 {
            return Err(self.load_err(format!("no server answered: {}", failures.join("; "))));
        }
        let (root, engine) = seen.unwrap_or_default();
        // Both names: servers started the usual container way all report one `root`
        // (`/model`) whatever they serve, and one config name may point at another
        // model tomorrow; two judges share records only when both agree.
        Ok(format!(
            "server model {root} served as {:?}; engine {engine}; tokenizer {}; mode {}; top_logprobs {}{}",
            self.cfg.model,
            self.tokenizer_sha256.as_deref().unwrap_or("none"),
            self.mode.as_str(),
            self.cfg.top_logprobs,
            match self.cfg.engine {
                ServerEngine::Openai => String::new(),
                other => format!("; log-probability rules {}", other.as_str()),
            }
        ))
    }

    /// Chat modes: the verdict words' variants as token ids from the server's
    /// `/tokenize` (vLLM, llama-server), so verdicts are read by id and the ids'
    /// log-probabilities can be asked for by name. `None` where the server has no such
    /// endpoint (mistral.rs, Ollama, hosted APIs): verdict tokens are then matched by
    /// text.
    async fn server_verdict_ids(&self) -> Result<Option<(VariantSet, VariantSet, Option<VariantSet>)>, JudgeError> {
        let t = &self.template;
        let Some(positive) = self.server_word_ids(&t.positive).await? else { return Ok(None) };
        let Some(negative) = self.server_word_ids(&t.negative).await? else { return Ok(None) };
        let tie = match &t.tie {
            Some(word) => match self.server_word_ids(word).await? {
                None => return Ok(None),
                tie => tie,
            },
            None => None,
        };
        Ok(Some((positive, negative, tie)))
    }

    /// One verdict word's single-token variants by the server's ids; `None` at the first
    /// variant the server does not tokenise.
    async fn server_word_ids(&self, word: &str) -> Result<Option<VariantSet>, JudgeError> {
        let mut encoded = Vec::new();
        for v in word_variants(word) {
            let Some(ids) = self.server_tokenize(&v).await? else { return Ok(None) };
            encoded.push((v, ids));
        }
        single_token_ids(&self.cfg.name, word, encoded).map(Some)
    }

    /// `text`'s token ids from the first server that answers `/tokenize` (the body
    /// carries vLLM's and llama-server's field names), without special tokens; `None`
    /// when it answers anything but a token list.
    async fn server_tokenize(&self, text: &str) -> Result<Option<Vec<u32>>, JudgeError> {
        let body = json!({"model": self.cfg.model, "prompt": text, "content": text,
                          "add_special_tokens": false, "add_special": false});
        let body = serde_json::to_vec(&body).map_err(|e| self.load_err(e.to_string()))?;
        let mut failures = Vec::new();
        for i in 0..self.pool.server_count() {
            let (status, bytes) = match self.pool.post_to_root(i, "/tokenize", &body).await {
                Ok(answer) => answer,
                Err(e) => {
                    failures.push(e);
                    continue;
                }
            };
            if !(200..300).contains(&status) {
                return Ok(None);
            }
            let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
            let Some(tokens) = v.get("tokens").and_then(|t| t.as_array()) else { return Ok(None) };
            // llama-server gives `{id, piece}` objects when asked `with_pieces`.
            let ids: Option<Vec<u32>> = tokens
                .iter()
                .map(|t| t.as_u64().or_else(|| t.get("id")?.as_u64()).and_then(|i| u32::try_from(i).ok()))
                .collect();
            return Ok(ids);
        }
        Err(self.load_err(format!("no server answered /tokenize: {}", failures.join("; "))))
    }

    fn load_err(&self, reason: String) -> JudgeError {
        JudgeError::Load { judge: self.cfg.name.clone(), reason: self.pool.scrub(&reason) }
    }

    /// A per-example error; its text, which may quote the server, is scrubbed of secrets.
    fn example_err(&self, example: &str, reason: String) -> JudgeError {
        JudgeError::Example {
            judge: self.cfg.name.clone(),
            example: example.to_owned(),
            reason: self.pool.scrub(&reason),
        }
    }

    /// One request: the server accepts the model name, the key and the number of
    /// log-probabilities asked for, and returns them. In `text` mode the probe is a
    /// whole rendered prompt whose token count is checked, so a server that tokenises
    /// the text differently fails here, before any example.
    async fn probe(&self) -> Result<(), JudgeError> {
        let asked = match (self.mode, &self.tokenizer) {
            (ServerMode::Text, Some(tok)) => {
                let text = tok.render("probe", "Say Yes.").map_err(|e| self.load_err(e))?;
                let mut ids = tok.encode_prompt(&text).map_err(|e| self.load_err(e))?;
                ids.extend_from_slice(&self.prefix);
                self.ask_raw("probe", &ServerPrompt::Tokens(ids)).await.map(|_| ())
            }
            (ServerMode::Tokens, _) => {
                self.request("probe", &ServerPrompt::Tokens(self.prefix.clone())).await.map(|_| ())
            }
            _ => {
                let prompt = ServerPrompt::Chat { system: "probe".into(), user: "Say Yes.".into() };
                self.request("probe", &prompt).await.map(|_| ())
            }
        };
        asked.map_err(|e| match e {
            JudgeError::Rejected { reason, .. } | JudgeError::Example { reason, .. } => {
                self.load_err(format!("the probe request failed: {reason}"))
            }
            other => other,
        })
    }

    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    pub fn max_prompt_tokens(&self) -> usize {
        self.cfg.max_prompt_tokens
    }

    pub fn template(&self) -> &Template {
        &self.template
    }

    pub fn mode(&self) -> ServerMode {
        self.mode
    }

    /// Model identity, engine, tokenizer hash, mode and top-k: part of every cache key.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    pub fn stats(&self) -> PoolStats {
        self.pool.stats()
    }

    pub fn urls(&self) -> Vec<String> {
        self.pool.urls()
    }

    /// Requests in flight at most (servers times the per-server limit).
    pub fn capacity(&self) -> usize {
        self.pool.capacity()
    }

    /// Verdict token ids (tokens mode, or chat modes with the server's `/tokenize`), for
    /// the manifest and for asking their log-probabilities by name.
    pub fn verdict_ids(&self) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
        let ids = |s: Option<&VariantSet>| match s {
            Some(VariantSet::Ids(v)) => v.iter().map(|(i, _)| *i).collect(),
            _ => Vec::new(),
        };
        (ids(Some(&self.positive)), ids(Some(&self.negative)), ids(self.tie.as_ref()))
    }

    /// Tokens of the prompt for `fields` as they are (no truncation), when this judge
    /// counts them (a tokens mode with a tokenizer; chat modes send turns uncounted).
    pub fn prompt_len(&self, fields: &BTreeMap<String, String>) -> Result<Option<usize>, JudgeError> {
        let ex_err =
            |reason: String| JudgeError::Example { judge: self.cfg.name.clone(), example: String::new(), reason };
        match &self.tokenizer {
            Some(tok) if self.mode.renders_tokens() => Ok(Some(self.token_prompt(tok, fields).map_err(ex_err)?.len())),
            _ => Ok(None),
        }
    }

    fn token_prompt(&self, tok: &ChatTokenizer, fields: &BTreeMap<String, String>) -> Result<Vec<u32>, String> {
        token_prompt(tok, &self.template, &self.prefix, fields)
    }

    /// The prompt for an example. Tokens mode: the in-process judge's token sequence
    /// and truncation rule (`render`); chat modes: the turns, untruncated (a
    /// prompt too long for the model comes back as a rejection).
    pub async fn render(
        &self,
        example: &str,
        fields: &BTreeMap<String, String>,
    ) -> Result<(ServerPrompt, bool), JudgeError> {
        let ex_err =
            |reason: String| JudgeError::Example { judge: self.cfg.name.clone(), example: example.to_owned(), reason };
        match &self.tokenizer {
            Some(tok) if self.mode.renders_tokens() => {
                let mut fields = fields.clone();
                let mut truncated = false;
                for _ in 0..MAX_CUTS {
                    let ids = self.token_prompt(tok, &fields).map_err(ex_err)?;
                    if ids.len() <= self.cfg.max_prompt_tokens {
                        return Ok((ServerPrompt::Tokens(ids), truncated));
                    }
                    if !cut_longest(&mut fields) {
                        break;
                    }
                    truncated = true;
                }
                Err(ex_err(too_long(self.cfg.max_prompt_tokens)))
            }
            _ => {
                let user = self.template.render_user(fields).map_err(ex_err)?;
                Ok((ServerPrompt::Chat { system: self.template.system.clone(), user }, false))
            }
        }
    }

    fn request_body(&self, prompt: &ServerPrompt) -> Result<(String, serde_json::Value), String> {
        let k = self.cfg.top_logprobs;
        let t = self.cfg.engine.temperature();
        let named: Vec<u32> = {
            let (mut p, n, t) = self.verdict_ids();
            p.extend(n);
            p.extend(t);
            p
        };
        // The prompt's form picks the endpoint (token prompts are rendered in tokens
        // mode only); the mode picks prefill or generation for chat prompts.
        Ok(match prompt {
            ServerPrompt::Tokens(ids) if self.mode == ServerMode::Text => {
                let tok = self.tokenizer.as_ref().ok_or("mode `text` needs a tokenizer")?;
                let body = json!({
                    "model": self.cfg.model, "prompt": tok.decode(ids)?, "max_tokens": 1, "temperature": t,
                    "logprobs": k,
                });
                (format!("{}/completions", self.api), body)
            }
            ServerPrompt::Tokens(ids) => {
                let mut body = json!({
                    "model": self.cfg.model, "prompt": ids, "max_tokens": 1, "temperature": t,
                    "logprobs": k, "return_tokens_as_token_ids": true,
                });
                if !named.is_empty() {
                    body["logprob_token_ids"] = json!(named);
                    body["token_ids_logprob"] = json!(named);
                }
                (format!("{}/completions", self.api), body)
            }
            ServerPrompt::Chat { system, user } => {
                let mode = self.mode;
                let mut messages =
                    vec![json!({"role": "system", "content": system}), json!({"role": "user", "content": user})];
                let mut body = json!({
                    "model": self.cfg.model, "temperature": t, "logprobs": true, "top_logprobs": k,
                    "max_tokens": if mode == ServerMode::ChatGenerate { GENERATE_TOKENS } else { 1 },
                });
                if mode == ServerMode::ChatPrefill {
                    messages.push(json!({"role": "assistant", "content": self.template.answer_prefix}));
                    body["continue_final_message"] = json!(true);
                    body["add_generation_prompt"] = json!(false);
                }
                if !named.is_empty() {
                    body["logprob_token_ids"] = json!(named);
                    body["token_ids_logprob"] = json!(named);
                    // chat-generate finds the verdict position from the tokens' texts.
                    if mode == ServerMode::ChatPrefill {
                        body["return_tokens_as_token_ids"] = json!(true);
                    }
                }
                body["messages"] = json!(messages);
                (format!("{}/chat/completions", self.api), body)
            }
        })
    }

    /// Sends one prompt and returns the first choice's `logprobs` and the answer's
    /// `usage.prompt_tokens` when given. An answer whose
    /// log-probabilities hold vLLM's placeholder (see [`is_degraded`]) is asked again
    /// after a backoff, up to `retries` times.
    async fn request(
        &self,
        example: &str,
        prompt: &ServerPrompt,
    ) -> Result<(serde_json::Value, Option<u64>), JudgeError> {
        let mut degraded = 0;
        loop {
            let (logprobs, prompt_tokens) = self.request_once(example, prompt).await?;
            if !is_degraded(&logprobs) {
                return Ok((logprobs, prompt_tokens));
            }
            degraded += 1;
            self.pool.note_retry();
            if degraded > self.cfg.pool.retries {
                return Err(JudgeError::Example {
                    judge: self.cfg.name.clone(),
                    example: example.to_owned(),
                    reason: format!("{degraded} answers in a row had placeholder log-probabilities (-9999)"),
                });
            }
            tokio::time::sleep(self.pool.backoff(degraded - 1)).await;
        }
    }

    async fn request_once(
        &self,
        example: &str,
        prompt: &ServerPrompt,
    ) -> Result<(serde_json::Value, Option<u64>), JudgeError> {
        let ex_err = |reason: String| self.example_err(example, reason);
        let (path, body) = self.request_body(prompt).map_err(ex_err)?;
        let bytes = serde_json::to_vec(&body).map_err(|e| ex_err(e.to_string()))?;
        let resp = self.pool.post(&path, &bytes).await.map_err(|e| match e {
            PoolError::Rejected { .. } => JudgeError::Rejected {
                judge: self.cfg.name.clone(),
                example: example.to_owned(),
                reason: e.to_string(),
            },
            PoolError::AllDown { .. } | PoolError::Auth { .. } | PoolError::RateLimited { .. } => {
                JudgeError::Servers { judge: self.cfg.name.clone(), reason: e.to_string() }
            }
            PoolError::GaveUp { .. } => ex_err(e.to_string()),
        })?;
        let mut v: serde_json::Value =
            serde_json::from_slice(&resp).map_err(|e| ex_err(format!("the server's answer is not JSON: {e}")))?;
        let prompt_tokens = v.pointer("/usage/prompt_tokens").and_then(|n| n.as_u64());
        let logprobs = v
            .get_mut("choices")
            .and_then(|c| c.get_mut(0))
            .ok_or_else(|| ex_err("the answer has no choices".into()))?
            .get_mut("logprobs")
            .filter(|l| !l.is_null())
            .ok_or_else(|| ex_err("the answer has no logprobs (does the server return them?)".into()))?;
        Ok((logprobs.take(), prompt_tokens))
    }

    /// The verdict as the server's answer gives it, with how many candidates it held;
    /// [`Self::ask_example`] checks it further.
    async fn ask_raw(&self, example: &str, prompt: &ServerPrompt) -> Result<(Verdict, usize), JudgeError> {
        let ex_err = |reason: String| self.example_err(example, reason);
        let (logprobs, prompt_tokens) = &self.request(example, prompt).await?;
        if let (ServerMode::Text, ServerPrompt::Tokens(ids)) = (self.mode, prompt)
            && *prompt_tokens != Some(ids.len() as u64)
        {
            return Err(ex_err(match prompt_tokens {
                Some(n) => format!(
                    "the server read the prompt's text as {n} tokens, the rendering has {} (another tokenizer, \
                     or special tokens added twice): use mode `tokens` or the server's own tokenizer",
                    ids.len()
                ),
                None => "the answer has no usage.prompt_tokens, so mode `text` cannot check the prompt".into(),
            }));
        }
        let pos = match self.mode {
            ServerMode::ChatGenerate => self.position_after_prefix(logprobs).ok_or_else(|| {
                ex_err(format!("the generated text never reached the answer prefix `{}`", self.template.answer_prefix))
            })?,
            _ => 0,
        };
        let mut cands = candidates_at(logprobs, pos)
            .ok_or_else(|| ex_err("no log-probabilities at the verdict position".into()))?;
        let scale = self.cfg.engine.to_natural_log();
        for c in &mut cands {
            c.logprob *= scale;
        }
        if let Some(c) = cands.iter().find(|c| c.logprob > 1e-4) {
            return Err(ex_err(format!(
                "the server returned {} for token {:?}, which is no log-probability (above 0){}",
                c.logprob / scale,
                c.text,
                if self.cfg.engine == ServerEngine::Openai {
                    "; mistral.rs's server needs `engine: mistralrs`"
                } else {
                    ""
                }
            )));
        }
        let verdict = verdict_from_candidates(&cands, &self.positive, &self.negative, self.tie.as_ref());
        Ok((verdict, cands.len()))
    }

    /// One example's verdict: an answer without any verdict token is a failure (not a
    /// tie), and float32 rounding is settled ([`settle_rounding`]), so what is stored
    /// passes the check a cache read applies.
    async fn ask_example(&self, example: &str, prompt: &ServerPrompt) -> Result<Verdict, JudgeError> {
        let ex_err = |reason: String| self.example_err(example, reason);
        let (verdict, returned) = self.ask_raw(example, prompt).await?;
        if verdict.mass == 0.0 && verdict.p_tie.unwrap_or(0.0) == 0.0 {
            // Not a tie and not a judgment: a failure row, asked again by the next run.
            let t = &self.template;
            let words = [Some(&t.positive), Some(&t.negative), t.tie.as_ref()].into_iter().flatten();
            let words: Vec<String> = words.map(|w| format!("`{w}`")).collect();
            return Err(ex_err(format!(
                "no verdict: none of {} is among the {} log-probabilities the server returned at the verdict \
                 position (raise `top_logprobs`, or check the prompt's answer prefix)",
                words.join(", "),
                returned
            )));
        }
        let mut verdict = settle_rounding(verdict).map_err(ex_err)?;
        if let ServerPrompt::Tokens(t) = prompt {
            verdict.n_tokens = t.len();
        }
        Ok(verdict)
    }

    /// `chat-generate`: the first position after the generated text holds the answer
    /// prefix's last non-blank characters.
    fn position_after_prefix(&self, logprobs: &serde_json::Value) -> Option<usize> {
        let marker = self.template.answer_prefix.trim_end();
        let marker = marker.split_whitespace().last().unwrap_or(marker);
        let tokens: Vec<String> = match logprobs.get("content").and_then(|c| c.as_array()) {
            Some(c) => c.iter().map(|e| e.get("token").and_then(|t| t.as_str()).unwrap_or("").to_owned()).collect(),
            None => logprobs.get("tokens")?.as_array()?.iter().map(|t| t.as_str().unwrap_or("").to_owned()).collect(),
        };
        let mut text = String::new();
        for (i, t) in tokens.iter().enumerate() {
            text.push_str(t);
            if text.trim_end().ends_with(marker) {
                return (i + 1 < tokens.len()).then_some(i + 1);
            }
        }
        None
    }

    /// Judges one rendered prompt.
    pub async fn score(&self, example: &str, prompt: &ServerPrompt) -> Result<Verdict, JudgeError> {
        self.ask_example(example, prompt).await
    }
}

/// The chat template over the system prompt and the user turn of `fields`, then the
/// answer prefix's ids `prefix`, as token ids: the sequence tokens modes send.
fn token_prompt(
    tok: &ChatTokenizer,
    template: &Template,
    prefix: &[u32],
    fields: &BTreeMap<String, String>,
) -> Result<Vec<u32>, String> {
    let user = template.render_user(fields)?;
    let mut ids = tok.encode_prompt(&tok.render(&template.system, &user)?)?;
    ids.extend_from_slice(prefix);
    Ok(ids)
}

/// Before any model loads or server is asked: fails with [`JudgeError::Budget`] when
/// the prompt with every one of `fields` emptied, rendered through the chat template
/// of the tokenizer folder `dir` (the sequence tokens modes and an in-process judge
/// with that tokenizer render), exceeds `max_tokens`. A folder without a usable chat
/// template is passed over: the judge's own check as it loads still applies.
pub fn check_budget_with_tokenizer(
    judge: &str,
    dir: &Path,
    template: &Template,
    fields: &BTreeMap<String, String>,
    max_tokens: usize,
) -> Result<(), JudgeError> {
    let Ok(tok) = ChatTokenizer::load(dir) else { return Ok(()) };
    let counted = tok
        .encode_text(&template.answer_prefix)
        .and_then(|prefix| token_prompt(&tok, template, &prefix, &crate::render::emptied(fields)));
    counted.map_or(Ok(()), |ids| crate::render::check_emptied_len(judge, ids.len(), max_tokens))
}

/// The untruncated length in tokens of each example's prompt (`fields`), rendered
/// through the chat template of the tokenizer folder `dir` with the answer prefix: the
/// sequence an in-process judge with that tokenizer, or a server judge in a tokens
/// mode, would judge before the truncation rule. Spread over the machine's cores.
///
/// The template, system prompt and answer prefix are the same for every example, so
/// they are counted once and only each user turn is tokenized (a tenth of the work on
/// HaluEval's few-shot prompt). That is exact when the user turn starts and ends on
/// token boundaries; it is checked against the full rendering on a sample of examples
/// spread over the data set, and any difference falls back to rendering every one.
pub fn prompt_lengths(
    dir: &Path,
    template: &Template,
    fields: &[&BTreeMap<String, String>],
) -> Result<Vec<usize>, ChatTokenizerError> {
    let tok = ChatTokenizer::load(dir)?;
    let err = |reason: String| ChatTokenizerError { path: dir.to_owned(), reason };
    let prefix = tok.encode_text(&template.answer_prefix).map_err(err)?;
    let full = |f: &BTreeMap<String, String>| token_prompt(&tok, template, &prefix, f).map(|ids| ids.len());
    if let Some(fixed) = fixed_tokens(&tok, template, prefix.len()) {
        let user = |f: &BTreeMap<String, String>| {
            let text = template.render_user(f)?;
            Ok(fixed + tok.encode_text(&text)?.len())
        };
        let step = fields.len().div_ceil(LENGTH_SAMPLE).max(1);
        let mut agree = true;
        for f in fields.iter().step_by(step) {
            agree &= full(f).map_err(err)? == user(f).map_err(err)?;
        }
        if agree {
            return on_all_cores(fields, user).map_err(err);
        }
    }
    on_all_cores(fields, full).map_err(err)
}

/// How many examples [`prompt_lengths`] renders in full to check its per-turn count.
const LENGTH_SAMPLE: usize = 64;

/// The tokens of a rendered prompt outside its user turn: the chat template around a
/// marker user turn, cut at the marker, plus the answer prefix's `prefix` tokens. None
/// when the template does not show the user turn verbatim exactly once.
fn fixed_tokens(tok: &ChatTokenizer, template: &Template, prefix: usize) -> Option<usize> {
    const MARK: &str = "\u{E000}jury-user-turn\u{E000}";
    let text = tok.render(&template.system, MARK).ok()?;
    let (before, after) = text.split_once(MARK)?;
    if after.contains(MARK) {
        return None;
    }
    Some(tok.encode_prompt(before).ok()?.len() + tok.encode_text(after).ok()?.len() + prefix)
}

/// `count` over every one of `fields`, in order, spread over the machine's cores.
fn on_all_cores<F>(fields: &[&BTreeMap<String, String>], count: F) -> Result<Vec<usize>, String>
where
    F: Fn(&BTreeMap<String, String>) -> Result<usize, String> + Sync,
{
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let chunk = fields.len().div_ceil(threads).max(1);
    let counted: Vec<Result<Vec<usize>, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = fields
            .chunks(chunk)
            .map(|part| {
                let count = &count;
                scope.spawn(move || part.iter().map(|f| count(f)).collect())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a counting thread panicked".into()))).collect()
    });
    let mut lengths = Vec::with_capacity(fields.len());
    for part in counted {
        lengths.extend(part?);
    }
    Ok(lengths)
}

/// Whether an answer's log-probabilities hold vLLM's placeholder entry (log-probability
/// -9999). vLLM 0.32 (CPU build, seen here) fills the top list of a request with
/// placeholders when it shares a batch with a request that names
/// `logprob_token_ids`: such an answer carries no information about the verdict tokens.
/// (Every other number in a `logprobs` object, offsets and bytes, is non-negative.)
fn is_degraded(logprobs: &serde_json::Value) -> bool {
    match logprobs {
        serde_json::Value::Object(m) => m.values().any(is_degraded),
        serde_json::Value::Array(a) => a.iter().any(is_degraded),
        v => v.as_f64().is_some_and(|x| x <= -9999.0),
    }
}

impl Default for ServerJudgeConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            base_urls: Vec::new(),
            model: String::new(),
            api_key: None,
            tokenizer: None,
            mode: None,
            engine: ServerEngine::Openai,
            top_logprobs: 20,
            max_prompt_tokens: jury_core::DEFAULT_MAX_PROMPT_TOKENS,
            pool: PoolConfig { timeout: Duration::from_secs(120), ..PoolConfig::default() },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{scripted, scripted_seen, word_level_dir};

    /// A `text`-mode judge over a scripted server whose answers report `prompt_tokens`
    /// (the rendered probe has 8 tokens: `<s> S: <unk> U: <unk> <unk> A: [[`) and the
    /// returned values `yes` and `no` for the verdict tokens, probe and one example.
    fn text_judge(prompt_tokens: usize, engine: ServerEngine, yes: f64, no: f64) -> Result<Verdict, JudgeError> {
        let dir = word_level_dir(
            "{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}S: {{ m.content }} \
             {% else %}U: {{ m.content }} {% endif %}{% endfor %}A:",
        );
        let models = r#"{"data": [{"id": "m", "owned_by": "stub"}]}"#;
        let answer: &'static str = format!(
            r#"{{"choices": [{{"logprobs": {{"content": [{{"token": "Yes", "logprob": {yes},
                "top_logprobs": [{{"token": "Yes", "logprob": {yes}}}, {{"token": "No", "logprob": {no}}}]}}]}}}}],
                "usage": {{"prompt_tokens": {prompt_tokens}}}}}"#
        )
        .leak();
        let (url, _h) = scripted(vec![(200, "", models), (200, "", answer), (200, "", answer)]);
        let template = yes_no_template();
        let cfg = ServerJudgeConfig {
            name: "j".into(),
            base_urls: vec![url],
            model: "m".into(),
            tokenizer: Some(dir.path().to_owned()),
            mode: Some(ServerMode::Text),
            engine,
            pool: PoolConfig { timeout: Duration::from_secs(5), retries: 0, ..PoolConfig::default() },
            ..ServerJudgeConfig::default()
        };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let judge = ServerJudge::load(cfg, template, None).await?;
            assert_eq!(judge.mode(), ServerMode::Text);
            judge.score("e", &ServerPrompt::Tokens(vec![0; 8])).await
        })
    }

    /// The dry run's prompt lengths equal the full rendering's: counted per user turn
    /// where the turn sits between token boundaries (`fixed_tokens` finds the rest), and
    /// by rendering every example where it does not (a template that glues the turn to
    /// its label, so `U:hi` is one word: the per-turn count would say two).
    #[test]
    fn prompt_lengths_equal_the_full_rendering() {
        let spaced = word_level_dir("{{ bos_token }}S: {{ messages[0].content }} U: {{ messages[1].content }} A:");
        let glued = word_level_dir("{{ bos_token }}S: {{ messages[0].content }} U:{{ messages[1].content }} A:");
        let template = yes_no_template();
        let texts = ["hi", "hi hi hi", "", "sys hi Yes", "x", "hi  hi\nhi"];
        let fields: Vec<BTreeMap<String, String>> =
            texts.iter().map(|t| BTreeMap::from([("q".to_owned(), (*t).to_owned())])).collect();
        let refs: Vec<&BTreeMap<String, String>> = fields.iter().collect();
        for (dir, split) in [(&spaced, true), (&glued, false)] {
            let tok = ChatTokenizer::load(dir.path()).unwrap();
            let prefix = tok.encode_text(&template.answer_prefix).unwrap();
            let full: Vec<usize> =
                refs.iter().map(|f| token_prompt(&tok, &template, &prefix, f).unwrap().len()).collect();
            assert_eq!(prompt_lengths(dir.path(), &template, &refs).unwrap(), full);
            let per_turn: Vec<usize> = texts
                .iter()
                .map(|t| fixed_tokens(&tok, &template, prefix.len()).unwrap() + tok.encode_text(t).unwrap().len())
                .collect();
            assert_eq!(per_turn == full, split, "{per_turn:?} against {full:?}");
        }
        // `<s> S: sys U:` and `A: [[`, whatever the turn.
        let tok = ChatTokenizer::load(spaced.path()).unwrap();
        assert_eq!(fixed_tokens(&tok, &template, 1), Some(6));
        // A template that shows the user turn twice cannot be cut at it.
        let twice = word_level_dir("{% for m in messages %}{{ m.content }} {{ m.content }} {% endfor %}A:");
        let tok = ChatTokenizer::load(twice.path()).unwrap();
        assert_eq!(fixed_tokens(&tok, &template, 1), None);
        assert_eq!(prompt_lengths(twice.path(), &template, &refs[..1]).unwrap(), [6]);
    }

    /// A tokens-mode server judge counts the template's tokens with its tokenizer: a
    /// budget below the prompt with every field empty is refused before any example.
    #[test]
    fn a_budget_below_the_empty_prompt_is_refused() {
        let dir = word_level_dir("{{ bos_token }}S: {{ messages[0].content }} U: {{ messages[1].content }} A:");
        let models = r#"{"data": [{"id": "m", "owned_by": "stub"}]}"#;
        let answer = r#"{"choices": [{"logprobs": {"content": [{"token": "Yes", "logprob": -0.1,
            "top_logprobs": [{"token": "Yes", "logprob": -0.1}, {"token": "No", "logprob": -2.5}]}]}}],
            "usage": {"prompt_tokens": 8}}"#;
        let fields = BTreeMap::from([("q".to_owned(), "a question of many words here".to_owned())]);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        for (budget, refused) in [(3, true), (64, false)] {
            let (url, _h) = scripted(vec![(200, "", models), (200, "", answer)]);
            let cfg = ServerJudgeConfig {
                name: "j".into(),
                base_urls: vec![url],
                model: "m".into(),
                tokenizer: Some(dir.path().to_owned()),
                mode: Some(ServerMode::Text),
                max_prompt_tokens: budget,
                pool: PoolConfig { timeout: Duration::from_secs(5), retries: 0, ..PoolConfig::default() },
                ..ServerJudgeConfig::default()
            };
            let got = rt.block_on(async {
                let judge = crate::AnyJudge::Server(Box::new(ServerJudge::load(cfg, yes_no_template(), None).await?));
                judge.check_budget(&fields).await
            });
            match got {
                Err(JudgeError::Budget { tokens, max_tokens, .. }) => {
                    assert!(refused && tokens > 3 && max_tokens == 3, "{tokens} {max_tokens}")
                }
                other => assert!(!refused && other.is_ok(), "budget {budget}: {other:?}"),
            }
        }
    }

    /// The same count from the tokenizer folder alone, before any server is asked; a
    /// folder without a chat template is passed over.
    #[test]
    fn the_budget_is_checked_from_the_tokenizer_folder_alone() {
        let dir = word_level_dir("{{ bos_token }}S: {{ messages[0].content }} U: {{ messages[1].content }} A:");
        let fields = BTreeMap::from([("q".to_owned(), "a question".to_owned())]);
        let t = yes_no_template();
        let e = check_budget_with_tokenizer("j", dir.path(), &t, &fields, 3).unwrap_err();
        assert!(matches!(e, JudgeError::Budget { tokens, max_tokens: 3, .. } if tokens > 3), "{e}");
        check_budget_with_tokenizer("j", dir.path(), &t, &fields, 64).unwrap();
        std::fs::remove_file(dir.path().join("tokenizer_config.json")).unwrap();
        check_budget_with_tokenizer("j", dir.path(), &t, &fields, 3).unwrap();
    }

    fn yes_no_template() -> Template {
        Template {
            task: "t".into(),
            system: "sys".into(),
            user: "{q}".into(),
            answer_prefix: "[[".into(),
            positive: "Yes".into(),
            negative: "No".into(),
            tie: None,
            source_text: String::new(),
        }
    }

    /// A `chat-prefill` judge without a tokenizer over a scripted server: `/models`, then
    /// the given `/tokenize` answers (one per verdict variant), then the probe's and one
    /// example's answer. Returns the verdict, the judge's identity and the requests seen.
    fn chat_judge(
        tokenize: Vec<(u16, &'static str, &'static str)>,
        answer: &'static str,
    ) -> (Verdict, String, Vec<String>) {
        let mut script = vec![(200, "", r#"{"data": [{"id": "m", "owned_by": "stub"}]}"#)];
        script.extend(tokenize);
        script.extend([(200, "", answer), (200, "", answer)]);
        let (url, seen, _h) = scripted_seen(script);
        let cfg = ServerJudgeConfig {
            name: "j".into(),
            base_urls: vec![format!("{url}/v1")],
            model: "m".into(),
            mode: Some(ServerMode::ChatPrefill),
            pool: PoolConfig { timeout: Duration::from_secs(5), retries: 0, ..PoolConfig::default() },
            ..ServerJudgeConfig::default()
        };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (verdict, identity) = rt.block_on(async {
            let judge = ServerJudge::load(cfg, yes_no_template(), None).await.unwrap();
            let prompt = ServerPrompt::Chat { system: "s".into(), user: "u".into() };
            (judge.score("e", &prompt).await.unwrap(), judge.identity().to_owned())
        });
        let seen = seen.lock().unwrap().clone();
        (verdict, identity, seen)
    }

    /// Without a tokenizer, chat modes take the verdict ids from the server's `/tokenize`
    /// (at the root, outside `/v1`), ask for their log-probabilities by name and read
    /// them by id; the identity (so the cache key) says so.
    #[test]
    fn chat_modes_take_verdict_ids_from_the_servers_tokenize() {
        let tokenize = ["[11]", "[12]", "[13]", "[14]", "[21]", "[22]", "[23]", "[24]"]
            .map(|t| (200, "", &*format!(r#"{{"count": 1, "tokens": {t}}}"#).leak()))
            .to_vec();
        let answer = r#"{"choices": [{"logprobs": {"content": [{"token": "token_id:11", "logprob": -0.2,
            "top_logprobs": [{"token": "token_id:11", "logprob": -0.2}, {"token": "token_id:21", "logprob": -2.0},
              {"token": "token_id:12", "logprob": -5.0}, {"token": "token_id:13", "logprob": -6.0},
              {"token": "token_id:14", "logprob": -7.0}, {"token": "token_id:22", "logprob": -8.0},
              {"token": "token_id:23", "logprob": -9.0}, {"token": "token_id:24", "logprob": -9.5},
              {"token": "Yes", "logprob": -3.0}]}]}}]}"#;
        let (v, identity, seen) = chat_judge(tokenize, answer);
        let py: f64 = [-0.2f64, -5.0, -6.0, -7.0].iter().map(|l| l.exp()).sum();
        let pn: f64 = [-2.0f64, -8.0, -9.0, -9.5].iter().map(|l| l.exp()).sum();
        assert!((v.p_positive - py).abs() < 1e-12 && (v.p_negative - pn).abs() < 1e-12 && v.exact, "{v:?}");
        assert!(identity.ends_with("; verdict ids from the server's /tokenize"), "{identity}");
        assert!(seen[1].starts_with("POST /tokenize ") && seen[1].contains(r#""prompt":"Yes""#), "{}", seen[1]);
        let ask = &seen[seen.len() - 1];
        assert!(ask.starts_with("POST /v1/chat/completions "), "{ask}");
        assert!(ask.contains(r#""logprob_token_ids":[11,12,13,14,21,22,23,24]"#), "{ask}");
        assert!(ask.contains(r#""return_tokens_as_token_ids":true"#), "{ask}");
    }

    /// A server without `/tokenize` (mistral.rs, Ollama, hosted APIs): verdict tokens are
    /// matched by text and no ids are named.
    #[test]
    fn chat_modes_without_tokenize_match_verdicts_by_text() {
        let answer = r#"{"choices": [{"logprobs": {"content": [{"token": "Yes", "logprob": -0.3,
            "top_logprobs": [{"token": "Yes", "logprob": -0.3}, {"token": "No", "logprob": -1.5}]}]}}]}"#;
        let (v, identity, seen) = chat_judge(vec![(404, "", "Not Found")], answer);
        assert!((v.p_positive - (-0.3f64).exp()).abs() < 1e-12 && !v.exact, "{v:?}");
        assert!(!identity.contains("/tokenize"), "{identity}");
        // The configured name is part of the identity (so of every cache key): records
        // written under the identity without it (`server model m; engine stub; ...`)
        // are never found again, and those examples are judged anew.
        assert!(identity.starts_with("server model m served as \"m\"; engine stub; "), "{identity}");
        assert_eq!(seen.len(), 4, "models, one /tokenize, probe, example");
        assert!(!seen[3].contains("logprob_token_ids"), "{}", seen[3]);
    }

    #[test]
    fn text_mode_checks_the_servers_token_count_at_load() {
        let v = text_judge(8, ServerEngine::Openai, -0.1, -2.4).unwrap();
        assert!((v.p_positive - (-0.1f64).exp()).abs() < 1e-9);
        let e = text_judge(9, ServerEngine::Openai, -0.1, -2.4).err().unwrap().to_string();
        assert!(e.contains("9 tokens, the rendering has 8") && e.contains("judge `j`"), "{e}");
    }

    /// mistral.rs's base-10 values become natural logarithms; a value above 0 (the log of
    /// a raw logit, mistral.rs under greedy decoding) is refused, naming the remedy.
    #[test]
    fn engine_rules_convert_base_ten_and_refuse_values_above_zero() {
        let v = text_judge(8, ServerEngine::Mistralrs, 0.9f64.log10(), 0.1f64.log10()).unwrap();
        assert!((v.p_positive - 0.9).abs() < 1e-9 && (v.p_negative - 0.1).abs() < 1e-9, "{v:?}");
        let e = text_judge(8, ServerEngine::Openai, 1.17, 0.9).err().unwrap().to_string();
        assert!(e.contains("no log-probability") && e.contains("engine: mistralrs"), "{e}");
    }

    #[test]
    fn placeholder_log_probabilities_are_recognised() {
        let bad = json!({"content": [{"token": "No", "logprob": -0.34, "bytes": [78, 111],
            "top_logprobs": [{"token": "No", "logprob": -0.34}, {"token": "!", "logprob": -9999.0}]}]});
        let good = json!({"content": [{"token": "No", "logprob": -0.34, "bytes": [78, 111],
            "top_logprobs": [{"token": "No", "logprob": -0.34}, {"token": "Yes", "logprob": -1.27}]}]});
        let legacy_bad = json!({"text_offset": [0], "top_logprobs": [{"token_id:3": -0.1, "token_id:0": -9999.0}]});
        assert!(is_degraded(&bad) && is_degraded(&legacy_bad));
        assert!(!is_degraded(&good));
    }
}
