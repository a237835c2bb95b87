//! The adaptive jury's stopping rule, one plan shared by the live run and its replay:
//! which judge to ask about which example, round by round, until the full jury's verdict
//! on each example is settled. `jury run` drives it with real judges; `jury simulate
//! adaptive` with a jury recorded with every judge, so users choose a big run's settings
//! from a small full one and the replay is the run's rule, not a copy of it.
//!
//! The plan goes in rounds. Round 0 is the warm-up: a share of the examples (drawn by
//! seed) that every judge answers, so the model is fitted before anything stops; the
//! judges' order is fixed from it (given, or cheaper first, then by estimated skill).
//! The other examples, in the seed's order, start in chunks, one chunk per round; an
//! open example asks the next judge in the order each round, and stops once it has at
//! least `min_judges` answers and the model's probability that the judges left in the
//! order would not change its verdict reaches the target, or when no judge is left.
//! The model ([`StoppingModel`]) is by default the correlated Gaussian (`gauss`) for
//! two classes (a judge of a family already asked is expected to agree with
//! it), Dawid-Skene otherwise; the probability is a Monte Carlo estimate from the
//! model's predictive distribution of the judges left, seeded per example and round.
//! Chunk `c` starts in round `c + 1` with the model refitted on every judgment so far
//! and keeps that fit, so in a round the chunks in flight ask different judges: every
//! judge has work at once, a wavefront.
//!
//! Invariant: what a round asks depends only on the answers of earlier rounds, never on
//! the order answers arrive in, so a run killed at any moment and started again asks the
//! same questions (from the cache) and ends with the same judgments.

use jury_core::{Judgments, JudgmentsBuilder};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::gauss::GaussParams;
use crate::{
    AggregateError, Aggregator, CareGaussian, CorrelatedGaussian, DawidSkene, DawidSkeneConfig, Diagnostics, DsParams,
    MAX_CORRELATED_JUDGES,
};

/// The model whose posterior decides when an example stops, and which labels the
/// replay's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoppingModel {
    /// [`StoppingModel::Gauss`] for two classes and at most [`MAX_CORRELATED_JUDGES`]
    /// judges, Dawid-Skene otherwise. (The adaptive settings were chosen with it;
    /// care-gauss stops far below its full jury on the pairwise sets,
    /// docs/reproduction/adaptive.md.)
    #[default]
    Auto,
    /// Dawid-Skene, each answer read as a vote for its most likely class.
    DawidSkene,
    /// The correlated Gaussian over the judges' log-odds (`gauss`), marginalised to the
    /// judges that answered: a second judge of a family counts for what the family's
    /// correlation leaves.
    Gauss,
    /// CARE refined by a Gaussian with one covariance shared by the classes
    /// (`care-gauss`), marginalised to the judges that answered.
    CareGauss,
}

impl StoppingModel {
    /// Every model by its name in configs and flags, which is its method's name in
    /// `jury aggregate`.
    pub const ALL: [(&'static str, StoppingModel); 4] = [
        ("auto", StoppingModel::Auto),
        ("ds", StoppingModel::DawidSkene),
        ("gauss", StoppingModel::Gauss),
        ("care-gauss", StoppingModel::CareGauss),
    ];

    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|(_, m)| *m == self).map_or("auto", |(n, _)| n)
    }

    /// The model of a name; the error lists the names.
    pub fn from_name(name: &str) -> Result<StoppingModel, String> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, m)| *m).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|(n, _)| *n).collect();
            format!("unknown stopping model `{name}` (expected one of: {})", names.join(", "))
        })
    }

    /// The model this stands for on a jury of `n_judges` judges and `n_classes` classes:
    /// never `Auto`.
    pub fn resolve(self, n_classes: usize, n_judges: usize) -> StoppingModel {
        match self {
            StoppingModel::Auto if n_classes == 2 && n_judges <= MAX_CORRELATED_JUDGES => StoppingModel::Gauss,
            StoppingModel::Auto => StoppingModel::DawidSkene,
            other => other,
        }
    }

    /// The method's name in `jury aggregate` (`ds`, `gauss`), once resolved.
    pub fn method_name(self, n_classes: usize, n_judges: usize) -> &'static str {
        self.resolve(n_classes, n_judges).name()
    }

    /// The resolved model's labels for `j`.
    pub fn labels(self, j: &Judgments, ds: DawidSkeneConfig) -> Result<Vec<usize>, AggregateError> {
        match self.resolve(j.n_classes(), j.n_judges()) {
            StoppingModel::Gauss => Ok(CorrelatedGaussian::new(ds).fit(j)?.labels(j, ds.ties)),
            StoppingModel::CareGauss => Ok(CareGaussian::new(ds.ties).fit(j)?.labels(j, ds.ties)),
            _ => Ok(DawidSkene::new(ds).aggregate(j)?.labels().to_vec()),
        }
    }
}

/// One fit of the stopping model.
#[derive(Debug, Clone)]
enum Fit {
    DawidSkene(DsParams),
    Gauss(GaussParams),
}

/// The warm-up's least examples per judge, whatever its share: the Gaussian fits a
/// judges x judges covariance per class, which takes more examples with every judge
/// than there are judges (MT-Bench's 200 examples and 16 judges, warmed up on 5% = 10,
/// lost 8 points; on 32, none).
const WARMUP_PER_JUDGE: usize = 2;

/// How many of `n_examples` examples every one of `n_judges` judges answers first: the
/// `warmup` share, but at least two per judge, and one in all.
pub fn warmup_examples(n_examples: usize, n_judges: usize, warmup: f64) -> usize {
    let share = (warmup * n_examples as f64).ceil() as usize;
    share.max(WARMUP_PER_JUDGE * n_judges).clamp(n_examples.min(1), n_examples)
}

/// Draws of the remaining judges behind each stopping decision: the agreement is known
/// to within about 0.03 near 0.95 (one standard error 0.014).
const AGREEMENT_DRAWS: usize = 256;

impl Fit {
    /// The probability, under the fit, that asking the judges `remaining` would leave
    /// the verdict of an example's answers unchanged (see
    /// [`GaussParams::agreement`]); `floor` lets the count stop once it is out of reach.
    fn agreement(&self, answers: &[(usize, Vec<f64>)], remaining: &[usize], floor: f64, rng: &mut ChaCha8Rng) -> f64 {
        match self {
            Fit::DawidSkene(params) => ds_agreement(params, answers, remaining, floor, rng),
            Fit::Gauss(params) => {
                let row: Vec<(usize, f64)> = answers.iter().map(|(k, p)| (*k, p[1])).collect();
                params.agreement(&row, remaining, AGREEMENT_DRAWS, floor, rng)
            }
        }
    }

    /// Each judge's skill under the fit, higher better: Dawid-Skene's expected accuracy
    /// or the Gaussian's separation of the classes.
    fn skill(&self) -> Vec<f64> {
        match self {
            Fit::DawidSkene(params) => expected_accuracy(params),
            Fit::Gauss(params) => params.separation().into_iter().map(|s| s.unwrap_or(f64::NEG_INFINITY)).collect(),
        }
    }
}

/// Settings of the adaptive rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveConfig {
    /// An example stops once its top posterior class reaches this probability.
    pub target: f64,
    /// Judges that must have answered an example before it may stop.
    pub min_judges: usize,
    /// Share of the examples every judge answers first (at least two per judge, and
    /// one in all).
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
    /// Whose posterior stops an example.
    pub stopping_model: StoppingModel,
    pub ds: DawidSkeneConfig,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        Self {
            target: 0.9,
            min_judges: 2,
            warmup: 0.05,
            seed: 0,
            refit_every: 1000,
            chunks: None,
            stopping_model: StoppingModel::default(),
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
    /// The model's probability, after its latest answer that left judges in the order,
    /// that asking them would not change its verdict (`None` for the warm-up).
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
    fits: Vec<Fit>,
    /// The warm-up's fit, made to order the judges, kept for the first chunk (the
    /// judgments it was fitted on are the same).
    warm_fit: Option<Fit>,
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
        if cfg.min_judges > k {
            let s = if k == 1 { "" } else { "s" };
            return Err(bad(format!(
                "min_judges is {} but the jury has {k} judge{s}: no example could ever stop early",
                cfg.min_judges
            )));
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
        let n_warm = warmup_examples(n_examples, k, cfg.warmup);
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
            warm_fit: None,
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
                let fit = match self.warm_fit.take() {
                    Some(fit) => fit,
                    None => self.fit()?,
                };
                self.fits.push(fit);
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
                    let next = self.rounds + 1 - round;
                    if next >= self.order.len() {
                        d.stop = Some(AdaptiveStop::EveryJudge);
                        self.phase[e] = Phase::Stopped;
                        continue;
                    }
                    // One stream per example and round: the draws depend on neither the
                    // other examples nor the order answers arrived in.
                    let mut rng = ChaCha8Rng::seed_from_u64(self.cfg.seed);
                    rng.set_stream(((e as u64) << 16) | self.rounds as u64);
                    let remaining = &self.order[next..];
                    let confidence = self.fits[chunk].agreement(&self.answers[e], remaining, self.cfg.target, &mut rng);
                    d.confidence = Some(confidence);
                    if d.answered >= self.cfg.min_judges && confidence >= self.cfg.target {
                        d.stop = Some(AdaptiveStop::Settled);
                        self.phase[e] = Phase::Stopped;
                    }
                }
                Phase::Waiting | Phase::Stopped => {}
            }
        }
        if self.rounds == 0 {
            let (order, warm_fit) = self.judge_order()?;
            self.order = order;
            self.warm_fit = warm_fit;
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

    fn fit(&self) -> Result<Fit, AggregateError> {
        let revealed = self.revealed()?;
        match self.cfg.stopping_model.resolve(self.n_classes, self.judge_names.len()) {
            StoppingModel::Gauss => Ok(Fit::Gauss(CorrelatedGaussian::new(self.cfg.ds).fit(&revealed)?)),
            StoppingModel::CareGauss => Ok(Fit::Gauss(CareGaussian::new(self.cfg.ds.ties).fit(&revealed)?)),
            _ => match DawidSkene::new(self.cfg.ds).aggregate(&revealed)?.diagnostics() {
                Diagnostics::DawidSkene(report) => Ok(Fit::DawidSkene(report.params.clone())),
                _ => {
                    Err(AggregateError::Config { method: "adaptive", reason: "Dawid-Skene gave no parameters".into() })
                }
            },
        }
    }

    /// The judges' order, and the fit it was read from (`None` for a given order).
    fn judge_order(&self) -> Result<(Vec<usize>, Option<Fit>), AggregateError> {
        match &self.order_rule {
            JudgeOrder::Given(order) => Ok((order.clone(), None)),
            JudgeOrder::ByCost(costs) => {
                let fit = self.fit()?;
                let skill = fit.skill();
                let mut order: Vec<usize> = (0..self.judge_names.len()).collect();
                order.sort_by(|&a, &b| {
                    costs[a].total_cmp(&costs[b]).then(skill[b].total_cmp(&skill[a])).then(a.cmp(&b))
                });
                Ok((order, Some(fit)))
            }
        }
    }
}

/// Each judge's expected accuracy under the model: its confusion matrix's diagonal
/// weighed by the class prior.
fn expected_accuracy(params: &DsParams) -> Vec<f64> {
    params.confusion.iter().map(|m| params.class_prior.iter().enumerate().map(|(c, p)| p * m.get(c, c)).sum()).collect()
}

/// Dawid-Skene's log joint of each class with an example's votes (each answer read as a
/// vote for its most likely class).
fn ds_log_joint(params: &DsParams, votes: impl Iterator<Item = (usize, usize)> + Clone) -> Vec<f64> {
    (0..params.class_prior.len())
        .map(|c| {
            params.class_prior[c].ln() + votes.clone().map(|(k, v)| params.confusion[k].get(c, v).ln()).sum::<f64>()
        })
        .collect()
}

/// [`GaussParams::agreement`] for Dawid-Skene: the remaining judges' votes drawn from
/// their confusion rows of a class drawn from the current posterior.
fn ds_agreement(
    params: &DsParams,
    answers: &[(usize, Vec<f64>)],
    remaining: &[usize],
    floor: f64,
    rng: &mut ChaCha8Rng,
) -> f64 {
    use rand::Rng;
    let votes: Vec<(usize, usize)> = answers.iter().map(|(k, p)| (*k, jury_core::argmax(p))).collect();
    let remaining: Vec<usize> = remaining
        .iter()
        .copied()
        .filter(|k| *k < params.confusion.len() && !votes.iter().any(|(a, _)| a == k))
        .collect();
    if remaining.is_empty() {
        return 1.0;
    }
    let mut posterior = ds_log_joint(params, votes.iter().copied());
    let current = jury_core::argmax(&posterior);
    let max = posterior.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        return 0.0;
    }
    posterior.iter_mut().for_each(|l| *l = (*l - max).exp());
    let total: f64 = posterior.iter().sum();
    let n = posterior.len();
    let draw = |weights: &mut dyn Iterator<Item = f64>, total: f64, rng: &mut ChaCha8Rng| -> usize {
        let mut u = rng.random::<f64>() * total;
        let mut last = 0;
        for (i, w) in weights.enumerate() {
            last = i;
            if u < w {
                return i;
            }
            u -= w;
        }
        last
    };
    let mut all = votes.clone();
    crate::special::agreeing_share(AGREEMENT_DRAWS, floor, || {
        let c = draw(&mut posterior.iter().copied(), total, rng);
        all.truncate(votes.len());
        for &k in &remaining {
            let v = draw(&mut (0..n).map(|v| params.confusion[k].get(c, v)), 1.0, rng);
            all.push((k, v));
        }
        jury_core::argmax(&ds_log_joint(params, all.iter().copied())) == current
    })
}

/// What the replay did.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveReplay {
    /// The final label of every example (the stopping model on the revealed judgments).
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
    let labels = cfg.stopping_model.labels(&sub, cfg.ds)?;
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
        // These judges' confidence is drawn apart from their vote, as Dawid-Skene's model
        // has it (the Gaussian's case, a correlated family, is tests/correlated.rs).
        // The target bounds the share of the full jury's verdicts an example may lose
        // by stopping: at 0.9 up to a tenth of those that stop early, at 0.99 a
        // hundredth.
        let model = StoppingModel::DawidSkene;
        let full = model.labels(j, DawidSkeneConfig::default()).unwrap();
        let full_acc = accuracy(&full, &sim.truth);
        for (target, kept, loss, calls) in [(0.9, 0.95, 0.02, 0.5), (0.99, 0.99, 0.005, 0.6)] {
            let cfg = AdaptiveConfig { stopping_model: model, target, ..AdaptiveConfig::default() };
            let r = replay_adaptive(j, &cfg, equal(j)).unwrap();
            let acc = accuracy(&r.labels, &sim.truth);
            let same = full.iter().zip(&r.labels).filter(|(a, b)| a == b).count() as f64 / full.len() as f64;
            let share = r.calls as f64 / r.full_calls as f64;
            assert!(share < calls, "target {target}: {} of {} calls", r.calls, r.full_calls);
            assert!(same >= kept, "target {target}: {same} of the full jury's verdicts kept");
            assert!(acc > full_acc - loss, "target {target}: adaptive {acc} full {full_acc}");
            assert_eq!(r.calls_per_judge.iter().sum::<usize>(), r.calls);
            assert_eq!(r, replay_adaptive(j, &cfg, equal(j)).unwrap());
        }
        // The default stopping model, `auto`: gauss for two classes.
        assert_eq!(AdaptiveConfig::default().stopping_model.resolve(2, 8), StoppingModel::Gauss);
        assert_eq!(AdaptiveConfig::default().stopping_model.resolve(3, 8), StoppingModel::DawidSkene);
        assert_eq!(StoppingModel::from_name("gauss"), Ok(StoppingModel::Gauss));
        assert_eq!(StoppingModel::from_name("care-gauss"), Ok(StoppingModel::CareGauss));
        assert!(StoppingModel::from_name("mv").unwrap_err().contains("auto, ds, gauss, care-gauss"));
    }

    /// A target of 1 is never reached: every example asks every judge, and the labels
    /// are the full jury's.
    #[test]
    fn a_target_of_one_asks_every_judge_and_equals_the_full_run() {
        let sim = good_jury(5);
        let j = &sim.judgments;
        for model in [StoppingModel::Gauss, StoppingModel::CareGauss, StoppingModel::DawidSkene] {
            let cfg = AdaptiveConfig { target: 1.0, stopping_model: model, ..AdaptiveConfig::default() };
            let r = replay_adaptive(j, &cfg, equal(j)).unwrap();
            assert_eq!(r.calls, r.full_calls);
            assert_eq!(r.labels, model.labels(j, cfg.ds).unwrap());
        }
        // On a jury without gaps the Gaussian's labels are `jury aggregate --methods gauss`'s.
        let complete =
            simulate(&JuryConfig { missing_rate: 0.0, ..JuryConfig::mixed_binary(400, 5) }).unwrap().judgments;
        let gauss = CorrelatedGaussian::new(DawidSkeneConfig::default()).aggregate(&complete).unwrap();
        assert_eq!(StoppingModel::Gauss.labels(&complete, DawidSkeneConfig::default()).unwrap(), gauss.labels());
        let care_gauss = CareGaussian::new(crate::TieBreak::Positive).aggregate(&complete).unwrap();
        assert_eq!(
            StoppingModel::CareGauss.labels(&complete, DawidSkeneConfig::default()).unwrap(),
            care_gauss.labels()
        );
    }

    /// Each open example stops as soon as it is settled, never before `min_judges`
    /// answers, never with more judges than the order holds, and every settled example's
    /// posterior is at the target; examples with agreeing strong judges stop at the
    /// minimum.
    #[test]
    fn stops_where_certain_never_before_the_minimum_nor_beyond_the_judges() {
        let sim = good_jury(7);
        let j = &sim.judgments;
        for (min_judges, model) in [1, 2, 3]
            .into_iter()
            .flat_map(|m| [(m, StoppingModel::Gauss), (m, StoppingModel::CareGauss), (m, StoppingModel::DawidSkene)])
        {
            let cfg = AdaptiveConfig { min_judges, stopping_model: model, ..AdaptiveConfig::default() };
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
            // Two agreeing strong judges settle an example.
            let bar = if min_judges == 1 { 0 } else { j.n_examples() / 4 };
            assert!(at_minimum >= bar, "{model:?}: {at_minimum} at the minimum of {min_judges}");
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
            AdaptiveConfig { min_judges: sim.judgments.n_judges() + 1, ..AdaptiveConfig::default() },
        ] {
            let e = replay_adaptive(&sim.judgments, &cfg, equal(&sim.judgments)).unwrap_err().to_string();
            assert!(e.contains("adaptive") && !e.contains('\n'), "{e}");
        }
        let over = AdaptiveConfig { min_judges: 3, ..AdaptiveConfig::default() };
        let e = AdaptivePlan::new(3, vec!["a".into(), "b".into()], 2, &over, JudgeOrder::Given(vec![0, 1]));
        assert!(e.unwrap_err().to_string().contains("min_judges is 3 but the jury has 2 judges"));
        for costs in [vec![1.0], vec![1.0, 0.0], vec![1.0, f64::NAN]] {
            let names = vec!["a".into(), "b".into()];
            let e = AdaptivePlan::new(3, names, 2, &AdaptiveConfig::default(), JudgeOrder::ByCost(costs));
            assert!(e.unwrap_err().to_string().contains("positive number"));
        }
        let one = AdaptiveConfig { min_judges: 1, ..AdaptiveConfig::default() };
        let mut plan = AdaptivePlan::new(3, vec!["a".into()], 2, &one, JudgeOrder::Given(vec![0])).unwrap();
        assert!(plan.answer(&[vec![]]).is_err(), "answers before a round");
        plan.round().unwrap();
        let e = plan.answer(&[vec![]]).unwrap_err().to_string();
        assert!(e.contains("do not match"), "{e}");
        assert!(
            AdaptivePlan::new(3, vec!["a".into()], 2, &AdaptiveConfig::default(), JudgeOrder::Given(vec![1])).is_err()
        );
    }
}
