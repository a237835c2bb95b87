//! Hard votes grouped by pattern, the input of every vote-based method: examples with
//! the same (judge, vote) set get the same posterior from any method whose parameters
//! are per judge (or per example but symmetric in examples, as GLAD's difficulties), so
//! those methods iterate over distinct patterns weighted by their counts. A jury of 10
//! binary judges has at most 3^10 patterns and usually far fewer than examples.

use rustc_hash::FxHashMap as HashMap;

use jury_core::Judgments;

use crate::{TieBreak, normalize_or_uniform};

/// Pattern `p`'s (judge, vote) pairs are `entries[offsets[p]..offsets[p + 1]]`, judges
/// increasing; `counts[p]` examples have it. The empty pattern (no judge) may occur.
pub(crate) struct Votes {
    pub(crate) n_classes: usize,
    pub(crate) n_judges: usize,
    offsets: Vec<usize>,
    entries: Vec<(u32, u32)>,
    /// Number of examples with each pattern.
    pub(crate) counts: Vec<f64>,
    /// Pattern of each example.
    pattern_of: Vec<u32>,
    /// Each judge's number of votes.
    per_judge: Vec<f64>,
}

impl Votes {
    /// Each present judgment's vote is its argmax (`p > 0.5` for binary).
    pub(crate) fn new(j: &Judgments) -> Self {
        let mut index: HashMap<Vec<(u32, u32)>, u32> = HashMap::default();
        let mut votes = Votes {
            n_classes: j.n_classes(),
            n_judges: j.n_judges(),
            offsets: vec![0],
            entries: Vec::new(),
            counts: Vec::new(),
            pattern_of: Vec::with_capacity(j.n_examples()),
            per_judge: vec![0.0; j.n_judges()],
        };
        let mut key = Vec::new();
        for n in 0..j.n_examples() {
            key.clear();
            key.extend(j.row(n).map(|(k, p)| (k as u32, jury_core::argmax(p) as u32)));
            let p = match index.get(&key) {
                Some(&p) => p,
                None => {
                    let p = votes.counts.len() as u32;
                    votes.entries.extend_from_slice(&key);
                    votes.offsets.push(votes.entries.len());
                    votes.counts.push(0.0);
                    index.insert(key.clone(), p);
                    p
                }
            };
            votes.counts[p as usize] += 1.0;
            votes.pattern_of.push(p);
            key.iter().for_each(|&(k, _)| votes.per_judge[k as usize] += 1.0);
        }
        votes
    }

    pub(crate) fn pattern(&self, p: usize) -> &[(u32, u32)] {
        &self.entries[self.offsets[p]..self.offsets[p + 1]]
    }

    pub(crate) fn n_patterns(&self) -> usize {
        self.counts.len()
    }

    /// Examples with no judgment at all.
    pub(crate) fn unjudged(&self) -> usize {
        (0..self.n_patterns()).filter(|&p| self.pattern(p).is_empty()).map(|p| self.counts[p] as usize).sum()
    }

    /// Examples with at least one judgment.
    pub(crate) fn n_judged(&self) -> usize {
        self.pattern_of.len() - self.unjudged()
    }

    /// Per-pattern rows (P x C) expanded to per-example rows (N x C).
    pub(crate) fn expand(&self, per_pattern: &[f64]) -> Vec<f64> {
        let c = self.n_classes;
        let mut out = Vec::with_capacity(self.pattern_of.len() * c);
        for &p in &self.pattern_of {
            out.extend_from_slice(&per_pattern[p as usize * c..(p as usize + 1) * c]);
        }
        out
    }

    /// Majority-vote fractions per pattern (P x C), uniform for the empty pattern: the
    /// classic EM start, the same rule as [`crate::MajorityVote`].
    pub(crate) fn vote_fractions(&self) -> Vec<f64> {
        let c = self.n_classes;
        let mut out = vec![0.0; self.n_patterns() * c];
        for (p, row) in out.chunks_exact_mut(c).enumerate() {
            let pat = self.pattern(p);
            for &(_, v) in pat {
                row[v as usize] += 1.0;
            }
            normalize_or_uniform(row, pat.len());
        }
        out
    }

    /// Per pattern (P x C), the sum of the weights of the judges voting for each class.
    pub(crate) fn weighted_sums(&self, weights: &[f64]) -> Vec<f64> {
        let c = self.n_classes;
        let mut out = vec![0.0; self.n_patterns() * c];
        for (p, row) in out.chunks_exact_mut(c).enumerate() {
            for &(k, v) in self.pattern(p) {
                row[v as usize] += weights[k as usize];
            }
        }
        out
    }

    /// How many of each pattern's examples get each hard label when `scores` (P x C) are
    /// labeled by `ties` (P x C counts): a deterministic rule labels a whole pattern
    /// alike, a random one draws per example, in example order.
    pub(crate) fn label_counts(&self, scores: &[f64], ties: TieBreak) -> Vec<f64> {
        let c = self.n_classes;
        let mut out = vec![0.0; scores.len()];
        match ties {
            TieBreak::Random { .. } => {
                let (labels, _) = ties.label_all(&self.expand(scores), c);
                for (&p, &l) in self.pattern_of.iter().zip(&labels) {
                    out[p as usize * c + l] += 1.0;
                }
            }
            TieBreak::Positive | TieBreak::Negative => {
                let (labels, _) = ties.label_all(scores, c);
                for (p, &l) in labels.iter().enumerate() {
                    out[p * c + l] = self.counts[p];
                }
            }
        }
        out
    }

    /// Each judge's share of its votes that agree with the labels `label_counts` (P x C)
    /// gives ([`Votes::label_counts`]); `None` for a judge with no vote.
    pub(crate) fn agreement(&self, label_counts: &[f64]) -> Vec<Option<f64>> {
        let c = self.n_classes;
        let mut agree = vec![0.0; self.n_judges];
        let mut total = vec![0.0; self.n_judges];
        for p in 0..self.n_patterns() {
            for &(k, v) in self.pattern(p) {
                agree[k as usize] += label_counts[p * c + v as usize];
                total[k as usize] += self.counts[p];
            }
        }
        agree.iter().zip(&total).map(|(a, t)| (*t > 0.0).then(|| a / t)).collect()
    }

    /// Each judge's number of votes.
    pub(crate) fn votes_per_judge(&self) -> &[f64] {
        &self.per_judge
    }

    /// Per-judge values as skills: `None` for a judge with no vote (its value was never
    /// fitted).
    pub(crate) fn skills(&self, values: impl IntoIterator<Item = f64>) -> Vec<Option<f64>> {
        values.into_iter().zip(&self.per_judge).map(|(x, &n)| (n > 0.0).then_some(x)).collect()
    }
}
