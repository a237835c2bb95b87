#!/usr/bin/env python3
"""Convert the HumanEval-X evaluation data of ICE-Score (Zhuo, EACL 2024 Findings,
"ICE-Score: Instructing Large Language Models to Evaluate Code") into a binary
code-correctness jury: "does this generated solution pass the problem's unit tests?",
positive class = passes (execution = 1).

Items: for one language of HumanEval-X (default python; --lang cpp|java|js|all), every
generated solution in data/humaneval/humaneval_<lang>_grade.json: 161 problems with 20
sampled solutions each (3,220 for python; 3,220 cpp, 3,219 java, 3,160 js). Each
solution `<k>` of a problem has `grade-<k>` = {"execution": 0/1} (the label, from
running the tests, not a human) and one score per metric, `<metric>-<k>`.
Judges (12), all reference-based except where noted:
  bleu, codebleu, chrf, rouge-l, meteor, ruby  (lexical / AST match with the canonical
     solution);
  codebertscore-f1, codebertscore-f3  (CodeBERTScore against the canonical solution),
  codebertscore-src-f1, codebertscore-src-f3  (the same, with the problem statement as
     source, `codebertscore_s_*`);
  gpt35-noref  (GPT-3.5 rates functional correctness 0-4 from the problem alone,
     `gpt35_nsnr`: no step-by-step, no reference),
  gpt35-ref  (the same with the reference solution, `gpt35_nswr`).
p: every judge gives a score, not a probability (the GPT-3.5 ones an integer 0-4), so
each is mapped monotonically into (0, 1) per judge by a logistic of the standardised
score: p = 1 / (1 + exp(-(x - mean_j) / sd_j)), mean and sd over the chosen items.
Label: execution 1 -> 1, 0 -> 0.
example_id: `he-<lang>-<task_id>-<k>` (HumanEval task number, sample index).

Input (--input): a checkout of github.com/terryyz/ice-score
@ 4e45c6dcd0a31cf62488619ce23cecc032263d8b (data/conala/conala_grade.json, over 4 MiB,
is not needed). Licence: MIT (LICENSE).

Output (in --out): judgments.csv (example_id, judge, p) and labels.csv. Standard
library only; never commit the outputs.
"""
import argparse
import json
import math
import os
import sys

from jury_files import logistic_z, write_jury

JUDGES = {
    "bleu": "bleu", "codebleu": "codebleu", "chrf": "chrf", "rougel": "rouge-l",
    "meteor": "meteor", "ruby": "ruby",
    "codebertscore_f1": "codebertscore-f1", "codebertscore_f3": "codebertscore-f3",
    "codebertscore_s_f1": "codebertscore-src-f1", "codebertscore_s_f3": "codebertscore-src-f3",
    "gpt35_nsnr": "gpt35-noref", "gpt35_nswr": "gpt35-ref",
}
LANGS = ["python", "cpp", "java", "js"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, help="checkout of terryyz/ice-score")
    ap.add_argument("--lang", choices=LANGS + ["all"], default="python")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    labels = {}
    scores = {j: {} for j in JUDGES}
    for lang in LANGS if args.lang == "all" else [args.lang]:
        path = os.path.join(args.input, "data", "humaneval", f"humaneval_{lang}_grade.json")
        with open(path) as f:
            problems = json.load(f)
        for prob in problems:
            task = int(prob["task_id"])
            for key, grade in prob.items():
                if not key.startswith("grade-"):
                    continue
                k = key[len("grade-"):]
                ex = f"he-{lang}-{task:03d}-{int(k):03d}"
                if ex in labels:
                    sys.exit(f"error: duplicate example {ex}")
                if grade.get("execution") not in (0, 1):
                    sys.exit(f"error: {path}: {ex}: execution {grade!r}")
                labels[ex] = int(grade["execution"])
                for j in JUDGES:
                    v = prob.get(f"{j}-{k}")
                    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                        scores[j][ex] = float(v)

    rows = []
    for j, name in JUDGES.items():
        if scores[j]:
            rows.extend((ex, name, p) for ex, p in logistic_z(scores[j]).items())
    order = {name: i for i, name in enumerate(JUDGES.values())}
    rows.sort(key=lambda r: (r[0], order[r[1]]))
    seen = {r[0] for r in rows}
    labels = {ex: y for ex, y in labels.items() if ex in seen}

    write_jury(args.out, rows, labels)


if __name__ == "__main__":
    main()
