//! Evaluation functions: how close a candidate's response is to a judge model's response
//! on one prompt. The triplet methods and the most-common-answer baseline only ever see
//! these numbers, so any metric (ROUGE, equality, an LLM judge) plugs in.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{RankError, Responses};

/// Similarity of one model's response to another's on a prompt; higher is closer.
///
/// Implementations may be random (noisy equality) and hold their own seeded generator,
/// hence `&mut self`: the same call sequence gives the same answers.
pub trait Evaluation {
    /// How close `candidate`'s response on `prompt` is to `judge`'s; `None` when either
    /// response is missing or the evaluation only compares pairs (an LLM judge).
    fn similarity(&mut self, prompt: usize, judge: usize, candidate: usize) -> Option<f64>;

    /// How much closer `a`'s response is to `judge`'s than `b`'s, in [-1, 1] (positive:
    /// `a` is closer); `None` when a response is missing. Defaults to the difference of
    /// the two similarities; an evaluation that judges a pair at once overrides it.
    fn compare(&mut self, prompt: usize, judge: usize, a: usize, b: usize) -> Option<f64> {
        // Both similarities are requested (a random evaluation consumes its draws in a
        // fixed order) before either can end the comparison.
        let (x, y) = (self.similarity(prompt, judge, a), self.similarity(prompt, judge, b));
        Some(x? - y?)
    }
}

/// Exact equality of the trimmed responses (multiple choice): 1 or 0.
pub struct Equality {
    /// `codes[model][prompt]`: responses interned per prompt so a comparison is one
    /// integer test.
    codes: Vec<Vec<Option<u32>>>,
}

impl Equality {
    pub fn new(responses: &Responses) -> Self {
        Self { codes: intern(responses) }
    }
}

impl Evaluation for Equality {
    fn similarity(&mut self, prompt: usize, judge: usize, candidate: usize) -> Option<f64> {
        let (a, b) = (self.codes[judge][prompt]?, self.codes[candidate][prompt]?);
        Some(f64::from(u8::from(a == b)))
    }
}

/// Equality whose outcome is flipped with probability `p` on every call: a stand-in
/// for an imperfect comparison (the triplet-ranking paper's noisy equality).
pub struct NoisyEquality {
    exact: Equality,
    p: f64,
    rng: ChaCha8Rng,
}

impl NoisyEquality {
    pub fn new(responses: &Responses, p: f64, seed: u64) -> Result<Self, RankError> {
        if !(0.0..=1.0).contains(&p) {
            return Err(RankError::BadNoise(p));
        }
        Ok(Self { exact: Equality::new(responses), p, rng: ChaCha8Rng::seed_from_u64(seed) })
    }
}

impl Evaluation for NoisyEquality {
    fn similarity(&mut self, prompt: usize, judge: usize, candidate: usize) -> Option<f64> {
        let s = self.exact.similarity(prompt, judge, candidate)?;
        Some(if self.rng.random_bool(self.p) { 1.0 - s } else { s })
    }
}

/// ROUGE-2 F-measure between the two responses (summarisation), with the
/// `rouge_score` package's default tokenisation: lower-case, every run of characters
/// other than ASCII letters and digits separates tokens, no stemming.
pub struct Rouge2 {
    /// `bigrams[model][prompt]`: bigram counts, computed once per response.
    bigrams: Vec<Vec<Option<Bigrams>>>,
}

/// A response's bigram multiset (bigrams interned per prompt) and its total count.
struct Bigrams {
    counts: HashMap<u64, u32>,
    total: u32,
}

impl Rouge2 {
    pub fn new(responses: &Responses) -> Self {
        let bigrams = (0..responses.n_models())
            .map(|m| (0..responses.n_prompts()).map(|d| responses.get(m, d).map(bigram_counts)).collect())
            .collect();
        Self { bigrams }
    }
}

impl Evaluation for Rouge2 {
    fn similarity(&mut self, prompt: usize, judge: usize, candidate: usize) -> Option<f64> {
        let a = self.bigrams[judge][prompt].as_ref()?;
        let b = self.bigrams[candidate][prompt].as_ref()?;
        Some(f_measure(a, b))
    }
}

/// ROUGE-2 F-measure of two texts (symmetric); 0 when either has no bigram.
pub fn rouge2_f(reference: &str, candidate: &str) -> f64 {
    f_measure(&bigram_counts(reference), &bigram_counts(candidate))
}

fn f_measure(a: &Bigrams, b: &Bigrams) -> f64 {
    if a.total == 0 || b.total == 0 {
        return 0.0;
    }
    let (small, large) = if a.counts.len() <= b.counts.len() { (a, b) } else { (b, a) };
    let overlap: u32 = small.counts.iter().map(|(k, &n)| n.min(large.counts.get(k).copied().unwrap_or(0))).sum();
    if overlap == 0 {
        return 0.0;
    }
    let precision = f64::from(overlap) / f64::from(b.total);
    let recall = f64::from(overlap) / f64::from(a.total);
    2.0 * precision * recall / (precision + recall)
}

fn tokens(text: &str) -> Vec<String> {
    text.to_ascii_lowercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

fn bigram_counts(text: &str) -> Bigrams {
    let toks = tokens(text);
    let mut counts = HashMap::new();
    for w in toks.windows(2) {
        *counts.entry(hash_pair(&w[0], &w[1])).or_insert(0) += 1;
    }
    let total = toks.len().saturating_sub(1) as u32;
    Bigrams { counts, total }
}

/// A 64-bit key for a bigram. Collisions would only merge two bigrams' counts; with
/// SipHash over a few thousand bigrams per prompt their chance is negligible.
fn hash_pair(a: &str, b: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    a.hash(&mut h);
    b.hash(&mut h);
    h.finish()
}

fn intern(responses: &Responses) -> Vec<Vec<Option<u32>>> {
    let mut codes = vec![vec![None; responses.n_prompts()]; responses.n_models()];
    for d in 0..responses.n_prompts() {
        let mut ids: HashMap<&str, u32> = HashMap::new();
        for (m, row) in codes.iter_mut().enumerate() {
            if let Some(r) = responses.get(m, d) {
                let next = ids.len() as u32;
                row[d] = Some(*ids.entry(r.trim()).or_insert(next));
            }
        }
    }
    codes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(rows: &[&[Option<&str>]]) -> Responses {
        let names = (0..rows.len()).map(|i| format!("m{i}")).collect();
        let cells = rows.iter().map(|r| r.iter().map(|c| c.map(str::to_owned)).collect()).collect();
        Responses::new(names, cells).unwrap()
    }

    #[test]
    fn rouge2_matches_hand_counts() {
        // reference bigrams: the cat, cat sat, sat on, on the, the mat (5)
        // candidate bigrams: the cat, cat sat, sat on, on a, a mat (5); overlap 3
        let f = rouge2_f("The cat sat on the mat.", "the cat sat on a mat");
        assert!((f - 0.6).abs() < 1e-12, "{f}");
        assert_eq!(rouge2_f("same words here", "same words here"), 1.0);
        assert_eq!(rouge2_f("one", "one"), 0.0, "a single token has no bigram");
        // Repeated bigrams count with multiplicity (clipped overlap): ref "a b a b" has
        // (a b) x2, (b a) x1; candidate "a b" has (a b) x1: P = 1, R = 1/3, F = 0.5.
        assert!((rouge2_f("a b a b", "a b") - 0.5).abs() < 1e-12);
    }

    #[test]
    fn equality_ignores_surrounding_space_and_skips_missing() {
        let r = table(&[&[Some("A"), Some("B")], &[Some(" A "), None], &[Some("C"), Some("B")]]);
        let mut e = Equality::new(&r);
        assert_eq!(e.similarity(0, 0, 1), Some(1.0));
        assert_eq!(e.similarity(0, 0, 2), Some(0.0));
        assert_eq!(e.similarity(1, 0, 1), None);
        assert_eq!(e.similarity(1, 0, 2), Some(1.0));
    }

    #[test]
    fn noisy_equality_flips_at_its_rate_and_repeats_with_its_seed() {
        let r = table(&[&[Some("A")], &[Some("A")], &[Some("B")]]);
        let mut e = NoisyEquality::new(&r, 0.2, 7).unwrap();
        let flips = (0..20_000).filter(|_| e.similarity(0, 0, 1) == Some(0.0)).count();
        assert!((flips as f64 / 20_000.0 - 0.2).abs() < 0.01, "{flips}");
        let run = |seed| {
            let mut e = NoisyEquality::new(&r, 0.3, seed).unwrap();
            (0..50).map(|_| e.similarity(0, 0, 2).unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert!(matches!(NoisyEquality::new(&r, 1.5, 0), Err(RankError::BadNoise(_))));
    }
}
