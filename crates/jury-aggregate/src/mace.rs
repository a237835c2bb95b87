//! MACE (Hovy et al., NAACL 2013, "Learning Whom to Trust with MACE"): each judge either
//! knows the answer and votes it, or spams, voting from its own label distribution
//! theta; P(knowing) per judge is the skill. Fit by variational Bayes with Beta(0.5, 0.5)
//! on spamming and Dirichlet(10) on theta, from `restarts` random starts, going on with
//! the one with the highest marginal likelihood (crowd-kit's MACE, method "vb").

use jury_core::Judgments;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::special::{digamma, softmax_in_place};
use crate::votes::Votes;
use crate::{AggregateError, Aggregation, Aggregator, SkillReport, TieBreak, finish_votes};

/// Settings of MACE.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mace {
    pub ties: TieBreak,
    pub restarts: usize,
    /// Iterations per restart.
    pub n_iter: usize,
    /// Seeds the random starts.
    pub seed: u64,
}

impl Mace {
    pub fn new(ties: TieBreak, seed: u64) -> Self {
        Self { ties, restarts: 10, n_iter: 50, seed }
    }
}

/// Beta prior on (spamming, knowing) and the Dirichlet prior on each theta entry.
const SPAM_PRIOR: [f64; 2] = [0.5, 0.5];
const THETA_PRIOR: f64 = 10.0;
/// Iterations every random start runs before the best one goes on.
const SCREEN_ITERATIONS: usize = 5;

#[derive(Clone)]
struct Params {
    /// Per judge: weight of spamming, weight of knowing (variational, need not sum to 1).
    spam: Vec<[f64; 2]>,
    /// Per judge, C entries: the spamming vote distribution.
    theta: Vec<f64>,
}

/// What one E-step gives: posteriors per pattern (P x C), the log marginal likelihood,
/// and the expected counts the M-step needs.
struct Expected {
    t: Vec<f64>,
    log_marginal: f64,
    spam_counts: Vec<[f64; 2]>,
    theta_counts: Vec<f64>,
}

fn e_step(votes: &Votes, params: &Params) -> Expected {
    let c = votes.n_classes;
    let k_all = votes.n_judges;
    // Per (judge, vote): ln P(vote | true class = vote), ln P(vote | another class), and
    // P(spammed | vote = true class) = random / (random + knowing).
    let mut log_same = vec![0.0; k_all * c];
    let mut log_other = vec![0.0; k_all * c];
    let mut spam_if_same = vec![0.0; k_all * c];
    for k in 0..k_all {
        let [s, n] = params.spam[k];
        for v in 0..c {
            let random = s * params.theta[k * c + v];
            log_same[k * c + v] = (random + n).ln();
            log_other[k * c + v] = random.ln();
            spam_if_same[k * c + v] = random / (random + n);
        }
    }
    let mut t = vec![0.0; votes.n_patterns() * c];
    let mut log_marginal = 0.0;
    let mut spam_counts = vec![[0.0; 2]; k_all];
    let mut theta_counts = vec![0.0; k_all * c];
    let log_c = (c as f64).ln();
    for (p, row) in t.chunks_exact_mut(c).enumerate() {
        let pat = votes.pattern(p);
        if pat.is_empty() {
            row.fill(1.0 / c as f64);
            continue;
        }
        for &(k, v) in pat {
            let at = k as usize * c + v as usize;
            let (same, other) = (log_same[at], log_other[at]);
            for (class, l) in row.iter_mut().enumerate() {
                *l += if class == v as usize { same } else { other };
            }
        }
        log_marginal += votes.counts[p] * (softmax_in_place(row) - log_c);
        let w = votes.counts[p];
        for &(k, v) in pat {
            let at = k as usize * c + v as usize;
            let tv = row[v as usize];
            // P(spamming | votes): the true class is another one (then it surely spammed),
            // or it is the vote and the judge spammed rather than knew.
            let spammed = (1.0 - tv) + tv * spam_if_same[at];
            spam_counts[k as usize][0] += w * spammed;
            spam_counts[k as usize][1] += w * (1.0 - spammed);
            theta_counts[at] += w * spammed;
        }
    }
    Expected { t, log_marginal, spam_counts, theta_counts }
}

/// The variational M-step: exp(digamma(count + prior) - digamma(sum)).
fn m_step(e: &Expected, c: usize) -> Params {
    let spam = e
        .spam_counts
        .iter()
        .map(|x| {
            let total = digamma(x[0] + x[1] + SPAM_PRIOR[0] + SPAM_PRIOR[1]);
            [(digamma(x[0] + SPAM_PRIOR[0]) - total).exp(), (digamma(x[1] + SPAM_PRIOR[1]) - total).exp()]
        })
        .collect();
    let mut theta = e.theta_counts.clone();
    for row in theta.chunks_exact_mut(c) {
        let total = digamma(row.iter().sum::<f64>() + THETA_PRIOR * c as f64);
        row.iter_mut().for_each(|x| *x = (digamma(*x + THETA_PRIOR) - total).exp());
    }
    Params { spam, theta }
}

/// A random start: every weight uniform in [1, 2.5), rows normalised.
fn start(rng: &mut ChaCha8Rng, k_all: usize, c: usize) -> Params {
    let spam = (0..k_all)
        .map(|_| {
            let (a, b) = (rng.random_range(1.0..2.5), rng.random_range(1.0..2.5));
            [a / (a + b), b / (a + b)]
        })
        .collect();
    let mut theta: Vec<f64> = (0..k_all * c).map(|_| rng.random_range(1.0..2.5)).collect();
    for row in theta.chunks_exact_mut(c) {
        let total: f64 = row.iter().sum();
        row.iter_mut().for_each(|x| *x /= total);
    }
    Params { spam, theta }
}

impl Aggregator for Mace {
    fn name(&self) -> &'static str {
        "mace"
    }

    fn aggregate(&self, j: &Judgments) -> Result<Aggregation, AggregateError> {
        if j.n_examples() == 0 {
            return Err(AggregateError::Empty { method: self.name() });
        }
        if self.restarts == 0 || self.n_iter == 0 {
            return Err(AggregateError::Config {
                method: self.name(),
                reason: "restarts and n_iter must be >= 1".into(),
            });
        }
        let votes = Votes::new(j);
        let c = votes.n_classes;
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        // Every start runs a few iterations; the best one by marginal likelihood runs on
        // to n_iter. (crowd-kit runs every restart to the end, but draws every start
        // from the same random_state, so its restarts are one start repeated.)
        let screen = self.n_iter.min(SCREEN_ITERATIONS);
        let run = |mut params: Params, iterations: usize| {
            let mut e = e_step(&votes, &params);
            for _ in 0..iterations {
                params = m_step(&e, c);
                e = e_step(&votes, &params);
            }
            (params, e)
        };
        let mut best: Option<(Params, Expected)> = None;
        for _ in 0..self.restarts {
            let (params, e) = run(start(&mut rng, votes.n_judges, c), screen);
            if best.as_ref().is_none_or(|(_, b)| e.log_marginal > b.log_marginal) {
                best = Some((params, e));
            }
        }
        let Some((params, _)) = best else { unreachable!("restarts >= 1") };
        let (params, e) = run(params, self.n_iter - screen);
        let log_marginal = e.log_marginal;
        let skills = votes.skills(params.spam.iter().map(|s| s[1] / (s[0] + s[1])));
        let per_vote = log_marginal / votes.votes_per_judge().iter().sum::<f64>().max(1.0);
        let report = SkillReport::new("P(knowing the answer)", skills, self.n_iter, true, Some(per_vote));
        finish_votes(self.name(), j, &votes, &e.t, self.ties, report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Diagnostics;
    use crate::testutil::binary;

    #[test]
    fn a_spammer_who_always_says_yes_is_found() {
        // j0, j1, j2 agree with the truth on 9 of 10 examples each (different ones);
        // j3 says Yes always.
        let rows: Vec<Vec<Option<f64>>> = (0..60)
            .map(|n| {
                let y = n % 2 == 0;
                let vote = |k: usize| if (n / 2 + k).is_multiple_of(10) { !y } else { y };
                let p = |b: bool| Some(if b { 0.9 } else { 0.1 });
                vec![p(vote(0)), p(vote(3)), p(vote(6)), Some(0.9)]
            })
            .collect();
        let refs: Vec<&[Option<f64>]> = rows.iter().map(|r| r.as_slice()).collect();
        let a = Mace::new(TieBreak::Positive, 0).aggregate(&binary(&refs)).unwrap();
        let want: Vec<usize> = (0..60).map(|n| usize::from(n % 2 == 0)).collect();
        assert_eq!(a.labels(), want.as_slice());
        let Diagnostics::Skills(r) = a.diagnostics() else { panic!() };
        let s: Vec<f64> = r.skills.iter().map(|s| s.unwrap()).collect();
        assert!(s[3] < 0.3 && s[..3].iter().all(|&x| x > 0.7), "{s:?}");
    }
}
