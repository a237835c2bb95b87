//! The names of the files jury's commands write into an output folder, in one place:
//! the writers (the runner through [`super::RunOutput`], the aggregation study, the CLI's
//! commands) and the readers (the report, the dry run) take them from here, so no file
//! name is spelled twice.

/// A study's (`jury aggregate`, a run's aggregation): its metrics.
pub const METRICS: &str = "metrics.json";
/// A study's posteriors and hard labels per method and example.
pub const PREDICTIONS: &str = "predictions.csv";
/// The page every command that writes a folder leaves in it.
pub const REPORT: &str = "report.html";

/// `jury run`: the judgment cache, one line per judgment (also `jury rank --eval llm:`'s).
pub const CACHE: &str = "cache.jsonl";
/// `jury run` and `jury simulate`: the judgments table.
pub const JUDGMENTS: &str = "judgments.csv";
/// `jury run` and `jury simulate`: the labels table.
pub const LABELS: &str = "labels.csv";
/// `jury run`: the examples a server rejected for good.
pub const FAILURES: &str = "failures.csv";
/// `jury run` with `both_orders`: each order's judgment.
pub const JUDGMENTS_BY_ORDER: &str = "judgments_by_order.csv";
/// `jury run`: each example's category, when the data set has one (TruthfulQA).
pub const CATEGORIES: &str = "categories.csv";
/// `jury run`: each prompt as the judges saw it.
pub const PROMPTS: &str = "prompts.jsonl";
/// `jury run`: each example's context text.
pub const CONTEXTS: &str = "contexts.csv";
/// `jury run`: the experiment with every default filled in.
pub const RESOLVED_CONFIG: &str = "config.resolved.yaml";
/// `jury run`: what ran, how long, with what.
pub const MANIFEST: &str = "manifest.json";
/// `jury run` with `adaptive:`: each example's judges asked and why it stopped.
pub const ADAPTIVE_DECISIONS: &str = "adaptive.csv";

/// Every file `jury run` may write: the judging stage's, then its study's.
pub const RUN: [&str; 14] = [
    CACHE,
    JUDGMENTS,
    LABELS,
    FAILURES,
    JUDGMENTS_BY_ORDER,
    PROMPTS,
    CONTEXTS,
    CATEGORIES,
    RESOLVED_CONFIG,
    MANIFEST,
    ADAPTIVE_DECISIONS,
    METRICS,
    PREDICTIONS,
    REPORT,
];

/// `jury simulate adaptive`: the replay.
pub const ADAPTIVE_REPLAY: &str = "adaptive.json";
/// `jury simulate calibration`: the replay of calibration labels.
pub const CALIBRATION_REPLAY: &str = "calibration.json";
/// `jury import winrate-*`: the pairwise comparisons `jury winrate` reads.
pub const COMPARISONS: &str = "comparisons.csv";
/// `jury winrate`: the calibrated win rates.
pub const WINRATE: &str = "winrate.json";
/// `jury rank`: the ranking.
pub const RANKING: &str = "ranking.json";
/// `jury rank-sim`: the simulation study.
pub const RANK_SIM: &str = "rank-sim.json";

/// Every output folder's marker (`OutputDir`): the command that owns it.
pub const MARKER: &str = ".jury-output.json";
/// Every output folder's staging folder (`OutputDir`).
pub const STAGING: &str = ".jury-staging";
