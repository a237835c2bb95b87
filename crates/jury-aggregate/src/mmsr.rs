//! M-MSR (Ma and Olshevsky, UAI 2020, "Adversarial crowdsourcing through robust
//! rank-one matrix completion"): under the one-coin model the judges' agreement
//! covariance is rank one off the diagonal, its factor the judges' skills; a trimmed
//! alternating fit resists a few adversarial judges. The skills become log-odds weights
//! of a vote (crowd-kit's MMSR).
//!
//! Its cost is the pairs of judges that share an example, not the judges: a sparse crowd
//! of 200,000 judges with a handful of votes each has a few million pairs, while 10,000
//! judges who all judged the same three examples have 50 million. So the bound is on
//! pairs, [`MAX_MMSR_PAIRS`], checked before the covariance is built.

use jury_core::Judgments;
use rustc_hash::FxHashMap as HashMap;

use crate::special::softmax_in_place;
use crate::votes::Votes;
use crate::{AggregateError, Aggregation, Aggregator, SkillReport, TieBreak, check_fit, finish_votes};

/// Settings of M-MSR.
///
/// Refuses judgments whose judges form more than `max_pairs` pairs that share at
/// least one example, with an error naming the bound and the number of judges. The
/// bound is on pairs rather than judges because pairs are what the fit holds and visits
/// on every iteration (two adjacency entries each, about 80 bytes at the peak, and one
/// trimmed-mean sort per judge over its partners): a limit on judges would refuse sparse
/// crowds that are cheap and could not tell a dense jury of a few thousand judges, which
/// is not.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mmsr {
    pub ties: TieBreak,
    pub max_iter: usize,
    pub tol: f64,
    /// The most pairs of judges sharing an example it fits ([`MAX_MMSR_PAIRS`]).
    pub max_pairs: usize,
}

impl Mmsr {
    pub fn new(ties: TieBreak) -> Self {
        Self { ties, max_iter: 10_000, tol: 1e-10, max_pairs: MAX_MMSR_PAIRS }
    }
}

/// Rounds of the sign vote in [`signs`].
const SIGN_ROUNDS: usize = 100;

/// Juries up to this many judges count pairs in a K x K table.
const DENSE_JUDGES: usize = 2048;

/// The most pairs of judges sharing an example that [`Mmsr`] takes: every pair of a full
/// jury of 3,162 judges, or a sparse crowd's few million (3,200 judges on the same three
/// examples, 5.1 million pairs, took 4 s and 420 MB unbounded; 10,000 judges, 50
/// million pairs, 111 s and 3.9 GB).
pub const MAX_MMSR_PAIRS: usize = 5_000_000;

/// The refusal of a jury whose judges form more than `max_pairs` pairs.
fn too_many_pairs(max_pairs: usize, n_judges: usize) -> AggregateError {
    AggregateError::Config {
        method: "mmsr",
        reason: format!(
            "fits the covariance of at most {max_pairs} pairs of judges that share an example; \
             the {n_judges} judges of these judgments form more"
        ),
    }
}

/// The judges' covariance as adjacency lists: for each judge i, its partners j (judges
/// sharing at least one example, increasing) with `C/(C-1) * agreement - 1/(C-1)`.
/// Memory follows the pairs present, not K x K (a crowd of 200,000 judges is sparse),
/// and is refused once more than `max_pairs` pairs appear, so it never holds more.
fn covariance(votes: &Votes, max_pairs: usize) -> Result<Vec<Vec<(u32, f64)>>, AggregateError> {
    let c = votes.n_classes as f64;
    let k_all = votes.n_judges;
    // (agreements, shared examples) per pair i < j: a dense table for a small jury, a
    // map of the pairs present for a large crowd.
    let dense = k_all <= DENSE_JUDGES;
    let mut table = vec![(0.0, 0.0); if dense { k_all * k_all } else { 0 }];
    let mut map: HashMap<(u32, u32), (f64, f64)> = HashMap::default();
    let mut n_pairs = 0;
    for p in 0..votes.n_patterns() {
        let (pat, w) = (votes.pattern(p), votes.counts[p]);
        for (a, &(i, vi)) in pat.iter().enumerate() {
            for &(j, vj) in &pat[a + 1..] {
                let e =
                    if dense { &mut table[i as usize * k_all + j as usize] } else { map.entry((i, j)).or_default() };
                if e.1 == 0.0 {
                    n_pairs += 1;
                    if n_pairs > max_pairs {
                        return Err(too_many_pairs(max_pairs, k_all));
                    }
                }
                e.1 += w;
                if vi == vj {
                    e.0 += w;
                }
            }
        }
    }
    if dense {
        for (at, &e) in table.iter().enumerate().filter(|(_, e)| e.1 > 0.0) {
            map.insert(((at / k_all) as u32, (at % k_all) as u32), e);
        }
    }
    let pairs = map;
    let mut adj = vec![Vec::new(); votes.n_judges];
    for (&(i, j), &(agree, common)) in &pairs {
        let cov = c / (c - 1.0) * agree / common - 1.0 / (c - 1.0);
        adj[i as usize].push((j, cov));
        adj[j as usize].push((i, cov));
    }
    adj.iter_mut().for_each(|a| a.sort_by_key(|&(j, _)| j));
    Ok(adj)
}

/// The mean of `x` after dropping its `f` largest values above `a` and its `f` smallest
/// below `a` (fewer when fewer lie on that side); `None` when nothing is left.
fn trimmed_mean(x: &mut [f64], f: usize, a: f64) -> Option<f64> {
    x.sort_by(f64::total_cmp);
    let below = x.iter().filter(|&&y| y < a).count();
    let lo = if below < f { below } else { f };
    let above = x.iter().filter(|&&y| y > a).count();
    let hi = x.len() - if above < f { above } else { f };
    (lo < hi).then(|| x[lo..hi].iter().sum::<f64>() / (hi - lo) as f64)
}

/// Signs s with sign(C_ij) = s_i s_j as far as possible: from every judge positive, each
/// judge takes the sign its partners' signed covariances vote for (a tie keeps its
/// sign), all at once, until nothing changes (at most `SIGN_ROUNDS` rounds); then most
/// judges are made positive. The votes are sums of -1, 0 and 1, exact in any order, so
/// the signs do not depend on judge order even where the sign graph is frustrated.
fn signs(adj: &[Vec<(u32, f64)>]) -> Vec<f64> {
    let sign = |x: f64| {
        if x > 0.0 {
            1i64
        } else if x < 0.0 {
            -1
        } else {
            0
        }
    };
    let mut s = vec![1i64; adj.len()];
    for _ in 0..SIGN_ROUNDS {
        let next: Vec<i64> = adj
            .iter()
            .zip(&s)
            .map(|(row, &own)| match row.iter().map(|&(j, x)| sign(x) * s[j as usize]).sum::<i64>().signum() {
                0 => own,
                v => v,
            })
            .collect();
        if next == s {
            break;
        }
        s = next;
    }
    let orient = if s.iter().sum::<i64>() < 0 { -1 } else { 1 };
    s.iter().map(|&x| (orient * x) as f64).collect()
}

impl Aggregator for Mmsr {
    fn name(&self) -> &'static str {
        "mmsr"
    }

    fn aggregate(&self, j: &Judgments) -> Result<Aggregation, AggregateError> {
        check_fit(self.name(), j, self.max_iter, self.tol)?;
        // The judges of one example are pairs already: a jury past the bound on any one
        // example is refused before anything is counted.
        let widest = (0..j.n_examples()).map(|n| j.entry_range(n).len()).max().unwrap_or(0);
        if widest * widest.saturating_sub(1) / 2 > self.max_pairs {
            return Err(too_many_pairs(self.max_pairs, j.n_judges()));
        }
        let votes = Votes::new(j);
        let (k_all, c) = (votes.n_judges, votes.n_classes);
        let adj = covariance(&votes, self.max_pairs)?;
        // Trim F = floor(s / 2) - 1 values per side, s the fewest partners any judge has.
        let partners = adj.iter().map(Vec::len).min().unwrap_or(0);
        let f = (partners / 2).saturating_sub(1);
        let n_tasks = votes.n_judged().max(1) as f64;
        let (mut u, mut v) = (vec![1.0; k_all], vec![1.0; k_all]);
        let mut buf = Vec::new();
        let (mut iterations, mut converged) = (0, false);
        // X = |C| is symmetric, so column j's entries are row j's.
        let fit = |w: &mut [f64], other: &[f64], buf: &mut Vec<f64>| {
            for (i, row) in adj.iter().enumerate() {
                buf.clear();
                // A partner whose factor is 0 says nothing about this one (x / 0).
                buf.extend(
                    row.iter().filter(|&&(j, _)| other[j as usize] != 0.0).map(|&(j, x)| x.abs() / other[j as usize]),
                );
                if let Some(m) = trimmed_mean(buf, f, w[i]) {
                    w[i] = if buf.len() == 1 && m == 0.0 { 1.0 / n_tasks.sqrt() } else { m };
                }
            }
        };
        while iterations < self.max_iter {
            iterations += 1;
            let (u_prev, v_prev) = (u.clone(), v.clone());
            fit(&mut v, &u, &mut buf);
            fit(&mut u, &v, &mut buf);
            // ||u v' - u0 v0'||_F^2 expanded, so no K x K product is formed.
            let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
            let change2 = dot(&u, &u) * dot(&v, &v) - 2.0 * dot(&u, &u_prev) * dot(&v, &v_prev)
                + dot(&u_prev, &u_prev) * dot(&v_prev, &v_prev);
            if !change2.is_finite() {
                break;
            }
            if change2.max(0.0).sqrt() < self.tol {
                converged = true;
                break;
            }
        }
        let norm = |w: &[f64]| w.iter().map(|a| a * a).sum::<f64>().sqrt();
        let scale = (norm(&u) / norm(&v)).sqrt();
        let s = signs(&adj);
        let cf = c as f64;
        let estimated: Vec<Option<f64>> = (0..k_all)
            .map(|i| {
                if adj[i].is_empty() || !(u[i] / scale).is_finite() {
                    return None;
                }
                let x =
                    (s[i] * u[i] / scale).min(1.0 - 1.0 / n_tasks.sqrt()).max(-1.0 / (cf - 1.0) + 1.0 / n_tasks.sqrt());
                let p = x * (cf - 1.0) / cf + 1.0 / cf;
                Some((p * (cf - 1.0) / (1.0 - p)).ln())
            })
            .collect();
        // A judge who shares no example with another has no covariance to fit: it gets
        // the median of the others' skills, or 1 (P(correct) = e / (e + C - 1)) when no
        // judge has one, so a lone judge still decides its examples.
        let mut known: Vec<f64> = estimated.iter().flatten().copied().collect();
        known.sort_by(f64::total_cmp);
        let fallback = if known.is_empty() { 1.0 } else { known[known.len() / 2] };
        let skills = votes.skills(estimated.iter().map(|e| e.unwrap_or(fallback)));
        let weights: Vec<f64> = skills.iter().map(|s| s.unwrap_or(0.0)).collect();
        // The one-coin posterior: a softmax of the log-odds-weighted votes.
        let mut t = votes.weighted_sums(&weights);
        t.chunks_exact_mut(c).for_each(|row| {
            softmax_in_place(row);
        });
        let report = SkillReport::new("log-odds weight ln(p (C-1) / (1 - p))", skills, iterations, converged, None);
        finish_votes(self.name(), j, &votes, &t, self.ties, report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Diagnostics;
    use crate::testutil::binary;

    /// 3,200 judges on the same examples form 5,118,400 pairs, past the bound: refused at
    /// once, naming the bound and the judges. A sparse crowd past a lower bound is
    /// refused while its pairs are counted.
    #[test]
    fn a_jury_of_too_many_pairs_is_refused() {
        let rows: Vec<Vec<Option<f64>>> = (0..3).map(|n| vec![Some(if n == 0 { 0.9 } else { 0.2 }); 3200]).collect();
        let refs: Vec<&[Option<f64>]> = rows.iter().map(|r| r.as_slice()).collect();
        let e = Mmsr::new(TieBreak::Positive).aggregate(&binary(&refs)).unwrap_err().to_string();
        assert_eq!(
            e,
            "mmsr: fits the covariance of at most 5000000 pairs of judges that share an example; \
             the 3200 judges of these judgments form more"
        );
        // A chain: example n judged by judges n and n + 1, so `pairs` pairs, counted in
        // the dense table (10 judges) and in the map (3,000 judges, most without a vote).
        for (k, pairs) in [(10, 9), (3000, 20)] {
            let rows: Vec<Vec<Option<f64>>> =
                (0..pairs).map(|n| (0..k).map(|i| (i == n || i == n + 1).then_some(0.8)).collect()).collect();
            let refs: Vec<&[Option<f64>]> = rows.iter().map(|r| r.as_slice()).collect();
            let m = |max_pairs| Mmsr { max_pairs, ..Mmsr::new(TieBreak::Positive) }.aggregate(&binary(&refs));
            assert!(m(pairs).is_ok(), "{k}");
            let e = m(pairs - 1).unwrap_err().to_string();
            assert!(
                e.contains(&format!("at most {} pairs", pairs - 1)) && e.contains(&format!("the {k} judges")),
                "{e}"
            );
        }
    }

    #[test]
    fn trimming_keeps_the_middle() {
        assert_eq!(trimmed_mean(&mut [5.0, 1.0, 3.0, 100.0, -50.0], 1, 3.0), Some(3.0));
        assert_eq!(trimmed_mean(&mut [1.0, 2.0], 0, 0.0), Some(1.5));
        assert_eq!(trimmed_mean(&mut [], 0, 0.0), None);
    }

    #[test]
    fn the_better_judges_weigh_more_and_an_adversary_is_negative() {
        // Truth alternates; j0 errs on 1 in 10, j1 and j2 on 2 in 10, j3 on 8 in 10.
        let rows: Vec<Vec<Option<f64>>> = (0..200)
            .map(|n| {
                let y = n % 2 == 0;
                let p = |wrong: bool| Some(if y != wrong { 0.9 } else { 0.1 });
                vec![p(n % 10 == 1), p(n % 10 < 2 && n % 10 != 1 || n % 10 == 3), p(n % 10 >= 8), p(n % 10 < 8)]
            })
            .collect();
        let refs: Vec<&[Option<f64>]> = rows.iter().map(|r| r.as_slice()).collect();
        let a = Mmsr::new(TieBreak::Positive).aggregate(&binary(&refs)).unwrap();
        let Diagnostics::Skills(r) = a.diagnostics() else { panic!() };
        let s: Vec<f64> = r.skills.iter().map(|s| s.unwrap()).collect();
        assert!(s[0] > s[1] && s[1] > 0.0 && s[2] > 0.0 && s[3] < 0.0, "{s:?}");
        // Where j2 errs with the adversary's right answers (n % 10 >= 8), a one-coin
        // vote cannot win; everywhere else it does.
        for (n, &l) in a.labels().iter().enumerate() {
            assert_eq!(l == usize::from(n % 2 == 0), n % 10 < 8, "example {n}");
        }
    }
}
