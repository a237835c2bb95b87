//! What the aggregation heads train: the method and its settings, shared by the head
//! (`head.rs`), the binary trainer (`skill.rs`), the multi-class one and fine-tuning.

/// Which model, and how its posterior is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Encoder head trained on majority-vote labels; posterior = s.
    TrainOnMv,
    /// Task-level skills, no regulariser; posterior = s (judges not used at inference).
    Crowdlayer,
    /// Task-level skills; posterior by Eq. (8) from s and the judges' outputs.
    SkillAgg,
    /// Context-level skills; posterior by Eq. (8).
    SkillAggX,
}

/// Training settings.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainConfig {
    pub method: Method,
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

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            method: Method::SkillAgg,
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
