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
    // Every number of adaptive.json is finite, so it reads back: with no judgment the
    // shares of calls are 0 / 0, and costs whose full sum overflows make every share of
    // cost inf / inf. A replay's calls per judge are at most the full jury's, so its cost
    // is at most `full_cost` and finite with it.
    if j.n_present() == 0 {
        return Err(StudyError::Option {
            flag: "--judgments",
            reason: "holds no judgment (every probability is empty): there is nothing to replay".to_owned(),
        });
    }
    if !full_cost.is_finite() {
        return Err(StudyError::Option {
            flag: "--cost",
            reason: format!(
                "is too large: the full jury's {} calls times their judges' costs sum past the largest number \
                 (about 1.8e308); give the costs on a smaller scale",
                j.n_present()
            ),
        });
    }
    let replay = |cfg: &AdaptiveConfig| -> Result<AdaptiveReplay, StudyError> {
        Ok(replay_adaptive(j, cfg, JudgeOrder::ByCost(costs.clone()))?)
    };
    let full = s.chosen.stopping_model.labels(j, s.chosen.ds)?;
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
        method: s.chosen.stopping_model.method_name(j.n_classes(), j.n_judges()).to_owned(),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// 60 examples, truth `n % 2`, three judges each wrong on one example in seven, and
    /// `silent`, a judge with no answer at all.
    fn jury() -> Judgments {
        let mut b = jury_core::JudgmentsBuilder::new(2).unwrap();
        b.judge("silent");
        for n in 0..60 {
            for k in 0..3 {
                let right = (n + 2 * k) % 7 != 0;
                let p = if (n % 2 == 0) == right { 0.85 } else { 0.2 };
                b.push_binary(&format!("e{n}"), &format!("j{k}"), Some(p)).unwrap();
            }
        }
        b.build()
    }

    fn settings(costs: Option<Vec<f64>>) -> AdaptiveSettings {
        AdaptiveSettings { chosen: AdaptiveConfig::default(), targets: vec![0.9, 0.99], warmups: vec![0.1], costs }
    }

    /// What adaptive_study returns, adaptive.json holds and gives back, however large
    /// the costs; costs whose sum is past the largest number, or a file with no
    /// judgment, are refused instead of written as nulls.
    #[test]
    fn the_study_reads_back_or_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let j = jury();
        let mut empty = jury_core::JudgmentsBuilder::new(2).unwrap();
        empty.push_binary("e0", "j0", None).unwrap();
        empty.push_binary("e1", "j1", None).unwrap();
        let empty = empty.build();
        for (j, costs, refused) in [
            (&j, None, None),
            (&j, Some(vec![1.0, 1e300, 2.0, 3.0]), None),
            (&j, Some(vec![1.0, 1e308, 1e308, 1.0]), Some("--cost is too large: the full jury's 180 calls")),
            (&empty, None, Some("--judgments holds no judgment")),
        ] {
            let study = adaptive_study(j, None, &settings(costs.clone()));
            if let Ok(study) = &study {
                study.write(dir.path()).unwrap();
                assert_eq!(&AdaptiveStudy::read(dir.path()).unwrap(), study, "{costs:?}");
            }
            match (study, refused) {
                (Ok(_), None) => {}
                (Err(e), Some(says)) => assert!(e.to_string().starts_with(says), "{e}"),
                (r, _) => panic!("{costs:?}: {r:?}"),
            }
        }
    }
}
