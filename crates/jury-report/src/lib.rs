//! `report.html`: one self-contained page per run (no network: inline styles and SVG
//! charts), answering at a glance which judges are good, which agree, whether
//! aggregation helped, whether it is calibrated and where it fails.
//!
//! Invariants: the page is a function of the run's files and inputs (no timestamps), so
//! it can be diffed; every text from the data (judge names, example texts) goes through
//! the template's HTML escaping; charts are plotters' SVG, whose text it escapes.

mod check;
mod model;
mod plots;
mod studies;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use jury_core::{Judgments, Labels};
use jury_io::{Manifest, Metrics, OrderedJudgment, Predictions, layout};

/// What a report could not do.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{}: field `{field}`: {value} is not {expected}; the file is damaged or was edited", path.display())]
    OutOfDomain { path: PathBuf, field: String, value: String, expected: String },
    #[error(transparent)]
    Io(#[from] jury_io::IoError),
    #[error("report: {0}")]
    Mismatch(String),
    #[error("report chart: {0}")]
    Plot(String),
    #[error("report template: {0}")]
    Template(String),
}

/// A run's results as its files hold them: handed over in memory by the command that
/// wrote the files, or read back from a folder by [`RunResults::read`].
pub struct RunResults {
    /// metrics.json.
    pub metrics: Metrics,
    /// predictions.csv, which only the views that score need (a labeled run).
    pub predictions: Option<Predictions>,
    /// manifest.json, which `jury run` writes.
    pub manifest: Option<Manifest>,
    /// judgments_by_order.csv, of a pairwise run judged in both orders.
    pub by_order: Option<Vec<OrderedJudgment>>,
    /// categories.csv: each example's category, where the data set has them.
    pub categories: Option<HashMap<String, String>>,
}

impl RunResults {
    /// Reads an output folder's files, each checked against its fields' domains, so a
    /// damaged or hand-edited file is named; predictions.csv only when `labeled`.
    pub fn read(dir: &Path, labeled: bool) -> Result<Self, ReportError> {
        let present = |name: &str| Some(dir.join(name)).filter(|p| p.is_file());
        let metrics = Metrics::read(&dir.join(layout::METRICS))?;
        check::metrics(&dir.join(layout::METRICS), &metrics)?;
        let manifest = present(layout::MANIFEST).map(|p| Manifest::read(&p)).transpose()?;
        if let Some(m) = &manifest {
            check::manifest(&dir.join(layout::MANIFEST), m)?;
        }
        Ok(Self {
            metrics,
            predictions: labeled.then(|| jury_io::read_predictions(&dir.join(layout::PREDICTIONS))).transpose()?,
            manifest,
            by_order: present(layout::JUDGMENTS_BY_ORDER).map(|p| jury_io::read_by_order(&p)).transpose()?,
            categories: present(layout::CATEGORIES).map(|p| jury_io::read_categories(&p)).transpose()?,
        })
    }
}

/// What a run's page is drawn from: its results and the inputs they were computed from.
pub struct Inputs<'a> {
    pub results: &'a RunResults,
    pub judgments: &'a Judgments,
    pub labels: Option<&'a Labels>,
    /// Each example's context text, shown beside the hardest examples.
    pub contexts: Option<&'a HashMap<String, String>>,
}

/// The report file's name in an output folder.
pub const REPORT_FILE: &str = jury_io::layout::REPORT;

/// The pages' templates (`.html`: minijinja escapes every value they print).
const TEMPLATES: [(&str, &str); 6] = [
    ("base.html", include_str!("../templates/base.html")),
    ("run.html", include_str!("../templates/report.html")),
    ("winrate.html", include_str!("../templates/winrate.html")),
    ("rank.html", include_str!("../templates/rank.html")),
    ("adaptive.html", include_str!("../templates/adaptive.html")),
    ("calibration.html", include_str!("../templates/calibration.html")),
];

fn fill(name: &str, page: &impl serde::Serialize) -> Result<String, ReportError> {
    let template = |e: minijinja::Error| ReportError::Template(e.to_string());
    let mut env = minijinja::Environment::new();
    for (n, text) in TEMPLATES {
        env.add_template(n, text).map_err(template)?;
    }
    env.get_template(name).map_err(template)?.render(minijinja::context! { page => page }).map_err(template)
}

/// The page's HTML.
pub fn render(inputs: &Inputs) -> Result<String, ReportError> {
    fill("run.html", &model::page(inputs)?)
}

/// The page of a `jury winrate` output folder (winrate.json).
pub fn render_winrate(dir: &Path) -> Result<String, ReportError> {
    fill("winrate.html", &studies::winrate(dir)?)
}

/// The page of a `jury rank` output folder (ranking.json).
pub fn render_ranking(dir: &Path) -> Result<String, ReportError> {
    fill("rank.html", &studies::ranking(dir)?)
}

/// The page of a `jury simulate adaptive` output folder (adaptive.json): accuracy
/// against judge calls.
pub fn render_adaptive(dir: &Path) -> Result<String, ReportError> {
    fill("adaptive.html", &studies::adaptive(dir)?)
}

/// The page of `dir`'s calibration.json (`jury simulate calibration`).
pub fn render_calibration(dir: &Path) -> Result<String, ReportError> {
    fill("calibration.html", &studies::calibration(dir)?)
}

/// Writes `dir/report.html` from `html`, atomically.
pub fn write_page(dir: &Path, html: &str) -> Result<(), ReportError> {
    jury_io::write_atomic(&dir.join(REPORT_FILE), html.as_bytes())?;
    Ok(())
}

/// Writes the page to `dir/report.html` atomically.
pub fn write(inputs: &Inputs, dir: &Path) -> Result<(), ReportError> {
    write_page(dir, &render(inputs)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page of the run whose files are in `dir`, read back as `jury report` reads them.
    fn page(dir: &Path, j: &Judgments, labels: Option<&Labels>) -> Result<String, ReportError> {
        let results = RunResults::read(dir, labels.is_some())?;
        render(&Inputs { results: &results, judgments: j, labels, contexts: None })
    }

    /// A HaluEval-shaped simulated run (binary, ten judges, labels) through jury-study,
    /// its files in a folder, one judge named like markup and one context with a script.
    fn run(dir: &Path) -> (Judgments, Labels, HashMap<String, String>) {
        let jury = jury_sim::simulate(&jury_sim::JuryConfig::mixed_binary(600, 3)).unwrap();
        let j = jury.judgments;
        let mut b = jury_core::JudgmentsBuilder::new(2).unwrap();
        for (n, k, p) in j.entries() {
            let name = if k == 0 { "<b>bold</b> & co".to_owned() } else { j.judge_names()[k].clone() };
            b.push_binary(&j.example_ids()[n], &name, Some(p[1])).unwrap();
        }
        let j = b.build();
        let labels = Labels::new(2, jury.truth.iter().map(|&t| Some(t)).collect()).unwrap();
        let settings = jury_study::Settings::new(&jury_study::AggregateOptions::default()).unwrap();
        let study = jury_study::run(&j, Some(&labels), &settings, &|_| {}).unwrap();
        study.write(dir).unwrap();
        let contexts = j
            .example_ids()
            .iter()
            .map(|id| (id.clone(), format!("<script>alert('{id}')</script> text of {id}")))
            .collect();
        (j, labels, contexts)
    }

    #[test]
    fn the_page_has_every_section_with_metrics_numbers_escaped_and_deterministic() {
        let dir = tempfile::tempdir().unwrap();
        let (j, labels, contexts) = run(dir.path());
        let results = RunResults::read(dir.path(), true).unwrap();
        let inputs = Inputs { results: &results, judgments: &j, labels: Some(&labels), contexts: Some(&contexts) };
        let html = render(&inputs).unwrap();
        for id in ["run", "judges", "methods", "agreement", "calibration", "skills"] {
            assert!(
                html.contains(&format!("<section id=\"{id}\"")) || html.contains(&format!("<header id=\"{id}\"")),
                "no {id}"
            );
        }
        // Method and judge numbers are metrics.json's, to four decimals.
        let m: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("metrics.json")).unwrap()).unwrap();
        assert!(html.contains("Krippendorff&#x27;s alpha") || html.contains("Krippendorff's alpha"), "no alpha");
        for method in ["avg", "mv", "ds"] {
            let acc = m["methods"][method]["accuracy"].as_f64().unwrap();
            assert!(html.contains(&format!("<td>{method}</td><td>{acc:.4}</td>")), "{method} {acc}");
        }
        // Markup from the data is text, never markup.
        assert!(!html.contains("<script>") && !html.contains("<b>bold"), "unescaped data");
        assert!(
            html.contains("&lt;b&gt;bold&lt;&#x2f;b&gt; &amp; co") || html.contains("&lt;b&gt;bold&lt;/b&gt; &amp; co")
        );
        // No network: nothing loads from elsewhere (SVG's xmlns names a namespace only).
        for fetch in ["src=", "href=", "<link", "<script", "url(", "@import"] {
            assert!(!html.contains(fetch), "{fetch}");
        }
        assert_eq!(html, render(&inputs).unwrap(), "the same inputs render the same bytes");
        write(&inputs, dir.path()).unwrap();
        assert!(dir.path().join(REPORT_FILE).is_file());
    }

    /// Impossible values in metrics.json (an accuracy of 1e308 printed as 309 digits, a
    /// coverage of -7, a null coverage) are refused naming the file and the field.
    #[test]
    fn values_outside_their_domain_are_refused_naming_file_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let (j, labels, _) = run(dir.path());
        let path = dir.path().join("metrics.json");
        let good = std::fs::read_to_string(&path).unwrap();
        let judge = j.judge_names()[1].clone();
        let null = serde_json::Value::Null;
        let cases = [
            (
                ["judges", &judge, "accuracy"],
                1e308.into(),
                format!("judges.{judge}.accuracy`: 1e308 is not a number in [0, 1]"),
            ),
            (
                ["judges", &judge, "coverage"],
                (-7.0).into(),
                format!("judges.{judge}.coverage`: -7.0 is not a number in [0, 1]"),
            ),
            (["judges", &judge, "coverage"], null, format!("judges.{judge}.coverage`: null is not a number in [0, 1]")),
            (
                ["methods", "ds", "accuracy"],
                1.5.into(),
                "methods.ds.accuracy`: 1.5 is not a number in [0, 1]".to_owned(),
            ),
            (
                ["agreement", "fleiss_kappa", ""],
                2.0.into(),
                "agreement.fleiss_kappa`: 2.0 is not a number of at most 1".to_owned(),
            ),
        ];
        for ([a, b, c], value, says) in cases {
            let mut m: serde_json::Value = serde_json::from_str(&good).unwrap();
            let at = &mut m[a][b];
            *(if c.is_empty() { at } else { &mut at[c] }) = value;
            std::fs::write(&path, m.to_string()).unwrap();
            let e = page(dir.path(), &j, Some(&labels)).unwrap_err().to_string();
            assert!(e.contains(&format!("metrics.json: field `{says}")), "{e}");
        }
        std::fs::write(&path, &good).unwrap();
        assert!(page(dir.path(), &j, Some(&labels)).is_ok());
    }

    /// With a categories.csv (a run over TruthfulQA writes one), each category's
    /// accuracy per method, counted from predictions.csv and the labels.
    #[test]
    fn accuracy_by_category() {
        let dir = tempfile::tempdir().unwrap();
        let (j, labels, _) = run(dir.path());
        let mut csv = String::from("example_id,category\n");
        for (n, id) in j.example_ids().iter().enumerate() {
            csv.push_str(&format!("{id},{}\n", if n % 2 == 0 { "even" } else { "odd <i>" }));
        }
        std::fs::write(dir.path().join("categories.csv"), csv).unwrap();
        let html = page(dir.path(), &j, Some(&labels)).unwrap();
        assert!(html.contains("<section id=\"categories\""), "{html}");
        let p = jury_io::read_predictions(&dir.path().join("predictions.csv")).unwrap();
        let even: Vec<usize> = (0..j.n_examples()).step_by(2).collect();
        let acc = jury_metrics::accuracy_on(&p.methods[0].labels, &labels, &even);
        assert!(html.contains(&format!("<td>even</td><td>{}</td><td>{acc:.3}</td>", even.len())), "{html}");
        assert!(html.contains("odd &lt;i&gt;"));
    }

    /// A crowd of 100 judges, `crowdK` on `K + 1` of 200 examples: the judge views show
    /// the 30 most active ones and say so; the others appear in no table or map.
    #[test]
    fn a_large_crowd_shows_its_most_active_judges() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = jury_core::JudgmentsBuilder::new(2).unwrap();
        for k in 0..100 {
            for n in 0..=k {
                let p = if (n + k) % 3 == 0 { 0.2 } else { 0.8 };
                b.push_binary(&format!("e{:03}", (n * 7 + k) % 200), &format!("crowd{k:02}"), Some(p)).unwrap();
            }
        }
        let j = b.build();
        let labels = Labels::new(2, (0..j.n_examples()).map(|n| Some(n % 2)).collect()).unwrap();
        let settings = jury_study::Settings::new(&jury_study::AggregateOptions::default()).unwrap();
        jury_study::run(&j, Some(&labels), &settings, &|_| {}).unwrap().write(dir.path()).unwrap();
        let html = page(dir.path(), &j, Some(&labels)).unwrap();
        assert!(html.contains("The 30 judges with the most judgments of 100"), "no note");
        for k in 0..100 {
            let row = format!("<tr><td>crowd{k:02}</td>");
            assert_eq!(html.contains(&row), k >= 70, "crowd{k:02}");
        }
        assert_eq!(html.matches("<tr><td>crowd").count(), 2 * 30, "judges' and Dawid-Skene's tables");
    }

    /// The hardest examples (every judge wrong) appear with their text, escaped.
    #[test]
    fn hardest_examples_show_their_escaped_text() {
        let dir = tempfile::tempdir().unwrap();
        let (j, labels, contexts) = run(dir.path());
        let results = RunResults::read(dir.path(), true).unwrap();
        let inputs = Inputs { results: &results, judgments: &j, labels: Some(&labels), contexts: Some(&contexts) };
        let html = render(&inputs).unwrap();
        if html.contains("<section id=\"hardest\"") {
            assert!(html.contains("&lt;script&gt;alert("), "escaped script text shown");
        }
        let unlabeled = Inputs { labels: None, ..inputs };
        let page = render(&unlabeled).unwrap();
        assert!(!page.contains("<section id=\"calibration\"") && !page.contains("<section id=\"hardest\""));
    }
}

#[cfg(test)]
mod study_tests {
    use super::*;

    /// The win-rate page: a row per pair with winrate.json's numbers, generator names as
    /// text, an unidentifiable pair's reason, a chart.
    /// The page of `jury simulate adaptive`'s file, written by jury-study's own writer:
    /// the chosen setting marked, a chart when labels scored the curve, none without.
    #[test]
    fn adaptive_page_from_the_replays_file() {
        let sim = jury_sim::simulate(&jury_sim::JuryConfig::mixed_binary(400, 3)).unwrap();
        let labels = jury_core::Labels::new(2, sim.truth.iter().map(|&t| Some(t)).collect()).unwrap();
        let settings = jury_study::AdaptiveSettings {
            chosen: jury_aggregate::AdaptiveConfig::default(),
            targets: vec![0.9, 0.95],
            warmups: vec![0.05, 0.2],
            costs: None,
        };
        let k = sim.judgments.n_judges();
        let costly =
            jury_study::AdaptiveSettings { costs: Some((0..k).map(|i| 1.0 + i as f64).collect()), ..settings.clone() };
        // (labels, costs, charts): one chart against calls, a second against cost.
        for (with_labels, s, charts) in [(true, &settings, 1), (false, &settings, 0), (true, &costly, 2)] {
            let dir = tempfile::tempdir().unwrap();
            let l = with_labels.then_some(&labels);
            jury_study::adaptive_study(&sim.judgments, l, s).unwrap().write(dir.path()).unwrap();
            let html = render_adaptive(dir.path()).unwrap();
            assert_eq!(html.matches("<svg").count(), charts, "{html}");
            assert_eq!(html.contains("Accuracy against cost"), charts == 2, "{html}");
            assert_eq!(html.matches("class=\"chosen\"").count(), 1, "{html}");
            assert!(html.contains("Calls per judge") && html.contains(&sim.judgments.judge_names()[0]));
            assert_eq!(html, render_adaptive(dir.path()).unwrap(), "deterministic");
        }
    }

    /// The win-rate page from a record written by jury-winrate's own type.
    #[test]
    fn winrate_page_rows_and_escaping() {
        let dir = tempfile::tempdir().unwrap();
        let pair = |g0: &str, g1: &str, n: usize| jury_winrate::PairEstimate {
            generator_0: g0.into(),
            generator_1: g1.into(),
            n_comparisons: n,
            evaluators: vec!["e".into()],
            n_human_labels: n,
            n_revealed_labels: 0,
            revealed_win_rate: None,
            human_win_rate: None,
            observed: None,
            observed_interval: None,
            observed_abs_error: None,
            estimate: None,
            interval: None,
            abs_error: None,
            unidentifiable: None,
            excluded_evaluators: Vec::new(),
        };
        let study = jury_winrate::WinRateStudy {
            method: "bwrs".into(),
            prior: "in-dist:0.3".into(),
            seed: 0,
            level: 0.95,
            n_pairs: 2,
            mean_abs_error: Some(0.07),
            observed_mean_abs_error: Some(0.08),
            pairs: vec![
                jury_winrate::PairEstimate {
                    human_win_rate: Some(0.675),
                    observed: Some(0.6083),
                    estimate: Some(0.5604),
                    interval: Some([0.0386, 0.9786]),
                    ..pair("a", "<img src=x>", 40)
                },
                jury_winrate::PairEstimate {
                    human_win_rate: Some(1.0),
                    unidentifiable: Some("no evaluator votes".into()),
                    ..pair("c", "d", 1)
                },
            ],
        };
        std::fs::write(dir.path().join("winrate.json"), serde_json::to_string(&study).unwrap()).unwrap();
        let html = render_winrate(dir.path()).unwrap();
        assert!(html.contains("<td>0.675</td><td>0.608</td><td>0.560</td><td>0.039 - 0.979</td>"), "{html}");
        assert!(html.contains("no evaluator votes") && html.contains("<svg"));
        assert!(!html.contains("<img") && html.contains("&lt;img"), "escaped");
    }

    /// A win rate outside [0, 1] in winrate.json is refused, not charted.
    #[test]
    fn winrate_values_outside_their_domain_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let study = jury_winrate::WinRateStudy {
            method: "bwrs".into(),
            prior: "none".into(),
            seed: 0,
            level: 0.95,
            n_pairs: 1,
            mean_abs_error: None,
            observed_mean_abs_error: None,
            pairs: vec![jury_winrate::PairEstimate {
                generator_0: "a".into(),
                generator_1: "b".into(),
                n_comparisons: 3,
                evaluators: vec!["e".into()],
                n_human_labels: 0,
                n_revealed_labels: 0,
                revealed_win_rate: None,
                human_win_rate: None,
                observed: Some(0.5),
                observed_interval: None,
                observed_abs_error: None,
                estimate: Some(7.0),
                interval: None,
                abs_error: None,
                unidentifiable: None,
                excluded_evaluators: Vec::new(),
            }],
        };
        std::fs::write(dir.path().join("winrate.json"), serde_json::to_string(&study).unwrap()).unwrap();
        let e = render_winrate(dir.path()).unwrap_err().to_string();
        assert!(e.contains("winrate.json: field `pairs[0].estimate`: 7.0 is not a number in [0, 1]"), "{e}");
    }

    /// The ranking page: each model's rank beside the reference's, and the agreement.
    #[test]
    fn ranking_page_beside_the_reference() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("ranking.json"),
            r#"{"method": "ftr", "eval": "equal", "n_models": 2, "n_prompts": 30, "evaluations": 30, "converged": true,
                "ranking": [{"rank": 1, "model": "m1", "score": 1.0}, {"rank": 2, "model": "m0", "score": 0.0}],
                "reference": {"name": "reference", "ranking": [{"model": "m0", "score": 0.9}, {"model": "m1", "score": 0.8}],
                  "rbo": 0.5, "map_at_5": 0.75, "spearman": -1.0, "undetermined": null}}"#,
        )
        .unwrap();
        let html = render_ranking(dir.path()).unwrap();
        assert!(html.contains("<td>1</td><td>m1</td><td>1.000</td><td>2</td><td>0.800</td>"), "{html}");
        assert!(html.contains("RBO 0.500, MAP@5 0.750, Spearman -1.000"), "{html}");
    }
}
