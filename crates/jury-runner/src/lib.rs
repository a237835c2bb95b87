//! Runs one judge over a data set: render, look up the durable cache, score what is
//! missing with bounded concurrency, and append each finished result as it completes.
//!
//! Invariant: a result is in the cache file before it counts as done, so killing the
//! process at any point loses at most the requests in flight, and a rerun with the same
//! model file, template and examples redoes nothing that had finished.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use futures::stream::{self, StreamExt};
use indicatif::{ProgressBar, ProgressStyle};
use jury_cache::{Cache, CacheError, key};
use jury_datasets::Example;
use jury_judge::{EXTRACTION_RULE, Judge, JudgeError, Verdict};
use jury_progress::LogProgress;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Judge(#[from] JudgeError),
    #[error(transparent)]
    Cache(#[from] CacheError),
}

/// What one judge's pass over the examples did.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeSummary {
    pub judge: String,
    pub scored: usize,
    pub from_cache: usize,
    pub seconds: f64,
}

/// The cache key of one judgment: everything that changes the answer.
/// `engine` is [`Judge::engine`] (version, device, precision).
pub fn judgment_key(model_sha256: &str, engine: &str, template_text: &str, tokens: &[u32]) -> String {
    let bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
    key(&[model_sha256.as_bytes(), engine.as_bytes(), template_text.as_bytes(), &bytes, EXTRACTION_RULE.as_bytes()])
}

/// A judge's verdicts by example id, plus the judged token sequences when asked for.
pub struct JudgeResults {
    pub verdicts: HashMap<String, Verdict>,
    pub tokens: HashMap<String, Vec<u32>>,
    pub summary: JudgeSummary,
}

/// Judges every example (cache first). With `keep_tokens`, also returns each example's
/// exact token sequence (for comparisons with other engines).
pub async fn run_judge(
    judge: &Judge,
    model_sha256: &str,
    examples: &[Example],
    cache: &Mutex<Cache<Verdict>>,
    concurrency: usize,
    keep_tokens: bool,
    bar: &ProgressBar,
) -> Result<JudgeResults, RunError> {
    let start = Instant::now();
    bar.set_length(examples.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>20} {bar:30} {pos}/{len} {per_sec} ETA {eta} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_prefix(judge.name().to_owned());
    let template_text = judge.template().source_text.clone();
    let log = LogProgress::new(format!("judge {}", judge.name()), examples.len() as u64);
    let results = stream::iter(examples.iter())
        .map(|ex| {
            let template_text = &template_text;
            let log = &log;
            async move {
                let (tokens, truncated) = judge.render(&ex.id, &ex.fields).await?;
                let k = judgment_key(model_sha256, judge.engine(), template_text, &tokens);
                let kept = keep_tokens.then(|| tokens.clone());
                let cached = cache.lock().ok().and_then(|c| c.get(&k).cloned());
                let (verdict, hit) = match cached {
                    Some(v) => (v, true),
                    None => {
                        let mut v = judge.score(&ex.id, tokens).await?;
                        v.truncated = truncated;
                        if let Ok(mut c) = cache.lock() {
                            c.insert(k, v.clone())?;
                        }
                        (v, false)
                    }
                };
                bar.inc(1);
                log.inc(1);
                Ok::<_, RunError>((ex.id.clone(), verdict, hit, kept))
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect::<Vec<_>>()
        .await;
    let mut verdicts = HashMap::with_capacity(examples.len());
    let mut tokens = HashMap::new();
    let (mut scored, mut from_cache) = (0, 0);
    for r in results {
        let (id, v, hit, kept) = r?;
        if hit {
            from_cache += 1;
        } else {
            scored += 1;
        }
        if let Some(t) = kept {
            tokens.insert(id.clone(), t);
        }
        verdicts.insert(id, v);
    }
    bar.finish_with_message(format!("{scored} scored, {from_cache} from cache"));
    let summary =
        JudgeSummary { judge: judge.name().to_owned(), scored, from_cache, seconds: start.elapsed().as_secs_f64() };
    Ok(JudgeResults { verdicts, tokens, summary })
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
}
