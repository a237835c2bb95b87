//! The training loop the context models share: the interface a trainable model offers
//! ([`ContextModel`]), mini-batch AdamW over epochs ([`fit`]) with its seeded generator,
//! and gradient norms for tests. It knows no model: the heads implement the trait.

use candle_core::{Tensor, Var};
use candle_nn::ParamsAdamW;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::NeuralError;
use crate::config::TrainConfig;
use crate::train::adamw::FusedAdamW;

/// A trained context model as its callers read and train it: jury-v1's binary and
/// multi-class models and the `paper` recipe's, behind one interface (the frozen study
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
        impl $crate::train::ContextModel for $model {
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
