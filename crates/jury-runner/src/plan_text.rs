//! What whoever labels a plan reads: the planned examples' text, read again from the
//! data set a finished run judged (its `config.resolved.yaml`), so that a plan of a
//! run's judgments can be labeled without looking the ids up.

use std::path::{Path, PathBuf};

use jury_datasets::DatasetError;
use jury_io::layout::RESOLVED_CONFIG;
use jury_judge::Template;

use crate::experiment::Experiment;
use crate::judging::RunError;
use crate::stages::sample_examples;

/// The text of some of a run's examples: the fields its judges read, one row per id
/// asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanText {
    /// The data set the text was read from, as the run names it.
    pub dataset: PathBuf,
    /// The fields, in the order the run's prompts first use them.
    pub columns: Vec<String>,
    /// Each id's fields in `columns`' order; `None` where the data set has no such
    /// example (the judgments are not all this run's).
    pub rows: Vec<Option<Vec<String>>>,
    /// The run's prompt (its system text says what the verdict words answer) and its
    /// verdict words: class 1 (`Yes`, `A`) and class 0.
    pub prompt: PathBuf,
    pub positive: String,
    pub negative: String,
}

/// The text of `ids` among the examples of the run whose output folder is `run`, or
/// `None` where `run` holds no run's resolved config. The data set is read where the run
/// read it (a relative path from the working directory) and never downloaded: one not
/// found is an error saying so. With both orders judged, the text is of the
/// original order, the one the judgments' ids and labels are of.
pub fn plan_text(run: &Path, ids: &[String]) -> Result<Option<PlanText>, RunError> {
    let config = run.join(RESOLVED_CONFIG);
    if !config.is_file() {
        return Ok(None);
    }
    let exp: Experiment<serde::de::IgnoredAny> = Experiment::read_unchecked(&config)?;
    if jury_datasets::resolve_local(&exp.dataset.path)?.is_none() {
        return Err(RunError::Dataset(DatasetError::File {
            path: exp.dataset.path.clone(),
            reason: format!(
                "not found from this working directory (the data set {} names; a relative path is read from \
                 where `jury run` ran, and a hub address is not downloaded)",
                config.display()
            ),
        }));
    }
    let template = Template::load(&exp.prompt)?;
    let mut columns: Vec<String> = Vec::new();
    let own =
        exp.judges.iter().filter_map(|j| j.prompt.as_deref()).map(Template::load).collect::<Result<Vec<_>, _>>()?;
    for t in std::iter::once(&template).chain(&own) {
        for name in t.placeholders() {
            if !columns.iter().any(|c| c == name) {
                columns.push(name.to_owned());
            }
        }
    }
    let examples = sample_examples(&exp.dataset)?.original;
    let by_id: std::collections::HashMap<&str, &jury_datasets::Example> =
        examples.iter().map(|e| (e.id.as_str(), e)).collect();
    let rows = ids
        .iter()
        .map(|id| {
            by_id
                .get(id.as_str())
                .map(|e| columns.iter().map(|c| e.fields.get(c).cloned().unwrap_or_default()).collect())
        })
        .collect();
    Ok(Some(PlanText {
        dataset: exp.dataset.path,
        columns,
        rows,
        prompt: exp.prompt,
        positive: template.positive.trim().to_owned(),
        negative: template.negative.trim().to_owned(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run folder of the demo's data set and prompt: the planned ids' statements come
    /// back, an id the data set lacks has none, and a folder with no run's config is no
    /// run's.
    #[test]
    fn a_run_s_planned_examples_come_with_the_text_its_judges_read() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(plan_text(dir.path(), &["x".into()]).unwrap(), None);
        let data = root.join("datasets/demo-facts.csv");
        let config = format!(
            "name: t\ndataset: {{name: demo-facts, path: {}}}\nprompt: {}\njudges: [{{name: j, gguf: m.gguf, tokenizer: t}}]\noutput: {}\n",
            data.display(),
            root.join("prompts/demo-facts.yaml").display(),
            dir.path().display()
        );
        std::fs::write(dir.path().join(RESOLVED_CONFIG), config).unwrap();
        let first = jury_datasets::load("demo-facts", &data).unwrap().remove(0);
        let text = plan_text(dir.path(), &[first.id.clone(), "nowhere".into()]).unwrap().unwrap();
        assert_eq!(text.columns, ["statement"]);
        assert_eq!(text.rows, [Some(vec![first.fields["statement"].clone()]), None]);
        assert_eq!((text.positive.as_str(), text.negative.as_str()), ("Yes", "No"));
        let moved =
            std::fs::read_to_string(dir.path().join(RESOLVED_CONFIG)).unwrap().replace("demo-facts.csv", "gone.csv");
        std::fs::write(dir.path().join(RESOLVED_CONFIG), moved).unwrap();
        let e = plan_text(dir.path(), &[first.id]).unwrap_err().to_string();
        assert!(e.contains("gone.csv") && e.contains("not found from this working directory"), "{e}");
    }
}
