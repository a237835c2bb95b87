//! The binary context models as the SkillAggregation authors trained them
//! (BriansIDP/Crowdsourcing, branch `crowdlayer_dev`, `model.py` modes `pewcrowdimp`,
//! `pewcrowdimpxt`, `pewcrowd` and `gt`): the default recipe ([`Recipe::Paper`]) on
//! frozen context vectors.
//!
//! Model: context vector x -> dropout (training only) -> linear head -> bottleneck
//! softmax s = (s0, s1). SkillAggregation: per-judge raw weights w0 = P(b=1|c=0) and
//! w1 = P(b=1|c=1), started at 0.3 and 0.7, predicted judge output
//! P(b=1|x) = s0 w0 + s1 w1 clamped to [1e-4, 1 - 1e-4]; loss = masked mean
//! cross-entropy against each judge probability + lambda * mean (w1 - w0)^2.
//! -X: the same training, plus a sigmoid layer on the detached context vector trained
//! only to copy (w0, w1) by squared error (the authors' `freeze_epoch` never ends in
//! their scripts); its per-context skills are what the posterior reads. Crowdlayer:
//! per-judge 2 x 2 confusion logits started at the identity, P(b|x) = softmax(W_j^T s);
//! its posterior is s1. Train-on-MV: cross-entropy of s against the majority vote.
//!
//! Invariants: no gradient reaches the context vector from the -X skill layer;
//! missing judges contribute nothing; the seed fixes initialisation, batch order and
//! dropout masks.
//!
//! [`Recipe::Paper`]: crate::Recipe::Paper

use candle_core::{DType, Device, Tensor, Var};
use rand_chacha::ChaCha8Rng;

use crate::NeuralError;
use crate::config::{ModelKind, TrainConfig};
use crate::head::{self, Head};
use crate::jury_data::{JuryData, tensors};
use crate::train;

/// Bounds of a predicted judge output (the authors' clamp).
const OUTPUT_BOUNDS: (f64, f64) = (1e-4, 1.0 - 1e-4);

/// How the judges are modelled, per method.
enum Judges {
    /// Train-on-MV: none.
    None,
    /// Raw weights [2, K]: row 0 P(b=1|c=0), row 1 P(b=1|c=1); for -X also the skill
    /// layer (weight [h, 2K], bias [1, 2K]: w0 of every judge, then w1) on detached x.
    Skills { w: Var, context: Option<(Var, Var)> },
    /// Confusion logits [2, 2K]: judge j's outputs are columns 2j (b=0) and 2j+1 (b=1).
    Confusion(Var),
}

/// A model trained with the `paper` recipe.
pub struct PaperModel {
    head: Head,
    judges: Judges,
    k: usize,
    method: ModelKind,
    dropout: f64,
}

impl PaperModel {
    pub fn new(h: usize, k: usize, cfg: &TrainConfig, rng: &mut ChaCha8Rng, dev: &Device) -> Result<Self, NeuralError> {
        let head = Head::new(h, 2, cfg.hidden, rng, dev)?;
        let judges = match cfg.method {
            ModelKind::TrainOnMv => Judges::None,
            ModelKind::Crowdlayer => {
                let mut eye = vec![0f32; 4 * k];
                for j in 0..k {
                    eye[2 * j] = 1.0;
                    eye[2 * k + 2 * j + 1] = 1.0;
                }
                Judges::Confusion(Var::from_tensor(&Tensor::from_vec(eye, (2, 2 * k), dev)?)?)
            }
            ModelKind::SkillAgg | ModelKind::SkillAggX => {
                let w = Var::from_tensor(&Tensor::from_vec(start_weights(cfg, k)?, (2, k), dev)?)?;
                let context = if cfg.method == ModelKind::SkillAggX {
                    let weight = head::init(rng, (h, 2 * k), (1.0 / h as f64).sqrt(), dev)?;
                    Some((weight, Var::from_tensor(&Tensor::zeros((1, 2 * k), DType::F32, dev)?)?))
                } else {
                    None
                };
                Judges::Skills { w, context }
            }
        };
        Ok(Self { head, judges, k, method: cfg.method, dropout: cfg.dropout })
    }

    /// The trainable tensors: the head's, then the judges'.
    pub fn vars(&self) -> Vec<Var> {
        let mut v = self.head.vars();
        match &self.judges {
            Judges::None => {}
            Judges::Skills { w, context } => {
                v.push(w.clone());
                if let Some((weight, bias)) = context {
                    v.extend([weight.clone(), bias.clone()]);
                }
            }
            Judges::Confusion(c) => v.push(c.clone()),
        }
        v
    }

    /// Bottleneck s: [batch, 2] (no dropout).
    pub fn bottleneck(&self, x: &Tensor) -> Result<Tensor, NeuralError> {
        self.head.forward(x)
    }

    /// -X's per-context skills (w0, w1), each [batch, K], from the detached context.
    fn context_skills(&self, x: &Tensor) -> Result<Option<(Tensor, Tensor)>, NeuralError> {
        let Judges::Skills { context: Some((weight, bias)), .. } = &self.judges else { return Ok(None) };
        let z = x.detach().matmul(weight.as_tensor())?.broadcast_add(bias.as_tensor())?;
        let p = candle_nn::ops::sigmoid(&z)?;
        Ok(Some((p.narrow(1, 0, self.k)?, p.narrow(1, self.k, self.k)?)))
    }

    /// (w0, w1) = (P(b=1|c=0), P(b=1|c=1)), each [batch, K]: -X's per-context skills,
    /// the task-level weights broadcast otherwise, Crowdlayer's confusion read at the
    /// one-hot bottlenecks.
    pub fn skills(&self, x: &Tensor) -> Result<(Tensor, Tensor), NeuralError> {
        let n = x.dim(0)?;
        if let Some(s) = self.context_skills(x)? {
            return Ok(s);
        }
        let per_class = match &self.judges {
            Judges::Skills { w, .. } => w.as_tensor().clone(),
            Judges::Confusion(c) => {
                let logits = c.as_tensor().reshape((2, self.k, 2))?;
                candle_nn::ops::softmax(&logits, 2)?.narrow(2, 1, 1)?.squeeze(2)?
            }
            Judges::None => return Err(NeuralError::Setting("Train-on-MV has no judge skills".into())),
        };
        let row = |c: usize| -> Result<Tensor, NeuralError> {
            Ok(per_class.narrow(0, c, 1)?.broadcast_as((n, self.k))?.contiguous()?)
        };
        Ok((row(0)?, row(1)?))
    }

    /// Each judge's predicted P(b=1|x), [batch, K], from the bottleneck `s`.
    fn predicted(&self, s: &Tensor) -> Result<Tensor, NeuralError> {
        match &self.judges {
            Judges::Skills { w, .. } => Ok(s.matmul(w.as_tensor())?.clamp(OUTPUT_BOUNDS.0, OUTPUT_BOUNDS.1)?),
            Judges::Confusion(c) => {
                let logits = s.matmul(c.as_tensor())?.reshape((s.dim(0)?, self.k, 2))?;
                Ok(candle_nn::ops::softmax(&logits, 2)?
                    .narrow(2, 1, 1)?
                    .squeeze(2)?
                    .clamp(OUTPUT_BOUNDS.0, OUTPUT_BOUNDS.1)?)
            }
            Judges::None => Err(NeuralError::Setting("Train-on-MV predicts no judge outputs".into())),
        }
    }

    /// Training loss on one batch (dropout masks drawn from `rng`).
    pub fn loss(
        &self,
        x: &Tensor,
        y: &Tensor,
        mask: &Tensor,
        lambda: f64,
        rng: &mut ChaCha8Rng,
    ) -> Result<Tensor, NeuralError> {
        let s = self.head.forward(&head::dropout(x, self.dropout, rng)?)?;
        let eps = 1e-6;
        if self.method == ModelKind::TrainOnMv {
            let (s0, s1) = (s.narrow(1, 0, 1)?, s.narrow(1, 1, 1)?);
            let ce = (y.mul(&(s1 + eps)?.log()?)? + (1.0 - y)?.mul(&(s0 + eps)?.log()?)?)?.neg()?;
            return Ok(ce.mean_all()?);
        }
        let q = self.predicted(&s)?;
        let ce = (y.mul(&q.log()?)? + (1.0 - y)?.mul(&(1.0 - &q)?.log()?)?)?.neg()?;
        let mut loss = (ce.mul(mask)?.sum_all()? / mask.sum_all()?.to_scalar::<f32>()?.max(1.0) as f64)?;
        if let Judges::Skills { w, .. } = &self.judges {
            let (w0, w1) = (w.as_tensor().narrow(0, 0, 1)?, w.as_tensor().narrow(0, 1, 1)?);
            if lambda != 0.0 {
                loss = (loss + ((w1 - &w0)?.sqr()?.mean_all()? * lambda)?)?;
            }
            if let Some((c0, c1)) = self.context_skills(x)? {
                let n = x.dim(0)?;
                let target = |t: &Tensor| -> Result<Tensor, NeuralError> {
                    Ok(t.detach().broadcast_as((n, self.k))?.contiguous()?)
                };
                let copy = ((c0 - target(&w0)?)?.sqr()?.mean_all()?
                    + (c1 - target(&w.as_tensor().narrow(0, 1, 1)?)?)?.sqr()?.mean_all()?)?;
                loss = (loss + (copy * 0.5)?)?;
            }
        }
        Ok(loss)
    }

    /// The context model alone: s1 = P(c = 1 | x) per example.
    pub fn prior(&self, x: &Tensor) -> Result<Vec<f32>, NeuralError> {
        Ok(self.bottleneck(x)?.narrow(1, 1, 1)?.flatten_all()?.to_vec1()?)
    }

    /// Posterior P(c = 1 | x, judges): SkillAggregation and -X by Eq. (8) on the judges'
    /// binary verdicts with P(b=1|c) = w_c (-X: its per-context skills), as the
    /// authors' `predict --aggregation hardEM`; Crowdlayer and Train-on-MV: s1.
    pub fn posterior(&self, x: &Tensor, y: &Tensor, mask: &Tensor) -> Result<Vec<f32>, NeuralError> {
        if matches!(self.method, ModelKind::Crowdlayer | ModelKind::TrainOnMv) {
            return self.prior(x);
        }
        let s = self.bottleneck(x)?;
        let b = &y.gt(0.5)?.to_dtype(DType::F32)?;
        let eps = 1e-6;
        let (w0, w1) = self.skills(x)?;
        let (w0, w1) = (w0.clamp(eps, 1.0 - eps)?, w1.clamp(eps, 1.0 - eps)?);
        let log_lik = |w: &Tensor| -> Result<Tensor, NeuralError> {
            Ok((b.mul(&w.log()?)? + (1.0 - b)?.mul(&(1.0 - w)?.log()?)?)?.mul(mask)?.sum_keepdim(1)?)
        };
        let a1 = (s.narrow(1, 1, 1)? + eps)?.log()?.add(&log_lik(&w1)?)?;
        let a0 = (s.narrow(1, 0, 1)? + eps)?.log()?.add(&log_lik(&w0)?)?;
        Ok(candle_nn::ops::sigmoid(&(a1 - a0)?)?.flatten_all()?.to_vec1()?)
    }

    /// Each judge's mean slope P(b=1|c=1) - P(b=1|c=0) over `x`; empty for Train-on-MV.
    pub fn slopes(&self, x: &Tensor) -> Result<Vec<f32>, NeuralError> {
        if matches!(self.judges, Judges::None) {
            return Ok(Vec::new());
        }
        let (w0, w1) = self.skills(x)?;
        Ok((w1 - w0)?.mean(0)?.to_vec1()?)
    }
}

train::context_model!(PaperModel, |m, x, y, mask, lambda, rng| m.loss(x, y, mask, lambda, rng));

/// Starting raw weights [w0 of every judge, then w1 of every judge]: P(b=1|c=0) =
/// 1 - skill_init and P(b=1|c=1) = skill_init, or per judge from (p0, p1) estimates.
fn start_weights(cfg: &TrainConfig, k: usize) -> Result<Vec<f32>, NeuralError> {
    let Some(skills) = cfg.start_skills(k)? else {
        let p = cfg.skill_init as f32;
        return Ok(std::iter::repeat_n(1.0 - p, k).chain(std::iter::repeat_n(p, k)).collect());
    };
    Ok(skills.iter().map(|s| 1.0 - s.0 as f32).chain(skills.iter().map(|s| s.1 as f32)).collect())
}

/// Trains one model with the `paper` recipe; `on_epoch(epoch, mean_loss, &model)` runs
/// after every epoch. Deterministic for a given seed.
pub fn train(
    x: &Tensor,
    jury: &JuryData,
    cfg: &TrainConfig,
    mut on_epoch: impl FnMut(usize, f64, &PaperModel) -> Result<(), NeuralError>,
) -> Result<PaperModel, NeuralError> {
    let mut rng = train::rng(cfg.seed);
    let model = PaperModel::new(x.dim(1)?, jury.k, cfg, &mut rng, x.device())?;
    let (x, y, mask) = tensors(x, jury, cfg.method)?;
    let loss = |xb: &Tensor, yb: &Tensor, mb: &Tensor, rng: &mut ChaCha8Rng| model.loss(xb, yb, mb, cfg.lambda, rng);
    train::fit(&x, &y, &mask, model.vars(), cfg, &mut rng, loss, |epoch, l| on_epoch(epoch, l, &model))?;
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jury_data::tests::jury;

    fn cfg(method: ModelKind) -> TrainConfig {
        let recipe = crate::Recipe::Paper;
        TrainConfig {
            recipe,
            schedule: recipe.schedule(),
            adam_eps: recipe.adam_eps(),
            dropout: recipe.dropout(),
            method,
            lambda: 0.0,
            epochs: 4,
            batch: recipe.batch(false),
            lr: 1e-2,
            seed: 3,
            skill_init: recipe.skill_init(),
            hidden: 0,
            judge_skills: None,
        }
    }

    fn row(t: &Tensor) -> Vec<f32> {
        t.narrow(0, 0, 1).unwrap().flatten_all().unwrap().to_vec1().unwrap()
    }

    /// The authors' start: P(b=1|c=1) = 0.7 and P(b=1|c=0) = 0.3 for every judge (slope
    /// 0.4); Dawid-Skene estimates (p0, p1) start at (1 - p0, p1), clamped.
    #[test]
    fn skills_start_as_raw_weights_at_the_authors_values() {
        let x = Tensor::zeros((3, 4), DType::F32, &Device::Cpu).unwrap();
        let mut rng = train::rng(0);
        let m = PaperModel::new(4, 2, &cfg(ModelKind::SkillAgg), &mut rng, &Device::Cpu).unwrap();
        let (w0, w1) = m.skills(&x).unwrap();
        assert_eq!((row(&w0), row(&w1)), (vec![0.3f32; 2], vec![0.7f32; 2]));
        assert!(m.slopes(&x).unwrap().iter().all(|s| (s - 0.4).abs() < 1e-6));
        let ds = TrainConfig { judge_skills: Some(vec![(0.9, 0.6), (1.0, 0.2)]), ..cfg(ModelKind::SkillAgg) };
        let m = PaperModel::new(4, 2, &ds, &mut rng, &Device::Cpu).unwrap();
        let (w0, w1) = m.skills(&x).unwrap();
        let close = |a: Vec<f32>, b: [f32; 2]| a.iter().zip(b).all(|(a, b)| (a - b).abs() < 1e-6);
        assert!(close(row(&w0), [0.1, 0.01]) && close(row(&w1), [0.6, 0.2]), "{:?} {:?}", row(&w0), row(&w1));
    }

    /// A predicted judge output never reaches 0 or 1: a judge weight pushed past the
    /// bounds still gives a finite loss.
    #[test]
    fn predicted_outputs_are_clamped() {
        let mut rng = train::rng(0);
        let m = PaperModel::new(2, 1, &cfg(ModelKind::SkillAgg), &mut rng, &Device::Cpu).unwrap();
        let Judges::Skills { w, .. } = &m.judges else { panic!() };
        w.set(&Tensor::new(&[[-3f32], [5.0]], &Device::Cpu).unwrap()).unwrap();
        let s = Tensor::new(&[[0f32, 1.0], [1.0, 0.0]], &Device::Cpu).unwrap();
        let q: Vec<f32> = m.predicted(&s).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(q, vec![(1.0 - 1e-4) as f32, 1e-4]);
    }

    /// -X's skill layer reads the context vector detached: no gradient flows from the
    /// per-context skills back into it (the encoder, when fine-tuned).
    #[test]
    fn no_gradient_reaches_the_context_from_the_x_skills() {
        let mut rng = train::rng(0);
        let m = PaperModel::new(4, 3, &cfg(ModelKind::SkillAggX), &mut rng, &Device::Cpu).unwrap();
        let x = Var::from_tensor(&Tensor::ones((5, 4), DType::F32, &Device::Cpu).unwrap()).unwrap();
        let (c0, c1) = m.context_skills(x.as_tensor()).unwrap().unwrap();
        let grads = (c0.sum_all().unwrap() + c1.sum_all().unwrap()).unwrap().backward().unwrap();
        assert!(grads.get(x.as_tensor()).is_none());
        let Judges::Skills { context: Some((weight, _)), .. } = &m.judges else { panic!() };
        assert!(grads.get(weight.as_tensor()).is_some(), "the skill layer itself learns");
        // The bottleneck does pass gradient to x: only the skill path is cut.
        let grads = m.bottleneck(x.as_tensor()).unwrap().sum_all().unwrap().backward().unwrap();
        assert!(grads.get(x.as_tensor()).is_some());
    }

    /// The -X skill layer learns to copy the task-level skills (the authors' freeze
    /// phase), so its per-context skills end near them; the posterior recovers the truth.
    #[test]
    fn x_skills_copy_the_task_skills_and_the_posterior_recovers_the_labels() {
        let truth = [(0.9, 0.8), (0.7, 0.65), (0.6, 0.9)];
        let (x, y, present, labels) = jury(2000, &truth, 1);
        let data = JuryData { n: 2000, k: 3, y: &y, present: &present };
        let m = train(&x, &data, &TrainConfig { epochs: 6, ..cfg(ModelKind::SkillAggX) }, |_, _, _| Ok(())).unwrap();
        let Judges::Skills { w, .. } = &m.judges else { panic!() };
        let task: Vec<Vec<f32>> = w.as_tensor().to_vec2().unwrap();
        let (c0, c1) = m.context_skills(&x).unwrap().unwrap();
        let (c0, c1): (Vec<f32>, Vec<f32>) =
            (c0.mean(0).unwrap().to_vec1().unwrap(), c1.mean(0).unwrap().to_vec1().unwrap());
        for j in 0..3 {
            assert!((c0[j] - task[0][j]).abs() < 0.05 && (c1[j] - task[1][j]).abs() < 0.05, "{c0:?} {c1:?} {task:?}");
        }
        let (_, yt, mt) = tensors(&x, &data, ModelKind::SkillAggX).unwrap();
        let post = m.posterior(&x, &yt, &mt).unwrap();
        let acc = post.iter().zip(&labels).filter(|(p, l)| usize::from(**p > 0.5) == **l).count() as f64 / 2000.0;
        assert!(acc > 0.95, "accuracy {acc}");
    }

    /// Crowdlayer starts at identity confusion matrices: P(b=1|c=1) = e/(1+e) and its
    /// posterior is the bottleneck alone.
    #[test]
    fn crowdlayer_starts_at_the_identity_and_reads_s() {
        let mut rng = train::rng(0);
        let m = PaperModel::new(4, 2, &cfg(ModelKind::Crowdlayer), &mut rng, &Device::Cpu).unwrap();
        let x = Tensor::ones((2, 4), DType::F32, &Device::Cpu).unwrap();
        let (w0, w1) = m.skills(&x).unwrap();
        let e = std::f32::consts::E;
        assert!(row(&w1).iter().all(|p| (p - e / (1.0 + e)).abs() < 1e-6), "{:?}", row(&w1));
        assert!(row(&w0).iter().all(|p| (p - 1.0 / (1.0 + e)).abs() < 1e-6), "{:?}", row(&w0));
        let y = Tensor::ones((2, 2), DType::F32, &Device::Cpu).unwrap();
        assert_eq!(m.posterior(&x, &y, &y).unwrap(), m.prior(&x).unwrap());
    }

    /// Dropout masks come from the seed: the same seed gives the same loss, another one
    /// another loss; with dropout 0 the loss does not depend on the generator.
    #[test]
    fn dropout_is_seeded() {
        let (x, y, present, _) = jury(64, &[(0.8, 0.8)], 2);
        let data = JuryData { n: 64, k: 1, y: &y, present: &present };
        let (x, yt, mt) = tensors(&x, &data, ModelKind::SkillAgg).unwrap();
        let mut rng = train::rng(0);
        let m = PaperModel::new(6, 1, &cfg(ModelKind::SkillAgg), &mut rng, &Device::Cpu).unwrap();
        let loss = |seed: u64| m.loss(&x, &yt, &mt, 0.1, &mut train::rng(seed)).unwrap().to_scalar::<f32>().unwrap();
        assert_eq!(loss(1), loss(1));
        assert_ne!(loss(1), loss(2));
        let plain = PaperModel { dropout: 0.0, ..m };
        let a = plain.loss(&x, &yt, &mt, 0.1, &mut train::rng(1)).unwrap().to_scalar::<f32>().unwrap();
        let b = plain.loss(&x, &yt, &mt, 0.1, &mut train::rng(2)).unwrap().to_scalar::<f32>().unwrap();
        assert_eq!(a, b);
    }
}
