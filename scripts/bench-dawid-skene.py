#!/usr/bin/env python3
"""Benchmark: jury's Dawid-Skene vs the crowd-kit Python package's DawidSkene on the same
hard votes and the same number of EM iterations. Prints a table of times, the speed
ratio and the label agreement.

Both run classic Dawid-Skene as crowd-kit defines it: start from majority-vote
posteriors, learned class prior, exactly --iters E-steps (tolerance disabled).

Data: the HaluEval judge outputs (10 judges x 20,000 examples) converted by
scripts/convert-halueval-judges.py when ../shared/data is present; otherwise a
simulated jury from `jury simulate` (20,000 examples, 6 judges).

Run it with scripts/bench-dawid-skene (which sets up the Python environment and builds
jury first).
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import pandas as pd
from crowdkit.aggregation import DawidSkene


def load_votes(path):
    df = pd.read_csv(path, dtype={"example_id": str, "judge": str})
    df = df.dropna(subset=["p"])
    # The paper's vote rule b = 1[y > 0.5], the same one jury applies.
    return pd.DataFrame({"task": df["example_id"], "worker": df["judge"], "label": (df["p"] > 0.5).astype(int)})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jury", required=True, help="path to the jury binary")
    ap.add_argument("--judgments", required=True)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    votes = load_votes(args.judgments)
    n_tasks = votes["task"].nunique()
    n_workers = votes["worker"].nunique()

    ck_times = []
    for _ in range(args.repeats):
        ds = DawidSkene(n_iter=args.iters, tol=float("-inf"))
        t0 = time.perf_counter()
        ds.fit(votes)
        ck_times.append(time.perf_counter() - t0)
    ck_iters = len(ds.loss_history_)
    ck_labels = ds.labels_

    jury_fit, jury_wall = [], []
    with tempfile.TemporaryDirectory() as out:
        for _ in range(args.repeats):
            cmd = [args.jury, "aggregate", "--judgments", args.judgments, "--methods", "ds", "--ds-prior", "learned",
                   "--ds-init", "mv", "--ds-max-iter", str(args.iters), "--ds-tol", "0", "--out", out]
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            jury_wall.append(time.perf_counter() - t0)
            with open(os.path.join(out, "metrics.json")) as f:
                m = json.load(f)["methods"]["ds"]
            jury_fit.append(m["seconds"])
            jury_iters = m["iterations"]
        with open(os.path.join(out, "predictions.csv")) as f:
            jury_labels = {r["example_id"]: int(r["ds_label"]) for r in csv.DictReader(f)}

    same = sum(1 for t, l in ck_labels.items() if jury_labels.get(str(t)) == int(l))
    agree = same / len(ck_labels)
    ck, jf, jw = statistics.median(ck_times), statistics.median(jury_fit), statistics.median(jury_wall)
    print(f"data: {args.judgments}: {n_tasks} examples x {n_workers} judges, {len(votes)} votes")
    print(f"iterations: crowd-kit {ck_iters}, jury {jury_iters}; median of {args.repeats} runs\n")
    print("| implementation | what is timed | seconds | jury speed-up |")
    print("|---|---|---|---|")
    print(f"| crowd-kit {__import__('crowdkit').__version__} DawidSkene | `fit` only | {ck:.3f} | 1x |")
    print(f"| jury ds | EM only (metrics.json `seconds`) | {jf:.4f} | {ck / jf:.0f}x |")
    print(f"| jury ds | whole `jury aggregate` process (read CSV, EM, write files) | {jw:.3f} | {ck / jw:.1f}x |")
    print(f"\nlabel agreement: {same}/{len(ck_labels)} = {100 * agree:.3f}%")
    ok = agree >= 0.999 and ck / jw >= 20 and ck_iters == jury_iters
    print("targets (agreement >= 99.9%, whole-process speed-up >= 20x, same iterations):", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
