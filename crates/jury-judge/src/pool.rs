//! Requests of one server judge spread over its replicas: an in-flight limit per server,
//! fastest free server first, retries with exponential backoff and jitter, servers that
//! keep failing set aside and probed again later, and a patience after which a judge
//! whose every server is down stops the run.
//!
//! Invariants: a request either returns the server's 2xx body, or a permanent rejection
//! (4xx other than 408/429: the example is at fault, not the server), or an error that
//! stops the run (every server down past the patience, authentication refused, retries
//! spent, rate-limited past the patience); the API key is sent as a header only and
//! never appears in an error, a statistic or a `Debug` print, and every text a server
//! sends is scrubbed of it (and of the base URLs' passwords) before it reaches an error;
//! URLs are shown without user info; a body is read up to [`MAX_BODY_BYTES`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jury_io::{PoolStats, ServerStats};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// Dispatch settings of one judge.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolConfig {
    /// Requests in flight per server.
    pub max_in_flight: usize,
    /// One request's time limit.
    pub timeout: Duration,
    /// Retries of one request after transient failures (timeouts, resets, 5xx, 429).
    /// A refused connection is no retry: the server is set aside at once and the
    /// request waits for another (the patience governs).
    pub retries: u32,
    /// How long every server may be down before the run stops.
    pub patience: Duration,
    /// First backoff; doubled per retry up to `backoff_max`, times a jitter in [0.5, 1].
    pub backoff: Duration,
    pub backoff_max: Duration,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            max_in_flight: 4,
            timeout: Duration::from_secs(120),
            retries: 8,
            patience: Duration::from_secs(300),
            backoff: Duration::from_millis(250),
            backoff_max: Duration::from_secs(8),
        }
    }
}

/// Consecutive transient failures after which a server is set aside.
const SET_ASIDE_AFTER: u32 = 3;

/// A secret sent as `Authorization: Bearer ...`; its `Debug` never shows it.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: String) -> Self {
        Self(key)
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// A URL as shown to people: scheme, host, port and path, without user info or query.
pub fn display_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => shown(&u),
        Err(_) => "<invalid url>".into(),
    }
}

fn shown(u: &reqwest::Url) -> String {
    let port = u.port().map(|p| format!(":{p}")).unwrap_or_default();
    format!("{}://{}{port}{}", u.scheme(), u.host_str().unwrap_or(""), u.path().trim_end_matches('/'))
}

/// `raw` as written, with any user info (`user:password@`) replaced: for errors about a
/// base URL that does not parse.
fn raw_without_user_info(raw: &str) -> String {
    let (scheme, rest) = raw.split_once("://").unwrap_or(("", raw));
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://<user info>@{}", &rest[at + 1..]),
        None => raw.to_owned(),
    }
}

/// Parses a server's base URL, the one rule for the config check and the requests:
/// `http` or `https` (any case), a host, no query and no fragment (requests append
/// their path to it, so neither could be kept), no blanks around it. User info is
/// allowed (sent as Basic credentials) and never shown.
pub fn parse_base_url(raw: &str) -> Result<reqwest::Url, String> {
    let quoted = format!("{:?}", raw_without_user_info(raw));
    if raw.trim() != raw {
        return Err(format!("base URL {quoted} has blanks around it"));
    }
    let url = reqwest::Url::parse(raw).map_err(|e| format!("base URL {quoted}: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("base URL {quoted} is not an http:// or https:// address"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("base URL {quoted} has no host"));
    }
    if url.query().is_some() {
        return Err(format!("base URL {quoted} has a query (`?...`): give the address without it"));
    }
    if url.fragment().is_some() {
        return Err(format!("base URL {quoted} has a fragment (`#...`): give the address without it"));
    }
    Ok(url)
}

/// `raw` with any password in its user info replaced by `REDACTED`, for writing a
/// config back; a URL that does not parse, or has no password, is returned as it is.
pub fn without_password(raw: &str) -> String {
    let Ok(mut url) = parse_base_url(raw) else { return raw.to_owned() };
    if url.password().is_none() || url.set_password(Some("REDACTED")).is_err() {
        return raw.to_owned();
    }
    url.to_string()
}

/// The largest response body read; a larger one fails its request (a 50 MB answer to a
/// one-token request is no verdict, and reading it whole would hold it in memory).
pub(crate) const MAX_BODY_BYTES: usize = 16 << 20;

/// The texts that must never be shown: the key (as sent in `Bearer`, and JSON-escaped)
/// and each base URL's password (raw, percent-decoded, and as the Basic credentials
/// `base64(user:password)`).
struct Secrets(Vec<String>);

impl Secrets {
    fn new(key: Option<&ApiKey>, urls: &[reqwest::Url]) -> Self {
        let mut all = Vec::new();
        if let Some(k) = key {
            all.push(k.0.clone());
            if let Ok(escaped) = serde_json::to_string(&k.0) {
                all.push(escaped.trim_matches('"').to_owned());
            }
        }
        for u in urls {
            if let Some(password) = u.password() {
                let decoded = percent_decode(password);
                let user = percent_decode(u.username());
                all.push(password.to_owned());
                all.push(base64(format!("{user}:{decoded}").as_bytes()));
                all.push(decoded);
            }
        }
        all.retain(|s| !s.is_empty());
        // Longest first, so a secret inside another is not replaced piecemeal.
        all.sort_by_key(|s| std::cmp::Reverse(s.len()));
        all.dedup();
        Self(all)
    }

    fn scrub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in &self.0 {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), "<redacted>");
            }
        }
        out
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (bytes.get(i + 1).and_then(|b| hex(*b)), bytes.get(i + 2).and_then(|b| hex(*b)))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Standard base64 with padding (HTTP Basic credentials).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> shift) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Why a request did not return a body.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum PoolError {
    /// The server refuses this request for good (400, 404, 413, 422, ...).
    #[error("rejected by {server} (HTTP {status}): {reason}")]
    Rejected { server: String, status: u16, reason: String },
    #[error("every server has been failing for {seconds:.0} s: {servers}; the last failure: {last}")]
    AllDown { servers: String, seconds: f64, last: String },
    /// Every answer was HTTP 429 for longer than the patience.
    #[error("rate limited (HTTP 429) for {seconds:.0} s, past `patience_s`: {server}")]
    RateLimited { server: String, seconds: f64 },
    #[error("{server} refused the credentials (HTTP {status}): {reason}")]
    Auth { server: String, status: u16, reason: String },
    #[error("gave up after {attempts} attempts; last: {last}")]
    GaveUp { attempts: u32, last: String },
}

#[derive(Debug, Default)]
struct Health {
    consecutive: u32,
    aside_until: Option<Instant>,
    down_since: Option<Instant>,
    probing: bool,
    /// Smoothed seconds per request (0 until measured: unmeasured servers go first).
    ewma: f64,
    /// The last transient failure, for the message when every server is down.
    last_failure: Option<String>,
}

struct Server {
    url: String,
    shown: String,
    slots: Arc<Semaphore>,
    health: Mutex<Health>,
    ok: AtomicU64,
    errors: AtomicU64,
    rejected: AtomicU64,
    set_aside: AtomicU64,
}

enum Outcome {
    Body(Vec<u8>),
    /// Retry elsewhere or later; `server_fault` counts toward setting the server aside.
    Transient {
        reason: String,
        server_fault: bool,
        refused: bool,
        retry_after: Option<Duration>,
    },
    Rejected {
        status: u16,
        reason: String,
    },
    Auth {
        status: u16,
        reason: String,
    },
}

/// The replicas of one judge.
pub(crate) struct Pool {
    servers: Vec<Server>,
    client: reqwest::Client,
    key: Option<ApiKey>,
    cfg: PoolConfig,
    changed: Notify,
    retried: AtomicU64,
    secrets: Secrets,
}

/// Releases a server slot and wakes requests waiting for one.
struct Slot<'a> {
    _permit: OwnedSemaphorePermit,
    changed: &'a Notify,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.changed.notify_waiters();
    }
}

/// Why a body was not read.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    /// Larger than [`MAX_BODY_BYTES`]: the request's fault, not a transient one.
    #[error("the answer is over {} MiB, the most jury reads", MAX_BODY_BYTES >> 20)]
    TooLarge,
    #[error("{0}")]
    Read(String),
}

/// A body read up to [`MAX_BODY_BYTES`].
async fn read_body(mut resp: reqwest::Response) -> Result<Vec<u8>, BodyError> {
    if resp.content_length().is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(BodyError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| BodyError::Read(describe(&e)))? {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(BodyError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

impl Pool {
    pub(crate) fn new(base_urls: &[String], key: Option<ApiKey>, cfg: PoolConfig) -> Result<Self, String> {
        if base_urls.is_empty() {
            return Err("no base URL".into());
        }
        let parsed = base_urls.iter().map(|u| parse_base_url(u)).collect::<Result<Vec<_>, _>>()?;
        let secrets = Secrets::new(key.as_ref(), &parsed);
        let servers = parsed
            .iter()
            .map(|url| Server {
                url: url.as_str().trim_end_matches('/').to_owned(),
                shown: shown(url),
                slots: Arc::new(Semaphore::new(cfg.max_in_flight.max(1))),
                health: Mutex::new(Health::default()),
                ok: AtomicU64::new(0),
                errors: AtomicU64::new(0),
                rejected: AtomicU64::new(0),
                set_aside: AtomicU64::new(0),
            })
            .collect();
        let client = reqwest::Client::builder()
            .timeout(cfg.timeout)
            .connect_timeout(cfg.timeout.min(Duration::from_secs(10)))
            .pool_max_idle_per_host(cfg.max_in_flight.max(1))
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        Ok(Self { servers, client, key, cfg, changed: Notify::new(), retried: AtomicU64::new(0), secrets })
    }

    /// `text` from a server without the key or a base URL's password in it.
    pub(crate) fn scrub(&self, text: &str) -> String {
        self.secrets.scrub(text)
    }

    /// A body as a one-line excerpt for an error, scrubbed first (a secret cut in half
    /// by the excerpt's end would otherwise survive).
    fn excerpt(&self, bytes: &[u8]) -> String {
        let text = self.scrub(&String::from_utf8_lossy(bytes));
        let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        one_line.chars().take(300).collect()
    }

    /// The servers as shown to people.
    pub(crate) fn urls(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.shown.clone()).collect()
    }

    /// The largest number of requests that can be in flight over all servers.
    pub(crate) fn capacity(&self) -> usize {
        self.servers.len() * self.cfg.max_in_flight.max(1)
    }

    pub(crate) fn stats(&self) -> PoolStats {
        let now = Instant::now();
        PoolStats {
            retried: self.retried.load(Ordering::Relaxed),
            servers: self
                .servers
                .iter()
                .map(|s| ServerStats {
                    url: s.shown.clone(),
                    ok: s.ok.load(Ordering::Relaxed),
                    errors: s.errors.load(Ordering::Relaxed),
                    rejected: s.rejected.load(Ordering::Relaxed),
                    times_set_aside: s.set_aside.load(Ordering::Relaxed),
                    down: s.health.lock().map(|h| h.aside_until.is_some_and(|t| t > now)).unwrap_or(false),
                })
                .collect(),
        }
    }

    /// A GET to one server (start-up checks), with the key and the time limit.
    pub(crate) async fn get_from(&self, server: usize, path: &str) -> Result<Vec<u8>, String> {
        let s = &self.servers[server];
        let (status, bytes) = self.start_up(server, path, || self.client.get(format!("{}{path}", s.url))).await?;
        if !(200..300).contains(&status) {
            return Err(format!("{}{path}: HTTP {status}: {}", s.shown, self.excerpt(&bytes)));
        }
        Ok(bytes)
    }

    /// A JSON POST to one server's root, outside the `/v1` API (a base URL's trailing
    /// `/v1` dropped): start-up requests such as `/tokenize`, with the key and the time
    /// limit, no retries. Returns the HTTP status and the body.
    pub(crate) async fn post_to_root(&self, server: usize, path: &str, body: &[u8]) -> Result<(u16, Vec<u8>), String> {
        let s = &self.servers[server];
        let root = s.url.strip_suffix("/v1").unwrap_or(&s.url);
        let req = || {
            self.client
                .post(format!("{root}{path}"))
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_vec())
        };
        self.start_up(server, path, req).await
    }

    /// One start-up request, asked again (up to `retries` times, with the backoff) when
    /// the connection breaks before the answer's head arrives: a server may close a fresh
    /// connection under load (llama-server did, at a judge's first `/v1/models`), and
    /// these requests change nothing on the server. A refused connection or a timeout is
    /// no retry: the server is down or stuck, and the caller tries the next one.
    async fn start_up(
        &self,
        server: usize,
        path: &str,
        request: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<(u16, Vec<u8>), String> {
        let shown = &self.servers[server].shown;
        let mut retries = 0;
        loop {
            let req = match &self.key {
                Some(k) => request().bearer_auth(&k.0),
                None => request(),
            };
            let failure = match req.send().await {
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    let bytes = read_body(resp).await.map_err(|e| format!("{shown}{path}: {e}"))?;
                    return Ok((status, bytes));
                }
                Err(e) if e.is_connect() || e.is_timeout() => return Err(format!("{shown}{path}: {}", describe(&e))),
                Err(e) => format!("{shown}{path}: {}", describe(&e)),
            };
            if retries >= self.cfg.retries {
                return Err(failure);
            }
            self.retried.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(self.backoff(retries)).await;
            retries += 1;
        }
    }

    pub(crate) fn server_count(&self) -> usize {
        self.servers.len()
    }

    /// Waits for a free slot on a usable server, fastest first.
    async fn pick(&self) -> Result<(usize, Slot<'_>), PoolError> {
        loop {
            let notified = self.changed.notified();
            let now = Instant::now();
            let mut order: Vec<(usize, f64)> = Vec::new();
            let mut all_down_since: Option<Instant> = None;
            let mut all_down = true;
            let mut last_failure = String::new();
            for (i, s) in self.servers.iter().enumerate() {
                let Ok(h) = s.health.lock() else { continue };
                let aside = h.aside_until.is_some();
                let probe_due = h.aside_until.is_some_and(|t| t <= now) && !h.probing;
                if !aside || h.down_since.is_none() {
                    all_down = false;
                } else if let Some(d) = h.down_since {
                    all_down_since = Some(all_down_since.map_or(d, |a: Instant| a.max(d)));
                    if let Some(f) = &h.last_failure {
                        last_failure.clone_from(f);
                    }
                }
                if !aside || probe_due {
                    order.push((i, h.ewma));
                }
            }
            order.sort_by(|a, b| a.1.total_cmp(&b.1));
            for (i, _) in order {
                let s = &self.servers[i];
                if let Ok(permit) = s.slots.clone().try_acquire_owned() {
                    // A server set aside takes one probe at a time.
                    if let Ok(mut h) = s.health.lock()
                        && h.aside_until.is_some()
                    {
                        if h.probing {
                            continue;
                        }
                        h.probing = true;
                    }
                    return Ok((i, Slot { _permit: permit, changed: &self.changed }));
                }
            }
            if all_down && let Some(since) = all_down_since {
                let down_for = now.duration_since(since);
                if down_for >= self.cfg.patience {
                    return Err(PoolError::AllDown {
                        servers: self.urls().join(", "),
                        seconds: down_for.as_secs_f64(),
                        last: last_failure,
                    });
                }
            }
            let _ = tokio::time::timeout(Duration::from_millis(100), notified).await;
        }
    }

    /// Counts a retry decided above the HTTP layer (an unusable answer asked again).
    pub(crate) fn note_retry(&self) {
        self.retried.fetch_add(1, Ordering::Relaxed);
    }

    /// The wait before retry number `attempt + 1`: exponential, capped, with jitter.
    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        let base = self.cfg.backoff.saturating_mul(1u32 << attempt.min(16)).min(self.cfg.backoff_max);
        base.mul_f64(0.5 + 0.5 * rand::random::<f64>())
    }

    fn record(&self, i: usize, outcome: &Outcome, seconds: f64) {
        let s = &self.servers[i];
        let Ok(mut h) = s.health.lock() else { return };
        h.probing = false;
        match outcome {
            Outcome::Body(_) | Outcome::Rejected { .. } => {
                h.consecutive = 0;
                h.aside_until = None;
                h.down_since = None;
                h.last_failure = None;
                h.ewma = if h.ewma == 0.0 { seconds } else { 0.8 * h.ewma + 0.2 * seconds };
            }
            Outcome::Transient { server_fault: true, refused, reason, .. } => {
                h.consecutive += 1;
                h.last_failure = Some(reason.clone());
                if *refused || h.consecutive >= SET_ASIDE_AFTER {
                    let n = h.consecutive.saturating_sub(1).min(5);
                    let wait = Duration::from_secs(1u64 << n);
                    if h.aside_until.is_none() {
                        s.set_aside.fetch_add(1, Ordering::Relaxed);
                    }
                    h.aside_until = Some(Instant::now() + wait);
                    h.down_since.get_or_insert_with(Instant::now);
                }
            }
            Outcome::Transient { .. } | Outcome::Auth { .. } => {}
        }
        drop(h);
        self.changed.notify_waiters();
    }

    async fn attempt(&self, i: usize, path: &str, body: &[u8]) -> Outcome {
        let s = &self.servers[i];
        let mut req = self
            .client
            .post(format!("{}{path}", s.url))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_vec());
        if let Some(k) = &self.key {
            req = req.bearer_auth(&k.0);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                return Outcome::Transient {
                    reason: format!("{}: {}", s.shown, describe(&e)),
                    server_fault: true,
                    refused: e.is_connect(),
                    retry_after: None,
                };
            }
        };
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| Duration::from_secs_f64(s.min(300.0)));
        let bytes = match read_body(resp).await {
            Ok(b) => b,
            Err(e @ BodyError::TooLarge) => return Outcome::Rejected { status, reason: e.to_string() },
            Err(e) => {
                return Outcome::Transient {
                    reason: format!("{}: reading the response: {e}", s.shown),
                    server_fault: true,
                    refused: false,
                    retry_after: None,
                };
            }
        };
        match status {
            200..=299 => Outcome::Body(bytes),
            429 => Outcome::Transient {
                reason: format!("{}: HTTP 429 (rate limited)", s.shown),
                server_fault: false,
                refused: false,
                retry_after,
            },
            408 | 500..=599 => Outcome::Transient {
                reason: format!("{}: HTTP {status}: {}", s.shown, self.excerpt(&bytes)),
                server_fault: true,
                refused: false,
                retry_after,
            },
            401 | 403 => Outcome::Auth { status, reason: self.excerpt(&bytes) },
            _ => Outcome::Rejected { status, reason: self.excerpt(&bytes) },
        }
    }

    /// POSTs a JSON body to `path` on some server (see the module's invariants).
    pub(crate) async fn post(&self, path: &str, body: &[u8]) -> Result<Vec<u8>, PoolError> {
        let mut attempts = 0u32;
        let mut retries = 0u32;
        // Patience bounds rate limiting as it bounds outages: `retries` alone may be
        // practically endless, and a server that answers 429 forever never comes back.
        let mut rate_limited_since: Option<Instant> = None;
        loop {
            let (i, slot) = self.pick().await?;
            attempts += 1;
            let started = Instant::now();
            let outcome = self.attempt(i, path, body).await;
            drop(slot);
            self.record(i, &outcome, started.elapsed().as_secs_f64());
            let s = &self.servers[i];
            match outcome {
                Outcome::Body(b) => {
                    s.ok.fetch_add(1, Ordering::Relaxed);
                    return Ok(b);
                }
                Outcome::Rejected { status, reason } => {
                    s.rejected.fetch_add(1, Ordering::Relaxed);
                    return Err(PoolError::Rejected { server: s.shown.clone(), status, reason });
                }
                Outcome::Auth { status, reason } => {
                    return Err(PoolError::Auth { server: s.shown.clone(), status, reason });
                }
                Outcome::Transient { reason, refused, retry_after, server_fault } => {
                    s.errors.fetch_add(1, Ordering::Relaxed);
                    self.retried.fetch_add(1, Ordering::Relaxed);
                    if server_fault {
                        rate_limited_since = None;
                    } else {
                        let since = *rate_limited_since.get_or_insert(started);
                        let seconds = since.elapsed();
                        if seconds >= self.cfg.patience {
                            let server = s.shown.clone();
                            return Err(PoolError::RateLimited { server, seconds: seconds.as_secs_f64() });
                        }
                    }
                    if !refused {
                        retries += 1;
                        if retries > self.cfg.retries {
                            return Err(PoolError::GaveUp { attempts, last: reason });
                        }
                        let wait = retry_after.unwrap_or_else(|| self.backoff(retries - 1));
                        tokio::time::sleep(wait).await;
                    }
                }
            }
        }
    }
}

/// A reqwest error in words, without the URL's user info or query (reqwest's own
/// message holds the full URL).
fn describe(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else if e.is_body() || e.is_decode() {
        "broken response body"
    } else if e.is_request() {
        "request failed"
    } else {
        "error"
    };
    let mut source = std::error::Error::source(e);
    let mut detail = String::new();
    while let Some(s) = source {
        detail = s.to_string();
        source = s.source();
    }
    if detail.is_empty() { kind.to_owned() } else { format!("{kind} ({detail})") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::scripted;
    use std::net::TcpListener;

    fn fast() -> PoolConfig {
        PoolConfig {
            max_in_flight: 1,
            timeout: Duration::from_secs(5),
            retries: 4,
            patience: Duration::from_millis(600),
            backoff: Duration::from_millis(5),
            backoff_max: Duration::from_millis(20),
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn transient_failures_are_retried_and_rejections_are_not() {
        let (url, _h) = scripted(vec![
            (500, "", "boom"),
            (429, "retry-after: 0\r\n", ""),
            (200, "", "fine"),
            (400, "", "{\"error\": \"prompt too long\"}"),
        ]);
        let pool = Pool::new(&[url], None, fast()).unwrap();
        let rt = rt();
        assert_eq!(rt.block_on(pool.post("/x", b"{}")).unwrap(), b"fine");
        assert_eq!(pool.stats().retried, 2);
        match rt.block_on(pool.post("/x", b"{}")) {
            Err(PoolError::Rejected { status: 400, reason, .. }) => assert!(reason.contains("too long")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_start_up_request_is_asked_again_when_the_connection_closes_unanswered() {
        let (url, _h) = scripted(vec![(0, "", ""), (0, "", ""), (200, "", "{\"data\": []}")]);
        let pool = Pool::new(&[url], None, fast()).unwrap();
        let rt = rt();
        assert_eq!(rt.block_on(pool.get_from(0, "/models")).unwrap(), b"{\"data\": []}");
        assert_eq!(pool.stats().retried, 2);
        // Past `retries`, the last failure is the answer.
        let (url, _h) = scripted(vec![(0, "", ""); 5]);
        let pool = Pool::new(&[url], None, fast()).unwrap();
        let err = rt.block_on(pool.get_from(0, "/models")).unwrap_err();
        assert!(err.contains("/models: request failed"), "{err}");
        assert_eq!(pool.stats().retried, 4);
    }

    #[test]
    fn a_refused_start_up_request_is_not_asked_again() {
        let dead = TcpListener::bind("127.0.0.1:0").unwrap();
        let dead_url = format!("http://{}", dead.local_addr().unwrap());
        drop(dead);
        let pool = Pool::new(&[dead_url], None, fast()).unwrap();
        let err = rt().block_on(pool.post_to_root(0, "/tokenize", b"{}")).unwrap_err();
        assert!(err.contains("connection failed"), "{err}");
        assert_eq!(pool.stats().retried, 0);
    }

    #[test]
    fn a_dead_server_is_set_aside_and_the_live_one_serves() {
        let dead = TcpListener::bind("127.0.0.1:0").unwrap();
        let dead_url = format!("http://{}", dead.local_addr().unwrap());
        drop(dead);
        let (live, _h) = scripted(vec![]);
        let pool = Pool::new(&[dead_url, live], None, fast()).unwrap();
        let rt = rt();
        for _ in 0..5 {
            assert_eq!(rt.block_on(pool.post("/x", b"{}")).unwrap(), b"ok");
        }
        let st = pool.stats();
        assert_eq!(st.servers[0].ok, 0);
        assert_eq!(st.servers[1].ok, 5);
        assert!(st.servers[0].times_set_aside >= 1);
    }

    #[test]
    fn every_server_down_past_the_patience_stops_with_their_names() {
        let dead = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://user:secret@{}/v1", dead.local_addr().unwrap());
        drop(dead);
        let pool = Pool::new(&[url], Some(ApiKey::new("sk-secret".into())), fast()).unwrap();
        let err = rt().block_on(pool.post("/x", b"{}")).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, PoolError::AllDown { .. }), "{msg}");
        assert!(msg.contains("127.0.0.1") && !msg.contains("secret"), "{msg}");
        assert!(!format!("{:?}", ApiKey::new("sk-secret".into())).contains("sk-"));
    }

    #[test]
    fn base_urls_are_parsed_by_one_rule() {
        for ok in ["http://h:1", "https://h/v1", "HTTP://h:1", "http://u:p@h:1/v1/"] {
            assert!(parse_base_url(ok).is_ok(), "{ok}");
        }
        for (bad, says) in [
            ("http://h:1?api-version=1", "has a query"),
            ("http://h:1#frag", "has a fragment"),
            ("http://:1", "empty host"),
            (" http://h:1", "blanks around it"),
            ("ftp://h", "not an http"),
            ("h:1", "not an http"),
        ] {
            let e = parse_base_url(bad).unwrap_err();
            assert!(e.contains(says) && e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
        assert_eq!(without_password("http://u:s%24cret@h:1/v1"), "http://u:REDACTED@h:1/v1");
        assert_eq!(without_password("http://h:1"), "http://h:1");
        let e = parse_base_url("http://u:secret@h:1?x=1").unwrap_err();
        assert!(!e.contains("secret") && e.contains("<user info>@h:1?x=1"), "{e}");
    }

    #[test]
    fn secrets_are_scrubbed_in_every_form_they_travel() {
        assert_eq!(base64(b"alice:pa$ss-9q"), "YWxpY2U6cGEkc3MtOXE=");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b""), "");
        let url = parse_base_url("http://alice:pa%24ss@h:1").unwrap();
        let key = ApiKey::new("sk-\"q".into());
        let s = Secrets::new(Some(&key), &[url]);
        let text = format!(
            "Authorization: Bearer sk-\"q; echoed {}; Basic {}; raw pa%24ss, decoded pa$ss",
            serde_json::to_string("sk-\"q").unwrap(),
            base64(b"alice:pa$ss")
        );
        let clean = s.scrub(&text);
        for secret in ["sk-", "pa%24ss", "pa$ss", &base64(b"alice:pa$ss")] {
            assert!(!clean.contains(secret), "{secret} in {clean}");
        }
        assert!(clean.contains("Bearer <redacted>"), "{clean}");
    }

    #[test]
    fn a_server_failing_every_request_stops_with_its_last_answer() {
        let (url, _h) = scripted(vec![(500, "", "{\"error\": \"CUDA out of memory\"}"); 50]);
        let pool =
            Pool::new(&[url], None, PoolConfig { retries: 1000, patience: Duration::from_millis(300), ..fast() })
                .unwrap();
        let msg = rt().block_on(pool.post("/x", b"{}")).unwrap_err().to_string();
        assert!(msg.contains("HTTP 500") && msg.contains("CUDA out of memory"), "{msg}");
    }

    #[test]
    fn endless_rate_limiting_is_bounded_by_the_patience() {
        // Spaced so that the scripted server's 20 answers outlast the patience.
        let (url, _h) = scripted(vec![(429, "retry-after: 0.05\r\n", ""); 20]);
        let cfg = PoolConfig { retries: u32::MAX, patience: Duration::from_millis(200), ..fast() };
        let pool = Pool::new(&[url], None, cfg).unwrap();
        match rt().block_on(pool.post("/x", b"{}")) {
            Err(PoolError::RateLimited { .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn retries_are_bounded() {
        let (url, _h) = scripted(vec![(503, "", ""); 10]);
        let pool = Pool::new(&[url], None, PoolConfig { retries: 2, ..fast() }).unwrap();
        match rt().block_on(pool.post("/x", b"{}")) {
            Err(PoolError::GaveUp { attempts: 3, .. }) => {}
            other => panic!("{other:?}"),
        }
    }
}
