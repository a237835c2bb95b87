//! What the aggregation heads train: the method and its settings, shared by the head
//! (`head.rs`), the binary trainer (`skill.rs`), the multi-class one and fine-tuning.

/// Which model, and how its posterior is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    /// Encoder head trained on majority-vote labels; posterior = s.
    TrainOnMv,
    /// Task-level skills, no regulariser; posterior = s (judges not used at inference).
    Crowdlayer,
    /// Task-level skills; posterior by Eq. (8) from s and the judges' outputs.
    SkillAgg,
    /// Context-level skills; posterior by Eq. (8).
    SkillAggX,
}

/// Whose training recipe the context-dependent methods follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Recipe {
    /// The SkillAggregation authors' code (BriansIDP/Crowdsourcing, `crowdlayer_dev`):
    /// skills as raw linear weights P(b=1|c) started at 0.7 / 0.3 with the predicted
    /// judge output clamped to [1e-4, 1 - 1e-4]; -X skills a sigmoid layer on the
    /// detached context vector trained only to copy the task-level skills; Crowdlayer
    /// per-judge 2 x 2 confusion logits started at the identity; dropout 0.1 on the
    /// context vector; AdamW (eps 1e-6, no weight decay) with one learning rate 1e-4,
    /// batch 8, 10 epochs, per-step cosine schedule with 3% warm-up; unnormalised
    /// pooling; lambda from {0.05, 0.1, 0.2, 0.5}; the later epoch on dev ties.
    #[default]
    Paper,
    /// jury's own settings before the `paper` recipe (the tables recorded until then):
    /// sigmoid skills started at 0.8, -X a linear map trained through the encoder
    /// features, Crowdlayer as SkillAggregation without the regulariser read without the
    /// judges, no dropout, constant learning rate 1e-3 (AdamW eps 1e-8), batch 256
    /// frozen / 32 fine-tuned, 20 epochs, unit-length pooling, lambda from
    /// {0.01, 0.1, 1}, the earlier epoch on dev ties.
    JuryV1,
}

/// How the learning rate moves over the training steps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Schedule {
    Constant,
    /// Linear warm-up from 0 over the first `warmup` share of all steps, then half a
    /// cosine down to 0 at the last step (transformers' `get_cosine_schedule_with_warmup`).
    Cosine {
        warmup: f64,
    },
}

impl Schedule {
    /// The learning rate's multiplier at 0-based `step` of `total`.
    pub fn factor(self, step: usize, total: usize) -> f64 {
        match self {
            Schedule::Constant => 1.0,
            Schedule::Cosine { warmup } => {
                let warm = (warmup * total as f64).ceil() as usize;
                if step < warm {
                    return step as f64 / warm.max(1) as f64;
                }
                let progress = (step - warm) as f64 / (total - warm).max(1) as f64;
                (0.5 * (1.0 + (std::f64::consts::PI * progress).cos())).max(0.0)
            }
        }
    }
}

impl Recipe {
    /// Learning rate (the heads', and with the `paper` recipe the encoder's too).
    pub fn lr(self) -> f64 {
        match self {
            Recipe::Paper => 1e-4,
            Recipe::JuryV1 => 1e-3,
        }
    }

    pub fn batch(self, finetune: bool) -> usize {
        match (self, finetune) {
            (Recipe::Paper, _) => 8,
            (Recipe::JuryV1, false) => 256,
            (Recipe::JuryV1, true) => 32,
        }
    }

    pub fn epochs(self) -> usize {
        match self {
            Recipe::Paper => 10,
            Recipe::JuryV1 => 20,
        }
    }

    /// The lambda grid the dev set chooses from.
    pub fn lambdas(self) -> Vec<f64> {
        match self {
            Recipe::Paper => vec![0.05, 0.1, 0.2, 0.5],
            Recipe::JuryV1 => vec![0.01, 0.1, 1.0],
        }
    }

    /// Every judge's starting P(correct) in both classes.
    pub fn skill_init(self) -> f64 {
        match self {
            Recipe::Paper => 0.7,
            Recipe::JuryV1 => 0.8,
        }
    }

    pub fn pooling(self) -> crate::Pooling {
        match self {
            Recipe::Paper => crate::Pooling::AsDefined,
            Recipe::JuryV1 => crate::Pooling::UnitLength,
        }
    }

    pub fn schedule(self) -> Schedule {
        match self {
            Recipe::Paper => Schedule::Cosine { warmup: 0.03 },
            Recipe::JuryV1 => Schedule::Constant,
        }
    }

    /// Dropout on the context vector before the bottleneck while training.
    pub fn dropout(self) -> f64 {
        match self {
            Recipe::Paper => 0.1,
            Recipe::JuryV1 => 0.0,
        }
    }

    pub fn adam_eps(self) -> f64 {
        match self {
            Recipe::Paper => 1e-6,
            Recipe::JuryV1 => 1e-8,
        }
    }

    /// Whether a later epoch with the same dev accuracy replaces the pick.
    pub fn later_epoch_on_ties(self) -> bool {
        self == Recipe::Paper
    }
}

/// Training settings.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainConfig {
    /// The model's parameterisation (and the defaults of the settings below).
    pub recipe: Recipe,
    pub schedule: Schedule,
    pub adam_eps: f64,
    /// Dropout on the context vector before the bottleneck while training.
    pub dropout: f64,
    pub method: ModelKind,
    pub lambda: f64,
    pub epochs: usize,
    pub batch: usize,
    pub lr: f64,
    pub seed: u64,
    /// Initial P(correct) of every judge in both classes.
    pub skill_init: f64,
    /// Width of a ReLU hidden layer before the bottleneck; 0 = a linear head.
    pub hidden: usize,
    /// Per-judge starting (p0, p1), for example Dawid-Skene's estimates (binary form
    /// only); `None` starts every judge at `skill_init`.
    pub judge_skills: Option<Vec<(f64, f64)>>,
}

/// Bounds of a starting skill: a judge estimated perfect (or always wrong) by
/// Dawid-Skene would otherwise start where no gradient moves it.
pub(crate) const START_SKILL_BOUNDS: (f64, f64) = (0.01, 0.99);

impl TrainConfig {
    /// The per-judge starting (p0, p1), checked (one per judge, numbers) and clamped to
    /// [0.01, 0.99]; `None` when every judge starts at `skill_init`.
    pub(crate) fn start_skills(&self, k: usize) -> Result<Option<Vec<(f64, f64)>>, crate::NeuralError> {
        let Some(skills) = &self.judge_skills else { return Ok(None) };
        if skills.len() != k {
            return Err(crate::NeuralError::Setting(format!("{} starting skills for {k} judges", skills.len())));
        }
        if let Some((j, _)) = skills.iter().enumerate().find(|(_, (p0, p1))| !(p0.is_finite() && p1.is_finite())) {
            return Err(crate::NeuralError::Setting(format!("judge {j}: starting skill is not a number")));
        }
        let (lo, hi) = START_SKILL_BOUNDS;
        Ok(Some(skills.iter().map(|&(p0, p1)| (p0.clamp(lo, hi), p1.clamp(lo, hi))).collect()))
    }
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            recipe: Recipe::JuryV1,
            schedule: Schedule::Constant,
            adam_eps: 1e-8,
            dropout: 0.0,
            method: ModelKind::SkillAgg,
            lambda: 0.0,
            epochs: 10,
            batch: 256,
            lr: 1e-3,
            seed: 0,
            skill_init: 0.8,
            hidden: 0,
            judge_skills: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SkillAggregation paper's schedule at given steps of 1,000: linear warm-up over the first 30
    /// (3%), the peak at step 30, half of it midway through the decay, near 0 at the end.
    #[test]
    fn cosine_schedule_values() {
        let s = Schedule::Cosine { warmup: 0.03 };
        let f = |step| s.factor(step, 1000);
        assert_eq!((f(0), f(15), f(30)), (0.0, 0.5, 1.0));
        assert!((f(515) - 0.5).abs() < 1e-12, "{}", f(515));
        assert!(f(999) < 1e-4 && f(999) > 0.0);
        assert!((1..1000).all(|t| f(t) <= 1.0 && f(t) >= 0.0));
        assert!((30..999).all(|t| f(t + 1) <= f(t)), "decays monotonically after the warm-up");
        assert_eq!(Schedule::Constant.factor(500, 1000), 1.0);
    }

    /// The two recipes' settings, as documented on [`Recipe`].
    #[test]
    fn recipes_hold_their_documented_settings() {
        let p = Recipe::Paper;
        assert_eq!((p.lr(), p.batch(false), p.epochs(), p.skill_init()), (1e-4, 8, 10, 0.7));
        assert_eq!((p.dropout(), p.adam_eps(), p.lambdas()), (0.1, 1e-6, vec![0.05, 0.1, 0.2, 0.5]));
        assert_eq!(
            (p.schedule(), p.pooling(), p.later_epoch_on_ties()),
            (Schedule::Cosine { warmup: 0.03 }, crate::Pooling::AsDefined, true)
        );
        let v = Recipe::JuryV1;
        assert_eq!((v.lr(), v.batch(false), v.batch(true), v.epochs(), v.skill_init()), (1e-3, 256, 32, 20, 0.8));
        assert_eq!(
            (v.dropout(), v.schedule(), v.pooling(), v.later_epoch_on_ties()),
            (0.0, Schedule::Constant, crate::Pooling::UnitLength, false)
        );
    }
}
