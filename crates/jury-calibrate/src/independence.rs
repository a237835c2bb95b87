//! Whether the judges' hard verdicts agree pair by pair as often as the label-free
//! posterior's classes say they should if each judge erred independently given the class.
//!
//! Where they do, the unlabeled data confirm the model the label-free posterior comes from,
//! and that posterior is already the best combination of the votes: the replays of
//! docs/reproduction/calibration.md ("Simulated juries") found every member a few labels
//! fit a noisier copy of it there. Where they do not (near-copies, families, judges that
//! share blind spots: every real jury of that page), the labels have something to add.
//! The check reads only hard verdicts: a judge's probability carries evidence a model of
//! votes leaves out, so juries with soft judgments never pass.

/// The excess (or shortfall) of two judges' agreement the check must be able to see for
/// a pass to mean anything: 5 points, well below the most dependent pair's 13-39 in the
/// simulated near-copies, families and wrong consensus. With few examples (FairEval's 66)
/// nothing is rejected because nothing could be, and a pass would only mean no power.
const DETECTABLE: f64 = 0.05;
/// The fewest judges for which conditional independence constrains the votes at all: with
/// three, a two-class model of independent judges fits any table of votes exactly.
const MIN_JUDGES: usize = 4;
/// The family-wise level of the check (Bonferroni over the pairs).
const LEVEL: f64 = 0.05;

/// Whether every pair of judges agrees as often as independence given the label-free
/// classes predicts, at the 5% family-wise level, and shares enough examples that an
/// excess of [`DETECTABLE`] would have been rejected. `x` is the examples x judges matrix
/// of log-odds (0 where a judge is missing), `hard` the magnitude a hard verdict reads as,
/// and `posterior` the label-free probability of class 1 per example. False for soft
/// judgments or fewer than four judges.
pub(crate) fn votes_independent_given_class(x: &[f64], k: usize, hard: f64, posterior: &[f64]) -> bool {
    let n = posterior.len();
    if k < MIN_JUDGES || n == 0 || x.len() != n * k {
        return false;
    }
    if x.iter().any(|&v| v != 0.0 && (v.abs() - hard).abs() > 1e-9) {
        return false;
    }
    // Each judge's chance of voting 1 within each class, the class shares from the posterior.
    let (mut v1, mut w1, mut v0, mut w0) = (vec![0.0; k], vec![0.0; k], vec![0.0; k], vec![0.0; k]);
    for (row, &p) in x.chunks_exact(k).zip(posterior) {
        for (j, &v) in row.iter().enumerate().filter(|(_, v)| **v != 0.0) {
            let one = f64::from(u8::from(v > 0.0));
            v1[j] += p * one;
            w1[j] += p;
            v0[j] += (1.0 - p) * one;
            w0[j] += 1.0 - p;
        }
    }
    let t1: Vec<f64> = (0..k).map(|j| v1[j] / w1[j].max(1e-12)).collect();
    let t0: Vec<f64> = (0..k).map(|j| v0[j] / w0[j].max(1e-12)).collect();
    // Per pair: the tail probability of the agreement seen and of one DETECTABLE away.
    let mut tails = Vec::new();
    for a in 0..k {
        for b in a + 1..k {
            let (mut shared, mut agree, mut pi) = (0usize, 0usize, 0.0);
            for (row, &p) in x.chunks_exact(k).zip(posterior) {
                if row[a] != 0.0 && row[b] != 0.0 {
                    shared += 1;
                    agree += usize::from((row[a] > 0.0) == (row[b] > 0.0));
                    pi += p;
                }
            }
            if shared == 0 {
                return false;
            }
            let m = shared as f64;
            let pi = pi / m;
            let same = |s: f64, t: f64| s * t + (1.0 - s) * (1.0 - t);
            let expected = pi * same(t1[a], t1[b]) + (1.0 - pi) * same(t0[a], t0[b]);
            let sd = (expected * (1.0 - expected) / m).sqrt().max(1e-12);
            let tail = |z: f64| erfc(z / std::f64::consts::SQRT_2);
            tails.push((tail((agree as f64 / m - expected).abs() / sd), tail(DETECTABLE / sd)));
        }
    }
    let pairs = tails.len() as f64;
    tails.iter().all(|&(seen, detectable)| seen * pairs > LEVEL && detectable * pairs <= LEVEL)
}

/// The complementary error function for `x >= 0` (Abramowitz and Stegun 7.1.26, absolute
/// error under 1.5e-7: ample for a tail probability compared with 0.05 over the pairs).
fn erfc(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly =
        t * (0.254_829_592 + t * (-0.284_496_736 + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    (poly * (-x * x).exp()).clamp(0.0, 1.0)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    const HARD: f64 = 6.9;

    /// Hard votes (log-odds +-`hard`) of `acc.len()` judges on `n` examples, judge
    /// `copy_of[j]` copied by judge `j` when set, with the exact posterior of independent
    /// judges and the truth (class 1 four times in ten).
    pub(crate) fn hard_jury(
        n: usize,
        acc: &[f64],
        copy_of: &[Option<usize>],
        hard: f64,
        seed: u64,
    ) -> (Vec<f64>, Vec<f64>, Vec<u8>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let k = acc.len();
        let (mut x, mut post, mut truth) = (Vec::with_capacity(n * k), Vec::with_capacity(n), Vec::with_capacity(n));
        for _ in 0..n {
            let t = rng.random::<f64>() < 0.4;
            let mut row = vec![0.0; k];
            for j in 0..k {
                let vote = match copy_of[j] {
                    Some(c) => row[c] > 0.0,
                    None => (rng.random::<f64>() < acc[j]) == t,
                };
                row[j] = if vote { hard } else { -hard };
            }
            let mut lo = (0.4f64 / 0.6).ln();
            for j in 0..k {
                let w = (acc[j] / (1.0 - acc[j])).ln();
                lo += if row[j] > 0.0 { w } else { -w };
            }
            post.push(1.0 / (1.0 + (-lo).exp()));
            truth.push(u8::from(t));
            x.extend(row);
        }
        (x, post, truth)
    }

    fn jury(n: usize, acc: &[f64], copy_of: &[Option<usize>], seed: u64) -> (Vec<f64>, Vec<f64>) {
        let (x, post, _) = hard_jury(n, acc, copy_of, HARD, seed);
        (x, post)
    }

    #[test]
    fn independent_judges_pass_and_copies_fail() {
        let acc = [0.8, 0.75, 0.7, 0.85, 0.65, 0.7];
        let (x, post) = jury(3000, &acc, &[None; 6], 1);
        assert!(votes_independent_given_class(&x, 6, HARD, &post));
        let copies = [None, None, None, None, Some(0), Some(0)];
        let (x, post) = jury(3000, &acc, &copies, 1);
        assert!(!votes_independent_given_class(&x, 6, HARD, &post));
    }

    #[test]
    fn a_jury_too_small_to_show_a_dependence_does_not_pass() {
        let acc = [0.8, 0.75, 0.7, 0.85, 0.65, 0.7];
        let (x, post) = jury(66, &acc, &[None; 6], 1);
        assert!(!votes_independent_given_class(&x, 6, HARD, &post));
    }

    #[test]
    fn soft_judgments_and_three_judges_never_pass() {
        let acc = [0.8, 0.75, 0.7, 0.85, 0.65, 0.7];
        let (mut x, post) = jury(3000, &acc, &[None; 6], 2);
        x[0] = 1.3;
        assert!(!votes_independent_given_class(&x, 6, HARD, &post));
        let (x, post) = jury(3000, &acc[..3], &[None; 3], 2);
        assert!(!votes_independent_given_class(&x, 3, HARD, &post));
    }

    #[test]
    fn erfc_matches_known_values() {
        for (x, want) in [(0.0, 1.0), (0.5, 0.479_500_122), (1.0, 0.157_299_207), (2.0, 0.004_677_735)] {
            assert!((erfc(x) - want).abs() < 2e-7, "erfc({x})");
        }
    }
}
