//! Which examples to label: `budget` distinct examples drawn with known inclusion
//! probabilities, half spread evenly and half in proportion to `sqrt(p (1 - p))`, the
//! standard deviation of a label whose probability is `p` (where a label corrects most:
//! Zrnic and Candes 2024), by systematic sampling in a random order. Callers pass the
//! judges' mean probability as `p`, not a model's posterior: Dawid-Skene and CARE put most
//! examples near 0 or 1, which left the uncertain half of a plan on few examples (the jury's
//! interval was 0.97-1.24 of its width under uniform labels; with the judges' mean,
//! 0.97-1.04 on the juries it was chosen on, docs/reproduction/calibration-choices.md). The estimators weigh each
//! label by its probability, so the rates stay unbiased whatever `p` is; the even half
//! bounds every weight.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::CalibrationError;

/// Share of the plan's draw probability spread evenly over the examples.
const EVEN_SHARE: f64 = 0.5;

/// One planned example and its probability of having been chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Planned {
    pub index: usize,
    pub inclusion: f64,
}

/// Plans `budget` labels among examples whose probabilities of class 1 are `posterior`;
/// sorted by example.
pub fn plan_labels(posterior: &[f64], budget: usize, seed: u64) -> Result<Vec<Planned>, CalibrationError> {
    check_budget(budget, posterior.len())?;
    let n = posterior.len();
    let u: Vec<f64> = posterior.iter().map(|&p| (p.clamp(0.0, 1.0) * (1.0 - p.clamp(0.0, 1.0))).sqrt()).collect();
    let total: f64 = u.iter().sum();
    let q: Vec<f64> = if total > 0.0 {
        u.iter().map(|v| EVEN_SHARE / n as f64 + (1.0 - EVEN_SHARE) * v / total).collect()
    } else {
        vec![1.0 / n as f64; n]
    };
    let pi = cap_inclusion(&q, budget);
    Ok(systematic(&pi, seed))
}

/// Plans `budget` more labels among the examples outside `have` (examples already
/// labeled, however they were chosen), as [`plan_labels`] plans among all; returns every
/// example of the plan, sorted: those of `have` with inclusion 1 and the new ones with
/// their probabilities among the rest. Given `have`, the rate of the examples is theirs
/// counted as they are plus the rest's, which the new draw estimates without bias (its
/// probabilities are those of the draw that was made), so nothing in how `have` was chosen
/// (a plan, the disputed examples, the failures a team found) biases the whole.
pub fn plan_more_labels(
    posterior: &[f64],
    have: &[usize],
    budget: usize,
    seed: u64,
) -> Result<Vec<Planned>, CalibrationError> {
    let n = posterior.len();
    let mut labeled = vec![false; n];
    for &i in have {
        match labeled.get_mut(i) {
            Some(l) if !*l => *l = true,
            Some(_) => return Err(CalibrationError::Duplicate(i)),
            None => return Err(CalibrationError::OutOfRange { index: i, examples: n }),
        }
    }
    let rest: Vec<usize> = (0..n).filter(|&i| !labeled[i]).collect();
    if budget > rest.len() {
        return Err(CalibrationError::BudgetBeyondUnlabeled { budget, unlabeled: rest.len() });
    }
    let among: Vec<f64> = rest.iter().map(|&i| posterior[i]).collect();
    let mut out = plan_labels(&among, budget, seed)?;
    out.iter_mut().for_each(|p| p.index = rest[p.index]);
    out.extend(have.iter().map(|&index| Planned { index, inclusion: 1.0 }));
    out.sort_by_key(|p| p.index);
    Ok(out)
}

/// `budget` examples drawn uniformly without replacement, each with inclusion
/// `budget / N`; sorted by example.
pub fn uniform_sample(n: usize, budget: usize, seed: u64) -> Result<Vec<Planned>, CalibrationError> {
    check_budget(budget, n)?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut idx = rand::seq::index::sample(&mut rng, n, budget).into_vec();
    idx.sort_unstable();
    Ok(idx.into_iter().map(|index| Planned { index, inclusion: budget as f64 / n as f64 }).collect())
}

fn check_budget(budget: usize, n: usize) -> Result<(), CalibrationError> {
    if budget < 2 {
        return Err(CalibrationError::BudgetTooSmall(budget));
    }
    if budget > n {
        return Err(CalibrationError::BudgetTooLarge { budget, examples: n });
    }
    Ok(())
}

/// Inclusion probabilities `budget * q_i`, those over 1 set to 1 and the rest rescaled to
/// keep the sum at `budget`, until none is over 1.
fn cap_inclusion(q: &[f64], budget: usize) -> Vec<f64> {
    let mut capped = vec![false; q.len()];
    loop {
        let fixed = capped.iter().filter(|&&c| c).count() as f64;
        let free: f64 = q.iter().zip(&capped).filter(|(_, c)| !**c).map(|(v, _)| v).sum();
        let scale = (budget as f64 - fixed) / free;
        let pi: Vec<f64> = q.iter().zip(&capped).map(|(v, &c)| if c { 1.0 } else { v * scale }).collect();
        let over: Vec<usize> = (0..q.len()).filter(|&i| !capped[i] && pi[i] > 1.0).collect();
        if over.is_empty() {
            return pi;
        }
        over.into_iter().for_each(|i| capped[i] = true);
    }
}

/// Systematic sampling over a random order: exactly `sum(pi)` distinct units, unit `i`
/// with probability `pi_i`.
fn systematic(pi: &[f64], seed: u64) -> Vec<Planned> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut order: Vec<usize> = (0..pi.len()).collect();
    order.shuffle(&mut rng);
    let start: f64 = rng.random();
    let budget = pi.iter().sum::<f64>().round() as usize;
    let mut out = Vec::with_capacity(budget);
    let mut cum = 0.0;
    let mut next = start;
    for &i in &order {
        cum += pi[i];
        while next < cum - 1e-12 && out.len() < budget {
            if out.last().is_none_or(|p: &Planned| p.index != i) {
                out.push(Planned { index: i, inclusion: pi[i].min(1.0) });
            }
            next += 1.0;
        }
    }
    out.sort_by_key(|p| p.index);
    out.dedup_by_key(|p| p.index);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Exactly the budget, distinct, probabilities in (0, 1] summing to the budget.
        #[test]
        fn plans_exactly_the_budget(post in prop::collection::vec(0.0f64..=1.0, 10..200), frac in 0.05f64..0.9, seed in 0u64..1000) {
            let budget = ((post.len() as f64 * frac) as usize).max(2);
            let plan = plan_labels(&post, budget, seed).unwrap();
            prop_assert_eq!(plan.len(), budget);
            prop_assert!(plan.windows(2).all(|w| w[0].index < w[1].index));
            prop_assert!(plan.iter().all(|p| p.inclusion > 0.0 && p.inclusion <= 1.0));
        }
    }

    /// The empirical inclusion frequency of each unit matches its stated probability.
    #[test]
    fn inclusion_probabilities_are_honest() {
        let post: Vec<f64> = (0..40).map(|i| if i < 10 { 0.5 } else { 0.98 }).collect();
        let budget = 8;
        let mut counts = vec![0.0; 40];
        let mut stated = vec![0.0; 40];
        let trials = 20_000;
        for s in 0..trials {
            for p in plan_labels(&post, budget, s).unwrap() {
                counts[p.index] += 1.0 / trials as f64;
                stated[p.index] = p.inclusion;
            }
        }
        for i in 0..40 {
            assert!((counts[i] - stated[i]).abs() < 0.015, "unit {i}: {} vs {}", counts[i], stated[i]);
        }
        assert!(stated[0] > 1.5 * stated[20], "{} {}", stated[0], stated[20]);
    }

    /// More labels beside some already had: those kept at inclusion 1, the new ones drawn
    /// among the others only, each as often as it says.
    #[test]
    fn more_labels_are_drawn_among_the_others_with_honest_probabilities() {
        let post: Vec<f64> = (0..30).map(|i| if i < 10 { 0.5 } else { 0.95 }).collect();
        let have = [0, 1, 2, 15, 29];
        let trials = 20_000;
        let mut counts = [0.0; 30];
        let mut stated = [0.0; 30];
        for s in 0..trials {
            let plan = plan_more_labels(&post, &have, 6, s).unwrap();
            assert_eq!(plan.len(), 11);
            assert!(plan.windows(2).all(|w| w[0].index < w[1].index));
            for p in plan {
                counts[p.index] += 1.0 / trials as f64;
                stated[p.index] = p.inclusion;
            }
        }
        for i in 0..30 {
            let want = if have.contains(&i) { 1.0 } else { stated[i] };
            assert!((counts[i] - want).abs() < 0.015 && (stated[i] - want).abs() < 1e-12, "unit {i}: {}", counts[i]);
        }
        assert!((stated.iter().sum::<f64>() - 11.0).abs() < 1e-9);
        assert_eq!(
            plan_more_labels(&post, &have, 26, 0),
            Err(CalibrationError::BudgetBeyondUnlabeled { budget: 26, unlabeled: 25 })
        );
        assert_eq!(plan_more_labels(&post, &[3, 3], 4, 0), Err(CalibrationError::Duplicate(3)));
        assert_eq!(plan_more_labels(&post, &[30], 4, 0), Err(CalibrationError::OutOfRange { index: 30, examples: 30 }));
    }

    #[test]
    fn budgets_out_of_range_are_refused() {
        assert_eq!(plan_labels(&[0.5; 5], 6, 0), Err(CalibrationError::BudgetTooLarge { budget: 6, examples: 5 }));
        assert_eq!(uniform_sample(5, 1, 0), Err(CalibrationError::BudgetTooSmall(1)));
    }
}
