#!/usr/bin/env python3
"""Convert FRANK (Pagnoni et al., NAACL 2021, "Understanding Factuality in Abstractive
Summarization with FRANK") into a binary summary-factuality jury of automatic metrics:
"is this system summary factually consistent with its article?", positive class =
factual.

Items: the 2,246 (article, system summary) pairs of FRANK (CNN/DM and XSum/BBC articles,
9 summarisation systems), keyed by (hash, model_name); both the validation and the test
split by default (--split valid|test picks one).
Judges: every metric column of data/baseline_factuality_metrics_outputs.json, 15 in all:
  factuality metrics against the article: FactCC, FEQA, Dep Entail (DAE), QAGS,
     BertScore P Art, BertScore R Art, BertScore F1 Art;
  similarity to the reference summary: Rouge 1, Rouge 2, Rouge L, Bleu, Meteor,
     BertScore P, BertScore R, BertScore F1.
Judge names are the column names in lower case with "-" for spaces (e.g.
`bertscore-p-art`, `dep-entail`).
p: every metric is a score (higher = more factual / closer to the reference), not a
probability, so each is mapped monotonically into (0, 1) per judge by a logistic of the
standardised score: p = 1 / (1 + exp(-(x - mean_j) / sd_j)), mean and sd over the items
the judge scored (in the chosen split). A missing or NaN score is no row (FEQA misses 4
summaries, Dep Entail 83).
Label: data/human_annotations.json `Factuality` (the share of summary sentences the
annotators' majority found error-free) == 1.0 -> 1 (factual), else 0: a summary is
factual only when none of its sentences has an error (the usual binarisation of FRANK).
example_id: `frank-<hash>-<model_name>`.

Input (--input): a checkout of github.com/artidoro/frank
@ 80a88fb12cc0bfc17ff6ee2c5ebb0c4f4dd8a5f4 (only the two JSON files above are read;
data/benchmark_data.json, over 4 MiB, is not needed). Licence: MIT (LICENSE).

Output (in --out): judgments.csv (example_id, judge, p) and labels.csv. Standard
library only; never commit the outputs.
"""
import argparse
import json
import math
import os
import sys

from jury_files import logistic_z, write_jury

KEYS = ["hash", "model_name", "dataset", "split"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, help="checkout of artidoro/frank")
    ap.add_argument("--split", choices=["all", "valid", "test"], default="all")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    with open(os.path.join(args.input, "data", "human_annotations.json")) as f:
        human = json.load(f)
    with open(os.path.join(args.input, "data", "baseline_factuality_metrics_outputs.json")) as f:
        metrics = json.load(f)

    labels = {}
    for h in human:
        if args.split != "all" and h["split"] != args.split:
            continue
        ex = f"frank-{h['hash']}-{h['model_name']}"
        if ex in labels:
            sys.exit(f"error: duplicate example {ex}")
        labels[ex] = 1 if float(h["Factuality"]) == 1.0 else 0

    judges = [k for k in metrics[0] if k not in KEYS]
    scores = {j: {} for j in judges}
    for m in metrics:
        ex = f"frank-{m['hash']}-{m['model_name']}"
        if ex not in labels:
            continue
        for j in judges:
            v = m.get(j)
            if v is None or (isinstance(v, float) and math.isnan(v)):
                continue
            scores[j][ex] = float(v)

    rows = []
    for j in judges:
        for ex, p in logistic_z(scores[j]).items():
            rows.append((ex, j.lower().replace(" ", "-"), p))
    seen = {r[0] for r in rows}
    labels = {ex: y for ex, y in labels.items() if ex in seen}
    order = {j.lower().replace(" ", "-"): i for i, j in enumerate(judges)}
    rows.sort(key=lambda r: (r[0], order[r[1]]))

    write_jury(args.out, rows, labels)


if __name__ == "__main__":
    main()
