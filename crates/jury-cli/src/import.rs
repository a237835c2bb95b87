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
    /// skillagg-truthfulqa, the authors' `data/truthfulQA` (BriansIDP/Crowdsourcing); the
    /// others, a checkout of the repository docs/reproduction/real-juries.md names.
    #[arg(long)]
    input: PathBuf,
    /// llmjudge: a checkout of llm4eval/LLMJudge (the test labels).
    #[arg(long)]
    labels: Option<PathBuf>,
    /// triviaqa-judges: which release of the judgements.
    #[arg(long, value_enum, default_value = "V1")]
    version: TriviaVersion,
    /// salt-css: the task.
    #[arg(long, value_enum, default_value = "tempowic")]
    task: SaltTask,
    /// salt-css: the least share of the items a judge answers to be kept.
    #[arg(long, default_value_t = 0.5)]
    min_coverage: f64,
    /// frank: which annotations.
    #[arg(long, value_enum, default_value = "all")]
    split: FrankSplit,
    /// humaneval-ice: the language.
    #[arg(long, value_enum, default_value = "python")]
    lang: HumanevalLang,
    /// wmt20-darr: the language pair.
    #[arg(long, default_value = "km-en")]
    lp: String,
    /// wmt20-darr: seeds each pair's order (which translation is shown first).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// winrate-llmbar: the prompting strategy's folder.
    #[arg(long, default_value = "Vanilla_NoRules")]
    strategy: String,
    /// winrate-llmbar: the Processed/ sets, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "MT-Bench,LLMEval2,FairEval")]
    sets: Vec<String>,
    /// winrate-hanna: the generator compared with every other.
    #[arg(long, default_value = "GPT-2")]
    anchor: String,
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
    /// LLMJudge (TREC DL 2023 passages): the submissions' relevance grades.
    Llmjudge,
    /// TREC DL 2019-2021: LLM relevance qrels against the assessors'.
    TrecdlLlmQrels,
    /// TriviaQA answers: LLM judges against human judgements.
    TriviaqaJudges,
    /// JudgeBench: LLM judges and reward models on GPT-4o's response pairs.
    Judgebench,
    /// FaithBench: hallucination detectors on summaries.
    Faithbench,
    /// FRANK: factuality metrics on summaries.
    Frank,
    /// ICE-Score's HumanEval grades: code metrics against test execution.
    HumanevalIce,
    /// NQ-open (qa-eval): answer-matching metrics and LLM evaluators.
    NqQaEval,
    /// SALT's CSS tasks: zero-shot classifiers.
    SaltCss,
    /// WMT20 DARR: segment-level MT metrics on translation pairs.
    Wmt20Darr,
    /// LLMBar (or a set processed like it): evaluators' verdicts in both orders.
    Llmbar,
    /// PandaLM's test set: GPT-3.5-turbo and PandaLM-7B.
    Pandalm,
    /// The CARE authors' CivilComments raters.
    CareCivilcomments,
    /// PandaLM's test set with three classes (tie, response 1, response 2) and contexts.
    #[value(name = "pandalm-3class")]
    Pandalm3class,
    /// PandaLM's test set as `jury winrate`'s comparisons (comparisons.csv).
    WinratePandalm,
    /// The LLMBar-processed MT-Bench, LLMEval2 and FairEval sets as comparisons.
    WinrateLlmbar,
    /// HANNA's stories, one generator against each other, as comparisons.
    WinrateHanna,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum TriviaVersion {
    /// TriviaQA_Judges_w_HumanJudgement_V1.csv.
    #[value(name = "V1")]
    V1,
    /// TriviaQA_Judges_w_HumanJudgement_V2.csv.
    #[value(name = "V2")]
    V2,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum SaltTask {
    /// Whether a word means the same in two tweets.
    Tempowic,
    /// Whether a joke is funny.
    #[value(name = "reddit_humor")]
    RedditHumor,
    /// Whether a conversation derails.
    #[value(name = "conv_go_awry")]
    ConvGoAwry,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum FrankSplit {
    /// Every annotated summary.
    All,
    /// The validation split.
    Valid,
    /// The test split.
    Test,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum HumanevalLang {
    /// Python.
    Python,
    /// C++.
    Cpp,
    /// Java.
    Java,
    /// JavaScript.
    Js,
    /// All four.
    All,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Contexts {
    /// The authors' prompt-shaped text ("Query: ...").
    Paper,
    /// The example's fields, shortest first, joined by ` || `.
    Fields,
}

pub(crate) fn run(args: Args) -> Result<()> {
    anyhow::ensure!(
        args.dialogues.is_none() || matches!(args.source, Source::SkillaggHalueval),
        "--dialogues is for skillagg-halueval"
    );
    anyhow::ensure!(
        args.labels.is_some() == matches!(args.source, Source::Llmjudge),
        "--labels (a checkout of llm4eval/LLMJudge) is for llmjudge, which needs it"
    );
    anyhow::ensure!((0.0..=1.0).contains(&args.min_coverage), "--min-coverage must be in [0, 1]");
    let input = args.input.as_path();
    let jury = |read: Result<ReleasedJury, jury_datasets::DatasetError>| read.map(Imported::Jury);
    let imported = match args.source {
        Source::SkillaggHalueval => jury(jury_datasets::skillagg_halueval(input, args.dialogues.as_deref())),
        Source::SkillaggTruthfulqa => jury(jury_datasets::skillagg_truthfulqa(input)),
        Source::Llmjudge => jury(jury_datasets::llmjudge(input, args.labels.as_deref().unwrap_or(input))),
        Source::TrecdlLlmQrels => jury(jury_datasets::trecdl_llm_qrels(input)),
        Source::TriviaqaJudges => jury(jury_datasets::triviaqa_judges(input, &value_name(args.version))),
        Source::Judgebench => jury(jury_datasets::judgebench(input)),
        Source::Faithbench => jury(jury_datasets::faithbench(input)),
        Source::Frank => jury(jury_datasets::frank(input, &value_name(args.split))),
        Source::HumanevalIce => jury(jury_datasets::humaneval_ice(input, &value_name(args.lang))),
        Source::NqQaEval => jury(jury_datasets::nq_qa_eval(input)),
        Source::SaltCss => jury(jury_datasets::salt_css(input, &value_name(args.task), args.min_coverage)),
        Source::Wmt20Darr => jury(jury_datasets::wmt20_darr(input, &args.lp, args.seed)),
        Source::Llmbar => jury(jury_datasets::llmbar_jury(input)),
        Source::Pandalm => jury(jury_datasets::pandalm(input)),
        Source::CareCivilcomments => jury(jury_datasets::care_civilcomments(input)),
        Source::Pandalm3class => jury_datasets::pandalm_three_class(input).map(Imported::Classes),
        Source::WinratePandalm => jury_datasets::winrate_pandalm(input).map(Imported::Comparisons),
        Source::WinrateLlmbar => {
            jury_datasets::winrate_llmbar(input, &args.strategy, &args.sets).map(Imported::Comparisons)
        }
        Source::WinrateHanna => jury_datasets::winrate_hanna(input, &args.anchor).map(Imported::Comparisons),
    }
    .with_context(|| format!("reading {}", input.display()))?;
    match imported {
        Imported::Jury(jury) => write_jury(&args, &jury),
        Imported::Classes(jury) => write_class_jury(&args, &jury),
        Imported::Comparisons(comparisons) => write_comparisons(&args, &comparisons),
    }
}

/// What a source reads as, each written its own way.
enum Imported {
    Jury(ReleasedJury),
    Classes(jury_datasets::ClassJury),
    Comparisons(Vec<jury_core::Comparison>),
}

/// A released jury: judgments.csv, labels.csv and, where the source has the examples,
/// contexts.csv.
fn write_jury(args: &Args, jury: &ReleasedJury) -> Result<()> {
    for note in &jury.notes {
        eprintln!("{note}");
    }
    let style = match args.context_style {
        Contexts::Paper => ContextStyle::Paper,
        Contexts::Fields => ContextStyle::Fields,
    };
    let ReleasedJury { judgments, p_values, labels, examples, .. } = &jury;
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

/// A one-hot class jury: judgments.csv (probs), labels.csv, contexts.csv.
fn write_class_jury(args: &Args, jury: &jury_datasets::ClassJury) -> Result<()> {
    let owner = Owner { command: "import".into(), source: args.input.display().to_string() };
    let names = [layout::JUDGMENTS, layout::LABELS, layout::CONTEXTS];
    let out = OutputDir::open(&args.out, owner, &names, args.force)?;
    let rows = jury.judgments.iter().map(|(e, j, c)| (e.as_str(), j.as_str(), *c));
    write_atomic(&out.staged(layout::JUDGMENTS), jury_io::one_hot_judgments_csv(jury.n_classes, rows).as_bytes())?;
    let labels = jury_io::labels_csv(jury.labels.iter().map(|(e, l)| (e.as_str(), *l)));
    write_atomic(&out.staged(layout::LABELS), labels.as_bytes())?;
    let texts = jury_io::texts_csv(jury.contexts.iter().map(|(e, t)| (e.as_str(), t.as_str())));
    write_atomic(&out.staged(layout::CONTEXTS), texts.as_bytes())?;
    out.publish()?;
    println!("wrote {} examples to {}", jury.labels.len(), args.out.display());
    Ok(())
}

/// comparisons.csv for `jury winrate`.
fn write_comparisons(args: &Args, comparisons: &[jury_core::Comparison]) -> Result<()> {
    let owner = Owner { command: "import".into(), source: args.input.display().to_string() };
    let out = OutputDir::open(&args.out, owner, &[layout::COMPARISONS], args.force)?;
    write_atomic(&out.staged(layout::COMPARISONS), jury_io::comparisons_csv(comparisons).as_bytes())?;
    out.publish()?;
    println!("wrote {} comparisons to {}", comparisons.len(), args.out.join(layout::COMPARISONS).display());
    Ok(())
}

/// A value enum's name as the command line spells it (the readers take the same words).
fn value_name(v: impl clap::ValueEnum) -> String {
    v.to_possible_value().map(|p| p.get_name().to_owned()).unwrap_or_default()
}
