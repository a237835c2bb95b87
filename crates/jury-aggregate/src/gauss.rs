//! Dawid-Skene refined by a class-conditional Gaussian over the judges' log-odds with a
//! full covariance per class: judges that share mistakes (one model family) have
//! correlated log-odds within a class, and the Gaussian's quadratic rule discounts them
//! instead of counting a family several times, as Dawid-Skene does. Label-free.
//!
//! The Gaussian starts from Dawid-Skene's posteriors and runs `steps` EM steps (one by
//! default, chosen on HaluEval and half of TruthfulQA, docs/reproduction.md): left to
//! converge, a mixture of Gaussians finds whatever split of the examples explains the
//! log-odds best (confident against unsure examples, say), which need not be the truth.
//! A missing judgment is imputed with the judge's class means weighted by the example's
//! current posterior, so time is O(examples x judges^2) and memory O(judges^2) beyond
//! the judgments.

use jury_core::Judgments;

use crate::linalg::{cholesky, log_det, mahalanobis};
use crate::special::softmax_in_place;
use crate::{AggregateError, Aggregation, Aggregator, DawidSkene, DawidSkeneConfig, Diagnostics, SkillReport, finish};

/// Probabilities are clipped to [CLIP, 1 - CLIP] before their log-odds are taken, so a
/// hard 0/1 verdict becomes about -6.9/+6.9 rather than infinite.
pub(crate) const LOG_ODDS_CLIP: f64 = 1e-3;

/// Added to each covariance's diagonal, relative to the mean judge variance: keeps a
/// judge that never varies within a class (always Yes) from making it singular.
const RIDGE: f64 = 1e-3;

/// The log-odds of the positive class of probability `p`, clipped.
pub(crate) fn log_odds(p: f64) -> f64 {
    let p = p.clamp(LOG_ODDS_CLIP, 1.0 - LOG_ODDS_CLIP);
    (p / (1.0 - p)).ln()
}

/// Settings of the correlated-Gaussian refinement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CorrelatedGaussian {
    /// The Dawid-Skene fit it starts from; its `ties` also label the result.
    pub ds: DawidSkeneConfig,
    /// EM steps of the Gaussian after Dawid-Skene.
    pub steps: usize,
}

impl CorrelatedGaussian {
    /// The default EM steps (`jury aggregate --gauss-steps`), chosen on HaluEval and half
    /// of TruthfulQA (docs/reproduction.md).
    pub const DEFAULT_STEPS: usize = 1;

    pub fn new(ds: DawidSkeneConfig) -> Self {
        Self { ds, steps: Self::DEFAULT_STEPS }
    }
}

/// One class-conditional Gaussian per class (two classes), judges in matrix order.
struct Model {
    prior: [f64; 2],
    mean: [Vec<f64>; 2],
    /// Lower Cholesky factors of the covariances.
    chol: [Vec<f64>; 2],
    log_det: [f64; 2],
    /// The covariances' diagonals (for the skills).
    var: [Vec<f64>; 2],
}

/// Which covariance a fit keeps.
#[derive(Clone, Copy, PartialEq)]
enum Covariance {
    Full,
    /// Off-diagonal terms dropped: the judges independent given the class.
    Diagonal,
}

impl Aggregator for CorrelatedGaussian {
    fn name(&self) -> &'static str {
        "gauss"
    }

    fn aggregate(&self, j: &Judgments) -> Result<Aggregation, AggregateError> {
        let method = self.name();
        crate::check_correlated(method, j)?;
        if self.steps == 0 {
            return Err(AggregateError::Config { method, reason: "steps must be >= 1".into() });
        }
        let ds = DawidSkene::new(self.ds).aggregate(j)?;
        let x: Vec<f64> = j.entries().map(|(_, _, p)| log_odds(p[1])).collect();
        let mut t: Vec<f64> = ds.posteriors().rows().map(|r| r[1]).collect();
        let all: Vec<usize> = (0..j.n_examples()).collect();
        let mut model = fit(j, &x, &t, &all, Covariance::Full)?;
        t = posteriors(j, &x, &t, &model);
        for _ in 1..self.steps {
            model = fit(j, &x, &t, &all, Covariance::Full)?;
            t = posteriors(j, &x, &t, &model);
        }
        let judged = crate::judged_judges(j);
        let skills = separation(&model).into_iter().zip(judged).map(|(s, judged)| s.filter(|_| judged)).collect();
        let mut report = SkillReport::new(
            "separation of the judge's log-odds between the classes, in within-class standard deviations",
            skills,
            self.steps,
            true,
            None,
        );
        report.held_out_gain = held_out_gain(j, &x, &t)?;
        let values: Vec<f64> = t.iter().flat_map(|&p| [1.0 - p, p]).collect();
        let (labels, ties) = self.ds.ties.label_all(&values, 2);
        report.ties = ties;
        report.unjudged = (0..j.n_examples()).filter(|&n| j.row(n).len() == 0).count();
        finish(method, 2, values, labels, Diagnostics::Skills(report))
    }
}

/// Example `n`'s log-odds for every judge, missing ones imputed from the class means
/// weighted by `p1`, the example's current P(positive).
fn dense_row(j: &Judgments, x: &[f64], mean: &[Vec<f64>; 2], p1: f64, n: usize, out: &mut [f64]) {
    for (k, o) in out.iter_mut().enumerate() {
        *o = (1.0 - p1) * mean[0][k] + p1 * mean[1][k];
    }
    for (e, (k, _)) in j.entry_range(n).zip(j.row(n)) {
        out[k] = x[e];
    }
}

/// The M-step: class priors, means and covariances under the posteriors `t` over the
/// examples `rows`.
fn fit(j: &Judgments, x: &[f64], t: &[f64], rows: &[usize], cov: Covariance) -> Result<Model, AggregateError> {
    let m = j.n_judges();
    let (mut sum, mut weight) = ([vec![0.0; m], vec![0.0; m]], [vec![0.0; m], vec![0.0; m]]);
    let mut mass = [0.0; 2];
    for &n in rows {
        let w = [1.0 - t[n], t[n]];
        mass[0] += w[0];
        mass[1] += w[1];
        for (e, (k, _)) in j.entry_range(n).zip(j.row(n)) {
            for c in 0..2 {
                sum[c][k] += w[c] * x[e];
                weight[c][k] += w[c];
            }
        }
    }
    let mean: [Vec<f64>; 2] = std::array::from_fn(|c| {
        (0..m).map(|k| if weight[c][k] > 0.0 { sum[c][k] / weight[c][k] } else { 0.0 }).collect()
    });
    let mut scatter = [vec![0.0; m * m], vec![0.0; m * m]];
    let mut row = vec![0.0; m];
    for &n in rows {
        dense_row(j, x, &mean, t[n], n, &mut row);
        for (c, s) in scatter.iter_mut().enumerate() {
            let w = if c == 1 { t[n] } else { 1.0 - t[n] };
            if w == 0.0 {
                continue;
            }
            for a in 0..m {
                let da = w * (row[a] - mean[c][a]);
                for b in a..m {
                    s[a * m + b] += da * (row[b] - mean[c][b]);
                }
            }
        }
    }
    let total = (mass[0] + mass[1]).max(f64::MIN_POSITIVE);
    let prior = [(mass[0] / total).max(1e-9), (mass[1] / total).max(1e-9)];
    let mut covs: [Vec<f64>; 2] = std::array::from_fn(|c| {
        let s = &scatter[c];
        let mut out = vec![0.0; m * m];
        for a in 0..m {
            for b in a..m {
                let v = if mass[c] > 0.0 { s[a * m + b] / mass[c] } else { 0.0 };
                if a == b || cov == Covariance::Full {
                    out[a * m + b] = v;
                    out[b * m + a] = v;
                }
            }
        }
        out
    });
    let mean_var = covs.iter().map(|c| (0..m).map(|a| c[a * m + a]).sum::<f64>()).sum::<f64>() / (2 * m) as f64;
    let mut ridge = RIDGE * mean_var + 1e-9;
    let var: [Vec<f64>; 2] = std::array::from_fn(|c| (0..m).map(|a| covs[c][a * m + a]).collect());
    // A ridge of 1e-3 of the mean variance makes any covariance of finite values
    // positive definite in exact arithmetic; the retries absorb rounding.
    for _ in 0..8 {
        covs.iter_mut().for_each(|c| (0..m).for_each(|a| c[a * m + a] += ridge));
        let chol = [cholesky(&covs[0], m), cholesky(&covs[1], m)];
        if let [Some(l0), Some(l1)] = chol {
            let log_det = [log_det(&l0, m), log_det(&l1, m)];
            return Ok(Model { prior, mean, chol: [l0, l1], log_det, var });
        }
        ridge *= 10.0;
    }
    Err(AggregateError::Config {
        method: "gauss",
        reason: "the judges' log-odds covariance stayed singular (non-finite judgments?)".into(),
    })
}

/// Each class's log prior plus log density (up to the shared constant) of a dense row.
fn log_joint(model: &Model, row: &[f64], centred: &mut [f64], scratch: &mut [f64]) -> [f64; 2] {
    let m = row.len();
    std::array::from_fn(|c| {
        centred.iter_mut().zip(row.iter().zip(&model.mean[c])).for_each(|(d, (x, mu))| *d = x - mu);
        model.prior[c].ln() - 0.5 * mahalanobis(&model.chol[c], m, centred, scratch) - 0.5 * model.log_det[c]
    })
}

/// Every example's P(positive) under `model` (the E-step); an unjudged example keeps
/// its current one.
fn posteriors(j: &Judgments, x: &[f64], t: &[f64], model: &Model) -> Vec<f64> {
    let m = j.n_judges();
    let (mut row, mut centred, mut scratch) = (vec![0.0; m], vec![0.0; m], vec![0.0; m]);
    (0..j.n_examples())
        .map(|n| {
            if j.row(n).len() == 0 {
                return t[n];
            }
            dense_row(j, x, &model.mean, t[n], n, &mut row);
            let mut l = log_joint(model, &row, &mut centred, &mut scratch);
            softmax_in_place(&mut l);
            l[1]
        })
        .collect()
}

/// `(mean_1 - mean_0) / pooled sd` per judge.
fn separation(model: &Model) -> Vec<Option<f64>> {
    (0..model.mean[0].len())
        .map(|k| {
            let pooled = model.prior[0] * model.var[0][k] + model.prior[1] * model.var[1][k];
            (pooled > 0.0).then(|| (model.mean[1][k] - model.mean[0][k]) / pooled.sqrt())
        })
        .collect()
}

/// A label-free check of whether the judges' correlations are real: fitted under the
/// final posteriors on the even examples, the mean log-likelihood per odd example with
/// every judge present, correlated model minus independent one (positive: the
/// correlations predict unseen examples). `None` without such examples or with one judge.
fn held_out_gain(j: &Judgments, x: &[f64], t: &[f64]) -> Result<Option<f64>, AggregateError> {
    let m = j.n_judges();
    let even: Vec<usize> = (0..j.n_examples()).step_by(2).collect();
    let odd: Vec<usize> = (1..j.n_examples()).step_by(2).filter(|&n| j.row(n).len() == m).collect();
    if m < 2 || odd.is_empty() {
        return Ok(None);
    }
    let full = fit(j, x, t, &even, Covariance::Full)?;
    let diag = fit(j, x, t, &even, Covariance::Diagonal)?;
    let (mut row, mut centred, mut scratch) = (vec![0.0; m], vec![0.0; m], vec![0.0; m]);
    let mut gain = 0.0;
    for &n in &odd {
        dense_row(j, x, &full.mean, t[n], n, &mut row);
        let mut a = log_joint(&full, &row, &mut centred, &mut scratch);
        let mut b = log_joint(&diag, &row, &mut centred, &mut scratch);
        gain += softmax_in_place(&mut a) - softmax_in_place(&mut b);
    }
    Ok(Some(gain / odd.len() as f64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::binary;

    fn run(rows: &[&[Option<f64>]]) -> Aggregation {
        CorrelatedGaussian::new(DawidSkeneConfig::default()).aggregate(&binary(rows)).unwrap()
    }

    fn finite(a: &Aggregation) -> bool {
        a.posteriors().rows().all(|r| r.iter().all(|p| p.is_finite()))
    }

    #[test]
    fn degenerate_juries_give_finite_posteriors() {
        let (y, n) = (Some(0.9), Some(0.1));
        // A judge that always says Yes next to two that vary.
        let always = run(&[&[y, y, n], &[y, n, n], &[y, y, y], &[y, n, y], &[y, y, n], &[y, n, n]]);
        assert!(finite(&always));
        // One judge.
        let single = run(&[&[y], &[n], &[y], &[Some(0.7)]]);
        assert!(finite(&single));
        assert_eq!(single.labels(), &[1, 0, 1, 1]);
        // Identical judges: a singular covariance that the ridge absorbs.
        let same = run(&[&[y, y, y], &[n, n, n], &[Some(0.6), Some(0.6), Some(0.6)], &[n, n, n]]);
        assert!(finite(&same));
        assert_eq!(same.labels(), &[1, 0, 1, 0]);
        // Missing judgments and an unjudged example.
        let sparse = run(&[&[y, None, n], &[None, None, None], &[n, n, None], &[y, y, y]]);
        assert!(finite(&sparse));
    }

    #[test]
    fn more_than_two_classes_is_a_one_line_error() {
        let j =
            Judgments::from_entries(vec!["e".into()], vec!["a".into()], 3, vec![Some(vec![0.2, 0.3, 0.5])]).unwrap();
        let err = CorrelatedGaussian::new(DawidSkeneConfig::default()).aggregate(&j).unwrap_err().to_string();
        assert!(err.contains("two classes") && !err.contains('\n'), "{err}");
    }

    #[test]
    fn the_held_out_gain_is_reported_when_every_judge_judged_an_odd_example() {
        let rows: Vec<Vec<Option<f64>>> = (0..40)
            .map(|i| {
                let p = if i % 3 == 0 { 0.8 } else { 0.25 };
                vec![Some(p), Some(p * 0.9 + 0.05), Some(if i % 2 == 0 { 0.6 } else { 0.4 })]
            })
            .collect();
        let refs: Vec<&[Option<f64>]> = rows.iter().map(Vec::as_slice).collect();
        let Diagnostics::Skills(r) = run(&refs).diagnostics().clone() else { panic!("skills") };
        assert!(r.held_out_gain.is_some_and(f64::is_finite), "{r:?}");
        assert_eq!(r.skills.len(), 3);
    }
}
