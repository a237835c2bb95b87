//! `jury winrate`, `jury rank` and `jury rank-sim` end to end: real files written here
//! from simulations with a known truth, the real binary, its JSON outputs checked.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use crate::common::jury;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A comparisons table for one generator pair with true win rate `p`, evaluators of
/// accuracies (q0, q1) and a human label on every comparison.
fn comparisons(path: &Path, p: f64, evaluators: &[(f64, f64)], n: usize, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut csv = String::from("comparison_id,generator_0,generator_1,evaluator,vote\n");
    for i in 0..n {
        let h = rng.random_bool(p);
        let _ = writeln!(csv, "c{i},base,new,human,{}", u8::from(h));
        for (e, &(q0, q1)) in evaluators.iter().enumerate() {
            let v = if h { rng.random_bool(q1) } else { !rng.random_bool(q0) };
            let _ = writeln!(csv, "c{i},base,new,llm{e},{}", u8::from(v));
        }
    }
    fs::write(path, csv).unwrap();
}

fn winrate(dir: &Path, file: &Path, method: &str, prior: &str) -> (std::process::Output, Option<Value>) {
    let out_dir = dir.join(format!("out-{method}-{}", prior.replace([':', '/'], "_")));
    let out = jury(&[
        "winrate",
        "--comparisons",
        path_str(file),
        "--method",
        method,
        "--prior",
        prior,
        "--out",
        path_str(&out_dir),
    ]);
    let json = fs::read_to_string(out_dir.join("winrate.json")).ok().map(|s| serde_json::from_str(&s).unwrap());
    (out, json)
}

#[test]
fn winrate_calibrates_a_biased_evaluator_pool_and_refuses_what_it_cannot_know() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("comparisons.csv");
    // q0 = 0.9, q1 = 0.6, p = 0.3: each evaluator's observed rate is 0.25.
    comparisons(&file, 0.3, &[(0.9, 0.6); 3], 1000, 11);

    let (out, json) = winrate(dir.path(), &file, "bwrs", "in-dist:0.1");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let pair = &json.unwrap()["pairs"][0];
    let (human, est, obs) = (
        pair["human_win_rate"].as_f64().unwrap(),
        pair["estimate"].as_f64().unwrap(),
        pair["observed"].as_f64().unwrap(),
    );
    assert_eq!(pair["n_revealed_labels"], 100);
    assert!((est - human).abs() < 0.06, "bwrs {est} vs human {human}");
    assert!((obs - 0.25).abs() < 0.03, "observed {obs}");
    let [lo, hi] = [pair["interval"][0].as_f64().unwrap(), pair["interval"][1].as_f64().unwrap()];
    assert!(lo < est && est < hi);
    // Its page: the pair's estimate, interval and human rate as winrate.json has them.
    let page = fs::read_to_string(dir.path().join("out-bwrs-in-dist_0.1/report.html")).unwrap();
    assert!(page.contains("<section id=\"winrate\"") && page.contains("<svg"), "{page}");
    assert!(page.contains(&format!("<td>{human:.3}</td><td>{obs:.3}</td><td>{est:.3}</td><td>{lo:.3} - {hi:.3}</td>")));

    let (out, json) = winrate(dir.path(), &file, "bayesian-ds", "none");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let pair = &json.unwrap()["pairs"][0];
    assert!((pair["estimate"].as_f64().unwrap() - pair["human_win_rate"].as_f64().unwrap()).abs() < 0.06, "{pair}");

    // BWRS without human labels has no accuracies to divide by: a usage error, exit 2.
    let (out, json) = winrate(dir.path(), &file, "bwrs", "none");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--prior in-dist:RATIO or ood:FILE"));
    assert!(json.is_none(), "nothing written");

    // Evaluators at chance (q0 + q1 = 1) and no labels: no number, a reason.
    let chance = dir.path().join("chance.csv");
    comparisons(&chance, 0.3, &[(0.6, 0.4), (0.5, 0.5), (0.7, 0.3)], 1000, 12);
    let (out, json) = winrate(dir.path(), &chance, "bayesian-ds", "none");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let pair = &json.unwrap()["pairs"][0];
    assert!(pair["estimate"].is_null(), "{pair}");
    assert!(pair["unidentifiable"].as_str().unwrap().contains("agree more than chance"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("unidentif."));
}

/// `jury import winrate-hanna` on a file shaped like HANNA's (one row per
/// generator, each cell a list of 96 per-story numbers): the anchor against every other
/// generator, human votes from the summed criteria (equal sums are no vote), LLM votes
/// from each LLM's mean over its 4 prompt variants; `jury winrate` reads the result.
#[test]
fn hanna_converter_votes_from_summed_scores_and_jury_reads_its_table() {
    const CRITERIA: [&str; 6] = ["Relevance", "Coherence", "Empathy", "Surprise", "Engagement", "Complexity"];
    const LLMS: [&str; 5] = ["Beluga-13B", "ChatGPT", "Llama-13B", "Mistral-7B", "OrcaPlatypus"];
    let dir = tempfile::tempdir().unwrap();
    let mut header = vec!["Model".to_owned()];
    header.extend(CRITERIA.iter().map(|c| c.to_string()));
    header.extend(LLMS.iter().flat_map(|l| (1..=4).map(move |p| format!("{l} AVG {p}"))));
    header.push("BLEU".into());
    // Story i: GPT-2 scores 3 on every criterion; "up" scores 4 on even stories and 3 on
    // odd ones (a tie); "down" scores 2. ChatGPT's prompt 1 prefers GPT-2 on every story,
    // its prompts 2-4 the other generator by less, so its mean over prompts follows
    // prompts 2-4 only where they outweigh prompt 1.
    let list = |f: &dyn Fn(usize) -> f64| {
        format!("\"[{}]\"", (0..96).map(|i| format!("{:.1}", f(i))).collect::<Vec<_>>().join(", "))
    };
    let row = |model: &str, human: &dyn Fn(usize) -> f64, llm: &dyn Fn(&str, usize, usize) -> f64| {
        let mut cells = vec![model.to_owned()];
        cells.extend(CRITERIA.iter().map(|_| list(human)));
        cells.extend(LLMS.iter().flat_map(|l| (1..=4).map(move |p| list(&move |i| llm(l, p, i)))));
        cells.push(list(&|_| 0.5));
        cells.join(",")
    };
    let gpt2 = row("GPT-2", &|_| 3.0, &|l, p, _| if l == "ChatGPT" && p == 1 { 4.0 } else { 3.0 });
    let up = row("up", &|i| if i % 2 == 0 { 4.0 } else { 3.0 }, &|l, p, i| match (l, p) {
        ("ChatGPT", 1) => 1.0,
        ("ChatGPT", _) => 3.0 + if i < 48 { 2.0 } else { 0.5 },
        _ => 4.0,
    });
    let down = row("down", &|_| 2.0, &|_, _, _| 1.0);
    let file = dir.path().join("hanna_metric_scores_llm.csv");
    fs::write(&file, format!("{}\n{gpt2}\n{up}\n{down}\n", header.join(","))).unwrap();
    let imported = dir.path().join("hanna");
    let run = jury(&["import", "winrate-hanna", "--input", path_str(dir.path()), "--out", path_str(&imported)]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let out_csv = imported.join("comparisons.csv");
    let table = fs::read_to_string(&out_csv).unwrap();
    let rows: Vec<Vec<&str>> = table.lines().skip(1).map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 2 * 96 * 6, "two pairs, 96 stories, the human and 5 LLMs");
    let vote = |g1: &str, story: usize, evaluator: &str| {
        let r = rows.iter().find(|r| r[0] == story.to_string() && r[2] == g1 && r[3] == evaluator).unwrap();
        assert_eq!(r[1], "GPT-2", "the anchor is generator_0");
        r[4].to_owned()
    };
    assert_eq!(vote("up", 0, "human"), "1");
    assert_eq!(vote("up", 1, "human"), "", "equal sums are a tie");
    assert_eq!(vote("down", 5, "human"), "0");
    assert_eq!(vote("up", 7, "Beluga-13B"), "1");
    // ChatGPT, mean over prompts: GPT-2 (4 + 3 + 3 + 3) / 4 = 3.25; "up" (1 + 5 + 5 + 5) / 4
    // = 4 on stories 0-47, (1 + 3.5 * 3) / 4 = 2.875 on 48-95.
    assert_eq!(vote("up", 10, "ChatGPT"), "1");
    assert_eq!(vote("up", 60, "ChatGPT"), "0");
    assert_eq!(vote("down", 60, "OrcaPlatypus"), "0");

    let (out, json) = winrate(dir.path(), &out_csv, "observed", "none");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let pairs = json.unwrap()["pairs"].as_array().unwrap().clone();
    assert_eq!(pairs.len(), 2);
    let up = pairs.iter().find(|p| p["generator_1"] == "up").unwrap();
    assert_eq!(up["human_win_rate"].as_f64().unwrap(), 1.0, "48 wins, 48 ties: {up}");
    // Four LLMs always prefer "up", ChatGPT on half the stories: (4 + 0.5) / 5.
    assert!((up["observed"].as_f64().unwrap() - 0.9).abs() < 1e-9, "{up}");
}

#[test]
fn winrate_rejects_a_bad_vote_naming_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.csv");
    fs::write(&file, "comparison_id,generator_0,generator_1,evaluator,vote\n1,a,b,gpt,1\n2,a,b,gpt,B\n").unwrap();
    let (out, json) = winrate(dir.path(), &file, "observed", "none");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("c.csv line 3") && err.contains("`vote`") && err.contains("`B`"), "{err}");
    assert!(json.is_none());
}

/// Multiple-choice answers of models with the given accuracies plus the reference
/// answers, as a responses table.
fn responses(path: &Path, acc: &[f64], n: usize, options: u32, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut csv = String::from("prompt_id,model,response\n");
    for d in 0..n {
        let truth = rng.random_range(0..options);
        let _ = writeln!(csv, "q{d},reference,{truth}");
        for (m, &a) in acc.iter().enumerate() {
            let ans = if rng.random_bool(a) { truth } else { (truth + rng.random_range(1..options)) % options };
            let _ = writeln!(csv, "q{d},model-{m},{ans}");
        }
    }
    fs::write(path, csv).unwrap();
}

#[test]
fn rank_recovers_the_reference_order_without_reading_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("responses.csv");
    responses(&file, &[0.3, 0.95, 0.6, 0.8, 0.45], 500, 30, 5);
    for method in ["ftr", "gtr", "mca"] {
        let out_dir = dir.path().join(method);
        let out = jury(&["rank", "--responses", path_str(&file), "--method", method, "--out", path_str(&out_dir)]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let r: Value = serde_json::from_str(&fs::read_to_string(out_dir.join("ranking.json")).unwrap()).unwrap();
        assert_eq!(r["n_models"], 5, "the reference is not ranked");
        let order: Vec<&str> = r["ranking"].as_array().unwrap().iter().map(|x| x["model"].as_str().unwrap()).collect();
        let want = ["model-1", "model-3", "model-2", "model-4", "model-0"];
        if method == "gtr" {
            // GTR orders its first two at random (Algorithm 1).
            assert_eq!(order[2..], want[2..], "{method}: {order:?}");
        } else {
            assert_eq!(order, want, "{method}");
            assert_eq!(r["reference"]["rbo"].as_f64().unwrap(), 1.0);
            assert_eq!(r["reference"]["spearman"].as_f64().unwrap(), 1.0);
            let page = fs::read_to_string(out_dir.join("report.html")).unwrap();
            assert!(page.contains("<section id=\"ranking\"") && page.contains("RBO 1.000"), "{page}");
            assert!(page.contains("<td>1</td><td>model-1</td>"), "{page}");
        }
        assert!(r["evaluations"].as_u64().unwrap() > 0);
    }
}

#[test]
fn rank_sim_reproduces_the_papers_multiple_choice_table() {
    let dir = tempfile::tempdir().unwrap();
    // The setting docs/reproduction/winrate-ranking.md reports: a grid of benchmark shapes pooled per row.
    let out = jury(&[
        "rank-sim",
        "--models",
        "10,25",
        "--options",
        "2,5,10,50",
        "--questions",
        "100,500",
        "--best",
        "0.5,0.7,0.9",
        "--trials",
        "5",
        "--out",
        path_str(dir.path()),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sim: Value = serde_json::from_str(&fs::read_to_string(dir.path().join("rank-sim.json")).unwrap()).unwrap();
    // The triplet-ranking paper's Table 2 RBO (mean, std) of FTR and GTR at best accuracy 50/70/90%.
    let paper =
        [(0.5, (0.832, 0.22), (0.723, 0.19)), (0.7, (0.927, 0.15), (0.833, 0.14)), (0.9, (0.981, 0.08), (0.919, 0.09))];
    for (row, (best, ftr, gtr)) in sim["rows"].as_array().unwrap().iter().zip(paper) {
        assert_eq!(row["best"].as_f64().unwrap(), best);
        for (name, (mean, std)) in [("ftr", ftr), ("gtr", gtr)] {
            let got = row["rbo"][name]["mean"].as_f64().unwrap();
            assert!((got - mean).abs() <= std, "{name} at {best}: {got} vs paper {mean} ± {std}");
        }
    }
}

#[test]
fn ftr_degrades_less_than_mca_under_noisy_equality() {
    let dir = tempfile::tempdir().unwrap();
    // The triplet-ranking paper's Figure 4 setting: 10 models, 50 questions.
    let out = jury(&[
        "rank-sim",
        "--models",
        "10",
        "--questions",
        "50",
        "--options",
        "10",
        "--best",
        "0.7,0.9",
        "--noise",
        "0,0.3",
        "--trials",
        "20",
        "--out",
        path_str(dir.path()),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sim: Value = serde_json::from_str(&fs::read_to_string(dir.path().join("rank-sim.json")).unwrap()).unwrap();
    let rbo = |best: f64, noise: f64, m: &str| {
        sim["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["best"].as_f64() == Some(best) && r["noise"].as_f64() == Some(noise))
            .map(|r| r["rbo"][m]["mean"].as_f64().unwrap())
            .unwrap()
    };
    for best in [0.7, 0.9] {
        let (ftr, mca) = (rbo(best, 0.3, "ftr"), rbo(best, 0.3, "mca"));
        assert!(ftr > mca, "best {best}, noise 0.3: FTR {ftr} vs MCA {mca}");
        let (ftr_drop, mca_drop) = (rbo(best, 0.0, "ftr") - ftr, rbo(best, 0.0, "mca") - mca);
        assert!(ftr_drop < mca_drop, "best {best}: FTR lost {ftr_drop}, MCA {mca_drop}");
    }
}

/// GTR with a real LLM (SmolLM2-135M through mistral.rs) as the evaluation function, on
/// three models and two prompts of the team's demo set: a proper ranking comes out, and
/// a rerun takes every judgment from the cache. Needs `scripts/fetch-judges.sh --small`.
#[test]
fn rank_with_a_real_llm_evaluation_resumes_from_its_cache() {
    let root = crate::common::repo_root();
    let model = root.join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(model.is_file(), "{} is missing: run scripts/fetch-judges.sh --small", model.display());
    let dir = tempfile::tempdir().unwrap();
    let demo = fs::read_to_string(root.join("datasets/demo-rank.csv")).unwrap();
    let small: String = demo
        .lines()
        .enumerate()
        .filter(|(i, l)| {
            *i == 0
                || ((l.starts_with("q1,") || l.starts_with("q2,"))
                    && !l.ends_with("model-d")
                    && !l.contains(",model-d,"))
        })
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    let file = dir.path().join("responses.csv");
    fs::write(&file, &small).unwrap();
    let out_dir = dir.path().join("out");
    let (eval, prompt) = (format!("llm:{}", model.display()), root.join("prompts/triplet-reference.yaml"));
    let args = [
        "rank",
        "--responses",
        path_str(&file),
        "--method",
        "gtr",
        "--eval",
        &eval,
        "--prompt",
        path_str(&prompt),
        "--out",
        path_str(&out_dir),
    ];
    let first = jury(&args);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let read =
        || -> Value { serde_json::from_str(&fs::read_to_string(out_dir.join("ranking.json")).unwrap()).unwrap() };
    let r = read();
    let mut models: Vec<String> =
        r["ranking"].as_array().unwrap().iter().map(|x| x["model"].as_str().unwrap().to_owned()).collect();
    let order = models.clone();
    models.sort();
    assert_eq!(models, ["model-a", "model-b", "model-c"], "a permutation of the three models");
    // One triplet: each of the three models judges the other two on both prompts.
    assert_eq!(r["evaluations"], 3);
    let cached = fs::read_to_string(out_dir.join("cache.jsonl")).unwrap();
    // 3 comparisons x 2 prompts, one order; identical prompts (two judges with the same
    // answer comparing the same two answers in the same order) share one cache entry.
    let keys: std::collections::HashSet<&str> = cached.lines().map(|l| &l[..80]).collect();
    assert_eq!(keys.len(), cached.lines().count(), "one line per key");
    assert!((1..=6).contains(&keys.len()), "{} judgments", keys.len());
    for line in cached.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let y = v["value"]["y"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&y) && v["value"]["mass"].as_f64().unwrap() > 0.0, "{line}");
    }

    let second = jury(&args);
    assert!(second.status.success(), "{}", String::from_utf8_lossy(&second.stderr));
    assert_eq!(fs::read_to_string(out_dir.join("cache.jsonl")).unwrap(), cached, "nothing re-asked or duplicated");
    let again: Vec<String> =
        read()["ranking"].as_array().unwrap().iter().map(|x| x["model"].as_str().unwrap().to_owned()).collect();
    assert_eq!(again, order, "the same ranking from the same cached judgments and seed");
}
