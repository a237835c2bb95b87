//! A fake OpenAI-compatible inference server for `scripts/bench-fleet`: many loopback
//! servers in one tokio process, each answering a chat completion with well-formed
//! Yes/No log-probabilities after a fixed delay, so the rate jury sustains against a
//! fleet can be measured without GPUs. It must never be what limits that rate: every
//! connection is its own task and the delay is a timer, not a thread.
//!
//!   fleet-server SERVERS DELAY_MS      prints one base URL per line, then serves until killed

use std::hash::{Hash, Hasher};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

const MODELS: &str = r#"{"object": "list", "data": [{"id": "fake", "object": "model", "owned_by": "fleet-server"}]}"#;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage = || std::io::Error::other("usage: fleet-server SERVERS DELAY_MS");
    let servers: usize = args.get(1).and_then(|s| s.parse().ok()).ok_or_else(usage)?;
    let delay = Duration::from_millis(args.get(2).and_then(|s| s.parse().ok()).ok_or_else(usage)?);
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async move {
        let mut urls = Vec::with_capacity(servers);
        for _ in 0..servers {
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            urls.push(format!("http://{}", listener.local_addr()?));
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve(stream, delay));
                }
            });
        }
        println!("{}", urls.join("\n"));
        std::future::pending::<std::io::Result<()>>().await
    })
}

/// One keep-alive connection: requests answered in order until the client closes.
async fn serve(stream: TcpStream, delay: Duration) {
    let _ = stream.set_nodelay(true);
    let mut stream = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        match stream.read_line(&mut request_line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            if stream.read_line(&mut header).await.unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; length];
        if stream.read_exact(&mut body).await.is_err() {
            return;
        }
        let path = request_line.split_whitespace().nth(1).unwrap_or("");
        let (status, answer) = if path.ends_with("/models") {
            ("200 OK", MODELS.to_owned())
        } else if path.ends_with("/chat/completions") || path.ends_with("/completions") {
            tokio::time::sleep(delay).await;
            ("200 OK", verdict(&body))
        } else {
            ("404 Not Found", "{\"error\": \"not found\"}".to_owned())
        };
        let response = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
            answer.len()
        );
        if stream.get_mut().write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// A chat completion whose P(Yes) is a function of the request, so answers differ from
/// example to example and a repeated request gets the same answer.
fn verdict(body: &[u8]) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut h);
    let p = 0.02 + 0.96 * (h.finish() % 1000) as f64 / 1000.0;
    let (yes, no) = (p.ln(), (1.0 - p).ln());
    let top = if yes >= no { "Yes" } else { "No" };
    format!(
        r#"{{"object": "chat.completion", "model": "fake", "choices": [{{"index": 0, "message": {{"role": "assistant", "content": "{top}"}}, "logprobs": {{"content": [{{"token": "{top}", "logprob": {}, "top_logprobs": [{{"token": "Yes", "logprob": {yes}}}, {{"token": "No", "logprob": {no}}}]}}]}}, "finish_reason": "length"}}]}}"#,
        yes.max(no)
    )
}
