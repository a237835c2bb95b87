//! A pairwise comparison row, the unit of a win-rate study: plain data that the table
//! reader (jury-io) builds and the win-rate estimators (jury-winrate) consume.

/// One row of a comparisons table: an evaluator's vote (or a human label) on one
/// comparison of two generators' outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comparison {
    /// Identifies the comparison within its generator pair (shared by its evaluators' rows).
    pub comparison_id: String,
    pub generator_0: String,
    pub generator_1: String,
    /// The evaluator (an LLM, or the human-label name).
    pub evaluator: String,
    /// `Some(true)` when generator_1's output is preferred; `None` for a tie or no verdict.
    pub vote: Option<bool>,
}
