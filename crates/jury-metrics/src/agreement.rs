//! What a report shows beside accuracy: an interval around a share, agreement between
//! two judges and within the whole jury beyond chance, and a reliability diagram's bins.

use jury_core::{Judgments, Labels, Posteriors, argmax};

/// The Wilson score interval of `hits` out of `n` at normal quantile `z` (1.96 for 95%);
/// `None` for no trials.
pub fn wilson_interval(hits: usize, n: usize, z: f64) -> Option<(f64, f64)> {
    if n == 0 {
        return None;
    }
    let (n, p) = (n as f64, hits as f64 / n as f64);
    let denom = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / denom;
    let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / denom;
    Some(((centre - half).max(0.0), (centre + half).min(1.0)))
}

/// Cohen's kappa of two raters' classes over the items both rated (`None` where one did
/// not): (observed agreement - chance agreement) / (1 - chance agreement), chance from
/// each rater's own class shares. `None` with no shared item, or when chance agreement
/// is 1 (both always give the same one class).
pub fn cohen_kappa(a: &[Option<usize>], b: &[Option<usize>], n_classes: usize) -> Option<f64> {
    let mut table = vec![0usize; n_classes * n_classes];
    for (x, y) in a.iter().zip(b) {
        if let (Some(x), Some(y)) = (x, y) {
            table[x * n_classes + y] += 1;
        }
    }
    cohen_kappa_table(&table, n_classes)
}

/// [`cohen_kappa`] from the table of the items both raters rated: `table[x * n_classes +
/// y]` items the first rated `x` and the second `y`.
pub fn cohen_kappa_table(table: &[usize], n_classes: usize) -> Option<f64> {
    let (mut agree, mut n) = (0usize, 0usize);
    let (mut ca, mut cb) = (vec![0usize; n_classes], vec![0usize; n_classes]);
    for x in 0..n_classes {
        for y in 0..n_classes {
            let c = table[x * n_classes + y];
            n += c;
            if x == y {
                agree += c;
            }
            ca[x] += c;
            cb[y] += c;
        }
    }
    if n == 0 {
        return None;
    }
    let n = n as f64;
    let chance: f64 = ca.iter().zip(&cb).map(|(&x, &y)| (x as f64 / n) * (y as f64 / n)).sum();
    (chance < 1.0).then(|| (agree as f64 / n - chance) / (1.0 - chance))
}

/// How much the whole jury agrees beyond chance, on hard votes (argmax), label-free.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JuryAgreement {
    /// Fleiss' kappa, generalised to a varying number of votes per example: each
    /// example with at least two votes weighs equally in the observed agreement, chance
    /// from the classes' shares of all those votes. `None` without such an example or
    /// when every vote is one class.
    pub fleiss_kappa: Option<f64>,
    /// Krippendorff's alpha, nominal: 1 - (n - 1) * disagreeing pairable values /
    /// expected ones, over examples with at least two votes (missing votes are simply
    /// absent). `None` when no disagreement is expected (one class only, or no pairs).
    pub krippendorff_alpha: Option<f64>,
}

/// [`JuryAgreement`] of a judgments matrix.
pub fn jury_agreement(j: &Judgments) -> JuryAgreement {
    let c = j.n_classes();
    let mut counts = vec![0.0; c];
    // Fleiss: summed per-example agreement and the class totals of the votes counted.
    let (mut agreement, mut items) = (0.0, 0.0);
    let mut class_votes = vec![0.0; c];
    // Krippendorff: the coincidence matrix's diagonal (agreeing pairs) and margins.
    let mut agreeing = 0.0;
    for n in 0..j.n_examples() {
        counts.fill(0.0);
        for (_, p) in j.row(n) {
            counts[argmax(p)] += 1.0;
        }
        let m: f64 = counts.iter().sum();
        if m < 2.0 {
            continue;
        }
        let same_pairs: f64 = counts.iter().map(|x| x * (x - 1.0)).sum();
        agreement += same_pairs / (m * (m - 1.0));
        items += 1.0;
        agreeing += same_pairs / (m - 1.0);
        class_votes.iter_mut().zip(&counts).for_each(|(t, x)| *t += x);
    }
    let total: f64 = class_votes.iter().sum();
    if items == 0.0 {
        return JuryAgreement { fleiss_kappa: None, krippendorff_alpha: None };
    }
    let chance: f64 = class_votes.iter().map(|x| (x / total).powi(2)).sum();
    let fleiss_kappa = (chance < 1.0).then(|| (agreement / items - chance) / (1.0 - chance));
    // Off-diagonal observed = total - diagonal; expected off-diagonal = (total^2 -
    // sum of squared margins) / (total - 1).
    let expected = (total * total - class_votes.iter().map(|x| x * x).sum::<f64>()) / (total - 1.0);
    let krippendorff_alpha = (expected > 0.0).then(|| 1.0 - (total - agreeing) / expected);
    JuryAgreement { fleiss_kappa, krippendorff_alpha }
}

/// One bin of a reliability diagram.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReliabilityBin {
    /// The bin's confidence range [lower, upper).
    pub lower: f64,
    pub upper: f64,
    /// Mean confidence (top posterior) and accuracy of the labeled examples in it.
    pub confidence: f64,
    pub accuracy: f64,
    pub count: usize,
}

/// The non-empty bins of `n_bins` equal-width confidence bins over the labeled
/// examples, as [`crate::expected_calibration_error`] bins them.
pub fn reliability_bins(posteriors: &Posteriors, labels: &Labels, n_bins: usize) -> Vec<ReliabilityBin> {
    let n_bins = n_bins.max(1);
    let (mut conf, mut hits, mut count) = (vec![0.0; n_bins], vec![0usize; n_bins], vec![0usize; n_bins]);
    for ((row, l), p) in posteriors.rows().zip(labels.as_slice()).zip(posteriors.argmax_labels()) {
        let Some(l) = l else { continue };
        let c = row[p];
        let b = ((c * n_bins as f64) as usize).min(n_bins - 1);
        conf[b] += c;
        hits[b] += usize::from(p == *l);
        count[b] += 1;
    }
    (0..n_bins)
        .filter(|&b| count[b] > 0)
        .map(|b| ReliabilityBin {
            lower: b as f64 / n_bins as f64,
            upper: (b + 1) as f64 / n_bins as f64,
            confidence: conf[b] / count[b] as f64,
            accuracy: hits[b] as f64 / count[b] as f64,
            count: count[b],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Golden values: Wilson 95% for 8 of 10 is (0.4902, 0.9433) (Wilson 1927; as
    /// statsmodels' proportion_confint(method="wilson")); kappa from a 2x2 table.
    #[test]
    fn golden_fleiss_kappa_and_krippendorff_alpha() {
        // Fleiss' kappa: the 10 x 5 table of Fleiss (1971) as on Wikipedia, 14 raters;
        // statsmodels' fleiss_kappa gives 0.20993070442195522.
        let table: [[usize; 5]; 10] = [
            [0, 0, 0, 0, 14],
            [0, 2, 6, 4, 2],
            [0, 0, 3, 5, 6],
            [0, 3, 9, 2, 0],
            [2, 2, 8, 1, 1],
            [7, 7, 0, 0, 0],
            [3, 2, 6, 3, 0],
            [2, 5, 3, 2, 2],
            [6, 5, 2, 1, 0],
            [0, 2, 2, 3, 7],
        ];
        let mut b = jury_core::JudgmentsBuilder::new(5).unwrap();
        for (n, row) in table.iter().enumerate() {
            let votes = row.iter().enumerate().flat_map(|(class, &k)| std::iter::repeat_n(class, k));
            for (rater, class) in votes.enumerate() {
                let mut p = vec![0.0; 5];
                p[class] = 1.0;
                b.push(&format!("s{n}"), &format!("r{rater}"), Some(p)).unwrap();
            }
        }
        let a = jury_agreement(&b.build());
        assert!((a.fleiss_kappa.unwrap() - 0.209_930_704_421_955_22).abs() < 1e-12, "{a:?}");
        // Krippendorff (2011), "Computing Krippendorff's alpha-reliability": 4 coders, 12
        // units, values 1-5 with gaps; the `krippendorff` package (nominal) gives
        // 0.743421052631579.
        let coders: [[u8; 12]; 4] = [
            [1, 2, 3, 3, 2, 1, 4, 1, 2, 0, 0, 0],
            [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, 0, 3],
            [0, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, 0],
            [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, 0],
        ];
        let mut b = jury_core::JudgmentsBuilder::new(5).unwrap();
        for unit in 0..12 {
            for (k, coder) in coders.iter().enumerate() {
                let probs = (coder[unit] > 0).then(|| {
                    let mut p = vec![0.0; 5];
                    p[usize::from(coder[unit]) - 1] = 1.0;
                    p
                });
                b.push(&format!("u{unit}"), &format!("c{k}"), probs).unwrap();
            }
        }
        let a = jury_agreement(&b.build());
        assert!((a.krippendorff_alpha.unwrap() - 0.743_421_052_631_579).abs() < 1e-12, "{a:?}");
    }

    #[test]
    fn one_class_only_has_no_agreement_beyond_chance() {
        let mut b = jury_core::JudgmentsBuilder::new(2).unwrap();
        for n in 0..5 {
            for k in 0..3 {
                b.push_binary(&format!("e{n}"), &format!("j{k}"), Some(0.9)).unwrap();
            }
        }
        let a = jury_agreement(&b.build());
        assert_eq!((a.fleiss_kappa, a.krippendorff_alpha), (None, None));
    }

    #[test]
    fn golden_interval_and_kappa() {
        let (lo, hi) = wilson_interval(8, 10, 1.959963984540054).unwrap();
        assert!((lo - 0.49016).abs() < 1e-4 && (hi - 0.94331).abs() < 1e-4, "{lo} {hi}");
        assert_eq!(wilson_interval(0, 0, 1.96), None);
        // 20 items: both 1 on 9, both 0 on 6, a=1 b=0 on 3, a=0 b=1 on 2: po = 0.75,
        // pe = 0.6 * 0.55 + 0.4 * 0.45 = 0.51, kappa = 0.24 / 0.49.
        let mut a = vec![Some(1); 9];
        let mut b = vec![Some(1); 9];
        a.extend([Some(0); 6]);
        b.extend([Some(0); 6]);
        a.extend([Some(1); 3]);
        b.extend([Some(0); 3]);
        a.extend([Some(0); 2]);
        b.extend([Some(1); 2]);
        a.push(None);
        b.push(Some(1));
        let k = cohen_kappa(&a, &b, 2).unwrap();
        assert!((k - 0.24 / 0.49).abs() < 1e-12, "{k}");
        assert_eq!(cohen_kappa(&[Some(1), Some(1)], &[Some(1), Some(1)], 2), None);
    }

    /// The bins' weighted gaps add up to the ECE.
    #[test]
    fn bins_sum_to_the_ece() {
        let post = Posteriors::new(2, vec![0.9, 0.1, 0.3, 0.7, 0.45, 0.55, 0.2, 0.8, 0.6, 0.4]).unwrap();
        let labels = Labels::new(2, vec![Some(0), Some(1), Some(0), Some(1), None]).unwrap();
        let bins = reliability_bins(&post, &labels, 10);
        let total: usize = bins.iter().map(|b| b.count).sum();
        let ece: f64 = bins.iter().map(|b| (b.accuracy - b.confidence).abs() * b.count as f64 / total as f64).sum();
        assert!((ece - crate::expected_calibration_error(&post, &labels, 10).unwrap()).abs() < 1e-12);
        assert_eq!(total, 4);
    }
}
