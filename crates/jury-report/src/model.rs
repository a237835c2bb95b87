//! What the page shows, computed from a run's results and inputs: typed rows and charts
//! the template lays out. Numbers shown for methods and judges are metrics.json's.

use std::collections::{HashMap, HashSet};

use jury_core::{Judgments, Labels};
use jury_io::{DiagnosticMetrics, JudgeMetrics, Manifest, ManifestAdaptive, Metrics};
use serde::Serialize;

use crate::{Inputs, ReportError, RunResults, plots};

/// The header's lines for an adaptive run: calls made and saved, the order with each
/// judge's calls, and why the examples stopped.
fn adaptive_facts(a: &ManifestAdaptive) -> Vec<(String, String)> {
    let order: Vec<String> =
        a.order.iter().map(|name| format!("{name} ({})", a.calls_per_judge.get(name).copied().unwrap_or(0))).collect();
    let stops: Vec<String> = a.stops.iter().map(|(why, n)| format!("{why} {n}")).collect();
    vec![
        (
            "adaptive judge calls".to_owned(),
            format!(
                "{} of the full jury's {} ({:.1}% saved), target {}",
                a.calls,
                a.full_calls,
                100.0 * a.calls_saved,
                a.target
            ),
        ),
        ("adaptive order (calls)".to_owned(), order.join(", ")),
        ("adaptive stops".to_owned(), stops.join(", ")),
    ]
}

/// The page's data.
#[derive(Debug, Serialize)]
pub(crate) struct Page {
    pub(crate) title: String,
    pub(crate) facts: Vec<(String, String)>,
    pub(crate) judges: Vec<JudgeRow>,
    /// Said when the judge views show only some of the judges ([`MAX_JUDGES_SHOWN`]).
    pub(crate) judges_note: Option<String>,
    /// Whether the judges' table has the run's columns (captured mass, exact share).
    pub(crate) judged_here: bool,
    /// Whether it has the position-consistency column (both orders judged).
    pub(crate) both_orders: bool,
    pub(crate) methods: Vec<MethodRow>,
    pub(crate) accuracy_svg: Option<String>,
    pub(crate) kappa_svg: Option<String>,
    pub(crate) calibration: Vec<Calibration>,
    /// The positive rate corrected with calibration labels: estimator, estimate, 95%
    /// interval; and their chart.
    pub(crate) rates: Vec<(String, String, String)>,
    pub(crate) rates_svg: Option<String>,
    /// The run's prompt's word for class 1, which the rates are the share of.
    pub(crate) positive_word: Option<String>,
    /// The accuracy read off the calibration labels out of fold: method, accuracy, 95%
    /// interval.
    pub(crate) verdict_accuracy: Vec<(String, String, String)>,
    pub(crate) confusion: Vec<ConfusionRow>,
    pub(crate) slopes: Vec<SlopePlot>,
    pub(crate) hardest: Vec<Hard>,
    pub(crate) all_wrong: usize,
    /// Accuracy by the data set's categories (a run's categories.csv), with the methods'
    /// names as the columns.
    pub(crate) category_methods: Vec<String>,
    pub(crate) categories: Vec<CategoryRow>,
}

#[derive(Debug, Serialize)]
pub(crate) struct CategoryRow {
    pub(crate) category: String,
    pub(crate) labeled: usize,
    pub(crate) accuracies: Vec<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct JudgeRow {
    pub(crate) name: String,
    pub(crate) accuracy: Option<String>,
    pub(crate) interval: Option<String>,
    pub(crate) coverage: String,
    pub(crate) mean_positive: String,
    /// From a `jury run`'s manifest: mean captured mass and share of exact verdicts.
    pub(crate) mass: Option<String>,
    pub(crate) exact: Option<String>,
    /// Pairs judged in both orders: the share whose verdict survives the swap.
    pub(crate) consistency: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct MethodRow {
    pub(crate) name: String,
    pub(crate) accuracy: Option<String>,
    pub(crate) brier: Option<String>,
    pub(crate) ece: Option<String>,
    pub(crate) notes: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct Calibration {
    pub(crate) method: String,
    pub(crate) svg: String,
    pub(crate) ece: Option<String>,
    pub(crate) brier: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ConfusionRow {
    pub(crate) judge: String,
    pub(crate) cells: Vec<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct SlopePlot {
    pub(crate) method: String,
    /// What the vertical axis is: a learned slope, or the method's own skill.
    pub(crate) what: String,
    pub(crate) svg: String,
    pub(crate) pcc: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Hard {
    pub(crate) id: String,
    pub(crate) label: usize,
    pub(crate) text: Option<String>,
}

/// Each method's accuracy on each category's labeled examples, categories by name.
fn by_category(
    j: &Judgments,
    labels: &Labels,
    categories: &HashMap<String, String>,
    predictions: &jury_io::Predictions,
) -> (Vec<String>, Vec<CategoryRow>) {
    let mut members: std::collections::BTreeMap<&str, Vec<usize>> = std::collections::BTreeMap::new();
    for (n, id) in j.example_ids().iter().enumerate() {
        if let (Some(c), Some(_)) = (categories.get(id), labels.get(n)) {
            members.entry(c).or_default().push(n);
        }
    }
    let methods = predictions.methods.iter().map(|m| m.method.clone()).collect();
    let rows = members
        .into_iter()
        .map(|(c, idx)| CategoryRow {
            category: c.to_owned(),
            labeled: idx.len(),
            accuracies: predictions
                .methods
                .iter()
                .map(|m| format!("{:.3}", jury_metrics::accuracy_on(&m.labels, labels, &idx)))
                .collect(),
        })
        .collect();
    (methods, rows)
}

/// Each judge's share of examples judged in both orders whose hard verdict (P(positive)
/// > 0.5, original orientation) is the same in both.
fn position_consistency(rows: &[jury_io::OrderedJudgment]) -> HashMap<String, f64> {
    let mut votes: HashMap<(&str, &str), [Option<bool>; 2]> = HashMap::new();
    for r in rows {
        votes.entry((&r.judge, &r.example_id)).or_default()[usize::from(r.swapped)] = r.p.map(|p| p > 0.5);
    }
    let mut counts: HashMap<String, (usize, usize)> = HashMap::new();
    for ((judge, _), v) in votes {
        if let [Some(a), Some(b)] = v {
            let c = counts.entry(judge.to_owned()).or_default();
            c.0 += usize::from(a == b);
            c.1 += 1;
        }
    }
    counts.into_iter().map(|(j, (same, n))| (j, same as f64 / n as f64)).collect()
}

/// How many of the hardest examples the page lists.
const HARDEST: usize = 10;

fn f4(x: f64) -> String {
    format!("{x:.4}")
}

/// Builds the page of a run from its results and inputs.
pub(crate) fn page(inputs: &Inputs) -> Result<Page, ReportError> {
    let RunResults { metrics, predictions, manifest, by_order, categories } = inputs.results;
    let (j, labels) = (inputs.judgments, inputs.labels);
    // Only the views that score use the posteriors.
    let predictions = labels.and(predictions.as_ref());
    if j.n_examples() != metrics.n_examples || j.n_judges() != metrics.n_judges {
        return Err(ReportError::Mismatch(format!(
            "metrics.json has {} examples x {} judges, the judgments {} x {}",
            metrics.n_examples,
            metrics.n_judges,
            j.n_examples(),
            j.n_judges()
        )));
    }
    let title = manifest.as_ref().map_or_else(|| "jury aggregation".to_owned(), |m| m.experiment.clone());
    let mut facts = vec![
        ("examples".to_owned(), metrics.n_examples.to_string()),
        ("judges".to_owned(), metrics.n_judges.to_string()),
        ("classes".to_owned(), metrics.n_classes.to_string()),
        ("labeled".to_owned(), metrics.n_labeled.map_or("none".to_owned(), |n| n.to_string())),
        ("methods".to_owned(), metrics.methods.0.iter().map(|(m, _)| m.as_str()).collect::<Vec<_>>().join(", ")),
    ];
    if let Some(r) = &metrics.recommendation {
        // With calibration labels the recommended method is `calibrated`, which the
        // held-out-judge criterion never scored: it explains the label-free method.
        let why = match &metrics.calibration {
            Some(c) => c.recommended_why(&metrics.recommended_method, &r.why(&c.label_free_method)),
            None => r.why(&metrics.recommended_method),
        };
        facts.push(("recommended method".to_owned(), why));
    }
    if let Some(c) = &metrics.calibration {
        facts.push((
            "calibration labels".to_owned(),
            format!(
                "{} ({}): `calibrated` is fitted on them and recommended; every accuracy is scored on the {} \
                 reference labels outside them ({} reference labels of calibration examples left out)",
                c.n_calibration,
                c.sampling_words(),
                c.n_scored,
                c.n_scoring_dropped
            ),
        ));
        let stack: Vec<String> = c.stack.0.iter().map(|(m, w)| format!("{m} {w:.2}")).collect();
        let kept = match (c.label_free_kept, c.label_free_swapped) {
            (true, false) => {
                "; the judges' votes are as independent given its classes as its model says, so `calibrated` keeps \
                 its posterior as it is"
            }
            (true, true) => {
                "; the judges' votes are as independent given its classes as its model says, so `calibrated` keeps \
                 its posterior, with its classes swapped: the calibration labels' 1 is its class 0"
            }
            (false, _) => "",
        };
        if let Some(b) = c.balance.filter(|b| !b.plausible) {
            facts.push((
                "calibration sample".to_owned(),
                format!(
                    "not drawn as stated ({}), by the judges: {}. The calibrated method and every rate below assume \
                     it was",
                    c.sampling_words(),
                    b.summary()
                ),
            ));
        }
        facts.push((
            "calibrated stack".to_owned(),
            format!(
                "{} (label-free: {}{kept}; picked judge: {})",
                stack.join(", "),
                c.label_free_method,
                c.picked_judge
            ),
        ));
        if let Some(j) = &c.rogan_gladen_judge {
            facts.push((
                "Rogan-Gladen's judge".to_owned(),
                format!(
                    "sensitivity {:.3}, specificity {:.3} on the calibration labels (picked out of fold); the \
                     correction divides by their sum less 1, {:.3}",
                    j.sensitivity,
                    j.specificity,
                    j.sensitivity + j.specificity - 1.0
                ),
            ));
        }
    }
    if let Some(a) = &metrics.agreement {
        let show = |x: Option<f64>| x.map_or("n/a (one class or no shared example)".to_owned(), |x| format!("{x:.3}"));
        facts.push(("Fleiss' kappa".to_owned(), show(a.fleiss_kappa)));
        facts.push(("Krippendorff's alpha".to_owned(), show(a.krippendorff_alpha)));
        if let Some(e) = &a.error_correlation {
            let families = if e.families.is_empty() {
                "none".to_owned()
            } else {
                e.families.iter().map(|f| f.join(" + ")).collect::<Vec<_>>().join("; ")
            };
            facts.push((
                format!("judge families (error correlation >= {} under {})", e.family_threshold, e.method),
                families,
            ));
        }
    }
    facts.extend([("jury".to_owned(), env!("CARGO_PKG_VERSION").to_owned())]);
    if let Some(m) = &manifest {
        facts.insert(0, ("data set".to_owned(), m.dataset.name.clone()));
        facts.push(("total time".to_owned(), format!("{:.0} s", m.total_seconds)));
        if let Some(a) = &m.adaptive {
            facts.extend(adaptive_facts(a));
        }
    }
    let consistency = by_order.as_deref().map(position_consistency);
    let shown = shown_judges(j);
    let judges_note = (shown.len() < j.n_judges()).then(|| {
        format!(
            "The {} judges with the most judgments of {} (in the table, the accuracy chart, the agreement map and \
             the Dawid-Skene table).",
            shown.len(),
            j.n_judges()
        )
    });
    let entries = judge_entries(metrics);
    let hits = labels.map(|l| judge_hits(j, l));
    let mut judges = judge_rows(j, &shown, hits.as_deref(), &entries, manifest.as_ref())?;
    if let Some(c) = &consistency {
        for row in &mut judges {
            row.consistency = c.get(&row.name).map(|s| format!("{s:.3}"));
        }
    }
    let both_orders = consistency.is_some();
    let judged_here = manifest.as_ref().is_some_and(|m| !m.judges.is_empty());
    let methods = method_rows(metrics);
    let accuracy_svg = accuracy_chart(j, &shown, labels.zip(hits.as_deref()), &entries, metrics)?;
    let kappa_svg = if shown.len() >= 2 { Some(kappa_chart(j, &shown)?) } else { None };
    let mut calibration = Vec::new();
    if let Some((l, predictions)) = labels.zip(predictions) {
        for p in &predictions.methods {
            let bins = jury_metrics::reliability_bins(&p.posteriors, l, 10);
            let points: Vec<(f64, f64, usize)> = bins.iter().map(|b| (b.confidence, b.accuracy, b.count)).collect();
            let entry = metrics.methods.0.iter().find(|(m, _)| *m == p.method).map(|(_, e)| e);
            calibration.push(Calibration {
                method: p.method.clone(),
                svg: plots::reliability(&points, 1.0 / j.n_classes() as f64)?,
                ece: entry.and_then(|e| e.ece()).map(f4),
                brier: entry.and_then(|e| e.brier()).map(f4),
            });
        }
    }
    let (rates, rates_svg) = match &metrics.calibration {
        Some(c) => {
            // The reference labels' own rate (outside the calibration set), drawn as a line.
            let reference = labels.and_then(|l| {
                let known: Vec<usize> = l.as_slice().iter().flatten().copied().collect();
                (!known.is_empty()).then(|| known.iter().filter(|&&k| k == 1).count() as f64 / known.len() as f64)
            });
            let rows: Vec<plots::PairPoint> = c
                .rates
                .0
                .iter()
                .map(|(name, r)| plots::PairPoint {
                    label: name,
                    estimate: Some((r.estimate, r.low, r.high)),
                    observed: None,
                    human: reference,
                })
                .collect();
            let table = c
                .rates
                .0
                .iter()
                .map(|(name, r)| (name.clone(), f4(r.estimate), format!("{} - {}", f4(r.low), f4(r.high))))
                .collect();
            (table, Some(plots::intervals(&rows, "positive-class rate, 95% interval")?))
        }
        None => (Vec::new(), None),
    };
    let verdict_accuracy = metrics.calibration.as_ref().map_or_else(Vec::new, |c| {
        c.accuracy
            .0
            .iter()
            .map(|(name, r)| {
                // The label-free method by its own name, as the methods' table has it.
                let name = if name == "recommended" { c.label_free_method.clone() } else { name.clone() };
                (name, f4(r.estimate), format!("{} - {}", f4(r.low), f4(r.high)))
            })
            .collect()
    });
    let names: HashSet<&str> = shown.iter().map(|&k| j.judge_names()[k].as_str()).collect();
    let confusion = confusion_rows(metrics, &names);
    let slopes = slope_plots(metrics, &entries)?;
    let (hardest, all_wrong) = hardest(j, labels, inputs.contexts);
    let (category_methods, categories) = match (labels.zip(predictions), categories) {
        (Some((l, predictions)), Some(categories)) => by_category(j, l, categories, predictions),
        _ => (Vec::new(), Vec::new()),
    };
    Ok(Page {
        title,
        facts,
        judges,
        judges_note,
        judged_here,
        both_orders,
        methods,
        accuracy_svg,
        kappa_svg,
        calibration,
        rates,
        rates_svg,
        positive_word: metrics.calibration.as_ref().and_then(|c| c.positive_word.clone()),
        verdict_accuracy,
        confusion,
        slopes,
        hardest,
        all_wrong,
        category_methods,
        categories,
    })
}

/// Each judge's hits and labeled count (hard vote against the label).
fn judge_hits(j: &Judgments, labels: &Labels) -> Vec<(usize, usize)> {
    let mut out = vec![(0usize, 0usize); j.n_judges()];
    for (n, k, p) in j.entries() {
        if let Some(l) = labels.get(n) {
            out[k].0 += usize::from(jury_core::argmax(p) == l);
            out[k].1 += 1;
        }
    }
    out
}

const Z95: f64 = 1.959963984540054;

/// Judges the per-judge views show at most: a crowd of 200,000 judges gets a page of
/// the ones with the most judgments, not a 200,000-row table and a 200,000-square map.
const MAX_JUDGES_SHOWN: usize = 30;

/// The judges the per-judge views show, in the judgments' order: all of them, or the
/// [`MAX_JUDGES_SHOWN`] with the most judgments (the earlier judge on ties).
fn shown_judges(j: &Judgments) -> Vec<usize> {
    if j.n_judges() <= MAX_JUDGES_SHOWN {
        return (0..j.n_judges()).collect();
    }
    let mut count = vec![0usize; j.n_judges()];
    for (_, k, _) in j.entries() {
        count[k] += 1;
    }
    let mut order: Vec<usize> = (0..j.n_judges()).collect();
    order.sort_by_key(|&k| (std::cmp::Reverse(count[k]), k));
    order.truncate(MAX_JUDGES_SHOWN);
    order.sort_unstable();
    order
}

/// metrics.json's judge entries by name.
fn judge_entries(metrics: &Metrics) -> HashMap<&str, &JudgeMetrics> {
    metrics.judges.0.iter().map(|(n, e)| (n.as_str(), e)).collect()
}

fn judge_rows(
    j: &Judgments,
    shown: &[usize],
    hits: Option<&[(usize, usize)]>,
    entries: &HashMap<&str, &JudgeMetrics>,
    manifest: Option<&Manifest>,
) -> Result<Vec<JudgeRow>, ReportError> {
    let mut positive = vec![(0.0f64, 0usize); j.n_judges()];
    for (_, k, p) in j.entries() {
        positive[k].0 += p[p.len() - 1];
        positive[k].1 += 1;
    }
    shown
        .iter()
        .map(|&k| {
            let name = &j.judge_names()[k];
            let entry = entries
                .get(name.as_str())
                .ok_or_else(|| ReportError::Mismatch(format!("judge `{name}` is not in metrics.json")))?;
            let interval = hits.and_then(|h| jury_metrics::wilson_interval(h[k].0, h[k].1, Z95));
            Ok(JudgeRow {
                name: name.clone(),
                accuracy: entry.accuracy.map(f4),
                interval: interval.map(|(lo, hi)| format!("{lo:.3} - {hi:.3}")),
                coverage: format!("{:.3}", entry.coverage),
                mean_positive: format!("{:.3}", positive[k].0 / positive[k].1.max(1) as f64),
                mass: manifest.and_then(|m| m.mean_captured_mass.get(name)?.as_ref()).map(|m| format!("{m:.3}")),
                exact: manifest
                    .and_then(|m| m.judges.iter().find(|m| m.name == *name)?.exact_share)
                    .map(|e| format!("{e:.3}")),
                consistency: None,
            })
        })
        .collect()
}

fn method_rows(metrics: &Metrics) -> Vec<MethodRow> {
    metrics
        .methods
        .0
        .iter()
        .map(|(name, m)| {
            let fit = |i: usize, c: bool| format!("{i} iterations, {}", if c { "converged" } else { "not converged" });
            let notes = match (m.neural(), m.diagnostics()) {
                (Some(n), _) => format!("{} seeds, +- {:.4}, outside each seed's dev set", n.seeds.len(), spread(n)),
                (_, Some(DiagnosticMetrics::DawidSkene { iterations, converged, .. }))
                | (_, Some(DiagnosticMetrics::Skills { iterations, converged, .. })) => fit(*iterations, *converged),
                (_, Some(DiagnosticMetrics::Counting { ties, .. })) => format!("{ties} ties"),
                (_, Some(DiagnosticMetrics::Calibrated { calibration_labels })) => {
                    format!("fitted on {calibration_labels} calibration labels, scored outside them")
                }
                (None, None) => String::new(),
            };
            MethodRow {
                name: name.clone(),
                accuracy: m.accuracy().map(f4),
                brier: m.brier().map(f4),
                ece: m.ece().map(f4),
                notes,
            }
        })
        .collect()
}

/// A context-dependent method's spread over seeds (0 where undefined).
fn spread(n: &jury_io::NeuralMetrics) -> f64 {
    if n.std.is_finite() { n.std } else { 0.0 }
}

fn accuracy_chart(
    j: &Judgments,
    shown: &[usize],
    labeled: Option<(&Labels, &[(usize, usize)])>,
    entries: &HashMap<&str, &JudgeMetrics>,
    metrics: &Metrics,
) -> Result<Option<String>, ReportError> {
    let Some((l, hits)) = labeled else { return Ok(None) };
    let mut bars: Vec<plots::Bar> = Vec::new();
    for &k in shown {
        let name = &j.judge_names()[k];
        let Some(acc) = entries.get(name.as_str()).and_then(|e| e.accuracy) else {
            continue;
        };
        bars.push(plots::Bar {
            label: name,
            value: acc,
            interval: jury_metrics::wilson_interval(hits[k].0, hits[k].1, Z95),
            method: false,
        });
    }
    let n_labeled = l.n_labeled();
    for (name, m) in &metrics.methods.0 {
        let Some(acc) = m.accuracy() else { continue };
        // Context-free methods score every labeled example; a context-dependent one
        // reports a mean over seeds with its spread.
        let interval = match m.neural().map(|n| n.std).filter(|s| s.is_finite()) {
            Some(s) => Some(((acc - 2.0 * s).max(0.0), (acc + 2.0 * s).min(1.0))),
            None => jury_metrics::wilson_interval((acc * n_labeled as f64).round() as usize, n_labeled, Z95),
        };
        bars.push(plots::Bar { label: name, value: acc, interval, method: true });
    }
    if bars.is_empty() {
        return Ok(None);
    }
    Ok(Some(plots::accuracy_bars(&bars)?))
}

/// Cohen's kappa between the shown judges, their hard votes kept as one `u32` per
/// example (memory: shown judges x examples x 4 bytes; class `n_classes` = no vote), each
/// pair counted once into a table with a row and a column for "no vote".
fn kappa_chart(j: &Judgments, shown: &[usize]) -> Result<String, ReportError> {
    let c = j.n_classes();
    let mut position = vec![None; j.n_judges()];
    for (i, &k) in shown.iter().enumerate() {
        position[k] = Some(i);
    }
    let mut votes = vec![vec![c as u32; j.n_examples()]; shown.len()];
    for (n, k, p) in j.entries() {
        if let Some(i) = position[k] {
            votes[i][n] = jury_core::argmax(p) as u32;
        }
    }
    let mut kappa = vec![vec![None; shown.len()]; shown.len()];
    let mut table = vec![0usize; (c + 1) * (c + 1)];
    let mut both = vec![0usize; c * c];
    for a in 0..shown.len() {
        for b in a..shown.len() {
            table.iter_mut().for_each(|t| *t = 0);
            for (&x, &y) in votes[a].iter().zip(&votes[b]) {
                table[x as usize * (c + 1) + y as usize] += 1;
            }
            for x in 0..c {
                both[x * c..(x + 1) * c].copy_from_slice(&table[x * (c + 1)..x * (c + 1) + c]);
            }
            let k = jury_metrics::cohen_kappa_table(&both, c);
            (kappa[a][b], kappa[b][a]) = (k, k);
        }
    }
    let names: Vec<String> = shown.iter().map(|&k| j.judge_names()[k].clone()).collect();
    plots::kappa_heatmap(&names, &kappa)
}

fn confusion_rows(metrics: &Metrics, shown: &HashSet<&str>) -> Vec<ConfusionRow> {
    let Some(confusion) = metrics.methods.0.iter().find_map(|(_, m)| match m.diagnostics() {
        Some(DiagnosticMetrics::DawidSkene { confusion, .. }) => Some(confusion),
        _ => None,
    }) else {
        return Vec::new();
    };
    confusion
        .0
        .iter()
        .filter(|(judge, _)| shown.contains(judge.as_str()))
        .map(|(judge, rows)| ConfusionRow {
            judge: judge.clone(),
            cells: rows.iter().enumerate().map(|(t, r)| f4(r.get(t).copied().unwrap_or(f64::NAN))).collect(),
        })
        .collect()
}

fn slope_plots(metrics: &Metrics, entries: &HashMap<&str, &JudgeMetrics>) -> Result<Vec<SlopePlot>, ReportError> {
    let mut out = Vec::new();
    for (name, m) in &metrics.methods.0 {
        let against_accuracy = |values: &mut dyn Iterator<Item = (&String, f64)>| -> Vec<(f64, f64)> {
            values
                .filter_map(|(judge, s)| entries.get(judge.as_str()).and_then(|e| e.accuracy).map(|a| (a, s)))
                .collect()
        };
        let (what, points, pcc) =
            if let Some((slopes, pcc)) = m.neural().and_then(|n| Some((n.slopes.as_ref()?, n.slope_accuracy_pcc))) {
                let points = against_accuracy(&mut slopes.0.iter().map(|(j, s)| (j, *s)));
                ("learned slope".to_owned(), points, pcc.flatten())
            } else if let Some(DiagnosticMetrics::Skills { skill, skills, .. }) = m.diagnostics() {
                let points = against_accuracy(&mut skills.0.iter().filter_map(|(j, s)| s.map(|s| (j, s))));
                let (xs, ys): (Vec<f64>, Vec<f64>) = points.iter().copied().unzip();
                (skill.clone(), points, jury_metrics::pearson(&xs, &ys))
            } else {
                continue;
            };
        if points.is_empty() {
            continue;
        }
        out.push(SlopePlot {
            method: name.clone(),
            svg: plots::slopes(&points, &what)?,
            what,
            pcc: pcc.map(|r| format!("{r:.3}")),
        });
    }
    Ok(out)
}

/// The labeled examples every judge that voted got wrong (at least one vote), first
/// `HARDEST` in example order with their context text, and how many there are.
fn hardest(j: &Judgments, labels: Option<&Labels>, contexts: Option<&HashMap<String, String>>) -> (Vec<Hard>, usize) {
    let Some(l) = labels else { return (Vec::new(), 0) };
    let mut out = Vec::new();
    let mut count = 0;
    for n in 0..j.n_examples() {
        let Some(label) = l.get(n) else { continue };
        let mut votes = j.row(n).map(|(_, p)| jury_core::argmax(p)).peekable();
        if votes.peek().is_none() || !votes.all(|v| v != label) {
            continue;
        }
        count += 1;
        if out.len() < HARDEST {
            let id = j.example_ids()[n].clone();
            let text = contexts.and_then(|c| c.get(&id)).cloned();
            out.push(Hard { id, label, text });
        }
    }
    (out, count)
}
