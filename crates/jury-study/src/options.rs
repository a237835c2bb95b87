//! The aggregation options, declared once: the flags of `jury aggregate` (through
//! `#[command(flatten)]`) and the `aggregate:` section of a `jury run` experiment are the
//! same typed struct. Checking them ([`Settings::new`]) does no I/O; finding the encoder
//! ([`Settings::resolve_encoder`]) is a separate step.

use std::path::PathBuf;

use jury_aggregate::{Care, CareGaussian, ClassPrior, CorrelatedGaussian, DawidSkeneConfig, EmInit, EmStop, TieBreak};
use jury_neural::{ComputeDevice, NeuralMethod, NeuralOptions, Recipe, SkillInit};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::StudyError;

/// An aggregation method. Its name, in flags, configs and every output, is its
/// `#[value(name)]`, spelled only there (serde goes through it, and a test checks that
/// each aggregator reports the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Method {
    /// The recommended default: Dawid-Skene, or the method whose labels, fitted without
    /// each judge, predict that judge's votes clearly better (chosen per jury, see
    /// `jury_aggregate::HeldOutJudges`).
    #[value(name = "recommended")]
    Recommended,
    /// AverageProb: the mean of the judges' probabilities.
    #[value(name = "avg")]
    Avg,
    /// MajorityVote over the judges' hard votes.
    #[value(name = "mv")]
    Mv,
    /// Dawid-Skene: per-judge confusion matrices by EM.
    #[value(name = "ds")]
    Ds,
    /// Wawa: votes weighted by each judge's agreement with the majority (crowd-kit).
    #[value(name = "wawa")]
    Wawa,
    /// ZeroBasedSkill: votes weighted by agreement with the weighted vote, refined (crowd-kit).
    #[value(name = "zbs")]
    Zbs,
    /// One-coin Dawid-Skene: one P(correct) per judge, by EM (crowd-kit).
    #[value(name = "onecoin")]
    OneCoin,
    /// GLAD: judge ability and example difficulty, by EM (Whitehill et al. 2009).
    #[value(name = "glad")]
    Glad,
    /// MACE: each judge knows or spams, by variational Bayes (Hovy et al. 2013).
    #[value(name = "mace")]
    Mace,
    /// M-MSR: skills from a robust rank-one fit of the judges' covariance (Ma and Olshevsky 2020).
    #[value(name = "mmsr")]
    Mmsr,
    /// KOS: belief propagation on the example-judge graph, two classes (Karger et al. 2011).
    #[value(name = "kos")]
    Kos,
    /// CARE-SVD: judges weighted by the quality factor of a sparse plus low-rank split of
    /// their log-odds' precision matrix (Zhao et al. 2026), two classes.
    #[value(name = "care")]
    Care,
    /// Dawid-Skene refined by a class-conditional Gaussian over the judges' log-odds with
    /// correlated errors, two classes.
    #[value(name = "gauss")]
    Gauss,
    /// CARE refined by a Gaussian over the judges' log-odds with one covariance shared by
    /// the classes, two classes.
    #[value(name = "care-gauss")]
    CareGauss,
    /// A context model trained on majority-vote labels (needs contexts and labels).
    #[value(name = "train-on-mv")]
    TrainOnMv,
    /// Crowdlayer: the context model read alone (needs contexts and labels).
    #[value(name = "crowdlayer")]
    Crowdlayer,
    /// SkillAggregation without the regulariser (needs contexts and labels).
    #[value(name = "skillagg-noreg")]
    SkillAggNoReg,
    /// SkillAggregation: task-level skills, posterior by Eq. 8 (needs contexts and labels).
    #[value(name = "skillagg")]
    SkillAgg,
    /// SkillAggregation-X: context-level skills (needs contexts and labels).
    #[value(name = "skillagg-x")]
    SkillAggX,
}

/// Serde for a `clap::ValueEnum` through its value names, so a name is spelled once
/// (in `#[value(name)]`) for flags, configs and outputs alike.
macro_rules! serde_by_value_name {
    ($t:ty, $what:literal) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match clap::ValueEnum::to_possible_value(self) {
                    Some(v) => s.serialize_str(v.get_name()),
                    None => Err(serde::ser::Error::custom(concat!("a ", $what, " without a name"))),
                }
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let name = String::deserialize(d)?;
                <$t as clap::ValueEnum>::from_str(&name, false).map_err(|_| {
                    let names: Vec<String> = <$t as clap::ValueEnum>::value_variants()
                        .iter()
                        .filter_map(|m| clap::ValueEnum::to_possible_value(m).map(|v| format!("`{}`", v.get_name())))
                        .collect();
                    serde::de::Error::custom(format!("unknown variant `{name}`, expected one of {}", names.join(", ")))
                })
            }
        }
    };
}

serde_by_value_name!(Method, "method");
serde_by_value_name!(RecipeName, "recipe");

impl Method {
    /// The methods `recommended` chooses among, the simplest model first (a tie of the
    /// criterion goes to the earlier one): every context-free method. Dawid-Skene is the
    /// reference that stays unless another beats it clearly.
    pub const CANDIDATES: [Method; 13] = [
        Method::Avg,
        Method::Mv,
        Method::Wawa,
        Method::Zbs,
        Method::OneCoin,
        Method::Mmsr,
        Method::Kos,
        Method::Glad,
        Method::Mace,
        Method::Ds,
        Method::Care,
        Method::Gauss,
        Method::CareGauss,
    ];

    /// Whether the method models the judges' log-odds (care, gauss, care-gauss), which
    /// hard verdicts do not have.
    pub fn models_log_odds(self) -> bool {
        matches!(self, Method::Care | Method::Gauss | Method::CareGauss)
    }

    /// The context-dependent method this is, if it is one.
    pub(crate) fn neural(self) -> Option<NeuralMethod> {
        match self {
            Method::Recommended
            | Method::Avg
            | Method::Mv
            | Method::Ds
            | Method::Wawa
            | Method::Zbs
            | Method::OneCoin
            | Method::Glad
            | Method::Mace
            | Method::Mmsr
            | Method::Kos
            | Method::Care
            | Method::Gauss
            | Method::CareGauss => None,
            Method::TrainOnMv => Some(NeuralMethod::TrainOnMv),
            Method::Crowdlayer => Some(NeuralMethod::Crowdlayer),
            Method::SkillAggNoReg => Some(NeuralMethod::SkillAggNoReg),
            Method::SkillAgg => Some(NeuralMethod::SkillAgg),
            Method::SkillAggX => Some(NeuralMethod::SkillAggX),
        }
    }
}

/// How a tie for the top class is decided (avg, mv and ds's final labels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ties {
    /// The positive class (the highest tied class with more than two).
    #[value(alias = "yes")]
    #[serde(alias = "yes")]
    Positive,
    /// The negative class (the lowest tied class with more than two).
    #[value(alias = "no")]
    #[serde(alias = "no")]
    Negative,
    /// A seeded draw among the tied classes (`seed`).
    Random,
}

/// Dawid-Skene's class prior.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DsPrior {
    /// Uniform, as in the SkillAggregation paper.
    Uniform,
    /// Learned with the confusion matrices (crowd-kit's DawidSkene).
    Learned,
}

/// When Dawid-Skene's EM stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DsStop {
    /// crowd-kit's: its objective per vote gains less than --ds-tol (it can fall, and
    /// then EM stops early).
    Objective,
    /// The SkillAggregation paper's: no parameter moves more than --ds-tol.
    Params,
}

/// Dawid-Skene's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DsInit {
    /// Majority-vote posteriors.
    Mv,
    /// Random posteriors (the SkillAggregation paper's Algorithm 3), seeded by `seed`.
    Random,
}

/// The context encoder's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EncoderMode {
    /// Embeddings computed once and cached; only the heads train.
    Frozen,
    /// Encoder and heads trained together, resuming from checkpoints.
    Finetune,
}

/// Whose training recipe the context-dependent methods follow (named as [`Method`]s are).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RecipeName {
    /// The SkillAggregation authors' code: raw linear skills at 0.7 / 0.3, -X copying
    /// them from the detached context, Crowdlayer's identity confusion, dropout 0.1,
    /// AdamW lr 1e-4 with a cosine schedule, batch 8, 10 epochs, unnormalised pooling,
    /// lambdas 0.05-0.5, the later epoch on dev ties (frozen encoder).
    #[value(name = "paper")]
    Paper,
    /// jury's settings before the `paper` recipe: sigmoid skills at 0.8, lr 1e-3, batch
    /// 256 (32 fine-tuned), 20 epochs, unit-length pooling, lambdas 0.01-1.
    #[value(name = "jury-v1")]
    JuryV1,
}

impl RecipeName {
    fn recipe(self) -> Recipe {
        match self {
            RecipeName::Paper => Recipe::Paper,
            RecipeName::JuryV1 => Recipe::JuryV1,
        }
    }
}

/// Where the judges' skills start, as written: a probability or `ds`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SkillStart {
    /// Every judge at this P(correct) in both classes.
    Uniform(f64),
    /// Each judge at its Dawid-Skene estimate.
    DawidSkene,
}

impl std::str::FromStr for SkillStart {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "ds" => Ok(SkillStart::DawidSkene),
            other => match other.parse::<f64>() {
                Ok(p) if p > 0.5 && p < 1.0 => Ok(SkillStart::Uniform(p)),
                _ => Err(format!("`{other}`: expected a probability in (0.5, 1) or `ds`")),
            },
        }
    }
}

impl std::fmt::Display for SkillStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SkillStart::Uniform(p) => write!(f, "{p}"),
            SkillStart::DawidSkene => f.write_str("ds"),
        }
    }
}

/// The aggregation options as written by a user (flags or a YAML config).
#[derive(Debug, Clone, PartialEq, clap::Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AggregateOptions {
    /// Methods, comma-separated (a list in YAML). The context-dependent ones need
    /// --contexts and labels for the dev set.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Method::Recommended, Method::Avg, Method::Mv, Method::Ds])]
    #[serde(deserialize_with = "one_or_list")]
    pub methods: Vec<Method>,
    /// Every method's rule for a tied posterior that the example's judges split evenly on
    /// too (a tie goes first to the side most of its judges took).
    #[arg(long, value_enum, default_value_t = Ties::Positive)]
    pub ties: Ties,
    /// Seed for random tie-breaking and random EM initialisation.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Dawid-Skene class prior (learned: crowd-kit's; uniform: the SkillAggregation paper's).
    #[arg(long, value_enum, default_value_t = DsPrior::Learned)]
    pub ds_prior: DsPrior,
    /// Dawid-Skene start.
    #[arg(long, value_enum, default_value_t = DsInit::Mv)]
    pub ds_init: DsInit,
    /// Dawid-Skene iteration cap.
    #[arg(long, default_value_t = 100)]
    pub ds_max_iter: usize,
    /// Dawid-Skene tolerance of --ds-stop; 0 runs exactly --ds-max-iter iterations.
    #[arg(long, default_value_t = 1e-5)]
    pub ds_tol: f64,
    /// Dawid-Skene stopping rule (objective: crowd-kit's; params: the SkillAggregation paper's, with
    /// --ds-tol 1e-6 there).
    #[arg(long, value_enum, default_value_t = DsStop::Objective)]
    pub ds_stop: DsStop,
    /// CARE's weight of the sparse part against the low-rank part (gamma), for care and
    /// care-gauss.
    #[arg(long, default_value_t = Care::DEFAULT_GAMMA)]
    pub care_gamma: f64,
    /// EM steps of gauss after its Dawid-Skene start.
    #[arg(long, default_value_t = CorrelatedGaussian::DEFAULT_STEPS)]
    pub gauss_steps: usize,
    /// EM steps of care-gauss after its CARE start.
    #[arg(long, default_value_t = CareGaussian::DEFAULT_STEPS)]
    pub care_gauss_steps: usize,
    /// Example contexts for the context-dependent methods: example_id, text.
    #[arg(long)]
    pub contexts: Option<PathBuf>,
    /// Labeled development examples (drawn per seed) that choose lambda and the epoch.
    #[arg(long, default_value_t = 250)]
    pub dev_size: usize,
    /// Seeds of the context-dependent methods (mean and std reported).
    #[arg(long, default_value_t = 5)]
    pub seeds: usize,
    /// The first of the --seeds consecutive seeds (seeds first..first+seeds), so the
    /// seeds of a long fine-tuned run can go to separate machines or sessions.
    #[arg(long, default_value_t = 0)]
    pub first_seed: u64,
    /// Training recipe of the context-dependent methods; it sets the defaults of
    /// --epochs, --lr, --batch, --lambdas, --skill-init and --max-tokens.
    #[arg(long, value_enum, default_value_t = RecipeName::Paper)]
    pub recipe: RecipeName,
    /// Context encoder mode.
    #[arg(long, value_enum, default_value_t = EncoderMode::Frozen)]
    pub encoder: EncoderMode,
    /// Encoder folder (config.json, tokenizer.json, model.safetensors; BERT such as
    /// all-MiniLM-L6-v2, see scripts/fetch-encoder.sh, or GPT-2), or a hub model id such as
    /// openai-community/gpt2 (the SkillAggregation paper's encoder), taken from or fetched into the hub cache.
    #[arg(long, default_value = "models/all-MiniLM-L6-v2")]
    pub encoder_dir: PathBuf,
    /// Where the encoder runs: cpu, or cuda / cuda:N (GPU N) in builds with
    /// `--features jury-cli/cuda`; the heads of the frozen mode always train on the CPU.
    #[arg(long, default_value_t = ComputeDevice::Cpu)]
    #[serde(serialize_with = "as_text", deserialize_with = "from_text")]
    pub device: ComputeDevice,
    /// Tokens per context kept by the encoder (default: 512 with the `paper` recipe, which
    /// does not truncate; 128, what all-MiniLM-L6-v2 was trained on, with jury-v1).
    #[arg(long)]
    pub max_tokens: Option<usize>,
    /// Embed each ` || `-separated field of a context on its own (up to --max-tokens each)
    /// and concatenate the vectors in field order (frozen encoder only).
    #[arg(long)]
    pub split_fields: bool,
    /// Training epochs of the context-dependent methods, the dev set picking the best
    /// (default: the recipe's, 10 paper, 20 jury-v1).
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Regulariser weights the dev set chooses from (skillagg, skillagg-x), comma-separated
    /// (default: the recipe's, 0.05,0.1,0.2,0.5 paper, 0.01,0.1,1 jury-v1).
    #[arg(long, value_delimiter = ',')]
    #[serde(deserialize_with = "some_list")]
    pub lambdas: Option<Vec<f64>>,
    /// Width of a ReLU hidden layer in the context model's head (0 = linear).
    #[arg(long, default_value_t = 0)]
    pub hidden: usize,
    /// Learning rate of the context-dependent methods' heads (default: the recipe's,
    /// 1e-4 paper, 1e-3 jury-v1).
    #[arg(long)]
    pub lr: Option<f64>,
    /// Examples per training step of the context-dependent methods (default: the
    /// recipe's, 8 paper; 256 frozen and 32 fine-tuned with jury-v1).
    #[arg(long)]
    pub batch: Option<usize>,
    /// Starting skills of the skillagg methods: a probability in (0.5, 1) for every judge
    /// and class, or `ds`: each judge's P(b=0|c=0), P(b=1|c=1) as estimated by
    /// Dawid-Skene (with the --ds-* settings; binary judgments). Default: the recipe's,
    /// 0.7 paper, 0.8 jury-v1.
    #[arg(long)]
    #[serde(serialize_with = "opt_as_text", deserialize_with = "opt_from_text")]
    pub skill_init: Option<SkillStart>,
    /// Root of jury's on-disk caches: DIR/embeddings (frozen-encoder embeddings) and
    /// DIR/finetune (fine-tuning checkpoints, which a long run resumes from); put it on a
    /// disk that outlives the machine for runs that span sessions. Default
    /// $XDG_CACHE_HOME/jury, else ~/.cache/jury.
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
}

impl Default for AggregateOptions {
    fn default() -> Self {
        Self {
            methods: vec![Method::Recommended, Method::Avg, Method::Mv, Method::Ds],
            ties: Ties::Positive,
            seed: 0,
            ds_prior: DsPrior::Learned,
            ds_init: DsInit::Mv,
            ds_max_iter: 100,
            ds_tol: 1e-5,
            ds_stop: DsStop::Objective,
            care_gamma: Care::DEFAULT_GAMMA,
            gauss_steps: CorrelatedGaussian::DEFAULT_STEPS,
            care_gauss_steps: CareGaussian::DEFAULT_STEPS,
            contexts: None,
            dev_size: 250,
            seeds: 5,
            first_seed: 0,
            recipe: RecipeName::Paper,
            encoder: EncoderMode::Frozen,
            encoder_dir: "models/all-MiniLM-L6-v2".into(),
            device: ComputeDevice::Cpu,
            max_tokens: None,
            split_fields: false,
            epochs: None,
            lambdas: None,
            hidden: 0,
            lr: None,
            batch: None,
            skill_init: None,
            cache_dir: None,
        }
    }
}

impl AggregateOptions {
    /// Whether a context-dependent method is named (it needs contexts).
    pub fn wants_contexts(&self) -> bool {
        self.methods.iter().any(|m| m.neural().is_some())
    }
}

/// A list written as a YAML list or, as older configs do, one comma-separated string;
/// a bad entry is named in the error.
fn one_or_list<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    list_of(serde_json::Value::deserialize(d)?)
}

fn list_of<T: serde::de::DeserializeOwned, E: serde::de::Error>(v: serde_json::Value) -> Result<Vec<T>, E> {
    use serde_json::Value;
    let entry = |v: Value| {
        let shown = v.to_string();
        serde_json::from_value::<T>(v).map_err(|e| E::custom(format!("{shown}: {e}")))
    };
    match v {
        Value::Array(items) => items.into_iter().map(entry).collect(),
        Value::String(s) => s
            .split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            // A number inside the string ("0.01,0.1") is read as a number.
            .map(|x| entry(serde_json::from_str(x).unwrap_or_else(|_| Value::String(x.to_owned()))))
            .collect(),
        one => Ok(vec![entry(one)?]),
    }
}

/// [`one_or_list`] for an optional list (absent or null: `None`).
fn some_list<'de, D>(d: D) -> Result<Option<Vec<f64>>, D::Error>
where
    D: Deserializer<'de>,
{
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Null => Ok(None),
        v => list_of(v).map(Some),
    }
}

fn opt_as_text<S: Serializer, T: std::fmt::Display>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.collect_str(v),
        None => s.serialize_none(),
    }
}

/// [`from_text`] for an optional value (absent or null: `None`).
fn opt_from_text<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: std::str::FromStr<Err = String>,
{
    Option::<TextForm>::deserialize(d)?.map(|f| f.text().parse().map_err(serde::de::Error::custom)).transpose()
}

fn as_text<S: Serializer, T: std::fmt::Display>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// A value written as text (`cuda:1`) or, for a number, as a number (`skill_init: 0.7`).
fn from_text<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: std::str::FromStr<Err = String>,
{
    TextForm::deserialize(d)?.text().parse().map_err(serde::de::Error::custom)
}

/// How [`from_text`] values are written.
#[derive(Deserialize)]
#[serde(untagged)]
enum TextForm {
    Text(String),
    Number(f64),
}

impl TextForm {
    fn text(self) -> String {
        match self {
            Self::Text(s) => s,
            Self::Number(x) => x.to_string(),
        }
    }
}

/// Everything the methods need besides the data, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub(crate) methods: Vec<Method>,
    pub(crate) ties: TieBreak,
    pub(crate) ds: DawidSkeneConfig,
    pub(crate) care_gamma: f64,
    pub(crate) gauss_steps: usize,
    pub(crate) care_gauss_steps: usize,
    pub(crate) neural: Vec<NeuralMethod>,
    /// The context-dependent methods' settings, with the encoder as written until
    /// [`Settings::resolve_encoder`] finds it.
    pub(crate) neural_opts: Option<NeuralOptions>,
    pub(crate) contexts: Option<PathBuf>,
    /// Seeds the methods with random starts (MACE).
    pub(crate) seed: u64,
}

impl Settings {
    /// Checks the options; reads no file.
    pub fn new(a: &AggregateOptions) -> Result<Self, StudyError> {
        let bad = |flag: &'static str, reason: String| StudyError::Option { flag, reason };
        let ties = match a.ties {
            Ties::Positive => TieBreak::Positive,
            Ties::Negative => TieBreak::Negative,
            Ties::Random => TieBreak::Random { seed: a.seed },
        };
        let prior = match a.ds_prior {
            DsPrior::Uniform => ClassPrior::Uniform,
            DsPrior::Learned => ClassPrior::Learned,
        };
        let init = match a.ds_init {
            DsInit::Mv => EmInit::MajorityVote,
            DsInit::Random => EmInit::Random { seed: a.seed },
        };
        if !(a.ds_tol.is_finite() && a.ds_tol >= 0.0) {
            return Err(bad("--ds-tol", format!("{}: expected a finite number, 0 or more", a.ds_tol)));
        }
        let stop = match a.ds_stop {
            DsStop::Objective => EmStop::Objective,
            DsStop::Params => EmStop::Params,
        };
        let ds = DawidSkeneConfig { prior, init, max_iter: a.ds_max_iter, tol: a.ds_tol, stop, ties };
        if !(a.care_gamma.is_finite() && a.care_gamma > 0.0) {
            return Err(bad("--care-gamma", format!("{}: expected a finite number above 0", a.care_gamma)));
        }
        if a.gauss_steps == 0 {
            return Err(bad("--gauss-steps", "expected 1 or more".into()));
        }
        if a.care_gauss_steps == 0 {
            return Err(bad("--care-gauss-steps", "expected 1 or more".into()));
        }
        if a.methods.is_empty() {
            return Err(bad("--methods", "is empty".into()));
        }
        let mut methods: Vec<Method> = Vec::new();
        for m in &a.methods {
            if !methods.contains(m) {
                methods.push(*m);
            }
        }
        let neural: Vec<NeuralMethod> = methods.iter().filter_map(|m| m.neural()).collect();
        methods.retain(|m| m.neural().is_none());
        let neural_opts = if neural.is_empty() { None } else { Some(neural_options(a, ds)?) };
        if neural_opts.is_some() && a.contexts.is_none() {
            return Err(StudyError::NeedsContexts);
        }
        Ok(Self {
            methods,
            ties,
            ds,
            care_gamma: a.care_gamma,
            gauss_steps: a.gauss_steps,
            care_gauss_steps: a.care_gauss_steps,
            neural,
            neural_opts,
            contexts: a.contexts.clone(),
            seed: a.seed,
        })
    }

    /// Finds the encoder the options name (a local folder, or a hub id in the hub cache,
    /// fetched unless offline): the only step of these settings that touches files.
    pub fn resolve_encoder(&mut self) -> Result<(), StudyError> {
        if let Some(opts) = &mut self.neural_opts {
            let spec = opts.encoder_dir.clone();
            opts.encoder_dir = jury_neural::encoder_dir::resolve(&spec)
                .map_err(|source| StudyError::Encoder { spec, source: Box::new(source) })?;
        }
        Ok(())
    }

    /// The context text the recipe of the context-dependent methods reads, for a run
    /// that writes its examples' contexts itself; `None` without such methods.
    pub fn context_style(&self) -> Option<jury_datasets::ContextStyle> {
        self.neural_opts.as_ref().map(|o| match o.recipe {
            Recipe::Paper => jury_datasets::ContextStyle::Paper,
            Recipe::JuryV1 => jury_datasets::ContextStyle::Fields,
        })
    }

    /// The examples' contexts file the context-dependent methods read, when named.
    pub fn contexts(&self) -> Option<&std::path::Path> {
        self.contexts.as_deref()
    }

    /// Reads the examples' contexts from `path` instead (a run's own contexts file, read
    /// from its staging folder before it is published).
    pub fn read_contexts_from(&mut self, path: PathBuf) {
        if self.neural_opts.is_some() {
            self.contexts = Some(path);
        }
    }

    /// Whether `n_labeled` labeled examples leave a test set beside the dev set of the
    /// context-dependent methods: `jury run` asks before judging (the study checks the
    /// judged examples again before any embedding).
    pub fn check_labeled(&self, n_labeled: usize) -> Result<(), StudyError> {
        match &self.neural_opts {
            Some(opts) if n_labeled <= opts.dev_size => {
                Err(StudyError::TooFewLabels { labeled: n_labeled, dev_size: opts.dev_size })
            }
            _ => Ok(()),
        }
    }
}

/// The context-dependent methods' settings, checked (the encoder not yet resolved).
fn neural_options(a: &AggregateOptions, ds: DawidSkeneConfig) -> Result<NeuralOptions, StudyError> {
    let bad = |flag: &'static str, reason: String| StudyError::Option { flag, reason };
    let finetune = a.encoder == EncoderMode::Finetune;
    let recipe = a.recipe.recipe();
    let lambdas = a.lambdas.clone().unwrap_or_else(|| recipe.lambdas());
    if lambdas.is_empty() || lambdas.iter().any(|l| !(l.is_finite() && *l >= 0.0)) {
        return Err(bad("--lambdas", format!("{lambdas:?}: expected finite non-negative numbers")));
    }
    let lr = a.lr.unwrap_or_else(|| recipe.lr());
    if !(lr.is_finite() && lr > 0.0 && lr <= 1.0) {
        return Err(bad("--lr", format!("{lr}: expected a learning rate in (0, 1]")));
    }
    let epochs = a.epochs.unwrap_or_else(|| recipe.epochs());
    if a.first_seed.checked_add(a.seeds as u64).is_none() {
        return Err(bad("--first-seed", format!("{} plus --seeds {} overflows", a.first_seed, a.seeds)));
    }
    if a.seeds == 0 || epochs == 0 || a.dev_size == 0 {
        return Err(bad("--seeds, --epochs and --dev-size", "must be at least 1".into()));
    }
    if a.batch == Some(0) {
        return Err(bad("--batch", "must be at least 1".into()));
    }
    if a.split_fields && finetune {
        return Err(bad("--split-fields", "takes the frozen encoder (--encoder frozen)".into()));
    }
    Ok(NeuralOptions {
        encoder_dir: a.encoder_dir.clone(),
        finetune,
        device: a.device,
        dev_size: a.dev_size,
        seeds: a.seeds,
        first_seed: a.first_seed,
        max_tokens: a.max_tokens.unwrap_or(match recipe {
            Recipe::Paper => 512,
            Recipe::JuryV1 => 128,
        }),
        split_fields: a.split_fields,
        epochs,
        lambdas,
        hidden: a.hidden,
        lr,
        batch: a.batch.unwrap_or_else(|| recipe.batch(finetune)),
        cache_dir: a.cache_dir.clone().unwrap_or_else(jury_cache::default_root),
        skill_init: match a.skill_init {
            None => SkillInit::Uniform(recipe.skill_init()),
            Some(SkillStart::Uniform(p)) => SkillInit::Uniform(p),
            Some(SkillStart::DawidSkene) => SkillInit::DawidSkene(ds),
        },
        recipe,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        options: AggregateOptions,
    }

    fn flags(args: &[&str]) -> AggregateOptions {
        Flags::try_parse_from(std::iter::once("jury").chain(args.iter().copied())).unwrap().options
    }

    /// Flags and YAML fill the same struct with the same defaults.
    #[test]
    fn flags_and_yaml_agree() {
        assert_eq!(flags(&[]), AggregateOptions::default());
        let yaml: AggregateOptions = serde_yaml::from_str("{}").unwrap();
        assert_eq!(yaml, AggregateOptions::default());
        let f = flags(&[
            "--methods",
            "ds,skillagg-x",
            "--contexts",
            "c.csv",
            "--hidden",
            "256",
            "--skill-init",
            "ds",
            "--split-fields",
            "--lambdas",
            "0.05,0.5",
            "--device",
            "cuda:1",
            "--ties",
            "no",
        ]);
        let y: AggregateOptions = serde_yaml::from_str(
            "methods: [ds, skillagg-x]\ncontexts: c.csv\nhidden: 256\nskill_init: ds\nsplit_fields: true\n\
             lambdas: [0.05, 0.5]\ndevice: cuda:1\nties: no\n",
        )
        .unwrap();
        assert_eq!(f, y);
        assert_eq!(f.methods, vec![Method::Ds, Method::SkillAggX]);
        assert_eq!(f.device, ComputeDevice::Cuda(1));
        assert_eq!(f.ties, Ties::Negative);
    }

    /// What `jury run` writes as the resolved config names every choice as its flag
    /// does, and reads back to the same options.
    #[test]
    fn written_options_name_choices_as_the_flags_do() {
        for (recipe, ties, init) in [("paper", "positive", "mv"), ("jury-v1", "random", "random")] {
            let f =
                flags(&["--recipe", recipe, "--ties", ties, "--ds-init", init, "--methods", "recommended,skillagg-x"]);
            let yaml = serde_yaml::to_string(&f).unwrap();
            for line in [format!("recipe: {recipe}"), format!("ties: {ties}"), format!("ds_init: {init}")] {
                assert!(yaml.lines().any(|l| l == line), "`{line}` not in\n{yaml}");
            }
            assert!(yaml.contains("- recommended\n- skillagg-x\n"), "{yaml}");
            assert_eq!(serde_yaml::from_str::<AggregateOptions>(&yaml).unwrap(), f);
        }
        let err = serde_yaml::from_str::<AggregateOptions>("recipe: Paper\n").unwrap_err().to_string();
        assert!(err.contains("`paper`, `jury-v1`"), "{err}");
    }

    /// Configs written before the lists were lists still read.
    #[test]
    fn comma_separated_strings_still_read() {
        let y: AggregateOptions =
            serde_yaml::from_str("methods: avg, mv,ds\nlambdas: 0.01,1\nskill_init: 0.7\n").unwrap();
        assert_eq!(y.methods, vec![Method::Avg, Method::Mv, Method::Ds]);
        assert_eq!(y.lambdas, Some(vec![0.01, 1.0]));
        assert_eq!(y.skill_init, Some(SkillStart::Uniform(0.7)));
        let round: AggregateOptions = serde_yaml::from_str(&serde_yaml::to_string(&y).unwrap()).unwrap();
        assert_eq!(round, y);
        let err = serde_yaml::from_str::<AggregateOptions>("methods: avg,wisdom\n").unwrap_err().to_string();
        assert!(err.contains("wisdom"), "{err}");
        let err = serde_yaml::from_str::<AggregateOptions>("skill_init: 0.3\n").unwrap_err().to_string();
        assert!(err.contains("`0.3`"), "{err}");
    }

    /// Each bad setting is refused by its flag, before any file is read (the encoder
    /// folder here does not exist).
    #[test]
    fn settings_refuse_bad_values_without_reading_files() {
        let neural = AggregateOptions {
            methods: vec![Method::Avg, Method::SkillAgg],
            contexts: Some("c.csv".into()),
            encoder_dir: "/nonexistent/encoder".into(),
            ..AggregateOptions::default()
        };
        let s = Settings::new(&neural).unwrap();
        assert_eq!(s.methods, vec![Method::Avg]);
        assert_eq!(s.neural, vec![NeuralMethod::SkillAgg]);
        let opts = s.neural_opts.unwrap();
        assert_eq!(opts.cache_dir, jury_cache::default_root());
        assert_eq!((opts.batch, opts.lr, opts.epochs, opts.max_tokens), (8, 1e-4, 10, 512));
        assert_eq!(opts.lambdas, vec![0.05, 0.1, 0.2, 0.5]);
        assert_eq!((opts.recipe, opts.skill_init), (Recipe::Paper, SkillInit::Uniform(0.7)));
        let v1 = Settings::new(&AggregateOptions { recipe: RecipeName::JuryV1, ..neural.clone() }).unwrap();
        let v1 = v1.neural_opts.unwrap();
        assert_eq!((v1.batch, v1.lr, v1.epochs, v1.max_tokens), (256, 1e-3, 20, 128));
        assert_eq!((v1.lambdas, v1.skill_init), (vec![0.01, 0.1, 1.0], SkillInit::Uniform(0.8)));
        for (bad, flag) in [
            (AggregateOptions { lr: Some(f64::NAN), ..neural.clone() }, "--lr"),
            (AggregateOptions { lr: Some(-1.0), ..neural.clone() }, "--lr"),
            (AggregateOptions { lambdas: Some(vec![]), ..neural.clone() }, "--lambdas"),
            (AggregateOptions { lambdas: Some(vec![f64::INFINITY]), ..neural.clone() }, "--lambdas"),
            (AggregateOptions { seeds: 0, ..neural.clone() }, "--seeds"),
            (AggregateOptions { batch: Some(0), ..neural.clone() }, "--batch"),
            (AggregateOptions { first_seed: u64::MAX, ..neural.clone() }, "--first-seed"),
            (
                AggregateOptions {
                    split_fields: true,
                    encoder: EncoderMode::Finetune,
                    recipe: RecipeName::JuryV1,
                    ..neural.clone()
                },
                "--split-fields",
            ),
            (AggregateOptions { contexts: None, ..neural.clone() }, "--contexts FILE"),
            (AggregateOptions { ds_tol: -1.0, ..neural.clone() }, "--ds-tol"),
            (AggregateOptions { care_gamma: 0.0, ..neural.clone() }, "--care-gamma"),
            (AggregateOptions { gauss_steps: 0, ..neural.clone() }, "--gauss-steps"),
            (AggregateOptions { care_gauss_steps: 0, ..neural.clone() }, "--care-gauss-steps"),
            (AggregateOptions { methods: vec![], ..neural.clone() }, "--methods"),
        ] {
            let err = Settings::new(&bad).unwrap_err().to_string();
            assert!(err.contains(flag), "{flag}: {err}");
        }
        let s =
            Settings::new(&AggregateOptions { methods: vec![Method::Mv, Method::Mv], ..Default::default() }).unwrap();
        assert_eq!((s.methods, s.neural_opts), (vec![Method::Mv], None));
    }
}
