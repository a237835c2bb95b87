//! Judges that score or classify each item alone: FaithBench's hallucination detectors,
//! FRANK's factuality metrics, ICE-Score's code metrics, SALT's zero-shot classifiers,
//! WMT20's segment-level MT metrics and the CARE authors' CivilComments raters.

use std::collections::{BTreeMap, HashMap};
use std::io::Read as _;
use std::path::Path;

use serde_json::Value;

use super::{
    Builder, Insertion, Ordered, delimited, fail, json, listing, number, sigmoid, six_significant, standardised, text,
};
use crate::{DatasetError, ReleasedJury, read};

fn severity(label: &str) -> Option<u8> {
    match label {
        "Benign" => Some(1),
        "Questionable" => Some(2),
        "Unwanted" | "Unwanted.Intrinsic" | "Unwanted.Extrinsic" => Some(3),
        _ => None,
    }
}

/// FaithBench: HHEM's three scores and five detectors' 0/1 on each summary, the label
/// faithful unless an annotator marked a span Questionable or worse.
pub fn faithbench(input: &Path) -> Result<ReleasedJury, DatasetError> {
    let dir = input.join("data_for_release");
    let mut batches: Vec<(u32, std::path::PathBuf)> = listing(&dir, |_| true)?
        .into_iter()
        .filter_map(|(name, path)| Some((name.strip_prefix("batch_")?.strip_suffix(".json")?.parse().ok()?, path)))
        .collect();
    if batches.is_empty() {
        return Err(fail(&dir, "no batch_*.json"));
    }
    batches.sort();
    let mut b = Builder::default();
    for (batch, path) in batches {
        let data = json(&path)?;
        let samples = data.get("samples").and_then(Value::as_array).ok_or_else(|| fail(&path, "no samples"))?;
        for s in samples {
            let id = s.get("sample_id").and_then(number).ok_or_else(|| fail(&path, "a sample without sample_id"))?;
            let ex = format!("faithbench-b{batch:02}-{:03}", id as i64);
            if b.labels.contains_key(&ex) {
                return Err(fail(&path, format!("duplicate example {ex}")));
            }
            let meta = s.get("metadata").ok_or_else(|| fail(&path, format!("{ex}: no metadata")))?;
            let mut votes = Vec::new();
            for j in ["hhemv1", "hhem-2.1", "hhem-2.1-english"] {
                if let Some(v) = meta.get(j).filter(|v| !v.is_null()) {
                    let v = number(v).filter(|v| (0.0..=1.0).contains(v));
                    votes.push((j, v.ok_or_else(|| fail(&path, format!("{ex}: {j} outside [0, 1]")))?));
                }
            }
            for j in ["trueteacher", "true_nli", "gpt-3.5-turbo", "gpt-4-turbo", "gpt_4o"] {
                if let Some(v) = meta.get(j).filter(|v| !v.is_null()) {
                    let v = match v {
                        Value::Bool(b) => Some(f64::from(u8::from(*b))),
                        Value::Number(n) => n.as_f64().filter(|x| *x == 0.0 || *x == 1.0),
                        _ => None,
                    };
                    votes.push((j, v.ok_or_else(|| fail(&path, format!("{ex}: {j} is not 0/1")))?));
                }
            }
            if votes.is_empty() {
                continue;
            }
            let mut worst = 0;
            for ann in s.get("annotations").and_then(Value::as_array).into_iter().flatten() {
                for lab in ann.get("label").and_then(Value::as_array).into_iter().flatten() {
                    let lab = text(lab);
                    let level =
                        severity(&lab).ok_or_else(|| fail(&path, format!("{ex}: unknown annotation label {lab:?}")))?;
                    worst = worst.max(level);
                }
            }
            b.labels.insert(ex.clone(), usize::from(worst < 2));
            for (j, v) in votes {
                b.vote(&ex, j, v);
            }
        }
    }
    Ok(b.finish())
}

/// FRANK: the baseline factuality metrics' scores on each summary, standardised per
/// metric; the label factual (the annotators' Factuality 1). `split`: all, valid or test.
pub fn frank(input: &Path, split: &str) -> Result<ReleasedJury, DatasetError> {
    let human_path = input.join("data").join("human_annotations.json");
    let metrics_path = input.join("data").join("baseline_factuality_metrics_outputs.json");
    let human = json(&human_path)?;
    let mut labels = BTreeMap::new();
    for h in human.as_array().ok_or_else(|| fail(&human_path, "not a JSON array"))? {
        if split != "all" && h.get("split").map(text).as_deref() != Some(split) {
            continue;
        }
        let ex = frank_id(h.get("hash"), h.get("model_name"));
        let factual =
            h.get("Factuality").and_then(number).ok_or_else(|| fail(&human_path, format!("{ex}: no Factuality")))?;
        if labels.insert(ex.clone(), usize::from(factual == 1.0)).is_some() {
            return Err(fail(&human_path, format!("duplicate example {ex}")));
        }
    }
    let metrics: Vec<Ordered> = serde_json::from_str(&read(&metrics_path)?).map_err(|e| DatasetError::Line {
        path: metrics_path.clone(),
        line: e.line() as u64,
        reason: e.to_string(),
    })?;
    let first = metrics.first().ok_or_else(|| fail(&metrics_path, "no rows"))?;
    let judges: Vec<&str> = first
        .0
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| !["hash", "model_name", "dataset", "split"].contains(k))
        .collect();
    let mut scores: Vec<Insertion> = judges.iter().map(|_| Insertion::default()).collect();
    for m in &metrics {
        let row: HashMap<&str, &Value> = m.0.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let ex = frank_id(row.get("hash").copied(), row.get("model_name").copied());
        if !labels.contains_key(&ex) {
            continue;
        }
        for (j, judge) in judges.iter().enumerate() {
            let v = row.get(judge).and_then(|v| match v {
                Value::Bool(b) => Some(f64::from(u8::from(*b))),
                other => number(other),
            });
            if let Some(v) = v.filter(|v| !v.is_nan()) {
                scores[j].set(ex.clone(), v);
            }
        }
    }
    let scores: Vec<(String, Vec<(String, f64)>)> =
        judges.iter().zip(scores).map(|(j, s)| (j.to_lowercase().replace(' ', "-"), s.values)).collect();
    standardised(&metrics_path, &scores, labels)
}

/// A FRANK summary's id: its article hash and the model that wrote it.
fn frank_id(hash: Option<&Value>, model: Option<&Value>) -> String {
    let field = |v: Option<&Value>| v.map(text).unwrap_or_default();
    format!("frank-{}-{}", field(hash), field(model))
}

const HUMANEVAL_JUDGES: [(&str, &str); 12] = [
    ("bleu", "bleu"),
    ("codebleu", "codebleu"),
    ("chrf", "chrf"),
    ("rougel", "rouge-l"),
    ("meteor", "meteor"),
    ("ruby", "ruby"),
    ("codebertscore_f1", "codebertscore-f1"),
    ("codebertscore_f3", "codebertscore-f3"),
    ("codebertscore_s_f1", "codebertscore-src-f1"),
    ("codebertscore_s_f3", "codebertscore-src-f3"),
    ("gpt35_nsnr", "gpt35-noref"),
    ("gpt35_nswr", "gpt35-ref"),
];

/// ICE-Score's HumanEval grades: twelve metrics' scores on each generated program,
/// standardised per metric; the label the program passes its tests. `lang`: python, cpp,
/// java, js or all.
pub fn humaneval_ice(input: &Path, lang: &str) -> Result<ReleasedJury, DatasetError> {
    let langs: Vec<&str> = if lang == "all" { vec!["python", "cpp", "java", "js"] } else { vec![lang] };
    let mut labels = BTreeMap::new();
    let mut scores: Vec<Insertion> = HUMANEVAL_JUDGES.iter().map(|_| Insertion::default()).collect();
    let mut path = input.to_owned();
    for lang in langs {
        path = input.join("data").join("humaneval").join(format!("humaneval_{lang}_grade.json"));
        let problems: Vec<Ordered> = serde_json::from_str(&read(&path)?).map_err(|e| DatasetError::Line {
            path: path.clone(),
            line: e.line() as u64,
            reason: e.to_string(),
        })?;
        for prob in problems {
            let row: HashMap<&str, &Value> = prob.0.iter().map(|(k, v)| (k.as_str(), v)).collect();
            let task =
                row.get("task_id").and_then(|v| number(v)).ok_or_else(|| fail(&path, "a problem without task_id"))?;
            for (key, grade) in &prob.0 {
                let Some(k) = key.strip_prefix("grade-") else { continue };
                let kn: i64 = k.trim().parse().map_err(|_| fail(&path, format!("`{key}` is not grade-N")))?;
                let ex = format!("he-{lang}-{:03}-{kn:03}", task as i64);
                let execution = match grade.get("execution") {
                    Some(Value::Bool(b)) => Some(usize::from(*b)),
                    Some(v) => number(v).filter(|x| *x == 0.0 || *x == 1.0).map(|x| x as usize),
                    None => None,
                };
                let execution = execution.ok_or_else(|| fail(&path, format!("{ex}: execution {grade}")))?;
                if labels.insert(ex.clone(), execution).is_some() {
                    return Err(fail(&path, format!("duplicate example {ex}")));
                }
                for (j, (name, _)) in HUMANEVAL_JUDGES.iter().enumerate() {
                    if let Some(Value::Number(v)) = row.get(format!("{name}-{k}").as_str())
                        && let Some(v) = v.as_f64().filter(|v| v.is_finite())
                    {
                        scores[j].set(ex.clone(), v);
                    }
                }
            }
        }
    }
    let scores: Vec<(String, Vec<(String, f64)>)> =
        HUMANEVAL_JUDGES.iter().zip(scores).map(|((_, name), s)| ((*name).to_owned(), s.values)).collect();
    standardised(&path, &scores, labels)
}

/// SALT's CSS tasks: each model's zero-shot answer read as the task's verdict word, the
/// label the task's gold; a model answering fewer than `min_coverage` of the items is
/// left out (with a note). `task`: tempowic, reddit_humor or conv_go_awry.
pub fn salt_css(input: &Path, task: &str, min_coverage: f64) -> Result<ReleasedJury, DatasetError> {
    // The verdict words (lower case) and the gold values of class 1 and class 0.
    let (words, gold_map) = match task {
        "tempowic" => (["a", "b"], ["Same", "Different"]),
        "reddit_humor" | "conv_go_awry" => (["true", "false"], ["True", "False"]),
        other => return Err(fail(input, format!("unknown task `{other}`"))),
    };
    let class = |values: [&str; 2], v: &str| values.iter().position(|x| *x == v).map(|i| 1 - i);
    let d = input.join("css_data").join(task);
    let test_path = d.join("test.json");
    /// test.json's gold labels, in the file's order.
    #[derive(serde::Deserialize)]
    struct Test {
        labels: Ordered,
    }
    let test: Test = serde_json::from_str(&read(&test_path)?).map_err(|e| DatasetError::Line {
        path: test_path.clone(),
        line: e.line() as u64,
        reason: e.to_string(),
    })?;
    let gold: Vec<String> = test.labels.0.iter().map(|(_, v)| text(v)).collect();
    let n = gold.len();
    let width = n.saturating_sub(1).to_string().len();
    let id = |i: usize| format!("{task}-{i:0width$}");
    let mut b = Builder::default();
    for (i, g) in gold.iter().enumerate() {
        let label = class(gold_map, g);
        b.labels.insert(id(i), label.ok_or_else(|| fail(&test_path, format!("item {i}: unknown gold {g:?}")))?);
    }
    let mut rows = Vec::new();
    for (name, path) in listing(&d, |n| n.starts_with("answer-"))? {
        let judge = &name["answer-".len()..];
        let mut votes: BTreeMap<usize, usize> = BTreeMap::new();
        let content = read(&path)?.replace("\r\n", "\n").replace('\r', "\n");
        for line in content.split('\n').filter(|l| !l.trim().is_empty()) {
            let mut parts = line.splitn(3, '\t');
            let (Some(idx), Some(g), Some(raw)) = (parts.next(), parts.next(), parts.next()) else {
                return Err(fail(&path, format!("`{line}` is not index, gold and answer")));
            };
            let i: usize = idx.trim().parse().map_err(|_| fail(&path, format!("`{idx}` is not an item index")))?;
            if gold.get(i).map(String::as_str) != Some(g) {
                return Err(fail(&path, format!("item {i}: gold {g:?} but test.json says {:?}", gold.get(i))));
            }
            let answer = raw.replace('&', " ").split_whitespace().collect::<Vec<_>>().join(" ");
            let word: String = answer
                .trim_start_matches(['"', '\'', '(', '['])
                .chars()
                .take_while(char::is_ascii_alphabetic)
                .collect::<String>()
                .to_lowercase();
            if let Some(v) = class(words, &word) {
                votes.insert(i, v);
            }
        }
        if (votes.len() as f64) < min_coverage * n as f64 {
            b.notes.push(format!("{judge}: {} of {n} items answered, left out", votes.len()));
            continue;
        }
        rows.extend(votes.into_iter().map(|(i, v)| (id(i), judge.to_owned(), v as f64)));
    }
    rows.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    for (ex, judge, v) in rows {
        b.vote(&ex, &judge, v);
    }
    Ok(b.finish())
}

/// Python's `random.Random(seed).random()` (MT19937 seeded by `init_by_array`), so a
/// seed draws the same pair orders as the converter this replaced.
struct PythonRandom {
    mt: [u32; 624],
    index: usize,
}

impl PythonRandom {
    fn new(seed: u64) -> Self {
        let mut mt = [0u32; 624];
        mt[0] = 19_650_218;
        for i in 1..624 {
            mt[i] = 1_812_433_253u32.wrapping_mul(mt[i - 1] ^ (mt[i - 1] >> 30)).wrapping_add(i as u32);
        }
        let key: Vec<u32> = if seed == 0 {
            vec![0]
        } else {
            let mut k = Vec::new();
            let mut s = seed;
            while s > 0 {
                k.push(s as u32);
                s >>= 32;
            }
            k
        };
        let (mut i, mut j) = (1usize, 0usize);
        for _ in 0..624.max(key.len()) {
            mt[i] = (mt[i] ^ (mt[i - 1] ^ (mt[i - 1] >> 30)).wrapping_mul(1_664_525))
                .wrapping_add(key[j])
                .wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= 624 {
                mt[0] = mt[623];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..623 {
            mt[i] = (mt[i] ^ (mt[i - 1] ^ (mt[i - 1] >> 30)).wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= 624 {
                mt[0] = mt[623];
                i = 1;
            }
        }
        mt[0] = 0x8000_0000;
        Self { mt, index: 624 }
    }

    fn next_u32(&mut self) -> u32 {
        if self.index >= 624 {
            for k in 0..624 {
                let y = (self.mt[k] & 0x8000_0000) | (self.mt[(k + 1) % 624] & 0x7fff_ffff);
                let mag = if y & 1 == 1 { 0x9908_b0df } else { 0 };
                self.mt[k] = self.mt[(k + 397) % 624] ^ (y >> 1) ^ mag;
            }
            self.index = 0;
        }
        let mut y = self.mt[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    fn random(&mut self) -> f64 {
        let (a, b) = (self.next_u32() >> 5, self.next_u32() >> 6);
        (f64::from(a) * 67_108_864.0 + f64::from(b)) * (1.0 / 9_007_199_254_740_992.0)
    }
}

/// A metric's name as WMT's score files spell it.
fn wmt_name(col: &str) -> String {
    col.replace("_PLUS_", "+").replace("_DASH_", "-")
}

type SegScores = BTreeMap<String, HashMap<(String, String), f64>>;

/// {metric (agree-file spelling): {(segment, system): score}} of the segment-level
/// score files present for `lp` on newstest2020.
fn wmt_seg_scores(root: &Path, lp: &str) -> Result<(Vec<String>, SegScores), DatasetError> {
    let (mut order, mut out) = (Vec::new(), SegScores::new());
    let base = root.join("final-metric-scores");
    let mut files = Vec::new();
    for (_, dir) in listing(&base, |_| true)? {
        if dir.is_dir() {
            files.extend(listing(&dir, |n| n.ends_with(".seg.score.gz"))?.into_iter().map(|(_, p)| p));
        }
    }
    files.sort_by_key(|p| p.to_string_lossy().into_owned());
    for path in files {
        let bytes = std::fs::read(&path).map_err(|source| DatasetError::Read { path: path.clone(), source })?;
        let mut lines = String::new();
        flate2::read::MultiGzDecoder::new(&bytes[..])
            .read_to_string(&mut lines)
            .map_err(|source| DatasetError::Read { path: path.clone(), source })?;
        for line in lines.lines() {
            let c: Vec<&str> = line.split_whitespace().collect();
            if c.len() == 8 && c[1] == lp && c[3] == "newstest2020" {
                let metric = c[0].replace('+', "_PLUS_").replace('-', "_DASH_");
                let score: f64 = c[7].parse().map_err(|_| fail(&path, format!("`{}` is not a score", c[7])))?;
                if !out.contains_key(&metric) {
                    order.push(metric.clone());
                }
                out.entry(metric).or_default().insert((format!("{}::{}", c[5], c[6]), c[4].to_owned()), score);
            }
        }
    }
    Ok((order, out))
}

/// `format(x, ".4")`: four significant digits, fixed notation keeping a decimal point.
fn four_significant(x: f64) -> String {
    let e = format!("{x:.3e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..4).contains(&exp) {
        let s = format!("{x:.prec$}", prec = (3 - exp).max(0) as usize);
        let s = if s.contains('.') { s.trim_end_matches('0').to_owned() } else { s };
        if s.ends_with('.') { format!("{s}0") } else { s }
    } else {
        let m = mantissa.trim_end_matches('0').trim_end_matches('.');
        format!("{m}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    }
}

/// WMT20 DARR: on each pair of translations of a segment, each metric's verdict of
/// which is better (from its segment scores as logistic(difference / RMS difference)
/// where the scores are present, else the agree file's 0/1), the pair's order drawn
/// with `seed`; the label is the first translation better (the raters' DA).
pub fn wmt20_darr(input: &Path, lp: &str, seed: u64) -> Result<ReleasedJury, DatasetError> {
    let short = lp.replace('-', "");
    let agree = input
        .join("results")
        .join("output")
        .join("seglevel_allsys")
        .join(format!("RR-newstest2020-{short}-seg-nohy-agree.csv"));
    let lines: Vec<Vec<String>> = read(&agree)?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect();
    let (header, body) = lines.split_first().ok_or_else(|| fail(&agree, "empty"))?;
    if header.len() < 3 || header[..3] != ["SID", "BETTER", "WORSE"] {
        return Err(fail(&agree, format!("unexpected header {:?}", &header[..header.len().min(3)])));
    }
    let ncol = header.len() - 3;
    if body.iter().any(|r| r.len() != 3 + ncol) {
        return Err(fail(&agree, "ragged rows"));
    }
    let cols: Vec<Vec<&str>> = (0..ncol).map(|j| body.iter().map(|r| r[3 + j].as_str()).collect()).collect();
    let (metric_order, scores) = wmt_seg_scores(input, lp)?;
    // (1) Columns named by exact agreement with the segment scores present.
    let mut names: Vec<Option<String>> = vec![None; ncol];
    for m in &metric_order {
        let sc = &scores[m];
        let key = |r: &Vec<String>, s: usize| (r[0].clone(), r[s].clone());
        if !body.iter().all(|r| sc.contains_key(&key(r, 1)) && sc.contains_key(&key(r, 2))) {
            continue;
        }
        let v: Vec<&str> = body.iter().map(|r| if sc[&key(r, 1)] > sc[&key(r, 2)] { "1" } else { "0" }).collect();
        let hit: Vec<usize> = (0..ncol).filter(|&j| cols[j] == v).collect();
        if hit.len() != 1 || names[hit[0]].is_some() {
            return Err(fail(&agree, format!("{m}: segment scores match columns {hit:?}")));
        }
        names[hit[0]] = Some(m.clone());
    }
    let soft: Vec<String> = names.iter().flatten().cloned().collect();
    // (2) The rest named by the tau the cor file gives each metric.
    let cor_path = agree.with_file_name(format!("RR-newstest2020-{short}-seg-nohy-cor.csv"));
    let mut cor: Vec<(String, String)> = Vec::new();
    for line in read(&cor_path)?.lines().filter(|l| !l.trim().is_empty()) {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [m, tau, n] = parts[..] else { return Err(fail(&cor_path, format!("`{line}` is not metric, tau, pairs"))) };
        if n.parse::<usize>().ok() != Some(body.len()) {
            return Err(fail(&cor_path, format!("{m}: {n} pairs, agree file has {}", body.len())));
        }
        cor.retain(|(k, _)| k != m);
        cor.push((m.to_owned(), tau.to_owned()));
    }
    let mut cor_names: Vec<&str> = cor.iter().map(|(m, _)| m.as_str()).collect();
    let mut header_names: Vec<&str> = header[3..].iter().map(String::as_str).collect();
    cor_names.sort_unstable();
    header_names.sort_unstable();
    if cor_names != header_names {
        return Err(fail(&cor_path, "metrics differ from the agree header"));
    }
    let mut left: Vec<(String, String)> = cor.into_iter().filter(|(m, _)| !soft.contains(m)).collect();
    for j in 0..ncol {
        if names[j].is_some() {
            continue;
        }
        let ones = cols[j].iter().filter(|x| **x == "1").count() as f64;
        let t = four_significant((2.0 * ones - body.len() as f64) / body.len() as f64);
        let cand: Vec<usize> = (0..left.len()).filter(|&i| left[i].1 == t).collect();
        if cand.len() != 1 {
            return Err(fail(&cor_path, format!("column {j}: {} metrics fit", cand.len())));
        }
        names[j] = Some(left.remove(cand[0]).0);
    }
    let names: Vec<String> = names.into_iter().flatten().collect();
    let mut b = Builder::default();
    let renamed: Vec<String> = header[3..]
        .iter()
        .zip(&names)
        .filter(|(h, n)| h != n)
        .map(|(h, n)| format!("{}->{}", wmt_name(h), wmt_name(n)))
        .collect();
    b.notes.push(format!("columns (header name -> metric): {}", renamed.join(", ")));
    let mut rng = PythonRandom::new(seed);
    let mut order = Vec::with_capacity(body.len());
    for (k, r) in body.iter().enumerate() {
        let (ex, swap) = (format!("wmt20-{short}-{k:05}"), rng.random() < 0.5);
        b.labels.insert(ex.clone(), usize::from(!swap));
        order.push((ex, r, swap));
    }
    let mut rows: Vec<(usize, String, String, f64)> = Vec::new();
    for (j, m) in names.iter().enumerate() {
        if soft.contains(m) {
            let sc = &scores[m];
            let diffs: Vec<f64> = order
                .iter()
                .map(|(_, r, swap)| {
                    let d = sc[&(r[0].clone(), r[1].clone())] - sc[&(r[0].clone(), r[2].clone())];
                    if *swap { -d } else { d }
                })
                .collect();
            let s = (diffs.iter().map(|d| d * d).sum::<f64>() / diffs.len() as f64).sqrt();
            if s == 0.0 {
                return Err(fail(&agree, format!("{m}: every pair tied")));
            }
            rows.extend(
                order
                    .iter()
                    .zip(&diffs)
                    .map(|((ex, _, _), d)| (j, ex.clone(), wmt_name(m), six_significant(sigmoid(d / s)))),
            );
        } else {
            for ((ex, _, swap), x) in order.iter().zip(&cols[j]) {
                let x = f64::from(u8::from(*x == "1"));
                rows.push((j, ex.clone(), wmt_name(m), if *swap { 1.0 - x } else { x }));
            }
        }
    }
    let soft_names: Vec<String> = names.iter().filter(|m| soft.contains(m)).map(|m| wmt_name(m)).collect();
    let hard_names: Vec<String> = names.iter().filter(|m| !soft.contains(m)).map(|m| wmt_name(m)).collect();
    b.notes.push(format!("soft judges (segment scores): {}", soft_names.join(", ")));
    b.notes.push(format!("hard judges (agree column): {}", hard_names.join(", ")));
    rows.sort_by(|a, b| (&a.1, a.0).cmp(&(&b.1, b.0)));
    for (_, ex, judge, p) in rows {
        b.vote(&ex, &judge, p);
    }
    Ok(b.finish())
}

/// The first number in a rating text, as the regex `[-+]?\d*\.?\d+` finds it.
fn first_number(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    let digits = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        i
    };
    (0..b.len()).find_map(|start| {
        let mut i = start;
        if matches!(b[i], b'+' | b'-') {
            i += 1;
        }
        let whole = digits(i);
        let end = if whole < b.len() && b[whole] == b'.' && digits(whole + 1) > whole + 1 {
            digits(whole + 1)
        } else if whole > i {
            whole
        } else {
            return None;
        };
        s[start..end].parse().ok()
    })
}

/// The CARE authors' CivilComments jury: each judge's 0-9 toxicity rating of a comment
/// as a share of 9 (the first rating of a comment counts), the label the comment's
/// binary toxicity.
pub fn care_civilcomments(input: &Path) -> Result<ReleasedJury, DatasetError> {
    let labels_path = input.join("data").join("binary").join("civilcomments.csv");
    let judges_dir = input.join("judge_outputs").join("gaussian_mixture").join("civilcomments");
    for path in [&labels_path, &judges_dir] {
        if !path.exists() {
            return Err(fail(path, "not found (is --input a checkout of SprocketLab/CARE?)"));
        }
    }
    let comments = delimited(&labels_path, b',')?.1;
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut b = Builder::default();
    for (n, r) in comments.iter().enumerate() {
        index.insert(r.get("text").map_or("", String::as_str), n);
        let label = r.get("label").and_then(|l| l.trim().parse::<f64>().ok());
        let label = label.ok_or_else(|| fail(&labels_path, format!("comment {n}: no label")))?;
        b.labels.insert(format!("civil-{n:04}"), label as usize);
    }
    let mut names = listing(&judges_dir, |n| n.ends_with(".csv"))?;
    // By judge name (the file name without .csv).
    names.sort_by(|a, b| a.0[..a.0.len() - 4].cmp(&b.0[..b.0.len() - 4]));
    if names.is_empty() {
        return Err(fail(&judges_dir, "no judge files"));
    }
    for (file, path) in names {
        let name = &file[..file.len() - 4];
        let (mut seen, mut unread, mut unknown) = (std::collections::HashSet::new(), 0, 0);
        for r in delimited(&path, b',')?.1 {
            let n = index.get(r.get("text").map_or("", String::as_str));
            let v = first_number(r.get("parsed_output").map_or("", String::as_str));
            match (n, v.filter(|v| (0.0..=9.0).contains(v))) {
                (None, _) => unknown += 1,
                (Some(_), None) => unread += 1,
                (Some(&n), Some(v)) => {
                    if seen.insert(n) {
                        b.vote(&format!("civil-{n:04}"), name, format!("{:.6}", v / 9.0).parse().unwrap_or(v / 9.0));
                    }
                }
            }
        }
        if unknown > 0 {
            return Err(fail(&path, format!("{unknown} rows whose text is not in {}", labels_path.display())));
        }
        b.notes.push(format!("{name}: {} judgments, {unread} unreadable ratings", seen.len()));
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_random_draws_what_python_draws() {
        // random.Random(0).random() three times, and Random(12345).random() once.
        let mut r = PythonRandom::new(0);
        let first: Vec<f64> = (0..3).map(|_| r.random()).collect();
        assert_eq!(first, [0.8444218515250481, 0.7579544029403025, 0.420571580830845]);
        assert_eq!(PythonRandom::new(12345).random(), 0.41661987254534116);
    }

    #[test]
    fn salt_items_keep_the_order_of_test_json_and_thin_judges_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let task = dir.path().join("css_data").join("tempowic");
        std::fs::create_dir_all(&task).unwrap();
        let gold: Vec<String> =
            (0..11).map(|i| format!("\"{i}\": \"{}\"", if i % 2 == 0 { "Same" } else { "Different" })).collect();
        std::fs::write(task.join("test.json"), format!("{{\"labels\": {{{}}}}}", gold.join(", "))).unwrap();
        // Item 10 is "Same"; a judge answering it "(A)" votes 1, "b." votes 0.
        std::fs::write(
            task.join("answer-m1"),
            (0..11)
                .map(|i| format!("{i}\t{}\t(A) yes\n", if i % 2 == 0 { "Same" } else { "Different" }))
                .collect::<String>(),
        )
        .unwrap();
        std::fs::write(task.join("answer-m2"), "10\tSame\tb.\n").unwrap();
        let jury = salt_css(dir.path(), "tempowic", 0.5).unwrap();
        assert_eq!(jury.labels.iter().find(|(e, _)| e == "tempowic-10").map(|(_, l)| *l), Some(1));
        assert_eq!(jury.labels.iter().find(|(e, _)| e == "tempowic-09").map(|(_, l)| *l), Some(0));
        assert_eq!(jury.judgments.len(), 11);
        assert_eq!(jury.judgments[0], ("tempowic-00".into(), "m1".into(), 1.0));
        assert_eq!(jury.notes, ["m2: 1 of 11 items answered, left out"]);
        std::fs::write(task.join("answer-m3"), "3\tSame\ta\n").unwrap();
        let err = salt_css(dir.path(), "tempowic", 0.5).unwrap_err().to_string();
        assert!(err.contains("answer-m3") && err.contains("item 3: gold \"Same\""), "{err}");
    }

    #[test]
    fn numbers_are_found_and_formatted_as_python_does() {
        assert_eq!(first_number("Rating: 7/9"), Some(7.0));
        assert_eq!(first_number("about .5 or -3"), Some(0.5));
        assert_eq!(first_number("1. then"), Some(1.0));
        assert_eq!(first_number("none"), None);
        for (x, s) in
            [(0.2, "0.2"), (1.0, "1.0"), (0.123456, "0.1235"), (-0.0123, "-0.0123"), (1e-05, "1e-05"), (-1.0, "-1.0")]
        {
            assert_eq!(four_significant(x), s, "{x}");
        }
        assert_eq!(six_significant(1.0 / 3.0), 0.333333);
    }
}
