//! Dawid-Skene refined by a class-conditional Gaussian over the judges' log-odds with a
//! full covariance per class: judges that share mistakes (one model family) have
//! correlated log-odds within a class, and the Gaussian's quadratic rule discounts them
//! instead of counting a family several times, as Dawid-Skene does. Label-free.
//!
//! The Gaussian starts from Dawid-Skene's posteriors and runs `steps` EM steps (one by
//! default, chosen on HaluEval and half of TruthfulQA, docs/reproduction/label-free.md): left to
//! converge, a mixture of Gaussians finds whatever split of the examples explains the
//! log-odds best (confident against unsure examples, say), which need not be the truth.
//! A missing judgment is imputed with the judge's class means weighted by the example's
//! current posterior, so time is O(examples x judges^2) and memory O(judges^2) beyond
//! the judgments.
//!
//! [`CareGaussian`] (`care-gauss`, the recommended default) starts the same EM from
//! CARE's posteriors instead and keeps one covariance shared by both classes, so its
//! posterior is linear in the log-odds (a linear discriminant). Where most judges share
//! one mistake, Dawid-Skene's split follows them and CARE's quality factor need not;
//! a shared covariance is estimated from every example rather than from one class's
//! share. The choice and its evidence: docs/reproduction/label-free.md.

use jury_core::Judgments;

use crate::linalg::{cholesky, cholesky_solve, log_det, mahalanobis};
use crate::special::{agreeing_share, softmax_in_place};
use crate::{
    AggregateError, Aggregation, Aggregator, Care, DawidSkene, DawidSkeneConfig, Diagnostics, SkillReport, TieBreak,
    finish,
};

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
    /// of TruthfulQA (docs/reproduction/label-free.md).
    pub const DEFAULT_STEPS: usize = 1;

    pub fn new(ds: DawidSkeneConfig) -> Self {
        Self { ds, steps: Self::DEFAULT_STEPS }
    }
}

/// Settings of CARE refined by a Gaussian with a covariance shared by the classes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CareGaussian {
    /// The CARE fit it starts from; its `ties` also label the result.
    pub care: Care,
    /// EM steps of the Gaussian after CARE.
    pub steps: usize,
}

impl CareGaussian {
    /// The default EM steps (`jury aggregate --care-gauss-steps`), chosen on HaluEval
    /// and half of TruthfulQA with CARE's default gamma (docs/reproduction/label-free.md).
    pub const DEFAULT_STEPS: usize = 1;

    pub fn new(ties: TieBreak) -> Self {
        Self { care: Care::new(ties), steps: Self::DEFAULT_STEPS }
    }
}

impl From<Model> for GaussParams {
    fn from(model: Model) -> Self {
        GaussParams { prior: model.prior, mean: model.mean, cov: model.cov }
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
    /// The covariances, ridge included (for posteriors of partly judged examples).
    cov: [Vec<f64>; 2],
}

/// The fitted class-conditional Gaussians of [`CorrelatedGaussian`], for the posterior of
/// an example that only some judges have judged (the adaptive jury's stopping rule).
#[derive(Debug, Clone, PartialEq)]
pub struct GaussParams {
    prior: [f64; 2],
    mean: [Vec<f64>; 2],
    /// Row-major judges x judges.
    cov: [Vec<f64>; 2],
}

impl GaussParams {
    /// P(negative), P(positive) of an example from the judges that judged it (judge
    /// index, P(positive)): each class's Gaussian marginalised to those judges, so a
    /// judge not asked adds nothing and a judge of a family already asked adds what the
    /// family's correlation leaves. No judge: the prior.
    pub fn posterior(&self, answers: &[(usize, f64)]) -> [f64; 2] {
        let m = self.mean[0].len();
        // A judge listed twice counts once (its repeat would make the covariance
        // singular).
        let mut seen = vec![false; m];
        let answers: Vec<(usize, f64)> =
            answers.iter().copied().filter(|&(k, _)| k < m && !std::mem::replace(&mut seen[k], true)).collect();
        let s = answers.len();
        let (mut sub, mut centred, mut scratch) = (vec![0.0; s * s], vec![0.0; s], vec![0.0; s]);
        let mut log = self.prior.map(f64::ln);
        let mut evidence = [0.0; 2];
        for (c, e) in evidence.iter_mut().enumerate() {
            for (a, &(ka, _)) in answers.iter().enumerate() {
                for (b, &(kb, _)) in answers.iter().enumerate() {
                    sub[a * s + b] = self.cov[c][ka * m + kb];
                }
            }
            // A principal sub-matrix of a positive definite matrix is positive definite;
            // should rounding break that, the answers are not evidence.
            let Some(chol) = cholesky(&sub, s) else { return softmax(log) };
            for (d, &(k, p)) in centred.iter_mut().zip(&answers) {
                *d = log_odds(p) - self.mean[c][k];
            }
            *e = -0.5 * mahalanobis(&chol, s, &centred, &mut scratch) - 0.5 * log_det(&chol, s);
        }
        log.iter_mut().zip(evidence).for_each(|(l, e)| *l += e);
        softmax(log)
    }

    /// The probability, under the model, that the judges `remaining` (not yet asked)
    /// would leave the verdict of the judges who answered unchanged: the share of
    /// `draws` draws of the remaining judges' log-odds (class from the current
    /// posterior, then the class's Gaussian conditioned on the answers) whose verdict
    /// with everyone, answered and remaining, is the current one, as
    /// `(agreeing + 1) / (draws + 2)`; the count stops once that cannot reach `floor`.
    /// No judge remaining: 1.
    pub fn agreement(
        &self,
        answers: &[(usize, f64)],
        remaining: &[usize],
        draws: usize,
        floor: f64,
        rng: &mut impl rand::Rng,
    ) -> f64 {
        let m = self.mean[0].len();
        let mut seen = vec![false; m];
        let answers: Vec<(usize, f64)> =
            answers.iter().copied().filter(|&(k, _)| k < m && !std::mem::replace(&mut seen[k], true)).collect();
        let missing: Vec<usize> =
            remaining.iter().copied().filter(|&k| k < m && !std::mem::replace(&mut seen[k], true)).collect();
        if missing.is_empty() || draws == 0 {
            return 1.0;
        }
        let present: Vec<usize> = answers.iter().map(|&(k, _)| k).collect();
        let xo: Vec<f64> = answers.iter().map(|&(_, p)| log_odds(p)).collect();
        let everyone: Vec<usize> = present.iter().chain(&missing).copied().collect();
        let (o, q, u) = (present.len(), missing.len(), everyone.len());
        let posterior = self.posterior(&answers);
        let current = usize::from(posterior[1] >= posterior[0]);
        // Per class: the conditional mean and the factor of the conditional covariance
        // of the remaining judges, and the factor of everyone's covariance.
        let mut given = Vec::with_capacity(2);
        for c in 0..2 {
            let gap = Gap::new(&self.cov[c], m, &present, &missing);
            let mean: Vec<f64> = missing
                .iter()
                .enumerate()
                .map(|(i, &a)| {
                    self.mean[c][a]
                        + (0..o).map(|k| gap.regression[i * o + k] * (xo[k] - self.mean[c][present[k]])).sum::<f64>()
                })
                .collect();
            let all: Vec<f64> = everyone
                .iter()
                .flat_map(|&a| everyone.iter().map(move |&b| (a, b)))
                .map(|(a, b)| self.cov[c][a * m + b])
                .collect();
            // Principal sub-matrices and Schur complements of a positive definite matrix
            // are positive definite; should rounding break that, nothing is known.
            let (Some(cond), Some(chol)) = (cholesky(&gap.cond, q), cholesky(&all, u)) else { return 0.0 };
            let log_det = log_det(&chol, u);
            given.push((mean, cond, chol, log_det));
        }
        let (mut row, mut centred, mut scratch, mut z) = (vec![0.0; u], vec![0.0; u], vec![0.0; u], vec![0.0; q]);
        row[..o].copy_from_slice(&xo);
        agreeing_share(draws, floor, || {
            let c = usize::from(rng.random::<f64>() < posterior[1]);
            let (mean, cond, _, _) = &given[c];
            standard_normals(rng, &mut z);
            for i in 0..q {
                row[o + i] = mean[i] + (0..=i).map(|k| cond[i * q + k] * z[k]).sum::<f64>();
            }
            let log: [f64; 2] = std::array::from_fn(|c| {
                let (_, _, chol, log_det) = &given[c];
                for (i, &a) in everyone.iter().enumerate() {
                    centred[i] = row[i] - self.mean[c][a];
                }
                self.prior[c].ln() - 0.5 * mahalanobis(chol, u, &centred, &mut scratch) - 0.5 * log_det
            });
            usize::from(log[1] >= log[0]) == current
        })
    }

    /// Every example's P(positive) from its judgments; an unjudged example's is the prior.
    fn positive(&self, j: &Judgments) -> Vec<f64> {
        (0..j.n_examples())
            .map(|n| {
                let row: Vec<(usize, f64)> = j.row(n).map(|(k, p)| (k, p[1])).collect();
                self.posterior(&row)[1]
            })
            .collect()
    }

    /// Every example's label by [`GaussParams::posterior`], ties by `ties`.
    pub fn labels(&self, j: &Judgments, ties: crate::TieBreak) -> Vec<usize> {
        let values: Vec<f64> = self.positive(j).into_iter().flat_map(|p| [1.0 - p, p]).collect();
        ties.label_by_sides(&values, j).0
    }

    /// Each judge's separation of the classes, as [`CorrelatedGaussian`]'s skills
    /// (`None` for a judge that never varies).
    pub fn separation(&self) -> Vec<Option<f64>> {
        let m = self.mean[0].len();
        let var: [Vec<f64>; 2] = std::array::from_fn(|c| (0..m).map(|k| self.cov[c][k * m + k]).collect());
        separation(&self.prior, &self.mean, &var)
    }
}

/// Which covariance a fit keeps.
#[derive(Clone, Copy, PartialEq)]
enum Covariance {
    /// One full covariance per class.
    Full,
    /// Off-diagonal terms dropped: the judges independent given the class.
    Diagonal,
    /// One full covariance for both classes: the classes' scatter pooled.
    Pooled,
    /// The pooled covariance's diagonal.
    PooledDiagonal,
}

impl Covariance {
    fn pooled(self) -> bool {
        matches!(self, Covariance::Pooled | Covariance::PooledDiagonal)
    }

    fn keeps_off_diagonal(self) -> bool {
        matches!(self, Covariance::Full | Covariance::Pooled)
    }

    /// The independent-judges counterpart, for the held-out gain.
    fn diagonal(self) -> Covariance {
        if self.pooled() { Covariance::PooledDiagonal } else { Covariance::Diagonal }
    }
}

impl Aggregator for CorrelatedGaussian {
    fn name(&self) -> &'static str {
        "gauss"
    }

    fn aggregate(&self, j: &Judgments) -> Result<Aggregation, AggregateError> {
        let method = self.name();
        crate::check_correlated(method, j)?;
        check_steps(method, self.steps)?;
        let start = positive_posteriors(&DawidSkene::new(self.ds).aggregate(j)?);
        refine(method, j, start, self.steps, Covariance::Full, self.ds.ties)
    }
}

impl Aggregator for CareGaussian {
    fn name(&self) -> &'static str {
        "care-gauss"
    }

    fn aggregate(&self, j: &Judgments) -> Result<Aggregation, AggregateError> {
        let method = self.name();
        crate::check_correlated(method, j)?;
        check_steps(method, self.steps)?;
        let start = positive_posteriors(&self.care.aggregate(j)?);
        refine(method, j, start, self.steps, Covariance::Pooled, self.care.ties)
    }
}

fn check_steps(method: &'static str, steps: usize) -> Result<(), AggregateError> {
    if steps == 0 {
        return Err(AggregateError::Config { method, reason: "steps must be >= 1".into() });
    }
    Ok(())
}

/// The model's own errors (from [`factor`]) named after the method that fitted it.
fn named(method: &'static str) -> impl Fn(AggregateError) -> AggregateError {
    move |e| match e {
        AggregateError::Config { reason, .. } => AggregateError::Config { method, reason },
        other => other,
    }
}

fn positive_posteriors(a: &Aggregation) -> Vec<f64> {
    a.posteriors().rows().map(|r| r[1]).collect()
}

/// `steps` EM steps of the Gaussians with covariance `cov` from the posteriors
/// P(positive) `start`, as an aggregation of `method` with its diagnostics.
fn refine(
    method: &'static str,
    j: &Judgments,
    start: Vec<f64>,
    steps: usize,
    cov: Covariance,
    ties: TieBreak,
) -> Result<Aggregation, AggregateError> {
    let x: Vec<f64> = j.entries().map(|(_, _, p)| log_odds(p[1])).collect();
    let (model, t) = em(j, &x, start, steps, cov).map_err(named(method))?;
    let judged = crate::judged_judges(j);
    let skills = separation(&model.prior, &model.mean, &model.var)
        .into_iter()
        .zip(judged)
        .map(|(s, judged)| s.filter(|_| judged))
        .collect();
    let mut report = SkillReport::new(
        "separation of the judge's log-odds between the classes, in within-class standard deviations",
        skills,
        steps,
        true,
        None,
    );
    report.held_out_gain = held_out_gain(j, &x, &t, cov).map_err(named(method))?;
    let values: Vec<f64> = t.iter().flat_map(|&p| [1.0 - p, p]).collect();
    let (labels, ties) = ties.label_by_sides(&values, j);
    report.ties = ties;
    report.unjudged = (0..j.n_examples()).filter(|&n| j.row(n).len() == 0).count();
    finish(method, 2, values, labels, Diagnostics::Skills(report))
}

/// `steps` EM steps of the Gaussians from the posteriors `t`: the last model and the
/// posteriors P(positive) it gives.
fn em(
    j: &Judgments,
    x: &[f64],
    mut t: Vec<f64>,
    steps: usize,
    cov: Covariance,
) -> Result<(Model, Vec<f64>), AggregateError> {
    // An example no judge judged says nothing of the judges: imputed from the class
    // means it would only shrink the covariances.
    let all: Vec<usize> = (0..j.n_examples()).filter(|&n| j.row(n).len() > 0).collect();
    let mut model = fit(j, x, &t, &all, cov)?;
    t = posteriors(j, x, &t, &model);
    for _ in 1..steps {
        model = fit(j, x, &t, &all, cov)?;
        t = posteriors(j, x, &t, &model);
    }
    Ok((model, t))
}

/// [`CorrelatedGaussian::fit`] and [`CareGaussian::fit`] from their start.
fn fit_gaps(j: &Judgments, start: Vec<f64>, steps: usize, cov: Covariance) -> Result<GaussParams, AggregateError> {
    let x: Vec<f64> = j.entries().map(|(_, _, p)| log_odds(p[1])).collect();
    let rows: Vec<usize> = (0..j.n_examples()).filter(|&n| j.row(n).len() > 0).collect();
    let mut params = GaussParams::from(fit_missing(j, &x, &start, &rows, cov)?);
    for _ in 1..steps {
        let t = params.positive(j);
        params = GaussParams::from(fit_missing(j, &x, &t, &rows, cov)?);
    }
    Ok(params)
}

impl CorrelatedGaussian {
    /// The fitted Gaussians, for judgments with gaps that depend only on the judgments
    /// present (an adaptive jury's): fitted as [`Aggregator::aggregate`] fits them, but
    /// each gap filled by its conditional mean given the row (EM for missing data)
    /// rather than by the class means, and each example's posterior marginalised to its
    /// judges. On judgments without gaps, the same model.
    pub fn fit(&self, j: &Judgments) -> Result<GaussParams, AggregateError> {
        crate::check_correlated(self.name(), j)?;
        check_steps(self.name(), self.steps)?;
        let start = positive_posteriors(&DawidSkene::new(self.ds).aggregate(j)?);
        fit_gaps(j, start, self.steps, Covariance::Full).map_err(named(self.name()))
    }
}

impl CareGaussian {
    /// The fitted Gaussians (one shared covariance), for judgments with gaps, as
    /// [`CorrelatedGaussian::fit`].
    pub fn fit(&self, j: &Judgments) -> Result<GaussParams, AggregateError> {
        crate::check_correlated(self.name(), j)?;
        check_steps(self.name(), self.steps)?;
        let start = positive_posteriors(&self.care.aggregate(j)?);
        fit_gaps(j, start, self.steps, Covariance::Pooled).map_err(named(self.name()))
    }
}

/// Fills `z` with independent standard normal draws (Box-Muller).
fn standard_normals(rng: &mut impl rand::Rng, z: &mut [f64]) {
    for pair in z.chunks_mut(2) {
        let (u1, u2) = (1.0 - rng.random::<f64>(), rng.random::<f64>());
        let r = (-2.0 * u1.ln()).sqrt();
        let t = std::f64::consts::TAU * u2;
        pair[0] = r * t.cos();
        if let Some(second) = pair.get_mut(1) {
            *second = r * t.sin();
        }
    }
}

fn softmax(mut log: [f64; 2]) -> [f64; 2] {
    softmax_in_place(&mut log);
    log
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
                if a == b || cov.keeps_off_diagonal() {
                    out[a * m + b] = v;
                    out[b * m + a] = v;
                }
            }
        }
        out
    });
    if cov.pooled() {
        pool(&mut covs, mass);
    }
    factor(prior, mean, covs)
}

/// Replaces both classes' covariances by their average weighted by the classes' masses
/// (the pooled within-class covariance).
fn pool(covs: &mut [Vec<f64>; 2], mass: [f64; 2]) {
    let total = (mass[0] + mass[1]).max(f64::MIN_POSITIVE);
    let pooled: Vec<f64> = covs[0].iter().zip(&covs[1]).map(|(a, b)| (mass[0] * a + mass[1] * b) / total).collect();
    *covs = [pooled.clone(), pooled];
}

/// The model of these priors, means and covariances, each covariance with a small ridge
/// and factored.
fn factor(prior: [f64; 2], mean: [Vec<f64>; 2], mut covs: [Vec<f64>; 2]) -> Result<Model, AggregateError> {
    let m = mean[0].len();
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
            return Ok(Model { prior, mean, chol: [l0, l1], log_det, var, cov: covs });
        }
        ridge *= 10.0;
    }
    Err(AggregateError::Config {
        method: "gauss",
        reason: "the judges' log-odds covariance stayed singular (non-finite judgments?)".into(),
    })
}

/// Rounds of [`fit_missing`]'s EM, from the model that fills gaps with class means.
const MISSING_ROUNDS: usize = 10;

/// The M-step of [`fit`] for rows with judges missing at random given the judges
/// present (as the adaptive jury's are: whether a judge is asked depends only on the
/// answers before it): each gap is filled by its conditional mean given the row's
/// judgments under the previous model, and its conditional covariance is added to the
/// scatter (EM for a Gaussian with missing data). Filling gaps with the class means, as
/// [`fit`] does, shrinks a judge's variance where it is often missing. Rows are grouped
/// by the judges present, so the cost is O(patterns x judges^3 + rows x judges^2).
fn fit_missing(j: &Judgments, x: &[f64], t: &[f64], rows: &[usize], cov: Covariance) -> Result<Model, AggregateError> {
    let m = j.n_judges();
    let mut model = fit(j, x, t, rows, cov)?;
    let mut patterns: rustc_hash::FxHashMap<Vec<usize>, Vec<usize>> = Default::default();
    for &n in rows {
        patterns.entry(j.row(n).map(|(k, _)| k).collect()).or_default().push(n);
    }
    if patterns.keys().all(|present| present.len() == m) {
        return Ok(model);
    }
    let mut patterns: Vec<(Vec<usize>, Vec<usize>)> = patterns.into_iter().collect();
    patterns.sort_unstable();
    let mass = [rows.iter().map(|&n| 1.0 - t[n]).sum::<f64>(), rows.iter().map(|&n| t[n]).sum::<f64>()];
    for _ in 0..MISSING_ROUNDS {
        let mut first = [vec![0.0; m], vec![0.0; m]];
        let mut second = [vec![0.0; m * m], vec![0.0; m * m]];
        let mut row = vec![0.0; m];
        for (present, examples) in &patterns {
            let missing: Vec<usize> = (0..m).filter(|k| present.binary_search(k).is_err()).collect();
            for c in 0..2 {
                let gap = Gap::new(&model.cov[c], m, present, &missing);
                let mut weight = 0.0;
                for &n in examples {
                    let w = if c == 1 { t[n] } else { 1.0 - t[n] };
                    if w == 0.0 {
                        continue;
                    }
                    weight += w;
                    for (e, (k, _)) in j.entry_range(n).zip(j.row(n)) {
                        row[k] = x[e];
                    }
                    gap.fill(&model.mean[c], present, &missing, &mut row);
                    for a in 0..m {
                        first[c][a] += w * row[a];
                        let wa = w * row[a];
                        for b in a..m {
                            second[c][a * m + b] += wa * row[b];
                        }
                    }
                }
                // `missing` ascends, so (i, l) with i <= l is the upper triangle.
                let q = missing.len();
                for (i, &a) in missing.iter().enumerate() {
                    for (l, &b) in missing.iter().enumerate().skip(i) {
                        second[c][a * m + b] += weight * gap.cond[i * q + l];
                    }
                }
            }
        }
        let mean: [Vec<f64>; 2] =
            std::array::from_fn(|c| first[c].iter().map(|s| s / mass[c].max(f64::MIN_POSITIVE)).collect());
        let mut covs: [Vec<f64>; 2] = std::array::from_fn(|c| {
            let mut out = vec![0.0; m * m];
            for a in 0..m {
                for b in a..m {
                    let v = second[c][a * m + b] / mass[c].max(f64::MIN_POSITIVE) - mean[c][a] * mean[c][b];
                    out[a * m + b] = v;
                    out[b * m + a] = v;
                }
            }
            out
        });
        if cov.pooled() {
            pool(&mut covs, mass);
        }
        model = factor(model.prior, mean, covs)?;
    }
    Ok(model)
}

/// What one class's Gaussian says of a row's missing judges given the present ones: the
/// regression of the missing on the present and the conditional covariance.
struct Gap {
    /// `|missing| x |present|`: `cov_mp cov_pp^-1`.
    regression: Vec<f64>,
    /// `|missing| x |missing|`: `cov_mm - cov_mp cov_pp^-1 cov_pm`.
    cond: Vec<f64>,
}

impl Gap {
    fn new(cov: &[f64], m: usize, present: &[usize], missing: &[usize]) -> Gap {
        let (p, q) = (present.len(), missing.len());
        let sub = |rows: &[usize], cols: &[usize]| -> Vec<f64> {
            rows.iter().flat_map(|&a| cols.iter().map(move |&b| cov[a * m + b])).collect()
        };
        let mut cond = sub(missing, missing);
        let mut regression = vec![0.0; q * p];
        // A principal sub-matrix of the (ridged, positive definite) covariance is
        // positive definite; if rounding breaks that, the gap is filled from the means.
        if let Some(l) = (p > 0).then(|| cholesky(&sub(present, present), p)).flatten() {
            for (i, &a) in missing.iter().enumerate() {
                let r = &mut regression[i * p..(i + 1) * p];
                r.iter_mut().zip(present).for_each(|(r, &b)| *r = cov[a * m + b]);
                cholesky_solve(&l, p, r);
            }
            for i in 0..q {
                for l2 in 0..q {
                    let b = missing[l2];
                    cond[i * q + l2] -= (0..p).map(|k| regression[i * p + k] * cov[present[k] * m + b]).sum::<f64>();
                }
            }
        }
        Gap { regression, cond }
    }

    /// Fills `row`'s missing entries with their conditional means.
    fn fill(&self, mean: &[f64], present: &[usize], missing: &[usize], row: &mut [f64]) {
        let p = present.len();
        for (i, &a) in missing.iter().enumerate() {
            row[a] = mean[a]
                + present
                    .iter()
                    .enumerate()
                    .map(|(k, &b)| self.regression[i * p + k] * (row[b] - mean[b]))
                    .sum::<f64>();
        }
    }
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

/// `(mean_1 - mean_0) / pooled sd` per judge, from each class's variances.
fn separation(prior: &[f64; 2], mean: &[Vec<f64>; 2], var: &[Vec<f64>; 2]) -> Vec<Option<f64>> {
    (0..mean[0].len())
        .map(|k| {
            let pooled = prior[0] * var[0][k] + prior[1] * var[1][k];
            (pooled > 0.0).then(|| (mean[1][k] - mean[0][k]) / pooled.sqrt())
        })
        .collect()
}

/// A label-free check of whether the judges' correlations are real: fitted under the
/// final posteriors on the even examples, the mean log-likelihood per odd example with
/// every judge present, correlated model minus independent one (positive: the
/// correlations predict unseen examples). `None` without such examples or with one judge.
fn held_out_gain(j: &Judgments, x: &[f64], t: &[f64], cov: Covariance) -> Result<Option<f64>, AggregateError> {
    let m = j.n_judges();
    let even: Vec<usize> = (0..j.n_examples()).step_by(2).collect();
    let odd: Vec<usize> = (1..j.n_examples()).step_by(2).filter(|&n| j.row(n).len() == m).collect();
    if m < 2 || odd.is_empty() {
        return Ok(None);
    }
    let full = fit(j, x, t, &even, cov)?;
    let diag = fit(j, x, t, &even, cov.diagonal())?;
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

    /// Degenerate juries through `run`: finite posteriors and the obvious labels.
    fn check_degenerate_juries(run: impl Fn(&[&[Option<f64>]]) -> Aggregation) {
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
        // Hard verdicts only, as in the pairwise sets.
        let (a, b) = (Some(1.0), Some(0.0));
        let hard = run(&[&[a, a, b], &[b, b, b], &[a, None, a], &[b, a, b], &[a, a, a]]);
        assert!(finite(&hard));
    }

    #[test]
    fn degenerate_juries_give_finite_posteriors() {
        check_degenerate_juries(run);
        check_degenerate_juries(|rows| CareGaussian::new(TieBreak::Positive).aggregate(&binary(rows)).unwrap());
    }

    /// Three judges' log-odds: `s + z` for judge 0, a near copy of it for judge 1, and
    /// `s + e` (its own noise) for judge 2; `keep(n, judge, x0)` drops entries.
    fn copied_jury(n: usize, keep: impl Fn(usize, usize, f64) -> bool) -> Judgments {
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
        let mut entries = Vec::new();
        for i in 0..n {
            let mut z = [0.0; 4];
            standard_normals(&mut rng, &mut z);
            let s = if i % 2 == 0 { 1.5 } else { -1.5 };
            let x = [s + z[0], s + z[0] + 0.05 * z[1], s + z[2]];
            for (k, x) in x.into_iter().enumerate() {
                let p = 1.0 / (1.0 + (-x).exp());
                entries.push(keep(i, k, s + z[0]).then(|| vec![1.0 - p, p]));
            }
        }
        let ids = (0..n).map(|i| format!("e{i}")).collect();
        Judgments::from_entries(ids, vec!["a".into(), "copy".into(), "b".into()], 2, entries).unwrap()
    }

    #[test]
    fn a_copy_of_a_judge_adds_nothing_to_the_posterior_and_an_independent_judge_does() {
        let j = copied_jury(4000, |_, _, _| true);
        let params = CorrelatedGaussian::new(DawidSkeneConfig::default()).fit(&j).unwrap();
        let one = params.posterior(&[(0, 0.6)])[1];
        let with_copy = params.posterior(&[(0, 0.6), (1, 0.6)])[1];
        let with_other = params.posterior(&[(0, 0.6), (2, 0.6)])[1];
        assert!((with_copy - one).abs() < 0.01, "one {one} with its copy {with_copy}");
        assert!(with_other > one + 0.03, "one {one} with an independent judge {with_other}");
        // A judge listed twice counts once; none gives the prior.
        assert!((params.posterior(&[(0, 0.6), (0, 0.6)])[1] - one).abs() < 1e-12);
        assert!((params.posterior(&[])[1] - params.prior[1]).abs() < 1e-12);
        // No judge left: the verdict cannot change; a copy left can hardly change it.
        let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(0);
        assert_eq!(params.agreement(&[(0, 0.8)], &[], 256, 0.9, &mut rng), 1.0);
        let copy_left = params.agreement(&[(0, 0.8)], &[1], 256, 0.0, &mut rng);
        let other_left = params.agreement(&[(0, 0.55)], &[2], 256, 0.0, &mut rng);
        assert!(copy_left > 0.95 && other_left < 0.9, "copy left {copy_left} other left {other_left}");
    }

    /// Judge b answers only where judge a is unsure (missing at random given a, as an
    /// adaptive jury's gaps are): the missing-data fit recovers b's variance within a
    /// class as the complete jury has it; filling b's gaps with the class means shrinks it.
    #[test]
    fn gaps_that_depend_on_the_answers_keep_the_variances() {
        let complete = copied_jury(6000, |_, _, _| true);
        let gappy = copied_jury(6000, |_, k, x0| k != 2 || x0.abs() < 1.5);
        // Both fits weigh the examples by their true classes, so only the gaps differ.
        let t: Vec<f64> = (0..6000).map(|i| if i % 2 == 0 { 1.0 } else { 0.0 }).collect();
        let rows: Vec<usize> = (0..6000).collect();
        let x = |j: &Judgments| -> Vec<f64> { j.entries().map(|(_, _, p)| log_odds(p[1])).collect() };
        let truth = fit(&complete, &x(&complete), &t, &rows, Covariance::Full).unwrap();
        let missing = fit_missing(&gappy, &x(&gappy), &t, &rows, Covariance::Full).unwrap();
        let means = fit(&gappy, &x(&gappy), &t, &rows, Covariance::Full).unwrap();
        let var = |cov: &[f64]| cov[2 * 3 + 2];
        for c in 0..2 {
            let (want, got, shrunk) = (var(&truth.cov[c]), var(&missing.cov[c]), var(&means.cov[c]));
            assert!((got / want - 1.0).abs() < 0.15, "class {c}: {got} against {want}");
            assert!(shrunk < 0.8 * want, "class {c}: the class means give {shrunk} against {want}");
        }
    }

    #[test]
    fn more_than_two_classes_is_a_one_line_error() {
        let j =
            Judgments::from_entries(vec!["e".into()], vec!["a".into()], 3, vec![Some(vec![0.2, 0.3, 0.5])]).unwrap();
        let err = CorrelatedGaussian::new(DawidSkeneConfig::default()).aggregate(&j).unwrap_err().to_string();
        assert!(err.contains("two classes") && !err.contains('\n'), "{err}");
        let err = CareGaussian::new(TieBreak::Positive).aggregate(&j).unwrap_err().to_string();
        assert!(err.starts_with("care-gauss: ") && err.contains("two classes") && !err.contains('\n'), "{err}");
    }

    /// care-gauss keeps one covariance for both classes, and on a full jury its fit for
    /// gaps labels as its aggregation does.
    #[test]
    fn care_gauss_shares_its_covariance_and_fits_a_full_jury_as_it_aggregates() {
        let j = copied_jury(400, |_, _, _| true);
        let cg = CareGaussian::new(TieBreak::Positive);
        let params = cg.fit(&j).unwrap();
        assert_eq!(params.cov[0], params.cov[1]);
        assert_eq!(params.labels(&j, TieBreak::Positive), cg.aggregate(&j).unwrap().labels());
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
