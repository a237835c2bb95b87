//! metrics.json, the record of one aggregation study (`jury aggregate`, a run's
//! aggregation): the study fills it, the report reads it, both through these types.
//!
//! Invariant: what a writer serialises reads back into the same record (an undefined
//! number, written as `null`, reads as NaN where the field is a plain number). Fields
//! added after the first files were written read as absent from those files.

use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize};

use crate::{IoError, Named};

/// metrics.json.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    pub n_examples: usize,
    pub n_judges: usize,
    pub n_classes: usize,
    pub n_labeled: Option<usize>,
    /// The method jury recommends for these judgments (`--methods recommended`): read its
    /// column first. Empty in files written before there was one.
    #[serde(default)]
    pub recommended_method: String,
    /// Why `recommended_method` was chosen on this jury; absent when the study did not
    /// choose one (and in files written before the choice depended on the jury).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommendation: Option<RecommendationMetrics>,
    /// How much the whole jury agrees beyond chance (hard votes, label-free); absent in
    /// files written before it was measured.
    #[serde(default)]
    pub agreement: Option<AgreementMetrics>,
    /// What the calibration labels did (`--calibration`); absent without them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<crate::CalibrationMetrics>,
    pub judges: Named<JudgeMetrics>,
    pub methods: Named<MethodMetrics>,
    /// The context-dependent methods' seeds and each one's dev set by example id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seeds: Option<Vec<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev_sets: Option<Vec<Vec<String>>>,
}

/// How the recommended method was chosen: each candidate fitted with one judge (and its
/// near-copies) held out, scored by the mean log-likelihood of that judge's votes given
/// the candidate's labels; the reference stays unless another scores clearly higher
/// (`jury_aggregate::HeldOutJudges`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecommendationMetrics {
    /// [`RecommendationMetrics::HELD_OUT_JUDGES`] (the highest score) or
    /// [`RecommendationMetrics::TOO_FEW_JUDGES`] or
    /// [`RecommendationMetrics::TOO_MANY_JUDGES`] (no judge could be held out, or the
    /// crowd is too sparse to: the reference) or [`RecommendationMetrics::NO_SIGNAL`]
    /// (the reference predicted the held-out judges no better than a one-class
    /// labelling: the fallback, AverageProb on scores, majority vote on verdicts).
    pub rule: String,
    /// The method that stays unless another's score beats it by `min_gain_se` standard
    /// errors.
    pub reference: String,
    pub min_gain_se: f64,
    /// Judges held out, each with its near-copies, and the examples the scores read.
    pub folds: usize,
    pub examples: usize,
    /// Each candidate's mean log-likelihood per held-out vote, the simplest model first;
    /// `null` for a candidate that could not fit these judgments.
    pub scores: Named<Option<f64>>,
    /// Each candidate's gain over the reference in standard errors.
    pub gain_se: Named<Option<f64>>,
    /// The score of a one-class labelling (what knowing nothing scores), which a chosen
    /// method must clear by `min_gain_se` standard errors too, and the reference's gain
    /// over it in standard errors; absent where nothing was scored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_over_floor_se: Option<f64>,
    /// How long the choice took; the chosen method's own fit is its `seconds`.
    pub seconds: f64,
}

impl RecommendationMetrics {
    pub const HELD_OUT_JUDGES: &'static str = "held-out judges";
    pub const TOO_FEW_JUDGES: &'static str = "too few judges";
    pub const TOO_MANY_JUDGES: &'static str = "too many judges";
    pub const NO_SIGNAL: &'static str = "no signal";

    /// Why `chosen` was chosen, in one line (the report's and the terminal's): its gain
    /// over the reference in standard errors, or the best other candidate's when the
    /// reference stayed.
    pub fn why(&self, chosen: &str) -> String {
        let held = format!("{} judges held out with their near-copies, {} examples", self.folds, self.examples);
        if self.rule == Self::NO_SIGNAL {
            return format!(
                "{chosen}: the fallback; the reference {} predicts the held-out judges' votes worse than one \
                 class for every example, by {:.1} standard errors (at least {}), and no other candidate clears \
                 both; {held}",
                self.reference,
                -self.reference_over_floor_se.unwrap_or(f64::NAN),
                self.min_gain_se
            );
        }
        if self.rule != Self::HELD_OUT_JUDGES {
            return format!("{chosen}: the reference ({}: no judge can be held out and predicted)", self.rule);
        }
        let gain = |m: &str| self.gain_se.0.iter().find(|(n, _)| n == m).and_then(|(_, g)| *g);
        if chosen == self.reference {
            let best = self
                .gain_se
                .0
                .iter()
                .filter(|(m, _)| *m != chosen)
                .filter_map(|(m, g)| g.map(|g| (m, g)))
                .max_by(|a, b| a.1.total_cmp(&b.1));
            let best = best.map_or(String::new(), |(m, g)| format!(" (best other: {m}, {g:+.1})"));
            format!(
                "{chosen}: the reference; no candidate predicts the held-out judges' votes better by {} standard \
                 errors{best}; {held}",
                self.min_gain_se
            )
        } else {
            format!(
                "{chosen}: predicts the held-out judges' votes better than {} by {:.1} standard errors, the best \
                 score of those that clear {}; {held}",
                self.reference,
                gain(chosen).unwrap_or(f64::NAN),
                self.min_gain_se
            )
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgreementMetrics {
    pub fleiss_kappa: Option<f64>,
    pub krippendorff_alpha: Option<f64>,
    /// Which judges make the same mistakes as the fitted model sees it (absent for juries
    /// over `jury_metrics::MAX_JUDGES_FOR_CORRELATIONS` judges).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_correlation: Option<ErrorCorrelationMetrics>,
}

/// The judges' class-conditional error correlations under one method's posteriors, by
/// judge name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorCorrelationMetrics {
    /// The method whose posteriors stand for the truth: `ds` when it ran, else the first.
    pub method: String,
    /// The judges in `matrix` order.
    pub judges: Vec<String>,
    /// Class-conditional correlation of two judges' errors (null where undefined).
    pub matrix: Vec<Vec<Option<f64>>>,
    /// Judges grouped at a mean error correlation of at least `family_threshold`.
    pub families: Vec<Vec<String>>,
    pub family_threshold: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeMetrics {
    pub accuracy: Option<f64>,
    /// Share of the examples the judge judged.
    #[serde(deserialize_with = "nan_if_null")]
    pub coverage: f64,
}

/// A mean over seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverSeeds {
    #[serde(deserialize_with = "nan_if_null")]
    pub accuracy: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub std: f64,
    #[serde(deserialize_with = "nans_if_null")]
    pub seeds: Vec<f64>,
}

/// One method's entry. Untagged in the file; read back by the fields each kind has
/// (a context-dependent method's `dev_accuracy`, a context-free one's diagnostics).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MethodMetrics {
    Neural(NeuralMetrics),
    ContextFree(ContextFreeMetrics),
}

/// A context-free method over all labeled examples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextFreeMetrics {
    pub accuracy: Option<f64>,
    pub brier: Option<f64>,
    pub ece: Option<f64>,
    #[serde(deserialize_with = "nan_if_null")]
    pub seconds: f64,
    #[serde(flatten)]
    pub diagnostics: DiagnosticMetrics,
    /// On the context-dependent methods' test splits, for paired comparisons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside_dev: Option<OverSeeds>,
}

/// What a context-free method says about its own fit. Untagged in the file: the
/// variants are tried in this order, the most specific first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DiagnosticMetrics {
    DawidSkene {
        iterations: usize,
        converged: bool,
        log_likelihood: Option<f64>,
        #[serde(deserialize_with = "nans_if_null")]
        class_prior: Vec<f64>,
        /// Each judge's confusion matrix, rows by true class.
        confusion: Named<Vec<Vec<f64>>>,
        ties: usize,
        unjudged: usize,
    },
    Skills {
        iterations: usize,
        converged: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        objective: Option<f64>,
        /// What a skill measures for this method.
        skill: String,
        /// Each judge's skill (null for a judge with no judgment).
        skills: Named<Option<f64>>,
        /// Held-out log-likelihood per example, correlated model minus independent one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        held_out_gain: Option<f64>,
        ties: usize,
        unjudged: usize,
    },
    Counting {
        ties: usize,
        unjudged: usize,
    },
    /// A method fitted on calibration labels (`calibrated`).
    Calibrated {
        calibration_labels: usize,
    },
}

/// The dev set's choice for one seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chosen {
    pub lambda: f64,
    pub epoch: usize,
}

/// A context-dependent method over its seeds, scored outside each seed's dev set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NeuralMetrics {
    #[serde(deserialize_with = "nan_if_null")]
    pub accuracy: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub std: f64,
    #[serde(deserialize_with = "nans_if_null")]
    pub seeds: Vec<f64>,
    #[serde(deserialize_with = "nans_if_null")]
    pub dev_accuracy: Vec<f64>,
    pub chosen: Vec<Chosen>,
    pub dev_size: usize,
    #[serde(deserialize_with = "nan_if_null")]
    pub seconds: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub embedding_seconds: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_accuracy: Option<OverSeeds>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slopes: Option<Named<f64>>,
    /// Present with `slopes` (null when either series is constant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slope_accuracy_pcc: Option<Option<f64>>,
    /// Brier score and ECE of the first seed's posteriors on its test split.
    pub brier: Option<f64>,
    pub ece: Option<f64>,
}

impl MethodMetrics {
    /// Accuracy against the labels: over all labeled examples, or a context-dependent
    /// method's mean over seeds.
    pub fn accuracy(&self) -> Option<f64> {
        match self {
            Self::Neural(n) => Some(n.accuracy),
            Self::ContextFree(c) => c.accuracy,
        }
    }

    pub fn brier(&self) -> Option<f64> {
        match self {
            Self::Neural(n) => n.brier,
            Self::ContextFree(c) => c.brier,
        }
    }

    pub fn ece(&self) -> Option<f64> {
        match self {
            Self::Neural(n) => n.ece,
            Self::ContextFree(c) => c.ece,
        }
    }

    /// A context-free method's diagnostics.
    pub fn diagnostics(&self) -> Option<&DiagnosticMetrics> {
        match self {
            Self::Neural(_) => None,
            Self::ContextFree(c) => Some(&c.diagnostics),
        }
    }

    /// A context-dependent method's run over seeds.
    pub fn neural(&self) -> Option<&NeuralMetrics> {
        match self {
            Self::Neural(n) => Some(n),
            Self::ContextFree(_) => None,
        }
    }
}

/// A number written as `null` (NaN or infinite when it was serialised) reads as NaN.
impl Metrics {
    /// Reads a metrics.json.
    pub fn read(path: &Path) -> Result<Self, IoError> {
        crate::read_json(path)
    }

    /// Writes this record as metrics.json at `path`.
    pub fn write(&self, path: &Path) -> Result<(), IoError> {
        crate::write_json(path, self)
    }
}

/// Several runs' seeds of one experiment pooled (`jury pool-seeds`): each method's mean
/// and sample deviation over all of them, as one run over every seed reports them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PooledSeeds {
    /// Every seed, ascending: the order of each method's `seeds`.
    pub seeds: Vec<u64>,
    pub methods: Named<PooledMethod>,
}

/// One method over the pooled seeds: a context-dependent method's test accuracy, or a
/// context-free method's on the same test splits (its `outside_dev`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PooledMethod {
    /// The mean, deviation and per-seed accuracies, in `seeds` order.
    #[serde(flatten)]
    pub over: OverSeeds,
    /// A context-free method, scored on the context-dependent methods' test splits.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub context_free: bool,
    /// The context model alone, where every run recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_accuracy: Option<OverSeeds>,
}

impl PooledSeeds {
    /// The file `jury pool-seeds --out` writes.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a pooled record serialises") + "\n"
    }
}

fn nan_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

fn nans_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    Ok(Vec::<Option<f64>>::deserialize(d)?.into_iter().map(|x| x.unwrap_or(f64::NAN)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named<T>(v: Vec<(&str, T)>) -> Named<T> {
        Named(v.into_iter().map(|(k, t)| (k.to_owned(), t)).collect())
    }

    fn sample() -> Metrics {
        let counting = ContextFreeMetrics {
            accuracy: Some(0.75),
            brier: Some(0.2),
            ece: None,
            seconds: 0.001,
            diagnostics: DiagnosticMetrics::Counting { ties: 3, unjudged: 0 },
            outside_dev: Some(OverSeeds { accuracy: 0.7, std: 0.01, seeds: vec![0.69, 0.71] }),
        };
        let ds = ContextFreeMetrics {
            diagnostics: DiagnosticMetrics::DawidSkene {
                iterations: 12,
                converged: true,
                log_likelihood: Some(-10.5),
                class_prior: vec![0.5, 0.5],
                confusion: named(vec![("a", vec![vec![0.9, 0.1], vec![0.2, 0.8]])]),
                ties: 0,
                unjudged: 1,
            },
            outside_dev: None,
            ..counting.clone()
        };
        let skills = ContextFreeMetrics {
            diagnostics: DiagnosticMetrics::Skills {
                iterations: 4,
                converged: false,
                objective: None,
                skill: "weight".into(),
                skills: named(vec![("a", Some(1.5)), ("b", None)]),
                held_out_gain: Some(2.0),
                ties: 0,
                unjudged: 0,
            },
            ..ds.clone()
        };
        let neural = NeuralMetrics {
            accuracy: 0.8,
            std: f64::NAN,
            seeds: vec![0.8],
            dev_accuracy: vec![0.9],
            chosen: vec![Chosen { lambda: 0.1, epoch: 2 }],
            dev_size: 10,
            seconds: 3.0,
            embedding_seconds: 1.0,
            context_accuracy: None,
            slopes: Some(named(vec![("a", 0.3), ("b", -0.1)])),
            slope_accuracy_pcc: Some(Some(0.5)),
            brier: None,
            ece: Some(0.05),
        };
        Metrics {
            n_examples: 5,
            n_judges: 2,
            n_classes: 2,
            n_labeled: Some(5),
            recommended_method: "gauss".into(),
            recommendation: None,
            agreement: Some(AgreementMetrics {
                fleiss_kappa: Some(0.4),
                krippendorff_alpha: None,
                error_correlation: None,
            }),
            calibration: Some(crate::CalibrationMetrics {
                n_calibration: 3,
                n_scored: 2,
                n_scoring_dropped: 3,
                sampling: "planned".into(),
                n_inclusion_one: 1,
                label_free_method: "ds".into(),
                picked_judge: "a".into(),
                stack: named(vec![("label-free", 0.5), ("lda", 0.0)]),
                label_free_kept: false,
                label_free_swapped: false,
                balance: Some(crate::CalibrationBalance {
                    mean_probability: crate::BalanceCovariate { sample_mean: 0.7, all_mean: 0.5, z: 6.1 },
                    uncertainty: crate::BalanceCovariate { sample_mean: 0.2, all_mean: 0.2, z: 0.0 },
                    plausible: false,
                }),
                rates: named(vec![("ppi-jury", crate::RateInterval { estimate: 0.4, low: 0.3, high: 0.5 })]),
                positive_word: Some("A".into()),
                rogan_gladen_judge: Some(crate::JudgeClassRates { sensitivity: 0.8, specificity: 0.6 }),
                accuracy: named(vec![("calibrated", crate::RateInterval { estimate: 0.8, low: 0.7, high: 0.9 })]),
            }),
            judges: named(vec![("a", JudgeMetrics { accuracy: Some(0.6), coverage: 1.0 })]),
            methods: named(vec![
                ("mv", MethodMetrics::ContextFree(counting)),
                ("ds", MethodMetrics::ContextFree(ds)),
                ("glad", MethodMetrics::ContextFree(skills)),
                ("skillagg", MethodMetrics::Neural(neural)),
            ]),
            seeds: Some(vec![0]),
            dev_sets: Some(vec![vec!["e1".into()]]),
        }
    }

    #[test]
    fn every_kind_of_method_reads_back_as_written() {
        let m = sample();
        let text = serde_json::to_string_pretty(&m).unwrap();
        let back: Metrics = serde_json::from_str(&text).unwrap();
        // The NaN spread was written as null and reads as NaN: compare it apart.
        let spread = |m: &Metrics| m.methods.0[3].1.neural().map(|n| n.std);
        assert!(spread(&back).is_some_and(f64::is_nan));
        assert_eq!(serde_json::to_string_pretty(&back).unwrap(), text);
        for (k, (name, method)) in back.methods.0.iter().enumerate() {
            assert_eq!(std::mem::discriminant(method), std::mem::discriminant(&m.methods.0[k].1), "{name}");
        }
        assert!(matches!(
            back.methods.0[1].1.diagnostics(),
            Some(DiagnosticMetrics::DawidSkene { iterations: 12, .. })
        ));
        assert!(matches!(back.methods.0[2].1.diagnostics(), Some(DiagnosticMetrics::Skills { iterations: 4, .. })));
    }

    #[test]
    fn a_file_from_before_the_agreement_and_the_recommendation_still_reads() {
        let text = r#"{"n_examples": 1, "n_judges": 1, "n_classes": 2, "n_labeled": null,
            "judges": {"a": {"accuracy": null, "coverage": 1.0}},
            "methods": {"avg": {"accuracy": null, "brier": null, "ece": null, "seconds": 0.0, "ties": 0, "unjudged": 0}}}"#;
        let m: Metrics = serde_json::from_str(text).unwrap();
        assert_eq!((m.agreement, m.recommended_method.as_str()), (None, ""));
        assert!(matches!(m.methods.0[0].1.diagnostics(), Some(DiagnosticMetrics::Counting { ties: 0, .. })));
    }
}
