//! Greedy and Full Triplet Ranking: models judge each other in threes, so no model has to
//! be trusted a priori (the triplet-ranking paper, Algorithms 1 and 2).

use std::cmp::Ordering;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{Evaluation, Ranking, Responses};

/// Judge `judge` compares candidates `a` and `b`: the evaluation's per-prompt
/// comparisons (for a similarity, the difference of the two candidates' similarity to
/// the judge's response) are summed over the prompts all three answered. `Greater`
/// means `a` is preferred (closer to the judge), `Equal` a tie.
pub fn judge_prefers(eval: &mut dyn Evaluation, n_prompts: usize, judge: usize, a: usize, b: usize) -> Ordering {
    let total: f64 = (0..n_prompts).filter_map(|d| eval.compare(d, judge, a, b)).sum();
    total.partial_cmp(&0.0).unwrap_or(Ordering::Equal)
}

/// State of one GTR run: the evaluation and the count of judge comparisons made.
struct Gtr<'a> {
    eval: &'a mut dyn Evaluation,
    n_prompts: usize,
    evaluations: usize,
}

impl Gtr<'_> {
    fn prefers(&mut self, judge: usize, a: usize, b: usize) -> Ordering {
        self.evaluations += 1;
        judge_prefers(self.eval, self.n_prompts, judge, a, b)
    }

    /// The member of the triplet voted worst by both of the other two, or `newest` when
    /// no member gets both votes (Algorithm 1: "in case of tie output M_i").
    fn worst_of(&mut self, t: [usize; 3], newest: usize) -> usize {
        let mut votes = [0u8; 3];
        for judge in 0..3 {
            let (a, b) = ((judge + 1) % 3, (judge + 2) % 3);
            match self.prefers(t[judge], t[a], t[b]) {
                Ordering::Greater => votes[b] += 1,
                Ordering::Less => votes[a] += 1,
                Ordering::Equal => {}
            }
        }
        votes.iter().position(|&v| v == 2).map_or(newest, |i| t[i])
    }

    /// Orders two models with `judge` deciding: the preferred first; a tie keeps the
    /// given order.
    fn order_pair(&mut self, judge: usize, a: usize, b: usize) -> [usize; 2] {
        match self.prefers(judge, a, b) {
            Ordering::Less => [b, a],
            _ => [a, b],
        }
    }
}

/// Greedy Triplet Ranking (Algorithm 1). Each pass walks the remaining models in order,
/// keeping the best two of every triplet, and removes those two; the first pass's two are
/// ordered at random (`seed`) and its winner then orders every later pair and a last
/// single or pair. O(n^2) judge comparisons.
pub fn greedy_triplet_ranking(responses: &Responses, eval: &mut dyn Evaluation, seed: u64) -> Ranking {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut g = Gtr { eval, n_prompts: responses.n_prompts(), evaluations: 0 };
    let mut remaining: Vec<usize> = (0..responses.n_models()).collect();
    let mut ranked: Vec<usize> = Vec::with_capacity(remaining.len());
    while remaining.len() >= 3 {
        let mut top = [remaining[0], remaining[1]];
        for &m in &remaining[2..] {
            let worst = g.worst_of([top[0], top[1], m], m);
            if worst != m {
                top = if worst == top[0] { [top[1], m] } else { [top[0], m] };
            }
        }
        remaining.retain(|m| !top.contains(m));
        if ranked.is_empty() {
            if rng.random_bool(0.5) {
                top.swap(0, 1);
            }
            ranked.extend(top);
        } else {
            ranked.extend(g.order_pair(ranked[0], top[0], top[1]));
        }
    }
    match remaining[..] {
        [a, b] => ranked.extend(g.order_pair(ranked[0], a, b)),
        [a] => ranked.push(a),
        _ => {}
    }
    Ranking { order: ranked, scores: None, evaluations: g.evaluations, converged: None }
}

/// Settings of Full Triplet Ranking.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FtrConfig {
    /// Stop when the reputations change by at most this much in total (Algorithm 2's ε).
    pub epsilon: f64,
    /// Iteration cap: reputations can cycle, and a capped run reports `converged: false`.
    pub max_iter: usize,
}

impl Default for FtrConfig {
    fn default() -> Self {
        Self { epsilon: 1e-6, max_iter: 100 }
    }
}

/// Full Triplet Ranking (Algorithm 2). Every model judges every pair of the others once
/// (y_ijk = 1 when judge k prefers i to j, 1/2 on a tie, 0 otherwise); reputations start
/// at 1 and are iterated: m_ij = (1/n) sum_k y_ijk r_k, z_ij = 1[m_ij >= m_ji],
/// r'_i = (1/(n-1)) sum_j z_ij. Models are sorted by final reputation; equal reputations
/// are ordered by the weighted preference sum_j m_ij, then by index.
pub fn full_triplet_ranking(responses: &Responses, eval: &mut dyn Evaluation, cfg: &FtrConfig) -> Ranking {
    let n = responses.n_models();
    // y[(i * n + j) * n + k]
    let mut y = vec![0.0; n * n * n];
    let mut evaluations = 0;
    for k in 0..n {
        for i in 0..n {
            for j in (i + 1)..n {
                if k == i || k == j {
                    continue;
                }
                evaluations += 1;
                let (yij, yji) = match judge_prefers(eval, responses.n_prompts(), k, i, j) {
                    Ordering::Greater => (1.0, 0.0),
                    Ordering::Less => (0.0, 1.0),
                    Ordering::Equal => (0.5, 0.5),
                };
                y[(i * n + j) * n + k] = yij;
                y[(j * n + i) * n + k] = yji;
            }
        }
    }
    let mut r = vec![1.0; n];
    let mut m = vec![0.0; n * n];
    let mut converged = false;
    for _ in 0..cfg.max_iter {
        for i in 0..n {
            for j in 0..n {
                m[i * n + j] = (0..n).map(|k| y[(i * n + j) * n + k] * r[k]).sum::<f64>() / n as f64;
            }
        }
        let next: Vec<f64> = (0..n)
            .map(|i| (0..n).filter(|&j| j != i && m[i * n + j] >= m[j * n + i]).count() as f64 / (n - 1) as f64)
            .collect();
        let delta: f64 = r.iter().zip(&next).map(|(a, b)| (a - b).abs()).sum();
        r = next;
        if delta <= cfg.epsilon {
            converged = true;
            break;
        }
    }
    let strength: Vec<f64> = (0..n).map(|i| (0..n).map(|j| m[i * n + j]).sum()).collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        r[b].partial_cmp(&r[a])
            .unwrap_or(Ordering::Equal)
            .then(strength[b].partial_cmp(&strength[a]).unwrap_or(Ordering::Equal))
            .then(a.cmp(&b))
    });
    Ranking { order, scores: Some(r), evaluations, converged: Some(converged) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::multiple_choice;
    use crate::{Equality, most_common_answer};
    use proptest::prelude::*;

    /// Accuracies that meet the triplet-ranking paper's sufficient condition (a_k < a_i + a_j - 1 for
    /// every triplet) with 50 options, so wrong answers rarely coincide.
    const SEPARATED: [f64; 5] = [0.97, 0.92, 0.8, 0.6, 0.3];

    #[test]
    fn gtr_recovers_a_well_separated_order_up_to_the_top_pair() {
        for seed in 0..5 {
            let r = multiple_choice(&SEPARATED, 400, 50, seed);
            let ranking = greedy_triplet_ranking(&r, &mut Equality::new(&r), seed);
            let mut top = ranking.order[..2].to_vec();
            top.sort();
            assert_eq!(top, [0, 1], "seed {seed}: {:?}", ranking.order);
            assert_eq!(ranking.order[2..], [2, 3, 4], "seed {seed}");
        }
    }

    #[test]
    fn ftr_and_mca_recover_a_well_separated_order() {
        for seed in 0..5 {
            let r = multiple_choice(&SEPARATED, 400, 50, seed);
            let ftr = full_triplet_ranking(&r, &mut Equality::new(&r), &FtrConfig::default());
            assert_eq!(ftr.order, [0, 1, 2, 3, 4], "seed {seed}");
            assert_eq!(ftr.converged, Some(true));
            let mca = most_common_answer(&r, &mut Equality::new(&r));
            assert_eq!(mca.order, [0, 1, 2, 3, 4], "seed {seed}");
        }
    }

    #[test]
    fn evaluation_counts_follow_the_algorithms() {
        let n = 9;
        let acc: Vec<f64> = (0..n).map(|i| 0.9 - 0.08 * i as f64).collect();
        let r = multiple_choice(&acc, 100, 20, 1);
        let ftr = full_triplet_ranking(&r, &mut Equality::new(&r), &FtrConfig::default());
        assert_eq!(ftr.evaluations, n * (n - 1) / 2 * (n - 2), "every judge on every pair of the others");
        let gtr = greedy_triplet_ranking(&r, &mut Equality::new(&r), 0);
        // Passes over 9, 7, 5, 3 models: (m - 2) triplets of 3 comparisons each, plus one
        // pair ordering per later pass, plus the last single model (no comparison).
        let triplets: usize = [9usize, 7, 5, 3].iter().map(|m| (m - 2) * 3).sum();
        assert_eq!(gtr.evaluations, triplets + 3);
        let mut sorted = gtr.order.clone();
        sorted.sort();
        assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "a permutation");
    }

    #[test]
    fn a_triplet_without_a_double_loser_drops_the_newest_model() {
        // Three models that each agree with exactly one other on one question in a cycle:
        // every judge sees a tie, so nobody gets two votes and the newest model goes.
        let cells = vec![
            vec![Some("a".into()), Some("x".into())],
            vec![Some("a".into()), Some("y".into())],
            vec![Some("b".into()), Some("x".into())],
            vec![Some("b".into()), Some("y".into())],
        ];
        let r = Responses::new((0..4).map(|i| format!("m{i}")).collect(), cells).unwrap();
        let mut g = Gtr { eval: &mut Equality::new(&r), n_prompts: 2, evaluations: 0 };
        assert_eq!(g.worst_of([0, 1, 3], 3), 3);
        assert_eq!(g.worst_of([3, 1, 0], 0), 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Relabelling the models does not change FTR's ranking (it has no random step and
        /// orders exact ties by index, so equal-strength models are excluded by design).
        #[test]
        fn ftr_does_not_depend_on_model_order(seed in 0u64..1000, perm in Just((0..6usize).collect::<Vec<_>>()).prop_shuffle()) {
            let acc = [0.9, 0.75, 0.6, 0.45, 0.3, 0.15];
            let r = multiple_choice(&acc, 300, 30, seed);
            let base = full_triplet_ranking(&r, &mut Equality::new(&r), &FtrConfig::default());
            let cells: Vec<Vec<Option<String>>> =
                perm.iter().map(|&m| (0..r.n_prompts()).map(|d| r.get(m, d).map(str::to_owned)).collect()).collect();
            let names = perm.iter().map(|&m| r.models()[m].clone()).collect();
            let shuffled = Responses::new(names, cells).unwrap();
            let got = full_triplet_ranking(&shuffled, &mut Equality::new(&shuffled), &FtrConfig::default());
            let mapped: Vec<usize> = got.order.iter().map(|&i| perm[i]).collect();
            let mut scores = base.scores.clone().unwrap();
            scores.sort_by(|a, b| b.partial_cmp(a).unwrap());
            prop_assume!(scores.windows(2).all(|w| w[0] > w[1]));
            prop_assert_eq!(mapped, base.order);
        }
    }
}
