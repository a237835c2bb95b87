//! The judging stages of an experiment, each a function from typed values to typed
//! values: the examples ([`sample_examples`]) and jurors ([`jurors`]) of a
//! [`Prepared`] experiment, which a caller can still check before anything is written;
//! every juror's pass through the cache ([`crate::judging::run_jury`]); and the collected
//! verdicts ([`JuryRun`]), which aggregation takes as a plain judgments matrix.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::MultiProgress;
use jury_cache::Cache;
use jury_core::{Judgments, JudgmentsBuilder, Labels};
use jury_datasets::Example;
use jury_judge::{ApiKey, JudgeConfig, ModelSource, PoolConfig, ServerJudgeConfig, Template, Verdict};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::experiment::{DatasetConfig, Experiment, JudgeEntry, Runtime, tokenizer_dir};
use crate::judging::{JudgeSpec, Juror, RunError, run_jury};
use crate::record::{Examples, JudgeRecord, JuryRun};
use jury_io::RunOutput;

/// Loads the data set, draws `limit` examples with `seed` (kept in file order) and adds
/// the swapped pairs when both orders are judged.
pub fn sample_examples(cfg: &DatasetConfig) -> Result<Examples, RunError> {
    let examples = sample(jury_datasets::load(&cfg.name, &cfg.path)?, cfg.limit, cfg.seed);
    let mut judged = examples.clone();
    if cfg.both_orders {
        for e in &examples {
            judged.push(jury_datasets::swapped(e, &cfg.path)?);
        }
    }
    Ok(Examples { original: examples, judged: Arc::new(judged) })
}

/// Reads the run's calibration labels against its examples (ids among them, binary
/// labels, both classes), so that a bad line stops the run before any model loads, not
/// after the judging; aggregation reads them again against the judgments.
pub(crate) fn check_calibration<A>(
    exp: &Experiment<A>,
    examples: &[Example],
) -> Result<Option<jury_io::CalibrationLabels>, RunError> {
    let Some(c) = &exp.calibration else { return Ok(None) };
    let ids: Vec<String> = examples.iter().map(|e| e.id.clone()).collect();
    Ok(Some(jury_io::read_calibration_among(&c.labels, &ids, 2)?))
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

/// The jurors of an experiment, in its order: their own templates loaded (`template`
/// for the others), model files and tokenizers hashed, API keys read from their
/// variables.
pub fn jurors<A>(exp: &Experiment<A>, template: &Template) -> Result<Vec<Juror>, RunError> {
    exp.judges
        .iter()
        .map(|entry| {
            let template = match &entry.prompt {
                Some(p) => Template::load(p)?,
                None => template.clone(),
            };
            juror(entry, &exp.runtime, template)
        })
        .collect()
}

fn juror(entry: &JudgeEntry, runtime: &Runtime, template: Template) -> Result<Juror, RunError> {
    let setup = |reason: String| RunError::Setup { judge: entry.name.clone(), reason };
    let hash_dir = |dir: &std::path::Path| {
        jury_cache::dir_sha256(dir).map_err(|e| setup(format!("hashing {}: {e}", dir.display())))
    };
    let spec = if let Some(s) = &entry.server {
        let api_key = match &s.api_key_env {
            Some(var) => {
                Some(ApiKey::new(std::env::var(var).map_err(|e| setup(format!("environment variable `{var}`: {e}")))?))
            }
            None => None,
        };
        let tokenizer = s.tokenizer.as_deref().map(tokenizer_dir).transpose().map_err(setup)?;
        let tokenizer_sha256 = tokenizer.as_deref().map(hash_dir).transpose()?;
        let cfg = ServerJudgeConfig {
            name: entry.name.clone(),
            base_urls: s.base_urls.clone(),
            model: s.model.clone(),
            api_key,
            tokenizer,
            mode: s.mode,
            engine: s.engine.unwrap_or_default(),
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
                let hash = jury_cache::gguf_identity(path, entry.tokenizer.as_deref())
                    .map_err(|e| setup(format!("hashing: {e}")))?;
                (ModelSource::Gguf(path.clone()), Some(hash))
            }
            // Hashed after loading, when a hub download has put the snapshot on disk.
            (None, Some(id)) => (ModelSource::Pretrained(id.clone()), None),
            (None, None) => return Err(setup("no model (checked when the experiment is read)".into())),
        };
        let cfg = JudgeConfig {
            name: entry.name.clone(),
            source,
            max_prompt_tokens: runtime.max_prompt_tokens,
            prefix_cache: runtime.prefix_cache,
            max_concurrency: runtime.max_concurrency,
            tokenizer: entry.tokenizer.clone(),
            device: runtime.device,
            precision: runtime.precision,
            engine: runtime.engine,
        };
        JudgeSpec::Local { cfg, model_sha256 }
    };
    Ok(Juror { name: entry.name.clone(), template, spec })
}

/// An experiment ready to judge: its examples drawn, templates checked against the
/// data set's fields, jurors built (files hashed, keys read). Nothing is written yet.
pub struct Prepared<'a, A> {
    exp: &'a Experiment<A>,
    examples: Examples,
    template: Template,
    jurors: Vec<Juror>,
}

/// Draws the examples and builds the jurors of `exp`, checking every juror's template
/// against the data set's fields and, where a tokenizer folder renders its tokens,
/// against the token budget.
pub fn prepare<A>(exp: &Experiment<A>) -> Result<Prepared<'_, A>, RunError> {
    let examples = sample_examples(&exp.dataset)?;
    check_calibration(exp, &examples.original)?;
    let template = Template::load(&exp.prompt)?;
    let jurors = jurors(exp, &template)?;
    if let Some(first) = examples.judged.first() {
        for j in &jurors {
            j.template
                .check_fields(&first.fields)
                .map_err(|reason| RunError::Setup { judge: j.name.clone(), reason })?;
            if let Some(dir) = j.spec.rendering_tokenizer() {
                let max_tokens = j.spec.max_prompt_tokens();
                jury_judge::check_budget_with_tokenizer(&j.name, dir, &j.template, &first.fields, max_tokens)?;
            }
        }
    }
    Ok(Prepared { exp, examples, template, jurors })
}

impl<A> Prepared<'_, A> {
    pub fn examples(&self) -> &Examples {
        &self.examples
    }

    /// The run's prompt's word for class 1 (its `positive:`).
    pub fn positive_word(&self) -> &str {
        &self.template.positive
    }

    /// Runs every juror over the examples, all at once (server judges each on their
    /// own, in-process ones one after another), or adaptively when the experiment says
    /// so, on an async runtime of its own, and collects the verdicts. The output directory is taken (locked, checked) first,
    /// before any model loads; judgments go to its cache as they finish. Each cache
    /// record found damaged (and judged again) is handed to `dropped` before judging.
    pub fn judge(
        self,
        bars: &MultiProgress,
        dropped: &dyn Fn(&jury_cache::DroppedRecord),
    ) -> Result<(RunOutput, JuryRun), RunError> {
        let started = Instant::now();
        let Prepared { exp, examples, template, jurors } = self;
        let own_templates: Vec<Option<(std::path::PathBuf, String)>> = exp
            .judges
            .iter()
            .zip(&jurors)
            .map(|(entry, juror)| {
                entry.prompt.as_ref().map(|p| (p.clone(), jury_cache::key(&[juror.template.source_text.as_bytes()])))
            })
            .collect();
        let out = RunOutput::open(&exp.output, &exp.name, exp.overwrite)?;
        let judged = (|| {
            let cache = Cache::<Verdict>::open_checked(&out.cache(), Verdict::check, exp.runtime.bad_cache_records)?;
            cache.dropped().iter().for_each(dropped);
            let cache = Arc::new(Mutex::new(cache));
            let rt =
                tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().map_err(|e| {
                    RunError::Setup { judge: "*".into(), reason: format!("starting the async runtime: {e}") }
                })?;
            let keep = exp.runtime.dump_prompts;
            match &exp.adaptive {
                None => rt.block_on(run_jury(jurors, examples.judged.clone(), cache, keep, bars)).map(|o| (o, None)),
                Some(a) => crate::adaptive::run(&rt, a, &exp.judges, jurors, &examples.original, cache, keep, bars)
                    .map(|(o, record)| (o, Some(record))),
            }
        })();
        // A run that fails before keeping any judgment (a judge that does not load, a
        // budget too small for the template) leaves no output folder it created.
        let (outcomes, adaptive) = match judged {
            Ok(o) => o,
            Err(e) => {
                out.abandon();
                return Err(e);
            }
        };
        let mut judges = Vec::new();
        for ((entry, outcome), own_template) in exp.judges.iter().zip(outcomes).zip(own_templates) {
            let mut verdicts = outcome.results.verdicts.clone();
            if exp.dataset.both_orders {
                debias(&examples.original, &mut verdicts);
            }
            judges.push(JudgeRecord {
                name: entry.name.clone(),
                verdicts,
                results: outcome.results,
                info: outcome.info,
                own_template,
            });
        }
        let (judgments, labels) = matrix(&examples.original, &judges)?;
        let run = JuryRun {
            examples,
            judges,
            judgments,
            labels,
            template_sha256: jury_cache::key(&[template.source_text.as_bytes()]),
            seconds: started.elapsed().as_secs_f64(),
            adaptive,
        };
        Ok((out, run))
    }
}

/// Replaces each original example's verdict by the mean of its two orders.
fn debias(examples: &[Example], verdicts: &mut HashMap<String, Verdict>) {
    for ex in examples {
        let sw = format!("{}{}", ex.id, jury_datasets::SWAPPED_SUFFIX);
        if let (Some(ab), Some(ba)) = (verdicts.get(&ex.id), verdicts.get(&sw)) {
            let d = Verdict::debiased(ab, ba);
            verdicts.insert(ex.id.clone(), d);
        }
    }
}

/// The matrix the aggregators read, and the labels aligned with it.
fn matrix(examples: &[Example], judges: &[JudgeRecord]) -> Result<(Judgments, Labels), RunError> {
    let mut builder = JudgmentsBuilder::new(2)?;
    for ex in examples {
        for j in judges {
            if let Some(v) = j.verdicts.get(&ex.id) {
                builder.push_binary(&ex.id, &j.name, v.y)?;
            }
        }
    }
    let judgments = builder.build();
    let pairs = examples.iter().filter_map(|e| e.label.map(|l| (e.id.as_str(), l)));
    let (labels, _) = Labels::align(&judgments, pairs)?;
    Ok((judgments, labels))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn ex(id: &str) -> Example {
        Example { id: id.into(), fields: BTreeMap::new(), label: Some(1), category: None }
    }

    #[test]
    fn sampling_is_seeded_and_keeps_file_order() {
        let all: Vec<Example> = (0..50).map(|i| ex(&format!("e{i:02}"))).collect();
        let a: Vec<String> = sample(all.clone(), Some(10), 7).into_iter().map(|e| e.id).collect();
        let b: Vec<String> = sample(all.clone(), Some(10), 7).into_iter().map(|e| e.id).collect();
        let c: Vec<String> = sample(all.clone(), Some(10), 8).into_iter().map(|e| e.id).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.len(), 10);
        assert!(a.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(sample(all.clone(), Some(99), 0).len(), 50);
        assert_eq!(sample(all, None, 0).len(), 50);
    }

    #[test]
    fn both_orders_average_in_the_original_orientation() {
        let v = |y: f64| Verdict { n_tokens: 1, ..Verdict::from_probabilities(y, 1.0 - y, None) };
        let sw = format!("a{}", jury_datasets::SWAPPED_SUFFIX);
        let mut m = HashMap::from([("a".to_string(), v(0.8)), (sw, v(0.4))]);
        debias(&[ex("a")], &mut m);
        assert!((m["a"].y.unwrap() - 0.7).abs() < 1e-12);
    }
}
