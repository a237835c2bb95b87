//! Simulated multiple-choice answers from models of known accuracy: the ground truth for
//! ranking without labels (the triplet-ranking paper's multiple-choice study, its
//! Appendix A.4), where real per-model answers with references are not available.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::SimError;

/// Settings of one simulated multiple-choice benchmark.
#[derive(Debug, Clone, PartialEq)]
pub struct ChoiceConfig {
    pub n_questions: usize,
    /// Answer options per question (at least 2).
    pub n_options: u32,
    /// Each model's probability of answering correctly.
    pub accuracies: Vec<f64>,
    pub seed: u64,
}

impl ChoiceConfig {
    /// `n_models` accuracies evenly spaced from `best` down to `worst` (inclusive).
    pub fn spread(n_models: usize, best: f64, worst: f64, n_questions: usize, n_options: u32, seed: u64) -> Self {
        let accuracies = (0..n_models)
            .map(|i| if n_models == 1 { best } else { best - (best - worst) * i as f64 / (n_models - 1) as f64 })
            .collect();
        Self { n_questions, n_options, accuracies, seed }
    }
}

/// The simulated answers and what they are measured against.
#[derive(Debug, Clone, PartialEq)]
pub struct ChoiceAnswers {
    /// The correct option of each question.
    pub truth: Vec<u32>,
    /// `answers[model][question]`, an option index.
    pub answers: Vec<Vec<u32>>,
}

impl ChoiceAnswers {
    /// Each model's realised accuracy (the share of its answers equal to the truth).
    pub fn accuracies(&self) -> Vec<f64> {
        self.answers
            .iter()
            .map(|a| a.iter().zip(&self.truth).filter(|(x, t)| x == t).count() as f64 / self.truth.len().max(1) as f64)
            .collect()
    }
}

/// Draws the truth uniformly, then each model's answer: correct with its accuracy,
/// otherwise uniform over the wrong options (so two models share a wrong answer only by
/// chance, which is what makes the triplet comparison informative).
pub fn simulate_choice(cfg: &ChoiceConfig) -> Result<ChoiceAnswers, SimError> {
    if cfg.n_options < 2 {
        return Err(SimError::Config(format!("multiple choice needs at least 2 options, got {}", cfg.n_options)));
    }
    if let Some(a) = cfg.accuracies.iter().find(|a| !(0.0..=1.0).contains(*a)) {
        return Err(SimError::Config(format!("accuracy {a} is not in [0, 1]")));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let truth: Vec<u32> = (0..cfg.n_questions).map(|_| rng.random_range(0..cfg.n_options)).collect();
    let answers = cfg
        .accuracies
        .iter()
        .map(|&a| {
            truth
                .iter()
                .map(|&t| {
                    if rng.random_bool(a) {
                        t
                    } else {
                        let w = rng.random_range(0..cfg.n_options - 1);
                        if w >= t { w + 1 } else { w }
                    }
                })
                .collect()
        })
        .collect();
    Ok(ChoiceAnswers { truth, answers })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn realised_accuracies_match_the_config_and_wrong_answers_are_uniform() {
        let cfg = ChoiceConfig::spread(3, 0.9, 0.3, 20_000, 5, 3);
        assert!(cfg.accuracies.iter().zip([0.9, 0.6, 0.3]).all(|(a, b)| (a - b).abs() < 1e-12));
        let sim = simulate_choice(&cfg).unwrap();
        for (got, want) in sim.accuracies().iter().zip(&cfg.accuracies) {
            assert!((got - want).abs() < 0.01, "{got} vs {want}");
        }
        // The weakest model's wrong answers spread evenly over the 4 wrong options.
        let mut wrong = [0usize; 4];
        for (a, t) in sim.answers[2].iter().zip(&sim.truth) {
            if a != t {
                wrong[((a + 5 - t) % 5 - 1) as usize] += 1;
            }
        }
        let n: usize = wrong.iter().sum();
        assert!(wrong.iter().all(|&w| (w as f64 / n as f64 - 0.25).abs() < 0.02), "{wrong:?}");
        assert_eq!(simulate_choice(&cfg).unwrap(), sim, "same seed, same answers");
        assert!(simulate_choice(&ChoiceConfig { n_options: 1, ..cfg }).is_err());
    }
}
