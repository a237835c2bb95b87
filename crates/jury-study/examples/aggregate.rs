//! Aggregation and scoring through the libraries alone, without the `jury` binary:
//! `cargo run -p jury-study --example aggregate -- judgments.csv labels.csv`
//! (for example the files `jury simulate --out sim` writes).
use jury_study::{AggregateOptions, Method, Settings};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [judgments, labels] = &args[..] else { return Err("usage: aggregate JUDGMENTS LABELS".into()) };
    let judgments = jury_io::read_judgments(judgments.as_ref())?;
    let (labels, _unmatched) = jury_io::read_labels(labels.as_ref(), &judgments)?;
    let options = AggregateOptions { methods: vec![Method::Avg, Method::Mv, Method::Ds], ..Default::default() };
    let study = jury_study::run(&judgments, Some(&labels), &Settings::new(&options)?, &|_| {})?;
    // Each judge's and each method's accuracy, Brier score and ECE against the labels.
    print!("{}", study.table());
    Ok(())
}
