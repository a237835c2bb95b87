//! The report's charts as SVG text (plotters' SVG backend): accuracy with intervals, the
//! judges' agreement heatmap, reliability diagrams and learned slopes against accuracy.
//!
//! Invariant: a chart depends only on its data (no dates, no randomness), so the same
//! run renders the same bytes.

use plotters::prelude::*;

use crate::ReportError;

/// A bar with its 95% interval.
pub(crate) struct Bar<'a> {
    pub(crate) label: &'a str,
    pub(crate) value: f64,
    pub(crate) interval: Option<(f64, f64)>,
    /// Methods are drawn in another colour than judges.
    pub(crate) method: bool,
}

fn err(e: impl std::fmt::Display) -> ReportError {
    ReportError::Plot(e.to_string())
}

const JUDGE: RGBColor = RGBColor(84, 117, 168);
const METHOD: RGBColor = RGBColor(214, 120, 44);

/// Horizontal bars of accuracy, one row per judge or method, with interval whiskers.
pub(crate) fn accuracy_bars(bars: &[Bar]) -> Result<String, ReportError> {
    let mut svg = String::new();
    let height = 70 + 28 * bars.len() as u32;
    {
        let root = SVGBackend::with_string(&mut svg, (760, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let lo = bars.iter().map(|b| b.interval.map_or(b.value, |i| i.0)).fold(1.0f64, f64::min);
        let x0 = ((lo * 10.0).floor() / 10.0).clamp(0.0, 0.9);
        let n = bars.len() as i32;
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(230)
            .build_cartesian_2d(x0..1.0f64, rows_axis(n))
            .map_err(err)?;
        let labels: Vec<String> = bars.iter().map(|b| short(b.label, 36)).collect();
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc("accuracy (95% interval)")
            .y_labels(bars.len())
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .draw()
            .map_err(err)?;
        for (i, b) in bars.iter().enumerate() {
            let colour = if b.method { METHOD } else { JUDGE };
            let i = i as i32;
            let mut bar = Rectangle::new(
                [(x0, SegmentValue::Exact(i)), (b.value, SegmentValue::Exact(i + 1))],
                colour.mix(0.8).filled(),
            );
            bar.set_margin(3, 3, 0, 0);
            chart.draw_series(std::iter::once(bar)).map_err(err)?;
            if let Some((l, h)) = b.interval {
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(l, SegmentValue::CenterOf(i)), (h, SegmentValue::CenterOf(i))],
                        BLACK.stroke_width(2),
                    )))
                    .map_err(err)?;
            }
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// A K x K heatmap of Cohen's kappa between judges (blank where undefined).
pub(crate) fn kappa_heatmap(names: &[String], kappa: &[Vec<Option<f64>>]) -> Result<String, ReportError> {
    let mut svg = String::new();
    let k = names.len() as i32;
    let side = (44 * k as u32).clamp(360, 880);
    {
        let root = SVGBackend::with_string(&mut svg, (side + 220, side + 50)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        // The matrix is symmetric: rows carry the names with their number, columns the
        // number alone (long rotated names would not fit).
        let labels: Vec<String> =
            names.iter().enumerate().map(|(i, n)| format!("{} ({})", short(n, 24), i + 1)).collect();
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(200)
            .build_cartesian_2d(rows_axis(k), rows_axis(k))
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(names.len())
            .y_labels(names.len())
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) if *i < k => (i + 1).to_string(),
                _ => String::new(),
            })
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(err)?;
        for (i, row) in kappa.iter().enumerate() {
            for (j, v) in row.iter().enumerate() {
                let Some(v) = v else { continue };
                // White at kappa 0 or below, dark blue at 1.
                let t = v.clamp(0.0, 1.0);
                let c = RGBColor((255.0 - 200.0 * t) as u8, (255.0 - 160.0 * t) as u8, 255 - (80.0 * t) as u8);
                let (i, j) = (i as i32, j as i32);
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [
                            (SegmentValue::Exact(j), SegmentValue::Exact(i)),
                            (SegmentValue::Exact(j + 1), SegmentValue::Exact(i + 1)),
                        ],
                        c.filled(),
                    )))
                    .map_err(err)?;
                if k <= 16 {
                    chart
                        .draw_series(std::iter::once(Text::new(
                            format!("{v:.2}"),
                            (SegmentValue::CenterOf(j), SegmentValue::CenterOf(i)),
                            ("sans-serif", 12).into_font().color(if t > 0.6 { &WHITE } else { &BLACK }),
                        )))
                        .map_err(err)?;
                }
            }
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// A reliability diagram: each bin's accuracy against its mean confidence, the
/// diagonal for perfect calibration.
pub(crate) fn reliability(points: &[(f64, f64, usize)], min_confidence: f64) -> Result<String, ReportError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (320, 300)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(40)
            .build_cartesian_2d(min_confidence..1.0f64, 0.0..1.0f64)
            .map_err(err)?;
        chart.configure_mesh().x_desc("confidence").y_desc("accuracy").draw().map_err(err)?;
        chart
            .draw_series(LineSeries::new([(min_confidence, min_confidence), (1.0, 1.0)], BLACK.mix(0.4)))
            .map_err(err)?;
        let total: usize = points.iter().map(|p| p.2).sum::<usize>().max(1);
        chart
            .draw_series(points.iter().map(|&(c, a, n)| {
                let r = 3.0 + 9.0 * (n as f64 / total as f64).sqrt();
                Circle::new((c, a), r as i32, METHOD.mix(0.8).filled())
            }))
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// A per-judge estimate (a learned slope, the SkillAggregation paper's Figure 3, or a method's skill)
/// against judge accuracy, one point per judge; `what` names the vertical axis.
pub(crate) fn slopes(points: &[(f64, f64)], what: &str) -> Result<String, ReportError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (360, 300)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (xs, ys): (Vec<f64>, Vec<f64>) = points.iter().copied().unzip();
        let range = |v: &[f64]| {
            let (lo, hi) = v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
            let pad = ((hi - lo) * 0.1).max(0.02);
            (lo - pad)..(hi + pad)
        };
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(45)
            .build_cartesian_2d(range(&xs), range(&ys))
            .map_err(err)?;
        chart.configure_mesh().x_desc("judge accuracy").y_desc(short(what, 40)).draw().map_err(err)?;
        chart.draw_series(points.iter().map(|&(x, y)| Circle::new((x, y), 4, JUDGE.filled()))).map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// One setting of the adaptive rule: its share of the full jury's calls (or cost) and
/// accuracy.
pub(crate) struct CostPoint {
    pub share: f64,
    pub accuracy: f64,
    /// "target / warm-up".
    pub label: String,
    pub chosen: bool,
}

/// Accuracy against a share of the full jury's spending (`x_desc`: of its calls, or of
/// its cost), one point per setting (the chosen one larger), with the full jury's
/// accuracy at 100% as a dashed line.
pub(crate) fn accuracy_vs_share(points: &[CostPoint], full: f64, x_desc: &str) -> Result<String, ReportError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (520, 340)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (lo, hi) = points
            .iter()
            .map(|p| p.accuracy)
            .chain([full])
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| (a.min(x), b.max(x)));
        let pad = ((hi - lo) * 0.15).max(0.005);
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(55)
            .build_cartesian_2d(0.0..1.05, (lo - pad)..(hi + pad))
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc("accuracy")
            .x_label_formatter(&|x| format!("{:.0}%", 100.0 * x))
            .y_label_formatter(&|y| format!("{:.1}", 100.0 * y))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(DashedLineSeries::new([(0.0, full), (1.0, full)], 6, 4, BLACK.stroke_width(1)))
            .map_err(err)?;
        chart.draw_series([Circle::new((1.0, full), 4, BLACK.filled())]).map_err(err)?;
        chart
            .draw_series(
                points.iter().map(|p| Circle::new((p.share, p.accuracy), if p.chosen { 6 } else { 4 }, JUDGE.filled())),
            )
            .map_err(err)?;
        chart
            .draw_series(
                points
                    .iter()
                    .map(|p| Text::new(short(&p.label, 16), (p.share, p.accuracy), ("sans-serif", 11).into_font())),
            )
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// `s` cut to `n` characters with an ellipsis (charts only; tables keep names whole).
fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_owned() } else { s.chars().take(n - 1).chain(std::iter::once('…')).collect() }
}

/// One generator pair on the win-rate chart.
pub(crate) struct PairPoint<'a> {
    pub(crate) label: &'a str,
    /// Estimate with its interval (lower, upper).
    pub(crate) estimate: Option<(f64, f64, f64)>,
    pub(crate) observed: Option<f64>,
    pub(crate) human: Option<f64>,
}

/// One row per pair on [0, 1]: the estimate's interval and point, the observed rate and
/// the human rate.
pub(crate) fn win_rates(rows: &[PairPoint]) -> Result<String, ReportError> {
    intervals(rows, "win rate of G1 over G0")
}

/// A discrete axis of `n` rows, one segment each: plotters' integer range `0..m` is
/// inclusive of `m` as a discrete axis, so `0..n` drew an empty row past the last.
fn rows_axis(n: i32) -> plotters::coord::ranged1d::SegmentedCoord<plotters::coord::types::RangedCoordi32> {
    (0..(n - 1).max(0)).into_segmented()
}

/// One row per estimate on [0, 1]: its interval and point (the rates of a calibrated run,
/// the win rates of pairs), with `x_desc` under the axis.
pub(crate) fn intervals(rows: &[PairPoint], x_desc: &str) -> Result<String, ReportError> {
    let mut svg = String::new();
    let height = 70 + 28 * rows.len() as u32;
    {
        let root = SVGBackend::with_string(&mut svg, (760, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let n = rows.len() as i32;
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(230)
            .build_cartesian_2d(0.0..1.0f64, rows_axis(n))
            .map_err(err)?;
        let labels: Vec<String> = rows.iter().map(|r| short(r.label, 36)).collect();
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc(x_desc)
            .y_labels(rows.len())
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .draw()
            .map_err(err)?;
        for (i, r) in rows.iter().enumerate() {
            let at = || SegmentValue::CenterOf(i as i32);
            if let Some((e, lo, hi)) = r.estimate {
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(lo, at()), (hi, at())],
                        METHOD.stroke_width(3),
                    )))
                    .map_err(err)?;
                chart.draw_series(std::iter::once(Circle::new((e, at()), 5, METHOD.filled()))).map_err(err)?;
            }
            if let Some(o) = r.observed {
                chart.draw_series(std::iter::once(Circle::new((o, at()), 4, JUDGE.filled()))).map_err(err)?;
            }
            if let Some(h) = r.human {
                let (top, bottom) = (SegmentValue::Exact(i as i32), SegmentValue::Exact(i as i32 + 1));
                chart
                    .draw_series(std::iter::once(PathElement::new(vec![(h, top), (h, bottom)], BLACK.stroke_width(2))))
                    .map_err(err)?;
            }
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use plotters::coord::ranged1d::DiscreteRanged;

    use super::rows_axis;

    /// One segment per row, none past the last (a plot of four rates drew five): `n`
    /// values and plotters' closing `SegmentValue::Last`.
    #[test]
    fn a_rows_axis_has_a_segment_per_row() {
        for n in [1, 4, 13] {
            assert_eq!(rows_axis(n).size(), n as usize + 1);
        }
    }
}
