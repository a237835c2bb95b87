//! Fused CPU kernels *with* backward passes, for fine-tuning the encoder: candle 0.10's
//! differentiable forms of layer norm, masked softmax and GELU are chains of
//! single-threaded elementwise passes, each allocating a tensor as large as its input,
//! and its linear layer adds the bias in a pass of its own. Fine-tuning spent three
//! quarters of its time there, a quarter in the matrix products.
//!
//! Invariants: every forward here computes what `kernels`' counterpart (and the plain
//! candle expression beside it) computes, and every backward is the exact derivative of
//! that forward (tests compare them with candle's autograd of the plain expression). The
//! functions fall back to the plain candle expression on other devices and dtypes, so
//! gradients flow everywhere.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, D, DType, Layout, Module, Result, Shape, Tensor, bail};
use candle_nn::Linear;
use rayon::prelude::*;

use crate::kernels::{self, exp, fast_path, lanes, slice};

/// Elements per parallel chunk of an elementwise kernel.
const CHUNK: usize = 16_384;

/// `linear.forward(x)`, differentiable in x, the weight and the bias.
pub(crate) fn linear(l: &Linear, x: &Tensor) -> Result<Tensor> {
    match l.bias() {
        Some(b) if fast_path(x) => x.contiguous()?.apply_op3(l.weight(), b, LinearD),
        _ => l.forward(x),
    }
}

struct LinearD;

impl CustomOp3 for LinearD {
    fn name(&self) -> &'static str {
        "fused-linear-d"
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        xl: &Layout,
        ws: &CpuStorage,
        wl: &Layout,
        bs: &CpuStorage,
        bl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        kernels::FusedLinear.cpu_fwd(xs, xl, ws, wl, bs, bl)
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        // y = x W^T + b over rows: dx = g W, dW = g^T x, db = sum of g's rows.
        let (n, k) = w.dims2()?;
        let m = x.elem_count() / k;
        let g = grad.contiguous()?.reshape((m, n))?;
        let x2 = x.reshape((m, k))?;
        let dx = g.matmul(&w.contiguous()?)?.reshape(x.shape())?;
        let dw = g.t()?.matmul(&x2)?;
        let db = g.sum(0)?;
        Ok((Some(dx), Some(dw), Some(db)))
    }
}

/// `softmax_last_dim(scores * scale + (mask - 1) * 1e4)` for attention scores
/// [batch, heads, queries, keys] and a key mask [batch, keys], differentiable in the
/// scores (the mask is data).
pub(crate) fn masked_softmax(scores: &Tensor, mask: &Tensor, scale: f64) -> Result<Tensor> {
    if fast_path(scores) && mask.dtype() == DType::F32 {
        return scores.contiguous()?.apply_op2(&mask.contiguous()?, MaskedSoftmaxD(scale as f32));
    }
    let (b, _, _, t) = scores.dims4()?;
    let bias = ((mask - 1.0)? * 1e4)?.reshape((b, 1, 1, t))?;
    candle_nn::ops::softmax(&(scores * scale)?.broadcast_add(&bias)?, D::Minus1)
}

struct MaskedSoftmaxD(f32);

impl CustomOp2 for MaskedSoftmaxD {
    fn name(&self) -> &'static str {
        "masked-softmax-d"
    }

    fn cpu_fwd(&self, ss: &CpuStorage, sl: &Layout, ms: &CpuStorage, ml: &Layout) -> Result<(CpuStorage, Shape)> {
        kernels::MaskedSoftmax(self.0).cpu_fwd(ss, sl, ms, ml)
    }

    fn bwd(
        &self,
        _s: &Tensor,
        _mask: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let d = res.contiguous()?.apply_op2_no_bwd(&grad.contiguous()?, &SoftmaxGrad(self.0))?;
        Ok((Some(d), None))
    }
}

/// d scores = scale * p * (g - sum(g * p)) per row; a padded key (p = 0) gets 0.
struct SoftmaxGrad(f32);

impl CustomOp2 for SoftmaxGrad {
    fn name(&self) -> &'static str {
        "softmax-grad"
    }

    fn cpu_fwd(&self, ps: &CpuStorage, pl: &Layout, gs: &CpuStorage, gl: &Layout) -> Result<(CpuStorage, Shape)> {
        let (p, g) = (slice(ps, pl, self.name())?, slice(gs, gl, self.name())?);
        let t = pl.dims().last().copied().unwrap_or(1).max(1);
        if p.len() != g.len() {
            bail!("softmax-grad: probabilities {:?}, gradient {:?}", pl.dims(), gl.dims());
        }
        let mut out = vec![0f32; p.len()];
        let scale = self.0;
        out.par_chunks_mut(t).zip(p.par_chunks(t).zip(g.par_chunks(t))).for_each(|(o, (p, g))| {
            let dot = lanes([p, g], 0.0, |[p, g]| p * g, |a, b| a + b);
            for ((o, &p), &g) in o.iter_mut().zip(p).zip(g) {
                *o = scale * p * (g - dot);
            }
        });
        Ok((CpuStorage::F32(out), pl.shape().clone()))
    }
}

/// Layer normalisation over the last dimension, `(x - mean) / sqrt(var + eps) * weight +
/// bias`, differentiable in x, weight and bias.
pub(crate) fn layer_norm(x: &Tensor, weight: &Tensor, bias: &Tensor, eps: f64) -> Result<Tensor> {
    if !fast_path(x) {
        let mean = x.mean_keepdim(D::Minus1)?;
        let centred = x.broadcast_sub(&mean)?;
        let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
        let normed = centred.broadcast_div(&(var + eps)?.sqrt()?)?;
        return normed.broadcast_mul(weight)?.broadcast_add(bias);
    }
    x.contiguous()?.apply_op3(weight, bias, LayerNormD(eps as f32))
}

struct LayerNormD(f32);

/// Mean and 1 / sqrt(var + eps) of one row.
#[inline(always)]
fn moments(x: &[f32], eps: f32) -> (f32, f32) {
    let h = x.len() as f32;
    let mean = lanes([x], 0.0, |[v]| v, |a, b| a + b) / h;
    let var = lanes([x], 0.0, |[v]| (v - mean) * (v - mean), |a, b| a + b) / h;
    (mean, 1.0 / (var + eps).sqrt())
}

impl CustomOp3 for LayerNormD {
    fn name(&self) -> &'static str {
        "layer-norm-d"
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        xl: &Layout,
        ws: &CpuStorage,
        wl: &Layout,
        bs: &CpuStorage,
        bl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, w, b) = (slice(xs, xl, self.name())?, slice(ws, wl, self.name())?, slice(bs, bl, self.name())?);
        let h = w.len();
        if h == 0 || b.len() != h || xl.dims().last() != Some(&h) {
            bail!("layer-norm-d: input {:?}, weight {}, bias {}", xl.dims(), w.len(), b.len());
        }
        let mut out = vec![0f32; x.len()];
        let eps = self.0;
        out.par_chunks_mut(h).zip(x.par_chunks(h)).for_each(|(o, x)| {
            let (mean, inv) = moments(x, eps);
            for (((o, &x), &w), &b) in o.iter_mut().zip(x).zip(w).zip(b) {
                *o = (x - mean) * inv * w + b;
            }
        });
        Ok((CpuStorage::F32(out), xl.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        // One pass gives dx per row and each row's contribution g * x_hat to dW; the
        // rows are then summed for dW and dB (candle's reduction).
        let h = w.elem_count();
        let rows = x.elem_count() / h;
        let g = grad.contiguous()?;
        let both = x.contiguous()?.apply_op3_no_bwd(&w.contiguous()?, &g, &LayerNormGrad(self.0))?;
        let dx = both.narrow(0, 0, rows)?.reshape(x.shape())?;
        let dw = both.narrow(0, rows, rows)?.sum(0)?;
        let db = g.reshape((rows, h))?.sum(0)?;
        Ok((Some(dx), Some(dw), Some(db)))
    }
}

/// For x [rows, h], weight [h] and g [rows, h]: a [2 rows, h] tensor holding dx
/// = inv * (gw - mean(gw) - x_hat * mean(gw * x_hat)) with gw = g * weight, then the rows
/// g * x_hat (dW before the sum over rows).
struct LayerNormGrad(f32);

impl CustomOp3 for LayerNormGrad {
    fn name(&self) -> &'static str {
        "layer-norm-grad"
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        xl: &Layout,
        ws: &CpuStorage,
        wl: &Layout,
        gs: &CpuStorage,
        gl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, w, g) = (slice(xs, xl, self.name())?, slice(ws, wl, self.name())?, slice(gs, gl, self.name())?);
        let h = w.len();
        if h == 0 || x.len() != g.len() || x.len() % h != 0 {
            bail!("layer-norm-grad: input {:?}, weight {h}, gradient {:?}", xl.dims(), gl.dims());
        }
        let rows = x.len() / h;
        let mut out = vec![0f32; 2 * x.len()];
        let (dx, dw) = out.split_at_mut(x.len());
        let eps = self.0;
        dx.par_chunks_mut(h).zip(dw.par_chunks_mut(h)).zip(x.par_chunks(h).zip(g.par_chunks(h))).for_each(
            |((dx, dw), (x, g))| {
                let (mean, inv) = moments(x, eps);
                let hf = h as f32;
                let gw_mean = lanes([g, w], 0.0, |[g, w]| g * w, |a, b| a + b) / hf;
                let gwx_mean = lanes([g, w, x], 0.0, |[g, w, x]| g * w * (x - mean) * inv, |a, b| a + b) / hf;
                for ((((dx, dw), &x), &g), &w) in dx.iter_mut().zip(dw.iter_mut()).zip(x).zip(g).zip(w) {
                    let xh = (x - mean) * inv;
                    *dx = inv * (g * w - gw_mean - xh * gwx_mean);
                    *dw = g * xh;
                }
            },
        );
        Ok((CpuStorage::F32(out), Shape::from((2 * rows, h))))
    }
}

/// Exact-form GELU, x * Phi(x), differentiable.
pub(crate) fn gelu_erf(x: &Tensor) -> Result<Tensor> {
    if fast_path(x) {
        return x.contiguous()?.apply_op1(GeluErfD);
    }
    x.gelu_erf()
}

struct GeluErfD;

impl CustomOp1 for GeluErfD {
    fn name(&self) -> &'static str {
        "gelu-erf-d"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        kernels::GeluErf.cpu_fwd(storage, layout)
    }

    fn bwd(&self, x: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(x.apply_op2_no_bwd(&grad.contiguous()?, &GeluGrad)?))
    }
}

/// g * (Phi(x) + x phi(x)), the derivative of x Phi(x).
struct GeluGrad;

impl CustomOp2 for GeluGrad {
    fn name(&self) -> &'static str {
        "gelu-grad"
    }

    fn cpu_fwd(&self, xs: &CpuStorage, xl: &Layout, gs: &CpuStorage, gl: &Layout) -> Result<(CpuStorage, Shape)> {
        let (x, g) = (slice(xs, xl, self.name())?, slice(gs, gl, self.name())?);
        if x.len() != g.len() {
            bail!("gelu-grad: input {:?}, gradient {:?}", xl.dims(), gl.dims());
        }
        // 1 / sqrt(2 pi)
        const INV_SQRT_2PI: f32 = 0.398_942_3;
        let mut out = vec![0f32; x.len()];
        out.par_chunks_mut(CHUNK).zip(x.par_chunks(CHUNK).zip(g.par_chunks(CHUNK))).for_each(|(o, (x, g))| {
            for ((o, &x), &g) in o.iter_mut().zip(x).zip(g) {
                let cdf = 0.5 * (1.0 + kernels::erf(x * std::f32::consts::FRAC_1_SQRT_2));
                let pdf = INV_SQRT_2PI * exp(-0.5 * x * x);
                *o = g * (cdf + x * pdf);
            }
        });
        Ok((CpuStorage::F32(out), xl.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
    }

    /// The gradients of sum(f(vars) * r) for a fixed random r, so every output element
    /// carries a different upstream gradient.
    fn grads(vars: &[&Var], out: &Tensor, r: &Tensor) -> Vec<Tensor> {
        let g = (out * r).unwrap().sum_all().unwrap().backward().unwrap();
        vars.iter().map(|v| g.get(v.as_tensor()).expect("a gradient for every input").clone()).collect()
    }

    #[test]
    fn fused_linear_has_the_plain_linears_gradients() {
        let dev = Device::Cpu;
        let x = Var::randn(0f32, 1.0, (3, 4, 5), &dev).unwrap();
        let w = Var::randn(0f32, 1.0, (7, 5), &dev).unwrap();
        let b = Var::randn(0f32, 1.0, 7, &dev).unwrap();
        let r = Tensor::randn(0f32, 1.0, (3, 4, 7), &dev).unwrap();
        let l = Linear::new(w.as_tensor().clone(), Some(b.as_tensor().clone()));
        let fast = linear(&l, x.as_tensor()).unwrap();
        let plain = l.forward(x.as_tensor()).unwrap();
        assert!(max_diff(&fast, &plain) < 1e-5);
        for (f, p) in grads(&[&x, &w, &b], &fast, &r).iter().zip(grads(&[&x, &w, &b], &plain, &r)) {
            assert!(max_diff(f, &p) < 1e-4, "{f} vs {p}");
        }
    }

    #[test]
    fn fused_layer_norm_has_the_written_out_forms_gradients() {
        let dev = Device::Cpu;
        let x = Var::randn(0f32, 2.0, (3, 4, 16), &dev).unwrap();
        let w = Var::randn(1f32, 0.5, 16, &dev).unwrap();
        let b = Var::randn(0f32, 0.5, 16, &dev).unwrap();
        let r = Tensor::randn(0f32, 1.0, (3, 4, 16), &dev).unwrap();
        let fast = layer_norm(x.as_tensor(), w.as_tensor(), b.as_tensor(), 1e-12).unwrap();
        let mean = x.mean_keepdim(D::Minus1).unwrap();
        let centred = x.broadcast_sub(&mean).unwrap();
        let var = centred.sqr().unwrap().mean_keepdim(D::Minus1).unwrap();
        let plain = centred
            .broadcast_div(&(var + 1e-12).unwrap().sqrt().unwrap())
            .unwrap()
            .broadcast_mul(w.as_tensor())
            .unwrap()
            .broadcast_add(b.as_tensor())
            .unwrap();
        assert!(max_diff(&fast, &plain) < 1e-5);
        for (f, p) in grads(&[&x, &w, &b], &fast, &r).iter().zip(grads(&[&x, &w, &b], &plain, &r)) {
            assert!(max_diff(f, &p) < 1e-4, "{f} vs {p}");
        }
    }

    #[test]
    fn fused_masked_softmax_has_the_additive_forms_gradient() {
        let dev = Device::Cpu;
        let s = Var::randn(0f32, 3.0, (2, 3, 4, 5), &dev).unwrap();
        let mask = Tensor::new(&[[1f32, 1., 1., 1., 1.], [1., 1., 0., 0., 0.]], &dev).unwrap();
        let r = Tensor::randn(0f32, 1.0, (2, 3, 4, 5), &dev).unwrap();
        let fast = masked_softmax(s.as_tensor(), &mask, 0.5).unwrap();
        let bias = ((&mask - 1.0).unwrap() * 1e4).unwrap().reshape((2, 1, 1, 5)).unwrap();
        let plain =
            candle_nn::ops::softmax(&(s.as_tensor() * 0.5).unwrap().broadcast_add(&bias).unwrap(), D::Minus1).unwrap();
        assert!(max_diff(&fast, &plain) < 1e-6);
        let (f, p) = (grads(&[&s], &fast, &r).remove(0), grads(&[&s], &plain, &r).remove(0));
        assert!(max_diff(&f, &p) < 1e-5, "{f} vs {p}");
    }

    #[test]
    fn fused_gelu_has_the_exact_gelus_gradient() {
        let dev = Device::Cpu;
        let x = Var::from_tensor(
            &(Tensor::arange(-6_000i64, 6_000, &dev).unwrap().to_dtype(DType::F32).unwrap() / 1000.0).unwrap(),
        )
        .unwrap();
        let r = Tensor::randn(0f32, 1.0, 12_000, &dev).unwrap();
        let fast = gelu_erf(x.as_tensor()).unwrap();
        let plain = x.as_tensor().gelu_erf().unwrap();
        let (f, p) = (grads(&[&x], &fast, &r).remove(0), grads(&[&x], &plain, &r).remove(0));
        assert!(max_diff(&f, &p) < 1e-5, "{}", max_diff(&f, &p));
    }
}
