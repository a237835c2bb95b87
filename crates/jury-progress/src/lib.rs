//! Progress of long runs in one style: a bar on a terminal, and plain lines when stderr
//! is a log file, so an overnight judging or fine-tuning run under `nohup` still says
//! how far it is, how fast, and when it will end.
//!
//! Invariant: items found already done (a resumed run) move the count but never the
//! rate, so a resumed run's ETA is not flattered by work an earlier process did.

use std::sync::Mutex;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

/// Every bar's style: `template` in indicatif's syntax (a bad template falls back to the
/// plain bar instead of failing a run).
pub fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar())
}

/// One count shown two ways: a bar on a terminal, plain [`LogProgress`] lines in a log.
pub struct Progress {
    bar: ProgressBar,
    log: LogProgress,
}

impl Progress {
    /// `template` draws the bar; `label` starts each log line.
    pub fn new(label: impl Into<String>, total: u64, template: &str) -> Self {
        Self { bar: ProgressBar::new(total).with_style(style(template)), log: LogProgress::new(label, total) }
    }

    /// `n` more items done by this process.
    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
        self.log.inc(n);
    }

    /// `n` items found already done (resume): they move the count, not the rate.
    pub fn skip(&self, n: u64) {
        self.bar.inc(n);
        self.bar.reset_eta();
        self.log.skip(n);
    }

    /// Leaves the finished bar on the terminal.
    pub fn finish(&self) {
        self.bar.finish();
    }

    /// Removes the bar from the terminal.
    pub fn finish_and_clear(&self) {
        self.bar.finish_and_clear();
    }
}

/// Progress for logs: when stderr is not a terminal (a run under `nohup`, CI), indicatif
/// draws nothing, so one plain line is printed at every 10% and at least once a minute.
pub struct LogProgress {
    label: String,
    total: u64,
    start: Instant,
    state: Mutex<LogState>,
    enabled: bool,
}

/// Counts behind a [`LogProgress`] line.
struct LogState {
    done: u64,
    /// Part of `done` found finished (a resumed run): not work of this process, so
    /// left out of the rate.
    skipped: u64,
    last_decile: u64,
    last_time: Instant,
}

impl LogProgress {
    pub fn new(label: impl Into<String>, total: u64) -> Self {
        use std::io::IsTerminal;
        let now = Instant::now();
        Self {
            label: label.into(),
            total,
            start: now,
            state: Mutex::new(LogState { done: 0, skipped: 0, last_decile: 0, last_time: now }),
            enabled: !std::io::stderr().is_terminal(),
        }
    }

    /// `n` more items done by this process.
    pub fn inc(&self, n: u64) {
        self.advance(n, 0);
    }

    /// `n` items found already done (resume): they move the count, not the rate.
    pub fn skip(&self, n: u64) {
        self.advance(n, n);
    }

    fn advance(&self, n: u64, skipped: u64) {
        if !self.enabled {
            return;
        }
        let Ok(mut st) = self.state.lock() else { return };
        st.done += n;
        st.skipped += skipped;
        if let Some(line) = self.line(&mut st, self.start.elapsed().as_secs_f64()) {
            eprintln!("{line}");
        }
    }

    /// The line to print now, if one is due (every 10%, each minute, at the end).
    fn line(&self, st: &mut LogState, secs: f64) -> Option<String> {
        let decile = st.done * 10 / self.total.max(1);
        if !(decile > st.last_decile || st.last_time.elapsed().as_secs() >= 60 || st.done == self.total) {
            return None;
        }
        st.last_decile = decile;
        st.last_time = Instant::now();
        let (done, total) = (st.done, self.total);
        let worked = done - st.skipped;
        let resumed = if st.skipped > 0 { format!(", {} found done", st.skipped) } else { String::new() };
        if worked == 0 {
            return Some(format!("{}: {done}/{total} ({secs:.0} s elapsed{resumed})", self.label));
        }
        let rate = worked as f64 / secs.max(1e-9);
        let eta = (total - done.min(total)) as f64 / rate.max(1e-9);
        Some(format!("{}: {done}/{total} ({rate:.2}/s, {secs:.0} s elapsed, ETA {eta:.0} s{resumed})", self.label))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Items found done on resume move the count but not the rate: 50 skipped and 10
    /// worked in 10 s is 1 item/s, so the other 40 take 40 s.
    #[test]
    fn resumed_items_stay_out_of_the_rate() {
        let log = LogProgress::new("x", 100);
        let mut st = LogState { done: 60, skipped: 50, last_decile: 0, last_time: Instant::now() };
        assert_eq!(log.line(&mut st, 10.0).unwrap(), "x: 60/100 (1.00/s, 10 s elapsed, ETA 40 s, 50 found done)");
        assert!(log.line(&mut st, 11.0).is_none(), "no new decile, under a minute");
        let mut fresh = LogState { done: 50, skipped: 50, last_decile: 0, last_time: Instant::now() };
        assert_eq!(log.line(&mut fresh, 1.0).unwrap(), "x: 50/100 (1 s elapsed, 50 found done)");
    }
}
