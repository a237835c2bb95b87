//! Aggregation and scoring through the libraries alone, without the `jury` binary:
//! `cargo run -p jury-runner --example aggregate -- judgments.csv labels.csv`
//! (for example the files `jury simulate --out sim` writes).
use jury_aggregate::{Aggregator, AverageProb, DawidSkene, DawidSkeneConfig, MajorityVote, TieBreak};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [judgments, labels] = &args[..] else { return Err("usage: aggregate JUDGMENTS LABELS".into()) };
    let judgments = jury_io::read_judgments(judgments.as_ref())?;
    let (labels, _unmatched) = jury_io::read_labels(labels.as_ref(), &judgments)?;
    let ties = TieBreak::Positive;
    let methods: [Box<dyn Aggregator>; 3] = [
        Box::new(AverageProb { ties }),
        Box::new(MajorityVote { ties }),
        Box::new(DawidSkene::new(DawidSkeneConfig::default())),
    ];
    for method in methods {
        let result = method.aggregate(&judgments)?;
        let accuracy = jury_metrics::accuracy(result.labels(), &labels).ok_or("no labeled example")?;
        println!("{:<4} accuracy {accuracy:.4} over {} examples", method.name(), judgments.n_examples());
    }
    Ok(())
}
