//! The llama-family decoder of GGUF judges (Llama and SmolLM2, Qwen2 and Qwen2.5) for the
//! `candle` engine: an in-process judge without mistral.rs's dependency tree.
//!
//! Ports candle-transformers 0.10.2's `models/quantized_llama.rs` and
//! `models/quantized_qwen2.rs`
//! (<https://github.com/huggingface/candle/tree/0.10.2/candle-transformers/src/models>,
//! MIT or Apache-2.0): token embeddings, per layer RMSNorm, rotary attention with grouped
//! KV heads (Qwen2's q/k/v biases where the file has them), a SwiGLU MLP, a final RMSNorm
//! and the output projection (the token embeddings where the file ties them).
//!
//! Invariants:
//! - rotary embeddings follow llama.cpp's layout per architecture: `llama` files store
//!   q and k permuted for interleaved pairs (`rope_i`), `qwen2` files for halves (`rope`);
//! - the KV cache holds the positions of the last sequence run; [`Model::forward`] from
//!   position `start` keeps the first `start` of them, so a prompt sharing a prefix with
//!   the previous one computes only its own tokens, and memory never grows past one
//!   sequence;
//! - no I/O: weights come through [`Weights`].

use candle_core::quantized::{QMatMul, QTensor, gguf_file};
use candle_core::{DType, Device, IndexOp, Module, Result, Tensor, bail};
use candle_nn::Embedding;

/// Which llama.cpp architecture a file is, and so how its rotary embedding is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arch {
    /// `llama` (Llama 1-2, SmolLM2, TinyLlama): interleaved rotary pairs.
    Llama,
    /// `qwen2` (Qwen2, Qwen2.5): rotary halves, q/k/v biases.
    Qwen2,
}

impl Arch {
    fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
        }
    }
}

/// The hyper-parameters a GGUF file's metadata gives.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Config {
    pub(crate) arch: Arch,
    pub(crate) n_layer: usize,
    pub(crate) n_head: usize,
    pub(crate) n_kv_head: usize,
    pub(crate) hidden: usize,
    pub(crate) head_dim: usize,
    /// Dimensions of each head that rotate (all of them in these architectures).
    pub(crate) rope_dim: usize,
    pub(crate) rope_base: f32,
    pub(crate) rms_eps: f64,
    pub(crate) context_length: usize,
}

impl Config {
    /// Reads the metadata of a GGUF file; an architecture or feature this decoder does not
    /// compute (mixtures of experts, Llama 3's scaled rotary frequencies) is an error
    /// naming it, never a silently different model.
    pub(crate) fn from_gguf(ct: &gguf_file::Content) -> std::result::Result<Config, String> {
        let md = &ct.metadata;
        let arch = match md.get("general.architecture").map(|v| v.to_string()) {
            Some(Ok(a)) if a == "llama" => Arch::Llama,
            Some(Ok(a)) if a == "qwen2" => Arch::Qwen2,
            Some(Ok(a)) => {
                return Err(format!(
                    "architecture `{a}`: the candle engine computes `llama` and `qwen2` files only (use `engine: mistralrs`)"
                ));
            }
            _ => return Err("no `general.architecture` in the file's metadata".into()),
        };
        let key = |k: &str| format!("{}.{k}", arch.name());
        let get_u32 = |k: &str| -> std::result::Result<usize, String> {
            let k = key(k);
            md.get(&k)
                .ok_or_else(|| format!("no `{k}` in the file's metadata"))?
                .to_u32()
                .map(|v| v as usize)
                .map_err(|e| format!("`{k}`: {e}"))
        };
        if md.get(&key("expert_count")).and_then(|v| v.to_u32().ok()).unwrap_or(0) > 0 {
            return Err("a mixture of experts: the candle engine does not compute it (use `engine: mistralrs`)".into());
        }
        if ct.tensor_infos.contains_key("rope_freqs.weight") {
            return Err(
                "scaled rotary frequencies (`rope_freqs.weight`, Llama 3): the candle engine does not compute them (use `engine: mistralrs`)".into(),
            );
        }
        let n_head = get_u32("attention.head_count")?;
        let hidden = get_u32("embedding_length")?;
        if n_head == 0 || hidden % n_head != 0 {
            return Err(format!("{n_head} attention heads do not divide the embedding length {hidden}"));
        }
        let head_dim = hidden / n_head;
        let n_kv_head = get_u32("attention.head_count_kv").unwrap_or(n_head);
        if n_kv_head == 0 || n_head % n_kv_head != 0 {
            return Err(format!("{n_kv_head} KV heads do not divide {n_head} attention heads"));
        }
        let rope_dim = get_u32("rope.dimension_count").unwrap_or(head_dim);
        if rope_dim != head_dim {
            return Err(format!("a rotary dimension of {rope_dim} in heads of {head_dim}: not computed here"));
        }
        let f32_of = |k: &str| md.get(&key(k)).and_then(|v| v.to_f32().ok());
        let rms_eps = f32_of("attention.layer_norm_rms_epsilon")
            .ok_or_else(|| format!("no `{}` in the file's metadata", key("attention.layer_norm_rms_epsilon")))?;
        Ok(Config {
            arch,
            n_layer: get_u32("block_count")?,
            n_head,
            n_kv_head,
            hidden,
            head_dim,
            rope_dim,
            rope_base: f32_of("rope.freq_base").unwrap_or(10_000.0),
            rms_eps: rms_eps as f64,
            context_length: get_u32("context_length")?,
        })
    }
}

/// Where the decoder's tensors come from (a GGUF file, by its tensor names).
pub(crate) trait Weights {
    fn get(&mut self, name: &str) -> Result<QTensor>;
    fn has(&self, name: &str) -> bool;
}

struct RmsNorm {
    weight: Tensor,
    eps: f32,
}

impl RmsNorm {
    fn load(w: &mut dyn Weights, name: &str, eps: f64, device: &Device) -> Result<Self> {
        Ok(Self { weight: w.get(name)?.dequantize(device)?, eps: eps as f32 })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        candle_nn::ops::rms_norm(x, &self.weight, self.eps)
    }
}

struct Layer {
    attn_norm: RmsNorm,
    wq: QMatMul,
    wk: QMatMul,
    wv: QMatMul,
    /// q, k, v biases (Qwen2).
    biases: Option<(Tensor, Tensor, Tensor)>,
    wo: QMatMul,
    ffn_norm: RmsNorm,
    gate: QMatMul,
    up: QMatMul,
    down: QMatMul,
    kv: Option<(Tensor, Tensor)>,
}

/// A loaded decoder and its KV cache.
pub(crate) struct Model {
    cfg: Config,
    embed: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    output: QMatMul,
    cos: Tensor,
    sin: Tensor,
    /// Positions the KV cache holds.
    cached: usize,
}

impl Model {
    /// Builds the decoder from `cfg` and the weights by their llama.cpp names.
    pub(crate) fn load(cfg: &Config, w: &mut dyn Weights, device: &Device) -> Result<Self> {
        let embed_q = w.get("token_embd.weight")?;
        let embed = Embedding::new(embed_q.dequantize(device)?, cfg.hidden);
        // Tied embeddings: the output projection is the embedding matrix.
        let output = if w.has("output.weight") { w.get("output.weight")? } else { embed_q };
        let output = QMatMul::from_qtensor(output)?;
        let norm = RmsNorm::load(w, "output_norm.weight", cfg.rms_eps, device)?;
        let mut layers = Vec::with_capacity(cfg.n_layer);
        for i in 0..cfg.n_layer {
            let name = |t: &str| format!("blk.{i}.{t}");
            let mut mm = |t: &str| QMatMul::from_qtensor(w.get(&name(t))?);
            let (wq, wk, wv, wo) =
                (mm("attn_q.weight")?, mm("attn_k.weight")?, mm("attn_v.weight")?, mm("attn_output.weight")?);
            let (gate, up, down) = (mm("ffn_gate.weight")?, mm("ffn_up.weight")?, mm("ffn_down.weight")?);
            let biases = if w.has(&name("attn_q.bias")) {
                let mut b = |t: &str| w.get(&name(t))?.dequantize(device);
                Some((b("attn_q.bias")?, b("attn_k.bias")?, b("attn_v.bias")?))
            } else {
                None
            };
            layers.push(Layer {
                attn_norm: RmsNorm::load(w, &name("attn_norm.weight"), cfg.rms_eps, device)?,
                wq,
                wk,
                wv,
                biases,
                wo,
                ffn_norm: RmsNorm::load(w, &name("ffn_norm.weight"), cfg.rms_eps, device)?,
                gate,
                up,
                down,
                kv: None,
            });
        }
        let (cos, sin) = rotary_tables(cfg, device)?;
        Ok(Self { cfg: cfg.clone(), embed, layers, norm, output, cos, sin, cached: 0 })
    }

    /// The positions the KV cache holds (of the last sequence run).
    pub(crate) fn cached(&self) -> usize {
        self.cached
    }

    /// Runs `tokens` at positions `start..start + tokens.len()` over the first `start`
    /// positions of the cache, and returns the next-token logits after the last one
    /// (f32, the vocabulary's length). `start` must not exceed [`Model::cached`].
    pub(crate) fn forward(&mut self, tokens: &[u32], start: usize) -> Result<Tensor> {
        let seq = tokens.len();
        if seq == 0 {
            bail!("no tokens to run");
        }
        if start > self.cached {
            bail!("start {start} is past the {} cached positions", self.cached);
        }
        if start + seq > self.cfg.context_length {
            bail!("{} positions exceed the model's context of {}", start + seq, self.cfg.context_length);
        }
        let device = self.embed.embeddings().device().clone();
        let ids = Tensor::new(tokens, &device)?.unsqueeze(0)?;
        let mask = if seq > 1 { Some(causal_mask(seq, start, &device)?) } else { None };
        let cos = self.cos.narrow(0, start, seq)?;
        let sin = self.sin.narrow(0, start, seq)?;
        // Invalidated first: a failure below leaves no cache that a later call could
        // take for this sequence's.
        self.cached = 0;
        let mut x = self.embed.forward(&ids)?;
        for layer in &mut self.layers {
            let h = layer.attn_norm.forward(&x)?;
            let h = layer.attention(&self.cfg, &h, start, &cos, &sin, mask.as_ref())?;
            x = (x + h)?;
            let h = layer.ffn_norm.forward(&x)?;
            let h = layer.down.forward(&(candle_nn::ops::silu(&layer.gate.forward(&h)?)? * layer.up.forward(&h)?)?)?;
            x = (x + h)?;
        }
        self.cached = start + seq;
        let x = self.norm.forward(&x.i((.., seq - 1, ..))?)?;
        self.output.forward(&x)?.squeeze(0)?.to_dtype(DType::F32)
    }
}

impl Layer {
    fn attention(
        &mut self,
        cfg: &Config,
        x: &Tensor,
        start: usize,
        cos: &Tensor,
        sin: &Tensor,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (b, seq, hidden) = x.dims3()?;
        let (mut q, mut k, mut v) = (self.wq.forward(x)?, self.wk.forward(x)?, self.wv.forward(x)?);
        if let Some((bq, bk, bv)) = &self.biases {
            q = q.broadcast_add(bq)?;
            k = k.broadcast_add(bk)?;
            v = v.broadcast_add(bv)?;
        }
        let heads = |t: Tensor, n: usize| t.reshape((b, seq, n, cfg.head_dim))?.transpose(1, 2)?.contiguous();
        let (q, k, v) = (heads(q, cfg.n_head)?, heads(k, cfg.n_kv_head)?, heads(v, cfg.n_kv_head)?);
        let rotate = |t: &Tensor| match cfg.arch {
            Arch::Llama => candle_nn::rotary_emb::rope_i(t, cos, sin),
            Arch::Qwen2 => candle_nn::rotary_emb::rope(t, cos, sin),
        };
        let (q, k) = (rotate(&q)?, rotate(&k)?);
        let (k, v) = match (&self.kv, start) {
            (Some((ck, cv)), s) if s > 0 => {
                (Tensor::cat(&[&ck.narrow(2, 0, s)?, &k], 2)?, Tensor::cat(&[&cv.narrow(2, 0, s)?, &v], 2)?)
            }
            _ => (k, v),
        };
        self.kv = Some((k.clone(), v.clone()));
        let rep = cfg.n_head / cfg.n_kv_head;
        let (k, v) = (repeat_kv(k, rep)?, repeat_kv(v, rep)?);
        let att = (q.matmul(&k.t()?)? / (cfg.head_dim as f64).sqrt())?;
        let att = match mask {
            Some(m) => att.broadcast_add(m)?,
            None => att,
        };
        let att = candle_nn::ops::softmax_last_dim(&att)?;
        let y = att.matmul(&v.contiguous()?)?.transpose(1, 2)?.reshape((b, seq, hidden))?;
        self.wo.forward(&y)
    }
}

/// Each KV head repeated for the query heads that share it.
fn repeat_kv(x: Tensor, rep: usize) -> Result<Tensor> {
    if rep == 1 {
        return Ok(x);
    }
    let (b, n_kv, seq, d) = x.dims4()?;
    Tensor::cat(&vec![&x; rep], 2)?.reshape((b, n_kv * rep, seq, d))
}

/// An additive mask: 0 where query `i` (at position `start + i`) may see key `j`,
/// minus infinity where `j` is after it.
fn causal_mask(seq: usize, start: usize, device: &Device) -> Result<Tensor> {
    let kv = start + seq;
    let m: Vec<f32> =
        (0..seq).flat_map(|i| (0..kv).map(move |j| if j > start + i { f32::NEG_INFINITY } else { 0.0 })).collect();
    Tensor::from_slice(&m, (seq, kv), device)
}

/// cos and sin of every position's rotation angles, `[context, rope_dim / 2]`.
fn rotary_tables(cfg: &Config, device: &Device) -> Result<(Tensor, Tensor)> {
    let theta: Vec<f32> =
        (0..cfg.rope_dim).step_by(2).map(|i| 1f32 / cfg.rope_base.powf(i as f32 / cfg.rope_dim as f32)).collect();
    let theta = Tensor::new(theta.as_slice(), device)?;
    let angles = Tensor::arange(0, cfg.context_length as u32, device)?
        .to_dtype(DType::F32)?
        .reshape((cfg.context_length, 1))?
        .broadcast_mul(&theta.unsqueeze(0)?)?;
    Ok((angles.cos()?, angles.sin()?))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn the_mask_lets_each_position_see_itself_and_what_came_before() {
        let m = causal_mask(2, 3, &Device::Cpu).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(m[0], [0.0, 0.0, 0.0, 0.0, f32::NEG_INFINITY]);
        assert_eq!(m[1], [0.0; 5]);
    }

    #[test]
    fn rotation_angles_follow_the_base() {
        let cfg = Config {
            arch: Arch::Llama,
            n_layer: 1,
            n_head: 1,
            n_kv_head: 1,
            hidden: 4,
            head_dim: 4,
            rope_dim: 4,
            rope_base: 100.0,
            rms_eps: 1e-5,
            context_length: 3,
        };
        let (cos, _) = rotary_tables(&cfg, &Device::Cpu).unwrap();
        let cos = cos.to_vec2::<f32>().unwrap();
        // Position 2, pair 1: angle 2 / 100^(2/4) = 0.2.
        assert!((cos[2][1] - 0.2f32.cos()).abs() < 1e-6);
        assert_eq!(cos[0], [1.0, 1.0]);
    }

    /// A naive f64 decoder written from the architecture's definition, for the golden
    /// numbers: weights `[out, in]`, rotary pairs interleaved (`llama`) or halves
    /// (`qwen2`), grouped KV heads, tied embeddings.
    struct Naive {
        cfg: Config,
        w: HashMap<String, (Vec<usize>, Vec<f64>)>,
    }

    impl Naive {
        fn mat(&self, name: &str, x: &[f64]) -> Vec<f64> {
            let (shape, w) = &self.w[name];
            let (rows, cols) = (shape[0], shape[1]);
            assert_eq!(cols, x.len(), "{name}");
            (0..rows).map(|r| (0..cols).map(|c| w[r * cols + c] * x[c]).sum()).collect()
        }

        fn vec(&self, name: &str) -> &[f64] {
            &self.w[name].1
        }

        fn norm(&self, name: &str, x: &[f64]) -> Vec<f64> {
            let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
            let s = 1.0 / (ms + self.cfg.rms_eps).sqrt();
            x.iter().zip(self.vec(name)).map(|(v, g)| v * s * g).collect()
        }

        fn rotate(&self, head: &mut [f64], pos: usize) {
            let d = head.len();
            for j in 0..d / 2 {
                let theta = pos as f64 / (self.cfg.rope_base as f64).powf(2.0 * j as f64 / d as f64);
                let (a, b) = match self.cfg.arch {
                    Arch::Llama => (2 * j, 2 * j + 1),
                    Arch::Qwen2 => (j, j + d / 2),
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * theta.cos() - x1 * theta.sin();
                head[b] = x0 * theta.sin() + x1 * theta.cos();
            }
        }

        fn logits(&self, tokens: &[u32]) -> Vec<f64> {
            let c = &self.cfg;
            let (hd, rep) = (c.head_dim, c.n_head / c.n_kv_head);
            let (emb_shape, emb) = &self.w["token_embd.weight"];
            let mut xs: Vec<Vec<f64>> = tokens
                .iter()
                .map(|&t| emb[t as usize * emb_shape[1]..(t as usize + 1) * emb_shape[1]].to_vec())
                .collect();
            for l in 0..c.n_layer {
                let n = |t: &str| format!("blk.{l}.{t}");
                let mut qs = Vec::new();
                let mut ks = Vec::new();
                let mut vs = Vec::new();
                for (pos, x) in xs.iter().enumerate() {
                    let h = self.norm(&n("attn_norm.weight"), x);
                    let proj = |w: &str, b: &str| -> Vec<f64> {
                        let mut y = self.mat(&n(w), &h);
                        if let Some((_, bias)) = self.w.get(&n(b)) {
                            y.iter_mut().zip(bias).for_each(|(y, b)| *y += b);
                        }
                        y
                    };
                    let (mut q, mut k) = (proj("attn_q.weight", "attn_q.bias"), proj("attn_k.weight", "attn_k.bias"));
                    q.chunks_mut(hd).for_each(|h| self.rotate(h, pos));
                    k.chunks_mut(hd).for_each(|h| self.rotate(h, pos));
                    qs.push(q);
                    ks.push(k);
                    vs.push(proj("attn_v.weight", "attn_v.bias"));
                }
                for i in 0..xs.len() {
                    let mut out = vec![0.0; c.hidden];
                    for head in 0..c.n_head {
                        let kvh = head / rep;
                        let q = &qs[i][head * hd..(head + 1) * hd];
                        let scores: Vec<f64> = (0..=i)
                            .map(|j| {
                                q.iter().zip(&ks[j][kvh * hd..(kvh + 1) * hd]).map(|(a, b)| a * b).sum::<f64>()
                                    / (hd as f64).sqrt()
                            })
                            .collect();
                        let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                        let z: f64 = scores.iter().map(|s| (s - m).exp()).sum();
                        for (j, s) in scores.iter().enumerate() {
                            for d in 0..hd {
                                out[head * hd + d] += (s - m).exp() / z * vs[j][kvh * hd + d];
                            }
                        }
                    }
                    let o = self.mat(&n("attn_output.weight"), &out);
                    xs[i].iter_mut().zip(o).for_each(|(x, o)| *x += o);
                    let h = self.norm(&n("ffn_norm.weight"), &xs[i]);
                    let (g, u) = (self.mat(&n("ffn_gate.weight"), &h), self.mat(&n("ffn_up.weight"), &h));
                    let act: Vec<f64> = g.iter().zip(&u).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect();
                    let d = self.mat(&n("ffn_down.weight"), &act);
                    xs[i].iter_mut().zip(d).for_each(|(x, d)| *x += d);
                }
            }
            let last = self.norm("output_norm.weight", xs.last().unwrap());
            self.mat("token_embd.weight", &last)
        }
    }

    struct Map(HashMap<String, QTensor>);

    impl Weights for Map {
        fn get(&mut self, name: &str) -> Result<QTensor> {
            let t = self.0.get(name).ok_or_else(|| candle_core::Error::Msg(format!("no {name}")))?;
            QTensor::quantize(&t.dequantize(&Device::Cpu)?, t.dtype())
        }
        fn has(&self, name: &str) -> bool {
            self.0.contains_key(name)
        }
    }

    fn tiny(arch: Arch) -> (Config, Naive, Map) {
        let cfg = Config {
            arch,
            n_layer: 2,
            n_head: 4,
            n_kv_head: 2,
            hidden: 16,
            head_dim: 4,
            rope_dim: 4,
            rope_base: 10_000.0,
            rms_eps: 1e-6,
            context_length: 32,
        };
        let (vocab, ffn) = (11, 24);
        let mut seed = 0x2545_f491_u64 + arch as u64;
        let mut draw = |n: usize, scale: f64| -> Vec<f64> {
            (0..n)
                .map(|_| {
                    seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                    ((seed >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 2.0 * scale
                })
                .collect()
        };
        let mut shapes: Vec<(String, Vec<usize>, f64)> = vec![
            ("token_embd.weight".into(), vec![vocab, cfg.hidden], 1.0),
            ("output_norm.weight".into(), vec![cfg.hidden], 1.0),
        ];
        let kv = cfg.n_kv_head * cfg.head_dim;
        for l in 0..cfg.n_layer {
            let n = |t: &str| format!("blk.{l}.{t}");
            shapes.extend([
                (n("attn_norm.weight"), vec![cfg.hidden], 1.0),
                (n("attn_q.weight"), vec![cfg.hidden, cfg.hidden], 0.5),
                (n("attn_k.weight"), vec![kv, cfg.hidden], 0.5),
                (n("attn_v.weight"), vec![kv, cfg.hidden], 0.5),
                (n("attn_output.weight"), vec![cfg.hidden, cfg.hidden], 0.3),
                (n("ffn_norm.weight"), vec![cfg.hidden], 1.0),
                (n("ffn_gate.weight"), vec![ffn, cfg.hidden], 0.3),
                (n("ffn_up.weight"), vec![ffn, cfg.hidden], 0.3),
                (n("ffn_down.weight"), vec![cfg.hidden, ffn], 0.3),
            ]);
            if arch == Arch::Qwen2 {
                shapes.extend([
                    (n("attn_q.bias"), vec![cfg.hidden], 0.2),
                    (n("attn_k.bias"), vec![kv], 0.2),
                    (n("attn_v.bias"), vec![kv], 0.2),
                ]);
            }
        }
        let mut naive = HashMap::new();
        let mut map = HashMap::new();
        for (name, shape, scale) in shapes {
            let values = draw(shape.iter().product(), scale);
            // Values f32 can hold exactly, so the reference sees the same weights.
            let values: Vec<f64> = values.iter().map(|v| *v as f32 as f64).collect();
            let t = Tensor::from_vec(
                values.iter().map(|v| *v as f32).collect::<Vec<f32>>(),
                shape.as_slice(),
                &Device::Cpu,
            )
            .unwrap();
            map.insert(name.clone(), QTensor::quantize(&t, candle_core::quantized::GgmlDType::F32).unwrap());
            naive.insert(name, (shape, values));
        }
        (cfg.clone(), Naive { cfg, w: naive }, Map(map))
    }

    fn close(a: &[f32], b: &[f64]) -> f64 {
        a.iter().zip(b).map(|(a, b)| (*a as f64 - b).abs()).fold(0.0, f64::max)
    }

    #[test]
    fn both_architectures_compute_what_a_naive_decoder_computes() {
        for arch in [Arch::Llama, Arch::Qwen2] {
            let (cfg, naive, mut weights) = tiny(arch);
            let mut model = Model::load(&cfg, &mut weights, &Device::Cpu).unwrap();
            let tokens = [3u32, 1, 4, 1, 5, 9, 2, 6];
            let got = model.forward(&tokens, 0).unwrap().to_vec1::<f32>().unwrap();
            let want = naive.logits(&tokens);
            assert_eq!(got.len(), 11);
            assert!(close(&got, &want) < 1e-4, "{arch:?}: {got:?} against {want:?}");
            // One token at a time over the cache: the same last logits.
            model.forward(&tokens[..1], 0).unwrap();
            let mut last = Vec::new();
            for i in 1..tokens.len() {
                last = model.forward(&tokens[i..=i], i).unwrap().to_vec1::<f32>().unwrap();
            }
            assert!(close(&last, &want) < 1e-4, "{arch:?}, token by token");
        }
    }

    #[test]
    fn a_shared_prefix_from_the_cache_gives_the_logits_of_a_fresh_run() {
        let (cfg, naive, mut weights) = tiny(Arch::Qwen2);
        let mut model = Model::load(&cfg, &mut weights, &Device::Cpu).unwrap();
        let (a, b) = ([7u32, 7, 2, 5, 1, 8], [7u32, 7, 2, 3, 3, 10, 0]);
        model.forward(&a, 0).unwrap();
        assert_eq!(model.cached(), 6);
        let got = model.forward(&b[3..], 3).unwrap().to_vec1::<f32>().unwrap();
        assert!(close(&got, &naive.logits(&b)) < 1e-4);
        assert_eq!(model.cached(), 7);
        assert!(model.forward(&b, 8).is_err(), "a start past the cache is refused");
        assert!(model.forward(&[1; 40], 0).is_err(), "past the context");
    }

    #[test]
    fn repeated_kv_heads_keep_their_order() {
        let x = Tensor::arange(0f32, 4., &Device::Cpu).unwrap().reshape((1, 2, 1, 2)).unwrap();
        let r = repeat_kv(x, 2).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(r, [0., 1., 0., 1., 2., 3., 2., 3.]);
    }
}
