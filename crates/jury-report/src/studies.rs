//! The pages of `jury winrate` (winrate.json) and `jury rank` (ranking.json): each
//! pair's estimate with its interval against the human rate, and a ranking beside the
//! reference with RBO, MAP and Spearman.

use jury_io::layout;
use std::path::Path;

use serde::Serialize;

use crate::{ReportError, plots};

#[derive(Debug, Serialize)]
pub(crate) struct WinratePage {
    title: String,
    facts: Vec<(String, String)>,
    pairs: Vec<PairRow>,
    chart: Option<String>,
}

#[derive(Debug, Serialize)]
struct PairRow {
    pair: String,
    comparisons: usize,
    human: Option<String>,
    observed: Option<String>,
    estimate: Option<String>,
    interval: Option<String>,
    note: String,
}

fn read<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ReportError> {
    Ok(jury_io::read_json(path)?)
}

fn f3(x: f64) -> String {
    format!("{x:.3}")
}

/// The page of a folder holding `jury winrate`'s winrate.json.
pub(crate) fn winrate(dir: &Path) -> Result<WinratePage, ReportError> {
    let w: jury_winrate::WinRateStudy = read(&dir.join(layout::WINRATE))?;
    crate::check::winrate(&dir.join(layout::WINRATE), &w)?;
    let mut facts = vec![
        ("method".to_owned(), w.method.clone()),
        ("prior".to_owned(), w.prior.clone()),
        ("generator pairs".to_owned(), w.n_pairs.to_string()),
        ("jury".to_owned(), env!("CARGO_PKG_VERSION").to_owned()),
        ("interval level".to_owned(), format!("{}", w.level)),
    ];
    if let (Some(e), Some(o)) = (w.mean_abs_error, w.observed_mean_abs_error) {
        facts.push(("mean abs error (observed rate's)".to_owned(), format!("{e:.4} ({o:.4})")));
    }
    let pairs: Vec<PairRow> = w
        .pairs
        .iter()
        .map(|p| PairRow {
            pair: format!("{} over {}", p.generator_1, p.generator_0),
            comparisons: p.n_comparisons,
            human: p.human_win_rate.map(f3),
            observed: p.observed.map(f3),
            estimate: p.estimate.map(f3),
            interval: p.interval.map(|[lo, hi]| format!("{lo:.3} - {hi:.3}")),
            note: p.unidentifiable.clone().unwrap_or_default(),
        })
        .collect();
    let rows: Vec<plots::PairPoint> = w
        .pairs
        .iter()
        .zip(&pairs)
        .map(|(p, r)| plots::PairPoint {
            label: &r.pair,
            estimate: p.estimate.zip(p.interval).map(|(e, [lo, hi])| (e, lo, hi)),
            observed: p.observed,
            human: p.human_win_rate,
        })
        .collect();
    let chart = if rows.iter().any(|r| r.estimate.is_some() || r.observed.is_some()) {
        Some(plots::win_rates(&rows)?)
    } else {
        None
    };
    Ok(WinratePage { title: format!("win rates ({})", w.method), facts, pairs, chart })
}

#[derive(Debug, Serialize)]
pub(crate) struct RankPage {
    title: String,
    facts: Vec<(String, String)>,
    rows: Vec<RankRow>,
    reference: Option<ReferenceView>,
}

#[derive(Debug, Serialize)]
struct RankRow {
    rank: usize,
    model: String,
    score: Option<String>,
    reference_rank: Option<usize>,
    reference_score: Option<String>,
}

#[derive(Debug, Serialize)]
struct ReferenceView {
    name: String,
    scores: Vec<(String, String)>,
    undetermined: Option<String>,
}

/// The page of a folder holding `jury rank`'s ranking.json.
pub(crate) fn ranking(dir: &Path) -> Result<RankPage, ReportError> {
    let r: jury_rank::RankReport = read(&dir.join(layout::RANKING))?;
    crate::check::ranking(&dir.join(layout::RANKING), &r)?;
    let mut facts = vec![
        ("method".to_owned(), r.method.name()),
        ("evaluation".to_owned(), r.eval.clone()),
        ("models".to_owned(), r.n_models.to_string()),
        ("prompts".to_owned(), r.n_prompts.to_string()),
        ("jury".to_owned(), env!("CARGO_PKG_VERSION").to_owned()),
    ];
    facts.push(("judge comparisons".to_owned(), r.evaluations.to_string()));
    let reference_rank = |model: &str| {
        r.reference
            .as_ref()
            .and_then(|f| f.ranking.iter().position(|e| e.model == model).map(|i| (i + 1, Some(f.ranking[i].score))))
    };
    let rows = r
        .ranking
        .iter()
        .map(|e| {
            let reference = reference_rank(&e.model);
            RankRow {
                rank: e.rank,
                model: e.model.clone(),
                score: e.score.map(f3),
                reference_rank: reference.map(|(i, _)| i),
                reference_score: reference.and_then(|(_, s)| s.map(f3)),
            }
        })
        .collect();
    let reference = r.reference.as_ref().map(|f| {
        let mut scores = Vec::new();
        if let Some(v) = f.rbo {
            scores.push(("RBO".to_owned(), f3(v)));
        }
        if let Some(v) = f.map_at_k {
            scores.push((format!("MAP@{}", f.k), f3(v)));
        }
        if let Some(v) = f.spearman {
            scores.push(("Spearman".to_owned(), f3(v)));
        }
        ReferenceView { name: f.name.clone(), scores, undetermined: f.undetermined.clone() }
    });
    Ok(RankPage { title: format!("ranking ({})", r.method.name()), facts, rows, reference })
}

#[derive(Debug, Serialize)]
pub(crate) struct AdaptivePage {
    title: String,
    facts: Vec<(String, String)>,
    /// Name, calls, share of its full-jury calls, cost per call.
    judges: Vec<(String, usize, String, f64)>,
    curve: Vec<AdaptiveRow>,
    chart: Option<String>,
    /// Accuracy against the share of the full jury's cost, where the judges' costs differ.
    cost_chart: Option<String>,
}

#[derive(Debug, Serialize)]
struct AdaptiveRow {
    target: f64,
    warmup: f64,
    accuracy: Option<String>,
    calls: usize,
    share: String,
    cost_share: String,
    chosen: bool,
}

fn pct(x: f64) -> String {
    format!("{:.2}", 100.0 * x)
}

/// The page of a folder holding `jury simulate adaptive`'s adaptive.json: the chosen
/// setting, calls per judge, and accuracy against the share of calls over the grid
/// (charted when labels scored it).
pub(crate) fn adaptive(dir: &Path) -> Result<AdaptivePage, ReportError> {
    let a = jury_io::AdaptiveStudy::read(dir)?;
    crate::check::adaptive(&dir.join(layout::ADAPTIVE_REPLAY), &a)?;
    let share = |calls: usize| calls as f64 / a.full_calls.max(1) as f64;
    let mut facts = vec![
        ("model".to_owned(), a.method.clone()),
        ("target".to_owned(), a.target.to_string()),
        ("warm-up".to_owned(), a.warmup.to_string()),
        ("judges before a stop".to_owned(), a.min_judges.to_string()),
        ("seed".to_owned(), a.seed.to_string()),
        ("judge calls".to_owned(), format!("{} of {} ({:.1}%)", a.calls, a.full_calls, 100.0 * share(a.calls))),
        (
            "cost".to_owned(),
            format!("{} of {} ({:.1}%)", a.cost, a.full_cost, 100.0 * a.cost / a.full_cost.max(f64::MIN_POSITIVE)),
        ),
        ("jury".to_owned(), env!("CARGO_PKG_VERSION").to_owned()),
    ];
    if let (Some(acc), Some(full)) = (a.accuracy, a.full_accuracy) {
        facts.push(("accuracy (full jury's)".to_owned(), format!("{} ({})", pct(acc), pct(full))));
    }
    let mut judges: Vec<(String, usize, String, f64)> = a
        .calls_per_judge
        .0
        .iter()
        .map(|&(ref name, n)| {
            let of = a.full_calls / a.calls_per_judge.0.len().max(1);
            let cost = a.cost_per_call.0.iter().find(|(k, _)| k == name).map_or(1.0, |&(_, c)| c);
            (name.clone(), n, format!("{:.1}%", 100.0 * n as f64 / of.max(1) as f64), cost)
        })
        .collect();
    // By name, whatever the file's judge order.
    judges.sort_by(|x, y| x.0.cmp(&y.0));
    let is_chosen = |p: &jury_io::AdaptivePoint| p.target == a.target && p.warmup == a.warmup;
    let curve = a
        .curve
        .iter()
        .map(|p| AdaptiveRow {
            target: p.target,
            warmup: p.warmup,
            accuracy: p.accuracy.map(pct),
            calls: p.calls,
            share: format!("{:.1}%", 100.0 * p.share_of_calls),
            cost_share: format!("{:.1}%", 100.0 * p.share_of_cost),
            chosen: is_chosen(p),
        })
        .collect();
    let points = |share: fn(&jury_io::AdaptivePoint) -> f64| -> Vec<plots::CostPoint> {
        a.curve
            .iter()
            .filter_map(|p| {
                p.accuracy.map(|acc| plots::CostPoint {
                    share: share(p),
                    accuracy: acc,
                    label: format!("{} / {}", p.target, p.warmup),
                    chosen: is_chosen(p),
                })
            })
            .collect()
    };
    let (by_calls, by_cost) = (points(|p| p.share_of_calls), points(|p| p.share_of_cost));
    let chart = match (by_calls.is_empty(), a.full_accuracy) {
        (false, Some(full)) => Some(plots::accuracy_vs_share(&by_calls, full, "share of the full jury's judge calls")?),
        _ => None,
    };
    let costs = &a.cost_per_call.0;
    let costs_differ = costs.iter().any(|&(_, c)| Some(c) != costs.first().map(|&(_, c)| c));
    let cost_chart = match (by_cost.is_empty() || !costs_differ, a.full_accuracy) {
        (false, Some(full)) => Some(plots::accuracy_vs_share(&by_cost, full, "share of the full jury's cost")?),
        _ => None,
    };
    Ok(AdaptivePage { title: "adaptive jury (replay)".to_owned(), facts, judges, curve, chart, cost_chart })
}

/// calibration.html's contents.
#[derive(Debug, Serialize)]
pub(crate) struct CalibrationPage {
    title: String,
    facts: Vec<(String, String)>,
    trials: usize,
    recommended: String,
    true_rate: String,
    methods: Vec<String>,
    estimators: Vec<String>,
    accuracy: Vec<CalibrationRow>,
    coverage: Vec<CalibrationRow>,
    /// The methods whose accuracy the labels estimate, and per budget each estimate's
    /// coverage of the accuracy on the rest (none in files written before it).
    estimated: Vec<String>,
    accuracy_coverage: Vec<CalibrationRow>,
    chart: String,
}

#[derive(Debug, Serialize)]
struct CalibrationRow {
    budget: usize,
    sampling: String,
    cells: Vec<String>,
}

pub(crate) fn calibration(dir: &Path) -> Result<CalibrationPage, ReportError> {
    let r = jury_io::CalibrationReplay::read(dir)?;
    let first = r.budgets.first();
    let methods: Vec<String> = first.map(|b| b.methods.0.iter().map(|(m, _)| m.clone()).collect()).unwrap_or_default();
    let estimators: Vec<String> =
        first.map(|b| b.estimators.0.iter().map(|(e, _)| e.clone()).collect()).unwrap_or_default();
    let row = |b: &jury_io::ReplayBudget, cells: Vec<String>| CalibrationRow {
        budget: b.budget,
        sampling: b.sampling.clone(),
        cells,
    };
    let accuracy = r
        .budgets
        .iter()
        .map(|b| {
            row(
                b,
                b.methods
                    .0
                    .iter()
                    .map(|(_, a)| format!("{} ({})", pct(a.mean_accuracy), pct(a.p10_accuracy)))
                    .collect(),
            )
        })
        .collect();
    let covered = |c: &jury_io::ReplayCoverage| {
        format!("{:.1}%, width {:.3}, error {:+.3}", 100.0 * c.coverage, c.mean_width, c.mean_error)
    };
    let coverage = r.budgets.iter().map(|b| row(b, b.estimators.0.iter().map(|(_, c)| covered(c)).collect())).collect();
    let estimated: Vec<String> =
        first.map(|b| b.accuracy_estimates.0.iter().map(|(m, _)| m.clone()).collect()).unwrap_or_default();
    let accuracy_coverage = if estimated.is_empty() {
        Vec::new()
    } else {
        r.budgets.iter().map(|b| row(b, b.accuracy_estimates.0.iter().map(|(_, c)| covered(c)).collect())).collect()
    };
    // The chart: each estimator's mean interval around its mean estimate, per budget and
    // sampling, with the true rate marked: an estimator that reads high shows it.
    let labels: Vec<String> = r
        .budgets
        .iter()
        .flat_map(|b| b.estimators.0.iter().map(move |(e, _)| format!("{} {} {e}", b.budget, b.sampling)))
        .collect();
    let truth = r.jury.true_rate;
    let rows: Vec<crate::plots::PairPoint> = r
        .budgets
        .iter()
        .flat_map(|b| b.estimators.0.iter())
        .zip(&labels)
        .map(|((_, c), label)| {
            let mean = truth + c.mean_error;
            crate::plots::PairPoint {
                label,
                estimate: Some((mean, (mean - c.mean_width / 2.0).max(0.0), (mean + c.mean_width / 2.0).min(1.0))),
                observed: None,
                human: Some(truth),
            }
        })
        .collect();
    let chart =
        crate::plots::intervals(&rows, "mean estimate and mean interval width; the black tick is the true rate")?;
    Ok(CalibrationPage {
        title: "calibration labels replayed".to_owned(),
        facts: vec![
            ("examples".to_owned(), examples_replayed(&r.jury)),
            ("judges".to_owned(), r.jury.n_judges.to_string()),
            ("label-free recommended method".to_owned(), r.jury.recommended_method.clone()),
            ("calibrated method".to_owned(), calibrated_method(&r)),
            ("draws the balance check flagged".to_owned(), flagged(&r)),
            ("seed".to_owned(), r.jury.seed.to_string()),
            ("jury".to_owned(), env!("CARGO_PKG_VERSION").to_owned()),
        ],
        trials: first.map_or(0, |b| b.trials),
        recommended: r.jury.recommended_method.clone(),
        true_rate: format!("{:.4}", truth),
        methods,
        estimators,
        accuracy,
        coverage,
        estimated,
        accuracy_coverage,
        chart,
    })
}

/// How many draws the balance check of metrics.json's `calibration.balance` reported as
/// not drawn as stated: each was a true draw, so these are its false alarms.
fn flagged(r: &jury_io::CalibrationReplay) -> String {
    let flagged: usize = r.budgets.iter().map(|b| b.unbalanced).sum();
    let draws: usize = r.budgets.iter().map(|b| b.trials).sum();
    format!("{flagged} of {draws} (every draw is a true one: these are false alarms)")
}

/// The examples a replay drew from, and those it left out for want of a label.
fn examples_replayed(j: &jury_io::ReplayJury) -> String {
    match j.unlabeled_left_out {
        0 => j.n_examples.to_string(),
        n => format!("{} labeled ({n} judged without a label left out)", j.n_examples),
    }
}

/// What the replay's calibrated method was: the stack fitted on each draw's labels, or the
/// label-free posterior with its classes named by them.
fn calibrated_method(r: &jury_io::CalibrationReplay) -> String {
    if !r.jury.label_free_kept {
        return "the stack, fitted on each draw's labels".to_owned();
    }
    let swapped: usize = r.budgets.iter().map(|b| b.label_free_swapped).sum();
    let draws: usize = r.budgets.iter().map(|b| b.trials).sum();
    format!(
        "the label-free posterior as it is: the judges' votes are as independent given its classes as its model \
         says (each draw's labels name its classes; swapped in {swapped} of {draws} draws)"
    )
}
