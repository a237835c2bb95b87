//! The calibrated combination: a stack of six simple models of the label
//! ([`crate::members`]), fitted on the calibration labels with every unlabeled judgment
//! informing four of them.
//!
//! The stack's weights are a non-negative logistic regression on the six models' 5-fold
//! out-of-fold scores on the calibration labels (a super learner), ridged toward the
//! members' plain average: where 100 labels cannot tell the members apart the average
//! costs least, and the labels move the weights as far as they can. `lda`, `sparse` and
//! `exchangeable` set a coefficient per judge from the labels, so they join only when
//! every fit's labels outnumber those coefficients (the judges plus an intercept): with
//! fewer, the labels fit any of many directions exactly. Every setting is
//! chosen inside the calibration set. Where a score has a threshold of its own (the
//! label-free posterior's one half, a judge's, a discriminant's centre, the members'
//! combined), the intercept the labels fit is shrunk toward it by positive-part
//! James-Stein: a threshold read off 100 labels moves with them by a standard error that
//! costs accuracy wherever examples crowd the threshold. The first four members and
//! `lda-shrunk`'s weight were chosen on HaluEval-10 and LLMBar; `sparse`, the thresholds'
//! shrinkage, `exchangeable` and the ridge toward the average came after the report
//! juries had been seen (docs/reproduction/calibration-choices.md says how).
//!
//! Before any of it: where every judge casts hard verdicts and every pair of judges agrees
//! as often as independence given the label-free classes predicts, over enough examples
//! to have seen a 5-point excess ([`crate::independence`]), the unlabeled data confirm the
//! label-free model, and the calibrated method is its posterior as it is: each member
//! fitted on a few labels is a noisier copy of it there (calibration.md, "Simulated
//! juries"). No real jury of that page passes the check. The votes confirm the model only
//! up to the names of its two classes, so the labels name them: the posterior, or its
//! complement where that is likelier on them.

use crate::Sample;
use crate::folds::{FOLDS, fold_of, pick, subset, weights};
use crate::log_odds::{LogOdds, sigmoid};
use crate::logistic::{LogisticFit, Prior, log_loss, logistic, shrink_intercept};
use crate::members::{Candidate, Linear, Setting};

/// The ridge of the stack's weights toward the members' plain average (`1 / members`
/// each, over the members that join), on the summed log-loss: it counts for less as
/// labels grow. 10 and 30 tied on the tuning juries; the smaller leaves the labels more
/// say.
const STACK_RIDGE: f64 = 10.0;

/// The calibrated combination fitted on one calibration sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibrated {
    model: Linear,
    /// Each candidate's weight in the stack, in [`Candidate::ALL`] order; `label-free` 1
    /// and the rest 0 where the label-free posterior is kept as it is
    /// ([`LogOdds::label_free_holds`]).
    pub stack: Vec<(Candidate, f64)>,
    /// Where the label-free posterior is kept: whether its classes are swapped.
    label_free: Option<bool>,
    /// The log-odds of class 1 of each labeled example (in the sample's order) from the
    /// members fitted without its fold, under stack weights fitted on rows that members
    /// fitted without it scored ([`FoldFits::stacked_apart`]): the verdicts' accuracy on
    /// labels nothing fitted ([`crate::verdict_accuracy`]): no fit behind a fold's scores
    /// saw its labels. Each fit on four fifths of the labels is a little worse than the
    /// one on all (coverage: docs/reproduction/calibration-held-out.md).
    out_of_fold: Vec<f64>,
}

impl Calibrated {
    /// Fits the stack on `sample` (seeded folds).
    pub fn fit(d: &LogOdds, sample: &Sample, seed: u64) -> Self {
        let y: Vec<f64> = sample.labels().iter().map(|&l| f64::from(l)).collect();
        Self::fit_rows(d, sample.index(), &y, &weights(sample), seed)
    }

    fn fit_rows(d: &LogOdds, rows: &[usize], y: &[f64], w: &[f64], seed: u64) -> Self {
        if d.label_free_holds {
            return Self::label_free(d, rows, labels_swap_label_free(d, rows, y, w));
        }
        let m = rows.len();
        let folds = fold_of(y, seed);
        let members = Candidate::ALL.len();
        // The fewest labels any of the member fits sees: a fold's training rows.
        let fewest = (0..FOLDS.min(m)).map(|f| folds.iter().filter(|&&g| g != f).count()).min().unwrap_or(0);
        let joins: Vec<bool> = Candidate::ALL.iter().map(|c| !c.per_judge() || fewest > d.k + 1).collect();
        let joined = joins.iter().filter(|&&j| j).count();
        // A member left out scores 0 everywhere and is ridged toward 0, so its weight is 0.
        let mut oof = vec![vec![0.0; members]; m];
        let mut settings = vec![vec![None; members]; FOLDS.min(m)];
        for (f, chosen) in settings.iter_mut().enumerate() {
            let train: Vec<usize> = (0..m).filter(|&r| folds[r] != f).collect();
            let (tr, ty, tw) = pick(rows, y, w, &train);
            for (c, cand) in Candidate::ALL.iter().enumerate().filter(|(c, _)| joins[*c]) {
                let (lin, setting) = cand.fit_at(d, &tr, &ty, &tw, seed, None);
                chosen[c] = setting;
                (0..m).filter(|&r| folds[r] == f).for_each(|r| oof[r][c] = lin.score(d, rows[r]).clamp(-30.0, 30.0));
            }
        }
        let centre = joins.iter().map(|&j| if j { 1.0 / joined as f64 } else { 0.0 }).collect();
        let prior = Prior::ridge(members, STACK_RIDGE, 1e-6).toward(centre);
        let (beta, bias) = stack_weights(&oof, y, w, &prior);
        let out_of_fold = FoldFits { folds, joins, settings, oof }.stacked_apart(d, rows, y, w, seed, &prior);
        let mut model = Linear { w: vec![0.0; d.k], label_free: 0.0, bias };
        let mut stack = Vec::with_capacity(members);
        for (c, cand) in Candidate::ALL.iter().enumerate() {
            if beta[c] > 0.0 {
                model.add_scaled(&cand.fit(d, rows, y, w, seed), beta[c]);
            }
            stack.push((*cand, beta[c]));
        }
        Calibrated { model, stack, label_free: None, out_of_fold }
    }

    /// The label-free posterior as it is, or with its classes swapped: where the unlabeled
    /// judgments confirm its model, each member a few labels fit is a noisier copy of it.
    /// Only the classes' names come from the labels (`rows`), so every labeled example's
    /// score is its own out-of-fold one.
    fn label_free(d: &LogOdds, rows: &[usize], swapped: bool) -> Self {
        let model = Linear { w: vec![0.0; d.k], label_free: if swapped { -1.0 } else { 1.0 }, bias: 0.0 };
        let stack = Candidate::ALL.iter().map(|&c| (c, if c == Candidate::LabelFree { 1.0 } else { 0.0 })).collect();
        let out_of_fold = rows.iter().map(|&i| model.score(d, i)).collect();
        Calibrated { model, stack, label_free: Some(swapped), out_of_fold }
    }

    /// Whether this is the label-free posterior itself (its classes perhaps swapped), not
    /// the stack.
    pub fn label_free_kept(&self) -> bool {
        self.label_free.is_some()
    }

    /// Whether the labels named the label-free posterior's classes the other way round, so
    /// that this is its complement.
    pub fn label_free_swapped(&self) -> bool {
        self.label_free == Some(true)
    }

    /// The probability of class 1 for example `i`.
    pub fn probability(&self, d: &LogOdds, i: usize) -> f64 {
        sigmoid(self.model.score(d, i))
    }

    /// The probability of class 1 for every example.
    pub fn probabilities(&self, d: &LogOdds) -> Vec<f64> {
        (0..d.n).map(|i| self.probability(d, i)).collect()
    }

    /// Each labeled example's log-odds of class 1 from members that did not see its label
    /// (in the sample's order).
    pub(crate) fn out_of_fold(&self) -> &[f64] {
        &self.out_of_fold
    }
}

/// What the stack keeps of its fits without each fold: each labeled row's fold, which
/// members join, the settings each fold's fits chose ([`Candidate::fit_at`]) and
/// each row's scores from the members fitted without its fold.
struct FoldFits {
    folds: Vec<usize>,
    joins: Vec<bool>,
    /// Per fold, per member.
    settings: Vec<Vec<Setting>>,
    /// Per labeled row, per member.
    oof: Vec<Vec<f64>>,
}

impl FoldFits {
    /// Each labeled row's stacked log-odds from fits that did not see its label
    /// ([`Calibrated::out_of_fold`]): the members fitted without its fold, under weights
    /// fitted on the other folds' rows as scored by members fitted without both folds. A
    /// member fitted without folds `f` and `g` scores `g`'s rows for `f`'s weights and
    /// `f`'s for `g`'s, at the setting chosen without `f` and without `g` respectively
    /// (one fit where they agree), so no fit behind fold `f`'s scores saw its labels: ten
    /// fits of each member for five folds, none cross-validated again (the settings of
    /// `f`'s weights' rows were chosen with those rows in view). Weights fitted on the
    /// rows they score read 0.9 points too high on a simulated jury at 100 labels; on rows
    /// scored by members that had seen the fold, 3.6 points on Conversations Gone Awry's
    /// near-chance judges at 50 labels (docs/reproduction/calibration-held-out.md).
    fn stacked_apart(&self, d: &LogOdds, rows: &[usize], y: &[f64], w: &[f64], seed: u64, prior: &Prior) -> Vec<f64> {
        let (m, folds) = (rows.len(), &self.folds);
        let nf = self.settings.len();
        // apart[f][r]: row r (outside fold f) scored by members fitted without f and r's
        // fold. With two folds (two labels) no member can be fitted without both, and the
        // weights are fitted on the out-of-fold scores as they are.
        let mut apart = vec![self.oof.clone(); nf];
        let pairs = (0..nf).flat_map(|f| (f + 1..nf).map(move |g| (f, g))).filter(|_| nf > 2);
        for (f, g) in pairs {
            let train: Vec<usize> = (0..m).filter(|&r| folds[r] != f && folds[r] != g).collect();
            let (tr, ty, tw) = pick(rows, y, w, &train);
            for (c, cand) in Candidate::ALL.iter().enumerate().filter(|(c, _)| self.joins[*c]) {
                let (at_f, at_g) = (self.settings[f][c], self.settings[g][c]);
                let for_f = cand.fit_at(d, &tr, &ty, &tw, seed, at_f).0;
                let for_g = (at_g != at_f).then(|| cand.fit_at(d, &tr, &ty, &tw, seed, at_g).0);
                for r in (0..m).filter(|&r| folds[r] == g) {
                    apart[f][r][c] = for_f.score(d, rows[r]).clamp(-30.0, 30.0);
                }
                for r in (0..m).filter(|&r| folds[r] == f) {
                    apart[g][r][c] = for_g.as_ref().unwrap_or(&for_f).score(d, rows[r]).clamp(-30.0, 30.0);
                }
            }
        }
        let mut out_of_fold = vec![0.0; m];
        for (f, scored) in apart.iter().enumerate() {
            let train: Vec<usize> = (0..m).filter(|&r| folds[r] != f).collect();
            let (tz, ty, tw) = subset(scored, y, w, &train);
            let (beta, bias) = stack_weights(&tz, &ty, &tw, prior);
            for r in (0..m).filter(|&r| folds[r] == f) {
                out_of_fold[r] = self.oof[r].iter().zip(&beta).map(|(s, b)| s * b).sum::<f64>() + bias;
            }
        }
        out_of_fold
    }
}

/// The stack's weights on the members' scores `z` (non-negative, ridged by `prior`) and
/// its intercept, shrunk toward the members' combined threshold ([`shrink_intercept`]).
fn stack_weights(z: &[Vec<f64>], y: &[f64], w: &[f64], prior: &Prior) -> (Vec<f64>, f64) {
    let LogisticFit { beta, intercept_se } = logistic(z, y, w, prior, true);
    let bias = shrink_intercept(beta[Candidate::ALL.len()], intercept_se);
    (beta, bias)
}

/// Whether the labels take the label-free posterior's class 1 for their 0: the
/// complement has the greater likelihood on them (weighted; a tie keeps the classes).
/// The unlabeled votes can confirm the label-free model but, as any latent-class model,
/// only up to the names of its classes: a question asked the other way round, or a latent
/// class every judge answers that runs against the label, give the same votes. The labels
/// name them, and nothing else about the posterior is theirs to change.
fn labels_swap_label_free(d: &LogOdds, rows: &[usize], y: &[f64], w: &[f64]) -> bool {
    let loss = |sign: f64| -> f64 {
        rows.iter().zip(y).zip(w).map(|((&i, &yi), &wi)| wi * log_loss(sign * d.label_free[i], yi)).sum()
    };
    loss(-1.0) < loss(1.0)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::log_odds::{CLIP, logit};
    use crate::members::picked_judge;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// A jury with one strong judge, two weak ones and a copy of a weak one, truth known.
    pub(crate) fn jury(n: usize, seed: u64) -> (LogOdds, Vec<u8>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let acc = [0.9, 0.65, 0.6];
        let mut x = Vec::with_capacity(n * 4);
        let mut truth = Vec::with_capacity(n);
        let mut lf = Vec::with_capacity(n);
        for _ in 0..n {
            let t = u8::from(rng.random::<f64>() < 0.4);
            let mut votes = [0.0; 4];
            for (k, a) in acc.iter().enumerate() {
                let right = rng.random::<f64>() < *a;
                votes[k] = if (t == 1) == right { 2.0 } else { -2.0 };
            }
            votes[3] = votes[2];
            x.extend_from_slice(&votes);
            lf.push(if votes.iter().sum::<f64>() > 0.0 { 0.8 } else { 0.2 });
            truth.push(t);
        }
        (LogOdds::from_dense(n, 4, x, &lf).unwrap(), truth)
    }

    #[test]
    fn recovers_the_strong_judge_from_few_labels() {
        let (d, truth) = jury(4000, 1);
        let index: Vec<usize> = (0..200).collect();
        let sample = Sample::new(4000, index.clone(), index.iter().map(|&i| truth[i]).collect(), None).unwrap();
        assert_eq!(picked_judge(&d, &sample), 0);
        let fit = Calibrated::fit(&d, &sample, 7);
        let acc = (200..4000).filter(|&i| (fit.probability(&d, i) > 0.5) == (truth[i] == 1)).count() as f64 / 3800.0;
        // The strong judge alone is right 90% of the time; the majority of the four far less.
        assert!(acc >= 0.88, "{acc}");
        assert!(fit.stack.iter().any(|(_, b)| *b > 0.0));
        // Deterministic for a seed.
        assert_eq!(fit, Calibrated::fit(&d, &sample, 7));
    }

    #[test]
    fn keeps_the_label_free_posterior_where_hard_votes_are_independent_given_its_classes() {
        // Five independent judges casting hard votes, the posterior of their exact model.
        let n = 3000;
        let (mut x, lf, truth) =
            crate::independence::tests::hard_jury(n, &[0.8, 0.75, 0.7, 0.85, 0.65], &[None; 5], logit(1.0, CLIP), 4);
        let index: Vec<usize> = (0..100).collect();
        let sample = Sample::new(n, index.clone(), index.iter().map(|&i| truth[i]).collect(), None).unwrap();
        let d = LogOdds::from_dense(n, 5, x.clone(), &lf).unwrap();
        assert!(d.label_free_holds());
        let fit = Calibrated::fit(&d, &sample, 1);
        fit.probabilities(&d).iter().zip(&lf).for_each(|(p, q)| assert!((p - q).abs() < 1e-3, "{p} {q}"));
        // The fifth judge replaced by a copy of the first: the labels decide again.
        x.chunks_exact_mut(5).for_each(|r| r[4] = r[0]);
        let d = LogOdds::from_dense(n, 5, x, &lf).unwrap();
        assert!(!d.label_free_holds());
        let fit = Calibrated::fit(&d, &sample, 1);
        assert!(fit.stack.iter().filter(|(c, _)| *c != Candidate::LabelFree).any(|(_, w)| *w > 0.0), "{:?}", fit.stack);
    }

    #[test]
    fn the_labels_name_the_classes_of_a_label_free_posterior_kept() {
        // Independent hard votes confirm the label-free model, but the labels' 1 is the
        // judges' No (a question asked the other way round): the posterior is right about
        // the votes and has the labels' classes the wrong way round.
        let n = 3000;
        let (x, lf, truth) =
            crate::independence::tests::hard_jury(n, &[0.8, 0.75, 0.7, 0.85, 0.65], &[None; 5], logit(1.0, CLIP), 4);
        let d = LogOdds::from_dense(n, 5, x, &lf).unwrap();
        assert!(d.label_free_holds());
        let index: Vec<usize> = (0..100).collect();
        let flipped: Vec<u8> = truth.iter().map(|&t| 1 - t).collect();
        let sample = Sample::new(n, index.clone(), index.iter().map(|&i| flipped[i]).collect(), None).unwrap();
        let fit = Calibrated::fit(&d, &sample, 1);
        assert!(fit.label_free_kept() && fit.label_free_swapped());
        fit.probabilities(&d).iter().zip(&lf).for_each(|(p, q)| assert!((p + q - 1.0).abs() < 1e-3, "{p} {q}"));
        let right =
            |p: &[f64]| (100..n).filter(|&i| (p[i] > 0.5) == (flipped[i] == 1)).count() as f64 / (n - 100) as f64;
        assert!(right(&lf) < 0.15 && right(&fit.probabilities(&d)) > 0.85, "{}", right(&lf));
        // The labels as the votes mean them: the posterior as it is.
        let sample = Sample::new(n, index.clone(), index.iter().map(|&i| truth[i]).collect(), None).unwrap();
        let fit = Calibrated::fit(&d, &sample, 1);
        assert!(fit.label_free_kept() && !fit.label_free_swapped());
    }

    /// Two labels make two folds, and no member can then be fitted without both; three
    /// make three folds of one label each.
    #[test]
    fn two_or_three_labels_give_finite_scores_out_of_fold() {
        let (d, truth) = jury(500, 4);
        for count in [2, 3] {
            let of = |class: u8, take: usize| (0..500).filter(|&i| truth[i] == class).take(take).collect::<Vec<_>>();
            let index: Vec<usize> = [of(1, 1), of(0, count - 1)].concat();
            let sample = Sample::new(500, index.clone(), index.iter().map(|&i| truth[i]).collect(), None).unwrap();
            let fit = Calibrated::fit(&d, &sample, 2);
            assert_eq!(fit.out_of_fold().len(), count);
            assert!(fit.out_of_fold().iter().all(|s| s.is_finite()), "{:?}", fit.out_of_fold());
            assert!(fit.probabilities(&d).iter().all(|p| p.is_finite()));
        }
    }

    #[test]
    fn members_with_a_coefficient_per_judge_join_once_labels_outnumber_them() {
        let (d, truth) = jury(4000, 3);
        let per_judge = |fit: &Calibrated| -> Vec<f64> {
            fit.stack.iter().filter(|(c, _)| c.per_judge()).map(|(_, w)| *w).collect()
        };
        // 6 labels, 3 of each class: each fold fits on 4 or 5, no more than 4 judges plus
        // an intercept.
        let of = |class: u8| (0..4000).filter(|&i| truth[i] == class).take(3).collect::<Vec<usize>>();
        let index: Vec<usize> = [of(1), of(0)].concat();
        let sample = Sample::new(4000, index.clone(), index.iter().map(|&i| truth[i]).collect(), None).unwrap();
        let few = Calibrated::fit(&d, &sample, 5);
        assert_eq!(per_judge(&few), vec![0.0; 3], "{:?}", few.stack);
        assert!(few.stack.iter().any(|(_, w)| *w > 0.0), "{:?}", few.stack);
        assert!(few.probabilities(&d).iter().all(|p| p.is_finite()));
        // 200 labels: they join, and the strong judge's weight reaches the stack through them.
        let index: Vec<usize> = (0..200).collect();
        let sample = Sample::new(4000, index.clone(), index.iter().map(|&i| truth[i]).collect(), None).unwrap();
        let many = Calibrated::fit(&d, &sample, 5);
        assert!(per_judge(&many).iter().any(|&w| w > 0.0), "{:?}", many.stack);
    }
}
