//! One in-process judge: a model loaded by one of the engines (mistral.rs, or jury's
//! candle decoder) plus a prompt template, rendered and scored the same way.

use std::collections::BTreeMap;

use crate::candle_engine::CandleEngine;
use crate::config::{JudgeConfig, LocalEngine, ModelSource, PREFIX_CACHE_ENTRIES, engine_problem, resolve_model_id};
#[cfg(feature = "mistralrs")]
use crate::mistralrs_engine::MistralRsEngine;
use crate::{JudgeError, Template};

/// Version of the rule that turns logits into a verdict; part of every cache key, so a
/// change here invalidates cached results.
pub const EXTRACTION_RULE: &str =
    "full-vocab-softmax; verdict variants: word, ' word', lowercase, ' lowercase' (single tokens, summed); v1";

/// One judgment: the normalised verdict probability and the raw numbers behind it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Verdict {
    /// P(positive) / (P(positive) + P(negative)); `None` if both underflow to 0.
    pub y: Option<f64>,
    pub p_positive: f64,
    pub p_negative: f64,
    /// The tie token's probability (pairwise tasks with a tie verdict).
    pub p_tie: Option<f64>,
    /// P(positive) + P(negative): how much of the distribution answers the question.
    pub mass: f64,
    pub n_tokens: usize,
    pub truncated: bool,
    /// Whether every verdict token's probability was observed. Always true in process
    /// (the full distribution is read); a server returning only its top k log-
    /// probabilities may leave some out (see `logprobs`).
    #[serde(default = "observed")]
    pub exact: bool,
    /// With `exact: false`: an upper bound on the summed probability of the verdict
    /// tokens that were not observed (each is at most the smallest returned one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unobserved_bound: Option<f64>,
    /// A server's verdict tokens whose probabilities added up to this sum, above 1 by
    /// float32 rounding: every probability above was divided by it (server judges only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renormalised_from: Option<f64>,
}

fn observed() -> bool {
    true
}

impl Verdict {
    /// The verdict of a distribution in which every verdict token was observed.
    pub fn from_probabilities(p_positive: f64, p_negative: f64, p_tie: Option<f64>) -> Verdict {
        let mass = p_positive + p_negative;
        Verdict {
            y: (mass > 0.0).then(|| p_positive / mass),
            p_positive,
            p_negative,
            p_tie,
            mass,
            n_tokens: 0,
            truncated: false,
            exact: true,
            unobserved_bound: None,
            renormalised_from: None,
        }
    }

    /// Whether the numbers can be a verdict (probabilities finite and in [0, 1]), for
    /// values read back from a cache.
    pub fn check(&self) -> Result<(), String> {
        let probs = [Some(self.p_positive), Some(self.p_negative), self.p_tie, self.y, self.unobserved_bound];
        let names = ["p_positive", "p_negative", "p_tie", "y", "unobserved_bound"];
        for (name, p) in names.iter().zip(probs) {
            if let Some(p) = p
                && !(0.0..=1.0).contains(&p)
            {
                return Err(format!("{name} = {p} is not a probability"));
            }
        }
        if !(0.0..=1.0 + 1e-9).contains(&self.mass) {
            return Err(format!("mass = {} is not a probability", self.mass));
        }
        Ok(())
    }

    /// Position-bias de-biasing (SkillAggregation paper, section 6.6): the verdict on a
    /// pair shown as (A, B) and on the same pair shown as (B, A), combined in the
    /// original orientation. Positive/negative of `swapped` are exchanged before
    /// averaging, so `y` is the mean of P(original A better) over the two orders (the
    /// one order that has a `y` when the other underflowed).
    pub fn debiased(original: &Verdict, swapped: &Verdict) -> Verdict {
        let y = match (original.y, swapped.y.map(|y| 1.0 - y)) {
            (Some(a), Some(b)) => Some((a + b) / 2.0),
            (a, b) => a.or(b),
        };
        Verdict {
            y,
            p_positive: (original.p_positive + swapped.p_negative) / 2.0,
            p_negative: (original.p_negative + swapped.p_positive) / 2.0,
            p_tie: match (original.p_tie, swapped.p_tie) {
                (Some(a), Some(b)) => Some((a + b) / 2.0),
                (a, b) => a.or(b),
            },
            mass: (original.mass + swapped.mass) / 2.0,
            n_tokens: original.n_tokens.max(swapped.n_tokens),
            truncated: original.truncated || swapped.truncated,
            exact: original.exact && swapped.exact,
            unobserved_bound: match (original.unobserved_bound, swapped.unobserved_bound) {
                (Some(a), Some(b)) => Some((a + b) / 2.0),
                (a, b) => a.or(b),
            },
            renormalised_from: match (original.renormalised_from, swapped.renormalised_from) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            },
        }
    }
}

/// Verdict probabilities from a full-vocabulary logits vector, in f64.
pub fn verdict_from_logits(logits: &[f32], positive: &[u32], negative: &[u32], tie: &[u32]) -> Verdict {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let z: f64 = logits.iter().map(|&l| (l as f64 - max).exp()).sum();
    let p = |ids: &[u32]| -> f64 {
        ids.iter().filter_map(|&i| logits.get(i as usize)).map(|&l| (l as f64 - max).exp() / z).sum()
    };
    Verdict::from_probabilities(p(positive), p(negative), (!tie.is_empty()).then(|| p(tie)))
}

enum Engine {
    #[cfg(feature = "mistralrs")]
    MistralRs(MistralRsEngine),
    Candle(CandleEngine),
}

/// A loaded judge.
pub struct Judge {
    cfg: JudgeConfig,
    template: Template,
    engine: Engine,
    prefix: Vec<u32>,
    positive: Vec<u32>,
    negative: Vec<u32>,
    tie: Vec<u32>,
}

impl Judge {
    pub async fn load(cfg: JudgeConfig, template: Template) -> Result<Self, JudgeError> {
        let load_err = |reason: String| JudgeError::Load { judge: cfg.name.clone(), reason };
        if let Some(reason) = engine_problem(cfg.engine, &cfg.source) {
            return Err(load_err(reason));
        }
        match &cfg.source {
            // mistral.rs takes a missing local path for a hub id and goes online.
            ModelSource::Gguf(path) if !path.is_file() => {
                return Err(JudgeError::ModelMissing { judge: cfg.name.clone(), path: path.clone() });
            }
            ModelSource::Pretrained(id)
                if jury_hub::offline() && !resolve_model_id(id, &jury_hub::cache_root()).is_dir() =>
            {
                // mistral.rs would take it for a hub id and go online.
                return Err(load_err(format!(
                    "model `{id}` is neither a folder nor in the local hub cache, and HF_HUB_OFFLINE is set"
                )));
            }
            _ => {}
        }
        let engine = match (cfg.engine, &cfg.source) {
            (LocalEngine::Candle, ModelSource::Gguf(path)) => {
                let (path, tokenizer, prefix_cache) = (path.clone(), cfg.tokenizer.clone(), cfg.prefix_cache);
                let loaded =
                    tokio::task::spawn_blocking(move || CandleEngine::load(&path, tokenizer.as_deref(), prefix_cache))
                        .await
                        .map_err(|e| load_err(e.to_string()))?;
                Engine::Candle(loaded.map_err(|e| load_err(format!("{e:#}")))?)
            }
            #[cfg(feature = "mistralrs")]
            (LocalEngine::Mistralrs, _) => {
                Engine::MistralRs(MistralRsEngine::load(&cfg).await.map_err(|e| load_err(format!("{e:#}")))?)
            }
            _ => return Err(load_err("no engine for this judge (checked above)".into())),
        };
        let mut judge = Judge {
            cfg,
            template,
            engine,
            prefix: Vec::new(),
            positive: Vec::new(),
            negative: Vec::new(),
            tie: Vec::new(),
        };
        judge.prefix = judge.tokenize_text(&judge.template.answer_prefix.clone()).await?;
        judge.positive = judge.variant_ids(&judge.template.positive.clone()).await?;
        judge.negative = judge.variant_ids(&judge.template.negative.clone()).await?;
        if let Some(tie) = judge.template.tie.clone() {
            judge.tie = judge.variant_ids(&tie).await?;
        }
        Ok(judge)
    }

    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    pub fn config(&self) -> &JudgeConfig {
        &self.cfg
    }

    /// How the numbers are computed (engine version, device, activation and weight
    /// precision): part of every cache key, since each changes the verdict slightly.
    pub fn engine(&self) -> &str {
        match &self.engine {
            #[cfg(feature = "mistralrs")]
            Engine::MistralRs(e) => e.fingerprint(),
            Engine::Candle(e) => e.fingerprint(),
        }
    }

    pub fn template(&self) -> &Template {
        &self.template
    }

    /// Token ids read as each verdict (positive, negative, tie).
    pub fn verdict_ids(&self) -> (&[u32], &[u32], &[u32]) {
        (&self.positive, &self.negative, &self.tie)
    }

    /// How many finished judgments' KV caches are kept for prefix reuse (mistral.rs's
    /// `prefix_cache_n`; the candle engine keeps the last sequence's); `None` with
    /// `prefix_cache` off.
    pub fn prefix_cache_entries(&self) -> Option<usize> {
        self.cfg.prefix_cache.then_some(PREFIX_CACHE_ENTRIES)
    }

    fn engine_err(&self, reason: String) -> JudgeError {
        JudgeError::Engine { judge: self.cfg.name.clone(), reason }
    }

    async fn tokenize_text(&self, text: &str) -> Result<Vec<u32>, JudgeError> {
        match &self.engine {
            #[cfg(feature = "mistralrs")]
            Engine::MistralRs(e) => e.tokenize_text(text).await,
            Engine::Candle(e) => e.tokenizer().encode_text(text),
        }
        .map_err(|e| self.engine_err(e))
    }

    /// Single-token ids of the verdict word's variants (`Yes`, ` Yes`, `yes`, ` yes`).
    async fn variant_ids(&self, word: &str) -> Result<Vec<u32>, JudgeError> {
        let mut ids = Vec::new();
        for v in [word.to_owned(), format!(" {word}"), word.to_lowercase(), format!(" {}", word.to_lowercase())] {
            let t = self.tokenize_text(&v).await?;
            if let [id] = t[..]
                && !ids.contains(&id)
            {
                ids.push(id);
            }
        }
        if ids.is_empty() {
            return Err(JudgeError::VerdictToken { judge: self.cfg.name.clone(), word: word.to_owned() });
        }
        Ok(ids)
    }

    async fn chat_tokens(&self, user: String) -> Result<Vec<u32>, JudgeError> {
        let system = &self.template.system;
        let mut toks = match &self.engine {
            #[cfg(feature = "mistralrs")]
            Engine::MistralRs(e) => e.chat_tokens(system, user).await,
            Engine::Candle(e) => {
                e.tokenizer().render(system, &user).and_then(|text| e.tokenizer().encode_prompt(&text))
            }
        }
        .map_err(|e| self.engine_err(e))?;
        toks.extend_from_slice(&self.prefix);
        Ok(toks)
    }

    /// Tokens of the prompt for `fields` as they are (no truncation).
    pub async fn prompt_len(&self, fields: &BTreeMap<String, String>) -> Result<usize, JudgeError> {
        let ex_err =
            |reason: String| JudgeError::Example { judge: self.cfg.name.clone(), example: String::new(), reason };
        let user = self.template.render_user(fields).map_err(ex_err)?;
        Ok(self.chat_tokens(user).await?.len())
    }

    /// The exact token sequence judged for an example: the model's chat template over
    /// the system prompt and the rendered user turn, with the generation prompt, then
    /// the answer prefix, truncated by the shared rule (`render`: the longest field is
    /// cut until the sequence fits `max_prompt_tokens`). Returns
    /// whether it truncated.
    pub async fn render(
        &self,
        example: &str,
        fields: &BTreeMap<String, String>,
    ) -> Result<(Vec<u32>, bool), JudgeError> {
        let ex_err =
            |reason: String| JudgeError::Example { judge: self.cfg.name.clone(), example: example.to_owned(), reason };
        let mut fields = fields.clone();
        let mut truncated = false;
        for _ in 0..crate::render::MAX_CUTS {
            let user = self.template.render_user(&fields).map_err(ex_err)?;
            let toks = self.chat_tokens(user).await?;
            if toks.len() <= self.cfg.max_prompt_tokens {
                return Ok((toks, truncated));
            }
            if !crate::render::cut_longest(&mut fields) {
                break;
            }
            truncated = true;
        }
        Err(ex_err(crate::render::too_long(self.cfg.max_prompt_tokens)))
    }

    /// Runs the model on `tokens` (prefill plus one step) and reads the verdict.
    pub async fn score(&self, example: &str, tokens: Vec<u32>) -> Result<Verdict, JudgeError> {
        let n_tokens = tokens.len();
        let ex_err =
            |reason: String| JudgeError::Example { judge: self.cfg.name.clone(), example: example.to_owned(), reason };
        let logits = match &self.engine {
            #[cfg(feature = "mistralrs")]
            Engine::MistralRs(e) => e.last_logits(tokens).await.map_err(|e| self.engine_err(e))?,
            Engine::Candle(e) => {
                let e = e.shared();
                tokio::task::spawn_blocking(move || e.last_logits(&tokens))
                    .await
                    .map_err(|e| self.engine_err(e.to_string()))?
            }
        }
        .map_err(ex_err)?;
        let mut v = verdict_from_logits(&logits, &self.positive, &self.negative, &self.tie);
        v.n_tokens = n_tokens;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_is_a_full_vocabulary_softmax() {
        // Vocabulary of 4: logits ln(1), ln(2), ln(3), ln(4); Z = 10.
        let logits: Vec<f32> = [1f32, 2., 3., 4.].iter().map(|x| x.ln()).collect();
        let v = verdict_from_logits(&logits, &[1], &[0, 2], &[]);
        assert!((v.p_positive - 0.2).abs() < 1e-6);
        assert!((v.p_negative - 0.4).abs() < 1e-6);
        assert!((v.mass - 0.6).abs() < 1e-6);
        assert!((v.y.unwrap() - 1.0 / 3.0).abs() < 1e-6);
        assert_eq!(v.p_tie, None);
        let t = verdict_from_logits(&logits, &[1], &[0], &[3]);
        assert!((t.p_tie.unwrap() - 0.4).abs() < 1e-6);
    }

    #[test]
    fn debiasing_averages_in_the_original_orientation() {
        let ab = verdict_from_logits(&[2f32.ln(), 1f32.ln(), 0f32.ln()], &[0], &[1], &[]); // P(A) = 2/3
        let ba = verdict_from_logits(&[1f32.ln(), 3f32.ln(), 0f32.ln()], &[0], &[1], &[]); // shown swapped: P(B) = 3/4
        let d = Verdict::debiased(&ab, &ba);
        assert!((d.y.unwrap() - (2.0 / 3.0 + 3.0 / 4.0) / 2.0).abs() < 1e-6);
        assert!((d.p_positive - (2.0 / 3.0 + 3.0 / 4.0) / 2.0).abs() < 1e-6);
        let lost = Verdict { y: None, ..ba.clone() };
        assert!((Verdict::debiased(&lost, &ba).y.unwrap() - 0.75).abs() < 1e-6);
    }

    /// A directory laid out like the hub cache resolves to its snapshot; loading it goes
    /// as far as mistral.rs's reading of the (deliberately unusable) files and fails
    /// there with the judge named, never reaching for the network.
    #[cfg(feature = "mistralrs")]
    #[test]
    fn hub_cache_layout_resolves_to_the_snapshot_and_loads_locally() {
        use std::path::PathBuf;

        use crate::config::{JudgeDevice, JudgePrecision};
        let cache = tempfile::tempdir().unwrap();
        let repo = cache.path().join("models--team--tiny-judge");
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs/main"), "abc123\n").unwrap();
        let snap = repo.join("snapshots/abc123");
        std::fs::create_dir_all(&snap).unwrap();
        std::fs::write(snap.join("config.json"), "{\"architectures\": [\"LlamaForCausalLM\"]}").unwrap();
        assert_eq!(resolve_model_id("team/tiny-judge", cache.path()), snap);
        assert_eq!(resolve_model_id("team/other", cache.path()), PathBuf::from("team/other"));
        assert_eq!(resolve_model_id(snap.to_str().unwrap(), cache.path()), snap);

        let template: Template = serde_yaml::from_str(
            "task: t\nsystem: s\nuser: \"{x}\"\nanswer_prefix: \"[[\"\npositive: \"Yes\"\nnegative: \"No\"\n",
        )
        .unwrap();
        let cfg = JudgeConfig {
            name: "tiny".into(),
            source: ModelSource::Pretrained(snap.to_string_lossy().into_owned()),
            max_prompt_tokens: 64,
            prefix_cache: false,
            max_concurrency: 1,
            tokenizer: None,
            device: JudgeDevice::Auto,
            precision: JudgePrecision::Auto,
            engine: LocalEngine::Mistralrs,
        };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let err = rt.block_on(Judge::load(cfg, template)).err().expect("no weights: the load must fail");
        let msg = err.to_string();
        assert!(msg.starts_with("judge `tiny`: loading the model"), "{msg}");
    }

    #[test]
    fn extreme_logits_do_not_overflow() {
        let v = verdict_from_logits(&[1000.0, -1000.0, 0.0], &[0], &[1], &[]);
        assert!((v.y.unwrap() - 1.0).abs() < 1e-12);
        let none = verdict_from_logits(&[0.0, -2000.0, -2000.0], &[1], &[2], &[]);
        assert_eq!(none.y, None);
    }
}
