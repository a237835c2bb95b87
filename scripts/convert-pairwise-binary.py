#!/usr/bin/env python3
"""Convert the pairwise human-judged sets in ../shared/data into binary juries for
`jury aggregate`: "is output 1 (response 1) better?", positive class = 1 better.

--llmbar DIR (a set folder under data/llmbar: `LLMBar` takes every subset below it,
  Natural and Adversarial/*, or e.g. `Processed/MT-Bench`): one judge per evaluator x
  prompting strategy x presentation order (`GPT-4/Vanilla_NoRules/swap=False`, ...),
  each verdict p = 1 (output 1) or 0 (output 2); an unparsed verdict (null) is no
  judgment. Label: the set's `label` (1 -> 1, 2 -> 0). No ties exist in these sets.
--pandalm DIR (data/pandalm): judges gpt-3.5-turbo and pandalm-7b, "1" -> 1, "2" -> 0;
  their tie and garbage verdicts are no judgment. Label: the 3 annotators' majority;
  examples whose majority is a tie are left out.

The verdicts are hard, so p is exactly 0 or 1. Output (in --out): judgments.csv
(example_id, judge, p) and labels.csv. Standard library only; never commit the outputs.
"""
import argparse
import csv
import glob
import json
import os
import sys

from jury_files import write_jury


def llmbar(root):
    rows, labels = [], {}
    sets = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(root, "**", "dataset.json"), recursive=True))
    if not sets:
        sys.exit(f"error: {root}: no dataset.json below it")
    for s in sets:
        name = os.path.relpath(s, root).replace(os.sep, "/")
        data = json.load(open(os.path.join(s, "dataset.json")))
        prefix = f"{name}-" if name != "." else ""
        for i, d in enumerate(data):
            labels[f"{prefix}{i:04d}"] = 1 if d["label"] == 1 else 0
        for result in sorted(glob.glob(os.path.join(s, "evaluators", "*", "*", "result.json"))):
            strategy_dir = os.path.dirname(result)
            judge = f"{os.path.basename(os.path.dirname(strategy_dir))}/{os.path.basename(strategy_dir)}"
            res = json.load(open(result))
            if len(res) != len(data):
                sys.exit(f"error: {result}: {len(res)} rows, {len(data)} in dataset.json")
            for i, r in enumerate(res):
                for order in ("swap = False", "swap = True"):
                    winner = r["results"][-1][order]["winner"]
                    if winner in ("1", "2"):
                        rows.append((f"{prefix}{i:04d}", f"{judge}/{order.replace(' ', '')}", 1.0 if winner == "1" else 0.0))
    return rows, labels


def pandalm(root):
    tests = json.load(open(os.path.join(root, "testset-v1.json")))
    gpt = {r["idx"]: r["gpt_result"] for r in json.load(open(os.path.join(root, "gpt-3.5-turbo-testset-v1.json")))}
    panda = {r["idx"]: r["pandalm_result"] for r in json.load(open(os.path.join(root, "pandalm-7b-testset-v1.json")))}
    rows, labels = [], {}
    for t in tests:
        votes = [t["annotator1"], t["annotator2"], t["annotator3"]]
        top = max(set(votes), key=votes.count)
        if votes.count(top) < 2 or top == 0:
            continue
        ex = f"pandalm-{t['idx']:04d}"
        labels[ex] = 1 if top == 1 else 0
        for judge, verdict in (("gpt-3.5-turbo", str(gpt[t["idx"]])), ("pandalm-7b", str(panda[t["idx"]]))):
            if verdict in ("1", "2"):
                rows.append((ex, judge, 1.0 if verdict == "1" else 0.0))
    return rows, labels


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--llmbar")
    src.add_argument("--pandalm")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rows, labels = llmbar(args.llmbar) if args.llmbar else pandalm(args.pandalm)
    write_jury(args.out, rows, labels)


if __name__ == "__main__":
    main()
