//! Fused CPU kernels for the frozen encoder's forward pass: candle 0.10 spends as long on
//! a linear layer's bias add, the attention scale and mask, and GELU (each a separate,
//! mostly single-threaded pass over a large tensor) as on the matrix products.
//!
//! Invariants: every function here computes what the plain candle expression beside it
//! computes (tests compare them); none has a backward pass, so callers use them only when
//! nothing trains through the encoder (`kernels_grad` wraps them with backward passes for
//! fine-tuning), and fall back to candle's ops for other devices,
//! dtypes or layouts.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, DType, Layout, Module, Result, Shape, Tensor, bail};
use candle_nn::Linear;
use rayon::prelude::*;

pub(crate) fn fast_path(x: &Tensor) -> bool {
    x.device().is_cpu() && x.dtype() == DType::F32
}

pub(crate) fn slice<'a>(s: &'a CpuStorage, l: &Layout, op: &str) -> Result<&'a [f32]> {
    let CpuStorage::F32(v) = s else { bail!("{op} takes f32") };
    match l.contiguous_offsets() {
        Some((start, end)) => Ok(&v[start..end]),
        None => bail!("{op} takes contiguous tensors"),
    }
}

/// `linear.forward(x)` as one GEMM whose destination starts as the broadcast bias.
pub(crate) fn linear(linear: &Linear, x: &Tensor) -> Result<Tensor> {
    match linear.bias() {
        Some(b) if fast_path(x) => x.contiguous()?.apply_op3_no_bwd(linear.weight(), b, &FusedLinear),
        _ => linear.forward(x),
    }
}

pub(crate) struct FusedLinear;

impl CustomOp3 for FusedLinear {
    fn name(&self) -> &'static str {
        "fused-linear"
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
        let (n, k) = wl.shape().dims2()?;
        let dims = xl.dims();
        if dims.last() != Some(&k) || b.len() != n || k == 0 {
            bail!("fused-linear: input {dims:?}, weight ({n}, {k}), bias {}", b.len());
        }
        let m = x.len() / k;
        let mut dst = Vec::with_capacity(m * n);
        for _ in 0..m {
            dst.extend_from_slice(b);
        }
        let threads = rayon::current_num_threads();
        let parallelism = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
        // SAFETY: dst holds m x n (row stride n), x holds m x k (row stride k) and w holds
        // n x k, read as its transpose (k x n: row stride 1, column stride k); the slices
        // were length-checked above and do not overlap.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                dst.as_mut_ptr(),
                1,
                n as isize,
                true,
                x.as_ptr(),
                1,
                k as isize,
                w.as_ptr(),
                k as isize,
                1,
                1.0f32,
                1.0f32,
                false,
                false,
                false,
                parallelism,
            );
        }
        let mut shape = dims.to_vec();
        if let Some(last) = shape.last_mut() {
            *last = n;
        }
        Ok((CpuStorage::F32(dst), Shape::from(shape)))
    }
}

/// `softmax_last_dim(scores * scale + (mask - 1) * 1e4)` for attention scores
/// [batch, heads, queries, keys] and a key mask [batch, keys] (1 real, 0 padding), in
/// one parallel pass; padded keys get exactly zero weight.
pub(crate) fn masked_softmax(scores: &Tensor, mask: &Tensor, scale: f64) -> Result<Tensor> {
    if fast_path(scores) && mask.dtype() == DType::F32 {
        return scores.contiguous()?.apply_op2_no_bwd(&mask.contiguous()?, &MaskedSoftmax(scale as f32));
    }
    let (b, _, _, t) = scores.dims4()?;
    let bias = ((mask - 1.0)? * 1e4)?.reshape((b, 1, 1, t))?;
    candle_nn::ops::softmax_last_dim(&(scores * scale)?.broadcast_add(&bias)?)
}

pub(crate) struct MaskedSoftmax(pub(crate) f32);

impl CustomOp2 for MaskedSoftmax {
    fn name(&self) -> &'static str {
        "masked-softmax"
    }

    fn cpu_fwd(&self, ss: &CpuStorage, sl: &Layout, ms: &CpuStorage, ml: &Layout) -> Result<(CpuStorage, Shape)> {
        let (s, mask) = (slice(ss, sl, self.name())?, slice(ms, ml, self.name())?);
        let (b, h, q, t) = sl.shape().dims4()?;
        if ml.shape().dims2()? != (b, t) {
            bail!("masked-softmax: scores {:?}, mask {:?}", sl.dims(), ml.dims());
        }
        let mut out = vec![0f32; s.len()];
        let scale = self.0;
        out.par_chunks_mut(t).zip(s.par_chunks(t)).enumerate().for_each(|(row, (o, x))| {
            let m = &mask[(row / (h * q)) * t..][..t];
            let max = lanes(
                [x, m],
                f32::NEG_INFINITY,
                |[v, m]| if m > 0.5 { v } else { f32::NEG_INFINITY },
                |a, b| if b > a { b } else { a },
            );
            if max == f32::NEG_INFINITY {
                return;
            }
            // Branch-free so that it vectorises; a padded key's weight is multiplied by 0.
            for ((o, &v), &keep) in o.iter_mut().zip(x).zip(m) {
                *o = exp((v - max) * scale) * keep;
            }
            let sum = lanes([&*o], 0.0, |[v]| v, |a, b| a + b);
            o.iter_mut().for_each(|v| *v /= sum);
        });
        Ok((CpuStorage::F32(out), sl.shape().clone()))
    }
}

/// Folds `item` of the slices' elements at each index (up to the shortest slice) with 8
/// independent accumulators, index `i` into accumulator `i % 8` (a sequential fold over
/// f32 cannot be vectorised, since reassociating it changes the result). Whole blocks of
/// 8 are fixed-size arrays, so the inner loop has no bounds checks and vectorises.
#[inline(always)]
pub(crate) fn lanes<const K: usize>(
    xs: [&[f32]; K],
    init: f32,
    item: impl Fn([f32; K]) -> f32,
    f: impl Fn(f32, f32) -> f32,
) -> f32 {
    let n = xs.iter().map(|x| x.len()).min().unwrap_or(0);
    let blocks: [&[[f32; 8]]; K] = std::array::from_fn(|j| xs[j][..n].as_chunks::<8>().0);
    let mut acc = [init; 8];
    #[expect(clippy::needless_range_loop, reason = "`b` indexes each of the K slices' blocks")]
    for b in 0..n / 8 {
        let rows: [&[f32; 8]; K] = std::array::from_fn(|j| &blocks[j][b]);
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = f(*acc, item(std::array::from_fn(|j| rows[j][k])));
        }
    }
    for i in n / 8 * 8..n {
        acc[i % 8] = f(acc[i % 8], item(std::array::from_fn(|j| xs[j][i])));
    }
    acc.into_iter().fold(init, &f)
}

/// e^x for x <= 0, inputs below -87 taken as -87 (Cephes' single-precision polynomial;
/// relative error about 1e-7): no libm call and no float-to-integer conversion, so loops
/// over it vectorise.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    let x = if x < -87.0 { -87.0 } else { x };
    // Round to nearest by adding and subtracting 1.5 * 2^23 (plain SSE2 arithmetic, where
    // `round()` would be a libm call on the baseline x86-64 target); the sum's low
    // mantissa bits then hold n as an integer.
    const MAGIC: f32 = 12_582_912.0;
    let t = x * std::f32::consts::LOG2_E + MAGIC;
    let n = t - MAGIC;
    let n_int = (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    let r = x - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let mut p = 1.987_569_1e-4f32;
    for c in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 5e-1] {
        p = p * r + c;
    }
    let e = p * r * r + r + 1.0;
    e * f32::from_bits((n_int.wrapping_add(127) << 23) as u32)
}

/// Exact-form GELU, x * Phi(x), in parallel chunks.
pub(crate) fn gelu_erf(x: &Tensor) -> Result<Tensor> {
    if fast_path(x) {
        return x.contiguous()?.apply_op1_no_bwd(&GeluErf);
    }
    x.gelu_erf()
}

pub(crate) struct GeluErf;

/// erf as a rational function of x^2 on [-4, 4] (clamped outside, where |erf| rounds to
/// 1 in f32): branch- and call-free, so the loop below vectorises.
#[inline(always)]
pub(crate) fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = -2.726_142_3e-10f32;
    for c in [2.770_681_4e-8, -2.101_024e-6, -5.692_506_4e-5, -7.349_906_3e-4, -2.954_6e-3, -1.609_603_3e-2] {
        p = p * x2 + c;
    }
    let mut q = -1.456_607_2e-5f32;
    for c in [-2.133_740_6e-4, -1.682_827e-3, -7.373_329e-3, -1.426_474e-2] {
        q = q * x2 + c;
    }
    x * p / q
}

impl CustomOp1 for GeluErf {
    fn name(&self) -> &'static str {
        "gelu-erf"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let src = slice(storage, layout, self.name())?;
        let mut out = vec![0f32; src.len()];
        out.par_chunks_mut(16_384).zip(src.par_chunks(16_384)).for_each(|(o, i)| {
            for (o, &x) in o.iter_mut().zip(i) {
                *o = 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2));
            }
        });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
    }

    #[test]
    fn gelu_matches_candles_exact_gelu() {
        let x = Tensor::arange(-10_000i64, 10_000, &Device::Cpu).unwrap().to_dtype(DType::F32).unwrap();
        let x = (x / 1000.0).unwrap();
        let d = max_diff(&gelu_erf(&x).unwrap(), &x.gelu_erf().unwrap());
        assert!(d < 2e-6, "fast GELU differs from candle's by {d}");
    }

    #[test]
    fn fused_linear_matches_candles_linear() {
        let dev = Device::Cpu;
        let w = Tensor::randn(0f32, 1.0, (7, 5), &dev).unwrap();
        let b = Tensor::randn(0f32, 1.0, 7, &dev).unwrap();
        let l = Linear::new(w, Some(b));
        let x = Tensor::randn(0f32, 1.0, (3, 4, 5), &dev).unwrap();
        let fast = linear(&l, &x).unwrap();
        assert_eq!(fast.dims(), &[3, 4, 7]);
        let d = max_diff(&fast, &l.forward(&x).unwrap());
        assert!(d < 1e-5, "{d}");
        let xt = Tensor::randn(0f32, 1.0, (5, 6), &dev).unwrap().t().unwrap();
        assert!(max_diff(&linear(&l, &xt).unwrap(), &l.forward(&xt).unwrap()) < 1e-5, "non-contiguous input");
    }

    #[test]
    fn polynomial_exp_matches_std() {
        for i in 0..=87_000 {
            let x = -(i as f32) / 1000.0;
            let rel = (exp(x) - x.exp()).abs() / x.exp();
            assert!(rel < 5e-7, "exp({x}): {} vs {}", exp(x), x.exp());
        }
        assert_eq!(exp(-1000.0), exp(-87.0));
    }

    /// Blocks of 8 and the tail fold into the same accumulators as element `i` into
    /// `i % 8` one by one: the same bits, whatever the length.
    #[test]
    fn lanes_fold_like_eight_interleaved_accumulators() {
        for n in 0..40 {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 1e3).collect();
            let b: Vec<f32> = (0..n + 3).map(|i| (i as f32 * 0.11).cos()).collect();
            let mut acc = [0f32; 8];
            for i in 0..n {
                acc[i % 8] += a[i] * b[i];
            }
            let want = acc.into_iter().fold(0.0, |x, y| x + y);
            assert_eq!(lanes([&a, &b], 0.0, |[a, b]| a * b, |x, y| x + y).to_bits(), want.to_bits(), "n = {n}");
        }
    }

    #[test]
    fn masked_softmax_matches_the_additive_mask_form() {
        let dev = Device::Cpu;
        let s = Tensor::randn(0f32, 3.0, (2, 3, 4, 5), &dev).unwrap();
        let mask = Tensor::new(&[[1f32, 1., 1., 1., 1.], [1., 1., 0., 0., 0.]], &dev).unwrap();
        let fast = masked_softmax(&s, &mask, 0.5).unwrap();
        let bias = ((&mask - 1.0).unwrap() * 1e4).unwrap().reshape((2, 1, 1, 5)).unwrap();
        let plain = candle_nn::ops::softmax_last_dim(&(&s * 0.5).unwrap().broadcast_add(&bias).unwrap()).unwrap();
        assert!(max_diff(&fast, &plain) < 1e-6);
        let sums = fast.sum(3).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(sums.iter().all(|s| (s - 1.0).abs() < 1e-5), "{sums:?}");
    }
}
