#!/usr/bin/env python3
"""Scores the token sequences a `jury run` judged (prompts.jsonl) with llama.cpp
(llama-cpp-python) and compares: examples/second for each engine and their ratio, and
the agreement of the normalised verdict probabilities on identical token sequences.

llama.cpp evaluates each prompt in full (cache reset per prompt), as a plain user would.
Probabilities: softmax over the full vocabulary of the last position's logits, summed
over the same verdict token ids jury used (from its manifest.json).
"""
import argparse
import csv
import json
import math
import sys
import time

import numpy as np
from llama_cpp import Llama


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True, help="a jury run output directory made with dump_prompts: true")
    ap.add_argument("--judge", required=True)
    ap.add_argument("--model", required=True, help="the same GGUF file")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    manifest = json.load(open(f"{args.run}/manifest.json"))
    jm = next(j for j in manifest["judges"] if j["name"] == args.judge)
    ids = jm["verdict_token_ids"]
    prompts = [json.loads(l) for l in open(f"{args.run}/prompts.jsonl") if json.loads(l)["judge"] == args.judge]
    jury_p = {r["example_id"]: float(r["p"]) for r in csv.DictReader(open(f"{args.run}/judgments.csv"))
              if r["judge"] == args.judge and r["p"]}

    n_ctx = max(len(p["tokens"]) for p in prompts) + 8
    llm = Llama(model_path=args.model, n_ctx=n_ctx, n_batch=512, logits_all=False, n_threads=args.threads,
                verbose=False)
    diffs = []
    t0 = time.perf_counter()
    for p in prompts:
        llm.reset()
        llm.eval(p["tokens"])
        logits = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        m = logits.max()
        z = np.exp(logits - m).sum()
        prob = lambda toks: float(sum(math.exp(logits[t] - m) for t in toks) / z)
        pp, pn = prob(ids["positive"]), prob(ids["negative"])
        y = pp / (pp + pn) if pp + pn > 0 else float("nan")
        if p["example_id"] in jury_p:
            diffs.append(abs(y - jury_p[p["example_id"]]))
    llama_s = time.perf_counter() - t0
    n = len(prompts)
    jury_s = jm["judge_seconds"]
    within = sum(d <= 0.03 for d in diffs) / len(diffs)
    print(json.dumps({
        "judge": args.judge, "examples": n,
        "llama_cpp_seconds": llama_s, "llama_cpp_ex_per_s": n / llama_s,
        "jury_seconds": jury_s, "jury_ex_per_s": n / jury_s,
        "jury_over_llama_speed": llama_s / jury_s,
        "agreement_within_0.03": within, "median_abs_diff": float(np.median(diffs)), "max_abs_diff": float(max(diffs)),
    }))


if __name__ == "__main__":
    sys.exit(main())
