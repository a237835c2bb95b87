//! The workspace against its own description: ARCHITECTURE.md's dependency list is
//! `cargo metadata`'s graph edge for edge, in an order with no upward arrow, and every
//! declared dependency is used (cargo machete's check, with its `ignored` list), so
//! neither can drift.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// ARCHITECTURE.md's dependency list: `crate --> a, b` lines in the first code block
/// after "## Dependency rule", in their order.
fn documented() -> Vec<(String, BTreeSet<String>)> {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let rule = text.split("## Dependency rule").nth(1).expect("a `## Dependency rule` section");
    let block = rule.split("```").nth(1).expect("a code block in it");
    block
        .lines()
        .filter_map(|line| {
            let (name, deps) = line.split_once("-->")?;
            let deps = deps.trim();
            let deps = if deps == "(nothing)" {
                BTreeSet::new()
            } else {
                deps.split(',').map(|d| d.trim().to_owned()).collect()
            };
            Some((name.trim().to_owned(), deps))
        })
        .collect()
}

#[test]
fn architecture_md_lists_every_crates_dependencies_inward() {
    let meta = metadata();
    let packages = meta["packages"].as_array().unwrap();
    let members: BTreeSet<String> = packages.iter().map(|p| p["name"].as_str().unwrap().to_owned()).collect();
    let actual: BTreeMap<String, BTreeSet<String>> = packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null() && members.contains(d["name"].as_str().unwrap()))
                .map(|d| d["name"].as_str().unwrap().to_owned())
                .collect();
            (p["name"].as_str().unwrap().to_owned(), deps)
        })
        .collect();
    let listed = documented();
    let names: Vec<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names.iter().copied().collect::<BTreeSet<_>>(),
        members.iter().map(String::as_str).collect(),
        "ARCHITECTURE.md lists other crates than the workspace's"
    );
    for (i, (name, deps)) in listed.iter().enumerate() {
        assert_eq!(deps, &actual[name], "ARCHITECTURE.md: {name}'s dependencies (left) are not Cargo's (right)");
        for dep in deps {
            let at = names.iter().position(|n| n == dep).unwrap();
            assert!(at > i, "ARCHITECTURE.md: {name} --> {dep} points up the list");
        }
    }
}

/// Every `.rs` file under `dir`, recursively.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Whether `text` holds `ident` as a whole word.
fn mentions(text: &str, ident: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(ident).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + ident.len()..].chars().next();
        !before.is_some_and(word) && !after.is_some_and(word)
    })
}

#[test]
fn every_declared_dependency_is_used() {
    let meta = metadata();
    let mut unused = Vec::new();
    for p in meta["packages"].as_array().unwrap() {
        let manifest = PathBuf::from(p["manifest_path"].as_str().unwrap());
        let dir = manifest.parent().unwrap();
        let mut files = Vec::new();
        sources(&dir.join("src"), &mut files);
        files.push(dir.join("build.rs"));
        let code: String = files.iter().filter_map(|f| std::fs::read_to_string(f).ok()).collect();
        let ignored: Vec<&str> = p["metadata"]["cargo-machete"]["ignored"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for d in p["dependencies"].as_array().unwrap().iter().filter(|d| d["kind"].is_null()) {
            let name = d["rename"].as_str().unwrap_or_else(|| d["name"].as_str().unwrap());
            if !ignored.contains(&name) && !mentions(&code, &name.replace('-', "_")) {
                unused.push(format!("{}: {name}", p["name"].as_str().unwrap()));
            }
        }
    }
    assert!(unused.is_empty(), "declared but never named in src/: {unused:?}");
}

/// Only jury-judge knows mistral.rs: no other crate depends on it (any kind of
/// dependency) or names its crates in code, and its engine's rules live there too.
#[test]
fn only_jury_judge_knows_mistralrs() {
    // Spelled in pieces so that this file does not name them itself.
    let names = [["mistralrs", "::"].concat(), ["mistralrs", "_core"].concat(), ["use ", "mistralrs"].concat()];
    assert_eq!(crates_that_know("jury-judge", "mistralrs", &names), Vec::<String>::new());
}

/// Table formats have one home: only jury-io depends on or names the Parquet reader.
#[test]
fn only_jury_io_knows_parquet() {
    let names = [["parquet", "::"].concat()];
    assert_eq!(crates_that_know("jury-io", "parquet", &names), Vec::<String>::new());
}

/// The hub has one home: only jury-hub depends on or names `hf-hub`.
#[test]
fn only_jury_hub_knows_hf_hub() {
    let names = [["hf_hub", "::"].concat()];
    assert_eq!(crates_that_know("jury-hub", "hf-hub", &names), Vec::<String>::new());
}

/// Every workspace crate but `home` that depends on a crate whose name starts with `dep`,
/// or whose sources contain one of `names`.
fn crates_that_know(home: &str, dep: &str, names: &[String]) -> Vec<String> {
    let meta = metadata();
    let mut offenders = Vec::new();
    for p in meta["packages"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        if name == home {
            continue;
        }
        for d in p["dependencies"].as_array().unwrap() {
            if d["name"].as_str().unwrap().starts_with(dep) {
                offenders.push(format!("{name} depends on {}", d["name"]));
            }
        }
        let dir = PathBuf::from(p["manifest_path"].as_str().unwrap()).parent().unwrap().to_path_buf();
        let mut files = Vec::new();
        sources(&dir, &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            if names.iter().any(|n| text.contains(n.as_str())) {
                offenders.push(format!("{} names {dep}", f.display()));
            }
        }
    }
    offenders
}

/// The output file names, each spelled once: in `jury_io::layout`. Library and program
/// code (test modules aside) takes them from there.
#[test]
fn output_file_names_are_spelled_only_in_the_layout_module() {
    let layout_path = root().join("crates/jury-io/src/output/layout.rs");
    let layout = std::fs::read_to_string(&layout_path).unwrap();
    let names: Vec<String> = layout
        .lines()
        .filter(|l| l.starts_with("pub const"))
        .filter_map(|l| l.split('"').nth(1).map(|n| format!("\"{n}\"")))
        .collect();
    assert!(names.len() >= 20, "{names:?}");
    let mut files = Vec::new();
    sources(&root().join("crates"), &mut files);
    let mut found = Vec::new();
    for f in files.iter().filter(|f| **f != layout_path && f.components().any(|c| c.as_os_str() == "src")) {
        let text = std::fs::read_to_string(f).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for name in names.iter().filter(|n| code.contains(n.as_str())) {
            found.push(format!("{}: {name}", f.strip_prefix(root()).unwrap().display()));
        }
    }
    assert!(found.is_empty(), "output file names spelled outside jury_io::layout: {found:?}");
}

/// The modules of one crate (`src/NAME.rs` or `src/NAME/`) and, for each, the modules its
/// code names by path (`crate::NAME`), test modules aside.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let module_of = |f: &Path| -> Option<String> {
        let rel = f.strip_prefix(src).ok()?;
        let first = rel.components().next()?.as_os_str().to_str()?;
        let name = first.strip_suffix(".rs").unwrap_or(first);
        (!matches!(name, "lib" | "main" | "bin")).then(|| name.to_owned())
    };
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = modules.iter().map(|m| (m.clone(), BTreeSet::new())).collect();
    for f in &files {
        let Some(from) = module_of(f) else { continue };
        let text = std::fs::read_to_string(f).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let mut names = BTreeSet::new();
        for (at, _) in code.match_indices("crate::") {
            let rest = &code[at + "crate::".len()..];
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if rest[name.len()..].starts_with("::") || rest[name.len()..].starts_with(";") {
                names.insert(name);
            }
        }
        // `use crate::{a::X, b}` names modules inside braces too.
        for (at, _) in code.match_indices("use crate::{") {
            let inner = &code[at + "use crate::{".len()..];
            let inner = &inner[..inner.find("};").unwrap_or(inner.len())];
            for part in inner.split(',') {
                let name: String = part.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if part.trim()[name.len()..].starts_with("::") {
                    names.insert(name);
                }
            }
        }
        let edges = graph.get_mut(&from).unwrap();
        edges.extend(names.into_iter().filter(|n| modules.contains(n) && *n != from));
    }
    graph
}

/// A cycle through `graph`, if it has one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_owned(), 1);
        path.push(n.to_owned());
        for m in &graph[n] {
            match state.get(m.as_str()).copied().unwrap_or(0) {
                1 => {
                    let start = path.iter().position(|p| p == m).unwrap();
                    return Some(path[start..].iter().cloned().chain([m.clone()]).collect());
                }
                0 => {
                    if let Some(c) = visit(m, graph, state, path) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        state.insert(n.to_owned(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in graph.keys() {
        if state.get(n.as_str()).copied().unwrap_or(0) == 0
            && let Some(c) = visit(n, graph, &mut state, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

/// No crate's modules import each other in a circle (module paths named in code: a
/// re-export through the crate root is not followed).
#[test]
fn no_module_imports_another_that_imports_it_back() {
    let mut cycles = Vec::new();
    for p in metadata()["packages"].as_array().unwrap() {
        let manifest = PathBuf::from(p["manifest_path"].as_str().unwrap());
        if let Some(c) = cycle(&module_graph(&manifest.parent().unwrap().join("src"))) {
            cycles.push(format!("{}: {}", p["name"].as_str().unwrap(), c.join(" -> ")));
        }
    }
    assert!(cycles.is_empty(), "module cycles: {cycles:?}");
}

/// Scripts run the `jury` binary a user builds (`cargo build -p jury-cli`), never the
/// test crate's copy of it, so what a script measures is what a user runs.
#[test]
fn no_script_runs_the_test_binary() {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "__pycache__") {
                    walk(&p, out);
                }
            } else {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&root().join("scripts"), &mut files);
    walk(&root().join(".ci"), &mut files);
    let offenders: Vec<String> = files
        .iter()
        .filter(|p| std::fs::read_to_string(p).is_ok_and(|t| t.contains("jury-e2e")))
        .map(|p| p.display().to_string())
        .collect();
    assert!(offenders.is_empty(), "scripts naming the test binary jury-e2e: {offenders:?}");
    assert!(files.len() > 40, "{}", files.len());
}

/// Only documents in the repository are cited: the team's brief, which lives outside
/// it, is named nowhere in the code, tests, scripts, configs or docs.
#[test]
fn code_cites_no_document_outside_the_repository() {
    let offenders: Vec<String> = citing_files()
        .iter()
        .filter(|p| std::fs::read_to_string(p).is_ok_and(|t| t.contains(&["SPEC", ".md"].concat())))
        .map(|p| p.display().to_string())
        .collect();
    assert!(offenders.is_empty(), "files citing the brief, which is not in the repository: {offenders:?}");
}

/// Every file that can cite a document: code, tests, scripts, configs and the docs
/// themselves (the vendored crate aside).
fn citing_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["crates", "tests"] {
        sources(&root().join(dir), &mut files);
    }
    for dir in ["scripts", "configs", "docs/benchmarks", "docs/reproduction"] {
        files.extend(std::fs::read_dir(root().join(dir)).unwrap().flatten().map(|e| e.path()).filter(|p| p.is_file()));
    }
    files.extend(["README.md", "ARCHITECTURE.md", "Cargo.toml", "docs/README.md", ".ci/run"].map(|f| root().join(f)));
    files.retain(|p| !p.starts_with(root().join("crates/vendor")));
    files
}

#[test]
fn every_cited_document_exists() {
    let mut missing = Vec::new();
    for file in citing_files() {
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        for (at, _) in text.match_indices("docs/") {
            // A URL's path (`.../docs/x.md`) is not a file of this repository.
            if text[..at].ends_with(|c: char| c == '/' || c.is_ascii_alphanumeric()) {
                continue;
            }
            let cited: String =
                text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || "_-./".contains(*c)).collect();
            let cited = cited.trim_end_matches('.');
            if cited.ends_with(".md") && !root().join(cited).is_file() {
                missing.push(format!("{}: {cited}", file.display()));
            }
        }
    }
    assert!(missing.is_empty(), "documents cited but not in the repository: {missing:?}");
}

/// docs/ is a reference a reader can take in: no file over 450 lines.
#[test]
fn every_document_stays_under_450_lines() {
    let mut long = Vec::new();
    for dir in ["docs", "docs/benchmarks", "docs/reproduction"] {
        for path in std::fs::read_dir(root().join(dir)).unwrap().flatten().map(|e| e.path()) {
            if path.extension().is_some_and(|e| e == "md") {
                let lines = std::fs::read_to_string(&path).unwrap().lines().count();
                if lines >= 450 {
                    long.push(format!("{}: {lines} lines", path.display()));
                }
            }
        }
    }
    assert!(long.is_empty(), "{long:?}");
}

/// `cargo`'s unit graph of a build (`--unit-graph`, unstable: allowed here through
/// `RUSTC_BOOTSTRAP`, which reaches only this resolution, never a compiler run).
fn unit_graph(args: &[&str]) -> Vec<Value> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(args)
        .args(["--offline", "--unit-graph", "-Z", "unstable-options"])
        .env("RUSTC_BOOTSTRAP", "1")
        .current_dir(root())
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let graph: Value = serde_json::from_slice(&out.stdout).unwrap();
    graph["units"].as_array().unwrap().clone()
}

/// Each unit's identity as cargo's artifact reuse sees it, hashed: package, target,
/// mode, features, profile (but its name: `dev` for a build, `test` for a test build,
/// the same settings) and platform, and the identities of its dependencies.
fn unit_identities(units: &[Value]) -> Vec<u64> {
    use std::hash::{DefaultHasher, Hash, Hasher};
    fn identity(units: &[Value], i: usize, memo: &mut Vec<Option<u64>>) -> u64 {
        if let Some(id) = memo[i] {
            return id;
        }
        let u = &units[i];
        let mut profile = u["profile"].clone();
        profile.as_object_mut().unwrap().remove("name");
        let mut deps: Vec<u64> = u["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| identity(units, d["index"].as_u64().unwrap() as usize, memo))
            .collect();
        deps.sort();
        let mut h = DefaultHasher::new();
        serde_json::json!([u["pkg_id"], u["target"]["name"], u["mode"], u["features"], profile, u["platform"]])
            .to_string()
            .hash(&mut h);
        deps.hash(&mut h);
        memo[i] = Some(h.finish());
        h.finish()
    }
    let mut memo = vec![None; units.len()];
    (0..units.len()).map(|i| identity(units, i, &mut memo)).collect()
}

/// `scripts/demo` builds `jury` without mistral.rs, and the README's second command
/// (`cargo test --workspace`) must start from that build: every unit the demo compiles
/// is one the test build links, with the same features and dependencies, except the
/// crates whose `mistralrs` feature differs (jury-judge, jury-runner, jury-cli and the
/// `jury` program). A dependency feature that only the test build turns on would
/// compile that crate, and everything above it, twice; jury-judge's Cargo.toml declares
/// them.
#[test]
fn the_tests_build_on_everything_the_demo_builds() {
    let demo = std::fs::read_to_string(root().join("scripts/demo")).unwrap();
    let line = demo.lines().find(|l| l.starts_with("step \"build\" cargo build")).expect("scripts/demo's build step");
    let args: Vec<&str> = line.split_whitespace().skip(3).filter(|a| *a != "-q").collect();
    let demo_units = unit_graph(&args);
    let test_units = unit_graph(&["test", "--workspace", "--no-run"]);
    let shared: BTreeSet<u64> = unit_identities(&test_units).into_iter().collect();
    let mut rebuilt: BTreeSet<String> = BTreeSet::new();
    for (u, id) in demo_units.iter().zip(unit_identities(&demo_units)) {
        if !shared.contains(&id) {
            rebuilt.insert(format!(
                "{} {}",
                u["pkg_id"].as_str().unwrap().rsplit('/').next().unwrap(),
                u["target"]["name"]
            ));
        }
    }
    let allowed = ["jury-judge", "jury-runner", "jury-cli"];
    let unexpected: Vec<&String> =
        rebuilt.iter().filter(|u| !allowed.iter().any(|c| u.starts_with(&format!("{c}#")))).collect();
    assert!(unexpected.is_empty(), "units of scripts/demo's build the test build compiles again: {unexpected:?}");
    assert!(!rebuilt.is_empty(), "the demo's build should differ from the tests' in jury-judge's `mistralrs` feature");
}
