//! The records of calibration with labels: calibration.json (`jury simulate calibration`,
//! a replay other tools read, so its shape is a contract) and the `calibration` section of
//! metrics.json (`jury aggregate --calibration`). Writers and the report share these types.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{IoError, Named, layout};

/// calibration.json: per budget and sampling, each method's accuracy outside the
/// calibration set and each estimator's coverage of the true rate. Accuracies and rates
/// are fractions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationReplay {
    pub budgets: Vec<ReplayBudget>,
    /// The jury replayed.
    pub jury: ReplayJury,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayJury {
    pub n_examples: usize,
    pub n_judges: usize,
    /// The label-free method `recommended` stood for (the `recommended` row).
    pub recommended_method: String,
    /// The positive rate of all labels, which the intervals should cover.
    pub true_rate: f64,
    pub seed: u64,
    /// Whether the unlabeled votes confirmed the label-free model, so that `calibrated`
    /// is the label-free posterior in every draw, its classes named by the draw's labels
    /// (each budget's `label_free_swapped` counts the draws that swapped them).
    #[serde(default)]
    pub label_free_kept: bool,
    /// Judged examples without a label, left out of the replay: `n_examples` counts only
    /// the labeled ones, which every draw, score and rate is over.
    #[serde(default)]
    pub unlabeled_left_out: usize,
}

/// One budget and one way of drawing the calibration sets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayBudget {
    pub budget: usize,
    /// `uniform` or `planned` (drawn as `jury label-plan` draws).
    pub sampling: String,
    pub trials: usize,
    /// Draws that held one class only and were drawn again.
    #[serde(default)]
    pub redrawn: usize,
    /// Draws whose labels named the kept label-free posterior's classes the other way
    /// round, so that `calibrated` was its complement.
    #[serde(default)]
    pub label_free_swapped: usize,
    /// Draws the balance check would have reported as not drawn as stated (metrics.json's
    /// `calibration.balance`): its false alarms, since every draw here is.
    #[serde(default)]
    pub unbalanced: usize,
    /// `calibrated`, `recommended`, `picked-judge`, `logistic`.
    pub methods: Named<ReplayAccuracy>,
    /// `labels-only`, `rogan-gladen`, `ppi-best-judge`, `ppi-jury`.
    pub estimators: Named<ReplayCoverage>,
    /// `calibrated`, `recommended`: how often the accuracy read off the calibration
    /// labels (metrics.json's `calibration.accuracy`) covers the method's accuracy on the
    /// rest, and the interval's mean width. Absent in files written before it.
    #[serde(default)]
    pub accuracy_estimates: Named<ReplayCoverage>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReplayAccuracy {
    pub mean_accuracy: f64,
    /// The 10th percentile over the trials.
    pub p10_accuracy: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReplayCoverage {
    pub coverage: f64,
    pub mean_width: f64,
    /// The estimate less the truth, averaged over the trials. Absent in files written
    /// before it.
    #[serde(default)]
    pub mean_error: f64,
}

impl CalibrationReplay {
    /// Writes calibration.json into `dir`, atomically.
    pub fn write(&self, dir: &Path) -> Result<(), IoError> {
        crate::write_json(&dir.join(layout::CALIBRATION_REPLAY), self)
    }

    /// Reads `dir`'s calibration.json.
    pub fn read(dir: &Path) -> Result<Self, IoError> {
        crate::read_json(&dir.join(layout::CALIBRATION_REPLAY))
    }
}

/// metrics.json's `calibration`: what the calibration labels were used for and the rate
/// they correct.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationMetrics {
    /// Labels that fitted the calibrated method and corrected the rate.
    pub n_calibration: usize,
    /// Reference labels outside the calibration set, the only ones every accuracy was
    /// scored on (0 without `--labels`).
    pub n_scored: usize,
    /// Reference labels dropped from scoring because the calibration set holds them.
    pub n_scoring_dropped: usize,
    /// `uniform`, or `planned` when the labels came with inclusion probabilities.
    pub sampling: String,
    /// Calibration labels at inclusion probability 1 (the labels had that `jury label-plan
    /// --labeled` keeps): counted as they are, every estimate drawn from the others.
    /// Absent in files written before it.
    #[serde(default)]
    pub n_inclusion_one: usize,
    /// The label-free method the calibrated one starts from.
    pub label_free_method: String,
    /// The judge the calibration labels pick (most accurate on them).
    pub picked_judge: String,
    /// Each model's weight in the calibrated stack.
    pub stack: Named<f64>,
    /// Whether the unlabeled votes confirmed the label-free model, so that the calibrated
    /// method is the label-free posterior as it is (`stack`: label-free 1, the rest 0).
    #[serde(default)]
    pub label_free_kept: bool,
    /// Whether the calibration labels named the kept posterior's classes the other way
    /// round (their 1 is its class 0), so that the calibrated method is its complement.
    #[serde(default)]
    pub label_free_swapped: bool,
    /// Whether the calibration examples look drawn as stated (uniformly, or with their
    /// inclusion probabilities): absent in files written before the check.
    #[serde(default)]
    pub balance: Option<CalibrationBalance>,
    /// The positive-class rate (the win rate of a pairwise set) four ways:
    /// `labels-only`, `rogan-gladen`, `ppi-best-judge`, `ppi-jury`.
    pub rates: Named<RateInterval>,
    /// The run's prompt's word for class 1 (its `positive:`, e.g. `Yes`, or `A` on a
    /// pairwise prompt): what `rates` is the share of. Absent from `jury aggregate`, which
    /// does not know the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub positive_word: Option<String>,
    /// Rogan-Gladen's judge (picked out of fold) on the calibration labels: the correction
    /// divides by `sensitivity + specificity - 1`. Absent in files written before it.
    #[serde(default)]
    pub rogan_gladen_judge: Option<JudgeClassRates>,
    /// The accuracy of `calibrated` and `recommended` (the label-free method) on the
    /// examples outside the calibration set, read off its labels (each judged by a fit
    /// that did not see it), with a 95% interval. Absent in files written before it.
    #[serde(default)]
    pub accuracy: Named<RateInterval>,
}

impl CalibrationMetrics {
    /// Why `method` (the calibrated one) is recommended, in one line (the terminal's and
    /// the report's): what it is fitted on, and `label_free_why`, why the label-free method
    /// it starts from was chosen (the held-out-judge criterion never scores `method`).
    pub fn recommended_why(&self, method: &str, label_free_why: &str) -> String {
        format!(
            "{method}, fitted on {} calibration labels ({}) and every unlabeled judgment; without labels it would \
             be {label_free_why}",
            self.n_calibration,
            self.sampling_words()
        )
    }

    /// How the calibration labels were drawn, in words: `sampling`, and how many were sure
    /// to be in the sample where some were.
    pub fn sampling_words(&self) -> String {
        match self.n_inclusion_one {
            0 => self.sampling.clone(),
            n => format!("{}, {n} of them at inclusion probability 1, counted as they are", self.sampling),
        }
    }
}

/// The judges' mean probability of class 1 and its `p (1 - p)`, inclusion-weighted over the
/// calibration examples against their means over every example. A set chosen other than
/// as stated (the disputed examples, the failures found) shows in them, and biases the
/// calibrated method and every rate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CalibrationBalance {
    pub mean_probability: BalanceCovariate,
    pub uncertainty: BalanceCovariate,
    /// Both within the limit of standard errors a true draw stays within.
    pub plausible: bool,
}

impl CalibrationBalance {
    /// The two comparisons in words, for the terminal and the report.
    pub fn summary(&self) -> String {
        let m = &self.mean_probability;
        let u = &self.uncertainty;
        format!(
            "the judges' mean probability of class 1 is {:.3} on them against {:.3} on every example \
             ({:+.1} standard errors of a draw), its p (1 - p) {:.3} against {:.3} ({:+.1})",
            m.sample_mean, m.all_mean, m.z, u.sample_mean, u.all_mean, u.z
        )
    }
}

/// One quantity's mean over the calibration examples and over all, and their distance
/// in standard errors of a draw.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BalanceCovariate {
    pub sample_mean: f64,
    pub all_mean: f64,
    pub z: f64,
}

/// A judge's share of right verdicts among the labels' 1s and among their 0s.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct JudgeClassRates {
    pub sensitivity: f64,
    pub specificity: f64,
}

/// A rate and its 95% interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RateInterval {
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
}
