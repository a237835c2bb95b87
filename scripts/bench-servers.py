"""Benchmark of server judges (run through scripts/bench-servers): jury against one and
two llama-server processes, and a minimal client sending jury's own requests."""
import csv, http.client, json, os, socket, statistics, subprocess, sys, tempfile, threading, time

jury, server_bin, n, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
gguf = "models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
tokenizer = "models/qwen2.5-coder-0.5b-hf"
work = tempfile.mkdtemp(prefix="bench-servers-")

# n distinct statements from the demo facts (reworded so no two prompts are equal).
with open("datasets/demo-facts.csv") as f:
    facts = list(csv.DictReader(f))
frames = ["{}", "Claim: {}", "Someone said: {}", "Statement under review: {}", "Is this right? {}",
          "A textbook states: {}", "Overheard: {}", "From a quiz: {}"]
data = os.path.join(work, "facts.csv")
with open(data, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["id", "statement", "label"])
    for i in range(n):
        fact = facts[i % len(facts)]
        w.writerow([f"b{i:04d}", frames[(i // len(facts)) % len(frames)].format(fact["statement"]), fact["label"]])


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start_server():
    port = free_port()
    proc = subprocess.Popen([server_bin, "-m", gguf, "-t", "1", "-tb", "1", "-np", "1", "-c", "4096", "-fa", "off", "-dev", "none",
                             "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return proc, port
        except OSError:
            pass
        time.sleep(0.25)
    proc.kill()
    sys.exit("error: llama-server did not start")


def run_jury(ports, tag):
    out = os.path.join(work, tag)
    urls = ", ".join(f'"http://127.0.0.1:{p}"' for p in ports)
    cfg = os.path.join(work, f"{tag}.yaml")
    with open(cfg, "w") as f:
        f.write(f"""name: bench-{tag}
dataset: {{name: demo-facts, path: {data}}}
prompt: prompts/demo-facts.yaml
judges:
  - name: q
    server: {{base_urls: [{urls}], model: qwen, tokenizer: {tokenizer}, max_in_flight: 1, top_logprobs: 20}}
runtime: {{dump_prompts: true}}
output: {out}
""")
    subprocess.run([jury, "run", cfg], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    m = json.load(open(os.path.join(out, "manifest.json")))
    j = m["judges"][0]
    assert j["scored"] == n, j
    return n / j["judge_seconds"], os.path.join(out, "prompts.jsonl")


def run_client(ports, prompts_file):
    """One worker per server, each with one keep-alive connection, taking the next
    request from a shared queue: the concurrency jury keeps (max_in_flight 1 each)."""
    bodies = []
    for line in open(prompts_file):
        toks = json.loads(line)["tokens"]
        bodies.append(json.dumps({"model": "qwen", "prompt": toks, "max_tokens": 1, "temperature": 0.0,
                                  "logprobs": 20, "return_tokens_as_token_ids": True}).encode())
    lock, nxt = threading.Lock(), [0]

    def worker(port):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(bodies):
                return
            c.request("POST", "/v1/completions", body=bodies[i], headers={"Content-Type": "application/json"})
            r = c.getresponse()
            json.loads(r.read())
            assert r.status == 200

    t0 = time.time()
    ts = [threading.Thread(target=worker, args=(p,)) for p in ports]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return len(bodies) / (time.time() - t0)


servers = [start_server(), start_server()]
try:
    ports = [p for _, p in servers]
    # Warm-up (not measured): the servers' first requests page their weights in.
    run_jury(ports, "warmup")
    # jury and the client alternate, `reps` times each, and each reports its median:
    # the machine's drift hits both alike.
    rates = {1: ([], []), 2: ([], [])}
    for r in range(reps):
        for k in (1, 2):
            jr, prompts = run_jury(ports[:k], f"jury{k}-{r}")
            rates[k][0].append(jr)
            rates[k][1].append(run_client(ports[:k], prompts))
    rows = [(k, statistics.median(rates[k][0]), statistics.median(rates[k][1])) for k in (1, 2)]
finally:
    for proc, _ in servers:
        proc.kill()

print(f"{n} prompts, Qwen2.5-Coder-0.5B Q4_K_M, llama-server (1 thread, 1 slot each), jury max_in_flight 1 per server")
print(f"median of {reps} alternating runs each")
print(f"{'servers':>8} {'jury ex/s':>10} {'client ex/s':>12} {'jury/client':>12}")
for k, jr, cr in rows:
    print(f"{k:>8} {jr:>10.2f} {cr:>12.2f} {jr / cr:>12.3f}")
print(f"2-vs-1 (jury): {rows[1][1] / rows[0][1]:.2f}x   2-vs-1 (client): {rows[1][2] / rows[0][2]:.2f}x")
