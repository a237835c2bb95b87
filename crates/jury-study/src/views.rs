//! The views of a study: metrics.json (filled into `jury_io::Metrics`, the file's one
//! record), predictions.csv and the table printed to the terminal. Scores come from
//! jury-metrics; this module only lays out.

use std::fmt::Write as _;
use std::path::Path;

use jury_aggregate::{Diagnostics, Selection, SelectionRule};
use jury_core::{Judgments, Labels, Posteriors};
use jury_io::{
    AgreementMetrics, Chosen, ContextFreeMetrics, DiagnosticMetrics, ErrorCorrelationMetrics, JudgeMetrics,
    MethodMetrics, MethodPredictions, Metrics, Named, NeuralMetrics, OverSeeds, Predictions, RecommendationMetrics,
    terminal_text, write_atomic,
};
use jury_metrics::{accuracy, against_judge, brier, expected_calibration_error, judge_accuracies, mean_std};
use jury_neural::NeuralRun;

use crate::{Study, StudyError};

const ECE_BINS: usize = 10;

/// Entries keyed by judge name, in the judgments' order.
fn by_judge<T>(j: &Judgments, values: impl IntoIterator<Item = T>) -> Named<T> {
    Named(j.judge_names().iter().cloned().zip(values).collect())
}

fn over_seeds(seeds: Vec<f64>) -> OverSeeds {
    let (accuracy, std) = mean_std(&seeds);
    OverSeeds { accuracy, std, seeds }
}

/// Each judge's share of the examples it judged.
fn coverage(j: &Judgments) -> Vec<f64> {
    let mut count = vec![0usize; j.n_judges()];
    j.entries().for_each(|(_, k, _)| count[k] += 1);
    count.into_iter().map(|c| c as f64 / j.n_examples() as f64).collect()
}

fn recommendation(s: &Selection, seconds: f64) -> RecommendationMetrics {
    let (rule, folds, examples) = match s.rule {
        SelectionRule::HeldOutJudges { folds, examples } => (RecommendationMetrics::HELD_OUT_JUDGES, folds, examples),
        SelectionRule::TooFewJudges => (RecommendationMetrics::TOO_FEW_JUDGES, 0, 0),
        SelectionRule::TooManyJudges => (RecommendationMetrics::TOO_MANY_JUDGES, 0, 0),
        SelectionRule::NoSignal { folds, examples } => (RecommendationMetrics::NO_SIGNAL, folds, examples),
    };
    RecommendationMetrics {
        rule: rule.to_owned(),
        reference: s.scores[s.reference].name.to_owned(),
        min_gain_se: jury_aggregate::MIN_GAIN_SE,
        folds,
        examples,
        scores: Named(s.scores.iter().map(|c| (c.name.to_owned(), c.score)).collect()),
        gain_se: Named(s.scores.iter().map(|c| (c.name.to_owned(), c.gain_se)).collect()),
        floor: s.floor.map(|f| f.score),
        reference_over_floor_se: s.floor.map(|f| f.reference_gain_se),
        seconds,
    }
}

fn diagnostics(d: &Diagnostics, j: &Judgments) -> DiagnosticMetrics {
    match d {
        Diagnostics::Counting { ties, unjudged } => DiagnosticMetrics::Counting { ties: *ties, unjudged: *unjudged },
        Diagnostics::DawidSkene(em) => DiagnosticMetrics::DawidSkene {
            iterations: em.iterations,
            converged: em.converged,
            log_likelihood: em.log_likelihood.last().copied(),
            class_prior: em.params.class_prior.clone(),
            confusion: by_judge(
                j,
                em.params.confusion.iter().map(|c| (0..c.n_classes()).map(|t| c.row(t).to_vec()).collect()),
            ),
            ties: em.ties,
            unjudged: em.unjudged,
        },
        Diagnostics::Skills(r) => DiagnosticMetrics::Skills {
            iterations: r.iterations,
            converged: r.converged,
            objective: r.objective,
            skill: r.meaning.to_owned(),
            skills: by_judge(j, r.skills.iter().copied()),
            held_out_gain: r.held_out_gain,
            ties: r.ties,
            unjudged: r.unjudged,
        },
        Diagnostics::Calibrated { labels } => DiagnosticMetrics::Calibrated { calibration_labels: *labels },
    }
}

fn neural_metrics(r: &NeuralRun, j: &Judgments, first_test: Option<&Labels>) -> NeuralMetrics {
    let accuracies = over_seeds(r.accuracies());
    NeuralMetrics {
        accuracy: accuracies.accuracy,
        std: accuracies.std,
        seeds: accuracies.seeds,
        dev_accuracy: r.seeds.iter().map(|s| s.dev_accuracy).collect(),
        chosen: r.seeds.iter().map(|s| Chosen { lambda: s.lambda, epoch: s.epoch }).collect(),
        dev_size: r.dev_size,
        seconds: r.seconds,
        embedding_seconds: r.embedding_seconds,
        context_accuracy: r.context_accuracies().filter(|c| !c.is_empty()).map(over_seeds),
        slopes: r.slopes.as_ref().map(|s| by_judge(j, s.iter().copied())),
        slope_accuracy_pcc: r.slopes.as_ref().map(|_| r.slope_accuracy_pcc),
        brier: first_test.and_then(|l| brier(&r.posteriors, l)),
        ece: first_test.and_then(|l| expected_calibration_error(&r.posteriors, l, ECE_BINS)),
    }
}

impl<'a> Study<'a> {
    /// metrics.json's contents.
    pub fn metrics(&self) -> Metrics {
        let (j, labels) = (self.judgments, self.labels);
        let judge_acc = labels.map(|l| judge_accuracies(j, l)).unwrap_or_else(|| vec![None; j.n_judges()]);
        let judges = by_judge(
            j,
            judge_acc.iter().zip(coverage(j)).map(|(&accuracy, coverage)| JudgeMetrics { accuracy, coverage }),
        );
        let mut methods: Vec<(String, MethodMetrics)> = self
            .methods
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let a = &r.aggregation;
                let m = ContextFreeMetrics {
                    accuracy: labels.and_then(|l| accuracy(a.labels(), l)),
                    brier: labels.and_then(|l| brier(a.posteriors(), l)),
                    ece: labels.and_then(|l| expected_calibration_error(a.posteriors(), l, ECE_BINS)),
                    seconds: r.seconds,
                    diagnostics: diagnostics(a.diagnostics(), j),
                    outside_dev: self.neural.as_ref().map(|n| over_seeds(n.outside_dev[i].clone())),
                };
                (r.name.to_owned(), MethodMetrics::ContextFree(m))
            })
            .collect();
        let (mut seeds, mut dev_sets) = (None, None);
        if let Some(n) = &self.neural {
            let first_test = labels.zip(n.splits.first()).map(|(l, s)| s.test_labels(l));
            for r in &n.runs {
                let m = MethodMetrics::Neural(neural_metrics(r, j, first_test.as_ref()));
                methods.push((r.method.name().to_owned(), m));
            }
            let ids = j.example_ids();
            seeds = Some(n.seeds.clone());
            dev_sets = Some(n.splits.iter().map(|s| s.dev.iter().map(|&i| ids[i].clone()).collect()).collect());
        }
        Metrics {
            n_examples: j.n_examples(),
            n_judges: j.n_judges(),
            n_classes: j.n_classes(),
            n_labeled: labels.map(Labels::n_labeled),
            recommended_method: match (&self.calibration, &self.recommendation) {
                (Some(_), _) => crate::calibration::METHOD.to_owned(),
                (None, r) => r.as_ref().map_or_else(String::new, |r| r.name().to_owned()),
            },
            calibration: self.calibration.clone(),
            recommendation: self.recommendation.as_ref().map(|r| recommendation(&r.selection, r.seconds)),
            agreement: {
                let a = jury_metrics::jury_agreement(j);
                Some(AgreementMetrics {
                    fleiss_kappa: a.fleiss_kappa,
                    krippendorff_alpha: a.krippendorff_alpha,
                    error_correlation: self.error_correlation(),
                })
            },
            judges,
            methods: Named(methods),
            seeds,
            dev_sets,
        }
    }

    /// The judges' error correlations under Dawid-Skene's posteriors when it ran, else
    /// under the first method's.
    fn error_correlation(&self) -> Option<ErrorCorrelationMetrics> {
        let r = self.methods.iter().find(|r| r.name == "ds").or_else(|| self.methods.first())?;
        let e = jury_metrics::error_correlations(self.judgments, r.aggregation.posteriors())?;
        let names = self.judgments.judge_names();
        Some(ErrorCorrelationMetrics {
            method: r.name.to_owned(),
            judges: names.to_vec(),
            matrix: e.matrix,
            families: e.families.iter().map(|f| f.iter().map(|&k| names[k].clone()).collect()).collect(),
            family_threshold: jury_metrics::FAMILY_CORRELATION,
        })
    }

    /// Every method's posteriors and hard labels, in report order.
    fn columns(&self) -> Vec<(&str, &Posteriors, Vec<usize>)> {
        let mut cols: Vec<(&str, &Posteriors, Vec<usize>)> = self
            .methods
            .iter()
            .map(|r| (r.name, r.aggregation.posteriors(), r.aggregation.labels().to_vec()))
            .collect();
        for r in self.neural.iter().flat_map(|n| &n.runs) {
            // Binary: P(positive) > 0.5; C classes: argmax, lowest class on ties.
            cols.push((r.method.name(), &r.posteriors, r.posteriors.argmax_labels()));
        }
        cols
    }

    /// Every method's posteriors and hard labels (predictions.csv's values, unrounded).
    pub fn predictions(&self) -> Predictions {
        let methods = self
            .columns()
            .into_iter()
            .map(|(name, posteriors, labels)| MethodPredictions {
                method: name.to_owned(),
                posteriors: posteriors.clone(),
                labels,
            })
            .collect();
        Predictions { example_ids: self.judgments.example_ids().to_vec(), methods }
    }

    /// What a reader needs first, above the table: the recommended method and why, and
    /// (with labels) where it parts from the best single judge.
    fn headline(&self) -> String {
        let mut s = String::new();
        let Some(rec) = &self.recommendation else { return s };
        let label_free = rec.name();
        let why = recommendation(&rec.selection, rec.seconds).why(label_free);
        let name = match &self.calibration {
            Some(c) => {
                let _ = writeln!(s, "recommended method: {}", c.recommended_why(crate::calibration::METHOD, &why));
                let rates: Vec<String> = c
                    .rates
                    .0
                    .iter()
                    .map(|(e, r)| {
                        let judge = match &c.rogan_gladen_judge {
                            Some(j) if e == jury_calibrate::Estimator::RoganGladen.name() => format!(
                                " (its judge's sensitivity {:.2}, specificity {:.2} on the labels)",
                                j.sensitivity, j.specificity
                            ),
                            _ => String::new(),
                        };
                        format!("{e} {:.3} [{:.3}, {:.3}]{judge}", r.estimate, r.low, r.high)
                    })
                    .collect();
                let class =
                    c.positive_word.as_ref().map(|w| format!(" (class 1, the prompt's `{w}`)")).unwrap_or_default();
                let _ = writeln!(
                    s,
                    "positive rate{class} of the {} examples judged, 95% intervals: {}",
                    self.judgments.n_examples(),
                    rates.join("; ")
                );
                if !c.accuracy.0.is_empty() {
                    let accuracy: Vec<String> = c
                        .accuracy
                        .0
                        .iter()
                        .map(|(m, r)| {
                            let m = if m == "recommended" { &c.label_free_method } else { m };
                            format!("{m} {:.3} [{:.3}, {:.3}]", r.estimate, r.low, r.high)
                        })
                        .collect();
                    let _ = writeln!(
                        s,
                        "accuracy outside the calibration set, read off its labels out of fold, 95% intervals: {}",
                        accuracy.join("; ")
                    );
                }
                if c.n_calibration < jury_calibrate::FEW_LABELS {
                    let _ = writeln!(
                        s,
                        "note: fewer than {} calibration labels; with so few the calibrated method was replayed \
                         below the label-free method on most juries (docs/reproduction/calibration.md, \
                         \"Fewer than 50 labels\"), and under 20 the jury's PPI interval wider than labels-only's \
                         (docs/reproduction/calibration-rates.md, \"The jury's PPI pseudo-labels inside the \
                         examples' range\")",
                        jury_calibrate::FEW_LABELS
                    );
                }
                if let Some(b) = c.balance.filter(|b| !b.plausible) {
                    let _ = writeln!(
                        s,
                        "warning: the calibration examples do not look drawn as stated ({}): {}; the calibrated \
                         method and every rate assume a uniform draw or the inclusion probabilities given (`jury \
                         label-plan` writes them)",
                        c.sampling_words(),
                        b.summary()
                    );
                }
                crate::calibration::METHOD
            }
            None => {
                let _ = writeln!(s, "recommended method: {why}");
                label_free
            }
        };
        let run = self.methods.iter().find(|r| r.name == name);
        if let (Some(run), Some(labels)) = (run, self.labels) {
            let accs = judge_accuracies(self.judgments, labels);
            let best =
                accs.iter().enumerate().filter_map(|(k, a)| a.map(|a| (k, a))).max_by(|a, b| a.1.total_cmp(&b.1));
            if let Some((k, judge_acc)) = best {
                let a = against_judge(run.aggregation.labels(), self.judgments, k, labels);
                let points =
                    100.0 * (a.only_labelling_right as f64 - a.only_judge_right as f64) / a.compared.max(1) as f64;
                let verdict = if points > 0.0 { "above it" } else { "not above it" };
                let _ = writeln!(
                    s,
                    "against the best judge, {} ({judge_acc:.4}): {name} is right on {} of its {} labeled examples \
                     where the judge is wrong, and wrong on {} where it is right: {points:+.1} points, {verdict}",
                    shown_name(&self.judgments.judge_names()[k]),
                    a.only_labelling_right,
                    a.compared,
                    a.only_judge_right,
                );
            }
        }
        s.push('\n');
        s
    }

    /// The table printed to the terminal, the recommended method first.
    pub fn table(&self) -> String {
        let mut s = self.headline();
        let calibration = self.calibration.as_ref().map(|c| c.n_calibration);
        s.push_str(&table(self.judgments, self.labels, calibration, &self.methods));
        if let Some(n) = &self.neural {
            s.push_str("\ncontext-dependent methods (accuracy outside each seed's dev set)\n");
            for r in &n.runs {
                let (mean, std) = mean_std(&r.accuracies());
                let context = match r.context_accuracies().filter(|c| !c.is_empty()) {
                    Some(c) => format!("; context model alone {:.4}", mean_std(&c).0),
                    None => String::new(),
                };
                let _ = writeln!(
                    s,
                    "{:<16}  {mean:.4} +- {std:.4} over {} seeds (dev set {} per seed{context})",
                    r.method.name(),
                    r.seeds.len(),
                    n.dev_size
                );
            }
            for (r, accs) in self.methods.iter().zip(&n.outside_dev) {
                let (mean, std) = mean_std(accs);
                let _ = writeln!(s, "{:<16}  {mean:.4} +- {std:.4} on the same test splits (context-free)", r.name);
            }
        }
        s
    }

    /// Writes metrics.json and predictions.csv into `dir`, each atomically, and returns
    /// their values as a reader of the files gets them (predictions at six decimals), so
    /// a page drawn from them in memory is the page `jury report` draws from the files.
    pub fn write(&self, dir: &Path) -> Result<(Metrics, Predictions), StudyError> {
        let metrics = self.metrics();
        metrics.write(&dir.join(jury_io::layout::METRICS))?;
        let path = dir.join(jury_io::layout::PREDICTIONS);
        let csv = self.predictions().to_csv(self.labels);
        write_atomic(&path, csv.as_bytes())?;
        Ok((metrics, jury_io::parse_predictions(&csv, &path)?))
    }
}

fn fmt_opt(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_owned(), |x| format!("{x:.4}"))
}

/// The longest judge name the table shows whole; longer ones are cut with an ellipsis
/// (the files keep them whole).
const NAME_WIDTH: usize = 40;

/// A judge name as the table shows it: control characters escaped (`terminal_text`),
/// then cut to [`NAME_WIDTH`].
fn shown_name(name: &str) -> String {
    let name = terminal_text(name);
    if name.chars().count() <= NAME_WIDTH {
        name.into_owned()
    } else {
        name.chars().take(NAME_WIDTH - 1).chain(std::iter::once('…')).collect()
    }
}

/// The judges' and methods' table, under a line of counts; `calibration` is the number
/// of calibration labels, which no accuracy is scored on.
fn table(j: &Judgments, labels: Option<&Labels>, calibration: Option<usize>, runs: &[crate::MethodRun]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} examples, {} judges, {} classes, {} labeled{}",
        j.n_examples(),
        j.n_judges(),
        j.n_classes(),
        labels.map_or(0, Labels::n_labeled),
        calibration.map_or(String::new(), |k| format!(" (besides {k} calibration labels, not scored on)"))
    );
    if calibration.is_none() && labels.is_none_or(|l| l.n_labeled() == 0) && j.n_classes() == 2 {
        let _ = writeln!(
            s,
            "note: no labels, so no accuracy is scored; a few fit the calibrated method and correct the positive \
             rate (`jury label-plan` picks them; README, \"A few labels: calibration\")"
        );
    }
    let judge_acc = labels.map(|l| judge_accuracies(j, l)).unwrap_or_else(|| vec![None; j.n_judges()]);
    let cover = coverage(j);
    let names: Vec<String> = j.judge_names().iter().map(|n| shown_name(n)).collect();
    // One name column for both tables: a method's name (`calibrated`, `care-gauss`) may
    // be longer than every judge's.
    let width =
        names.iter().map(|n| n.chars().count()).chain(runs.iter().map(|r| r.name.len())).max().unwrap_or(5).max(6);
    let _ = writeln!(s, "\n{:<width$}  {:>8}  {:>8}", "judge", "accuracy", "coverage");
    for (k, name) in names.iter().enumerate() {
        let _ = writeln!(s, "{name:<width$}  {:>8}  {:>8.3}", fmt_opt(judge_acc[k]), cover[k]);
    }
    let _ = writeln!(s, "\n{:<width$}  {:>8}  {:>8}  {:>8}  notes", "method", "accuracy", "brier", "ece");
    for r in runs {
        let a = &r.aggregation;
        let acc = labels.and_then(|l| accuracy(a.labels(), l));
        let b = labels.and_then(|l| brier(a.posteriors(), l));
        let e = labels.and_then(|l| expected_calibration_error(a.posteriors(), l, ECE_BINS));
        let fit = |iterations: usize, converged: bool, ties: usize| {
            let state = if converged { "converged" } else { "not converged" };
            // A tied posterior is labelled by its judges' side, or by `ties` (metrics.json
            // counts them too), so a model that could not decide never goes unsaid.
            let tied = if ties > 0 { format!(", {ties} ties broken") } else { String::new() };
            format!("{iterations} iterations, {state}{tied}")
        };
        let notes = match a.diagnostics() {
            Diagnostics::Counting { ties, .. } => format!("{ties} ties"),
            Diagnostics::DawidSkene(em) => fit(em.iterations, em.converged, em.ties),
            Diagnostics::Skills(r) => fit(r.iterations, r.converged, r.ties),
            Diagnostics::Calibrated { labels } => format!("fitted on {labels} calibration labels"),
        };
        let _ = writeln!(s, "{:<width$}  {:>8}  {:>8}  {:>8}  {notes}", r.name, fmt_opt(acc), fmt_opt(b), fmt_opt(e));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_very_long_judge_name_is_cut_in_the_table_only() {
        let long = "j".repeat(70_000);
        let mut b = jury_core::JudgmentsBuilder::new(2).unwrap();
        b.push_binary("e1", &long, Some(0.9)).unwrap();
        b.push_binary("e1", "short", Some(0.2)).unwrap();
        let t = table(&b.build(), None, None, &[]);
        assert!(t.contains(&format!("{}…", "j".repeat(NAME_WIDTH - 1))), "{t}");
        // Without labels, the table says what a few would add.
        assert!(t.lines().nth(1).is_some_and(|l| l.starts_with("note: no labels, so no accuracy is scored")), "{t}");
        assert!(t.lines().all(|l| l.chars().count() < 200), "{t}");
    }

    #[test]
    fn a_method_name_longer_than_every_judge_name_keeps_the_columns_aligned() {
        let mut b = jury_core::JudgmentsBuilder::new(2).unwrap();
        b.push_binary("e1", "j1", Some(0.9)).unwrap();
        b.push_binary("e1", "j2", Some(0.2)).unwrap();
        let j = b.build();
        let run = |name| {
            let aggregation = jury_aggregate::Aggregator::aggregate(
                &jury_aggregate::AverageProb { ties: jury_aggregate::TieBreak::Negative },
                &j,
            )
            .unwrap();
            crate::MethodRun { name, aggregation, seconds: 0.0 }
        };
        let t = table(&j, None, Some(40), &[run("calibrated"), run("avg")]);
        assert!(t.starts_with(
            "1 examples, 2 judges, 2 classes, 0 labeled (besides 40 calibration labels, not scored on)\n\n"
        ));
        // Every row of the methods' table puts its accuracy column where the header does.
        let header = t.lines().find(|l| l.starts_with("method")).expect("a methods header");
        let at = header.find("accuracy").expect("an accuracy column");
        for name in ["calibrated", "avg"] {
            let row = t.lines().find(|l| l.starts_with(name)).expect("a row per method");
            assert_eq!(row.find(" -").map(|i| i + 1), Some(at + "accuracy".len() - 1), "{t}");
        }
    }

    #[test]
    fn a_judge_name_cannot_drive_the_terminal() {
        let mut b = jury_core::JudgmentsBuilder::new(2).unwrap();
        b.push_binary("e1", "j\x1b]0;pwned\x07\x1b[2J", Some(0.9)).unwrap();
        let t = table(&b.build(), None, None, &[]);
        assert!(t.contains("j\\x1b]0;pwned\\x07\\x1b[2J "), "{t}");
        assert!(!t.contains(['\x1b', '\x07']), "{t}");
    }
}
