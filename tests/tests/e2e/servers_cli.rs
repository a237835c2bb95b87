//! `jury run` with judges on real inference servers (llama.cpp's llama-server, vLLM's
//! CPU build and mistral.rs's server, installed under `$HOME/.cache` by
//! `scripts/servers/`): exact token
//! sequences shared with the in-process judge, faults from a proxy, servers and the
//! program killed mid-run, rejected examples, and API keys that never leak. Needs
//! `scripts/fetch-judges.sh --small` (CI runs it). The tests take one server set at a
//! time (a lock): two cores cannot run two sets side by side and stay on time.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::common::proxy::{Fault, FaultProxy};
use crate::common::servers::{Server, llama_server, llama_server_with, mistralrs_server, vllm_server};
use crate::common::{jury, jury_bin, repo_root};
use serde_json::Value;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn model(rel: &str) -> PathBuf {
    let p = repo_root().join(rel);
    assert!(p.exists(), "{} is missing: run scripts/fetch-judges.sh --small", p.display());
    p
}

fn qwen_gguf() -> PathBuf {
    model("models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
}

fn qwen_hf() -> PathBuf {
    model("models/qwen2.5-coder-0.5b-hf")
}

/// A server judge entry (YAML, indented for `judges:`).
fn server_judge(name: &str, urls: &[String], extra: &str) -> String {
    let urls: Vec<String> = urls.iter().map(|u| format!("\"{u}\"")).collect();
    format!(
        "  - name: {name}\n    server:\n      base_urls: [{}]\n      model: qwen\n      tokenizer: {}\n{extra}",
        urls.join(", "),
        qwen_hf().display()
    )
}

/// Writes `dir/exp.yaml` over the demo facts (the first `limit`, by seed 3) with the
/// given judge entries; output in `dir/out`.
fn experiment(dir: &Path, limit: usize, judges: &str, data: Option<&Path>) -> PathBuf {
    let root = repo_root();
    let data = data.map_or(root.join("datasets/demo-facts.csv"), Path::to_owned);
    let text = format!(
        "name: servers\n\
         dataset: {{name: demo-facts, path: {data}, limit: {limit}, seed: 3}}\n\
         prompt: {prompt}\n\
         judges:\n{judges}\
         runtime: {{max_concurrency: 1, prefix_cache: true, max_prompt_tokens: 4096, dump_prompts: true}}\n\
         output: {out}\n",
        data = data.display(),
        prompt = root.join("prompts/demo-facts.yaml").display(),
        out = dir.join("out").display(),
    );
    let p = dir.join("exp.yaml");
    fs::write(&p, text).unwrap();
    p
}

fn lines(p: &Path) -> Vec<String> {
    fs::read_to_string(p).map(|t| t.lines().map(str::to_owned).collect()).unwrap_or_default()
}

fn manifest(dir: &Path) -> Value {
    serde_json::from_str(&fs::read_to_string(dir.join("out/manifest.json")).unwrap()).unwrap()
}

fn judge_entry(dir: &Path, name: &str) -> Value {
    manifest(dir)["judges"].as_array().unwrap().iter().find(|j| j["name"] == name).unwrap().clone()
}

/// `judgments.csv` as (example, judge) -> (p, exact).
fn judgments(dir: &Path) -> HashMap<(String, String), (Option<f64>, bool)> {
    let rows = lines(&dir.join("out/judgments.csv"));
    assert_eq!(rows[0], "example_id,judge,p,p_positive,p_negative,p_tie,mass,n_tokens,truncated,exact");
    rows[1..]
        .iter()
        .map(|r| {
            let f: Vec<&str> = r.split(',').collect();
            ((f[0].to_owned(), f[1].to_owned()), (f[2].parse().ok(), f[9] == "true"))
        })
        .collect()
}

/// (judge, example) -> token ids from `prompts.jsonl`.
fn prompts(dir: &Path) -> HashMap<(String, String), Vec<u64>> {
    lines(&dir.join("out/prompts.jsonl"))
        .iter()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let toks = v["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
            ((v["judge"].as_str().unwrap().to_owned(), v["example_id"].as_str().unwrap().to_owned()), toks)
        })
        .collect()
}

fn run_ok(cfg: &Path) -> String {
    let out = jury(&["run", cfg.to_str().unwrap()]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "jury run failed: {stderr}");
    format!("{stdout}{stderr}")
}

/// How many of the examples `reference` judged `juror` judged within 0.03 of it on
/// P(Yes), and how many `reference` judged; every example must have the same token
/// sequence under both and a verdict from both.
fn agreement(dir: &Path, reference: &str, juror: &str) -> (usize, usize) {
    let toks = prompts(dir);
    for (id, _) in judgments(dir).keys().filter(|(_, judge)| judge == reference) {
        let key = |judge: &str| (judge.to_owned(), id.clone());
        assert_eq!(toks[&key(reference)], toks[&key(juror)], "example {id}: {juror} rendered another token sequence");
    }
    probability_agreement(dir, reference, juror)
}

/// [`agreement`] for a juror whose server renders the prompt (chat modes).
fn probability_agreement(dir: &Path, reference: &str, juror: &str) -> (usize, usize) {
    let j = judgments(dir);
    let ids: Vec<&String> = j.keys().filter(|(_, judge)| judge == reference).map(|(e, _)| e).collect();
    let p = |id: &String, judge: &str| j[&(id.clone(), judge.to_owned())].0.unwrap();
    let close = ids.iter().filter(|id| (p(id, reference) - p(id, juror)).abs() <= 0.03).count();
    (close, ids.len())
}

/// Cache lines: each a distinct key (no judgment written twice).
fn assert_one_line_per_judgment(dir: &Path, n: usize) {
    let all = lines(&dir.join("out/cache.jsonl"));
    let keys: HashSet<String> =
        all.iter().map(|l| serde_json::from_str::<Value>(l).unwrap()["key"].as_str().unwrap().to_owned()).collect();
    assert_eq!((all.len(), keys.len()), (n, n), "one cache line per judgment");
}

/// The in-process judge and the server judge, on the same model, judge identical token
/// sequences and agree on P(Yes): the tokenizer directory renders exactly what
/// mistral.rs renders, and llama-server's log-probabilities are a full softmax.
#[test]
fn server_judge_on_two_llama_servers_matches_the_in_process_judge() {
    let _one = lock();
    let dir = tempfile::tempdir().unwrap();
    // Without their prompt cache the servers answer a prompt the same whatever came
    // before it: with it, which of the four jurors' prompts a slot last held moves
    // P(Yes) by up to 0.03 (the adaptive test below), as much as the tolerance here.
    let no_cache = ["--no-cache-prompt"];
    let (a, b) = (llama_server_with(&qwen_gguf(), 1, 2, &no_cache), llama_server_with(&qwen_gguf(), 1, 2, &no_cache));
    // A third juror asks the same servers in chat-generate mode (what a hosted API
    // without prefill gets): no tokenizer, the verdict read after the generated `[[`;
    // it has a prompt of its own (a variant of the experiment's). A fourth sends the
    // token sequence as text (mode `text`, for servers that take no token ids).
    let variant = dir.path().join("variant.yaml");
    let base = fs::read_to_string(repo_root().join("prompts/demo-facts.yaml")).unwrap();
    fs::write(&variant, base.replace("You are a careful fact checker.", "You check facts for an encyclopedia."))
        .unwrap();
    let judges = format!(
        "  - name: local-qwen\n    gguf: {}\n{}  - name: chat-qwen\n    prompt: {}\n    server: {{base_urls: [\"{}\"], model: qwen, mode: chat-generate, top_logprobs: 20}}\n{}",
        qwen_gguf().display(),
        server_judge("server-qwen", &[a.url(), b.url()], "      top_logprobs: 100\n"),
        variant.display(),
        a.url(),
        server_judge("text-qwen", &[b.url()], "      top_logprobs: 100\n      mode: text\n"),
    );
    let n = 24;
    let cfg = experiment(dir.path(), n, &judges, None);
    run_ok(&cfg);
    for juror in ["server-qwen", "text-qwen"] {
        let (close, judged) = agreement(dir.path(), "local-qwen", juror);
        assert_eq!(judged, n);
        assert!(close * 10 >= n * 9, "{juror}: only {close} of {n} examples within 0.03");
    }
    assert_eq!(judge_entry(dir.path(), "text-qwen")["server"]["mode"], "text");
    let m = judge_entry(dir.path(), "server-qwen");
    let servers = m["server"]["stats"]["servers"].as_array().unwrap();
    assert!(servers.iter().all(|s| s["ok"].as_u64().unwrap() > 0), "both servers took requests: {servers:?}");
    assert!(m["exact_share"].as_f64().unwrap() > 0.0, "{m}");
    assert_eq!(m["server"]["mode"], "tokens");
    let chat = judge_entry(dir.path(), "chat-qwen");
    assert_eq!(chat["server"]["mode"], "chat-generate");
    let ids = chat["verdict_token_ids"]["positive"].as_array().unwrap();
    assert!(!ids.is_empty(), "verdict ids from llama-server's /tokenize: {chat}");
    assert_eq!(chat["verdict_token_ids"], m["verdict_token_ids"], "the same ids as the tokenizer's");
    assert_eq!(chat["template"]["path"].as_str(), variant.to_str(), "the juror's own prompt");
    assert!(m["template"].is_null(), "a juror without `prompt` uses the experiment's");
    let judged = judgments(dir.path()).keys().filter(|(_, judge)| judge == "chat-qwen").count();
    assert_eq!(judged + chat["failed"].as_u64().unwrap() as usize, n);
    assert!(judged * 2 >= n, "chat-generate judged only {judged} of {n}");
}

/// mistral.rs's server takes no token-id prompts and returns base-10 log-probabilities
/// (real ones only when sampling): with `mode: text` and `engine: mistralrs` the server
/// judge runs the in-process judge's token sequences and agrees with it on P(Yes).
#[test]
fn server_judge_on_mistralrs_server_matches_the_in_process_judge() {
    let _one = lock();
    let dir = tempfile::tempdir().unwrap();
    let server = mistralrs_server(&qwen_gguf());
    let judges = format!(
        "  - name: local-qwen\n    gguf: {}\n  - name: mistralrs-qwen\n    server:\n      base_urls: [\"{}\"]\n      \
         model: default\n      tokenizer: {}\n      mode: text\n      engine: mistralrs\n      top_logprobs: 100\n",
        qwen_gguf().display(),
        server.url(),
        qwen_hf().display()
    );
    let n = 24;
    run_ok(&experiment(dir.path(), n, &judges, None));
    let (close, judged) = agreement(dir.path(), "local-qwen", "mistralrs-qwen");
    assert_eq!(judged, n);
    assert!(close * 10 >= n * 9, "only {close} of {n} examples within 0.03");
    let m = judge_entry(dir.path(), "mistralrs-qwen");
    eprintln!("mistral.rs server: {close} of {n} within 0.03; exact share {}", m["exact_share"]);
    assert_eq!(m["server"]["mode"], "text");
    assert!(m["exact_share"].as_f64().is_some(), "{m}");
}

/// The proxy's 429 / 500 / reset / stall mix gives the clean run's verdicts.
#[test]
fn proxy_faults_give_the_clean_runs_verdicts() {
    let _one = lock();
    // Without its prompt cache the server's answer depends on the prompt alone: with it,
    // a retried request whose abandoned first attempt the server finished finds its
    // whole prompt cached, and llama.cpp's different batching moved P(Yes) by 0.015.
    let server = crate::common::servers::llama_server_with(&qwen_gguf(), 2, 1, &["--no-cache-prompt"]);
    let n = 12;
    let clean = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    run_ok(&experiment(clean.path(), n, &server_judge("q", &[server.url()], "      timeout_s: 120\n"), None));
    // The faulty run's timeout is three clean requests long (a request took 1 s on one
    // 2-core machine and 5 s on another), so only a stall times out: a request that timed
    // out on its own would keep the server's one slot busy and the retries behind it
    // would time out in turn. The stall outlasts the timeout.
    let per_request = started.elapsed().as_secs_f64() / n as f64;
    let timeout = (3.0 * per_request).ceil().max(3.0) as u64;
    let extra = format!("      timeout_s: {timeout}\n      retries: 12\n");
    let stall = Duration::from_secs(timeout + 2);
    let proxy = FaultProxy::start(
        server.port,
        vec![Fault::Pass, Fault::TooMany, Fault::ServerError, Fault::Pass, Fault::Reset, Fault::Stall(stall)],
    );
    let faulty = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}", proxy.port);
    run_ok(&experiment(faulty.path(), n, &server_judge("q", &[url], &extra), None));
    assert!(proxy.faults_injected.load(std::sync::atomic::Ordering::SeqCst) >= 4);
    let (a, b) = (judgments(clean.path()), judgments(faulty.path()));
    assert_eq!(a.len(), n);
    assert_eq!(a.keys().collect::<HashSet<_>>(), b.keys().collect::<HashSet<_>>());
    for (k, (pa, _)) in &a {
        let pb = b[k].0;
        assert!((pa.unwrap() - pb.unwrap()).abs() < 1e-3, "{k:?}: {pa:?} clean, {pb:?} through faults");
    }
    assert_one_line_per_judgment(faulty.path(), n);
    assert!(judge_entry(faulty.path(), "q")["server"]["stats"]["retried"].as_u64().unwrap() >= 4);
    assert_eq!(lines(&faulty.path().join("out/failures.csv")).len(), 1, "no failures");
}

fn spawn_run(cfg: &Path) -> std::process::Child {
    Command::new(jury_bin())
        .args(["run", cfg.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_for_lines(cache: &Path, at_least: usize, child: &mut std::process::Child) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while lines(cache).len() < at_least {
        assert!(Instant::now() < deadline, "no progress");
        assert!(child.try_wait().unwrap().is_none(), "the run ended before {at_least} judgments");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// kill -9 of one of two servers mid-run: the run finishes on the other, nothing lost
/// or duplicated.
#[test]
fn killing_one_of_two_servers_mid_run_loses_nothing() {
    let _one = lock();
    let (a, mut b) = (llama_server(&qwen_gguf(), 1, 2), llama_server(&qwen_gguf(), 1, 2));
    let dir = tempfile::tempdir().unwrap();
    let n = 30;
    let cfg = experiment(dir.path(), n, &server_judge("q", &[a.url(), b.url()], "      timeout_s: 30\n"), None);
    let mut child = spawn_run(&cfg);
    wait_for_lines(&dir.path().join("out/cache.jsonl"), 6, &mut child);
    b.kill();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(judgments(dir.path()).len(), n);
    assert_one_line_per_judgment(dir.path(), n);
    let m = judge_entry(dir.path(), "q");
    let servers = m["server"]["stats"]["servers"].as_array().unwrap().clone();
    assert!(servers[1]["times_set_aside"].as_u64().unwrap() >= 1, "{servers:?}");
    assert_eq!(lines(&dir.path().join("out/failures.csv")).len(), 1);
    drop(a);
}

/// kill -9 of jury mid-run, then a rerun: nothing redone, nothing duplicated.
#[test]
fn killed_run_against_a_server_resumes_without_redoing() {
    let _one = lock();
    let server = llama_server(&qwen_gguf(), 2, 2);
    let dir = tempfile::tempdir().unwrap();
    let n = 20;
    let cfg = experiment(dir.path(), n, &server_judge("q", &[server.url()], ""), None);
    let cache = dir.path().join("out/cache.jsonl");
    let mut child = spawn_run(&cfg);
    wait_for_lines(&cache, 5, &mut child);
    child.kill().unwrap();
    child.wait().unwrap();
    let done = fs::read_to_string(&cache).unwrap_or_default().matches('\n').count();
    run_ok(&cfg);
    let m = judge_entry(dir.path(), "q");
    let (scored, cached) = (m["scored"].as_u64().unwrap() as usize, m["from_cache"].as_u64().unwrap() as usize);
    assert_eq!(scored + cached, n);
    assert!(cached >= done.min(n), "re-scored finished work: {cached} from cache, {done} done");
    assert_one_line_per_judgment(dir.path(), n);
}

/// Every server gone past the patience: one line naming the judge and its server, exit
/// 2, finished judgments kept in the cache.
#[test]
fn all_servers_down_stops_with_one_line_and_keeps_the_cache() {
    let _one = lock();
    let mut server: Server = llama_server(&qwen_gguf(), 2, 1);
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let cfg = experiment(dir.path(), 30, &server_judge("q", std::slice::from_ref(&url), "      patience_s: 3\n"), None);
    let cache = dir.path().join("out/cache.jsonl");
    let mut child = spawn_run(&cfg);
    wait_for_lines(&cache, 3, &mut child);
    server.kill();
    let done = lines(&cache).len();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let last = stderr.lines().filter(|l| l.starts_with("error:")).collect::<Vec<_>>();
    assert_eq!(last.len(), 1, "{stderr}");
    assert!(last[0].contains("judge `q`") && last[0].contains(&url), "{}", last[0]);
    assert!(lines(&cache).len() >= done, "finished judgments stay in the cache");
}

/// An example longer than the server's context is rejected (HTTP 400): a missing
/// judgment listed in failures.csv, not a failed run.
#[test]
fn an_example_the_server_rejects_is_a_failure_row() {
    let _one = lock();
    let server = llama_server(&qwen_gguf(), 2, 1); // context 4096 tokens
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("facts.csv");
    let long = "The sky is green. ".repeat(1200); // about 6,000 tokens
    fs::write(
        &data,
        format!("id,statement,label\nok1,Water is wet.,true\nlong,{long},false\nok2,Fire is cold.,false\n"),
    )
    .unwrap();
    let cfg = experiment(dir.path(), 3, &server_judge("q", &[server.url()], ""), Some(&data));
    // The tokenizer would truncate to max_prompt_tokens; allow the long prompt through.
    let text = fs::read_to_string(&cfg).unwrap().replace("max_prompt_tokens: 4096", "max_prompt_tokens: 10000");
    fs::write(&cfg, text).unwrap();
    run_ok(&cfg);
    let fails = lines(&dir.path().join("out/failures.csv"));
    assert_eq!(fails.len(), 2, "{fails:?}");
    assert!(fails[1].starts_with("long,q,") && fails[1].contains("400"), "{}", fails[1]);
    let j = judgments(dir.path());
    assert_eq!(j.len(), 2);
    assert!(!j.contains_key(&("long".to_owned(), "q".to_owned())));
}

/// The API key reaches the server (llama-server checks it) and appears in no file,
/// no output and no error.
#[test]
fn api_keys_never_leak() {
    let _one = lock();
    let secret = "sk-jury-test-7f3a9c1e5b";
    let bin_server = crate::common::servers::llama_server_with(&qwen_gguf(), 2, 1, &["--api-key", secret]);
    let dir = tempfile::tempdir().unwrap();
    let judges = server_judge("q", &[bin_server.url()], "      api_key_env: JURY_TEST_KEY\n");
    let cfg = experiment(dir.path(), 3, &judges, None);
    let out =
        Command::new(jury_bin()).args(["run", cfg.to_str().unwrap()]).env("JURY_TEST_KEY", secret).output().unwrap();
    let mut seen = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{seen}");
    let wrong = Command::new(jury_bin())
        .args(["run", cfg.to_str().unwrap()])
        .env("JURY_TEST_KEY", "sk-wrong-1234")
        .output()
        .unwrap();
    let wrong_err = String::from_utf8_lossy(&wrong.stderr).into_owned();
    assert_eq!(wrong.status.code(), Some(2), "a refused key stops the run: {wrong_err}");
    assert!(wrong_err.contains("judge `q`") && !wrong_err.contains("sk-wrong"), "{wrong_err}");
    seen.push_str(&wrong_err);
    for entry in fs::read_dir(dir.path().join("out")).unwrap() {
        let p = entry.unwrap().path();
        seen.push_str(&String::from_utf8_lossy(&fs::read(&p).unwrap()));
    }
    assert!(!seen.contains(secret), "the API key leaked");
    assert!(fs::read_to_string(dir.path().join("out/config.resolved.yaml")).unwrap().contains("JURY_TEST_KEY"));
}

/// vLLM (CPU build) serving the same model: exact verdict log-probabilities by token id
/// (`logprob_token_ids`), in agreement with the in-process judge on identical tokens.
#[test]
fn server_judge_on_vllm_matches_the_in_process_judge_exactly_observed() {
    let _one = lock();
    let server = vllm_server(&qwen_hf(), "qwen");
    let dir = tempfile::tempdir().unwrap();
    // A third juror asks vLLM in chat-prefill mode (no tokenizer: vLLM renders the chat
    // and continues the assistant turn from the answer prefix). Sharing a batch with the
    // tokens-mode juror's `logprob_token_ids` requests, vLLM 0.32 answers it with
    // placeholder log-probabilities; the judge asks again (many retries here).
    let judges = format!(
        "  - name: local-qwen\n    gguf: {}\n{}  - name: vllm-chat\n    server: {{base_urls: [\"{}\"], model: qwen, retries: 40}}\n",
        qwen_gguf().display(),
        server_judge("vllm-qwen", &[server.url()], "      max_in_flight: 2\n"),
        server.url()
    );
    let n = 12;
    run_ok(&experiment(dir.path(), n, &judges, None));
    let j = judgments(dir.path());
    for ((id, judge), (_, exact)) in &j {
        assert!(judge != "vllm-qwen" || *exact, "{id}: vLLM returns the named ids' log-probabilities");
    }
    let (close, judged) = agreement(dir.path(), "local-qwen", "vllm-qwen");
    assert_eq!(judged, n);
    assert!(close * 10 >= n * 9, "only {close} of {n} within 0.03");
    assert_eq!(judge_entry(dir.path(), "vllm-qwen")["exact_share"].as_f64(), Some(1.0));
    let chat = judge_entry(dir.path(), "vllm-chat");
    assert_eq!((chat["server"]["mode"].as_str(), chat["failed"].as_u64()), (Some("chat-prefill"), Some(0)));
    assert_eq!(chat["verdict_token_ids"], judge_entry(dir.path(), "vllm-qwen")["verdict_token_ids"], "from /tokenize");
    assert_eq!(chat["exact_share"].as_f64(), Some(1.0), "the /tokenize ids' log-probabilities, asked by name");
    // vLLM renders the same chat template: with the /tokenize ids the chat juror sees
    // the in-process judge's numbers too.
    let (close, judged) = probability_agreement(dir.path(), "local-qwen", "vllm-chat");
    assert_eq!(judged, n);
    assert!(close * 10 >= n * 9, "chat-prefill: only {close} of {n} within 0.03 of the in-process judge");
}

/// An adaptive run: two in-process judges and one on llama-server, a warm-up that every
/// judge answers, then judges asked one at a time until the default stopping model
/// (gauss) expects the judges left not to change a verdict. A run killed with SIGKILL at
/// three moments and resumed each time asks no judge twice and ends with the same
/// decisions and, byte for byte, the same judgments as an uninterrupted run: the server
/// runs with `--no-cache-prompt`, without which a slot reuses the KV cache of the prompt
/// before it and an answer depends on the request history (by up to 0.03 in P(Yes)
/// here).
#[test]
fn adaptive_run_stops_early_and_resumes_to_the_same_judgments() {
    let _one = lock();
    // One slot and no prefix cache in process: each judgment computed the same way in
    // every run, whatever ran before it.
    let server = llama_server_with(&qwen_gguf(), 1, 1, &["--no-cache-prompt"]);
    let smollm = model("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let judges = format!(
        "  - name: smollm2-135m\n    gguf: {}\n  - name: local-qwen\n    gguf: {}\n    cost: 2\n{}    cost: 3\n",
        smollm.display(),
        qwen_gguf().display(),
        server_judge("server-qwen", &[server.url()], "      top_logprobs: 100\n"),
    );
    let n = 24;
    let adaptive = "adaptive: {target: 0.9, min_judges: 2, warmup: 0.25, seed: 1}\n";
    let write = |dir: &Path| {
        let cfg = experiment(dir, n, &judges, None);
        let text = fs::read_to_string(&cfg)
            .unwrap()
            .replace("output:", &format!("{adaptive}output:"))
            .replace("prefix_cache: true", "prefix_cache: false");
        fs::write(&cfg, text).unwrap();
        cfg
    };

    let whole = tempfile::tempdir().unwrap();
    run_ok(&write(whole.path()));
    let m = manifest(whole.path())["adaptive"].clone();
    assert_eq!(m["warmup_examples"], 6);
    assert_eq!(m["full_calls"], 3 * n);
    assert_eq!(m["order"], serde_json::json!(["smollm2-135m", "local-qwen", "server-qwen"]), "cheapest first");
    let calls = m["calls"].as_u64().unwrap() as usize;
    assert!(calls < 3 * n, "nothing stopped early: {m}");
    let per: usize = m["calls_per_judge"].as_object().unwrap().values().map(|c| c.as_u64().unwrap() as usize).sum();
    assert_eq!(per, calls);
    let decisions = lines(&whole.path().join("out/adaptive.csv"));
    assert_eq!(decisions[0], "example_id,asked,answered,stop,confidence");
    assert_eq!(decisions.len(), n + 1);
    for row in &decisions[1..] {
        let f: Vec<&str> = row.split(',').collect();
        let asked = f[1].split(';').count();
        match f[3] {
            "warm-up" => assert_eq!(asked, 3, "{row}"),
            // Never before the minimum, never beyond the judges there are.
            "settled" => assert!((2..=3).contains(&asked) && f[4].parse::<f64>().unwrap() >= 0.9, "{row}"),
            "every-judge" => assert_eq!(asked, 3, "{row}"),
            other => panic!("unknown stop {other}: {row}"),
        }
    }
    // Every judgment asked for is in judgments.csv and the cache, once.
    assert_eq!(lines(&whole.path().join("out/judgments.csv")).len(), calls + 1);
    assert_one_line_per_judgment(whole.path(), calls);

    let killed = tempfile::tempdir().unwrap();
    let cfg = write(killed.path());
    let cache = killed.path().join("out/cache.jsonl");
    for at in [4, 20, 30] {
        let mut child = Command::new(jury_bin()).args(["run", cfg.to_str().unwrap()]).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(300);
        while lines(&cache).len() < at && Instant::now() < deadline && child.try_wait().unwrap().is_none() {
            std::thread::sleep(Duration::from_millis(10));
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }
    run_ok(&cfg);
    let read = |dir: &Path, file: &str| lines(&dir.join("out").join(file));
    assert_eq!(
        read(whole.path(), "judgments.csv"),
        read(killed.path(), "judgments.csv"),
        "judgments.csv after the kills"
    );
    assert_eq!(read(whole.path(), "adaptive.csv"), read(killed.path(), "adaptive.csv"), "adaptive.csv after the kills");
    assert_one_line_per_judgment(killed.path(), calls);
}

/// The server form of the TruthfulQA paper config (`configs/paper/truthfulqa-servers.yaml`:
/// eight judges, each with its own server and tokenizer) against one real llama-server
/// on loopback: every judge's server and tokenizer replaced by the fetched Qwen's, the
/// data by a stand-in in TruthfulQA's format, `limit: 20` added; the rest unchanged.
/// Every judge judges every example in a tokens mode, and the run aggregates.
#[test]
fn truthfulqa_server_config_runs_on_llama_server() {
    let _one = lock();
    let server = llama_server(&qwen_gguf(), 2, 2);
    let dir = tempfile::tempdir().unwrap();
    let (file, data) = crate::common::paper_stand_in("truthfulqa");
    let data_path = dir.path().join(file);
    fs::write(&data_path, data).unwrap();
    let config = fs::read_to_string(repo_root().join("configs/paper/truthfulqa-servers.yaml")).unwrap();
    let out = dir.path().join("out");
    let mut edited = Vec::new();
    for l in config.lines() {
        match l.trim_start() {
            t if t.starts_with("base_urls: ") => edited.push(format!("      base_urls: [\"{}\"]", server.url())),
            t if t.starts_with("tokenizer: ") => edited.push(format!("      tokenizer: {}", qwen_hf().display())),
            t if t.starts_with("path: ") => {
                edited.push(format!("  path: {}", data_path.display()));
                edited.push("  limit: 20".to_owned());
            }
            t if t.starts_with("output: ") => edited.push(format!("output: {}", out.display())),
            _ => edited.push(l.to_owned()),
        }
    }
    let cfg = dir.path().join("truthfulqa-servers.yaml");
    fs::write(&cfg, edited.join("\n")).unwrap();
    let run = Command::new(jury_bin()).args(["run", cfg.to_str().unwrap()]).current_dir(repo_root()).output().unwrap();
    assert!(run.status.success(), "{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    let judges = manifest(dir.path())["judges"].as_array().unwrap().clone();
    assert_eq!(judges.len(), 8, "{judges:?}");
    for j in &judges {
        assert_eq!(j["server"]["mode"], "tokens", "{j}");
        assert_eq!(j["failed"], 0, "{j}");
    }
    // Six stand-in examples, all eight judges on each.
    assert_eq!(judgments(dir.path()).len(), 6 * 8);
    let metrics: Value = serde_json::from_str(&fs::read_to_string(out.join("metrics.json")).unwrap()).unwrap();
    assert_eq!(metrics["n_judges"], 8);
    let recommended = metrics["recommended_method"].as_str().unwrap();
    assert!(!metrics["methods"][recommended].is_null(), "{metrics}");
}
