#!/usr/bin/env python3
"""Compares `jury run` outputs of one judge (made by scripts/bench-judges with
`dump_prompts: true`): a server judge on llama-server (the reference) against one or
more in-process runs on the same examples. Prints one JSON line per in-process run:
examples/second on each side (manifest `judge_seconds`) and their ratio, the share of
examples judged on identical token sequences, and the agreement of the normalised
P(Yes) with llama-server's, and the in-process judge's mean P(Yes) + P(No).
"""
import argparse
import csv
import json
import statistics
import sys


def load(path, judge):
    manifest = json.load(open(f"{path}/manifest.json"))
    jm = next(j for j in manifest["judges"] if j["name"] == judge)
    p = {r["example_id"]: float(r["p"]) for r in csv.DictReader(open(f"{path}/judgments.csv"))
         if r["judge"] == judge and r["p"]}
    toks = {}
    for line in open(f"{path}/prompts.jsonl"):
        v = json.loads(line)
        if v["judge"] == judge:
            toks[v["example_id"]] = v["tokens"]
    if jm["failed"]:
        sys.exit(f"error: {path}: {jm['failed']} judgments failed")
    return jm, p, toks, manifest["mean_captured_mass"].get(judge)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--judge", required=True)
    ap.add_argument("--server", required=True, help="the llama-server run's output folder")
    ap.add_argument("--run", required=True, action="append", help="LABEL=DIR: an in-process run (repeatable)")
    args = ap.parse_args()
    sm, sp, stoks, _ = load(args.server, args.judge)
    n = len(sp)
    for label, path in (r.split("=", 1) for r in args.run):
        jm, jp, jtoks, mass = load(path, args.judge)
        both = [e for e in jp if e in sp]
        diffs = [abs(jp[e] - sp[e]) for e in both]
        print(json.dumps({
            "judge": args.judge, "variant": label, "examples": n,
            "server_seconds": sm["judge_seconds"], "server_ex_per_s": n / sm["judge_seconds"],
            "jury_seconds": jm["judge_seconds"], "jury_ex_per_s": len(jp) / jm["judge_seconds"],
            "jury_over_server_speed": (len(jp) / jm["judge_seconds"]) / (n / sm["judge_seconds"]),
            "same_tokens": sum(jtoks.get(e) == stoks.get(e) for e in both) / len(both),
            "within_0.03": sum(d <= 0.03 for d in diffs) / len(diffs),
            "median_abs_diff": statistics.median(diffs), "max_abs_diff": max(diffs),
            "prefix_cache_entries": jm["prefix_cache_entries"], "captured_mass": mass,
        }), flush=True)


if __name__ == "__main__":
    sys.exit(main())
