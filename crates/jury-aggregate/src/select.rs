//! Chooses a jury's method from the jury alone: every candidate is fitted with one judge
//! held out, and scored by how well its labels predict that judge's votes.
//!
//! Why this ranks methods by accuracy without labels: when the held-out judge is
//! independent of the others given the truth, its votes depend on a labelling fitted on
//! the others only through the truth, so the labelling closer to the truth predicts them
//! better (data processing). The assumption fails for near-copies: a model that follows a
//! family of copies predicts each member from the rest. So a judge is held out together
//! with every judge that agrees with it more than either agrees with the majority of the
//! others (under independence given the truth two judges agree less with each other than
//! with a majority more accurate than both). The judge's votes are predicted through its
//! own confusion matrix fitted on the held-out fold (smoothed by half a count per cell),
//! so a method is not judged by its calibration, only by what its labels tell.
//!
//! The criterion is an estimate with noise, so a reference model (Dawid-Skene, the
//! classical model of a crowd) stays unless another candidate beats it by at least
//! [`MIN_GAIN_SE`] standard errors of the difference (examples as the independent
//! units): a gap within the noise is no reason to leave it.
//!
//! A labelling with every example in one class predicts a held-out judge only through
//! that judge's own rate of each vote: its score is the criterion's floor, what knowing
//! nothing scores (a one-class labelling of any method scores it too). A candidate must
//! clear the floor by the same margin to be chosen. The floor stands for the fallback, a
//! method without a fit (AverageProb on scores, majority vote on verdicts), and is left
//! for like any candidate: when it beats the reference by the margin, the reference's
//! labels predict the judges worse than knowing nothing (the demo's three judges, two at
//! chance: Dawid-Skene 10 standard errors below it) and the fallback is recommended,
//! unless a candidate clears both. A reference between the two margins stays: too little
//! evidence either way is no reason to leave it (TempoWiC's twelve zero-shot LLMs:
//! Dawid-Skene 1.8 standard errors above the floor, 61.9% accurate, majority vote 51.5%).

use jury_core::Judgments;
use rand::SeedableRng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;

use crate::{AggregateError, Aggregator, MAX_CORRELATED_JUDGES};

/// The settings of the held-out-judge criterion.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeldOutJudges {
    /// The criterion reads at most this many examples, a seeded draw; the chosen method
    /// then fits on all of them.
    pub max_examples: usize,
    pub seed: u64,
}

impl Default for HeldOutJudges {
    fn default() -> Self {
        Self { max_examples: 3000, seed: 0 }
    }
}

/// The most judges held out, those with the most votes among the examples read (the
/// others still vote in every fit): the choice costs at most this many fits of each
/// candidate.
pub const MAX_FOLDS: usize = 40;

/// How many standard errors a candidate's score must exceed the reference's by to
/// displace it: a one-sided test at about 2%, the conventional line between a difference
/// and noise.
pub const MIN_GAIN_SE: f64 = 2.0;

/// Why the chosen method was chosen.
#[derive(Debug, Clone, PartialEq)]
pub enum SelectionRule {
    /// The reference, or the best-scoring candidate whose gain over it is at least
    /// [`MIN_GAIN_SE`] standard errors, over `folds` held-out judges (each with its
    /// near-copies) on `examples` examples.
    HeldOutJudges { folds: usize, examples: usize },
    /// No judge could be held out with two left to fit on (fewer than three judges, or
    /// every judge a copy of the rest): the reference.
    TooFewJudges,
    /// More than [`MAX_CORRELATED_JUDGES`] judges: a sparse crowd, whose judges share too
    /// few examples to predict one from the others (and whose families would need
    /// judges x judges counts): the reference.
    TooManyJudges,
    /// The floor predicted the held-out judges better than the reference by
    /// [`MIN_GAIN_SE`] standard errors, and no candidate cleared both: the fallback.
    NoSignal { folds: usize, examples: usize },
}

/// One candidate's result under the criterion.
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateScore {
    pub name: &'static str,
    /// The mean log-likelihood per held-out vote (mean over held-out judges of the mean
    /// over their votes); `None` where the candidate could not fit these judgments.
    pub score: Option<f64>,
    /// The score's gain over the reference's in standard errors (0 for the reference).
    pub gain_se: Option<f64>,
}

/// A choice among candidate methods and the criterion's values.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// Every candidate, in the order given.
    pub scores: Vec<CandidateScore>,
    /// The positions of the chosen candidate and of the reference.
    pub chosen: usize,
    pub reference: usize,
    pub rule: SelectionRule,
    /// The score of a one-class labelling, and the reference's gain over it in standard
    /// errors; `None` where nothing was scored.
    pub floor: Option<Floor>,
}

/// What knowing nothing scores under the criterion (a one-class labelling), and how far
/// the reference is above it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Floor {
    pub score: f64,
    pub reference_gain_se: f64,
}

impl Selection {
    pub fn chosen_name(&self) -> &'static str {
        self.scores[self.chosen].name
    }
}

impl HeldOutJudges {
    /// Scores `candidates` on `j` and chooses: `candidates[reference]` unless the
    /// best-scoring other candidate beats it and the floor by [`MIN_GAIN_SE`] standard
    /// errors (ties of the score go to the earlier candidate); `candidates[fallback]`
    /// instead of the reference when the floor beats the reference by that margin. A candidate
    /// whose settings cannot fit these judgments (classes, judges) is left out; any
    /// other error is returned.
    pub fn choose(
        &self,
        j: &Judgments,
        candidates: &[&dyn Aggregator],
        reference: usize,
        fallback: usize,
    ) -> Result<Selection, AggregateError> {
        if reference >= candidates.len() || fallback >= candidates.len() {
            return Err(AggregateError::Config {
                method: "recommended",
                reason: "no reference or fallback candidate".into(),
            });
        }
        if j.n_examples() == 0 {
            return Err(AggregateError::Empty { method: "recommended" });
        }
        let name = |i: usize| candidates[i].name();
        let unscored = |rule| {
            let scores = (0..candidates.len()).map(|i| CandidateScore { name: name(i), score: None, gain_se: None });
            Selection { scores: scores.collect(), chosen: reference, reference, rule, floor: None }
        };
        if j.n_judges() > MAX_CORRELATED_JUDGES {
            return Ok(unscored(SelectionRule::TooManyJudges));
        }
        let rows = self.rows(j);
        let votes = Votes::read(j, &rows);
        let families = votes.families();
        let mut held_out: Vec<usize> = (0..j.n_judges()).collect();
        held_out.sort_by_cached_key(|&k| std::cmp::Reverse(votes.count(k)));
        held_out.truncate(MAX_FOLDS);
        held_out.sort_unstable();
        // Folds run on every core, each fold's scores kept in fold order, so the sums
        // (and the choice) do not depend on the number of threads.
        let per_fold = on_threads(held_out.len(), |fold| {
            let held = held_out[fold];
            let keep: Vec<bool> = families[held].iter().map(|&in_family| !in_family).collect();
            if keep.iter().filter(|&&k| k).count() < 2 || votes.count(held) == 0 {
                return Ok(None);
            }
            let (sub, position) = j.restrict(&rows, &keep);
            let mut fold = Vec::with_capacity(candidates.len() + 1);
            for candidate in candidates {
                fold.push(match candidate.aggregate(&sub) {
                    Ok(a) => votes.predictive(held, a.labels(), &position, j.n_classes()),
                    Err(AggregateError::Config { .. } | AggregateError::Empty { .. }) => None,
                    Err(e) => return Err(e),
                });
            }
            // The floor rides last: one class for every example.
            fold.push(votes.predictive(held, &vec![0; position.len()], &position, j.n_classes()));
            // A fold counts when the reference scored on it.
            Ok(fold[reference].is_some().then_some(fold))
        })?;
        // Per candidate and example: the sum over folds of its log-likelihood there
        // divided by the fold's number of votes; `None` once a candidate failed a fold.
        let n = rows.len();
        let mut by_example: Vec<Option<Vec<f64>>> = vec![Some(vec![0.0; n]); candidates.len() + 1];
        let mut folds = 0;
        for fold in per_fold.into_iter().flatten() {
            folds += 1;
            for (acc, fit) in by_example.iter_mut().zip(fold) {
                match (acc.as_mut(), fit) {
                    (Some(acc), Some(per_vote)) => {
                        let count = per_vote.len() as f64;
                        per_vote.into_iter().for_each(|(row, l)| acc[row] += l / count);
                    }
                    _ => *acc = None,
                }
            }
        }
        if folds == 0 {
            return Ok(unscored(SelectionRule::TooFewJudges));
        }
        let floor = by_example.pop().flatten().unwrap_or_default();
        let base = by_example[reference].clone().unwrap_or_default();
        let score = |c: &[f64]| c.iter().sum::<f64>() / folds as f64;
        let scores: Vec<CandidateScore> = by_example
            .iter()
            .enumerate()
            .map(|(i, c)| match c {
                Some(c) => CandidateScore {
                    name: name(i),
                    score: Some(score(c)),
                    gain_se: Some(if i == reference { 0.0 } else { gain_se(c, &base, folds) }),
                },
                None => CandidateScore { name: name(i), score: None, gain_se: None },
            })
            .collect();
        let over_floor_se: Vec<Option<f64>> =
            by_example.iter().map(|c| c.as_ref().map(|c| gain_se(c, &floor, folds))).collect();
        let over_floor: Vec<bool> = over_floor_se.iter().map(|z| z.is_some_and(|z| z >= MIN_GAIN_SE)).collect();
        let best = scores
            .iter()
            .enumerate()
            .filter(|(i, c)| over_floor[*i] && c.gain_se.is_some_and(|z| z >= MIN_GAIN_SE))
            .filter_map(|(i, c)| c.score.map(|s| (i, s)))
            .fold(None, |best: Option<(usize, f64)>, (i, s)| match best {
                Some((_, b)) if b >= s => best,
                _ => Some((i, s)),
            });
        let (chosen, rule) = match best {
            Some((i, _)) => (i, SelectionRule::HeldOutJudges { folds, examples: n }),
            // The fallback is left for like any candidate: the floor (what it stands for)
            // must beat the reference by the same margin.
            None if over_floor_se[reference].is_some_and(|z| z <= -MIN_GAIN_SE) => {
                (fallback, SelectionRule::NoSignal { folds, examples: n })
            }
            None => (reference, SelectionRule::HeldOutJudges { folds, examples: n }),
        };
        let floor = Floor { score: score(&floor), reference_gain_se: over_floor_se[reference].unwrap_or(0.0) };
        Ok(Selection { scores, chosen, reference, rule, floor: Some(floor) })
    }

    /// The examples the criterion reads, increasing: all, or a seeded draw of
    /// `max_examples`.
    fn rows(&self, j: &Judgments) -> Vec<usize> {
        let n = j.n_examples();
        if n <= self.max_examples {
            return (0..n).collect();
        }
        let mut rows = sample(&mut ChaCha8Rng::seed_from_u64(self.seed), n, self.max_examples.max(1)).into_vec();
        rows.sort_unstable();
        rows
    }
}

/// How many standard errors `c`'s score is above `base`'s: per-example sums over `folds`
/// folds, examples as the independent units; 0 where the two never differ.
fn gain_se(c: &[f64], base: &[f64], folds: usize) -> f64 {
    let n = c.len();
    let gain: Vec<f64> = c.iter().zip(base).map(|(a, b)| a - b).collect();
    let mean = gain.iter().sum::<f64>() / n.max(1) as f64;
    let var = gain.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (n.max(2) - 1) as f64;
    let se = (n as f64 * var).sqrt() / folds as f64;
    let diff = mean * n as f64 / folds as f64;
    if se > 0.0 { diff / se } else { 0.0 }
}

/// `f(0..n)` on every available core, results in index order; the first error (in index
/// order) wins.
fn on_threads<T: Send>(
    n: usize,
    f: impl Fn(usize) -> Result<T, AggregateError> + Sync,
) -> Result<Vec<T>, AggregateError> {
    jury_core::on_threads(n, f).into_iter().collect()
}

/// Whether most of the jury's entries are scores rather than verdicts: a probability
/// strictly between 0 and 1 from a judge whose probabilities take at least three values.
/// The log-odds models (care, gauss, care-gauss) need them; a verdict's log-odds is a
/// constant (clipped at 0 and 1, or a fixed confidence such as 0.2 and 0.8).
pub fn scores_are_soft(j: &Judgments) -> bool {
    let mut seen: Vec<Vec<&[f64]>> = vec![Vec::new(); j.n_judges()];
    for (_, k, p) in j.entries() {
        if seen[k].len() < 3 && !seen[k].contains(&p) {
            seen[k].push(p);
        }
    }
    let soft = j.entries().filter(|(_, k, p)| seen[*k].len() >= 3 && p.iter().any(|&x| x > 0.0 && x < 1.0)).count();
    2 * soft > j.n_present()
}

/// The hard votes of the examples the criterion reads: `votes[row][judge]`, `None` where
/// the judge is missing or its top class is tied.
struct Votes {
    votes: Vec<Vec<Option<usize>>>,
    n_judges: usize,
    n_classes: usize,
}

impl Votes {
    fn read(j: &Judgments, rows: &[usize]) -> Self {
        let votes = rows
            .iter()
            .map(|&n| {
                let mut row = vec![None; j.n_judges()];
                for (k, p) in j.row(n) {
                    row[k] = strict_argmax(p);
                }
                row
            })
            .collect();
        Self { votes, n_judges: j.n_judges(), n_classes: j.n_classes() }
    }

    fn count(&self, k: usize) -> usize {
        self.votes.iter().filter(|r| r[k].is_some()).count()
    }

    /// Each judge's family: itself and every judge that agrees with it more than either
    /// agrees with the majority vote of the judges other than itself.
    fn families(&self) -> Vec<Vec<bool>> {
        let (jn, c) = (self.n_judges, self.n_classes);
        let mut with_majority = vec![(0usize, 0usize); jn];
        let mut pairs = vec![(0usize, 0usize); jn * jn];
        let mut counts = vec![0usize; c];
        for row in &self.votes {
            counts.fill(0);
            row.iter().flatten().for_each(|&v| counts[v] += 1);
            for (a, va) in row.iter().enumerate() {
                let Some(va) = *va else { continue };
                counts[va] -= 1;
                if let Some(m) = strict_argmax_counts(&counts) {
                    with_majority[a].0 += usize::from(m == va);
                    with_majority[a].1 += 1;
                }
                counts[va] += 1;
                for (b, vb) in row.iter().enumerate().skip(a + 1) {
                    if let Some(vb) = *vb {
                        let p = &mut pairs[a * jn + b];
                        p.0 += usize::from(va == vb);
                        p.1 += 1;
                    }
                }
            }
        }
        let rate = |(agree, n): (usize, usize)| if n == 0 { 0.0 } else { agree as f64 / n as f64 };
        (0..jn)
            .map(|a| {
                (0..jn)
                    .map(|b| {
                        let pair = pairs[a.min(b) * jn + a.max(b)];
                        a == b || (pair.1 > 0 && rate(pair) > rate(with_majority[a]).max(rate(with_majority[b])))
                    })
                    .collect()
            })
            .collect()
    }

    /// The log-likelihood of each of judge `k`'s votes given `labels` (of the rows at
    /// `position`), as (row, value), through `k`'s confusion matrix fitted on them with
    /// half a count per cell; `None` when `k` voted on none of them.
    fn predictive(&self, k: usize, labels: &[usize], position: &[usize], c: usize) -> Option<Vec<(usize, f64)>> {
        let mut counts = vec![0.5; c * c];
        let mut pairs = Vec::with_capacity(labels.len());
        for (&l, &row) in labels.iter().zip(position) {
            if let Some(v) = self.votes[row][k] {
                counts[l * c + v] += 1.0;
                pairs.push((row, l, v));
            }
        }
        if pairs.is_empty() {
            return None;
        }
        let totals: Vec<f64> = counts.chunks_exact(c).map(|r| r.iter().sum()).collect();
        Some(pairs.into_iter().map(|(row, l, v)| (row, (counts[l * c + v] / totals[l]).ln())).collect())
    }
}

/// The index of the largest entry when it is unique.
fn strict_argmax(p: &[f64]) -> Option<usize> {
    let top = p.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut at = p.iter().enumerate().filter(|&(_, &x)| x == top).map(|(i, _)| i);
    let first = at.next()?;
    at.next().is_none().then_some(first)
}

fn strict_argmax_counts(c: &[usize]) -> Option<usize> {
    let top = *c.iter().max()?;
    if top == 0 {
        return None;
    }
    let mut at = c.iter().enumerate().filter(|&(_, &x)| x == top).map(|(i, _)| i);
    let first = at.next()?;
    at.next().is_none().then_some(first)
}

#[cfg(test)]
mod tests {
    use rand::Rng;

    use super::*;
    use crate::{
        AverageProb, DawidSkene, DawidSkeneConfig, Glad, MajorityVote, Mmsr, OneCoinDawidSkene, TieBreak, Wawa,
    };

    /// A hard binary jury with known truth: judge `k` copies the vote of judge
    /// `copies[k]` (when given) with probability 0.97 and otherwise votes right with
    /// probability `accuracy[k]`.
    fn jury(n: usize, accuracy: &[f64], copies: &[Option<usize>], seed: u64) -> (Judgments, Vec<usize>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let truth: Vec<usize> = (0..n).map(|_| usize::from(rng.random::<f64>() < 0.3)).collect();
        let mut entries = Vec::new();
        for &y in &truth {
            let mut row: Vec<usize> = Vec::new();
            for (k, &a) in accuracy.iter().enumerate() {
                let own = if rng.random::<f64>() < a { y } else { 1 - y };
                let v = match copies[k] {
                    Some(c) if rng.random::<f64>() < 0.97 => row[c],
                    _ => own,
                };
                row.push(v);
                entries.push(Some(if v == 1 { vec![0.0, 1.0] } else { vec![1.0, 0.0] }));
            }
        }
        let ids = (0..n).map(|i| format!("e{i}")).collect();
        let names = (0..accuracy.len()).map(|k| format!("j{k}")).collect();
        (Judgments::from_entries(ids, names, 2, entries).unwrap(), truth)
    }

    fn candidates() -> Vec<Box<dyn Aggregator>> {
        let t = TieBreak::Positive;
        vec![
            Box::new(AverageProb { ties: t }),
            Box::new(MajorityVote { ties: t }),
            Box::new(Wawa { ties: t }),
            Box::new(OneCoinDawidSkene::new(t)),
            Box::new(Mmsr::new(t)),
            Box::new(Glad::new(t)),
            Box::new(DawidSkene::new(DawidSkeneConfig::default())),
        ]
    }

    fn accuracy(a: &dyn Aggregator, j: &Judgments, truth: &[usize]) -> f64 {
        let labels = a.aggregate(j).unwrap().labels().to_vec();
        labels.iter().zip(truth).filter(|(l, t)| l == t).count() as f64 / truth.len() as f64
    }

    fn choose(j: &Judgments) -> (Selection, Vec<Box<dyn Aggregator>>) {
        let c = candidates();
        let refs: Vec<&dyn Aggregator> = c.iter().map(|b| b.as_ref()).collect();
        let reference = refs.iter().position(|a| a.name() == "ds").unwrap();
        let fallback = refs.iter().position(|a| a.name() == "mv").unwrap();
        (HeldOutJudges::default().choose(j, &refs, reference, fallback).unwrap(), c)
    }

    /// Six near-copies of one mediocre judge and nine better independent judges:
    /// Dawid-Skene takes the copies' shared votes for the truth; the choice must not, and
    /// lands within a point of the best candidate.
    #[test]
    fn near_copies_do_not_win_by_predicting_each_other() {
        let mut skill = vec![0.62; 6];
        skill.extend([0.72, 0.75, 0.78, 0.8, 0.82, 0.74, 0.77, 0.7, 0.76]);
        let mut copies = vec![None];
        copies.extend(std::iter::repeat_n(Some(0), 5));
        copies.extend([None; 9]);
        let (j, truth) = jury(1500, &skill, &copies, 1);
        let (s, c) = choose(&j);
        let acc: Vec<f64> = c.iter().map(|a| accuracy(a.as_ref(), &j, &truth)).collect();
        let best = acc.iter().copied().fold(0.0, f64::max);
        let ds = acc[s.reference];
        assert!(ds < best - 0.05, "the test needs Dawid-Skene to follow the copies: {acc:?}");
        assert_ne!(s.chosen, s.reference, "{acc:?} {s:?}");
        assert!(acc[s.chosen] >= best - 0.01, "chose {} at {} of best {best}: {acc:?}", s.chosen_name(), acc[s.chosen]);
        let families = Votes::read(&j, &(0..j.n_examples()).collect::<Vec<_>>()).families();
        assert!(families[3][..6].iter().all(|&f| f), "a copy is held out with the other copies");
        assert!(!families[3][6..].iter().any(|&f| f), "and without the independent judges");
    }

    /// A crowd of more judges than [`MAX_FOLDS`] holds out only the most active ones.
    #[test]
    fn a_large_crowd_holds_out_its_most_active_judges() {
        let skill: Vec<f64> = (0..60).map(|k| 0.6 + 0.005 * k as f64).collect();
        let (full, _) = jury(200, &skill, &[None; 60], 6);
        // Judge k keeps its first 100 + k examples.
        let (mut b, n) = (jury_core::JudgmentsBuilder::new(2).unwrap(), full.n_examples());
        for e in 0..n {
            for (k, p) in full.row(e) {
                if e < 100 + k {
                    b.push_slice(&full.example_ids()[e], &full.judge_names()[k], Some(p)).unwrap();
                }
            }
        }
        let j = b.build();
        let (s, _) = choose(&j);
        assert!(matches!(s.rule, SelectionRule::HeldOutJudges { folds: MAX_FOLDS, .. }), "{s:?}");
    }

    /// Judges independent given the truth: Dawid-Skene's model holds, so it stays, or the
    /// choice labels as it does.
    #[test]
    fn independent_judges_keep_the_reference() {
        let skill = [0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.7];
        let (j, truth) = jury(2000, &skill, &[None; 7], 2);
        let (s, c) = choose(&j);
        let chosen = accuracy_of(&c, s.chosen, &j, &truth);
        let ds = accuracy_of(&c, s.reference, &j, &truth);
        assert!(chosen >= ds - 0.005, "{} {chosen} against ds {ds}: {s:?}", s.chosen_name());
        assert!(matches!(s.rule, SelectionRule::HeldOutJudges { folds: 7, examples: 2000 }), "{s:?}");
    }

    fn accuracy_of(c: &[Box<dyn Aggregator>], i: usize, j: &Judgments, truth: &[usize]) -> f64 {
        accuracy(c[i].as_ref(), j, truth)
    }

    #[test]
    fn two_judges_leave_nothing_to_hold_out_so_the_reference_stays() {
        let (j, _) = jury(300, &[0.7, 0.8], &[None, None], 3);
        let (s, _) = choose(&j);
        assert_eq!((s.rule, s.chosen), (SelectionRule::TooFewJudges, s.reference));
        assert!(s.scores.iter().all(|c| c.score.is_none()));
    }

    /// Judges at chance share no signal: every labelling predicts a held-out judge about
    /// as well as one class for all examples does, so the reference neither clears the
    /// floor nor falls below it by the margin; no candidate is chosen over it, and it is
    /// not a one-class labelling.
    #[test]
    fn judges_at_chance_keep_the_reference() {
        let (j, _) = jury(200, &[0.5; 6], &[None; 6], 5);
        let (s, c) = choose(&j);
        let floor = s.floor.unwrap_or_else(|| panic!("{:?}", s.rule));
        assert!(floor.reference_gain_se.abs() < MIN_GAIN_SE, "{floor:?}");
        assert_eq!(s.chosen_name(), "ds", "{floor:?}");
        assert!(matches!(s.rule, SelectionRule::HeldOutJudges { examples: 200, .. }), "{:?}", s.rule);
        let labels = c[s.chosen].aggregate(&j).unwrap().labels().to_vec();
        assert!(labels.contains(&0) && labels.contains(&1), "{labels:?}");
    }

    /// The demo's shape: 40 examples, one judge voting yes on all, one at chance, one
    /// right 29 times in 40.
    fn demo_like(seed: u64) -> Judgments {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut entries = Vec::new();
        for i in 0..40 {
            let y = i % 2;
            let chance = usize::from(rng.random::<f64>() < 0.5);
            let good = if rng.random::<f64>() < 0.725 { y } else { 1 - y };
            for v in [1, chance, good] {
                entries.push(Some(if v == 1 { vec![0.0, 1.0] } else { vec![1.0, 0.0] }));
            }
        }
        let ids = (0..40).map(|i| format!("e{i}")).collect();
        let names = (0..3).map(|k| format!("j{k}")).collect();
        Judgments::from_entries(ids, names, 2, entries).unwrap()
    }

    /// The fallback is left for like any candidate: where Dawid-Skene's labels predict the
    /// held-out judges worse than one class does by the margin (the demo's shape), the
    /// fallback; where the reference is within the margin of the floor (judges near
    /// chance), the reference stays.
    #[test]
    fn the_fallback_needs_the_floor_to_beat_the_reference() {
        let demo = demo_like(3);
        let (s, c) = choose(&demo);
        let z = s.floor.map_or(f64::NAN, |f| f.reference_gain_se);
        assert!(z <= -MIN_GAIN_SE, "{z}");
        assert!(matches!(s.rule, SelectionRule::NoSignal { examples: 40, .. }), "{:?}", s.rule);
        let labels = c[s.chosen].aggregate(&demo).unwrap().labels().to_vec();
        assert_eq!(s.chosen_name(), "mv");
        assert!(labels.contains(&0) && labels.contains(&1), "{labels:?}");
        for (seed, accuracy) in [(8, 0.55), (7, 0.52)] {
            let (j, _) = jury(200, &[accuracy; 6], &[None; 6], seed);
            let (s, _) = choose(&j);
            let z = s.floor.map_or(f64::NAN, |f| f.reference_gain_se);
            assert!(z.abs() < MIN_GAIN_SE, "{seed}: {z}");
            assert_eq!(s.chosen, s.reference, "{seed}: {:?}", s.rule);
        }
    }

    /// A labelling with one class scores the floor exactly, whichever class.
    #[test]
    fn one_class_scores_the_floor() {
        let (j, _) = jury(1000, &[0.8, 0.75, 0.7, 0.85], &[None; 4], 6);
        let rows: Vec<usize> = (0..1000).collect();
        let votes = Votes::read(&j, &rows);
        let sum =
            |labels: &[usize]| -> f64 { votes.predictive(2, labels, &rows, 2).unwrap().iter().map(|(_, l)| l).sum() };
        assert_eq!(sum(&[0; 1000]), sum(&[1; 1000]));
        let informative: Vec<usize> = (0..1000).map(|n| usize::from(j.row(n).next().unwrap().1[1] > 0.5)).collect();
        assert!(sum(&informative) > sum(&[0; 1000]) + 5.0);
    }

    /// The criterion reads a seeded draw of examples: the same seed gives the same
    /// scores, and a jury under the cap is read whole.
    #[test]
    fn the_draw_of_examples_is_seeded() {
        let (j, _) = jury(900, &[0.6, 0.7, 0.8, 0.75], &[None; 4], 4);
        let c = candidates();
        let refs: Vec<&dyn Aggregator> = c.iter().map(|b| b.as_ref()).collect();
        let pick = |seed| HeldOutJudges { max_examples: 500, seed }.choose(&j, &refs, 6, 1).unwrap();
        assert_eq!(pick(7), pick(7));
        assert!(matches!(pick(7).rule, SelectionRule::HeldOutJudges { examples: 500, .. }));
        let whole = HeldOutJudges::default().choose(&j, &refs, 6, 1).unwrap();
        assert!(matches!(whole.rule, SelectionRule::HeldOutJudges { examples: 900, .. }));
    }

    #[test]
    fn hard_verdicts_are_not_scores() {
        let (j, _) = jury(50, &[0.6, 0.7, 0.8], &[None; 3], 5);
        assert!(!scores_are_soft(&j));
        let soft = crate::testutil::binary(&[
            &[Some(0.3), Some(0.9)],
            &[Some(1.0), Some(0.6)],
            &[Some(0.2), Some(0.7)],
            &[Some(0.4), Some(0.1)],
        ]);
        assert!(scores_are_soft(&soft));
        // A fixed confidence is a verdict too: two values per judge.
        let fixed =
            crate::testutil::binary(&[&[Some(0.2), Some(0.8)], &[Some(0.8), Some(0.8)], &[Some(0.2), Some(0.2)]]);
        assert!(!scores_are_soft(&fixed));
    }
}
