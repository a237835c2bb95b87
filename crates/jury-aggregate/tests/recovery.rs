//! Recovery of known judge skills on simulated juries, against the Bayes-optimal rule.

use jury_aggregate::{
    Aggregator, AverageProb, ClassPrior, ConfusionMatrix, DawidSkene, DawidSkeneConfig, Diagnostics, DsParams, EmInit,
    EmReport, MajorityVote, TieBreak,
};
use jury_core::Labels;
use jury_metrics::accuracy;
use jury_sim::{JuryConfig, SimJudge, simulate};

fn em_report(a: &jury_aggregate::Aggregation) -> &EmReport {
    match a.diagnostics() {
        Diagnostics::DawidSkene(r) => r,
        other => panic!("unexpected diagnostics {other:?}"),
    }
}

fn true_params(cfg: &JuryConfig) -> DsParams {
    let c = cfg.class_prior.len();
    DsParams {
        confusion: cfg.judges.iter().map(|j| ConfusionMatrix::new(c, j.confusion.concat()).unwrap()).collect(),
        class_prior: cfg.class_prior.clone(),
    }
}

/// Runs DS on the jury, checks every confusion entry and the prior against the truth,
/// and accuracy against the Bayes-optimal rule; returns (ds accuracy, bayes accuracy).
fn check_recovery(cfg: &JuryConfig, init: EmInit, max_err: f64) -> (f64, f64) {
    let jury = simulate(cfg).unwrap();
    let labels = Labels::new(cfg.class_prior.len(), jury.truth.iter().map(|&t| Some(t)).collect()).unwrap();
    let ds_cfg = DawidSkeneConfig { init, max_iter: 500, tol: 1e-9, ..DawidSkeneConfig::paper() };
    let ds_cfg = DawidSkeneConfig { prior: ClassPrior::Learned, ..ds_cfg };
    let ds = DawidSkene::new(ds_cfg).aggregate(&jury.judgments).unwrap();
    let report = em_report(&ds);
    assert!(report.converged, "EM did not converge in {} iterations", report.iterations);
    let truth = true_params(cfg);
    for (k, (est, want)) in report.params.confusion.iter().zip(&truth.confusion).enumerate() {
        for t in 0..want.n_classes() {
            for v in 0..want.n_classes() {
                let err = (est.get(t, v) - want.get(t, v)).abs();
                assert!(
                    err < max_err,
                    "judge {k} P(vote {v} | class {t}): estimated {} vs true {}",
                    est.get(t, v),
                    want.get(t, v)
                );
            }
        }
    }
    for (e, w) in report.params.class_prior.iter().zip(&truth.class_prior) {
        assert!((e - w).abs() < max_err, "prior {e} vs {w}");
    }
    let bayes = DawidSkene::posteriors_given(&truth, &jury.judgments).unwrap();
    let acc = accuracy(ds.labels(), &labels).unwrap();
    let bayes_acc = accuracy(bayes.labels(), &labels).unwrap();
    assert!(acc >= bayes_acc - 0.005, "DS accuracy {acc} vs Bayes-optimal {bayes_acc}");
    (acc, bayes_acc)
}

#[test]
fn binary_jury_with_imbalance_and_missing_entries() {
    let cfg = JuryConfig {
        n_examples: 20_000,
        class_prior: vec![0.3, 0.7],
        judges: vec![
            SimJudge::binary("near-random", 0.52, 0.50),
            SimJudge::binary("weak", 0.60, 0.62),
            SimJudge::binary("yes-biased", 0.50, 0.92),
            SimJudge::binary("no-biased", 0.93, 0.55),
            SimJudge::binary("fair", 0.72, 0.70),
            SimJudge::binary("good", 0.82, 0.80),
            SimJudge::binary("strong", 0.91, 0.90),
        ],
        missing_rate: 0.1,
        seed: 2024,
    };
    for init in [EmInit::MajorityVote, EmInit::Random { seed: 5 }] {
        let (acc, bayes) = check_recovery(&cfg, init, 0.02);
        // Sanity: the jury beats its best judge, and voting does worse than DS here.
        assert!(acc > 0.9 && bayes > 0.9, "{acc} {bayes}");
    }
    let jury = simulate(&cfg).unwrap();
    let labels = Labels::new(2, jury.truth.iter().map(|&t| Some(t)).collect()).unwrap();
    let mv = MajorityVote { ties: TieBreak::Positive }.aggregate(&jury.judgments).unwrap();
    let avg = AverageProb { ties: TieBreak::Positive }.aggregate(&jury.judgments).unwrap();
    let ds = DawidSkene::new(DawidSkeneConfig { prior: ClassPrior::Learned, ..Default::default() })
        .aggregate(&jury.judgments)
        .unwrap();
    let ds_acc = accuracy(ds.labels(), &labels).unwrap();
    assert!(ds_acc > accuracy(mv.labels(), &labels).unwrap() + 0.01);
    assert!(ds_acc > accuracy(avg.labels(), &labels).unwrap() + 0.01);
}

#[test]
fn three_class_jury_with_full_confusion_matrices() {
    let m = |rows: [[f64; 3]; 3]| rows.iter().map(|r| r.to_vec()).collect::<Vec<_>>();
    let cfg = JuryConfig {
        n_examples: 20_000,
        class_prior: vec![0.2, 0.45, 0.35],
        judges: vec![
            SimJudge { name: "a".into(), confusion: m([[0.8, 0.1, 0.1], [0.1, 0.7, 0.2], [0.05, 0.15, 0.8]]) },
            SimJudge { name: "b".into(), confusion: m([[0.5, 0.3, 0.2], [0.2, 0.6, 0.2], [0.1, 0.3, 0.6]]) },
            SimJudge { name: "c".into(), confusion: m([[0.6, 0.2, 0.2], [0.1, 0.85, 0.05], [0.3, 0.1, 0.6]]) },
            SimJudge { name: "d".into(), confusion: m([[0.4, 0.3, 0.3], [0.3, 0.4, 0.3], [0.3, 0.3, 0.4]]) },
            SimJudge { name: "e".into(), confusion: m([[0.9, 0.05, 0.05], [0.05, 0.9, 0.05], [0.2, 0.2, 0.6]]) },
        ],
        missing_rate: 0.1,
        seed: 99,
    };
    check_recovery(&cfg, EmInit::MajorityVote, 0.02);
}

#[test]
fn paper_form_uniform_prior_is_reproducible_per_seed() {
    let jury = simulate(&JuryConfig::mixed_binary(2_000, 3)).unwrap();
    let cfg = DawidSkeneConfig { init: EmInit::Random { seed: 42 }, ..DawidSkeneConfig::paper() };
    let a = DawidSkene::new(cfg).aggregate(&jury.judgments).unwrap();
    let b = DawidSkene::new(cfg).aggregate(&jury.judgments).unwrap();
    assert_eq!(a, b);
    assert_eq!(em_report(&a).params.class_prior, vec![0.5, 0.5]);
}
