//! The YAML experiment `jury run` reads, and its checks: everything that can be found
//! wrong in a config is found here, before any data set loads, model loads or file is
//! written.
//!
//! The aggregation options are a type parameter: the runner carries them from the YAML
//! to whoever aggregates, without knowing them.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use jury_aggregate::StoppingModel;
use jury_judge::{ServerEngine, ServerMode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A config that cannot be run, with the file (and judge) it is about.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    #[error("{}: cannot read: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{}: invalid experiment: {reason}", path.display())]
    Parse { path: PathBuf, reason: String },
    #[error("{}: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
    #[error("{}: judge `{judge}`: {reason}", path.display())]
    Judge { path: PathBuf, judge: String, reason: String },
}

/// The YAML experiment schema. `A`: the aggregation options (`aggregate:`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, bound(deserialize = "A: DeserializeOwned + Default", serialize = "A: Serialize"))]
pub struct Experiment<A> {
    pub name: String,
    pub dataset: DatasetConfig,
    /// Prompt template file (prompts/*.yaml).
    pub prompt: PathBuf,
    pub judges: Vec<JudgeEntry>,
    #[serde(default)]
    pub runtime: Runtime,
    #[serde(default)]
    pub aggregate: A,
    /// Ask judges adaptively: every judge on a warm-up share of the examples, then each
    /// other example asks judges one by one until its verdict is settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<Adaptive>,
    /// Calibration labels for some examples (`labels: FILE`, as `jury aggregate
    /// --calibration` reads it): the calibrated method is fitted on them and recommended,
    /// the rate corrected, and accuracies scored only outside them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<CalibrationConfig>,
    pub output: PathBuf,
    /// Replace an output directory that holds another experiment's output or files jury
    /// did not write (`jury run --force`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub overwrite: bool,
}

/// A run's `calibration:` section.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CalibrationConfig {
    /// example_id, label (and a label plan's inclusion_probability).
    pub labels: PathBuf,
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
    /// What one judgment by this judge costs, in any unit (adaptive runs ask cheaper
    /// judges first and report the cost; default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// Judgments per second this judge is expected to make (`jury run --dry-run`'s
    /// time estimate; an earlier run's manifest gives one too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
}

/// The adaptive jury's settings (`adaptive:`); the defaults are those of
/// `jury simulate adaptive`, chosen on the recorded juries (docs/reproduction/adaptive.md).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Adaptive {
    /// An example stops once the model's probability that the judges left would not
    /// change its verdict reaches this.
    pub target: f64,
    /// Judges that must have answered an example before it may stop.
    pub min_judges: usize,
    /// Share of the examples (drawn with `seed`; at least two per judge) that every
    /// judge answers first, so the model is fitted before anything stops.
    pub warmup: f64,
    pub seed: u64,
    /// Every judge by name, in the order examples ask them; default: cheaper first
    /// (`cost`), then by the warm-up's estimated skill.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order: Option<Vec<String>>,
    /// The model whose predictive stops examples: `auto` (gauss for two classes, ds
    /// otherwise), `gauss`, `care-gauss` or `ds`.
    #[serde(with = "by_name")]
    pub stopping_model: StoppingModel,
}

impl Default for Adaptive {
    fn default() -> Self {
        let d = jury_aggregate::AdaptiveConfig::default();
        Self {
            target: d.target,
            min_judges: d.min_judges,
            warmup: d.warmup,
            seed: d.seed,
            order: None,
            stopping_model: d.stopping_model,
        }
    }
}

/// `stopping_model:` by its name (jury-aggregate's names, which are the methods').
mod by_name {
    use jury_aggregate::StoppingModel;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(m: &StoppingModel, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(m.name())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<StoppingModel, D::Error> {
        StoppingModel::from_name(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl Adaptive {
    fn check(&self, judges: &[JudgeEntry]) -> Result<(), String> {
        let in_unit = |x: f64| x > 0.0 && x <= 1.0;
        if !in_unit(self.target) || !in_unit(self.warmup) {
            return Err(format!("`target` and `warmup` must be in (0, 1] (got {} and {})", self.target, self.warmup));
        }
        if self.min_judges == 0 {
            return Err("`min_judges` must be at least 1".into());
        }
        if self.min_judges > judges.len() {
            return Err(format!(
                "`min_judges` is {} but the jury has {} judge{}: no example could ever stop early",
                self.min_judges,
                judges.len(),
                if judges.len() == 1 { "" } else { "s" }
            ));
        }
        if let Some(order) = &self.order {
            let mut seen = HashSet::new();
            for name in order {
                if !judges.iter().any(|j| &j.name == name) {
                    return Err(format!("`order` names `{name}`, which is not a judge"));
                }
                if !seen.insert(name.as_str()) {
                    return Err(format!("`order` names `{name}` twice"));
                }
            }
            if let Some(j) = judges.iter().find(|j| !seen.contains(j.name.as_str())) {
                return Err(format!("`order` leaves out judge `{}`", j.name));
            }
        }
        Ok(())
    }
}

/// A judge on inference servers (README, "Judges on inference servers").
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerEntry {
    /// Replicas serving the same model, e.g. `http://127.0.0.1:8000` (with or without `/v1`).
    /// Written back (`config.resolved.yaml`) without a password in them, as keys are
    /// written back only by their variable's name.
    #[serde(serialize_with = "urls_without_passwords")]
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
    /// `tokens` (needs `tokenizer`; the default with one), `text` (needs `tokenizer`;
    /// servers that take no token ids), `chat-prefill` (the default without),
    /// `chat-generate` (hosted APIs without prefill).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ServerMode>,
    /// `openai` (the default: OpenAI's log-probability rules) or `mistralrs` (mistral.rs
    /// 0.8.1's server: base-10 log-probabilities, real ones only when sampling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<ServerEngine>,
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
    /// Dense (dequantized) weights: candle's quantized CPU kernels are built for decoding
    /// one token, and judging is prefill (docs/benchmarks/judges.md, "Judges: in process
    /// (mistral.rs) against llama-server").
    pub dequantize: bool,
    pub prefix_cache: bool,
    pub max_concurrency: usize,
    pub max_prompt_tokens: usize,
    /// Also write `prompts.jsonl`: each judged token sequence (for engine comparisons).
    pub dump_prompts: bool,
    /// A cache record that fails its checksum or holds no probability: `recompute` (judge
    /// the example again, with a warning naming file and line) or `stop`.
    pub bad_cache_records: jury_cache::OnBadRecord,
    /// Where in-process judges run: `auto` (the GPU in a `cuda` build on a machine with
    /// one, else the CPU) or `cpu`. Server judges run where their server does.
    pub device: jury_judge::JudgeDevice,
    /// What in-process judges compute in: `auto` (f32 on a CPU, bf16 on a GPU that has
    /// it) or `f32` (everywhere: a GPU gives the CPU's verdicts, at a GPU's f32 speed).
    pub precision: jury_judge::JudgePrecision,
    /// What computes in-process judges: `mistralrs` (every model mistral.rs loads, CPU
    /// or GPU) or `candle` (jury's decoder for GGUF `llama` and `qwen2` files on the CPU,
    /// the one a build without the `mistralrs` feature has).
    pub engine: jury_judge::LocalEngine,
}

impl Default for Runtime {
    fn default() -> Self {
        // One request at a time with the prefix cache (`jury_judge::runtime_conflict`):
        // measured on 40 TruthfulQA prompts (Qwen2.5-Coder-0.5B, docs/benchmarks/judges.md),
        // 71 s one at a time, 141 s with 4 in flight, 56 s with the prefix cache.
        Self {
            dequantize: true,
            prefix_cache: true,
            max_concurrency: 1,
            max_prompt_tokens: jury_core::DEFAULT_MAX_PROMPT_TOKENS,
            dump_prompts: false,
            bad_cache_records: jury_cache::OnBadRecord::Recompute,
            device: jury_judge::JudgeDevice::Auto,
            precision: jury_judge::JudgePrecision::Auto,
            engine: jury_judge::LocalEngine::Mistralrs,
        }
    }
}

impl<A: DeserializeOwned + Default> Experiment<A> {
    /// Reads and checks the experiment in `path` (see [`Experiment::check`]).
    pub fn read(path: &Path) -> Result<Self, ExperimentError> {
        let exp = Self::read_unchecked(path)?;
        exp.check(path)?;
        Ok(exp)
    }

    /// Parses the experiment in `path` without [`Experiment::check`].
    pub fn read_unchecked(path: &Path) -> Result<Self, ExperimentError> {
        let text = jury_io::read_input_to_string(path)
            .map_err(|source| ExperimentError::Read { path: path.to_owned(), source })?;
        serde_yaml::from_str(&text).map_err(|e| ExperimentError::Parse { path: path.to_owned(), reason: e.to_string() })
    }
}

impl<A> Experiment<A> {
    /// Checks what can be checked without loading anything or touching the network: the
    /// judges' sources, names, prompt and tokenizer files, server entries and the
    /// runtime. `path` names the config in errors.
    pub fn check(&self, path: &Path) -> Result<(), ExperimentError> {
        self.check_all_but_presence(path)?;
        match self.absent(path).into_iter().next() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Everything [`Experiment::check`] finds absent on this machine, all at once: model
    /// and tokenizer files, models in the local hub cache. The dry run lists them.
    pub fn absent(&self, path: &Path) -> Vec<ExperimentError> {
        self.judges
            .iter()
            .flat_map(|j| {
                j.absent().into_iter().map(|reason| ExperimentError::Judge {
                    path: path.to_owned(),
                    judge: j.name.clone(),
                    reason,
                })
            })
            .collect()
    }

    /// [`Experiment::check`] but for what [`Experiment::absent`] finds.
    pub fn check_all_but_presence(&self, path: &Path) -> Result<(), ExperimentError> {
        let invalid = |reason: String| ExperimentError::Invalid { path: path.to_owned(), reason };
        if self.judges.is_empty() {
            return Err(invalid("`judges` is empty".into()));
        }
        if let Some(why) = jury_judge::runtime_conflict(self.runtime.prefix_cache, self.runtime.max_concurrency) {
            return Err(invalid(format!("runtime: {why}")));
        }
        if let Some(c) = self.calibration.as_ref().filter(|c| !c.labels.is_file()) {
            return Err(invalid(format!("calibration: `labels` {} is not a file", c.labels.display())));
        }
        if self.dataset.limit == Some(0) {
            return Err(invalid("dataset: `limit` must be at least 1 (leave it out for every example)".into()));
        }
        if let Some(a) = &self.adaptive {
            if self.dataset.both_orders {
                return Err(invalid(
                    "adaptive: not with `dataset.both_orders` (each order would stop on its own)".into(),
                ));
            }
            a.check(&self.judges).map_err(|reason| invalid(format!("adaptive: {reason}")))?;
        }
        let mut names = HashSet::new();
        for j in &self.judges {
            if !names.insert(j.name.as_str()) {
                return Err(invalid(format!("judge name `{}` is used twice", j.name)));
            }
            j.check().map_err(|reason| ExperimentError::Judge {
                path: path.to_owned(),
                judge: j.name.clone(),
                reason,
            })?;
            let source = match (&j.server, &j.gguf, &j.model_id) {
                (None, Some(file), _) => jury_judge::ModelSource::Gguf(file.clone()),
                (None, None, Some(id)) => jury_judge::ModelSource::Pretrained(id.clone()),
                _ => continue,
            };
            if let Some(reason) = jury_judge::engine_problem(self.runtime.engine, &source) {
                return Err(ExperimentError::Judge { path: path.to_owned(), judge: j.name.clone(), reason });
            }
        }
        Ok(())
    }
}

impl JudgeEntry {
    fn check(&self) -> Result<(), String> {
        if let Some(c) = self.cost
            && !(c.is_finite() && c > 0.0)
        {
            return Err(format!("`cost` must be a number above 0 (got {c})"));
        }
        if let Some(r) = self.rate
            && !(r.is_finite() && r > 0.0)
        {
            return Err(format!("`rate` must be judgments per second above 0 (got {r})"));
        }
        let sources = [self.gguf.is_some(), self.model_id.is_some(), self.server.is_some()];
        if sources.iter().filter(|&&x| x).count() != 1 {
            return Err("give exactly one of `gguf`, `model_id` and `server`".into());
        }
        if let Some(p) = &self.prompt
            && !p.is_file()
        {
            return Err(format!("prompt template {} does not exist", p.display()));
        }
        if self.tokenizer.is_some() && self.gguf.is_none() {
            return Err(
                "`tokenizer` goes with `gguf` (a model directory has its own; a server's goes under `server`)".into()
            );
        }
        if let Some(s) = &self.server {
            s.check().map_err(|e| format!("server: {e}"))?;
        }
        Ok(())
    }

    /// What this judge needs on this machine and does not find: its GGUF file, its
    /// tokenizer folder, its model in the local hub cache (offline).
    fn absent(&self) -> Vec<String> {
        let mut found = Vec::new();
        if let Some(dir) = &self.tokenizer
            && !dir.join("tokenizer.json").is_file()
        {
            found.push(format!(
                "tokenizer directory {} has no tokenizer.json (run scripts/fetch-judges.sh)",
                dir.display()
            ));
        }
        found.extend(self.gguf.as_deref().and_then(jury_judge::gguf_problem));
        if let Some(id) = &self.model_id
            && jury_hub::offline()
            && jury_judge::local_model_dir(id).is_none()
        {
            found.push(format!(
                "model `{id}` is neither a folder nor in the local hub cache, and HF_HUB_OFFLINE is set"
            ));
        }
        if let Some(problem) = self.server.as_ref().and_then(ServerEntry::absent) {
            found.push(format!("server: {problem}"));
        }
        found
    }

    /// Whether the weights are on this machine: `None` for a server judge; for a
    /// `model_id` not found locally, `jury run` downloads it from the hub.
    pub fn model_present(&self) -> Option<bool> {
        match (&self.gguf, &self.model_id) {
            (Some(p), _) => Some(p.is_file()),
            (None, Some(id)) => Some(jury_judge::local_model_dir(id).is_some()),
            (None, None) => None,
        }
    }

    /// The tokenizer folder whose chat template renders this judge's token sequence,
    /// when it is on this machine: `tokenizer:` (with `gguf`), a `model_id`'s folder, or
    /// a server judge's `tokenizer` in a tokens mode.
    pub fn rendering_tokenizer(&self) -> Option<PathBuf> {
        if let Some(s) = &self.server {
            let renders = s.mode.is_none_or(ServerMode::renders_tokens);
            return s.tokenizer.as_deref().filter(|_| renders).and_then(|t| tokenizer_dir(t).ok());
        }
        let dir = match (&self.tokenizer, &self.model_id) {
            (Some(dir), _) => Some(dir.clone()),
            (None, Some(id)) => jury_judge::local_model_dir(id),
            (None, None) => None,
        };
        dir.filter(|d| d.join("tokenizer.json").is_file())
    }
}

fn urls_without_passwords<S: serde::Serializer>(urls: &[String], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(urls.iter().map(|u| jury_judge::without_password(u)))
}

impl ServerEntry {
    /// Checks a server entry without touching the network.
    fn check(&self) -> Result<(), String> {
        if self.base_urls.is_empty() {
            return Err("`base_urls` is empty".into());
        }
        for u in &self.base_urls {
            jury_judge::parse_base_url(u)?;
        }
        if self.model.trim().is_empty() {
            return Err("`model` is empty".into());
        }
        if self.max_in_flight == 0 || self.top_logprobs == 0 {
            return Err("`max_in_flight` and `top_logprobs` must be at least 1".into());
        }
        for (name, v) in [("timeout_s", self.timeout_s), ("patience_s", self.patience_s)] {
            if !(v.is_finite() && v > 0.0 && v < 1e7) {
                return Err(format!("`{name}` must be a positive number of seconds"));
            }
        }
        if let Some(var) = &self.api_key_env {
            match std::env::var_os(var) {
                None => return Err(format!("`api_key_env` names the environment variable `{var}`, which is not set")),
                Some(v) if v.is_empty() => {
                    return Err(format!("`api_key_env` names the environment variable `{var}`, which is empty"));
                }
                Some(v) if v.to_str().is_none_or(|k| k.chars().any(char::is_control)) => {
                    return Err(format!(
                        "`api_key_env`: the environment variable `{var}` holds a control character (a newline?) \
                         or is not UTF-8; an HTTP header cannot carry it"
                    ));
                }
                Some(_) => {}
            }
        }
        if let Some(mode) = self.mode
            && mode.renders_tokens()
            && self.tokenizer.is_none()
        {
            return Err(format!("mode `{}` needs a `tokenizer`", mode.as_str()));
        }
        Ok(())
    }

    /// Its tokenizer, when it names one that is not on this machine.
    fn absent(&self) -> Option<String> {
        let t = self.tokenizer.as_deref()?;
        let dir = match tokenizer_dir(t) {
            Ok(dir) => dir,
            Err(e) => return Some(e),
        };
        ["tokenizer.json", "tokenizer_config.json"]
            .into_iter()
            .find(|f| !dir.join(f).is_file())
            .map(|f| format!("tokenizer directory {} has no {f}", dir.display()))
    }
}

/// A server judge's tokenizer: a local directory, or a hub id in the local hub cache.
pub(crate) fn tokenizer_dir(t: &str) -> Result<PathBuf, String> {
    jury_judge::local_model_dir(t)
        .ok_or_else(|| format!("tokenizer `{t}` is neither a directory nor a model in the local hub cache"))
}

#[cfg(test)]
mod tests {
    use super::*;

    type Exp = Experiment<serde_yaml::Value>;

    fn parse(yaml: &str) -> Result<Exp, ExperimentError> {
        let exp: Exp = serde_yaml::from_str(yaml)
            .map_err(|e| ExperimentError::Parse { path: "x.yaml".into(), reason: e.to_string() })?;
        exp.check(Path::new("x.yaml"))?;
        Ok(exp)
    }

    const HEAD: &str = "name: t\ndataset: {name: truthfulqa, path: d.csv}\nprompt: p.yaml\noutput: out\n";

    #[test]
    fn a_judge_names_exactly_one_source() {
        let both =
            format!("{HEAD}judges:\n  - {{name: a, model_id: m, server: {{base_urls: ['http://h:1'], model: m}}}}\n");
        let e = parse(&both).unwrap_err().to_string();
        assert!(e.contains("judge `a`: give exactly one of"), "{e}");
        let none = format!("{HEAD}judges:\n  - {{name: a}}\n");
        assert!(parse(&none).unwrap_err().to_string().contains("exactly one"));
    }

    #[test]
    fn duplicate_names_and_bad_servers_are_refused_before_anything_loads() {
        let dup = format!("{HEAD}judges:\n  - {{name: a, model_id: m}}\n  - {{name: a, model_id: n}}\n");
        assert!(parse(&dup).unwrap_err().to_string().contains("judge name `a` is used twice"));
        let url = format!("{HEAD}judges:\n  - {{name: s, server: {{base_urls: ['ftp://h'], model: m}}}}\n");
        let e = parse(&url).unwrap_err().to_string();
        assert!(e.contains("judge `s`: server: base URL"), "{e}");
        let key = format!(
            "{HEAD}judges:\n  - {{name: s, server: {{base_urls: ['http://h:1'], model: m, api_key_env: JURY_TEST_SURELY_UNSET_VAR}}}}\n"
        );
        assert!(parse(&key).unwrap_err().to_string().contains("JURY_TEST_SURELY_UNSET_VAR"));
        let tokens =
            format!("{HEAD}judges:\n  - {{name: s, server: {{base_urls: ['http://h:1'], model: m, mode: tokens}}}}\n");
        assert!(parse(&tokens).unwrap_err().to_string().contains("needs a `tokenizer`"));
        let ok = format!("{HEAD}judges:\n  - {{name: s, server: {{base_urls: ['http://h:1/v1'], model: m}}}}\n");
        let exp = parse(&ok).unwrap();
        assert_eq!(exp.judges[0].server.as_ref().unwrap().max_in_flight, 4);
    }

    #[test]
    fn the_judges_device_is_auto_unless_cpu_is_asked_for() {
        let judges = "judges:\n  - {name: a, model_id: m}\n";
        assert_eq!(parse(&format!("{HEAD}{judges}")).unwrap().runtime.device, jury_judge::JudgeDevice::Auto);
        let cpu = parse(&format!("{HEAD}{judges}runtime: {{device: cpu}}\n")).unwrap();
        assert_eq!(cpu.runtime.device, jury_judge::JudgeDevice::Cpu);
        let e = parse(&format!("{HEAD}{judges}runtime: {{device: gpu}}\n")).unwrap_err().to_string();
        assert!(e.contains("unknown variant `gpu`") && e.contains("auto") && e.contains("cpu"), "{e}");
        assert_eq!(parse(&format!("{HEAD}{judges}")).unwrap().runtime.precision, jury_judge::JudgePrecision::Auto);
        let f32 = parse(&format!("{HEAD}{judges}runtime: {{precision: f32}}\n")).unwrap();
        assert_eq!(f32.runtime.precision, jury_judge::JudgePrecision::F32);
        let e = parse(&format!("{HEAD}{judges}runtime: {{precision: bf16}}\n")).unwrap_err().to_string();
        assert!(e.contains("unknown variant `bf16`") && e.contains("f32"), "{e}");
    }

    #[test]
    fn the_engine_is_checked_against_the_build_and_the_judges_sources() {
        let judges = "judges:\n  - {name: a, model_id: m}\n";
        let exp = parse(&format!("{HEAD}{judges}")).map(|e| e.runtime.engine);
        // mistral.rs is the default engine: a build without it says so, naming the judge.
        match exp {
            Ok(engine) => {
                assert!(jury_judge::LocalEngine::Mistralrs.built() && engine == jury_judge::LocalEngine::Mistralrs)
            }
            Err(e) => assert!(e.to_string().contains("judge `a`") && e.to_string().contains("engine: candle"), "{e}"),
        }
        let e = parse(&format!("{HEAD}{judges}runtime: {{engine: candle}}\n")).unwrap_err().to_string();
        assert!(e.contains("judge `a`") && e.contains("GGUF files only"), "{e}");
        // A GGUF judge (checked before its file is looked for) and a server judge.
        let gguf =
            "judges:\n  - {name: g, gguf: j.gguf}\n  - {name: s, server: {base_urls: ['http://h:1/v1'], model: m}}\n";
        let ok: Exp = serde_yaml::from_str(&format!("{HEAD}{gguf}runtime: {{engine: candle}}\n")).unwrap();
        ok.check_all_but_presence(Path::new("x.yaml")).unwrap();
        assert_eq!(ok.runtime.engine, jury_judge::LocalEngine::Candle);
        let e = parse(&format!("{HEAD}{gguf}runtime: {{engine: llamacpp}}\n")).unwrap_err().to_string();
        assert!(e.contains("unknown variant `llamacpp`") && e.contains("candle"), "{e}");
    }

    #[test]
    fn adaptive_settings_are_checked_before_anything_loads() {
        let judges = "judges:\n  - {name: a, model_id: m, cost: 2}\n  - {name: b, model_id: n}\n";
        let ok = parse(&format!("{HEAD}{judges}adaptive: {{target: 0.9}}\n")).unwrap();
        let a = ok.adaptive.unwrap();
        assert_eq!((a.target, a.min_judges, a.warmup, a.stopping_model), (0.9, 2, 0.05, StoppingModel::Auto));
        let ds = parse(&format!("{HEAD}{judges}adaptive: {{stopping_model: ds}}\n")).unwrap();
        assert_eq!(ds.adaptive.unwrap().stopping_model, StoppingModel::DawidSkene);
        assert_eq!(ok.judges[0].cost, Some(2.0));
        for (bad, says) in [
            ("adaptive: {target: 1.5}", "`target` and `warmup` must be in (0, 1]"),
            ("adaptive: {warmup: 0}", "`target` and `warmup` must be in (0, 1]"),
            ("adaptive: {min_judges: 0}", "`min_judges` must be at least 1"),
            ("adaptive: {min_judges: 3}", "`min_judges` is 3 but the jury has 2 judges"),
            ("adaptive: {order: [a, c]}", "`order` names `c`, which is not a judge"),
            ("adaptive: {order: [a, a]}", "`order` names `a` twice"),
            ("adaptive: {order: [b]}", "`order` leaves out judge `a`"),
            ("adaptive: {bogus: 1}", "unknown field `bogus`"),
            (
                "adaptive: {stopping_model: mv}",
                "unknown stopping model `mv` (expected one of: auto, ds, gauss, care-gauss)",
            ),
        ] {
            let e = parse(&format!("{HEAD}{judges}{bad}\n")).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let cost = parse(&format!("{HEAD}judges:\n  - {{name: a, model_id: m, cost: -1}}\n")).unwrap_err();
        assert!(cost.to_string().contains("judge `a`: `cost` must be a number above 0"), "{cost}");
        let pairs = "name: t\ndataset: {name: llmbar, path: d.csv, both_orders: true}\nprompt: p.yaml\noutput: out\n";
        let e = parse(&format!("{pairs}{judges}adaptive: {{}}\n")).unwrap_err().to_string();
        assert!(e.contains("adaptive: not with `dataset.both_orders`"), "{e}");
    }

    #[test]
    fn unknown_fields_name_their_line() {
        let e = parse(&format!("{HEAD}judges: []\nbogus: 1\n")).unwrap_err().to_string();
        assert!(e.contains("unknown field `bogus`") && e.contains("line"), "{e}");
        let e = parse(&format!("{HEAD}judges: []\n")).unwrap_err().to_string();
        assert!(e.contains("`judges` is empty"), "{e}");
    }
}
