//! The training machinery, apart from the models and the study over seeds: the optimiser
//! (a fused AdamW), the fused kernels with backward passes that the models' differentiable
//! forms call, and the fine-tuning loop with its checkpoints. It knows no method and no
//! data set: the heads and the study hand it parameters, batches and a loss.

pub(crate) mod adamw;
pub(crate) mod finetune;
pub(crate) mod kernels_grad;
