//! A fault-injecting HTTP proxy (test code) in front of a real server: POST requests get,
//! in a repeating pattern, a 429 with `Retry-After`, a 500, a connection closed without
//! an answer, or a stall longer than the client's time limit; the rest pass through.
//! GET requests (model lists, health) always pass. One request per connection.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Fault {
    Pass,
    TooMany,
    ServerError,
    Reset,
    Stall(Duration),
}

pub(crate) struct FaultProxy {
    pub port: u16,
    pub faults_injected: Arc<AtomicUsize>,
}

pub(crate) fn read_request(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    let header_end = loop {
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_ascii_lowercase();
    let len: usize =
        head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    while buf.len() < header_end + len {
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(buf)
}

/// The request with its `Connection` header replaced by `close`.
fn with_close(req: &[u8]) -> Vec<u8> {
    let end = req.windows(4).position(|w| w == b"\r\n\r\n").map_or(req.len(), |i| i + 4);
    let head = String::from_utf8_lossy(&req[..end]);
    let mut out = String::new();
    for line in head.split("\r\n").filter(|l| !l.is_empty()) {
        if !line.to_ascii_lowercase().starts_with("connection:") {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str("Connection: close\r\n\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&req[end..]);
    bytes
}

fn handle(mut client: TcpStream, upstream: u16, pattern: &[Fault], counter: &AtomicUsize, injected: &AtomicUsize) {
    let Some(req) = read_request(&mut client) else { return };
    let fault = if req.starts_with(b"POST") {
        pattern[counter.fetch_add(1, Ordering::SeqCst) % pattern.len()]
    } else {
        Fault::Pass
    };
    if fault != Fault::Pass {
        injected.fetch_add(1, Ordering::SeqCst);
    }
    match fault {
        Fault::Pass => {
            let Ok(mut up) = TcpStream::connect(("127.0.0.1", upstream)) else { return };
            if up.write_all(&with_close(&req)).is_err() {
                return;
            }
            let mut resp = Vec::new();
            let _ = up.read_to_end(&mut resp);
            let _ = client.write_all(&resp);
        }
        Fault::TooMany => {
            let _ = client.write_all(
                b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 0\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
        Fault::ServerError => {
            let _ = client.write_all(
                b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\nConnection: close\r\n\r\nboom!",
            );
        }
        Fault::Reset => {}
        Fault::Stall(d) => std::thread::sleep(d),
    }
    let _ = client.shutdown(Shutdown::Both);
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream` with `pattern`
    /// applied to POST requests in turn.
    pub(crate) fn start(upstream: u16, pattern: Vec<Fault>) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let injected = Arc::new(AtomicUsize::new(0));
        let (pattern, counter, inj) = (Arc::new(pattern), Arc::new(AtomicUsize::new(0)), injected.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let (pattern, counter, inj) = (pattern.clone(), counter.clone(), inj.clone());
                std::thread::spawn(move || handle(client, upstream, &pattern, &counter, &inj));
            }
        });
        FaultProxy { port, faults_injected: injected }
    }
}
