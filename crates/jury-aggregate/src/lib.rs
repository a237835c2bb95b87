//! Reference-free aggregation of a jury's judgments into one posterior per example.
//!
//! Every aggregator reads only a [`Judgments`] matrix (never labels, never files) and
//! returns an [`Aggregation`]: validated posteriors, hard labels decided by an explicit
//! tie rule, and method-specific diagnostics. Context-dependent (neural) aggregators live
//! in their own crate; this one holds the context-free methods of the SkillAggregation
//! paper's Appendix C.

mod adaptive;
mod average;
mod care;
mod dawid_skene;
mod gauss;
mod glad;
mod kos;
mod linalg;
mod mace;
mod mmsr;
mod onecoin;
mod select;
mod special;
mod ties;
mod vote;
mod votes;
mod wawa;

pub use adaptive::{
    AdaptiveConfig, AdaptiveDecision, AdaptivePlan, AdaptiveReplay, AdaptiveStop, JudgeOrder, StoppingModel,
    replay_adaptive, warmup_examples,
};
pub use average::AverageProb;
pub use care::Care;
pub use dawid_skene::{ClassPrior, ConfusionMatrix, DawidSkene, DawidSkeneConfig, DsParams, EmInit, EmReport, EmStop};
pub use gauss::{CareGaussian, CorrelatedGaussian, GaussParams};
pub use glad::Glad;
pub use kos::Kos;
pub use mace::Mace;
pub use mmsr::{MAX_MMSR_PAIRS, Mmsr};
pub use onecoin::OneCoinDawidSkene;
pub use select::{
    CandidateScore, Floor, HeldOutJudges, MAX_FOLDS, MIN_GAIN_SE, Selection, SelectionRule, scores_are_soft,
};
pub use ties::TieBreak;
pub use vote::MajorityVote;
pub use wawa::{Wawa, ZeroBasedSkill};

use jury_core::{CoreError, Judgments, Posteriors};

/// What an aggregator could not do with valid input.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AggregateError {
    #[error("{method}: the judgments matrix has no examples")]
    Empty { method: &'static str },
    #[error("{method}: {reason}")]
    Config { method: &'static str, reason: String },
    #[error("{method}: produced invalid posteriors (a bug): {source}")]
    Internal { method: &'static str, source: CoreError },
}

/// The most judges the correlation-aware methods (care, gauss, care-gauss) take: they hold
/// judges x judges matrices and spend O(judges^2) per example, which a sparse crowd of
/// thousands of judges cannot afford.
pub const MAX_CORRELATED_JUDGES: usize = 500;

/// The checks both correlation-aware methods make: some examples, two classes (they
/// read log-odds), at most [`MAX_CORRELATED_JUDGES`] judges; each a one-line error.
fn check_correlated(method: &'static str, j: &Judgments) -> Result<(), AggregateError> {
    if j.n_examples() == 0 {
        return Err(AggregateError::Empty { method });
    }
    let reason = if j.n_classes() != 2 {
        format!("models the log-odds of two classes; these judgments have {}", j.n_classes())
    } else if j.n_judges() > MAX_CORRELATED_JUDGES {
        format!(
            "models the correlations of at most {MAX_CORRELATED_JUDGES} judges; these judgments have {}",
            j.n_judges()
        )
    } else {
        return Ok(());
    };
    Err(AggregateError::Config { method, reason })
}

/// Whether each judge judged at least one example, in the matrix's judge order.
fn judged_judges(j: &Judgments) -> Vec<bool> {
    let mut judged = vec![false; j.n_judges()];
    j.entries().for_each(|(_, k, _)| judged[k] = true);
    judged
}

/// A method that combines judges without reference labels. Settings only, so one
/// aggregator fits several matrices at once (the held-out-judge choice does).
pub trait Aggregator: Send + Sync {
    /// Short stable name used in file columns and reports (`avg`, `mv`, `ds`).
    fn name(&self) -> &'static str;
    fn aggregate(&self, judgments: &Judgments) -> Result<Aggregation, AggregateError>;
}

/// The result of one aggregator on one judgments matrix, in its example order.
#[derive(Debug, Clone, PartialEq)]
pub struct Aggregation {
    posteriors: Posteriors,
    labels: Vec<usize>,
    diagnostics: Diagnostics,
}

impl Aggregation {
    pub fn posteriors(&self) -> &Posteriors {
        &self.posteriors
    }

    /// Hard label per example (the posterior's argmax, ties by the method's rule).
    pub fn labels(&self) -> &[usize] {
        &self.labels
    }

    pub fn diagnostics(&self) -> &Diagnostics {
        &self.diagnostics
    }

    /// The result of a binary method fitted outside this crate with `labels` calibration
    /// labels (jury-calibrate's): `p1[n]` is example `n`'s probability of class 1, its
    /// hard label 1 above one half.
    pub fn calibrated(p1: &[f64], labels: usize) -> Result<Self, AggregateError> {
        let method = "calibrated";
        let values: Vec<f64> = p1.iter().flat_map(|&p| [1.0 - p, p]).collect();
        let hard = p1.iter().map(|&p| usize::from(p > 0.5)).collect();
        finish(method, 2, values, hard, Diagnostics::Calibrated { labels })
    }
}

/// Method-specific facts about a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Diagnostics {
    /// Averaging or voting: how many examples had a tie for the top class, and how many
    /// had no judgment at all (their posterior is uniform).
    Counting {
        ties: usize,
        unjudged: usize,
    },
    DawidSkene(EmReport),
    /// A method that estimates one number per judge.
    Skills(SkillReport),
    /// A method fitted on this many calibration labels.
    Calibrated {
        labels: usize,
    },
}

/// Per-judge skills and the course of the fit, for the methods that estimate one number
/// per judge (the crowd-sourcing suite).
#[derive(Debug, Clone, PartialEq)]
pub struct SkillReport {
    /// What a skill measures for this method, in words for reports.
    pub meaning: &'static str,
    /// One per judge, in the matrix's order; `None` for a judge with no judgment.
    pub skills: Vec<Option<f64>>,
    pub iterations: usize,
    pub converged: bool,
    /// The fit's objective at the end, per vote, where the method has one.
    pub objective: Option<f64>,
    /// Examples whose final posterior had a tied top class.
    pub ties: usize,
    /// Examples with no judgment (their posterior is the method's prior).
    pub unjudged: usize,
    /// A label-free check of the correlations a method models, where it has one: the
    /// held-out log-likelihood per example of its correlated model minus the model with
    /// the judges independent given the class (positive: the correlations are real).
    pub held_out_gain: Option<f64>,
}

impl SkillReport {
    fn new(
        meaning: &'static str,
        skills: Vec<Option<f64>>,
        iterations: usize,
        converged: bool,
        objective: Option<f64>,
    ) -> Self {
        Self { meaning, skills, iterations, converged, objective, ties: 0, unjudged: 0, held_out_gain: None }
    }
}

/// Shared body of the counting aggregators: example `n`'s posterior is the mean, over the
/// judges present, of the vector `add` accumulates from each judge's probabilities;
/// uniform when no judge answered.
fn mean_over_judges(
    method: &'static str,
    j: &Judgments,
    ties: TieBreak,
    add: impl Fn(&[f64], &mut [f64]),
) -> Result<Aggregation, AggregateError> {
    if j.n_examples() == 0 {
        return Err(AggregateError::Empty { method });
    }
    let c = j.n_classes();
    let mut values = vec![0.0; j.n_examples() * c];
    let mut unjudged = 0;
    for (n, row) in values.chunks_exact_mut(c).enumerate() {
        let mut count = 0;
        for (_, p) in j.row(n) {
            add(p, row);
            count += 1;
        }
        if !normalize_or_uniform(row, count) {
            unjudged += 1;
        }
    }
    let (labels, n_ties) = ties.label_by_sides(&values, j);
    finish(method, c, values, labels, Diagnostics::Counting { ties: n_ties, unjudged })
}

/// Divides a row of sums over `count` contributions by `count`, or makes it uniform when
/// there were none; returns whether there were any.
fn normalize_or_uniform(row: &mut [f64], count: usize) -> bool {
    if count == 0 {
        row.fill(1.0 / row.len() as f64);
    } else {
        row.iter_mut().for_each(|r| *r /= count as f64);
    }
    count > 0
}

/// The checks every iterative method makes before it fits: some examples, at least one
/// iteration, a tolerance of 0 or more.
fn check_fit(method: &'static str, j: &Judgments, max_iter: usize, tol: f64) -> Result<(), AggregateError> {
    if j.n_examples() == 0 {
        return Err(AggregateError::Empty { method });
    }
    if max_iter == 0 || tol.is_nan() || tol < 0.0 {
        return Err(AggregateError::Config {
            method,
            reason: format!("max_iter must be >= 1 and tol >= 0 (got {max_iter} and {tol})"),
        });
    }
    Ok(())
}

/// Expands per-pattern posteriors to examples of `j`, labels them by `ties` and
/// completes the report's tie and unjudged counts.
fn finish_votes(
    method: &'static str,
    j: &Judgments,
    votes: &votes::Votes,
    per_pattern: &[f64],
    ties: TieBreak,
    mut report: SkillReport,
) -> Result<Aggregation, AggregateError> {
    let c = votes.n_classes;
    let values = votes.expand(per_pattern);
    let (labels, n_ties) = ties.label_by_sides(&values, j);
    report.ties = n_ties;
    report.unjudged = votes.unjudged();
    finish(method, c, values, labels, Diagnostics::Skills(report))
}

fn finish(
    method: &'static str,
    n_classes: usize,
    values: Vec<f64>,
    labels: Vec<usize>,
    diagnostics: Diagnostics,
) -> Result<Aggregation, AggregateError> {
    let posteriors =
        Posteriors::new(n_classes, values).map_err(|source| AggregateError::Internal { method, source })?;
    Ok(Aggregation { posteriors, labels, diagnostics })
}

#[cfg(test)]
mod testutil;
