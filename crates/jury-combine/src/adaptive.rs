//! `jury simulate adaptive`: the adaptive jury's stopping rule replayed on a judgments
//! file recorded with every judge, at one chosen setting and over a grid, scored against
//! labels where they exist (labels only score; the rule never reads them). Its file is
//! adaptive.json, whose record is `jury_io::AdaptiveStudy`.

use std::fmt::Write as _;

use jury_aggregate::{AdaptiveConfig, AdaptiveReplay, JudgeOrder, replay_adaptive};
use jury_core::{Judgments, Labels};
use jury_io::{AdaptivePoint, AdaptiveStudy, Named};
use jury_metrics::accuracy;

use crate::StudyError;

/// The settings replayed: the chosen one and the grid of the curve.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveSettings {
    pub chosen: AdaptiveConfig,
    pub targets: Vec<f64>,
    pub warmups: Vec<f64>,
    /// One cost per judge, in the judgments' judge order (a live run's `cost:`): the
    /// order asks the cheaper first, and the curve weighs each call by its judge's cost.
    /// `None`: every judge costs 1, and the order follows the warm-up's skill.
    pub costs: Option<Vec<f64>>,
}

/// Replays the rule at the chosen setting and over the grid.
pub fn adaptive_study(
    j: &Judgments,
    labels: Option<&Labels>,
    s: &AdaptiveSettings,
) -> Result<AdaptiveStudy, StudyError> {
    let score = |predicted: &[usize]| labels.and_then(|l| accuracy(predicted, l));
    // AdaptivePlan refuses a cost list of the wrong length or with a cost that is not
    // positive.
    let costs = s.costs.clone().unwrap_or_else(|| vec![1.0; j.n_judges()]);
    let spent = |calls_per_judge: &[usize]| calls_per_judge.iter().zip(&costs).map(|(&n, c)| n as f64 * c).sum::<f64>();
    let mut full_per_judge = vec![0; j.n_judges()];
    for (_, judge, _) in j.entries() {
        full_per_judge[judge] += 1;
    }
    let full_cost = spent(&full_per_judge);
    let replay = |cfg: &AdaptiveConfig| -> Result<AdaptiveReplay, StudyError> {
        Ok(replay_adaptive(j, cfg, JudgeOrder::ByCost(costs.clone()))?)
    };
    let full = s.chosen.model.labels(j, s.chosen.ds)?;
    let chosen = replay(&s.chosen)?;
    let mut curve = Vec::new();
    for &target in &s.targets {
        for &warmup in &s.warmups {
            let cfg = AdaptiveConfig { target, warmup, ..s.chosen };
            // The chosen setting is usually on the grid: replayed once.
            let other;
            let r = if cfg == s.chosen {
                &chosen
            } else {
                other = replay(&cfg)?;
                &other
            };
            let cost = spent(&r.calls_per_judge);
            curve.push(AdaptivePoint {
                target,
                warmup,
                accuracy: score(&r.labels),
                calls: r.calls,
                share_of_calls: r.calls as f64 / r.full_calls as f64,
                cost,
                share_of_cost: cost / full_cost.max(f64::MIN_POSITIVE),
            });
        }
    }
    let named =
        |values: &[f64]| -> Named<f64> { Named(j.judge_names().iter().cloned().zip(values.iter().copied()).collect()) };
    Ok(AdaptiveStudy {
        accuracy: score(&chosen.labels),
        full_accuracy: score(&full),
        method: s.chosen.model.method_name(j.n_classes(), j.n_judges()).to_owned(),
        calls: chosen.calls,
        full_calls: chosen.full_calls,
        target: s.chosen.target,
        warmup: s.chosen.warmup,
        min_judges: s.chosen.min_judges,
        seed: s.chosen.seed,
        calls_per_judge: Named(j.judge_names().iter().cloned().zip(chosen.calls_per_judge.iter().copied()).collect()),
        cost_per_call: named(&costs),
        cost: spent(&chosen.calls_per_judge),
        full_cost,
        curve,
    })
}

/// `jury simulate adaptive`'s terminal table: the chosen setting, then the grid.
pub fn adaptive_table(r: &AdaptiveStudy) -> String {
    let pct = |x: Option<f64>| x.map_or("-".to_owned(), |x| format!("{:.2}", 100.0 * x));
    let mut out = format!(
        "full jury ({}): accuracy {} with {} calls (cost {})\nadaptive (target {}, warm-up {}, at least {} judges): accuracy {} with {} calls ({:.1}%), cost {} ({:.1}%)\n\ntarget  warm-up  accuracy  calls  share  cost share\n",
        r.method,
        pct(r.full_accuracy),
        r.full_calls,
        r.full_cost,
        r.target,
        r.warmup,
        r.min_judges,
        pct(r.accuracy),
        r.calls,
        100.0 * r.calls as f64 / r.full_calls.max(1) as f64,
        r.cost,
        100.0 * r.cost / r.full_cost.max(f64::MIN_POSITIVE)
    );
    for p in &r.curve {
        let _ = writeln!(
            out,
            "{:<7} {:<8} {:>8} {:>6} {:>5.1}% {:>10.1}%",
            p.target,
            p.warmup,
            pct(p.accuracy),
            p.calls,
            100.0 * p.share_of_calls,
            100.0 * p.share_of_cost
        );
    }
    out
}
