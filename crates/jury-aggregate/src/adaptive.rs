//! The adaptive jury's stopping rule, one plan shared by the live run and its replay:
//! which judge to ask about which example, round by round, until Dawid-Skene's posterior
//! of each example is settled. `jury run` drives it with real judges; `jury simulate
//! adaptive` with a jury recorded with every judge, so users choose a big run's settings
//! from a small full one and the replay is the run's rule, not a copy of it.
//!
//! The plan goes in rounds. Round 0 is the warm-up: a share of the examples (drawn by
//! seed) that every judge answers, so the model is fitted before anything stops; the
//! judges' order is fixed from it (given, or cheaper first, then by estimated skill).
//! The other examples, in the seed's order, start in chunks, one chunk per round; an
//! open example asks the next judge in the order each round, and stops once its
//! posterior reaches the target with at least `min_judges` answers, or when no judge is
//! left. Chunk `c` starts in round `c + 1` with the model refitted on every judgment so
//! far and keeps that fit, so in a round the chunks in flight ask different judges: every
//! judge has work at once, a wavefront.
//!
//! Invariant: what a round asks depends only on the answers of earlier rounds, never on
//! the order answers arrive in, so a run killed at any moment and started again asks the
//! same questions (from the cache) and ends with the same judgments.

use jury_core::{Judgments, JudgmentsBuilder};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::{AggregateError, Aggregator, DawidSkene, DawidSkeneConfig, Diagnostics, DsParams};

/// Settings of the adaptive rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveConfig {
    /// An example stops once its top posterior class reaches this probability.
    pub target: f64,
    /// Judges that must have answered an example before it may stop.
    pub min_judges: usize,
    /// Share of the examples every judge answers first (at least one example).
    pub warmup: f64,
    /// Draws the warm-up and the order the other examples start in.
    pub seed: u64,
    /// The most examples that start in one round (and share one fit of the model).
    pub refit_every: usize,
    /// Rounds the examples after the warm-up start in (more if a chunk would pass
    /// `refit_every`). `None`: twice the judges in the order, so every judge has work
    /// in most rounds; a live run of in-process judges only, which take turns anyway,
    /// starts them in one (each round reloads its models).
    pub chunks: Option<usize>,
    pub ds: DawidSkeneConfig,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        Self {
            target: 0.95,
            min_judges: 2,
            warmup: 0.1,
            seed: 0,
            refit_every: 1000,
            chunks: None,
            ds: DawidSkeneConfig::default(),
        }
    }
}

impl AdaptiveConfig {
    fn check(&self) -> Result<(), AggregateError> {
        let bad = |reason: String| AggregateError::Config { method: "adaptive", reason };
        let in_unit = |x: f64| x > 0.0 && x <= 1.0;
        if !in_unit(self.target) || !in_unit(self.warmup) {
            return Err(bad(format!("target and warmup must be in (0, 1] (got {} and {})", self.target, self.warmup)));
        }
        if self.min_judges == 0 || self.refit_every == 0 || self.chunks == Some(0) {
            return Err(bad("min_judges, refit_every and chunks must be at least 1".into()));
        }
        Ok(())
    }
}

/// Why an example stopped asking judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdaptiveStop {
    /// A warm-up example: every judge was asked.
    WarmUp,
    /// Its posterior reached the target with enough answers.
    Settled,
    /// Every judge in the order was asked without settling it.
    EveryJudge,
}

impl AdaptiveStop {
    pub fn as_str(self) -> &'static str {
        match self {
            AdaptiveStop::WarmUp => "warm-up",
            AdaptiveStop::Settled => "settled",
            AdaptiveStop::EveryJudge => "every-judge",
        }
    }
}

/// What the rule did with one example.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveDecision {
    /// The judges asked, in the order asked.
    pub asked: Vec<usize>,
    /// How many of them answered (a judge may fail or be missing for an example; the
    /// example then asks the next judge).
    pub answered: usize,
    /// `None` while the example is still open.
    pub stop: Option<AdaptiveStop>,
    /// The posterior of its top class after its last answer (`None` for the warm-up).
    pub confidence: Option<f64>,
}

/// How the judges are ordered after the warm-up.
#[derive(Debug, Clone, PartialEq)]
pub enum JudgeOrder {
    /// These judges (indices), in this order; judges left out answer the warm-up only.
    Given(Vec<usize>),
    /// Cheaper first (one cost per judge), then by the warm-up fit's expected accuracy,
    /// then by index.
    ByCost(Vec<f64>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    Warm,
    /// In a chunk that has not started.
    Waiting,
    /// Started in `round`, with the fit of its chunk.
    Open {
        chunk: usize,
        round: usize,
    },
    Stopped,
}

/// The adaptive rule as a plan: [`AdaptivePlan::round`] says who to ask next, and
/// [`AdaptivePlan::answer`] takes what they said.
#[derive(Debug, Clone)]
pub struct AdaptivePlan {
    cfg: AdaptiveConfig,
    n_classes: usize,
    judge_names: Vec<String>,
    order_rule: JudgeOrder,
    order: Vec<usize>,
    phase: Vec<Phase>,
    chunks: Vec<Vec<usize>>,
    fits: Vec<DsParams>,
    /// Per example, the answers so far: (judge, class probabilities).
    answers: Vec<Vec<(usize, Vec<f64>)>>,
    decisions: Vec<AdaptiveDecision>,
    warmup_examples: usize,
    /// Rounds answered so far.
    rounds: usize,
    /// The current round's asks, per judge, once computed.
    asks: Option<Vec<Vec<usize>>>,
}

impl AdaptivePlan {
    /// A plan for `n_examples` examples and these judges.
    pub fn new(
        n_examples: usize,
        judge_names: Vec<String>,
        n_classes: usize,
        cfg: &AdaptiveConfig,
        order_rule: JudgeOrder,
    ) -> Result<Self, AggregateError> {
        cfg.check()?;
        let bad = |reason: String| AggregateError::Config { method: "adaptive", reason };
        let k = judge_names.len();
        if n_examples == 0 || k == 0 {
            return Err(AggregateError::Empty { method: "adaptive" });
        }
        match &order_rule {
            JudgeOrder::Given(order) if order.iter().any(|&j| j >= k) => {
                return Err(bad(format!("the order names judge {} of {k}", order.iter().max().unwrap_or(&0))));
            }
            JudgeOrder::ByCost(costs) if costs.len() != k || costs.iter().any(|c| !(c.is_finite() && *c > 0.0)) => {
                return Err(bad(format!("{} costs for {k} judges; each must be a positive number", costs.len())));
            }
            _ => {}
        }
        let mut draw: Vec<usize> = (0..n_examples).collect();
        draw.shuffle(&mut ChaCha8Rng::seed_from_u64(cfg.seed));
        let n_warm = ((cfg.warmup * n_examples as f64).ceil() as usize).clamp(1, n_examples);
        let mut phase = vec![Phase::Waiting; n_examples];
        draw[..n_warm].iter().for_each(|&e| phase[e] = Phase::Warm);
        let rest = &draw[n_warm..];
        let width = match &order_rule {
            JudgeOrder::Given(order) => order.len(),
            JudgeOrder::ByCost(_) => k,
        };
        let chunks = cfg.chunks.unwrap_or(2 * width).max(1);
        let chunk = rest.len().div_ceil(chunks).clamp(1, cfg.refit_every);
        Ok(Self {
            cfg: *cfg,
            n_classes,
            judge_names,
            order_rule,
            order: Vec::new(),
            phase,
            chunks: rest.chunks(chunk).map(<[usize]>::to_vec).collect(),
            fits: Vec::new(),
            answers: vec![Vec::new(); n_examples],
            decisions: vec![
                AdaptiveDecision { asked: Vec::new(), answered: 0, stop: None, confidence: None };
                n_examples
            ],
            warmup_examples: n_warm,
            rounds: 0,
            asks: None,
        })
    }

    /// The next round's questions: per judge (index), the examples (indices, ascending)
    /// to ask it about; `None` once every example has stopped. Asking again before
    /// [`AdaptivePlan::answer`] gives the same round.
    pub fn round(&mut self) -> Result<Option<Vec<Vec<usize>>>, AggregateError> {
        if let Some(asks) = &self.asks {
            return Ok(Some(asks.clone()));
        }
        let k = self.judge_names.len();
        let mut asks = vec![Vec::new(); k];
        if self.rounds == 0 {
            let warm: Vec<usize> = (0..self.phase.len()).filter(|&e| self.phase[e] == Phase::Warm).collect();
            asks.iter_mut().for_each(|a| *a = warm.clone());
        } else {
            let starting = self.rounds - 1;
            if starting < self.chunks.len() && !self.order.is_empty() {
                self.fits.push(self.fit()?);
                for &e in &self.chunks[starting] {
                    self.phase[e] = Phase::Open { chunk: starting, round: self.rounds };
                }
            }
            for (e, p) in self.phase.iter().enumerate() {
                if let Phase::Open { round, .. } = *p {
                    asks[self.order[self.rounds - round]].push(e);
                }
            }
            if asks.iter().all(Vec::is_empty) {
                // Nothing open: the examples not started yet (none, unless the order
                // is empty) stop unasked.
                for (p, d) in self.phase.iter_mut().zip(&mut self.decisions) {
                    if *p == Phase::Waiting {
                        *p = Phase::Stopped;
                        d.stop = Some(AdaptiveStop::EveryJudge);
                    }
                }
                return Ok(None);
            }
        }
        self.asks = Some(asks.clone());
        Ok(Some(asks))
    }

    /// What the judges of the current round said, aligned with [`AdaptivePlan::round`]'s
    /// lists: the class probabilities, or `None` where the judge failed or is missing.
    pub fn answer(&mut self, answers: &[Vec<Option<Vec<f64>>>]) -> Result<(), AggregateError> {
        let bad = |reason: String| AggregateError::Config { method: "adaptive", reason };
        let Some(asks) = self.asks.take() else {
            return Err(bad("answers given before a round was asked".into()));
        };
        if answers.len() != asks.len() || answers.iter().zip(&asks).any(|(a, q)| a.len() != q.len()) {
            self.asks = Some(asks);
            return Err(bad("the answers do not match the round's questions".into()));
        }
        for (judge, (examples, said)) in asks.iter().zip(answers).enumerate() {
            for (&e, p) in examples.iter().zip(said) {
                self.decisions[e].asked.push(judge);
                if let Some(p) = p {
                    if p.len() != self.n_classes {
                        return Err(bad(format!("an answer has {} classes, not {}", p.len(), self.n_classes)));
                    }
                    self.answers[e].push((judge, p.clone()));
                    self.decisions[e].answered += 1;
                }
            }
        }
        let asked: Vec<usize> = {
            let mut all: Vec<usize> = asks.into_iter().flatten().collect();
            all.sort_unstable();
            all.dedup();
            all
        };
        for e in asked {
            match self.phase[e] {
                Phase::Warm => {
                    self.decisions[e].stop = Some(AdaptiveStop::WarmUp);
                    self.phase[e] = Phase::Stopped;
                }
                Phase::Open { chunk, round } => {
                    let d = &mut self.decisions[e];
                    let confidence = top_posterior(&self.fits[chunk], &self.answers[e]);
                    d.confidence = Some(confidence);
                    if d.answered >= self.cfg.min_judges && confidence >= self.cfg.target {
                        d.stop = Some(AdaptiveStop::Settled);
                        self.phase[e] = Phase::Stopped;
                    } else if self.rounds + 1 - round >= self.order.len() {
                        d.stop = Some(AdaptiveStop::EveryJudge);
                        self.phase[e] = Phase::Stopped;
                    }
                }
                Phase::Waiting | Phase::Stopped => {}
            }
        }
        if self.rounds == 0 {
            self.order = self.judge_order()?;
        }
        self.rounds += 1;
        Ok(())
    }

    /// One decision per example, in index order.
    pub fn decisions(&self) -> &[AdaptiveDecision] {
        &self.decisions
    }

    /// The judges (indices) in the order open examples ask them; empty before the
    /// warm-up is answered.
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    pub fn warmup_examples(&self) -> usize {
        self.warmup_examples
    }

    /// Every answer so far, as a judgments matrix (examples named by index).
    fn revealed(&self) -> Result<Judgments, AggregateError> {
        let internal = |source| AggregateError::Internal { method: "adaptive", source };
        let mut b = JudgmentsBuilder::new(self.n_classes).map_err(internal)?;
        for name in &self.judge_names {
            b.judge(name);
        }
        let ids: Vec<String> = (0..self.answers.len()).map(|e| e.to_string()).collect();
        for id in &ids {
            b.example(id);
        }
        for (id, row) in ids.iter().zip(&self.answers) {
            for (judge, p) in row {
                b.push_slice(id, &self.judge_names[*judge], Some(p)).map_err(internal)?;
            }
        }
        Ok(b.build())
    }

    fn fit(&self) -> Result<DsParams, AggregateError> {
        match DawidSkene::new(self.cfg.ds).aggregate(&self.revealed()?)?.diagnostics() {
            Diagnostics::DawidSkene(report) => Ok(report.params.clone()),
            _ => Err(AggregateError::Config { method: "adaptive", reason: "Dawid-Skene gave no parameters".into() }),
        }
    }

    fn judge_order(&self) -> Result<Vec<usize>, AggregateError> {
        match &self.order_rule {
            JudgeOrder::Given(order) => Ok(order.clone()),
            JudgeOrder::ByCost(costs) => {
                let skill = expected_accuracy(&self.fit()?);
                let mut order: Vec<usize> = (0..self.judge_names.len()).collect();
                order.sort_by(|&a, &b| {
                    costs[a].total_cmp(&costs[b]).then(skill[b].total_cmp(&skill[a])).then(a.cmp(&b))
                });
                Ok(order)
            }
        }
    }
}

/// Each judge's expected accuracy under the model: its confusion matrix's diagonal
/// weighed by the class prior.
fn expected_accuracy(params: &DsParams) -> Vec<f64> {
    params.confusion.iter().map(|m| params.class_prior.iter().enumerate().map(|(c, p)| p * m.get(c, c)).sum()).collect()
}

/// The top class's posterior of one example from its answers, each read as a vote for
/// its most likely class.
fn top_posterior(params: &DsParams, answers: &[(usize, Vec<f64>)]) -> f64 {
    let log: Vec<f64> = (0..params.class_prior.len())
        .map(|c| {
            params.class_prior[c].ln()
                + answers.iter().map(|(k, p)| params.confusion[*k].get(c, jury_core::argmax(p)).ln()).sum::<f64>()
        })
        .collect();
    let max = log.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        return 0.0;
    }
    let total: f64 = log.iter().map(|l| (l - max).exp()).sum();
    1.0 / total
}

/// What the replay did.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveReplay {
    /// The final label of every example (Dawid-Skene on the revealed judgments).
    pub labels: Vec<usize>,
    /// Judge calls made (judgments revealed), the warm-up's included.
    pub calls: usize,
    /// Judge calls of the full jury (every judgment present in the recording).
    pub full_calls: usize,
    /// Calls per judge, in the matrix's judge order.
    pub calls_per_judge: Vec<usize>,
    /// Rounds the plan took.
    pub rounds: usize,
}

/// Replays the adaptive plan on `j`, a jury recorded with every judge, in `order` (the
/// live run's rule: `JudgeOrder::ByCost` with one cost per judge in `j`'s order, equal
/// costs ordering by the warm-up's estimated skill). A missing entry is a judge that
/// would not have answered: the example asks the next judge, and no call is counted.
pub fn replay_adaptive(
    j: &Judgments,
    cfg: &AdaptiveConfig,
    order: JudgeOrder,
) -> Result<AdaptiveReplay, AggregateError> {
    let k = j.n_judges();
    let mut plan = AdaptivePlan::new(j.n_examples(), j.judge_names().to_vec(), j.n_classes(), cfg, order)?;
    // One flag per entry, in `j.entries()` order.
    let mut revealed = vec![false; j.n_present()];
    let mut rounds = 0;
    while let Some(asks) = plan.round()? {
        let answers: Vec<Vec<Option<Vec<f64>>>> = asks
            .iter()
            .enumerate()
            .map(|(judge, examples)| {
                examples
                    .iter()
                    .map(|&e| {
                        let pos = j.row(e).position(|(k, _)| k == judge)?;
                        revealed[j.entry_range(e).start + pos] = true;
                        j.row(e).nth(pos).map(|(_, p)| p.to_vec())
                    })
                    .collect()
            })
            .collect();
        plan.answer(&answers)?;
        rounds += 1;
    }
    let sub = revealed_judgments(j, &revealed)?;
    let labels = DawidSkene::new(cfg.ds).aggregate(&sub)?.labels().to_vec();
    let mut calls_per_judge = vec![0; k];
    for (idx, (_, judge, _)) in j.entries().enumerate() {
        calls_per_judge[judge] += usize::from(revealed[idx]);
    }
    Ok(AdaptiveReplay {
        labels,
        calls: revealed.iter().filter(|&&r| r).count(),
        full_calls: j.n_present(),
        calls_per_judge,
        rounds,
    })
}

/// The judgments revealed, every example and judge kept (in `j`'s order) so indices
/// stay aligned.
fn revealed_judgments(j: &Judgments, revealed: &[bool]) -> Result<Judgments, AggregateError> {
    let internal = |source| AggregateError::Internal { method: "adaptive", source };
    let mut b = JudgmentsBuilder::new(j.n_classes()).map_err(internal)?;
    for name in j.judge_names() {
        b.judge(name);
    }
    for id in j.example_ids() {
        b.example(id);
    }
    for (idx, (e, judge, p)) in j.entries().enumerate() {
        if revealed[idx] {
            b.push_slice(&j.example_ids()[e], &j.judge_names()[judge], Some(p)).map_err(internal)?;
        }
    }
    Ok(b.build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use jury_sim::{JuryConfig, simulate};

    fn accuracy(labels: &[usize], truth: &[usize]) -> f64 {
        labels.iter().zip(truth).filter(|(a, b)| a == b).count() as f64 / truth.len() as f64
    }

    /// Eight judges of 75-90% accuracy with 10% of the judgments missing.
    fn good_jury(seed: u64) -> jury_sim::SimulatedJury {
        let judges = (0..8)
            .map(|k| {
                let a = 0.75 + 0.02 * k as f64;
                jury_sim::SimJudge::binary(&format!("j{k}"), a, a)
            })
            .collect();
        simulate(&JuryConfig { n_examples: 4000, class_prior: vec![0.4, 0.6], judges, missing_rate: 0.1, seed })
            .unwrap()
    }

    /// The recorded jury's answers to one round's questions; `fails(judge, example)`
    /// makes a judge fail on an example.
    fn recorded(
        j: &Judgments,
        asks: &[Vec<usize>],
        fails: &dyn Fn(usize, usize) -> bool,
    ) -> Vec<Vec<Option<Vec<f64>>>> {
        asks.iter()
            .enumerate()
            .map(|(judge, examples)| {
                examples
                    .iter()
                    .map(|&e| {
                        if fails(judge, e) {
                            return None;
                        }
                        j.row(e).find(|&(k, _)| k == judge).map(|(_, p)| p.to_vec())
                    })
                    .collect()
            })
            .collect()
    }

    /// Drives a plan with the recorded jury's answers until it is done.
    fn drive(
        j: &Judgments,
        cfg: &AdaptiveConfig,
        rule: JudgeOrder,
        fails: &dyn Fn(usize, usize) -> bool,
    ) -> AdaptivePlan {
        let mut plan = AdaptivePlan::new(j.n_examples(), j.judge_names().to_vec(), 2, cfg, rule).unwrap();
        while let Some(asks) = plan.round().unwrap() {
            plan.answer(&recorded(j, &asks, fails)).unwrap();
        }
        plan
    }

    /// Every judge at the same cost: the order follows the warm-up's skill alone.
    fn equal(j: &Judgments) -> JudgeOrder {
        JudgeOrder::ByCost(vec![1.0; j.n_judges()])
    }

    /// With costs the replay asks the cheap judges first: a judge ten times cheaper than
    /// the rest answers every example, and the replay spends less (calls weighted by
    /// cost) than with equal costs, where the most accurate judges come first.
    #[test]
    fn costs_put_the_cheap_judges_first() {
        let sim = good_jury(3);
        let j = &sim.judgments;
        let costs: Vec<f64> = (0..j.n_judges()).map(|k| if k < 2 { 1.0 } else { 10.0 }).collect();
        let spent = |r: &AdaptiveReplay| r.calls_per_judge.iter().zip(&costs).map(|(&n, c)| n as f64 * c).sum::<f64>();
        let cheap = replay_adaptive(j, &AdaptiveConfig::default(), JudgeOrder::ByCost(costs.clone())).unwrap();
        let skill = replay_adaptive(j, &AdaptiveConfig::default(), equal(j)).unwrap();
        let present = |k: usize| j.entries().filter(|&(_, judge, _)| judge == k).count();
        assert_eq!(cheap.calls_per_judge[..2], [present(0), present(1)], "{:?}", cheap.calls_per_judge);
        assert!(spent(&cheap) < spent(&skill), "{} against {}", spent(&cheap), spent(&skill));
    }

    /// On a simulated jury with known truth the adaptive labels stay within a point
    /// of the full jury's with under half of the calls; a target of 1 asks every judge
    /// outside the warm-up too, and the same seed replays the same calls.
    #[test]
    fn saves_calls_and_keeps_the_full_jurys_accuracy() {
        let sim = good_jury(3);
        let j = &sim.judgments;
        let full = DawidSkene::default().aggregate(j).unwrap();
        let full_acc = accuracy(full.labels(), &sim.truth);
        let r = replay_adaptive(j, &AdaptiveConfig::default(), equal(j)).unwrap();
        let acc = accuracy(&r.labels, &sim.truth);
        assert!(r.calls < r.full_calls / 2, "{} of {} calls", r.calls, r.full_calls);
        assert!(acc > full_acc - 0.01, "adaptive {acc} full {full_acc}");
        assert_eq!(r.calls_per_judge.iter().sum::<usize>(), r.calls);
        assert_eq!(r, replay_adaptive(j, &AdaptiveConfig::default(), equal(j)).unwrap());
    }

    /// A target of 1 is never reached: every example asks every judge, and the labels
    /// are the full jury's.
    #[test]
    fn a_target_of_one_asks_every_judge_and_equals_the_full_run() {
        let sim = good_jury(5);
        let j = &sim.judgments;
        let r = replay_adaptive(j, &AdaptiveConfig { target: 1.0, ..AdaptiveConfig::default() }, equal(j)).unwrap();
        assert_eq!(r.calls, r.full_calls);
        assert_eq!(r.labels, DawidSkene::default().aggregate(j).unwrap().labels());
    }

    /// Each open example stops as soon as it is settled, never before `min_judges`
    /// answers, never with more judges than the order holds, and every settled example's
    /// posterior is at the target; examples with agreeing strong judges stop at the
    /// minimum.
    #[test]
    fn stops_where_certain_never_before_the_minimum_nor_beyond_the_judges() {
        let sim = good_jury(7);
        let j = &sim.judgments;
        for min_judges in [1, 2, 3] {
            let cfg = AdaptiveConfig { min_judges, ..AdaptiveConfig::default() };
            let plan = drive(j, &cfg, JudgeOrder::ByCost(vec![1.0; 8]), &|_, _| false);
            let mut at_minimum = 0;
            for d in plan.decisions() {
                assert!(d.asked.len() <= 8);
                let mut seen = d.asked.clone();
                seen.sort_unstable();
                seen.dedup();
                assert_eq!(seen.len(), d.asked.len(), "a judge asked twice: {d:?}");
                match d.stop {
                    Some(AdaptiveStop::Settled) => {
                        assert!(d.answered >= min_judges, "{d:?}");
                        assert!(d.confidence.unwrap() >= cfg.target);
                        at_minimum += usize::from(d.answered == min_judges);
                    }
                    Some(AdaptiveStop::EveryJudge) => assert_eq!(d.asked.len(), 8, "{d:?}"),
                    Some(AdaptiveStop::WarmUp) => assert_eq!(d.asked.len(), 8),
                    None => panic!("an example never stopped"),
                }
            }
            // One judge alone never reaches 0.95 here; two agreeing strong ones do.
            let bar = if min_judges == 1 { 0 } else { j.n_examples() / 4 };
            assert!(at_minimum >= bar, "{at_minimum} at the minimum of {min_judges}");
            let early = plan.decisions().iter().filter(|d| d.asked.len() < 8).count();
            assert!(early > j.n_examples() / 2, "{early} stopped before the last judge");
        }
    }

    /// A judge that fails on an example: the example asks the next judge, records the
    /// failed call (asked, not answered) and still settles.
    #[test]
    fn a_failing_judge_passes_the_example_to_the_next() {
        let sim = good_jury(9);
        let j = &sim.judgments;
        let cfg = AdaptiveConfig::default();
        let order = JudgeOrder::Given((0..8).rev().collect());
        let plan = drive(j, &cfg, order, &|judge, e| judge == 7 && e % 2 == 0);
        let warm = plan.decisions().iter().filter(|d| d.stop == Some(AdaptiveStop::WarmUp)).count();
        assert_eq!(warm, plan.warmup_examples());
        for (e, d) in plan.decisions().iter().enumerate() {
            if d.stop == Some(AdaptiveStop::WarmUp) || e % 2 == 1 {
                continue;
            }
            assert_eq!(d.asked[0], 7, "{d:?}");
            assert!(d.answered < d.asked.len(), "the failed call is not counted as answered: {d:?}");
            assert!(d.stop.is_some());
        }
    }

    /// The answers may arrive in any order within a round: the plan is the same.
    #[test]
    fn the_plan_depends_on_the_answers_not_their_arrival() {
        let sim = good_jury(11);
        let j = &sim.judgments;
        let a = drive(j, &AdaptiveConfig::default(), JudgeOrder::ByCost(vec![1.0; 8]), &|_, _| false);
        let b = drive(j, &AdaptiveConfig::default(), JudgeOrder::ByCost(vec![1.0; 8]), &|_, _| false);
        assert_eq!(a.decisions(), b.decisions());
        // The order puts the cheaper judges first whatever their skill.
        let costs: Vec<f64> = (0..8).map(|k| if k == 0 { 1.0 } else { 5.0 }).collect();
        let c = drive(j, &AdaptiveConfig::default(), JudgeOrder::ByCost(costs), &|_, _| false);
        assert_eq!(c.order()[0], 0);
        assert_eq!(a.order()[0], 7, "the most accurate simulated judge first: {:?}", a.order());
    }

    /// In the steady state several judges are asked in the same round: the wavefront.
    #[test]
    fn judges_work_side_by_side() {
        let sim = good_jury(13);
        let j = &sim.judgments;
        let cfg = AdaptiveConfig { target: 0.999, ..AdaptiveConfig::default() };
        let mut plan =
            AdaptivePlan::new(j.n_examples(), j.judge_names().to_vec(), 2, &cfg, JudgeOrder::ByCost(vec![1.0; 8]))
                .unwrap();
        let mut busiest = 0;
        while let Some(asks) = plan.round().unwrap() {
            busiest = busiest.max(asks.iter().filter(|a| !a.is_empty()).count());
            plan.answer(&recorded(j, &asks, &|_, _| false)).unwrap();
        }
        assert!(busiest >= 4, "at most {busiest} judges busy in a round");
    }

    /// A warm-up share covering the whole data set, and a one-example data set: every
    /// judge answers everything once, and nothing else is asked.
    #[test]
    fn a_warm_up_as_large_as_the_data_set() {
        let sim = simulate(&JuryConfig::mixed_binary(30, 2)).unwrap();
        let j = &sim.judgments;
        let r = replay_adaptive(j, &AdaptiveConfig { warmup: 1.0, ..AdaptiveConfig::default() }, equal(j)).unwrap();
        assert_eq!((r.calls, r.rounds), (r.full_calls, 1));
        let one = AdaptivePlan::new(
            1,
            vec!["a".into(), "b".into()],
            2,
            &AdaptiveConfig::default(),
            JudgeOrder::ByCost(vec![1.0; 2]),
        );
        let mut one = one.unwrap();
        assert_eq!(one.round().unwrap(), Some(vec![vec![0], vec![0]]));
        one.answer(&[vec![Some(vec![0.2, 0.8])], vec![None]]).unwrap();
        assert_eq!(one.round().unwrap(), None);
        assert_eq!(one.decisions()[0].stop, Some(AdaptiveStop::WarmUp));
    }

    #[test]
    fn bad_settings_are_refused_with_one_line() {
        let sim = simulate(&JuryConfig::mixed_binary(50, 1)).unwrap();
        for cfg in [
            AdaptiveConfig { target: 0.0, ..AdaptiveConfig::default() },
            AdaptiveConfig { warmup: 1.5, ..AdaptiveConfig::default() },
            AdaptiveConfig { min_judges: 0, ..AdaptiveConfig::default() },
        ] {
            let e = replay_adaptive(&sim.judgments, &cfg, equal(&sim.judgments)).unwrap_err().to_string();
            assert!(e.contains("adaptive") && !e.contains('\n'), "{e}");
        }
        for costs in [vec![1.0], vec![1.0, 0.0], vec![1.0, f64::NAN]] {
            let names = vec!["a".into(), "b".into()];
            let e = AdaptivePlan::new(3, names, 2, &AdaptiveConfig::default(), JudgeOrder::ByCost(costs));
            assert!(e.unwrap_err().to_string().contains("positive number"));
        }
        let mut plan =
            AdaptivePlan::new(3, vec!["a".into()], 2, &AdaptiveConfig::default(), JudgeOrder::Given(vec![0])).unwrap();
        assert!(plan.answer(&[vec![]]).is_err(), "answers before a round");
        plan.round().unwrap();
        let e = plan.answer(&[vec![]]).unwrap_err().to_string();
        assert!(e.contains("do not match"), "{e}");
        assert!(
            AdaptivePlan::new(3, vec!["a".into()], 2, &AdaptiveConfig::default(), JudgeOrder::Given(vec![1])).is_err()
        );
    }
}
