//! The truncation rule every judge shares, so an in-process judge and a server judge
//! with the same tokenizer judge the same token sequence.
//!
//! Rule: render the prompt; while it is longer than the token budget, cut the longest
//! example field to three quarters of its characters (keeping its start, marked with
//! "...") and render again, at most [`MAX_CUTS`] times. The instruction, the other
//! template text and the forced prefix are never cut.

use std::collections::BTreeMap;

/// Cuts before a prompt is declared too long for its budget.
pub(crate) const MAX_CUTS: usize = 40;

/// One step of the rule: cuts the longest field (longer than 16 bytes) and returns
/// true, or returns false when no field can be cut.
pub(crate) fn cut_longest(fields: &mut BTreeMap<String, String>) -> bool {
    let Some((_, longest)) = fields.iter_mut().max_by_key(|(_, v)| v.len()).filter(|(_, v)| v.len() > 16) else {
        return false;
    };
    let keep = longest.char_indices().nth(longest.chars().count() * 3 / 4).map_or(longest.len(), |(i, _)| i);
    longest.truncate(keep);
    longest.push_str("...");
    true
}

/// The error of a prompt that does not fit.
pub(crate) fn too_long(max_tokens: usize) -> String {
    format!("prompt does not fit in {max_tokens} tokens even with its fields truncated")
}

/// `fields` with every value emptied: the shortest prompt any example can make.
pub(crate) fn emptied(fields: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    fields.keys().map(|k| (k.clone(), String::new())).collect()
}

/// [`JudgeError::Budget`] when the emptied prompt's `tokens` exceed `max_tokens`.
pub(crate) fn check_emptied_len(judge: &str, tokens: usize, max_tokens: usize) -> Result<(), crate::JudgeError> {
    if tokens > max_tokens {
        return Err(crate::JudgeError::Budget { judge: judge.to_owned(), tokens, max_tokens });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_field_is_cut_to_three_quarters() {
        let mut f = BTreeMap::from([("a".to_owned(), "short".to_owned()), ("b".to_owned(), "é".repeat(40))]);
        assert!(cut_longest(&mut f));
        assert_eq!(f["b"], format!("{}...", "é".repeat(30)));
        assert_eq!(f["a"], "short");
        let mut tiny = BTreeMap::from([("a".to_owned(), "0123456789abcdef".to_owned())]);
        assert!(!cut_longest(&mut tiny));
    }
}
