//! Runs a study: every context-free method over the judgments, then the context-dependent
//! ones with their dev sets, and the context-free methods rescored on the same test
//! splits so the two kinds pair up. Writes nothing.

use std::path::Path;
use std::time::Instant;

use jury_aggregate::{
    Aggregation, Aggregator, AverageProb, Care, CareGaussian, CorrelatedGaussian, DawidSkene, Glad, HeldOutJudges, Kos,
    Mace, MajorityVote, Mmsr, OneCoinDawidSkene, Selection, Wawa, ZeroBasedSkill, scores_are_soft,
};
use jury_core::{Judgments, Labels};
use jury_metrics::Split;
use jury_neural::{NeuralOptions, NeuralRun, Note};

use crate::{Method, Settings, StudyError};

/// One context-free method's result and how long it took.
#[derive(Debug, Clone)]
pub struct MethodRun {
    pub name: &'static str,
    pub aggregation: Aggregation,
    pub seconds: f64,
}

/// The context-dependent part of a study.
#[derive(Debug, Clone)]
pub struct NeuralStudy {
    pub runs: Vec<NeuralRun>,
    /// The seeds, in order, and each one's split of the labeled examples.
    pub seeds: Vec<u64>,
    pub splits: Vec<Split>,
    pub dev_size: usize,
    /// Each context-free method's accuracy on every seed's test split, in method order.
    pub outside_dev: Vec<Vec<f64>>,
}

/// Every method's result over one judgments matrix.
#[derive(Debug, Clone)]
pub struct Study<'a> {
    pub judgments: &'a Judgments,
    pub labels: Option<&'a Labels>,
    /// The method `recommended` stood for and why, when the options named it.
    pub recommendation: Option<Recommendation>,
    pub methods: Vec<MethodRun>,
    pub neural: Option<NeuralStudy>,
    /// What the calibration labels did, when there were any (`calibrated` is then the
    /// first of `methods` and the recommended method).
    pub calibration: Option<jury_io::CalibrationMetrics>,
}

/// The method `recommended` stands for on one jury, and the criterion that chose it.
#[derive(Debug, Clone)]
pub struct Recommendation {
    pub method: Method,
    /// The candidates ([`Method::CANDIDATES`] that fit these judgments), their scores and
    /// the rule that chose.
    pub selection: Selection,
    /// How long the choice took (every candidate fitted once per held-out judge).
    pub seconds: f64,
}

impl Recommendation {
    pub fn name(&self) -> &'static str {
        self.selection.chosen_name()
    }
}

impl Settings {
    /// Chooses the method `recommended` stands for on `j` (see [`HeldOutJudges`]) among
    /// [`Method::CANDIDATES`], the log-odds models only when most entries are scores
    /// ([`scores_are_soft`]), with Dawid-Skene as the reference that stays unless beaten,
    /// and AverageProb (on scores) or majority vote (on verdicts) where the jury shows the
    /// criterion no signal.
    pub(crate) fn recommend(&self, j: &Judgments) -> Result<Recommendation, StudyError> {
        let soft = scores_are_soft(j);
        let candidates: Vec<(Method, Box<dyn Aggregator>)> = Method::CANDIDATES
            .iter()
            .filter(|m| soft || !m.models_log_odds())
            .filter_map(|&m| self.aggregator(m).map(|a| (m, a)))
            .collect();
        let refs: Vec<&dyn Aggregator> = candidates.iter().map(|(_, a)| a.as_ref()).collect();
        let start = Instant::now();
        let position = |method: Method| candidates.iter().position(|(m, _)| *m == method).unwrap_or(0);
        let reference = position(Method::Ds);
        let fallback = position(if soft { Method::Avg } else { Method::Mv });
        let selection =
            HeldOutJudges { seed: self.seed, ..HeldOutJudges::default() }.choose(j, &refs, reference, fallback)?;
        let seconds = start.elapsed().as_secs_f64();
        Ok(Recommendation { method: candidates[selection.chosen].0, selection, seconds })
    }

    pub(crate) fn aggregator(&self, m: Method) -> Option<Box<dyn Aggregator>> {
        match m {
            Method::Avg => Some(Box::new(AverageProb { ties: self.ties })),
            Method::Mv => Some(Box::new(MajorityVote { ties: self.ties })),
            Method::Ds => Some(Box::new(DawidSkene::new(self.ds))),
            Method::Wawa => Some(Box::new(Wawa { ties: self.ties })),
            Method::Zbs => Some(Box::new(ZeroBasedSkill::new(self.ties))),
            Method::OneCoin => Some(Box::new(OneCoinDawidSkene::new(self.ties))),
            Method::Glad => Some(Box::new(Glad::new(self.ties))),
            Method::Mace => Some(Box::new(Mace::new(self.ties, self.seed))),
            Method::Mmsr => Some(Box::new(Mmsr::new(self.ties))),
            Method::Kos => Some(Box::new(Kos::new(self.ties))),
            Method::Care => Some(Box::new(Care { gamma: self.care_gamma, ..Care::new(self.ties) })),
            Method::Gauss => {
                Some(Box::new(CorrelatedGaussian { steps: self.gauss_steps, ..CorrelatedGaussian::new(self.ds) }))
            }
            Method::CareGauss => Some(Box::new(CareGaussian {
                care: Care { gamma: self.care_gamma, ..Care::new(self.ties) },
                steps: self.care_gauss_steps,
            })),
            _ => None,
        }
    }

    /// The context-free methods to run, in order: `recommended` replaced by the method it
    /// stands for, each method once.
    fn resolved_methods(&self, recommended: Option<Method>) -> Vec<Method> {
        let mut out: Vec<Method> = Vec::with_capacity(self.methods.len());
        for &m in &self.methods {
            let m = match (m, recommended) {
                (Method::Recommended, Some(r)) => r,
                (Method::Recommended, None) => continue,
                _ => m,
            };
            if !out.contains(&m) {
                out.push(m);
            }
        }
        out
    }
}

/// Runs every method `settings` names on `judgments` and scores it against `labels`
/// when given; `note` hears what the context-dependent methods say while they train.
pub fn run<'a>(
    judgments: &'a Judgments,
    labels: Option<&'a Labels>,
    settings: &Settings,
    note: &dyn Fn(&Note),
) -> Result<Study<'a>, StudyError> {
    run_calibrated(judgments, labels, None, settings, note)
}

/// As [`run`], with calibration labels: the calibrated method first, recommended. The
/// caller passes scoring `labels` without the calibration examples
/// ([`crate::scoring_labels`]), with how many it dropped.
pub fn run_calibrated<'a>(
    judgments: &'a Judgments,
    labels: Option<&'a Labels>,
    calibration: Option<(&jury_io::CalibrationLabels, usize)>,
    settings: &Settings,
    note: &dyn Fn(&Note),
) -> Result<Study<'a>, StudyError> {
    // The held-out-judge choice runs once: for `recommended`, and for the calibrated
    // method's label-free start.
    let requested = settings.methods.contains(&Method::Recommended);
    let chosen = if requested || calibration.is_some() { Some(settings.recommend(judgments)?) } else { None };
    let resolved = settings.resolved_methods(chosen.as_ref().filter(|_| requested).map(|r| r.method));
    let mut methods = Vec::with_capacity(resolved.len() + 1);
    for aggregator in resolved.iter().filter_map(|&m| settings.aggregator(m)) {
        let start = Instant::now();
        let aggregation = aggregator.aggregate(judgments)?;
        if let Some(n) = aggregation.posteriors().rows().position(|r| r.iter().any(|p| !p.is_finite())) {
            return Err(StudyError::NotANumber {
                method: aggregator.name(),
                example: judgments.example_ids()[n].clone(),
            });
        }
        methods.push(MethodRun { name: aggregator.name(), aggregation, seconds: start.elapsed().as_secs_f64() });
    }
    let calibration = match (calibration, &chosen) {
        (Some((c, dropped)), Some(rec)) => {
            let start = Instant::now();
            let ran = methods.iter().find(|r| r.name == rec.name()).map(|r| r.aggregation.clone());
            let label_free = match ran {
                Some(a) => a,
                None => settings.aggregator(rec.method).map(|a| a.aggregate(judgments)).transpose()?.ok_or(
                    StudyError::Option {
                        flag: "--calibration",
                        reason: "the recommended method has no label-free aggregator".into(),
                    },
                )?,
            };
            let scored = labels.map_or(0, Labels::n_labeled);
            let (aggregation, metrics) =
                crate::calibration::calibrate(judgments, c, rec.name(), &label_free, settings, scored, dropped)?;
            let seconds = start.elapsed().as_secs_f64();
            methods.insert(0, MethodRun { name: crate::calibration::METHOD, aggregation, seconds });
            Some(metrics)
        }
        _ => None,
    };
    let recommendation = chosen.filter(|_| requested);
    let neural = match &settings.neural_opts {
        None => None,
        Some(opts) => {
            let Some(labels) = labels else { return Err(StudyError::NeedsLabels) };
            let mut opts = opts.clone();
            opts.encoder_dir = jury_neural::encoder_dir::resolve(&opts.encoder_dir)
                .map_err(|source| StudyError::Encoder { spec: opts.encoder_dir.clone(), source: Box::new(source) })?;
            let contexts = settings.contexts.as_deref().ok_or(StudyError::NeedsContexts)?;
            let texts = context_texts(judgments, contexts)?;
            let runs = jury_neural::run_methods(judgments, labels, &texts, &settings.neural, &opts, note)?;
            Some(neural_study(runs, &methods, labels, &opts))
        }
    };
    Ok(Study { judgments, labels, recommendation, methods, neural, calibration })
}

fn neural_study(runs: Vec<NeuralRun>, methods: &[MethodRun], labels: &Labels, opts: &NeuralOptions) -> NeuralStudy {
    let splits = opts.splits(labels);
    let outside_dev = methods
        .iter()
        .map(|r| splits.iter().map(|s| jury_metrics::accuracy_on(r.aggregation.labels(), labels, &s.test)).collect())
        .collect();
    NeuralStudy { runs, seeds: opts.seed_range().collect(), splits, dev_size: opts.dev_size, outside_dev }
}

/// Every example's context text, in example order.
fn context_texts(j: &Judgments, path: &Path) -> Result<Vec<String>, StudyError> {
    let mut texts = jury_io::read_texts(path)?;
    j.example_ids()
        .iter()
        .map(|id| texts.remove(id).ok_or_else(|| StudyError::NoContext { path: path.to_owned(), example: id.clone() }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AggregateOptions;

    /// A method's name is its flag value; the aggregator or neural method it runs
    /// reports the same name, which keys metrics.json and predictions.csv.
    #[test]
    fn every_method_reports_its_flag_name() {
        let settings = Settings::new(&AggregateOptions::default()).unwrap();
        for &m in <Method as clap::ValueEnum>::value_variants() {
            let flag = clap::ValueEnum::to_possible_value(&m).unwrap().get_name().to_owned();
            let reported = match (settings.aggregator(m), m.neural()) {
                (Some(a), _) => a.name(),
                (None, Some(n)) => n.name(),
                (None, None) => {
                    assert_eq!(m, Method::Recommended);
                    continue;
                }
            };
            assert_eq!(reported, flag, "{m:?}");
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(json, format!("\"{flag}\""));
            assert_eq!(serde_json::from_str::<Method>(&json).unwrap(), m);
        }
        let e = serde_json::from_str::<Method>("\"x\"").unwrap_err().to_string();
        assert!(e.starts_with("unknown variant `x`, expected one of `recommended`, `avg`"), "{e}");
    }
}
