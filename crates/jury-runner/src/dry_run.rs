//! `jury run --dry-run`: what a run of an experiment would ask for, found without
//! judging anything or writing anything: the examples after `limit` and `both_orders`,
//! the judge calls (a range for an adaptive run), each judge's prompt lengths counted
//! with its tokenizer where one is on this machine, every model and tokenizer that is
//! not, and a wall-time estimate where rates are known.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use jury_judge::Template;

use crate::experiment::{Experiment, ExperimentError, JudgeEntry};
use crate::judging::RunError;
use crate::stages::sample_examples;
use jury_io::RunOutput;

/// Prompt lengths in tokens over every judged example.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenStats {
    pub tokenizer: PathBuf,
    pub min: usize,
    pub median: usize,
    pub max: usize,
    /// Prompts longer than `max_prompt_tokens`: their longest field would be cut.
    pub truncated: usize,
    /// All prompt tokens: what the run prefills.
    pub total: u64,
}

/// Where a judge's rate comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum RateSource {
    /// `rate:` in the experiment.
    Config,
    /// The manifest.json of an earlier run in the output folder.
    EarlierRun,
}

/// One judge's share of the run.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgePlan {
    pub name: String,
    pub server: bool,
    /// Judge calls: the judged examples, or (adaptive) the least and the most.
    pub calls: (usize, usize),
    /// `None` without a tokenizer folder on this machine.
    pub tokens: Option<TokenStats>,
    /// Judgments per second.
    pub rate: Option<(f64, RateSource)>,
}

/// The run's `calibration: {labels: FILE}`, as the dry run read it.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrationPlan {
    pub path: PathBuf,
    /// `None` when the data set is not on this machine to read them against.
    pub read: Option<CalibrationRead>,
}

/// Calibration labels read against the run's examples.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrationRead {
    pub labels: usize,
    /// Labels of class 1.
    pub positive: usize,
    /// The run's prompt's word for class 1 (`positive:`, e.g. "Yes", or "A" on a pairwise prompt).
    pub positive_word: String,
    /// Whether they carry a label plan's inclusion probabilities.
    pub planned: bool,
}

/// What `jury run --dry-run` reports.
#[derive(Debug, Clone)]
pub struct DryRun {
    pub config: PathBuf,
    pub dataset: String,
    /// Examples drawn from the data set, and those judged (both orders: twice as many).
    pub examples: usize,
    pub judged: usize,
    pub judges: Vec<JudgePlan>,
    /// What the run needs on this machine and does not find.
    pub absent: Vec<String>,
    pub calibration: Option<CalibrationPlan>,
    /// Seconds, least and most, when every judge has a rate: server judges work at the
    /// same time, in-process judges one after another.
    pub wall_seconds: Option<(f64, f64)>,
}

impl DryRun {
    /// Judge calls in total: the least and the most.
    pub fn calls(&self) -> (usize, usize) {
        self.judges.iter().fold((0, 0), |(a, b), j| (a + j.calls.0, b + j.calls.1))
    }
}

/// The dry run of the experiment in `config` (`force`: `jury run --force`'s). Fails only
/// on what makes the config unusable (the errors `jury run` would stop on, other than
/// absent models), the output folder included.
pub fn dry_run<A: serde::de::DeserializeOwned + Default>(config: &Path, force: bool) -> Result<DryRun, RunError> {
    let exp: Experiment<A> = Experiment::read_unchecked(config)?;
    exp.check_all_but_presence(config)?;
    // The output folder as the run will take it (not a file, writable, not in use, not
    // another's), read only.
    RunOutput::check(&exp.output, &exp.name, exp.overwrite || force)?;
    let mut absent: Vec<String> = exp.absent(config).iter().map(ExperimentError::to_string).collect();
    for j in &exp.judges {
        if j.model_present() == Some(false) && j.gguf.is_none() {
            absent.push(format!(
                "{}: judge `{}`: model `{}` is not in the local hub cache (`jury run` downloads it)",
                config.display(),
                j.name,
                j.model_id.as_deref().unwrap_or_default()
            ));
        }
    }
    let template = Template::load(&exp.prompt)?;
    let templates: Vec<Template> = exp
        .judges
        .iter()
        .map(|j| j.prompt.as_deref().map_or_else(|| Ok(template.clone()), Template::load))
        .collect::<Result<_, _>>()?;
    // Nothing is downloaded: a data set not on this machine is listed with the models.
    let (examples, judged, calibration_read) = match jury_datasets::resolve_local(&exp.dataset.path)? {
        None => {
            absent.push(format!(
                "{}: dataset: {} is not on this machine{}",
                config.display(),
                exp.dataset.path.display(),
                if jury_datasets::HubAddress::parse(&exp.dataset.path).is_some() {
                    " (`jury run` downloads it into the hub cache)"
                } else {
                    ""
                }
            ));
            (0, Vec::new(), None)
        }
        Some(_) => {
            let ex = sample_examples(&exp.dataset)?;
            let read = crate::stages::check_calibration(&exp, &ex.original)?.map(|c| CalibrationRead {
                labels: c.labels.len(),
                positive: c.labels.iter().filter(|&&l| l == 1).count(),
                positive_word: template.positive.clone(),
                planned: c.inclusion.is_some(),
            });
            (ex.original.len(), ex.judged.to_vec(), read)
        }
    };
    let calibration =
        exp.calibration.as_ref().map(|c| CalibrationPlan { path: c.labels.clone(), read: calibration_read });
    if let Some(first) = judged.first() {
        for (j, t) in exp.judges.iter().zip(&templates) {
            t.check_fields(&first.fields).map_err(|reason| RunError::Setup { judge: j.name.clone(), reason })?;
        }
    }
    let fields: Vec<&BTreeMap<String, String>> = judged.iter().map(|e| &e.fields).collect();
    let mut counted: HashMap<(PathBuf, String), Vec<usize>> = HashMap::new();
    let earlier = earlier_rates(&exp.output);
    let mut judges = Vec::new();
    for (j, t) in exp.judges.iter().zip(&templates) {
        let tokens = match j.rendering_tokenizer().filter(|_| !fields.is_empty()) {
            Some(dir) => {
                let key = (dir.clone(), t.source_text.clone());
                if !counted.contains_key(&key) {
                    let lengths = jury_judge::prompt_lengths(&dir, t, &fields)
                        .map_err(|e| RunError::Setup { judge: j.name.clone(), reason: e.to_string() })?;
                    counted.insert(key.clone(), lengths);
                }
                counted.get(&key).map(|l| stats(dir, l, exp.runtime.max_prompt_tokens))
            }
            None => None,
        };
        let rate = match (j.rate, earlier.get(&j.name)) {
            (Some(r), _) => Some((r, RateSource::Config)),
            (None, Some(&r)) => Some((r, RateSource::EarlierRun)),
            (None, None) => None,
        };
        judges.push(JudgePlan {
            name: j.name.clone(),
            server: j.server.is_some(),
            calls: (judged.len(), judged.len()),
            tokens,
            rate,
        });
    }
    if let Some(a) = &exp.adaptive {
        // The warm-up asks every judge; every other example asks at least
        // `min_judges` of the order (the first ones) and at most all of it.
        let k = judges.len();
        let n_warm = jury_aggregate::warmup_examples(examples, k, a.warmup);
        let first = adaptive_first_judges(&exp.judges, a.order.as_deref(), a.min_judges.min(k));
        for (i, j) in judges.iter_mut().enumerate() {
            let least = n_warm + if first.contains(&i) { examples - n_warm } else { 0 };
            j.calls = (least, examples);
        }
    }
    let wall_seconds = wall(&judges);
    Ok(DryRun {
        config: config.to_owned(),
        dataset: exp.dataset.name.clone(),
        examples,
        judged: judged.len(),
        judges,
        absent,
        calibration,
        wall_seconds,
    })
}

/// The judges every adaptive example asks before it may stop, when the order is known
/// before the warm-up (given, or by distinct costs); otherwise none is certain.
fn adaptive_first_judges(entries: &[JudgeEntry], order: Option<&[String]>, n: usize) -> Vec<usize> {
    let index = |name: &String| entries.iter().position(|e| &e.name == name);
    if let Some(order) = order {
        return order.iter().take(n).filter_map(index).collect();
    }
    let mut costs: Vec<(f64, usize)> = entries.iter().enumerate().map(|(i, e)| (e.cost.unwrap_or(1.0), i)).collect();
    costs.sort_by(|a, b| a.0.total_cmp(&b.0));
    // The first `n` are certain only if the n-th cost is below the next one.
    match (costs.get(n.wrapping_sub(1)), costs.get(n)) {
        (Some(last), Some(next)) if last.0 < next.0 => costs[..n].iter().map(|&(_, i)| i).collect(),
        (Some(_), None) => costs.iter().map(|&(_, i)| i).collect(),
        _ => Vec::new(),
    }
}

fn stats(tokenizer: PathBuf, lengths: &[usize], budget: usize) -> TokenStats {
    let mut sorted = lengths.to_vec();
    sorted.sort_unstable();
    TokenStats {
        tokenizer,
        min: sorted.first().copied().unwrap_or(0),
        median: sorted.get(sorted.len() / 2).copied().unwrap_or(0),
        max: sorted.last().copied().unwrap_or(0),
        truncated: sorted.iter().filter(|&&n| n > budget).count(),
        total: sorted.iter().map(|&n| n as u64).sum(),
    }
}

/// Server judges at the same time, in-process judges one after another.
fn wall(judges: &[JudgePlan]) -> Option<(f64, f64)> {
    let mut local = (0.0, 0.0);
    let mut server: (f64, f64) = (0.0, 0.0);
    for j in judges {
        let (rate, _) = j.rate.as_ref()?;
        let t = (j.calls.0 as f64 / rate, j.calls.1 as f64 / rate);
        if j.server {
            server = (server.0.max(t.0), server.1.max(t.1));
        } else {
            local = (local.0 + t.0, local.1 + t.1);
        }
    }
    Some((local.0.max(server.0), local.1.max(server.1)))
}

/// Judgments per second of each judge that scored anything in the run whose manifest
/// is in `output` (none when there is none or it cannot be read).
fn earlier_rates(output: &Path) -> HashMap<String, f64> {
    let Ok(m) = jury_io::Manifest::read(&RunOutput::published_manifest(output)) else { return HashMap::new() };
    m.judges
        .into_iter()
        .filter(|j| j.scored > 0 && j.judge_seconds > 0.0)
        .map(|j| (j.name, j.scored as f64 / j.judge_seconds))
        .collect()
}

fn duration(s: f64) -> String {
    let s = s.round() as u64;
    match s {
        0..120 => format!("{s} s"),
        120..7200 => format!("{} min", s.div_ceil(60)),
        _ => format!("{:.1} h", s as f64 / 3600.0),
    }
}

impl fmt::Display for DryRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "dry run of {} (nothing judged, nothing written)", self.config.display())?;
        if self.judged == 0 {
            writeln!(f, "data set {}: not on this machine, not counted", self.dataset)?;
        } else if self.judged != self.examples {
            writeln!(f, "data set {}: {} examples, {} judged (both orders)", self.dataset, self.examples, self.judged)?;
        } else {
            writeln!(f, "data set {}: {} examples", self.dataset, self.examples)?;
        }
        match &self.calibration {
            Some(CalibrationPlan { path, read: Some(r) }) => writeln!(
                f,
                "calibration labels: {} of the {} examples ({} of class 1, the prompt's `{}`{}) from {}: the \
                 calibrated method is fitted on them and recommended, and accuracies are scored outside them",
                r.labels,
                self.examples,
                r.positive,
                r.positive_word,
                if r.planned { "; a label plan's, with inclusion probabilities" } else { "" },
                path.display()
            )?,
            Some(CalibrationPlan { path, read: None }) => {
                writeln!(f, "calibration labels: {} (not read: the data set is not on this machine)", path.display())?
            }
            None => {}
        }
        let (least, most) = self.calls();
        let range = |(a, b): (usize, usize)| if a == b { a.to_string() } else { format!("{a} to {b}") };
        writeln!(f, "judges: {}; judge calls: {}", self.judges.len(), range((least, most)))?;
        writeln!(f)?;
        writeln!(
            f,
            "{:<28} {:<10} {:>16} {:>8} {:>8} {:>8} {:>10}  rate",
            "judge", "where", "calls", "min tok", "median", "max tok", "truncated"
        )?;
        for j in &self.judges {
            let (min, med, max, cut) = match &j.tokens {
                Some(t) => (t.min.to_string(), t.median.to_string(), t.max.to_string(), t.truncated.to_string()),
                None => ("-".into(), "-".into(), "-".into(), "-".into()),
            };
            let rate = match &j.rate {
                Some((r, RateSource::Config)) => format!("{r:.2}/s (config)"),
                Some((r, RateSource::EarlierRun)) => format!("{r:.2}/s (earlier run)"),
                None => "-".into(),
            };
            writeln!(
                f,
                "{:<28} {:<10} {:>16} {min:>8} {med:>8} {max:>8} {cut:>10}  {rate}",
                j.name,
                if j.server { "server" } else { "in process" },
                range(j.calls)
            )?;
        }
        let no_tokens: Vec<&str> = self.judges.iter().filter(|j| j.tokens.is_none()).map(|j| j.name.as_str()).collect();
        if !no_tokens.is_empty() && self.judged > 0 {
            writeln!(f, "no tokenizer folder on this machine to count prompts for: {}", no_tokens.join(", "))?;
        }
        match self.wall_seconds {
            Some((a, b)) if (a - b).abs() < 0.5 => writeln!(f, "estimated wall time: {}", duration(a))?,
            Some((a, b)) => writeln!(f, "estimated wall time: {} to {}", duration(a), duration(b))?,
            None => writeln!(
                f,
                "estimated wall time: unknown (give judges a `rate:` in judgments per second, or run once)"
            )?,
        }
        if self.absent.is_empty() {
            writeln!(f, "every model and tokenizer is on this machine")?;
        } else {
            writeln!(f, "not on this machine ({}):", self.absent.len())?;
            for a in &self.absent {
                writeln!(f, "  {a}")?;
            }
        }
        Ok(())
    }
}
