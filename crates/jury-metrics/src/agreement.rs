//! What a report shows beside accuracy: an interval around a share, agreement between
//! two judges beyond chance, and a reliability diagram's bins.

use jury_core::{Labels, Posteriors};

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
