//! Test doubles shared by the unit tests: a scripted loopback HTTP server and a tiny
//! word-level tokenizer directory with a chat template.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

/// A test double: a loopback HTTP server answering each connection from a script of
/// (status, headers, body), then 200 with `ok` forever; status 0 closes the connection
/// without an answer.
pub(crate) fn scripted(script: Vec<(u16, &'static str, &'static str)>) -> (String, std::thread::JoinHandle<()>) {
    let (url, _seen, handle) = scripted_seen(script);
    (url, handle)
}

/// [`scripted`], also keeping each request it received (request line, headers, body).
pub(crate) fn scripted_seen(
    script: Vec<(u16, &'static str, &'static str)>,
) -> (String, Arc<Mutex<Vec<String>>>, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&seen);
    let handle = std::thread::spawn(move || {
        let mut script = script.into_iter();
        for stream in listener.incoming().take(20) {
            let Ok(mut stream) = stream else { break };
            kept.lock().unwrap().push(read_request(&mut stream));
            let (status, headers, body) = script.next().unwrap_or((200, "", "ok"));
            if status == 0 {
                // The connection closed with no answer, as a server under load may do.
                continue;
            }
            let resp = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n{headers}\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(resp.as_bytes());
        }
    });
    (url, seen, handle)
}

/// One HTTP request's text: the head, then as many body bytes as `content-length` says.
fn read_request(stream: &mut impl Read) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n) = stream.read(&mut buf) {
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        let Some(head_end) = text.find("\r\n\r\n") else {
            if n == 0 {
                break;
            }
            continue;
        };
        let length = text[..head_end]
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0);
        if n == 0 || got.len() >= head_end + 4 + length {
            break;
        }
    }
    String::from_utf8_lossy(&got).into_owned()
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
