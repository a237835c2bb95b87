//! What the binary and multi-class context models share: seeded parameter
//! initialisation, the classification head (optional ReLU layer, then a softmax
//! bottleneck), the mini-batch training loop and gradient norms for tests.
//!
//! Invariant: parameters are drawn in a fixed order (hidden layer, head weight, then the
//! caller's own), so a seed gives the same model whichever module builds it.

use candle_core::{D, DType, Device, Tensor, Var};
use candle_nn::ParamsAdamW;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::NeuralError;
use crate::config::TrainConfig;
use crate::train::adamw::FusedAdamW;

/// A `shape` matrix of uniform draws in [-scale, scale].
pub(crate) fn init(rng: &mut ChaCha8Rng, shape: (usize, usize), scale: f64, dev: &Device) -> Result<Var, NeuralError> {
    let v: Vec<f32> = (0..shape.0 * shape.1).map(|_| ((rng.random::<f64>() * 2.0 - 1.0) * scale) as f32).collect();
    Ok(Var::from_tensor(&Tensor::from_vec(v, shape, dev)?)?)
}

/// Context vector -> optional ReLU layer -> linear map -> softmax over `classes`.
pub(crate) struct Head {
    w: Var,
    b: Var,
    hidden: Option<(Var, Var)>,
}

impl Head {
    pub(crate) fn new(
        h: usize,
        classes: usize,
        width: usize,
        rng: &mut ChaCha8Rng,
        dev: &Device,
    ) -> Result<Self, NeuralError> {
        let hidden = if width > 0 {
            let w = init(rng, (h, width), (1.0 / h as f64).sqrt(), dev)?;
            Some((w, Var::from_tensor(&Tensor::zeros((1, width), DType::F32, dev)?)?))
        } else {
            None
        };
        let head_in = if width > 0 { width } else { h };
        let w = init(rng, (head_in, classes), (1.0 / head_in as f64).sqrt(), dev)?;
        let b = Var::from_tensor(&Tensor::zeros((1, classes), DType::F32, dev)?)?;
        Ok(Self { w, b, hidden })
    }

    /// Weight and bias, then the hidden layer's when present.
    pub(crate) fn vars(&self) -> Vec<Var> {
        let mut v = vec![self.w.clone(), self.b.clone()];
        if let Some((w, b)) = &self.hidden {
            v.extend([w.clone(), b.clone()]);
        }
        v
    }

    /// The bottleneck s: [batch, classes].
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor, NeuralError> {
        let z = match &self.hidden {
            Some((w, b)) => x.matmul(w.as_tensor())?.broadcast_add(b.as_tensor())?.relu()?,
            None => x.clone(),
        };
        let logits = z.matmul(self.w.as_tensor())?.broadcast_add(self.b.as_tensor())?;
        Ok(candle_nn::ops::softmax(&logits, D::Minus1)?)
    }
}

/// Per-judge parameters read as logits: task-level (one bias row shared by every
/// example) or context-level for -X (a linear map from the context vector plus that
/// bias; its weight starts small, so every example starts at the bias's values).
pub(crate) struct JudgeLogits {
    w: Option<Var>,
    b: Var,
}

impl JudgeLogits {
    /// `start`: the bias's starting logits; with `from_context`, a weight [h, len] is
    /// drawn from `rng` (after the caller's head, which fixes the draw order).
    pub(crate) fn new(
        h: usize,
        start: Vec<f32>,
        from_context: bool,
        rng: &mut ChaCha8Rng,
        dev: &Device,
    ) -> Result<Self, NeuralError> {
        let len = start.len();
        let w = if from_context { Some(init(rng, (h, len), 0.01 * (1.0 / h as f64).sqrt(), dev)?) } else { None };
        let b = Var::from_tensor(&Tensor::from_vec(start, (1, len), dev)?)?;
        Ok(Self { w, b })
    }

    /// The logits [batch, len] for context vectors `x` [batch, h].
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor, NeuralError> {
        Ok(match &self.w {
            Some(w) => x.matmul(w.as_tensor())?.broadcast_add(self.b.as_tensor())?,
            None => self.b.as_tensor().broadcast_as((x.dim(0)?, self.b.dim(1)?))?.contiguous()?,
        })
    }

    /// A model's trainable tensors in checkpoint order: the head's weight and bias, the
    /// judges' bias, their weight when context-level, then the head's hidden layer.
    pub(crate) fn model_vars(&self, head: &Head) -> Vec<Var> {
        let head = head.vars();
        let mut v = head[..2].to_vec();
        v.push(self.b.clone());
        v.extend(self.w.clone());
        v.extend(head[2..].iter().cloned());
        v
    }
}

/// A trained context model as its callers read and train it: jury-v1's binary and
/// multi-class models and the paper recipe's, behind one interface (the frozen study
/// scores epochs through it, fine-tuning trains the encoder under it).
pub(crate) trait ContextModel {
    /// The trainable tensors, in checkpoint order.
    fn vars(&self) -> Vec<Var>;
    /// One batch's loss; `rng` draws dropout masks (models without dropout ignore it).
    fn loss(
        &self,
        x: &Tensor,
        y: &Tensor,
        mask: &Tensor,
        lambda: f64,
        rng: &mut ChaCha8Rng,
    ) -> Result<Tensor, NeuralError>;
    fn posterior(&self, x: &Tensor, y: &Tensor, mask: &Tensor) -> Result<Vec<f32>, NeuralError>;
    fn prior(&self, x: &Tensor) -> Result<Vec<f32>, NeuralError>;
    fn slopes(&self, x: &Tensor) -> Result<Vec<f32>, NeuralError>;
}

/// [`ContextModel`] for a model whose own methods have these names; `$loss` adapts its
/// `loss` to the trait's (with or without the dropout generator).
macro_rules! context_model {
    ($model:ty, |$m:ident, $x:ident, $y:ident, $mask:ident, $lambda:ident, $rng:ident| $loss:expr) => {
        impl $crate::head::ContextModel for $model {
            fn vars(&self) -> Vec<candle_core::Var> {
                <$model>::vars(self)
            }
            fn loss(
                &self,
                $x: &candle_core::Tensor,
                $y: &candle_core::Tensor,
                $mask: &candle_core::Tensor,
                $lambda: f64,
                $rng: &mut rand_chacha::ChaCha8Rng,
            ) -> Result<candle_core::Tensor, $crate::NeuralError> {
                let $m = self;
                $loss
            }
            fn posterior(
                &self,
                x: &candle_core::Tensor,
                y: &candle_core::Tensor,
                mask: &candle_core::Tensor,
            ) -> Result<Vec<f32>, $crate::NeuralError> {
                <$model>::posterior(self, x, y, mask)
            }
            fn prior(&self, x: &candle_core::Tensor) -> Result<Vec<f32>, $crate::NeuralError> {
                <$model>::prior(self, x)
            }
            fn slopes(&self, x: &candle_core::Tensor) -> Result<Vec<f32>, $crate::NeuralError> {
                <$model>::slopes(self, x)
            }
        }
    };
}
pub(crate) use context_model;

/// Mini-batch AdamW (`adamw`'s fused in-place form of candle's update, eps
/// `cfg.adam_eps`, the learning rate `cfg.lr` moved per step by `cfg.schedule`) over
/// `cfg.epochs` epochs, batches drawn from `rng` in a shuffled order; `loss(x, y, mask,
/// rng)` is evaluated per batch (rows of the three tensors; `rng` for its dropout) and
/// `on_epoch(epoch, mean loss)` runs after each epoch.
#[allow(clippy::too_many_arguments, reason = "the loop's inputs, each used once")]
pub(crate) fn fit(
    x: &Tensor,
    y: &Tensor,
    mask: &Tensor,
    vars: Vec<Var>,
    cfg: &TrainConfig,
    rng: &mut ChaCha8Rng,
    loss: impl Fn(&Tensor, &Tensor, &Tensor, &mut ChaCha8Rng) -> Result<Tensor, NeuralError>,
    mut on_epoch: impl FnMut(usize, f64) -> Result<(), NeuralError>,
) -> Result<(), NeuralError> {
    let dev = x.device().clone();
    let params = ParamsAdamW { lr: cfg.lr, weight_decay: 0.0, eps: cfg.adam_eps, ..Default::default() };
    let mut opt = FusedAdamW::new(vars, params)?;
    let n = x.dim(0)?;
    let mut order: Vec<u32> = (0..n as u32).collect();
    let total_steps = cfg.epochs * n.div_ceil(cfg.batch.max(1));
    let mut step = 0;
    for epoch in 0..cfg.epochs {
        order.shuffle(rng);
        let (mut total, mut batches) = (0.0, 0usize);
        for chunk in order.chunks(cfg.batch.max(1)) {
            let idx = Tensor::from_slice(chunk, chunk.len(), &dev)?;
            let (xb, yb, mb) = (x.index_select(&idx, 0)?, y.index_select(&idx, 0)?, mask.index_select(&idx, 0)?);
            let l = loss(&xb, &yb, &mb, rng)?;
            opt.set_lr(cfg.lr * cfg.schedule.factor(step, total_steps));
            step += 1;
            opt.step(&l.backward()?)?;
            total += l.to_scalar::<f32>()? as f64;
            batches += 1;
        }
        on_epoch(epoch, total / batches.max(1) as f64)?;
    }
    Ok(())
}

/// `x` with each entry zeroed with probability `p` and the others scaled by 1 / (1 - p),
/// the mask drawn from `rng` (so a seed fixes it); `x` itself when `p` is 0.
pub(crate) fn dropout(x: &Tensor, p: f64, rng: &mut ChaCha8Rng) -> Result<Tensor, NeuralError> {
    if p <= 0.0 {
        return Ok(x.clone());
    }
    let keep = (1.0 / (1.0 - p)) as f32;
    let mask: Vec<f32> = (0..x.elem_count()).map(|_| if rng.random::<f64>() < p { 0.0 } else { keep }).collect();
    Ok(x.mul(&Tensor::from_vec(mask, x.shape(), x.device())?)?)
}

/// The seeded generator a model and its batch order draw from.
pub(crate) fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// Gradient norm of each of `vars` for one loss value (0 for a variable the loss does
/// not reach).
pub(crate) fn grad_norms(loss: &Tensor, vars: &[Var]) -> Result<Vec<f32>, NeuralError> {
    let grads = loss.backward()?;
    vars.iter()
        .map(|v| Ok(grads.get(v.as_tensor()).map_or(Ok(0.0), |g| g.sqr()?.sum_all()?.sqrt()?.to_scalar::<f32>())?))
        .collect()
}
