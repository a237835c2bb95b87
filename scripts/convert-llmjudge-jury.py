#!/usr/bin/env python3
"""Convert the LLMJudge challenge (SIGIR 2024 LLM4Eval) submissions into a binary
relevance jury: "is this passage relevant to the query?", positive class = relevant.

Jury: 33 submitted runs from 8 teams (NISTRetrieval, Olz, RMITIR, TREMA, h2oloo,
prophet, willia, ...) that each labelled the same 4,423 query-passage pairs of the
TREC 2023 Deep Learning track on the 0-3 scale (3 perfectly relevant, 2 highly
relevant, 1 related, 0 irrelevant). Many runs are near-duplicates (same team and
model, another prompt or seed). One judge per run file.

p: hard, 1 if the run's grade is >= 2 else 0 (the usual TREC DL binarisation).
A pair a run does not grade, or grades with something other than 0-3, is no row.
Label: the NIST grade in the test qrels, 1 if >= 2 else 0.

Inputs:
  --input DIR   a checkout of github.com/llm4eval/LLM-as-a-rel
                @ 4f5fdf2bb9ae6e7b7e3d05472cffef6c6090b4e0; reads
                submissions/scores/*.txt (`qid 0 docid grade`). Licence: MIT
                (LICENSE, "Copyright (c) 2023 LLMJudge-Benchmark").
  --labels DIR  a checkout of github.com/llm4eval/LLMJudge
                @ 81159c68260d383f8da1dad8a14f6d914a9054a9; reads
                data/llmjudge_test_qrel_idx.txt (`qid 0 docid grade`, the human
                test labels released after the challenge). No licence file.

Output (in --out): judgments.csv (example_id, judge, p) and labels.csv
(example_id, label); example_id is `<qid>-<docid>`. Standard library only; never
commit the outputs.
"""
import argparse
import glob
import os
import sys

from jury_files import write_jury


def read_qrels(path):
    out = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 4:
                continue
            qid, _, doc, grade = parts
            out[f"{qid}-{doc}"] = grade
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, help="checkout of llm4eval/LLM-as-a-rel")
    ap.add_argument("--labels", required=True, help="checkout of llm4eval/LLMJudge")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    gold = read_qrels(os.path.join(args.labels, "data", "llmjudge_test_qrel_idx.txt"))
    labels = {ex: 1 if int(g) >= 2 else 0 for ex, g in gold.items()}
    if not labels:
        sys.exit("error: no test labels read")
    runs = sorted(glob.glob(os.path.join(args.input, "submissions", "scores", "*.txt")))
    if not runs:
        sys.exit(f"error: {args.input}: no submissions/scores/*.txt")
    rows = []
    for run in runs:
        judge = os.path.splitext(os.path.basename(run))[0]
        for ex, grade in sorted(read_qrels(run).items()):
            if ex not in labels or grade not in ("0", "1", "2", "3"):
                continue
            rows.append((ex, judge, 1.0 if int(grade) >= 2 else 0.0))

    write_jury(args.out, rows, labels)


if __name__ == "__main__":
    main()
