//! Fine-tuned encoder mode: the BERT encoder trains together with the aggregation head
//! (differentiable layer norm and softmax), with checkpoints at every epoch's end and
//! every `save_every` batches within an epoch, so a killed run resumes where it stopped
//! (an epoch over 20,000 texts takes hours on a CPU).
//!
//! Invariants: epoch e shuffles with seed (cfg.seed, e), so a resumed run sees the same
//! batches as an uninterrupted one; each file is written to a temporary name and renamed,
//! weights first and the marker last (an epoch's posteriors; a mid-epoch checkpoint's
//! `partial.json`), so a checkpoint counts exactly when its marker exists; only the last
//! epoch's weights and the last mid-epoch checkpoint are kept. A checkpoint holds the
//! optimisers' step counts and moments with the weights, so a resumed run computes what
//! an uninterrupted one does (tested).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::Var;
use candle_core::{DType, Tensor};
use candle_nn::{ParamsAdamW, VarMap};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::config::Recipe;
use crate::config::{ModelKind, TrainConfig};
use crate::jury_data::{JuryData, tensors};
use crate::jury_v1::SkillModel;
use crate::paper_models::PaperModel;
use crate::train::ContextModel;
use crate::train::adamw::FusedAdamW;
use crate::{ComputeDevice, Encoder, NeuralError};

/// Settings of the fine-tuned mode besides [`TrainConfig`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FinetuneConfig {
    pub encoder_lr: f64,
    pub max_tokens: usize,
    pub checkpoints: PathBuf,
    /// Batches between mid-epoch checkpoints (0: only at the end of each epoch).
    pub save_every: usize,
    /// Where encoder and head train. Not part of a checkpoint's identity: the state
    /// saves on the CPU, so a run resumes on another device.
    pub device: ComputeDevice,
}

/// Where a mid-epoch checkpoint stands: `batches` of `epoch` are trained (all of them
/// when the run died in the scoring pass), with the training loss summed so far so the
/// epoch's reported mean loss is the same whether or not it was interrupted.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
struct Partial {
    epoch: usize,
    batches: usize,
    #[serde(default)]
    loss_sum: f64,
    #[serde(default)]
    loss_n: usize,
}

/// The files of one checkpoint: encoder weights, head weights, optimiser state.
struct Checkpoint {
    encoder: PathBuf,
    head: PathBuf,
    optimiser: PathBuf,
}

impl Checkpoint {
    fn named(dir: &Path, stem: &str) -> Self {
        Self {
            encoder: dir.join(format!("{stem}-encoder.safetensors")),
            head: dir.join(format!("{stem}-head.safetensors")),
            optimiser: dir.join(format!("{stem}-optimiser.safetensors")),
        }
    }

    fn epoch(dir: &Path, e: usize) -> Self {
        Self::named(dir, &format!("epoch-{e:03}"))
    }

    fn files(&self) -> [&Path; 3] {
        [&self.encoder, &self.head, &self.optimiser]
    }

    fn remove(&self) {
        for f in self.files() {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// What trains and is checkpointed: the encoder's variables, the head, and their
/// optimisers (the encoder's over its variables in name order, so a saved state lines up
/// with them in every process, whatever `VarMap`'s hash order).
struct Trainee<'a> {
    varmap: &'a mut VarMap,
    head: &'a dyn ContextModel,
    enc_opt: FusedAdamW,
    head_opt: FusedAdamW,
}

/// The variables of `varmap` sorted by name.
fn sorted_vars(varmap: &VarMap) -> Result<Vec<Var>, NeuralError> {
    let data = varmap.data().lock().map_err(|_| NeuralError::Setting("encoder variables: poisoned lock".into()))?;
    let mut named: Vec<(&String, &Var)> = data.iter().collect();
    named.sort_by(|a, b| a.0.cmp(b.0));
    Ok(named.into_iter().map(|(_, v)| v.clone()).collect())
}

fn tensor_map(vars: &[Var]) -> HashMap<String, Tensor> {
    vars.iter().enumerate().map(|(i, v)| (format!("v{i}"), v.as_tensor().clone())).collect()
}

impl Trainee<'_> {
    /// Writes the checkpoint's files, each through a temporary name.
    fn save(&self, ck: &Checkpoint) -> Result<(), NeuralError> {
        let tmp = |p: &Path| p.with_extension("tmp");
        self.varmap.save(tmp(&ck.encoder))?;
        candle_core::safetensors::save(&tensor_map(&self.head.vars()), tmp(&ck.head))?;
        let mut opt: HashMap<String, Tensor> = HashMap::new();
        for (prefix, o) in [("encoder", &self.enc_opt), ("head", &self.head_opt)] {
            opt.extend(o.state()?.into_iter().map(|(k, v)| (format!("{prefix}.{k}"), v)));
        }
        candle_core::safetensors::save(&opt, tmp(&ck.optimiser))?;
        for f in ck.files() {
            jury_io::persist_synced(&tmp(f), f)?;
        }
        Ok(())
    }

    /// Loads a checkpoint's weights and optimiser state. A checkpoint written before
    /// the optimiser's state was saved (no such file) restarts AdamW's statistics.
    fn load(&mut self, ck: &Checkpoint, dev: &candle_core::Device) -> Result<(), NeuralError> {
        self.varmap.load(&ck.encoder)?;
        let saved = candle_core::safetensors::load(&ck.head, dev)?;
        for (i, v) in self.head.vars().iter().enumerate() {
            let t = saved.get(&format!("v{i}")).ok_or_else(|| io_err(&ck.head, format!("no tensor v{i}")))?;
            v.set(t)?;
        }
        if ck.optimiser.is_file() {
            let saved = candle_core::safetensors::load(&ck.optimiser, dev)?;
            for (prefix, o) in [("encoder.", &mut self.enc_opt), ("head.", &mut self.head_opt)] {
                let part: HashMap<String, Tensor> = saved
                    .iter()
                    .filter_map(|(k, v)| k.strip_prefix(prefix).map(|k| (k.to_string(), v.clone())))
                    .collect();
                o.load_state(&part).map_err(|e| io_err(&ck.optimiser, e))?;
            }
        }
        Ok(())
    }
}

/// What a progress count is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Texts trained on (forward and backward).
    Train,
    /// Texts of epochs and batches found in checkpoints on resume: done, but not by this
    /// call (a rate or ETA must not count them as work done per second).
    Resumed,
    /// Texts scored with epoch `.0`'s final weights (its posteriors; forward only).
    Score(usize),
}

/// What one epoch produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct EpochResult {
    /// P(positive) for every example.
    pub posteriors: Vec<f32>,
    /// The context model alone, s1 = P(positive | text), for every example: Crowdlayer's
    /// read of a model trained as SkillAggregation without the regulariser (the two train
    /// alike). Empty for an epoch checkpointed before it was saved with it.
    pub prior: Vec<f32>,
    /// Each judge's slope p0 + p1 - 1 averaged over all examples (context-level skills
    /// differ per example). Empty for Train-on-MV, which has no skills, and for an epoch
    /// checkpointed before slopes were saved with it.
    pub slopes: Vec<f32>,
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> NeuralError {
    NeuralError::File { path: path.to_owned(), reason: e.to_string() }
}

/// Writes `value` as JSON, atomically: the file appears whole or not at all.
fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<(), NeuralError> {
    Ok(jury_io::write_atomic(path, serde_json::to_string(value).map_err(|e| io_err(path, e))?.as_bytes())?)
}

/// A list written beside an epoch's posteriors; empty when the epoch was checkpointed
/// before the file was written with it.
/// Each epoch's files: the method's posteriors, the judges' slopes and the context
/// model's own prior, `epoch-NNN-<kind>.json` in the checkpoint folder.
const POSTERIORS: &str = "posteriors";
const SLOPES: &str = "slopes";
const PRIOR: &str = "prior";

fn epoch_file(dir: &Path, epoch: usize, kind: &str) -> PathBuf {
    dir.join(format!("epoch-{epoch:03}-{kind}.json"))
}

/// Which posterior of an epoch a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpochRead {
    /// The method's (the context model combined with the judges).
    Method,
    /// The context model's own.
    Context,
}

/// One epoch's posteriors P(class 1) per example (the run's example order).
#[derive(Debug, Clone, PartialEq)]
pub struct EpochPosteriors {
    pub epoch: usize,
    pub read: EpochRead,
    pub posteriors: Vec<f64>,
}

/// Every epoch's posteriors a fine-tuning run left in its checkpoint folder (one
/// method, seed and lambda), by epoch and the method's before the context model's.
pub fn read_epoch_posteriors(dir: &Path) -> Result<Vec<EpochPosteriors>, NeuralError> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| io_err(dir, e))? {
        let name = entry.map_err(|e| io_err(dir, e))?.file_name().to_string_lossy().into_owned();
        let Some((epoch, kind)) = name.strip_prefix("epoch-").and_then(|r| r.strip_suffix(".json")?.split_once('-'))
        else {
            continue;
        };
        let read = match kind {
            POSTERIORS => EpochRead::Method,
            PRIOR => EpochRead::Context,
            _ => continue,
        };
        let Some(epoch) = epoch.parse().ok().filter(|_| epoch.len() == 3) else { continue };
        let path = epoch_file(dir, epoch, kind);
        let text = std::fs::read_to_string(&path).map_err(|e| io_err(&path, e))?;
        let posteriors = serde_json::from_str(&text).map_err(|e| io_err(&path, e))?;
        out.push(EpochPosteriors { epoch, read, posteriors });
    }
    out.sort_by_key(|e| (e.epoch, e.read == EpochRead::Context));
    Ok(out)
}

fn read_optional(path: &Path) -> Result<Vec<f32>, NeuralError> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| io_err(path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io_err(path, e)),
    }
}

/// Trains encoder and head on `texts`; `on_epoch(epoch, posteriors, loss)` is called for
/// every epoch, finished now or found in the checkpoint folder (resume). `loss` is the
/// mean training loss over the epoch's batches, those before a mid-epoch checkpoint
/// included (`None` for an epoch replayed from its checkpoint). `progress(phase, texts)` counts texts trained,
/// those of epochs and batches found in checkpoints on resume, and, after each epoch
/// trained here, texts scored for its posteriors.
pub(crate) fn train(
    encoder_dir: &Path,
    texts: &[&str],
    jury: &JuryData,
    cfg: &TrainConfig,
    ft: &FinetuneConfig,
    mut on_epoch: impl FnMut(usize, &EpochResult, Option<f64>) -> Result<(), NeuralError>,
    mut progress: impl FnMut(Phase, usize),
) -> Result<(), NeuralError> {
    let frozen = Encoder::load_on(encoder_dir, ft.device.open()?)?;
    let dev = frozen.device.clone();
    let mut varmap = VarMap::new();
    let net = frozen.trainable(&varmap)?;
    let weights = encoder_dir.join("model.safetensors");
    varmap.load(&weights)?;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let head: Box<dyn ContextModel> = match cfg.recipe {
        Recipe::Paper => Box::new(PaperModel::new(frozen.hidden_size(), jury.k, cfg, &mut rng, &dev)?),
        Recipe::JuryV1 => Box::new(SkillModel::new(frozen.hidden_size(), jury.k, cfg, &mut rng, &dev)?),
    };
    let pooling = cfg.recipe.pooling();
    std::fs::create_dir_all(&ft.checkpoints).map_err(|e| io_err(&ft.checkpoints, e))?;
    let params = |lr| ParamsAdamW { lr, weight_decay: 0.0, eps: cfg.adam_eps, ..Default::default() };
    let enc_opt = FusedAdamW::new(sorted_vars(&varmap)?, params(ft.encoder_lr))?;
    let head_opt = FusedAdamW::new(head.vars(), params(cfg.lr))?;
    let mut trainee = Trainee { varmap: &mut varmap, head: head.as_ref(), enc_opt, head_opt };
    let post_file = |e: usize| epoch_file(&ft.checkpoints, e, POSTERIORS);
    let slopes_file = |e: usize| epoch_file(&ft.checkpoints, e, SLOPES);
    let prior_file = |e: usize| epoch_file(&ft.checkpoints, e, PRIOR);
    // Resume: replay finished epochs' results, load the last one's weights.
    // Posteriors of an epoch are renamed into place last, so their presence means the
    // epoch's weights were written; the weights of the last such epoch are kept.
    let mut start = 0;
    while start < cfg.epochs && post_file(start).is_file() {
        let text = std::fs::read_to_string(post_file(start)).map_err(|e| io_err(&post_file(start), e))?;
        let posteriors: Vec<f32> = serde_json::from_str(&text).map_err(|e| io_err(&post_file(start), e))?;
        let (slopes, prior) = (read_optional(&slopes_file(start))?, read_optional(&prior_file(start))?);
        on_epoch(start, &EpochResult { posteriors, prior, slopes }, None)?;
        progress(Phase::Resumed, jury.n);
        start += 1;
    }
    // Only the last finished epoch's weights are kept, so a run asking for fewer epochs
    // than the folder holds has none to load, and needs none: it trains nothing.
    if start > 0 && start < cfg.epochs {
        trainee.load(&Checkpoint::epoch(&ft.checkpoints, start - 1), &dev)?;
    }
    // A mid-epoch checkpoint of the epoch to train next takes over from there.
    let partial = Checkpoint::named(&ft.checkpoints, "partial");
    let partial_file = ft.checkpoints.join("partial.json");
    let mut resume = None;
    if let Ok(text) = std::fs::read_to_string(&partial_file) {
        let p: Partial = serde_json::from_str(&text).map_err(|e| io_err(&partial_file, e))?;
        if p.epoch == start && start < cfg.epochs {
            trainee.load(&partial, &dev)?;
            resume = Some(p);
        }
    }
    let (_, y, mask) = tensors(&Tensor::zeros((jury.n, 1), DType::F32, &dev)?, jury, cfg.method)?;
    // Tokenized once; training batches follow the seeded shuffle, the scoring pass (no
    // gradients, so batch composition does not matter) goes in order of length.
    let rows = frozen.token_rows(texts, ft.max_tokens)?;
    let score_batches = Encoder::length_batches(&rows, 64);
    let per_epoch = jury.n.div_ceil(cfg.batch.max(1));
    let total_steps = per_epoch * cfg.epochs;
    for epoch in start..cfg.epochs {
        let mut order: Vec<usize> = (0..jury.n).collect();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(cfg.seed.wrapping_mul(1_000_003).wrapping_add(epoch as u64)));
        let batches: Vec<&[usize]> = order.chunks(cfg.batch.max(1)).collect();
        let (skipped, mut loss_sum, mut loss_n) = match resume.take() {
            Some(p) => (p.batches.min(batches.len()), p.loss_sum, p.loss_n),
            None => (0, 0.0f64, 0usize),
        };
        if skipped > 0 {
            progress(Phase::Resumed, batches[..skipped].iter().map(|b| b.len()).sum());
        }
        for (b, chunk) in batches.iter().enumerate().skip(skipped) {
            let (ids, m) = frozen.pad(&rows, chunk)?;
            let x = net.pooled(&ids, &m, true, pooling)?;
            let idx = Tensor::from_vec(chunk.iter().map(|&i| i as u32).collect::<Vec<_>>(), chunk.len(), &dev)?;
            // A batch's dropout masks depend on (seed, epoch, batch) alone, so a resumed
            // run draws what an uninterrupted one does.
            let mut drop_rng = ChaCha8Rng::seed_from_u64(
                cfg.seed
                    .wrapping_mul(1_000_003)
                    .wrapping_add(epoch as u64)
                    .wrapping_mul(1_000_033)
                    .wrapping_add(b as u64),
            );
            let (yb, mb) = (y.index_select(&idx, 0)?, mask.index_select(&idx, 0)?);
            let loss = head.loss(&x, &yb, &mb, cfg.lambda, &mut drop_rng)?;
            let grads = loss.backward()?;
            loss_sum += f64::from(loss.to_scalar::<f32>()?);
            loss_n += 1;
            // The schedule's step is the batch's place in the whole run, so it resumes too.
            let factor = cfg.schedule.factor(epoch * per_epoch + b, total_steps);
            trainee.enc_opt.set_lr(ft.encoder_lr * factor);
            trainee.head_opt.set_lr(cfg.lr * factor);
            trainee.enc_opt.step(&grads)?;
            trainee.head_opt.step(&grads)?;
            // The last batch is saved too: the scoring pass that follows takes minutes on
            // a real corpus, and a kill there should not cost the epoch's tail.
            if ft.save_every > 0 && ((b + 1) % ft.save_every == 0 || b + 1 == batches.len()) {
                // Marker out first: a kill while the weights are rewritten leaves no
                // checkpoint rather than a marker naming the wrong weights.
                let _ = std::fs::remove_file(&partial_file);
                trainee.save(&partial)?;
                write_json(&partial_file, &Partial { epoch, batches: b + 1, loss_sum, loss_n })?;
            }
            progress(Phase::Train, chunk.len());
        }
        // Posteriors of every example with this epoch's encoder, and the judges' slopes
        // summed over examples (each batch's mean times its size).
        let (mut post, mut prior) = (vec![0f32; jury.n], vec![0f32; jury.n]);
        let with_skills = cfg.method != ModelKind::TrainOnMv;
        let mut slope_sum = vec![0f64; if with_skills { jury.k } else { 0 }];
        for chunk in &score_batches {
            let (ids, m) = frozen.pad(&rows, chunk)?;
            let x = net.pooled(&ids, &m, false, pooling)?;
            let idx = Tensor::from_vec(chunk.iter().map(|&i| i as u32).collect::<Vec<_>>(), chunk.len(), &dev)?;
            let p = head.posterior(&x, &y.index_select(&idx, 0)?, &mask.index_select(&idx, 0)?)?;
            for ((&i, p), s) in chunk.iter().zip(p).zip(head.prior(&x)?) {
                post[i] = p;
                prior[i] = s;
            }
            if with_skills {
                for (sum, s) in slope_sum.iter_mut().zip(head.slopes(&x)?) {
                    *sum += f64::from(s) * chunk.len() as f64;
                }
            }
            progress(Phase::Score(epoch), chunk.len());
        }
        let slopes: Vec<f32> = slope_sum.iter().map(|s| (s / jury.n.max(1) as f64) as f32).collect();
        trainee.save(&Checkpoint::epoch(&ft.checkpoints, epoch))?;
        write_json(&slopes_file(epoch), &slopes)?;
        write_json(&prior_file(epoch), &prior)?;
        // The posteriors file marks the epoch as done; the mid-epoch checkpoint, now
        // behind it, goes (marker first, so no stale marker outlives its weights).
        write_json(&post_file(epoch), &post)?;
        let _ = std::fs::remove_file(&partial_file);
        partial.remove();
        // Only the last epoch's weights are kept (90 MB each for MiniLM, twice that for
        // the optimiser's moments).
        if epoch > 0 {
            Checkpoint::epoch(&ft.checkpoints, epoch - 1).remove();
        }
        on_epoch(epoch, &EpochResult { posteriors: post, prior, slopes }, Some(loss_sum / loss_n.max(1) as f64))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bert;
    use candle_core::Device;
    use candle_nn::VarBuilder;

    /// A model folder with a tiny random BERT and a word-level tokenizer.
    fn tiny_model(dir: &Path) {
        let cfg = r#"{"vocab_size": 12, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
            "intermediate_size": 16, "max_position_embeddings": 16, "type_vocab_size": 2}"#;
        std::fs::write(dir.join("config.json"), cfg).unwrap();
        let vocab: Vec<String> =
            ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "good", "bad", "the", "answer", "is", "very", "x", "y"]
                .iter()
                .enumerate()
                .map(|(i, w)| format!("\"{w}\": {i}"))
                .collect();
        let tok = format!(
            r#"{{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
            "pre_tokenizer": {{"type": "Whitespace"}}, "post_processor": null, "decoder": null,
            "model": {{"type": "WordLevel", "vocab": {{{}}}, "unk_token": "[UNK]"}}}}"#,
            vocab.join(", ")
        );
        std::fs::write(dir.join("tokenizer.json"), tok).unwrap();
        let vm = VarMap::new();
        let c: bert::Config = serde_json::from_str(cfg).unwrap();
        bert::Bert::new(&c, VarBuilder::from_varmap(&vm, DType::F32, &Device::Cpu)).unwrap();
        vm.save(dir.join("model.safetensors")).unwrap();
    }

    /// A tiny model folder and a 40-text, 3-judge jury (two judges say "good" texts are
    /// positive, the third says the opposite).
    fn setup() -> (tempfile::TempDir, Vec<&'static str>, Vec<f32>, Vec<bool>) {
        let dir = tempfile::tempdir().unwrap();
        tiny_model(dir.path());
        let texts = (0..40).map(|i| if i % 2 == 0 { "the answer is good" } else { "the answer is very bad" }).collect();
        let y = (0..40).flat_map(|i| if i % 2 == 0 { [1.0, 1.0, 0.0] } else { [0.0, 0.0, 1.0] }).collect();
        (dir, texts, y, vec![true; 120])
    }

    /// The settings both resume tests share.
    fn config(method: ModelKind, epochs: usize, seed: u64) -> TrainConfig {
        TrainConfig { method, lambda: 0.1, epochs, batch: 16, lr: 1e-2, seed, ..TrainConfig::default() }
    }

    #[test]
    fn a_killed_fine_tuning_resumes_from_its_last_finished_epoch() {
        let (dir, texts, y, present) = setup();
        // A run killed during epoch 2 left what a 2-epoch run leaves: epochs 0 and 1
        // finished, epoch 1's weights on disk.
        let jury = JuryData { n: 40, k: 3, y: &y, present: &present };
        let cfg = config(ModelKind::SkillAggX, 2, 4);
        let ft = ft_config(dir.path().join("ckpt"), 0);
        let mut seen = Vec::new();
        train(
            dir.path(),
            &texts,
            &jury,
            &cfg,
            &ft,
            |_, r, _| {
                assert_eq!(r.posteriors.len(), 40);
                assert_eq!(r.slopes.len(), 3);
                assert!(r.slopes.iter().all(|s| (-1.0..=1.0).contains(s)), "{:?}", r.slopes);
                seen.push(r.clone());
                Ok(())
            },
            |_, _| {},
        )
        .unwrap();
        assert_eq!(seen.len(), 2);
        assert!(!ft.checkpoints.join("epoch-000-encoder.safetensors").exists(), "only the last weights are kept");
        let cfg = TrainConfig { epochs: 3, ..cfg };
        let (mut replayed, mut trained, mut counted) = (0, 0, (0, 0));
        train(
            dir.path(),
            &texts,
            &jury,
            &cfg,
            &ft,
            |e, r, _| {
                if e < 2 {
                    assert_eq!(r, &seen[e], "a replayed epoch gives what it gave when trained");
                    replayed += 1
                } else {
                    trained += 1
                }
                Ok(())
            },
            |phase, n| {
                assert!(n > 0);
                match phase {
                    Phase::Train => counted.0 += n,
                    Phase::Resumed => counted.1 += n,
                    Phase::Score(_) => {}
                }
            },
        )
        .unwrap();
        assert_eq!(counted, (40, 2 * 40), "one epoch trained, two replayed from checkpoints");
        assert_eq!((replayed, trained), (2, 1));
        // A later run asking for fewer epochs than the folder holds (epoch 0's weights
        // are gone) replays them and trains nothing.
        let mut again = Vec::new();
        let cfg = TrainConfig { epochs: 2, ..cfg };
        let ok = |e: usize, r: &EpochResult, loss: Option<f64>| {
            assert_eq!(loss, None, "epoch {e} replayed, not trained");
            again.push(r.clone());
            Ok(())
        };
        train(dir.path(), &texts, &jury, &cfg, &ft, ok, |phase, _| assert_eq!(phase, Phase::Resumed)).unwrap();
        assert_eq!(again, seen);
    }

    #[test]
    fn a_run_killed_mid_epoch_resumes_after_its_last_saved_batch() {
        let (dir, texts, y, present) = setup();
        let jury = JuryData { n: 40, k: 3, y: &y, present: &present };
        let cfg = config(ModelKind::SkillAgg, 1, 2);
        let ft = ft_config(dir.path().join("ckpt"), 1);
        // Batches of 16, 16 and 8 texts; the run dies while reporting the second batch,
        // after its checkpoint was written.
        kill_at(dir.path(), &texts, &jury, &cfg, &ft, 2);
        let marker = std::fs::read_to_string(ft.checkpoints.join("partial.json")).unwrap();
        let marker: Partial = serde_json::from_str(&marker).unwrap();
        assert_eq!((marker.epoch, marker.batches, marker.loss_n), (0, 2, 2));
        // Resumed: the two saved batches are reported as done at once, one batch trains.
        let mut reports = Vec::new();
        let mut epochs = Vec::new();
        train(
            dir.path(),
            &texts,
            &jury,
            &cfg,
            &ft,
            |e, r, _| {
                assert!(r.posteriors.iter().all(|v| (0.0..=1.0).contains(v)));
                epochs.push(e);
                Ok(())
            },
            |phase, n| reports.push((phase, n)),
        )
        .unwrap();
        // Then all 40 texts are scored for the epoch's posteriors.
        assert_eq!(reports, [(Phase::Resumed, 32), (Phase::Train, 8), (Phase::Score(0), 40)]);
        assert_eq!(epochs, [0]);
        assert!(!ft.checkpoints.join("partial.json").exists(), "a finished epoch drops the mid-epoch checkpoint");
        assert!(ft.checkpoints.join("epoch-000-posteriors.json").exists());
    }

    #[test]
    fn a_run_killed_in_the_scoring_pass_trains_nothing_again() {
        let (dir, texts, y, present) = setup();
        let jury = JuryData { n: 40, k: 3, y: &y, present: &present };
        let cfg = config(ModelKind::SkillAgg, 1, 3);
        // Checkpoints every 2 batches: of 3, only the end-of-training one covers batch 3.
        let ft = |name: &str| ft_config(dir.path().join(name), 2);
        let run = |ft: &FinetuneConfig, reports: &mut Vec<(Phase, usize)>| {
            let mut out = (EpochResult::default(), None);
            train(
                dir.path(),
                &texts,
                &jury,
                &cfg,
                ft,
                |_, r, loss| {
                    out = (r.clone(), loss);
                    Ok(())
                },
                |phase, n| reports.push((phase, n)),
            )
            .unwrap();
            out
        };
        let (whole, whole_loss) = run(&ft("whole"), &mut Vec::new());
        // Reports 1-3 are the training batches, the 4th the scoring pass.
        let killed = ft("killed");
        kill_at(dir.path(), &texts, &jury, &cfg, &killed, 4);
        let mut reports = Vec::new();
        let (resumed, resumed_loss) = run(&killed, &mut reports);
        assert_eq!(reports, [(Phase::Resumed, 40), (Phase::Score(0), 40)]);
        assert!(max_diff(&whole.posteriors, &resumed.posteriors) < 1e-6);
        let (a, b) = (whole_loss.unwrap(), resumed_loss.unwrap());
        assert!(a > 0.0 && (a - b).abs() < 1e-9, "mean loss {a} uninterrupted, {b} resumed");
    }

    /// The fine-tuning settings of these tests: a tiny encoder's learning rate and
    /// token budget, on the CPU.
    fn ft_config(checkpoints: PathBuf, save_every: usize) -> FinetuneConfig {
        FinetuneConfig { encoder_lr: 1e-3, max_tokens: 8, checkpoints, save_every, device: ComputeDevice::Cpu }
    }

    /// Runs `train` and kills it (a panic in the progress callback) at its `k`-th
    /// progress report.
    fn kill_at(dir: &Path, texts: &[&str], jury: &JuryData, cfg: &TrainConfig, ft: &FinetuneConfig, k: usize) {
        let mut calls = 0;
        let killed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            train(
                dir,
                texts,
                jury,
                cfg,
                ft,
                |_, _, _| Ok(()),
                |_, _| {
                    calls += 1;
                    if calls == k {
                        panic!("killed");
                    }
                },
            )
        }));
        assert!(killed.is_err(), "the run ended before its report {k}");
    }

    /// Results of every epoch of a run with these settings, killed at its
    /// `kill_at_report`-th progress report (if any) and then started again.
    fn run_with_kill(
        dir: &Path,
        texts: &[&str],
        jury: &JuryData,
        cfg: &TrainConfig,
        ft: &FinetuneConfig,
        kill_at_report: Option<usize>,
    ) -> Vec<EpochResult> {
        let mut epochs = vec![EpochResult::default(); cfg.epochs];
        if let Some(k) = kill_at_report {
            kill_at(dir, texts, jury, cfg, ft, k);
            assert!(ft.checkpoints.join("partial.json").exists(), "killed mid-epoch, after a checkpoint");
        }
        train(
            dir,
            texts,
            jury,
            cfg,
            ft,
            |e, r, _| {
                epochs[e] = r.clone();
                Ok(())
            },
            |_, _| {},
        )
        .unwrap();
        epochs
    }

    /// `cfg` run whole (checkpoints in `dir/whole`) and killed at its 6th report then
    /// resumed (`dir/resumed`): the same epoch 0, epoch 1's posteriors within 1e-6.
    /// Reports per epoch are three training batches (16, 16, 8 texts), then one scoring
    /// pass; the 6th is epoch 1's second batch, whose checkpoint is on disk by then, so
    /// the resumed run restores weights and optimiser state mid-epoch. Returns the whole
    /// run's epochs and the resumed run's.
    fn whole_and_resumed(
        dir: &Path,
        texts: &[&str],
        jury: &JuryData,
        cfg: &TrainConfig,
    ) -> (Vec<EpochResult>, Vec<EpochResult>) {
        let whole = run_with_kill(dir, texts, jury, cfg, &ft_config(dir.join("whole"), 1), None);
        let resumed = run_with_kill(dir, texts, jury, cfg, &ft_config(dir.join("resumed"), 1), Some(6));
        assert_eq!(whole[0], resumed[0]);
        let d = max_diff(&whole[1].posteriors, &resumed[1].posteriors);
        assert!(d < 1e-6, "the resumed run's posteriors differ by {d}");
        (whole, resumed)
    }

    /// The largest absolute difference between two equally long lists.
    fn max_diff(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max)
    }

    #[test]
    fn a_resumed_run_computes_what_an_uninterrupted_one_does() {
        let (dir, texts, y, present) = setup();
        let jury = JuryData { n: 40, k: 3, y: &y, present: &present };
        let cfg = config(ModelKind::SkillAggX, 2, 7);
        let ft = |name: &str| ft_config(dir.path().join(name), 1);
        let (whole, resumed) = whole_and_resumed(dir.path(), &texts, &jury, &cfg);
        let d = max_diff(&whole[1].slopes, &resumed[1].slopes);
        assert!(d < 1e-6, "the resumed run's slopes differ by {d}");
        // The optimiser state is what makes them equal: an epoch-0 checkpoint without it
        // (as written before it was saved) restarts AdamW, and epoch 1 ends elsewhere.
        let lost = ft("lost");
        let _ = run_with_kill(dir.path(), &texts, &jury, &TrainConfig { epochs: 1, ..cfg.clone() }, &lost, None);
        std::fs::remove_file(lost.checkpoints.join("epoch-000-optimiser.safetensors")).unwrap();
        let restarted = run_with_kill(dir.path(), &texts, &jury, &cfg, &lost, None);
        let d = max_diff(&whole[1].posteriors, &restarted[1].posteriors);
        assert!(d > 1e-5, "restarting AdamW's statistics changed nothing ({d})");
    }

    /// The `paper` recipe fine-tunes too (its head, one learning rate moved by the cosine
    /// schedule, seeded dropout, unnormalised pooling), and a run killed mid-epoch
    /// resumes to what an uninterrupted one computes: the schedule's step and the
    /// dropout masks follow from (seed, epoch, batch), not from the process (paper_models.rs
    /// pins that the -X skill layer sends no gradient into the context vector).
    #[test]
    fn the_paper_recipe_fine_tunes_and_resumes_exactly() {
        let (dir, texts, y, present) = setup();
        let jury = JuryData { n: 40, k: 3, y: &y, present: &present };
        let recipe = Recipe::Paper;
        let cfg = TrainConfig {
            recipe,
            schedule: recipe.schedule(),
            adam_eps: recipe.adam_eps(),
            dropout: recipe.dropout(),
            skill_init: recipe.skill_init(),
            ..config(ModelKind::SkillAggX, 2, 7)
        };
        let (whole, _) = whole_and_resumed(dir.path(), &texts, &jury, &cfg);
        assert!(whole[1].posteriors.iter().all(|p| p.is_finite()));
        assert_eq!(whole[1].slopes.len(), 3);
        // jury-v1 with the same seed trains another model.
        let ft = ft_config(dir.path().join("v1"), 1);
        let v1 = run_with_kill(dir.path(), &texts, &jury, &config(ModelKind::SkillAggX, 2, 7), &ft, None);
        assert!(max_diff(&whole[1].posteriors, &v1[1].posteriors) > 1e-4);
    }

    /// Crowdlayer and SkillAggregation without the regulariser train alike (same loss,
    /// initialisation and batches for a seed) and differ only in how the posterior is
    /// read, so the CLI trains one model for both: Crowdlayer's posteriors are the other
    /// run's prior, epoch by epoch, and the two reads differ.
    #[test]
    fn crowdlayer_is_the_prior_of_skillaggregation_without_the_regulariser() {
        let (dir, texts, y, present) = setup();
        let jury = JuryData { n: 40, k: 3, y: &y, present: &present };
        let run = |method, name: &str| {
            let cfg = TrainConfig { lambda: 0.0, ..config(method, 2, 5) };
            let ft = ft_config(dir.path().join(name), 0);
            run_with_kill(dir.path(), &texts, &jury, &cfg, &ft, None)
        };
        let (cl, sa) = (run(ModelKind::Crowdlayer, "cl"), run(ModelKind::SkillAgg, "sa"));
        for e in 0..2 {
            assert_eq!(sa[e].prior.len(), 40);
            assert!(max_diff(&cl[e].posteriors, &sa[e].prior) < 1e-6, "epoch {e}");
            assert!(max_diff(&cl[e].slopes, &sa[e].slopes) < 1e-6, "epoch {e}");
            assert!(max_diff(&sa[e].posteriors, &sa[e].prior) > 1e-3, "epoch {e}: the judges changed nothing");
        }
    }
}
