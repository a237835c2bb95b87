//! `jury label-plan`: which examples to label for calibration. The plan is
//! jury-study's (the judges' mean probability's uncertainty, jury-calibrate's draw), the
//! planned examples' text jury-runner's (read from a run's data set); this
//! module reads the judgments and writes the plan.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use jury_io::{PlanRow, read_judgments, write_atomic};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Judgments table (binary), as for `jury aggregate`.
    #[arg(long)]
    judgments: PathBuf,
    /// How many examples to label.
    #[arg(long)]
    budget: usize,
    /// Seeds the draw; the same seed plans the same examples.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The plan to write: example_id, inclusion_probability, plan_size and planned_from
    /// (how many examples it was drawn from), then, where the judgments are a run's
    /// (`jury run`'s folder), the fields its judges read from the data set; add a `label`
    /// column and pass it to `jury aggregate --calibration`.
    #[arg(long)]
    out: PathBuf,
    /// Labels already had (a plan labeled in whole or in part, or any `example_id,label`
    /// file, however its examples were chosen: the disputed ones, the failures a team
    /// found): the plan keeps every labeled row, with its label at inclusion probability
    /// 1, and adds --budget examples among the others. The rate is then theirs counted
    /// as they are plus the others' estimate, unbiased whatever chose them.
    #[arg(long, value_name = "FILE")]
    labeled: Option<PathBuf>,
    /// Replace an existing plan file.
    #[arg(long)]
    force: bool,
}

pub(crate) fn run(args: Args) -> Result<()> {
    if args.out.exists() && !args.force {
        anyhow::bail!("{} exists: pass --force to replace it", args.out.display());
    }
    let judgments = read_judgments(&args.judgments)?;
    let had = args.labeled.as_deref().map(|p| jury_io::read_labeled(p, &judgments)).transpose()?;
    let context = || format!("planning {} labels for {}", args.budget, args.judgments.display());
    let plan = match &had {
        None => jury_study::label_plan(&judgments, args.budget, args.seed).with_context(context)?,
        Some(h) => jury_study::label_plan_more(&judgments, &h.index, args.budget, args.seed).with_context(context)?,
    };
    let label_of: HashMap<&str, u8> = had
        .iter()
        .flat_map(|h| h.index.iter().zip(&h.labels).map(|(&i, &l)| (judgments.example_ids()[i].as_str(), l)))
        .collect();
    let ids: Vec<String> = plan.iter().map(|(id, _)| id.clone()).collect();
    let text = run_text(&args.judgments, &ids);
    let rows: Vec<PlanRow<'_>> = plan
        .iter()
        .zip(&text.rows)
        .map(|((id, p), t)| PlanRow {
            example_id: id,
            inclusion_probability: *p,
            label: label_of.get(id.as_str()).copied(),
            text: t.iter().map(String::as_str).collect(),
        })
        .collect();
    let columns: Vec<&str> = text.columns.iter().map(String::as_str).collect();
    write_atomic(&args.out, jury_io::label_plan_csv(judgments.n_examples(), &columns, &rows).as_bytes())?;
    for note in &text.notes {
        eprintln!("note: {note}");
    }
    let (what, todo) = match &args.labeled {
        None => (
            format!("{} examples of {} to label", plan.len(), judgments.n_examples()),
            format!("add a label column{}, label every row", text.words),
        ),
        Some(path) => (
            format!(
                "{} examples of {}: the {} labeled in {}, kept with their labels at inclusion probability 1, and {} \
                 more to label",
                plan.len(),
                judgments.n_examples(),
                label_of.len(),
                path.display(),
                args.budget
            ),
            format!("label every empty cell of its label column{}", text.words),
        ),
    };
    println!(
        "wrote {what} to {}{} ({todo}, then pass it to jury aggregate --calibration {}, or to a run as \
         `calibration: {{labels: {}}}`)",
        args.out.display(),
        text.said,
        args.out.display(),
        args.out.display()
    );
    Ok(())
}

/// The planned examples' text for the plan's columns, and what to say of it.
#[derive(Default)]
struct Text {
    columns: Vec<String>,
    /// One row per planned example, empty cells where it has none.
    rows: Vec<Vec<String>>,
    /// Where the text came from, for the closing line (empty: no text).
    said: String,
    /// What each label means, in the run's prompt's words (empty: not known).
    words: String,
    notes: Vec<String>,
}

/// The text of a run's planned examples where `judgments` sits in a run's folder; none
/// otherwise, and a note where a run's text could not be read (the plan is written all
/// the same: the ids are what the labels key on).
#[cfg(feature = "judges")]
fn run_text(judgments: &Path, ids: &[String]) -> Text {
    let dir = judgments.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let blank = Text { rows: vec![vec![]; ids.len()], ..Text::default() };
    match jury_runner::plan_text(dir, ids) {
        Ok(None) => blank,
        Err(e) => Text { notes: vec![format!("the plan holds the example ids only, not their text: {e}")], ..blank },
        Ok(Some(t)) => {
            let missing = t.rows.iter().filter(|r| r.is_none()).count();
            let mut notes = Vec::new();
            if missing > 0 {
                notes.push(format!(
                    "{missing} of the {} planned examples are not among the examples of the run's data set {} \
                     (the judgments are not all this run's): their text is empty",
                    ids.len(),
                    t.dataset.display()
                ));
            }
            Text {
                said: format!(
                    ", each with the fields its judges read ({}) from {}",
                    t.columns.join(", "),
                    t.dataset.display()
                ),
                words: format!(", 1 for `{}` and 0 for `{}` as {} asks", t.positive, t.negative, t.prompt.display()),
                rows: t.rows.into_iter().map(Option::unwrap_or_default).collect(),
                columns: t.columns,
                notes,
            }
        }
    }
}

/// Without judges there are no runs: the plan holds the ids.
#[cfg(not(feature = "judges"))]
fn run_text(_: &Path, ids: &[String]) -> Text {
    Text { rows: vec![vec![]; ids.len()], ..Text::default() }
}
