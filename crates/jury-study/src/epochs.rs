//! `jury score-epochs`: every epoch a fine-tuning run left in its checkpoint folder,
//! scored on one seed's dev set and test split next to the run's methods on the same
//! split (`jury aggregate --encoder finetune` reports only the epoch its dev set chose).
//! Each epoch also shows, over all examples, the share it labels 1 and its agreement with
//! majority vote (the targets Train-on-MV fits), to tell a shifted decision boundary apart.

use std::collections::HashSet;
use std::fmt::Write as _;

use jury_io::{MethodMetrics, Metrics, Predictions};
use jury_neural::{EpochPosteriors, EpochRead};

/// A run and checkpoint folder that cannot be scored together.
#[derive(Debug, thiserror::Error)]
pub enum EpochError {
    #[error("no dev set for seed {seed} (the run's seeds: {seeds:?})")]
    NoSeed { seed: u64, seeds: Vec<u64> },
    #[error("no epoch-NNN-posteriors.json files in the checkpoint folder")]
    NoEpochs,
    #[error("epoch {epoch}: {found} posteriors for {examples} examples")]
    Length { epoch: usize, found: usize, examples: usize },
}

/// The table: the seed's split sizes, each method of predictions.csv on the test split,
/// the share of label 1, then one row per epoch file.
pub fn epoch_table(
    predictions: &Predictions,
    gold: &[Option<usize>],
    metrics: &Metrics,
    epochs: &[EpochPosteriors],
    seed: u64,
) -> Result<String, EpochError> {
    let dev_sets = metrics.dev_sets.clone().unwrap_or_default();
    // Runs since `--first-seed` name their seeds; older ones ran seeds 0, 1, ...
    let seeds = metrics.seeds.clone().unwrap_or_else(|| (0..dev_sets.len() as u64).collect());
    let at = seeds.iter().position(|s| *s == seed).filter(|i| *i < dev_sets.len());
    let at = at.ok_or_else(|| EpochError::NoSeed { seed, seeds: seeds.clone() })?;
    let dev: HashSet<&str> = dev_sets[at].iter().map(String::as_str).collect();
    let ids = &predictions.example_ids;
    let dev_idx: Vec<usize> = (0..ids.len()).filter(|&i| dev.contains(ids[i].as_str())).collect();
    let test_idx: Vec<usize> = (0..ids.len())
        .filter(|&i| !dev.contains(ids[i].as_str()) && gold.get(i).copied().flatten().is_some())
        .collect();
    let share = |hard: &[usize], idx: &[usize]| {
        100.0 * idx.iter().filter(|&&i| Some(hard[i]) == gold.get(i).copied().flatten()).count() as f64
            / idx.len().max(1) as f64
    };
    let mut t = format!("seed {seed}: dev {} examples, test split {}\n", dev_idx.len(), test_idx.len());
    for m in &predictions.methods {
        let entry = metrics.methods.0.iter().find(|(name, _)| *name == m.method).map(|(_, v)| v);
        let seeded = matches!(entry, Some(MethodMetrics::Neural(_)));
        if seed != seeds[0] && seeded {
            // predictions.csv holds the run's first seed's posteriors of the seeded
            // methods; on another seed's split they would read as that seed's result.
            let _ = writeln!(t, "  {:>12}: predictions.csv holds seed {}'s; see the epochs below", m.method, seeds[0]);
            continue;
        }
        let _ = writeln!(t, "  {:>12} on the test split: {:.2}", m.method, share(&m.labels, &test_idx));
    }
    let known: Vec<usize> = gold.iter().flatten().copied().collect();
    let mv = predictions.methods.iter().find(|m| m.method == "mv").map(|m| &m.labels).filter(|l| !l.is_empty());
    let ones = |v: &[usize]| 100.0 * v.iter().sum::<usize>() as f64 / v.len().max(1) as f64;
    let mv_share = mv.map(|mv| format!(", majority vote {:.2}%", ones(mv))).unwrap_or_default();
    let _ = writeln!(t, "label 1 on all examples: labels {:.2}%{mv_share}", ones(&known));
    let _ =
        writeln!(t, "{:>5}  {:<10} {:>7} {:>7} {:>9} {:>7}", "epoch", "read", "test %", "dev %", "label 1 %", "= mv %");
    if epochs.is_empty() {
        return Err(EpochError::NoEpochs);
    }
    for e in epochs {
        if e.posteriors.len() != ids.len() {
            return Err(EpochError::Length { epoch: e.epoch, found: e.posteriors.len(), examples: ids.len() });
        }
        let hard: Vec<usize> = e.posteriors.iter().map(|p| usize::from(*p > 0.5)).collect();
        let name = match e.read {
            EpochRead::Method => "method",
            EpochRead::Context => "context",
        };
        let agree = mv.map_or_else(
            || format!("{:>7}", "-"),
            |mv| {
                format!("{:>7.2}", 100.0 * hard.iter().zip(mv).filter(|(h, m)| h == m).count() as f64 / mv.len() as f64)
            },
        );
        let _ = writeln!(
            t,
            "{:>5}  {name:<10} {:>7.2} {:>7.2} {:>9.2} {agree}",
            e.epoch,
            share(&hard, &test_idx),
            share(&hard, &dev_idx),
            ones(&hard)
        );
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use jury_core::Posteriors;
    use jury_io::MethodPredictions;

    use super::*;

    #[test]
    fn epochs_are_scored_on_the_seeds_split_and_against_majority_vote() {
        let method = |name: &str, labels: Vec<usize>| MethodPredictions {
            method: name.into(),
            posteriors: Posteriors::new(2, labels.iter().flat_map(|l| [1.0 - *l as f64, *l as f64]).collect()).unwrap(),
            labels,
        };
        let predictions = Predictions {
            example_ids: ["a", "b", "c", "d"].map(String::from).to_vec(),
            methods: vec![method("mv", vec![1, 0, 1, 1])],
        };
        let metrics: Metrics = serde_json::from_str(
            r#"{"n_examples": 4, "n_judges": 2, "n_classes": 2, "n_labeled": 4, "recommended_method": "mv",
                "judges": {}, "methods": {}, "seeds": [7], "dev_sets": [["a"]]}"#,
        )
        .unwrap();
        let gold = [Some(1), Some(0), Some(0), None];
        let epoch = EpochPosteriors { epoch: 0, read: EpochRead::Method, posteriors: vec![0.9, 0.2, 0.6, 0.1] };
        let table = epoch_table(&predictions, &gold, &metrics, &[epoch], 7).unwrap();
        // Test split: b and c (d has no label); mv gets b right, c wrong.
        assert!(
            table.starts_with("seed 7: dev 1 examples, test split 2\n            mv on the test split: 50.00\n"),
            "{table}"
        );
        assert!(table.contains("label 1 on all examples: labels 33.33%, majority vote 75.00%"), "{table}");
        // The epoch: b right, c wrong on test; a right on dev; labels 1 on a and c; agrees
        // with mv on a, b, c.
        assert!(table.ends_with("    0  method       50.00  100.00     50.00   75.00\n"), "{table}");
        let err = epoch_table(&predictions, &gold, &metrics, &[], 0).unwrap_err().to_string();
        assert_eq!(err, "no dev set for seed 0 (the run's seeds: [7])");
    }
}
