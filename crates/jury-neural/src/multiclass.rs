//! SkillAggregation, -X, Crowdlayer and Train-on-MV for C > 2 classes (the SkillAggregation paper's
//! Appendix F), trained on context vectors (frozen-encoder mode).
//!
//! Model: context vector x -> head -> C-way bottleneck softmax s; each judge j has a
//! confusion matrix P_j[c][c'] = P(judge says c' | class c) with softmax rows, either
//! task-level (C x C logits per judge) or context-level for -X (a linear map from x to
//! the K x C x C logits); the judge's predicted distribution is q_j = sum_c s_c P_j[c];
//! loss = mean over available judges of the cross-entropy of q_j against the judge's
//! probability vector + lambda * mean over judges of ((trace P_j - 1) / (C - 1))^2.
//! Posterior (Eq. 8 generalised): P(c | x, judges) ∝ s_c prod_j prod_c' P_j[c][c']^y_jc'.
//!
//! The regulariser is this project's reading of Appendix F, whose text is cut off in the
//! copy available here: (trace - 1) / (C - 1) is the binary slope p0 + p1 - 1 for C = 2,
//! 0 for a judge whose rows are all the same (chance) and 1 for a perfect judge.
//! Invariants as in `skill`: missing judges contribute nothing; all randomness comes from
//! the seed; the confusion diagonals start at `skill_init` > 1 / C.

use candle_core::{D, Device, Tensor, Var};
use jury_core::argmax;
use rand_chacha::ChaCha8Rng;

use crate::NeuralError;
use crate::config::{ModelKind, TrainConfig};
use crate::head::{Head, JudgeLogits};
use crate::train;

/// Judge outputs for C classes: `y[(n*k + j)*c + class]` = judge j's probability of
/// `class` on example n; `present[n*k + j]` marks the available judgments.
pub struct MultiData<'a> {
    pub n: usize,
    pub k: usize,
    pub c: usize,
    pub y: &'a [f32],
    pub present: &'a [bool],
}

/// A trained multi-class model's parameters.
pub struct MultiModel {
    head: Head,
    /// K x C x C confusion logits, through a softmax over each row.
    conf: JudgeLogits,
    /// `eye[c][c']` = 1 on the diagonal: picks the traces out of the confusion matrices.
    eye: Tensor,
    k: usize,
    c: usize,
    method: ModelKind,
}

impl MultiModel {
    pub fn new(
        h: usize,
        k: usize,
        c: usize,
        cfg: &TrainConfig,
        rng: &mut ChaCha8Rng,
        dev: &Device,
    ) -> Result<Self, NeuralError> {
        if cfg.judge_skills.is_some() {
            return Err(NeuralError::Setting("per-judge starting skills take binary judgments".into()));
        }
        let head = Head::new(h, c, cfg.hidden, rng, dev)?;
        // A diagonal logit d with off-diagonal 0 gives P(correct) = e^d / (e^d + C - 1).
        let d = (cfg.skill_init * (c as f64 - 1.0) / (1.0 - cfg.skill_init)).ln() as f32;
        let bias: Vec<f32> =
            (0..k * c * c).map(|i| if (i % (c * c)).is_multiple_of(c + 1) { d } else { 0.0 }).collect();
        let conf = JudgeLogits::new(h, bias, cfg.method == ModelKind::SkillAggX, rng, dev)?;
        let eye: Vec<f32> = (0..c * c).map(|i| if i.is_multiple_of(c + 1) { 1.0 } else { 0.0 }).collect();
        let eye = Tensor::from_vec(eye, (1, 1, c, c), dev)?;
        Ok(Self { head, conf, eye, k, c, method: cfg.method })
    }

    /// The trainable tensors in a fixed order (head weight, head bias, confusion bias,
    /// then the confusion weight and the hidden layer when present).
    pub fn vars(&self) -> Vec<Var> {
        self.conf.model_vars(&self.head)
    }

    /// Bottleneck s: [batch, C].
    pub fn bottleneck(&self, x: &Tensor) -> Result<Tensor, NeuralError> {
        self.head.forward(x)
    }

    /// The context model alone: s flattened, C values per example.
    pub fn prior(&self, x: &Tensor) -> Result<Vec<f32>, NeuralError> {
        Ok(self.bottleneck(x)?.flatten_all()?.to_vec1()?)
    }

    /// Confusion matrices [batch, K, C, C], rows summing to 1.
    pub fn confusion(&self, x: &Tensor) -> Result<Tensor, NeuralError> {
        let b = x.dim(0)?;
        let logits = self.conf.forward(x)?;
        Ok(candle_nn::ops::softmax(&logits.reshape((b, self.k, self.c, self.c))?, D::Minus1)?)
    }

    /// Each judge's normalised slope (trace - 1) / (C - 1): [batch, K].
    fn slope(&self, conf: &Tensor) -> Result<Tensor, NeuralError> {
        let trace = conf.broadcast_mul(&self.eye)?.sum(D::Minus1)?.sum(D::Minus1)?;
        Ok(((trace - 1.0)? / (self.c as f64 - 1.0))?)
    }

    /// Training loss on one batch: `y` [batch, K, C] judge distributions (Train-on-MV:
    /// [batch, C] one-hot majority vote), `mask` [batch, K].
    pub fn loss(&self, x: &Tensor, y: &Tensor, mask: &Tensor, lambda: f64) -> Result<Tensor, NeuralError> {
        let eps = 1e-6;
        let s = self.bottleneck(x)?;
        if self.method == ModelKind::TrainOnMv {
            return Ok(y.mul(&(s + eps)?.log()?)?.sum(D::Minus1)?.neg()?.mean_all()?);
        }
        let b = x.dim(0)?;
        let conf = self.confusion(x)?;
        // q[b, k, c'] = sum_c s[b, c] P[b, k, c, c'].
        let q = s.reshape((b, 1, self.c, 1))?.broadcast_mul(&conf)?.sum(2)?;
        let ce = y.mul(&(q + eps)?.log()?)?.sum(D::Minus1)?.neg()?;
        let ce = (ce.mul(mask)?.sum_all()? / mask.sum_all()?.to_scalar::<f32>()?.max(1.0) as f64)?;
        if lambda == 0.0 {
            return Ok(ce);
        }
        Ok((ce + (self.slope(&conf)?.sqr()?.mean_all()? * lambda)?)?)
    }

    /// Posterior rows [n][C], flattened. SkillAgg / -X: log s_c + sum over available
    /// judges of sum_c' y_jc' log P_j[c][c'], normalised; Crowdlayer and Train-on-MV: s.
    pub fn posterior(&self, x: &Tensor, y: &Tensor, mask: &Tensor) -> Result<Vec<f32>, NeuralError> {
        if matches!(self.method, ModelKind::Crowdlayer | ModelKind::TrainOnMv) {
            return self.prior(x);
        }
        let s = self.bottleneck(x)?;
        let (b, eps) = (x.dim(0)?, 1e-6);
        let log_conf = (self.confusion(x)? + eps)?.log()?;
        // [b, K, 1, C'] * [b, K, C, C'] summed over C' -> [b, K, C], masked, summed over K.
        let per_judge = y.reshape((b, self.k, 1, self.c))?.broadcast_mul(&log_conf)?.sum(D::Minus1)?;
        let evidence = per_judge.broadcast_mul(&mask.reshape((b, self.k, 1))?)?.sum(1)?;
        let logits = ((s + eps)?.log()? + evidence)?;
        Ok(candle_nn::ops::softmax(&logits, D::Minus1)?.flatten_all()?.to_vec1()?)
    }

    /// Each judge's mean normalised slope over `x`.
    pub fn slopes(&self, x: &Tensor) -> Result<Vec<f32>, NeuralError> {
        Ok(self.slope(&self.confusion(x)?)?.mean(0)?.to_vec1()?)
    }

    /// Gradient norm of every trainable tensor for one loss evaluation (for tests).
    pub fn grad_norms(&self, x: &Tensor, y: &Tensor, mask: &Tensor, lambda: f64) -> Result<Vec<f32>, NeuralError> {
        train::grad_norms(&self.loss(x, y, mask, lambda)?, &self.vars())
    }
}

train::context_model!(MultiModel, |m, x, y, mask, lambda, _rng| m.loss(x, y, mask, lambda));

/// Training tensors: judge distributions [n, K, C] (Train-on-MV: the one-hot majority
/// vote of the available judges' argmax votes [n, C], ties to the lowest class) and the
/// mask [n, K].
pub fn tensors(jury: &MultiData, method: ModelKind, dev: &Device) -> Result<(Tensor, Tensor), NeuralError> {
    let (n, k, c) = (jury.n, jury.k, jury.c);
    let mask: Vec<f32> = jury.present.iter().map(|&p| if p { 1.0 } else { 0.0 }).collect();
    let mask_t = Tensor::from_vec(mask, (n, k), dev)?;
    if method != ModelKind::TrainOnMv {
        let y: Vec<f32> = (0..n * k * c).map(|i| if jury.present[i / c] { jury.y[i] } else { 0.0 }).collect();
        return Ok((Tensor::from_vec(y, (n, k, c), dev)?, mask_t));
    }
    let mut mv = vec![0f32; n * c];
    for i in 0..n {
        let mut votes = vec![0usize; c];
        for j in (0..k).filter(|&j| jury.present[i * k + j]) {
            let row = &jury.y[(i * k + j) * c..(i * k + j + 1) * c];
            let arg = argmax(row);
            votes[arg] += 1;
        }
        let top = argmax(&votes);
        mv[i * c + top] = 1.0;
    }
    Ok((Tensor::from_vec(mv, (n, c), dev)?, mask_t))
}

/// Trains one model; `on_epoch(epoch, mean_loss, &model)` runs after every epoch.
/// Deterministic for a given seed.
pub fn train(
    x: &Tensor,
    jury: &MultiData,
    cfg: &TrainConfig,
    mut on_epoch: impl FnMut(usize, f64, &MultiModel) -> Result<(), NeuralError>,
) -> Result<MultiModel, NeuralError> {
    let mut rng = train::rng(cfg.seed);
    let model = MultiModel::new(x.dim(1)?, jury.k, jury.c, cfg, &mut rng, x.device())?;
    let (y, mask) = tensors(jury, cfg.method, x.device())?;
    let loss = |xb: &Tensor, yb: &Tensor, mb: &Tensor, _: &mut ChaCha8Rng| model.loss(xb, yb, mb, cfg.lambda);
    train::fit(x, &y, &mask, model.vars(), cfg, &mut rng, loss, |epoch, l| on_epoch(epoch, l, &model))?;
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// A 3-class jury whose context predicts the class (x holds a noisy one-hot of c):
    /// judge j is right with probability acc_j and otherwise picks a wrong class
    /// uniformly; it reports a one-hot vote. 10% of judgments are missing.
    fn jury(n: usize, acc: &[f64], seed: u64) -> (Tensor, Vec<f32>, Vec<bool>, Vec<usize>) {
        let (mut rng, c, h) = (ChaCha8Rng::seed_from_u64(seed), 3usize, 6usize);
        let (mut x, mut y, mut present, mut labels) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..n {
            let class = rng.random_range(0..c);
            labels.push(class);
            x.extend((0..h).map(|i| (if i == class { 1.0 } else { 0.0 }) + (rng.random::<f64>() - 0.5) as f32 * 0.8));
            for &a in acc {
                let vote = if rng.random_bool(a) { class } else { (class + rng.random_range(1..c)) % c };
                y.extend((0..c).map(|k| if k == vote { 1.0f32 } else { 0.0 }));
                present.push(rng.random::<f64>() >= 0.1);
            }
        }
        (Tensor::from_vec(x, (n, h), &Device::Cpu).unwrap(), y, present, labels)
    }

    fn cfg(method: ModelKind, lambda: f64, seed: u64) -> TrainConfig {
        TrainConfig { method, lambda, epochs: 40, lr: 0.05, seed, skill_init: 0.7, ..TrainConfig::default() }
    }

    /// Appendix F's loss and posterior against the formulas written out in f64, one
    /// example, judge and class at a time, from the model's own bottleneck and
    /// confusion matrices (SkillAggregation-X: per example), on soft judge outputs.
    #[test]
    fn loss_and_posterior_are_the_papers_formulas() {
        let (n, k, c) = (48, 3, 3);
        let (x, y, present, _) = jury(n, &[0.8, 0.6, 0.45], 9);
        let soft: Vec<f32> = y.iter().enumerate().map(|(i, &v)| 0.1 + 0.7 * v + 0.02 * (i % 5) as f32).collect();
        let soft: Vec<f32> =
            soft.chunks(c).flat_map(|r| r.iter().map(|v| v / r.iter().sum::<f32>()).collect::<Vec<_>>()).collect();
        let data = MultiData { n, k, c, y: &soft, present: &present };
        let m = train(&x, &data, &TrainConfig { epochs: 3, ..cfg(ModelKind::SkillAggX, 0.0, 3) }, |_, _, _| Ok(()))
            .unwrap();
        let (yt, mt) = tensors(&data, ModelKind::SkillAggX, &Device::Cpu).unwrap();
        let s: Vec<Vec<f32>> = m.bottleneck(&x).unwrap().to_vec2().unwrap();
        let conf: Vec<f32> = m.confusion(&x).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        let p = |e: usize, j: usize, a: usize, b: usize| conf[((e * k + j) * c + a) * c + b] as f64;
        let eps = 1e-6;
        let (mut ce, mut count, mut slope2) = (0.0f64, 0usize, 0.0f64);
        let mut want_post = Vec::new();
        for e in 0..n {
            let mut logits: Vec<f64> = (0..c).map(|a| (s[e][a] as f64 + eps).ln()).collect();
            for j in 0..k {
                let trace: f64 = (0..c).map(|a| p(e, j, a, a)).sum();
                slope2 += ((trace - 1.0) / (c as f64 - 1.0)).powi(2);
                if !present[e * k + j] {
                    continue;
                }
                let yj = |b: usize| soft[(e * k + j) * c + b] as f64;
                for b in 0..c {
                    let q: f64 = (0..c).map(|a| s[e][a] as f64 * p(e, j, a, b)).sum();
                    ce -= yj(b) * (q + eps).ln();
                }
                count += 1;
                for (a, l) in logits.iter_mut().enumerate() {
                    *l += (0..c).map(|b| yj(b) * (p(e, j, a, b) + eps).ln()).sum::<f64>();
                }
            }
            let top = logits.iter().cloned().fold(f64::MIN, f64::max);
            let z: f64 = logits.iter().map(|l| (l - top).exp()).sum();
            want_post.extend(logits.iter().map(|l| (l - top).exp() / z));
        }
        let lambda = 0.4;
        let want_loss = ce / count as f64 + lambda * slope2 / (n * k) as f64;
        let got_loss = m.loss(&x, &yt, &mt, lambda).unwrap().to_scalar::<f32>().unwrap() as f64;
        assert!((got_loss - want_loss).abs() < 1e-4, "loss {got_loss} against {want_loss}");
        let got_post = m.posterior(&x, &yt, &mt).unwrap();
        assert_eq!(got_post.len(), n * c);
        for (i, (g, w)) in got_post.iter().zip(&want_post).enumerate() {
            assert!((*g as f64 - w).abs() < 1e-4, "example {}, class {}: posterior {g} against {w}", i / c, i % c);
        }
    }

    fn accuracy(post: &[f32], labels: &[usize]) -> f64 {
        let right = post.chunks(3).zip(labels).filter(|(row, l)| argmax(row) == **l).count();
        right as f64 / labels.len() as f64
    }

    #[test]
    fn task_level_confusions_recover_known_judges() {
        let acc = [0.9, 0.7, 0.5, 0.4];
        let (x, y, present, labels) = jury(6000, &acc, 1);
        let data = MultiData { n: 6000, k: 4, c: 3, y: &y, present: &present };
        let model = train(&x, &data, &cfg(ModelKind::SkillAgg, 0.0, 0), |_, _, _| Ok(())).unwrap();
        let conf: Vec<f32> =
            model.confusion(&x.narrow(0, 0, 1).unwrap()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        for (j, &a) in acc.iter().enumerate() {
            for class in 0..3 {
                let row = &conf[j * 9 + class * 3..j * 9 + class * 3 + 3];
                assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-4);
                assert!((row[class] as f64 - a).abs() < 0.05, "judge {j} class {class}: {row:?} vs {a}");
            }
        }
        let (yt, mt) = tensors(&data, ModelKind::SkillAgg, &Device::Cpu).unwrap();
        let post = model.posterior(&x, &yt, &mt).unwrap();
        assert!(
            post.chunks(3)
                .all(|r| r.iter().all(|p| (0.0..=1.0).contains(p)) && (r.iter().sum::<f32>() - 1.0).abs() < 1e-4)
        );
        assert!(accuracy(&post, &labels) > 0.95, "accuracy {}", accuracy(&post, &labels));
    }

    #[test]
    fn regulariser_lowers_the_strongest_judges_slope() {
        let acc = [0.95, 0.6, 0.55];
        let (x, y, present, _) = jury(3000, &acc, 2);
        let data = MultiData { n: 3000, k: 3, c: 3, y: &y, present: &present };
        let free = train(&x, &data, &cfg(ModelKind::SkillAgg, 0.0, 0), |_, _, _| Ok(())).unwrap();
        let reg = train(&x, &data, &cfg(ModelKind::SkillAgg, 1.0, 0), |_, _, _| Ok(())).unwrap();
        let (a, b) = (free.slopes(&x).unwrap()[0], reg.slopes(&x).unwrap()[0]);
        assert!(b < a - 0.05, "slope without {a}, with the regulariser {b}");
    }

    #[test]
    fn gradients_reach_every_parameter_and_seeds_repeat() {
        let (x, y, present, _) = jury(512, &[0.8, 0.6], 3);
        let data = MultiData { n: 512, k: 2, c: 3, y: &y, present: &present };
        for method in [ModelKind::SkillAgg, ModelKind::SkillAggX, ModelKind::Crowdlayer, ModelKind::TrainOnMv] {
            let c = TrainConfig { epochs: 2, hidden: 8, ..cfg(method, 0.5, 7) };
            let m = train(&x, &data, &c, |_, _, _| Ok(())).unwrap();
            let (yt, mt) = tensors(&data, method, &Device::Cpu).unwrap();
            let norms = m.grad_norms(&x, &yt, &mt, 0.5).unwrap();
            // Train-on-MV has no confusion parameters: head weight and bias, hidden layer.
            let reached: Vec<bool> = norms.iter().map(|&g| g > 0.0).collect();
            let want = if method == ModelKind::TrainOnMv {
                vec![true, true, false, true, true]
            } else {
                vec![true; norms.len()]
            };
            assert_eq!(reached, want, "{method:?}: {norms:?}");
            let again = train(&x, &data, &c, |_, _, _| Ok(())).unwrap();
            assert_eq!(m.posterior(&x, &yt, &mt).unwrap(), again.posterior(&x, &yt, &mt).unwrap());
        }
    }
}
