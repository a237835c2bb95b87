//! Values read back from a command's files, checked against their domains before the
//! page shows them: an accuracy of 1e308 or a coverage of -7 comes from a damaged or
//! hand-edited file, and is refused naming the file and the field rather than printed.
//!
//! Invariant: what jury writes always passes (accuracies, shares and probabilities in
//! [0, 1], agreement and correlations at most 1); `null`, where a file says a number is
//! undefined, passes where the writer writes it, and is refused where it never does.

use std::path::Path;

use jury_io::{AdaptiveStudy, DiagnosticMetrics, Manifest, MethodMetrics, Metrics, OverSeeds};

use crate::ReportError;

/// Slack at a finite bound for rounding (a correlation of 1.0000000000000002, a mean of
/// probability sums a hair above 1); the values refused are far outside.
const ROUNDING: f64 = 1e-9;

/// One file's fields, checked one by one.
struct Fields<'a> {
    path: &'a Path,
}

impl Fields<'_> {
    /// `x` in `[lo, hi]`; NaN (a `null`) only when `undefined_ok`.
    fn within(&self, field: &str, x: f64, (lo, hi): (f64, f64), undefined_ok: bool) -> Result<(), ReportError> {
        if (x.is_nan() && undefined_ok) || (lo - ROUNDING..=hi + ROUNDING).contains(&x) {
            return Ok(());
        }
        let value = if x.is_nan() { "null".to_owned() } else { format!("{x:?}") };
        let expected = match (lo == f64::NEG_INFINITY, hi == f64::INFINITY) {
            (true, false) => format!("a number of at most {hi}"),
            (false, true) => format!("a number of at least {lo}"),
            _ => format!("a number in [{lo}, {hi}]"),
        };
        Err(ReportError::OutOfDomain { path: self.path.to_owned(), field: field.to_owned(), value, expected })
    }

    fn opt(&self, field: &str, x: Option<f64>, range: (f64, f64)) -> Result<(), ReportError> {
        x.map_or(Ok(()), |x| self.within(field, x, range, false))
    }

    fn over_seeds(&self, field: &str, o: &OverSeeds) -> Result<(), ReportError> {
        self.within(&format!("{field}.accuracy"), o.accuracy, UNIT, true)?;
        self.within(&format!("{field}.std"), o.std, NON_NEGATIVE, true)?;
        for (i, &s) in o.seeds.iter().enumerate() {
            self.within(&format!("{field}.seeds[{i}]"), s, UNIT, true)?;
        }
        Ok(())
    }
}

const UNIT: (f64, f64) = (0.0, 1.0);
const BRIER: (f64, f64) = (0.0, 2.0);
const CORRELATION: (f64, f64) = (-1.0, 1.0);
const AT_MOST_ONE: (f64, f64) = (f64::NEG_INFINITY, 1.0);
const NON_NEGATIVE: (f64, f64) = (0.0, f64::INFINITY);
const NON_POSITIVE: (f64, f64) = (f64::NEG_INFINITY, 0.0);

/// metrics.json's judges, agreement and methods.
pub(crate) fn metrics(path: &Path, m: &Metrics) -> Result<(), ReportError> {
    let f = Fields { path };
    for (name, j) in &m.judges.0 {
        f.opt(&format!("judges.{name}.accuracy"), j.accuracy, UNIT)?;
        f.within(&format!("judges.{name}.coverage"), j.coverage, UNIT, false)?;
    }
    if let Some(a) = &m.agreement {
        f.opt("agreement.fleiss_kappa", a.fleiss_kappa, AT_MOST_ONE)?;
        f.opt("agreement.krippendorff_alpha", a.krippendorff_alpha, AT_MOST_ONE)?;
        if let Some(e) = &a.error_correlation {
            for (i, row) in e.matrix.iter().enumerate() {
                for (k, &x) in row.iter().enumerate() {
                    f.opt(&format!("agreement.error_correlation.matrix[{i}][{k}]"), x, CORRELATION)?;
                }
            }
            f.within("agreement.error_correlation.family_threshold", e.family_threshold, CORRELATION, false)?;
        }
    }
    if let Some(r) = &m.recommendation {
        for (name, score) in &r.scores.0 {
            // A mean log-likelihood.
            f.opt(&format!("recommendation.scores.{name}"), *score, NON_POSITIVE)?;
        }
        f.within("recommendation.seconds", r.seconds, NON_NEGATIVE, false)?;
    }
    for (name, method) in &m.methods.0 {
        let field = |what: &str| format!("methods.{name}.{what}");
        f.opt(&field("brier"), method.brier(), BRIER)?;
        f.opt(&field("ece"), method.ece(), UNIT)?;
        match method {
            MethodMetrics::Neural(n) => {
                f.within(&field("accuracy"), n.accuracy, UNIT, true)?;
                f.within(&field("std"), n.std, NON_NEGATIVE, true)?;
                for (i, &s) in n.seeds.iter().enumerate() {
                    f.within(&field(&format!("seeds[{i}]")), s, UNIT, true)?;
                }
                for (i, &s) in n.dev_accuracy.iter().enumerate() {
                    f.within(&field(&format!("dev_accuracy[{i}]")), s, UNIT, true)?;
                }
                if let Some(c) = &n.context_accuracy {
                    f.over_seeds(&field("context_accuracy"), c)?;
                }
                f.opt(&field("slope_accuracy_pcc"), n.slope_accuracy_pcc.flatten(), CORRELATION)?;
            }
            MethodMetrics::ContextFree(c) => {
                f.opt(&field("accuracy"), c.accuracy, UNIT)?;
                if let Some(o) = &c.outside_dev {
                    f.over_seeds(&field("outside_dev"), o)?;
                }
                if let DiagnosticMetrics::DawidSkene { class_prior, confusion, .. } = &c.diagnostics {
                    for (i, &x) in class_prior.iter().enumerate() {
                        f.within(&field(&format!("class_prior[{i}]")), x, UNIT, false)?;
                    }
                    for (judge, rows) in &confusion.0 {
                        for (t, row) in rows.iter().enumerate() {
                            for (v, &x) in row.iter().enumerate() {
                                f.within(&field(&format!("confusion.{judge}[{t}][{v}]")), x, UNIT, false)?;
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// manifest.json's shares, masses and time.
pub(crate) fn manifest(path: &Path, m: &Manifest) -> Result<(), ReportError> {
    let f = Fields { path };
    for (judge, &mass) in &m.mean_captured_mass {
        f.opt(&format!("mean_captured_mass.{judge}"), mass, UNIT)?;
    }
    for (i, j) in m.judges.iter().enumerate() {
        f.opt(&format!("judges[{i}].exact_share"), j.exact_share, UNIT)?;
    }
    f.within("total_seconds", m.total_seconds, NON_NEGATIVE, false)?;
    if let Some(a) = &m.adaptive {
        f.within("adaptive.target", a.target, UNIT, false)?;
    }
    Ok(())
}

/// adaptive.json's accuracies, shares and costs.
pub(crate) fn adaptive(path: &Path, a: &AdaptiveStudy) -> Result<(), ReportError> {
    let f = Fields { path };
    f.opt("accuracy", a.accuracy, UNIT)?;
    f.opt("full_accuracy", a.full_accuracy, UNIT)?;
    f.within("target", a.target, UNIT, false)?;
    f.within("warmup", a.warmup, UNIT, false)?;
    f.within("cost", a.cost, NON_NEGATIVE, false)?;
    f.within("full_cost", a.full_cost, NON_NEGATIVE, false)?;
    for (judge, c) in &a.cost_per_call.0 {
        f.within(&format!("cost_per_call.{judge}"), *c, NON_NEGATIVE, false)?;
    }
    for (i, p) in a.curve.iter().enumerate() {
        f.opt(&format!("curve[{i}].accuracy"), p.accuracy, UNIT)?;
        f.within(&format!("curve[{i}].target"), p.target, UNIT, false)?;
        f.within(&format!("curve[{i}].warmup"), p.warmup, UNIT, false)?;
        f.within(&format!("curve[{i}].share_of_calls"), p.share_of_calls, UNIT, false)?;
    }
    Ok(())
}

/// winrate.json's rates, intervals and errors.
pub(crate) fn winrate(path: &Path, w: &jury_winrate::WinRateStudy) -> Result<(), ReportError> {
    let f = Fields { path };
    f.within("level", w.level, UNIT, false)?;
    f.opt("mean_abs_error", w.mean_abs_error, UNIT)?;
    f.opt("observed_mean_abs_error", w.observed_mean_abs_error, UNIT)?;
    for (i, p) in w.pairs.iter().enumerate() {
        let field = |what: &str| format!("pairs[{i}].{what}");
        for (what, x) in [
            ("revealed_win_rate", p.revealed_win_rate),
            ("human_win_rate", p.human_win_rate),
            ("observed", p.observed),
            ("observed_abs_error", p.observed_abs_error),
            ("estimate", p.estimate),
            ("abs_error", p.abs_error),
        ] {
            f.opt(&field(what), x, UNIT)?;
        }
        for (what, interval) in [("interval", p.interval), ("observed_interval", p.observed_interval)] {
            if let Some([lo, hi]) = interval {
                f.within(&field(&format!("{what}[0]")), lo, UNIT, false)?;
                f.within(&field(&format!("{what}[1]")), hi, (lo, 1.0), false)?;
            }
        }
    }
    Ok(())
}

/// ranking.json's agreement with the reference and the reference's scores.
pub(crate) fn ranking(path: &Path, r: &jury_rank::RankReport) -> Result<(), ReportError> {
    let f = Fields { path };
    if let Some(reference) = &r.reference {
        f.opt("reference.rbo", reference.rbo, UNIT)?;
        f.opt("reference.map_at_k", reference.map_at_k, UNIT)?;
        f.opt("reference.spearman", reference.spearman, CORRELATION)?;
        for (i, s) in reference.ranking.iter().enumerate() {
            f.within(&format!("reference.ranking[{i}].score"), s.score, UNIT, false)?;
        }
    }
    Ok(())
}
