//! A context-dependent method as a study: every seed's dev/test split, lambda and epoch
//! chosen on the dev set, accuracy on the test split, mean and standard deviation over
//! seeds, learned slopes against judge accuracy. What `jury aggregate` runs for
//! train-on-mv, crowdlayer, skillagg-noreg, skillagg and skillagg-x.
//!
//! Invariants: dev labels choose lambda and the epoch and nothing else (ties keep the
//! earlier pick); a method's accuracy is measured on the examples outside that seed's
//! dev set; embeddings are keyed by the encoder weights' sha256, `max_tokens` and every
//! text, fine-tuning checkpoints by everything that shapes a trained epoch.

use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use jury_aggregate::{Aggregator, DawidSkene, DawidSkeneConfig, Diagnostics};
use jury_core::{Judgments, Labels, Posteriors};
use jury_metrics::Split;

use crate::embed_cache::{EmbedSetup, embed_cached};
use crate::finetune::{self, FinetuneConfig, Phase};
use crate::jury_data::{self, JuryData};
use crate::jury_v1;
use crate::train::ContextModel;
use crate::{ComputeDevice, ENCODER_REVISION, ModelKind, NeuralError, Recipe, TrainConfig, multiclass, paper_models};

/// A context-dependent method as a user names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NeuralMethod {
    TrainOnMv,
    Crowdlayer,
    SkillAgg,
    SkillAggNoReg,
    SkillAggX,
}

impl NeuralMethod {
    pub fn name(self) -> &'static str {
        match self {
            NeuralMethod::TrainOnMv => "train-on-mv",
            NeuralMethod::Crowdlayer => "crowdlayer",
            NeuralMethod::SkillAgg => "skillagg",
            NeuralMethod::SkillAggNoReg => "skillagg-noreg",
            NeuralMethod::SkillAggX => "skillagg-x",
        }
    }

    fn model(self) -> ModelKind {
        match self {
            NeuralMethod::TrainOnMv => ModelKind::TrainOnMv,
            NeuralMethod::Crowdlayer => ModelKind::Crowdlayer,
            NeuralMethod::SkillAgg | NeuralMethod::SkillAggNoReg => ModelKind::SkillAgg,
            NeuralMethod::SkillAggX => ModelKind::SkillAggX,
        }
    }

    /// Whether the posterior combines the context model with the judges' outputs (Eq. 8),
    /// so the context model's own accuracy is worth reporting beside it.
    fn reads_judges(self) -> bool {
        !matches!(self.model(), ModelKind::Crowdlayer | ModelKind::TrainOnMv)
    }

    /// The lambda grid the dev set chooses from (only the regularised methods have one).
    fn lambdas(self, grid: &[f64]) -> Vec<f64> {
        match self {
            NeuralMethod::SkillAgg | NeuralMethod::SkillAggX => grid.to_vec(),
            _ => vec![0.0],
        }
    }
}

/// Settings of the context-dependent methods, checked and resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct NeuralOptions {
    /// A local encoder folder (config.json, tokenizer.json, model.safetensors).
    pub encoder_dir: PathBuf,
    pub finetune: bool,
    /// Where the encoder embeds or fine-tunes (frozen heads train on the CPU).
    pub device: ComputeDevice,
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
    /// Whose training recipe: the model's parameterisation, pooling, dropout, schedule
    /// and the dev set's tie rule (the settings above are given in full).
    pub recipe: Recipe,
}

impl NeuralOptions {
    /// The seeds this run trains, in order (the first one's posteriors are the run's).
    pub fn seed_range(&self) -> std::ops::Range<u64> {
        self.first_seed..self.first_seed.saturating_add(self.seeds as u64)
    }

    /// Each seed's split of the examples with a label in `labels`.
    pub fn splits(&self, labels: &Labels) -> Vec<Split> {
        let labeled = jury_metrics::labeled(labels);
        self.seed_range().map(|seed| Split::of_labeled(&labeled, seed, self.dev_size)).collect()
    }
}

/// Where the judges' skills start training.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SkillInit {
    /// Every judge at this P(correct) in both classes (the SkillAggregation paper's setup; 0.8 by default).
    Uniform(f64),
    /// Each judge at its Dawid-Skene estimate, fitted on the same judgments with these
    /// settings (binary only): no labels involved.
    DawidSkene(DawidSkeneConfig),
}

impl SkillInit {
    /// Per-judge starting (p0, p1); `None` for a uniform start.
    fn judge_skills(&self, j: &Judgments) -> Result<Option<Vec<(f64, f64)>>, NeuralError> {
        let SkillInit::DawidSkene(cfg) = self else { return Ok(None) };
        if j.n_classes() != 2 {
            return Err(NeuralError::SkillInitClasses { classes: j.n_classes() });
        }
        let fitted = DawidSkene::new(*cfg).aggregate(j)?;
        let Diagnostics::DawidSkene(em) = fitted.diagnostics() else {
            return Err(NeuralError::Setting("Dawid-Skene returned no confusion matrices".into()));
        };
        Ok(Some(em.params.confusion.iter().map(|m| (m.get(0, 0), m.get(1, 1))).collect()))
    }

    /// What goes into the fine-tuning checkpoint key: nothing for the SkillAggregation paper's default
    /// start, so checkpoints written before this setting existed stay valid.
    fn key_part(&self) -> String {
        match self {
            SkillInit::Uniform(p) if *p == TrainConfig::default().skill_init => String::new(),
            SkillInit::Uniform(p) => format!(" skill_init={p}"),
            SkillInit::DawidSkene(cfg) => format!(" skill_init=ds:{cfg:?}"),
        }
    }

    /// The uniform starting skill of a training run (Dawid-Skene starts override it per
    /// judge).
    fn uniform(&self) -> f64 {
        match self {
            SkillInit::Uniform(p) => *p,
            SkillInit::DawidSkene(_) => TrainConfig::default().skill_init,
        }
    }
}

/// One seed's pick and its score.
#[derive(Debug, Clone, PartialEq)]
pub struct SeedRun {
    pub seed: u64,
    /// Accuracy on the seed's test split.
    pub accuracy: f64,
    /// Accuracy on the seed's dev set at the chosen lambda and epoch.
    pub dev_accuracy: f64,
    pub lambda: f64,
    pub epoch: usize,
    /// The context model alone at the chosen epoch, on the same test split (methods that
    /// also read the judges; `None` for an old fine-tuning checkpoint without it).
    pub context_accuracy: Option<f64>,
}

/// One method over all seeds.
#[derive(Debug, Clone)]
pub struct NeuralRun {
    pub method: NeuralMethod,
    pub seeds: Vec<SeedRun>,
    pub dev_size: usize,
    pub seconds: f64,
    /// Seconds spent embedding the contexts (shared by every method of a run).
    pub embedding_seconds: f64,
    /// Each judge's learned slope, mean over seeds; `None` for Train-on-MV.
    pub slopes: Option<Vec<f64>>,
    /// Pearson correlation of the slopes with the judges' accuracies.
    pub slope_accuracy_pcc: Option<f64>,
    /// The first seed's posteriors for every example.
    pub posteriors: Posteriors,
}

impl NeuralRun {
    /// Each seed's test accuracy.
    pub fn accuracies(&self) -> Vec<f64> {
        self.seeds.iter().map(|s| s.accuracy).collect()
    }

    /// The context model alone on every seed's test split, when every seed has it.
    pub fn context_accuracies(&self) -> Option<Vec<f64>> {
        self.seeds.iter().map(|s| s.context_accuracy).collect()
    }
}

/// What a study says while it runs, for a log.
#[derive(Debug, Clone, PartialEq)]
pub enum Note<'a> {
    /// Fine-tuning's whole plan, said once.
    FinetunePlan {
        runs: usize,
        epochs: usize,
        texts: usize,
        checkpoints: &'a Path,
    },
    EmbeddingsDamaged {
        path: &'a Path,
    },
    EmbeddingResumed {
        done: usize,
        total: usize,
        path: &'a Path,
    },
    /// An epoch trained (`loss`) or replayed from its checkpoint (`None`).
    Epoch {
        method: NeuralMethod,
        seed: u64,
        lambda: f64,
        epoch: usize,
        loss: Option<f64>,
        dev_accuracy: f64,
    },
    /// A seed's choice and its score, as soon as the seed finishes.
    SeedDone {
        method: NeuralMethod,
        run: &'a SeedRun,
    },
}

impl std::fmt::Display for Note<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Note::FinetunePlan { runs, epochs, texts, checkpoints } => write!(
                f,
                "fine-tuning plan: {runs} run{} (methods x seeds x lambdas) of {epochs} epochs over {texts} texts; \
                 checkpoints under {}; the same command resumes",
                if *runs == 1 { "" } else { "s" },
                checkpoints.display()
            ),
            Note::EmbeddingsDamaged { path } => {
                write!(f, "warning: {} holds values that are not numbers; embedding again", path.display())
            }
            Note::EmbeddingResumed { done, total, path } => {
                write!(f, "embedding contexts: resuming, {done} of {total} already in {}", path.display())
            }
            Note::Epoch { method, seed, lambda, epoch, loss, dev_accuracy } => {
                let loss = loss.map_or("from checkpoint".to_owned(), |l| format!("loss {l:.4}"));
                write!(
                    f,
                    "{} seed {seed} lambda {lambda} epoch {epoch}: {loss}, dev accuracy {dev_accuracy:.4}",
                    method.name()
                )
            }
            Note::SeedDone { method, run } => {
                let SeedRun { seed, accuracy, dev_accuracy, lambda, epoch, context_accuracy } = run;
                let context = context_accuracy.map_or(String::new(), |a| format!("; context model alone {a:.4}"));
                write!(
                    f,
                    "{} seed {seed}: chose lambda {lambda} epoch {epoch} (dev accuracy {dev_accuracy:.4}); \
                     accuracy outside the dev set {accuracy:.4}{context}",
                    method.name()
                )
            }
        }
    }
}

/// Learning rate of the encoder's weights in the fine-tuned mode (the heads take `lr`).
const FINETUNE_ENCODER_LR: f64 = 2e-5;

/// Batches between mid-epoch fine-tuning checkpoints: 1,600 texts at the default batch,
/// about 10 minutes of MiniLM training on a 2-core CPU (docs/benchmarks/encoders.md), so a kill
/// loses at most that much; writing one (90 MB) takes about a second.
const FINETUNE_SAVE_EVERY: usize = 50;

/// The most memory the dense judgments of these methods may take.
const DENSE_LIMIT_BYTES: usize = 8 << 30;

/// The separator of a context's fields (`jury run` and the converters write it).
const FIELD_SEPARATOR: &str = " || ";

/// The encoder's learning rate when fine-tuning: the heads' with the `paper` recipe (one
/// rate for every parameter, as the authors train), [`FINETUNE_ENCODER_LR`] with jury-v1.
fn encoder_lr(opts: &NeuralOptions) -> f64 {
    match opts.recipe {
        Recipe::Paper => opts.lr,
        Recipe::JuryV1 => FINETUNE_ENCODER_LR,
    }
}

/// Names the fine-tuning checkpoints of one data set and training setup: encoder weights
/// and code revision, texts, judgments, and every setting that changes a trained epoch
/// (the epoch count does not: epoch e is the same in a longer run).
fn finetune_key(j: &Judgments, texts: &[String], opts: &NeuralOptions) -> Result<String, NeuralError> {
    let model_sha = jury_cache::file_sha256(&opts.encoder_dir.join("model.safetensors"))?;
    // jury-v1's keys are as they were before recipes existed; the `paper` recipe's differ.
    let recipe = if opts.recipe == Recipe::Paper { " recipe=paper" } else { "" };
    let setup = format!(
        "{ENCODER_REVISION} max_tokens={} hidden={} lr={} batch={} encoder_lr={}{}{recipe}",
        opts.max_tokens,
        opts.hidden,
        opts.lr,
        opts.batch,
        encoder_lr(opts),
        opts.skill_init.key_part()
    );
    let mut parts: Vec<Vec<u8>> = vec![model_sha.into_bytes(), setup.into_bytes()];
    parts.extend(texts.iter().map(|t| t.as_bytes().to_vec()));
    for n in 0..j.n_examples() {
        for k in 0..j.n_judges() {
            parts.push(j.get(n, k).map_or(b"-".to_vec(), |p| p[1].to_le_bytes().to_vec()));
        }
    }
    Ok(jury_cache::key(&parts.iter().map(Vec::as_slice).collect::<Vec<_>>())[..16].to_owned())
}

/// Frozen context vectors, [examples, hidden] (or [examples, fields x hidden] with
/// `split_fields`: each field embedded alone, vectors in field order, a field an
/// example lacks left at zero).
fn embeddings(texts: &[String], opts: &NeuralOptions, note: &dyn Fn(&Note)) -> Result<Tensor, NeuralError> {
    let setup = EmbedSetup {
        encoder_dir: &opts.encoder_dir,
        device: opts.device,
        max_tokens: opts.max_tokens,
        pooling: opts.recipe.pooling(),
        dir: opts.cache_dir.join("embeddings"),
    };
    if !opts.split_fields {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let (rows, h) = embed_cached(&refs, &setup, note)?;
        return Ok(Tensor::from_vec(rows, (texts.len(), h), &Device::Cpu)?);
    }
    let fields: Vec<Vec<&str>> = texts.iter().map(|t| t.split(FIELD_SEPARATOR).collect()).collect();
    let width = fields.iter().map(Vec::len).max().unwrap_or(1);
    let flat: Vec<&str> = fields.iter().flatten().copied().collect();
    let (rows, h) = embed_cached(&flat, &setup, note)?;
    let mut out = vec![0f32; texts.len() * width * h];
    let mut next = rows.chunks_exact(h);
    for (n, f) in fields.iter().enumerate() {
        for slot in 0..f.len() {
            let row =
                next.next().ok_or_else(|| NeuralError::Setting("embedding rows run short of the fields".into()))?;
            out[(n * width + slot) * h..][..h].copy_from_slice(row);
        }
    }
    Ok(Tensor::from_vec(out, (texts.len(), width * h), &Device::Cpu)?)
}

/// Refuses what cannot run before any embedding: fine-tuning on more than two classes,
/// a sparse jury too large to hold dense, too few labels for a dev set and a test split.
fn check(j: &Judgments, labels: &Labels, texts: &[String], opts: &NeuralOptions) -> Result<(), NeuralError> {
    let c = j.n_classes();
    if c > 2 && opts.finetune {
        return Err(NeuralError::FinetuneClasses { classes: c });
    }
    if texts.len() != j.n_examples() {
        return Err(NeuralError::Setting(format!("{} context texts for {} examples", texts.len(), j.n_examples())));
    }
    let dense_bytes = j.n_examples().checked_mul(j.n_judges()).and_then(|nk| nk.checked_mul(4 * c + 1));
    if dense_bytes.is_none_or(|b| b > DENSE_LIMIT_BYTES) {
        return Err(NeuralError::TooLarge {
            examples: j.n_examples(),
            judges: j.n_judges(),
            gb: DENSE_LIMIT_BYTES >> 30,
        });
    }
    let labeled = labels.n_labeled();
    if labeled <= opts.dev_size {
        return Err(NeuralError::TooFewLabels { labeled, dev_size: opts.dev_size });
    }
    Ok(())
}

/// What every method, seed and lambda of a study shares.
struct Shared<'a> {
    j: &'a Judgments,
    labels: &'a Labels,
    texts: &'a [String],
    opts: &'a NeuralOptions,
    note: &'a dyn Fn(&Note),
    /// Frozen context vectors (a placeholder when fine-tuning, which embeds itself).
    x: Tensor,
    embedding_seconds: f64,
    /// Binary: y[n*k + j] = P(positive); C classes: y[(n*k + j)*C + class].
    y: Vec<f32>,
    present: Vec<bool>,
    /// Judge outputs and their mask as tensors, for the posteriors.
    yt: Tensor,
    mt: Tensor,
    judge_accuracy: Vec<f64>,
    judge_skills: Option<Vec<(f64, f64)>>,
    /// The fine-tuning checkpoints of this data set and setup.
    finetune_dir: Option<PathBuf>,
}

impl<'a> Shared<'a> {
    fn new(
        j: &'a Judgments,
        labels: &'a Labels,
        texts: &'a [String],
        opts: &'a NeuralOptions,
        note: &'a dyn Fn(&Note),
    ) -> Result<Self, NeuralError> {
        let start = Instant::now();
        let x = if opts.finetune {
            Tensor::zeros((1, 1), DType::F32, &Device::Cpu)?
        } else {
            embeddings(texts, opts, note)?
        };
        let embedding_seconds = start.elapsed().as_secs_f64();
        let (n, k, c) = (j.n_examples(), j.n_judges(), j.n_classes());
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
        let (yt, mt) = if c == 2 {
            let (_, yt, mt) =
                jury_data::tensors(&x, &JuryData { n, k, y: &y, present: &present }, ModelKind::SkillAgg)?;
            (yt, mt)
        } else {
            multiclass::tensors(
                &multiclass::MultiData { n, k, c, y: &y, present: &present },
                ModelKind::SkillAgg,
                x.device(),
            )?
        };
        let judge_accuracy = jury_metrics::judge_accuracies(j, labels).into_iter().map(|a| a.unwrap_or(0.0)).collect();
        let finetune_dir = if opts.finetune {
            Some(opts.cache_dir.join("finetune").join(finetune_key(j, texts, opts)?))
        } else {
            None
        };
        let judge_skills = opts.skill_init.judge_skills(j)?;
        Ok(Self {
            j,
            labels,
            texts,
            opts,
            note,
            x,
            embedding_seconds,
            y,
            present,
            yt,
            mt,
            judge_accuracy,
            judge_skills,
            finetune_dir,
        })
    }

    fn jury(&self) -> JuryData<'_> {
        JuryData { n: self.j.n_examples(), k: self.j.n_judges(), y: &self.y, present: &self.present }
    }

    fn config(&self, method: NeuralMethod, seed: u64, lambda: f64) -> TrainConfig {
        let recipe = self.opts.recipe;
        TrainConfig {
            recipe,
            schedule: recipe.schedule(),
            adam_eps: recipe.adam_eps(),
            dropout: recipe.dropout(),
            method: method.model(),
            lambda,
            epochs: self.opts.epochs,
            seed,
            hidden: self.opts.hidden,
            lr: self.opts.lr,
            batch: self.opts.batch,
            skill_init: self.opts.skill_init.uniform(),
            judge_skills: self.judge_skills.clone(),
        }
    }

    /// Share of the examples `idx` predicted right by `post` (P(positive) per example,
    /// or C posteriors per example: binary predictions are P(positive) > 0.5, C-class
    /// ones the argmax, lowest class on exact ties).
    fn share_correct(&self, post: &[f32], idx: &[usize]) -> f64 {
        let width = post.len() / self.labels.len().max(1);
        let predicted: Vec<usize> = if width <= 1 {
            post.iter().map(|&p| usize::from(p > 0.5)).collect()
        } else {
            post.chunks(width).map(jury_core::argmax).collect()
        };
        jury_metrics::accuracy_on(&predicted, self.labels, idx)
    }
}

/// The dev set's pick so far.
struct Pick {
    dev_accuracy: f64,
    lambda: f64,
    epoch: usize,
    posteriors: Vec<f32>,
    /// Each judge's slope; empty for Train-on-MV.
    slopes: Vec<f32>,
    /// The context model alone (s_n, P(positive) or C per example) for the methods whose
    /// posterior also reads the judges; empty for the others.
    context: Vec<f32>,
}

/// Runs `methods` on judgments with labels (for the dev set and scoring) and each
/// example's context text (in example order): binary judgments with [`skill`], C > 2
/// classes with [`multiclass`] (frozen encoder only).
pub fn run_methods(
    j: &Judgments,
    labels: &Labels,
    texts: &[String],
    methods: &[NeuralMethod],
    opts: &NeuralOptions,
    note: &dyn Fn(&Note),
) -> Result<Vec<NeuralRun>, NeuralError> {
    check(j, labels, texts, opts)?;
    let shared = Shared::new(j, labels, texts, opts, note)?;
    let mut plan =
        FinetunePlan { runs: methods.iter().map(|m| opts.seeds * m.lambdas(&opts.lambdas).len()).sum(), run: 0 };
    if let Some(dir) = &shared.finetune_dir {
        note(&Note::FinetunePlan { runs: plan.runs, epochs: opts.epochs, texts: j.n_examples(), checkpoints: dir });
    }
    let splits = opts.splits(labels);
    methods.iter().map(|&m| run_method(&shared, m, &splits, &mut plan)).collect()
}

/// Fine-tuning runs one (method, seed, lambda) after another, each for hours on a CPU:
/// they are numbered, so a log shows how far the plan is.
struct FinetunePlan {
    runs: usize,
    run: usize,
}

fn run_method(
    s: &Shared,
    method: NeuralMethod,
    splits: &[Split],
    plan: &mut FinetunePlan,
) -> Result<NeuralRun, NeuralError> {
    let start = Instant::now();
    let c = s.j.n_classes();
    let (mut seeds, mut slopes_all, mut first) = (Vec::new(), Vec::new(), None);
    for (seed, split) in s.opts.seed_range().zip(splits) {
        let mut best = None;
        let trial = |lambda| Trial { method, seed, lambda, dev: &split.dev };
        for lambda in method.lambdas(&s.opts.lambdas) {
            match (&s.finetune_dir, s.opts.finetune) {
                (Some(dir), true) => train_finetuned(s, &trial(lambda), dir, plan, &mut best)?,
                _ => train_frozen(s, &trial(lambda), &mut best)?,
            }
        }
        let Some(Pick { dev_accuracy, lambda, epoch, posteriors: post, slopes, context }) = best else {
            return Err(NeuralError::Setting("no epochs were trained".into()));
        };
        if let Some(i) = post.iter().position(|p| !p.is_finite()) {
            let width = if c == 2 { 1 } else { c };
            return Err(NeuralError::NotANumber {
                method: method.name(),
                seed,
                lambda,
                epoch,
                example: s.j.example_ids()[i / width].clone(),
            });
        }
        let context_accuracy = (!context.is_empty()).then(|| s.share_correct(&context, &split.test));
        let run = SeedRun {
            seed,
            accuracy: s.share_correct(&post, &split.test),
            dev_accuracy,
            lambda,
            epoch,
            context_accuracy,
        };
        (s.note)(&Note::SeedDone { method, run: &run });
        seeds.push(run);
        if !slopes.is_empty() {
            slopes_all.push(slopes);
        }
        if first.is_none() {
            first = Some(posteriors(&post, c)?);
        }
    }
    let k = s.j.n_judges();
    let slopes = (!slopes_all.is_empty()).then(|| {
        (0..k)
            .map(|jj| slopes_all.iter().map(|v| f64::from(v[jj])).sum::<f64>() / slopes_all.len() as f64)
            .collect::<Vec<_>>()
    });
    let slope_accuracy_pcc = slopes.as_ref().and_then(|m| jury_metrics::pearson(m, &s.judge_accuracy));
    Ok(NeuralRun {
        method,
        seeds,
        dev_size: s.opts.dev_size,
        seconds: start.elapsed().as_secs_f64(),
        embedding_seconds: s.embedding_seconds,
        slopes,
        slope_accuracy_pcc,
        posteriors: first.ok_or_else(|| NeuralError::Setting("no seeds were trained".into()))?,
    })
}

/// A seed's posteriors (P(positive) per example, or C per example) as rows.
fn posteriors(post: &[f32], c: usize) -> Result<Posteriors, NeuralError> {
    let values: Vec<f64> = if c == 2 {
        post.iter().flat_map(|&p| [1.0 - f64::from(p), f64::from(p)]).collect()
    } else {
        post.iter().map(|&p| f64::from(p)).collect()
    };
    Ok(Posteriors::new(c, values)?)
}

/// Whether an epoch at dev accuracy `new` replaces the pick at `old`: when better, or
/// with the `paper` recipe also when equal (the later epoch wins ties).
fn prefer(new: f64, old: f64, recipe: Recipe) -> bool {
    new > old || (new == old && recipe.later_epoch_on_ties())
}

/// One (method, seed, lambda) training run and the dev set that judges its epochs.
struct Trial<'a> {
    method: NeuralMethod,
    seed: u64,
    lambda: f64,
    dev: &'a [usize],
}

impl Trial<'_> {
    /// Keeps the epoch if the dev set prefers it to the pick so far (ties keep the
    /// earlier); `extras` gives its slopes and context-model posteriors, read only then.
    fn consider(
        &self,
        s: &Shared,
        best: &mut Option<Pick>,
        (epoch, loss): (usize, Option<f64>),
        posteriors: Vec<f32>,
        extras: impl FnOnce() -> Result<(Vec<f32>, Vec<f32>), NeuralError>,
    ) -> Result<(), NeuralError> {
        let Trial { method, seed, lambda, dev } = *self;
        let dev_accuracy = s.share_correct(&posteriors, dev);
        (s.note)(&Note::Epoch { method, seed, lambda, epoch, loss, dev_accuracy });
        if best.as_ref().is_none_or(|b| prefer(dev_accuracy, b.dev_accuracy, s.opts.recipe)) {
            let (slopes, context) = extras()?;
            *best = Some(Pick { dev_accuracy, lambda, epoch, posteriors, slopes, context });
        }
        Ok(())
    }

    /// [`Trial::consider`] for a frozen-encoder head after an epoch.
    fn consider_head(
        &self,
        s: &Shared,
        best: &mut Option<Pick>,
        epoch: (usize, Option<f64>),
        head: &dyn ContextModel,
    ) -> Result<(), NeuralError> {
        let x = &s.x;
        self.consider(s, best, epoch, head.posterior(x, &s.yt, &s.mt)?, || {
            let slopes = if self.method.model() == ModelKind::TrainOnMv { Vec::new() } else { head.slopes(x)? };
            let context = if self.method.reads_judges() { head.prior(x)? } else { Vec::new() };
            Ok((slopes, context))
        })
    }
}

fn train_frozen(s: &Shared, trial: &Trial, best: &mut Option<Pick>) -> Result<(), NeuralError> {
    let cfg = s.config(trial.method, trial.seed, trial.lambda);
    let c = s.j.n_classes();
    if c == 2 && s.opts.recipe == Recipe::Paper {
        paper_models::train(&s.x, &s.jury(), &cfg, |epoch, loss, model| {
            trial.consider_head(s, best, (epoch, Some(loss)), model)
        })?;
    } else if c == 2 {
        jury_v1::train(&s.x, &s.jury(), &cfg, |epoch, loss, model| {
            trial.consider_head(s, best, (epoch, Some(loss)), model)
        })?;
    } else {
        let (n, k) = (s.j.n_examples(), s.j.n_judges());
        let multi = multiclass::MultiData { n, k, c, y: &s.y, present: &s.present };
        multiclass::train(&s.x, &multi, &cfg, |epoch, loss, model| {
            trial.consider_head(s, best, (epoch, Some(loss)), model)
        })?;
    }
    Ok(())
}

/// Fine-tunes encoder and head for one (method, seed, lambda), resuming from and writing
/// checkpoints under `dir`.
fn train_finetuned(
    s: &Shared,
    trial: &Trial,
    dir: &Path,
    plan: &mut FinetunePlan,
    best: &mut Option<Pick>,
) -> Result<(), NeuralError> {
    let Trial { method, seed, lambda, .. } = *trial;
    // jury-v1's Crowdlayer trains as SkillAggregation without the regulariser does (same
    // loss, start and batches) and reads the context model alone, so the two share one
    // run's checkpoints: the second replays them. The SkillAggregation paper's Crowdlayer is its own model.
    let (train_as, read_prior) = match (method, s.opts.recipe) {
        (NeuralMethod::Crowdlayer, Recipe::JuryV1) => (NeuralMethod::SkillAggNoReg, true),
        _ => (method, false),
    };
    let cfg = s.config(train_as, seed, lambda);
    let refs: Vec<&str> = s.texts.iter().map(String::as_str).collect();
    let ft = FinetuneConfig {
        encoder_lr: encoder_lr(s.opts),
        save_every: FINETUNE_SAVE_EVERY,
        max_tokens: s.opts.max_tokens,
        checkpoints: dir.join(format!("{}-seed{seed}-lambda{lambda}", train_as.name())),
        device: s.opts.device,
    };
    let shared = if read_prior { format!(" (trained as {})", train_as.name()) } else { String::new() };
    plan.run += 1;
    let n = s.j.n_examples();
    let total = (n * s.opts.epochs) as u64;
    let label =
        format!("[{}/{}] fine-tuning {}{shared} seed {seed} lambda {lambda}", plan.run, plan.runs, method.name());
    let progress = jury_progress::Progress::new(label, total, "{bar:30} {pos}/{len} {per_sec} ETA {eta}");
    let mut scored: Option<(usize, jury_progress::LogProgress)> = None;
    finetune::train(
        &s.opts.encoder_dir,
        &refs,
        &s.jury(),
        &cfg,
        &ft,
        |epoch, result, loss| {
            let post = if read_prior { &result.prior } else { &result.posteriors };
            if post.len() != n {
                return Err(NeuralError::Setting(format!(
                    "{}: epoch {epoch} was checkpointed without the context model's own \
                     posteriors; remove the folder to train it again",
                    ft.checkpoints.display()
                )));
            }
            let context = if method.reads_judges() { result.prior.clone() } else { Vec::new() };
            let extras = || Ok((result.slopes.clone(), context));
            trial.consider(s, best, (epoch, loss), post.clone(), extras)
        },
        |phase, done| match phase {
            Phase::Train => progress.inc(done as u64),
            Phase::Resumed => progress.skip(done as u64),
            Phase::Score(epoch) => {
                // A pass over all texts after each epoch: its own count.
                if scored.as_ref().is_none_or(|(e, _)| *e != epoch) {
                    let label =
                        format!("scoring all texts ({} seed {seed} lambda {lambda} epoch {epoch})", method.name());
                    scored = Some((epoch, jury_progress::LogProgress::new(label, n as u64)));
                }
                if let Some((_, log)) = &scored {
                    log.inc(done as u64);
                }
            }
        },
    )?;
    progress.finish_and_clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fine-tuning run resumes from checkpoints only when nothing that shapes an epoch
    /// changed: every training setting is in the key, the epoch count is not.
    #[test]
    fn finetune_key_changes_with_every_training_setting() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("model.safetensors"), b"weights").unwrap();
        let texts = vec!["first text".to_owned(), "second text".to_owned()];
        let j = Judgments::from_entries(
            vec!["a".into(), "b".into()],
            vec!["j".into()],
            2,
            vec![Some(vec![0.3, 0.7]), Some(vec![0.9, 0.1])],
        )
        .unwrap();
        let base = NeuralOptions {
            encoder_dir: dir.path().to_owned(),
            finetune: true,
            device: ComputeDevice::Cpu,
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
            recipe: Recipe::JuryV1,
        };
        let key = |o: &NeuralOptions| finetune_key(&j, &texts, o).unwrap();
        let k0 = key(&base);
        // More epochs or seeds extend a run, and a seed's checkpoints are the same
        // whichever seeds run beside it; another device resumes it (the state saves on
        // the CPU), so none of them is part of the key.
        let moved =
            NeuralOptions { epochs: 20, seeds: 5, first_seed: 3, device: ComputeDevice::Cuda(1), ..base.clone() };
        assert_eq!(k0, key(&moved));
        for changed in [
            NeuralOptions { batch: 256, ..base.clone() },
            NeuralOptions { lr: 3e-3, ..base.clone() },
            NeuralOptions { hidden: 256, ..base.clone() },
            NeuralOptions { max_tokens: 64, ..base.clone() },
            NeuralOptions { skill_init: SkillInit::Uniform(0.7), ..base.clone() },
            NeuralOptions { skill_init: SkillInit::DawidSkene(DawidSkeneConfig::default()), ..base.clone() },
            NeuralOptions { recipe: Recipe::Paper, ..base.clone() },
        ] {
            assert_ne!(k0, key(&changed));
        }
        let other_texts = vec!["first text".to_owned(), "changed".to_owned()];
        assert_ne!(k0, finetune_key(&j, &other_texts, &base).unwrap(), "other texts");
        std::fs::write(dir.path().join("model.safetensors"), b"other weights").unwrap();
        assert_ne!(k0, key(&base), "new encoder weights");
    }

    /// Fine-tuning with the `paper` recipe trains the encoder at the heads' learning rate
    /// (one rate for every parameter, as the authors do); jury-v1 at its own 2e-5.
    #[test]
    fn the_paper_recipe_fine_tunes_everything_at_one_learning_rate() {
        let opts = |recipe| NeuralOptions {
            encoder_dir: "e".into(),
            finetune: true,
            device: ComputeDevice::Cpu,
            dev_size: 1,
            seeds: 1,
            first_seed: 0,
            max_tokens: 8,
            split_fields: false,
            epochs: 1,
            lambdas: vec![0.1],
            hidden: 0,
            lr: 1e-4,
            batch: 8,
            cache_dir: "c".into(),
            skill_init: SkillInit::Uniform(0.7),
            recipe,
        };
        assert_eq!(encoder_lr(&opts(Recipe::Paper)), 1e-4);
        assert_eq!(encoder_lr(&opts(Recipe::JuryV1)), FINETUNE_ENCODER_LR);
    }

    /// The `paper` recipe takes the later epoch when the dev set ties; jury-v1 keeps the
    /// earlier one.
    #[test]
    fn dev_ties_go_to_the_later_epoch_with_the_paper_recipe() {
        assert!(prefer(0.8, 0.8, Recipe::Paper));
        assert!(!prefer(0.8, 0.8, Recipe::JuryV1));
        assert!(prefer(0.81, 0.8, Recipe::JuryV1) && !prefer(0.79, 0.8, Recipe::Paper));
    }

    /// The notes a log shows read as they did when the CLI printed them.
    #[test]
    fn notes_read_as_log_lines() {
        let run =
            SeedRun { seed: 2, accuracy: 0.75, dev_accuracy: 0.8, lambda: 0.1, epoch: 3, context_accuracy: Some(0.7) };
        assert_eq!(
            Note::SeedDone { method: NeuralMethod::SkillAggX, run: &run }.to_string(),
            "skillagg-x seed 2: chose lambda 0.1 epoch 3 (dev accuracy 0.8000); accuracy outside the dev set 0.7500; \
             context model alone 0.7000"
        );
        let epoch = Note::Epoch {
            method: NeuralMethod::SkillAgg,
            seed: 0,
            lambda: 1.0,
            epoch: 4,
            loss: None,
            dev_accuracy: 0.5,
        };
        assert_eq!(epoch.to_string(), "skillagg seed 0 lambda 1 epoch 4: from checkpoint, dev accuracy 0.5000");
    }
}
