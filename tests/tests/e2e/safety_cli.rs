//! Results are never destroyed, mixed or silently falsified: output directories that
//! hold other files, another command's output, a symbolic link or a second process;
//! configs and flags that cannot give a meaningful answer, refused before anything is
//! written; a hand-edited cache record judged again. Each test is one defect a user
//! found (issue 35).

use std::fs;
use std::path::{Path, PathBuf};

use crate::common::{jury, repo_root};
use serde_json::Value;

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn simulate(dir: &Path) {
    let out = jury(&["simulate", "--examples", "300", "--seed", "2", "--out", p(dir)]);
    assert!(out.status.success(), "{}", stderr(&out));
}

fn aggregate(data: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let j = data.join("judgments.csv");
    let l = data.join("labels.csv");
    let mut args = vec!["aggregate", "--judgments", p(&j), "--labels", p(&l), "--methods", "mv,ds", "--out", p(out)];
    args.extend(extra);
    jury(&args)
}

#[test]
fn aggregate_refuses_a_folder_with_files_it_did_not_write_and_replaces_only_with_force() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    simulate(&data);
    let out = dir.path().join("mine");
    fs::create_dir(&out).unwrap();
    fs::write(out.join("metrics.json"), "precious").unwrap();
    let refused = aggregate(&data, &out, &[]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(stderr(&refused).contains("already holds metrics.json") && stderr(&refused).contains("--force"));
    assert_eq!(fs::read_to_string(out.join("metrics.json")).unwrap(), "precious");
    let forced = aggregate(&data, &out, &["--force"]);
    assert!(forced.status.success(), "{}", stderr(&forced));
    // Its own output is replaced on a rerun; another command's is not.
    assert!(aggregate(&data, &out, &[]).status.success());
    let foreign = aggregate(&data, &data, &[]);
    assert_eq!(foreign.status.code(), Some(2));
    assert!(stderr(&foreign).contains("holds the output of `jury simulate`"), "{}", stderr(&foreign));
    assert!(!data.join("metrics.json").exists());
    // Nothing but the published files and jury's own marker remain (the lock file goes
    // with the process that held it).
    assert_eq!(listing(&out), [".jury-output.json", "metrics.json", "predictions.csv", "report.html"]);
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    names
}

/// `jury ARGS` started in `cwd`, with `$HOME` at `home` (never the real one).
fn jury_at(cwd: &Path, home: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(crate::common::jury_bin())
        .args(args)
        .current_dir(cwd)
        .env("HOME", home)
        .output()
        .unwrap()
}

/// `dir/exp.yaml` writing into `output` (as YAML gives it) with one server judge on a
/// closed port and no model files: the dry run needs nothing more, and a run stops at
/// its output folder before it asks the server anything.
fn server_experiment(dir: &Path, output: &str) -> PathBuf {
    let text = format!(
        "name: outputs\n\
         dataset: {{name: demo-facts, path: {data}, limit: 2}}\n\
         prompt: {prompt}\n\
         judges:\n  - name: s\n    server: {{base_urls: ['http://127.0.0.1:9'], model: m, retries: 0}}\n\
         output: {output}\n",
        data = repo_root().join("datasets/demo-facts.csv").display(),
        prompt = demo_prompt().display(),
    );
    let path = dir.join("exp.yaml");
    fs::write(&path, text).unwrap();
    path
}

/// The current folder (however spelled), the home folder and an empty path are no
/// output folders without --force (an empty path not even with it), and a folder holding
/// files jury did not write is one only with --force, which removes none of them; a
/// refused command leaves nothing behind, no lock file and no marker (issue 65, item 3).
#[test]
fn the_current_and_home_folders_and_folders_of_the_users_need_force() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    simulate(&data);
    let (work, home) = (dir.path().join("work"), dir.path().join("home"));
    fs::create_dir(&work).unwrap();
    fs::create_dir(&home).unwrap();
    fs::write(work.join("notes.txt"), "mine").unwrap();
    let (j, l) = (data.join("judgments.csv"), data.join("labels.csv"));
    let aggregate_in = |cwd: &Path, out: &str, extra: &[&str]| {
        let mut args = vec!["aggregate", "--judgments", p(&j), "--labels", p(&l), "--methods", "mv", "--out", out];
        args.extend(extra);
        jury_at(cwd, &home, &args)
    };
    for out in [".", "./", p(&work), "../work"] {
        let r = aggregate_in(&work, out, &[]);
        assert_eq!(r.status.code(), Some(2), "{out}: {}", stderr(&r));
        assert!(stderr(&r).contains("is the current folder") && stderr(&r).contains("--force"), "{}", stderr(&r));
        assert_eq!(listing(&work), ["notes.txt"], "{out}: a refused command leaves nothing behind");
    }
    let r = aggregate_in(&work, p(&home), &[]);
    assert_eq!(r.status.code(), Some(2), "{}", stderr(&r));
    assert!(stderr(&r).contains("is the home folder"), "{}", stderr(&r));
    assert!(listing(&home).is_empty());
    // `jury run` and its dry run the same, for `output: .` beside the experiment, and
    // for an empty `output` even with --force (clap refuses an empty --out).
    for (output, extra, want) in [(".", &[][..], ".: is the current folder"), ("''", &["--force"], "empty path")] {
        server_experiment(&work, output);
        for dry in [&[][..], &["--dry-run"]] {
            let args = [&["run", "exp.yaml"][..], extra, dry].concat();
            let args = &args[..];
            let r = jury_at(&work, &home, args);
            assert_eq!(r.status.code(), Some(2), "{args:?}: {}", stderr(&r));
            assert!(stderr(&r).contains(want), "{args:?}: {}", stderr(&r));
            assert_eq!(listing(&work), ["exp.yaml", "notes.txt"], "{args:?}");
        }
    }
    // A folder of the user's: refused; with --force written beside their file, which
    // stays; and refused again without it.
    let mine = dir.path().join("mine");
    fs::create_dir(&mine).unwrap();
    fs::write(mine.join("notes.txt"), "mine").unwrap();
    let r = aggregate_in(dir.path(), p(&mine), &[]);
    assert_eq!(r.status.code(), Some(2), "{}", stderr(&r));
    assert!(stderr(&r).contains("holds notes.txt, which jury did not write"), "{}", stderr(&r));
    assert_eq!(listing(&mine), ["notes.txt"]);
    let r = aggregate_in(dir.path(), p(&mine), &["--force"]);
    assert!(r.status.success(), "{}", stderr(&r));
    assert_eq!(listing(&mine), [".jury-output.json", "metrics.json", "notes.txt", "predictions.csv", "report.html"]);
    assert_eq!(fs::read_to_string(mine.join("notes.txt")).unwrap(), "mine");
    assert_eq!(aggregate_in(dir.path(), p(&mine), &[]).status.code(), Some(2));
}

/// A second `jury aggregate` on an output folder another is computing into is refused
/// at once, naming the first's pid: the folder is taken before any input is read or
/// method run (issue 65, item 10).
#[test]
fn a_second_aggregate_on_a_folder_being_computed_is_refused_at_once_naming_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let sim = jury(&["simulate", "--examples", "200000", "--seed", "2", "--out", p(&data)]);
    assert!(sim.status.success(), "{}", stderr(&sim));
    let out = dir.path().join("out");
    let (j, l) = (data.join("judgments.csv"), data.join("labels.csv"));
    let args =
        ["aggregate", "--judgments", p(&j), "--labels", p(&l), "--methods", "ds,glad,gauss,kos", "--out", p(&out)];
    let mut first = std::process::Command::new(crate::common::jury_bin())
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lock = out.join(".jury.lock");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !fs::read_to_string(&lock).is_ok_and(|t| t.contains(&format!("pid {}", first.id()))) {
        assert!(
            first.try_wait().unwrap().is_none(),
            "the first finished before its output folder was seen locked: {}",
            String::from_utf8_lossy(&first.wait_with_output().unwrap().stderr)
        );
        assert!(std::time::Instant::now() < deadline, "no lock while the first computes");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let second = jury(&args);
    let still_computing = first.try_wait().unwrap().is_none();
    assert_eq!(second.status.code(), Some(2), "{}", stderr(&second));
    assert!(
        stderr(&second).contains(&format!("in use by another jury process (pid {}", first.id())),
        "{}",
        stderr(&second)
    );
    assert!(still_computing, "the second was refused while the first was still computing");
    let first = first.wait_with_output().unwrap();
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    assert!(out.join("metrics.json").is_file());
}

/// The dry run refuses every output the run refuses, with the same message, and
/// creates nothing: a file, a folder below a file, a device, a folder no one may write
/// in, a folder of the user's (which --force allows) (issue 65, item 11).
#[test]
fn the_dry_run_refuses_every_output_the_run_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.txt");
    fs::write(&file, "mine").unwrap();
    let below = file.join("out");
    let mut cases = vec![(p(&file), "f.txt: is not a folder"), (p(&below), "f.txt: is not a folder")];
    cases.push(("/dev/null", "/dev/null: is not a folder"));
    if cfg!(target_os = "linux") {
        cases.push(("/proc/self", "/proc/self: is not a folder jury may write in"));
    }
    for (output, want) in cases {
        server_experiment(dir.path(), output);
        let dry = jury_at(dir.path(), dir.path(), &["run", "--dry-run", "exp.yaml"]);
        assert_eq!(dry.status.code(), Some(2), "{output}: {}", stderr(&dry));
        assert!(stderr(&dry).contains(want), "{output}: {}", stderr(&dry));
        let run = jury_at(dir.path(), dir.path(), &["run", "exp.yaml", "--force"]);
        assert_eq!(stderr(&run), stderr(&dry), "{output}: the run refuses it the same way");
    }
    assert_eq!(listing(dir.path()), ["exp.yaml", "f.txt"]);
    let mine = dir.path().join("mine");
    fs::create_dir(&mine).unwrap();
    fs::write(mine.join("notes.txt"), "mine").unwrap();
    server_experiment(dir.path(), p(&mine));
    let dry = jury_at(dir.path(), dir.path(), &["run", "--dry-run", "exp.yaml"]);
    assert_eq!(dry.status.code(), Some(2), "{}", stderr(&dry));
    assert!(stderr(&dry).contains("which jury did not write"), "{}", stderr(&dry));
    let forced = jury_at(dir.path(), dir.path(), &["run", "--dry-run", "--force", "exp.yaml"]);
    assert!(forced.status.success(), "{}", stderr(&forced));
    assert_eq!(listing(&mine), ["notes.txt"], "the dry run wrote nothing");
}

#[test]
fn simulate_refuses_to_replace_files_it_did_not_write() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("judgments.csv"), "mine").unwrap();
    let out = jury(&["simulate", "--examples", "10", "--out", p(dir.path())]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(fs::read_to_string(dir.path().join("judgments.csv")).unwrap(), "mine");
}

#[test]
fn a_second_process_on_the_same_output_is_refused_naming_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    simulate(&data);
    let out = dir.path().join("out");
    fs::create_dir(&out).unwrap();
    // Another holder of the lock (as a running `jury` holds it).
    let lock = fs::File::create(out.join(".jury.lock")).unwrap();
    lock.try_lock().unwrap();
    fs::write(out.join(".jury.lock"), "pid 4242, `jury run` of experiment `x`, since unix time 1\n").unwrap();
    let second = aggregate(&data, &out, &[]);
    assert_eq!(second.status.code(), Some(2));
    assert!(stderr(&second).contains("in use by another jury process (pid 4242"), "{}", stderr(&second));
    assert!(!out.join("metrics.json").exists());
    drop(lock);
    assert!(aggregate(&data, &out, &[]).status.success());
}

#[test]
fn non_numbers_as_rates_and_tolerances_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    simulate(&data);
    for (flag, value) in
        [("--lr", "NaN"), ("--lr", "inf"), ("--lr=-0.1", ""), ("--lambdas", "0.1,inf"), ("--ds-tol", "NaN")]
    {
        let out = dir.path().join("out");
        let contexts = dir.path().join("contexts.csv");
        fs::write(&contexts, "example_id,text\n").unwrap();
        let (j, l) = (data.join("judgments.csv"), data.join("labels.csv"));
        let mut args = vec![
            "aggregate",
            "--judgments",
            p(&j),
            "--labels",
            p(&l),
            "--methods",
            "skillagg",
            "--contexts",
            p(&contexts),
        ];
        args.extend(["--dev-size", "5", "--out", p(&out), flag]);
        if !value.is_empty() {
            args.push(value);
        }
        let r = jury(&args);
        assert_eq!(r.status.code(), Some(2), "{flag} {value}");
        let name = flag.split('=').next().unwrap();
        assert!(stderr(&r).contains(name), "{flag} {value}: {}", stderr(&r));
        assert!(!out.exists(), "{flag} {value}: nothing is written");
    }
}

#[test]
fn a_judge_name_of_any_length_is_shown() {
    let dir = tempfile::tempdir().unwrap();
    let long = "j".repeat(65_536);
    let j = dir.path().join("j.csv");
    fs::write(&j, format!("example_id,judge,p\ne1,{long},0.9\ne1,b,0.2\ne2,{long},0.1\ne2,b,0.3\n")).unwrap();
    let out = jury(&["aggregate", "--judgments", p(&j), "--methods", "mv", "--out", p(&dir.path().join("out"))]);
    assert!(out.status.success(), "{}", stderr(&out));
    let m: Value = serde_json::from_str(&fs::read_to_string(dir.path().join("out/metrics.json")).unwrap()).unwrap();
    assert!(m["judges"].get(&long).is_some(), "the files keep the whole name");
}

#[test]
fn winrate_refuses_a_human_name_with_no_rows() {
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join("c.csv");
    fs::write(&c, "comparison_id,generator_0,generator_1,evaluator,vote\nc1,a,b,human,1\nc1,a,b,llm,1\nc2,a,b,llm,0\n")
        .unwrap();
    let out = jury(&["winrate", "--comparisons", p(&c), "--human", "people", "--out", p(&dir.path().join("o"))]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--human `people`: no rows") && stderr(&out).contains("human, llm"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn rank_reports_no_agreement_when_every_response_is_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path().join("r.csv");
    let mut csv = String::from("prompt_id,model,response\n");
    for d in 0..20 {
        for m in ["reference", "m1", "m2", "m3"] {
            csv.push_str(&format!("q{d},{m},same\n"));
        }
    }
    fs::write(&r, csv).unwrap();
    let out_dir = dir.path().join("o");
    let out = jury(&["rank", "--responses", p(&r), "--method", "mca", "--out", p(&out_dir)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_str(&fs::read_to_string(out_dir.join("ranking.json")).unwrap()).unwrap();
    for key in ["rbo", "spearman", "map_at_5"] {
        assert!(doc["reference"][key].is_null(), "{key}: {}", doc["reference"]);
    }
    assert!(doc["reference"]["undetermined"].as_str().unwrap().contains("scores every model the same"));
}

// `jury run`: the checks before anything is written or loaded.

fn smollm() -> PathBuf {
    let p = repo_root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(p.is_file(), "{} is missing: run scripts/fetch-judges.sh --small", p.display());
    p
}

/// `dir/exp.yaml` with SmolLM2 on the demo facts; `prompt` a template file, `extra`
/// more top-level keys.
fn experiment(dir: &Path, prompt: &Path, limit: usize, extra: &str) -> PathBuf {
    let root = repo_root();
    let text = format!(
        "name: safety\n\
         dataset: {{name: demo-facts, path: {data}, limit: {limit}, seed: 3}}\n\
         prompt: {prompt}\n\
         judges:\n  - name: smollm2-135m\n    gguf: {model}\n\
         runtime: {{max_concurrency: 1, prefix_cache: false, max_prompt_tokens: 1024}}\n\
         output: {out}\n{extra}",
        data = root.join("datasets/demo-facts.csv").display(),
        prompt = prompt.display(),
        model = smollm().display(),
        out = dir.join("out").display(),
    );
    let path = dir.join("exp.yaml");
    fs::write(&path, text).unwrap();
    path
}

fn demo_prompt() -> PathBuf {
    repo_root().join("prompts/demo-facts.yaml")
}

#[test]
fn run_refuses_bad_templates_and_too_few_labels_before_writing_anything() {
    let dir = tempfile::tempdir().unwrap();
    let template = |user: &str, negative: &str| {
        format!(
            "task: t\nsystem: Answer Yes or No.\nuser: \"{user}\"\nanswer_prefix: \"Verdict: [[\"\npositive: \"Yes\"\nnegative: \"{negative}\"\n"
        )
    };
    let same = dir.path().join("same.yaml");
    fs::write(&same, template("Is {statement} true?", "Yes")).unwrap();
    let unknown = dir.path().join("unknown.yaml");
    fs::write(&unknown, template("Is {no_such_field} true?", "No")).unwrap();
    let encoder = repo_root().join("models/all-MiniLM-L6-v2");
    let dev_set = format!("aggregate: {{methods: skillagg, dev_size: 50, encoder_dir: {}}}\n", encoder.display());
    let cases: [(&Path, usize, &str, &str); 4] = [
        (&same, 4, "", "are the same word"),
        (&unknown, 4, "", "{no_such_field}"),
        (&demo_prompt(), 0, "", "limit"),
        (&demo_prompt(), 4, &dev_set, "not enough for a dev set of 50"),
    ];
    for (prompt, limit, extra, want) in cases {
        let cfg = experiment(dir.path(), prompt, limit, extra);
        let out = jury(&["run", p(&cfg)]);
        assert_eq!(out.status.code(), Some(2), "{want}: {}", stderr(&out));
        assert!(stderr(&out).contains(want), "{want}: {}", stderr(&out));
        assert!(!dir.path().join("out").exists(), "{want}: the output folder was created");
    }
}

/// A model file that is not a GGUF is refused before anything loads or is written; one
/// that starts like a GGUF but is cut short fails as it loads, in one line (candle puts
/// a backtrace inside its error text when RUST_BACKTRACE is set), and leaves nothing.
#[test]
fn a_model_file_that_is_not_a_gguf_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = experiment(dir.path(), &demo_prompt(), 2, "");
    let yaml = fs::read_to_string(&cfg).unwrap();
    for (bytes, want) in [(&b"not a model"[..], "is not a GGUF file"), (&b"GGUF\x03\x00"[..], "loading the model")] {
        let fake = dir.path().join("fake.gguf");
        fs::write(&fake, bytes).unwrap();
        fs::write(&cfg, yaml.replace(smollm().to_str().unwrap(), fake.to_str().unwrap())).unwrap();
        let out = std::process::Command::new(crate::common::jury_bin())
            .args(["run", p(&cfg)])
            .env("RUST_BACKTRACE", "1")
            .output()
            .unwrap();
        let e = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{e}");
        assert!(e.contains(want), "{e}");
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
        assert!(!dir.path().join("out").exists(), "the output folder was left behind");
    }
}

/// A budget the template alone exceeds would fail every example: the run stops when the
/// judge has loaded, before judging, and leaves no output folder behind.
#[test]
fn a_token_budget_too_small_for_the_template_stops_the_run_before_judging() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = experiment(dir.path(), &demo_prompt(), 4, "");
    fs::write(&cfg, fs::read_to_string(&cfg).unwrap().replace("max_prompt_tokens: 1024", "max_prompt_tokens: 8"))
        .unwrap();
    let out = jury(&["run", p(&cfg)]);
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(e.contains("judge `smollm2-135m`: the prompt with every example field empty is already"), "{e}");
    assert!(e.contains("over `max_prompt_tokens` (8)"), "{e}");
    assert!(!e.contains("example `f"), "stopped before judging an example: {e}");
    assert!(!dir.path().join("out").exists(), "the output folder was left behind");
    // With a tokenizer folder the count needs no model: a file that only starts like a
    // GGUF (it would fail to load) shows the budget was checked before loading.
    let fake = dir.path().join("fake.gguf");
    fs::write(&fake, b"GGUF\x03\x00").unwrap();
    let tokenizer = repo_root().join("models/smollm2-135m-hf");
    let yaml = fs::read_to_string(&cfg).unwrap().replace(
        &format!("gguf: {}\n", smollm().display()),
        &format!("gguf: {}\n    tokenizer: {}\n", fake.display(), tokenizer.display()),
    );
    fs::write(&cfg, yaml).unwrap();
    let out = jury(&["run", p(&cfg)]);
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(e.contains("the prompt with every example field empty is already"), "{e}");
    assert!(!dir.path().join("out").exists(), "the output folder was created");
}

#[test]
fn run_refuses_a_symlinked_cache_and_a_foreign_output_folder() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("precious.txt");
    fs::write(&target, "no trailing newline").unwrap();
    fs::create_dir(dir.path().join("out")).unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("out/cache.jsonl")).unwrap();
    let cfg = experiment(dir.path(), &demo_prompt(), 2, "");
    let out = jury(&["run", p(&cfg), "--force"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
    assert_eq!(fs::read_to_string(&target).unwrap(), "no trailing newline");
    fs::remove_file(dir.path().join("out/cache.jsonl")).unwrap();
    fs::write(dir.path().join("out/judgments.csv"), "mine").unwrap();
    let out = jury(&["run", p(&cfg)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("already holds judgments.csv"), "{}", stderr(&out));
    assert_eq!(fs::read_to_string(dir.path().join("out/judgments.csv")).unwrap(), "mine");
}

#[test]
fn run_judges_a_hand_edited_cache_record_again_and_a_failed_aggregation_publishes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = experiment(dir.path(), &demo_prompt(), 3, "");
    let first = jury(&["run", p(&cfg)]);
    assert!(first.status.success(), "{}", stderr(&first));
    let judgments = fs::read_to_string(dir.path().join("out/judgments.csv")).unwrap();
    let cache = dir.path().join("out/cache.jsonl");
    let text = fs::read_to_string(&cache).unwrap();
    let edited = text.replacen("\"p_positive\":", "\"p_positive\":0.5,\"was\":", 1);
    assert_ne!(edited, text);
    fs::write(&cache, edited).unwrap();
    let again = jury(&["run", p(&cfg)]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(stderr(&again).contains("cache.jsonl line 1: the record fails its checksum"), "{}", stderr(&again));
    let m: Value = serde_json::from_str(&fs::read_to_string(dir.path().join("out/manifest.json")).unwrap()).unwrap();
    assert_eq!((m["judges"][0]["scored"].as_u64(), m["judges"][0]["from_cache"].as_u64()), (Some(1), Some(2)));
    assert_eq!(fs::read_to_string(dir.path().join("out/judgments.csv")).unwrap(), judgments, "same verdicts");
    // `stop` instead: the run ends naming the line of a damaged record.
    let mut records: Vec<String> = fs::read_to_string(&cache).unwrap().lines().map(str::to_owned).collect();
    records[1] = records[1].replacen("\"mass\":", "\"mass\":2.5,\"was\":", 1);
    fs::write(&cache, records.join("\n") + "\n").unwrap();
    let stop = experiment(dir.path(), &demo_prompt(), 3, "");
    let yaml = fs::read_to_string(&stop)
        .unwrap()
        .replace("max_prompt_tokens: 1024}", "max_prompt_tokens: 1024, bad_cache_records: stop}");
    fs::write(&stop, yaml).unwrap();
    let stopped = jury(&["run", p(&stop)]);
    assert_eq!(stopped.status.code(), Some(2));
    let e = stderr(&stopped);
    assert!(e.contains("cache.jsonl line 2") && e.contains("stopping"), "{e}");
    // A run that fails in aggregation (here: a contexts file that does not exist, read
    // only after judging) publishes nothing: the previous run's files stay.
    let encoder = repo_root().join("models/all-MiniLM-L6-v2");
    let bad = fs::read_to_string(&stop).unwrap().replace("bad_cache_records: stop}", "bad_cache_records: recompute}")
        + &format!(
            "aggregate: {{methods: skillagg, dev_size: 1, contexts: /nonexistent/contexts.csv, encoder_dir: {}}}\n",
            encoder.display()
        );
    fs::write(&stop, bad).unwrap();
    let failed = jury(&["run", p(&stop)]);
    assert_eq!(failed.status.code(), Some(2), "{}", stderr(&failed));
    assert_eq!(fs::read_to_string(dir.path().join("out/judgments.csv")).unwrap(), judgments);
    assert!(!dir.path().join("out/.jury-staging").exists(), "no staging folder left behind");
}

#[test]
fn malformed_tables_name_the_line_in_the_users_terms() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("ragged.csv", &b"example_id,judge,p\ne1,a,0.9\ne1,b\n"[..], "ragged.csv line 3: 2 fields, the header has 3"),
        (
            "quote.csv",
            &b"example_id,judge,p\ne1,a,0.9\n\"e2,b,0.1\n"[..],
            "quote.csv line 3: a quoted field is never closed",
        ),
        ("bytes.csv", &b"example_id,judge,p\ne1,a,0.9\ne\xff2,b,0.1\n"[..], "bytes.csv line 3: not UTF-8"),
        (
            "lines.jsonl",
            &b"{\"example_id\": \"e1\", \"judge\": \"a\", \"p\": 0.9}\n{\"example_id\": \n"[..],
            "lines.jsonl line 2: not a JSON value",
        ),
    ];
    for (name, bytes, want) in cases {
        let f = dir.path().join(name);
        fs::write(&f, bytes).unwrap();
        let out = jury(&["aggregate", "--judgments", p(&f), "--out", p(&dir.path().join("o"))]);
        let e = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {e}");
        assert!(e.contains(want), "{name}: {e}");
        assert!(!e.contains("You might want") && !e.contains("infer_schema"), "{name}: polars' Python advice: {e}");
    }
}

#[test]
fn an_offline_hub_is_never_asked_for_a_judge_model() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("exp.yaml");
    fs::write(
        &cfg,
        format!(
            "name: offline\ndataset: {{name: demo-facts, path: {}}}\nprompt: {}\njudges:\n  - {{name: hub, model_id: nobody/no-such-model}}\noutput: {}\n",
            repo_root().join("datasets/demo-facts.csv").display(),
            demo_prompt().display(),
            dir.path().join("out").display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(crate::common::jury_bin())
        .args(["run", p(&cfg)])
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_HOME", dir.path().join("hf"))
        .output()
        .unwrap();
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(e.contains("judge `hub`: model `nobody/no-such-model`") && e.contains("HF_HUB_OFFLINE"), "{e}");
    assert!(!dir.path().join("out").exists());
}

#[test]
fn winrate_answers_unidentifiable_for_an_all_tie_pair_and_estimates_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join("c.csv");
    let mut csv = String::from("comparison_id,generator_0,generator_1,evaluator,vote\n");
    for i in 0..40 {
        csv.push_str(&format!("g{i},a,b,human,{}\ng{i},a,b,llm,{}\n", i % 3 % 2, i % 2));
        csv.push_str(&format!("t{i},c,d,human,1\nt{i},c,d,llm,tie\n"));
    }
    fs::write(&c, csv).unwrap();
    let out_dir = dir.path().join("o");
    let out = jury(&["winrate", "--comparisons", p(&c), "--method", "observed", "--out", p(&out_dir)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_str(&fs::read_to_string(out_dir.join("winrate.json")).unwrap()).unwrap();
    let pairs = doc["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 2);
    let ab = pairs.iter().find(|x| x["generator_0"] == "a").unwrap();
    let cd = pairs.iter().find(|x| x["generator_0"] == "c").unwrap();
    assert!(ab["estimate"].is_number(), "{ab}");
    assert!(cd["estimate"].is_null() && cd["unidentifiable"].as_str().unwrap().contains("no evaluator votes"), "{cd}");
}
