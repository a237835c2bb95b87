//! The training machinery, apart from the models and the study over seeds: the optimiser
//! (a fused AdamW), the fused kernels with backward passes that the models'
//! differentiable forms call, and the heads' mini-batch loop. It knows no model, method
//! or data set: callers hand it parameters, batches and a loss.

pub(crate) mod adamw;
mod fit;
pub(crate) mod kernels_grad;

pub(crate) use fit::{ContextModel, context_model, fit, grad_norms, rng};
