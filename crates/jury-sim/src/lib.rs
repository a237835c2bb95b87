//! Simulated juries with known confusion matrices: the ground truth that recovery tests,
//! the offline demo and benchmarks need and real data never gives.
//!
//! Generative model (Dawid-Skene's): the true class c ~ `class_prior`; each judge is
//! present with probability `1 - missing_rate`; a present judge votes v ~ its confusion
//! row c and reports a probability vector whose argmax is v (confidence drawn uniformly
//! in (0.5, 1], the rest spread evenly). The same config and seed give the same jury.

mod choice;

pub use choice::{ChoiceAnswers, ChoiceConfig, simulate_choice};

use jury_core::{CoreError, Judgments, JudgmentsBuilder, normalize_prob_vector};
use rand::distr::{Distribution, weighted::WeightedIndex};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One simulated judge.
#[derive(Debug, Clone, PartialEq)]
pub struct SimJudge {
    pub name: String,
    /// `confusion[true_class][vote]`; rows are probability vectors.
    pub confusion: Vec<Vec<f64>>,
}

impl SimJudge {
    /// Binary judge with P(vote 0 | class 0) = `specificity` and P(vote 1 | class 1) =
    /// `sensitivity`.
    pub fn binary(name: &str, specificity: f64, sensitivity: f64) -> Self {
        Self {
            name: name.to_owned(),
            confusion: vec![vec![specificity, 1.0 - specificity], vec![1.0 - sensitivity, sensitivity]],
        }
    }
}

/// Settings of a simulated jury.
#[derive(Debug, Clone, PartialEq)]
pub struct JuryConfig {
    pub n_examples: usize,
    pub class_prior: Vec<f64>,
    pub judges: Vec<SimJudge>,
    /// Probability that any one (example, judge) entry is missing.
    pub missing_rate: f64,
    pub seed: u64,
}

impl JuryConfig {
    /// A binary jury from near-random to strong judges, one of them biased toward "Yes",
    /// with a 30/70 class imbalance and 10% missing entries: the shape of a real jury of
    /// small LLM judges. Used by the demo data set and benchmarks.
    pub fn mixed_binary(n_examples: usize, seed: u64) -> Self {
        let judges = vec![
            SimJudge::binary("strong", 0.90, 0.88),
            SimJudge::binary("good", 0.80, 0.82),
            SimJudge::binary("yes-biased", 0.55, 0.95),
            SimJudge::binary("fair", 0.70, 0.68),
            SimJudge::binary("weak", 0.60, 0.58),
            SimJudge::binary("near-random", 0.53, 0.51),
        ];
        Self { n_examples, class_prior: vec![0.3, 0.7], judges, missing_rate: 0.1, seed }
    }
}

/// A simulated jury and the truth behind it.
#[derive(Debug, Clone, PartialEq)]
pub struct SimulatedJury {
    pub judgments: Judgments,
    /// True class of each example, in the judgments' example order.
    pub truth: Vec<usize>,
}

/// Why a jury configuration cannot be simulated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    #[error("class prior: {0}")]
    Prior(CoreError),
    #[error("judge `{judge}`, confusion row {row}: {source}")]
    Confusion { judge: String, row: usize, source: CoreError },
    #[error("missing rate {0} is not in [0, 1)")]
    MissingRate(f64),
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Core(#[from] CoreError),
}

/// Draws a jury from `cfg`. Example ids are `ex00000`, `ex00001`, ...
pub fn simulate(cfg: &JuryConfig) -> Result<SimulatedJury, SimError> {
    let c = cfg.class_prior.len();
    let mut prior = cfg.class_prior.clone();
    normalize_prob_vector(&mut prior, c).map_err(SimError::Prior)?;
    if !(0.0..1.0).contains(&cfg.missing_rate) {
        return Err(SimError::MissingRate(cfg.missing_rate));
    }
    let mut rows = Vec::with_capacity(cfg.judges.len());
    for judge in &cfg.judges {
        if judge.confusion.len() != c {
            return Err(SimError::Confusion {
                judge: judge.name.clone(),
                row: judge.confusion.len(),
                source: CoreError::WrongClassCount { got: judge.confusion.len(), expected: c },
            });
        }
        let mut dists = Vec::with_capacity(c);
        for (row, probs) in judge.confusion.iter().enumerate() {
            let mut p = probs.clone();
            let err = |source| SimError::Confusion { judge: judge.name.clone(), row, source };
            normalize_prob_vector(&mut p, c).map_err(err)?;
            // normalize_prob_vector guarantees a valid, positive-sum weight vector.
            dists.push(WeightedIndex::new(&p).map_err(|_| err(CoreError::BadSum { sum: 0.0 }))?);
        }
        rows.push(dists);
    }
    let class_dist = WeightedIndex::new(&prior).map_err(|_| SimError::Prior(CoreError::BadSum { sum: 0.0 }))?;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut builder = JudgmentsBuilder::new(c)?;
    for judge in &cfg.judges {
        builder.judge(&judge.name);
    }
    let width = cfg.n_examples.saturating_sub(1).to_string().len().max(5);
    let mut truth = Vec::with_capacity(cfg.n_examples);
    for n in 0..cfg.n_examples {
        let id = format!("ex{n:0width$}");
        builder.example(&id);
        let t = class_dist.sample(&mut rng);
        truth.push(t);
        for (judge, dists) in cfg.judges.iter().zip(&rows) {
            if rng.random::<f64>() < cfg.missing_rate {
                continue;
            }
            let vote = dists[t].sample(&mut rng);
            let conf: f64 = 1.0 - 0.49 * rng.random::<f64>();
            let mut probs = vec![(1.0 - conf) / (c - 1) as f64; c];
            probs[vote] = conf;
            builder.push(&id, &judge.name, Some(probs))?;
        }
    }
    Ok(SimulatedJury { judgments: builder.build(), truth })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_jury_and_votes_follow_confusion() {
        let cfg = JuryConfig::mixed_binary(20_000, 11);
        let a = simulate(&cfg).unwrap();
        assert_eq!(a, simulate(&cfg).unwrap());
        let j = &a.judgments;
        let missing = 1.0 - j.n_present() as f64 / (j.n_examples() * j.n_judges()) as f64;
        assert!((missing - 0.1).abs() < 0.01, "{missing}");
        let positives = a.truth.iter().filter(|&&t| t == 1).count() as f64 / a.truth.len() as f64;
        assert!((positives - 0.7).abs() < 0.015, "{positives}");
        // Judge 0 ("strong"): empirical sensitivity within sampling error of 0.88.
        let (hits, total) = (0..j.n_examples())
            .filter(|&n| a.truth[n] == 1)
            .filter_map(|n| j.vote(n, 0))
            .fold((0, 0), |(h, t), v| (h + usize::from(v == 1), t + 1));
        assert!((hits as f64 / total as f64 - 0.88).abs() < 0.015);
    }

    #[test]
    fn rejects_invalid_configs() {
        let mut cfg = JuryConfig::mixed_binary(10, 1);
        cfg.judges[1].confusion[0] = vec![0.7, 0.7];
        let err = simulate(&cfg).unwrap_err().to_string();
        assert!(err.starts_with("judge `good`, confusion row 0"), "{err}");
        cfg = JuryConfig::mixed_binary(10, 1);
        cfg.missing_rate = 1.0;
        assert!(simulate(&cfg).is_err());
    }
}
