//! Helpers shared by the end-to-end tests: run the real `jury` program (this package's
//! `jury-e2e` binary: `jury_cli::main`, the same code as `jury`) the way a user does.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Path of the program under test; cargo builds it for integration tests.
pub(crate) fn jury_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_jury-e2e"))
}

/// Runs the program with `args`.
pub(crate) fn jury(args: &[&str]) -> Output {
    Command::new(jury_bin()).args(args).output().expect("starting jury")
}

/// Repository root (for committed data sets, prompts and fetched models). Read from
/// cargo's environment at run time: a test binary reused from a checkout at another path
/// (one shared target folder) would otherwise read that checkout's files.
pub(crate) fn repo_root() -> PathBuf {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into());
    Path::new(&manifest).parent().expect("repository root").to_owned()
}

/// A HaluEval-shaped simulated jury (`jury simulate`, 2,000 examples, ten judges, seed
/// 4) in `dir/sim`, and `dir/contexts.csv` giving every example a text that starts with
/// `markup` (untrusted text for the report). Returns the `sim` folder.
pub(crate) fn simulated_jury_with_texts(dir: &Path, markup: &str) -> PathBuf {
    use std::fmt::Write as _;
    let sim = dir.join("sim");
    let out = jury(&["simulate", "--examples", "2000", "--seed", "4", "--out", sim.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let labels = std::fs::read_to_string(sim.join("labels.csv")).unwrap();
    let mut contexts = String::from("example_id,text\n");
    for line in labels.lines().skip(1) {
        let id = line.split(',').next().unwrap();
        let _ = writeln!(contexts, "{id},\"{markup} the text of {id}\"");
    }
    std::fs::write(dir.join("contexts.csv"), contexts).unwrap();
    sim
}

pub(crate) mod fake_openai;
pub(crate) mod proxy;
pub(crate) mod servers;

/// Runs an idempotent install script of the repository's (a server, the browser) and
/// returns the path it prints last; fails the test saying what is missing.
pub(crate) fn install(script: &str, what: &str) -> PathBuf {
    // Tests of one binary run in parallel: one install at a time, so the first does the
    // work and the others find it done (the scripts also lock across processes).
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let out = Command::new(repo_root().join(script))
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {script} to get {what}: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let path = text.lines().last().unwrap_or("").trim();
    assert!(out.status.success() && !path.is_empty(), "{what} is not available: {script} failed ({})", out.status);
    PathBuf::from(path)
}

/// A stand-in for a paper data set in its own file format, a few examples, so the small
/// forms run in the suite without `../shared` or a hub: the file name and its text.
pub(crate) fn paper_stand_in(dataset: &str) -> (&'static str, String) {
    match dataset {
        "halueval-dialogue" => {
            let line = |h: &str, right: &str, wrong: &str| {
                serde_json::json!({"knowledge": "k", "dialogue_history": h, "right_response": right,
                    "hallucinated_response": wrong})
                .to_string()
            };
            let lines = [
                line(
                    "[Human]: Who wrote Hamlet? [Assistant]: Shakespeare. [Human]: When?",
                    "Around 1600.",
                    "In 1850, in Paris.",
                ),
                line("[Human]: What is the capital of Peru? [Assistant]: Lima.", "Yes, Lima.", "It is Quito."),
            ];
            ("dialogue_data.json", lines.join("\n") + "\n")
        }
        "truthfulqa" => (
            "TruthfulQA.csv",
            "Type,Category,Question,Best Answer,Correct Answers,Incorrect Answers,Source\n\
             Adversarial,Misconceptions,What happens if you crack your knuckles?,Nothing harmful,\
             Nothing harmful happens; You may hear a pop,You will get arthritis,src\n\
             Adversarial,Fiction,Are vampires real?,No,\"No, vampires are not real\",Yes; Only in Europe,src\n"
                .to_owned(),
        ),
        "chatbot-arena" => {
            let mut csv =
                "id,model_a,model_b,prompt,response_a,response_b,winner_model_a,winner_model_b,winner_tie\n".to_owned();
            for (id, q, a, b, flags) in [
                (1, "What is 2+2?", "4", "5", "1,0,0"),
                (2, "Name a primary colour.", "Banana.", "Red.", "0,1,0"),
                (3, "Say hi.", "Hi.", "Hello.", "0,0,1"),
            ] {
                let cell = |s: &str| format!("\"{}\"", serde_json::json!([s]).to_string().replace('"', "\"\""));
                csv.push_str(&format!("{id},m1,m2,{},{},{},{flags}\n", cell(q), cell(a), cell(b)));
            }
            ("train.csv", csv)
        }
        "llmbar" => (
            "dataset.json",
            serde_json::json!([
                {"input": "Give a synonym of happy.", "output_1": "Joyful.", "output_2": "Sad.", "label": 1},
                {"input": "What is 3 times 3?", "output_1": "6", "output_2": "9", "label": 2},
            ])
            .to_string(),
        ),
        other => panic!("no stand-in for data set {other}"),
    }
}
