#!/usr/bin/env python3
"""Scores the token sequences `jury run` judged (prompts.jsonl) with llama.cpp
(llama-cpp-python) and compares with one or more jury runs of the same judge on the
same examples: examples/second for each engine and their ratio, and the agreement of
the normalised verdict probabilities on identical token sequences.

llama.cpp evaluates each prompt in full (cache reset per prompt), as a plain user would,
once per judge; every jury run is compared against that one llama.cpp pass.
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


def jury_run(path, judge):
    manifest = json.load(open(f"{path}/manifest.json"))
    jm = next(j for j in manifest["judges"] if j["name"] == judge)
    p = {r["example_id"]: float(r["p"]) for r in csv.DictReader(open(f"{path}/judgments.csv"))
         if r["judge"] == judge and r["p"]}
    return jm, p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True, action="append",
                    help="LABEL=DIR: a jury run output directory made with dump_prompts: true (repeatable)")
    ap.add_argument("--judge", required=True)
    ap.add_argument("--model", required=True, help="the same GGUF file")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    runs = [r.split("=", 1) for r in args.run]
    first = runs[0][1]
    prompts = [json.loads(l) for l in open(f"{first}/prompts.jsonl")]
    prompts = [p for p in prompts if p["judge"] == args.judge]
    ids = jury_run(first, args.judge)[0]["verdict_token_ids"]

    n_ctx = max(len(p["tokens"]) for p in prompts) + 8
    llm = Llama(model_path=args.model, n_ctx=n_ctx, n_batch=512, logits_all=False, n_threads=args.threads,
                verbose=False)
    n_vocab = llm.n_vocab()
    llama_y = {}
    t0 = time.perf_counter()
    for p in prompts:
        llm.reset()
        llm.eval(p["tokens"])
        # The last position's logits straight from the context (llama-cpp-python 0.3
        # keeps `scores` only with logits_all, which would also compute every position).
        logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,)).astype(np.float64)
        m = logits.max()
        z = np.exp(logits - m).sum()
        prob = lambda toks: float(sum(math.exp(logits[t] - m) for t in toks) / z)
        pp, pn = prob(ids["positive"]), prob(ids["negative"])
        llama_y[p["example_id"]] = pp / (pp + pn) if pp + pn > 0 else float("nan")
    llama_s = time.perf_counter() - t0
    # Whether jury's tokenisation (mistral.rs's tokenizer built from the GGUF) is
    # llama.cpp's: the judged tokens, turned back into text and tokenised by llama.cpp.
    same_tokens = sum(
        llm.tokenize(llm.detokenize(p["tokens"], special=True), add_bos=False, special=True) == p["tokens"]
        for p in prompts) / len(prompts)
    n = len(prompts)
    for label, path in runs:
        jm, jury_p = jury_run(path, args.judge)
        diffs = [abs(llama_y[e] - y) for e, y in jury_p.items() if e in llama_y]
        jury_s = jm["judge_seconds"]
        print(json.dumps({
            "judge": args.judge, "label": label, "examples": n,
            "llama_cpp_seconds": llama_s, "llama_cpp_ex_per_s": n / llama_s,
            "jury_seconds": jury_s, "jury_ex_per_s": n / jury_s,
            "jury_over_llama_speed": llama_s / jury_s,
            "agreement_within_0.03": sum(d <= 0.03 for d in diffs) / len(diffs),
            "median_abs_diff": float(np.median(diffs)), "max_abs_diff": float(max(diffs)),
            "same_tokens_as_llama_cpp_tokenizer": same_tokens,
        }), flush=True)


if __name__ == "__main__":
    sys.exit(main())
