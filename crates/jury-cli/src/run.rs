//! `jury run CONFIG`: one YAML experiment end to end: load the data set, run each judge
//! (cache first, so a killed run resumes), aggregate, score and write everything.
//!
//! Relative paths in the config are relative to the directory `jury run` is started in.
//! Output directory layout: `cache.jsonl` (durable per-judgment cache),
//! `judgments.csv` (long format: example_id, judge, p, p_positive, p_negative, p_tie,
//! mass, n_tokens, truncated, exact), `failures.csv` (example_id, judge, reason: the
//! examples a server rejected, missing from judgments.csv), `labels.csv`,
//! `metrics.json`, `predictions.csv`, `config.resolved.yaml` (API key variable names
//! only, never keys), `manifest.json` (versions, model identities and template hashes,
//! timings, per-server counters),
//! and with `dataset.both_orders` `judgments_by_order.csv` (example_id, judge, order ab|ba,
//! p oriented as the original order) while `judgments.csv` holds the two orders' mean.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use indicatif::MultiProgress;
use jury_cache::{Cache, file_sha256};
use jury_core::{JudgmentsBuilder, Labels};
use jury_datasets::Example;
use jury_io::{csv_field, write_atomic};
use jury_judge::{JudgeConfig, ModelSource, PoolConfig, ServerJudgeConfig, Template, Verdict};
use jury_runner::JudgeSpec;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::aggregate::{self, Settings};

#[derive(clap::Args)]
pub struct Args {
    /// Experiment file (YAML); see configs/demo.yaml.
    config: PathBuf,
}

/// The YAML experiment schema.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    pub name: String,
    pub dataset: DatasetConfig,
    /// Prompt template file (prompts/*.yaml).
    pub prompt: PathBuf,
    pub judges: Vec<JudgeEntry>,
    #[serde(default)]
    pub runtime: Runtime,
    #[serde(default)]
    pub aggregate: aggregate::Options,
    pub output: PathBuf,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetConfig {
    /// One of `jury_datasets::KNOWN` (demo-facts, truthfulqa, halueval-dialogue,
    /// chatbot-arena, llmbar).
    pub name: String,
    pub path: PathBuf,
    /// Judge only this many examples, drawn with `seed` (kept in file order).
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub seed: u64,
    /// Pairwise tasks: judge every pair in both orders (A/B and B/A) and average in the
    /// original orientation (position-bias de-biasing); per-order results go to
    /// `judgments_by_order.csv`.
    #[serde(default)]
    pub both_orders: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeEntry {
    pub name: String,
    /// This juror's own prompt template (prompt variants as separate jurors); the
    /// experiment's `prompt` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<PathBuf>,
    /// A model on OpenAI-compatible inference servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerEntry>,
    /// A local GGUF file (CPU).
    #[serde(default)]
    pub gguf: Option<PathBuf>,
    /// A safetensors model directory or hub model id (GPU users, `cuda` feature).
    #[serde(default)]
    pub model_id: Option<String>,
    /// With `gguf`: a Hugging Face tokenizer directory to use instead of the tokenizer
    /// mistral.rs builds from the GGUF (see `jury_judge::JudgeConfig::tokenizer`).
    #[serde(default)]
    pub tokenizer: Option<PathBuf>,
}

/// A judge on inference servers (README, "Judges on inference servers").
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerEntry {
    /// Replicas serving the same model, e.g. `http://127.0.0.1:8000` (with or without `/v1`).
    pub base_urls: Vec<String>,
    /// The served model name.
    pub model: String,
    /// The NAME of an environment variable holding the API key (never the key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// A tokenizer directory (tokenizer.json, tokenizer_config.json) or a hub model id
    /// in the local hub cache: the judge then sends exact token ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<String>,
    /// `tokens` (needs `tokenizer`; the default with one), `chat-prefill` (the default
    /// without), `chat-generate` (hosted APIs without prefill).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<jury_judge::ServerMode>,
    /// Requests in flight per server.
    #[serde(default = "default_in_flight")]
    pub max_in_flight: usize,
    #[serde(default = "default_timeout")]
    pub timeout_s: f64,
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// How long every server may be down before the run stops.
    #[serde(default = "default_patience")]
    pub patience_s: f64,
    /// Top log-probabilities asked for (vLLM allows 20 unless started with a larger
    /// `--max-logprobs`).
    #[serde(default = "default_top_logprobs")]
    pub top_logprobs: usize,
}

fn default_in_flight() -> usize {
    4
}
fn default_timeout() -> f64 {
    120.0
}
fn default_retries() -> u32 {
    8
}
fn default_patience() -> f64 {
    300.0
}
fn default_top_logprobs() -> usize {
    20
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Runtime {
    /// Dense (dequantized) weights: 10-15x faster prefill on CPU (SPEC.md section 1).
    pub dequantize: bool,
    pub prefix_cache: bool,
    pub max_concurrency: usize,
    pub max_prompt_tokens: usize,
    /// Also write `prompts.jsonl`: each judged token sequence (for engine comparisons).
    pub dump_prompts: bool,
}

impl Default for Runtime {
    fn default() -> Self {
        // One request at a time with the prefix cache: measured here on 40 TruthfulQA
        // prompts (Qwen2.5-Coder-0.5B, docs/benchmarks.md), 71 s one at a time, 141 s
        // with 4 in flight (mistral.rs 0.8.1 batches slower than it runs one by one on
        // a CPU), 56 s with the prefix cache. The judge bounds the cache's memory itself
        // (`jury_judge::Judge` flushes it every 16 judgments on a CPU).
        Self { dequantize: true, prefix_cache: true, max_concurrency: 1, max_prompt_tokens: 2048, dump_prompts: false }
    }
}

/// Where `jury run` writes the examples' contexts when the context-dependent methods are
/// asked for without an `aggregate.contexts` file.
fn auto_contexts(exp: &Experiment) -> PathBuf {
    exp.output.join("contexts.csv")
}

fn read_experiment(path: &Path) -> Result<Experiment> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))?;
    let mut exp: Experiment =
        serde_yaml::from_str(&text).with_context(|| format!("{}: invalid experiment", path.display()))?;
    if exp.judges.is_empty() {
        bail!("{}: `judges` is empty", path.display());
    }
    if exp.runtime.prefix_cache && exp.runtime.max_concurrency > 1 {
        // mistral.rs 0.8.1 panics batching sequences restored from its prefix cache
        // ("shape mismatch on dim 2, 512 <> 1024" in kv_cache/mod.rs, seen here with 8
        // requests in flight), which takes the whole engine down.
        bail!(
            "{}: runtime: `prefix_cache: true` needs `max_concurrency: 1` (mistral.rs 0.8.1 crashes batching cached prefixes); set one of them",
            path.display()
        );
    }
    let mut names = std::collections::HashSet::new();
    for j in &exp.judges {
        let at = |what: String| anyhow::anyhow!("{}: judge `{}`: {what}", path.display(), j.name);
        if !names.insert(j.name.as_str()) {
            bail!("{}: judge name `{}` is used twice", path.display(), j.name);
        }
        let sources = [j.gguf.is_some(), j.model_id.is_some(), j.server.is_some()];
        if sources.iter().filter(|&&x| x).count() != 1 {
            return Err(at("give exactly one of `gguf`, `model_id` and `server`".into()));
        }
        if let Some(p) = &j.prompt
            && !p.is_file()
        {
            return Err(at(format!("prompt template {} does not exist", p.display())));
        }
        if let Some(dir) = &j.tokenizer {
            if j.gguf.is_none() {
                return Err(at(
                    "`tokenizer` goes with `gguf` (a model directory has its own; a server's goes under `server`)"
                        .into(),
                ));
            }
            if !dir.join("tokenizer.json").is_file() {
                return Err(at(format!(
                    "tokenizer directory {} has no tokenizer.json (run scripts/fetch-judges.sh)",
                    dir.display()
                )));
            }
        }
        if let Some(s) = &j.server {
            check_server(s).map_err(|e| at(format!("server: {e}")))?;
        }
    }
    if exp.aggregate.contexts.is_none() && exp.aggregate.wants_contexts() {
        exp.aggregate.contexts = Some(auto_contexts(&exp));
    }
    Settings::new(&exp.aggregate).with_context(|| format!("{}: `aggregate`", path.display()))?;
    Ok(exp)
}

/// Checks a server entry without touching the network.
fn check_server(s: &ServerEntry) -> Result<()> {
    if s.base_urls.is_empty() {
        bail!("`base_urls` is empty");
    }
    for u in &s.base_urls {
        let ok = (u.starts_with("http://") || u.starts_with("https://")) && u.len() > "https://".len();
        if !ok {
            bail!("base URL `{}` is not an http:// or https:// address", jury_judge::display_url(u));
        }
    }
    if s.model.trim().is_empty() {
        bail!("`model` is empty");
    }
    if s.max_in_flight == 0 || s.top_logprobs == 0 {
        bail!("`max_in_flight` and `top_logprobs` must be at least 1");
    }
    for (name, v) in [("timeout_s", s.timeout_s), ("patience_s", s.patience_s)] {
        if !(v.is_finite() && v > 0.0 && v < 1e7) {
            bail!("`{name}` must be a positive number of seconds");
        }
    }
    if let Some(var) = &s.api_key_env
        && std::env::var_os(var).is_none_or(|v| v.is_empty())
    {
        bail!("`api_key_env` names the environment variable `{var}`, which is not set");
    }
    if s.mode == Some(jury_judge::ServerMode::Tokens) && s.tokenizer.is_none() {
        bail!("mode `tokens` needs a `tokenizer`");
    }
    if let Some(t) = &s.tokenizer {
        let dir = tokenizer_dir(t)?;
        for f in ["tokenizer.json", "tokenizer_config.json"] {
            if !dir.join(f).is_file() {
                bail!("tokenizer directory {} has no {f}", dir.display());
            }
        }
    }
    Ok(())
}

/// A server judge's tokenizer: a local directory, or a hub id in the local hub cache.
fn tokenizer_dir(t: &str) -> Result<PathBuf> {
    jury_judge::local_model_dir(t)
        .ok_or_else(|| anyhow::anyhow!("tokenizer `{t}` is neither a directory nor a model in the local hub cache"))
}

/// Each example's context for the context-dependent methods: its template fields,
/// shortest first (so an encoder that keeps the first tokens keeps the question and the
/// answer whole), joined by " || ".
fn contexts_csv(examples: &[Example]) -> String {
    let mut out = String::from("example_id,text\n");
    for e in examples {
        let mut fields: Vec<&String> = e.fields.values().collect();
        fields.sort_by_key(|v| v.len());
        let text: Vec<&str> = fields.iter().map(|v| v.as_str()).collect();
        let _ = writeln!(out, "{},{}", csv_field(&e.id), csv_field(&text.join(" || ")));
    }
    out
}

/// Reads the experiment and prepares the process environment. Called before any thread
/// starts: candle reads `CANDLE_DEQUANTIZE_ALL` once per thread.
pub fn prepare(args: &Args) -> Result<Experiment> {
    let exp = read_experiment(&args.config)?;
    if exp.runtime.dequantize && std::env::var_os("CANDLE_DEQUANTIZE_ALL").is_none() {
        // SAFETY: called from `main` before the async runtime or any other thread exists.
        unsafe { std::env::set_var("CANDLE_DEQUANTIZE_ALL", "1") };
    }
    Ok(exp)
}

fn sample(mut examples: Vec<Example>, limit: Option<usize>, seed: u64) -> Vec<Example> {
    let Some(limit) = limit.filter(|&l| l < examples.len()) else { return examples };
    let mut idx: Vec<usize> = (0..examples.len()).collect();
    idx.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    let mut keep: Vec<usize> = idx.into_iter().take(limit).collect();
    keep.sort_unstable();
    let mut taken: Vec<Option<Example>> = examples.drain(..).map(Some).collect();
    keep.into_iter().filter_map(|i| taken[i].take()).collect()
}

/// The runner's juror for a judge entry (paths checked by `read_experiment`).
fn juror(entry: &JudgeEntry, runtime: &Runtime, template: Template) -> Result<jury_runner::Juror> {
    let spec = if let Some(s) = &entry.server {
        let api_key = match &s.api_key_env {
            Some(var) => Some(jury_judge::ApiKey::new(
                std::env::var(var).with_context(|| format!("judge `{}`: environment variable `{var}`", entry.name))?,
            )),
            None => None,
        };
        let tokenizer = s.tokenizer.as_deref().map(tokenizer_dir).transpose()?;
        let tokenizer_sha256 = match &tokenizer {
            Some(dir) => Some(
                jury_cache::dir_sha256(dir)
                    .with_context(|| format!("judge `{}`: hashing {}", entry.name, dir.display()))?,
            ),
            None => None,
        };
        let cfg = ServerJudgeConfig {
            name: entry.name.clone(),
            base_urls: s.base_urls.clone(),
            model: s.model.clone(),
            api_key,
            tokenizer,
            mode: s.mode,
            top_logprobs: s.top_logprobs,
            max_prompt_tokens: runtime.max_prompt_tokens,
            pool: PoolConfig {
                max_in_flight: s.max_in_flight,
                timeout: Duration::from_secs_f64(s.timeout_s),
                retries: s.retries,
                patience: Duration::from_secs_f64(s.patience_s),
                ..PoolConfig::default()
            },
        };
        JudgeSpec::Server { cfg, tokenizer_sha256 }
    } else {
        let (source, model_sha256) = match (&entry.gguf, &entry.model_id) {
            (Some(path), _) => {
                if !path.is_file() {
                    bail!(
                        "judge `{}`: model file {} does not exist (run scripts/fetch-judges.sh)",
                        entry.name,
                        path.display()
                    );
                }
                let weights = file_sha256(path)?;
                let hash = match &entry.tokenizer {
                    // The tokenizer changes the token sequence, hence the answer.
                    Some(dir) => jury_cache::key(&[
                        weights.as_bytes(),
                        jury_cache::dir_sha256(dir)
                            .with_context(|| format!("judge `{}`: hashing {}", entry.name, dir.display()))?
                            .as_bytes(),
                    ]),
                    None => weights,
                };
                (ModelSource::Gguf(path.clone()), Some(hash))
            }
            // Hashed after loading, when a hub download has put the snapshot on disk.
            (None, Some(id)) => (ModelSource::Pretrained(id.clone()), None),
            (None, None) => bail!("judge `{}`: no model (checked when the experiment is read)", entry.name),
        };
        let cfg = JudgeConfig {
            name: entry.name.clone(),
            source,
            max_prompt_tokens: runtime.max_prompt_tokens,
            prefix_cache: runtime.prefix_cache,
            max_concurrency: runtime.max_concurrency,
            tokenizer: entry.tokenizer.clone(),
        };
        JudgeSpec::Local { cfg, model_sha256 }
    };
    Ok(jury_runner::Juror { name: entry.name.clone(), template, spec })
}

fn fmt_p(p: Option<f64>) -> String {
    p.map_or(String::new(), |y| format!("{y:.6}"))
}

/// Runs an experiment returned by [`prepare`].
pub fn run(exp: Experiment) -> Result<()> {
    let started = Instant::now();
    let settings = Settings::new(&exp.aggregate)?;
    let examples = jury_datasets::load(&exp.dataset.name, &exp.dataset.path)?;
    let examples = sample(examples, exp.dataset.limit, exp.dataset.seed);
    let mut judged = examples.clone();
    if exp.dataset.both_orders {
        for e in &examples {
            judged.push(jury_datasets::swapped(e, &exp.dataset.path)?);
        }
    }
    let template = Template::load(&exp.prompt)?;
    let mut jurors = Vec::new();
    for entry in &exp.judges {
        let template = match &entry.prompt {
            Some(p) => Template::load(p)?,
            None => template.clone(),
        };
        jurors.push(juror(entry, &exp.runtime, template)?);
    }
    std::fs::create_dir_all(&exp.output).with_context(|| format!("creating {}", exp.output.display()))?;
    let cache = Arc::new(Mutex::new(Cache::<Verdict>::open(&exp.output.join("cache.jsonl"))?));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let bars = MultiProgress::new();
    let judged = Arc::new(judged);
    let outcomes =
        rt.block_on(jury_runner::run_jury(jurors, judged.clone(), cache, exp.runtime.dump_prompts, &bars))?;
    let mut verdicts: Vec<(String, std::collections::HashMap<String, Verdict>)> = Vec::new();
    let mut manifest_judges = Vec::new();
    let mut summaries = Vec::new();
    let mut prompts = String::new();
    let mut failures_csv = String::from("example_id,judge,reason\n");
    let mut by_order = String::from("example_id,judge,order,p\n");
    for (entry, outcome) in exp.judges.iter().zip(outcomes) {
        let results = outcome.results;
        let summary = results.summary;
        for ex in judged.iter() {
            if let Some(t) = results.tokens.get(&ex.id) {
                let line = serde_json::json!({"judge": entry.name, "example_id": ex.id, "tokens": t});
                let _ = writeln!(prompts, "{line}");
            }
        }
        for f in &results.failures {
            let _ =
                writeln!(failures_csv, "{},{},{}", csv_field(&f.example_id), csv_field(&f.judge), csv_field(&f.reason));
        }
        let mut v = results.verdicts;
        if exp.dataset.both_orders {
            let mut rows = String::new();
            for ex in &examples {
                let sw = format!("{}{}", ex.id, jury_datasets::SWAPPED_SUFFIX);
                for (order, id, flip) in [("ab", &ex.id, false), ("ba", &sw, true)] {
                    if let Some(x) = v.get(id) {
                        let p = x.y.map(|y| if flip { 1.0 - y } else { y });
                        let _ = writeln!(rows, "{},{},{order},{}", csv_field(&ex.id), csv_field(&entry.name), fmt_p(p));
                    }
                }
                if let (Some(ab), Some(ba)) = (v.get(&ex.id), v.get(&sw)) {
                    let d = Verdict::debiased(ab, ba);
                    v.insert(ex.id.clone(), d);
                }
            }
            by_order.push_str(&rows);
        }
        let info = outcome.info;
        let template_text = entry.prompt.as_ref().map(|p| (p.clone(), std::fs::read(p).unwrap_or_default()));
        let exact = v.values().filter(|x| x.exact).count() as f64 / v.len().max(1) as f64;
        let (pos, neg, tie) = &info.verdict_token_ids;
        manifest_judges.push(serde_json::json!({
            "name": entry.name, "model_sha256": info.model_identity, "engine": info.engine,
            "extraction_rule": info.extraction_rule, "load_seconds": info.load_seconds,
            "judge_seconds": summary.seconds, "scored": summary.scored, "from_cache": summary.from_cache,
            "failed": summary.failed, "exact_share": exact,
            "prefix_cache_flushes": info.prefix_cache_flushes,
            "verdict_token_ids": {"positive": pos, "negative": neg, "tie": tie},
            "template": template_text.map(|(p, text)| serde_json::json!({"path": p, "sha256": jury_cache::key(&[&text])})),
            "server": info.server,
        }));
        summaries.push(summary);
        verdicts.push((entry.name.clone(), v));
    }
    // The long judgments table and the matrix the aggregators read.
    let mut builder = JudgmentsBuilder::new(2)?;
    let mut table = String::from("example_id,judge,p,p_positive,p_negative,p_tie,mass,n_tokens,truncated,exact\n");
    for ex in &examples {
        for (judge, v) in &verdicts {
            let Some(v) = v.get(&ex.id) else { continue };
            builder.push_binary(&ex.id, judge, v.y)?;
            let _ = writeln!(
                table,
                "{},{},{},{:e},{:e},{},{:e},{},{},{}",
                csv_field(&ex.id),
                csv_field(judge),
                fmt_p(v.y),
                v.p_positive,
                v.p_negative,
                v.p_tie.map_or(String::new(), |t| format!("{t:e}")),
                v.mass,
                v.n_tokens,
                v.truncated,
                v.exact
            );
        }
    }
    let judgments = builder.build();
    let pairs: Vec<(&str, usize)> = examples.iter().filter_map(|e| e.label.map(|l| (e.id.as_str(), l))).collect();
    let (labels, _) = Labels::align(&judgments, pairs)?;
    let mut labels_csv = String::from("example_id,label\n");
    for e in &examples {
        if let Some(l) = e.label {
            let _ = writeln!(labels_csv, "{},{l}", csv_field(&e.id));
        }
    }
    write_atomic(&exp.output.join("judgments.csv"), table.as_bytes())?;
    write_atomic(&exp.output.join("labels.csv"), labels_csv.as_bytes())?;
    write_atomic(&exp.output.join("failures.csv"), failures_csv.as_bytes())?;
    if exp.dataset.both_orders {
        write_atomic(&exp.output.join("judgments_by_order.csv"), by_order.as_bytes())?;
    }
    if exp.runtime.dump_prompts {
        write_atomic(&exp.output.join("prompts.jsonl"), prompts.as_bytes())?;
    }
    if exp.aggregate.contexts.as_deref() == Some(auto_contexts(&exp).as_path()) {
        write_atomic(&auto_contexts(&exp), contexts_csv(&examples).as_bytes())?;
    }
    let resolved = serde_yaml::to_string(&exp).context("serialising the resolved config")?;
    write_atomic(&exp.output.join("config.resolved.yaml"), resolved.as_bytes())?;
    println!();
    for s in &summaries {
        println!(
            "{:>20}: {} scored, {} from cache, {} failed, {:.1} s",
            s.judge, s.scored, s.from_cache, s.failed, s.seconds
        );
    }
    println!();
    aggregate::write_results(&judgments, Some(&labels), &settings, &exp.output)?;
    let mean_mass: BTreeMap<&str, f64> = verdicts
        .iter()
        .map(|(j, v)| (j.as_str(), v.values().map(|x| x.mass).sum::<f64>() / v.len().max(1) as f64))
        .collect();
    println!("mean captured mass P(positive)+P(negative): {mean_mass:?}");
    let exact: BTreeMap<&str, f64> = verdicts
        .iter()
        .map(|(j, v)| (j.as_str(), v.values().filter(|x| x.exact).count() as f64 / v.len().max(1) as f64))
        .collect();
    if exact.values().any(|&e| e < 1.0) {
        println!("share of exact verdicts (every verdict token observed): {exact:?}");
    }
    let manifest = serde_json::json!({
        "experiment": exp.name,
        "jury_version": env!("CARGO_PKG_VERSION"),
        "template": {"path": exp.prompt, "sha256": jury_cache::key(&[template.source_text.as_bytes()])},
        "dataset": {"name": exp.dataset.name, "path": exp.dataset.path, "examples": examples.len()},
        "dequantized_weights": std::env::var_os("CANDLE_DEQUANTIZE_ALL").is_some(),
        "judges": manifest_judges,
        "mean_captured_mass": mean_mass,
        "total_seconds": started.elapsed().as_secs_f64(),
    });
    write_atomic(&exp.output.join("manifest.json"), serde_json::to_string_pretty(&manifest)?.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_put_short_fields_first_and_quote_csv() {
        let e = Example {
            id: "q,1".into(),
            fields: BTreeMap::from([
                ("answer".into(), "Paris".into()),
                ("question".into(), "What is the capital?".into()),
            ]),
            label: Some(1),
        };
        assert_eq!(contexts_csv(&[e]), "example_id,text\n\"q,1\",Paris || What is the capital?\n");
    }
}
