//! Test doubles shared by the unit tests: a scripted loopback HTTP server and a tiny
//! word-level tokenizer directory with a chat template.

use std::io::{Read, Write};
use std::net::TcpListener;

/// A test double: a loopback HTTP server answering each connection from a script of
/// (status, headers, body), then 200 with `ok` forever.
pub(crate) fn scripted(script: Vec<(u16, &'static str, &'static str)>) -> (String, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let handle = std::thread::spawn(move || {
        let mut script = script.into_iter();
        for stream in listener.incoming().take(20) {
            let Ok(mut stream) = stream else { break };
            let mut buf = [0u8; 8192];
            let _ = stream.read(&mut buf);
            let (status, headers, body) = script.next().unwrap_or((200, "", "ok"));
            let resp = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n{headers}\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(resp.as_bytes());
        }
    });
    (url, handle)
}

/// A tokenizer directory with a word-level vocabulary (`<s>`, `<unk>`, `sys`, `hi`,
/// `Yes`, `[[`, `S:`, `U:`, `A:`) and the given chat template.
pub(crate) fn word_level_dir(template: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let tok = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [{"id": 0, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false,
                          "normalized": false, "special": true}],
        "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": {"<s>": 0, "<unk>": 1, "sys": 2, "hi": 3, "Yes": 4, "[[": 5,
                  "S:": 6, "U:": 7, "A:": 8}, "unk_token": "<unk>"}
    });
    std::fs::write(dir.path().join("tokenizer.json"), tok.to_string()).unwrap();
    let cfg = serde_json::json!({"chat_template": template, "bos_token": {"content": "<s>"}, "eos_token": "</s>"});
    std::fs::write(dir.path().join("tokenizer_config.json"), cfg.to_string()).unwrap();
    dir
}
