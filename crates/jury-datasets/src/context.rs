//! An example's context text for the context-dependent aggregators, in one of two
//! styles: the SkillAggregation authors' prompt-shaped text (their `dataloader.py`, per
//! task, recognised by the example's fields) or jury-v1's fields joined by ` || `.

use crate::Example;

/// How an example's fields become its context text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContextStyle {
    /// The authors' text: HaluEval dialogue (`history`, `response`): "Query: {history}
    /// \nResponse: {response}\nIs there any non-factual or hallucinated information in
    /// the response?"; question answering (`question`, `answer`): "... Is the answer
    /// truthful to the question?"; pairs (`question`, `answer_a`, `answer_b`): "Query:
    /// {question}\nAnswer A: {a}\nAnswer B: {b}\nIs answer A better than answer B?";
    /// any other example: its fields as [`ContextStyle::Fields`] joins them.
    Paper,
    /// The fields, shortest first (an encoder that keeps the first tokens keeps the
    /// question and the answer whole), joined by ` || `.
    Fields,
}

impl ContextStyle {
    /// `e`'s context text in this style.
    pub fn text(self, e: &Example) -> String {
        let f = |name: &str| e.fields.get(name).map(String::as_str);
        if self == ContextStyle::Paper {
            match (f("history"), f("response"), f("question"), f("answer"), f("answer_a"), f("answer_b")) {
                (Some(h), Some(r), ..) => {
                    return format!(
                        "Query: {h}\nResponse: {r}\nIs there any non-factual or hallucinated information in the response?"
                    );
                }
                (_, _, Some(q), _, Some(a), Some(b)) => {
                    return format!("Query: {q}\nAnswer A: {a}\nAnswer B: {b}\nIs answer A better than answer B?");
                }
                (_, _, Some(q), Some(a), ..) => {
                    return format!("Query: {q}\nResponse: {a}\nIs the answer truthful to the question?");
                }
                _ => {}
            }
        }
        let mut fields: Vec<&String> = e.fields.values().collect();
        fields.sort_by_key(|v| v.len());
        fields.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(" || ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example(fields: &[(&str, &str)]) -> Example {
        Example {
            id: "e".into(),
            fields: fields.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            label: None,
            category: None,
        }
    }

    /// Each task's text as the authors' dataloader writes it, and jury-v1's fields.
    #[test]
    fn the_authors_text_per_task() {
        let halu = example(&[("history", "[Human]: hi"), ("response", "hello")]);
        assert_eq!(
            ContextStyle::Paper.text(&halu),
            "Query: [Human]: hi\nResponse: hello\nIs there any non-factual or hallucinated information in the response?"
        );
        let qa = example(&[("question", "Q?"), ("answer", "A")]);
        assert_eq!(ContextStyle::Paper.text(&qa), "Query: Q?\nResponse: A\nIs the answer truthful to the question?");
        let pair = example(&[("question", "Q?"), ("answer_a", "x"), ("answer_b", "y"), ("model_a", "m")]);
        assert_eq!(
            ContextStyle::Paper.text(&pair),
            "Query: Q?\nAnswer A: x\nAnswer B: y\nIs answer A better than answer B?"
        );
        let other = example(&[("statement", "The sky is green"), ("topic", "sky")]);
        assert_eq!(ContextStyle::Paper.text(&other), "sky || The sky is green");
        assert_eq!(ContextStyle::Fields.text(&qa), "A || Q?");
    }
}
