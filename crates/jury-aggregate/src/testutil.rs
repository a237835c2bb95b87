//! Small builders for hand-written test matrices.

use jury_core::Judgments;

/// A binary matrix from rows of optional P(positive), judges named j0, j1, ...
pub(crate) fn binary(rows: &[&[Option<f64>]]) -> Judgments {
    let k = rows.first().map_or(0, |r| r.len());
    let entries = rows.iter().flat_map(|r| r.iter().map(|p| p.map(|p| vec![1.0 - p, p]))).collect();
    Judgments::from_entries(
        (0..rows.len()).map(|n| format!("e{n}")).collect(),
        (0..k).map(|k| format!("j{k}")).collect(),
        2,
        entries,
    )
    .unwrap()
}
