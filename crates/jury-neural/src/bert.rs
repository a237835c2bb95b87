//! BERT encoder (all-MiniLM-L6-v2 layout, weight names without a `bert.` prefix): token
//! ids to one mean-pooled, L2-normalised vector per text.
//!
//! Invariant: with `differentiable = true` every op has a backward pass (`kernels_grad`'s
//! kernels, or plain candle expressions; candle 0.10's fused `layer_norm` and
//! `softmax_last_dim` have none and would silently stop gradients).
//! Candle's and `kernels`' backward-less forms are used only when nothing trains through
//! the encoder.

use candle_core::{DType, Module, Result, Tensor};
use candle_nn::{Embedding, Linear, VarBuilder};

use crate::kernels;
use crate::train::kernels_grad;

/// The fields of a BERT `config.json` this encoder reads.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
}

fn default_eps() -> f64 {
    1e-12
}

pub(crate) struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
}

impl LayerNorm {
    pub(crate) fn new(size: usize, eps: f64, vb: VarBuilder) -> Result<Self> {
        let weight = vb.get_with_hints(size, "weight", candle_nn::Init::Const(1.0))?;
        Ok(Self { weight, bias: vb.get_with_hints(size, "bias", candle_nn::Init::Const(0.0))?, eps })
    }

    pub(crate) fn forward(&self, x: &Tensor, differentiable: bool) -> Result<Tensor> {
        if !differentiable {
            return candle_nn::ops::layer_norm(x, &self.weight, &self.bias, self.eps as f32);
        }
        kernels_grad::layer_norm(x, &self.weight, &self.bias, self.eps)
    }
}

fn linear(i: usize, o: usize, vb: VarBuilder) -> Result<Linear> {
    candle_nn::linear(i, o, vb)
}

struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    out_norm: LayerNorm,
    heads: usize,
}

impl Layer {
    fn new(cfg: &Config, vb: VarBuilder) -> Result<Self> {
        let h = cfg.hidden_size;
        let att = vb.pp("attention");
        Ok(Self {
            query: linear(h, h, att.pp("self").pp("query"))?,
            key: linear(h, h, att.pp("self").pp("key"))?,
            value: linear(h, h, att.pp("self").pp("value"))?,
            attn_out: linear(h, h, att.pp("output").pp("dense"))?,
            attn_norm: LayerNorm::new(h, cfg.layer_norm_eps, att.pp("output").pp("LayerNorm"))?,
            intermediate: linear(h, cfg.intermediate_size, vb.pp("intermediate").pp("dense"))?,
            output: linear(cfg.intermediate_size, h, vb.pp("output").pp("dense"))?,
            out_norm: LayerNorm::new(h, cfg.layer_norm_eps, vb.pp("output").pp("LayerNorm"))?,
            heads: cfg.num_attention_heads,
        })
    }

    /// `x`: [batch, tokens, hidden]; `mask`: [batch, tokens] f32 (1 real, 0 padding).
    fn forward(&self, x: &Tensor, mask: &Tensor, differentiable: bool) -> Result<Tensor> {
        let (b, t, h) = x.dims3()?;
        let d = h / self.heads;
        let lin =
            |l: &Linear, x: &Tensor| if differentiable { kernels_grad::linear(l, x) } else { kernels::linear(l, x) };
        let split = |y: Tensor| -> Result<Tensor> { y.reshape((b, t, self.heads, d))?.transpose(1, 2)?.contiguous() };
        let q = split(lin(&self.query, x)?)?;
        let k = split(lin(&self.key, x)?)?;
        let v = split(lin(&self.value, x)?)?;
        let scores = q.matmul(&k.t()?)?;
        let scale = 1.0 / (d as f64).sqrt();
        let probs = if differentiable {
            kernels_grad::masked_softmax(&scores, mask, scale)?
        } else {
            kernels::masked_softmax(&scores, mask, scale)?
        };
        let ctx = probs.matmul(&v)?.transpose(1, 2)?.contiguous()?.reshape((b, t, h))?;
        let a = self.attn_norm.forward(&(lin(&self.attn_out, &ctx)? + x)?, differentiable)?;
        let pre = lin(&self.intermediate, &a)?;
        let inter = if differentiable { kernels_grad::gelu_erf(&pre)? } else { kernels::gelu_erf(&pre)? };
        self.out_norm.forward(&(lin(&self.output, &inter)? + a)?, differentiable)
    }
}

/// The encoder: embeddings, `num_hidden_layers` layers, masked mean pooling, L2 norm.
pub struct Bert {
    word: Embedding,
    position: Embedding,
    token_type: Embedding,
    norm: LayerNorm,
    layers: Vec<Layer>,
    pub config: Config,
}

impl Bert {
    pub fn new(cfg: &Config, vb: VarBuilder) -> Result<Self> {
        let e = vb.pp("embeddings");
        let h = cfg.hidden_size;
        Ok(Self {
            word: candle_nn::embedding(cfg.vocab_size, h, e.pp("word_embeddings"))?,
            position: candle_nn::embedding(cfg.max_position_embeddings, h, e.pp("position_embeddings"))?,
            token_type: candle_nn::embedding(cfg.type_vocab_size, h, e.pp("token_type_embeddings"))?,
            norm: LayerNorm::new(h, cfg.layer_norm_eps, e.pp("LayerNorm"))?,
            layers: (0..cfg.num_hidden_layers)
                .map(|i| Layer::new(cfg, vb.pp("encoder").pp("layer").pp(i)))
                .collect::<Result<_>>()?,
            config: cfg.clone(),
        })
    }

    /// `ids`, `mask`: [batch, tokens] u32 (mask 1 for real tokens, 0 for padding).
    /// Returns [batch, hidden] f32, each row of unit length (sentence-transformers'
    /// normalised mean pooling).
    pub fn forward(&self, ids: &Tensor, mask: &Tensor, differentiable: bool) -> Result<Tensor> {
        crate::unit_rows(&self.pool(ids, mask, differentiable)?)
    }

    /// [`Bert::forward`] before the normalisation: the masked mean of the last layer's
    /// token states, as the model defines its sentence vector.
    pub fn pool(&self, ids: &Tensor, mask: &Tensor, differentiable: bool) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let dev = ids.device();
        let positions = Tensor::arange(0u32, t as u32, dev)?.unsqueeze(0)?.broadcast_as((b, t))?.contiguous()?;
        let types = Tensor::zeros((b, t), DType::U32, dev)?;
        let x = ((self.word.forward(ids)? + self.position.forward(&positions)?)? + self.token_type.forward(&types)?)?;
        let mut x = self.norm.forward(&x, differentiable)?;
        let maskf = mask.to_dtype(DType::F32)?;
        for layer in &self.layers {
            x = layer.forward(&x, &maskf, differentiable)?;
        }
        let m = maskf.unsqueeze(2)?;
        x.broadcast_mul(&m)?.sum(1)?.broadcast_div(&m.sum(1)?.clamp(1e-9, f64::MAX)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;
    use candle_nn::{VarBuilder, VarMap};

    fn tiny() -> Config {
        Config {
            vocab_size: 50,
            hidden_size: 16,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            intermediate_size: 32,
            max_position_embeddings: 32,
            type_vocab_size: 2,
            layer_norm_eps: 1e-12,
        }
    }

    fn batch() -> (Tensor, Tensor) {
        let ids = Tensor::new(&[[1u32, 5, 7, 9, 2], [1, 4, 2, 0, 0]], &Device::Cpu).unwrap();
        let mask = Tensor::new(&[[1u32, 1, 1, 1, 1], [1, 1, 1, 0, 0]], &Device::Cpu).unwrap();
        (ids, mask)
    }

    /// Fine-tuning needs a gradient on every encoder parameter; candle's fused layer norm
    /// and softmax have no backward pass, which is why `differentiable` exists.
    #[test]
    fn every_parameter_gets_a_gradient_in_differentiable_mode() {
        let vm = VarMap::new();
        let vb = VarBuilder::from_varmap(&vm, DType::F32, &Device::Cpu);
        let bert = Bert::new(&tiny(), vb).unwrap();
        let (ids, mask) = batch();
        let target = Tensor::ones((2, 16), DType::F32, &Device::Cpu).unwrap();
        let loss = |differentiable: bool| {
            let out = bert.forward(&ids, &mask, differentiable).unwrap();
            (out - &target).unwrap().sqr().unwrap().sum_all().unwrap()
        };
        let grads = loss(true).backward().unwrap();
        let vars = vm.data().lock().unwrap();
        let mut missing = Vec::new();
        for (name, var) in vars.iter() {
            // Token-type row 1 and unused vocabulary rows get zero gradient by design;
            // the whole tensor must still receive some.
            let norm =
                grads.get(var.as_tensor()).map(|g| g.abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap());
            if norm.is_none_or(|n| n == 0.0) {
                missing.push(name.clone());
            }
        }
        assert!(missing.is_empty(), "no gradient for {missing:?}");
        let fused = loss(false).backward().unwrap();
        let ln = vars.iter().find(|(n, _)| n.as_str() == "embeddings.LayerNorm.weight").unwrap().1;
        assert!(fused.get(ln.as_tensor()).is_none(), "fused layer norm unexpectedly has a backward pass now");
    }

    /// Golden numbers from an independent float64 NumPy implementation of the encoder
    /// (`scripts/make-encoder-fixtures.py` wrote the tiny random model and them): a
    /// padded batch's embeddings in both modes, and the gradient of every weight, the
    /// check that the hand-written backward kernels train the right model.
    #[test]
    fn embeddings_and_gradients_match_an_independent_implementation() {
        let dir = crate::crate_dir().join("testdata/tiny-bert");
        let cfg: Config = crate::golden::read_config(&dir);
        let mut vm = VarMap::new();
        let bert = Bert::new(&cfg, VarBuilder::from_varmap(&vm, DType::F32, &Device::Cpu)).unwrap();
        crate::golden::load_weights(&dir, &mut vm);
        let golden = crate::golden::read_json(&dir);
        let rows = |key: &str| -> Vec<Vec<f32>> { serde_json::from_value(golden[key].clone()).unwrap() };
        let ints = |key: &str| -> Tensor {
            let v: Vec<Vec<u32>> = serde_json::from_value(golden[key].clone()).unwrap();
            Tensor::new(v, &Device::Cpu).unwrap()
        };
        let (ids, mask) = (ints("ids"), ints("mask"));
        for differentiable in [false, true] {
            let got: Vec<Vec<f32>> = bert.forward(&ids, &mask, differentiable).unwrap().to_vec2().unwrap();
            let d = crate::golden::max_diff(&got, &rows("embeddings"));
            assert!(d < 2e-5, "differentiable={differentiable}: embeddings off by {d}");
        }
        let target = Tensor::new(rows("target"), &Device::Cpu).unwrap();
        let loss = (bert.forward(&ids, &mask, true).unwrap() * target).unwrap().sum_all().unwrap();
        crate::golden::assert_gradients_match(&dir, &vm, &loss);
    }

    #[test]
    fn padding_does_not_change_an_embedding_and_rows_are_unit_length() {
        let vm = VarMap::new();
        let bert = Bert::new(&tiny(), VarBuilder::from_varmap(&vm, DType::F32, &Device::Cpu)).unwrap();
        let (ids, mask) = batch();
        let both = bert.forward(&ids, &mask, false).unwrap();
        let alone = bert
            .forward(
                &Tensor::new(&[[1u32, 4, 2]], &Device::Cpu).unwrap(),
                &Tensor::new(&[[1u32, 1, 1]], &Device::Cpu).unwrap(),
                false,
            )
            .unwrap();
        let d = (both.get(1).unwrap() - alone.get(0).unwrap())
            .unwrap()
            .abs()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(d < 1e-5, "padded and unpadded embeddings differ by {d}");
        let norms: Vec<f32> = both.sqr().unwrap().sum(1).unwrap().to_vec1().unwrap();
        assert!(norms.iter().all(|n| (n - 1.0).abs() < 1e-5), "{norms:?}");
        let slow = bert.forward(&ids, &mask, true).unwrap();
        let diff =
            (slow - &both).unwrap().abs().unwrap().max_keepdim(1).unwrap().max(0).unwrap().to_vec1::<f32>().unwrap()[0];
        assert!(diff < 1e-4, "fused and differentiable forms differ by {diff}");
    }
}
