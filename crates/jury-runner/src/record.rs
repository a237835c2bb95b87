//! What the judging stage hands on: the examples, each juror's collected results and the
//! judgments matrix. Its own module so that the stages that make it and the output that
//! writes it both depend on it, not on each other.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use jury_core::{Judgments, Labels};
use jury_datasets::Example;
use jury_io::OrderedJudgment;
use jury_judge::Verdict;

use crate::judging::{JudgeResults, JurorInfo};

/// The examples of a run: those drawn from the data set, and those judged (with
/// `both_orders`, each pair again with its answers swapped).
pub struct Examples {
    pub original: Vec<Example>,
    pub judged: Arc<Vec<Example>>,
}

/// One juror's collected results.
pub struct JudgeRecord {
    pub name: String,
    /// One verdict per original example (with both orders, the two orders' mean in the
    /// original orientation).
    pub verdicts: HashMap<String, Verdict>,
    /// What the pass produced, per judged example (both orders apart).
    pub results: JudgeResults,
    pub info: JurorInfo,
    /// The juror's own template (path and SHA-256 of its text), when it has one.
    pub own_template: Option<(std::path::PathBuf, String)>,
}

impl JudgeRecord {
    /// Mean of P(positive) + P(negative) over the verdicts, summed in example-id order
    /// so that the same verdicts always give the same bits.
    pub fn mean_captured_mass(&self) -> f64 {
        let mut by_id: Vec<(&String, f64)> = self.verdicts.iter().map(|(id, v)| (id, v.mass)).collect();
        by_id.sort_unstable_by(|a, b| a.0.cmp(b.0));
        by_id.iter().map(|(_, m)| m).sum::<f64>() / self.verdicts.len().max(1) as f64
    }

    /// Share of verdicts in which every verdict token's probability was observed.
    pub fn exact_share(&self) -> f64 {
        self.verdicts.values().filter(|x| x.exact).count() as f64 / self.verdicts.len().max(1) as f64
    }
}

/// The judging part of a run, ready for aggregation and output.
pub struct JuryRun {
    pub examples: Examples,
    pub judges: Vec<JudgeRecord>,
    /// The binary judgments matrix (examples in file order, judges in config order).
    pub judgments: Judgments,
    /// The labels of the judged examples that have one.
    pub labels: Labels,
    /// The template the experiment names (path and SHA-256 of its text).
    pub template_sha256: String,
    pub seconds: f64,
    /// An adaptive run's decisions and calls.
    pub adaptive: Option<crate::adaptive::AdaptiveRecord>,
}

impl JuryRun {
    pub fn mean_captured_mass(&self) -> BTreeMap<&str, f64> {
        self.judges.iter().map(|j| (j.name.as_str(), j.mean_captured_mass())).collect()
    }

    pub fn exact_shares(&self) -> BTreeMap<&str, f64> {
        self.judges.iter().map(|j| (j.name.as_str(), j.exact_share())).collect()
    }

    /// Each judge's P(positive) per example in the order shown first and swapped, both
    /// in the original orientation, as judgments_by_order.csv holds them (six decimals);
    /// empty unless the examples were judged in both orders.
    pub fn by_order(&self) -> Vec<OrderedJudgment> {
        let mut rows = Vec::new();
        for j in &self.judges {
            let v = &j.results.verdicts;
            for ex in &self.examples.original {
                let sw = format!("{}{}", ex.id, jury_datasets::SWAPPED_SUFFIX);
                for (id, swapped) in [(&ex.id, false), (&sw, true)] {
                    if let Some(x) = v.get(id) {
                        let p = x.y.map(|y| jury_io::six_decimals(if swapped { 1.0 - y } else { y }));
                        rows.push(OrderedJudgment { example_id: ex.id.clone(), judge: j.name.clone(), swapped, p });
                    }
                }
            }
        }
        rows
    }

    /// Each example's category, when the data set gives any.
    pub fn categories(&self) -> Option<HashMap<String, String>> {
        let examples = &self.examples.original;
        examples
            .iter()
            .any(|e| e.category.is_some())
            .then(|| examples.iter().filter_map(|e| Some((e.id.clone(), e.category.clone()?))).collect())
    }
}
