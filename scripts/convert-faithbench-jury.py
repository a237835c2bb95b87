#!/usr/bin/env python3
"""Convert FaithBench (Bao et al., NAACL 2025, "FaithBench: A Diverse Hallucination
Benchmark for Summarization by Modern LLMs") into a binary summary-faithfulness jury:
"is this LLM-written summary consistent with its source?", positive class = consistent.

Items: the 750 human-annotated (source, summary) pairs in data_for_release/batch_*.json
(batches 1-16, no batch 13); the summaries come from 10 modern LLMs and were chosen
because SOTA detectors disagreed on them, so the jury is a hard one by construction.
Judges: the detector predictions FaithBench ships in each sample's `metadata`:
  soft (a probability of "consistent" in [0, 1], used as is):
     hhemv1, hhem-2.1, hhem-2.1-english  (Vectara's HHEM models)
  hard (1 = consistent, 0 = hallucinated, used as 0/1):
     trueteacher, true_nli  (Google's T5 NLI checkers),
     gpt-3.5-turbo, gpt-4-turbo, gpt_4o  (LLM-as-a-judge)
  A missing prediction (true_nli is null on two samples) is no row.
Label: the repository's own binarisation (scripts/binarize.py, its default config):
every span label of every annotator is pooled, the sample takes the worst severity
(Benign < Questionable < Unwanted*), and it is hallucinated (0) when that worst label
is Questionable or Unwanted (incl. .Intrinsic/.Extrinsic); a sample with no
annotation or only Benign ones is consistent (1).
example_id: `faithbench-b<batch>-<sample_id>` (sample_id is the id within the batch).

Input (--input): a checkout of github.com/vectara/FaithBench
@ cf89797d82812c23b5d5e5c121f1d9b8983bbbce. Licence: CC BY-NC-SA 4.0 (LICENSE).

Output (in --out): judgments.csv (example_id, judge, p) and labels.csv. Standard
library only; never commit the outputs.
"""
import argparse
import glob
import json
import os
import re
import sys

from jury_files import write_jury

SOFT = ["hhemv1", "hhem-2.1", "hhem-2.1-english"]
HARD = ["trueteacher", "true_nli", "gpt-3.5-turbo", "gpt-4-turbo", "gpt_4o"]
SEVERITY = {"Benign": 1, "Questionable": 2, "Unwanted": 3,
            "Unwanted.Intrinsic": 3, "Unwanted.Extrinsic": 3}


def label_of(sample, where):
    worst = 0
    for a in sample.get("annotations") or []:
        for lab in a["label"]:
            if lab not in SEVERITY:
                sys.exit(f"error: {where}: unknown annotation label {lab!r}")
            worst = max(worst, SEVERITY[lab])
    return 0 if worst >= 2 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, help="checkout of vectara/FaithBench")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    files = glob.glob(os.path.join(args.input, "data_for_release", "batch_*.json"))
    if not files:
        sys.exit(f"error: no data_for_release/batch_*.json under {args.input}")
    rows, labels = [], {}
    for path in sorted(files, key=lambda p: int(re.search(r"batch_(\d+)\.json$", p).group(1))):
        batch = int(re.search(r"batch_(\d+)\.json$", path).group(1))
        with open(path) as f:
            samples = json.load(f)["samples"]
        for s in samples:
            ex = f"faithbench-b{batch:02d}-{int(s['sample_id']):03d}"
            if ex in labels:
                sys.exit(f"error: duplicate example {ex}")
            meta = s["metadata"]
            votes = []
            for j in SOFT:
                v = meta.get(j)
                if v is not None:
                    v = float(v)
                    if not 0.0 <= v <= 1.0:
                        sys.exit(f"error: {path}: {j}={v} outside [0, 1]")
                    votes.append((ex, j, v))
            for j in HARD:
                v = meta.get(j)
                if v is not None:
                    if v not in (0, 1):
                        sys.exit(f"error: {path}: {j}={v!r} is not 0/1")
                    votes.append((ex, j, float(v)))
            if votes:
                labels[ex] = label_of(s, f"{path} sample {s['sample_id']}")
                rows.extend(votes)

    write_jury(args.out, rows, labels)


if __name__ == "__main__":
    main()
