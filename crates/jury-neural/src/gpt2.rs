//! GPT-2 encoder, the SkillAggregation paper's own context encoder (for users with a
//! hub; no registry package ships its weights): token ids to the final hidden state of
//! each text's last token, L2-normalised.
//!
//! Invariants: as in `bert`, `differentiable = true` uses only ops with a backward pass
//! (`kernels_grad`'s kernels or plain candle expressions). Right padding never changes an
//! embedding: attention is causal, so a real token never sees the padding after it.
//! Weights keep the hub file's layout (`Conv1D`: [in, out]) and are transposed inside
//! `forward`, so the trained variables are the file's own tensors and a fine-tuned
//! checkpoint loads like the original.

use candle_core::{D, DType, Module, Result, Tensor, bail};
use candle_nn::{Embedding, Linear, VarBuilder};

use crate::bert::LayerNorm;
use crate::kernels;
use crate::train::kernels_grad;

/// The fields of a GPT-2 `config.json` this encoder reads.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct Config {
    pub vocab_size: usize,
    pub n_positions: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    /// Width of the MLP (4 x `n_embd` when absent or null, as in GPT-2).
    #[serde(default)]
    pub n_inner: Option<usize>,
    #[serde(default = "default_eps")]
    pub layer_norm_epsilon: f64,
}

fn default_eps() -> f64 {
    1e-5
}

/// GPT-2's linear layer: `x W + b` with W stored [in, out].
struct Conv1D {
    weight: Tensor,
    bias: Tensor,
}

impl Conv1D {
    fn new(i: usize, o: usize, vb: VarBuilder) -> Result<Self> {
        // The initialisation (GPT-2's) only matters for a model not loaded from a file.
        let weight = vb.get_with_hints((i, o), "weight", candle_nn::Init::Randn { mean: 0.0, stdev: 0.02 })?;
        Ok(Self { weight, bias: vb.get_with_hints(o, "bias", candle_nn::Init::Const(0.0))? })
    }

    fn forward(&self, x: &Tensor, differentiable: bool) -> Result<Tensor> {
        // Transposed on every call: when fine-tuning, the variable changes between calls.
        let l = Linear::new(self.weight.t()?.contiguous()?, Some(self.bias.clone()));
        if differentiable { kernels_grad::linear(&l, x) } else { kernels::linear(&l, x) }
    }
}

struct Block {
    ln_1: LayerNorm,
    c_attn: Conv1D,
    attn_proj: Conv1D,
    ln_2: LayerNorm,
    c_fc: Conv1D,
    mlp_proj: Conv1D,
    heads: usize,
}

impl Block {
    fn new(cfg: &Config, vb: VarBuilder) -> Result<Self> {
        let h = cfg.n_embd;
        let inner = cfg.n_inner.unwrap_or(4 * h);
        Ok(Self {
            ln_1: LayerNorm::new(h, cfg.layer_norm_epsilon, vb.pp("ln_1"))?,
            c_attn: Conv1D::new(h, 3 * h, vb.pp("attn").pp("c_attn"))?,
            attn_proj: Conv1D::new(h, h, vb.pp("attn").pp("c_proj"))?,
            ln_2: LayerNorm::new(h, cfg.layer_norm_epsilon, vb.pp("ln_2"))?,
            c_fc: Conv1D::new(h, inner, vb.pp("mlp").pp("c_fc"))?,
            mlp_proj: Conv1D::new(inner, h, vb.pp("mlp").pp("c_proj"))?,
            heads: cfg.n_head,
        })
    }

    /// `x`: [batch, tokens, hidden]; `causal`: [tokens, tokens], 0 on and below the
    /// diagonal, a large negative number above it.
    fn forward(&self, x: &Tensor, causal: &Tensor, differentiable: bool) -> Result<Tensor> {
        let (b, t, h) = x.dims3()?;
        let d = h / self.heads;
        let qkv = self.c_attn.forward(&self.ln_1.forward(x, differentiable)?, differentiable)?;
        let split = |i: usize| qkv.narrow(2, i * h, h)?.reshape((b, t, self.heads, d))?.transpose(1, 2)?.contiguous();
        let (q, k, v) = (split(0)?, split(1)?, split(2)?);
        let scores = (q.matmul(&k.t()?)? * (1.0 / (d as f64).sqrt()))?.broadcast_add(causal)?;
        let probs = if differentiable {
            candle_nn::ops::softmax(&scores, D::Minus1)?
        } else {
            candle_nn::ops::softmax_last_dim(&scores)?
        };
        let ctx = probs.matmul(&v)?.transpose(1, 2)?.contiguous()?.reshape((b, t, h))?;
        let x = (x + self.attn_proj.forward(&ctx, differentiable)?)?;
        // GPT-2's `gelu_new` is the tanh approximation, candle's `gelu`.
        let m = self.c_fc.forward(&self.ln_2.forward(&x, differentiable)?, differentiable)?.gelu()?;
        x + self.mlp_proj.forward(&m, differentiable)?
    }
}

/// The encoder: token and position embeddings, `n_layer` pre-norm blocks, final layer
/// norm, last real token's state, L2 norm.
pub struct Gpt2 {
    wte: Embedding,
    wpe: Embedding,
    blocks: Vec<Block>,
    ln_f: LayerNorm,
    pub config: Config,
}

impl Gpt2 {
    /// `vb` at the model's root: `wte.weight`, `h.0.attn.c_attn.weight`, ... (a file
    /// saved from GPT2LMHeadModel prefixes them with `transformer.`; pass `vb.pp` then).
    pub fn new(cfg: &Config, vb: VarBuilder) -> Result<Self> {
        let h = cfg.n_embd;
        if cfg.n_head == 0 || !h.is_multiple_of(cfg.n_head) {
            bail!("gpt2 config: n_embd {h} is not a multiple of n_head {}", cfg.n_head);
        }
        Ok(Self {
            wte: candle_nn::embedding(cfg.vocab_size, h, vb.pp("wte"))?,
            wpe: candle_nn::embedding(cfg.n_positions, h, vb.pp("wpe"))?,
            blocks: (0..cfg.n_layer).map(|i| Block::new(cfg, vb.pp("h").pp(i))).collect::<Result<_>>()?,
            ln_f: LayerNorm::new(h, cfg.layer_norm_epsilon, vb.pp("ln_f"))?,
            config: cfg.clone(),
        })
    }

    /// `ids`, `mask`: [batch, tokens] u32, right-padded (mask 1 for real tokens, 0 for
    /// padding; every row has at least one real token). Returns [batch, hidden] f32,
    /// each row of unit length.
    pub fn forward(&self, ids: &Tensor, mask: &Tensor, differentiable: bool) -> Result<Tensor> {
        crate::unit_rows(&self.pool(ids, mask, differentiable)?)
    }

    /// [`Gpt2::forward`] before the normalisation: the final layer norm's output at each
    /// text's last real token (the SkillAggregation authors' context vector).
    pub fn pool(&self, ids: &Tensor, mask: &Tensor, differentiable: bool) -> Result<Tensor> {
        let t = ids.dim(1)?;
        if t > self.config.n_positions {
            bail!("gpt2: {t} tokens, the model has {} positions", self.config.n_positions);
        }
        let dev = ids.device();
        let positions = Tensor::arange(0u32, t as u32, dev)?;
        let mut x = self.wte.forward(ids)?.broadcast_add(&self.wpe.forward(&positions)?)?;
        let causal: Vec<f32> = (0..t * t).map(|i| if i % t > i / t { -1e9 } else { 0.0 }).collect();
        let causal = Tensor::from_vec(causal, (t, t), dev)?;
        for block in &self.blocks {
            x = block.forward(&x, &causal, differentiable)?;
        }
        let x = self.ln_f.forward(&x, differentiable)?;
        let lengths: Vec<u32> = mask.to_dtype(DType::U32)?.sum(1)?.to_vec1()?;
        let last = lengths
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                if n == 0 {
                    bail!("gpt2: text {i} of the batch has no tokens");
                }
                x.get(i)?.get(n as usize - 1)
            })
            .collect::<Result<Vec<_>>>()?;
        Tensor::stack(&last, 0)
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use candle_core::Device;
    use candle_nn::VarMap;

    fn fixture() -> std::path::PathBuf {
        crate::crate_dir().join("testdata/tiny-gpt2")
    }

    fn load_fixture() -> Gpt2 {
        let dir = fixture();
        let cfg: Config = crate::golden::read_config(&dir);
        let vb =
            unsafe { VarBuilder::from_mmaped_safetensors(&[dir.join("model.safetensors")], DType::F32, &Device::Cpu) }
                .unwrap();
        Gpt2::new(&cfg, vb).unwrap()
    }

    /// Golden numbers from an independent NumPy implementation of GPT-2's forward pass
    /// (scripts/make-encoder-fixtures.py wrote the tiny random model and them), in both
    /// modes, with a padded batch.
    #[test]
    fn last_token_states_match_an_independent_implementation() {
        let model = load_fixture();
        let golden = crate::golden::read_json(&fixture());
        let seqs: Vec<Vec<u32>> = serde_json::from_value(golden["ids"].clone()).unwrap();
        let want: Vec<Vec<f32>> = serde_json::from_value(golden["embeddings"].clone()).unwrap();
        let t = seqs.iter().map(Vec::len).max().unwrap();
        let ids: Vec<u32> =
            seqs.iter().flat_map(|s| s.iter().copied().chain(std::iter::repeat_n(0, t - s.len()))).collect();
        let mask: Vec<u32> = seqs
            .iter()
            .flat_map(|s| std::iter::repeat_n(1, s.len()).chain(std::iter::repeat_n(0, t - s.len())))
            .collect();
        let ids = Tensor::from_vec(ids, (seqs.len(), t), &Device::Cpu).unwrap();
        let mask = Tensor::from_vec(mask, (seqs.len(), t), &Device::Cpu).unwrap();
        for differentiable in [false, true] {
            let got: Vec<Vec<f32>> = model.forward(&ids, &mask, differentiable).unwrap().to_vec2().unwrap();
            let d = crate::golden::max_diff(&got, &want);
            assert!(d < 1e-4, "differentiable={differentiable}: off by {d}: {got:?} vs {want:?}");
        }
    }

    /// The gradient of every weight against the same independent implementation's
    /// (float64 finite differences), each sequence a batch of its own.
    #[test]
    fn gradients_match_an_independent_implementation() {
        let dir = fixture();
        let cfg: Config = crate::golden::read_config(&dir);
        let mut vm = VarMap::new();
        let model = Gpt2::new(&cfg, VarBuilder::from_varmap(&vm, DType::F32, &Device::Cpu)).unwrap();
        crate::golden::load_weights(&dir, &mut vm);
        let golden = crate::golden::read_json(&dir);
        let seqs: Vec<Vec<u32>> = serde_json::from_value(golden["ids"].clone()).unwrap();
        let target: Vec<Vec<f32>> = serde_json::from_value(golden["target"].clone()).unwrap();
        let mut loss = Tensor::zeros((), DType::F32, &Device::Cpu).unwrap();
        for (s, t) in seqs.iter().zip(&target) {
            let ids = Tensor::new(s.as_slice(), &Device::Cpu).unwrap().unsqueeze(0).unwrap();
            let out = model.forward(&ids, &ids.ones_like().unwrap(), true).unwrap();
            let t = Tensor::new(t.as_slice(), &Device::Cpu).unwrap().unsqueeze(0).unwrap();
            loss = (loss + (out * t).unwrap().sum_all().unwrap()).unwrap();
        }
        crate::golden::assert_gradients_match(&dir, &vm, &loss);
    }

    #[test]
    fn padding_does_not_change_an_embedding() {
        let model = load_fixture();
        let padded = model
            .forward(
                &Tensor::new(&[[3u32, 9, 4, 0, 0]], &Device::Cpu).unwrap(),
                &Tensor::new(&[[1u32, 1, 1, 0, 0]], &Device::Cpu).unwrap(),
                false,
            )
            .unwrap();
        let alone = model
            .forward(
                &Tensor::new(&[[3u32, 9, 4]], &Device::Cpu).unwrap(),
                &Tensor::new(&[[1u32, 1, 1]], &Device::Cpu).unwrap(),
                false,
            )
            .unwrap();
        let d = (padded - alone).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(d < 1e-5, "padding changed the embedding by {d}");
        let too_long = Tensor::zeros((1, model.config.n_positions + 1), DType::U32, &Device::Cpu).unwrap();
        let err = model.forward(&too_long, &too_long.ones_like().unwrap(), false).err().unwrap();
        assert!(err.to_string().contains("positions"), "{err}");
    }

    /// Fine-tuning GPT-2 needs a gradient on every parameter, as for BERT.
    #[test]
    fn every_parameter_gets_a_gradient_in_differentiable_mode() {
        let cfg = Config {
            vocab_size: 20,
            n_positions: 8,
            n_embd: 8,
            n_layer: 2,
            n_head: 2,
            n_inner: None,
            layer_norm_epsilon: 1e-5,
        };
        let vm = VarMap::new();
        let model = Gpt2::new(&cfg, VarBuilder::from_varmap(&vm, DType::F32, &Device::Cpu)).unwrap();
        // Every token id and position occurs, so every embedding row can get a gradient.
        let ids = Tensor::from_vec((0..16u32).chain(4..20).collect(), (4, 8), &Device::Cpu).unwrap();
        let mask = Tensor::ones((4, 8), DType::U32, &Device::Cpu).unwrap();
        let target = Tensor::ones((4, 8), DType::F32, &Device::Cpu).unwrap();
        let out = model.forward(&ids, &mask, true).unwrap();
        let grads = (out - target).unwrap().sqr().unwrap().sum_all().unwrap().backward().unwrap();
        let vars = vm.data().lock().unwrap();
        let missing: Vec<&String> = vars
            .iter()
            .filter(|(_, v)| {
                grads
                    .get(v.as_tensor())
                    .is_none_or(|g| g.abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap() == 0.0)
            })
            .map(|(n, _)| n)
            .collect();
        assert!(missing.is_empty(), "no gradient for {missing:?}");
        assert_eq!(vars.len(), 4 + 12 * cfg.n_layer, "wte, wpe, ln_f (2) and 12 tensors per block");
    }
}
