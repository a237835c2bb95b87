//! `screenshot-report OUT_DIR [PNG]` (default PNG: OUT_DIR/report.png): opens a run's
//! report.html in headless Chromium and writes a PNG of the page; fails when the page
//! writes anything to the console (the report has no script, so any line is an error) or
//! asks for anything beyond its own file. `scripts/screenshot-report` builds and runs it;
//! the browser test runs it too.
//!
//! Chromium (Debian's `chromium`; `scripts/install-chromium.sh` installs it) is driven
//! over the DevTools protocol on a pipe (`--remote-debugging-pipe`: commands on its fd 3,
//! answers and events on its fd 4, each a JSON object ending in NUL), with a new empty
//! profile each time. Only the events of the page's own target count: its requests
//! (Network.requestWillBeSent, and Fetch.requestPaused, which fails every request but the
//! report's) and its console (Runtime.consoleAPICalled, Runtime.exceptionThrown,
//! Log.entryAdded). The browser's own background traffic belongs to no page and cannot
//! fail the check. Where the user may make one, Chromium runs in a network namespace with
//! no route (`unshare -n`), so nothing leaves the machine either way.
//!
//! Exit status: 0 the page rendered cleanly; 1 it wrote to the console, asked for
//! something, or did not render; 2 usage, a missing report or a missing browser.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const WIDTH: u32 = 1200;
const HEIGHT: u32 = 3000;
const LOAD_TIMEOUT: Duration = Duration::from_secs(60);
/// Events that arrive after the load event (a timer, a late request) are still the page's.
const SETTLE: Duration = Duration::from_millis(500);

/// Why the check stopped, with its exit status.
struct Failure(String, u8);

fn fail<T>(message: impl Into<String>, status: u8) -> Result<T, Failure> {
    Err(Failure(message.into(), status))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(png) => {
            println!("wrote {}", png.display());
            ExitCode::SUCCESS
        }
        Err(Failure(message, status)) => {
            eprintln!("error: {message}");
            ExitCode::from(status)
        }
    }
}

fn run(args: &[String]) -> Result<PathBuf, Failure> {
    let (out_dir, png) = match args {
        [dir] => (PathBuf::from(dir), Path::new(dir).join("report.png")),
        [dir, png] => (PathBuf::from(dir), PathBuf::from(png)),
        _ => return fail("usage: scripts/screenshot-report OUT_DIR [PNG]", 2),
    };
    let page = std::path::absolute(out_dir.join("report.html")).map_err(|e| Failure(e.to_string(), 2))?;
    if !page.is_file() {
        return fail(format!("{} not found (jury run / jury aggregate / jury report write it)", page.display()), 2);
    }
    let Some(binary) = on_path("chromium").or_else(|| on_path("chromium-browser")) else {
        return fail("no chromium on PATH (scripts/install-chromium.sh, or apt-get install chromium)", 2);
    };
    let url = file_url(&page);
    let work = std::env::temp_dir().join(format!("jury-chromium-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| Failure(format!("{}: {e}", work.display()), 2))?;
    let shot = screenshot(&binary, &work, &url);
    let _ = std::fs::remove_dir_all(&work);
    std::fs::write(&png, shot?).map_err(|e| Failure(format!("{}: {e}", png.display()), 1))?;
    Ok(png)
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}

/// `file://` and the path, each byte outside the unreserved set percent-encoded.
fn file_url(path: &Path) -> String {
    let mut url = String::from("file://");
    for b in path.to_string_lossy().bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            url.push(char::from(b));
        } else {
            url.push_str(&format!("%{b:02X}"));
        }
    }
    url
}

/// One Chromium process spoken to over `--remote-debugging-pipe`.
struct Browser {
    child: Child,
    commands: ChildStdin,
    messages: Receiver<Option<Value>>,
    next_id: u64,
    log: PathBuf,
}

impl Browser {
    fn start(binary: &Path, work: &Path) -> Result<Self, Failure> {
        let log = work.join("chromium.log");
        let log_file = std::fs::File::create(&log).map_err(|e| Failure(format!("{}: {e}", log.display()), 2))?;
        let mut cmd = match without_network() {
            true => {
                let mut c = Command::new("unshare");
                c.arg("-n").arg("sh");
                c
            }
            false => Command::new("sh"),
        };
        // The shell moves the pipes to the descriptors Chromium reads and writes (3 and
        // 4) and its own output to the log, then becomes Chromium.
        cmd.args(["-c", "exec \"$0\" \"$@\" 3<&0 4>&1 </dev/null >&2"]).arg(binary).args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--disable-extensions",
            "--no-first-run",
            "--no-default-browser-check",
            "--mute-audio",
            "--remote-debugging-pipe",
        ]);
        cmd.arg(format!("--user-data-dir={}", work.join("profile").display()))
            .arg(format!("--window-size={WIDTH},{HEIGHT}"))
            .arg("about:blank")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file);
        let mut child = cmd.spawn().map_err(|e| Failure(format!("starting chromium: {e}"), 2))?;
        let (Some(commands), Some(mut answers)) = (child.stdin.take(), child.stdout.take()) else {
            return fail("chromium's pipes were not opened", 1);
        };
        let (tx, messages) = channel();
        std::thread::spawn(move || {
            let (mut buffered, mut chunk) = (Vec::new(), vec![0u8; 1 << 16]);
            while let Ok(n @ 1..) = answers.read(&mut chunk) {
                buffered.extend_from_slice(&chunk[..n]);
                while let Some(end) = buffered.iter().position(|b| *b == 0) {
                    let raw: Vec<u8> = buffered.drain(..=end).collect();
                    if let Ok(message) = serde_json::from_slice(&raw[..end]) {
                        let _ = tx.send(Some(message));
                    }
                }
            }
            let _ = tx.send(None);
        });
        Ok(Self { child, commands, messages, next_id: 0, log })
    }

    fn send(&mut self, method: &str, params: Value, session: Option<&str>) -> u64 {
        self.next_id += 1;
        let mut message = json!({"id": self.next_id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = message.to_string().into_bytes();
        bytes.push(0);
        // A write that fails means Chromium exited; the reader reports it.
        let _ = self.commands.write_all(&bytes);
        self.next_id
    }

    /// The next message, or `None` at the deadline.
    fn next_message(&self, deadline: Instant) -> Result<Option<Value>, Failure> {
        match self.messages.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Some(message)) => Ok(Some(message)),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Ok(None) | Err(RecvTimeoutError::Disconnected) => {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                fail(format!("chromium exited before the page was done:\n{log}"), 1)
            }
        }
    }

    fn close(mut self) {
        self.send("Browser.close", json!({}), None);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `unshare -n` where this user may make a network namespace.
fn without_network() -> bool {
    Command::new("unshare").args(["-n", "true"]).output().is_ok_and(|o| o.status.success())
}

/// The report's tab: every event of its session is judged here, and nothing else.
struct Page {
    browser: Browser,
    url: String,
    session: Option<String>,
    problems: Vec<String>,
    loaded: bool,
}

impl Page {
    /// Sends a command and returns its result, handling the page's events meanwhile.
    fn call(&mut self, method: &str, params: Value) -> Result<Value, Failure> {
        let wanted = self.browser.send(method, params, self.session.as_deref());
        let deadline = Instant::now() + LOAD_TIMEOUT;
        loop {
            let Some(message) = self.browser.next_message(deadline)? else {
                return fail(format!("chromium did not answer {method} within {} s", LOAD_TIMEOUT.as_secs()), 1);
            };
            if message.get("id").and_then(Value::as_u64) == Some(wanted) {
                if let Some(error) = message.get("error") {
                    return fail(format!("chromium refused {method}: {}", error["message"]), 1);
                }
                return Ok(message.get("result").cloned().unwrap_or(json!({})));
            }
            self.event(&message);
        }
    }

    /// Handles events until `done` holds or the deadline passes; whether it held.
    fn pump(&mut self, done: impl Fn(&Self) -> bool, deadline: Instant) -> Result<bool, Failure> {
        while !done(self) {
            let Some(message) = self.browser.next_message(deadline)? else { return Ok(false) };
            self.event(&message);
        }
        Ok(true)
    }

    fn event(&mut self, message: &Value) {
        let session = message.get("sessionId").and_then(Value::as_str);
        let (Some(method), true) = (message.get("method").and_then(Value::as_str), session == self.session.as_deref())
        else {
            return;
        };
        let params = &message["params"];
        let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
        match method {
            "Page.loadEventFired" => self.loaded = true,
            "Network.requestWillBeSent" => self.request(&text(&params["request"]["url"])),
            "Fetch.requestPaused" => {
                let url = text(&params["request"]["url"]);
                self.request(&url);
                let id = params["requestId"].clone();
                let session = self.session.clone();
                if url == self.url {
                    self.browser.send("Fetch.continueRequest", json!({"requestId": id}), session.as_deref());
                } else {
                    let reply = json!({"requestId": id, "errorReason": "BlockedByClient"});
                    self.browser.send("Fetch.failRequest", reply, session.as_deref());
                }
            }
            "Runtime.consoleAPICalled" => {
                let args = params["args"].as_array().cloned().unwrap_or_default();
                let words: Vec<String> = args
                    .iter()
                    .map(|a| text(a.get("value").or_else(|| a.get("description")).unwrap_or(&json!(""))))
                    .collect();
                self.problems.push(format!("console.{}: {}", text(&params["type"]), words.join(" ")));
            }
            "Runtime.exceptionThrown" => {
                let details = &params["exceptionDetails"];
                let description = details["exception"]["description"].as_str().or_else(|| details["text"].as_str());
                self.problems.push(format!("uncaught exception: {}", description.unwrap_or_default()));
            }
            "Log.entryAdded" => {
                let entry = &params["entry"];
                let url =
                    entry["url"].as_str().filter(|u| !u.is_empty()).map(|u| format!(" ({u})")).unwrap_or_default();
                let (level, source, words) = (text(&entry["level"]), text(&entry["source"]), text(&entry["text"]));
                self.problems.push(format!("console {level} [{source}]: {words}{url}"));
            }
            _ => {}
        }
    }

    fn request(&mut self, url: &str) {
        let problem = format!("request: {url}");
        if url != self.url && !self.problems.contains(&problem) {
            self.problems.push(problem);
        }
    }
}

/// The page's PNG, or why it failed the check.
fn screenshot(binary: &Path, work: &Path, url: &str) -> Result<Vec<u8>, Failure> {
    let browser = Browser::start(binary, work)?;
    let mut page = Page { browser, url: url.to_owned(), session: None, problems: Vec::new(), loaded: false };
    let shot = visit(&mut page);
    let Page { browser, problems, .. } = page;
    browser.close();
    let shot = shot?;
    if !problems.is_empty() {
        for problem in &problems {
            eprintln!("{problem}");
        }
        return fail("the page wrote to the console or asked for something beyond its own file (lines above)", 1);
    }
    match shot["data"].as_str().and_then(base64) {
        Some(png) if !png.is_empty() => Ok(png),
        _ => fail(format!("chromium returned no screenshot for {url}"), 1),
    }
}

fn visit(page: &mut Page) -> Result<Value, Failure> {
    let target = page.call("Target.createTarget", json!({"url": "about:blank"}))?;
    let attached = page.call("Target.attachToTarget", json!({"targetId": target["targetId"], "flatten": true}))?;
    page.session = attached["sessionId"].as_str().map(str::to_owned);
    for domain in ["Page", "Runtime", "Log", "Network"] {
        page.call(&format!("{domain}.enable"), json!({}))?;
    }
    page.call("Fetch.enable", json!({"patterns": [{"urlPattern": "*"}]}))?;
    let metrics = json!({"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": false});
    page.call("Emulation.setDeviceMetricsOverride", metrics)?;
    let url = page.url.clone();
    let navigated = page.call("Page.navigate", json!({"url": url}))?;
    if let Some(error) = navigated["errorText"].as_str().filter(|e| !e.is_empty()) {
        return fail(format!("chromium could not open {url}: {error}"), 1);
    }
    if !page.pump(|p| p.loaded, Instant::now() + LOAD_TIMEOUT)? {
        page.problems.push(format!("the page did not finish loading within {} s", LOAD_TIMEOUT.as_secs()));
    }
    page.pump(|_| false, Instant::now() + SETTLE)?;
    page.call("Page.captureScreenshot", json!({"format": "png"}))
}

/// Standard base64 (with or without padding) to bytes; `None` on any other character.
fn base64(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.trim_end_matches('=').bytes() {
        acc = (acc << 6) | u32::from(value(c)?);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}
