//! Ranks models without ground truth from their responses alone: Greedy and Full Triplet
//! Ranking (the triplet-ranking paper's Algorithms 1 and 2) and the most-common-answer
//! baseline, over a pluggable evaluation function.
//!
//! Plain data in, rankings out: no files, no labels. A reference ranking (from known
//! accuracies or reference answers) is scored with `jury-metrics`' ranking measures.
//!
//! Invariants: a `Responses` value is a models x prompts table with at least three models
//! and one prompt, each cell an optional response; every ranking is a permutation of the
//! model indices, best first; the same inputs and seed give the same ranking.

mod eval;
mod mca;
mod reference;
mod triplet;

pub use eval::{Equality, Evaluation, NoisyEquality, Rouge2, rouge2_f};
pub use mca::most_common_answer;
pub use reference::{
    EvalSpec, MeanStd, ModelScore, PerMethod, RBO_P, RankMethod, RankReport, Ranked, ReferenceScore, SimOptions,
    SimRow, SimStudy, order_by, score_against_reference, simulate_study,
};
pub use triplet::{FtrConfig, full_triplet_ranking, greedy_triplet_ranking, judge_prefers};

/// What can be wrong with ranking inputs.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RankError {
    #[error("ranking needs at least 3 models, got {0}")]
    TooFewModels(usize),
    #[error("ranking needs at least one prompt")]
    NoPrompts,
    #[error("model `{model}`: {got} responses, expected one (or none) per prompt: {expected}")]
    Ragged { model: String, got: usize, expected: usize },
    #[error("model `{0}` appears twice")]
    DuplicateModel(String),
    #[error("noisy equality: flip probability {0} is not in [0, 1]")]
    BadNoise(f64),
    #[error("--trials must be at least 1")]
    NoTrials,
    #[error("simulation: {0}")]
    Simulation(String),
}

/// Responses of M models to the same D prompts: `get(model, prompt)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Responses {
    models: Vec<String>,
    n_prompts: usize,
    /// `cells[model][prompt]`.
    cells: Vec<Vec<Option<String>>>,
}

impl Responses {
    /// Validates the table: at least three distinct models, one prompt, and one
    /// (possibly missing) response per model and prompt.
    pub fn new(models: Vec<String>, cells: Vec<Vec<Option<String>>>) -> Result<Self, RankError> {
        if models.len() < 3 {
            return Err(RankError::TooFewModels(models.len()));
        }
        let n_prompts = cells.first().map_or(0, Vec::len);
        if n_prompts == 0 {
            return Err(RankError::NoPrompts);
        }
        let mut seen = std::collections::HashSet::new();
        for (name, row) in models.iter().zip(&cells) {
            if !seen.insert(name.as_str()) {
                return Err(RankError::DuplicateModel(name.clone()));
            }
            if row.len() != n_prompts {
                return Err(RankError::Ragged { model: name.clone(), got: row.len(), expected: n_prompts });
            }
        }
        if cells.len() != models.len() {
            return Err(RankError::Ragged { model: "(table)".into(), got: cells.len(), expected: models.len() });
        }
        Ok(Self { models, n_prompts, cells })
    }

    pub fn n_models(&self) -> usize {
        self.models.len()
    }

    pub fn n_prompts(&self) -> usize {
        self.n_prompts
    }

    pub fn models(&self) -> &[String] {
        &self.models
    }

    pub fn get(&self, model: usize, prompt: usize) -> Option<&str> {
        self.cells[model][prompt].as_deref()
    }
}

/// A ranking of models, best first, with what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranking {
    /// Model indices, best first; a permutation of `0..n_models`.
    pub order: Vec<usize>,
    /// A per-model score where the method has one (FTR reputation, MCA agreement), in
    /// model order.
    pub scores: Option<Vec<f64>>,
    /// Number of "judge compares two candidates" evaluations, each over all prompts.
    pub evaluations: usize,
    /// Whether an iterative method met its tolerance (FTR); `None` for one-pass methods.
    pub converged: Option<bool>,
}

#[cfg(test)]
pub(crate) mod testutil {
    use super::Responses;
    use jury_sim::{ChoiceConfig, simulate_choice};

    /// Simulated multiple-choice answers of models with the given accuracies, as a table.
    pub(crate) fn multiple_choice(acc: &[f64], n_prompts: usize, n_options: u32, seed: u64) -> Responses {
        let cfg = ChoiceConfig { n_questions: n_prompts, n_options, accuracies: acc.to_vec(), seed };
        let sim = simulate_choice(&cfg).unwrap();
        let cells = sim.answers.iter().map(|a| a.iter().map(|x| Some(x.to_string())).collect()).collect();
        Responses::new((0..acc.len()).map(|i| format!("m{i}")).collect(), cells).unwrap()
    }
}
