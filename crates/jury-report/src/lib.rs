//! `report.html`: one self-contained page per run (no network: inline styles and SVG
//! charts), answering at a glance which judges are good, which agree, whether
//! aggregation helped, whether it is calibrated and where it fails.
//!
//! Invariants: the page is a function of the run's files and inputs (no timestamps), so
//! it can be diffed; every text from the data (judge names, example texts) goes through
//! the template's HTML escaping; charts are plotters' SVG, whose text it escapes.

mod model;
mod plots;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use jury_core::{Judgments, Labels};

/// What a report could not do.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{}: {reason}", path.display())]
    Read { path: PathBuf, reason: String },
    #[error(transparent)]
    Io(#[from] jury_io::IoError),
    #[error("report: {0}")]
    Mismatch(String),
    #[error("report chart: {0}")]
    Plot(String),
    #[error("report template: {0}")]
    Template(String),
}

/// A run's output folder (metrics.json, predictions.csv, manifest.json when `jury run`
/// wrote it) and the inputs it was computed from.
pub struct Inputs<'a> {
    pub out_dir: &'a Path,
    pub judgments: &'a Judgments,
    pub labels: Option<&'a Labels>,
    /// Each example's context text, shown beside the hardest examples.
    pub contexts: Option<&'a HashMap<String, String>>,
}

/// The report file's name in an output folder.
pub const REPORT_FILE: &str = "report.html";

const TEMPLATE: &str = include_str!("../templates/report.html");

/// The page's HTML.
pub fn render(inputs: &Inputs) -> Result<String, ReportError> {
    let page = model::page(inputs)?;
    let mut env = minijinja::Environment::new();
    env.add_template("report.html", TEMPLATE).map_err(|e| ReportError::Template(e.to_string()))?;
    let t = env.get_template("report.html").map_err(|e| ReportError::Template(e.to_string()))?;
    t.render(minijinja::context! { page => page }).map_err(|e| ReportError::Template(e.to_string()))
}

/// Writes the page to `dir/report.html` atomically.
pub fn write(inputs: &Inputs, dir: &Path) -> Result<(), ReportError> {
    let html = render(inputs)?;
    jury_io::write_atomic(&dir.join(REPORT_FILE), html.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let inputs = Inputs { out_dir: dir.path(), judgments: &j, labels: Some(&labels), contexts: Some(&contexts) };
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

    /// The hardest examples (every judge wrong) appear with their text, escaped.
    #[test]
    fn hardest_examples_show_their_escaped_text() {
        let dir = tempfile::tempdir().unwrap();
        let (j, labels, contexts) = run(dir.path());
        let inputs = Inputs { out_dir: dir.path(), judgments: &j, labels: Some(&labels), contexts: Some(&contexts) };
        let html = render(&inputs).unwrap();
        if html.contains("<section id=\"hardest\"") {
            assert!(html.contains("&lt;script&gt;alert("), "escaped script text shown");
        }
        let unlabeled = Inputs { labels: None, ..inputs };
        let page = render(&unlabeled).unwrap();
        assert!(!page.contains("<section id=\"calibration\"") && !page.contains("<section id=\"hardest\""));
    }
}
