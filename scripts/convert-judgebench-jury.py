#!/usr/bin/env python3
"""Convert the JudgeBench (Tan et al. 2024, arXiv 2410.12784) judge outputs that the
repository ships into a pairwise jury: "is response A better than response B?",
positive class = A better. The 350 GPT-4o response pairs (MMLU-Pro knowledge,
LiveBench reasoning/math, LiveCodeBench code) each have one objectively correct and
one incorrect answer; the label is that objective correctness (`label` "A>B" -> 1,
"B>A" -> 0), not a human preference.

Judges (the output files whose blobs are in the snapshot; the ~30 other judges'
files are over 4 MiB and absent):
  5 reward models (GRM-Gemma-2B, Skywork-Reward-Gemma-2-27B,
    Skywork-Reward-Llama-3.1-8B, internlm2-7b/20b-reward): soft,
    p = sigmoid(score_A - score_B) from the first (A, B order) judgment's `scores`
    (the second judgment is the same two scores swapped).
  o1-mini with the Arena-Hard prompt, one judge per presentation order:
    `o1-mini/order=AB` (first judgment) and `o1-mini/order=BA` (second judgment,
    made with A and B swapped and flipped back here as the authors' metrics do).
    Hard: A>B (or A>>B) -> 1, B>A -> 0; ties (A=B) and unparsed (null) are no row.

Input (--input): a checkout of github.com/ScalerLab/JudgeBench
@ e2c52c284e735e139b3daa61c206ee208f36c461; reads
outputs/dataset=judgebench,response_model=gpt-4o-2024-05-13,judge_name=*.jsonl.
Licence: no licence file. example_id: the pair_id.

Output (in --out): judgments.csv (example_id, judge, p) and labels.csv. Standard
library only; never commit the outputs.
"""
import argparse
import csv
import glob
import json
import math
import os
import sys

from jury_files import write_jury

PATTERN = "dataset=judgebench,response_model=gpt-4o-2024-05-13,judge_name=*,judge_model=*.jsonl"
SHORT = {
    "Ray2333_GRM-Gemma-2B-rewardmodel-ft": "GRM-Gemma-2B",
    "Skywork_Skywork-Reward-Gemma-2-27B": "Skywork-Reward-Gemma-2-27B",
    "Skywork_Skywork-Reward-Llama-3.1-8B": "Skywork-Reward-Llama-3.1-8B",
    "internlm_internlm2-20b-reward": "internlm2-20b-reward",
    "internlm_internlm2-7b-reward": "internlm2-7b-reward",
    "o1-mini-2024-09-12": "o1-mini",
}


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def verdict(decision, flip):
    if decision in ("A>B", "A>>B"):
        v = 1.0
    elif decision in ("B>A", "B>>A"):
        v = 0.0
    else:
        return None
    return 1.0 - v if flip else v


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, help="checkout of ScalerLab/JudgeBench")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    files = sorted(glob.glob(os.path.join(args.input, "outputs", PATTERN)))
    if not files:
        sys.exit(f"error: {args.input}: no outputs/{PATTERN}")
    rows, labels = [], {}
    for path in files:
        base = os.path.basename(path)[: -len(".jsonl")]
        fields = dict(kv.split("=", 1) for kv in base.split(","))
        name = SHORT.get(fields["judge_model"], fields["judge_model"])
        with open(path) as f:
            pairs = [json.loads(line) for line in f if line.strip()]
        for pair in pairs:
            ex = pair["pair_id"]
            label = {"A>B": 1, "B>A": 0}[pair["label"]]
            if labels.setdefault(ex, label) != label:
                sys.exit(f"error: {ex}: labels disagree across files")
            js = pair.get("judgments") or []
            if fields["judge_name"] == "reward_model":
                if js and js[0] and js[0]["judgment"].get("scores"):
                    a, b = js[0]["judgment"]["scores"]
                    rows.append((ex, name, sigmoid(a - b)))
            else:
                for k, order in enumerate(("AB", "BA")):
                    if k < len(js) and js[k] is not None:
                        v = verdict(js[k].get("decision"), flip=(k == 1))
                        if v is not None:
                            rows.append((ex, f"{name}/{fields['judge_name']}/order={order}", v))

    write_jury(args.out, [(ex, j, f"{p:.6g}") for ex, j, p in rows], labels)


if __name__ == "__main__":
    main()
