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
        let text = std::fs::read_to_string(path)
            .map_err(|e| JudgeError::Template { path: path.to_owned(), reason: e.to_string() })?;
        let mut t: Template = serde_yaml::from_str(&text)
            .map_err(|e| JudgeError::Template { path: path.to_owned(), reason: e.to_string() })?;
        t.source_text = text;
        Ok(t)
    }

    /// The user turn with every `{name}` replaced by `fields[name]`; an unknown
    /// placeholder is an error naming it.
    pub fn render_user(&self, fields: &BTreeMap<String, String>) -> Result<String, String> {
        let mut out = String::with_capacity(self.user.len() + 256);
        let mut rest = self.user.as_str();
        while let Some(start) = rest.find('{') {
            out.push_str(&rest[..start]);
            let after = &rest[start + 1..];
            let Some(end) = after.find('}') else {
                out.push_str(&rest[start..]);
                return Ok(out);
            };
            let name = &after[..end];
            match fields.get(name) {
                Some(v) => out.push_str(v),
                None => return Err(format!("template placeholder {{{name}}} has no field in the example")),
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
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
        f.remove("answer");
        assert!(t.render_user(&f).unwrap_err().contains("{answer}"));
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
}
