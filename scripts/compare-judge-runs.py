#!/usr/bin/env python3
"""Compares `jury run` outputs of the same judge on the same examples made on different
devices (scripts/gpu-check judges): examples per second (the manifest's judge seconds,
model load excluded), the share of examples whose normalised P(positive) is within 0.03
of the reference run's, the median and largest difference, the share on the same side of
0.5, whether the judged token sequences are identical (prompts.jsonl), the peak GPU
memory sampled during each run (gpumem-LABEL.csv from nvidia-smi, when present), and the
process's resident host memory after its first judgment and at its last, with the growth
per judgment over the second half of the run (rss-LABEL.csv: seconds, judgments done,
resident kB; when present). Prints one markdown table. Standard library only.

  scripts/compare-judge-runs.py [--reference LABEL] [--gpu-memory-dir DIR] [--rss-dir DIR] LABEL=RUN_DIR ...
"""
import argparse
import csv
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import host_memory  # noqa: E402 (beside this script)


def load(run):
    manifest = json.load(open(os.path.join(run, "manifest.json")))
    judges = manifest["judges"]
    if len(judges) != 1:
        sys.exit(f"error: {run}: expected one judge, found {len(judges)}")
    p = {}
    with open(os.path.join(run, "judgments.csv")) as f:
        for row in csv.DictReader(f):
            if row["p"]:
                p[row["example_id"]] = float(row["p"])
    tokens = {}
    prompts = os.path.join(run, "prompts.jsonl")
    if os.path.exists(prompts):
        for line in open(prompts):
            r = json.loads(line)
            tokens[r["example_id"]] = r["tokens"]
    return judges[0], p, tokens


def peak_mib(path):
    if not os.path.exists(path):
        return None
    values = []
    for line in open(path):
        parts = line.strip().split(",")
        if len(parts) >= 2 and parts[-1].strip().split(" ")[0].isdigit():
            values.append(int(parts[-1].strip().split(" ")[0]))
    return max(values) if values else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="LABEL=RUN_DIR")
    ap.add_argument("--reference", default="cpu", help="the label the others are compared with (default cpu)")
    ap.add_argument("--gpu-memory-dir", help="folder holding gpumem-LABEL.csv files")
    ap.add_argument("--rss-dir", help="folder holding rss-LABEL.csv files")
    args = ap.parse_args()
    runs = {}
    for arg in args.runs:
        if "=" not in arg:
            sys.exit(f"error: '{arg}' is not LABEL=RUN_DIR")
        label, path = arg.split("=", 1)
        try:
            runs[label] = load(path)
        except (OSError, KeyError, ValueError) as e:
            print(f"warning: {label}: {path}: {e}", file=sys.stderr)
    if args.reference not in runs:
        sys.exit(f"error: the reference run '{args.reference}' did not load")
    _, ref_p, ref_tokens = runs[args.reference]
    print("| run | engine | examples | ex/s | within 0.03 of " + args.reference +
          " | median abs diff | max abs diff | same side of 0.5 | same tokens | peak GPU memory MiB"
          " | host MiB after the first | host MiB at the last | host MB per judgment, second half |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label, (judge, p, tokens) in runs.items():
        common = [e for e in p if e in ref_p]
        diffs = [abs(p[e] - ref_p[e]) for e in common]
        side = sum((p[e] > 0.5) == (ref_p[e] > 0.5) for e in common)
        same_tok = sum(tokens.get(e) == ref_tokens.get(e) for e in common if e in ref_tokens)
        peak = peak_mib(os.path.join(args.gpu_memory_dir, f"gpumem-{label}.csv")) if args.gpu_memory_dir else None
        rss = os.path.join(args.rss_dir or "", f"rss-{label}.csv")
        host = host_memory.summary(host_memory.read(rss)) if args.rss_dir and os.path.exists(rss) else None
        host_cells = f"{host[0] / 1024:.0f} | {host[1] / 1024:.0f} | {host[2] * 1024 / 1e6:.2f}" if host else "- | - | -"
        n = len(p)
        print(f"| {label} | {judge.get('engine', '?')} | {n} | {n / judge['judge_seconds']:.2f} "
              f"| {100 * sum(d <= 0.03 for d in diffs) / max(len(diffs), 1):.1f}% "
              f"| {statistics.median(diffs) if diffs else float('nan'):.4f} | {max(diffs, default=float('nan')):.4f} "
              f"| {100 * side / max(len(common), 1):.1f}% | {100 * same_tok / max(len(common), 1):.0f}% "
              f"| {peak if peak is not None else '-'} | {host_cells} |")


if __name__ == "__main__":
    main()
