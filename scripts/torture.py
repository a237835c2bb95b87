"""Kill-and-resume torture test of `jury run` (run through scripts/torture)."""
import json, os, random, re, signal, subprocess, sys, tempfile, time

jury, kills, examples, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(seed)
work = tempfile.mkdtemp(prefix="jury-torture-")
root = os.getcwd()


def config(name):
    out = os.path.join(work, name)
    path = os.path.join(work, f"{name}.yaml")
    with open(path, "w") as f:
        f.write(f"""name: torture
dataset: {{name: demo-facts, path: {root}/datasets/demo-facts.csv, limit: {examples}, seed: 3}}
prompt: {root}/prompts/demo-facts.yaml
judges:
  - name: smollm2-135m
    gguf: {root}/models/SmolLM2-135M-Instruct.Q4_1.gguf
runtime: {{max_concurrency: 1, prefix_cache: false, max_prompt_tokens: 1024}}
output: {out}
""")
    return path, out


def run(cfg):
    r = subprocess.run([jury, "run", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: jury run exited {r.returncode}: {r.stderr.strip()}")


def published(out):
    """The output files (not the cache, manifest or jury's marker and lock), with
    metrics.json's timings, report.html's total time and the folder's own path removed."""
    files = {}
    for name in sorted(os.listdir(out)):
        if name in ("cache.jsonl", "manifest.json") or name.startswith("."):
            continue
        text = open(os.path.join(out, name), "rb").read()
        # The resolved config names its own output folder.
        text = text.replace(out.encode(), b"OUT")
        if name == "metrics.json":
            text = re.sub(rb'"seconds": [0-9.e+-]+', b'"seconds": 0', text)
        if name == "report.html":
            text = re.sub(rb'<td>total time</td><td>[0-9]+ s</td>', b'', text)
        files[name] = text
    return files


def check_dir(out, when, finished=False):
    """Cache lines (whole, unique). Temporary files never appear in the output folder
    itself; a killed run's staging folder may, and the next run clears it."""
    strays = [n for n in os.listdir(out) if n.startswith(".tmp") or (finished and n == ".jury-staging")]
    if strays:
        sys.exit(f"FAIL {when}: stray files left: {strays}")
    path = os.path.join(out, "cache.jsonl")
    if not os.path.exists(path):
        return 0
    lines = open(path, "rb").read().split(b"\n")
    whole = [l for l in lines[:-1]]
    keys = [json.loads(l)["key"] for l in whole]
    if len(keys) != len(set(keys)):
        sys.exit(f"FAIL {when}: duplicate cache lines")
    return len(keys)


clean_cfg, clean_out = config("clean")
t0 = time.time()
run(clean_cfg)
clean_seconds = time.time() - t0
want = published(clean_out)
cfg, out = config("killed")
done = 0
moments = []
estimate = clean_seconds
for i in range(kills):
    # Kills aim inside the run as it is now (a run whose judgments are all cached takes
    # only loading and aggregation); every other kill lands in its last fifth, where
    # aggregation and publishing happen.
    delay = rng.uniform(0.0, estimate) if i % 2 == 0 else rng.uniform(0.8, 1.0) * estimate
    p = subprocess.Popen([jury, "run", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.time()
    while time.time() - t0 < delay and p.poll() is None:
        time.sleep(0.01)
    finished = p.poll() is not None
    if finished:
        estimate = time.time() - t0
    else:
        p.send_signal(signal.SIGKILL)
    p.wait()
    moments.append(f"{delay:.2f}s{'' if not finished else ' (had finished)'}")
    now = check_dir(out, f"after kill {i + 1} at {delay:.2f} s") if os.path.isdir(out) else 0
    if now < done:
        sys.exit(f"FAIL after kill {i + 1}: the cache lost judgments ({done} -> {now})")
    done = now
run(cfg)
if check_dir(out, "after the final run", finished=True) != examples:
    sys.exit("FAIL: the cache does not hold one line per judgment")
got = published(out)
if got.keys() != want.keys():
    sys.exit(f"FAIL: files differ: {sorted(got)} vs {sorted(want)}")
diff = [n for n in want if got[n] != want[n]]
if diff:
    sys.exit(f"FAIL: files differ from the clean run's: {diff}")
print(f"ok: {kills} kills at {', '.join(moments)}; clean run {clean_seconds:.1f} s; "
      f"{len(want)} files equal the clean run's byte for byte; {examples} cache lines, no duplicates, no strays")
