//! The judgment data model every other crate speaks: checked probabilities, a validated
//! examples x judges x classes matrix with missing entries, labels and posteriors.
//!
//! Nothing here does I/O or knows a file format; loaders build these types and
//! algorithms consume them. Every constructor validates, so a value of one of these
//! types is proof that its invariants hold (probabilities finite and in [0, 1], vectors
//! summing to one, no duplicate (example, judge) pair, labels inside the class range).
//! One helper beside them, `on_threads`, spreads independent work over the cores with its
//! results in index order, so no answer depends on how many there are.

mod comparison;
mod judgments;
mod labels;
mod posteriors;
mod prob;

pub use comparison::Comparison;
pub use judgments::{Judgments, JudgmentsBuilder};
pub use labels::Labels;
pub use posteriors::Posteriors;
pub use prob::{Prob, normalize_prob_vector};

/// How far a probability vector's sum may be from 1 before it is rejected. Judges write
/// 32-bit floats and text files round, so exact equality is too strict; anything within
/// this is renormalised.
pub const SUM_TOLERANCE: f64 = 1e-3;

/// A judge's prompt budget in tokens unless the user sets one (`max_prompt_tokens:` of
/// an experiment or a server judge, `jury rank --max-prompt-tokens`): longer prompts are
/// cut, the longest field first.
pub const DEFAULT_MAX_PROMPT_TOKENS: usize = 2048;

/// Invalid data handed to a constructor of this crate. Messages name the example and
/// judge; callers that read files add the file and row.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CoreError {
    #[error("probability {value} is not a finite number in [0, 1]")]
    ProbOutOfRange { value: f64 },
    #[error("probability vector sums to {sum}, not 1 (tolerance {SUM_TOLERANCE})")]
    BadSum { sum: f64 },
    #[error("probability vector has {got} entries, expected {expected} (one per class)")]
    WrongClassCount { got: usize, expected: usize },
    #[error("at least 2 classes are needed, got {0}")]
    TooFewClasses(usize),
    #[error("duplicate judgment for example `{example}` by judge `{judge}`")]
    Duplicate { example: String, judge: String },
    #[error("label {label} for example `{example}` is outside 0..{n_classes}")]
    LabelOutOfRange { example: String, label: usize, n_classes: usize },
    #[error("{what}: expected {expected} entries, got {got}")]
    Shape { what: &'static str, expected: usize, got: usize },
    #[error("posterior row {row} is not a probability vector: {reason}")]
    BadPosterior { row: usize, reason: String },
}

/// `f(0..n)` on every available core, each thread a contiguous run of indices; the
/// results in index order, so a caller that folds them in order gets the same answer on
/// any number of cores.
pub fn on_threads<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get()).clamp(1, n.max(1));
    let per_thread = n.div_ceil(threads).max(1);
    let mut slots: Vec<Option<T>> = (0..n).map(|_| None).collect();
    std::thread::scope(|scope| {
        for (t, chunk) in slots.chunks_mut(per_thread).enumerate() {
            let f = &f;
            let first = t * per_thread;
            scope.spawn(move || {
                for (i, slot) in chunk.iter_mut().enumerate() {
                    *slot = Some(f(first + i));
                }
            });
        }
    });
    // Every slot is filled: each index belongs to exactly one chunk, and a panicking
    // thread re-panics here when the scope joins it.
    slots.into_iter().flatten().collect()
}

/// Index of the largest entry; the lowest index wins exact ties. This is the SkillAggregation paper's
/// vote rule `b = 1[y > 0.5]` generalised to C classes (a binary 0.5 votes class 0).
pub fn argmax<T: PartialOrd>(v: &[T]) -> usize {
    let mut best = 0;
    for (i, x) in v.iter().enumerate().skip(1) {
        if *x > v[best] {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_threads_returns_every_index_once_in_order() {
        for n in [0, 1, 2, 3, 17] {
            let out = on_threads(n, |i| (i, std::thread::current().id()));
            assert_eq!(out.iter().map(|(i, _)| *i).collect::<Vec<_>>(), (0..n).collect::<Vec<_>>());
        }
    }
}
