//! An LLM judge as the triplet-ranking evaluation function: for prompt d, judge model k
//! and candidates a, b, a local LLM reads k's answer as the reference and gives P(A
//! agrees better) from its next-token distribution (jury-judge), through the durable
//! judgment cache, so an interrupted ranking resumes without re-asking.

use std::collections::BTreeMap;
use std::path::Path;

use indicatif::ProgressBar;
use jury_cache::Cache;
use jury_judge::{AnyJudge, Judge, JudgeConfig, ModelSource, Template, Verdict};
use jury_rank::Evaluation;

use crate::judging::{RunError, any_judgment_key};

type Result<T> = std::result::Result<T, RunError>;

/// Settings of the LLM evaluation.
pub struct LlmEvalConfig<'a> {
    pub gguf: &'a Path,
    pub template: &'a Path,
    /// Judge each pair in both orders and average (position-bias de-biasing).
    pub both_orders: bool,
    /// Durable cache of judgments (JSON Lines), created if missing.
    pub cache: &'a Path,
    pub max_prompt_tokens: usize,
    /// A tokenizer directory to use instead of the GGUF's (see `JudgeConfig::tokenizer`).
    pub tokenizer: Option<&'a Path>,
}

pub struct LlmEvaluation {
    rt: tokio::runtime::Runtime,
    judge: AnyJudge,
    model_sha256: String,
    cache: Cache<Verdict>,
    prompts: Vec<String>,
    /// `cells[model][prompt]`.
    cells: Vec<Vec<Option<String>>>,
    both_orders: bool,
    bar: ProgressBar,
    /// Judgments made now (not from the cache).
    pub scored: usize,
    pub from_cache: usize,
    /// The first failed judgment; once set, every comparison is `None` and the caller
    /// must report it (`take_error`) instead of a ranking.
    failed: Option<RunError>,
}

impl LlmEvaluation {
    pub fn new(cfg: &LlmEvalConfig, prompts: Vec<String>, cells: Vec<Vec<Option<String>>>) -> Result<Self> {
        let name = cfg.gguf.file_stem().map_or("llm".into(), |s| s.to_string_lossy().into_owned());
        if let Some(reason) = jury_judge::gguf_problem(cfg.gguf) {
            return Err(RunError::Setup { judge: name, reason });
        }
        let template = Template::load(cfg.template)?;
        let model_sha256 = jury_cache::gguf_identity(cfg.gguf, cfg.tokenizer)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| RunError::Setup { judge: name.clone(), reason: format!("starting the async runtime: {e}") })?;
        let judge_cfg = JudgeConfig {
            name,
            source: ModelSource::Gguf(cfg.gguf.to_owned()),
            max_prompt_tokens: cfg.max_prompt_tokens,
            prefix_cache: false,
            max_concurrency: 1,
            tokenizer: cfg.tokenizer.map(Path::to_owned),
            device: jury_judge::JudgeDevice::Auto,
            precision: jury_judge::JudgePrecision::Auto,
            // mistral.rs where this build has it (the numbers cached so far), else candle.
            engine: if jury_judge::LocalEngine::Mistralrs.built() {
                jury_judge::LocalEngine::Mistralrs
            } else {
                jury_judge::LocalEngine::Candle
            },
        };
        let judge = AnyJudge::Local(Box::new(rt.block_on(Judge::load(judge_cfg, template))?));
        if let Some(dir) = cfg.cache.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| RunError::Write { path: dir.to_owned(), reason: e.to_string() })?;
        }
        let cache = Cache::open(cfg.cache)?;
        let bar = ProgressBar::new_spinner()
            .with_style(jury_progress::style("{spinner} LLM judgments: {pos} ({per_sec}) {msg}"));
        Ok(Self {
            rt,
            judge,
            model_sha256,
            cache,
            prompts,
            cells,
            both_orders: cfg.both_orders,
            bar,
            scored: 0,
            from_cache: 0,
            failed: None,
        })
    }

    /// P(answer A agrees better with the reference), through the cache.
    fn verdict(&mut self, id: String, fields: BTreeMap<String, String>) -> Result<Option<f64>> {
        let (prompt, truncated) = self.rt.block_on(self.judge.render(&id, &fields))?;
        let key = any_judgment_key(&self.judge, &self.model_sha256, &prompt);
        let v = match self.cache.get(&key) {
            Some(v) => {
                self.from_cache += 1;
                v.clone()
            }
            None => {
                let mut v = self.rt.block_on(self.judge.score(&id, prompt))?;
                v.truncated = truncated;
                self.cache.insert(key, v.clone())?;
                self.scored += 1;
                v
            }
        };
        self.bar.inc(1);
        Ok(v.y)
    }

    fn pair(&mut self, prompt: usize, judge: usize, a: usize, b: usize) -> Result<Option<f64>> {
        let cell = |m: usize| self.cells[m][prompt].clone();
        let (Some(reference), Some(ra), Some(rb)) = (cell(judge), cell(a), cell(b)) else { return Ok(None) };
        let question = self.prompts[prompt].clone();
        let fields = |x: &str, y: &str| {
            BTreeMap::from([
                ("question".to_owned(), question.clone()),
                ("reference".to_owned(), reference.clone()),
                ("answer_a".to_owned(), x.to_owned()),
                ("answer_b".to_owned(), y.to_owned()),
            ])
        };
        let id = format!("prompt {prompt}, judge {judge}: {a} vs {b}");
        let original = self.verdict(id.clone(), fields(&ra, &rb))?;
        if !self.both_orders {
            return Ok(original);
        }
        let swapped = self.verdict(format!("{id} (swapped)"), fields(&rb, &ra))?.map(|y| 1.0 - y);
        Ok(match (original, swapped) {
            (Some(x), Some(y)) => Some((x + y) / 2.0),
            (x, y) => x.or(y),
        })
    }

    /// Ends the progress display; the first failed judgment, if any, is the result.
    pub fn finish(&mut self) -> Result<()> {
        match self.failed.take() {
            Some(e) => {
                self.bar.abandon();
                Err(e)
            }
            None => {
                self.bar.finish_with_message(format!("{} scored, {} from cache", self.scored, self.from_cache));
                Ok(())
            }
        }
    }
}

impl Evaluation for LlmEvaluation {
    fn similarity(&mut self, _prompt: usize, _judge: usize, _candidate: usize) -> Option<f64> {
        None
    }

    /// 2 P(A agrees better) - 1. After a failed judgment nothing more is asked (a
    /// ranking built on skipped comparisons would look valid and be wrong; `finish`
    /// returns the error).
    fn compare(&mut self, prompt: usize, judge: usize, a: usize, b: usize) -> Option<f64> {
        if self.failed.is_some() {
            return None;
        }
        match self.pair(prompt, judge, a, b) {
            Ok(p) => p.map(|p| 2.0 * p - 1.0),
            Err(e) => {
                self.failed = Some(e);
                None
            }
        }
    }
}
