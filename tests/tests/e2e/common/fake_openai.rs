//! A fake OpenAI-compatible server (test code) for faults no real server produces on
//! demand: a handler answers each request (path, headers, body) with a status,
//! headers and a body, and every request is kept for the test to read. One request per
//! connection; stopped on drop.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::proxy::read_request;

/// A request as the fake received it.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    /// The request target as sent (path and any query).
    pub target: String,
    /// Header lines as sent.
    pub head: String,
    pub body: String,
}

/// An answer: status, extra header lines (`Name: value\r\n` each) and body.
pub(crate) struct Reply {
    pub status: u16,
    pub headers: String,
    pub body: Vec<u8>,
}

impl Reply {
    pub(crate) fn json(status: u16, body: impl Into<String>) -> Reply {
        Reply { status, headers: String::new(), body: body.into().into_bytes() }
    }
}

type Handler = dyn Fn(&Request) -> Reply + Send + Sync;

pub(crate) struct FakeServer {
    pub port: u16,
    seen: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
}

impl FakeServer {
    /// Listens on a free loopback port and answers with `handler`.
    pub(crate) fn start(handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<Handler> = Arc::new(handler);
        let (seen2, stop2) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let (handler, seen) = (handler.clone(), seen2.clone());
                std::thread::spawn(move || answer(client, &*handler, &seen));
            }
        });
        FakeServer { port, seen, stop }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request received so far.
    pub(crate) fn requests(&self) -> Vec<Request> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn answer(mut client: TcpStream, handler: &Handler, seen: &Mutex<Vec<Request>>) {
    let Some(raw) = read_request(&mut client) else { return };
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").map_or(raw.len(), |i| i + 4);
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    // The request line is "METHOD TARGET VERSION".
    let target = head.lines().next().unwrap_or("").split(' ').nth(1).unwrap_or("").to_owned();
    let request = Request { target, head: head.clone(), body: String::from_utf8_lossy(&raw[end..]).into_owned() };
    let reply = handler(&request);
    seen.lock().unwrap().push(request);
    let mut out = format!(
        "HTTP/1.1 {} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
        reply.status,
        reply.body.len(),
        reply.headers
    )
    .into_bytes();
    out.extend_from_slice(&reply.body);
    let _ = client.write_all(&out);
}

/// `/v1/models` listing one model `id` with weights at `root`.
pub(crate) fn models(id: &str, root: &str) -> Reply {
    Reply::json(
        200,
        format!(r#"{{"object": "list", "data": [{{"id": "{id}", "root": "{root}", "owned_by": "fake"}}]}}"#),
    )
}

/// A chat completion whose verdict position holds `top` as (token, log-probability).
pub(crate) fn chat_answer(top: &[(&str, f64)]) -> Reply {
    let entries: Vec<String> = top.iter().map(|(t, lp)| format!(r#"{{"token": "{t}", "logprob": {lp}}}"#)).collect();
    let (first, lp) = top.first().copied().unwrap_or(("x", -1.0));
    Reply::json(
        200,
        format!(
            r#"{{"choices": [{{"index": 0, "message": {{"role": "assistant", "content": "{first}"}},
               "logprobs": {{"content": [{{"token": "{first}", "logprob": {lp}, "top_logprobs": [{}]}}]}}}}],
               "usage": {{"prompt_tokens": 10}}}}"#,
            entries.join(", ")
        ),
    )
}

/// The usual routes of a chat-prefill judge's server: the model list, no `/tokenize`
/// (verdicts matched by text), and `chat` for every chat completion.
pub(crate) fn routes(
    id: &'static str,
    root: &'static str,
    chat: impl Fn(&Request) -> Reply + Send + Sync + 'static,
) -> impl Fn(&Request) -> Reply + Send + Sync + 'static {
    move |r: &Request| {
        if r.target.ends_with("/models") {
            models(id, root)
        } else if r.target.ends_with("/chat/completions") {
            chat(r)
        } else {
            Reply::json(404, r#"{"error": "not found"}"#)
        }
    }
}
