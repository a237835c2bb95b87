//! Calibration labels end to end on a simulated jury: a label plan, the planned examples
//! labeled from the truth, `jury aggregate --calibration` recommending the calibrated
//! method with corrected rates and scoring only outside the calibration set, the replay,
//! and bad calibration files refused with one line naming the file and line, nothing
//! written.

use std::fs;
use std::path::Path;

use crate::common::jury;
use serde_json::Value;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn simulated(dir: &Path) {
    let out = jury(&["simulate", "--examples", "1500", "--seed", "3", "--out", s(dir)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The truth of each example of the simulated jury, by id.
fn truth(dir: &Path) -> std::collections::HashMap<String, String> {
    fs::read_to_string(dir.join("labels.csv"))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| {
            let (id, label) = l.split_once(',').unwrap();
            (id.to_owned(), label.to_owned())
        })
        .collect()
}

/// `jury aggregate` of `dir`'s judgments.csv and labels.csv with `calibration`, `extra`
/// flags, into `dir/out`: that folder's metrics.json and what the command printed.
fn aggregate_calibrated(dir: &Path, calibration: &Path, extra: &[&str]) -> (Value, String) {
    let out_dir = dir.join("out");
    let (judgments, labels) = (dir.join("judgments.csv"), dir.join("labels.csv"));
    let mut args = vec!["aggregate", "--judgments", s(&judgments), "--labels", s(&labels)];
    args.extend(["--calibration", s(calibration), "--out", s(&out_dir)]);
    args.extend(extra);
    let out = jury(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let metrics = serde_json::from_str(&fs::read_to_string(out_dir.join("metrics.json")).unwrap()).unwrap();
    (metrics, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `jury simulate calibration` of `dir`'s judgments.csv and labels.csv at `budgets` with
/// `trials` draws into `out_dir`: the command line, so a test can run it again.
fn replay_args(dir: &Path, budgets: &str, trials: &str, out_dir: &Path) -> Vec<String> {
    let (judgments, labels) = (dir.join("judgments.csv"), dir.join("labels.csv"));
    ["simulate", "calibration", "--judgments", s(&judgments), "--labels", s(&labels)]
        .into_iter()
        .chain(["--budget", budgets, "--trials", trials, "--out", s(out_dir)])
        .map(str::to_owned)
        .collect()
}

#[test]
fn planned_labels_calibrate_the_jury_and_correct_the_rate() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    simulated(d);
    let plan = d.join("plan.csv");
    let out = jury(&[
        "label-plan",
        "--judgments",
        s(&d.join("judgments.csv")),
        "--budget",
        "120",
        "--seed",
        "1",
        "--out",
        s(&plan),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("label every row"), "the plan says to label all of it: {said}");
    assert!(said.contains("calibration: {labels: "), "and how a run takes it: {said}");
    let text = fs::read_to_string(&plan).unwrap();
    assert_eq!(text.lines().next(), Some("example_id,inclusion_probability,plan_size,planned_from"));
    assert_eq!(text.lines().count(), 121);
    // The user labels the planned examples.
    let t = truth(d);
    let mut labeled = String::from("example_id,inclusion_probability,plan_size,planned_from,label\n");
    for l in text.lines().skip(1) {
        let (id, rest) = l.split_once(',').unwrap();
        assert!(rest.ends_with(",120,1500"), "{l}");
        labeled.push_str(&format!("{id},{rest},{}\n", t[id]));
    }
    let cal = d.join("calibration.csv");
    fs::write(&cal, labeled).unwrap();
    let out_dir = d.join("out");
    let (m, said) = aggregate_calibrated(d, &cal, &["--methods", "recommended,mv"]);
    assert_eq!(m["recommended_method"], "calibrated");
    let c = &m["calibration"];
    assert_eq!(c["n_calibration"], 120);
    assert_eq!(c["sampling"], "planned");
    assert_eq!(c["n_scoring_dropped"], 120);
    assert_eq!(c["n_scored"], 1380);
    assert_eq!(m["n_labeled"], 1380);
    assert!(said.contains("1380 labeled (besides 120 calibration labels, not scored on)"), "{said}");
    // Every estimator's interval holds its estimate, and the jury's PPI interval covers
    // the true rate of this jury.
    let rate = t.values().filter(|v| *v == "1").count() as f64 / t.len() as f64;
    for e in ["labels-only", "rogan-gladen", "ppi-best-judge", "ppi-jury"] {
        let r = &c["rates"][e];
        let (lo, est, hi) = (r["low"].as_f64().unwrap(), r["estimate"].as_f64().unwrap(), r["high"].as_f64().unwrap());
        assert!(lo <= est && est <= hi && hi - lo < 0.4, "{e}: {r}");
    }
    // Rogan-Gladen's judge, better than chance on this jury, says what the correction
    // divides by, in metrics.json, on the terminal and in the report.
    let rg = &c["rogan_gladen_judge"];
    let (sens, spec) = (rg["sensitivity"].as_f64().unwrap(), rg["specificity"].as_f64().unwrap());
    assert!(sens > 0.5 && sens <= 1.0 && spec > 0.5 && spec <= 1.0, "{rg}");
    assert!(
        said.contains(&format!("(its judge's sensitivity {sens:.2}, specificity {spec:.2} on the labels)")),
        "{said}"
    );
    let ppi = &c["rates"]["ppi-jury"];
    assert!(ppi["low"].as_f64().unwrap() <= rate && rate <= ppi["high"].as_f64().unwrap(), "{ppi} vs {rate}");
    let cal_acc = m["methods"]["calibrated"]["accuracy"].as_f64().unwrap();
    let mv_acc = m["methods"]["mv"]["accuracy"].as_f64().unwrap();
    assert!(cal_acc >= mv_acc - 0.01, "calibrated {cal_acc} vs mv {mv_acc}");
    // The accuracy read off the calibration labels out of fold: its interval holds the
    // calibrated method's accuracy on the 1,380 examples scored.
    for method in ["calibrated", "recommended"] {
        let r = &c["accuracy"][method];
        let (lo, est, hi) = (r["low"].as_f64().unwrap(), r["estimate"].as_f64().unwrap(), r["high"].as_f64().unwrap());
        assert!(lo <= est && est <= hi && hi - lo < 0.3, "{method}: {r}");
    }
    let a = &c["accuracy"]["calibrated"];
    assert!(a["low"].as_f64().unwrap() <= cal_acc && cal_acc <= a["high"].as_f64().unwrap(), "{a} vs {cal_acc}");
    assert!(said.contains("accuracy outside the calibration set, read off its labels out of fold"), "{said}");
    let predictions = fs::read_to_string(out_dir.join("predictions.csv")).unwrap();
    assert!(predictions.lines().next().unwrap().contains("calibrated_p"));
    let report = fs::read_to_string(out_dir.join("report.html")).unwrap();
    assert!(report.contains("Positive rate corrected with the calibration labels"));
    assert!(report.contains("the correction divides by their sum less 1"));
    // The recommendation explains the label-free method the calibrated one starts from
    // (the held-out-judge criterion never scores `calibrated`: it read "by NaN").
    assert!(report.contains("without labels it would be"), "the report's recommendation");
    assert!(!report.contains("NaN"), "a NaN in the report");
    assert!(report.contains("Accuracy read off the calibration labels"));
    assert!(!said.contains("note: fewer than"), "{said}");
    assert_eq!(c["balance"]["plausible"], true, "{c}");
    assert!(!said.contains("warning: the calibration examples"), "{said}");
    // Twelve of those labels, six of each class: the headline says they are few.
    let mut by_id: Vec<(&String, &String)> = t.iter().collect();
    by_id.sort();
    let mut few = String::from("example_id,label\n");
    for class in ["0", "1"] {
        by_id.iter().filter(|(_, v)| *v == class).take(6).for_each(|(id, v)| few.push_str(&format!("{id},{v}\n")));
    }
    let few_path = d.join("few.csv");
    fs::write(&few_path, few).unwrap();
    let out = jury(&[
        "aggregate",
        "--judgments",
        s(&d.join("judgments.csv")),
        "--calibration",
        s(&few_path),
        "--out",
        s(&d.join("out-few")),
    ]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains("note: fewer than 30 calibration labels"), "{said}");
    assert!(said.contains("under 20 the jury's PPI interval wider than labels-only's"), "{said}");
}

/// The judges' mean probability of class 1 of each example of `dir`'s judgments.csv, the
/// highest first.
fn most_positive_first(dir: &Path) -> Vec<(String, f64)> {
    let mut sums: std::collections::BTreeMap<String, (f64, f64)> = std::collections::BTreeMap::new();
    for l in fs::read_to_string(dir.join("judgments.csv")).unwrap().lines().skip(1) {
        let f: Vec<&str> = l.split(',').collect();
        let e = sums.entry(f[0].to_owned()).or_default();
        e.0 += f[2].parse::<f64>().unwrap();
        e.1 += 1.0;
    }
    let mut by_p: Vec<(String, f64)> = sums.into_iter().map(|(id, (s, n))| (id, s / n)).collect();
    by_p.sort_by(|a, b| b.1.total_cmp(&a.1));
    by_p
}

/// Labels for the examples the judges call most positive, given as a uniform draw (the
/// failures a team found): the command warns, metrics.json and the report say so.
#[test]
fn a_calibration_set_the_judges_show_was_not_drawn_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    simulated(d);
    let t = truth(d);
    let by_p = most_positive_first(d);
    // The 110 most positive and, so that both classes are there, the 10 least.
    let chosen = by_p[..110].iter().chain(&by_p[by_p.len() - 10..]);
    let mut text = String::from("example_id,label\n");
    chosen.for_each(|(id, _)| text.push_str(&format!("{id},{}\n", t[id])));
    let cal = d.join("found.csv");
    fs::write(&cal, text).unwrap();
    let (m, said) = aggregate_calibrated(d, &cal, &[]);
    let b = &m["calibration"]["balance"];
    assert_eq!(b["plausible"], false, "{b}");
    assert!(b["mean_probability"]["z"].as_f64().unwrap() > 5.0, "{b}");
    assert!(said.contains("warning: the calibration examples do not look drawn as stated (uniform)"), "{said}");
    let report = fs::read_to_string(d.join("out").join("report.html")).unwrap();
    assert!(report.contains("not drawn as stated"));
}

/// Labels had for examples chosen by no draw (the 40 the judges call most positive,
/// nearly all of class 1), then a plan of 100 more beside them (`--labeled`): the plan
/// keeps them at inclusion 1 with their labels, the 100 are drawn among the others, and
/// once labeled the whole reads as drawn (no warning) and its rates hold the true rate.
#[test]
fn a_plan_of_more_beside_labels_had_keeps_them_and_the_rate_unbiased() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    simulated(d);
    let t = truth(d);
    let by_p = most_positive_first(d);
    let mut had = String::from("example_id,label\n");
    by_p[..40].iter().for_each(|(id, _)| had.push_str(&format!("{id},{}\n", t[id])));
    let had_path = d.join("had.csv");
    fs::write(&had_path, had).unwrap();
    let (judgments, plan) = (d.join("judgments.csv"), d.join("more.csv"));
    let args = |budget: &str| {
        let mut a = vec!["label-plan", "--judgments", s(&judgments), "--labeled", s(&had_path), "--budget"];
        a.extend([budget, "--seed", "4", "--out", s(&plan), "--force"]);
        a.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let run = |budget: &str| jury(&args(budget).iter().map(String::as_str).collect::<Vec<_>>());
    let out = run("100");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("the 40 labeled in") && said.contains("and 100 more to label"), "{said}");
    assert!(said.contains("label every empty cell of its label column"), "{said}");
    let text = fs::read_to_string(&plan).unwrap();
    assert_eq!(text.lines().next(), Some("example_id,inclusion_probability,plan_size,planned_from,label"));
    let rows: Vec<Vec<&str>> = text.lines().skip(1).map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 140);
    let kept: Vec<&Vec<&str>> = rows.iter().filter(|r| !r[4].is_empty()).collect();
    assert_eq!(kept.len(), 40);
    assert!(kept.iter().all(|r| r[1] == "1.000000000" && t[r[0]] == r[4]), "{kept:?}");
    assert!(rows.iter().all(|r| r[2] == "140" && r[3] == "1500"), "{text}");
    // The new rows' probabilities are chances among the 1,460 others, none certain.
    let drawn: Vec<f64> = rows.iter().filter(|r| r[4].is_empty()).map(|r| r[1].parse::<f64>().unwrap()).collect();
    assert!(drawn.len() == 100 && drawn.iter().all(|&p| p > 0.0 && p < 1.0), "{drawn:?}");
    // Labeled, the whole plan reads as drawn, and its rates hold the true rate.
    let labeled: String = std::iter::once(text.lines().next().unwrap().to_owned())
        .chain(rows.iter().map(|r| format!("{},{},{},{},{}", r[0], r[1], r[2], r[3], t[r[0]])))
        .map(|l| l + "\n")
        .collect();
    let cal = d.join("more-labeled.csv");
    fs::write(&cal, labeled).unwrap();
    let (m, said) = aggregate_calibrated(d, &cal, &[]);
    let c = &m["calibration"];
    assert_eq!((c["n_calibration"].as_u64(), c["sampling"].as_str()), (Some(140), Some("planned")), "{c}");
    assert_eq!(c["n_inclusion_one"], 40, "{c}");
    assert!(said.contains("140 calibration labels (planned, 40 of them at inclusion probability 1"), "{said}");
    assert_eq!(c["balance"]["plausible"], true, "{c}");
    assert!(!said.contains("warning: the calibration examples"), "{said}");
    let rate = t.values().filter(|v| *v == "1").count() as f64 / t.len() as f64;
    for e in ["labels-only", "ppi-jury"] {
        let r = &c["rates"][e];
        assert!(r["low"].as_f64().unwrap() <= rate && rate <= r["high"].as_f64().unwrap(), "{e}: {r} vs {rate}");
    }
    // More than the examples without a label: one line, nothing written.
    fs::remove_file(&plan).unwrap();
    let out = run("1461");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("1461 more labels is more than the 1460 examples judged that have none yet"), "{err}");
    assert!(err.lines().count() == 1 && !plan.exists(), "{err}");
}

/// Five judges casting hard verdicts independently given the truth: the unlabeled votes
/// confirm the label-free model, and the calibrated method keeps its posterior as it is.
#[test]
fn hard_independent_votes_keep_the_label_free_posterior() {
    use rand::{Rng, SeedableRng};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let acc = [0.85, 0.8, 0.75, 0.7, 0.65];
    let (mut judgments, mut labels, mut cal) =
        ("example_id,judge,p\n".to_owned(), "example_id,label\n".to_owned(), "example_id,label\n".to_owned());
    let (mut flipped, mut flipped_cal) = ("example_id,label\n".to_owned(), "example_id,label\n".to_owned());
    for i in 0..3000 {
        let t = u8::from(rng.random::<f64>() < 0.4);
        for (j, a) in acc.iter().enumerate() {
            let vote = if rng.random::<f64>() < *a { t } else { 1 - t };
            judgments.push_str(&format!("x{i},j{j},{vote}\n"));
        }
        labels.push_str(&format!("x{i},{t}\n"));
        flipped.push_str(&format!("x{i},{}\n", 1 - t));
        if i < 100 {
            cal.push_str(&format!("x{i},{t}\n"));
            flipped_cal.push_str(&format!("x{i},{}\n", 1 - t));
        }
    }
    fs::write(d.join("judgments.csv"), judgments).unwrap();
    fs::write(d.join("labels.csv"), labels).unwrap();
    fs::write(d.join("calibration.csv"), cal).unwrap();
    let out_dir = d.join("out");
    let (m, _) = aggregate_calibrated(d, &d.join("calibration.csv"), &[]);
    let c = &m["calibration"];
    assert_eq!(c["label_free_kept"], true, "{c}");
    assert_eq!(c["stack"]["label-free"], 1.0, "{c}");
    let method = c["label_free_method"].as_str().unwrap();
    let predictions = fs::read_to_string(out_dir.join("predictions.csv")).unwrap();
    let header: Vec<&str> = predictions.lines().next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("{name} in {header:?}"));
    let (lf, calibrated) = (col(&format!("{method}_p")), col("calibrated_p"));
    for line in predictions.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let (a, b): (f64, f64) = (f[lf].parse().unwrap(), f[calibrated].parse().unwrap());
        assert!((a - b).abs() < 1e-3, "{line}");
    }
    let report = fs::read_to_string(out_dir.join("report.html")).unwrap();
    assert!(report.contains("keeps its posterior as it is"));
    // The replay says so too.
    let replay = d.join("replay");
    let args = replay_args(d, "50", "2", &replay);
    let out = jury(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_str(&fs::read_to_string(replay.join("calibration.json")).unwrap()).unwrap();
    assert_eq!(r["jury"]["label_free_kept"], true);
    assert!(r["budgets"].as_array().unwrap().iter().all(|b| b["label_free_swapped"] == 0), "{r}");
    let page = fs::read_to_string(replay.join("report.html")).unwrap();
    assert!(page.contains("the label-free posterior as it is") && page.contains("swapped in 0 of 4 draws"));

    // The same votes, labels whose 1 is the judges' No (the question asked the other way
    // round): the votes confirm the label-free model all the same, and only the labels
    // can say that its class 1 is their 0.
    let flip = tempfile::tempdir().unwrap();
    let f = flip.path();
    fs::copy(d.join("judgments.csv"), f.join("judgments.csv")).unwrap();
    fs::write(f.join("labels.csv"), flipped).unwrap();
    fs::write(f.join("calibration.csv"), flipped_cal).unwrap();
    let (m, _) = aggregate_calibrated(f, &f.join("calibration.csv"), &[]);
    let c = &m["calibration"];
    assert_eq!((&c["label_free_kept"], &c["label_free_swapped"]), (&Value::Bool(true), &Value::Bool(true)), "{c}");
    let (calibrated, label_free) = (&m["methods"]["calibrated"]["accuracy"], &m["methods"][method]["accuracy"]);
    assert!(calibrated.as_f64().unwrap() > 0.85 && label_free.as_f64().unwrap() < 0.15, "{calibrated} {label_free}");
    assert!(fs::read_to_string(f.join("out/report.html")).unwrap().contains("with its classes swapped"));
}

#[test]
fn replay_writes_calibration_json_in_its_contract_shape() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    simulated(d);
    let out_dir = d.join("replay");
    let owned = replay_args(d, "50,100", "20", &out_dir);
    let args: Vec<&str> = owned.iter().map(String::as_str).collect();
    let out = jury(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("calibrated       accuracy read off the labels: coverage"), "{said}");
    let text = fs::read_to_string(out_dir.join("calibration.json")).unwrap();
    let r: Value = serde_json::from_str(&text).unwrap();
    let budgets = r["budgets"].as_array().unwrap();
    assert_eq!(budgets.len(), 4);
    // Soft judgments: the label-free posterior is never kept as it is.
    assert_eq!(r["jury"]["label_free_kept"], false);
    let page = fs::read_to_string(out_dir.join("report.html")).unwrap();
    assert!(page.contains("the stack, fitted on each draw"));
    assert!(page.contains("0 of 80 (every draw is a true one"));
    assert!(page.contains("Accuracy read off the calibration labels: coverage"));
    assert!(page.contains("the black tick is the true rate") && page.contains(", error "), "{page}");
    for b in budgets {
        assert!(b["budget"] == 50 || b["budget"] == 100);
        assert!(b["sampling"] == "uniform" || b["sampling"] == "planned");
        assert_eq!(b["trials"], 20);
        // Every draw is a true one: the balance check passes them all.
        assert_eq!(b["unbalanced"], 0, "{b}");
        for m in ["calibrated", "recommended", "picked-judge", "logistic"] {
            let a = b["methods"][m]["mean_accuracy"].as_f64().unwrap();
            assert!((0.5..=1.0).contains(&a), "{m}: {a}");
            assert!(b["methods"][m]["p10_accuracy"].as_f64().unwrap() <= a);
        }
        for e in ["labels-only", "rogan-gladen", "ppi-best-judge", "ppi-jury"] {
            let c = b["estimators"][e]["coverage"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&c));
            assert!(b["estimators"][e]["mean_width"].as_f64().unwrap() > 0.0);
            // The estimate less the true rate, within the interval's reach on average.
            let error = b["estimators"][e]["mean_error"].as_f64().unwrap();
            assert!(error.abs() < b["estimators"][e]["mean_width"].as_f64().unwrap(), "{e}: {error}");
        }
        for m in ["calibrated", "recommended"] {
            let c = b["accuracy_estimates"][m]["coverage"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&c), "{m}: {c}");
            assert!(b["accuracy_estimates"][m]["mean_width"].as_f64().unwrap() > 0.0);
        }
    }
    // The same seed writes the same file.
    let again = jury(&[&args[..], &["--force"]].concat());
    assert!(again.status.success());
    assert_eq!(fs::read_to_string(out_dir.join("calibration.json")).unwrap(), text);
    // `jury report` writes the same page again from calibration.json alone.
    fs::remove_file(out_dir.join("report.html")).unwrap();
    let report = jury(&["report", s(&out_dir)]);
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    assert_eq!(fs::read_to_string(out_dir.join("report.html")).unwrap(), page);
}

#[test]
fn bad_calibration_input_is_one_line_naming_the_file_and_line_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    simulated(d);
    let t = truth(d);
    let mut ids: Vec<&String> = t.keys().collect();
    ids.sort();
    let cases: Vec<(&str, String, &str)> = vec![
        ("unknown", format!("example_id,label\n{},1\nnot-an-example,0\n", ids[0]), "line 3"),
        ("not-binary", format!("example_id,label\n{},1\n{},2\n", ids[0], ids[1]), "line 3"),
        ("one-class", format!("example_id,label\n{},1\n{},1\n{},1\n", ids[0], ids[1], ids[2]), "one class"),
        (
            "rows-removed",
            format!("example_id,inclusion_probability,plan_size,label\n{},0.5,3,1\n{},0.5,3,0\n", ids[0], ids[1]),
            "2 rows of a plan of 3",
        ),
        (
            "bad-inclusion",
            format!("example_id,label,inclusion_probability\n{},1,0.5\n{},0,1.5\n", ids[0], ids[1]),
            "line 3",
        ),
    ];
    for (name, body, says) in cases {
        let file = d.join(format!("{name}.csv"));
        fs::write(&file, body).unwrap();
        let out_dir = d.join(format!("out-{name}"));
        let out = jury(&[
            "aggregate",
            "--judgments",
            s(&d.join("judgments.csv")),
            "--calibration",
            s(&file),
            "--out",
            s(&out_dir),
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}");
        assert_eq!(err.trim().lines().count(), 1, "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
        if says.starts_with("line") {
            assert!(err.contains(&format!("{name}.csv")), "{name}: {err}");
        }
        assert!(!out_dir.exists(), "{name}: wrote {}", out_dir.display());
    }
    // A budget larger than the data.
    let plan = d.join("plan.csv");
    let out = jury(&["label-plan", "--judgments", s(&d.join("judgments.csv")), "--budget", "5000", "--out", s(&plan)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--budget 5000 is more than the 1500 examples"), "{err}");
    assert!(err.contains("judgments.csv"), "the error names the file: {err}");
    assert!(!plan.exists());
    let replay = d.join("replay");
    let replay_at = |budget: &str| {
        let (j, l) = (d.join("judgments.csv"), d.join("labels.csv"));
        let args = [
            "simulate",
            "calibration",
            "--judgments",
            s(&j),
            "--labels",
            s(&l),
            "--budget",
            budget,
            "--out",
            s(&replay),
        ];
        let out = jury(&args);
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, err) = replay_at("100,2000");
    assert!(!ok && err.contains("--budget 2000 is more than the 1500 examples"), "{err}");
    assert!(err.contains("judgments.csv"), "the error names the file: {err}");
    assert!(!replay.exists());
    // Every example as calibration labels leaves a replay nothing to score its methods on.
    let (ok, err) = replay_at("100,1500");
    assert!(!ok && err.contains("--budget 1500 leaves none of the 1500 examples"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!replay.exists());
    // Labels of one class leave a replay nothing to draw; one example of class 1 leaves a
    // budget of 2 too little: each names its flag, and nothing is written.
    for (name, ones, says) in [("all-zero", 0, "--labels labels every example 0"), ("one-one", 1, "--budget")] {
        let labels = d.join(format!("{name}.csv"));
        let body: String = ids.iter().enumerate().map(|(i, id)| format!("{id},{}\n", u8::from(i < ones))).collect();
        fs::write(&labels, format!("example_id,label\n{body}")).unwrap();
        let out_dir = d.join(format!("replay-{name}"));
        let judgments = d.join("judgments.csv");
        let args = ["simulate", "calibration", "--judgments", s(&judgments), "--labels", s(&labels)];
        let out = jury(&[&args[..], &["--budget", "2", "--trials", "3", "--out", s(&out_dir)]].concat());
        // The replay's progress lines may come first; the error is one line, the last.
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.trim().lines().last().unwrap_or_default();
        assert!(!out.status.success() && last.starts_with("error:") && last.contains(says), "{name}: {err}");
        assert_eq!(err.lines().filter(|l| l.starts_with("error")).count(), 1, "{name}: {err}");
        assert!(!out_dir.exists(), "{name}");
    }
}
