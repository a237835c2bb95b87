//! The `vllm serve` commands that start a server experiment's judges, one GPU each, so
//! the servers a config names are started from the config itself (`jury run
//! --vllm-serve-lines`).

use std::path::Path;

use crate::experiment::{Experiment, ExperimentError};

/// One shell line per server judge, in judge order: `CUDA_VISIBLE_DEVICES=<gpu> vllm
/// serve <hub id> --served-model-name <model> --port <port> --max-logprobs <n>   #
/// <judge>`, serving the hub model its `tokenizer` names on its first base URL's port
/// (8000 where the URL names none, or its scheme's default) with `--max-logprobs` at least its `top_logprobs`
/// (and at least vLLM's 20). `path` names the config in errors.
pub fn vllm_serve_lines<A>(exp: &Experiment<A>, path: &Path) -> Result<Vec<String>, ExperimentError> {
    let servers: Vec<_> = exp.judges.iter().filter_map(|j| Some((j, j.server.as_ref()?))).collect();
    if servers.is_empty() {
        return Err(ExperimentError::Invalid {
            path: path.to_owned(),
            reason: "no judge has a `server:` entry".into(),
        });
    }
    let mut lines = Vec::new();
    for (gpu, (judge, s)) in servers.into_iter().enumerate() {
        let judge_err = |reason: &str| ExperimentError::Judge {
            path: path.to_owned(),
            judge: judge.name.clone(),
            reason: reason.to_owned(),
        };
        let model = s.tokenizer.as_deref().ok_or_else(|| judge_err("no `tokenizer` naming the hub model to serve"))?;
        let url = s.base_urls.first().ok_or_else(|| judge_err("server: no base URL"))?;
        let port =
            jury_judge::parse_base_url(url).map_err(|e| judge_err(&format!("server: {e}")))?.port().unwrap_or(8000);
        let args = [
            "vllm".to_owned(),
            "serve".to_owned(),
            model.to_owned(),
            "--served-model-name".to_owned(),
            s.model.clone(),
            "--port".to_owned(),
            port.to_string(),
            "--max-logprobs".to_owned(),
            s.top_logprobs.max(20).to_string(),
        ];
        let command: Vec<String> = args.iter().map(|a| shell_quoted(a)).collect();
        lines.push(format!("CUDA_VISIBLE_DEVICES={gpu} {}   # {}", command.join(" "), judge.name));
    }
    Ok(lines)
}

/// `s` as one shell word: as it is when every character is safe in a shell word
/// (letters, digits, `@%+=:,./-_`), else in single quotes.
fn shell_quoted(s: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "@%+=:,./-_".contains(c);
    if !s.is_empty() && s.chars().all(safe) { s.to_owned() } else { format!("'{}'", s.replace('\'', "'\"'\"'")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_server_judge_on_its_port_and_gpu() {
        let yaml = "name: t\ndataset: {name: truthfulqa, path: d.csv}\nprompt: p.yaml\noutput: out\njudges:\n\
          - {name: a, server: {base_urls: ['http://10.0.0.2:8001/v1'], model: m-a, tokenizer: org/A}}\n\
          - {name: local, gguf: x.gguf}\n\
          - {name: b, server: {base_urls: ['https://user:pw@h/v1'], model: \"it's\", tokenizer: org/B, top_logprobs: 50}}\n";
        let exp: Experiment<serde_yaml::Value> = serde_yaml::from_str(yaml).unwrap();
        let lines = vllm_serve_lines(&exp, Path::new("x.yaml")).unwrap();
        assert_eq!(
            lines,
            [
                "CUDA_VISIBLE_DEVICES=0 vllm serve org/A --served-model-name m-a --port 8001 --max-logprobs 20   # a",
                "CUDA_VISIBLE_DEVICES=1 vllm serve org/B --served-model-name 'it'\"'\"'s' --port 8000 --max-logprobs 50   # b",
            ]
        );
        let no_tokenizer = yaml.replace(", tokenizer: org/A", "");
        let exp: Experiment<serde_yaml::Value> = serde_yaml::from_str(&no_tokenizer).unwrap();
        let e = vllm_serve_lines(&exp, Path::new("x.yaml")).unwrap_err().to_string();
        assert_eq!(e, "x.yaml: judge `a`: no `tokenizer` naming the hub model to serve");
    }
}
