//! Judging: a jury over a data set: every judge at the same time (server judges each on
//! their own, in-process judges one after another so one model is loaded at a time),
//! each rendering, looking up the durable cache, scoring what is missing with bounded
//! concurrency and appending each finished result as it completes.
//!
//! Invariants:
//! - a result is in the cache file before it counts as done, so killing the process at
//!   any point loses at most the requests in flight, and a rerun with the same model,
//!   template and examples redoes nothing that had finished;
//! - an example a server rejects for good is a [`Failure`] (a missing judgment with its
//!   reason), never cached, so a rerun asks again; any other judge error stops the run,
//!   and what finished before stays in the cache.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use indicatif::{MultiProgress, ProgressBar};
use jury_cache::{Cache, CacheError, key};
use jury_datasets::Example;
use jury_io::{ManifestServer, PoolStats};
use jury_judge::{
    AnyJudge, EXTRACTION_RULE, Judge, JudgeConfig, JudgeError, ModelSource, Prompt, ServerJudge, ServerJudgeConfig,
    ServerMode, Template, Verdict,
};
use jury_progress::LogProgress;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Judge(#[from] JudgeError),
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error(transparent)]
    Experiment(#[from] crate::experiment::ExperimentError),
    #[error(transparent)]
    Dataset(#[from] jury_datasets::DatasetError),
    #[error(transparent)]
    Io(#[from] jury_io::IoError),
    #[error(transparent)]
    Core(#[from] jury_core::CoreError),
    #[error(transparent)]
    Output(#[from] jury_io::OutputError),
    #[error("judge `{judge}`: {reason}")]
    Setup { judge: String, reason: String },
    #[error("{}: cannot write: {reason}", path.display())]
    Write { path: std::path::PathBuf, reason: String },
    #[error("judge `{judge}`: every one of {n} examples failed; the first: {reason}")]
    AllFailed { judge: String, n: usize, reason: String },
    #[error("adaptive: {0}")]
    Adaptive(String),
    #[error("judge `{judge}`: the judging task ended abnormally: {reason}")]
    Task { judge: String, reason: String },
}

/// What one judge's pass over the examples did.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeSummary {
    pub judge: String,
    pub scored: usize,
    pub from_cache: usize,
    pub failed: usize,
    pub seconds: f64,
}

/// An example a judge could not judge, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub example_id: String,
    pub judge: String,
    pub reason: String,
}

/// The cache key of one in-process judgment: everything that changes the answer.
/// `engine` is [`Judge::engine`] (version, device, precision).
pub fn judgment_key(model_sha256: &str, engine: &str, template_text: &str, tokens: &[u32]) -> String {
    let bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
    key(&[model_sha256.as_bytes(), engine.as_bytes(), template_text.as_bytes(), &bytes, EXTRACTION_RULE.as_bytes()])
}

/// The cache key of a judgment by any judge. In-process judges keep [`judgment_key`]
/// (so existing caches stay valid); server judges key on the served model's identity,
/// engine, tokenizer, mode and top-k ([`AnyJudge::engine`]), the template, the exact
/// prompt and the extraction rule, and never on a server's address: any replica may
/// answer, and a rerun against other replicas of the same model hits the cache.
pub fn any_judgment_key(judge: &AnyJudge, model_sha256: &str, prompt: &Prompt) -> String {
    let template = &judge.template().source_text;
    match (judge, prompt.tokens()) {
        (AnyJudge::Local(_), Some(tokens)) => judgment_key(model_sha256, judge.engine(), template, tokens),
        _ => key(&[
            b"server judgment",
            judge.engine().as_bytes(),
            template.as_bytes(),
            &prompt.key_bytes(),
            judge.extraction_rule().as_bytes(),
        ]),
    }
}

/// One example's outcome: id, verdict or failure reason, whether from the cache, and the
/// kept token sequence.
type Judged = (String, Result<Verdict, String>, bool, Option<Vec<u32>>);

/// A judge's verdicts by example id, plus the judged token sequences when asked for.
pub struct JudgeResults {
    pub verdicts: HashMap<String, Verdict>,
    pub tokens: HashMap<String, Vec<u32>>,
    pub failures: Vec<Failure>,
    pub summary: JudgeSummary,
}

fn style(bar: &ProgressBar, name: &str) {
    bar.set_style(jury_progress::style("{prefix:>20} {bar:30} {pos}/{len} {per_sec} ETA {eta} {msg}"));
    bar.set_prefix(jury_io::terminal_text(name).into_owned());
}

/// The counters of a server judge in a few words: done, retried, failed, per server.
pub fn server_counters(stats: &PoolStats, failed: usize) -> String {
    let ok: u64 = stats.servers.iter().map(|s| s.ok).sum();
    let per: Vec<String> =
        stats.servers.iter().map(|s| format!("{} {}{}", s.url, s.ok, if s.down { " (down)" } else { "" })).collect();
    format!("ok {ok}, retried {}, failed {failed} | {}", stats.retried, per.join(", "))
}

/// What every example of one judge's pass shares.
struct PassContext<'a> {
    judge: &'a AnyJudge,
    model_sha256: &'a str,
    cache: &'a Mutex<Cache<Verdict>>,
    keep_tokens: bool,
    log: &'a LogProgress,
    failed: &'a AtomicUsize,
    bar: &'a ProgressBar,
}

/// One example: render, cache lookup, score, append to the cache.
async fn judge_one(ctx: &PassContext<'_>, ex: &Example) -> Result<Judged, RunError> {
    let judge = ctx.judge;
    let attempt: Result<Judged, RunError> = async {
        let (prompt, truncated) = judge.render(&ex.id, &ex.fields).await?;
        let k = any_judgment_key(judge, ctx.model_sha256, &prompt);
        let kept = if ctx.keep_tokens { prompt.tokens().map(<[u32]>::to_vec) } else { None };
        let cached = ctx.cache.lock().ok().and_then(|c| c.get(&k).cloned());
        if let Some(v) = cached {
            ctx.log.skip(1);
            return Ok((ex.id.clone(), Ok(v), true, kept));
        }
        let mut v = judge.score(&ex.id, prompt).await?;
        v.truncated = truncated;
        // Never store what a cache read would refuse: every rerun would judge it again.
        v.check().map_err(|reason| JudgeError::Example {
            judge: judge.name().to_owned(),
            example: ex.id.clone(),
            reason: format!("unusable verdict: {reason}"),
        })?;
        if let Ok(mut c) = ctx.cache.lock() {
            c.insert(k, v.clone())?;
        }
        ctx.log.inc(1);
        Ok((ex.id.clone(), Ok(v), false, kept))
    }
    .await;
    let outcome = match attempt {
        Ok(x) => Ok(x),
        // A server judge's per-example failure is a missing judgment.
        Err(RunError::Judge(JudgeError::Rejected { reason, .. } | JudgeError::Example { reason, .. }))
            if matches!(judge, AnyJudge::Server(_)) =>
        {
            ctx.failed.fetch_add(1, Ordering::Relaxed);
            ctx.log.inc(1);
            Ok((ex.id.clone(), Err(reason), false, None))
        }
        Err(e) => Err(e),
    };
    ctx.bar.inc(1);
    if let AnyJudge::Server(s) = judge {
        ctx.bar.set_message(server_counters(&s.stats(), ctx.failed.load(Ordering::Relaxed)));
    }
    outcome
}

/// Judges every example (cache first). With `keep_tokens`, also returns each example's
/// exact token sequence (for comparisons with other engines). An example a server
/// rejects for good is returned among the failures, even if every one failed.
pub(crate) async fn run_judge(
    judge: &AnyJudge,
    model_sha256: &str,
    examples: &[Example],
    cache: &Mutex<Cache<Verdict>>,
    keep_tokens: bool,
    bar: &ProgressBar,
) -> Result<JudgeResults, RunError> {
    let start = Instant::now();
    bar.set_length(examples.len() as u64);
    style(bar, judge.name());
    let log = LogProgress::new(format!("judge {}", jury_io::terminal_text(judge.name())), examples.len() as u64);
    let failed = AtomicUsize::new(0);
    let ctx = PassContext { judge, model_sha256, cache, keep_tokens, log: &log, failed: &failed, bar };
    // Bounded concurrency over a `FuturesUnordered` of a named async fn (closures
    // returning futures cannot be proven `Send` for every lifetime inside a task).
    let mut pending = FuturesUnordered::new();
    let mut queue = examples.iter();
    let mut verdicts = HashMap::with_capacity(examples.len());
    let mut tokens = HashMap::new();
    let mut failures = Vec::new();
    let (mut scored, mut from_cache) = (0, 0);
    // A server judge renders the next examples while its requests are in flight (the
    // pool's slots bound what reaches the servers), so a server never waits for the
    // tokenizer; an in-process judge keeps exactly its concurrency.
    let window = match judge {
        AnyJudge::Server(_) => 2 * judge.concurrency(),
        AnyJudge::Local(_) => judge.concurrency(),
    };
    loop {
        while pending.len() < window {
            match queue.next() {
                Some(ex) => pending.push(judge_one(&ctx, ex)),
                None => break,
            }
        }
        // The first error ends the pass (dropping the requests in flight).
        let Some(r) = pending.next().await else { break };
        let (id, v, hit, kept) = r?;
        match v {
            Ok(v) => {
                if hit {
                    from_cache += 1;
                } else {
                    scored += 1;
                }
                verdicts.insert(id.clone(), v);
            }
            Err(reason) => failures.push(Failure { example_id: id.clone(), judge: judge.name().to_owned(), reason }),
        }
        if let Some(t) = kept {
            tokens.insert(id, t);
        }
    }
    failures.sort_by(|a, b| a.example_id.cmp(&b.example_id));
    bar.finish_with_message(format!("{scored} scored, {from_cache} from cache, {} failed", failures.len()));
    let summary = JudgeSummary {
        judge: judge.name().to_owned(),
        scored,
        from_cache,
        failed: failures.len(),
        seconds: start.elapsed().as_secs_f64(),
    };
    Ok(JudgeResults { verdicts, tokens, failures, summary })
}

/// How to build one juror.
#[derive(Clone)]
pub enum JudgeSpec {
    /// In process. `model_sha256` identifies GGUF weights (with their tokenizer); for
    /// a `Pretrained` source it is computed after loading, once a hub download has put
    /// the snapshot on disk.
    Local { cfg: JudgeConfig, model_sha256: Option<String> },
    /// On servers; `tokenizer_sha256` identifies the tokenizer directory.
    Server { cfg: ServerJudgeConfig, tokenizer_sha256: Option<String> },
}

/// One juror of an experiment.
impl JudgeSpec {
    /// The tokenizer folder whose chat template renders this juror's token sequence:
    /// an in-process judge's `tokenizer`, or a server judge's in a tokens mode.
    pub(crate) fn rendering_tokenizer(&self) -> Option<&std::path::Path> {
        match self {
            JudgeSpec::Local { cfg, .. } => cfg.tokenizer.as_deref(),
            JudgeSpec::Server { cfg, .. } if cfg.mode.is_none_or(ServerMode::renders_tokens) => {
                cfg.tokenizer.as_deref()
            }
            JudgeSpec::Server { .. } => None,
        }
    }

    pub(crate) fn max_prompt_tokens(&self) -> usize {
        match self {
            JudgeSpec::Local { cfg, .. } => cfg.max_prompt_tokens,
            JudgeSpec::Server { cfg, .. } => cfg.max_prompt_tokens,
        }
    }
}

#[derive(Clone)]
pub struct Juror {
    pub name: String,
    pub template: Template,
    pub spec: JudgeSpec,
}

/// What the manifest records of a juror besides its results.
#[derive(Debug, Clone, serde::Serialize)]
pub struct JurorInfo {
    pub model_identity: String,
    pub engine: String,
    pub extraction_rule: String,
    pub load_seconds: f64,
    pub prefix_cache_entries: Option<usize>,
    pub verdict_token_ids: (Vec<u32>, Vec<u32>, Vec<u32>),
    /// Server judges: mode, servers and their counters.
    pub server: Option<ManifestServer>,
}

/// A juror's results and manifest record.
pub struct JurorOutcome {
    pub results: JudgeResults,
    pub info: JurorInfo,
}

/// A juror ready to judge: the loaded judge, its model hash (in process) and load time.
struct Loaded {
    judge: AnyJudge,
    model_sha256: String,
    load_seconds: f64,
}

async fn load(juror: Juror, bar: &ProgressBar) -> Result<Loaded, RunError> {
    style(bar, &juror.name);
    bar.set_message("loading");
    let load_start = Instant::now();
    let (judge, model_sha256) = match juror.spec {
        JudgeSpec::Local { cfg, model_sha256 } => {
            let source = cfg.source.clone();
            let judge = Judge::load(cfg, juror.template).await?;
            let hash = match (model_sha256, &source) {
                (Some(h), _) => h,
                (None, ModelSource::Pretrained(id)) => match jury_judge::local_model_dir(id) {
                    Some(dir) => jury_cache::dir_sha256(&dir)?,
                    None => format!("model-id:{id}"),
                },
                (None, ModelSource::Gguf(path)) => jury_cache::file_sha256(path)?,
            };
            (AnyJudge::Local(Box::new(judge)), hash)
        }
        JudgeSpec::Server { cfg, tokenizer_sha256 } => {
            (AnyJudge::Server(Box::new(ServerJudge::load(cfg, juror.template, tokenizer_sha256).await?)), String::new())
        }
    };
    bar.set_message("");
    Ok(Loaded { judge, model_sha256, load_seconds: load_start.elapsed().as_secs_f64() })
}

/// `loaded`, once its token budget is known to fit the template (before it judges).
async fn checked(loaded: Loaded, first: Option<&Example>) -> Result<Loaded, RunError> {
    if let Some(first) = first {
        loaded.judge.check_budget(&first.fields).await?;
    }
    Ok(loaded)
}

async fn run_loaded(
    loaded: &Loaded,
    examples: Arc<Vec<Example>>,
    cache: Arc<Mutex<Cache<Verdict>>>,
    keep_tokens: bool,
    bar: ProgressBar,
) -> Result<JurorOutcome, RunError> {
    let Loaded { judge, model_sha256, load_seconds } = loaded;
    let load_seconds = *load_seconds;
    let results = run_judge(judge, model_sha256, &examples, &cache, keep_tokens, &bar).await?;
    let info = match judge {
        AnyJudge::Local(j) => {
            let (p, n, t) = j.verdict_ids();
            JurorInfo {
                model_identity: model_sha256.clone(),
                engine: j.engine().to_owned(),
                extraction_rule: judge.extraction_rule(),
                load_seconds,
                prefix_cache_entries: j.prefix_cache_entries(),
                verdict_token_ids: (p.to_vec(), n.to_vec(), t.to_vec()),
                server: None,
            }
        }
        AnyJudge::Server(s) => JurorInfo {
            model_identity: s.identity().to_owned(),
            engine: s.identity().to_owned(),
            extraction_rule: judge.extraction_rule(),
            load_seconds,
            prefix_cache_entries: None,
            verdict_token_ids: s.verdict_ids(),
            server: Some(ManifestServer { mode: s.mode().as_str().to_owned(), stats: s.stats() }),
        },
    };
    Ok(JurorOutcome { results, info })
}

impl JudgeResults {
    /// The run's verdict on a judge that was asked `asked` examples over all its passes:
    /// an error when every one of them failed (a judge that answers nothing is a
    /// configuration fault, not missing data), else `Ok`.
    pub(crate) fn check_answered(&self, asked: usize) -> Result<(), RunError> {
        match self.failures.first() {
            Some(first) if self.verdicts.is_empty() && self.failures.len() == asked => {
                Err(RunError::AllFailed { judge: first.judge.clone(), n: asked, reason: first.reason.clone() })
            }
            _ => Ok(()),
        }
    }
}

/// The jurors of one run, ready for any number of passes. Every server judge is loaded
/// once, when the bench opens (its model list read and one probe sent on every
/// server), so the passes of an adaptive run share one pool per judge: its retries,
/// its servers set aside, its `patience_s` clock and its counters. In-process judges
/// load at each pass, one after another, so one model is in memory at a time.
pub(crate) struct Bench {
    seats: Vec<Seat>,
}

enum Seat {
    Server(Arc<Loaded>),
    Local(Box<Juror>),
}

impl Bench {
    /// Loads every server judge, all at once, and checks each one's token budget
    /// against `first`, the run's first example; a wrong address, model name or key
    /// stops the run here, before any in-process model loads.
    pub(crate) async fn open(
        jurors: Vec<Juror>,
        first: Option<&Example>,
        bars: &MultiProgress,
    ) -> Result<Bench, RunError> {
        let mut seats: Vec<Option<Seat>> = Vec::with_capacity(jurors.len());
        let mut servers = Vec::new();
        for (i, juror) in jurors.into_iter().enumerate() {
            match juror.spec {
                JudgeSpec::Server { .. } => {
                    seats.push(None);
                    servers.push((i, juror));
                }
                JudgeSpec::Local { .. } => seats.push(Some(Seat::Local(Box::new(juror)))),
            }
        }
        let loads = futures::future::join_all(servers.into_iter().map(|(i, juror)| async move {
            let bar = bars.add(ProgressBar::new(0));
            let loaded = load(juror, &bar).await;
            bar.finish_and_clear();
            (i, loaded)
        }))
        .await;
        for (i, loaded) in loads {
            seats[i] = Some(Seat::Server(Arc::new(checked(loaded?, first).await?)));
        }
        // Every seat is filled: the locals above, the servers in this loop.
        Ok(Bench { seats: seats.into_iter().flatten().collect() })
    }

    pub(crate) fn len(&self) -> usize {
        self.seats.len()
    }

    /// One pass: each juror `work` names (by its index in the bench) over its own
    /// examples, all at the same time: each server judge in its own task, the
    /// in-process judges one after another in one task. Returns the outcomes in
    /// `work`'s order; the first error stops every task (what finished is in the cache).
    /// A pass returns what failed; whether a judge failed on everything is the run's
    /// question ([`JudgeResults::check_answered`]), asked once its passes are over.
    pub(crate) async fn pass(
        &self,
        work: Vec<(usize, Arc<Vec<Example>>)>,
        cache: &Arc<Mutex<Cache<Verdict>>>,
        keep_tokens: bool,
        bars: &MultiProgress,
    ) -> Result<Vec<JurorOutcome>, RunError> {
        let n = work.len();
        let mut tasks = tokio::task::JoinSet::new();
        let mut locals = Vec::new();
        for (slot, (j, examples)) in work.into_iter().enumerate() {
            let bar = bars.add(ProgressBar::new(examples.len() as u64));
            match &self.seats[j] {
                Seat::Server(loaded) => {
                    let (loaded, cache) = (loaded.clone(), cache.clone());
                    tasks.spawn(async move {
                        run_loaded(&loaded, examples, cache, keep_tokens, bar).await.map(|o| vec![(slot, o)])
                    });
                }
                Seat::Local(juror) => locals.push((slot, (**juror).clone(), examples, bar)),
            }
        }
        if !locals.is_empty() {
            let cache = cache.clone();
            tasks.spawn(async move {
                let mut done = Vec::new();
                for (slot, juror, examples, bar) in locals {
                    let loaded = checked(load(juror, &bar).await?, examples.first()).await?;
                    done.push((slot, run_loaded(&loaded, examples, cache.clone(), keep_tokens, bar).await?));
                }
                Ok(done)
            });
        }
        let mut slots: Vec<Option<JurorOutcome>> = (0..n).map(|_| None).collect();
        while let Some(joined) = tasks.join_next().await {
            let result = joined.map_err(|e| RunError::Task { judge: "?".into(), reason: e.to_string() })?;
            match result {
                Ok(done) => {
                    for (i, o) in done {
                        slots[i] = Some(o);
                    }
                }
                Err(e) => {
                    tasks.abort_all();
                    return Err(e);
                }
            }
        }
        slots
            .into_iter()
            .enumerate()
            .map(|(i, o)| o.ok_or_else(|| RunError::Task { judge: format!("#{i}"), reason: "no result".into() }))
            .collect()
    }
}

/// Runs every juror over `examples` in one pass (see [`Bench`]): server judges load
/// first, so a wrong address, model name or key stops the run before any in-process
/// model loads. Returns the outcomes in the jurors' order; the first error stops every
/// task (what finished is in the cache), and so does a judge that failed on every
/// example.
pub(crate) async fn run_jury(
    jurors: Vec<Juror>,
    examples: Arc<Vec<Example>>,
    cache: Arc<Mutex<Cache<Verdict>>>,
    keep_tokens: bool,
    bars: &MultiProgress,
) -> Result<Vec<JurorOutcome>, RunError> {
    let bench = Bench::open(jurors, examples.first(), bars).await?;
    let work = (0..bench.len()).map(|j| (j, examples.clone())).collect();
    let outcomes = bench.pass(work, &cache, keep_tokens, bars).await?;
    for o in &outcomes {
        o.results.check_answered(examples.len())?;
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_changes_with_every_input() {
        let base = judgment_key("m", "e", "t", &[1, 2, 3]);
        assert_eq!(base, judgment_key("m", "e", "t", &[1, 2, 3]));
        assert_ne!(base, judgment_key("m2", "e", "t", &[1, 2, 3]));
        assert_ne!(base, judgment_key("m", "e2", "t", &[1, 2, 3]));
        assert_ne!(base, judgment_key("m", "e", "t2", &[1, 2, 3]));
        assert_ne!(base, judgment_key("m", "e", "t", &[1, 2, 4]));
    }

    #[test]
    fn chat_prompts_key_on_both_turns() {
        let a = Prompt::Chat { system: "ab".into(), user: "c".into() };
        let b = Prompt::Chat { system: "a".into(), user: "bc".into() };
        assert_ne!(a.key_bytes(), b.key_bytes());
        assert_ne!(Prompt::Tokens(vec![1]).key_bytes(), Prompt::Tokens(vec![1, 0]).key_bytes());
    }
}
