//! The adaptive jury's stopping rule, replayed on a jury recorded with every judge: how
//! many judge calls a run would have made had it stopped asking judges once Dawid-Skene's
//! posterior of an example was settled, and which labels it would have ended with. Users
//! choose a big run's settings from a small full one.
//!
//! The replay pays for what a real run pays for: a warm-up share of the examples (drawn by
//! seed) that every judge answers, so the model is fitted before anything stops; the
//! model is refitted on the judgments revealed so far every `refit_every` examples; the
//! final labels come from a fit on the revealed judgments only.

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
    /// Judges asked on every example before it may stop.
    pub min_judges: usize,
    /// Share of the examples every judge answers first (at least one example).
    pub warmup: f64,
    /// Draws the warm-up and the order the other examples are asked in.
    pub seed: u64,
    /// Examples between refits of the model on the judgments revealed so far.
    pub refit_every: usize,
    pub ds: DawidSkeneConfig,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        Self { target: 0.95, min_judges: 2, warmup: 0.1, seed: 0, refit_every: 1000, ds: DawidSkeneConfig::default() }
    }
}

/// What the replay did.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveReplay {
    /// The final label of every example (the fit on the revealed judgments).
    pub labels: Vec<usize>,
    /// Judge calls made, the warm-up's included.
    pub calls: usize,
    /// Judge calls of the full jury (every judgment present in the recording).
    pub full_calls: usize,
    /// Calls per judge, in the matrix's judge order.
    pub calls_per_judge: Vec<usize>,
}

/// Replays the adaptive rule on `j`, a jury recorded with every judge (missing entries
/// are judges that would not have answered).
pub fn replay_adaptive(j: &Judgments, cfg: &AdaptiveConfig) -> Result<AdaptiveReplay, AggregateError> {
    let bad = |reason: String| AggregateError::Config { method: "adaptive", reason };
    let in_unit = |x: f64| x > 0.0 && x <= 1.0;
    if !in_unit(cfg.target) || !in_unit(cfg.warmup) {
        return Err(bad(format!("target and warmup must be in (0, 1] (got {} and {})", cfg.target, cfg.warmup)));
    }
    if cfg.min_judges == 0 || cfg.refit_every == 0 {
        return Err(bad("min_judges and refit_every must be at least 1".into()));
    }
    let (n, k) = (j.n_examples(), j.n_judges());
    if n == 0 {
        return Err(AggregateError::Empty { method: "adaptive" });
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(cfg.seed));
    let n_warm = ((cfg.warmup * n as f64).ceil() as usize).clamp(1, n);
    // One flag per entry, in `j.entries()` order.
    let mut revealed = vec![false; j.n_present()];
    for &e in &order[..n_warm] {
        revealed[j.entry_range(e)].fill(true);
    }
    let mut params = fit(j, &revealed, cfg)?;
    for (i, chunk) in order[n_warm..].chunks(cfg.refit_every).enumerate() {
        if i > 0 {
            params = fit(j, &revealed, cfg)?;
        }
        let ranking = judges_by_skill(&params);
        for &e in chunk {
            let row: Vec<(usize, usize)> = j.row(e).map(|(judge, p)| (judge, jury_core::argmax(p))).collect();
            let mut asked: Vec<(usize, usize)> = Vec::new();
            for &judge in &ranking {
                let Some(pos) = row.iter().position(|&(k, _)| k == judge) else { continue };
                revealed[j.entry_range(e).start + pos] = true;
                asked.push(row[pos]);
                if asked.len() >= cfg.min_judges && top_posterior(&params, &asked) >= cfg.target {
                    break;
                }
            }
        }
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
    })
}

/// The judgments revealed so far, every example and judge kept (in `j`'s order) so
/// indices stay aligned.
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

fn fit(j: &Judgments, revealed: &[bool], cfg: &AdaptiveConfig) -> Result<DsParams, AggregateError> {
    let sub = revealed_judgments(j, revealed)?;
    match DawidSkene::new(cfg.ds).aggregate(&sub)?.diagnostics() {
        Diagnostics::DawidSkene(report) => Ok(report.params.clone()),
        _ => unreachable!("Dawid-Skene reports its EM run"),
    }
}

/// Judges from the most to the least accurate under the model (expected accuracy: the
/// confusion matrix's diagonal weighed by the class prior); ties by index.
fn judges_by_skill(params: &DsParams) -> Vec<usize> {
    let skill: Vec<f64> = params
        .confusion
        .iter()
        .map(|m| params.class_prior.iter().enumerate().map(|(c, p)| p * m.get(c, c)).sum())
        .collect();
    let mut ranking: Vec<usize> = (0..skill.len()).collect();
    ranking.sort_by(|&a, &b| skill[b].total_cmp(&skill[a]).then(a.cmp(&b)));
    ranking
}

/// The top class's posterior of one example from the (judge, vote) pairs asked so far.
fn top_posterior(params: &DsParams, asked: &[(usize, usize)]) -> f64 {
    let log: Vec<f64> = (0..params.class_prior.len())
        .map(|c| {
            params.class_prior[c].ln() + asked.iter().map(|&(k, v)| params.confusion[k].get(c, v).ln()).sum::<f64>()
        })
        .collect();
    let max = log.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        return 0.0;
    }
    let total: f64 = log.iter().map(|l| (l - max).exp()).sum();
    1.0 / total
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

    /// On a simulated jury with known truth the adaptive labels stay within a point
    /// of the full jury's with under half of the calls; a target of 1 asks every judge
    /// outside the warm-up too, and the same seed replays the same calls.
    #[test]
    fn saves_calls_and_keeps_the_full_jurys_accuracy() {
        let sim = good_jury(3);
        let j = &sim.judgments;
        let full = DawidSkene::default().aggregate(j).unwrap();
        let full_acc = accuracy(full.labels(), &sim.truth);
        let r = replay_adaptive(j, &AdaptiveConfig::default()).unwrap();
        let acc = accuracy(&r.labels, &sim.truth);
        assert!(r.calls < r.full_calls / 2, "{} of {} calls", r.calls, r.full_calls);
        assert!(acc > full_acc - 0.01, "adaptive {acc} full {full_acc}");
        assert_eq!(r.calls_per_judge.iter().sum::<usize>(), r.calls);
        assert_eq!(r, replay_adaptive(j, &AdaptiveConfig::default()).unwrap());
        let all = replay_adaptive(j, &AdaptiveConfig { target: 1.0, ..AdaptiveConfig::default() }).unwrap();
        assert!(all.calls > r.calls && all.calls <= all.full_calls);
    }

    #[test]
    fn bad_settings_are_refused_with_one_line() {
        let sim = simulate(&JuryConfig::mixed_binary(50, 1)).unwrap();
        for cfg in [
            AdaptiveConfig { target: 0.0, ..AdaptiveConfig::default() },
            AdaptiveConfig { warmup: 1.5, ..AdaptiveConfig::default() },
            AdaptiveConfig { min_judges: 0, ..AdaptiveConfig::default() },
        ] {
            let e = replay_adaptive(&sim.judgments, &cfg).unwrap_err().to_string();
            assert!(e.contains("adaptive") && !e.contains('\n'), "{e}");
        }
    }
}
