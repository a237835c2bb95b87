//! BERT encoder (all-MiniLM-L6-v2 layout, weight names without a `bert.` prefix): token
//! ids to one mean-pooled, L2-normalised vector per text.
//!
//! Invariant: with `differentiable = true` every op has a backward pass (layer norm and
//! softmax are written out; candle 0.10's fused `layer_norm` and `softmax_last_dim`
//! have none and would silently stop gradients, SPEC.md section 2). The fused forms are
//! used only when nothing trains through the encoder.

use candle_core::{CpuStorage, CustomOp1, D, DType, Layout, Module, Result, Shape, Tensor};
use candle_nn::{Embedding, Linear, VarBuilder};
use rayon::prelude::*;

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

struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
}

impl LayerNorm {
    fn new(size: usize, eps: f64, vb: VarBuilder) -> Result<Self> {
        let weight = vb.get_with_hints(size, "weight", candle_nn::Init::Const(1.0))?;
        Ok(Self { weight, bias: vb.get_with_hints(size, "bias", candle_nn::Init::Const(0.0))?, eps })
    }

    fn forward(&self, x: &Tensor, differentiable: bool) -> Result<Tensor> {
        if !differentiable {
            return candle_nn::ops::layer_norm(x, &self.weight, &self.bias, self.eps as f32);
        }
        let mean = x.mean_keepdim(D::Minus1)?;
        let centred = x.broadcast_sub(&mean)?;
        let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
        let normed = centred.broadcast_div(&(var + self.eps)?.sqrt()?)?;
        normed.broadcast_mul(&self.weight)?.broadcast_add(&self.bias)
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

    /// `x`: [batch, tokens, hidden]; `mask_bias`: [batch, 1, 1, tokens] (0 or -1e4).
    fn forward(&self, x: &Tensor, mask_bias: &Tensor, differentiable: bool) -> Result<Tensor> {
        let (b, t, h) = x.dims3()?;
        let d = h / self.heads;
        let split = |y: Tensor| -> Result<Tensor> { y.reshape((b, t, self.heads, d))?.transpose(1, 2)?.contiguous() };
        let q = split(self.query.forward(x)?)?;
        let k = split(self.key.forward(x)?)?;
        let v = split(self.value.forward(x)?)?;
        let scores = (q.matmul(&k.t()?)? / (d as f64).sqrt())?.broadcast_add(mask_bias)?;
        let probs = if differentiable {
            candle_nn::ops::softmax(&scores, D::Minus1)?
        } else {
            candle_nn::ops::softmax_last_dim(&scores)?
        };
        let ctx = probs.matmul(&v)?.transpose(1, 2)?.contiguous()?.reshape((b, t, h))?;
        let a = self.attn_norm.forward(&(self.attn_out.forward(&ctx)? + x)?, differentiable)?;
        let inter = gelu_erf(&self.intermediate.forward(&a)?, differentiable)?;
        self.out_norm.forward(&(self.output.forward(&inter)? + a)?, differentiable)
    }
}

/// Exact-form GELU, x * Phi(x). candle 0.10's `gelu_erf` runs element by element on one
/// thread through an f64 erf and was the largest single cost of a frozen forward pass on
/// a 2-core CPU; `FastGeluErf` computes the same function in parallel chunks. It has no
/// backward pass, so the differentiable (fine-tuning) form keeps candle's op.
fn gelu_erf(x: &Tensor, differentiable: bool) -> Result<Tensor> {
    if differentiable || !x.device().is_cpu() || x.dtype() != DType::F32 {
        return x.gelu_erf();
    }
    x.apply_op1_no_bwd(&FastGeluErf)
}

struct FastGeluErf;

/// erf by Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7, under f32's
/// resolution of the values it feeds).
fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = t * (0.254_829_6 + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152 + t * 1.061_405_4))));
    let y = 1.0 - poly * (-a * a).exp();
    y.copysign(x)
}

impl CustomOp1 for FastGeluErf {
    fn name(&self) -> &'static str {
        "fast-gelu-erf"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(v) = storage else {
            candle_core::bail!("fast-gelu-erf takes f32")
        };
        let src = match layout.contiguous_offsets() {
            Some((start, end)) => &v[start..end],
            None => candle_core::bail!("fast-gelu-erf takes a contiguous tensor"),
        };
        let mut out = vec![0f32; src.len()];
        out.par_chunks_mut(16_384).zip(src.par_chunks(16_384)).for_each(|(o, i)| {
            for (o, &x) in o.iter_mut().zip(i) {
                *o = 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2));
            }
        });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
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
    /// Returns [batch, hidden] f32, each row of unit length.
    pub fn forward(&self, ids: &Tensor, mask: &Tensor, differentiable: bool) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let dev = ids.device();
        let positions = Tensor::arange(0u32, t as u32, dev)?.unsqueeze(0)?.broadcast_as((b, t))?.contiguous()?;
        let types = Tensor::zeros((b, t), DType::U32, dev)?;
        let x = ((self.word.forward(ids)? + self.position.forward(&positions)?)? + self.token_type.forward(&types)?)?;
        let mut x = self.norm.forward(&x, differentiable)?;
        let maskf = mask.to_dtype(DType::F32)?;
        let mask_bias = ((maskf.clone() - 1.0)? * 1e4)?.reshape((b, 1, 1, t))?;
        for layer in &self.layers {
            x = layer.forward(&x, &mask_bias, differentiable)?;
        }
        let m = maskf.unsqueeze(2)?;
        let pooled = x.broadcast_mul(&m)?.sum(1)?.broadcast_div(&m.sum(1)?.clamp(1e-9, f64::MAX)?)?;
        let norm = pooled.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
        pooled.broadcast_div(&norm)
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

    #[test]
    fn fast_gelu_matches_candles_exact_gelu() {
        let x = Tensor::arange(-8000i64, 8000, &Device::Cpu).unwrap().to_dtype(DType::F32).unwrap();
        let x = (x / 1000.0).unwrap();
        let fast = gelu_erf(&x, false).unwrap();
        let exact = gelu_erf(&x, true).unwrap();
        let diff = (fast - exact).unwrap().abs().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
        assert!(diff < 2e-6, "fast GELU differs from candle's by {diff}");
        assert!(erf(0.0).abs() < 1e-6 && erf(-1.0) < -0.84 && erf(5.0) > 0.999_999);
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
