//! Calibration labels in a study: the calibrated method (jury-calibrate's stack over the
//! label-free recommended method and the judges) added as `calibrated` and recommended,
//! the rate corrected four ways, the reference labels of calibration examples left out
//! of scoring; and the two commands built on the same pieces, the label plan and the
//! replay (calibration.json, `jury_io::CalibrationReplay`).

use jury_aggregate::Aggregation;
use jury_calibrate::{
    Balance, Calibrated, Candidate, LogOdds, RateEstimates, ReplayMethod, ReplaySettings, Sample,
    mean_judge_probabilities, plan_labels, plan_more_labels, replay, verdict_accuracy,
};
use jury_core::{Judgments, Labels};
use jury_io::{
    BalanceCovariate, CalibrationBalance, CalibrationLabels, CalibrationMetrics, CalibrationReplay, JudgeClassRates,
    Named, RateInterval, ReplayAccuracy, ReplayBudget, ReplayCoverage, ReplayJury,
};

use crate::{Settings, StudyError};

/// The calibrated method's name in metrics.json, predictions.csv and the report.
pub(crate) const METHOD: &str = "calibrated";

/// `labels` without the examples of the calibration set (scoring never reads a label
/// that fitted), and how many were dropped.
pub fn scoring_labels(labels: &Labels, calibration: &CalibrationLabels) -> (Labels, usize) {
    let mut kept = labels.as_slice().to_vec();
    let mut dropped = 0;
    for &i in &calibration.index {
        if kept.get(i).is_some_and(Option::is_some) {
            kept[i] = None;
            dropped += 1;
        }
    }
    (Labels::new(labels.n_classes(), kept).expect("the same labels, fewer of them"), dropped)
}

impl Settings {
    /// The label-free method `recommended` stands for and its probabilities of class 1.
    fn label_free(&self, j: &Judgments) -> Result<(&'static str, Vec<f64>, Vec<u8>), StudyError> {
        let rec = self.recommend(j)?;
        let aggregator = self.aggregator(rec.method).ok_or(StudyError::Option {
            flag: "--calibration",
            reason: "the recommended method has no label-free aggregator".into(),
        })?;
        let a = aggregator.aggregate(j)?;
        let p1 = a.posteriors().rows().map(|r| r[1]).collect();
        let hard = a.labels().iter().map(|&l| l as u8).collect();
        Ok((aggregator.name(), p1, hard))
    }
}

fn calibration_error(e: jury_calibrate::CalibrationError) -> StudyError {
    let (flag, reason) = match e {
        jury_calibrate::CalibrationError::DrawsOneClass { .. } => ("--budget", e.to_string()),
        jury_calibrate::CalibrationError::NotBinary(n) => ("--judgments", not_binary(n)),
        _ => ("--calibration", e.to_string()),
    };
    StudyError::Option { flag, reason }
}

/// The judgments are at fault, whichever command read them (`simulate calibration` and
/// `label-plan` have no `--calibration`); said before the label-free method is fitted.
fn check_binary(j: &Judgments) -> Result<(), StudyError> {
    match j.n_classes() {
        2 => Ok(()),
        n => Err(StudyError::Option { flag: "--judgments", reason: not_binary(n) }),
    }
}

fn not_binary(n: usize) -> String {
    format!("have {n} classes; calibration labels need judgments of two")
}

/// A budget's errors name `--budget`, and come before any method is fitted.
fn check_budget(budget: usize, j: &Judgments) -> Result<(), StudyError> {
    let reason = if budget < 2 {
        format!("{budget}: at least 2 labels are needed")
    } else if budget > j.n_examples() {
        format!("{budget} is more than the {} examples judged", j.n_examples())
    } else {
        return Ok(());
    };
    Err(StudyError::Option { flag: "--budget", reason })
}

/// Fits the calibrated method on `calibration`, starting from the label-free method
/// `method` and its result, and corrects the rate; returns the method's aggregation and
/// metrics.json's `calibration` record (`n_scored` and `n_scoring_dropped` as given).
pub(crate) fn calibrate(
    j: &Judgments,
    calibration: &CalibrationLabels,
    method: &str,
    label_free: &Aggregation,
    settings: &Settings,
    n_scored: usize,
    n_scoring_dropped: usize,
) -> Result<(Aggregation, CalibrationMetrics), StudyError> {
    let p1: Vec<f64> = label_free.posteriors().rows().map(|r| r[1]).collect();
    let d = LogOdds::new(j, &p1).map_err(calibration_error)?;
    let sample = Sample::new(
        j.n_examples(),
        calibration.index.clone(),
        calibration.labels.clone(),
        calibration.inclusion.clone(),
    )
    .map_err(calibration_error)?;
    let fit = Calibrated::fit(&d, &sample, settings.seed);
    let aggregation = Aggregation::calibrated(&fit.probabilities(&d), sample.len())?;
    let rates = RateEstimates::estimate(&d, &sample, settings.seed);
    let hard: Vec<u8> = label_free.labels().iter().map(|&l| u8::from(l == 1)).collect();
    let accuracy = verdict_accuracy(&sample, &fit, &hard);
    let balance = Balance::check(&d.mean_judge_probabilities(), &sample);
    let covariate =
        |c: jury_calibrate::Covariate| BalanceCovariate { sample_mean: c.sample_mean, all_mean: c.all_mean, z: c.z };
    let metrics = CalibrationMetrics {
        n_calibration: sample.len(),
        n_scored,
        n_scoring_dropped,
        sampling: if calibration.inclusion.is_some() { "planned" } else { "uniform" }.to_owned(),
        n_inclusion_one: sample.n_sure(),
        label_free_method: method.to_owned(),
        picked_judge: j.judge_names()[rates.picked_judge].clone(),
        stack: Named(fit.stack.iter().map(|(c, w)| (Candidate::name(*c).to_owned(), *w)).collect()),
        label_free_kept: fit.label_free_kept(),
        label_free_swapped: fit.label_free_swapped(),
        balance: Some(CalibrationBalance {
            mean_probability: covariate(balance.mean_probability),
            uncertainty: covariate(balance.uncertainty),
            plausible: balance.plausible(),
        }),
        rates: Named(
            rates
                .intervals
                .iter()
                .map(|(e, i)| (e.name().to_owned(), RateInterval { estimate: i.estimate, low: i.low, high: i.high }))
                .collect(),
        ),
        positive_word: None,
        rogan_gladen_judge: Some(JudgeClassRates {
            sensitivity: rates.rogan_gladen_judge.sensitivity,
            specificity: rates.rogan_gladen_judge.specificity,
        }),
        accuracy: Named(
            accuracy
                .iter()
                .flat_map(|a| [(ReplayMethod::Calibrated, a.calibrated), (ReplayMethod::Recommended, a.recommended)])
                .map(|(m, i)| (m.name().to_owned(), RateInterval { estimate: i.estimate, low: i.low, high: i.high }))
                .collect(),
        ),
    };
    Ok((aggregation, metrics))
}

/// `budget` examples to label, with their inclusion probabilities: example id and
/// probability, in the judgments' order. The uncertainty the plan follows is the judges'
/// mean probability's, as the replay's planned draws use it (no label-free method is
/// fitted: the plan needs none).
pub fn label_plan(j: &Judgments, budget: usize, seed: u64) -> Result<Vec<(String, f64)>, StudyError> {
    check_binary(j)?;
    check_budget(budget, j)?;
    let p = mean_judge_probabilities(j).map_err(calibration_error)?;
    let plan = plan_labels(&p, budget, seed).map_err(calibration_error)?;
    Ok(plan.into_iter().map(|p| (j.example_ids()[p.index].clone(), p.inclusion)).collect())
}

/// [`label_plan`] of `budget` more examples beside those already labeled (`have`, positions
/// in the judgments): every example of the plan, `have`'s at inclusion 1, in the
/// judgments' order (jury-calibrate's `plan_more_labels` says why the whole stays
/// unbiased).
pub fn label_plan_more(
    j: &Judgments,
    have: &[usize],
    budget: usize,
    seed: u64,
) -> Result<Vec<(String, f64)>, StudyError> {
    check_binary(j)?;
    if budget < 2 {
        return Err(StudyError::Option { flag: "--budget", reason: format!("{budget}: at least 2 labels are needed") });
    }
    let p = mean_judge_probabilities(j).map_err(calibration_error)?;
    let plan = plan_more_labels(&p, have, budget, seed).map_err(|e| match e {
        jury_calibrate::CalibrationError::BudgetBeyondUnlabeled { .. } => {
            StudyError::Option { flag: "--budget", reason: e.to_string() }
        }
        other => calibration_error(other),
    })?;
    Ok(plan.into_iter().map(|p| (j.example_ids()[p.index].clone(), p.inclusion)).collect())
}

/// Replays calibration sets of each budget drawn from `labels` (every example of `j` must
/// have one), uniformly and by plan; `progress` hears (draws done, draws in all).
pub fn calibration_replay(
    j: &Judgments,
    labels: &Labels,
    settings: &Settings,
    budgets: &[usize],
    trials: usize,
    seed: u64,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<CalibrationReplay, StudyError> {
    check_binary(j)?;
    // The replay is of the labeled examples: a draw's calibration set, its scores and the
    // true rate all need labels. Judged examples without one are left out, and said so.
    let labeled: Vec<usize> = (0..j.n_examples()).filter(|&n| labels.get(n).is_some()).collect();
    if labeled.is_empty() {
        return Err(StudyError::Option { flag: "--labels", reason: "label none of the judged examples".into() });
    }
    let unlabeled_left_out = j.n_examples() - labeled.len();
    let restricted;
    // Each replayed example's position in `j`: `restrict` also drops an example with no
    // judgment present, so its own map says which were kept.
    let (j, kept) = if unlabeled_left_out == 0 {
        (j, labeled)
    } else {
        let (r, origin) = j.restrict(&labeled, &vec![true; j.n_judges()]);
        restricted = r;
        (&restricted, origin.iter().map(|&at| labeled[at]).collect())
    };
    for &b in budgets {
        check_budget(b, j)?;
        // A replay scores each method on the examples its calibration set leaves out.
        if b == j.n_examples() {
            return Err(StudyError::Option {
                flag: "--budget",
                reason: format!("{b} leaves none of the {b} examples judged to score the methods on"),
            });
        }
    }
    let truth: Vec<u8> = kept.iter().filter_map(|&n| labels.get(n)).map(|l| l as u8).collect();
    if let Some(&class) = truth.first().filter(|&&c| truth.iter().all(|&t| t == c)) {
        return Err(StudyError::Option {
            flag: "--labels",
            reason: format!("labels every example {class}: a replay draws calibration sets that hold both classes"),
        });
    }
    let (method, p1, hard) = settings.label_free(j)?;
    let d = LogOdds::new(j, &p1).map_err(calibration_error)?;
    let r = replay(&d, &hard, &truth, &ReplaySettings { budgets: budgets.to_vec(), trials, seed }, progress)
        .map_err(calibration_error)?;
    let true_rate = truth.iter().map(|&t| f64::from(t)).sum::<f64>() / truth.len() as f64;
    let coverage = |s: &jury_calibrate::EstimatorSummary| ReplayCoverage {
        coverage: s.coverage,
        mean_width: s.mean_width,
        mean_error: s.mean_error,
    };
    Ok(CalibrationReplay {
        budgets: r
            .into_iter()
            .map(|b| ReplayBudget {
                budget: b.budget,
                sampling: b.sampling.name().to_owned(),
                trials: b.trials,
                redrawn: b.redrawn,
                label_free_swapped: b.label_free_swapped,
                unbalanced: b.unbalanced,
                methods: Named(
                    b.methods
                        .iter()
                        .map(|(m, a)| {
                            (m.name().to_owned(), ReplayAccuracy { mean_accuracy: a.mean, p10_accuracy: a.p10 })
                        })
                        .collect(),
                ),
                estimators: Named(b.estimators.iter().map(|(e, s)| (e.name().to_owned(), coverage(s))).collect()),
                accuracy_estimates: Named(
                    b.accuracy_estimates.iter().map(|(m, s)| (m.name().to_owned(), coverage(s))).collect(),
                ),
            })
            .collect(),
        jury: ReplayJury {
            n_examples: j.n_examples(),
            n_judges: j.n_judges(),
            recommended_method: method.to_owned(),
            true_rate,
            seed,
            label_free_kept: d.label_free_holds(),
            unlabeled_left_out,
        },
    })
}

/// calibration.json as three terminal tables per budget and sampling.
pub fn calibration_table(r: &CalibrationReplay) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    for b in &r.budgets {
        let _ = writeln!(s, "budget {} ({}, {} trials)", b.budget, b.sampling, b.trials);
        for (m, a) in &b.methods.0 {
            let _ = writeln!(s, "  {m:<16} accuracy {:.4}  p10 {:.4}", a.mean_accuracy, a.p10_accuracy);
        }
        for (e, c) in &b.estimators.0 {
            let _ = writeln!(
                s,
                "  {e:<16} coverage {:.3}  width {:.4}  error {:+.4}",
                c.coverage, c.mean_width, c.mean_error
            );
        }
        for (m, c) in &b.accuracy_estimates.0 {
            let _ = writeln!(
                s,
                "  {m:<16} accuracy read off the labels: coverage {:.3}  width {:.4}  error {:+.4}",
                c.coverage, c.mean_width, c.mean_error
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plan or a replay for judgments of three classes is refused by `--judgments`,
    /// before any fit.
    #[test]
    fn judgments_of_three_classes_are_refused_by_their_flag() {
        let mut b = jury_core::JudgmentsBuilder::new(3).unwrap();
        for (e, p) in [("x", [0.2, 0.3, 0.5]), ("y", [0.6, 0.3, 0.1]), ("z", [0.1, 0.8, 0.1])] {
            b.push(e, "a", Some(p.to_vec())).unwrap();
        }
        let j = b.build();
        let settings = Settings::new(&crate::AggregateOptions::default()).unwrap();
        let e = label_plan(&j, 2, 0).unwrap_err().to_string();
        assert_eq!(e, "--judgments have 3 classes; calibration labels need judgments of two");
        let labels = Labels::new(3, vec![Some(0), Some(1), Some(2)]).unwrap();
        let e = calibration_replay(&j, &labels, &settings, &[2], 1, 0, &|_, _| {}).unwrap_err().to_string();
        assert_eq!(e, "--judgments have 3 classes; calibration labels need judgments of two");
    }

    /// Judged examples without a label are left out of a replay, which is then the
    /// replay of the labeled ones alone, and says how many it left out.
    #[test]
    fn a_replay_leaves_out_the_examples_without_a_label() {
        let (n, k) = (80usize, 4usize);
        let mut full = jury_core::JudgmentsBuilder::new(2).unwrap();
        let mut labeled = jury_core::JudgmentsBuilder::new(2).unwrap();
        let (mut some, mut all) = (Vec::new(), Vec::new());
        for i in 0..n {
            let t = u8::from(i % 3 == 0);
            let id = format!("e{i}");
            for j in 0..k {
                // Right three times in four, more or less sure.
                let right = (i + j) % 4 != 0;
                let sure = 0.6 + 0.3 * ((i * 7 + j * 3) % 10) as f64 / 10.0;
                let p = if (t == 1) == right { sure } else { 1.0 - sure };
                full.push_binary(&id, &format!("j{j}"), Some(p)).unwrap();
                if i % 8 != 0 {
                    labeled.push_binary(&id, &format!("j{j}"), Some(p)).unwrap();
                }
            }
            some.push((i % 8 != 0).then_some(t as usize));
            if i % 8 != 0 {
                all.push(Some(t as usize));
            }
        }
        let settings = Settings::new(&crate::AggregateOptions::default()).unwrap();
        let quiet = |_: usize, _: usize| {};
        let full_jury = full.build();
        let left =
            calibration_replay(&full_jury, &Labels::new(2, some).unwrap(), &settings, &[20], 3, 0, &quiet).unwrap();
        let only = calibration_replay(&labeled.build(), &Labels::new(2, all).unwrap(), &settings, &[20], 3, 0, &quiet)
            .unwrap();
        assert_eq!((left.jury.n_examples, left.jury.unlabeled_left_out), (70, 10));
        assert_eq!(left.budgets, only.budgets);
        assert_eq!(ReplayJury { unlabeled_left_out: 0, ..left.jury }, only.jury);
        // No label at all is the labels' fault, not the budget's.
        let none = Labels::new(2, vec![None; n]).unwrap();
        let e = calibration_replay(&full_jury, &none, &settings, &[20], 3, 0, &quiet).unwrap_err().to_string();
        assert_eq!(e, "--labels label none of the judged examples");
    }
}
