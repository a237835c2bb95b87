#!/usr/bin/env python3
"""Convert the LLM relevance judgments of Narabzad/llm-relevance-judgement-comparison
(Arabzadeh & Clarke, "Benchmarking LLM-based relevance judgment methods") into a
binary relevance jury over the judged query-passage pairs of TREC Deep Learning
2019, 2020 and 2021 (passage task): "is this passage relevant?", positive class =
relevant.

Judges: one per (model, method, run) file family, the same judge across the three
collections. Models: gpt-4o and llama3.2 (`raw qrels/<model>/<method>/`), and
gpt-4 (`Methods/Binary/gpt-4`, `Methods/Umbrela_zeroshot/gpt4`, and the four
`Methods/Exam/.../gpt4/*_qrels/qrels.{max,mean}.*` files), plus
`Methods/Binary/llama3.2` (a second llama3.2 binary run that differs from the one
under raw qrels). `Methods/Binary/gpt-4o` is skipped: it equals
`raw qrels/gpt-4o/binary`. Methods and what p is (the files' native scales):
  binary              0/1 verdict                              p = verdict (hard)
  umbrela             UMBRELA grade 0-3                        p = grade / 3
                      (llama3.2 has 4 samples per pair: p = mean grade / 3)
  exam graded max/mean  EXAM self-rated answerability 0-5      p = score / 5
  exam binary (max/mean) share of exam questions answerable    p = score
  nuggets (all, all_strict, vital, vital_strict)
                      AutoNuggetizer nugget-support score 0-1  p = score
  (the nuggets weighted and weighted_strict families are left out: their scores
  run above 1, up to 1.67, so they have no fixed scale to map onto [0, 1])
So several judges are soft scores, not calibrated probabilities. Several lines for
one pair in one file are averaged. A pair a judge does not cover (several nugget and
llama3.2 EXAM files cover only part of a collection; two llama3.2 EXAM families are
empty files and give no judge) is no row. Pairs not in the human qrels are dropped.

Label: the NIST grade in data/qrels.dl{19,20,21}-passage.txt, 1 if >= 2 else 0 (the
usual TREC DL binarisation). example_id: `<collection>-<qid>-<docid>`.

Input (--input): a checkout of github.com/Narabzad/llm-relevance-judgement-comparison
@ 28823f1601a7b8ad7dd0289af032b1e8ed4b21df (files whose blobs are missing in the
snapshot, e.g. the per-rubric EXAM logs for dl21, are not needed). Licence: no
licence file. ANTIQUE is not converted (its grades mean something else).

Output (in --out): judgments.csv (example_id, judge, p) and labels.csv. Standard
library only; never commit the outputs.
"""
import argparse
import csv
import os
import re
import sys
from collections import defaultdict

from jury_files import write_jury

COLLECTIONS = ("dl19", "dl20", "dl21")
COLL = re.compile(r"(dl19|dl20|dl21|dl22|dlantique|antique)")


def scale(judge):
    j = judge.lower()
    if "umbrela" in j:
        return 3.0
    if "graded" in j:
        return 5.0
    return 1.0


def read(path):
    vals = defaultdict(list)
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 4:
                continue
            try:
                vals[(parts[0], parts[2])].append(float(parts[3]))
            except ValueError:
                pass
    return {k: sum(v) / len(v) for k, v in vals.items()}


def sources(root):
    """(judge, collection, path) for every judgment file used."""
    out = []
    raw = os.path.join(root, "raw qrels")
    for dirpath, _, files in os.walk(raw):
        for name in files:
            m = COLL.search(name)
            if not m:
                continue
            rel = os.path.relpath(dirpath, raw).replace(os.sep, "/")
            if rel.split("/")[-1] in ("weighted", "weighted_strict"):
                continue
            out.append((f"raw/{rel.replace(' ', '-')}", m.group(1), os.path.join(dirpath, name)))
    meth = os.path.join(root, "Methods")
    fixed = [
        ("Binary/gpt-4", "methods/gpt-4/binary"),
        ("Binary/llama3.2", "methods/llama3.2/binary"),
        ("Umbrela_zeroshot/gpt4", "methods/gpt-4/umbrela"),
        ("Exam/selfrate_binary/gpt4/exam_binary_qrels", "methods/gpt-4/exam-binary-{agg}"),
        ("Exam/selfrate_graded/gpt4/exam_graded_qrels", "methods/gpt-4/exam-graded-{agg}"),
    ]
    for sub, judge in fixed:
        d = os.path.join(meth, sub)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            m = COLL.search(name)
            if not m or not name.endswith(".txt"):
                continue
            agg = "max" if name.startswith("qrels.max") else "mean"
            out.append((judge.format(agg=agg), m.group(1), os.path.join(d, name)))
    return sorted(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, help="checkout of Narabzad/llm-relevance-judgement-comparison")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    labels = {}
    for c in COLLECTIONS:
        for (q, d), g in read(os.path.join(args.input, "data", f"qrels.{c}-passage.txt")).items():
            labels[f"{c}-{q}-{d}"] = 1 if g >= 2 else 0
    if not labels:
        sys.exit("error: no qrels read")
    rows = []
    for judge, coll, path in sources(args.input):
        if coll not in COLLECTIONS:
            continue
        top = scale(judge)
        for (q, d), v in sorted(read(path).items()):
            ex = f"{coll}-{q}-{d}"
            if ex not in labels:
                continue
            p = v / top
            if not 0.0 <= p <= 1.0:
                sys.exit(f"error: {path}: score {v} outside 0..{top}")
            rows.append((ex, judge, p))

    write_jury(args.out, [(ex, j, f"{p:.6g}") for ex, j, p in rows], labels)


if __name__ == "__main__":
    main()
