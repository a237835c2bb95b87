//! The most-common-answer baseline (the triplet-ranking paper's MCA): take the answer the
//! models agree on most as the reference and rank the models by agreement with it.

use std::cmp::Ordering;

use crate::{Evaluation, Ranking, Responses};

/// On each prompt the consensus is the response with the highest total similarity to all
/// other models' responses (under exact equality: the most common answer; the lowest
/// model index wins ties); a model's score is its mean similarity to the consensus over
/// the prompts it answered. The agreement counts go through `eval`, so a noisy
/// evaluation makes the consensus noisy too, as it would be for answers that can only be
/// compared by a noisy function. For ROUGE this consensus is the medoid response, not the
/// triplet-ranking paper's bag of the 256 most frequent bigrams.
pub fn most_common_answer(responses: &Responses, eval: &mut dyn Evaluation) -> Ranking {
    let (n, d_max) = (responses.n_models(), responses.n_prompts());
    let mut total = vec![0.0; n];
    let mut count = vec![0usize; n];
    for d in 0..d_max {
        let mut best: Option<(usize, f64)> = None;
        for a in 0..n {
            if responses.get(a, d).is_none() {
                continue;
            }
            let support: f64 = (0..n).filter(|&b| b != a).filter_map(|b| eval.similarity(d, b, a)).sum();
            if best.is_none_or(|(_, s)| support > s) {
                best = Some((a, support));
            }
        }
        let Some((consensus, _)) = best else { continue };
        for m in 0..n {
            if let Some(s) = eval.similarity(d, consensus, m) {
                total[m] += s;
                count[m] += 1;
            }
        }
    }
    let scores: Vec<f64> = total.iter().zip(&count).map(|(t, &c)| if c == 0 { 0.0 } else { t / c as f64 }).collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| scores[b].partial_cmp(&scores[a]).unwrap_or(Ordering::Equal).then(a.cmp(&b)));
    // n (n - 1) similarities find each prompt's consensus, n score against it.
    Ranking { order, scores: Some(scores), evaluations: n * n, converged: None }
}
