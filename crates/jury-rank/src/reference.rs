//! What `jury rank` and `jury rank-sim` compute around a ranking method: the method and
//! evaluation as typed options, the reference ranking (models by their similarity to
//! reference answers) with the ranking's agreement to it, and the triplet-ranking paper's multiple-choice
//! simulation study (Table 2, Figure 4).
//!
//! Invariant: a ranking of models that all score the same is the tie order by index;
//! agreement with it (or of it) is reported as undetermined, never as a number.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use jury_metrics::{average_precision_at_k, mean_std, rank_biased_overlap, spearman};
use jury_sim::{ChoiceConfig, simulate_choice};
use serde::ser::SerializeMap;

use crate::{
    Equality, Evaluation, FtrConfig, NoisyEquality, RankError, Ranking, Responses, Rouge2, full_triplet_ranking,
    greedy_triplet_ranking, most_common_answer,
};

/// Rank-biased overlap persistence used throughout (the triplet-ranking paper's p = 0.95).
pub const RBO_P: f64 = 0.95;

/// A ranking method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum RankMethod {
    /// Greedy Triplet Ranking (Algorithm 1).
    Gtr,
    /// Full Triplet Ranking (Algorithm 2).
    Ftr,
    /// Most common answer: models by agreement with the consensus.
    Mca,
}

impl RankMethod {
    /// The method's name in flags and ranking.json.
    pub fn name(self) -> String {
        clap::ValueEnum::to_possible_value(&self).map(|v| v.get_name().to_owned()).unwrap_or_default()
    }

    pub fn rank(self, r: &Responses, eval: &mut dyn Evaluation, seed: u64) -> Ranking {
        match self {
            RankMethod::Gtr => greedy_triplet_ranking(r, eval, seed),
            RankMethod::Ftr => full_triplet_ranking(r, eval, &FtrConfig::default()),
            RankMethod::Mca => most_common_answer(r, eval),
        }
    }
}

/// How two responses are compared.
#[derive(Debug, Clone, PartialEq)]
pub enum EvalSpec {
    /// ROUGE-2 F1 between the responses.
    Rouge2,
    /// Exact equality of the trimmed responses.
    Equal,
    /// Exact equality, flipped with this probability.
    NoisyEqual(f64),
    /// A local LLM judges which of two answers agrees better with the judge model's own.
    Llm(PathBuf),
}

impl FromStr for EvalSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(path) = s.strip_prefix("llm:") {
            return Ok(EvalSpec::Llm(PathBuf::from(path)));
        }
        if let Some(p) = s.strip_prefix("noisy-equal:") {
            let p: f64 = p.parse().map_err(|_| format!("`{p}` is not a number"))?;
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("flip probability {p} is not in [0, 1]"));
            }
            return Ok(EvalSpec::NoisyEqual(p));
        }
        match s {
            "rouge2" => Ok(EvalSpec::Rouge2),
            "equal" => Ok(EvalSpec::Equal),
            other => {
                Err(format!("unknown evaluation `{other}` (expected rouge2, equal, noisy-equal:P or llm:MODEL.gguf)"))
            }
        }
    }
}

impl fmt::Display for EvalSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvalSpec::Rouge2 => f.write_str("rouge2"),
            EvalSpec::Equal => f.write_str("equal"),
            EvalSpec::NoisyEqual(p) => write!(f, "noisy-equal:{p}"),
            EvalSpec::Llm(p) => write!(f, "llm:{}", p.display()),
        }
    }
}

impl EvalSpec {
    /// The evaluation, for the model-free kinds; `None` for an LLM, which its caller loads.
    pub fn build(&self, r: &Responses, seed: u64) -> Result<Option<Box<dyn Evaluation>>, RankError> {
        Ok(Some(match self {
            EvalSpec::Rouge2 => Box::new(Rouge2::new(r)),
            EvalSpec::Equal => Box::new(Equality::new(r)),
            EvalSpec::NoisyEqual(p) => Box::new(NoisyEquality::new(r, *p, seed)?),
            EvalSpec::Llm(_) => return Ok(None),
        }))
    }

    /// The exact, model-free counterpart used to build a reference ranking (noise is the
    /// method's handicap, not the reference's; against a reference answer an LLM judge's
    /// closest stand-in is exact equality).
    fn exact(&self) -> Self {
        match self {
            EvalSpec::NoisyEqual(_) | EvalSpec::Llm(_) => EvalSpec::Equal,
            other => other.clone(),
        }
    }
}

/// Indices by descending score, ties by index.
pub fn order_by(score: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..score.len()).collect();
    order.sort_by(|&a, &b| score[b].total_cmp(&score[a]).then(a.cmp(&b)));
    order
}

/// A model and its score, in a ranking.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelScore {
    pub model: String,
    pub score: f64,
}

/// A ranking's agreement with the reference ranking.
#[derive(Debug, Clone, PartialEq)]
pub struct ReferenceScore {
    pub name: String,
    /// The reference ranking, best first.
    pub ranking: Vec<ModelScore>,
    pub rbo: Option<f64>,
    /// k of MAP@k, and MAP@k.
    pub k: usize,
    pub map_at_k: Option<f64>,
    pub spearman: Option<f64>,
    /// Why no agreement is reported, when none is.
    pub undetermined: Option<String>,
}

impl serde::Serialize for ReferenceScore {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(6))?;
        m.serialize_entry("name", &self.name)?;
        m.serialize_entry("ranking", &self.ranking)?;
        m.serialize_entry("rbo", &self.rbo)?;
        m.serialize_entry(&format!("map_at_{}", self.k), &self.map_at_k)?;
        m.serialize_entry("spearman", &self.spearman)?;
        m.serialize_entry("undetermined", &self.undetermined)?;
        m.end()
    }
}

/// The fields of [`ReferenceScore`] as written, MAP@k under its key `map_at_K`.
#[derive(serde::Deserialize)]
struct ReferenceFields {
    name: String,
    ranking: Vec<ModelScore>,
    rbo: Option<f64>,
    spearman: Option<f64>,
    undetermined: Option<String>,
    #[serde(flatten)]
    rest: std::collections::BTreeMap<String, Option<f64>>,
}

impl<'de> serde::Deserialize<'de> for ReferenceScore {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let f = ReferenceFields::deserialize(d)?;
        let mut maps = f.rest.iter().filter_map(|(key, v)| Some((key.strip_prefix("map_at_")?.parse().ok()?, *v)));
        let Some((k, map_at_k)) = maps.next() else {
            return Err(serde::de::Error::missing_field("map_at_K"));
        };
        Ok(ReferenceScore {
            name: f.name,
            ranking: f.ranking,
            rbo: f.rbo,
            k,
            map_at_k,
            spearman: f.spearman,
            undetermined: f.undetermined,
        })
    }
}

/// Scores `ranking` of `responses`' models against the ranking of those models by mean
/// similarity to `reference` (one answer per prompt), compared by `eval`'s exact
/// counterpart.
pub fn score_against_reference(
    responses: &Responses,
    ranking: &Ranking,
    name: &str,
    reference: Vec<Option<String>>,
    eval: &EvalSpec,
    k: usize,
    seed: u64,
) -> Result<ReferenceScore, RankError> {
    let models = responses.models().to_vec();
    // The reference joins as one more "model" so the same evaluation scores it.
    let mut cells: Vec<Vec<Option<String>>> = (0..models.len())
        .map(|m| (0..responses.n_prompts()).map(|d| responses.get(m, d).map(str::to_owned)).collect())
        .collect();
    cells.push(reference);
    let mut names = models.clone();
    names.push(name.to_owned());
    let with_ref = Responses::new(names, cells)?;
    let Some(mut exact) = eval.exact().build(&with_ref, seed)? else {
        unreachable!("the exact counterpart of an evaluation needs no model")
    };
    let r = models.len();
    let score: Vec<f64> = (0..r)
        .map(|m| {
            let s: Vec<f64> = (0..responses.n_prompts()).filter_map(|d| exact.similarity(d, r, m)).collect();
            if s.is_empty() { 0.0 } else { s.iter().sum::<f64>() / s.len() as f64 }
        })
        .collect();
    let order = order_by(&score);
    let tied = |s: &[f64]| s.iter().all(|&x| (x - s[0]).abs() < 1e-12);
    let undetermined = if tied(&score) {
        Some(format!("the reference `{name}` scores every model the same"))
    } else if ranking.scores.as_deref().is_some_and(tied) {
        Some("the ranking scores every model the same".to_owned())
    } else {
        None
    };
    let agree = undetermined.is_none();
    Ok(ReferenceScore {
        name: name.to_owned(),
        ranking: order.iter().map(|&m| ModelScore { model: models[m].clone(), score: score[m] }).collect(),
        rbo: agree.then(|| rank_biased_overlap(&ranking.order, &order, RBO_P)).flatten(),
        k,
        map_at_k: agree.then(|| average_precision_at_k(&ranking.order, &order, k)).flatten(),
        spearman: agree.then(|| spearman(&ranking.order, &order)).flatten(),
        undetermined,
    })
}

/// A model's place in a ranking.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Ranked {
    pub rank: usize,
    pub model: String,
    pub score: Option<f64>,
}

/// The result of `jury rank`, and ranking.json's record: `jury rank` writes it, the
/// report reads it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RankReport {
    pub method: RankMethod,
    pub eval: String,
    pub n_models: usize,
    pub n_prompts: usize,
    pub evaluations: usize,
    pub converged: Option<bool>,
    pub ranking: Vec<Ranked>,
    pub reference: Option<ReferenceScore>,
}

impl RankReport {
    pub fn new(
        method: RankMethod,
        eval: &EvalSpec,
        responses: &Responses,
        ranking: &Ranking,
        reference: Option<ReferenceScore>,
    ) -> Self {
        let models = responses.models();
        Self {
            method,
            eval: eval.to_string(),
            n_models: responses.n_models(),
            n_prompts: responses.n_prompts(),
            evaluations: ranking.evaluations,
            converged: ranking.converged,
            ranking: ranking
                .order
                .iter()
                .enumerate()
                .map(|(i, &m)| Ranked {
                    rank: i + 1,
                    model: models[m].clone(),
                    score: ranking.scores.as_ref().map(|s| s[m]),
                })
                .collect(),
            reference,
        }
    }
}

/// The settings of the multiple-choice simulation (`jury rank-sim`).
#[derive(Debug, Clone, PartialEq, clap::Args, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct SimOptions {
    /// Models per simulated benchmark (comma-separated: every combination of models,
    /// questions and options is simulated, and a row pools them all).
    #[arg(long, value_delimiter = ',', default_value = "10")]
    pub models: Vec<usize>,
    /// Questions per benchmark (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "100")]
    pub questions: Vec<usize>,
    /// Answer options per question (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "10")]
    pub options: Vec<u32>,
    /// Accuracies of the best model (comma-separated); the others are evenly spaced down to --worst.
    #[arg(long, value_delimiter = ',', default_value = "0.3,0.5,0.7,0.9")]
    pub best: Vec<f64>,
    /// Accuracy of the worst model.
    #[arg(long, default_value_t = 0.1)]
    pub worst: f64,
    /// Flip probabilities of the equality evaluation (comma-separated; 0 = exact).
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub noise: Vec<f64>,
    /// Trials per setting (mean and standard deviation reported).
    #[arg(long, default_value_t = 5)]
    pub trials: usize,
    /// First seed; trial t uses seed + t.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Mean and sample standard deviation over trials.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct MeanStd {
    pub mean: f64,
    pub std: f64,
}

impl MeanStd {
    fn of(v: &[f64]) -> Self {
        let (mean, std) = mean_std(v);
        Self { mean, std }
    }
}

/// One statistic for the three methods.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct PerMethod {
    pub mca: MeanStd,
    pub ftr: MeanStd,
    pub gtr: MeanStd,
}

/// One (best accuracy, noise) setting of the simulation.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SimRow {
    pub best: f64,
    pub noise: f64,
    pub rbo: PerMethod,
    pub map_at_5: PerMethod,
    /// The triplet-ranking paper's Table 2 RBO (mean, std) for MCA, FTR, GTR at this setting, if it has one.
    #[serde(skip)]
    pub paper_rbo: Option<[(f64, f64); 3]>,
}

/// The simulation's settings and rows, in the layout of rank-sim.json.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SimStudy {
    #[serde(flatten)]
    pub options: SimOptions,
    pub rows: Vec<SimRow>,
}

/// The triplet-ranking paper's Table 2 (RBO mean, std) for MCA, FTR, GTR at best accuracy 30/50/70/90%.
const PAPER_TABLE2: [(f64, [(f64, f64); 3]); 4] = [
    (0.3, [(0.668, 0.26), (0.694, 0.26), (0.622, 0.21)]),
    (0.5, [(0.818, 0.23), (0.832, 0.22), (0.723, 0.19)]),
    (0.7, [(0.927, 0.16), (0.927, 0.15), (0.833, 0.14)]),
    (0.9, [(0.980, 0.09), (0.981, 0.08), (0.919, 0.09)]),
];

impl SimOptions {
    /// Checks the settings on their own.
    pub fn check(&self) -> Result<(), RankError> {
        if let Some(&m) = self.models.iter().find(|&&m| m < 3) {
            return Err(RankError::TooFewModels(m));
        }
        if self.trials == 0 {
            return Err(RankError::NoTrials);
        }
        Ok(())
    }
}

/// Runs the multiple-choice simulation: for every best accuracy and noise, every trial
/// of every (models, questions, options) combination, MCA, FTR and GTR scored against
/// the true accuracy order by RBO and MAP@5.
pub fn simulate_study(options: &SimOptions) -> Result<SimStudy, RankError> {
    options.check()?;
    let mut settings = Vec::new();
    for &m in &options.models {
        for &q in &options.questions {
            for &o in &options.options {
                settings.push((m, q, o));
            }
        }
    }
    let methods = [RankMethod::Mca, RankMethod::Ftr, RankMethod::Gtr];
    let mut rows = Vec::new();
    for &best in &options.best {
        for &noise in &options.noise {
            let (mut rbo, mut map5) = (vec![Vec::new(); 3], vec![Vec::new(); 3]);
            for t in 0..options.trials {
                for &(n_models, n_questions, n_options) in &settings {
                    let seed = options.seed + t as u64;
                    let cfg = ChoiceConfig::spread(n_models, best, options.worst, n_questions, n_options, seed);
                    let sim = simulate_choice(&cfg).map_err(|e| RankError::Simulation(e.to_string()))?;
                    let truth = order_by(&sim.accuracies());
                    let cells = sim.answers.iter().map(|a| a.iter().map(|x| Some(x.to_string())).collect()).collect();
                    let r = Responses::new((0..n_models).map(|m| format!("m{m}")).collect(), cells)?;
                    for (mi, method) in methods.iter().enumerate() {
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
            }
            let per = |v: &[Vec<f64>]| PerMethod {
                mca: MeanStd::of(&v[0]),
                ftr: MeanStd::of(&v[1]),
                gtr: MeanStd::of(&v[2]),
            };
            let paper_rbo = PAPER_TABLE2.iter().find(|(b, _)| (b - best).abs() < 1e-9 && noise == 0.0).map(|(_, v)| *v);
            rows.push(SimRow { best, noise, rbo: per(&rbo), map_at_5: per(&map5), paper_rbo });
        }
    }
    Ok(SimStudy { options: options.clone(), rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Models ordered by agreement with the reference answers; a ranking that matches
    /// that order has RBO, MAP and Spearman of 1; a reference that scores every model
    /// the same gives no numbers, with the reason.
    #[test]
    fn a_ranking_is_scored_against_the_reference_or_undetermined() {
        let r = Responses::new(
            vec!["a".into(), "b".into(), "c".into()],
            vec![
                vec![Some("1".into()), Some("2".into())],
                vec![Some("1".into()), Some("9".into())],
                vec![Some("9".into()), Some("9".into())],
            ],
        )
        .unwrap();
        let ranking = Ranking { order: vec![0, 1, 2], scores: None, evaluations: 0, converged: None };
        let refs = vec![Some("1".to_owned()), Some("2".to_owned())];
        let s = score_against_reference(&r, &ranking, "ref", refs, &EvalSpec::Equal, 2, 0).unwrap();
        assert_eq!(s.ranking.iter().map(|m| m.model.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!((s.map_at_k, s.spearman), (Some(1.0), Some(1.0)));
        assert_eq!(s.rbo, rank_biased_overlap(&[0, 1, 2], &[0, 1, 2], RBO_P));
        assert!(s.rbo.is_some_and(|r| r > 0.0));
        let same = vec![Some("x".to_owned()), Some("y".to_owned())];
        let s = score_against_reference(&r, &ranking, "ref", same, &EvalSpec::Equal, 2, 0).unwrap();
        assert_eq!((s.rbo, s.map_at_k, s.spearman), (None, None, None));
        assert_eq!(s.undetermined.as_deref(), Some("the reference `ref` scores every model the same"));
        let json = serde_json::to_value(&s).unwrap();
        assert!(json.get("map_at_2").is_some(), "{json}");
    }

    #[test]
    fn simulation_settings_are_checked_and_the_study_repeats_for_a_seed() {
        let mut o = SimOptions {
            models: vec![4],
            questions: vec![20],
            options: vec![4],
            best: vec![0.9],
            worst: 0.1,
            noise: vec![0.0],
            trials: 2,
            seed: 1,
        };
        let study = simulate_study(&o).unwrap();
        assert_eq!(study.rows.len(), 1);
        assert!(study.rows[0].paper_rbo.is_some(), "best 0.9 without noise is a Table 2 setting");
        assert_eq!(simulate_study(&o).unwrap(), study);
        o.models = vec![2];
        assert_eq!(o.check(), Err(RankError::TooFewModels(2)));
        o.models = vec![4];
        o.trials = 0;
        assert_eq!(o.check(), Err(RankError::NoTrials));
    }
}
