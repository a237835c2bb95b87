//! `jury aggregate` end to end: real files in, metrics and predictions out, bad input
//! rejected with a one-line error, exit code 2 and nothing written.

use std::fs;
use std::path::Path;

use crate::common::{jury, repo_root};
use serde_json::Value;

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The real context encoder (all-MiniLM-L6-v2, put in `models/` by
/// `scripts/fetch-encoder.sh`).
fn encoder() -> std::path::PathBuf {
    let encoder = repo_root().join("models/all-MiniLM-L6-v2");
    assert!(
        encoder.join("model.safetensors").is_file(),
        "{} is missing: run scripts/fetch-encoder.sh",
        encoder.display()
    );
    encoder
}

/// `jury aggregate` on the `j.csv`, `l.csv` and `c.csv` that `context_jury` wrote into
/// `dir`, with the real encoder, `cache` as XDG_CACHE_HOME and output to `dir/out`.
fn aggregate_contexts(dir: &Path, cache: &Path, flags: &[&str], out: &str) -> std::process::Output {
    let p = |n: &str| dir.join(n).to_str().unwrap().to_owned();
    std::process::Command::new(crate::common::jury_bin())
        .env("XDG_CACHE_HOME", cache)
        .args(["aggregate", "--judgments", &p("j.csv"), "--labels", &p("l.csv"), "--contexts", &p("c.csv")])
        .args(flags)
        .args(["--encoder-dir", encoder().to_str().unwrap(), "--out", &p(out)])
        .output()
        .unwrap()
}

fn simulate(dir: &Path, examples: usize) {
    let out = jury(&["simulate", "--examples", &examples.to_string(), "--seed", "7", "--out", path_str(dir)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn aggregates_and_scores_a_simulated_jury() {
    let dir = tempfile::tempdir().unwrap();
    simulate(dir.path(), 3000);
    let out_dir = dir.path().join("out");
    let out = jury(&[
        "aggregate",
        "--judgments",
        path_str(&dir.path().join("judgments.csv")),
        "--labels",
        path_str(&dir.path().join("labels.csv")),
        "--methods",
        "avg,mv,ds",
        "--ds-prior",
        "learned",
        "--out",
        path_str(&out_dir),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("3000 examples, 6 judges, 2 classes, 3000 labeled"), "{stdout}");

    let m: Value = serde_json::from_str(&fs::read_to_string(out_dir.join("metrics.json")).unwrap()).unwrap();
    assert_eq!(m["n_examples"], 3000);
    let judges = m["judges"].as_object().unwrap();
    assert_eq!(judges.len(), 6);
    let strong = judges["strong"]["accuracy"].as_f64().unwrap();
    assert!((0.85..0.92).contains(&strong), "strong judge accuracy {strong}");
    let acc = |name: &str| m["methods"][name]["accuracy"].as_f64().unwrap();
    for name in ["avg", "mv", "ds"] {
        assert!((0.0..=1.0).contains(&acc(name)));
    }
    // The simulated jury has a biased and a near-random judge: weighting must pay off.
    assert!(acc("ds") > acc("mv") && acc("ds") > strong, "ds {} mv {} strong {strong}", acc("ds"), acc("mv"));
    assert_eq!(m["methods"]["ds"]["converged"], true);
    // The simulated judges err independently given the truth: no family.
    let e = &m["agreement"]["error_correlation"];
    assert_eq!(e["method"], "ds");
    assert_eq!(e["matrix"].as_array().unwrap().len(), 6);
    assert_eq!(e["families"].as_array().unwrap().len(), 0, "{e}");

    let predictions = fs::read_to_string(out_dir.join("predictions.csv")).unwrap();
    let mut lines = predictions.lines();
    assert_eq!(lines.next().unwrap(), "example_id,label,avg_p,avg_label,mv_p,mv_label,ds_p,ds_label");
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 3000);
    let first: Vec<&str> = rows[0].split(',').collect();
    assert_eq!(first.len(), 8);
    let p: f64 = first[6].parse().unwrap();
    assert!((0.0..=1.0).contains(&p));
    assert_eq!(first[7], if p > 0.5 { "1" } else { "0" });
}

/// No --methods: the recommended method first, named in metrics.json with why it was
/// chosen (every candidate's held-out-judge score against the reference's), then avg, mv
/// and ds; the report says why in a line.
#[test]
fn the_default_methods_start_with_the_recommended_one() {
    let dir = tempfile::tempdir().unwrap();
    simulate(dir.path(), 400);
    let out_dir = dir.path().join("out");
    let j = dir.path().join("judgments.csv");
    let out = jury(&["aggregate", "--judgments", path_str(&j), "--out", path_str(&out_dir)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m: Value = serde_json::from_str(&fs::read_to_string(out_dir.join("metrics.json")).unwrap()).unwrap();
    let recommended = m["recommended_method"].as_str().unwrap().to_owned();
    let r = &m["recommendation"];
    assert_eq!((r["rule"].as_str(), r["reference"].as_str()), (Some("held-out judges"), Some("ds")), "{r}");
    assert_eq!(r["folds"], 6, "the simulated jury's six judges, none a copy of another: {r}");
    let scores = r["scores"].as_object().unwrap();
    let candidates = ["avg", "mv", "wawa", "zbs", "onecoin", "mmsr", "kos", "glad", "mace", "ds", "care", "gauss"];
    assert!(candidates.iter().all(|c| scores[*c].as_f64().is_some_and(|s| s < 0.0)), "{r}");
    assert_eq!(r["gain_se"]["ds"], 0.0);
    let gain = r["gain_se"][&recommended].as_f64().unwrap();
    assert!(recommended == "ds" || gain >= 2.0, "{recommended} chosen at {gain} standard errors: {r}");
    let names: Vec<&String> = m["methods"].as_object().unwrap().keys().collect();
    assert_eq!(names[0], &recommended);
    let predictions = fs::read_to_string(out_dir.join("predictions.csv")).unwrap();
    assert!(predictions.starts_with(&format!("example_id,{recommended}_p,{recommended}_label,")), "{predictions}");
    let report = fs::read_to_string(out_dir.join("report.html")).unwrap();
    assert!(report.contains("recommended method"), "the report says why");
}

#[test]
fn without_labels_still_writes_predictions() {
    let dir = tempfile::tempdir().unwrap();
    simulate(dir.path(), 200);
    let out_dir = dir.path().join("out");
    let j = dir.path().join("judgments.csv");
    let out = jury(&["aggregate", "--judgments", path_str(&j), "--methods", "mv", "--out", path_str(&out_dir)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m: Value = serde_json::from_str(&fs::read_to_string(out_dir.join("metrics.json")).unwrap()).unwrap();
    assert!(m["methods"]["mv"]["accuracy"].is_null());
    assert!(m["judges"]["strong"]["accuracy"].is_null());
    let predictions = fs::read_to_string(out_dir.join("predictions.csv")).unwrap();
    assert!(predictions.starts_with("example_id,mv_p,mv_label\n"));
    assert_eq!(predictions.lines().count(), 201);
}

/// Runs aggregate on `judgments` text (and optional labels text) and expects failure.
fn expect_error(judgments: (&str, &str), labels: Option<&str>, extra: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join(judgments.0);
    fs::write(&j, judgments.1).unwrap();
    let out_dir = dir.path().join("out");
    let mut args = vec!["aggregate", "--judgments", path_str(&j), "--out", path_str(&out_dir)];
    let l = dir.path().join("labels.csv");
    if let Some(text) = labels {
        fs::write(&l, text).unwrap();
        args.extend(["--labels", path_str(&l)]);
    }
    args.extend(extra);
    let out = jury(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one-line error expected: {stderr}");
    assert!(!out_dir.exists(), "nothing may be written on error");
    stderr
}

const GOOD: &str = "example_id,judge,p\na,j1,0.9\na,j2,0.2\nb,j1,0.4\nb,j2,0.3\n";

#[test]
fn bad_inputs_fail_with_file_and_row() {
    let e = expect_error(("j.csv", "example_id,p\na,0.5\n"), None, &[]);
    assert!(e.contains("j.csv: missing column `judge`"), "{e}");

    let e = expect_error(("j.csv", "example_id,judge,p\na,j1,0.9\na,j2,1.3\n"), None, &[]);
    assert!(e.contains("j.csv line 3: probability 1.3 is not a finite number in [0, 1]"), "{e}");

    let e = expect_error(("j.csv", "example_id,judge,p\na,j1,0.9\nb,j1,0.2\na,j1,0.1\n"), None, &[]);
    assert!(e.contains("j.csv line 4: duplicate judgment for example `a` by judge `j1`"), "{e}");

    let e = expect_error(("j.csv", "example_id,judge,p\na,j1,high\n"), None, &[]);
    assert!(e.contains("j.csv line 2: column `p`: `high` is not a number"), "{e}");

    let e = expect_error(
        (
            "j.jsonl",
            "{\"example_id\": \"a\", \"judge\": \"j\", \"p\": 0.5}\n{\"example_id\": \"b\", \"judge\": \"j\", \"p\": -0.1}\n",
        ),
        None,
        &[],
    );
    assert!(e.contains("j.jsonl line 2: probability -0.1"), "{e}");

    let e = expect_error(("j.csv", GOOD), Some("example_id,label\na,1\nb,maybe\n"), &[]);
    assert!(e.contains("labels.csv line 3: column `label`: `maybe` is not a label"), "{e}");

    let e = expect_error(("j.csv", GOOD), Some("example_id,label\na,1\na,0\n"), &[]);
    assert!(e.contains("labels.csv line 3: column `example_id`: duplicate label for `a` (first at line 2)"), "{e}");

    let e = expect_error(("j.csv", GOOD), None, &["--methods", "avg,wisdom"]);
    assert!(
        e.contains(
            "invalid value 'wisdom' for '--methods <METHODS>'; [possible values: recommended, avg, mv, ds, wawa,"
        ),
        "{e}"
    );

    let e = expect_error(("j.csv", GOOD), None, &["--methods", "avg,crowdlayer"]);
    assert!(e.contains("the context-dependent methods need --contexts FILE"), "{e}");

    let e = expect_error(("j.txt", GOOD), None, &[]);
    assert!(e.contains("j.txt: unsupported file type"), "{e}");
}

#[test]
fn unreadable_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.csv");
    let out_dir = dir.path().join("out");
    let out = jury(&["aggregate", "--judgments", path_str(&missing), "--out", path_str(&out_dir)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("nope.csv: cannot read"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(!out_dir.exists());
}

#[test]
fn demo_data_set_is_committed_and_aggregates() {
    let demo = repo_root().join("datasets/demo-jury");
    let dir = tempfile::tempdir().unwrap();
    let out = jury(&[
        "aggregate",
        "--judgments",
        path_str(&demo.join("judgments.csv")),
        "--labels",
        path_str(&demo.join("labels.csv")),
        "--out",
        path_str(dir.path()),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn three_classes_from_a_jsonl_list_column() {
    let dir = tempfile::tempdir().unwrap();
    // Three judges on four examples; judge c is always wrong, a and b always right.
    let truth = [0usize, 1, 2, 1];
    let mut text = String::new();
    for (n, &t) in truth.iter().enumerate() {
        for (judge, vote) in [("a", t), ("b", t), ("c", (t + 1) % 3)] {
            let mut p = [0.1, 0.1, 0.1];
            p[vote] = 0.8;
            text.push_str(&format!("{{\"example_id\": \"x{n}\", \"judge\": \"{judge}\", \"probs\": {p:?}}}\n"));
        }
    }
    let j = dir.path().join("j.jsonl");
    fs::write(&j, text).unwrap();
    let l = dir.path().join("l.csv");
    fs::write(&l, "example_id,label\nx0,0\nx1,1\nx2,2\nx3,1\n").unwrap();
    let out_dir = dir.path().join("out");
    let out = jury(&["aggregate", "--judgments", path_str(&j), "--labels", path_str(&l), "--out", path_str(&out_dir)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m: Value = serde_json::from_str(&fs::read_to_string(out_dir.join("metrics.json")).unwrap()).unwrap();
    assert_eq!(m["n_classes"], 3);
    assert_eq!(m["judges"]["c"]["accuracy"], 0.0);
    for name in ["avg", "mv", "ds"] {
        assert_eq!(m["methods"][name]["accuracy"], 1.0, "{name}");
    }
    assert_eq!(m["methods"]["ds"]["confusion"]["a"].as_array().unwrap().len(), 3);
    let predictions = fs::read_to_string(out_dir.join("predictions.csv")).unwrap();
    // Three classes: the recommended method is Dawid-Skene, so it comes first.
    assert_eq!(m["recommended_method"], "ds");
    assert!(predictions.starts_with("example_id,label,ds_p0,ds_p1,ds_p2,ds_label,avg_p0,"), "{predictions}");
}

/// The context-dependent methods on three classes (the SkillAggregation paper's Appendix F form) with the
/// real encoder (all-MiniLM-L6-v2; `scripts/fetch-encoder.sh`): each example's context
/// names its class, two of three judges are noisy, and SkillAggregation must use both.
#[test]
fn context_dependent_methods_take_three_classes() {
    use rand::{Rng, SeedableRng};
    use std::fmt::Write as _;
    let encoder = encoder();
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
    let topics = ["a recipe for apple pie with cinnamon", "a football match report", "a lecture on quantum physics"];
    let (mut judgments, mut labels, mut contexts) = (
        String::from("example_id,judge,probs\n"),
        String::from("example_id,label\n"),
        String::from("example_id,text\n"),
    );
    for i in 0..400 {
        let c = rng.random_range(0..3usize);
        let _ = writeln!(labels, "e{i},{c}");
        let _ = writeln!(contexts, "e{i},\"Example {i}: {} (item {})\"", topics[c], rng.random_range(0..1000));
        for (name, acc) in [("good", 0.85), ("noisy", 0.55), ("weak", 0.45)] {
            let vote = if rng.random_bool(acc) { c } else { (c + rng.random_range(1..3)) % 3 };
            let probs: Vec<String> = (0..3).map(|k| if k == vote { "0.8".into() } else { "0.1".into() }).collect();
            let _ = writeln!(judgments, "e{i},{name},\"[{}]\"", probs.join(","));
        }
    }
    for (name, text) in [("j.csv", &judgments), ("l.csv", &labels), ("c.csv", &contexts)] {
        fs::write(dir.path().join(name), text).unwrap();
    }
    let out_dir = dir.path().join("out");
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_owned();
    let out = std::process::Command::new(crate::common::jury_bin())
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .args(["aggregate", "--judgments", &p("j.csv"), "--labels", &p("l.csv"), "--contexts", &p("c.csv")])
        .args([
            "--methods",
            "mv,ds,crowdlayer,skillagg,skillagg-x",
            "--dev-size",
            "60",
            "--seeds",
            "2",
            "--epochs",
            "15",
        ])
        .args(["--lr", "0.01", "--encoder-dir", encoder.to_str().unwrap(), "--out", out_dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m: Value = serde_json::from_str(&fs::read_to_string(out_dir.join("metrics.json")).unwrap()).unwrap();
    let acc = |name: &str| m["methods"][name]["accuracy"].as_f64().unwrap();
    for name in ["crowdlayer", "skillagg", "skillagg-x"] {
        assert!(m["methods"][name]["std"].is_number(), "{name}: {}", m["methods"][name]);
        assert!((0.0..=1.0).contains(&acc(name)));
    }
    assert_eq!(m["methods"]["skillagg"]["slopes"].as_object().unwrap().len(), 3);
    assert!(acc("skillagg") > acc("mv"), "skillagg {} vs mv {}", acc("skillagg"), acc("mv"));
    // The context model alone is reported beside the methods that also read the judges.
    for name in ["skillagg", "skillagg-x"] {
        let c = m["methods"][name]["context_accuracy"]["accuracy"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&c), "{name}: {}", m["methods"][name]);
    }
    assert!(m["methods"]["crowdlayer"].get("context_accuracy").is_none());
    let predictions = fs::read_to_string(out_dir.join("predictions.csv")).unwrap();
    let header = predictions.lines().next().unwrap();
    assert!(header.ends_with("skillagg-x_p0,skillagg-x_p1,skillagg-x_p2,skillagg-x_label"), "{header}");
}

/// Writes `j.csv`, `l.csv` and `c.csv` into `dir`: `n` examples, a third of them
/// positive, contexts that name the class, three judges right 80% of the time.
fn context_jury(dir: &Path, n: usize) {
    use std::fmt::Write as _;
    let (mut judgments, mut labels, mut contexts) =
        (String::from("example_id,judge,p\n"), String::from("example_id,label\n"), String::from("example_id,text\n"));
    for i in 0..n {
        let y = i % 3 == 0;
        let _ = writeln!(labels, "e{i},{}", u8::from(y));
        let topic = if y { "a claim about the moon landing" } else { "a recipe for bread" };
        let _ = writeln!(contexts, "e{i},\"Example {i}, {topic}, variant {}\"", i * 7 % 13);
        for (k, p) in [(0, 0.8), (1, 0.7), (2, 0.6)] {
            let right = (i + k) % 5 != 0;
            let _ = writeln!(judgments, "e{i},j{k},{}", if y == right { p } else { 1.0 - p });
        }
    }
    for (name, text) in [("j.csv", &judgments), ("l.csv", &labels), ("c.csv", &contexts)] {
        fs::write(dir.join(name), text).unwrap();
    }
}

/// `--skill-init ds` starts every judge at its Dawid-Skene estimate: with a learning rate
/// too small to move them, the learned slopes are Dawid-Skene's p0 + p1 - 1; a starting
/// skill outside (0.5, 1) is refused.
#[test]
fn skills_start_at_dawid_skenes_estimates() {
    let dir = tempfile::tempdir().unwrap();
    context_jury(dir.path(), 60);
    let flags = ["--methods", "ds,skillagg-noreg", "--dev-size", "10", "--seeds", "1", "--epochs", "1"];
    let out = aggregate_contexts(
        dir.path(),
        &dir.path().join("cache"),
        &[&flags[..], &["--lr", "1e-9", "--skill-init", "ds"]].concat(),
        "out",
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m: Value = serde_json::from_str(&fs::read_to_string(dir.path().join("out/metrics.json")).unwrap()).unwrap();
    for judge in ["j0", "j1", "j2"] {
        let c = &m["methods"]["ds"]["confusion"][judge];
        let ds_slope = c[0][0].as_f64().unwrap() + c[1][1].as_f64().unwrap() - 1.0;
        let slope = m["methods"]["skillagg-noreg"]["slopes"][judge].as_f64().unwrap();
        assert!((slope - ds_slope).abs() < 1e-3, "{judge}: slope {slope}, Dawid-Skene {ds_slope}");
    }
    let paired = m["methods"]["ds"]["outside_dev"]["seeds"].as_array().unwrap();
    assert_eq!(paired.len(), 1, "Dawid-Skene scored on each seed's test split");
    // Each finished seed's result is logged as it finishes, the same as metrics.json's.
    let seed0 = m["methods"]["skillagg-noreg"]["seeds"][0].as_f64().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("skillagg-noreg seed 0: chose lambda 0 epoch 0 (dev accuracy "), "{log}");
    assert!(log.contains(&format!("accuracy outside the dev set {seed0:.4}; context model alone ")), "{log}");
    let dev = m["dev_sets"][0].as_array().unwrap();
    assert_eq!(dev.len(), 10, "seed 0's dev set by example id");
    assert!(dev.iter().all(|id| id.as_str().unwrap().starts_with('e')));
    assert!((0.0..=1.0).contains(&paired[0].as_f64().unwrap()));
    let refused = aggregate_contexts(
        dir.path(),
        &dir.path().join("cache"),
        &[&flags[..], &["--skill-init", "0.4"]].concat(),
        "out2",
    );
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("'--skill-init <SKILL_INIT>': `0.4`: expected a probability in (0.5, 1)"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(!dir.path().join("out2").exists());
}

/// An embedding cache file of the right size whose values are not numbers (damaged on
/// disk) is embedded again with a warning, and the result equals the clean run's.
#[test]
fn a_damaged_embedding_cache_is_embedded_again() {
    let dir = tempfile::tempdir().unwrap();
    context_jury(dir.path(), 40);
    let cache = dir.path().join("cache");
    let flags = ["--methods", "skillagg-noreg", "--dev-size", "10", "--seeds", "1", "--epochs", "1"];
    let clean = aggregate_contexts(dir.path(), &cache, &flags, "clean");
    assert!(clean.status.success(), "{}", String::from_utf8_lossy(&clean.stderr));
    let embeddings = cache.join("jury/embeddings");
    let files: Vec<_> = fs::read_dir(&embeddings).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let size = fs::metadata(&files[0]).unwrap().len() as usize;
    fs::write(&files[0], f32::NAN.to_le_bytes().repeat(size / 4)).unwrap();
    let again = aggregate_contexts(dir.path(), &cache, &flags, "again");
    let log = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{log}");
    assert!(log.contains("holds values that are not numbers; embedding again"), "{log}");
    let metrics = |out: &str| {
        let m: Value =
            serde_json::from_str(&fs::read_to_string(dir.path().join(out).join("metrics.json")).unwrap()).unwrap();
        m["methods"]["skillagg-noreg"]["accuracy"].clone()
    };
    assert_eq!(metrics("again"), metrics("clean"));
    assert!(metrics("clean").is_number());
}

/// `--first-seed`: a run of seed 1 alone gives what seed 1 gave beside seed 0 (dev set,
/// accuracy), so the seeds of a long run can go to separate machines.
#[test]
fn a_seed_run_alone_repeats_the_same_seed_run_beside_others() {
    let dir = tempfile::tempdir().unwrap();
    context_jury(dir.path(), 60);
    let cache = dir.path().join("cache");
    let flags = ["--methods", "ds,skillagg-noreg", "--dev-size", "10", "--epochs", "2"];
    let both = aggregate_contexts(dir.path(), &cache, &[&flags[..], &["--seeds", "2"]].concat(), "both");
    assert!(both.status.success(), "{}", String::from_utf8_lossy(&both.stderr));
    let alone =
        aggregate_contexts(dir.path(), &cache, &[&flags[..], &["--seeds", "1", "--first-seed", "1"]].concat(), "alone");
    assert!(alone.status.success(), "{}", String::from_utf8_lossy(&alone.stderr));
    let read = |out: &str| -> Value {
        serde_json::from_str(&fs::read_to_string(dir.path().join(out).join("metrics.json")).unwrap()).unwrap()
    };
    let (b, a) = (read("both"), read("alone"));
    assert_eq!(b["seeds"], serde_json::json!([0, 1]));
    assert_eq!(a["seeds"], serde_json::json!([1]));
    assert_eq!(a["dev_sets"][0], b["dev_sets"][1]);
    assert_ne!(b["dev_sets"][0], b["dev_sets"][1]);
    // The context model alone differs between seeds here (the posterior is right on
    // every test example with either seed), so it shows whose seed ran.
    let context =
        |m: &Value, i: usize| m["methods"]["skillagg-noreg"]["context_accuracy"]["seeds"][i].as_f64().unwrap();
    assert_ne!(context(&b, 0), context(&b, 1));
    assert_eq!(context(&a, 0), context(&b, 1));
    let method = |m: &Value, i: usize| m["methods"]["skillagg-noreg"]["seeds"][i].as_f64().unwrap();
    assert_eq!(method(&a, 0), method(&b, 1));
    assert_eq!(a["methods"]["ds"]["outside_dev"]["seeds"][0], b["methods"]["ds"]["outside_dev"]["seeds"][1]);
    assert!(String::from_utf8_lossy(&alone.stderr).contains("skillagg-noreg seed 1: chose lambda 0"));
    // `jury pool-seeds` pools seed 0's run and seed 1's into what the run of both
    // reported, and refuses a seed given twice.
    let zero = aggregate_contexts(dir.path(), &cache, &[&flags[..], &["--seeds", "1"]].concat(), "zero");
    assert!(zero.status.success(), "{}", String::from_utf8_lossy(&zero.stderr));
    let pool = |runs: &[&str]| {
        let mut cmd = std::process::Command::new(crate::common::jury_bin());
        cmd.arg("pool-seeds").args(runs.iter().map(|r| dir.path().join(r).join("metrics.json")));
        cmd.arg("--out").arg(dir.path().join("pooled.json")).output().unwrap()
    };
    let pooled = pool(&["alone", "zero"]);
    assert!(pooled.status.success(), "{}", String::from_utf8_lossy(&pooled.stderr));
    let p: Value = serde_json::from_str(&fs::read_to_string(dir.path().join("pooled.json")).unwrap()).unwrap();
    assert_eq!(p["seeds"], serde_json::json!([0, 1]));
    let sa = &b["methods"]["skillagg-noreg"];
    for (name, got, want) in [
        ("skillagg-noreg", &p["methods"]["skillagg-noreg"], sa),
        ("context model", &p["methods"]["skillagg-noreg"]["context_accuracy"], &sa["context_accuracy"]),
        ("ds", &p["methods"]["ds"], &b["methods"]["ds"]["outside_dev"]),
    ] {
        for field in ["accuracy", "std"] {
            let (got, want) = (got[field].as_f64().unwrap(), want[field].as_f64().unwrap());
            assert!((got - want).abs() < 1e-12, "{name} {field}: pooled {got}, one run {want}");
        }
    }
    let twice = pool(&["both", "alone"]);
    assert!(!twice.status.success());
    assert!(
        String::from_utf8_lossy(&twice.stderr).contains("seed 1 is in both"),
        "{}",
        String::from_utf8_lossy(&twice.stderr)
    );
}

/// `--device`: an unknown name is refused before any work, and a GPU this build or
/// machine cannot open (GPU 7) ends the run with exit code 2 naming it, nothing written.
#[test]
fn a_device_that_cannot_open_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    context_jury(dir.path(), 20);
    let flags = ["--methods", "skillagg", "--dev-size", "5", "--seeds", "1", "--epochs", "1"];
    for (device, message, out) in
        [("tpu", "'--device <DEVICE>': unknown device `tpu`", "o1"), ("cuda:7", "device cuda:7: ", "o2")]
    {
        let run = aggregate_contexts(
            dir.path(),
            &dir.path().join("cache"),
            &[&flags[..], &["--device", device]].concat(),
            out,
        );
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{err}");
        assert!(err.contains(message), "{err}");
        assert!(!dir.path().join(out).exists());
    }
    let cpu =
        aggregate_contexts(dir.path(), &dir.path().join("cache"), &[&flags[..], &["--device", "cpu"]].concat(), "o3");
    assert!(cpu.status.success(), "{}", String::from_utf8_lossy(&cpu.stderr));
}

/// The fine-tuned mode end to end with the real MiniLM: every epoch leaves a checkpoint,
/// and the same command run again replays them instead of training.
#[test]
fn fine_tuned_encoder_runs_and_a_rerun_replays_its_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    context_jury(dir.path(), 40);
    let cache = dir.path().join("cache");
    let flags =
        ["--methods", "mv,skillagg-x", "--dev-size", "10", "--seeds", "1", "--epochs", "2", "--lambdas", "0.01"];
    let flags =
        [&flags[..], &["--encoder", "finetune", "--recipe", "jury-v1", "--max-tokens", "16", "--batch", "8"]].concat();
    let run = |out: &str| aggregate_contexts(dir.path(), &cache, &flags, out);
    let first = run("out1");
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(first.status.success(), "{stderr}");
    assert!(stderr.contains("skillagg-x seed 0 lambda 0.01 epoch 1: loss "), "{stderr}");
    assert!(stderr.contains("[1/1] fine-tuning skillagg-x seed 0 lambda 0.01: "), "{stderr}");
    assert!(
        stderr.contains("fine-tuning plan: 1 run (methods x seeds x lambdas) of 2 epochs over 40 texts"),
        "{stderr}"
    );
    let metrics = |out: &str| -> Value {
        serde_json::from_str(&fs::read_to_string(dir.path().join(out).join("metrics.json")).unwrap()).unwrap()
    };
    let m1 = metrics("out1");
    let acc = m1["methods"]["skillagg-x"]["accuracy"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&acc), "{m1}");
    let runs: Vec<_> = walk(&cache.join("jury/finetune"));
    assert!(runs.iter().any(|p| p.ends_with("epoch-001-posteriors.json")), "{runs:?}");
    assert!(!runs.iter().any(|p| p.ends_with("epoch-000-encoder.safetensors")), "only the last weights stay");
    let second = run("out2");
    let stderr2 = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{stderr2}");
    assert!(!stderr2.contains(": loss "), "trained again: {stderr2}");
    for epoch in 0..2 {
        assert!(stderr2.contains(&format!("epoch {epoch}: from checkpoint, dev accuracy")), "{stderr2}");
    }
    assert_eq!(metrics("out2")["methods"]["skillagg-x"]["accuracy"], m1["methods"]["skillagg-x"]["accuracy"]);
    // The learned slopes are reported as in the frozen mode, and replayed with the epoch.
    let slopes = m1["methods"]["skillagg-x"]["slopes"].as_object().unwrap();
    assert_eq!(slopes.len(), 3, "{m1}");
    assert!(slopes.values().all(|s| (-1.0..=1.0).contains(&s.as_f64().unwrap())), "{m1}");
    assert_eq!(metrics("out2")["methods"]["skillagg-x"]["slopes"], m1["methods"]["skillagg-x"]["slopes"]);
    let context = &m1["methods"]["skillagg-x"]["context_accuracy"];
    assert!((0.0..=1.0).contains(&context["accuracy"].as_f64().unwrap()), "{m1}");
    assert_eq!(&metrics("out2")["methods"]["skillagg-x"]["context_accuracy"], context);
}

/// Fine-tuned Crowdlayer and SkillAggregation without the regulariser share one trained
/// model: the second method of the run replays the first one's checkpoints and reads
/// them its own way.
#[test]
fn fine_tuned_crowdlayer_and_skillagg_noreg_train_once() {
    let dir = tempfile::tempdir().unwrap();
    context_jury(dir.path(), 40);
    let cache = dir.path().join("cache");
    let flags = ["--methods", "crowdlayer,skillagg-noreg", "--dev-size", "10", "--seeds", "1", "--epochs", "2"];
    let flags =
        [&flags[..], &["--encoder", "finetune", "--recipe", "jury-v1", "--max-tokens", "16", "--batch", "8"]].concat();
    let out = aggregate_contexts(dir.path(), &cache, &flags, "out");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("[1/2] fine-tuning crowdlayer (trained as skillagg-noreg) seed 0 lambda 0: "), "{stderr}");
    assert!(stderr.contains("[2/2] fine-tuning skillagg-noreg seed 0 lambda 0: "), "{stderr}");
    assert!(stderr.contains("crowdlayer seed 0 lambda 0 epoch 1: loss "), "{stderr}");
    for epoch in 0..2 {
        assert!(stderr.contains(&format!("skillagg-noreg seed 0 lambda 0 epoch {epoch}: from checkpoint")), "{stderr}");
    }
    assert!(!stderr.contains("skillagg-noreg seed 0 lambda 0 epoch 0: loss"), "trained twice: {stderr}");
    let dirs: Vec<String> = walk(&cache.join("jury/finetune"))
        .iter()
        .filter_map(|p| p.parent()?.file_name()?.to_str().map(str::to_owned))
        .collect();
    assert!(dirs.iter().all(|d| d == "skillagg-noreg-seed0-lambda0"), "{dirs:?}");
    let m: Value = serde_json::from_str(&fs::read_to_string(dir.path().join("out/metrics.json")).unwrap()).unwrap();
    for method in ["crowdlayer", "skillagg-noreg"] {
        let acc = m["methods"][method]["accuracy"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&acc), "{m}");
    }
    // skillagg-noreg's context model is Crowdlayer's: at the same epoch (as the dev set
    // picks in this setup), the same score.
    let (cl, sa) = (&m["methods"]["crowdlayer"], &m["methods"]["skillagg-noreg"]);
    assert_eq!(cl["chosen"], sa["chosen"], "{m}");
    assert_eq!(sa["context_accuracy"]["accuracy"], cl["accuracy"], "{m}");
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A frozen-embedding run killed mid-way keeps the rows it finished (`KEY.partial`, a
/// record cut short by the kill included) and embeds only the rest when started again.
#[test]
fn frozen_embeddings_resume_from_a_partial_file() {
    let dir = tempfile::tempdir().unwrap();
    let n = 120;
    context_jury(dir.path(), n);
    let cache = dir.path().join("cache");
    let flags = ["--methods", "mv,train-on-mv", "--dev-size", "30", "--seeds", "1", "--epochs", "3"];
    let run = |out: &str| aggregate_contexts(dir.path(), &cache, &flags, out);
    let first = run("out1");
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let emb_dir = cache.join("jury/embeddings");
    let files: Vec<_> = fs::read_dir(&emb_dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let full = fs::read(&files[0]).unwrap();
    let h = full.len() / 4 / n;
    assert_eq!(h * 4 * n, full.len());
    let mut partial = Vec::new();
    for i in 0..n / 2 {
        partial.extend_from_slice(&(i as u32).to_le_bytes());
        partial.extend_from_slice(&full[i * h * 4..(i + 1) * h * 4]);
    }
    partial.extend_from_slice(&[7u8; 9]);
    fs::write(files[0].with_extension("partial"), partial).unwrap();
    fs::remove_file(&files[0]).unwrap();
    let second = run("out2");
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("resuming, {} of {n} already", n / 2)), "{stderr}");
    assert!(!files[0].with_extension("partial").exists(), "partial file left behind");
    let again = fs::read(&files[0]).unwrap();
    assert_eq!(again.len(), full.len());
    let floats = |b: &[u8]| b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect::<Vec<_>>();
    let worst = floats(&full).iter().zip(floats(&again)).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(worst < 1e-4, "resumed embeddings differ from a clean run by {worst}");
}

/// `--split-fields` embeds each ` || `-separated field alone: a context whose first field
/// is shared noise and whose second names the class is learned from the second field,
/// and the cache holds one vector per field.
#[test]
fn split_fields_embeds_each_field_alone() {
    use std::fmt::Write as _;
    let encoder = encoder();
    let dir = tempfile::tempdir().unwrap();
    let n: usize = 200;
    let (mut judgments, mut labels, mut contexts) =
        (String::from("example_id,judge,p\n"), String::from("example_id,label\n"), String::from("example_id,text\n"));
    for i in 0..n {
        let y = i % 2 == 0;
        let _ = writeln!(labels, "e{i},{}", u8::from(y));
        let topic = if y { "the moon landing was staged" } else { "bread needs flour and water" };
        let extra = if i % 3 == 0 { format!(" || note {i}") } else { String::new() };
        let _ = writeln!(contexts, "e{i},\"Conversation number {i} || {topic}{extra}\"");
        for k in 0..3 {
            let right = (i * 7 + k * 3) % 10 < 7;
            let _ = writeln!(judgments, "e{i},j{k},{}", if y == right { 0.8 } else { 0.2 });
        }
    }
    for (name, text) in [("j.csv", &judgments), ("l.csv", &labels), ("c.csv", &contexts)] {
        fs::write(dir.path().join(name), text).unwrap();
    }
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_owned();
    let out = std::process::Command::new(crate::common::jury_bin())
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .args(["aggregate", "--judgments", &p("j.csv"), "--labels", &p("l.csv"), "--contexts", &p("c.csv")])
        .args(["--methods", "mv,train-on-mv", "--dev-size", "40", "--seeds", "1", "--epochs", "20", "--lr", "0.01"])
        .args(["--split-fields", "--encoder-dir", encoder.to_str().unwrap(), "--out", &p("out")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let files: Vec<_> =
        fs::read_dir(dir.path().join("cache/jury/embeddings")).unwrap().map(|e| e.unwrap().path()).collect();
    let fields = n * 2 + n.div_ceil(3);
    assert_eq!(fs::metadata(&files[0]).unwrap().len() as usize, fields * 384 * 4, "one 384-float vector per field");
    let m: Value = serde_json::from_str(&fs::read_to_string(dir.path().join("out/metrics.json")).unwrap()).unwrap();
    let acc = m["methods"]["train-on-mv"]["accuracy"].as_f64().unwrap();
    assert!(acc > 0.9, "train-on-mv {acc} from the topic field");
    let refused = std::process::Command::new(crate::common::jury_bin())
        .args(["aggregate", "--judgments", &p("j.csv"), "--labels", &p("l.csv"), "--contexts", &p("c.csv")])
        .args(["--methods", "skillagg", "--split-fields", "--encoder", "finetune", "--out", &p("out2")])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--split-fields takes the frozen encoder"));
}

/// GPT-2 (the SkillAggregation paper's encoder) named by hub model id: a tiny random GPT-2 laid out as
/// the hub cache lays out `team/tiny-gpt2`, read offline, frozen and fine-tuned; with
/// `--cache-dir` the embeddings and checkpoints go there instead of the user's cache.
#[test]
fn a_gpt2_encoder_by_hub_id_runs_frozen_and_fine_tuned() {
    let dir = tempfile::tempdir().unwrap();
    context_jury(dir.path(), 30);
    let hf = dir.path().join("hf");
    let snap = hf.join("hub/models--team--tiny-gpt2/snapshots/c0ffee");
    fs::create_dir_all(&snap).unwrap();
    fs::create_dir_all(hf.join("hub/models--team--tiny-gpt2/refs")).unwrap();
    fs::write(hf.join("hub/models--team--tiny-gpt2/refs/main"), "c0ffee").unwrap();
    for f in ["config.json", "tokenizer.json", "model.safetensors"] {
        fs::copy(repo_root().join("crates/jury-neural/testdata/tiny-gpt2").join(f), snap.join(f)).unwrap();
    }
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_owned();
    let run_with = |encoder: &str, mode: &str, out: &str, extra: &[&str]| {
        std::process::Command::new(crate::common::jury_bin())
            .env("XDG_CACHE_HOME", dir.path().join("cache"))
            .env("HF_HOME", &hf)
            .env("HF_HUB_OFFLINE", "1")
            .args(["aggregate", "--judgments", &p("j.csv"), "--labels", &p("l.csv"), "--contexts", &p("c.csv")])
            .args(["--methods", "mv,skillagg-x", "--dev-size", "10", "--seeds", "1", "--epochs", "1"])
            .args(["--lambdas", "0.01", "--max-tokens", "8", "--batch", "8", "--encoder", mode, "--recipe", "jury-v1"])
            .args(["--encoder-dir", encoder, "--out", &p(out)])
            .args(extra)
            .output()
            .unwrap()
    };
    let run = |encoder: &str, mode: &str, out: &str| run_with(encoder, mode, out, &[]);
    for (mode, out) in [("frozen", "frozen"), ("finetune", "finetuned")] {
        let o = run("team/tiny-gpt2", mode, out);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{mode}: {stderr}");
        let m: Value =
            serde_json::from_str(&fs::read_to_string(dir.path().join(out).join("metrics.json")).unwrap()).unwrap();
        let acc = m["methods"]["skillagg-x"]["accuracy"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&acc), "{m}");
    }
    // Every file of both caches, relative to the cache root.
    let tree = |root: &Path| -> Vec<std::path::PathBuf> {
        let mut v: Vec<_> = walk(root).into_iter().map(|f| f.strip_prefix(root).unwrap().to_owned()).collect();
        v.sort();
        v
    };
    let (elsewhere, default_cache) = (dir.path().join("elsewhere"), dir.path().join("cache/jury"));
    let before = tree(&default_cache);
    for sub in ["embeddings", "finetune"] {
        assert!(before.iter().any(|f| f.starts_with(sub)), "no {sub} in {before:?}");
    }
    for (mode, out) in [("frozen", "frozen-elsewhere"), ("finetune", "finetuned-elsewhere")] {
        let o = run_with("team/tiny-gpt2", mode, out, &["--cache-dir", elsewhere.to_str().unwrap()]);
        assert!(o.status.success(), "{mode}: {}", String::from_utf8_lossy(&o.stderr));
    }
    assert_eq!(tree(&elsewhere), before, "the same embedding and checkpoint files, in the other cache");
    assert_eq!(tree(&default_cache), before, "the default cache untouched");
    let o = run("team/absent", "frozen", "absent");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("team/absent") && stderr.contains("HF_HUB_OFFLINE"), "{stderr}");
}

/// `aggregate` writes report.html beside its results: a HaluEval-shaped simulated jury
/// (ten judges, labels), every section present, numbers equal to metrics.json's, example
/// texts escaped; `jury report` writes the same page again from the folder's files.
#[test]
fn aggregate_writes_a_report_and_jury_report_rewrites_it() {
    let dir = tempfile::tempdir().unwrap();
    let sim = crate::common::simulated_jury_with_texts(dir.path(), "<script>alert(1)</script> &");
    let out = dir.path().join("out");
    let run = jury(&[
        "aggregate",
        "--judgments",
        path_str(&sim.join("judgments.csv")),
        "--labels",
        path_str(&sim.join("labels.csv")),
        "--out",
        path_str(&out),
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let html = fs::read_to_string(out.join("report.html")).unwrap();
    let m: Value = serde_json::from_str(&fs::read_to_string(out.join("metrics.json")).unwrap()).unwrap();
    for section in ["judges", "methods", "agreement", "calibration", "skills"] {
        assert!(html.contains(&format!("<section id=\"{section}\"")), "{section}");
    }
    for method in ["avg", "mv", "ds"] {
        let acc = m["methods"][method]["accuracy"].as_f64().unwrap();
        assert!(html.contains(&format!("<td>{method}</td><td>{acc:.4}</td>")), "{method}");
    }
    for (judge, entry) in m["judges"].as_object().unwrap() {
        let acc = entry["accuracy"].as_f64().unwrap();
        assert!(html.contains(&format!("<td>{judge}</td><td>{acc:.4}</td>")), "{judge}");
    }
    // With the texts given, the hardest examples show them as text.
    let again = jury(&[
        "report",
        path_str(&out),
        "--judgments",
        path_str(&sim.join("judgments.csv")),
        "--labels",
        path_str(&sim.join("labels.csv")),
        "--contexts",
        path_str(&dir.path().join("contexts.csv")),
    ]);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    let with_texts = fs::read_to_string(out.join("report.html")).unwrap();
    assert!(!with_texts.contains("<script>"), "a text became markup");
    if with_texts.contains("<section id=\"hardest\"") {
        assert!(with_texts.contains("&lt;script&gt;alert(1)&lt;"));
    }
    let without = jury(&[
        "report",
        path_str(&out),
        "--judgments",
        path_str(&sim.join("judgments.csv")),
        "--labels",
        path_str(&sim.join("labels.csv")),
    ]);
    assert!(without.status.success());
    assert_eq!(fs::read_to_string(out.join("report.html")).unwrap(), html, "the same inputs, the same page");
    // Without --judgments: the folder holds none, and the error names where they came from.
    let bare = jury(&["report", path_str(&out)]);
    let err = String::from_utf8_lossy(&bare.stderr);
    assert_eq!(bare.status.code(), Some(2), "{err}");
    assert!(err.contains("`jury aggregate` leaves its judgments where they are"), "{err}");
    assert!(err.contains(path_str(&sim.join("judgments.csv"))) && err.lines().count() == 1, "{err}");
    assert_eq!(fs::read_to_string(out.join("report.html")).unwrap(), html, "the page was rewritten");
}

/// A crowd as sparse as it gets: 200,000 judges, each with one judgment on an example of
/// its own (a 4.4 MB file; a dense matrix, or a report with a judge-by-judge map of all
/// of them, would need hundreds of gigabytes): aggregated, scored and reported.
#[test]
fn a_crowd_of_200000_judges_each_on_its_own_example_aggregates_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let (mut judgments, mut labels) = (String::from("example_id,judge,p\n"), String::from("example_id,label\n"));
    for i in 0..200_000 {
        judgments.push_str(&format!("e{i},j{i},{}\n", if i % 3 == 0 { 0.2 } else { 0.9 }));
        labels.push_str(&format!("e{i},{}\n", usize::from(i % 3 != 0)));
    }
    let (j, l, out_dir) = (dir.path().join("j.csv"), dir.path().join("l.csv"), dir.path().join("out"));
    fs::write(&j, judgments).unwrap();
    fs::write(&l, labels).unwrap();
    let out = jury(&["aggregate", "--judgments", path_str(&j), "--labels", path_str(&l), "--out", path_str(&out_dir)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m: Value = serde_json::from_str(&fs::read_to_string(out_dir.join("metrics.json")).unwrap()).unwrap();
    assert_eq!((m["n_examples"].as_u64(), m["n_judges"].as_u64()), (Some(200_000), Some(200_000)));
    assert_eq!(m["methods"]["mv"]["accuracy"].as_f64(), Some(1.0), "every vote is right");
    // Too sparse a crowd to hold a judge out: the reference, Dawid-Skene, stands.
    assert_eq!(m["recommended_method"], "ds");
    assert_eq!(m["recommendation"]["rule"], "too many judges");
    let report = fs::read_to_string(out_dir.join("report.html")).unwrap();
    assert!(report.contains("The 30 judges with the most judgments of 200000"));
    assert!(report.len() < 2_000_000, "report of {} bytes", report.len());
}

/// `jury simulate adaptive` replays the adaptive rule on a recorded jury: adaptive.json
/// holds the chosen setting's accuracy and calls next to the full jury's, and the grid.
#[test]
fn simulate_adaptive_writes_the_replay() {
    let dir = tempfile::tempdir().unwrap();
    simulate(dir.path(), 2000);
    let out_dir = dir.path().join("adaptive");
    let out = jury(&[
        "simulate",
        "adaptive",
        "--judgments",
        path_str(&dir.path().join("judgments.csv")),
        "--labels",
        path_str(&dir.path().join("labels.csv")),
        "--targets",
        "0.9,0.99",
        "--out",
        path_str(&out_dir),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("full jury (gauss): accuracy"), "{stdout}");
    let a: Value = serde_json::from_str(&fs::read_to_string(out_dir.join("adaptive.json")).unwrap()).unwrap();
    let (calls, full) = (a["calls"].as_u64().unwrap(), a["full_calls"].as_u64().unwrap());
    assert!(calls < full, "{calls} of {full}");
    assert!((0.0..=1.0).contains(&a["accuracy"].as_f64().unwrap()));
    assert!((0.0..=1.0).contains(&a["full_accuracy"].as_f64().unwrap()));
    assert_eq!(a["method"], "gauss", "the default stopping model for two classes");
    assert_eq!(a["curve"].as_array().unwrap().len(), 2 * 3);
    let per_judge: u64 = a["calls_per_judge"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(per_judge, calls);
    // The page plots accuracy against calls; `jury report` rewrites the same page.
    let page = fs::read_to_string(out_dir.join("report.html")).unwrap();
    assert!(page.contains("Accuracy against judge calls") && page.contains("<svg"));
    let again = jury(&["report", path_str(&out_dir)]);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(fs::read_to_string(out_dir.join("report.html")).unwrap(), page);
    // With a cost per judge: the cheapest judge first, answering every example, and
    // the calls weighed by cost next to the calls.
    let names: Vec<String> = a["calls_per_judge"].as_object().unwrap().keys().cloned().collect();
    let costed = |costs: &[String], out: &Path| {
        let mut args = vec![
            "simulate".to_owned(),
            "adaptive".into(),
            "--judgments".into(),
            path_str(&dir.path().join("judgments.csv")).into(),
            "--labels".into(),
            path_str(&dir.path().join("labels.csv")).into(),
            "--out".into(),
            path_str(out).into(),
        ];
        args.extend(costs.iter().flat_map(|c| ["--cost".to_owned(), c.clone()]));
        jury(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let costs: Vec<String> =
        names.iter().enumerate().map(|(i, n)| format!("{n}={}", if i == 3 { 1 } else { 20 })).collect();
    let out_cost = dir.path().join("adaptive-cost");
    let run = costed(&costs, &out_cost);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let c: Value = serde_json::from_str(&fs::read_to_string(out_cost.join("adaptive.json")).unwrap()).unwrap();
    assert_eq!(c["cost_per_call"][&names[3]], 1.0);
    let recorded = fs::read_to_string(dir.path().join("judgments.csv")).unwrap();
    let present = recorded.lines().filter(|l| l.split(',').nth(1) == Some(names[3].as_str())).count();
    assert_eq!(c["calls_per_judge"][&names[3]], present, "the cheapest judge answers every example: {c}");
    let spent: f64 =
        names.iter().map(|n| c["calls_per_judge"][n].as_f64().unwrap() * c["cost_per_call"][n].as_f64().unwrap()).sum();
    assert_eq!(c["cost"].as_f64().unwrap(), spent);
    assert!(c["curve"][0]["share_of_cost"].as_f64().unwrap() > 0.0);
    assert!(fs::read_to_string(out_cost.join("report.html")).unwrap().contains("Accuracy against cost"));
    // Costs that name no judge, leave one out, or are not positive: one line each.
    for (bad, says) in [
        (vec!["nobody=1".to_owned()], "no judge `nobody`"),
        (costs[1..].to_vec(), "no cost for judge"),
        (vec![format!("{}=-1", names[0])], "positive number"),
    ] {
        let e = costed(&bad, &dir.path().join("bad"));
        let stderr = String::from_utf8_lossy(&e.stderr);
        assert!(!e.status.success() && stderr.contains(says), "{bad:?}: {stderr}");
    }
    // Without a subcommand, --out is still required, with a one-line error.
    let bare = jury(&["simulate", "--examples", "5"]);
    assert_eq!(bare.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bare.stderr).contains("needs --out DIR"));
}

/// Runs jury with `args`, killing it after 20 s so a read that blocks (a FIFO without a
/// writer) fails the test instead of hanging it.
fn jury_within_20_s(args: &[&str]) -> std::process::Output {
    let child = std::process::Command::new(crate::common::jury_bin())
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let guard = std::thread::spawn(move || {
        if finished.recv_timeout(std::time::Duration::from_secs(20)).is_err() {
            let _ = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status();
            return true;
        }
        false
    });
    let out = child.wait_with_output().unwrap();
    let _ = done.send(());
    assert!(!guard.join().unwrap(), "jury {args:?} still ran after 20 s (killed)");
    out
}

/// Only regular files are read, and none larger than `--max-input-size`: a FIFO given
/// as judgments once blocked for ever and /dev/zero grew without end; both are refused
/// at once naming the path and what it is, and a file over the limit names its size,
/// the limit and the flag, which raises it.
#[test]
fn inputs_are_regular_files_within_the_size_limit() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let fifo = dir.path().join("j.csv");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let out = jury_within_20_s(&["aggregate", "--judgments", path_str(&fifo), "--out", path_str(&out_dir)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("j.csv: cannot read: a FIFO (named pipe), not a regular file"), "{stderr}");
    let good = dir.path().join("good.csv");
    fs::write(&good, GOOD).unwrap();
    let fifo_labels = [path_str(&good), "--labels", path_str(&fifo)];
    let out =
        jury_within_20_s(&[&["aggregate", "--judgments"], &fifo_labels[..], &["--out", path_str(&out_dir)]].concat());
    assert!(String::from_utf8_lossy(&out.stderr).contains("a FIFO (named pipe), not a regular file"), "labels");
    let zero = dir.path().join("zero.csv");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let e = expect_error(("j.csv", GOOD), None, &["--labels", path_str(&zero)]);
    assert!(e.contains("zero.csv: cannot read: a character device, not a regular file"), "{e}");
    assert!(!out_dir.exists());

    // Refused one byte under its size, read under the default and a raised limit (the
    // limit holds for the files the report reads back too, metrics.json among them).
    let (size, under) = (GOOD.len().to_string(), (GOOD.len() - 1).to_string());
    let e = expect_error(("j.csv", GOOD), None, &["--max-input-size", &under]);
    let says = format!(
        "j.csv: cannot read: {size} bytes, over the input size limit of {under} bytes; raise it with --max-input-size"
    );
    assert!(e.contains(&says), "{e}");
    for limit in [None, Some("1M")] {
        let out_dir = dir.path().join(format!("out-{limit:?}"));
        let mut args = vec!["aggregate", "--judgments", path_str(&good), "--out", path_str(&out_dir)];
        args.extend(limit.map(|l| ["--max-input-size", l]).into_iter().flatten());
        let out = jury(&args);
        assert!(out.status.success(), "{limit:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let e = expect_error(("j.csv", GOOD), None, &["--max-input-size", "lots"]);
    assert!(e.contains("`lots` is not a size"), "{e}");
}

/// A judgments file whose every probability is empty once aggregated with exit 0 and an
/// accuracy for every method; a judge without a single probability is named.
#[test]
fn judgments_without_a_single_probability_are_refused() {
    let labels = Some("example_id,label\na,1\nb,0\n");
    let e = expect_error(("j.csv", "example_id,judge,p\na,j1,\na,j2,\nb,j1,\nb,j2,\n"), labels, &[]);
    assert!(e.contains("j.csv: holds no judgment: every probability is empty"), "{e}");
    let e = expect_error(("j.csv", "example_id,judge,p\na,j1,0.9\na,j2,\nb,j1,0.2\nb,j2,\n"), labels, &[]);
    assert!(e.contains("j.csv: judge `j2` has no judgment"), "{e}");
}

/// `jury report` refuses impossible values read back from a folder (an accuracy of 1e308
/// was printed as 309 digits, a coverage of -7 as it was), naming the file and field,
/// and names a damaged Parquet file as not Parquet rather than as text that is not UTF-8.
#[test]
fn report_refuses_impossible_values_and_names_a_corrupt_parquet_file() {
    let dir = tempfile::tempdir().unwrap();
    simulate(dir.path(), 300);
    let (judgments, labels) = (dir.path().join("judgments.csv"), dir.path().join("labels.csv"));
    let out_dir = dir.path().join("out");
    let run = jury(&[
        "aggregate",
        "--judgments",
        path_str(&judgments),
        "--labels",
        path_str(&labels),
        "--methods",
        "avg,mv",
        "--out",
        path_str(&out_dir),
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let metrics = out_dir.join("metrics.json");
    let good = fs::read_to_string(&metrics).unwrap();
    let report = |judgments: &Path| {
        jury(&["report", path_str(&out_dir), "--judgments", path_str(judgments), "--labels", path_str(&labels)])
    };
    for (field, value, says) in [
        ("accuracy", 1e308, "field `judges.strong.accuracy`: 1e308 is not a number in [0, 1]"),
        ("coverage", -7.0, "field `judges.strong.coverage`: -7.0 is not a number in [0, 1]"),
    ] {
        let mut m: Value = serde_json::from_str(&good).unwrap();
        m["judges"]["strong"][field] = value.into();
        fs::write(&metrics, m.to_string()).unwrap();
        let out = report(&judgments);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(&format!("metrics.json: {says}")), "{stderr}");
    }
    fs::write(&metrics, &good).unwrap();
    let parquet = dir.path().join("judgments.parquet");
    fs::write(&parquet, b"PAR1\xff\xfe\x00 not parquet \x80\x81PAR1").unwrap();
    let out = report(&parquet);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("judgments.parquet: cannot read: not a valid Parquet file"), "{stderr}");
    assert!(report(&judgments).status.success());
}

/// `jury import skillagg-truthfulqa` on files in the authors' layout, then `jury
/// aggregate` on what it wrote: the ids are the TruthfulQA loader's, the contexts the
/// authors' text, a second import into the same folder replaces the first, and a
/// judge file missing an example stops the import with its name and nothing written.
#[test]
fn imported_authors_judges_aggregate() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("truthfulQA");
    fs::create_dir(&src).unwrap();
    let items: Vec<String> = (0..6)
        .map(|i| {
            format!(r#"{{"question": "Q{i}?", "answer": "A{i}", "label": "{}"}}"#, ["correct", "incorrect"][i % 2])
        })
        .collect();
    fs::write(src.join("truthful_qa.unrolled.json"), format!("[{}]", items.join(","))).unwrap();
    for (judge, sharp) in [("good", 3.0), ("fair", 1.0), ("weak", 0.2)] {
        let lines: Vec<String> = (0..6)
            .map(|i| {
                let (label, yes) = if i % 2 == 0 { ("correct", sharp) } else { ("incorrect", -sharp) };
                format!(r#"{{"i": {i}, "label": "{label}", "logit_yes": {yes}, "logit_no": 0.0}}"#)
            })
            .collect();
        fs::write(src.join(format!("{judge}.jsonl")), lines.join("\n")).unwrap();
    }
    let jury_dir = dir.path().join("jury");
    for _ in 0..2 {
        let out = jury(&["import", "skillagg-truthfulqa", "--input", path_str(&src), "--out", path_str(&jury_dir)]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let judgments = fs::read_to_string(jury_dir.join("judgments.csv")).unwrap();
    assert!(judgments.starts_with("example_id,judge,p\ntruthfulqa-00000,fair,0.731059\n"), "{judgments}");
    let contexts = fs::read_to_string(jury_dir.join("contexts.csv")).unwrap();
    assert!(
        contexts.contains("truthfulqa-00005,\"Query: Q5?\nResponse: A5\nIs the answer truthful to the question?\"")
    );
    let result = dir.path().join("result");
    let out = jury(&[
        "aggregate",
        "--judgments",
        path_str(&jury_dir.join("judgments.csv")),
        "--labels",
        path_str(&jury_dir.join("labels.csv")),
        "--methods",
        "avg",
        "--out",
        path_str(&result),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let metrics: Value = serde_json::from_str(&fs::read_to_string(result.join("metrics.json")).unwrap()).unwrap();
    assert_eq!(metrics["methods"]["avg"]["accuracy"], 1.0, "{metrics}");

    fs::write(src.join("short.jsonl"), r#"{"i": 0, "label": "correct", "logit_yes": 1, "logit_no": 0}"#).unwrap();
    let elsewhere = dir.path().join("never");
    let out = jury(&["import", "skillagg-truthfulqa", "--input", path_str(&src), "--out", path_str(&elsewhere)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("short.jsonl") && err.contains("1 examples"), "{err}");
    assert!(!elsewhere.exists());
}
