//! `jury rank` (rank models from their responses, no reference needed; scored against a
//! reference when one is in the file) and `jury rank-sim` (the triplet-ranking paper's
//! multiple-choice simulation, its Table 2 and Figure 4).

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use jury_io::{read_responses, write_atomic};
use jury_metrics::{average_precision_at_k, rank_biased_overlap, spearman};
use jury_rank::{
    Equality, Evaluation, FtrConfig, NoisyEquality, Ranking, Responses, Rouge2, full_triplet_ranking,
    greedy_triplet_ranking, most_common_answer,
};
use jury_sim::{ChoiceConfig, simulate_choice};
use serde_json::json;

#[cfg(feature = "judges")]
use crate::llm_eval::{LlmEvalConfig, LlmEvaluation};

/// Rank-biased overlap persistence used throughout (the paper's p = 0.95).
const RBO_P: f64 = 0.95;

#[derive(clap::Args)]
pub struct Args {
    /// Responses table: prompt_id, model, response (.csv, .jsonl, .json or .parquet).
    #[arg(long)]
    responses: PathBuf,
    /// gtr (greedy triplet), ftr (full triplet) or mca (most common answer).
    #[arg(long, default_value = "ftr")]
    method: String,
    /// Evaluation function: rouge2, equal, noisy-equal:P, or llm:MODEL.gguf (a local LLM
    /// judges which of two answers agrees better with the judge model's; needs a
    /// `prompt` column with each prompt's text).
    #[arg(long, default_value = "equal")]
    eval: String,
    /// Prompt template of the LLM evaluation.
    #[arg(long, default_value = "prompts/triplet-reference.yaml")]
    prompt: PathBuf,
    /// LLM evaluation: judge each pair in both orders and average (position bias).
    #[arg(long)]
    both_orders: bool,
    /// LLM evaluation: prompts longer than this many tokens are truncated.
    #[arg(long, default_value_t = 2048)]
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

#[derive(Debug, Clone, Copy, PartialEq)]
enum Method {
    Gtr,
    Ftr,
    Mca,
}

impl Method {
    fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "gtr" => Method::Gtr,
            "ftr" => Method::Ftr,
            "mca" => Method::Mca,
            other => bail!("--method: unknown method `{other}` (expected gtr, ftr or mca)"),
        })
    }

    fn rank(self, r: &Responses, eval: &mut dyn Evaluation, seed: u64) -> Ranking {
        match self {
            Method::Gtr => greedy_triplet_ranking(r, eval, seed),
            Method::Ftr => full_triplet_ranking(r, eval, &FtrConfig::default()),
            Method::Mca => most_common_answer(r, eval),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum EvalKind {
    Rouge2,
    Equal,
    NoisyEqual(f64),
    Llm(PathBuf),
}

impl EvalKind {
    fn parse(s: &str) -> Result<Self> {
        if let Some(path) = s.strip_prefix("llm:") {
            return Ok(EvalKind::Llm(PathBuf::from(path)));
        }
        if let Some(p) = s.strip_prefix("noisy-equal:") {
            let p: f64 = p.parse().with_context(|| format!("--eval: `{p}` is not a number"))?;
            if !(0.0..=1.0).contains(&p) {
                bail!("--eval: flip probability {p} is not in [0, 1]");
            }
            return Ok(EvalKind::NoisyEqual(p));
        }
        match s {
            "rouge2" => Ok(EvalKind::Rouge2),
            "equal" => Ok(EvalKind::Equal),
            other => {
                bail!("--eval: unknown evaluation `{other}` (expected rouge2, equal, noisy-equal:P or llm:MODEL.gguf)")
            }
        }
    }

    /// The evaluations that need no model.
    fn build(&self, r: &Responses, seed: u64) -> Result<Box<dyn Evaluation>> {
        Ok(match self {
            EvalKind::Rouge2 => Box::new(Rouge2::new(r)),
            EvalKind::Equal => Box::new(Equality::new(r)),
            EvalKind::NoisyEqual(p) => Box::new(NoisyEquality::new(r, *p, seed)?),
            EvalKind::Llm(_) => bail!("internal: the LLM evaluation is built with its model"),
        })
    }

    /// The exact, model-free counterpart used to build a reference ranking (noise is the
    /// method's handicap, not the reference's; against a reference answer an LLM judge's
    /// closest stand-in is exact equality).
    fn exact(&self) -> Self {
        match self {
            EvalKind::NoisyEqual(_) | EvalKind::Llm(_) => EvalKind::Equal,
            other => other.clone(),
        }
    }
}

/// Prepares the process environment for `args`. Called before any thread starts:
/// candle reads `CANDLE_DEQUANTIZE_ALL` once per thread.
pub fn prepare(args: Args) -> Result<Args> {
    let llm = matches!(EvalKind::parse(&args.eval)?, EvalKind::Llm(_));
    if llm && !args.keep_quantized && std::env::var_os("CANDLE_DEQUANTIZE_ALL").is_none() {
        // SAFETY: called from `main` before the async runtime or any other thread exists.
        unsafe { std::env::set_var("CANDLE_DEQUANTIZE_ALL", "1") };
    }
    if let Some(dir) = &args.tokenizer
        && !dir.join("tokenizer.json").is_file()
    {
        bail!("--tokenizer: {} has no tokenizer.json", dir.display());
    }
    Ok(args)
}

pub fn run(args: Args) -> Result<()> {
    let method = Method::parse(&args.method)?;
    let eval_kind = EvalKind::parse(&args.eval)?;
    let table = read_responses(&args.responses)?;
    let (mut models, prompts, mut cells) = (table.models, table.prompt_ids, table.cells);
    let reference = models.iter().position(|m| *m == args.reference).map(|i| {
        models.remove(i);
        cells.remove(i)
    });
    let responses =
        Responses::new(models.clone(), cells.clone()).with_context(|| args.responses.display().to_string())?;
    let ranking = match &eval_kind {
        #[cfg(not(feature = "judges"))]
        EvalKind::Llm(_) => return Err(crate::without_judges("--eval llm:")),
        #[cfg(feature = "judges")]
        EvalKind::Llm(gguf) => {
            if method == Method::Mca {
                bail!(
                    "--method mca needs a similarity to a consensus answer; an LLM judge only compares pairs (use gtr or ftr)"
                );
            }
            let Some(texts) = table.prompt_texts.clone() else {
                bail!(
                    "--eval llm: {} has no `prompt` column (the LLM judge needs each prompt's text)",
                    args.responses.display()
                );
            };
            let cfg = LlmEvalConfig {
                gguf,
                template: &args.prompt,
                both_orders: args.both_orders,
                cache: &args.out.join("cache.jsonl"),
                max_prompt_tokens: args.max_prompt_tokens,
                tokenizer: args.tokenizer.as_deref(),
            };
            let mut eval = LlmEvaluation::new(&cfg, texts, cells.clone())?;
            let ranking = method.rank(&responses, &mut eval, args.seed);
            eval.finish()?;
            ranking
        }
        kind => method.rank(&responses, kind.build(&responses, args.seed)?.as_mut(), args.seed),
    };

    let scored = match reference {
        Some(refs) => {
            // The reference joins as one more "model" so the same evaluation scores it.
            let mut all = cells;
            all.push(refs);
            let mut names = models.clone();
            names.push(args.reference.clone());
            let with_ref = Responses::new(names, all)?;
            let mut exact = eval_kind.exact().build(&with_ref, args.seed)?;
            let r = models.len();
            let score: Vec<f64> = (0..r)
                .map(|m| {
                    let s: Vec<f64> = (0..prompts.len()).filter_map(|d| exact.similarity(d, r, m)).collect();
                    if s.is_empty() { 0.0 } else { s.iter().sum::<f64>() / s.len() as f64 }
                })
                .collect();
            let order = order_by(&score);
            Some((order, score))
        }
        None => None,
    };

    let mut doc = json!({
        "method": args.method,
        "eval": args.eval,
        "n_models": responses.n_models(),
        "n_prompts": responses.n_prompts(),
        "evaluations": ranking.evaluations,
        "converged": ranking.converged,
        "ranking": ranking.order.iter().enumerate().map(|(i, &m)| json!({
            "rank": i + 1,
            "model": models[m],
            "score": ranking.scores.as_ref().map(|s| s[m]),
        })).collect::<Vec<_>>(),
        "reference": null,
    });
    println!("{:>4}  {:<32} {:>8}", "rank", "model", "score");
    for (i, &m) in ranking.order.iter().enumerate() {
        let score = ranking.scores.as_ref().map_or("-".to_owned(), |s| format!("{:.4}", s[m]));
        println!("{:>4}  {:<32} {:>8}", i + 1, models[m], score);
    }
    println!("{} judge comparisons ({} prompts each)", ranking.evaluations, responses.n_prompts());
    if let Some((order, score)) = scored {
        // A ranking of models that all score the same is the tie order by index: scoring
        // it (or against it) would report agreement that nobody measured.
        let tied = |s: &[f64]| s.iter().all(|&x| (x - s[0]).abs() < 1e-12);
        let undetermined = if tied(&score) {
            Some(format!("the reference `{}` scores every model the same", args.reference))
        } else if ranking.scores.as_deref().is_some_and(tied) {
            Some("the ranking scores every model the same".to_owned())
        } else {
            None
        };
        let (rbo, ap, rho) = match &undetermined {
            Some(why) => {
                println!("no agreement with the reference: {why}");
                (None, None, None)
            }
            None => (
                rank_biased_overlap(&ranking.order, &order, RBO_P),
                average_precision_at_k(&ranking.order, &order, args.k),
                spearman(&ranking.order, &order),
            ),
        };
        doc["reference"] = json!({
            "name": args.reference,
            "ranking": order.iter().map(|&m| json!({"model": models[m], "score": score[m]})).collect::<Vec<_>>(),
            "rbo": rbo,
            format!("map_at_{}", args.k): ap,
            "spearman": rho,
            "undetermined": undetermined,
        });
        let f = |x: Option<f64>| x.map_or("-".to_owned(), |x| format!("{x:.3}"));
        println!("against `{}`: RBO(p=0.95) {}  MAP@{} {}  Spearman {}", args.reference, f(rbo), args.k, f(ap), f(rho));
    }
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let path = args.out.join("ranking.json");
    write_atomic(&path, serde_json::to_string_pretty(&doc)?.as_bytes())?;
    println!("wrote {}", path.display());
    Ok(())
}

/// Indices by descending score, ties by index.
fn order_by(score: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..score.len()).collect();
    order.sort_by(|&a, &b| score[b].total_cmp(&score[a]).then(a.cmp(&b)));
    order
}

#[derive(clap::Args)]
pub struct SimArgs {
    /// Models per simulated benchmark (comma-separated: every combination of models,
    /// questions and options is simulated, and a row pools them all).
    #[arg(long, default_value = "10")]
    models: String,
    /// Questions per benchmark (comma-separated).
    #[arg(long, default_value = "100")]
    questions: String,
    /// Answer options per question (comma-separated).
    #[arg(long, default_value = "10")]
    options: String,
    /// Accuracies of the best model (comma-separated); the others are evenly spaced down to --worst.
    #[arg(long, default_value = "0.3,0.5,0.7,0.9")]
    best: String,
    /// Accuracy of the worst model.
    #[arg(long, default_value_t = 0.1)]
    worst: f64,
    /// Flip probabilities of the equality evaluation (comma-separated; 0 = exact).
    #[arg(long, default_value = "0")]
    noise: String,
    /// Trials per setting (mean and standard deviation reported).
    #[arg(long, default_value_t = 5)]
    trials: usize,
    /// First seed; trial t uses seed + t.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Optional directory for rank-sim.json.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// The paper's Table 2 (RBO mean, std) for MCA, FTR, GTR at best accuracy 30/50/70/90%.
const PAPER_TABLE2: [(f64, [(f64, f64); 3]); 4] = [
    (0.3, [(0.668, 0.26), (0.694, 0.26), (0.622, 0.21)]),
    (0.5, [(0.818, 0.23), (0.832, 0.22), (0.723, 0.19)]),
    (0.7, [(0.927, 0.16), (0.927, 0.15), (0.833, 0.14)]),
    (0.9, [(0.980, 0.09), (0.981, 0.08), (0.919, 0.09)]),
];

pub fn run_sim(args: SimArgs) -> Result<()> {
    let list = |s: &str, what: &str| -> Result<Vec<f64>> {
        s.split(',')
            .map(|x| x.trim().parse::<f64>().with_context(|| format!("--{what}: `{x}` is not a number")))
            .collect()
    };
    let bests = list(&args.best, "best")?;
    let noises = list(&args.noise, "noise")?;
    let counts = |s: &str, what: &str| -> Result<Vec<usize>> {
        s.split(',')
            .map(|x| x.trim().parse::<usize>().with_context(|| format!("--{what}: `{x}` is not a count")))
            .collect()
    };
    let (models, questions, options) =
        (counts(&args.models, "models")?, counts(&args.questions, "questions")?, counts(&args.options, "options")?);
    if models.iter().any(|&m| m < 3) {
        bail!("--models: ranking needs at least 3 models");
    }
    let mut settings = Vec::new();
    for &m in &models {
        for &q in &questions {
            for &o in &options {
                settings.push((m, q, u32::try_from(o).context("--options: too many")?));
            }
        }
    }
    if args.trials == 0 {
        bail!("--trials must be at least 1");
    }
    let methods = [("MCA", Method::Mca), ("FTR", Method::Ftr), ("GTR", Method::Gtr)];
    let mut out = String::new();
    let _ = writeln!(
        out,
        "models {}, questions {}, options {} (every combination pooled), accuracies evenly from best to {}, {} trials each; RBO (p = 0.95) and MAP@5, mean ± std",
        args.models, args.questions, args.options, args.worst, args.trials
    );
    let _ = writeln!(
        out,
        "{:>5} {:>5} | {:>13} {:>13} {:>13} | {:>13} {:>13} {:>13} | paper RBO MCA / FTR / GTR",
        "best", "noise", "RBO MCA", "RBO FTR", "RBO GTR", "MAP5 MCA", "MAP5 FTR", "MAP5 GTR"
    );
    let mut rows = Vec::new();
    for &best in &bests {
        for &noise in &noises {
            let mut rbo = vec![Vec::new(); 3];
            let mut map5 = vec![Vec::new(); 3];
            for (t, &(n_models, n_questions, n_options)) in
                (0..args.trials).flat_map(|t| settings.iter().map(move |s| (t, s)))
            {
                let seed = args.seed + t as u64;
                let cfg = ChoiceConfig::spread(n_models, best, args.worst, n_questions, n_options, seed);
                let sim = simulate_choice(&cfg)?;
                let truth = order_by(&sim.accuracies());
                let cells = sim.answers.iter().map(|a| a.iter().map(|x| Some(x.to_string())).collect()).collect();
                let names = (0..n_models).map(|m| format!("m{m}")).collect();
                let r = Responses::new(names, cells)?;
                for (mi, (_, method)) in methods.iter().enumerate() {
                    let mut eval: Box<dyn Evaluation> = if noise > 0.0 {
                        Box::new(NoisyEquality::new(&r, noise, seed.wrapping_mul(31).wrapping_add(mi as u64))?)
                    } else {
                        Box::new(Equality::new(&r))
                    };
                    let ranking = method.rank(&r, eval.as_mut(), seed);
                    rbo[mi].extend(rank_biased_overlap(&ranking.order, &truth, RBO_P));
                    map5[mi].extend(average_precision_at_k(&ranking.order, &truth, 5));
                }
            }
            let ms = |v: &[f64]| {
                let m = v.iter().sum::<f64>() / v.len() as f64;
                let sd = (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len().max(2) - 1) as f64).sqrt();
                (m, sd)
            };
            let cell = |v: &[f64]| {
                let (m, s) = ms(v);
                format!("{m:.3} ± {s:.3}")
            };
            let paper = PAPER_TABLE2
                .iter()
                .find(|(b, _)| (b - best).abs() < 1e-9 && noise == 0.0)
                .map_or(String::new(), |(_, v)| {
                    v.iter().map(|(m, s)| format!("{m:.3}±{s:.2}")).collect::<Vec<_>>().join(" / ")
                });
            let _ = writeln!(
                out,
                "{:>5.2} {:>5.2} | {:>13} {:>13} {:>13} | {:>13} {:>13} {:>13} | {paper}",
                best,
                noise,
                cell(&rbo[0]),
                cell(&rbo[1]),
                cell(&rbo[2]),
                cell(&map5[0]),
                cell(&map5[1]),
                cell(&map5[2])
            );
            let stat = |v: &[f64]| {
                let (m, s) = ms(v);
                json!({"mean": m, "std": s})
            };
            rows.push(json!({
                "best": best, "noise": noise,
                "rbo": {"mca": stat(&rbo[0]), "ftr": stat(&rbo[1]), "gtr": stat(&rbo[2])},
                "map_at_5": {"mca": stat(&map5[0]), "ftr": stat(&map5[1]), "gtr": stat(&map5[2])},
            }));
        }
    }
    print!("{out}");
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let doc = json!({
            "models": args.models, "questions": args.questions, "options": args.options,
            "worst": args.worst, "trials": args.trials, "seed": args.seed, "rows": rows,
        });
        write_atomic(&dir.join("rank-sim.json"), serde_json::to_string_pretty(&doc)?.as_bytes())?;
    }
    Ok(())
}
