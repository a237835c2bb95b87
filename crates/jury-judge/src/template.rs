//! Prompt templates as data: a YAML file per task (see `prompts/`).

use std::collections::BTreeMap;
use std::path::Path;

use crate::JudgeError;

/// A judge prompt: system text, user text with `{field}` placeholders filled from an
/// example, the forced answer prefix that starts the assistant turn, and the verdict
/// words. Class 1 (positive) is `positive`.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Template {
    pub task: String,
    pub system: String,
    pub user: String,
    pub answer_prefix: String,
    pub positive: String,
    pub negative: String,
    #[serde(default)]
    pub tie: Option<String>,
    /// The file's exact text: part of every cache key.
    #[serde(skip)]
    pub source_text: String,
}

impl Template {
    pub fn load(path: &Path) -> Result<Self, JudgeError> {
        let text = jury_io::read_input_to_string(path)
            .map_err(|e| JudgeError::Template { path: path.to_owned(), reason: e.to_string() })?;
        let mut t: Template = serde_yaml::from_str(&text)
            .map_err(|e| JudgeError::Template { path: path.to_owned(), reason: e.to_string() })?;
        t.check().map_err(|reason| JudgeError::Template { path: path.to_owned(), reason })?;
        t.source_text = text;
        Ok(t)
    }

    /// The verdict words must be non-empty and distinct (trimmed): the same word for
    /// two classes would read one probability twice.
    fn check(&self) -> Result<(), String> {
        let mut words = vec![("positive", &self.positive), ("negative", &self.negative)];
        if let Some(t) = &self.tie {
            words.push(("tie", t));
        }
        for (i, (name, w)) in words.iter().enumerate() {
            if w.trim().is_empty() {
                return Err(format!("`{name}` is empty"));
            }
            if let Some((other, _)) = words[..i].iter().find(|(_, v)| v.trim() == w.trim()) {
                return Err(format!("`{name}` and `{other}` are the same word `{}`", w.trim()));
            }
        }
        Ok(())
    }

    /// Checks that every placeholder of the user turn is a field of `fields` (an
    /// example of the data set), naming the missing ones and the fields there are.
    pub fn check_fields(&self, fields: &BTreeMap<String, String>) -> Result<(), String> {
        self.render_user(fields).map(|_| ()).map_err(|e| {
            let known: Vec<&str> = fields.keys().map(String::as_str).collect();
            format!("{e} (the data set's fields: {})", known.join(", "))
        })
    }

    /// The user turn with every `{name}` replaced by `fields[name]`; an unknown
    /// placeholder is an error naming it.
    pub fn render_user(&self, fields: &BTreeMap<String, String>) -> Result<String, String> {
        let mut out = String::with_capacity(self.user.len() + 256);
        for (text, name) in self.pieces() {
            out.push_str(text);
            match name.map(|n| (n, fields.get(n))) {
                Some((_, Some(v))) => out.push_str(v),
                Some((n, None)) => return Err(format!("template placeholder {{{n}}} has no field in the example")),
                None => {}
            }
        }
        Ok(out)
    }

    /// The user turn's placeholders in the order they first appear: the fields of an
    /// example that a judge reads.
    pub fn placeholders(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for name in self.pieces().filter_map(|(_, n)| n) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    }

    /// The user turn split at its placeholders: each piece is literal text and the
    /// `{name}` after it (none at the end; a `{` never closed is text).
    fn pieces(&self) -> impl Iterator<Item = (&str, Option<&str>)> {
        let mut rest = Some(self.user.as_str());
        std::iter::from_fn(move || {
            let r = rest.take()?;
            let Some((text, after)) = r.split_once('{') else { return Some((r, None)) };
            let Some((name, next)) = after.split_once('}') else { return Some((r, None)) };
            rest = Some(next);
            Some((text, Some(name)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_fields_and_rejects_unknown_placeholders() {
        let t: Template = serde_yaml::from_str(
            "task: t\nsystem: s\nuser: \"Q: {question}\\nA: {answer}\"\nanswer_prefix: \"[[\"\npositive: \"Yes\"\nnegative: \"No\"\n",
        )
        .unwrap();
        let mut f =
            BTreeMap::from([("question".to_owned(), "Why?".to_owned()), ("answer".to_owned(), "Because.".to_owned())]);
        assert_eq!(t.render_user(&f).unwrap(), "Q: Why?\nA: Because.");
        assert_eq!(t.placeholders(), ["question", "answer"]);
        let again = Template { user: "{answer} to {question}, {answer} {open".into(), ..t.clone() };
        assert_eq!(again.render_user(&f).unwrap(), "Because. to Why?, Because. {open");
        assert_eq!(again.placeholders(), ["answer", "question"]);
        f.remove("answer");
        assert!(t.render_user(&f).unwrap_err().contains("{answer}"));
        assert!(t.check_fields(&f).unwrap_err().contains("fields: question"));
    }

    #[test]
    fn repository_templates_parse() {
        let dir = Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()))
            .join("../../prompts");
        for name in ["truthfulqa", "halueval-dialogue", "chatbot-arena", "demo-facts"] {
            let t = Template::load(&dir.join(format!("{name}.yaml"))).unwrap();
            assert_eq!(t.task, name);
            assert!(t.answer_prefix.ends_with("[["));
        }
        let halu = Template::load(&dir.join("halueval-dialogue.yaml")).unwrap();
        assert!(halu.system.len() > 2500, "the HaluEval instruction is a long few-shot text");
    }

    #[test]
    fn verdict_words_are_non_empty_and_distinct() {
        let dir = tempfile::tempdir().unwrap();
        let write = |pos: &str, neg: &str, tie: &str| {
            let p = dir.path().join("t.yaml");
            std::fs::write(
                &p,
                format!("task: t\nsystem: s\nuser: u\nanswer_prefix: \"[[\"\npositive: \"{pos}\"\nnegative: \"{neg}\"\n{tie}"),
            )
            .unwrap();
            Template::load(&p).map(|_| ()).map_err(|e| e.to_string())
        };
        assert!(write("Yes", "No", "").is_ok());
        assert!(write("Yes", "Yes", "").unwrap_err().contains("`negative` and `positive` are the same word"));
        assert!(write(" Yes", "Yes ", "").is_err());
        assert!(write("", "No", "").unwrap_err().contains("`positive` is empty"));
        assert!(write("A", "B", "tie: \"A\"\n").unwrap_err().contains("`tie` and `positive`"));
        assert!(write("A", "B", "tie: \"C\"\n").is_ok());
    }
}
