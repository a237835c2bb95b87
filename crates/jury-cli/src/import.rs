//! `jury import`: judge outputs that others released, written as a jury folder for
//! `jury aggregate` (judgments.csv, labels.csv, contexts.csv). Reading them is
//! jury-datasets'; this module writes the tables and prints.

use std::path::PathBuf;

use anyhow::{Context, Result};
use jury_datasets::{ContextStyle, PValues, ReleasedJury};
use jury_io::{OutputDir, Owner, layout, write_atomic};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Whose outputs.
    #[arg(value_enum)]
    source: Source,
    /// Their folder: skillagg-halueval, the `halueval_dialogue_<judge>.json` files;
    /// skillagg-truthfulqa, the authors' `data/truthfulQA` (BriansIDP/Crowdsourcing).
    #[arg(long)]
    input: PathBuf,
    /// HaluEval's `dialogue_data.json`, for contexts.csv (skillagg-halueval; TruthfulQA's
    /// examples come with the outputs).
    #[arg(long)]
    dialogues: Option<PathBuf>,
    /// How contexts.csv renders each example.
    #[arg(long, value_enum, default_value_t = Contexts::Paper)]
    context_style: Contexts,
    /// Output directory (created if needed).
    #[arg(long)]
    out: PathBuf,
    /// Replace an output directory that holds another command's output or files jury
    /// did not write.
    #[arg(long)]
    force: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Source {
    /// The SkillAggregation authors' HaluEval dialogue judges: P(Yes) as they released it.
    SkillaggHalueval,
    /// The SkillAggregation authors' TruthfulQA judges: P(Yes) from their Yes and No logits.
    SkillaggTruthfulqa,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Contexts {
    /// The authors' prompt-shaped text ("Query: ...").
    Paper,
    /// The example's fields, shortest first, joined by ` || `.
    Fields,
}

pub(crate) fn run(args: Args) -> Result<()> {
    let jury = match args.source {
        Source::SkillaggHalueval => jury_datasets::skillagg_halueval(&args.input, args.dialogues.as_deref()),
        Source::SkillaggTruthfulqa => {
            anyhow::ensure!(args.dialogues.is_none(), "--dialogues is for skillagg-halueval");
            jury_datasets::skillagg_truthfulqa(&args.input)
        }
    }
    .with_context(|| format!("reading {}", args.input.display()))?;
    let style = match args.context_style {
        Contexts::Paper => ContextStyle::Paper,
        Contexts::Fields => ContextStyle::Fields,
    };
    let ReleasedJury { judgments, p_values, labels, examples } = &jury;
    let mut names = vec![layout::JUDGMENTS, layout::LABELS];
    if examples.is_some() {
        names.push(layout::CONTEXTS);
    }
    let owner = Owner { command: "import".into(), source: args.input.display().to_string() };
    let out = OutputDir::open(&args.out, owner, &names, args.force)?;
    let rows = judgments.iter().map(|(e, j, p)| (e.as_str(), j.as_str(), *p));
    let judgments_csv = match p_values {
        PValues::Released => jury_io::judgments_csv_as_given(rows),
        PValues::Computed => jury_io::judgments_csv(rows),
    };
    write_atomic(&out.staged(layout::JUDGMENTS), judgments_csv.as_bytes())?;
    let labels_csv = jury_io::labels_csv(labels.iter().map(|(e, l)| (e.as_str(), *l)));
    write_atomic(&out.staged(layout::LABELS), labels_csv.as_bytes())?;
    if let Some(examples) = examples {
        let texts: Vec<String> = examples.iter().map(|e| style.text(e)).collect();
        let rows = examples.iter().zip(&texts).map(|(e, t)| (e.id.as_str(), t.as_str()));
        write_atomic(&out.staged(layout::CONTEXTS), jury_io::texts_csv(rows).as_bytes())?;
    }
    out.publish()?;
    let judges: std::collections::BTreeSet<&str> = judgments.iter().map(|(_, j, _)| j.as_str()).collect();
    println!(
        "wrote {} judgments ({} judges, {} examples) to {}",
        judgments.len(),
        judges.len(),
        labels.len(),
        args.out.display()
    );
    Ok(())
}
