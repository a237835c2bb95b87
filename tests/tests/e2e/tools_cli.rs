//! The commands around a study: `jury import` of another tool's jury, `jury compare-runs`
//! over `jury run` folders and `jury score-epochs` over a fine-tuning run's checkpoints,
//! each on files shaped like the real ones.

use std::fs;
use std::path::Path;

use crate::common::jury;

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// An LLMBar-shaped folder (a set's dataset.json and two evaluators' result.json) is
/// imported as a jury `jury aggregate` reads; a result file of the wrong length stops the
/// import with its name and writes nothing.
#[test]
fn an_llmbar_folder_imports_as_a_jury() {
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("LLMBar").join("Natural");
    let labels = [1, 2, 1, 1];
    let data: Vec<String> = labels.iter().map(|l| format!(r#"{{"input": "q", "label": {l}}}"#)).collect();
    fs::create_dir_all(&set).unwrap();
    fs::write(set.join("dataset.json"), format!("[{}]", data.join(","))).unwrap();
    let result = |winners: &[(&str, &str)]| {
        let rows: Vec<String> = winners
            .iter()
            .map(|(a, b)| {
                format!(
                    r#"{{"results": [{{"swap = False": {{"winner": "{a}"}}, "swap = True": {{"winner": "{b}"}}}}]}}"#
                )
            })
            .collect();
        format!("[{}]", rows.join(","))
    };
    for (evaluator, winners) in
        [("GPT-4", [("1", "1"), ("2", "2"), ("1", "1"), ("1", "x")]), ("PaLM2", [("2", "1"); 4])]
    {
        let strategy = set.join("evaluators").join(evaluator).join("Vanilla");
        fs::create_dir_all(&strategy).unwrap();
        fs::write(strategy.join("result.json"), result(&winners)).unwrap();
    }
    let out = dir.path().join("jury");
    let run = jury(&["import", "llmbar", "--input", path_str(&dir.path().join("LLMBar")), "--out", path_str(&out)]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let judgments = fs::read_to_string(out.join("judgments.csv")).unwrap();
    assert!(judgments.starts_with("example_id,judge,p\nNatural-0000,GPT-4/Vanilla/swap=False,1.0\n"), "{judgments}");
    assert_eq!(judgments.lines().count(), 1 + 7 + 8, "GPT-4's unreadable winner is no judgment");
    assert_eq!(
        fs::read_to_string(out.join("labels.csv")).unwrap(),
        "example_id,label\nNatural-0000,1\nNatural-0001,0\nNatural-0002,1\nNatural-0003,1\n"
    );
    let scored = dir.path().join("scored");
    let agg = jury(&[
        "aggregate",
        "--judgments",
        path_str(&out.join("judgments.csv")),
        "--labels",
        path_str(&out.join("labels.csv")),
        "--methods",
        "mv",
        "--out",
        path_str(&scored),
    ]);
    assert!(agg.status.success(), "{}", String::from_utf8_lossy(&agg.stderr));

    fs::write(set.join("evaluators").join("PaLM2").join("Vanilla").join("result.json"), result(&[("1", "1")])).unwrap();
    let again = dir.path().join("again");
    let run = jury(&["import", "llmbar", "--input", path_str(&dir.path().join("LLMBar")), "--out", path_str(&again)]);
    assert_eq!(run.status.code(), Some(2));
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("PaLM2/Vanilla/result.json") && err.contains("1 rows, 4 in dataset.json"), "{err}");
    assert!(!again.exists(), "nothing written");
}

/// A `jury run` output folder with one judge: manifest.json, judgments.csv and
/// prompts.jsonl.
fn run_folder(dir: &Path, judge: &str, seconds: f64, p: &[f64], tokens: &[&[u32]]) {
    fs::create_dir_all(dir).unwrap();
    let manifest = format!(
        r#"{{"experiment": "x", "jury_version": "0", "template": {{"path": "t", "sha256": ""}},
        "dataset": {{"name": "d", "path": "d", "examples": {n}}}, "dequantized_weights": true,
        "judges": [{{"name": "{judge}", "model_sha256": "", "engine": "engine-{judge}", "extraction_rule": "",
        "load_seconds": 1, "judge_seconds": {seconds}, "scored": {n}, "from_cache": 0, "failed": 0,
        "exact_share": 1.0, "prefix_cache_entries": null,
        "verdict_token_ids": {{"positive": [1], "negative": [2], "tie": []}}}}],
        "mean_captured_mass": {{"{judge}": 0.9}}, "total_seconds": 2}}"#,
        n = p.len()
    );
    fs::write(dir.join("manifest.json"), manifest).unwrap();
    let mut judgments = String::from("example_id,judge,p,p_positive,p_negative,p_tie,mass,n_tokens,truncated,exact\n");
    let mut prompts = String::new();
    for (i, (p, t)) in p.iter().zip(tokens).enumerate() {
        judgments.push_str(&format!("e{i},{judge},{p:.6},{p:e},{:e},,9e-1,3,false,true\n", 1.0 - p));
        prompts.push_str(&format!("{{\"judge\":\"{judge}\",\"example_id\":\"e{i}\",\"tokens\":{t:?}}}\n"));
    }
    fs::write(dir.join("judgments.csv"), judgments).unwrap();
    fs::write(dir.join("prompts.jsonl"), prompts).unwrap();
}

/// Two runs of the same judge: speed against the reference's, closeness of P(Yes) and
/// the share of identical prompts, one markdown row each.
#[test]
fn compare_runs_sets_a_judge_beside_its_reference() {
    let dir = tempfile::tempdir().unwrap();
    let (server, local) = (dir.path().join("server"), dir.path().join("local"));
    run_folder(&server, "j", 2.0, &[0.1, 0.6, 0.9, 0.4], &[&[1, 2], &[3], &[4], &[5]]);
    run_folder(&local, "j", 1.0, &[0.12, 0.45, 0.9, 0.5], &[&[1, 2], &[3], &[4], &[6]]);
    let out = jury(&["compare-runs", &format!("server={}", path_str(&server)), path_str(&local)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("| ex/s / server's | same tokens | within 0.03 of server |"), "{table}");
    assert!(
        table.contains("| local | j | engine-j | 4 | 0 | 4.00 | 2.00x | 75% | 50.0% | 0.0600 | 0.1500 | 75.0% |"),
        "{table}"
    );
    let other = dir.path().join("other");
    run_folder(&other, "k", 1.0, &[0.5], &[&[1]]);
    let out = jury(&["compare-runs", path_str(&server), path_str(&other)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("run `server` has no judge `k`"));
}

/// A fine-tuning run's two epochs, each the method's and the context model's posteriors,
/// scored on the seed's test split and dev set.
#[test]
fn score_epochs_scores_each_checkpointed_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    fs::create_dir_all(&run).unwrap();
    fs::write(
        run.join("predictions.csv"),
        "example_id,label,mv_p,mv_label\na,1,0.9,1\nb,0,0.2,0\nc,0,0.7,1\nd,1,0.8,1\n",
    )
    .unwrap();
    fs::write(
        run.join("metrics.json"),
        r#"{"n_examples": 4, "n_judges": 2, "n_classes": 2, "n_labeled": 4, "recommended_method": "mv",
            "judges": {}, "methods": {}, "seeds": [0], "dev_sets": [["a"]]}"#,
    )
    .unwrap();
    let ck = dir.path().join("checkpoints");
    fs::create_dir_all(&ck).unwrap();
    fs::write(ck.join("epoch-000-posteriors.json"), "[0.9, 0.1, 0.2, 0.3]").unwrap();
    fs::write(ck.join("epoch-000-prior.json"), "[0.6, 0.6, 0.6, 0.6]").unwrap();
    fs::write(ck.join("epoch-001-posteriors.json"), "[0.9, 0.1, 0.2, 0.8]").unwrap();
    fs::write(ck.join("epoch-001-encoder.safetensors"), "").unwrap();
    let out = jury(&["score-epochs", "--run", path_str(&run), "--checkpoints", path_str(&ck)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows[0], "seed 0: dev 1 examples, test split 3");
    assert_eq!(rows[1].trim(), "mv on the test split: 66.67");
    // Test split b, c, d (labels 0, 0, 1); epoch 0's method says 0, 0, 0; epoch 1's 0, 0, 1.
    assert_eq!(
        &rows[rows.len() - 3..],
        [
            "    0  method       66.67  100.00     25.00   50.00",
            "    0  context      33.33  100.00    100.00   75.00",
            "    1  method      100.00  100.00     50.00   75.00",
        ]
    );
}
