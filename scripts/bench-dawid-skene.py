#!/usr/bin/env python3
"""Benchmark: jury's Dawid-Skene vs the crowd-kit Python package's DawidSkene on the same
hard votes and the same number of EM iterations. Prints a table of times, the speed
ratio and the label agreement. Then the rest of crowd-kit's categorical suite (Wawa,
ZeroBasedSkill, OneCoinDawidSkene, GLAD, MACE, MMSR, KOS), each with its defaults on
both sides: crowd-kit's `fit_predict` against jury's whole `jury aggregate` process, and
their hard-label agreement (ties to the negative class, as crowd-kit's `idxmax` does).

Both run classic Dawid-Skene as crowd-kit defines it: start from majority-vote
posteriors, learned class prior, exactly --iters E-steps (tolerance disabled).

Data: the HaluEval judge outputs (10 judges x 20,000 examples) imported by
`jury import skillagg-halueval` when ../shared/data is present; otherwise a
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
from crowdkit.aggregation import GLAD, KOS, MACE, MMSR, DawidSkene, OneCoinDawidSkene, Wawa, ZeroBasedSkill

# jury's method name -> crowd-kit's class, each with crowd-kit's defaults.
SUITE = {
    "wawa": Wawa,
    "zbs": ZeroBasedSkill,
    "onecoin": OneCoinDawidSkene,
    "glad": GLAD,
    "mace": MACE,
    "mmsr": MMSR,
    "kos": KOS,
}


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
    ap.add_argument("--suite", default=",".join(SUITE), help="crowd-kit methods to compare after Dawid-Skene ('' for none)")
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
    methods = [m for m in args.suite.split(",") if m]
    if methods:
        ok = suite(args, votes, methods) and ok
    return 0 if ok else 1


def jury_labels_of(args, method, out):
    cmd = [args.jury, "aggregate", "--judgments", args.judgments, "--methods", method, "--ties", "negative",
           "--out", out]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    with open(os.path.join(out, "predictions.csv")) as f:
        labels = {r["example_id"]: int(r[f"{method}_label"]) for r in csv.DictReader(f)}
    with open(os.path.join(out, "metrics.json")) as f:
        fit = json.load(f)["methods"][method]["seconds"]
    return labels, wall, fit


def suite(args, votes, methods):
    """crowd-kit's other categorical methods against jury's, one run each (GLAD and MACE
    take minutes in crowd-kit), jury's median of --repeats whole processes."""
    print(f"\n| method | crowd-kit `fit_predict` s | jury fit s | jury whole process s | whole-process speed-up | label agreement % |")
    print("|---|---|---|---|---|---|")
    ok = True
    for method in methods:
        t0 = time.perf_counter()
        ck_labels = SUITE[method]().fit_predict(votes)
        ck = time.perf_counter() - t0
        walls, fits = [], []
        with tempfile.TemporaryDirectory() as out:
            for _ in range(args.repeats):
                labels, wall, fit = jury_labels_of(args, method, out)
                walls.append(wall)
                fits.append(fit)
        same = sum(1 for t, l in ck_labels.items() if labels.get(str(t)) == int(l))
        agree = same / len(ck_labels)
        jw, jf = statistics.median(walls), statistics.median(fits)
        print(f"| {method} | {ck:.2f} | {jf:.4f} | {jw:.3f} | {ck / jw:.0f}x | {100 * agree:.2f} |", flush=True)
        ok = ok and agree >= 0.99 and ck / jw >= 20
    print("targets (agreement >= 99%, whole-process speed-up >= 20x):", "met" if ok else "NOT met")
    return ok


if __name__ == "__main__":
    sys.exit(main())
