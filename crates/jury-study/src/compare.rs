//! `jury compare-runs`: the same judge's verdicts in several `jury run` outputs (another
//! device, engine, server or setting) set beside a reference's: speed, how close
//! P(positive) is, and whether the same token sequences were judged.

use std::collections::HashMap;
use std::fmt::Write as _;

use jury_core::Judgments;
use jury_io::{Manifest, PromptRecord};

/// Two verdicts closer than this count as the same ("within 0.03").
pub const CLOSE: f64 = 0.03;

/// One `jury run` output folder as read: its manifest, judgments and, when the run
/// kept them (`dump_prompts`), the judged prompts.
pub struct RunFiles {
    pub label: String,
    pub manifest: Manifest,
    pub judgments: Judgments,
    pub prompts: Vec<PromptRecord>,
}

/// Which judges to compare with which.
#[derive(Debug, Clone, Default)]
pub struct Pairing {
    /// The reference run's label.
    pub reference: String,
    /// The reference run's judge every row is compared with; `None`: the judge of the
    /// same name.
    pub reference_judge: Option<String>,
    /// The judges given a row; empty: every judge of every run.
    pub judges: Vec<String>,
}

/// Runs that cannot be compared as asked.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error("no run is labelled `{0}` (the reference)")]
    NoReference(String),
    #[error("run `{run}` has no judge `{judge}`{hint}")]
    NoJudge { run: String, judge: String, hint: &'static str },
    #[error("no judge of any run is among --judges {0}")]
    NoRow(String),
}

/// One judge of one run against the reference's; shares are fractions.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub label: String,
    pub judge: String,
    pub engine: String,
    /// Examples with a P(positive).
    pub examples: usize,
    pub failed: usize,
    /// Examples per second of judging (model load excluded); `None` when nothing was
    /// judged (every judgment from the cache).
    pub examples_per_second: Option<f64>,
    /// `examples_per_second` over the reference's.
    pub speed_ratio: Option<f64>,
    /// Examples both scored, which the closeness columns are over.
    pub common: usize,
    pub within_close: Option<f64>,
    pub median_abs_diff: Option<f64>,
    pub max_abs_diff: Option<f64>,
    /// Share of common examples on the same side of 0.5.
    pub same_side: Option<f64>,
    /// Share of common examples judged on identical token ids, among those both runs
    /// kept prompts for; `None` when there are none.
    pub same_tokens: Option<f64>,
    pub exact_share: Option<f64>,
    pub captured_mass: Option<f64>,
    pub prefix_cache_entries: Option<usize>,
}

/// One judge's P(positive) and prompts in one run.
struct Side<'a> {
    p: HashMap<&'a str, f64>,
    tokens: HashMap<&'a str, &'a [u32]>,
}

impl<'a> Side<'a> {
    fn of(run: &'a RunFiles, judge: &str) -> Option<Self> {
        let k = run.judgments.judge_names().iter().position(|j| j == judge)?;
        let ids = run.judgments.example_ids();
        let p = (0..ids.len()).filter_map(|n| Some((ids[n].as_str(), run.judgments.get(n, k)?[1]))).collect();
        let tokens = run
            .prompts
            .iter()
            .filter(|r| r.judge == judge && !r.tokens.is_empty())
            .map(|r| (r.example_id.as_str(), &r.tokens[..]))
            .collect();
        Some(Self { p, tokens })
    }
}

/// Every row `pairing` asks for, runs in the order given and judges in each run's
/// manifest order.
pub fn compare_runs(runs: &[RunFiles], pairing: &Pairing) -> Result<Vec<Comparison>, CompareError> {
    let reference = runs
        .iter()
        .find(|r| r.label == pairing.reference)
        .ok_or_else(|| CompareError::NoReference(pairing.reference.clone()))?;
    let mut rows = Vec::new();
    // The reference's side of each judge compared with, read once.
    let mut theirs_by_name: HashMap<&str, Side> = HashMap::new();
    for run in runs {
        for judge in &run.manifest.judges {
            if !pairing.judges.is_empty() && !pairing.judges.contains(&judge.name) {
                continue;
            }
            let ref_name = pairing.reference_judge.as_deref().unwrap_or(&judge.name);
            let no_judge = |run: &RunFiles, judge: &str, hint| CompareError::NoJudge {
                run: run.label.clone(),
                judge: judge.to_owned(),
                hint,
            };
            let hint =
                if pairing.reference_judge.is_some() { "" } else { " (name its counterpart with --reference-judge)" };
            let ref_judge = reference
                .manifest
                .judges
                .iter()
                .find(|j| j.name == ref_name)
                .ok_or_else(|| no_judge(reference, ref_name, hint))?;
            let ours = Side::of(run, &judge.name).ok_or_else(|| no_judge(run, &judge.name, " in judgments.csv"))?;
            if !theirs_by_name.contains_key(ref_name) {
                let side =
                    Side::of(reference, ref_name).ok_or_else(|| no_judge(reference, ref_name, " in judgments.csv"))?;
                theirs_by_name.insert(ref_name, side);
            }
            let theirs = &theirs_by_name[ref_name];
            rows.push(compare(run, judge, &ours, ref_judge, theirs));
        }
    }
    if rows.is_empty() {
        return Err(CompareError::NoRow(pairing.judges.join(",")));
    }
    Ok(rows)
}

fn compare(
    run: &RunFiles,
    judge: &jury_io::ManifestJudge,
    ours: &Side,
    ref_judge: &jury_io::ManifestJudge,
    theirs: &Side,
) -> Comparison {
    let speed = |n: usize, seconds: f64| (seconds > 0.0).then(|| n as f64 / seconds);
    let examples_per_second = speed(ours.p.len(), judge.judge_seconds);
    let reference_speed = speed(theirs.p.len(), ref_judge.judge_seconds);
    let mut common: Vec<&str> = ours.p.keys().copied().filter(|e| theirs.p.contains_key(e)).collect();
    common.sort_unstable();
    let mut diffs: Vec<f64> = common.iter().map(|e| (ours.p[e] - theirs.p[e]).abs()).collect();
    diffs.sort_by(f64::total_cmp);
    let share = |count: usize, of: usize| (of > 0).then(|| count as f64 / of as f64);
    let n = common.len();
    let same_side = common.iter().filter(|e| (ours.p[*e] > 0.5) == (theirs.p[*e] > 0.5)).count();
    let with_tokens: Vec<bool> =
        common.iter().filter_map(|e| Some(ours.tokens.get(e)? == theirs.tokens.get(e)?)).collect();
    Comparison {
        label: run.label.clone(),
        judge: judge.name.clone(),
        engine: judge.engine.clone(),
        examples: ours.p.len(),
        failed: judge.failed,
        examples_per_second,
        speed_ratio: examples_per_second.zip(reference_speed).map(|(a, b)| a / b),
        common: n,
        within_close: share(diffs.iter().filter(|d| **d <= CLOSE).count(), n),
        median_abs_diff: median(&diffs),
        max_abs_diff: diffs.last().copied(),
        same_side: share(same_side, n),
        same_tokens: share(with_tokens.iter().filter(|s| **s).count(), with_tokens.len()),
        exact_share: judge.exact_share,
        captured_mass: run.manifest.mean_captured_mass.get(&judge.name).copied().flatten(),
        prefix_cache_entries: judge.prefix_cache_entries,
    }
}

/// The median of sorted values (the mean of the middle two for an even count).
fn median(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// The rows as one markdown table; a column no row has a value for is left out.
pub fn comparison_table(rows: &[Comparison], reference: &str) -> String {
    let header = [
        "run".to_owned(),
        "judge".into(),
        "engine".into(),
        "examples".into(),
        "failed".into(),
        "ex/s".into(),
        format!("ex/s / {reference}'s"),
        "same tokens".into(),
        format!("within {CLOSE} of {reference}"),
        "median abs diff".into(),
        "max abs diff".into(),
        "same side of 0.5".into(),
        "exact".into(),
        "captured mass".into(),
        "prefix-cache entries".into(),
    ];
    let cells: Vec<[Option<String>; 15]> = rows.iter().map(row_cells).collect();
    let kept: Vec<usize> = (0..header.len()).filter(|&c| cells.iter().any(|r| r[c].is_some())).collect();
    let mut t = String::new();
    let names: Vec<&str> = kept.iter().map(|&c| header[c].as_str()).collect();
    let _ = writeln!(t, "| {} |", names.join(" | "));
    let _ = writeln!(t, "|{}", "---|".repeat(kept.len()));
    for row in &cells {
        let shown: Vec<&str> = kept.iter().map(|&c| row[c].as_deref().unwrap_or("-")).collect();
        let _ = writeln!(t, "| {} |", shown.join(" | "));
    }
    t
}

fn row_cells(c: &Comparison) -> [Option<String>; 15] {
    let pct = |v: Option<f64>, digits: usize| v.map(|x| format!("{:.digits$}%", 100.0 * x));
    let num = |v: Option<f64>, digits: usize| v.map(|x| format!("{x:.digits$}"));
    [
        Some(c.label.clone()),
        Some(c.judge.clone()),
        Some(c.engine.clone()),
        Some(c.examples.to_string()),
        Some(c.failed.to_string()),
        num(c.examples_per_second, 2),
        c.speed_ratio.map(|r| format!("{r:.2}x")),
        pct(c.same_tokens, 0),
        pct(c.within_close, 1),
        num(c.median_abs_diff, 4),
        num(c.max_abs_diff, 4),
        pct(c.same_side, 1),
        pct(c.exact_share, 1),
        num(c.captured_mass, 3),
        c.prefix_cache_entries.map(|e| e.to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use jury_core::JudgmentsBuilder;

    use super::*;

    /// A run of `judges` (name, judge seconds), each scoring `p` on examples e0, e1, ...
    fn run(label: &str, judges: &[(&str, f64, &[f64])], prompts: &[(&str, &str, &[u32])]) -> RunFiles {
        let manifest_judges: Vec<String> = judges
            .iter()
            .map(|(name, seconds, _)| {
                format!(
                    r#"{{"name": "{name}", "model_sha256": "", "engine": "e-{name}", "extraction_rule": "", "load_seconds": 1,
                    "judge_seconds": {seconds}, "scored": 1, "from_cache": 0, "failed": 0, "exact_share": 1.0,
                    "prefix_cache_entries": null, "verdict_token_ids": {{"positive": [], "negative": [], "tie": []}}}}"#
                )
            })
            .collect();
        let manifest = serde_json::from_str(&format!(
            r#"{{"experiment": "x", "jury_version": "0", "template": {{"path": "t", "sha256": ""}},
            "dataset": {{"name": "d", "path": "d", "examples": 4}}, "dequantized_weights": true, "judges": [{}],
            "mean_captured_mass": {{"{}": 0.9}}, "total_seconds": 1}}"#,
            manifest_judges.join(","),
            judges[0].0
        ))
        .unwrap();
        let mut b = JudgmentsBuilder::new(2).unwrap();
        for (name, _, ps) in judges {
            for (n, p) in ps.iter().enumerate() {
                b.push_binary(&format!("e{n}"), name, Some(*p)).unwrap();
            }
        }
        let prompts = prompts
            .iter()
            .map(|(judge, id, tokens)| PromptRecord {
                judge: (*judge).into(),
                example_id: (*id).into(),
                tokens: tokens.to_vec(),
            })
            .collect();
        RunFiles { label: label.into(), manifest, judgments: b.build(), prompts }
    }

    fn pairing(reference: &str) -> Pairing {
        Pairing { reference: reference.into(), ..Pairing::default() }
    }

    #[test]
    fn a_judge_is_compared_with_the_reference_judge_of_its_name() {
        let server =
            run("server", &[("j", 2.0, &[0.10, 0.60, 0.90, 0.40])], &[("j", "e0", &[1, 2]), ("j", "e1", &[3])]);
        let local = run("local", &[("j", 1.0, &[0.12, 0.45, 0.90, 0.50])], &[("j", "e0", &[1, 2]), ("j", "e1", &[4])]);
        let rows = compare_runs(&[server, local], &pairing("server")).unwrap();
        assert_eq!(rows.len(), 2);
        let (own, other) = (&rows[0], &rows[1]);
        assert_eq!(
            (own.within_close, own.max_abs_diff, own.speed_ratio, own.same_tokens),
            (Some(1.0), Some(0.0), Some(1.0), Some(1.0))
        );
        assert_eq!((other.examples, other.common, other.examples_per_second), (4, 4, Some(4.0)));
        assert_eq!(other.speed_ratio, Some(2.0));
        // |diffs| 0.02, 0.15, 0, 0.10: two within 0.03, the median (0.02 + 0.10) / 2.
        assert_eq!(other.within_close, Some(0.5));
        assert!((other.median_abs_diff.unwrap() - 0.06).abs() < 1e-12);
        assert!((other.max_abs_diff.unwrap() - 0.15).abs() < 1e-12);
        // e1 crosses 0.5 (0.60 vs 0.45), e3 too (0.40 vs 0.50 is not above 0.5): e1 only.
        assert_eq!(other.same_side, Some(0.75));
        // Tokens kept for e0 and e1 on both sides; e1's differ.
        assert_eq!(other.same_tokens, Some(0.5));
        assert_eq!(other.captured_mass, Some(0.9));
    }

    #[test]
    fn a_named_reference_judge_serves_every_row_and_judges_can_be_picked() {
        let one = run("out", &[("ref", 1.0, &[0.2, 0.8]), ("a", 1.0, &[0.2, 0.2]), ("b", 0.0, &[0.9, 0.8])], &[]);
        let p = Pairing {
            reference: "out".into(),
            reference_judge: Some("ref".into()),
            judges: vec!["a".into(), "b".into()],
        };
        let rows = compare_runs(&[one], &p).unwrap();
        assert_eq!(rows.iter().map(|r| r.judge.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!((rows[0].same_side, rows[1].same_side), (Some(0.5), Some(0.5)));
        // No prompts kept, and b judged nothing (all from cache): no tokens, no speed.
        assert_eq!((rows[0].same_tokens, rows[1].examples_per_second, rows[1].speed_ratio), (None, None, None));
        let table = comparison_table(&rows, "out");
        assert!(!table.contains("same tokens") && !table.contains("prefix-cache"), "{table}");
        assert!(table.contains("| out | b | e-b | 2 | 0 | - | - | 50.0% | 0.3500 |"), "{table}");
    }

    #[test]
    fn a_missing_reference_or_counterpart_is_named() {
        let a = run("a", &[("j", 1.0, &[0.5])], &[]);
        let b = run("b", &[("k", 1.0, &[0.5])], &[]);
        let err = compare_runs(&[a, b], &pairing("a")).unwrap_err().to_string();
        assert_eq!(err, "run `a` has no judge `k` (name its counterpart with --reference-judge)");
        let err = compare_runs(&[], &pairing("c")).unwrap_err().to_string();
        assert_eq!(err, "no run is labelled `c` (the reference)");
    }
}
