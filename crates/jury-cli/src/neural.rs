//! The context-dependent methods of `jury aggregate` (train-on-mv, crowdlayer, skillagg,
//! skillagg-noreg, skillagg-x): contexts file, encoder embeddings cached on disk,
//! model selection on a labeled dev set, mean and standard deviation over seeds.
//!
//! Invariants: dev labels choose lambda and the epoch and nothing else; a method's
//! accuracy is measured on the examples outside that seed's dev set; embeddings are
//! keyed by the encoder weights' sha256, `max_tokens` and every text.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use jury_aggregate::{Aggregator, DawidSkene, DawidSkeneConfig, Diagnostics};
use jury_core::{Judgments, Labels};
use jury_neural::finetune::Phase;
use jury_neural::multiclass;
use jury_neural::skill::{self, JuryData, Method, TrainConfig};
use jury_neural::{Encoder, candle_core::Tensor};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

/// A context-dependent method as named on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NeuralMethod {
    TrainOnMv,
    Crowdlayer,
    SkillAgg,
    SkillAggNoReg,
    SkillAggX,
}

impl NeuralMethod {
    pub(crate) const ALL: [(&'static str, NeuralMethod); 5] = [
        ("train-on-mv", NeuralMethod::TrainOnMv),
        ("crowdlayer", NeuralMethod::Crowdlayer),
        ("skillagg-noreg", NeuralMethod::SkillAggNoReg),
        ("skillagg", NeuralMethod::SkillAgg),
        ("skillagg-x", NeuralMethod::SkillAggX),
    ];

    pub(crate) fn name(self) -> &'static str {
        Self::ALL.iter().find(|(_, m)| *m == self).map_or("?", |(n, _)| n)
    }

    fn model(self) -> Method {
        match self {
            NeuralMethod::TrainOnMv => Method::TrainOnMv,
            NeuralMethod::Crowdlayer => Method::Crowdlayer,
            NeuralMethod::SkillAgg | NeuralMethod::SkillAggNoReg => Method::SkillAgg,
            NeuralMethod::SkillAggX => Method::SkillAggX,
        }
    }

    /// Whether the posterior combines the context model with the judges' outputs (Eq. 8),
    /// so the context model's own accuracy is worth reporting beside it.
    fn reads_judges(self) -> bool {
        !matches!(self.model(), Method::Crowdlayer | Method::TrainOnMv)
    }

    /// The lambda grid the dev set chooses from (only the regularised methods have one).
    fn lambdas(self, grid: &[f64]) -> Vec<f64> {
        match self {
            NeuralMethod::SkillAgg | NeuralMethod::SkillAggX => grid.to_vec(),
            _ => vec![0.0],
        }
    }
}

/// Settings of the context-dependent methods.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NeuralOptions {
    pub contexts: PathBuf,
    pub encoder_dir: PathBuf,
    pub finetune: bool,
    /// Where the encoder embeds or fine-tunes (frozen heads train on the CPU).
    pub device: jury_neural::ComputeDevice,
    pub dev_size: usize,
    /// Seeds `first_seed..first_seed + seeds` (a seed fixes the dev split, the
    /// initialisation and the batch order, whichever seeds run beside it).
    pub seeds: usize,
    pub first_seed: u64,
    pub max_tokens: usize,
    /// Embed each ` || `-separated field alone and concatenate (frozen only).
    pub split_fields: bool,
    pub epochs: usize,
    pub lambdas: Vec<f64>,
    pub hidden: usize,
    pub lr: f64,
    /// Examples per training step.
    pub batch: usize,
    /// Root of the caches: `embeddings/` and `finetune/` below it.
    pub cache_dir: PathBuf,
    pub skill_init: SkillInit,
}

impl NeuralOptions {
    /// The seeds this run trains, in order (the first one's posteriors go to
    /// predictions.csv).
    pub(crate) fn seed_range(&self) -> std::ops::Range<u64> {
        self.first_seed..self.first_seed.saturating_add(self.seeds as u64)
    }

    /// Frozen-encoder embeddings, one file per (encoder, settings, texts) key.
    fn embeddings_dir(&self) -> PathBuf {
        self.cache_dir.join("embeddings")
    }

    /// Fine-tuning checkpoints, one folder per (judgments, settings) key.
    fn finetune_dir(&self) -> PathBuf {
        self.cache_dir.join("finetune")
    }
}

/// Where the judges' skills start training.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum SkillInit {
    /// Every judge at this P(correct) in both classes (the paper's setup; 0.8 by default).
    Uniform(f64),
    /// Each judge at its Dawid-Skene estimate, fitted on the same judgments with these
    /// settings (binary only): no labels involved.
    DawidSkene(DawidSkeneConfig),
}

impl SkillInit {
    /// Per-judge starting (p0, p1); `None` for a uniform start.
    fn judge_skills(&self, j: &Judgments) -> Result<Option<Vec<(f64, f64)>>> {
        let SkillInit::DawidSkene(cfg) = self else { return Ok(None) };
        if j.n_classes() != 2 {
            bail!("--skill-init ds takes binary judgments ({} classes here)", j.n_classes());
        }
        let fitted = DawidSkene::new(*cfg).aggregate(j)?;
        let Diagnostics::DawidSkene(em) = fitted.diagnostics() else {
            bail!("Dawid-Skene returned no confusion matrices")
        };
        Ok(Some(em.params.confusion.iter().map(|m| (m.get(0, 0), m.get(1, 1))).collect()))
    }

    /// What goes into the fine-tuning checkpoint key: nothing for the paper's default
    /// start, so checkpoints written before this setting existed stay valid.
    fn key_part(&self) -> String {
        match self {
            SkillInit::Uniform(p) if *p == TrainConfig::default().skill_init => String::new(),
            SkillInit::Uniform(p) => format!(" skill_init={p}"),
            SkillInit::DawidSkene(cfg) => format!(" skill_init=ds:{cfg:?}"),
        }
    }
}

/// One method's result over all seeds.
pub(crate) struct NeuralRun {
    pub method: NeuralMethod,
    pub accuracies: Vec<f64>,
    pub json: Value,
    /// Seed 0's posterior rows (C classes) for every example (predictions.csv).
    pub posteriors: Vec<Vec<f64>>,
}

/// Every example's context text, in example order.
fn context_texts(j: &Judgments, opts: &NeuralOptions) -> Result<Vec<String>> {
    let mut texts = jury_io::read_texts(&opts.contexts)?;
    j.example_ids()
        .iter()
        .map(|id| {
            texts.remove(id).with_context(|| format!("{}: no context for example `{id}`", opts.contexts.display()))
        })
        .collect()
}

/// Learning rate of the encoder's weights in the fine-tuned mode (the heads take `--lr`).
const FINETUNE_ENCODER_LR: f64 = 2e-5;

/// Batches between mid-epoch fine-tuning checkpoints: 1,600 texts at the default batch,
/// about 10 minutes of MiniLM training on a 2-core CPU (docs/benchmarks.md), so a kill
/// loses at most that much; writing one (90 MB) takes about a second.
const FINETUNE_SAVE_EVERY: usize = 50;

/// Names the fine-tuning checkpoints of one data set and training setup: encoder weights
/// and code revision, texts, judgments, and every setting that changes a trained epoch
/// (the epoch count does not: epoch e is the same in a longer run).
fn finetune_key(j: &Judgments, opts: &NeuralOptions) -> Result<String> {
    let model_sha = jury_cache::file_sha256(&opts.encoder_dir.join("model.safetensors"))?;
    let texts = context_texts(j, opts)?;
    let setup = format!(
        "{} max_tokens={} hidden={} lr={} batch={} encoder_lr={FINETUNE_ENCODER_LR}{}",
        jury_neural::ENCODER_REVISION,
        opts.max_tokens,
        opts.hidden,
        opts.lr,
        opts.batch,
        opts.skill_init.key_part()
    );
    let mut parts: Vec<Vec<u8>> = vec![model_sha.into_bytes(), setup.into_bytes()];
    parts.extend(texts.into_iter().map(String::into_bytes));
    for n in 0..j.n_examples() {
        for k in 0..j.n_judges() {
            parts.push(j.get(n, k).map_or(b"-".to_vec(), |p| p[1].to_le_bytes().to_vec()));
        }
    }
    Ok(jury_cache::key(&parts.iter().map(Vec::as_slice).collect::<Vec<_>>())[..16].to_owned())
}

/// The separator of a context's fields (`jury run` and the converters write it).
const FIELD_SEPARATOR: &str = " || ";

/// Frozen context vectors, [examples, hidden] (or [examples, fields x hidden] with
/// `split_fields`: each field embedded alone, vectors in field order, a field an
/// example lacks left at zero).
fn embeddings(j: &Judgments, opts: &NeuralOptions) -> Result<Tensor> {
    let owned = context_texts(j, opts)?;
    if !opts.split_fields {
        let texts: Vec<&str> = owned.iter().map(String::as_str).collect();
        let (rows, h) = embed_cached(&texts, opts)?;
        return Ok(Tensor::from_vec(rows, (texts.len(), h), &jury_neural::candle_core::Device::Cpu)?);
    }
    let fields: Vec<Vec<&str>> = owned.iter().map(|t| t.split(FIELD_SEPARATOR).collect()).collect();
    let width = fields.iter().map(Vec::len).max().unwrap_or(1);
    let flat: Vec<&str> = fields.iter().flatten().copied().collect();
    let (rows, h) = embed_cached(&flat, opts)?;
    let mut out = vec![0f32; owned.len() * width * h];
    let mut next = rows.chunks_exact(h);
    for (n, f) in fields.iter().enumerate() {
        for slot in 0..f.len() {
            let row = next.next().context("embedding rows run short of the fields")?;
            out[(n * width + slot) * h..][..h].copy_from_slice(row);
        }
    }
    Ok(Tensor::from_vec(out, (owned.len(), width * h), &jury_neural::candle_core::Device::Cpu)?)
}

/// Texts embedded between two appends to the partial file: what a crash can lose.
const EMBED_CHUNK: usize = 1024;

/// Frozen embeddings of `ordered` (row-major, `hidden` per text), from the disk cache
/// when present.
///
/// Resumable: finished rows are appended to `KEY.partial` (records of a u32 example
/// index and `hidden` f32s, little-endian) every `EMBED_CHUNK` texts; a run killed
/// mid-way embeds only the rows missing from it. The complete matrix is then written
/// atomically to `KEY.f32` and the partial file removed.
fn embed_cached(ordered: &[&str], opts: &NeuralOptions) -> Result<(Vec<f32>, usize)> {
    let weights = opts.encoder_dir.join("model.safetensors");
    let model_sha = jury_cache::file_sha256(&weights)?;
    let mut parts: Vec<&[u8]> = vec![model_sha.as_bytes(), b"max_tokens"];
    let mt = opts.max_tokens.to_le_bytes();
    parts.push(&mt);
    parts.push(jury_neural::ENCODER_REVISION.as_bytes());
    for t in ordered {
        parts.push(t.as_bytes());
        parts.push(b"\0");
    }
    let key = jury_cache::key(&parts);
    let cache = opts.embeddings_dir();
    let file = cache.join(format!("{key}.f32"));
    let encoder = Encoder::load_on(&opts.encoder_dir, opts.device.open()?)?;
    let h = encoder.hidden_size();
    if let Ok(bytes) = std::fs::read(&file)
        && bytes.len() == ordered.len() * h * 4
    {
        let v: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        // An encoder never writes a non-finite value: such a file was damaged after it
        // was written, and is replaced instead of turning posteriors into NaN.
        if v.iter().all(|x| x.is_finite()) {
            return Ok((v, h));
        }
        eprintln!("warning: {} holds values that are not numbers; embedding again", file.display());
    }
    std::fs::create_dir_all(&cache).with_context(|| format!("creating embedding cache {}", cache.display()))?;
    let partial = cache.join(format!("{key}.partial"));
    let mut rows: Vec<Option<Vec<f32>>> = vec![None; ordered.len()];
    let done = read_partial(&partial, h, &mut rows)?;
    if done > 0 {
        eprintln!("embedding contexts: resuming, {done} of {} already in {}", ordered.len(), partial.display());
    }
    let todo: Vec<usize> = (0..ordered.len()).filter(|&i| rows[i].is_none()).collect();
    let bar = ProgressBar::new(ordered.len() as u64).with_position(done as u64).with_style(
        ProgressStyle::with_template("embedding contexts {bar:30} {pos}/{len} {per_sec} ETA {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.reset_eta();
    let log = jury_progress::LogProgress::new("embedding contexts", todo.len() as u64);
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&partial)
        .with_context(|| format!("opening {}", partial.display()))?;
    for chunk in todo.chunks(EMBED_CHUNK) {
        let texts: Vec<&str> = chunk.iter().map(|&i| ordered[i]).collect();
        let x: Vec<Vec<f32>> = encoder
            .embed(&texts, opts.max_tokens, 32, |n| {
                bar.inc(n as u64);
                log.inc(n as u64);
            })?
            .to_vec2()?;
        let mut record = Vec::with_capacity(chunk.len() * (4 + 4 * h));
        for (&i, row) in chunk.iter().zip(&x) {
            record.extend_from_slice(&(i as u32).to_le_bytes());
            record.extend(row.iter().flat_map(|f| f.to_le_bytes()));
        }
        use std::io::Write;
        out.write_all(&record)
            .and_then(|()| out.flush())
            .with_context(|| format!("appending to {}", partial.display()))?;
        for (&i, row) in chunk.iter().zip(x) {
            rows[i] = Some(row);
        }
    }
    bar.finish();
    let flat: Vec<f32> = rows.into_iter().flat_map(|r| r.unwrap_or_default()).collect();
    if flat.len() != ordered.len() * h {
        bail!("{}: embedding rows missing after the run", partial.display());
    }
    let bytes: Vec<u8> = flat.iter().flat_map(|f| f.to_le_bytes()).collect();
    jury_io::write_atomic(&file, &bytes)?;
    std::fs::remove_file(&partial).with_context(|| format!("removing {}", partial.display()))?;
    Ok((flat, h))
}

/// Fills `rows` from a partial embedding file (absent: nothing done); a record cut short
/// by a crash is ignored. Returns how many rows it filled.
fn read_partial(path: &Path, h: usize, rows: &mut [Option<Vec<f32>>]) -> Result<usize> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut filled = 0;
    for rec in bytes.chunks_exact(4 + 4 * h) {
        let i = u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]) as usize;
        let Some(slot) = rows.get_mut(i) else {
            bail!("{}: row index {i} out of range ({} texts); delete the file", path.display(), rows.len());
        };
        if slot.is_none() {
            filled += 1;
        }
        *slot = Some(rec[4..].chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect());
    }
    Ok(filled)
}

/// The dev set's pick so far.
struct Pick {
    dev_acc: f64,
    lambda: f64,
    epoch: usize,
    posteriors: Vec<f32>,
    /// Each judge's slope; empty for Train-on-MV.
    slopes: Vec<f32>,
    /// The context model alone (s_n, P(positive) or C per example) for the methods whose
    /// posterior also reads the judges; empty for the others.
    context: Vec<f32>,
}

/// The most memory the dense judgments of the context-dependent methods may take.
const DENSE_LIMIT_BYTES: usize = 8 << 30;

/// Runs `methods` on judgments with labels (for the dev set and scoring): binary
/// judgments with `jury_neural::skill`, C > 2 classes with `jury_neural::multiclass`
/// (frozen encoder only).
pub(crate) fn run(
    j: &Judgments,
    labels: &Labels,
    methods: &[NeuralMethod],
    opts: &NeuralOptions,
) -> Result<Vec<NeuralRun>> {
    let c = j.n_classes();
    if c > 2 && opts.finetune {
        bail!("--encoder finetune takes binary judgments; {c} classes run with the frozen encoder");
    }
    // These methods hold the judgments dense (N x K x C floats): refuse a sparse jury
    // whose dense form would not fit, before any embedding.
    let dense_bytes = j.n_examples().checked_mul(j.n_judges()).and_then(|nk| nk.checked_mul(4 * c + 1));
    if dense_bytes.is_none_or(|b| b > DENSE_LIMIT_BYTES) {
        bail!(
            "{} examples x {} judges: the context-dependent methods hold every (example, judge) cell, \
             more than {} GB here; use avg, mv or ds (sparse), or fewer judges",
            j.n_examples(),
            j.n_judges(),
            DENSE_LIMIT_BYTES >> 30
        );
    }
    let n_labeled = (0..j.n_examples()).filter(|&i| labels.get(i).is_some()).count();
    if n_labeled <= opts.dev_size {
        bail!("{n_labeled} labeled examples: not enough for a dev set of {}", opts.dev_size);
    }
    let start = Instant::now();
    // Fine-tuning reads the texts itself; the frozen mode embeds them once.
    let texts = if opts.finetune { Some(context_texts(j, opts)?) } else { None };
    let x = if opts.finetune {
        Tensor::zeros((1, 1), jury_neural::candle_core::DType::F32, &jury_neural::candle_core::Device::Cpu)?
    } else {
        embeddings(j, opts)?
    };
    let embed_seconds = start.elapsed().as_secs_f64();
    let (n, k) = (j.n_examples(), j.n_judges());
    // Binary: y[n*k + j] = P(positive); C classes: y[(n*k + j)*C + class].
    let width = if c == 2 { 1 } else { c };
    let mut y = vec![0f32; n * k * width];
    let mut present = vec![false; n * k];
    for (i, jj, p) in j.entries() {
        let at = (i * k + jj) * width;
        if c == 2 {
            y[at] = p[1] as f32;
        } else {
            y[at..at + c].iter_mut().zip(p).for_each(|(d, s)| *d = *s as f32);
        }
        present[i * k + jj] = true;
    }
    let data = JuryData { n, k, y: &y, present: &present };
    let multi = multiclass::MultiData { n, k, c, y: &y, present: &present };
    let labeled: Vec<usize> = (0..n).filter(|&i| labels.get(i).is_some()).collect();
    let judge_acc: Vec<f64> = (0..k)
        .map(|jj| {
            let (mut right, mut all) = (0usize, 0usize);
            for &i in &labeled {
                if let (Some(v), Some(l)) = (j.vote(i, jj), labels.get(i)) {
                    all += 1;
                    right += usize::from(v == l);
                }
            }
            right as f64 / all.max(1) as f64
        })
        .collect();
    // Judge outputs as tensors and the fine-tuning checkpoint key: the same for every
    // method, seed and lambda.
    let (yt, mt) = if c == 2 {
        let (_, yt, mt) = skill::tensors(&x, &data, Method::SkillAgg)?;
        (yt, mt)
    } else {
        multiclass::tensors(&multi, Method::SkillAgg, x.device())?
    };
    // Every fine-tuned run's checkpoints go under one folder per judgments and settings.
    let ft_dir = if opts.finetune { Some(opts.finetune_dir().join(finetune_key(j, opts)?)) } else { None };
    let judge_skills = opts.skill_init.judge_skills(j)?;
    let mut out = Vec::new();
    // Fine-tuning runs one (method, seed, lambda) after another, each for hours on a
    // CPU: say the whole plan once and number the runs, so a log shows how far it is.
    let runs: usize = methods.iter().map(|m| opts.seeds * m.lambdas(&opts.lambdas).len()).sum();
    let mut run = 0;
    if let Some(dir) = &ft_dir {
        eprintln!(
            "fine-tuning plan: {runs} run{} (methods x seeds x lambdas) of {} epochs over {n} texts; \
             checkpoints under {}; the same command resumes",
            if runs == 1 { "" } else { "s" },
            opts.epochs,
            dir.display()
        );
    }
    for &method in methods {
        let m_start = Instant::now();
        let (mut accs, mut devs, mut chosen, mut slopes_all) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut context_accs = Vec::new();
        let mut first_post = Vec::new();
        for seed in opts.seed_range() {
            let (dev, test) = split(&labeled, seed, opts.dev_size);
            let mut best: Option<Pick> = None;
            for lambda in method.lambdas(&opts.lambdas) {
                let cfg = TrainConfig {
                    method: method.model(),
                    lambda,
                    epochs: opts.epochs,
                    seed,
                    hidden: opts.hidden,
                    lr: opts.lr,
                    batch: opts.batch,
                    skill_init: match opts.skill_init {
                        SkillInit::Uniform(p) => p,
                        SkillInit::DawidSkene(_) => TrainConfig::default().skill_init,
                    },
                    judge_skills: judge_skills.clone(),
                };
                if let (Some(texts), Some(ft_dir)) = (&texts, &ft_dir) {
                    // Crowdlayer trains as SkillAggregation without the regulariser does
                    // (same loss, start and batches) and reads the context model alone,
                    // so the two share one run's checkpoints: the second replays them.
                    let (train_as, read_prior) = match method {
                        NeuralMethod::Crowdlayer => (NeuralMethod::SkillAggNoReg, true),
                        _ => (method, false),
                    };
                    let cfg = TrainConfig { method: train_as.model(), ..cfg };
                    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                    let ft = jury_neural::finetune::FinetuneConfig {
                        encoder_lr: FINETUNE_ENCODER_LR,
                        save_every: FINETUNE_SAVE_EVERY,
                        max_tokens: opts.max_tokens,
                        checkpoints: ft_dir.join(format!("{}-seed{seed}-lambda{lambda}", train_as.name())),
                        device: opts.device,
                    };
                    let shared = if read_prior { format!(" (trained as {})", train_as.name()) } else { String::new() };
                    run += 1;
                    let bar = ProgressBar::new((n * opts.epochs) as u64);
                    let log = jury_progress::LogProgress::new(
                        format!("[{run}/{runs}] fine-tuning {}{shared} seed {seed} lambda {lambda}", method.name()),
                        (n * opts.epochs) as u64,
                    );
                    let mut scored: Option<(usize, jury_progress::LogProgress)> = None;
                    jury_neural::finetune::train(
                        &opts.encoder_dir,
                        &refs,
                        &data,
                        &cfg,
                        &ft,
                        |epoch, result, loss| {
                            let post = if read_prior { &result.prior } else { &result.posteriors };
                            if post.len() != n {
                                return Err(jury_neural::NeuralError::Setting(format!(
                                    "{}: epoch {epoch} was checkpointed without the context model's own \
                                     posteriors; remove the folder to train it again",
                                    ft.checkpoints.display()
                                )));
                            }
                            let dev_acc = share_correct(post, &dev, labels);
                            let loss = loss.map_or("from checkpoint".to_owned(), |l| format!("loss {l:.4}"));
                            eprintln!(
                                "{} seed {seed} lambda {lambda} epoch {epoch}: {loss}, dev accuracy {dev_acc:.4}",
                                method.name()
                            );
                            if best.as_ref().is_none_or(|b| dev_acc > b.dev_acc) {
                                let context = if method.reads_judges() { result.prior.clone() } else { Vec::new() };
                                best = Some(Pick {
                                    dev_acc,
                                    lambda,
                                    epoch,
                                    posteriors: post.clone(),
                                    slopes: result.slopes.clone(),
                                    context,
                                });
                            }
                            Ok(())
                        },
                        |phase, done| match phase {
                            Phase::Train => {
                                bar.inc(done as u64);
                                log.inc(done as u64);
                            }
                            Phase::Resumed => {
                                bar.inc(done as u64);
                                bar.reset_eta();
                                log.skip(done as u64);
                            }
                            Phase::Score(epoch) => {
                                // A pass over all texts after each epoch: its own count.
                                if scored.as_ref().is_none_or(|(e, _)| *e != epoch) {
                                    let label = format!(
                                        "scoring all texts ({} seed {seed} lambda {lambda} epoch {epoch})",
                                        method.name()
                                    );
                                    scored = Some((epoch, jury_progress::LogProgress::new(label, n as u64)));
                                }
                                if let Some((_, log)) = &scored {
                                    log.inc(done as u64);
                                }
                            }
                        },
                    )?;
                    bar.finish_and_clear();
                    continue;
                }
                type Lazy<'a> = &'a dyn Fn() -> Result<Vec<f32>, jury_neural::NeuralError>;
                let mut keep = |epoch: usize, loss: f64, posteriors: Vec<f32>, slopes: Lazy, context: Lazy| {
                    let dev_acc = share_correct(&posteriors, &dev, labels);
                    eprintln!(
                        "{} seed {seed} lambda {lambda} epoch {epoch}: loss {loss:.4}, dev accuracy {dev_acc:.4}",
                        method.name()
                    );
                    if best.as_ref().is_none_or(|b| dev_acc > b.dev_acc) {
                        let slopes = if method.model() == Method::TrainOnMv { Vec::new() } else { slopes()? };
                        let context = if method.reads_judges() { context()? } else { Vec::new() };
                        best = Some(Pick { dev_acc, lambda, epoch, posteriors, slopes, context });
                    }
                    Ok(())
                };
                if c == 2 {
                    skill::train(&x, &data, &cfg, |epoch, loss, model| {
                        keep(epoch, loss, model.posterior(&x, &yt, &mt)?, &|| model.slopes(&x), &|| model.prior(&x))
                    })?;
                } else {
                    multiclass::train(&x, &multi, &cfg, |epoch, loss, model| {
                        keep(epoch, loss, model.posterior(&x, &yt, &mt)?, &|| model.slopes(&x), &|| model.prior(&x))
                    })?;
                }
            }
            let Some(Pick { dev_acc, lambda, epoch, posteriors: post, slopes, context }) = best else {
                bail!("no epochs were trained")
            };
            if let Some(i) = post.iter().position(|p| !p.is_finite()) {
                bail!(
                    "{} seed {seed} (lambda {lambda}, epoch {epoch}): the posterior of example `{}` is not a number; \
                     no accuracy is reported (check --lr and the contexts' embeddings)",
                    method.name(),
                    j.example_ids()[i / width]
                );
            }
            let acc = share_correct(&post, &test, labels);
            let mut context_note = String::new();
            if !context.is_empty() {
                let context_acc = share_correct(&context, &test, labels);
                context_accs.push(context_acc);
                context_note = format!("; context model alone {context_acc:.4}");
            }
            // A fine-tuned seed takes hours: its result goes to the log as it finishes,
            // so a long run's finished seeds can be read before metrics.json is written.
            eprintln!(
                "{} seed {seed}: chose lambda {lambda} epoch {epoch} (dev accuracy {dev_acc:.4}); \
                 accuracy outside the dev set {acc:.4}{context_note}",
                method.name()
            );
            accs.push(acc);
            devs.push(dev_acc);
            chosen.push(json!({"lambda": lambda, "epoch": epoch}));
            if !slopes.is_empty() {
                slopes_all.push(slopes);
            }
            if seed == opts.first_seed {
                first_post = if c == 2 {
                    post.iter().map(|&p| vec![1.0 - p as f64, p as f64]).collect()
                } else {
                    post.chunks(c).map(|row| row.iter().map(|&p| p as f64).collect()).collect()
                };
            }
        }
        let (mean, std) = jury_metrics::mean_std(&accs);
        let mut entry = json!({
            "accuracy": mean, "std": std, "seeds": accs, "dev_accuracy": devs, "chosen": chosen,
            "dev_size": opts.dev_size, "seconds": m_start.elapsed().as_secs_f64(),
            "embedding_seconds": embed_seconds,
        });
        // The context model alone at the chosen epochs, on the same test splits: how
        // much reading the judges through Eq. (8) adds to (or takes from) it. Every
        // seed or none (an old fine-tuning checkpoint has no context read).
        if !context_accs.is_empty() && context_accs.len() == accs.len() {
            let (mean, std) = jury_metrics::mean_std(&context_accs);
            entry["context_accuracy"] = json!({"accuracy": mean, "std": std, "seeds": context_accs});
        }
        if !slopes_all.is_empty() {
            let mean_slopes: Vec<f64> = (0..k)
                .map(|jj| slopes_all.iter().map(|s| s[jj] as f64).sum::<f64>() / slopes_all.len() as f64)
                .collect();
            let names = j.judge_names();
            entry["slopes"] = json!(
                names.iter().zip(&mean_slopes).map(|(n, s)| (n.clone(), json!(*s))).collect::<serde_json::Map<_, _>>()
            );
            entry["slope_accuracy_pcc"] = json!(jury_metrics::pearson(&mean_slopes, &judge_acc));
        }
        out.push(NeuralRun { method, accuracies: accs, json: entry, posteriors: first_post });
    }
    Ok(out)
}

/// Seed `seed`'s (dev set, test split) of the labeled examples `labeled`: the dev set is
/// the first `dev_size` of a seeded shuffle, the test split the others in example order.
/// Every method of a run shares a seed's split, so their accuracies pair up.
fn split(labeled: &[usize], seed: u64, dev_size: usize) -> (Vec<usize>, Vec<usize>) {
    let mut order = labeled.to_vec();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    let dev: Vec<usize> = order[..dev_size.min(order.len())].to_vec();
    let mut is_dev = vec![false; labeled.iter().max().map_or(0, |m| m + 1)];
    dev.iter().for_each(|&i| is_dev[i] = true);
    let test = labeled.iter().copied().filter(|&i| !is_dev[i]).collect();
    (dev, test)
}

/// Each seed's (dev set, test split) (see [`split`]) of the examples with a label in
/// `labels`.
pub(crate) fn splits(labels: &Labels, n: usize, opts: &NeuralOptions) -> Vec<(Vec<usize>, Vec<usize>)> {
    let labeled: Vec<usize> = (0..n).filter(|&i| labels.get(i).is_some()).collect();
    opts.seed_range().map(|seed| split(&labeled, seed, opts.dev_size)).collect()
}

/// Share of the examples `idx` whose predicted class matches their label. `post` is
/// P(positive) per example (binary) or C posteriors per example; binary predictions are
/// P(positive) > 0.5, C-class ones the argmax (lowest class on exact ties).
fn share_correct(post: &[f32], idx: &[usize], labels: &Labels) -> f64 {
    let width = post.len() / labels.len().max(1);
    let predict = |i: usize| {
        if width <= 1 { usize::from(post[i] > 0.5) } else { jury_core::argmax(&post[i * width..(i + 1) * width]) }
    };
    let right = idx.iter().filter(|&&i| Some(predict(i)) == labels.get(i)).count();
    right as f64 / idx.len().max(1) as f64
}

/// Default root of jury's caches.
pub(crate) fn default_cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"))
        .join("jury")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fine-tuning run resumes from checkpoints only when nothing that shapes an epoch
    /// changed: every training setting is in the key, the epoch count is not.
    /// A seed's dev set and test split part the labeled examples, and repeat.
    #[test]
    fn splits_part_the_labeled_examples() {
        let labeled: Vec<usize> = (0..50).filter(|i| i % 5 != 0).collect();
        let (dev, test) = split(&labeled, 3, 7);
        assert_eq!(dev.len(), 7);
        let mut all: Vec<usize> = dev.iter().chain(&test).copied().collect();
        all.sort_unstable();
        assert_eq!(all, labeled);
        assert_eq!(split(&labeled, 3, 7), (dev.clone(), test));
        assert_ne!(split(&labeled, 4, 7).0, dev);
    }

    #[test]
    fn finetune_key_changes_with_every_training_setting() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("model.safetensors"), b"weights").unwrap();
        let contexts = dir.path().join("contexts.csv");
        std::fs::write(&contexts, "example_id,text\na,first text\nb,second text\n").unwrap();
        let j = Judgments::from_entries(
            vec!["a".into(), "b".into()],
            vec!["j".into()],
            2,
            vec![Some(vec![0.3, 0.7]), Some(vec![0.9, 0.1])],
        )
        .unwrap();
        let base = NeuralOptions {
            contexts,
            encoder_dir: dir.path().to_owned(),
            finetune: true,
            device: jury_neural::ComputeDevice::Cpu,
            dev_size: 1,
            seeds: 1,
            first_seed: 0,
            max_tokens: 128,
            split_fields: false,
            epochs: 3,
            lambdas: vec![0.01],
            hidden: 0,
            lr: 1e-3,
            batch: 32,
            cache_dir: dir.path().join("cache"),
            skill_init: SkillInit::Uniform(0.8),
        };
        let key = |o: &NeuralOptions| finetune_key(&j, o).unwrap();
        let k0 = key(&base);
        // More epochs or seeds extend a run, and a seed's checkpoints are the same
        // whichever seeds run beside it; another device resumes it (the state saves on
        // the CPU), so none of them is part of the key.
        let moved = NeuralOptions {
            epochs: 20,
            seeds: 5,
            first_seed: 3,
            device: jury_neural::ComputeDevice::Cuda(1),
            ..base.clone()
        };
        assert_eq!(k0, key(&moved));
        for changed in [
            NeuralOptions { batch: 256, ..base.clone() },
            NeuralOptions { lr: 3e-3, ..base.clone() },
            NeuralOptions { hidden: 256, ..base.clone() },
            NeuralOptions { max_tokens: 64, ..base.clone() },
            NeuralOptions { skill_init: SkillInit::Uniform(0.7), ..base.clone() },
            NeuralOptions { skill_init: SkillInit::DawidSkene(DawidSkeneConfig::default()), ..base.clone() },
        ] {
            assert_ne!(k0, key(&changed));
        }
        std::fs::write(dir.path().join("model.safetensors"), b"other weights").unwrap();
        assert_ne!(k0, key(&base), "new encoder weights");
    }
}
