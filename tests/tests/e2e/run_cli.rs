//! `jury run` end to end with the smallest real judge (SmolLM2-135M through mistral.rs):
//! proper probabilities, and a run killed with SIGKILL resumes without redoing or
//! duplicating finished work. Needs `scripts/fetch-judges.sh --small` (CI runs it).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{jury, jury_bin, repo_root};
use serde_json::Value;

fn smollm() -> PathBuf {
    let p = repo_root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(p.is_file(), "{} is missing: run scripts/fetch-judges.sh --small", p.display());
    p
}

/// Writes `dir/exp.yaml`: SmolLM2 on `data` (a repository file) with `prompt`, output in
/// `dir/out`; `dataset_extra` adds keys to the dataset mapping.
fn experiment(dir: &Path, dataset: &str, data: &str, prompt: &str, dataset_extra: &str) -> PathBuf {
    let root = repo_root();
    let text = format!(
        "name: e2e\n\
         dataset: {{name: {dataset}, path: {data}, {dataset_extra}}}\n\
         prompt: {prompt}\n\
         judges:\n  - name: smollm2-135m\n    gguf: {model}\n\
         runtime: {{max_concurrency: 2, prefix_cache: false, max_prompt_tokens: 1024}}\n\
         output: {out}\n",
        data = root.join(data).display(),
        prompt = root.join(prompt).display(),
        model = smollm().display(),
        out = dir.join("out").display(),
    );
    let p = dir.join("exp.yaml");
    fs::write(&p, text).unwrap();
    p
}

fn config(dir: &Path, limit: usize) -> PathBuf {
    experiment(
        dir,
        "demo-facts",
        "datasets/demo-facts.csv",
        "prompts/demo-facts.yaml",
        &format!("limit: {limit}, seed: 3"),
    )
}

fn lines(p: &Path) -> Vec<String> {
    fs::read_to_string(p).map(|t| t.lines().map(str::to_owned).collect()).unwrap_or_default()
}

fn judge_manifest(dir: &Path) -> Value {
    let m: Value = serde_json::from_str(&fs::read_to_string(dir.join("out/manifest.json")).unwrap()).unwrap();
    m["judges"][0].clone()
}

#[test]
fn real_judge_gives_proper_probabilities_and_reruns_from_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 4);
    let out = jury(&["run", cfg.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows = lines(&dir.path().join("out/judgments.csv"));
    assert_eq!(rows[0], "example_id,judge,p,p_positive,p_negative,p_tie,mass,n_tokens,truncated,exact");
    assert_eq!(rows.len(), 5);
    for row in &rows[1..] {
        let f: Vec<&str> = row.split(',').collect();
        let (p, pos, neg, mass): (f64, f64, f64, f64) =
            (f[2].parse().unwrap(), f[3].parse().unwrap(), f[4].parse().unwrap(), f[6].parse().unwrap());
        assert!((0.0..=1.0).contains(&p) && mass > 0.0 && mass <= 1.0 + 1e-9, "{row}");
        assert!((p - pos / (pos + neg)).abs() < 1e-5, "{row}");
        assert!(f[7].parse::<usize>().unwrap() > 20, "token count {row}");
    }
    assert_eq!(judge_manifest(dir.path())["scored"], 4);
    let again = jury(&["run", cfg.to_str().unwrap()]);
    assert!(again.status.success());
    let m = judge_manifest(dir.path());
    assert_eq!((m["scored"].as_u64(), m["from_cache"].as_u64()), (Some(0), Some(4)));
    assert_eq!(lines(&dir.path().join("out/cache.jsonl")).len(), 4);
}

#[test]
fn killed_run_resumes_without_redoing_or_duplicating() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 16);
    let cache = dir.path().join("out/cache.jsonl");
    let mut child = Command::new(jury_bin()).args(["run", cfg.to_str().unwrap()]).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    while lines(&cache).len() < 3 && Instant::now() < deadline && child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // Whole lines only: a line torn by the kill is not finished work.
    let done_before = fs::read_to_string(&cache).unwrap_or_default().matches('\n').count();
    assert!(done_before >= 3, "the first run finished only {done_before} judgments");

    let out = jury(&["run", cfg.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m = judge_manifest(dir.path());
    let (scored, cached) = (m["scored"].as_u64().unwrap() as usize, m["from_cache"].as_u64().unwrap() as usize);
    assert_eq!(scored + cached, 16);
    assert!(
        cached >= done_before.min(16),
        "resumed run re-scored finished work: {cached} from cache, {done_before} done"
    );
    let all = lines(&cache);
    assert_eq!(all.len(), 16, "one cache line per judgment, no duplicates");
    let keys: std::collections::HashSet<String> =
        all.iter().map(|l| serde_json::from_str::<Value>(l).unwrap()["key"].as_str().unwrap().to_owned()).collect();
    assert_eq!(keys.len(), 16);
    assert_eq!(lines(&dir.path().join("out/judgments.csv")).len(), 17);
}

#[test]
fn pairwise_task_judged_in_both_orders_is_averaged_in_the_original_orientation() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = experiment(
        dir.path(),
        "llmbar",
        "datasets/demo-pairs.json",
        "prompts/chatbot-arena.yaml",
        "limit: 2, seed: 1, both_orders: true",
    );
    let out = jury(&["run", cfg.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(judge_manifest(dir.path())["scored"], 4, "two pairs, two orders each");
    let by_order = lines(&dir.path().join("out/judgments_by_order.csv"));
    assert_eq!(by_order.len(), 5);
    let p_of = |rows: &[String], id: &str, order: Option<&str>| -> f64 {
        rows.iter()
            .map(|r| r.split(',').collect::<Vec<_>>())
            .find(|f| f[0] == id && order.is_none_or(|o| f[2] == o))
            .map(|f| f[if order.is_some() { 3 } else { 2 }].parse().unwrap())
            .unwrap()
    };
    let judged = lines(&dir.path().join("out/judgments.csv"));
    assert_eq!(judged.len(), 3);
    for row in &judged[1..] {
        let id = row.split(',').next().unwrap();
        let (ab, ba) = (p_of(&by_order, id, Some("ab")), p_of(&by_order, id, Some("ba")));
        let tie: f64 = row.split(',').nth(5).unwrap().parse().unwrap();
        assert!(tie > 0.0 && tie < 1.0, "the tie verdict C is read: {row}");
        assert!((p_of(&judged, id, None) - (ab + ba) / 2.0).abs() < 2e-6, "{row} vs {ab} {ba}");
    }
    // The page shows how often the judge's verdict survives the swap: here, over the two
    // pairs, as judgments_by_order.csv says.
    let same = judged[1..]
        .iter()
        .filter(|row| {
            let id = row.split(',').next().unwrap();
            (p_of(&by_order, id, Some("ab")) > 0.5) == (p_of(&by_order, id, Some("ba")) > 0.5)
        })
        .count();
    let html = fs::read_to_string(dir.path().join("out/report.html")).unwrap();
    assert!(html.contains("<th>same verdict in both orders</th>"), "{html}");
    assert!(html.contains(&format!("<td>{:.3}</td></tr>", same as f64 / 2.0)), "{html}");
    // The run drew its page from values in memory; `jury report` reads the same values
    // back from the files.
    let again = jury(&["report", dir.path().join("out").to_str().unwrap()]);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    let redrawn = fs::read_to_string(dir.path().join("out/report.html")).unwrap();
    assert!(redrawn.contains(&format!("<td>{:.3}</td></tr>", same as f64 / 2.0)), "{redrawn}");
}

/// A `jury run` configuration that asks for context-dependent methods without a contexts
/// file gets one written from its examples, and the methods run on the real encoder.
#[test]
fn run_config_with_skillagg_writes_contexts_and_aggregates() {
    let root = repo_root();
    let encoder = root.join("models/all-MiniLM-L6-v2");
    assert!(encoder.join("model.safetensors").is_file(), "run scripts/fetch-encoder.sh");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let config = dir.path().join("exp.yaml");
    fs::write(
        &config,
        format!(
            "name: ctx\n\
             dataset: {{name: demo-facts, path: {data}, limit: 10, seed: 0}}\n\
             prompt: {prompt}\n\
             judges:\n  - name: smollm2-135m\n    gguf: {model}\n\
             runtime: {{max_concurrency: 1, max_prompt_tokens: 1024}}\n\
             aggregate: {{methods: [avg, skillagg], dev_size: 3, seeds: 1, epochs: 2, encoder_dir: {encoder}}}\n\
             output: {out}\n",
            data = root.join("datasets/demo-facts.csv").display(),
            prompt = root.join("prompts/demo-facts.yaml").display(),
            model = smollm().display(),
            encoder = encoder.display(),
            out = out.display(),
        ),
    )
    .unwrap();
    let run = Command::new(jury_bin())
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .args(["run", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let contexts = fs::read_to_string(out.join("contexts.csv")).unwrap();
    assert_eq!(contexts.lines().count(), 11, "a header and one line per example");
    let m: Value = serde_json::from_str(&fs::read_to_string(out.join("metrics.json")).unwrap()).unwrap();
    let acc = m["methods"]["skillagg"]["accuracy"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&acc), "{}", m["methods"]["skillagg"]);
    let resolved = out.join("config.resolved.yaml");
    assert!(fs::read_to_string(&resolved).unwrap().contains("contexts.csv"));
    // The resolved config, every default and null written out, is itself a config.
    let again = Command::new(jury_bin()).args(["run", "--dry-run", resolved.to_str().unwrap()]).output().unwrap();
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    // The run's report: its header from the manifest, every method's metrics.json
    // accuracy, the statements (the run's own contexts) beside the hardest examples.
    let html = fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<h1>ctx</h1>") && html.contains("<td>data set</td><td>demo-facts</td>"), "{html}");
    for method in ["avg", "skillagg"] {
        let acc = m["methods"][method]["accuracy"].as_f64().unwrap();
        assert!(html.contains(&format!("<td>{method}</td><td>{acc:.4}</td>")), "{method} {acc}");
    }
    assert!(html.contains("<th>mean captured mass</th><th>exact verdicts</th>"), "the manifest's judge columns");
    for section in ["judges", "methods", "calibration"] {
        assert!(html.contains(&format!("<section id=\"{section}\"")), "{section}");
    }
}

/// The path GPU users take (`model_id`, a Hugging Face model directory through the hub
/// cache) run for real: SmolLM2's GGUF weights converted to safetensors by
/// `scripts/gguf-to-safetensors.py` (fetch-judges.sh does it) sit in a directory laid out
/// like the hub cache, load offline by id, and give the probabilities of the GGUF judge
/// with dense weights, whose values they are. The GGUF judge takes the converted
/// directory's tokenizer (`tokenizer:`): mistral.rs 0.8.1's own tokenizer built from
/// this GGUF merges "\n\n" into one token where the model's tokenizer gives two, and
/// the comparison is only meaningful on identical token sequences.
#[test]
fn safetensors_judge_from_a_hub_layout_matches_the_gguf_judge() {
    let root = repo_root();
    let hf = root.join("models/smollm2-135m-hf");
    assert!(hf.join("model.safetensors").is_file(), "{} is missing: run scripts/fetch-judges.sh --small", hf.display());
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("hf/hub/models--team--smollm2-135m");
    let snap = repo.join("snapshots/0123abc");
    fs::create_dir_all(&snap).unwrap();
    fs::create_dir_all(repo.join("refs")).unwrap();
    fs::write(repo.join("refs/main"), "0123abc").unwrap();
    for f in ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"] {
        std::os::unix::fs::symlink(hf.join(f), snap.join(f)).unwrap();
    }
    let cfg = dir.path().join("exp.yaml");
    fs::write(
        &cfg,
        format!(
            "name: e2e\n\
             dataset: {{name: demo-facts, path: {data}, limit: 5, seed: 1}}\n\
             prompt: {prompt}\n\
             judges:\n  - name: gguf\n    gguf: {model}\n    tokenizer: {hf}\n  - name: hub\n    model_id: team/smollm2-135m\n\
             runtime: {{dequantize: true, max_concurrency: 2, prefix_cache: false, max_prompt_tokens: 1024}}\n\
             output: {out}\n",
            data = root.join("datasets/demo-facts.csv").display(),
            prompt = root.join("prompts/demo-facts.yaml").display(),
            model = smollm().display(),
            hf = hf.display(),
            out = dir.path().join("out").display(),
        ),
    )
    .unwrap();
    let out = Command::new(jury_bin())
        .env("HF_HOME", dir.path().join("hf"))
        .env("HF_HUB_OFFLINE", "1")
        .args(["run", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut by_judge: std::collections::BTreeMap<String, Vec<(String, f64, f64)>> = Default::default();
    for row in &lines(&dir.path().join("out/judgments.csv"))[1..] {
        let f: Vec<&str> = row.split(',').collect();
        let tokens: usize = f[7].parse().unwrap();
        by_judge.entry(f[1].to_owned()).or_default().push((
            format!("{} ({tokens} tokens)", f[0]),
            f[2].parse().unwrap(),
            f[6].parse().unwrap(),
        ));
    }
    let (gguf, hub) = (&by_judge["gguf"], &by_judge["hub"]);
    assert_eq!(gguf.len(), 5);
    assert_eq!(hub.len(), 5);
    for ((id_a, p_a, mass_a), (id_b, p_b, mass_b)) in gguf.iter().zip(hub) {
        assert_eq!(id_a, id_b);
        assert!(
            (p_a - p_b).abs() < 1e-4 && (mass_a - mass_b).abs() < 1e-4,
            "{id_a}: gguf {p_a}/{mass_a}, hub {p_b}/{mass_b}"
        );
    }
    let m: Value = serde_json::from_str(&fs::read_to_string(dir.path().join("out/manifest.json")).unwrap()).unwrap();
    let hash = m["judges"][1]["model_sha256"].as_str().unwrap();
    assert!(hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()), "model directory hash {hash}");
}

/// The candle engine judges what mistral.rs judges: for SmolLM2 (its tokenizer folder)
/// and Qwen2.5-Coder-0.5B (the GGUF file's own tokenizer and chat template, built by
/// each engine), the same token sequences, and verdicts within 1e-4 (the demo's 120 are
/// the same bit for bit), with the prefix cache on; each run's manifest names its engine
/// (part of every cache key).
#[test]
fn the_candle_engine_judges_what_mistralrs_judges() {
    let root = repo_root();
    let qwen = root.join("models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    let hf = root.join("models/smollm2-135m-hf");
    assert!(qwen.is_file() && hf.is_dir(), "run scripts/fetch-judges.sh --small");
    type Rows = std::collections::BTreeMap<(String, String), (f64, f64, String)>;
    let mut runs: Vec<(Rows, Value)> = Vec::new();
    for engine in ["mistralrs", "candle"] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("exp.yaml");
        fs::write(
            &cfg,
            format!(
                "name: e2e\n\
                 dataset: {{name: demo-facts, path: {data}, limit: 8, seed: 5}}\n\
                 prompt: {prompt}\n\
                 judges:\n  - name: smollm2\n    gguf: {smollm}\n    tokenizer: {hf}\n  - name: qwen\n    gguf: {qwen}\n\
                 runtime: {{engine: {engine}, dequantize: true, max_concurrency: 1, prefix_cache: true, dump_prompts: true, max_prompt_tokens: 1024}}\n\
                 output: {out}\n",
                data = root.join("datasets/demo-facts.csv").display(),
                prompt = root.join("prompts/demo-facts.yaml").display(),
                smollm = smollm().display(),
                hf = hf.display(),
                qwen = qwen.display(),
                out = dir.path().join("out").display(),
            ),
        )
        .unwrap();
        let out = jury(&["run", cfg.to_str().unwrap()]);
        assert!(out.status.success(), "{engine}: {}", String::from_utf8_lossy(&out.stderr));
        let tokens: std::collections::BTreeMap<(String, String), String> = lines(&dir.path().join("out/prompts.jsonl"))
            .iter()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                let key = (v["judge"].as_str().unwrap().to_owned(), v["example_id"].as_str().unwrap().to_owned());
                (key, v["tokens"].to_string())
            })
            .collect();
        let rows = lines(&dir.path().join("out/judgments.csv"))[1..]
            .iter()
            .map(|r| {
                let f: Vec<&str> = r.split(',').collect();
                let key = (f[1].to_owned(), f[0].to_owned());
                let toks = tokens[&key].clone();
                (key, (f[2].parse().unwrap(), f[6].parse().unwrap(), toks))
            })
            .collect();
        let m: Value =
            serde_json::from_str(&fs::read_to_string(dir.path().join("out/manifest.json")).unwrap()).unwrap();
        runs.push((rows, m));
    }
    let ((mistral, m_manifest), (candle, c_manifest)) = (&runs[0], &runs[1]);
    assert_eq!(mistral.len(), 16);
    assert_eq!(mistral.keys().collect::<Vec<_>>(), candle.keys().collect::<Vec<_>>());
    let mut worst = 0f64;
    for (key, (y, mass, toks)) in mistral {
        let (cy, cmass, ctoks) = &candle[key];
        assert_eq!(toks, ctoks, "{key:?}: another token sequence");
        worst = worst.max((y - cy).abs()).max((mass - cmass).abs());
    }
    assert!(worst < 1e-4, "verdicts differ by up to {worst}");
    for (judge, _) in m_manifest["judges"].as_array().unwrap().iter().zip(c_manifest["judges"].as_array().unwrap()) {
        let engine = judge["engine"].as_str().unwrap();
        assert!(engine.starts_with("mistralrs"), "{engine}");
    }
    let engine = c_manifest["judges"][1]["engine"].as_str().unwrap();
    assert!(engine.starts_with("jury's candle decoder (Qwen2"), "{engine}");
}

/// Results with mistral.rs's prefix cache (36 judgments, more than the entries it keeps,
/// so it evicts) are those of a run without it (two requests in flight); the cache with
/// batching is refused up front.
#[test]
fn the_prefix_cache_keeps_the_verdicts_of_a_run_without_it() {
    let read = |dir: &Path| -> std::collections::BTreeMap<String, f64> {
        lines(&dir.join("out/judgments.csv"))[1..]
            .iter()
            .map(|r| {
                let f: Vec<&str> = r.split(',').collect();
                (f[0].to_owned(), f[2].parse().unwrap())
            })
            .collect()
    };
    let mut results = Vec::new();
    for prefix_cache in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path(), 36);
        let runtime = if prefix_cache {
            "max_concurrency: 1, prefix_cache: true"
        } else {
            "max_concurrency: 2, prefix_cache: false"
        };
        let text = fs::read_to_string(&cfg).unwrap().replace("max_concurrency: 2, prefix_cache: false", runtime);
        fs::write(&cfg, text).unwrap();
        let out = jury(&["run", cfg.to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let entries = judge_manifest(dir.path())["prefix_cache_entries"].as_u64();
        assert_eq!(entries.is_some(), prefix_cache);
        assert!(entries.unwrap_or(0) < 36, "the cache must be full and evicting: {entries:?} entries");
        results.push(read(dir.path()));
    }
    assert_eq!(results[0].len(), 36);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 4);
    let text = fs::read_to_string(&cfg).unwrap().replace("prefix_cache: false", "prefix_cache: true");
    fs::write(&cfg, text).unwrap();
    let out = jury(&["run", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("exp.yaml") && err.contains("max_concurrency: 1"), "{err}");
    assert_eq!(results[0].keys().collect::<Vec<_>>(), results[1].keys().collect::<Vec<_>>());
    for (id, p) in &results[0] {
        assert!((p - results[1][id]).abs() < 1e-3, "{id}: {p} without the prefix cache, {} with it", results[1][id]);
    }
}

/// mistral.rs keeps at most `jury_judge::PREFIX_CACHE_ENTRIES` finished judgments' KV caches (the
/// patched mistralrs-core in crates/vendor; 0.8.1 as published kept every one on a CPU,
/// about 45 MB a judgment for this judge): over 300 judgments with the prefix cache on,
/// the judge's resident memory stays flat once the cache is full.
#[cfg(target_os = "linux")]
#[test]
fn the_prefix_cache_keeps_memory_flat_over_a_long_run() {
    const N: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    // The 40 demo statements, each numbered several times over: distinct prompts that
    // share the template's prefix, as a real data set's do.
    let facts = lines(&repo_root().join("datasets/demo-facts.csv"));
    let mut data = String::from("id,statement,label\n");
    for i in 0..N {
        let row = &facts[1 + i % (facts.len() - 1)];
        let (statement, label) = row.split_once(',').unwrap().1.rsplit_once(',').unwrap();
        let statement = statement.trim_matches('"').replace('"', "\"\"");
        data.push_str(&format!("s{i:03},\"Claim {i}: {statement}\",{label}\n"));
    }
    let data_path = dir.path().join("facts.csv");
    fs::write(&data_path, data).unwrap();
    // An absolute data path: `experiment` joins it to the repository root, which keeps it.
    let cfg = experiment(dir.path(), "demo-facts", data_path.to_str().unwrap(), "prompts/demo-facts.yaml", "seed: 3");
    let text = fs::read_to_string(&cfg)
        .unwrap()
        .replace("max_concurrency: 2, prefix_cache: false", "max_concurrency: 1, prefix_cache: true");
    fs::write(&cfg, text).unwrap();
    // Its messages go to a file: an unread pipe could fill and stop the run.
    let log = dir.path().join("run.log");
    let mut child = Command::new(jury_bin())
        .args(["run", cfg.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let cache = dir.path().join("out/cache.jsonl");
    // (judgments done, resident kB), every 100 ms.
    let mut samples = Vec::new();
    while child.try_wait().unwrap().is_none() {
        let status = fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
        let rss = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok());
        if let Some(rss) = rss {
            samples.push((lines(&cache).len(), rss));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "{}", fs::read_to_string(&log).unwrap_or_default());
    assert_eq!(judge_manifest(dir.path())["scored"], N);
    // From the 100th judgment on the cache is full many times over; growth beyond it is a leak.
    let full: Vec<_> = samples.iter().filter(|s| s.0 >= 100).collect();
    assert!(full.len() >= 10 && full.last().unwrap().0 >= N - 20, "too few samples: {samples:?}");
    let growth_mb = (full.iter().map(|s| s.1).max().unwrap() - full[0].1) as f64 / 1024.0;
    let judgments = full.last().unwrap().0 - full[0].0;
    assert!(
        growth_mb / (judgments as f64) < 0.5,
        "resident memory grew by {growth_mb:.0} MB over {judgments} judgments after the 100th: {samples:?}"
    );
}

/// `jury run --dry-run` from the repository root, as a user types it.
fn dry_run(config: &Path) -> std::process::Output {
    std::process::Command::new(crate::common::jury_bin())
        .args(["run", "--dry-run", config.to_str().unwrap()])
        .current_dir(crate::common::repo_root())
        .output()
        .unwrap()
}

/// Every shipped config passes the dry run, which writes nothing; what it finds is only
/// what is not on this machine (models, tokenizers, data sets outside the repository),
/// each named.
#[test]
fn every_shipped_config_passes_the_dry_run() {
    let root = crate::common::repo_root();
    let mut configs = Vec::new();
    for dir in [root.join("configs"), root.join("configs/paper")] {
        for e in fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "yaml") {
                configs.push(p);
            }
        }
    }
    configs.sort();
    assert!(configs.len() >= 16, "{configs:?}");
    let before: Vec<_> = fs::read_dir(&root).unwrap().map(|e| e.unwrap().file_name()).collect();
    for c in &configs {
        let out = dry_run(c);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}: {}{stdout}", c.display(), String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("judge calls:"), "{stdout}");
        let findings = stdout.lines().skip_while(|l| !l.starts_with("not on this machine")).skip(1);
        for f in findings {
            assert!(
                ["model `", "tokenizer `", "model file", "tokenizer directory", "dataset: "]
                    .iter()
                    .any(|k| f.contains(k)),
                "{}: an unexpected finding: {f}",
                c.display()
            );
        }
    }
    let after: Vec<_> = fs::read_dir(&root).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(before, after, "the dry runs wrote nothing at the top level (no out/)");
}

/// The dry run of a HaluEval-sized experiment: 10,000 dialogues in the data set's format
/// (written here), the SkillAggregation paper's ten server judges with a fetched tokenizer folder: the
/// counts, the calls, the prompt lengths of every example, an adaptive range and a time
/// estimate from the judges' rates; a model file that is not there is named, with the
/// rest of the report still given.
#[test]
fn dry_run_of_a_halueval_sized_experiment_counts_examples_calls_and_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let root = crate::common::repo_root();
    let tokenizer = root.join("models/qwen2.5-coder-0.5b-hf");
    let mut data = String::new();
    for i in 0..10_000 {
        let line = serde_json::json!({
            "knowledge": "k",
            "dialogue_history": format!("[Human]: Tell me about film {i}. [Assistant]: It is a film. [Human]: Who directed it?"),
            "right_response": format!("Director number {i} did."),
            "hallucinated_response": format!("It was directed by someone else entirely, in the year {}.", 1900 + i % 100),
        });
        data.push_str(&format!("{line}\n"));
    }
    fs::write(dir.path().join("dialogue.json"), data).unwrap();
    let mut judges = String::new();
    for k in 0..10 {
        judges.push_str(&format!(
            "  - name: j{k}\n    rate: 10\n    cost: {}\n    server: {{base_urls: ['http://127.0.0.1:{}'], model: m, tokenizer: {}}}\n",
            k + 1,
            8001 + k,
            tokenizer.display()
        ));
    }
    judges.push_str(&format!("  - name: absent\n    gguf: {}\n", dir.path().join("no.gguf").display()));
    let yaml = format!(
        "name: dry\ndataset: {{name: halueval-dialogue, path: {}}}\nprompt: {}\njudges:\n{judges}aggregate: {{methods: [recommended]}}\noutput: {}\n",
        dir.path().join("dialogue.json").display(),
        root.join("prompts/halueval-dialogue.yaml").display(),
        dir.path().join("out").display()
    );
    let config = dir.path().join("dry.yaml");
    fs::write(&config, &yaml).unwrap();
    let out = dry_run(&config);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}{stdout}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("data set halueval-dialogue: 20000 examples"), "{stdout}");
    assert!(stdout.contains("judges: 11; judge calls: 220000"), "{stdout}");
    let row = stdout.lines().find(|l| l.starts_with("j0 ")).unwrap();
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[1..3], ["server", "20000"], "{row}");
    let (min, med, max): (usize, usize, usize) =
        (cols[3].parse().unwrap(), cols[4].parse().unwrap(), cols[5].parse().unwrap());
    assert!(300 < min && min <= med && med <= max && max < 2048, "{row}");
    assert!(stdout.contains("not on this machine (1):") && stdout.contains("no.gguf"), "{stdout}");
    assert!(stdout.contains("estimated wall time: unknown"), "the absent judge has no rate: {stdout}");
    assert!(!dir.path().join("out").exists(), "nothing written");
    // Without the absent judge, with an adaptive section: a range of calls and of time.
    let adaptive = yaml
        .replace(&format!("  - name: absent\n    gguf: {}\n", dir.path().join("no.gguf").display()), "")
        .replace("aggregate:", "adaptive: {min_judges: 2, warmup: 0.1}\naggregate:");
    fs::write(&config, adaptive).unwrap();
    let out = dry_run(&config);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}{stdout}", String::from_utf8_lossy(&out.stderr));
    // Warm-up 2,000 x 10, then the two cheapest judges on the other 18,000.
    assert!(stdout.contains("judge calls: 56000 to 200000"), "{stdout}");
    // Servers work side by side: the cheapest judges' 20,000 calls at 10 a second.
    assert!(stdout.contains("estimated wall time: 34 min"), "{stdout}");
    assert!(stdout.contains("every model and tokenizer is on this machine"), "{stdout}");
}

/// The small form of every paper config (`configs/paper/*-small.yaml`: the two fetched
/// judges in process) runs end to end, unchanged but for its data path and output
/// folder: a stand-in in the data set's own format (the real files are outside the
/// repository, Arena's behind a hub), judged by both judges, aggregated with the
/// recommended method named.
#[test]
fn every_small_paper_config_runs_end_to_end() {
    let root = repo_root();
    // Examples, and prompts judged per judge (Arena's non-tie pairs in both orders).
    for (name, dataset, examples, judged) in [
        ("halueval", "halueval-dialogue", 4, 4),
        ("truthfulqa", "truthfulqa", 6, 6),
        ("arena", "chatbot-arena", 2, 4),
        ("llmbar", "llmbar", 2, 4),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (file, data) = crate::common::paper_stand_in(dataset);
        let data_path = dir.path().join(file);
        fs::write(&data_path, data).unwrap();
        let config = fs::read_to_string(root.join(format!("configs/paper/{name}-small.yaml"))).unwrap();
        assert!(config.contains(&format!("  name: {dataset}\n")), "{name}: {config}");
        let out = dir.path().join("out");
        let edited: Vec<String> = config
            .lines()
            .map(|l| match l {
                l if l.starts_with("  path: ") => format!("  path: {}", data_path.display()),
                l if l.starts_with("output: ") => format!("output: {}", out.display()),
                l => l.to_owned(),
            })
            .collect();
        let cfg = dir.path().join(format!("{name}-small.yaml"));
        fs::write(&cfg, edited.join("\n")).unwrap();
        let run = Command::new(jury_bin()).args(["run", cfg.to_str().unwrap()]).current_dir(&root).output().unwrap();
        assert!(
            run.status.success(),
            "{name}: {}{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        );
        let rows = fs::read_to_string(out.join("judgments.csv")).unwrap();
        assert_eq!(rows.lines().count(), 1 + 2 * examples, "{name}: both judges on every example\n{rows}");
        let cache = fs::read_to_string(out.join("cache.jsonl")).unwrap();
        assert_eq!(cache.lines().count(), 2 * judged, "{name}: one call per judge and prompt\n{cache}");
        let metrics: Value = serde_json::from_str(&fs::read_to_string(out.join("metrics.json")).unwrap()).unwrap();
        assert_eq!(metrics["n_examples"], examples, "{name}");
        assert_eq!(metrics["n_judges"], 2, "{name}");
        assert!(metrics["recommended_method"].is_string(), "{name}: {metrics}");
        for method in ["avg", "mv", "ds", "care"] {
            assert!(!metrics["methods"][method].is_null(), "{name}: {method} in {metrics}");
        }
        assert!(out.join("report.html").is_file(), "{name}");
    }
}

/// A spreadsheet-formula example id is written to predictions.csv as text, as OWASP
/// advises (a `'` in front, quoted), and read back as the original id by the report;
/// a judge name with an OSC title sequence and an ESC reaches neither stdout nor stderr
/// raw.
#[test]
fn formula_ids_are_text_in_csv_and_escapes_never_reach_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let formula = "=cmd|' /C calc'!A0";
    let hostile = "j\u{1b}]0;pwned\u{7}";
    let mut judgments = String::from("example_id,judge,p\n");
    let mut labels = String::from("example_id,label\n");
    for n in 0..20 {
        let id = if n == 0 { format!("\"{formula}\"") } else { format!("e{n}") };
        for (k, judge) in [hostile, "j2", "j3"].iter().enumerate() {
            let p = if (n + k) % 5 == 0 { 0.3 } else { 0.8 };
            judgments.push_str(&format!("{id},{judge},{p}\n"));
        }
        labels.push_str(&format!("{id},1\n"));
    }
    let (jpath, lpath, out_dir) =
        (dir.path().join("judgments.csv"), dir.path().join("labels.csv"), dir.path().join("out"));
    fs::write(&jpath, judgments).unwrap();
    fs::write(&lpath, labels).unwrap();
    let args = |out: &Path| {
        vec![
            "aggregate".to_owned(),
            "--judgments".into(),
            jpath.display().to_string(),
            "--labels".into(),
            lpath.display().to_string(),
            "--out".into(),
            out.display().to_string(),
        ]
    };
    let run = |args: &[String]| jury(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let out = run(&args(&out_dir));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let predictions = fs::read_to_string(out_dir.join("predictions.csv")).unwrap();
    assert!(predictions.contains("\n\"'=cmd|' /C calc'!A0\",1,"), "{predictions}");
    assert!(!predictions.contains("\n=cmd"), "{predictions}");
    assert!(stdout.contains("j\\x1b]0;pwned\\x07"), "{stdout}");
    assert!(!stdout.contains(['\u{1b}', '\u{7}']) && !stderr.contains(['\u{1b}', '\u{7}']), "{stdout}{stderr}");
    // The report reads predictions.csv back (with labels) and still renders.
    let again = jury(&[
        "report",
        out_dir.to_str().unwrap(),
        "--judgments",
        jpath.to_str().unwrap(),
        "--labels",
        lpath.to_str().unwrap(),
    ]);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    // An error quoting the hostile name (a duplicate row): escaped on stderr too.
    let dup = dir.path().join("dup.csv");
    fs::write(&dup, format!("example_id,judge,p\ne1,{hostile},0.5\ne1,{hostile},0.6\n")).unwrap();
    let out =
        jury(&["aggregate", "--judgments", dup.to_str().unwrap(), "--out", dir.path().join("o2").to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("\\x1b]0;pwned\\x07") && !stderr.contains(['\u{1b}', '\u{7}']), "{stderr:?}");
}

/// `jury simulate adaptive` writes only what it reads back: costs whose sum over the
/// full jury passes the largest number are refused with a reason before anything is
/// written (they became nulls that adaptive.json's reader, `jury report`, refused), and
/// costs as large as still sum within range round-trip through `jury report`.
#[test]
fn simulate_adaptive_output_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let sim = dir.path().join("sim");
    let out = jury(&["simulate", "--examples", "300", "--seed", "5", "--out", sim.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let recorded = fs::read_to_string(sim.join("judgments.csv")).unwrap();
    let mut judges: Vec<&str> = recorded.lines().skip(1).filter_map(|l| l.split(',').nth(1)).collect();
    judges.sort_unstable();
    judges.dedup();
    let replay = |out: &Path, cost: &str| {
        let mut args: Vec<String> = vec![
            "simulate".into(),
            "adaptive".into(),
            "--judgments".into(),
            sim.join("judgments.csv").display().to_string(),
            "--labels".into(),
            sim.join("labels.csv").display().to_string(),
            "--out".into(),
            out.display().to_string(),
        ];
        for judge in &judges {
            args.extend(["--cost".to_owned(), format!("{judge}={cost}")]);
        }
        jury(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let too_big = dir.path().join("too-big");
    let out = replay(&too_big, "1e308");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("error: --cost is too large") && stderr.lines().count() == 1, "{stderr}");
    assert!(!too_big.join("adaptive.json").exists());
    let fine = dir.path().join("fine");
    let out = replay(&fine, "1e300");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let a: Value = serde_json::from_str(&fs::read_to_string(fine.join("adaptive.json")).unwrap()).unwrap();
    assert!(a["full_cost"].as_f64().is_some_and(|c| c > 1e300 && c.is_finite()), "{a}");
    let again = jury(&["report", fine.to_str().unwrap()]);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
}

/// A run's `calibration: {labels: FILE}`: a real judge's run, then the same run (from its
/// cache) with labels for some of its examples, recommends the calibrated method and
/// scores only outside them; a missing calibration file, or one with a bad line, stops
/// the run (and the dry run) before any model loads, the line named.
#[test]
fn run_with_calibration_labels_recommends_the_calibrated_method() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 16);
    let out = jury(&["run", cfg.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let labels = lines(&dir.path().join("out/labels.csv"));
    // A plan of the run's judgments holds what its judges read, for whoever labels it,
    // and says what each label means in the prompt's words.
    let plan = dir.path().join("plan.csv");
    let judgments = dir.path().join("out/judgments.csv");
    let out = jury(&[
        "label-plan",
        "--judgments",
        judgments.to_str().unwrap(),
        "--budget",
        "5",
        "--out",
        plan.to_str().unwrap(),
    ]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains("each with the fields its judges read (statement) from"), "{said}");
    assert!(
        said.contains("add a label column, 1 for `Yes` and 0 for `No` as ") && said.contains("demo-facts.yaml asks"),
        "{said}"
    );
    let statements: std::collections::HashMap<String, String> = lines(&repo_root().join("datasets/demo-facts.csv"))
        [1..]
        .iter()
        .map(|l| {
            let (id, rest) = l.split_once(',').unwrap();
            (id.to_owned(), rest.to_owned())
        })
        .collect();
    let planned = lines(&plan);
    assert_eq!(
        (planned[0].as_str(), planned.len()),
        ("example_id,inclusion_probability,plan_size,planned_from,statement", 6)
    );
    for row in &planned[1..] {
        let fields: Vec<&str> = row.splitn(5, ',').collect();
        assert!(statements[fields[0]].contains(fields[4].trim_matches('"')), "{row}");
    }
    let (ones, zeros): (Vec<&String>, Vec<&String>) = labels[1..].iter().partition(|l| l.ends_with(",1"));
    let chosen: Vec<&String> = ones.iter().take(3).chain(zeros.iter().take(3)).copied().collect();
    assert_eq!(chosen.len(), 6, "{labels:?}");
    let cal = dir.path().join("calibration.csv");
    fs::write(
        &cal,
        format!("example_id,label\n{}\n", chosen.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")),
    )
    .unwrap();
    let yaml = fs::read_to_string(&cfg).unwrap();
    fs::write(&cfg, format!("{yaml}calibration: {{labels: {}}}\n", cal.display())).unwrap();
    let out = jury(&["run", cfg.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m: Value = serde_json::from_str(&fs::read_to_string(dir.path().join("out/metrics.json")).unwrap()).unwrap();
    assert_eq!(m["recommended_method"], "calibrated");
    assert_eq!(m["calibration"]["n_calibration"], 6);
    assert_eq!(m["calibration"]["n_scoring_dropped"], 6);
    // The rates are the share of the prompt's class 1, named where the run shows them.
    assert_eq!(m["calibration"]["positive_word"], "Yes");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("positive rate (class 1, the prompt's `Yes`) of the 16 examples judged"), "{said}");
    let page = fs::read_to_string(dir.path().join("out/report.html")).unwrap();
    assert!(page.contains("Positive rate (class 1, the prompt's <code>Yes</code>) corrected"), "the report names it");
    assert_eq!(m["n_labeled"], 10);
    assert_eq!(judge_manifest(dir.path())["from_cache"], 16);
    let dry = jury(&["run", "--dry-run", cfg.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&dry.stdout);
    assert!(
        dry.status.success()
            && said.contains("calibration labels: 6 of the 16 examples (3 of class 1, the prompt's `Yes`) from"),
        "{said}"
    );
    fs::write(&cfg, format!("{yaml}calibration: {{labels: {}}}\n", dir.path().join("nowhere.csv").display())).unwrap();
    let out = jury(&["run", cfg.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("calibration: `labels`") && err.contains("nowhere.csv"), "{err}");
    assert!(!err.contains("judge smollm2"), "stopped before judging: {err}");
    // A label that is not binary, and an example the run does not judge: each named by
    // file and line before judging, the published run untouched.
    let metrics = fs::read_to_string(dir.path().join("out/metrics.json")).unwrap();
    let first_id = chosen[0].split(',').next().unwrap();
    let planned = |row: &str| row.split_once(',').map(|(id, l)| format!("{id},0.5,2,30,{l}")).unwrap();
    for (bad, line, says) in [
        (format!("example_id,label\n{}\n{first_id},2\n", chosen[1]), "line 3", "is not a binary label"),
        (format!("example_id,label\n{}\nno-such-example,1\n", chosen[1]), "line 3", "is not among"),
        (
            format!(
                "example_id,inclusion_probability,plan_size,planned_from,label\n{}\n{}\n",
                planned(chosen[0]),
                planned(chosen[3])
            ),
            "planned_from",
            "the plan was drawn from 30 examples, not these 16",
        ),
    ] {
        fs::write(&cal, bad).unwrap();
        fs::write(&cfg, format!("{yaml}calibration: {{labels: {}}}\n", cal.display())).unwrap();
        for args in [vec!["run", cfg.to_str().unwrap()], vec!["run", "--dry-run", cfg.to_str().unwrap()]] {
            let out = jury(&args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success() && err.contains("calibration.csv") && err.contains(line), "{args:?}: {err}");
            assert!(err.contains(says) && !err.contains("judge smollm2"), "{args:?}: {err}");
        }
    }
    assert_eq!(fs::read_to_string(dir.path().join("out/metrics.json")).unwrap(), metrics);
}
