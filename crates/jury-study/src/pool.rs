//! Pools the seeds of several `jury aggregate` runs (each a `--first-seed N --seeds M`
//! share of one experiment) into what a single run over all of them reports, so seeds
//! can run on separate machines.
//!
//! A seed's dev set, initialisation, batch order and checkpoints depend on the seed
//! alone, so such runs pool exactly when they share the data and every setting but the
//! seeds. What metrics.json shows of that is checked: the same examples, the same
//! methods, the same dev size, no seed twice, one result per seed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use jury_io::{MethodMetrics, Metrics, Named, OverSeeds, PooledMethod, PooledSeeds};
use jury_metrics::mean_std;

/// Why runs cannot be pooled, naming the metrics.json at fault.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("no runs to pool")]
    NoRuns,
    #[error("{}: no dev_sets (not a run of the context-dependent methods)", path.display())]
    NotSeeded { path: PathBuf },
    #[error("{}: {what} {got}, {} has {want}", path.display(), first.display())]
    Differs { path: PathBuf, first: PathBuf, what: String, got: String, want: String },
    #[error("seed {seed} is in both {} and {}", first.display(), second.display())]
    SeedTwice { seed: u64, first: PathBuf, second: PathBuf },
    #[error("{}: {method} has {got} results for {want} seeds", path.display())]
    SeedCount { path: PathBuf, method: String, got: usize, want: usize },
}

/// One run to pool: its metrics.json and where it was read from.
pub struct SeedRun {
    pub path: PathBuf,
    pub metrics: Metrics,
}

impl SeedRun {
    /// The run's seeds: metrics.json's `seeds`, or 0.. for files written before it.
    fn seeds(&self) -> Result<Vec<u64>, PoolError> {
        let dev_sets =
            self.metrics.dev_sets.as_ref().ok_or_else(|| PoolError::NotSeeded { path: self.path.clone() })?;
        Ok(self.metrics.seeds.clone().unwrap_or_else(|| (0..dev_sets.len() as u64).collect()))
    }

    fn neural(&self) -> impl Iterator<Item = (&str, &jury_io::NeuralMetrics)> {
        self.metrics.methods.0.iter().filter_map(|(n, m)| match m {
            MethodMetrics::Neural(m) => Some((n.as_str(), m)),
            MethodMetrics::ContextFree(_) => None,
        })
    }

    /// The context-free methods scored on the context-dependent methods' test splits.
    fn free(&self) -> impl Iterator<Item = (&str, &OverSeeds)> {
        self.metrics.methods.0.iter().filter_map(|(n, m)| match m {
            MethodMetrics::ContextFree(m) => m.outside_dev.as_ref().map(|o| (n.as_str(), o)),
            MethodMetrics::Neural(_) => None,
        })
    }

    fn names(&self, of: impl Iterator<Item = String>) -> String {
        let mut v: Vec<String> = of.collect();
        v.sort();
        v.join(", ")
    }
}

/// The pooled figures: the context-dependent methods first, then the context-free ones
/// on the same test splits, each by name.
pub fn pool_seeds(runs: &[SeedRun]) -> Result<PooledSeeds, PoolError> {
    let first = runs.first().ok_or(PoolError::NoRuns)?;
    let differs = |r: &SeedRun, what: &str, got: String, want: String| PoolError::Differs {
        path: r.path.clone(),
        first: first.path.clone(),
        what: what.to_owned(),
        got,
        want,
    };
    let neural_names = |r: &SeedRun| r.names(r.neural().map(|(n, _)| n.to_owned()));
    let free_names = |r: &SeedRun| r.names(r.free().map(|(n, _)| n.to_owned()));
    let mut owner: BTreeMap<u64, &Path> = BTreeMap::new();
    for r in runs {
        let seeds = r.seeds()?;
        if r.metrics.n_examples != first.metrics.n_examples {
            let (got, want) = (r.metrics.n_examples.to_string(), first.metrics.n_examples.to_string());
            return Err(differs(r, "n_examples", got, want));
        }
        if neural_names(r) != neural_names(first) {
            return Err(differs(r, "context-dependent methods", neural_names(r), neural_names(first)));
        }
        if free_names(r) != free_names(first) {
            return Err(differs(r, "context-free methods", free_names(r), free_names(first)));
        }
        for &s in &seeds {
            if let Some(before) = owner.insert(s, &r.path) {
                return Err(PoolError::SeedTwice { seed: s, first: before.to_owned(), second: r.path.clone() });
            }
        }
        for (name, m) in r.neural() {
            let m0 = first.neural().find(|(n, _)| *n == name).map(|(_, m0)| m0).expect("same method names");
            if m.dev_size != m0.dev_size {
                return Err(differs(r, &format!("{name} dev_size"), m.dev_size.to_string(), m0.dev_size.to_string()));
            }
        }
        let counts = r.neural().map(|(n, m)| (n, m.seeds.len())).chain(r.free().map(|(n, o)| (n, o.seeds.len())));
        for (name, got) in counts {
            if got != seeds.len() {
                let (path, method) = (r.path.clone(), name.to_owned());
                return Err(PoolError::SeedCount { path, method, got, want: seeds.len() });
            }
        }
    }
    let order: Vec<u64> = owner.keys().copied().collect();
    let mut methods = Vec::new();
    let names = first.neural().map(|(n, _)| n.to_owned()).chain(first.free().map(|(n, _)| n.to_owned()));
    for name in names.collect::<Vec<_>>() {
        let (mut accuracy, mut context) = (BTreeMap::new(), BTreeMap::new());
        let context_free = first.neural().all(|(n, _)| n != name);
        for r in runs {
            let seeds = r.seeds()?;
            let (accs, ctx) = match r.neural().find(|(n, _)| *n == name) {
                Some((_, m)) => (&m.seeds, m.context_accuracy.as_ref().map(|c| &c.seeds)),
                None => (&r.free().find(|(n, _)| *n == name).map(|(_, o)| o).expect("checked names").seeds, None),
            };
            accuracy.extend(seeds.iter().copied().zip(accs.iter().copied()));
            if let Some(ctx) = ctx.filter(|c| c.len() == seeds.len()) {
                context.extend(seeds.iter().copied().zip(ctx.iter().copied()));
            }
        }
        let over = |by_seed: &BTreeMap<u64, f64>| {
            let seeds: Vec<f64> = order.iter().map(|s| by_seed[s]).collect();
            let (accuracy, std) = mean_std(&seeds);
            OverSeeds { accuracy, std, seeds }
        };
        let context_accuracy = (context.len() == order.len()).then(|| over(&context));
        methods.push((name, PooledMethod { over: over(&accuracy), context_free, context_accuracy }));
    }
    Ok(PooledSeeds { seeds: order, methods: Named(methods) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run of seeds `seeds` with one context-dependent method (test accuracies `acc`,
    /// context model `ctx`) and majority vote on the same splits (`mv`).
    fn run(path: &str, n_examples: usize, seeds: &[u64], acc: &[f64], ctx: &[f64], mv: &[f64]) -> SeedRun {
        let over = |v: &[f64]| serde_json::json!({"accuracy": 0.0, "std": 0.0, "seeds": v});
        let json = serde_json::json!({
            "n_examples": n_examples, "n_judges": 2, "n_classes": 2, "n_labeled": n_examples,
            "judges": {}, "seeds": seeds, "dev_sets": seeds.iter().map(|_| vec!["e1"]).collect::<Vec<_>>(),
            "methods": {
                "mv": {"accuracy": 0.5, "brier": null, "ece": null, "seconds": 0.0, "ties": 0, "unjudged": 0,
                       "outside_dev": over(mv)},
                "skillagg": {"accuracy": 0.0, "std": 0.0, "seeds": acc, "dev_accuracy": acc,
                             "chosen": [], "dev_size": 5, "seconds": 0.0, "embedding_seconds": 0.0,
                             "context_accuracy": over(ctx), "brier": null, "ece": null},
            },
        });
        SeedRun { path: PathBuf::from(path), metrics: serde_json::from_value(json).unwrap() }
    }

    #[test]
    fn pooled_runs_report_what_one_run_over_their_seeds_does() {
        let a = run("a", 10, &[2], &[0.7], &[0.6], &[0.5]);
        let b = run("b", 10, &[0, 1], &[0.8, 0.9], &[0.65, 0.7], &[0.55, 0.6]);
        let p = pool_seeds(&[a, b]).unwrap();
        assert_eq!(p.seeds, [0, 1, 2]);
        let (name, sa) = &p.methods.0[0];
        assert_eq!((name.as_str(), sa.context_free), ("skillagg", false));
        assert_eq!(sa.over.seeds, [0.8, 0.9, 0.7]);
        let (mean, std) = mean_std(&[0.8, 0.9, 0.7]);
        assert_eq!((sa.over.accuracy, sa.over.std), (mean, std));
        assert!((std - 0.1).abs() < 1e-12, "{std}");
        assert_eq!(sa.context_accuracy.as_ref().unwrap().seeds, [0.65, 0.7, 0.6]);
        let (name, mv) = &p.methods.0[1];
        assert_eq!((name.as_str(), mv.context_free, &mv.over.seeds[..]), ("mv", true, &[0.55, 0.6, 0.5][..]));
    }

    #[test]
    fn runs_that_do_not_pool_are_refused_naming_the_file() {
        let a = || run("a.json", 10, &[0], &[0.7], &[0.6], &[0.5]);
        let err = |runs: Vec<SeedRun>| pool_seeds(&runs).unwrap_err().to_string();
        assert_eq!(err(vec![a(), a()]), "seed 0 is in both a.json and a.json");
        let other = run("b.json", 11, &[1], &[0.7], &[0.6], &[0.5]);
        assert_eq!(err(vec![a(), other]), "b.json: n_examples 11, a.json has 10");
        let short = run("c.json", 10, &[1, 2], &[0.7], &[0.6, 0.6], &[0.5, 0.5]);
        assert_eq!(err(vec![a(), short]), "c.json: skillagg has 1 results for 2 seeds");
        let mut unseeded = a();
        unseeded.metrics.dev_sets = None;
        assert!(err(vec![unseeded]).contains("no dev_sets"));
        assert_eq!(err(vec![]), "no runs to pool");
    }
}
