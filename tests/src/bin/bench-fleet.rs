//! The fleet benchmark's driver (`scripts/bench-fleet` builds and runs it): for 1, 8, 32,
//! 64 and 128 fake servers (`fleet-server`, beside this program), writes a data set of
//! statements sized to about 8 seconds at the ideal rate, runs `jury run` on it REPS times
//! (a fresh output directory, so nothing comes from the cache) and prints jury's judging
//! rate against the ideal. Then four judges, each on its own quarter of 4, 8 and 32
//! servers, full and adaptive (target 0.95, at least 2 judges, warm-up 0.1, the
//! Dawid-Skene posterior): calls over the run's wall seconds (manifest.json
//! `total_seconds`, the rounds' waits included) against the same ideal, and against the
//! bound the calls allow (each judge's calls at its own quarter's ideal rate, the busiest
//! judge setting the time: an adaptive example asks only the judges it needs).
//!
//!   bench-fleet JURY DELAY_MS REPS

use std::fmt::Write as _;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// Requests each judge keeps in flight per server.
const IN_FLIGHT: usize = 8;

struct Bench {
    jury: PathBuf,
    work: PathBuf,
    repo: PathBuf,
    delay_ms: u64,
}

type Failed = String;

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let parsed = match &args[..] {
        [_, jury, delay, reps] => delay.parse::<u64>().ok().zip(reps.parse::<usize>().ok()).map(|d| (jury, d)),
        _ => None,
    };
    let Some((jury, (delay_ms, reps))) = parsed else {
        eprintln!("usage: bench-fleet JURY DELAY_MS REPS");
        return std::process::ExitCode::from(2);
    };
    let work = std::env::temp_dir().join(format!("jury-bench-fleet-{}", std::process::id()));
    let repo = std::env::current_dir().unwrap_or_default();
    let bench = Bench { jury: PathBuf::from(jury), work: work.clone(), repo, delay_ms };
    let result = std::fs::create_dir_all(&work).map_err(|e| e.to_string()).and_then(|()| bench.run(reps));
    let _ = std::fs::remove_dir_all(&work);
    match result {
        Ok(table) => {
            print!("{table}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// A fake fleet of `servers` loopback servers, killed when dropped.
struct Fleet {
    child: Child,
    urls: Vec<String>,
}

impl Fleet {
    fn start(servers: usize, delay_ms: u64) -> Result<Self, Failed> {
        let binary = std::env::current_exe().map_err(|e| e.to_string())?.with_file_name("fleet-server");
        let mut child = Command::new(&binary)
            .args([servers.to_string(), delay_ms.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", binary.display()))?;
        let stdout = child.stdout.take().ok_or("fleet-server's stdout")?;
        let urls: Vec<String> = std::io::BufReader::new(stdout).lines().take(servers).map_while(Result::ok).collect();
        if urls.len() != servers {
            return Err(format!("fleet-server printed {} of {servers} URLs", urls.len()));
        }
        Ok(Self { child, urls })
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

impl Bench {
    fn ideal(&self, servers: usize) -> f64 {
        (servers * IN_FLIGHT) as f64 * 1000.0 / self.delay_ms as f64
    }

    /// Runs `jury run` once: one server judge per list of URLs on the first `n`
    /// statements (adaptively or not), in a fresh output folder; returns its manifest.
    fn manifest(&self, urls_per_judge: &[Vec<String>], n: usize, tag: &str, adaptive: bool) -> Result<Value, Failed> {
        let data = self.work.join(format!("data-{n}.csv"));
        if !data.exists() {
            let mut text = String::from("id,statement,label\n");
            for i in 0..n {
                let label = if i % 2 == 1 { "true" } else { "false" };
                let _ = writeln!(text, "s{i},Statement number {i} is about the number {}.,{label}", i * 7919 % 10007);
            }
            std::fs::write(&data, text).map_err(|e| e.to_string())?;
        }
        let out = self.work.join(format!("out-{tag}"));
        // The judges send the same request for an example (one model name, one prompt),
        // so the fake fleet's answers agree and Dawid-Skene settles examples early.
        let mut judges = String::new();
        for (k, urls) in urls_per_judge.iter().enumerate() {
            let urls = serde_json::to_string(urls).map_err(|e| e.to_string())?;
            let _ = write!(
                judges,
                "  - name: fleet-{k}\n    server:\n      base_urls: {urls}\n      model: fake\n      max_in_flight: {IN_FLIGHT}\n      timeout_s: 30\n      retries: 2\n      top_logprobs: 5\n"
            );
        }
        let adaptive = if adaptive {
            "adaptive: {target: 0.95, min_judges: 2, warmup: 0.1, seed: 0, stopping_model: ds}\n"
        } else {
            ""
        };
        let config = format!(
            "name: bench-fleet\ndataset:\n  name: demo-facts\n  path: {}\nprompt: {}\njudges:\n{judges}{adaptive}aggregate:\n  methods: [mv]\noutput: {}\n",
            data.display(),
            self.repo.join("prompts/demo-facts.yaml").display(),
            out.display()
        );
        let config_path = self.work.join(format!("{tag}.yaml"));
        std::fs::write(&config_path, config).map_err(|e| e.to_string())?;
        let run = Command::new(&self.jury).arg("run").arg(&config_path).stdout(Stdio::null()).output();
        let run = run.map_err(|e| format!("{}: {e}", self.jury.display()))?;
        if !run.status.success() {
            let stderr = String::from_utf8_lossy(&run.stderr);
            return Err(format!("jury run failed: {}", &stderr[stderr.len().saturating_sub(2000)..]));
        }
        let manifest = read_manifest(&out.join("manifest.json"))?;
        let _ = std::fs::remove_dir_all(&out);
        if manifest["judges"].as_array().into_iter().flatten().any(|j| j["failed"].as_u64() != Some(0)) {
            return Err(format!("{tag}: failed judgments"));
        }
        Ok(manifest)
    }

    /// One judge on every server: its scored examples over its judging seconds.
    fn run_once(&self, urls: &[String], n: usize, tag: &str) -> Result<f64, Failed> {
        let m = self.manifest(&[urls.to_vec()], n, tag, false)?;
        let judge = &m["judges"][0];
        let scored = judge["scored"].as_u64().unwrap_or(0) as usize;
        if scored != n {
            return Err(format!("{tag}: scored {scored} of {n}"));
        }
        Ok(scored as f64 / judge["judge_seconds"].as_f64().unwrap_or(f64::NAN))
    }

    /// Several judges: the calls, their rate over the run's wall seconds, and the bound.
    fn run_jury(
        &self,
        quarters: &[Vec<String>],
        n: usize,
        tag: &str,
        adaptive: bool,
    ) -> Result<(u64, f64, f64), Failed> {
        let m = self.manifest(quarters, n, tag, adaptive)?;
        let calls_of = |name: &str| -> u64 {
            if adaptive {
                m["adaptive"]["calls_per_judge"][name].as_u64().unwrap_or(0)
            } else {
                let judges = m["judges"].as_array().cloned().unwrap_or_default();
                judges.iter().find(|j| j["name"] == name).and_then(|j| j["scored"].as_u64()).unwrap_or(0)
            }
        };
        let per_judge: Vec<u64> = (0..quarters.len()).map(|k| calls_of(&format!("fleet-{k}"))).collect();
        let calls: u64 = per_judge.iter().sum();
        // The fastest these calls can go: each judge's calls at its own servers' ideal
        // rate, the busiest judge setting the time.
        let seconds =
            per_judge.iter().zip(quarters).map(|(c, urls)| *c as f64 / self.ideal(urls.len())).fold(0.0, f64::max);
        Ok((calls, calls as f64 / m["total_seconds"].as_f64().unwrap_or(f64::NAN), calls as f64 / seconds))
    }

    fn run(&self, reps: usize) -> Result<String, Failed> {
        let mut t = format!("{:>7} {:>9} {:>9} {:>9} {:>7}\n", "servers", "examples", "ideal/s", "jury/s", "share");
        for servers in [1, 8, 32, 64, 128] {
            let fleet = Fleet::start(servers, self.delay_ms)?;
            let ideal = self.ideal(servers);
            let n = 200.max((ideal * 8.0) as usize);
            let rates = (0..reps)
                .map(|i| self.run_once(&fleet.urls, n, &format!("{servers}-{i}")))
                .collect::<Result<_, _>>()?;
            let rate = median(rates);
            let _ = writeln!(t, "{servers:>7} {n:>9} {ideal:>9.0} {rate:>9.0} {:>6.1}%", 100.0 * rate / ideal);
        }
        t.push_str("\nfour judges, each on a quarter of the servers\n");
        let _ = writeln!(
            t,
            "{:>7} {:>9} {:>9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "servers", "mode", "examples", "calls", "ideal/s", "bound/s", "jury/s", "of ideal", "of bound"
        );
        for servers in [4, 8, 32] {
            let fleet = Fleet::start(servers, self.delay_ms)?;
            let quarters: Vec<Vec<String>> =
                (0..4).map(|k| fleet.urls.iter().skip(k).step_by(4).cloned().collect()).collect();
            let ideal = self.ideal(servers);
            // About 8 seconds of the full jury's calls at the ideal rate.
            let n = 200.max((ideal * 8.0 / 4.0) as usize);
            for mode in ["full", "adaptive"] {
                let runs = (0..reps)
                    .map(|i| self.run_jury(&quarters, n, &format!("jury-{servers}-{mode}-{i}"), mode == "adaptive"))
                    .collect::<Result<Vec<_>, _>>()?;
                let (calls, _, bound) = runs[0];
                let rate = median(runs.iter().map(|r| r.1).collect());
                let _ = writeln!(
                    t,
                    "{servers:>7} {mode:>9} {n:>9} {calls:>7} {ideal:>9.0} {bound:>9.0} {rate:>9.0} {:>8.1}% {:>8.1}%",
                    100.0 * rate / ideal,
                    100.0 * rate / bound
                );
            }
        }
        Ok(t)
    }
}

fn read_manifest(path: &Path) -> Result<Value, Failed> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}
