//! `jury run` killed with SIGKILL at 20 moments (loading, judging, aggregating,
//! publishing) and run again each time: after every kill no judgment is lost, no cache
//! line is duplicated and no temporary file is left; after the last run the output files
//! equal a clean run's byte for byte (manifest.json, which holds timings, and metrics.json's
//! `seconds` and report.html's total time excepted). Real judge: SmolLM2-135M
//! (`scripts/fetch-judges.sh --small`).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::common::{jury_bin, repo_root};

const KILLS: usize = 20;
const EXAMPLES: usize = 12;
const SEED: u64 = 1;

/// Writes `dir/NAME.yaml` for SmolLM2 on `EXAMPLES` demo facts, output in `dir/NAME`.
fn config(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let root = repo_root();
    let model = root.join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(model.is_file(), "{} is missing: run scripts/fetch-judges.sh --small", model.display());
    let out = dir.join(name);
    let cfg = dir.join(format!("{name}.yaml"));
    let yaml = format!(
        "name: torture\n\
         dataset: {{name: demo-facts, path: {data}, limit: {EXAMPLES}, seed: 3}}\n\
         prompt: {prompt}\n\
         judges:\n  - name: smollm2-135m\n    gguf: {model}\n\
         runtime: {{max_concurrency: 1, prefix_cache: false, max_prompt_tokens: 1024}}\n\
         output: {out}\n",
        data = root.join("datasets/demo-facts.csv").display(),
        prompt = root.join("prompts/demo-facts.yaml").display(),
        model = model.display(),
        out = out.display(),
    );
    std::fs::write(&cfg, yaml).unwrap();
    (cfg, out)
}

fn run(cfg: &Path) {
    let out = Command::new(jury_bin()).args(["run", cfg.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "jury run failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// The published files (not the cache, the manifest or jury's marker and lock), with the
/// folder's own path, metrics.json's timings and report.html's total time taken out.
fn published(out: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(out).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name == "cache.jsonl" || name == "manifest.json" || name.starts_with('.') {
            continue;
        }
        let text = std::fs::read_to_string(out.join(&name)).unwrap().replace(out.to_str().unwrap(), "OUT");
        let text = match name.as_str() {
            "metrics.json" => without_numbers_after(&text, "\"seconds\": "),
            "report.html" => without_numbers_after(&text, "<td>total time</td><td>"),
            _ => text,
        };
        files.insert(name, text);
    }
    files
}

/// `text` with the number after each `marker` removed.
fn without_numbers_after(text: &str, marker: &str) -> String {
    let mut parts = text.split(marker);
    let mut kept = parts.next().unwrap_or_default().to_owned();
    for part in parts {
        kept.push_str(marker);
        kept.push_str(part.trim_start_matches(|c: char| c.is_ascii_digit() || ".e+-".contains(c)));
    }
    kept
}

/// The cache's judgments, each whole and once; no temporary file in the folder, and once
/// a run has finished, no staging folder either (a killed run may leave one; the next run
/// clears it).
fn check_dir(out: &Path, when: &str, finished: bool) -> usize {
    let strays: Vec<String> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(".tmp") || (finished && n == ".jury-staging"))
        .collect();
    assert!(strays.is_empty(), "{when}: stray files left: {strays:?}");
    let Ok(text) = std::fs::read_to_string(out.join("cache.jsonl")) else { return 0 };
    let mut lines: Vec<&str> = text.split('\n').collect();
    lines.pop(); // after the last newline: a line being written when the kill came, or nothing
    let mut keys = HashSet::new();
    for line in &lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{when}: cache line {line}: {e}"));
        assert!(keys.insert(v["key"].to_string()), "{when}: duplicate cache line {line}");
    }
    keys.len()
}

#[test]
fn a_run_killed_twenty_times_loses_and_repeats_nothing_and_ends_as_a_clean_run() {
    let dir = tempfile::tempdir().unwrap();
    let (clean_cfg, clean_out) = config(dir.path(), "clean");
    let started = Instant::now();
    run(&clean_cfg);
    let mut estimate = started.elapsed().as_secs_f64();
    let want = published(&clean_out);
    let (cfg, out) = config(dir.path(), "killed");
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    let mut done = 0;
    for i in 0..KILLS {
        // Kills aim inside the run as it is now (once every judgment is cached a run only
        // loads and aggregates); every other one in its last fifth, where aggregation and
        // publishing happen.
        let delay = if i % 2 == 0 { rng.random_range(0.0..estimate) } else { rng.random_range(0.8..1.0) * estimate };
        let mut child = Command::new(jury_bin())
            .args(["run", cfg.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        let mut finished = false;
        while t0.elapsed().as_secs_f64() < delay {
            if child.try_wait().unwrap().is_some() {
                finished = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if finished {
            estimate = t0.elapsed().as_secs_f64();
        } else {
            child.kill().unwrap();
        }
        child.wait().unwrap();
        let when = format!("after kill {} at {delay:.2} s", i + 1);
        let now = if out.is_dir() { check_dir(&out, &when, false) } else { 0 };
        assert!(now >= done, "{when}: the cache lost judgments ({done} -> {now})");
        done = now;
    }
    run(&cfg);
    assert_eq!(check_dir(&out, "after the final run", true), EXAMPLES, "one cache line per judgment");
    let got = published(&out);
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "the files published");
    for (name, text) in &want {
        assert!(got[name] == *text, "{name} differs from the clean run's");
    }
}
