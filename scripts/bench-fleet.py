"""The fleet benchmark's driver (run through scripts/bench-fleet): for 1, 8, 32, 64 and 128 fake
servers, writes a data set of statements sized to about 8 seconds at the ideal rate,
runs `jury run` on it REPS times (a fresh output directory, so nothing comes from the
cache) and prints jury's judging rate against the ideal. Then four judges, each on its
own quarter of 4, 8 and 32 servers, full and adaptive (target 0.95, at least 2
judges, warm-up 0.1, the Dawid-Skene posterior): calls over the run's wall seconds (manifest.json `total_seconds`, the
rounds' waits included) against the same ideal, and against the bound the calls allow
(each judge's calls at its own quarter's ideal rate, the busiest judge setting the
time: an adaptive example asks only the judges it needs)."""
import json, os, shutil, statistics, subprocess, sys, tempfile

jury, fleet_bin, delay_ms, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
IN_FLIGHT = 8
work = tempfile.mkdtemp(prefix="jury-bench-fleet-")
repo = os.getcwd()


def manifest(urls_per_judge, n, tag, adaptive):
    """Runs `jury run` once: one server judge per list of URLs on the first n statements
    (adaptively or not), in a fresh output folder; returns its manifest.json."""
    data = os.path.join(work, f"data-{n}.csv")
    if not os.path.exists(data):
        with open(data, "w") as f:
            f.write("id,statement,label\n")
            for i in range(n):
                f.write(f"s{i},Statement number {i} is about the number {i * 7919 % 10007}.,{'true' if i % 2 else 'false'}\n")
    out = os.path.join(work, f"out-{tag}")
    config = os.path.join(work, f"{tag}.yaml")
    # The judges send the same request for an example (one model name, one prompt), so
    # the fake fleet's answers agree and Dawid-Skene settles examples early.
    judges = "".join(
        f"""  - name: fleet-{k}
    server:
      base_urls: {json.dumps(urls)}
      model: fake
      max_in_flight: {IN_FLIGHT}
      timeout_s: 30
      retries: 2
      top_logprobs: 5
"""
        for k, urls in enumerate(urls_per_judge)
    )
    with open(config, "w") as f:
        f.write(f"""name: bench-fleet
dataset:
  name: demo-facts
  path: {data}
prompt: {repo}/prompts/demo-facts.yaml
judges:
{judges}{"adaptive: {target: 0.95, min_judges: 2, warmup: 0.1, seed: 0, stopping_model: ds}" if adaptive else ""}
aggregate:
  methods: [mv]
output: {out}
""")
    r = subprocess.run([jury, "run", config], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"jury run failed: {r.stderr[-2000:]}")
    m = json.load(open(os.path.join(out, "manifest.json")))
    shutil.rmtree(out)
    if any(j["failed"] for j in m["judges"]):
        sys.exit(f"{tag}: failed judgments")
    return m


def run_once(urls, n, tag):
    """One judge on every server: its scored examples over its judging seconds."""
    judge = manifest([urls], n, tag, False)["judges"][0]
    if judge["scored"] != n:
        sys.exit(f"{tag}: scored {judge['scored']} of {n}")
    return judge["scored"] / judge["judge_seconds"]


def run_jury(urls_per_judge, n, tag, adaptive):
    """Several judges: the calls, their rate over the run's wall seconds, and the bound."""
    m = manifest(urls_per_judge, n, tag, adaptive)
    per_judge = m["adaptive"]["calls_per_judge"] if adaptive else {j["name"]: j["scored"] for j in m["judges"]}
    calls = sum(per_judge.values())
    # The fastest these calls can go: each judge's calls at its own servers' ideal rate,
    # the busiest judge setting the time.
    seconds = max(per_judge[f"fleet-{k}"] / (len(urls) * IN_FLIGHT * 1000 / delay_ms) for k, urls in enumerate(urls_per_judge))
    return calls, calls / m["total_seconds"], calls / seconds


rows = []
jury_rows = []
try:
    for servers in (1, 8, 32, 64, 128):
        fleet = subprocess.Popen([fleet_bin, str(servers), str(delay_ms)], stdout=subprocess.PIPE, text=True)
        try:
            urls = [fleet.stdout.readline().strip() for _ in range(servers)]
            ideal = servers * IN_FLIGHT * 1000 / delay_ms
            n = max(200, int(ideal * 8))
            rates = [run_once(urls, n, f"{servers}-{i}") for i in range(reps)]
            rows.append((servers, n, ideal, statistics.median(rates)))
        finally:
            fleet.kill()
            fleet.wait()
    for servers in (4, 8, 32):
        fleet = subprocess.Popen([fleet_bin, str(servers), str(delay_ms)], stdout=subprocess.PIPE, text=True)
        try:
            urls = [fleet.stdout.readline().strip() for _ in range(servers)]
            quarters = [urls[k::4] for k in range(4)]
            ideal = servers * IN_FLIGHT * 1000 / delay_ms
            # About 8 seconds of the full jury's calls at the ideal rate.
            n = max(200, int(ideal * 8 / 4))
            for mode in ("full", "adaptive"):
                runs = [run_jury(quarters, n, f"jury-{servers}-{mode}-{i}", mode == "adaptive") for i in range(reps)]
                calls, _, bound = runs[0]
                jury_rows.append((servers, mode, n, calls, ideal, bound, statistics.median(r for _, r, _ in runs)))
        finally:
            fleet.kill()
            fleet.wait()
finally:
    shutil.rmtree(work)
print(f"{'servers':>7} {'examples':>9} {'ideal/s':>9} {'jury/s':>9} {'share':>7}")
for servers, n, ideal, rate in rows:
    print(f"{servers:>7} {n:>9} {ideal:>9.0f} {rate:>9.0f} {100 * rate / ideal:>6.1f}%")
print()
print("four judges, each on a quarter of the servers")
print(f"{'servers':>7} {'mode':>9} {'examples':>9} {'calls':>7} {'ideal/s':>9} {'bound/s':>9} {'jury/s':>9} {'of ideal':>9} {'of bound':>9}")
for servers, mode, n, calls, ideal, bound, rate in jury_rows:
    print(f"{servers:>7} {mode:>9} {n:>9} {calls:>7} {ideal:>9.0f} {bound:>9.0f} {rate:>9.0f} {100 * rate / ideal:>8.1f}% {100 * rate / bound:>8.1f}%")
