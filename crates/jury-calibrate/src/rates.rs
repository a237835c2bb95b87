//! The positive-class rate of the whole jury's examples, corrected with the calibration
//! labels four ways, each with a 95% interval:
//! - `labels-only`: the labels' (inclusion-weighted) mean, the Clopper-Pearson interval
//!   at the design's effective sample size;
//! - `rogan-gladen`: the picked judge's positive rate over every example corrected by its
//!   sensitivity and specificity on the labels (the method of judgy, the field's
//!   baseline), the judge picked out of fold as PPI's is, percentile bootstrap of the
//!   labels with the folds' judges picked again in each resample;
//! - `ppi-best-judge` and `ppi-jury`: prediction-powered inference with power tuning
//!   (PPI++, Angelopoulos et al. 2023), the predictor's mean over every example plus the
//!   labels' mean residual; the jury's predictors are the label-free posterior and the
//!   picked judge together. The judge is picked by cross-fitting (each fold's residuals
//!   use the judge the other folds' labels pick: cross-prediction-powered inference,
//!   Zrnic and Candes 2024). Agresti and Min's pseudo-labels join the residuals' spread;
//!   the best judge's interval inverts the score test of the labels' mean residual
//!   (Wilson's principle, [`crate::score`]), the jury's is Student's around it (the note
//!   at [`ppi_many`]); the best judge's reaches at least as far as Clopper-Pearson's
//!   interval at its effective size, as labels-only's does ([`at_least_clopper_pearson`]).
//!
//! The rate is that of the N examples judged (a finite population); a sample drawn with
//! unequal inclusion probabilities enters through Hansen-Hurwitz weights, so the estimates
//! stay unbiased under a label plan. Labels-only's and both PPI variances count the labels
//! against the N ([`finite_population`]): with every example labeled, their interval is
//! the rate itself. Rogan-Gladen's bootstrap is left as the field runs it, counting the
//! labels as drawn from a larger world. Intervals are clipped to [0, 1].
//!
//! Few labels and an accurate judge make errors rare events, which every interval here
//! would otherwise read off counts of zero or one: the labels' share, the judge's
//! residuals and the judge's sensitivity and specificity each get a small-count guard
//! (the notes at [`labels_only`], [`PSEUDO_LABELS`] and [`rogan_gladen`]).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Beta, Distribution};

use crate::Sample;
use crate::folds::{FOLDS, fold_of, pick, weights};
use crate::log_odds::{LogOdds, sigmoid};
use crate::members::{picked_judge, picked_judge_rows};

const Z95: f64 = 1.959_963_984_540_054;
/// Mixed into the seed of the folds the judge is picked out of (Rogan-Gladen's and
/// PPI's alike, so both use the same folds' judges).
const CROSS_FIT_SEED: u64 = 0x2545_f491;
/// Bootstrap resamples of the Rogan-Gladen interval.
const BOOTSTRAP: usize = 200;

/// A point estimate and its 95% interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
}

/// The 97.5% quantile of Student's t with `df` degrees of freedom (Cornish-Fisher to
/// the third term; within 0.003 of the exact value from 5 degrees of freedom up, 0.0002
/// from 10).
fn t975(df: f64) -> f64 {
    let z = Z95;
    let df = df.max(3.0);
    let (z3, z5, z7) = (z.powi(3), z.powi(5), z.powi(7));
    z + (z3 + z) / (4.0 * df)
        + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * df * df)
        + (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / (384.0 * df.powi(3))
}

impl Interval {
    /// `estimate` +- t(df) `se`: Student's quantile, since the standard error is itself
    /// estimated from the few labels.
    fn normal(estimate: f64, se: f64, df: f64) -> Self {
        let h = t975(df) * se;
        Self { estimate, low: (estimate - h).max(0.0), high: (estimate + h).min(1.0) }
    }

    /// A rate known exactly (every example labeled): the interval is the point.
    fn point(estimate: f64) -> Self {
        let p = estimate.clamp(0.0, 1.0);
        Self { estimate, low: p, high: p }
    }

    pub fn width(&self) -> f64 {
        self.high - self.low
    }

    /// The estimate moved into [0, 1], and the interval into [0, 1] around it. A rate
    /// outside [0, 1] is impossible, so the move only brings the estimate nearer the
    /// truth: PPI's `centre + mean residual` and a plan's weighted share can pass either
    /// end with few labels (PPI with the jury read -0.025 at 2 planned labels of 44).
    fn in_unit(self) -> Self {
        let estimate = self.estimate.clamp(0.0, 1.0);
        Self { estimate, low: self.low.clamp(0.0, 1.0).min(estimate), high: self.high.clamp(0.0, 1.0).max(estimate) }
    }

    /// Whether `v` lies in the interval, to within rounding: a rate known exactly (every
    /// example labeled, [`Interval::point`]) is a sum over the labels taken in another
    /// order than the rate it is scored against, and the two can differ in the last bits
    /// (a replay at 60 of 60 labels scored such points as misses).
    pub fn covers(&self, v: f64) -> bool {
        const ROUNDING: f64 = 1e-12;
        self.low - ROUNDING <= v && v <= self.high + ROUNDING
    }
}

/// The four estimators, in the order metrics.json and the report give them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Estimator {
    LabelsOnly,
    RoganGladen,
    PpiBestJudge,
    PpiJury,
}

impl Estimator {
    pub const ALL: [Estimator; 4] =
        [Estimator::LabelsOnly, Estimator::RoganGladen, Estimator::PpiBestJudge, Estimator::PpiJury];

    pub fn name(self) -> &'static str {
        match self {
            Estimator::LabelsOnly => "labels-only",
            Estimator::RoganGladen => "rogan-gladen",
            Estimator::PpiBestJudge => "ppi-best-judge",
            Estimator::PpiJury => "ppi-jury",
        }
    }
}

/// A judge's rates of right verdicts within each class of the labels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClassRates {
    /// Of the labels' 1s, the share the judge calls 1.
    pub sensitivity: f64,
    /// Of the labels' 0s, the share the judge calls 0.
    pub specificity: f64,
}

/// The rate four ways, with the judge the labels picked (its index).
#[derive(Debug, Clone, PartialEq)]
pub struct RateEstimates {
    pub picked_judge: usize,
    /// Rogan-Gladen's judge (picked out of fold) on the labels, inclusion-weighted: the
    /// correction divides by `sensitivity + specificity - 1`, so a judge near chance makes
    /// its estimate and interval say little, and these say why.
    pub rogan_gladen_judge: ClassRates,
    /// In [`Estimator::ALL`] order.
    pub intervals: Vec<(Estimator, Interval)>,
}

impl RateEstimates {
    /// Every estimator on `sample` (seeded bootstrap and folds). Examples sure to be in
    /// the sample (inclusion 1: labels had beside a plan of more, `plan_more_labels`) are
    /// a take-all stratum: their labels are counted as they are and every estimator runs
    /// on the other examples and their draw alone, so they add no variance, and nothing in
    /// how they were chosen biases the rest. Where the rows drawn with a probability under 1
    /// are fewer than two, or all of one class (no [`Sample`] the fits and Rogan-Gladen's
    /// class rates can read), the sample is estimated as a whole, every row counted as
    /// drawn, as before the stratum.
    pub fn estimate(d: &LogOdds, sample: &Sample, seed: u64) -> Self {
        let (taken, drawn): (Vec<usize>, Vec<usize>) = (0..sample.len()).partition(|&r| sample.is_sure(r));
        if taken.is_empty() || drawn.len() < 2 {
            return Self::estimate_drawn(d, sample, seed);
        }
        let n = d.n_examples();
        let mut is_taken = vec![false; n];
        taken.iter().for_each(|&r| is_taken[sample.index()[r]] = true);
        let rest: Vec<usize> = (0..n).filter(|&i| !is_taken[i]).collect();
        // Each example's place among the rest (none for a taken one).
        let mut position = vec![None; n];
        rest.iter().enumerate().for_each(|(at, &i)| position[i] = Some(at));
        let among_rest = Sample::new(
            rest.len(),
            drawn.iter().filter_map(|&r| position[sample.index()[r]]).collect(),
            drawn.iter().map(|&r| sample.labels()[r]).collect(),
            Some(drawn.iter().map(|&r| sample.inclusion()[r]).collect()),
        );
        let (Ok(among_rest), Ok(d_rest)) = (among_rest, d.restrict(&rest)) else {
            return Self::estimate_drawn(d, sample, seed);
        };
        let r = Self::estimate_drawn(&d_rest, &among_rest, seed);
        let known: f64 = taken.iter().map(|&r| f64::from(sample.labels()[r])).sum();
        let whole = |x: f64| (known + rest.len() as f64 * x) / n as f64;
        RateEstimates {
            intervals: r
                .intervals
                .into_iter()
                .map(|(e, i)| (e, Interval { estimate: whole(i.estimate), low: whole(i.low), high: whole(i.high) }))
                .collect(),
            ..r
        }
    }

    /// Every estimator on `sample`, every row counted as drawn.
    fn estimate_drawn(d: &LogOdds, sample: &Sample, seed: u64) -> Self {
        let e = sample.expansion();
        let pi = sample.inclusion();
        let y: Vec<f64> = sample.labels().iter().map(|&l| f64::from(l)).collect();
        let labels_only = labels_only(&y, &e, pi);
        let judge = picked_judge(d, sample);
        let n = d.n_examples();
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5bd1_e995);
        let rogan_gladen_judge;
        let rogan_gladen = {
            // The judge is picked out of fold, as PPI's is: the judge with the most right
            // answers on the labels is the one whose errors they undercount, and at a low
            // positive rate (mostly specificity) that biased the corrected rate up and the
            // interval covered 57.5-89% (docs/reproduction/calibration-rates.md). Each
            // resample deals its own folds and picks their judges again, so the interval
            // carries the choice's uncertainty too (with one judge held fixed it covered
            // 89.5-92.5% at 50 labels; with each row's fold kept from the labels' own
            // split it covered as well but was up to twice as wide).
            let k = d.n_judges();
            let all_votes: Vec<Vec<f64>> = sample
                .index()
                .iter()
                .map(|&i| (0..k).map(|j| f64::from(u8::from(d.get(i, j) > 0.0))).collect())
                .collect();
            let m = y.len();
            // Each position of `draw` (labeled rows, repeats allowed) in one of 5 folds
            // stratified by label; its vote from the judge the other folds pick, and that
            // composite judge's positive rate over every example (each fold's judge
            // weighed by the fold's share of `draw`).
            let out_of_fold = |draw: &[usize], fold_seed: u64| -> (Vec<f64>, Vec<f64>, Vec<f64>, f64) {
                let yd: Vec<f64> = draw.iter().map(|&r| y[r]).collect();
                let ed: Vec<f64> = draw.iter().map(|&r| e[r]).collect();
                let fold = fold_of(&yd, fold_seed);
                let mut right = vec![[0.0; FOLDS]; k];
                let mut held = [0usize; FOLDS];
                for (p, &r) in draw.iter().enumerate() {
                    held[fold[p]] += 1;
                    for (j, rj) in right.iter_mut().enumerate() {
                        if (all_votes[r][j] > 0.5) == (y[r] > 0.5) {
                            rj[fold[p]] += e[r];
                        }
                    }
                }
                let mut judge_of = [0usize; FOLDS];
                let share = held.map(|h| h as f64 / draw.len().max(1) as f64);
                let mut positive = 0.0;
                for f in 0..FOLDS {
                    let outside = |j: usize| right[j].iter().sum::<f64>() - right[j][f];
                    let best = (1..k).fold(0, |b, j| if outside(j) > outside(b) { j } else { b });
                    judge_of[f] = best;
                    positive += share[f] * d.judge_positive(best);
                }
                let v: Vec<f64> = draw.iter().enumerate().map(|(p, &r)| all_votes[r][judge_of[fold[p]]]).collect();
                // Each labeled example counts its own fold's vote in the positive rate over
                // every example, as PPI's mean counts its own prediction
                // (`cross_fitted_judge`): with every example labeled the corrected rate is
                // then the labels' own, as the field's in-sample Rogan-Gladen is (with the
                // folds' mixture there it was 0.135 off on a jury of 60, all labeled).
                let own: f64 = draw
                    .iter()
                    .zip(&v)
                    .map(|(&r, own)| own - (0..FOLDS).map(|f| share[f] * all_votes[r][judge_of[f]]).sum::<f64>())
                    .sum();
                (v, yd, ed, positive + own / n as f64)
            };
            // Every labeled row once, in order: the labels themselves, and each resample's
            // positions once its rows are laid out in `draw`'s order.
            let all: Vec<usize> = (0..m).collect();
            let (votes, yd, ed, positive) = out_of_fold(&all, seed ^ CROSS_FIT_SEED);
            rogan_gladen_judge = class_rates(&votes, &yd, &ed);
            let estimate = rogan_gladen(positive, &votes, &yd, &ed, None, &mut rng);
            let mut boot: Vec<f64> = (0..BOOTSTRAP)
                .map(|_| {
                    let draw: Vec<usize> = (0..m).map(|_| rng.random_range(0..m)).collect();
                    let (v, yd, ed, positive) = out_of_fold(&draw, rng.random());
                    rogan_gladen(positive, &v, &yd, &ed, Some(&all), &mut rng)
                })
                .collect();
            boot.sort_by(f64::total_cmp);
            let q = |p: f64| boot[((p * (BOOTSTRAP - 1) as f64).round() as usize).min(BOOTSTRAP - 1)];
            Interval { estimate, low: q(0.025).min(estimate), high: q(0.975).max(estimate) }
        };
        let judge_fit = cross_fitted_judge(d, sample, &y, seed);
        let (judge_held, judge_mean) = (&judge_fit.held, judge_fit.mean);
        let ppi_judge = ppi(&y, judge_held, judge_mean, &e, pi, n);
        // The jury as predictors: the label-free posterior and the picked judge, weighed
        // by least squares on the labels (PPI++ with several predictors: never wider, up
        // to the degrees of freedom spent, than with either alone). The calibrated stack is
        // not one: fitted on these labels it would need cross-fitting, and its
        // cross-fitted predictions covered 90-92% at 50 labels (docs/reproduction/calibration-choices.md).
        let f: Vec<Vec<f64>> =
            sample.index().iter().zip(judge_held).map(|(&i, &j)| vec![d.label_free_probability(i), j]).collect();
        let f_every: Vec<f64> =
            judge_fit.every.iter().enumerate().flat_map(|(i, &j)| [d.label_free_probability(i), j]).collect();
        let ppi_jury = ppi_many(&y, &f, &[d.label_free_mean(), judge_mean], &f_every, &e, pi);
        RateEstimates {
            picked_judge: judge,
            rogan_gladen_judge,
            intervals: vec![
                (Estimator::LabelsOnly, labels_only.in_unit()),
                (Estimator::RoganGladen, rogan_gladen.in_unit()),
                (Estimator::PpiBestJudge, ppi_judge.in_unit()),
                (Estimator::PpiJury, ppi_jury.in_unit()),
            ],
        }
    }

    pub fn get(&self, e: Estimator) -> Interval {
        self.intervals.iter().find(|(k, _)| *k == e).map(|(_, i)| *i).unwrap_or(Interval {
            estimate: f64::NAN,
            low: f64::NAN,
            high: f64::NAN,
        })
    }
}

/// Labels only: the expansion-weighted share of positives, with the Clopper-Pearson
/// interval at the design's effective sample size `p (1 - p) / v`, `v` the Hansen-Hurwitz
/// variance of the share (Korn and Graubard 1998; the labels' count under uniform
/// sampling, where it is the exact binomial interval). A share's Wald interval, the
/// mean's t interval, covered 91.8% at 50 labels on HaluEval-10 (1,000 draws): with few
/// binary labels its standard error is smallest exactly where the share strays furthest.
/// Wilson's score interval, which replaced it, dips where the expected count of the rarer
/// class is a few: a calibration set holds both classes, and given that, Wilson's covers
/// 77-88% at 50 labels and positive rates of 0.01-0.02 (88% on HaluEval-10 cut to 2%
/// positives, docs/reproduction/calibration-rare.md), where Clopper-Pearson, which
/// covers at least 95% at every rate, covers 96.5-97%. Kish's effective size
/// `(sum e)^2 / sum e^2`, which ignores how the weights go with the labels, covered
/// 89.5-92% under a label plan on TriviaQA, whose plan weighs the confident (mostly
/// correct) answers most; it stays the fallback when every label is one class.
///
/// The variance counts the labels against the finite set they were drawn from
/// ([`finite_population`]): every example labeled, the share is the rate itself, and the
/// interval is that point.
fn labels_only(y: &[f64], e: &[f64], pi: &[f64]) -> Interval {
    let m = y.len() as f64;
    let estimate = y.iter().zip(e).map(|(y, e)| y * e).sum::<f64>() / m;
    let p = estimate.clamp(0.0, 1.0);
    let z: Vec<f64> = y.iter().zip(e).map(|(y, e)| y * e).collect();
    let left = finite_population(&z, estimate, pi);
    if left <= 0.0 {
        return Interval::point(estimate);
    }
    let spread = z.iter().map(|v| (v - estimate).powi(2)).sum::<f64>() * left;
    let n = if p > 0.0 && p < 1.0 && spread > 0.0 { m * m * p * (1.0 - p) / spread } else { kish(e) / left };
    clopper_pearson(estimate, n.min(MAX_EFFECTIVE_SIZE))
}

/// The largest effective size Clopper-Pearson is read at: [`crate::beta`]'s continued
/// fraction needs about the square root of the Beta's parameters in terms, and stops at
/// 1,000. Only a labeled share of nearly every example reaches it (at 100,000 the interval
/// is 0.006 wide at a rate of one half), and the cap only widens.
const MAX_EFFECTIVE_SIZE: f64 = 1e5;

/// The share of a with-replacement variance left once the labels are counted against
/// the finite set of N examples they were drawn from without replacement: each labeled
/// row's squared deviation of `values` from `centre` (its term of the variance) times
/// `1 - pi_i`, its chance of having been left out (Hajek's approximation; `1 - K / N`
/// under uniform draws). The
/// rate is that of the N examples judged, not of a larger world they were drawn from:
/// without the factor, labels-only read 0.621 [0.493, 0.738] with all 66 of FairEval's
/// examples labeled (41 positive), and on juries of 350-419 examples every estimator
/// covered 100% at 250 labels with intervals up to twice as wide as they need be
/// (docs/reproduction/calibration-population.md). When no row deviates, the rows' mean
/// `1 - pi_i`; 0 only when every example was sure to be labeled.
fn finite_population(values: &[f64], centre: f64, pi: &[f64]) -> f64 {
    let out = |p: f64| (1.0 - p).max(0.0);
    let (weighted, all) = values.iter().zip(pi).fold((0.0, 0.0), |(a, b), (v, &p)| {
        let d2 = (v - centre).powi(2);
        (a + out(p) * d2, b + d2)
    });
    if weighted > 0.0 && all > 0.0 {
        weighted / all
    } else {
        pi.iter().map(|&p| out(p)).sum::<f64>() / pi.len().max(1) as f64
    }
}

/// Kish's effective sample size of weights `e`, `(sum e)^2 / sum e^2`.
pub(crate) fn kish(e: &[f64]) -> f64 {
    let (sum, sum_sq) = e.iter().fold((0.0, 0.0), |(a, b), e| (a + e, b + e * e));
    sum * sum / sum_sq
}

/// Clopper-Pearson's 95% interval around `estimate` read as a share of `n` trials (not
/// necessarily whole).
pub(crate) fn clopper_pearson(estimate: f64, n: f64) -> Interval {
    let x = estimate.clamp(0.0, 1.0) * n;
    let low = if x > 0.0 { crate::beta::quantile(0.025, x, n - x + 1.0) } else { 0.0 };
    let high = if x < n { crate::beta::quantile(0.975, x + 1.0, n - x) } else { 1.0 };
    Interval { estimate, low, high }
}

/// The Rogan-Gladen corrected rate from the judge's positive rate over every example and
/// its weighted sensitivity and specificity on the labels (or on the resample `draw`);
/// the apparent rate when they sum to 1 (the judge's votes say nothing of the label).
/// Below 1 the judge answers the other way round (its Yes is the labels' 0: every judge
/// of a jury asked the question the other way round), and the same formula inverts it.
///
/// A resample in which the judge gets every example of a class right (or every one
/// wrong) cannot show that class's error rate, and the percentile bootstrap then has no
/// spread: with an accurate judge and 50 labels that is most resamples, and the interval
/// covered 87-92% on TriviaQA. In a resample, a rate at 0 or 1 is drawn from its Jeffreys
/// posterior `Beta(right + 1/2, wrong + 1/2)` instead (`rng`); rates inside (0, 1), and
/// the point estimate (`draw` = `None`), are the counts' own.
fn rogan_gladen(
    positive: f64,
    votes: &[f64],
    y: &[f64],
    e: &[f64],
    draw: Option<&[usize]>,
    rng: &mut ChaCha8Rng,
) -> f64 {
    let [tp, p, tn, q] = match draw {
        Some(d) => confusion(votes, y, e, d.iter().copied()),
        None => confusion(votes, y, e, 0..y.len()),
    };
    let mut rate = |right: f64, all: f64| -> f64 {
        if all <= 0.0 {
            0.5
        } else if draw.is_some() && (right <= 0.0 || right >= all) {
            jeffreys(right, all - right).map_or(right / all, |b| b.sample(rng))
        } else {
            right / all
        }
    };
    let sens = rate(tp, p);
    let spec = rate(tn, q);
    let j = sens + spec - 1.0;
    if j.abs() <= 1e-9 { positive } else { ((positive + spec - 1.0) / j).clamp(0.0, 1.0) }
}

/// The weighted counts `[right 1s, 1s, right 0s, 0s]` of the labeled rows `rows` (a row
/// once per appearance).
fn confusion(votes: &[f64], y: &[f64], e: &[f64], rows: impl Iterator<Item = usize>) -> [f64; 4] {
    rows.fold([0.0; 4], |[tp, p, tn, q], r| {
        if y[r] > 0.5 {
            [tp + e[r] * votes[r], p + e[r], tn, q]
        } else {
            [tp, p, tn + e[r] * (1.0 - votes[r]), q + e[r]]
        }
    })
}

/// A judge's sensitivity and specificity on the labels (NaN for a class they lack).
fn class_rates(votes: &[f64], y: &[f64], e: &[f64]) -> ClassRates {
    let [tp, p, tn, q] = confusion(votes, y, e, 0..y.len());
    ClassRates { sensitivity: tp / p, specificity: tn / q }
}

/// The Jeffreys posterior of a rate after `right` successes and `wrong` failures.
fn jeffreys(right: f64, wrong: f64) -> Option<Beta<f64>> {
    Beta::new(right.max(0.0) + 0.5, wrong.max(0.0) + 0.5).ok()
}

/// Agresti and Min's (2005) pseudo-labels for matched proportions: half a label in each
/// cell of (label, prediction) in {0, 1}^2, two in all, beside the PPI residuals whose
/// spread gives the interval (with several predictors, the two spread over every corner
/// of theirs). An accurate hard judge leaves few nonzero residuals among 50 labels, often
/// none, and their sample variance then says the rate is known exactly: PPI with the
/// picked judge covered 80-88% at 50 labels on TriviaQA. The point estimate keeps the
/// labels alone, so it stays unbiased.
const PSEUDO_LABELS: f64 = 2.0;

/// The residuals `y - lambda' f` with the pseudo-labels beside them, as (value, weight):
/// each labeled residual at weight 1, each corner of (label, predictions) in {0, 1}^(p+1)
/// at its share of [`PSEUDO_LABELS`], the corner's `lambda' f` moved into `range`.
///
/// A pseudo-label stands for an example that might have been labeled, so its combined
/// prediction is one the examples make: `range` is the least and greatest `lambda' f`
/// over every example. Unmoved, two correlated predictors weighed (-3.6, 2.4) by 15
/// labels put corners at -3.6 and 2.4, where no example is, and their spread made the
/// jury's interval twice labels-only's on the demo's jury. PPI with the best judge passes
/// [0, lambda], which holds its every corner already (lambda in [0, 1] times 0 or 1).
fn with_pseudo_labels(residuals: &[f64], lambda: &[f64], range: (f64, f64)) -> Vec<(f64, f64)> {
    let p = lambda.len();
    let cells = 1usize << (p + 1);
    let w = PSEUDO_LABELS / cells as f64;
    let corners = (0..cells).map(|c| {
        let y = (c & 1) as f64;
        let fitted: f64 = lambda.iter().enumerate().filter(|(a, _)| (c >> (a + 1)) & 1 == 1).map(|(_, l)| l).sum();
        // max then min, not clamp: a range left empty by NaN predictions must not panic.
        (y - fitted.max(range.0).min(range.1), w)
    });
    residuals.iter().map(|&r| (r, 1.0)).chain(corners).collect()
}

/// The weighted squared deviations of (value, weight) pairs from `centre`.
fn spread(values: &[(f64, f64)], centre: f64) -> f64 {
    values.iter().map(|(v, w)| w * (v - centre).powi(2)).sum()
}

/// The best judge's PPI interval: `centre` (the predictor's part over every example)
/// plus the score interval of the labels' mean residual `mr` ([`crate::score`]), the
/// residuals with the pseudo-labels giving each candidate's variance; `scale` is the
/// estimate's variance per unit of the residuals' (the labels' count and lambda's share),
/// `df` the degrees of freedom left to Student's quantile.
///
/// A Wald interval here read its width off the residuals seen: with a rare residual
/// (one positive in ten, the judge's misses of it rarer still) a draw that misses it has
/// both a low mean and a small spread, and PPI with the best judge covered 89.5% on
/// copies-32-hard-r0.15 (200 draws) and 92.2% on independent-9-hard-r0.1 (1,000 draws)
/// at 100 labels (docs/reproduction/calibration-rates.md).
fn ppi_interval(centre: f64, mr: f64, values: &[(f64, f64)], scale: f64, df: f64) -> Interval {
    let (low, high) = crate::score::score_interval(values, mr, t975(df), scale);
    Interval { estimate: centre + mr, low: (centre + low).max(0.0), high: (centre + high).min(1.0) }
}

/// The picked judge's probability on each labeled example, cross-fitted: the examples of
/// each of 5 folds (seeded) take the judge that the other folds' labels pick, so no label
/// both chooses the judge and measures its error (the judge with the fewest errors on
/// the labels has fewer there than anywhere else). With it, the matching mean over every
/// example: each labeled example's own prediction, and on every other example each
/// fold's judge's, weighed by the fold's share of the labels. A labeled example counts
/// its own prediction in both of PPI's sums, so with every example labeled the estimate
/// is the labels' mean, as the finite-population variance that falls to 0 there says
/// ([`finite_population`]); with the folds' mixture on it too, the estimate was off the
/// rate by lambda times the folds' disagreement on the labeled examples, over N.
pub(crate) fn cross_fitted_judge(d: &LogOdds, sample: &Sample, y: &[f64], seed: u64) -> CrossFitted {
    let rows = sample.index();
    let w = weights(sample);
    let m = rows.len();
    let fold = fold_of(y, seed ^ CROSS_FIT_SEED);
    let probability = |i: usize, judge: usize| sigmoid(d.get(i, judge));
    let mut held = vec![0.0; m];
    let mut judges = Vec::with_capacity(FOLDS);
    for f in 0..FOLDS {
        let (inside, outside): (Vec<usize>, Vec<usize>) = (0..m).partition(|&r| fold[r] == f);
        if inside.is_empty() {
            continue;
        }
        let (train, ty, tw) = pick(rows, y, &w, &outside);
        let judge = picked_judge_rows(d, &train, &ty, &tw);
        for &r in &inside {
            held[r] = probability(rows[r], judge);
        }
        judges.push((inside.len() as f64 / m as f64, judge));
    }
    let mixture = |i: usize| judges.iter().map(|&(share, j)| share * probability(i, j)).sum::<f64>();
    let mixture_all: f64 = judges.iter().map(|&(share, j)| share * d.judge_mean(j)).sum();
    let own: f64 = rows.iter().zip(&held).map(|(&i, &h)| h - mixture(i)).sum();
    let mut every: Vec<f64> = (0..d.n_examples()).map(mixture).collect();
    for (&i, &h) in rows.iter().zip(&held) {
        every[i] = h;
    }
    CrossFitted { held, mean: mixture_all + own / d.n_examples() as f64, every }
}

/// [`cross_fitted_judge`]'s predictions.
pub(crate) struct CrossFitted {
    /// On each labeled example (in the sample's order), from its own fold's judge.
    pub held: Vec<f64>,
    /// Over every example: each labeled example's own prediction, the folds' mixture on the rest.
    pub mean: f64,
    /// The prediction [`CrossFitted::mean`] averages, on every example.
    pub every: Vec<f64>,
}

/// PPI++: `lambda * mean(f over all) + mean over labels of (y - lambda f) * e`, with the
/// power-tuned `lambda = cov(y, f) / ((1 + n / N) var(f))` clipped to [0, 1]; the
/// variance counted against the N examples ([`finite_population`]).
fn ppi(y: &[f64], f: &[f64], f_mean_all: f64, e: &[f64], pi: &[f64], big_n: usize) -> Interval {
    let m = y.len() as f64;
    let (my, mf) = (y.iter().sum::<f64>() / m, f.iter().sum::<f64>() / m);
    let cov = y.iter().zip(f).map(|(a, b)| (a - my) * (b - mf)).sum::<f64>() / (m - 1.0);
    let var = f.iter().map(|b| (b - mf).powi(2)).sum::<f64>() / (m - 1.0);
    let lambda = if var > 1e-12 { (cov / ((1.0 + m / big_n as f64) * var)).clamp(0.0, 1.0) } else { 0.0 };
    let r: Vec<f64> = y.iter().zip(f).zip(e).map(|((y, f), e)| (y - lambda * f) * e).collect();
    let mr = r.iter().sum::<f64>() / m;
    // lambda is estimated on the same labels: its variance, a regression slope's
    // (residual variance over the predictor's sum of squares), reaches the estimate
    // through the gap between the predictor's mean over every example and over the
    // labels, as the coefficients' do in `ppi_many`. The tilted variance divides by
    // every weight, labels and pseudo-labels; the sample variance by one fewer.
    let slope_share = if var > 1e-12 { 1.0 / ((m - 1.0) * var) } else { 0.0 };
    let gap = f_mean_all - mf;
    let left = finite_population(&r, mr, pi);
    if left <= 0.0 {
        return Interval::point(lambda * f_mean_all + mr);
    }
    let scale = left * (m + PSEUDO_LABELS) / (m - 1.0 + PSEUDO_LABELS) * (1.0 / m + gap * gap * slope_share);
    let score =
        ppi_interval(lambda * f_mean_all, mr, &with_pseudo_labels(&r, &[lambda], (0.0, lambda)), scale, m - 2.0);
    // The estimate's variance as the labels show it (no pseudo-labels): its effective size.
    let variance =
        left * (1.0 / m + gap * gap * slope_share) * r.iter().map(|v| (v - mr).powi(2)).sum::<f64>() / (m - 1.0);
    at_least_clopper_pearson(score, variance)
}

/// `interval` widened, where it falls short, to Clopper-Pearson's interval at the
/// estimate's effective size `p (1 - p) / variance` (Korn and Graubard 1998, as
/// labels-only's is that one). The best judge's score interval is Wilson's where its
/// residuals are the labels themselves (a judge that tells little of a rare class leaves
/// lambda near 0), and Wilson's dips where the rarer class is expected a few times among
/// the labels: at a positive rate of 0.01 and 50 or 100 labels PPI with the best judge
/// covered 84-92% on HaluEval-10 cut to that rate, where labels-only covered 97%
/// (docs/reproduction/calibration-rare.md, "Under one percent"). Not the jury's: its
/// Student interval has no such dip (it covered 99.5-100% there), and the floor widened
/// it by 27-47%, past labels-only's. An estimate outside (0, 1), or no variance, leaves
/// `interval` as it is.
fn at_least_clopper_pearson(interval: Interval, variance: f64) -> Interval {
    let p = interval.estimate;
    if !(p > 0.0 && p < 1.0 && variance > 0.0) {
        return interval;
    }
    let exact = clopper_pearson(p, (p * (1.0 - p) / variance).min(MAX_EFFECTIVE_SIZE));
    Interval { estimate: p, low: interval.low.min(exact.low), high: interval.high.max(exact.high) }
}

/// PPI with several predictors: `lambda' mean(f over all) + mean over labels of
/// (y - lambda' f) * e`, `lambda` the least-squares coefficients of `y` on `f` (with an
/// intercept) over the labels; the residuals' variance counts the coefficients fitted,
/// and the variance is counted against the N examples ([`finite_population`]).
/// `f_every` is every example's predictions, p to a row, whose combined range bounds
/// the pseudo-labels' ([`with_pseudo_labels`]).
///
/// Student's interval, not the best judge's score interval: with the label-free
/// posterior among its predictors the residuals seldom hinge on one rare cell, and where
/// that posterior is nearly always right the score interval reads the pseudo-labels'
/// corners as errors the labels could have missed. On the simulated `tune` juries it
/// widened this interval by up to 75% (families-10-soft 0.056 to 0.081, one-strong-8-hard
/// 0.055 to 0.096 at 100 labels) where Student's already covered 97-100%, and raised no
/// cell that was under 93% (docs/reproduction/calibration-rates.md).
fn ppi_many(y: &[f64], f: &[Vec<f64>], f_mean_all: &[f64], f_every: &[f64], e: &[f64], pi: &[f64]) -> Interval {
    let m = y.len();
    let p = f_mean_all.len();
    let d = p + 1;
    let mut xtx = vec![0.0; d * d];
    let mut xty = vec![0.0; d];
    for (row, &yi) in f.iter().zip(y) {
        let x: Vec<f64> = row.iter().copied().chain(std::iter::once(1.0)).collect();
        for a in 0..d {
            xty[a] += x[a] * yi;
            for b in 0..d {
                xtx[a * d + b] += x[a] * x[b];
            }
        }
    }
    // A whisper of ridge keeps collinear predictors (a judge that is the posterior) solvable.
    for a in 0..p {
        xtx[a * d + a] += 1e-6 * m as f64;
    }
    let beta = crate::linalg::solve_spd(&xtx, &xty);
    // The coefficients are estimated too: their variance, sigma^2 (X'X)^-1, reaches the
    // estimate through the gap between the predictors' mean over every example and over
    // the labels (the regression estimator's second term; at 50 labels and three
    // correlated predictors it is what separates 90% coverage from 95%).
    let inv = crate::linalg::inverse_spd(&xtx, d);
    let gap: Vec<f64> = (0..p).map(|a| f_mean_all[a] - f.iter().map(|row| row[a]).sum::<f64>() / m as f64).collect();
    let mut coef_var = 0.0;
    for a in 0..p {
        for b in 0..p {
            coef_var += gap[a] * inv[a * d + b] * gap[b];
        }
    }
    // PPI's interval at predictor weights `lambda`: the predictors' weighted mean over
    // every example plus the labels' mean residual `y - lambda' f`, Student's at `df`,
    // the residuals' variance (with the pseudo-labels) widened by `coef_var` per unit for
    // the weights' own estimation, and counted against the N examples.
    let at = |lambda: &[f64], df: f64, coef_var: f64| -> Interval {
        let r: Vec<f64> = f
            .iter()
            .zip(y)
            .zip(e)
            .map(|((row, y), e)| (y - row.iter().zip(lambda).map(|(a, b)| a * b).sum::<f64>()) * e)
            .collect();
        let mr = r.iter().sum::<f64>() / m as f64;
        let range = f_every.chunks_exact(p).fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), row| {
            let g: f64 = row.iter().zip(lambda).map(|(a, b)| a * b).sum();
            (lo.min(g), hi.max(g))
        });
        let vr = spread(&with_pseudo_labels(&r, lambda, range), mr) / (df + PSEUDO_LABELS);
        let left = finite_population(&r, mr, pi);
        let se = (left * (vr / m as f64 + vr * coef_var.max(0.0))).sqrt();
        let centre: f64 = f_mean_all.iter().zip(lambda).map(|(a, b)| a * b).sum();
        Interval::normal(centre + mr, se, df)
    };
    // Predictors that agree on nearly every label (an accurate judge and the posterior:
    // 48 of 50 labels of TriviaQA V2 in one replay draw) leave X'X near singular: lambda
    // was (41.7, -40.8) and the estimate 3.65, its interval [1.91, 5.39] (all of [0, 1]
    // while the pseudo-labels' corners sat at 41.7 and -40.8): no rate in [0, 1], or every
    // one, which says nothing. lambda = 0 (the labels' own mean) is among PPI++'s choices
    // and always says something, so it stands in there. Taking it wherever the fitted
    // interval was the wider of the two (a choice on the same labels) moved 49 cells of
    // the replays, the jury's interval up to 10% narrower at 50 labels and its coverage
    // down by up to 2 points (TruthfulQA-8 at 50 planned labels 91.5% to 90.0%).
    let fitted = at(&beta[..p], (m as f64 - d as f64).max(1.0), coef_var);
    let says_nothing = fitted.low > fitted.high || (fitted.low <= 0.0 && fitted.high >= 1.0);
    if says_nothing { at(&vec![0.0; p], (m as f64 - 1.0).max(1.0), 0.0) } else { fitted }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn student_quantiles_match_the_tables() {
        for (df, t) in [(5.0, 2.5706), (10.0, 2.2281), (30.0, 2.0423), (100.0, 1.9840)] {
            assert!((t975(df) - t).abs() < 3e-3, "{df}: {} vs {t}", t975(df));
        }
    }

    /// The Clopper-Pearson interval, golden bounds from SciPy's `beta.ppf`: 10 of 50
    /// uniform labels; the same share under weights 0.5 and 1.5, whose Hansen-Hurwitz
    /// variance makes the effective size 2500 * 0.16 / 10.5 = 38.095 (Kish's would say
    /// 40), 7.619 positives of it; no positive at all.
    #[test]
    fn labels_only_is_clopper_pearson_at_the_effective_sample_size() {
        let y: Vec<f64> = (0..50).map(|i| f64::from(u8::from(i % 5 == 0))).collect();
        let uniform = labels_only(&y, &[1.0; 50], &[0.0; 50]);
        assert!((uniform.estimate - 0.2).abs() < 1e-12);
        assert!((uniform.low - 0.100_302).abs() < 1e-5 && (uniform.high - 0.337_183).abs() < 1e-5, "{uniform:?}");
        let e: Vec<f64> = (0..50).map(|i| if i < 25 { 0.5 } else { 1.5 }).collect();
        let y: Vec<f64> = (0..50).map(|i| f64::from(u8::from(i < 5 || (25..30).contains(&i)))).collect();
        let weighted = labels_only(&y, &e, &[0.0; 50]);
        assert!((weighted.estimate - 0.2).abs() < 1e-12);
        assert!((weighted.low - 0.088_309).abs() < 1e-5 && (weighted.high - 0.361_068).abs() < 1e-5, "{weighted:?}");
        let none = labels_only(&[0.0; 50], &[1.0; 50], &[0.0; 50]);
        assert_eq!((none.estimate, none.low), (0.0, 0.0));
        assert!((none.high - 0.071_122).abs() < 1e-5, "{none:?}");
    }

    /// Labels drawn without replacement from a jury of 100: 10 positives of 50 labels
    /// have the effective size `50 / (1 - 50 / 100) = 100` (SciPy's `beta.ppf` at 20 of
    /// 100: 0.126656, 0.291843; 0.100302 and 0.337183 at 50, counted as if from a jury of
    /// any size); with every example labeled the share is the rate, a point.
    #[test]
    fn labels_only_counts_the_labels_against_the_jury_they_were_drawn_from() {
        let y: Vec<f64> = (0..50).map(|i| f64::from(u8::from(i % 5 == 0))).collect();
        let half = labels_only(&y, &[1.0; 50], &[0.5; 50]);
        assert!((half.estimate - 0.2).abs() < 1e-12);
        assert!((half.low - 0.126_656).abs() < 1e-5 && (half.high - 0.291_843).abs() < 1e-5, "{half:?}");
        let all = labels_only(&y, &[1.0; 50], &[1.0; 50]);
        assert_eq!((all.low, all.high), (all.estimate, all.estimate));
        assert!((all.estimate - 0.2).abs() < 1e-12);
    }

    /// Every example labeled: labels-only and both PPI estimators give the rate itself,
    /// a point (each labeled example counts its own cross-fitted prediction in both
    /// sums, so no fold's judge is left over); Rogan-Gladen's estimate is the rate too,
    /// and its interval keeps the bootstrap's spread (the field's method).
    #[test]
    fn a_jury_labeled_throughout_has_its_rate_exactly() {
        let n = 300;
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let (truth, d) = hard_votes(&mut rng, n, &[0.8, 0.7, 0.9, 0.65], 0.3);
        let rate = truth.iter().map(|&t| f64::from(t)).sum::<f64>() / n as f64;
        let sample = Sample::new(n, (0..n).collect(), truth, None).unwrap();
        let r = RateEstimates::estimate(&d, &sample, 1);
        for e in [Estimator::LabelsOnly, Estimator::PpiBestJudge, Estimator::PpiJury] {
            let i = r.get(e);
            assert!((i.estimate - rate).abs() < 1e-12 && i.width() < 1e-12, "{}: {i:?} vs {rate}", e.name());
        }
        let rogan_gladen = r.get(Estimator::RoganGladen);
        assert!((rogan_gladen.estimate - rate).abs() < 1e-12 && rogan_gladen.width() > 0.0, "{rogan_gladen:?}");
    }

    /// A judge that tells nothing of the label (lambda 0): PPI's residuals are the labels,
    /// its score interval is Wilson's, and with 2 positives among 100 labels its low end
    /// (about 0.0055) sits above rates that often give 2 positives; the interval reaches
    /// down to Clopper-Pearson's at the effective size 0.0196 / (1.96 / 99 / 100) = 99
    /// (SciPy's `beta.ppf(0.025, 1.98, 98.02)` = 0.002393), and up at least to its high
    /// end (0.070768).
    #[test]
    fn the_best_judges_interval_reaches_clopper_pearsons_with_a_rare_class() {
        let y: Vec<f64> = (0..100).map(|i| f64::from(u8::from(i < 2))).collect();
        let f = vec![0.3; 100];
        let i = ppi(&y, &f, 0.3, &[1.0; 100], &[0.0; 100], 1_000_000);
        assert!((i.estimate - 0.02).abs() < 1e-12, "{i:?}");
        assert!((i.low - 0.002_393).abs() < 1e-5, "{i:?}");
        assert!(i.high >= 0.070_767, "{i:?}");
        let score = ppi_interval(
            0.0,
            0.02,
            &with_pseudo_labels(&y, &[0.0], (0.0, 0.0)),
            (100.0 + PSEUDO_LABELS) / (99.0 + PSEUDO_LABELS) / 100.0,
            98.0,
        );
        assert!(score.low > 0.005, "the score interval alone: {score:?}");
    }

    /// A rate known exactly covers the rate counted another way: PPI's point on a jury of
    /// 60 labeled throughout, 26 positive, was 0.43333333333333346 against the count's
    /// 26 / 60 = 0.43333333333333335; a point a few rounding errors off is not covered
    /// by much more than rounding.
    #[test]
    fn a_point_covers_its_rate_to_within_rounding() {
        let point = Interval::point(0.433_333_333_333_333_46);
        assert!(point.covers(26.0 / 60.0));
        assert!(!point.covers(26.0 / 60.0 - 1e-9) && !point.covers(0.433_333_333_4));
    }

    /// Half of a jury of 400 labeled, 600 draws uniform and 600 planned (`plan_labels` on
    /// the judges' mean vote: unanimous examples drawn with probability a quarter, split
    /// ones more often): labels-only, PPI with the best judge and with the jury still cover the
    /// rate of the 400 under both, and labels-only's uniform interval is about
    /// `sqrt(1 - 1/2)` of the one that counts the labels as drawn from a world. (Over
    /// 1,500 draws each estimator covers 95.8-96.4% uniform, 94.7-95.3% planned.)
    #[test]
    fn intervals_counted_against_the_jury_still_cover_it() {
        let n = 400;
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let (truth, d) = hard_votes(&mut rng, n, &[0.8, 0.7, 0.85, 0.65, 0.75], 0.3);
        let rate = truth.iter().map(|&t| f64::from(t)).sum::<f64>() / n as f64;
        let mean_vote: Vec<f64> = (0..n)
            .map(|i| (0..d.n_judges()).map(|j| f64::from(u8::from(d.get(i, j) > 0.0))).sum::<f64>() / 5.0)
            .collect();
        let draws = 600;
        for planned in [false, true] {
            let (mut covered, mut width, mut world) = ([0usize; 3], 0.0, 0.0);
            for t in 0..draws {
                let drawn = if planned {
                    crate::plan_labels(&mean_vote, n / 2, t).unwrap()
                } else {
                    crate::uniform_sample(n, n / 2, rng.random()).unwrap()
                };
                let index: Vec<usize> = drawn.iter().map(|p| p.index).collect();
                let label: Vec<u8> = index.iter().map(|&i| truth[i]).collect();
                let y: Vec<f64> = label.iter().map(|&l| f64::from(l)).collect();
                let inclusion = drawn.iter().map(|p| p.inclusion).collect();
                let sample = Sample::new(n, index, label, Some(inclusion)).unwrap();
                let r = RateEstimates::estimate(&d, &sample, t);
                for (c, e) in
                    covered.iter_mut().zip([Estimator::LabelsOnly, Estimator::PpiBestJudge, Estimator::PpiJury])
                {
                    *c += usize::from(r.get(e).covers(rate));
                }
                width += r.get(Estimator::LabelsOnly).width();
                world += labels_only(&y, &vec![1.0; n / 2], &vec![0.0; n / 2]).width();
            }
            for c in covered {
                assert!(c as f64 / draws as f64 >= 0.925, "planned {planned}: {covered:?} of {draws}");
            }
            if !planned {
                let ratio = width / world;
                assert!((0.66..0.75).contains(&ratio), "{ratio}");
            }
        }
    }

    /// Labels had for examples chosen by no draw (30 the majority of votes gets wrong,
    /// nearly all of one class), then 60 planned among the others: every interval covers
    /// the rate, is no wider than the 60 planned labels' alone would be, and moves by
    /// exactly a label's share of the jury when a label had is flipped (those labels are
    /// counted, not estimated).
    #[test]
    fn labels_had_beside_a_plan_of_more_are_counted_and_add_no_variance() {
        let n = 400;
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let (truth, d) = hard_votes(&mut rng, n, &[0.8, 0.7, 0.85, 0.65, 0.75], 0.3);
        let rate = truth.iter().map(|&t| f64::from(t)).sum::<f64>() / n as f64;
        let mean_vote: Vec<f64> = (0..n)
            .map(|i| (0..d.n_judges()).map(|j| f64::from(u8::from(d.get(i, j) > 0.0))).sum::<f64>() / 5.0)
            .collect();
        let had: Vec<usize> = (0..n).filter(|&i| (mean_vote[i] > 0.5) != (truth[i] == 1)).take(30).collect();
        assert_eq!(had.len(), 30);
        let sample_of = |drawn: &[crate::Planned], truth: &[u8]| {
            let index: Vec<usize> = drawn.iter().map(|p| p.index).collect();
            let label = index.iter().map(|&i| truth[i]).collect();
            Sample::new(n, index, label, Some(drawn.iter().map(|p| p.inclusion).collect())).unwrap()
        };
        let estimators = [Estimator::LabelsOnly, Estimator::PpiBestJudge, Estimator::PpiJury];
        let draws = 300;
        let (mut covered, mut width, mut alone) = ([0usize; 3], [0.0; 3], [0.0; 3]);
        for t in 0..draws {
            let more = sample_of(&crate::plan_more_labels(&mean_vote, &had, 60, t).unwrap(), &truth);
            let r = RateEstimates::estimate(&d, &more, t);
            let plain =
                RateEstimates::estimate(&d, &sample_of(&crate::plan_labels(&mean_vote, 60, t).unwrap(), &truth), t);
            for (k, e) in estimators.into_iter().enumerate() {
                covered[k] += usize::from(r.get(e).covers(rate));
                width[k] += r.get(e).width() / draws as f64;
                alone[k] += plain.get(e).width() / draws as f64;
            }
        }
        for k in 0..3 {
            assert!(covered[k] as f64 / draws as f64 >= 0.925, "{covered:?} of {draws}");
            assert!(width[k] <= alone[k], "{}: {width:?} against {alone:?}", estimators[k].name());
        }
        let drawn = crate::plan_more_labels(&mean_vote, &had, 60, 0).unwrap();
        let mut flipped = truth.clone();
        flipped[had[0]] = 1 - flipped[had[0]];
        let (a, b) = (
            RateEstimates::estimate(&d, &sample_of(&drawn, &truth), 0),
            RateEstimates::estimate(&d, &sample_of(&drawn, &flipped), 0),
        );
        let step = (f64::from(flipped[had[0]]) - f64::from(truth[had[0]])) / n as f64;
        for e in Estimator::ALL {
            let (x, y) = (a.get(e), b.get(e));
            for (u, v) in [(x.estimate, y.estimate), (x.low, y.low), (x.high, y.high)] {
                assert!((v - u - step).abs() < 1e-12, "{}: {x:?} then {y:?}", e.name());
            }
        }
    }

    /// Given both classes among the labels (a calibration set must hold both), the
    /// interval covers the rate at least 95% of the time at 50, 100 and 250 uniform labels
    /// and rates from 0.01 to 0.2 (the binomial's probabilities summed exactly). Wilson's
    /// covered 77.4% at 50 labels and a rate of 0.01, 87.7% at 0.02, 87.5% at 100 and 0.01.
    #[test]
    fn labels_only_covers_a_rare_class_given_both_classes() {
        for n in [50u32, 100, 250] {
            for rate in [0.01f64, 0.02, 0.05, 0.2] {
                let pmf = |x: u32| -> f64 {
                    let ln_choose: f64 = (1..=x).map(|i| f64::from(n - x + i).ln() - f64::from(i).ln()).sum();
                    (ln_choose + f64::from(x) * rate.ln() + f64::from(n - x) * (1.0 - rate).ln()).exp()
                };
                let (mut covered, mut total) = (0.0, 0.0);
                for x in 1..n {
                    let y: Vec<f64> = (0..n).map(|i| f64::from(u8::from(i < x))).collect();
                    total += pmf(x);
                    if labels_only(&y, &vec![1.0; n as usize], &vec![0.0; n as usize]).covers(rate) {
                        covered += pmf(x);
                    }
                }
                assert!(covered / total >= 0.95, "{n} labels, rate {rate}: {}", covered / total);
            }
        }
    }

    #[test]
    fn several_predictors_are_never_wider_than_the_best_of_them() {
        let y = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0];
        let good: Vec<f64> = y.iter().enumerate().map(|(i, &v)| if i % 5 == 0 { 1.0 - v } else { v }).collect();
        let noise: Vec<f64> = (0..12).map(|i| (i * 7 % 5) as f64 / 4.0).collect();
        let one = ppi(&y, &good, 0.5, &[1.0; 12], &[0.0; 12], 10_000);
        let f: Vec<Vec<f64>> = good.iter().zip(&noise).map(|(&a, &b)| vec![a, b]).collect();
        let every: Vec<f64> = f.iter().flatten().copied().collect();
        let two = ppi_many(&y, &f, &[0.5, 0.5], &every, &[1.0; 12], &[0.0; 12]);
        assert!(two.width() <= one.width() * 1.25, "{two:?} vs {one:?}");
        assert!(two.low <= two.estimate && two.estimate <= two.high);
    }

    #[test]
    fn rogan_gladen_inverts_a_known_judge() {
        // A judge with sensitivity 0.8 and specificity 0.9 on the labels, apparent rate
        // 0.8 * 0.3 + 0.1 * 0.7 = 0.31: the corrected rate is 0.3.
        let mut votes = vec![];
        let mut y = vec![];
        for k in 0..10 {
            y.push(1.0);
            votes.push(if k < 8 { 1.0 } else { 0.0 });
        }
        for k in 0..10 {
            y.push(0.0);
            votes.push(if k < 1 { 1.0 } else { 0.0 });
        }
        let r = rogan_gladen(0.31, &votes, &y, &[1.0; 20], None, &mut ChaCha8Rng::seed_from_u64(0));
        assert!((r - 0.3).abs() < 1e-12, "{r}");
        let c = class_rates(&votes, &y, &[1.0; 20]);
        assert!((c.sensitivity - 0.8).abs() < 1e-12 && (c.specificity - 0.9).abs() < 1e-12, "{c:?}");
        // The same judge with its votes the other way round (sensitivity 0.2, specificity
        // 0.1, apparent rate 0.2 * 0.3 + 0.9 * 0.7 = 0.69): still 0.3.
        let flipped: Vec<f64> = votes.iter().map(|v| 1.0 - v).collect();
        let r = rogan_gladen(0.69, &flipped, &y, &[1.0; 20], None, &mut ChaCha8Rng::seed_from_u64(0));
        assert!((r - 0.3).abs() < 1e-12, "{r}");
    }

    /// A predictor right on all 20 labels still leaves the pseudo-labels' spread: an
    /// error rate that 20 labels show as 0 may be a fifth. Golden bounds from an
    /// independent NumPy implementation of the score interval (tilted variance by
    /// bisection, endpoints on a grid of 2,000), with Student's exact t(18) = 2.100922
    /// (lambda = 1 / (1 + 20 / 1000)); with 8 labels the low end would sit at 0.
    #[test]
    fn ppi_with_a_perfect_predictor_keeps_the_pseudo_labels_width_and_with_noise_falls_back_to_labels() {
        let y: Vec<f64> = (0..20).map(|i| f64::from(u8::from(i % 5 < 2))).collect();
        let i = ppi(&y, &y, 0.45, &[1.0; 20], &[0.0; 20], 1000);
        assert!((i.estimate - 0.449020).abs() < 1e-6, "{i:?}");
        assert!((i.low - 0.258270).abs() < 1e-3 && (i.high - 0.640409).abs() < 1e-3, "{i:?}");
        let flat = ppi(&y, &[0.5; 20], 0.5, &[1.0; 20], &[0.0; 20], 1000);
        assert!((flat.estimate - 0.4).abs() < 1e-12);
        assert!(flat.width() > 0.35);
    }

    /// Two predictors that agree on all but two of 50 labels (TriviaQA V2's posterior and
    /// picked judge in one replay draw): least squares put lambda at (41.7, -40.8) and the
    /// estimate at 3.65 with an interval of [1.91, 5.39], which holds no rate; the labels'
    /// own mean stands in.
    #[test]
    fn ppi_with_predictors_that_agree_on_the_labels_falls_back_to_the_labels() {
        let mut f = vec![];
        let mut y = vec![];
        for _ in 0..34 {
            f.push(vec![0.9999, 0.999]);
            y.push(1.0);
        }
        for _ in 0..13 {
            f.push(vec![0.0001, 0.001]);
            y.push(0.0);
        }
        for row in [[0.005767582110301048, 0.001], [0.986402247758477, 0.999], [0.9999, 0.999]] {
            f.push(row.to_vec());
            y.push(0.0);
        }
        let pi = [50.0 / 3000.0; 50];
        let every: Vec<f64> = f.iter().flatten().copied().collect();
        let i = ppi_many(&y, &f, &[0.710401239504643, 0.637100249999974], &every, &[1.0; 50], &pi);
        assert!((i.estimate - 0.68).abs() < 1e-9, "{i:?}");
        assert!(i.width() < 0.3, "{i:?}");
    }

    /// Two predictors that move together, weighed (-1.14, 1.69) by 10 labels of 20: the
    /// pseudo-labels' corners at the examples' least and greatest combined prediction
    /// (-0.19 and 0.52), not at -1.14 and 1.69. Golden bounds from an independent NumPy
    /// implementation (least squares with the same whisper of ridge, the corners moved
    /// into the range, the same Cornish-Fisher quantile); unmoved corners gave
    /// [0.024, 0.932].
    #[test]
    fn the_pseudo_labels_make_predictions_some_example_makes() {
        let a = [
            0.25, 0.34, 0.68, 0.55, 0.26, 0.46, 0.49, 0.3, 0.64, 0.27, 0.43, 0.51, 0.46, 0.55, 0.64, 0.77, 0.37, 0.59,
            0.62, 0.38,
        ];
        let b = [
            0.25, 0.46, 0.72, 0.51, 0.25, 0.5, 0.64, 0.28, 0.62, 0.35, 0.36, 0.49, 0.53, 0.6, 0.65, 0.82, 0.14, 0.67,
            0.54, 0.25,
        ];
        let y = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0];
        let f: Vec<Vec<f64>> = (0..10).map(|i| vec![a[i], b[i]]).collect();
        let every: Vec<f64> = a.iter().zip(&b).flat_map(|(&x, &z)| [x, z]).collect();
        let mean = [a.iter().sum::<f64>() / 20.0, b.iter().sum::<f64>() / 20.0];
        let i = ppi_many(&y, &f, &mean, &every, &[1.0; 10], &[0.5; 10]);
        assert!((i.estimate - 0.478106).abs() < 1e-5, "{i:?}");
        assert!((i.low - 0.121004).abs() < 1e-5 && (i.high - 0.835208).abs() < 1e-5, "{i:?}");
    }

    /// Every label right: without the pseudo-labels the residuals would have no variance.
    #[test]
    fn the_pseudo_labels_keep_an_interval_open_when_no_residual_is_seen() {
        let y: Vec<f64> = (0..50).map(|i| f64::from(u8::from(i % 3 != 0))).collect();
        let f: Vec<Vec<f64>> = y.iter().map(|&v| vec![v, v]).collect();
        let every: Vec<f64> = f.iter().flatten().copied().collect();
        let many = ppi_many(&y, &f, &[0.6, 0.6], &every, &[1.0; 50], &[0.0; 50]);
        let one = ppi(&y, &y, 0.6, &[1.0; 50], &[0.0; 50], 100_000);
        for i in [many, one] {
            assert!(i.width() > 0.05 && i.width() < 0.2, "{i:?}");
        }
    }

    /// A judge right on every label: each resample has it right on every example of both
    /// classes, and only the Jeffreys draws at the boundary give the interval a spread.
    #[test]
    fn rogan_gladens_resamples_draw_a_rate_they_see_at_one() {
        let y: Vec<f64> = (0..50).map(|i| f64::from(u8::from(i % 3 != 0))).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let point = rogan_gladen(0.6, &y, &y, &[1.0; 50], None, &mut rng);
        assert!((point - 0.6).abs() < 1e-12);
        let all: Vec<usize> = (0..50).collect();
        let draws: Vec<f64> = (0..200).map(|_| rogan_gladen(0.6, &y, &y, &[1.0; 50], Some(&all), &mut rng)).collect();
        let (lo, hi) = draws.iter().fold((1.0f64, 0.0f64), |(a, b), &v| (a.min(v), b.max(v)));
        assert!(hi - lo > 0.02, "{lo} {hi}");
        assert!(draws.iter().all(|&v| (0.0..=1.0).contains(&v)));
    }

    /// Judges casting hard votes, each right with its own probability `acc` independently,
    /// on `n` examples with positive rate `rate` (drawn from `rng`): the truth and the
    /// log-odds, with a flat label-free posterior.
    fn hard_votes(rng: &mut ChaCha8Rng, n: usize, acc: &[f64], rate: f64) -> (Vec<u8>, LogOdds) {
        use rand::Rng;
        let k = acc.len();
        let truth: Vec<u8> = (0..n).map(|_| u8::from(rng.random_bool(rate))).collect();
        let mut x = vec![0.0; n * k];
        for i in 0..n {
            for (j, a) in acc.iter().enumerate() {
                x[i * k + j] = if (truth[i] == 1) == rng.random_bool(*a) { 6.9 } else { -6.9 };
            }
        }
        let d = LogOdds::from_dense(n, k, x, &vec![0.5; n]).unwrap();
        (truth, d)
    }

    /// Nine judges of 60-87% accuracy, one positive in ten: the judge with the most right
    /// answers on 100 labels is mostly the one whose specificity they overstate, which
    /// pushed the corrected rate up by 0.03 and left 18% of intervals short of the true
    /// rate. Picked out of fold, the estimate is unbiased and the interval covers.
    #[test]
    fn rogan_gladen_covers_a_rare_positive_class() {
        let acc = [0.75, 0.85, 0.7, 0.82, 0.76, 0.85, 0.65, 0.6, 0.87];
        let (rate, intervals) = rare_class_intervals(5, &acc, 200, Estimator::RoganGladen);
        let drawn = intervals.len() as f64;
        let coverage = intervals.iter().filter(|i| i.covers(rate)).count() as f64 / drawn;
        let bias = intervals.iter().map(|i| i.estimate - rate).sum::<f64>() / drawn;
        assert!(coverage >= 0.93 && bias.abs() < 0.012, "coverage {coverage}, bias {bias}");
    }

    /// `draws` uniform samples of 100 labels from a jury of hard votes with one positive
    /// in ten ([`hard_votes`], 3,000 examples), each with `estimator`'s interval; and the
    /// jury's true rate.
    fn rare_class_intervals(seed: u64, acc: &[f64], draws: u64, estimator: Estimator) -> (f64, Vec<Interval>) {
        let n = 3000;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (truth, d) = hard_votes(&mut rng, n, acc, 0.1);
        let rate = truth.iter().map(|&t| f64::from(t)).sum::<f64>() / n as f64;
        let intervals = (0..draws)
            .filter_map(|t| {
                let index = rand::seq::index::sample(&mut rng, n, 100).into_vec();
                let label: Vec<u8> = index.iter().map(|&i| truth[i]).collect();
                let sample = Sample::new(n, index, label, None).ok()?;
                Some(RateEstimates::estimate(&d, &sample, t).get(estimator))
            })
            .collect();
        (rate, intervals)
    }

    /// Five judges of hard votes each right on 93%, one positive in ten, 100 labels: the
    /// best judge's residuals are mostly 0, now and then +1 (a positive it misses, under
    /// one a draw) or -lambda (about six). A Wald interval around their mean missed the
    /// true rate on the side of the residual the draw lacked (in a NumPy copy 90.3% over
    /// 300 draws); the score interval reaches toward it.
    #[test]
    fn ppi_covers_a_rare_positive_class_on_both_sides() {
        let (rate, intervals) = rare_class_intervals(11, &[0.93; 5], 400, Estimator::PpiBestJudge);
        let drawn = intervals.len() as f64;
        let below = intervals.iter().filter(|i| rate < i.low).count() as f64 / drawn;
        let above = intervals.iter().filter(|i| rate > i.high).count() as f64 / drawn;
        assert!(below + above <= 0.07 && below.max(above) <= 0.045, "below {below}, above {above}");
    }

    /// Five judges each wrong on 10% of examples, independently: the one with the fewest
    /// errors on 40 labels has about half its true rate there, while each fold's judge,
    /// picked on the other folds, errs on its own fold as often as anywhere.
    #[test]
    fn a_cross_fitted_judge_errs_on_the_labels_as_often_as_anywhere() {
        let n = 4000;
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let (truth, d) = hard_votes(&mut rng, n, &[0.9; 5], 0.4);
        let (mut in_sample, mut crossed, mut labels) = (0.0, 0.0, 0.0);
        for t in 0..300 {
            let index = rand::seq::index::sample(&mut rng, n, 40).into_vec();
            let label: Vec<u8> = index.iter().map(|&i| truth[i]).collect();
            let Ok(sample) = Sample::new(n, index, label, None) else { continue };
            let y: Vec<f64> = sample.labels().iter().map(|&l| f64::from(l)).collect();
            let judge = picked_judge(&d, &sample);
            let held = cross_fitted_judge(&d, &sample, &y, t).held;
            for (r, &i) in sample.index().iter().enumerate() {
                in_sample += f64::from(u8::from((d.get(i, judge) > 0.0) != (y[r] > 0.5)));
                crossed += f64::from(u8::from((held[r] > 0.5) != (y[r] > 0.5)));
                labels += 1.0;
            }
        }
        let (in_sample, crossed) = (in_sample / labels, crossed / labels);
        assert!(in_sample < 0.075, "{in_sample}");
        assert!((0.085..0.115).contains(&crossed), "{crossed}");
    }
}
