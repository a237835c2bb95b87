//! The jury-v1 recipe's context models (`--recipe jury-v1`: jury's own training, kept
//! beside the default recipe that follows the SkillAggregation authors' code,
//! `paper_models`): SkillAggregation (Sun et al.), its -X variant and the neural
//! baselines Crowdlayer and Train-on-MV, binary form, on context vectors.
//!
//! Model: context vector x -> linear head -> bottleneck softmax s = (s0, s1); per-judge
//! skills p0 = P(b=0|c=0), p1 = P(b=1|c=1), either task-level (two logits per judge) or
//! context-level for -X (a linear map from x to 2K logits); each judge's predicted
//! P(b=1|x) = (1 - p0) s0 + p1 s1; loss = mean cross-entropy against each available
//! judge probability + lambda * mean (p0 + p1 - 1)^2.
//!
//! Invariants: missing judges contribute nothing to the loss or the posterior; all
//! randomness (initialisation, batch order) comes from the seed; skills start at
//! `skill_init` > 0.5 (at 0.5 the slope p0 + p1 - 1 is zero and no signal reaches s).

use candle_core::{Device, Tensor, Var};
use rand_chacha::ChaCha8Rng;

use crate::NeuralError;
use crate::head::{Head, JudgeLogits};
use crate::jury_data::{JuryData, tensors};
use crate::train;

pub use crate::config::{ModelKind, TrainConfig};

/// A trained model's parameters.
pub struct SkillModel {
    head: Head,
    /// [p0 of every judge, then p1 of every judge], through a sigmoid.
    skills: JudgeLogits,
    k: usize,
    method: ModelKind,
}

fn logit(p: f64) -> f32 {
    (p / (1.0 - p)).ln() as f32
}

/// The skill bias's starting logits, [p0 of every judge, then p1 of every judge].
fn start_logits(cfg: &TrainConfig, k: usize) -> Result<Vec<f32>, NeuralError> {
    let Some(skills) = cfg.start_skills(k)? else { return Ok(vec![logit(cfg.skill_init); 2 * k]) };
    Ok(skills.iter().map(|s| logit(s.0)).chain(skills.iter().map(|s| logit(s.1))).collect())
}

impl SkillModel {
    pub fn new(h: usize, k: usize, cfg: &TrainConfig, rng: &mut ChaCha8Rng, dev: &Device) -> Result<Self, NeuralError> {
        let head = Head::new(h, 2, cfg.hidden, rng, dev)?;
        let skills = JudgeLogits::new(h, start_logits(cfg, k)?, cfg.method == ModelKind::SkillAggX, rng, dev)?;
        Ok(Self { head, skills, k, method: cfg.method })
    }

    /// The trainable tensors, in a fixed order (head weight, head bias, skill bias, then
    /// the skill weight and the hidden layer when present).
    pub fn vars(&self) -> Vec<Var> {
        self.skills.model_vars(&self.head)
    }

    /// Bottleneck s: [batch, 2].
    pub fn bottleneck(&self, x: &Tensor) -> Result<Tensor, NeuralError> {
        self.head.forward(x)
    }

    /// Skills (p0, p1), each [batch, K] (task-level skills broadcast over the batch).
    pub fn skills(&self, x: &Tensor) -> Result<(Tensor, Tensor), NeuralError> {
        let logits = self.skills.forward(x)?;
        let p = candle_nn::ops::sigmoid(&logits)?;
        Ok((p.narrow(1, 0, self.k)?, p.narrow(1, self.k, self.k)?))
    }

    /// Training loss on one batch: masked mean cross-entropy + lambda * mean slope^2
    /// (Train-on-MV: cross-entropy of s against the majority-vote targets in `y`).
    pub fn loss(&self, x: &Tensor, y: &Tensor, mask: &Tensor, lambda: f64) -> Result<Tensor, NeuralError> {
        let s = self.bottleneck(x)?;
        let eps = 1e-6;
        let (s0, s1) = (s.narrow(1, 0, 1)?, s.narrow(1, 1, 1)?);
        if self.method == ModelKind::TrainOnMv {
            // y: [batch, 1] majority-vote target in {0, 1}.
            let ce = (y.mul(&(s1 + eps)?.log()?)? + (1.0 - y)?.mul(&(s0 + eps)?.log()?)?)?.neg()?;
            return Ok(ce.mean_all()?);
        }
        let (p0, p1) = self.skills(x)?;
        let q = ((1.0 - &p0)?.broadcast_mul(&s0)? + p1.broadcast_mul(&s1)?)?.clamp(eps, 1.0 - eps)?;
        let ce = (y.mul(&q.log()?)? + (1.0 - y)?.mul(&(1.0 - &q)?.log()?)?)?.neg()?;
        let ce = (ce.mul(mask)?.sum_all()? / mask.sum_all()?.to_scalar::<f32>()?.max(1.0) as f64)?;
        if lambda == 0.0 {
            return Ok(ce);
        }
        let slope = ((p0 + p1)? - 1.0)?;
        Ok((ce + (slope.sqr()?.mean_all()? * lambda)?)?)
    }

    /// The context model alone: s1 = P(c = 1 | x) per example, without the judges'
    /// outputs (Crowdlayer's and Train-on-MV's posterior).
    pub fn prior(&self, x: &Tensor) -> Result<Vec<f32>, NeuralError> {
        Ok(self.bottleneck(x)?.narrow(1, 1, 1)?.flatten_all()?.to_vec1()?)
    }

    /// Posterior P(c = 1 | x, judges) per example. SkillAgg / -X: the SkillAggregation paper's section
    /// 4.3, s1 prod_j P(b_j | c=1) against s0 prod_j P(b_j | c=0) over the available
    /// judges, on the judges' binary verdicts b = 1[y > 0.5] (the conditional-independence
    /// model is over verdicts; training reads the probabilities), with
    /// P(b | c=1) = p1^b (1-p1)^(1-b) and P(b | c=0) = (1-p0)^b p0^(1-b), in log space.
    /// Crowdlayer and Train-on-MV: s1.
    pub fn posterior(&self, x: &Tensor, y: &Tensor, mask: &Tensor) -> Result<Vec<f32>, NeuralError> {
        if matches!(self.method, ModelKind::Crowdlayer | ModelKind::TrainOnMv) {
            return self.prior(x);
        }
        let s = self.bottleneck(x)?;
        let y = &y.gt(0.5)?.to_dtype(candle_core::DType::F32)?;
        let eps = 1e-6;
        let (p0, p1) = self.skills(x)?;
        let (p0, p1) = (p0.clamp(eps, 1.0 - eps)?, p1.clamp(eps, 1.0 - eps)?);
        let l1 = (y.mul(&p1.log()?)? + (1.0 - y)?.mul(&(1.0 - &p1)?.log()?)?)?.mul(mask)?.sum_keepdim(1)?;
        let l0 = (y.mul(&(1.0 - &p0)?.log()?)? + (1.0 - y)?.mul(&p0.log()?)?)?.mul(mask)?.sum_keepdim(1)?;
        let a1 = (s.narrow(1, 1, 1)? + eps)?.log()?.add(&l1)?;
        let a0 = (s.narrow(1, 0, 1)? + eps)?.log()?.add(&l0)?;
        // P(c=1) = sigmoid(a1 - a0).
        Ok(candle_nn::ops::sigmoid(&(a1 - a0)?)?.flatten_all()?.to_vec1()?)
    }

    /// Each judge's mean slope p0 + p1 - 1 over `x` (its learned skill above chance).
    pub fn slopes(&self, x: &Tensor) -> Result<Vec<f32>, NeuralError> {
        let (p0, p1) = self.skills(x)?;
        Ok(((p0 + p1)? - 1.0)?.mean(0)?.to_vec1()?)
    }

    /// Gradient norm of every trainable tensor for one loss evaluation (for tests).
    pub fn grad_norms(&self, x: &Tensor, y: &Tensor, mask: &Tensor, lambda: f64) -> Result<Vec<f32>, NeuralError> {
        train::grad_norms(&self.loss(x, y, mask, lambda)?, &self.vars())
    }
}

train::context_model!(SkillModel, |m, x, y, mask, lambda, _rng| m.loss(x, y, mask, lambda));

/// Trains one model; `on_epoch(epoch, mean_loss, &model)` runs after every epoch (model
/// selection on a dev set, progress). Deterministic for a given seed.
pub fn train(
    x: &Tensor,
    jury: &JuryData,
    cfg: &TrainConfig,
    mut on_epoch: impl FnMut(usize, f64, &SkillModel) -> Result<(), NeuralError>,
) -> Result<SkillModel, NeuralError> {
    let mut rng = train::rng(cfg.seed);
    let model = SkillModel::new(x.dim(1)?, jury.k, cfg, &mut rng, x.device())?;
    let (x, y, mask) = tensors(x, jury, cfg.method)?;
    let loss = |xb: &Tensor, yb: &Tensor, mb: &Tensor, _: &mut ChaCha8Rng| model.loss(xb, yb, mb, cfg.lambda);
    train::fit(&x, &y, &mask, model.vars(), cfg, &mut rng, loss, |epoch, l| on_epoch(epoch, l, &model))?;
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jury_data::tests::jury;
    use candle_core::DType;

    fn cfg(method: ModelKind, lambda: f64, seed: u64) -> TrainConfig {
        TrainConfig { method, lambda, epochs: 40, lr: 0.05, seed, ..TrainConfig::default() }
    }

    #[test]
    fn task_level_skills_recover_known_judges() {
        let truth = [(0.9, 0.8), (0.7, 0.65), (0.6, 0.9), (0.55, 0.55)];
        let (x, y, present, labels) = jury(6000, &truth, 1);
        let data = JuryData { n: 6000, k: truth.len(), y: &y, present: &present };
        let model = train(&x, &data, &cfg(ModelKind::SkillAgg, 0.0, 0), |_, _, _| Ok(())).unwrap();
        let (p0, p1) = model.skills(&x.narrow(0, 0, 1).unwrap()).unwrap();
        let (p0, p1): (Vec<f32>, Vec<f32>) =
            (p0.flatten_all().unwrap().to_vec1().unwrap(), p1.flatten_all().unwrap().to_vec1().unwrap());
        for (j, &(t0, t1)) in truth.iter().enumerate() {
            assert!(
                (p0[j] as f64 - t0).abs() < 0.05 && (p1[j] as f64 - t1).abs() < 0.05,
                "judge {j}: {} {} vs {t0} {t1}",
                p0[j],
                p1[j]
            );
        }
        let (_, yt, mt) = tensors(&x, &data, ModelKind::SkillAgg).unwrap();
        let post = model.posterior(&x, &yt, &mt).unwrap();
        assert!(post.iter().all(|p| (0.0..=1.0).contains(p)));
        let acc = post.iter().zip(&labels).filter(|(p, l)| usize::from(**p > 0.5) == **l).count() as f64 / 6000.0;
        assert!(acc > 0.95, "accuracy {acc}");
    }

    /// The posterior reads verdicts: a judge at 0.9 and one at 0.6 say the same thing.
    #[test]
    fn posterior_reads_binary_verdicts() {
        let truth = [(0.8, 0.8), (0.7, 0.75)];
        let (x, y, present, _) = jury(512, &truth, 4);
        let data = JuryData { n: 512, k: 2, y: &y, present: &present };
        let m =
            train(&x, &data, &TrainConfig { epochs: 2, ..cfg(ModelKind::SkillAgg, 0.0, 1) }, |_, _, _| Ok(())).unwrap();
        let (xt, yt, mt) = tensors(&x, &data, ModelKind::SkillAgg).unwrap();
        let softened = ((yt.clone() * 0.4).unwrap() + 0.3).unwrap(); // 1 -> 0.7, 0 -> 0.3
        assert_eq!(m.posterior(&xt, &yt, &mt).unwrap(), m.posterior(&xt, &softened, &mt).unwrap());
    }

    /// The loss (Eq. 6 plus lambda times Eq. 7) and the posterior (Eq. 8) against the same
    /// formulas written out in f64, one example and one judge at a time, from the model's
    /// own bottleneck and skills (SkillAggregation-X: skills differ per example).
    #[test]
    fn loss_and_posterior_are_the_papers_formulas() {
        let truth = [(0.8, 0.7), (0.6, 0.9), (0.55, 0.6)];
        let (x, y, present, _) = jury(64, &truth, 6);
        let data = JuryData { n: 64, k: 3, y: &y, present: &present };
        let m = train(&x, &data, &TrainConfig { epochs: 3, ..cfg(ModelKind::SkillAggX, 0.0, 2) }, |_, _, _| Ok(()))
            .unwrap();
        // Soft judge outputs: training reads them as they are, the posterior as verdicts.
        let soft: Vec<f32> = y.iter().enumerate().map(|(i, &v)| 0.15 + 0.7 * v + 0.01 * (i % 7) as f32).collect();
        let data = JuryData { y: &soft, ..data };
        let (xt, yt, mt) = tensors(&x, &data, ModelKind::SkillAggX).unwrap();
        let s: Vec<Vec<f32>> = m.bottleneck(&xt).unwrap().to_vec2().unwrap();
        let (p0, p1) = m.skills(&xt).unwrap();
        let (p0, p1): (Vec<Vec<f32>>, Vec<Vec<f32>>) = (p0.to_vec2().unwrap(), p1.to_vec2().unwrap());
        let (mut ce, mut count, mut slope2) = (0.0f64, 0usize, 0.0f64);
        let mut want_post = Vec::new();
        for n in 0..64 {
            let (s0, s1) = (s[n][0] as f64, s[n][1] as f64);
            let (mut l0, mut l1) = (s0.ln(), s1.ln());
            for j in 0..3 {
                let (a, b) = (p0[n][j] as f64, p1[n][j] as f64);
                slope2 += (a + b - 1.0).powi(2);
                if !present[n * 3 + j] {
                    continue;
                }
                let yj = soft[n * 3 + j] as f64;
                let q = (1.0 - a) * s0 + b * s1;
                ce -= yj * q.ln() + (1.0 - yj) * (1.0 - q).ln();
                count += 1;
                let v = yj > 0.5;
                l1 += if v { b.ln() } else { (1.0 - b).ln() };
                l0 += if v { (1.0 - a).ln() } else { a.ln() };
            }
            want_post.push(1.0 / (1.0 + (l0 - l1).exp()));
        }
        let lambda = 0.3;
        let want_loss = ce / count as f64 + lambda * slope2 / (64.0 * 3.0);
        let got_loss = m.loss(&xt, &yt, &mt, lambda).unwrap().to_scalar::<f32>().unwrap() as f64;
        assert!((got_loss - want_loss).abs() < 1e-4, "loss {got_loss} against {want_loss}");
        let got_post = m.posterior(&xt, &yt, &mt).unwrap();
        for (n, (g, w)) in got_post.iter().zip(&want_post).enumerate() {
            assert!((*g as f64 - w).abs() < 1e-4, "example {n}: posterior {g} against {w}");
        }
    }

    /// Per-judge starting skills are where training starts (clamped off 0 and 1), and a
    /// list that does not match the judges is refused.
    #[test]
    fn judge_skills_set_the_start() {
        let (x, _, _, _) = jury(8, &[(0.8, 0.8)], 5);
        let start = vec![(0.9, 0.6), (0.3, 1.0)];
        let cfg = TrainConfig { judge_skills: Some(start), ..cfg(ModelKind::SkillAggX, 0.0, 0) };
        let m = SkillModel::new(x.dim(1).unwrap(), 2, &cfg, &mut train::rng(0), &Device::Cpu).unwrap();
        let (p0, p1) = m.skills(&Tensor::zeros((1, x.dim(1).unwrap()), DType::F32, &Device::Cpu).unwrap()).unwrap();
        let got: Vec<f32> = Tensor::cat(&[p0, p1], 1).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        for (g, want) in got.iter().zip([0.9, 0.3, 0.6, crate::config::START_SKILL_BOUNDS.1]) {
            assert!((*g as f64 - want).abs() < 1e-5, "{got:?}");
        }
        let wrong = TrainConfig { judge_skills: Some(vec![(0.9, 0.9)]), ..cfg };
        let err = SkillModel::new(x.dim(1).unwrap(), 2, &wrong, &mut train::rng(0), &Device::Cpu).err().unwrap();
        assert!(err.to_string().contains("1 starting skills for 2 judges"), "{err}");
    }

    #[test]
    fn regulariser_lowers_an_overconfident_judges_slope() {
        let truth = [(0.95, 0.95), (0.7, 0.7), (0.65, 0.7)];
        let (x, y, present, _) = jury(3000, &truth, 2);
        let data = JuryData { n: 3000, k: truth.len(), y: &y, present: &present };
        let free = train(&x, &data, &cfg(ModelKind::SkillAgg, 0.0, 0), |_, _, _| Ok(())).unwrap();
        let reg = train(&x, &data, &cfg(ModelKind::SkillAgg, 1.0, 0), |_, _, _| Ok(())).unwrap();
        let (a, b) = (free.slopes(&x).unwrap()[0], reg.slopes(&x).unwrap()[0]);
        assert!(b < a - 0.05, "slope without {a}, with the regulariser {b}");
    }

    #[test]
    fn gradients_reach_every_parameter_and_seeds_repeat() {
        let truth = [(0.8, 0.7), (0.6, 0.75)];
        let (x, y, present, _) = jury(512, &truth, 3);
        let data = JuryData { n: 512, k: 2, y: &y, present: &present };
        for method in [ModelKind::SkillAgg, ModelKind::SkillAggX, ModelKind::Crowdlayer, ModelKind::TrainOnMv] {
            let c = TrainConfig { epochs: 2, ..cfg(method, 0.5, 7) };
            let m = train(&x, &data, &c, |_, _, _| Ok(())).unwrap();
            let (xt, yt, mt) = tensors(&x, &data, method).unwrap();
            let norms = m.grad_norms(&xt, &yt, &mt, 0.5).unwrap();
            let expect = if method == ModelKind::TrainOnMv { 2 } else { norms.len() };
            assert!(norms.iter().take(expect).all(|&g| g > 0.0), "{method:?}: {norms:?}");
            let again = train(&x, &data, &c, |_, _, _| Ok(())).unwrap();
            let (_, yt2, mt2) = tensors(&x, &data, method).unwrap();
            assert_eq!(m.posterior(&xt, &yt2, &mt2).unwrap(), again.posterior(&xt, &yt2, &mt2).unwrap());
        }
    }
}
