//! Fine-tuned encoder mode: the BERT encoder trains together with the aggregation head
//! (differentiable layer norm and softmax), one checkpoint per epoch so a killed run
//! resumes from the last finished epoch.
//!
//! Invariants: epoch e shuffles with seed (cfg.seed, e), so a resumed run sees the same
//! batches as an uninterrupted one; each file is written to a temporary name and renamed,
//! weights first and the epoch's posteriors last, so an epoch counts as done exactly when
//! its posteriors file exists; only the last epoch's weights are kept. (The optimiser's
//! moment estimates are not checkpointed: a resumed run restarts AdamW's statistics.)

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Tensor};
use candle_nn::{AdamW, Optimizer, ParamsAdamW, VarBuilder, VarMap};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::skill::{JuryData, SkillModel, TrainConfig, tensors};
use crate::{Encoder, NeuralError, bert};

/// Settings of the fine-tuned mode besides [`TrainConfig`].
#[derive(Debug, Clone, PartialEq)]
pub struct FinetuneConfig {
    pub encoder_lr: f64,
    pub max_tokens: usize,
    pub checkpoints: PathBuf,
}

/// What one epoch produced: posteriors P(positive) for every example.
pub type EpochResult = Vec<f32>;

fn io_err(path: &Path, e: impl std::fmt::Display) -> NeuralError {
    NeuralError::File { path: path.to_owned(), reason: e.to_string() }
}

/// Trains encoder and head on `texts`; `on_epoch(epoch, posteriors)` is called for every
/// epoch, finished now or found in the checkpoint folder (resume).
pub fn train(
    encoder_dir: &Path,
    texts: &[&str],
    jury: &JuryData,
    cfg: &TrainConfig,
    ft: &FinetuneConfig,
    mut on_epoch: impl FnMut(usize, &EpochResult) -> Result<(), NeuralError>,
    mut progress: impl FnMut(usize),
) -> Result<(), NeuralError> {
    let frozen = Encoder::load(encoder_dir)?;
    let dev = frozen.device.clone();
    let mut varmap = VarMap::new();
    let bert = bert::Bert::new(&frozen.model.config, VarBuilder::from_varmap(&varmap, DType::F32, &dev))?;
    let weights = encoder_dir.join("model.safetensors");
    varmap.load(&weights)?;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let head = SkillModel::new(bert.config.hidden_size, jury.k, cfg, &mut rng, &dev)?;
    std::fs::create_dir_all(&ft.checkpoints).map_err(|e| io_err(&ft.checkpoints, e))?;
    let enc_file = |e: usize| ft.checkpoints.join(format!("epoch-{e:03}-encoder.safetensors"));
    let head_file = |e: usize| ft.checkpoints.join(format!("epoch-{e:03}-head.safetensors"));
    let post_file = |e: usize| ft.checkpoints.join(format!("epoch-{e:03}-posteriors.json"));
    // Resume: replay finished epochs' results, load the last one's weights.
    // Posteriors of an epoch are renamed into place last, so their presence means the
    // epoch's weights were written; the weights of the last such epoch are kept.
    let mut start = 0;
    while start < cfg.epochs && post_file(start).is_file() {
        let text = std::fs::read_to_string(post_file(start)).map_err(|e| io_err(&post_file(start), e))?;
        let post: Vec<f32> = serde_json::from_str(&text).map_err(|e| io_err(&post_file(start), e))?;
        on_epoch(start, &post)?;
        start += 1;
    }
    if start > 0 {
        varmap.load(enc_file(start - 1))?;
        let saved = candle_core::safetensors::load(head_file(start - 1), &dev)?;
        for (i, v) in head.vars().iter().enumerate() {
            let t =
                saved.get(&format!("v{i}")).ok_or_else(|| io_err(&head_file(start - 1), format!("no tensor v{i}")))?;
            v.set(t)?;
        }
    }
    let (_, y, mask) = tensors(&Tensor::zeros((jury.n, 1), DType::F32, &dev)?, jury, cfg.method)?;
    let params = |lr| ParamsAdamW { lr, weight_decay: 0.0, ..Default::default() };
    let mut enc_opt = AdamW::new(varmap.all_vars(), params(ft.encoder_lr))?;
    let mut head_opt = AdamW::new(head.vars(), params(cfg.lr))?;
    for epoch in start..cfg.epochs {
        let mut order: Vec<usize> = (0..jury.n).collect();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(cfg.seed.wrapping_mul(1_000_003).wrapping_add(epoch as u64)));
        for chunk in order.chunks(cfg.batch.max(1)) {
            let batch: Vec<&str> = chunk.iter().map(|&i| texts[i]).collect();
            let (ids, m) = frozen.tokenize(&batch, ft.max_tokens)?;
            let x = bert.forward(&ids, &m, true)?;
            let idx = Tensor::from_vec(chunk.iter().map(|&i| i as u32).collect::<Vec<_>>(), chunk.len(), &dev)?;
            let loss = head.loss(&x, &y.index_select(&idx, 0)?, &mask.index_select(&idx, 0)?, cfg.lambda)?;
            let grads = loss.backward()?;
            enc_opt.step(&grads)?;
            head_opt.step(&grads)?;
            progress(chunk.len());
        }
        // Posteriors of every example with this epoch's encoder.
        let mut post = Vec::with_capacity(jury.n);
        for chunk in (0..jury.n).collect::<Vec<_>>().chunks(64) {
            let batch: Vec<&str> = chunk.iter().map(|&i| texts[i]).collect();
            let (ids, m) = frozen.tokenize(&batch, ft.max_tokens)?;
            let x = bert.forward(&ids, &m, false)?;
            let idx = Tensor::from_vec(chunk.iter().map(|&i| i as u32).collect::<Vec<_>>(), chunk.len(), &dev)?;
            post.extend(head.posterior(&x, &y.index_select(&idx, 0)?, &mask.index_select(&idx, 0)?)?);
        }
        let tmp = |p: PathBuf| p.with_extension("tmp");
        std::fs::write(tmp(post_file(epoch)), serde_json::to_string(&post).map_err(|e| io_err(&post_file(epoch), e))?)
            .map_err(|e| io_err(&post_file(epoch), e))?;
        varmap.save(tmp(enc_file(epoch)))?;
        let head_tensors: HashMap<String, Tensor> =
            head.vars().iter().enumerate().map(|(i, v)| (format!("v{i}"), v.as_tensor().clone())).collect();
        candle_core::safetensors::save(&head_tensors, tmp(head_file(epoch)))?;
        for f in [enc_file(epoch), head_file(epoch), post_file(epoch)] {
            // Order matters: the posteriors file marks the epoch as done.
            std::fs::rename(tmp(f.clone()), &f).map_err(|e| io_err(&f, e))?;
        }
        // Only the last epoch's weights are kept (90 MB each for MiniLM).
        if epoch > 0 {
            let _ = std::fs::remove_file(enc_file(epoch - 1));
            let _ = std::fs::remove_file(head_file(epoch - 1));
        }
        on_epoch(epoch, &post)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skill::Method;
    use candle_core::Device;

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

    #[test]
    fn a_killed_fine_tuning_resumes_from_its_last_finished_epoch() {
        let dir = tempfile::tempdir().unwrap();
        tiny_model(dir.path());
        let texts: Vec<&str> =
            (0..40).map(|i| if i % 2 == 0 { "the answer is good" } else { "the answer is very bad" }).collect();
        let y: Vec<f32> = (0..40).flat_map(|i| if i % 2 == 0 { [1.0, 1.0, 0.0] } else { [0.0, 0.0, 1.0] }).collect();
        let present = vec![true; 120];
        // A run killed during epoch 2 left what a 2-epoch run leaves: epochs 0 and 1
        // finished, epoch 1's weights on disk.
        let jury = JuryData { n: 40, k: 3, y: &y, present: &present };
        let cfg = TrainConfig {
            method: Method::SkillAggX,
            lambda: 0.1,
            epochs: 2,
            batch: 16,
            lr: 1e-2,
            seed: 4,
            skill_init: 0.8,
            hidden: 0,
        };
        let ft = FinetuneConfig { encoder_lr: 1e-3, max_tokens: 8, checkpoints: dir.path().join("ckpt") };
        let mut seen = Vec::new();
        train(
            dir.path(),
            &texts,
            &jury,
            &cfg,
            &ft,
            |e, p| {
                assert_eq!(p.len(), 40);
                seen.push(e);
                Ok(())
            },
            |_| {},
        )
        .unwrap();
        assert_eq!(seen, [0, 1]);
        assert!(!ft.checkpoints.join("epoch-000-encoder.safetensors").exists(), "only the last weights are kept");
        let cfg = TrainConfig { epochs: 3, ..cfg };
        let (mut replayed, mut trained) = (0, 0);
        train(
            dir.path(),
            &texts,
            &jury,
            &cfg,
            &ft,
            |e, _| {
                if e < 2 {
                    replayed += 1
                } else {
                    trained += 1
                }
                Ok(())
            },
            |n| assert!(n > 0),
        )
        .unwrap();
        assert_eq!((replayed, trained), (2, 1));
    }
}
