//! Verdicts from the log-probabilities an OpenAI-compatible server returns, in the three
//! layouts met in practice, with the rule for tokens the server did not return.
//!
//! Rule: a verdict variant's probability is `exp(logprob)` when the server returned that
//! token at the judged position; one it did not return lies below every returned entry,
//! so its probability is at most the smallest returned probability (the k-th of a top-k
//! list). Unreturned variants count as 0 in `p_positive` / `p_negative`, the verdict is
//! marked `exact: false`, and `unobserved_bound` holds the sum of their bounds. With
//! every variant returned (vLLM's `logprob_token_ids`, or a top-k that reaches them) the
//! numbers are the server's own full-vocabulary softmax and `exact` is true.

use crate::Verdict;

/// One returned candidate token at the judged position.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Candidate {
    /// The token id, when the server gives it (llama.cpp's `id`, vLLM's
    /// `token_id:N` text with `return_tokens_as_token_ids`).
    pub id: Option<u32>,
    pub text: String,
    pub logprob: f64,
}

/// How verdict tokens are recognised among the candidates.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum VariantSet {
    /// By token id (from a tokenizer or the server's `/tokenize`), each with its text
    /// for candidates that come without an id: every variant must be returned for
    /// `exact`.
    Ids(Vec<(u32, String)>),
    /// By token text (chat modes without a tokenizer): each text counts once.
    Texts(Vec<String>),
}

fn parse_token_id(text: &str) -> Option<u32> {
    text.strip_prefix("token_id:")?.parse().ok()
}

fn candidate(text: &str, id: Option<u32>, logprob: f64) -> Candidate {
    Candidate { id: id.or_else(|| parse_token_id(text)), text: text.to_owned(), logprob }
}

/// The candidates at position `pos` of a completion choice's `logprobs`, in either the
/// legacy completions layout (`top_logprobs: [{text: logprob}]`) or the chat layout
/// (`content: [{token, id?, logprob, top_logprobs: [{token, id?, logprob}]}]`, which
/// llama.cpp also uses on `/v1/completions`; mistral.rs gives a top entry's id as its
/// `token` and its text as `bytes`). The sampled token is included unless the top list
/// already holds it (same id, or same text where either has no id).
pub(crate) fn candidates_at(logprobs: &serde_json::Value, pos: usize) -> Option<Vec<Candidate>> {
    let mut out = Vec::new();
    if let Some(content) = logprobs.get("content").and_then(|c| c.as_array()) {
        let entry = content.get(pos)?;
        let one = |e: &serde_json::Value| -> Option<Candidate> {
            let logprob = e.get("logprob")?.as_f64()?;
            let id = e.get("id").and_then(|i| i.as_u64()).and_then(|i| u32::try_from(i).ok());
            match e.get("token")? {
                serde_json::Value::Number(n) => {
                    let id = u32::try_from(n.as_u64()?).ok();
                    Some(candidate(e.get("bytes").and_then(|b| b.as_str()).unwrap_or(""), id, logprob))
                }
                t => Some(candidate(t.as_str()?, id, logprob)),
            }
        };
        for e in entry.get("top_logprobs").and_then(|t| t.as_array()).into_iter().flatten() {
            out.extend(one(e));
        }
        if let Some(sampled) = one(entry) {
            let listed = out.iter().any(|c| match (c.id, sampled.id) {
                (Some(a), Some(b)) => a == b,
                _ => c.text == sampled.text,
            });
            if !listed {
                out.push(sampled);
            }
        }
    } else {
        let top = logprobs.get("top_logprobs")?.as_array()?.get(pos)?.as_object()?;
        for (text, lp) in top {
            if let Some(lp) = lp.as_f64() {
                out.push(candidate(text, None, lp));
            }
        }
        let tokens = logprobs.get("tokens").and_then(|t| t.as_array());
        let lps = logprobs.get("token_logprobs").and_then(|t| t.as_array());
        if let (Some(t), Some(l)) = (tokens.and_then(|t| t.get(pos)), lps.and_then(|l| l.get(pos)))
            && let (Some(t), Some(l)) = (t.as_str(), l.as_f64())
        {
            out.push(candidate(t, None, l));
        }
    }
    Some(out)
}

/// Probability of one verdict's variants: (observed sum, number of unreturned variants).
fn class_probability(cands: &[Candidate], set: &VariantSet) -> (f64, usize) {
    match set {
        VariantSet::Ids(ids) => {
            let mut p = 0.0;
            let mut missing = 0;
            for (id, text) in ids {
                match cands.iter().find(|c| c.id.map_or(c.text == *text, |i| i == *id)) {
                    Some(c) => p += c.logprob.exp(),
                    None => missing += 1,
                }
            }
            (p, missing)
        }
        VariantSet::Texts(texts) => {
            let mut p = 0.0;
            let mut missing = 0;
            for t in texts {
                // The sampled token is also in the top list: each distinct id (or, without
                // ids, the text) counts once.
                let mut ids: Vec<Option<u32>> = Vec::new();
                for c in cands.iter().filter(|c| &c.text == t) {
                    if !ids.contains(&c.id) {
                        ids.push(c.id);
                        p += c.logprob.exp();
                    }
                }
                if ids.is_empty() {
                    missing += 1;
                }
            }
            (p, missing)
        }
    }
}

/// How far above 1 the verdict tokens' summed probability may come back and still be
/// float32 rounding: a server computing in float32 returns a near-certain token's
/// log-probability as 0.0 while the other tokens keep theirs (seen: 1.0000007). Far
/// above the rounding of any float32 softmax, far below what another distribution's
/// numbers would give.
pub(crate) const ROUNDING_SLACK: f64 = 1e-3;

/// A server's verdict made storable: when its verdict tokens' probabilities add up to
/// more than 1 by rounding (at most [`ROUNDING_SLACK`]), every probability is divided
/// by that sum (the ratio `y` is unchanged) and the sum is recorded in
/// `renormalised_from`; more than that is an error, as is any number a cache read would
/// refuse ([`Verdict::check`]).
pub(crate) fn settle_rounding(mut v: Verdict) -> Result<Verdict, String> {
    let total = v.p_positive + v.p_negative + v.p_tie.unwrap_or(0.0);
    if total > 1.0 {
        if total > 1.0 + ROUNDING_SLACK {
            return Err(format!(
                "the verdict tokens' probabilities add up to {total}, more than 1 beyond float32 rounding: \
                 these are not log-probabilities of one distribution"
            ));
        }
        v.p_positive /= total;
        v.p_negative /= total;
        v.p_tie = v.p_tie.map(|p| p / total);
        v.unobserved_bound = v.unobserved_bound.map(|b| (b / total).min(1.0));
        v.mass = (v.p_positive + v.p_negative).min(1.0);
        v.renormalised_from = Some(total);
    }
    v.check()?;
    Ok(v)
}

/// The verdict from the candidates at the judged position (rule in the module doc).
pub(crate) fn verdict_from_candidates(
    cands: &[Candidate],
    positive: &VariantSet,
    negative: &VariantSet,
    tie: Option<&VariantSet>,
) -> Verdict {
    let floor = cands.iter().map(|c| c.logprob.exp()).fold(f64::INFINITY, f64::min);
    let floor = if floor.is_finite() { floor } else { 0.0 };
    let (p_positive, m_pos) = class_probability(cands, positive);
    let (p_negative, m_neg) = class_probability(cands, negative);
    let tie = tie.map(|t| class_probability(cands, t));
    let missing = m_pos + m_neg + tie.map_or(0, |t| t.1);
    let mass = p_positive + p_negative;
    Verdict {
        y: (mass > 0.0).then(|| p_positive / mass),
        p_positive,
        p_negative,
        p_tie: tie.map(|t| t.0),
        mass,
        n_tokens: 0,
        truncated: false,
        exact: missing == 0,
        // Each unreturned variant is below the smallest returned one; together they are
        // still no more than the whole distribution.
        unobserved_bound: (missing > 0).then_some((missing as f64 * floor).min(1.0)),
        renormalised_from: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ids(ids: &[u32]) -> VariantSet {
        VariantSet::Ids(ids.iter().map(|i| (*i, format!("text of {i}"))).collect())
    }

    fn verdict(p_positive: f64, p_negative: f64) -> Verdict {
        Verdict::from_probabilities(p_positive, p_negative, None)
    }

    /// Float32 rounding above 1 is divided out and recorded; the result always passes
    /// the cache's check; more than rounding is refused.
    #[test]
    fn rounding_above_one_is_renormalised_and_larger_excess_refused() {
        let v = settle_rounding(verdict(1.0000001691645317, 5.6e-7)).unwrap();
        assert!(v.p_positive <= 1.0 && v.mass <= 1.0 && v.check().is_ok(), "{v:?}");
        assert!((v.y.unwrap() - 1.0000001691645317 / (1.0000001691645317 + 5.6e-7)).abs() < 1e-15);
        assert!((v.renormalised_from.unwrap() - 1.0000007291645317).abs() < 1e-12);
        let unchanged = settle_rounding(verdict(0.7, 0.2)).unwrap();
        assert_eq!(unchanged, verdict(0.7, 0.2));
        assert!(settle_rounding(verdict(0.9, 0.8)).unwrap_err().contains("more than 1"));
        for i in 0..=1000 {
            let excess = ROUNDING_SLACK * f64::from(i) / 1000.0;
            let v = settle_rounding(verdict(1.0 + excess * 0.7, excess * 0.3)).unwrap();
            assert!(v.check().is_ok() && v.p_positive <= 1.0 && v.mass <= 1.0 + 1e-9, "{v:?}");
        }
    }

    #[test]
    fn legacy_layout_with_token_ids() {
        // vLLM /v1/completions with return_tokens_as_token_ids and logprob_token_ids.
        let lp = json!({"tokens": ["token_id:9454"], "token_logprobs": [-0.5],
                        "top_logprobs": [{"token_id:9454": -0.5, "token_id:2753": -1.2, "token_id:9693": -6.0,
                                          "token_id:2308": -7.0}]});
        let c = candidates_at(&lp, 0).unwrap();
        let v = verdict_from_candidates(&c, &ids(&[9454, 9693]), &ids(&[2753, 2308]), None);
        let (py, pn) = ((-0.5f64).exp() + (-6f64).exp(), (-1.2f64).exp() + (-7f64).exp());
        assert!((v.p_positive - py).abs() < 1e-12 && (v.p_negative - pn).abs() < 1e-12);
        assert!((v.y.unwrap() - py / (py + pn)).abs() < 1e-12);
        assert!(v.exact && v.unobserved_bound.is_none());
    }

    #[test]
    fn chat_layout_with_ids_and_an_unreturned_variant_gives_a_bound() {
        // llama.cpp's /v1/completions: chat-style content array with ids.
        let lp = json!({"content": [{"id": 1, "token": "Yes", "logprob": -0.1,
            "top_logprobs": [{"id": 1, "token": "Yes", "logprob": -0.1}, {"id": 2, "token": "No", "logprob": -2.5},
                             {"id": 7, "token": "Maybe", "logprob": -4.0}]}]});
        let c = candidates_at(&lp, 0).unwrap();
        let v = verdict_from_candidates(&c, &ids(&[1, 3]), &ids(&[2]), None);
        assert!((v.p_positive - (-0.1f64).exp()).abs() < 1e-12);
        assert!(!v.exact);
        assert!((v.unobserved_bound.unwrap() - (-4f64).exp()).abs() < 1e-12);
    }

    #[test]
    fn texts_count_each_token_once_and_missing_positions_are_none() {
        let lp = json!({"content": [{"token": "[[", "logprob": -0.01, "top_logprobs": []},
            {"token": "Yes", "logprob": -0.3, "top_logprobs": [{"token": "Yes", "logprob": -0.3},
                                                                {"token": "No", "logprob": -1.5}]}]});
        let c = candidates_at(&lp, 1).unwrap();
        let yes = VariantSet::Texts(vec!["Yes".into(), " Yes".into()]);
        let no = VariantSet::Texts(vec!["No".into()]);
        let v = verdict_from_candidates(&c, &yes, &no, None);
        assert!((v.p_positive - (-0.3f64).exp()).abs() < 1e-12, "{}", v.p_positive);
        assert!(!v.exact, "` Yes` was not returned");
        assert!(candidates_at(&lp, 2).is_none());
    }

    #[test]
    fn mistralrs_layout_gives_ids_as_tokens_and_texts_as_bytes() {
        let lp = json!({"content": [{"token": "Yes", "logprob": -0.05, "bytes": [89, 101, 115],
            "top_logprobs": [{"token": 9454, "logprob": -0.05, "bytes": "Yes"},
                             {"token": 2753, "logprob": -0.6, "bytes": "No"}]}]});
        let c = candidates_at(&lp, 0).unwrap();
        assert_eq!(c.len(), 2, "the sampled token is listed once: {c:?}");
        assert_eq!((c[0].id, c[0].text.as_str(), c[1].id), (Some(9454), "Yes", Some(2753)));
        let v = verdict_from_candidates(
            &c,
            &VariantSet::Texts(vec!["Yes".into()]),
            &VariantSet::Texts(vec!["No".into()]),
            None,
        );
        assert!((v.p_positive - (-0.05f64).exp()).abs() < 1e-12 && v.exact);
    }

    /// vLLM's chat answers without `return_tokens_as_token_ids` name tokens by text only:
    /// a variant known by id is then recognised by its text.
    #[test]
    fn variants_known_by_id_match_candidates_without_ids_by_text() {
        let lp = json!({"content": [{"token": "Yes", "logprob": -0.2,
            "top_logprobs": [{"token": "Yes", "logprob": -0.2}, {"token": " No", "logprob": -1.9},
                             {"token": "No", "logprob": -2.0}]}]});
        let c = candidates_at(&lp, 0).unwrap();
        let yes = VariantSet::Ids(vec![(9454, "Yes".into())]);
        let no = VariantSet::Ids(vec![(2753, "No".into()), (2308, " No".into())]);
        let v = verdict_from_candidates(&c, &yes, &no, None);
        assert!((v.p_negative - ((-1.9f64).exp() + (-2f64).exp())).abs() < 1e-12 && v.exact, "{v:?}");
        // A candidate with an id is matched by id only, whatever its text.
        let other = vec![candidate("Yes", Some(1), -0.1), candidate("No", Some(2753), -2.5)];
        let v = verdict_from_candidates(&other, &yes, &no, None);
        assert_eq!((v.p_positive, v.exact), (0.0, false));
    }

    #[test]
    fn nothing_returned_for_either_verdict_is_missing() {
        let c = vec![candidate("Hmm", Some(5), -0.01)];
        let v = verdict_from_candidates(&c, &ids(&[1]), &ids(&[2]), None);
        assert_eq!(v.y, None);
        assert!(!v.exact);
    }
}
