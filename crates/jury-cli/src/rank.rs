//! `jury rank` (rank models from their responses, no reference needed; scored against a
//! reference when one is in the file) and `jury rank-sim` (the triplet-ranking paper's
//! multiple-choice simulation): reads, calls jury-rank, prints and writes the JSON.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use jury_io::read_responses;
use jury_rank::{
    EvalSpec, RankMethod, RankReport, Ranking, Responses, SimOptions, SimStudy, score_against_reference, simulate_study,
};

#[cfg(feature = "judges")]
use jury_runner::{LlmEvalConfig, LlmEvaluation};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Responses table: prompt_id, model, response (.csv, .jsonl, .json or .parquet).
    #[arg(long)]
    responses: PathBuf,
    /// The ranking method.
    #[arg(long, value_enum, default_value = "ftr")]
    method: RankMethod,
    /// Evaluation function: rouge2, equal, noisy-equal:P, or llm:MODEL.gguf (a local LLM
    /// judges which of two answers agrees better with the judge model's; needs a
    /// `prompt` column with each prompt's text).
    #[arg(long, default_value = "equal")]
    eval: EvalSpec,
    /// Prompt template of the LLM evaluation.
    #[arg(long, default_value = "prompts/triplet-reference.yaml")]
    prompt: PathBuf,
    /// LLM evaluation: judge each pair in both orders and average (position bias).
    #[arg(long)]
    both_orders: bool,
    /// LLM evaluation: prompts longer than this many tokens are truncated.
    #[arg(long, default_value_t = jury_core::DEFAULT_MAX_PROMPT_TOKENS)]
    max_prompt_tokens: usize,
    /// LLM evaluation: a Hugging Face tokenizer directory to use instead of the one
    /// mistral.rs builds from the GGUF (as a `jury run` judge's `tokenizer:`).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// LLM evaluation: keep the GGUF's quantized weights (by default they are made dense
    /// at load, as `jury run` does: 10-15x faster prompts on a CPU, more memory).
    #[arg(long)]
    keep_quantized: bool,
    /// Model name of reference answers in the file, if any: never ranked, used only to
    /// build the reference ranking (models by mean similarity to it) for scoring.
    #[arg(long, default_value = "reference")]
    reference: String,
    /// k of MAP@k against the reference ranking.
    #[arg(long, default_value_t = 5)]
    k: usize,
    /// Seed of GTR's coin and of noisy equality.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output directory for ranking.json.
    #[arg(long)]
    out: PathBuf,
}

/// Prepares the process environment for `args`. Called before any thread starts:
/// candle reads `CANDLE_DEQUANTIZE_ALL` once per thread.
pub(crate) fn prepare(args: Args) -> Result<Args> {
    let llm = matches!(args.eval, EvalSpec::Llm(_));
    if llm && !args.keep_quantized && std::env::var_os("CANDLE_DEQUANTIZE_ALL").is_none() {
        // SAFETY: called from `main` before the async runtime or any other thread exists.
        unsafe { std::env::set_var("CANDLE_DEQUANTIZE_ALL", "1") };
    }
    if let Some(dir) = &args.tokenizer
        && !dir.join("tokenizer.json").is_file()
    {
        bail!("--tokenizer: {} has no tokenizer.json", dir.display());
    }
    if llm && args.method == RankMethod::Mca {
        bail!(
            "--method mca needs a similarity to a consensus answer; an LLM judge only compares pairs (use gtr or ftr)"
        );
    }
    Ok(args)
}

pub(crate) fn run(args: Args) -> Result<()> {
    let table = read_responses(&args.responses)?;
    let (mut models, mut cells) = (table.models, table.cells);
    let reference = models.iter().position(|m| *m == args.reference).map(|i| {
        models.remove(i);
        cells.remove(i)
    });
    let responses = Responses::new(models, cells).with_context(|| args.responses.display().to_string())?;
    let ranking = match args.eval.build(&responses, args.seed)? {
        Some(mut eval) => args.method.rank(&responses, eval.as_mut(), args.seed),
        None => rank_with_llm(&args, &responses, table.prompt_texts)?,
    };
    let reference = reference
        .map(|refs| score_against_reference(&responses, &ranking, &args.reference, refs, &args.eval, args.k, args.seed))
        .transpose()?;
    let report = RankReport::new(args.method, &args.eval, &responses, &ranking, reference);
    println!("{:>4}  {:<32} {:>8}", "rank", "model", "score");
    for r in &report.ranking {
        println!("{:>4}  {:<32} {:>8}", r.rank, r.model, r.score.map_or("-".to_owned(), |s| format!("{s:.4}")));
    }
    println!("{} judge comparisons ({} prompts each)", report.evaluations, report.n_prompts);
    if let Some(r) = &report.reference {
        let f = |x: Option<f64>| x.map_or("-".to_owned(), |x| format!("{x:.3}"));
        match &r.undetermined {
            Some(why) => println!("no agreement with the reference: {why}"),
            None => println!(
                "against `{}`: RBO(p=0.95) {}  MAP@{} {}  Spearman {}",
                r.name,
                f(r.rbo),
                r.k,
                f(r.map_at_k),
                f(r.spearman)
            ),
        }
    }
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let path = args.out.join(jury_io::layout::RANKING);
    jury_io::write_json(&path, &report)?;
    jury_report::write_page(&args.out, &jury_report::render_ranking(&args.out)?)?;
    println!("wrote {} and {}", path.display(), args.out.join(jury_report::REPORT_FILE).display());
    Ok(())
}

/// Ranks with a local LLM judge comparing pairs of answers (`--eval llm:MODEL.gguf`).
#[cfg(feature = "judges")]
fn rank_with_llm(args: &Args, responses: &Responses, texts: Option<Vec<String>>) -> Result<Ranking> {
    let EvalSpec::Llm(gguf) = &args.eval else { bail!("internal: not an LLM evaluation") };
    let Some(texts) = texts else {
        bail!(
            "--eval llm: {} has no `prompt` column (the LLM judge needs each prompt's text)",
            args.responses.display()
        );
    };
    let cfg = LlmEvalConfig {
        gguf,
        template: &args.prompt,
        both_orders: args.both_orders,
        cache: &args.out.join(jury_io::layout::CACHE),
        max_prompt_tokens: args.max_prompt_tokens,
        tokenizer: args.tokenizer.as_deref(),
    };
    let cells = (0..responses.n_models())
        .map(|m| (0..responses.n_prompts()).map(|d| responses.get(m, d).map(str::to_owned)).collect())
        .collect();
    let mut eval = LlmEvaluation::new(&cfg, texts, cells).context("--eval llm")?;
    let ranking = args.method.rank(responses, &mut eval, args.seed);
    eval.finish().context("LLM evaluation")?;
    Ok(ranking)
}

#[cfg(not(feature = "judges"))]
fn rank_with_llm(_: &Args, _: &Responses, _: Option<Vec<String>>) -> Result<Ranking> {
    Err(crate::without_judges("--eval llm:"))
}

#[derive(clap::Args)]
pub(crate) struct SimArgs {
    #[command(flatten)]
    options: SimOptions,
    /// Optional directory for rank-sim.json.
    #[arg(long)]
    out: Option<PathBuf>,
}

pub(crate) fn run_sim(args: SimArgs) -> Result<()> {
    let study = simulate_study(&args.options)?;
    print!("{}", sim_table(&study));
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        jury_io::write_json(&dir.join(jury_io::layout::RANK_SIM), &study)?;
    }
    Ok(())
}

/// The study as the triplet-ranking paper's Table 2: RBO and MAP@5 per method, mean ±
/// std, beside that paper's RBO where it has the setting.
fn sim_table(study: &SimStudy) -> String {
    let o = &study.options;
    let list = |v: &[String]| v.join(",");
    let mut out = String::new();
    let _ = writeln!(
        out,
        "models {}, questions {}, options {} (every combination pooled), accuracies evenly from best to {}, {} trials each; RBO (p = 0.95) and MAP@5, mean ± std",
        list(&o.models.iter().map(ToString::to_string).collect::<Vec<_>>()),
        list(&o.questions.iter().map(ToString::to_string).collect::<Vec<_>>()),
        list(&o.options.iter().map(ToString::to_string).collect::<Vec<_>>()),
        o.worst,
        o.trials
    );
    let _ = writeln!(
        out,
        "{:>5} {:>5} | {:>13} {:>13} {:>13} | {:>13} {:>13} {:>13} | paper RBO MCA / FTR / GTR",
        "best", "noise", "RBO MCA", "RBO FTR", "RBO GTR", "MAP5 MCA", "MAP5 FTR", "MAP5 GTR"
    );
    let cell = |s: jury_rank::MeanStd| format!("{:.3} ± {:.3}", s.mean, s.std);
    for r in &study.rows {
        let paper = r
            .paper_rbo
            .map_or(String::new(), |v| v.iter().map(|(m, s)| format!("{m:.3}±{s:.2}")).collect::<Vec<_>>().join(" / "));
        let _ = writeln!(
            out,
            "{:>5.2} {:>5.2} | {:>13} {:>13} {:>13} | {:>13} {:>13} {:>13} | {paper}",
            r.best,
            r.noise,
            cell(r.rbo.mca),
            cell(r.rbo.ftr),
            cell(r.rbo.gtr),
            cell(r.map_at_5.mca),
            cell(r.map_at_5.ftr),
            cell(r.map_at_5.gtr)
        );
    }
    out
}
