//! `jury simulate adaptive`: the adaptive jury's stopping rule replayed on a judgments
//! file recorded with every judge, at one chosen setting and over a grid, scored against
//! labels where they exist (labels only score; the rule never reads them). Its file is
//! adaptive.json, typed here and serialised nowhere else.

use std::fmt::Write as _;
use std::path::Path;

use jury_aggregate::{AdaptiveConfig, AdaptiveReplay, JudgeOrder, replay_adaptive};
use jury_core::{Judgments, Labels};
use jury_io::write_atomic;
use jury_metrics::accuracy;
use serde::Serialize;

use crate::{Named, StudyError};

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

/// adaptive.json.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AdaptiveStudy<'a> {
    /// Accuracy of the adaptive labels at the chosen setting (`None` without labels).
    pub accuracy: Option<f64>,
    /// Accuracy of the same method on every judgment.
    pub full_accuracy: Option<f64>,
    /// The method whose posterior stops examples and which labels both (`gauss`, `ds`).
    pub method: &'static str,
    /// Judge calls at the chosen setting, the warm-up's included.
    pub calls: usize,
    pub full_calls: usize,
    pub target: f64,
    pub warmup: f64,
    pub min_judges: usize,
    pub seed: u64,
    pub calls_per_judge: Named<'a, usize>,
    /// Each judge's cost per call (1 where none was given).
    pub cost_per_call: Named<'a, f64>,
    /// The calls at the chosen setting weighed by their judges' costs.
    pub cost: f64,
    pub full_cost: f64,
    /// Every (target, warm-up) of the grid.
    pub curve: Vec<AdaptivePoint>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AdaptivePoint {
    pub target: f64,
    pub warmup: f64,
    pub accuracy: Option<f64>,
    pub calls: usize,
    /// calls / full_calls.
    pub share_of_calls: f64,
    pub cost: f64,
    /// cost / full_cost.
    pub share_of_cost: f64,
}

/// Replays the rule at the chosen setting and over the grid.
pub fn adaptive_study<'a>(
    j: &'a Judgments,
    labels: Option<&Labels>,
    s: &AdaptiveSettings,
) -> Result<AdaptiveStudy<'a>, StudyError> {
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
    Ok(AdaptiveStudy {
        accuracy: score(&chosen.labels),
        full_accuracy: score(&full),
        method: s.chosen.model.method_name(j.n_classes(), j.n_judges()),
        calls: chosen.calls,
        full_calls: chosen.full_calls,
        target: s.chosen.target,
        warmup: s.chosen.warmup,
        min_judges: s.chosen.min_judges,
        seed: s.chosen.seed,
        calls_per_judge: Named(
            j.judge_names().iter().map(String::as_str).zip(chosen.calls_per_judge.iter().copied()).collect(),
        ),
        cost_per_call: Named(j.judge_names().iter().map(String::as_str).zip(costs.iter().copied()).collect()),
        cost: spent(&chosen.calls_per_judge),
        full_cost,
        curve,
    })
}

impl AdaptiveStudy<'_> {
    pub const FILE: &'static str = jury_io::layout::ADAPTIVE_REPLAY;

    /// Writes adaptive.json into `dir`, atomically.
    pub fn write(&self, dir: &Path) -> Result<(), StudyError> {
        let text = serde_json::to_string_pretty(self)?;
        write_atomic(&dir.join(Self::FILE), text.as_bytes())?;
        Ok(())
    }

    /// The terminal table: the chosen setting, then the grid.
    pub fn table(&self) -> String {
        let pct = |x: Option<f64>| x.map_or("-".to_owned(), |x| format!("{:.2}", 100.0 * x));
        let mut out = format!(
            "full jury ({}): accuracy {} with {} calls (cost {})\nadaptive (target {}, warm-up {}, at least {} judges): accuracy {} with {} calls ({:.1}%), cost {} ({:.1}%)\n\ntarget  warm-up  accuracy  calls  share  cost share\n",
            self.method,
            pct(self.full_accuracy),
            self.full_calls,
            self.full_cost,
            self.target,
            self.warmup,
            self.min_judges,
            pct(self.accuracy),
            self.calls,
            100.0 * self.calls as f64 / self.full_calls.max(1) as f64,
            self.cost,
            100.0 * self.cost / self.full_cost.max(f64::MIN_POSITIVE)
        );
        for p in &self.curve {
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
}
