//! A model's chat template and tokenizer outside mistral.rs, so a judge on an inference
//! server sends exactly the token ids the in-process judge would run.
//!
//! The rendering follows mistral.rs 0.8.1's `apply_chat_template_to` (the rule the
//! in-process judge uses): minijinja with `trim_blocks` and `lstrip_blocks`, Python
//! string methods, `raise_exception`, `tojson`, `strftime_now`, the same context
//! variables (`messages`, `add_generation_prompt`, `bos_token`, `eos_token`,
//! `unk_token`, `date_string`, `enable_thinking: true`), the same rewrite of `[::-1]`;
//! the rendered text is encoded with special tokens added (`encode_fast(text, true)`).

use std::path::{Path, PathBuf};

use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error, ErrorKind, context};

/// A tokenizer directory: `tokenizer.json` plus `tokenizer_config.json` (chat template
/// and special tokens), the Hugging Face layout.
pub struct ChatTokenizer {
    dir: PathBuf,
    tokenizer: tokenizers::Tokenizer,
    /// The chat template, compiled once (rendering runs for every example).
    env: Environment<'static>,
    bos: Option<String>,
    eos: Option<String>,
    unk: Option<String>,
}

/// Why a tokenizer directory cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub struct ChatTokenizerError {
    pub path: PathBuf,
    pub reason: String,
}

/// A special token in tokenizer_config.json: a string or `{"content": ...}`.
fn token_text(v: Option<&serde_json::Value>) -> Option<String> {
    match v? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(o) => o.get("content").and_then(|c| c.as_str()).map(str::to_owned),
        _ => None,
    }
}

impl ChatTokenizer {
    /// Reads `dir/tokenizer.json` and the chat template of `dir/tokenizer_config.json`
    /// (a string, or a list of named templates of which `default` is taken).
    pub fn load(dir: &Path) -> Result<Self, ChatTokenizerError> {
        let err = |path: PathBuf, reason: String| ChatTokenizerError { path, reason };
        let tok_path = dir.join("tokenizer.json");
        let tokenizer =
            tokenizers::Tokenizer::from_file(&tok_path).map_err(|e| err(tok_path.clone(), e.to_string()))?;
        let cfg_path = dir.join("tokenizer_config.json");
        let text = std::fs::read_to_string(&cfg_path).map_err(|e| err(cfg_path.clone(), e.to_string()))?;
        let cfg: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| err(cfg_path.clone(), format!("not JSON: {e}")))?;
        let template = match cfg.get("chat_template") {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .and_then(|t| t.get("template")?.as_str().map(str::to_owned))
                .ok_or_else(|| err(cfg_path.clone(), "`chat_template` list has no `default` entry".into()))?,
            _ => return Err(err(cfg_path.clone(), "no `chat_template` string".into())),
        };
        let env = environment(&template).map_err(|e| err(cfg_path.clone(), e))?;
        Ok(Self {
            dir: dir.to_owned(),
            tokenizer,
            env,
            bos: token_text(cfg.get("bos_token")),
            eos: token_text(cfg.get("eos_token")),
            unk: token_text(cfg.get("unk_token")),
        })
    }

    /// The tokenizer and chat template a GGUF file carries in its metadata, built as
    /// mistral.rs 0.8.1 builds them (`gguf_tokenizer.rs`), so that the `candle` engine
    /// judges the token ids mistral.rs would: byte-level BPE from `tokenizer.ggml.tokens`
    /// and `merges` with Qwen2's pre-tokenizer rules, every token whose type is not
    /// normal (1) special, and `tokenizer.chat_template`. Only byte-level BPE (`gpt2`)
    /// files: others need a tokenizer folder.
    pub(crate) fn from_gguf(
        path: &Path,
        ct: &candle_core::quantized::gguf_file::Content,
    ) -> Result<Self, ChatTokenizerError> {
        use tokenizers::AddedToken;
        use tokenizers::pre_tokenizers::PreTokenizerWrapper;
        use tokenizers::pre_tokenizers::byte_level::ByteLevel;
        use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
        use tokenizers::tokenizer::normalizer::SplitDelimiterBehavior;
        let err = |reason: String| ChatTokenizerError { path: path.to_owned(), reason };
        let md = &ct.metadata;
        let text = |k: &str| md.get(k).and_then(|v| v.to_string().ok()).cloned();
        let list = |k: &str| -> Result<Vec<String>, ChatTokenizerError> {
            let v = md.get(k).ok_or_else(|| err(format!("no `{k}` in the file's metadata")))?;
            let v = v.to_vec().map_err(|e| err(format!("`{k}`: {e}")))?;
            v.iter().map(|t| t.to_string().cloned().map_err(|e| err(format!("`{k}`: {e}")))).collect()
        };
        let id = |k: &str| md.get(k).and_then(|v| v.to_u32().ok()).map(|i| i as usize);
        match text("tokenizer.ggml.model").as_deref() {
            Some("gpt2") => {}
            other => {
                return Err(err(format!(
                    "tokenizer model `{}`: the candle engine builds byte-level BPE (`gpt2`) tokenizers only; give the judge a `tokenizer` folder",
                    other.unwrap_or("none")
                )));
            }
        }
        let tokens = list("tokenizer.ggml.tokens")?;
        let merges = list("tokenizer.ggml.merges")?
            .into_iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_owned(), b.to_owned()))
                    .ok_or_else(|| err(format!("merge `{m}` is not two tokens")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut vocab = tokenizers::models::bpe::Vocab::default();
        for (i, t) in tokens.iter().enumerate() {
            vocab.insert(t.clone(), i as u32);
        }
        let named = |k: &str| id(k).and_then(|i| tokens.get(i)).cloned();
        let (bos, eos, unk) = (
            named("tokenizer.ggml.bos_token_id"),
            named("tokenizer.ggml.eos_token_id"),
            named("tokenizer.ggml.unknown_token_id"),
        );
        let mut bpe = tokenizers::models::bpe::BPE::builder().vocab_and_merges(vocab, merges);
        if let Some(u) = &unk {
            bpe = bpe.unk_token(u.clone());
        }
        let bpe = bpe.build().map_err(|e| err(format!("BPE: {e}")))?;
        let mut tokenizer = tokenizers::Tokenizer::new(bpe);
        let split = Split::new(SplitPattern::Regex(QWEN2_SPLIT.into()), SplitDelimiterBehavior::Isolated, false)
            .map_err(|e| err(format!("pre-tokenizer: {e}")))?;
        tokenizer.with_pre_tokenizer(Some(tokenizers::pre_tokenizers::sequence::Sequence::new(vec![
            PreTokenizerWrapper::Split(split),
            PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, false, false)),
        ])));
        tokenizer.with_decoder(Some(tokenizers::decoders::byte_level::ByteLevel::new(false, false, false)));
        tokenizer.with_post_processor(Some(tokenizers::processors::byte_level::ByteLevel::new(false, false, false)));
        let mut special: Vec<AddedToken> =
            [&bos, &eos, &unk].into_iter().flatten().map(|t| AddedToken::from(t.clone(), true)).collect();
        if let Some(types) = md.get("tokenizer.ggml.token_type").and_then(|v| v.to_vec().ok())
            && types.len() == tokens.len()
        {
            special.extend(
                types
                    .iter()
                    .zip(&tokens)
                    .filter(|(t, _)| t.to_i32().ok() != Some(1))
                    .map(|(_, tok)| AddedToken::from(tok.clone(), true)),
            );
        }
        tokenizer.add_special_tokens(&special);
        let template = text("tokenizer.chat_template").ok_or_else(|| {
            err("no `tokenizer.chat_template` in the file's metadata; give the judge a `tokenizer` folder".into())
        })?;
        let env = environment(&template).map_err(err)?;
        Ok(Self { dir: path.to_owned(), tokenizer, env, bos, eos, unk })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The chat template over a system and a user turn, with the generation prompt.
    pub fn render(&self, system: &str, user: &str) -> Result<String, String> {
        let tmpl = self.env.get_template("chat").map_err(|e| format!("chat template: {e}"))?;
        let messages =
            vec![context! { role => "system", content => system }, context! { role => "user", content => user }];
        tmpl.render(context! {
            messages => messages,
            add_generation_prompt => true,
            bos_token => self.bos,
            eos_token => self.eos,
            unk_token => self.unk,
            date_string => chrono::Utc::now().format("%d, %B, %Y").to_string(),
            enable_thinking => true,
            reasoning_effort => "medium",
        })
        .map_err(|e| format!("chat template: {e}"))
    }

    /// Token ids of a rendered prompt (special tokens added, as mistral.rs does).
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>, String> {
        Ok(self.tokenizer.encode_fast(text, true).map_err(|e| e.to_string())?.get_ids().to_vec())
    }

    /// The text of token ids, special tokens written out (a prompt for servers that take
    /// text only; re-encoding it gives the ids back for the tokenizers this project
    /// meets, and the server's token count checks that).
    pub fn decode(&self, ids: &[u32]) -> Result<String, String> {
        self.tokenizer.decode(ids, false).map_err(|e| e.to_string())
    }

    /// Token ids of a piece of text without special tokens (the answer prefix, verdict
    /// words).
    pub fn encode_text(&self, text: &str) -> Result<Vec<u32>, String> {
        Ok(self.tokenizer.encode_fast(text, false).map_err(|e| e.to_string())?.get_ids().to_vec())
    }
}

/// mistral.rs 0.8.1's split of text into pre-tokens for every byte-level BPE tokenizer
/// it builds from a GGUF file (Qwen2's rules, whatever `tokenizer.ggml.pre` says).
const QWEN2_SPLIT: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The template environment with mistral.rs's settings and helpers.
fn environment(template: &str) -> Result<Environment<'static>, String> {
    let mut env = Environment::new();
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.set_lstrip_blocks(true);
    env.set_trim_blocks(true);
    env.add_template_owned("chat", template.replace("[::-1]", "|reverse"))
        .map_err(|e| format!("chat template: {e}"))?;
    env.add_function("raise_exception", |msg: String| -> Result<String, Error> {
        Err(Error::new(ErrorKind::InvalidOperation, msg))
    });
    env.add_filter("tojson", tojson);
    env.add_function("strftime_now", |fmt: String| -> Result<String, Error> {
        Ok(chrono::Utc::now().format(&fmt).to_string())
    });
    Ok(env)
}

fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let bad = |e: serde_json::Error| Error::new(ErrorKind::BadSerialization, e.to_string());
    let text = match kwargs.get::<Option<usize>>("indent")? {
        Some(indent) => {
            let pad = b" ".repeat(indent);
            let mut buf = Vec::new();
            let mut ser =
                serde_json::Serializer::with_formatter(&mut buf, serde_json::ser::PrettyFormatter::with_indent(&pad));
            serde::Serialize::serialize(&value, &mut ser).map_err(bad)?;
            String::from_utf8_lossy(&buf).into_owned()
        }
        None => serde_json::to_string(&value).map_err(bad)?,
    };
    Ok(Value::from_safe_string(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::word_level_dir;

    #[test]
    fn renders_turns_with_the_generation_prompt_and_encodes_them() {
        let t = "{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}S: {{ m.content.strip() }} \
                 {% else %}U: {{ m.content }} {% endif %}{% endfor %}{% if add_generation_prompt %}A:{% endif %}";
        let dir = word_level_dir(t);
        let tok = ChatTokenizer::load(dir.path()).unwrap();
        let text = tok.render("  sys ", "hi").unwrap();
        assert_eq!(text, "<s>S: sys U: hi A:");
        assert_eq!(tok.encode_prompt(&text).unwrap(), vec![0, 6, 2, 7, 3, 8]);
        assert_eq!(tok.encode_text("Yes").unwrap(), vec![4]);
    }

    #[test]
    fn template_errors_and_missing_files_name_the_file() {
        let dir = word_level_dir("{{ raise_exception('no system role') }}");
        let tok = ChatTokenizer::load(dir.path()).unwrap();
        assert!(tok.render("s", "u").unwrap_err().contains("no system role"));
        let empty = tempfile::tempdir().unwrap();
        let e = ChatTokenizer::load(empty.path()).err().unwrap();
        assert!(e.to_string().contains("tokenizer.json"), "{e}");
    }

    /// A byte-level BPE tokenizer and chat template from GGUF metadata: merges apply,
    /// special tokens (type 3) stay whole inside rendered text, and a file with another
    /// tokenizer model is refused with a way out.
    #[test]
    fn a_gguf_files_own_tokenizer_and_template() {
        use candle_core::quantized::gguf_file::{Content, Value, VersionedMagic};
        let strings = |v: &[&str]| Value::Array(v.iter().map(|s| Value::String((*s).into())).collect());
        let tokens = ["a", "b", "ab", "\u{0120}", "\u{0120}a", "<|im_start|>", "<|im_end|>", "Y"];
        let mut metadata = std::collections::HashMap::from([
            ("tokenizer.ggml.model".to_owned(), Value::String("gpt2".into())),
            ("tokenizer.ggml.tokens".to_owned(), strings(&tokens)),
            ("tokenizer.ggml.merges".to_owned(), strings(&["a b", "\u{0120} a"])),
            (
                "tokenizer.ggml.token_type".to_owned(),
                Value::Array([1, 1, 1, 1, 1, 3, 3, 1].iter().map(|t| Value::I32(*t)).collect()),
            ),
            ("tokenizer.ggml.eos_token_id".to_owned(), Value::U32(6)),
            (
                "tokenizer.chat_template".to_owned(),
                Value::String("{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}".into()),
            ),
        ]);
        let content = |metadata| Content {
            magic: VersionedMagic::GgufV3,
            metadata,
            tensor_infos: Default::default(),
            tensor_data_offset: 0,
        };
        let path = Path::new("judge.gguf");
        let tok = ChatTokenizer::from_gguf(path, &content(metadata.clone())).unwrap();
        assert_eq!(tok.encode_text("ab a").unwrap(), vec![2, 4]);
        let text = tok.render("a", "ba").unwrap();
        assert_eq!(text, "<|im_start|>a<|im_end|><|im_start|>ba<|im_end|>");
        assert_eq!(tok.encode_prompt(&text).unwrap(), vec![5, 0, 6, 5, 1, 0, 6]);
        assert_eq!(tok.eos.as_deref(), Some("<|im_end|>"));
        metadata.insert("tokenizer.ggml.model".into(), Value::String("llama".into()));
        let e = ChatTokenizer::from_gguf(path, &content(metadata)).err().unwrap().to_string();
        assert!(e.starts_with("judge.gguf: tokenizer model `llama`") && e.contains("`tokenizer` folder"), "{e}");
    }
}
