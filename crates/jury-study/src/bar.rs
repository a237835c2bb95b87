//! The bar the recommended method is held to on a validation jury
//! (docs/reproduction/validation-suite.md): at or above Dawid-Skene, at or above the
//! lower of majority vote and AverageProb, and at most 0.5 points below the best
//! crowd-kit method, all read from the jury's metrics.json.

use std::fmt::Write as _;

use jury_io::Metrics;

/// crowd-kit's methods as jury names them.
pub const CROWD_KIT: [&str; 9] = ["mv", "ds", "wawa", "zbs", "onecoin", "glad", "mace", "mmsr", "kos"];

/// A metrics.json that cannot be held to the bar, with the jury it is about.
#[derive(Debug, thiserror::Error)]
#[error("jury `{jury}`: {reason}")]
pub struct BarError {
    pub jury: String,
    pub reason: String,
}

/// One jury held to the bar; accuracies in percent.
#[derive(Debug, Clone, PartialEq)]
pub struct BarCheck {
    pub jury: String,
    pub n_examples: usize,
    pub n_judges: usize,
    pub recommended: String,
    /// Every method's accuracy, in metrics.json's order.
    pub accuracy: Vec<(String, f64)>,
    pub best_crowd_kit: String,
    pub best_judge: f64,
    pub passes: bool,
}

impl BarCheck {
    /// `jury`'s metrics against the bar. Needs the recommended method, ds, mv, avg and
    /// every crowd-kit method scored.
    pub fn new(jury: &str, m: &Metrics) -> Result<Self, BarError> {
        let err = |reason: String| BarError { jury: jury.to_owned(), reason };
        let accuracy: Vec<(String, f64)> =
            m.methods.0.iter().filter_map(|(name, method)| Some((name.clone(), 100.0 * method.accuracy()?))).collect();
        let check = Self {
            jury: jury.to_owned(),
            n_examples: m.n_examples,
            n_judges: m.n_judges,
            recommended: m.recommended_method.clone(),
            accuracy,
            best_crowd_kit: String::new(),
            best_judge: 100.0 * m.judges.0.iter().filter_map(|(_, j)| j.accuracy).fold(f64::NEG_INFINITY, f64::max),
            passes: false,
        };
        for needed in [check.recommended.as_str(), "avg"].into_iter().chain(CROWD_KIT) {
            if check.get(needed).is_none() {
                return Err(err(format!("no accuracy for method `{needed}` (run it with --labels)")));
            }
        }
        let best_crowd_kit = CROWD_KIT
            .iter()
            .copied()
            .fold(CROWD_KIT[0], |best, k| if check.get(k) > check.get(best) { k } else { best });
        let bar = check.at("ds").max(check.mv_avg()).max(check.at(best_crowd_kit) - 0.5);
        let passes = check.at(&check.recommended) >= bar - 1e-9;
        Ok(Self { best_crowd_kit: best_crowd_kit.to_owned(), passes, ..check })
    }

    /// A method's accuracy in percent, if scored.
    pub fn get(&self, method: &str) -> Option<f64> {
        self.accuracy.iter().find(|(name, _)| name == method).map(|(_, a)| *a)
    }

    fn at(&self, method: &str) -> f64 {
        self.get(method).unwrap_or(f64::NAN)
    }

    /// The lower of majority vote and AverageProb.
    pub fn mv_avg(&self) -> f64 {
        self.at("mv").min(self.at("avg"))
    }
}

/// The check as two markdown tables: each jury against the bar with the count that
/// passes, then `methods`' accuracies (a method a jury did not score is `-`).
pub fn bar_tables(checks: &[BarCheck], methods: &[String]) -> String {
    let mut t = String::new();
    t.push_str("| jury | examples | judges | recommended | its accuracy | ds | min(mv, avg) | best crowd-kit | best judge | passes |\n");
    t.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    for c in checks {
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} ({}) | {:.2} | {} |",
            c.jury,
            c.n_examples,
            c.n_judges,
            c.recommended,
            c.at(&c.recommended),
            c.at("ds"),
            c.mv_avg(),
            c.at(&c.best_crowd_kit),
            c.best_crowd_kit,
            c.best_judge,
            if c.passes { "yes" } else { "no" }
        );
    }
    let passed = checks.iter().filter(|c| c.passes).count();
    let _ = write!(t, "\n{passed} of {} juries pass.\n\n", checks.len());
    let _ = writeln!(t, "| jury | {} |", methods.join(" | "));
    let _ = writeln!(t, "|---|{}", "---|".repeat(methods.len()));
    for c in checks {
        let cells: Vec<String> =
            methods.iter().map(|k| c.get(k).map_or("-".to_owned(), |a| format!("{a:.2}"))).collect();
        let _ = writeln!(t, "| {} | {} |", c.jury, cells.join(" | "));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(recommended: &str, accuracy: &[(&str, f64)]) -> Metrics {
        let methods: Vec<String> =
            accuracy.iter().map(|(k, a)| format!(r#""{k}": {{"accuracy": {a}, "brier": null, "ece": null, "seconds": 0.1, "ties": 0, "unjudged": 0}}"#)).collect();
        let json = format!(
            r#"{{"n_examples": 10, "n_judges": 3, "n_classes": 2, "n_labeled": 10, "recommended_method": "{recommended}",
                "judges": {{"a": {{"accuracy": 0.7, "coverage": 1}}, "b": {{"accuracy": 0.75, "coverage": 1}}}}, "methods": {{{}}}}}"#,
            methods.join(", ")
        );
        serde_json::from_str(&json).unwrap()
    }

    fn all(over: &[(&'static str, f64)]) -> Vec<(&'static str, f64)> {
        let mut acc: Vec<(&str, f64)> = CROWD_KIT.iter().map(|k| (*k, 0.70)).chain([("avg", 0.70)]).collect();
        for (k, a) in over {
            match acc.iter_mut().find(|(name, _)| name == k) {
                Some(slot) => slot.1 = *a,
                None => acc.push((k, *a)),
            }
        }
        acc
    }

    #[test]
    fn the_bar_is_ds_the_lower_of_mv_and_avg_and_half_a_point_below_the_best_crowd_kit_method() {
        // 0.4 points below the best crowd-kit method (glad), above ds and mv/avg: passes.
        let m = metrics("care", &all(&[("glad", 0.74), ("care", 0.7360)]));
        let c = BarCheck::new("j", &m).unwrap();
        assert_eq!((c.best_crowd_kit.as_str(), c.passes), ("glad", true));
        assert!((c.best_judge - 75.0).abs() < 1e-9);
        // 0.6 points below it: fails.
        assert!(!BarCheck::new("j", &metrics("care", &all(&[("glad", 0.74), ("care", 0.7340)]))).unwrap().passes);
        // Below Dawid-Skene: fails, however close to the best.
        assert!(!BarCheck::new("j", &metrics("care", &all(&[("ds", 0.71), ("care", 0.7099)]))).unwrap().passes);
        // Dawid-Skene recommended on a jury where it is the best: passes.
        assert!(BarCheck::new("j", &metrics("ds", &all(&[("ds", 0.72)]))).unwrap().passes);
        let e = BarCheck::new("j", &metrics("care", &all(&[]))).unwrap_err().to_string();
        assert_eq!(e, "jury `j`: no accuracy for method `care` (run it with --labels)");
    }

    #[test]
    fn the_tables_show_every_jury_and_the_count_that_passes() {
        let pass = BarCheck::new("b", &metrics("ds", &all(&[("ds", 0.72)]))).unwrap();
        let fail = BarCheck::new("a", &metrics("care", &all(&[("ds", 0.71), ("care", 0.70)]))).unwrap();
        let t = bar_tables(&[fail, pass], &["ds".to_owned(), "care".to_owned()]);
        assert!(t.contains("| a | 10 | 3 | care | 70.00 | 71.00 | 70.00 | 71.00 (ds) | 75.00 | no |\n"), "{t}");
        assert!(t.contains("\n1 of 2 juries pass.\n"), "{t}");
        assert!(t.ends_with("| a | 71.00 | 70.00 |\n| b | 72.00 | - |\n"), "{t}");
    }
}
