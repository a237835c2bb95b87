//! What the binary and multi-class context models share: seeded parameter
//! initialisation, the classification head (optional ReLU layer, then a softmax
//! bottleneck), per-judge logits and dropout. Their training loop is `train::fit`.
//!
//! Invariant: parameters are drawn in a fixed order (hidden layer, head weight, then the
//! caller's own), so a seed gives the same model whichever module builds it.

use candle_core::{D, DType, Device, Tensor, Var};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::NeuralError;

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
