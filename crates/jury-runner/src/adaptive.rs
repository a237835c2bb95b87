//! The adaptive jury in a live run: jury-aggregate's [`AdaptivePlan`] driven by real
//! judges. Every judge answers a warm-up share of the examples (drawn by seed); the other
//! examples then ask the judges one at a time, in a fixed order, until at least
//! `min_judges` have answered and the recommended model's probability that the judges
//! left would not change the verdict reaches the target, or no judge is left. `jury
//! simulate adaptive` replays the same plan.
//!
//! The plan goes in rounds, and each round runs as a full run does: every judge with
//! questions at once (server judges each on their own, in-process judges one after
//! another). The examples start in chunks, one per round, so in a round each judge in the
//! order works on its own chunk: with server judges the examples start in twice as many
//! chunks as there are server judges, and a server is idle only at the end of a round
//! while another judge finishes. A jury of in-process judges only, which take turns
//! anyway, starts them in one chunk (per 1,000 examples), since each round reloads its
//! models.
//!
//! What a round asks depends only on the judgments of earlier rounds, never on timing,
//! so a run killed at any moment and started again replays the same rounds from the
//! cache and asks no judge twice.
//!
use std::sync::{Arc, Mutex};

use indicatif::MultiProgress;
use jury_aggregate::{AdaptiveConfig, AdaptivePlan, AdaptiveStop, JudgeOrder};
use jury_cache::Cache;
use jury_datasets::Example;
use jury_judge::Verdict;

use crate::experiment::{Adaptive, JudgeEntry};
use crate::judging::{Bench, JudgeSpec, Juror, JurorOutcome, RunError};

/// What the rule did with one example.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub example_id: String,
    /// The judges asked, in the order asked (indices into the experiment's judges).
    pub asked: Vec<usize>,
    /// How many of them answered (a server may reject an example; it then asks the
    /// next judge).
    pub answered: usize,
    pub stop: AdaptiveStop,
    /// The model's probability, after its latest answer that left judges in the order,
    /// that asking them would not change its verdict (`None` for the warm-up).
    pub confidence: Option<f64>,
}

/// An adaptive run's record: its order, decisions and calls.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveRecord {
    pub settings: Adaptive,
    /// The judges by name, in the order the examples asked them.
    pub order: Vec<String>,
    pub warmup_examples: usize,
    /// Rounds run, the warm-up's included.
    pub rounds: usize,
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

impl Adaptive {
    /// The plan's settings for a jury with `servers` server judges (see the module
    /// documentation for the chunks).
    fn plan_config(&self, servers: usize) -> AdaptiveConfig {
        AdaptiveConfig {
            target: self.target,
            min_judges: self.min_judges,
            warmup: self.warmup,
            seed: self.seed,
            stopping_model: self.stopping_model,
            chunks: Some((2 * servers).max(1)),
            ..AdaptiveConfig::default()
        }
    }
}

/// Runs the adaptive jury (see the module documentation) and returns every juror's
/// outcome, merged over its rounds, with the record of the rule's decisions.
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
    let k = jurors.len();
    let names: Vec<String> = jurors.iter().map(|j| j.name.clone()).collect();
    let costs: Vec<f64> = entries.iter().map(|e| e.cost.unwrap_or(1.0)).collect();
    let servers = jurors.iter().filter(|j| matches!(j.spec, JudgeSpec::Server { .. })).count();
    let rule = match &cfg.order {
        Some(order) => {
            JudgeOrder::Given(order.iter().filter_map(|name| names.iter().position(|x| x == name)).collect())
        }
        None => JudgeOrder::ByCost(costs.clone()),
    };
    let plan_error = |e: jury_aggregate::AggregateError| RunError::Adaptive(e.to_string());
    let mut plan =
        AdaptivePlan::new(examples.len(), names.clone(), 2, &cfg.plan_config(servers), rule).map_err(plan_error)?;
    // Server judges load once, so a round asks its questions only: no probe per round,
    // and one pool per judge for the whole run (retries, `patience_s`, counters).
    let bench = rt.block_on(Bench::open(jurors, examples.first(), bars))?;
    let mut outcomes: Vec<Option<JurorOutcome>> = (0..k).map(|_| None).collect();
    let mut asked = vec![0; k];
    let mut rounds = 0;
    while let Some(asks) = plan.round().map_err(plan_error)? {
        let busy: Vec<usize> = (0..k).filter(|&j| !asks[j].is_empty()).collect();
        let work =
            busy.iter().map(|&j| (j, Arc::new(asks[j].iter().map(|&e| examples[e].clone()).collect()))).collect();
        let done = rt.block_on(bench.pass(work, &cache, keep_tokens, bars))?;
        let mut answers: Vec<Vec<Option<Vec<f64>>>> = asks.iter().map(|a| vec![None; a.len()]).collect();
        for (&j, o) in busy.iter().zip(done) {
            for (slot, &e) in answers[j].iter_mut().zip(&asks[j]) {
                *slot = o.results.verdicts.get(&examples[e].id).and_then(|v| v.y).map(|y| vec![1.0 - y, y]);
            }
            asked[j] += asks[j].len();
            merge(&mut outcomes[j], o);
        }
        plan.answer(&answers).map_err(plan_error)?;
        rounds += 1;
    }
    let decisions = plan
        .decisions()
        .iter()
        .zip(examples)
        .map(|(d, e)| Decision {
            example_id: e.id.clone(),
            asked: d.asked.clone(),
            answered: d.answered,
            stop: d.stop.unwrap_or(AdaptiveStop::EveryJudge),
            confidence: d.confidence,
        })
        .collect();
    let outcomes = outcomes
        .into_iter()
        .zip(&names)
        .map(|(o, name)| o.ok_or_else(|| RunError::Task { judge: name.clone(), reason: "no result".into() }))
        .collect::<Result<Vec<_>, _>>()?;
    // As in a full run, a judge is judged on everything it was asked, not round by round.
    for (o, &n) in outcomes.iter().zip(&asked) {
        o.results.check_answered(n)?;
    }
    let record = AdaptiveRecord {
        settings: cfg.clone(),
        order: plan.order().iter().map(|&j| names[j].clone()).collect(),
        warmup_examples: plan.warmup_examples(),
        rounds,
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
    // A server judge loads once per run and its pool counts over every pass, so each
    // pass repeats the load time and the counters so far; an in-process judge loads at
    // every pass.
    if o.info.server.is_none() {
        m.info.load_seconds += o.info.load_seconds;
    }
    m.info.server = o.info.server;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(asked: &[usize], stop: AdaptiveStop) -> Decision {
        Decision { example_id: "e".into(), asked: asked.to_vec(), answered: asked.len(), stop, confidence: None }
    }

    #[test]
    fn calls_and_costs_count_every_judge_asked() {
        let record = AdaptiveRecord {
            settings: Adaptive::default(),
            order: vec!["b".into(), "a".into(), "c".into()],
            warmup_examples: 1,
            rounds: 3,
            decisions: vec![
                decision(&[0, 1, 2], AdaptiveStop::WarmUp),
                decision(&[1, 0], AdaptiveStop::Settled),
                decision(&[1, 0, 2], AdaptiveStop::EveryJudge),
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
        assert_eq!(a.stopping_model, d.stopping_model);
        assert_eq!(a.order, None);
    }
}
