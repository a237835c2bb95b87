//! MACE (Hovy et al., NAACL 2013, "Learning Whom to Trust with MACE"): each judge either
//! knows the answer and votes it, or spams, voting from its own label distribution
//! theta; P(knowing) per judge is the skill. Fit by variational Bayes with Beta(0.5, 0.5)
//! on spamming and Dirichlet(10) on theta, `n_iter` = 50 iterations (crowd-kit's MACE,
//! method "vb"). The start is crowd-kit's: every weight 1 + 1.5 u, u from numpy's
//! `RandomState(seed)` (MT19937), the (spamming, knowing) pairs and the theta rows both
//! drawn from the start of that stream in judge order, rows normalised. crowd-kit runs
//! `n_restarts` = 10, but seeds each with the same `random_state`, so they are this one
//! start ten times; `restarts` > 1 adds starts drawn further along the stream, each run
//! to the end, keeping the first with the highest marginal likelihood.

use jury_core::Judgments;

use crate::special::{digamma, softmax_in_place};
use crate::votes::Votes;
use crate::{AggregateError, Aggregation, Aggregator, SkillReport, TieBreak, finish_votes};

/// Settings of MACE.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mace {
    pub ties: TieBreak,
    /// Distinct starts (crowd-kit's 10 restarts are one start repeated; see the module).
    pub restarts: usize,
    /// Iterations per restart.
    pub n_iter: usize,
    /// Seeds the random starts (numpy's `RandomState(seed)`, crowd-kit's `random_state`;
    /// its low 32 bits).
    pub seed: u64,
}

impl Mace {
    pub fn new(ties: TieBreak, seed: u64) -> Self {
        Self { ties, restarts: 1, n_iter: 50, seed }
    }
}

/// numpy's legacy `RandomState(seed)`: MT19937 seeded by `init_genrand`, and its
/// `random_sample` (53-bit doubles in [0, 1)).
struct Mt19937 {
    state: [u32; 624],
    next: usize,
}

impl Mt19937 {
    fn new(seed: u32) -> Self {
        let mut state = [0u32; 624];
        state[0] = seed;
        for i in 1..624 {
            let prev = state[i - 1];
            state[i] = 1_812_433_253u32.wrapping_mul(prev ^ (prev >> 30)).wrapping_add(i as u32);
        }
        Self { state, next: 624 }
    }

    fn next_u32(&mut self) -> u32 {
        if self.next >= 624 {
            for i in 0..624 {
                let y = (self.state[i] & 0x8000_0000) | (self.state[(i + 1) % 624] & 0x7fff_ffff);
                let mut v = self.state[(i + 397) % 624] ^ (y >> 1);
                if y & 1 != 0 {
                    v ^= 0x9908_b0df;
                }
                self.state[i] = v;
            }
            self.next = 0;
        }
        let mut y = self.state[self.next];
        self.next += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    fn random_sample(&mut self) -> f64 {
        let (a, b) = (self.next_u32() >> 5, self.next_u32() >> 6);
        (f64::from(a) * 67_108_864.0 + f64::from(b)) / 9_007_199_254_740_992.0
    }
}

/// Beta prior on (spamming, knowing) and the Dirichlet prior on each theta entry.
const SPAM_PRIOR: [f64; 2] = [0.5, 0.5];
const THETA_PRIOR: f64 = 10.0;

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

/// crowd-kit's start number `r` (0 is crowd-kit's): `scipy.stats.uniform(1, 1.5).rvs`
/// twice from the same stream position, K x 2 (spamming, knowing) and K x C (theta),
/// rows normalised. Start r begins r * K * max(2, C) draws into the stream.
fn start(seed: u64, r: usize, k_all: usize, c: usize) -> Params {
    let draws = |n: usize| {
        let mut mt = Mt19937::new(seed as u32);
        (0..r * k_all * c.max(2)).for_each(|_| {
            mt.random_sample();
        });
        (0..n).map(|_| 1.0 + 1.5 * mt.random_sample()).collect::<Vec<f64>>()
    };
    let spam = draws(2 * k_all).chunks_exact(2).map(|x| [x[0] / (x[0] + x[1]), x[1] / (x[0] + x[1])]).collect();
    let mut theta = draws(k_all * c);
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
        // As crowd-kit: every start runs all n_iter iterations, and the first start with
        // the highest marginal likelihood after them is kept.
        let run = |mut params: Params| {
            let mut e = e_step(&votes, &params);
            for _ in 0..self.n_iter {
                params = m_step(&e, c);
                e = e_step(&votes, &params);
            }
            (params, e)
        };
        let mut best: Option<(Params, Expected)> = None;
        for r in 0..self.restarts {
            let (params, e) = run(start(self.seed, r, votes.n_judges, c));
            if best.as_ref().is_none_or(|(_, b)| e.log_marginal > b.log_marginal) {
                best = Some((params, e));
            }
        }
        let Some((params, e)) = best else { unreachable!("restarts >= 1") };
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
    fn starts_where_numpy_random_state_does() {
        // numpy.random.RandomState(0).random_sample(3) and RandomState(5)'s first.
        let mut mt = Mt19937::new(0);
        let want = [0.5488135039273248, 0.7151893663724195, 0.6027633760716439];
        for w in want {
            assert_eq!(mt.random_sample(), w);
        }
        assert_eq!(Mt19937::new(5).random_sample(), 0.22199317108973948);
        // crowd-kit's MACE(random_state=0) on 2 judges x 2 labels: spamming_ and thetas_
        // both start at the rows of 1 + 1.5 * [[0.5488, 0.7152], [0.6028, 0.5449]].
        let p = start(0, 0, 2, 2);
        let row = |a: f64, b: f64| [(1.0 + 1.5 * a) / (2.0 + 1.5 * (a + b)), (1.0 + 1.5 * b) / (2.0 + 1.5 * (a + b))];
        let r0 = row(0.5488135039273248, 0.7151893663724195);
        assert!((p.spam[0][0] - r0[0]).abs() < 1e-15 && (p.theta[1] - r0[1]).abs() < 1e-15);
        assert_eq!(p.spam[1], [p.theta[2], p.theta[3]]);
    }

    #[test]
    fn labels_as_crowd_kit_does() {
        use crate::dawid_skene::tests::{crowd_kit_jury, labels_string};
        let a = Mace::new(TieBreak::Negative, 0).aggregate(&crowd_kit_jury()).unwrap();
        assert_eq!(labels_string(&a), "0011010100100111000110001110101110000001");
    }

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
