//! Scores posteriors and judges against reference labels; the only crate that reads labels.
//!
//! Every metric is computed over the examples that have a label and returns `None` when
//! there are none, so an unlabeled run can never report a made-up score.

mod agreement;
mod families;
mod protocol;
mod ranking;

pub use agreement::{
    JuryAgreement, ReliabilityBin, cohen_kappa, cohen_kappa_table, jury_agreement, reliability_bins, wilson_interval,
};
pub use families::{ErrorCorrelations, FAMILY_CORRELATION, MAX_JUDGES_FOR_CORRELATIONS, error_correlations};
pub use protocol::{Split, accuracy_on, labeled};
pub use ranking::{average_precision_at_k, rank_biased_overlap, spearman};

use jury_core::{Judgments, Labels, Posteriors, argmax};

/// Fraction of labeled examples whose predicted label matches. `predicted` is in the
/// labels' example order.
pub fn accuracy(predicted: &[usize], labels: &Labels) -> Option<f64> {
    let (hits, total) = predicted
        .iter()
        .zip(labels.as_slice())
        .filter_map(|(p, l)| l.map(|l| usize::from(*p == l)))
        .fold((0usize, 0usize), |(h, t), x| (h + x, t + 1));
    (total > 0).then(|| hits as f64 / total as f64)
}

/// Each judge's accuracy (hard vote vs label) over the examples it judged that have a
/// label; `None` for a judge with no such example.
pub fn judge_accuracies(judgments: &Judgments, labels: &Labels) -> Vec<Option<f64>> {
    let mut hits = vec![0usize; judgments.n_judges()];
    let mut total = vec![0usize; judgments.n_judges()];
    for (n, k, p) in judgments.entries() {
        if let Some(l) = labels.get(n) {
            hits[k] += usize::from(argmax(p) == l);
            total[k] += 1;
        }
    }
    hits.iter().zip(&total).map(|(&h, &t)| (t > 0).then(|| h as f64 / t as f64)).collect()
}

/// A labelling against one judge on the labeled examples that judge judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgainstJudge {
    /// Examples compared: labeled, and judged by the judge.
    pub compared: usize,
    /// Right in the labelling and wrong in the judge's vote.
    pub only_labelling_right: usize,
    /// Right in the judge's vote and wrong in the labelling.
    pub only_judge_right: usize,
}

/// Where `predicted` (a label per example) and judge `judge`'s votes part, scored against
/// `labels`: the examples one gets right and the other wrong, which is all a difference
/// of their accuracies is made of.
pub fn against_judge(predicted: &[usize], judgments: &Judgments, judge: usize, labels: &Labels) -> AgainstJudge {
    let mut out = AgainstJudge { compared: 0, only_labelling_right: 0, only_judge_right: 0 };
    for (n, k, p) in judgments.entries() {
        let Some(l) = labels.get(n).filter(|_| k == judge) else { continue };
        out.compared += 1;
        match (predicted.get(n) == Some(&l), argmax(p) == l) {
            (true, false) => out.only_labelling_right += 1,
            (false, true) => out.only_judge_right += 1,
            _ => {}
        }
    }
    out
}

/// Brier score of the posteriors. Binary: mean of (P(positive) - y)^2, the usual
/// binary form. C > 2: mean of sum over classes of (p_c - 1[c = y])^2 (Brier 1950).
pub fn brier(posteriors: &Posteriors, labels: &Labels) -> Option<f64> {
    let c = posteriors.n_classes();
    let scores = posteriors.rows().zip(labels.as_slice()).filter_map(|(row, l)| {
        l.map(|l| {
            if c == 2 {
                (row[1] - l as f64).powi(2)
            } else {
                row.iter().enumerate().map(|(i, p)| (p - f64::from(u8::from(i == l))).powi(2)).sum()
            }
        })
    });
    mean(scores)
}

/// Expected calibration error with `n_bins` equal-width bins over the confidence (the
/// top posterior): sum over bins of |accuracy - mean confidence| weighted by bin size.
/// The predicted class is the posterior's argmax.
pub fn expected_calibration_error(posteriors: &Posteriors, labels: &Labels, n_bins: usize) -> Option<f64> {
    let n_bins = n_bins.max(1);
    let mut conf_sum = vec![0.0; n_bins];
    let mut hits = vec![0usize; n_bins];
    let mut count = vec![0usize; n_bins];
    let predicted = posteriors.argmax_labels();
    for ((row, l), p) in posteriors.rows().zip(labels.as_slice()).zip(predicted) {
        let Some(l) = l else { continue };
        let conf = row[p];
        let b = ((conf * n_bins as f64) as usize).min(n_bins - 1);
        conf_sum[b] += conf;
        hits[b] += usize::from(p == *l);
        count[b] += 1;
    }
    let total: usize = count.iter().sum();
    (total > 0).then(|| {
        (0..n_bins).filter(|&b| count[b] > 0).map(|b| (hits[b] as f64 - conf_sum[b]).abs() / total as f64).sum()
    })
}

/// Pearson correlation of two equally long series; `None` if shorter than 2 or if either
/// is constant.
pub fn pearson(x: &[f64], y: &[f64]) -> Option<f64> {
    if x.len() != y.len() || x.len() < 2 {
        return None;
    }
    let mx = x.iter().sum::<f64>() / x.len() as f64;
    let my = y.iter().sum::<f64>() / y.len() as f64;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx).powi(2);
        syy += (b - my).powi(2);
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

fn mean(xs: impl Iterator<Item = f64>) -> Option<f64> {
    let (s, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    (n > 0).then(|| s / n as f64)
}

/// Mean and sample standard deviation (n - 1 in the denominator; 0 for one value), as
/// every result over seeds or trials is reported.
pub fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len().max(1) as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len().saturating_sub(1).max(1)) as f64;
    (m, var.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn labels(v: &[Option<usize>]) -> Labels {
        Labels::new(2, v.to_vec()).unwrap()
    }

    #[test]
    fn accuracy_skips_unlabeled() {
        let l = labels(&[Some(1), None, Some(0), Some(0)]);
        assert_eq!(accuracy(&[1, 0, 1, 0], &l), Some(2.0 / 3.0));
        assert_eq!(accuracy(&[1], &labels(&[None])), None);
    }

    #[test]
    fn judge_accuracy_counts_only_judged_labeled_examples() {
        let j = Judgments::from_entries(
            vec!["a".into(), "b".into(), "c".into()],
            vec!["x".into(), "y".into()],
            2,
            vec![Some(vec![0.2, 0.8]), None, Some(vec![0.6, 0.4]), Some(vec![0.5, 0.5]), None, Some(vec![0.0, 1.0])],
        )
        .unwrap();
        let l = labels(&[Some(1), Some(1), None]);
        assert_eq!(judge_accuracies(&j, &l), vec![Some(0.5), Some(0.0)]);
    }

    #[test]
    fn against_judge_counts_where_a_labelling_and_a_judge_part() {
        // Judge x votes 1, 0, 1 on a, b, c; judge y only on a. Labels 1, 1, unlabeled.
        let j = Judgments::from_entries(
            vec!["a".into(), "b".into(), "c".into()],
            vec!["x".into(), "y".into()],
            2,
            vec![Some(vec![0.2, 0.8]), Some(vec![0.0, 1.0]), Some(vec![0.9, 0.1]), None, Some(vec![0.6, 0.4]), None],
        )
        .unwrap();
        let l = labels(&[Some(1), Some(1), None]);
        // The labelling says 0, 1, 1: wrong on a (x right), right on b (x wrong).
        let x = against_judge(&[0, 1, 1], &j, 0, &l);
        assert_eq!(x, AgainstJudge { compared: 2, only_labelling_right: 1, only_judge_right: 1 });
        let y = against_judge(&[0, 1, 1], &j, 1, &l);
        assert_eq!(y, AgainstJudge { compared: 1, only_labelling_right: 0, only_judge_right: 1 });
    }

    #[test]
    fn brier_and_ece_golden() {
        // Hand-computed: Brier = ((0.9-1)^2 + (0.3-0)^2 + (0.6-0)^2) / 3 = 0.46 / 3.
        let p = Posteriors::new(2, vec![0.1, 0.9, 0.7, 0.3, 0.4, 0.6]).unwrap();
        let l = labels(&[Some(1), Some(0), Some(0)]);
        assert!((brier(&p, &l).unwrap() - 0.46 / 3.0).abs() < 1e-12);
        // Confidences 0.9 (right), 0.7 (right), 0.6 (wrong); 10 bins: bins 9, 7, 6.
        // ECE = (|1-0.9| + |1-0.7| + |0-0.6|) / 3 = 1.0 / 3.
        assert!((expected_calibration_error(&p, &l, 10).unwrap() - 1.0 / 3.0).abs() < 1e-12);
        let p3 = Posteriors::new(3, vec![0.2, 0.5, 0.3]).unwrap();
        let l3 = Labels::new(3, vec![Some(2)]).unwrap();
        assert!((brier(&p3, &l3).unwrap() - (0.04 + 0.25 + 0.49)).abs() < 1e-12);
    }

    #[test]
    fn pearson_golden() {
        // numpy.corrcoef([1,2,3,4],[2,4,5,9])[0,1] = 0.9647638212377321 (= 11 / sqrt(130))
        assert!((pearson(&[1., 2., 3., 4.], &[2., 4., 5., 9.]).unwrap() - 0.964_763_821_237_732_1).abs() < 1e-12);
        assert_eq!(pearson(&[1., 1.], &[2., 3.]), None);
        assert_eq!(pearson(&[1.], &[2.]), None);
    }

    proptest! {
        /// For a judge who judged everything, the two counts' difference is the accuracy
        /// difference times the labeled examples.
        #[test]
        fn against_judge_is_the_accuracy_difference(rows in prop::collection::vec((0usize..2, 0.0f64..=1.0, prop::option::of(0usize..2)), 1..60)) {
            let ids: Vec<String> = (0..rows.len()).map(|i| format!("e{i}")).collect();
            let j = Judgments::from_entries(ids, vec!["x".into()], 2, rows.iter().map(|(_, p, _)| Some(vec![1.0 - p, *p])).collect()).unwrap();
            let l = labels(&rows.iter().map(|(_, _, l)| *l).collect::<Vec<_>>());
            let predicted: Vec<usize> = rows.iter().map(|(y, _, _)| *y).collect();
            let a = against_judge(&predicted, &j, 0, &l);
            prop_assert_eq!(a.compared, l.n_labeled());
            if let (Some(mine), Some(judge)) = (accuracy(&predicted, &l), judge_accuracies(&j, &l)[0]) {
                let diff = a.only_labelling_right as f64 - a.only_judge_right as f64;
                prop_assert!((diff - (mine - judge) * a.compared as f64).abs() < 1e-9);
            }
        }

        #[test]
        fn metric_ranges(rows in prop::collection::vec((0.0f64..=1.0, prop::option::of(0usize..2)), 1..60)) {
            let p = Posteriors::new(2, rows.iter().flat_map(|(x, _)| [1.0 - x, *x]).collect()).unwrap();
            let l = labels(&rows.iter().map(|(_, l)| *l).collect::<Vec<_>>());
            if let Some(b) = brier(&p, &l) { prop_assert!((0.0..=1.0).contains(&b)); }
            if let Some(e) = expected_calibration_error(&p, &l, 10) { prop_assert!((0.0..=1.0).contains(&e)); }
            if let Some(a) = accuracy(&p.argmax_labels(), &l) { prop_assert!((0.0..=1.0).contains(&a)); }
        }
    }
}
