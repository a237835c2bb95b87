//! The adaptive jury in a live run: every judge answers a warm-up share of the examples
//! (drawn by seed), then the other examples ask the judges one at a time, in a fixed
//! order, until Dawid-Skene's posterior of their top class reaches the target with at
//! least `min_judges` answers, or no judge is left.
//!
//! The run goes in passes: the warm-up (every judge, as in a full run), then one pass
//! per judge in the order over the examples still open. After each pass Dawid-Skene is
//! refitted on every judgment so far and the settled examples stop. Decisions are taken
//! only between passes and depend only on the judgments, never on timing, so a run
//! killed at any moment and started again replays the same passes from the cache and
//! asks no judge twice. Within a pass the judge runs as in a full run (a server judge
//! with every server busy, an in-process judge at its concurrency); judges take turns.
//!
//! The stopping posterior is Dawid-Skene's, not the recommended `gauss`: gauss fills a
//! missing judge from the example's current posterior, which would make a partly judged
//! example look more certain than it is.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use indicatif::MultiProgress;
use jury_aggregate::{Aggregator, DawidSkene, DawidSkeneConfig, Diagnostics};
use jury_cache::Cache;
use jury_core::JudgmentsBuilder;
use jury_datasets::Example;
use jury_judge::Verdict;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::experiment::{Adaptive, JudgeEntry};
use crate::judging::{Juror, JurorOutcome, RunError, run_jury};

/// Why an example stopped asking judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// A warm-up example: every judge was asked.
    WarmUp,
    /// Its posterior reached the target with enough answers.
    Settled,
    /// Every judge was asked without settling it.
    EveryJudge,
}

impl Stop {
    pub fn as_str(self) -> &'static str {
        match self {
            Stop::WarmUp => "warm-up",
            Stop::Settled => "settled",
            Stop::EveryJudge => "every-judge",
        }
    }
}

/// What the rule did with one example.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub example_id: String,
    /// The judges asked, in the order asked (indices into the experiment's judges).
    pub asked: Vec<usize>,
    /// How many of them answered (a server may reject an example).
    pub answered: usize,
    pub stop: Stop,
    /// Dawid-Skene's posterior of the top class when it stopped (`None` for the warm-up).
    pub confidence: Option<f64>,
}

/// An adaptive run's record: its order, decisions and calls.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveRecord {
    pub settings: Adaptive,
    /// The judges by name, in the order the examples asked them.
    pub order: Vec<String>,
    pub warmup_examples: usize,
    /// One per example, in file order.
    pub decisions: Vec<Decision>,
    /// Each judge's cost per judgment, in the experiment's judge order.
    pub costs: Vec<f64>,
    pub judge_names: Vec<String>,
}

impl AdaptiveRecord {
    /// Judge calls made, the warm-up's included.
    pub fn calls(&self) -> usize {
        self.decisions.iter().map(|d| d.asked.len()).sum()
    }

    /// Judge calls of the full jury: every judge on every example.
    pub fn full_calls(&self) -> usize {
        self.decisions.len() * self.judge_names.len()
    }

    /// Calls per judge, in the experiment's judge order.
    pub fn calls_per_judge(&self) -> Vec<usize> {
        let mut calls = vec![0; self.judge_names.len()];
        self.decisions.iter().flat_map(|d| &d.asked).for_each(|&k| calls[k] += 1);
        calls
    }

    /// The calls' total cost, and the full jury's.
    pub fn cost(&self) -> (f64, f64) {
        let calls = self.calls_per_judge();
        let spent = calls.iter().zip(&self.costs).map(|(&n, c)| n as f64 * c).sum();
        let full = self.costs.iter().map(|c| c * self.decisions.len() as f64).sum();
        (spent, full)
    }
}

/// Runs the adaptive jury (see the module documentation) and returns every juror's
/// outcome, merged over its passes, with the record of the rule's decisions.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    rt: &tokio::runtime::Runtime,
    cfg: &Adaptive,
    entries: &[JudgeEntry],
    jurors: Vec<Juror>,
    examples: &[Example],
    cache: Arc<Mutex<Cache<Verdict>>>,
    keep_tokens: bool,
    bars: &MultiProgress,
) -> Result<(Vec<JurorOutcome>, AdaptiveRecord), RunError> {
    let (n, k) = (examples.len(), jurors.len());
    let names: Vec<String> = jurors.iter().map(|j| j.name.clone()).collect();
    let costs: Vec<f64> = entries.iter().map(|e| e.cost.unwrap_or(1.0)).collect();
    let mut draw: Vec<usize> = (0..n).collect();
    draw.shuffle(&mut ChaCha8Rng::seed_from_u64(cfg.seed));
    let n_warm = ((cfg.warmup * n as f64).ceil() as usize).clamp(n.min(1), n);
    let mut warm = vec![false; n];
    draw[..n_warm].iter().for_each(|&i| warm[i] = true);
    let subset = |keep: &dyn Fn(usize) -> bool| -> Arc<Vec<Example>> {
        Arc::new((0..n).filter(|&i| keep(i)).map(|i| examples[i].clone()).collect())
    };

    let mut outcomes: Vec<Option<JurorOutcome>> = (0..k).map(|_| None).collect();
    let first = rt.block_on(run_jury(jurors.clone(), subset(&|i| warm[i]), cache.clone(), keep_tokens, bars))?;
    for (slot, o) in outcomes.iter_mut().zip(first) {
        merge(slot, o);
    }
    let fit = settle(examples, &names, &outcomes)?;
    let order: Vec<usize> = match &cfg.order {
        Some(order) => order.iter().filter_map(|name| names.iter().position(|x| x == name)).collect(),
        None => {
            let mut order: Vec<usize> = (0..k).collect();
            order.sort_by(|&a, &b| {
                costs[a]
                    .total_cmp(&costs[b])
                    .then_with(|| {
                        fit.skills[b]
                            .unwrap_or(f64::NEG_INFINITY)
                            .total_cmp(&fit.skills[a].unwrap_or(f64::NEG_INFINITY))
                    })
                    .then(a.cmp(&b))
            });
            order
        }
    };

    let mut decisions: Vec<Decision> = examples
        .iter()
        .zip(&warm)
        .map(|(e, &w)| Decision {
            example_id: e.id.clone(),
            asked: if w { (0..k).collect() } else { Vec::new() },
            answered: 0,
            stop: if w { Stop::WarmUp } else { Stop::EveryJudge },
            confidence: None,
        })
        .collect();
    let mut open: Vec<bool> = warm.iter().map(|w| !w).collect();
    for &judge in &order {
        if !open.iter().any(|&o| o) {
            break;
        }
        let pass = subset(&|i| open[i]);
        let done = rt.block_on(run_jury(vec![jurors[judge].clone()], pass, cache.clone(), keep_tokens, bars))?;
        for o in done {
            merge(&mut outcomes[judge], o);
        }
        open.iter().zip(decisions.iter_mut()).filter(|(o, _)| **o).for_each(|(_, d)| d.asked.push(judge));
        let fit = settle(examples, &names, &outcomes)?;
        for (i, d) in decisions.iter_mut().enumerate() {
            if !open[i] {
                continue;
            }
            d.answered = fit.answered[i];
            d.confidence = fit.confidence[i];
            if d.answered >= cfg.min_judges && fit.confidence[i].is_some_and(|c| c >= cfg.target) {
                d.stop = Stop::Settled;
                open[i] = false;
            }
        }
    }
    for ((d, &w), e) in decisions.iter_mut().zip(&warm).zip(examples) {
        if w {
            d.answered = outcomes.iter().flatten().filter(|o| o.results.verdicts.contains_key(&e.id)).count();
        }
    }
    let outcomes = outcomes
        .into_iter()
        .zip(&names)
        .map(|(o, name)| o.ok_or_else(|| RunError::Task { judge: name.clone(), reason: "no result".into() }))
        .collect::<Result<Vec<_>, _>>()?;
    let record = AdaptiveRecord {
        settings: cfg.clone(),
        order: order.iter().map(|&j| names[j].clone()).collect(),
        warmup_examples: n_warm,
        decisions,
        costs,
        judge_names: names,
    };
    Ok((outcomes, record))
}

/// Adds one pass's outcome to a juror's outcome so far.
fn merge(slot: &mut Option<JurorOutcome>, o: JurorOutcome) {
    let Some(m) = slot else {
        *slot = Some(o);
        return;
    };
    let (r, s) = (&mut m.results, &o.results.summary);
    r.verdicts.extend(o.results.verdicts);
    r.tokens.extend(o.results.tokens);
    r.failures.extend(o.results.failures);
    r.summary.scored += s.scored;
    r.summary.from_cache += s.from_cache;
    r.summary.failed += s.failed;
    r.summary.seconds += s.seconds;
    m.info.load_seconds += o.info.load_seconds;
    m.info.prefix_cache_flushes += o.info.prefix_cache_flushes;
    // A server judge's counters are its last pass's (each pass opens its own pool).
    m.info.server = o.info.server;
}

/// Dawid-Skene over every judgment so far: per example (file order) the posterior of
/// its top class and the number of answers, and per judge its mean correct-vote rate.
struct Fit {
    confidence: Vec<Option<f64>>,
    answered: Vec<usize>,
    skills: Vec<Option<f64>>,
}

fn settle(examples: &[Example], names: &[String], outcomes: &[Option<JurorOutcome>]) -> Result<Fit, RunError> {
    let mut builder = JudgmentsBuilder::new(2)?;
    let mut answered = vec![0; examples.len()];
    for (i, e) in examples.iter().enumerate() {
        for (o, name) in outcomes.iter().zip(names) {
            if let Some(v) = o.as_ref().and_then(|o| o.results.verdicts.get(&e.id)) {
                builder.push_binary(&e.id, name, v.y)?;
                answered[i] += 1;
            }
        }
    }
    let j = builder.build();
    let mut fit = Fit { confidence: vec![None; examples.len()], answered, skills: vec![None; names.len()] };
    if j.n_examples() == 0 {
        return Ok(fit);
    }
    let ds = DawidSkene::new(DawidSkeneConfig::default())
        .aggregate(&j)
        .map_err(|e| RunError::Adaptive(format!("fitting Dawid-Skene: {e}")))?;
    let row: HashMap<&str, usize> = j.example_ids().iter().enumerate().map(|(r, id)| (id.as_str(), r)).collect();
    let posteriors: Vec<&[f64]> = ds.posteriors().rows().collect();
    for (c, e) in fit.confidence.iter_mut().zip(examples) {
        *c = row.get(e.id.as_str()).map(|&r| posteriors[r].iter().copied().fold(0.0, f64::max));
    }
    if let Diagnostics::DawidSkene(em) = ds.diagnostics() {
        for (name, m) in j.judge_names().iter().zip(&em.params.confusion) {
            if let Some(k) = names.iter().position(|x| x == name) {
                fit.skills[k] = Some((0..m.n_classes()).map(|t| m.get(t, t)).sum::<f64>() / m.n_classes() as f64);
            }
        }
    }
    Ok(fit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(asked: &[usize], stop: Stop) -> Decision {
        Decision { example_id: "e".into(), asked: asked.to_vec(), answered: asked.len(), stop, confidence: None }
    }

    #[test]
    fn calls_and_costs_count_every_judge_asked() {
        let record = AdaptiveRecord {
            settings: Adaptive::default(),
            order: vec!["b".into(), "a".into(), "c".into()],
            warmup_examples: 1,
            decisions: vec![
                decision(&[0, 1, 2], Stop::WarmUp),
                decision(&[1, 0], Stop::Settled),
                decision(&[1, 0, 2], Stop::EveryJudge),
            ],
            costs: vec![1.0, 2.0, 10.0],
            judge_names: vec!["a".into(), "b".into(), "c".into()],
        };
        assert_eq!((record.calls(), record.full_calls()), (8, 9));
        assert_eq!(record.calls_per_judge(), vec![3, 3, 2]);
        assert_eq!(record.cost(), (3.0 + 6.0 + 20.0, 3.0 * 13.0));
    }

    #[test]
    fn the_defaults_are_the_replays() {
        let (a, d) = (Adaptive::default(), jury_aggregate::AdaptiveConfig::default());
        assert_eq!((a.target, a.min_judges, a.warmup, a.seed), (d.target, d.min_judges, d.warmup, d.seed));
        assert_eq!(a.order, None);
    }
}
