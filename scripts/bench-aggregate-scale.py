"""Aggregation at scale (run through scripts/bench-aggregate-scale): writes the three
judgments files, runs `jury aggregate --methods avg,mv,ds` on each and prints wall time
and peak resident memory (median of three runs); then each of the other label-free
methods alone on the dense and the sparse file, and care, gauss and care-gauss on the dense one (one
run each)."""
import os, random, shutil, subprocess, sys, tempfile

jury = sys.argv[1]
work = tempfile.mkdtemp(prefix="bench-aggregate-")


def dense(path, n=1_000_000, k=20, missing=0.3, seed=1):
    rng = random.Random(seed)
    acc = [0.55 + 0.4 * rng.random() for _ in range(k)]
    with open(path, "w") as f:
        f.write("example_id,judge,p\n")
        for i in range(n):
            truth = rng.random() < 0.5
            for j in range(k):
                if rng.random() < missing:
                    continue
                right = rng.random() < acc[j]
                p = 0.5 + 0.45 * rng.random()
                f.write(f"e{i},j{j},{p if right == truth else 1 - p:.4f}\n")


def sparse(path, n=200_000, k=200_000, entries=1_000_000, seed=2):
    rng = random.Random(seed)
    seen = set()
    with open(path, "w") as f:
        f.write("example_id,judge,p\n")
        while len(seen) < entries:
            e, j = rng.randrange(n), rng.randrange(k)
            if (e, j) in seen:
                continue
            seen.add((e, j))
            f.write(f"e{e},j{j},{rng.random():.4f}\n")


def long_line(path, size=128_000_000):
    """Two judgments, one of them on an example whose id is a 128 MB line."""
    with open(path, "w") as f:
        f.write("example_id,judge,p\n")
        f.write("e" + "x" * size + ",a,0.9\n")
        f.write("e2,a,0.1\n")


SUITE = ["recommended", "wawa", "zbs", "onecoin", "glad", "mace", "mmsr", "kos"]
# The correlation-aware methods refuse juries of over 500 judges (jury_aggregate::
# MAX_CORRELATED_JUDGES), so they run on the dense file only.
CORRELATED = ["care", "gauss", "care-gauss"]


def run(path, out, methods="avg,mv,ds"):
    """Wall seconds and peak resident MB of one `jury aggregate` (GNU time)."""
    r = subprocess.run(["/usr/bin/time", "-f", "%e %M", jury, "aggregate", "--judgments", path,
                        "--methods", methods, "--out", out],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        shutil.rmtree(work)
        sys.exit(f"jury aggregate failed on {path}: {r.stderr}")
    secs, kb = r.stderr.strip().splitlines()[-1].split()
    return float(secs), int(kb) / 1024


rows = []
for name, file, make in [("1,000,000 x 20, 30% missing", "dense.csv", dense),
                         ("sparse: 1,000,000 over 200,000 x 200,000", "sparse.csv", sparse),
                         ("one 128 MB line", "long-line.csv", long_line)]:
    path = os.path.join(work, file)
    make(path)
    os.sync()
    runs = []
    for i in range(3):
        out = os.path.join(work, f"out-{file}-{i}")
        runs.append(run(path, out))
        shutil.rmtree(out)
    secs, peak = sorted(runs)[1]
    rows.append((name, os.path.getsize(path) / 1e6, secs, peak))
print(f"{'judgments file':<44} {'MB':>7} {'seconds':>8} {'peak MB':>8}")
for name, mb, secs, peak in rows:
    print(f"{name:<44} {mb:>7.0f} {secs:>8.1f} {peak:>8.0f}", flush=True)
print(f"\n{'method':<10} {'dense s':>8} {'dense peak MB':>14} {'sparse s':>9} {'sparse peak MB':>15}")
for method in SUITE:
    cells = []
    for file in ["dense.csv", "sparse.csv"]:
        out = os.path.join(work, f"out-{method}-{file}")
        cells.extend(run(os.path.join(work, file), out, method))
        shutil.rmtree(out)
    print(f"{method:<10} {cells[0]:>8.1f} {cells[1]:>14.0f} {cells[2]:>9.1f} {cells[3]:>15.0f}", flush=True)
for method in CORRELATED:
    out = os.path.join(work, f"out-{method}-dense")
    secs, peak = run(os.path.join(work, "dense.csv"), out, method)
    shutil.rmtree(out)
    print(f"{method:<10} {secs:>8.1f} {peak:>14.0f} {'refused':>9} {'-':>15}", flush=True)
shutil.rmtree(work)
