#!/usr/bin/env python3
"""Convert the "Judging the Judges" (Thakur et al. 2024, arXiv 2406.12624) TriviaQA
judge outputs into a binary QA-correctness jury: "is this exam-taker answer
correct?", positive class = correct.

Each row of the results CSV is one answer of one of 9 exam-taker models (llama2
base/chat 7B-70B, mistral, gpt-4-turbo) to one of 400 TriviaQA questions. Judges are
the CSV's verdict columns, each "True"/"False":
  V1 (default, results/TriviaQA_Judges_w_HumanJudgement_V1.csv, 3,600 answers):
     9 LLM judges (Mistral-7B, Llama-7B, Llama-13B, Llama3-8B, Gemma-2B, Llama-70B,
     Llama3-70B, GPT-4, JudgeLM) plus 2 lexical judges (EM, Contains);
     label column HumanJudgement.
  V2 (results/TriviaQA_Judges_w_HumanJudgement_V2.csv, another run with other
     answers): the same 9 LLM judges, no lexical ones; label column Human-Eval
     (rows without a human label are left out).
p: hard, True -> 1, False -> 0; an empty cell is no row (V1 has 5 answers with no
verdict at all; they are left out). Label: True -> 1.
example_id: `tqa-<version>-<row index>` (row order of the CSV).

Input (--input): a checkout of github.com/UMass-Meta-LLM-Eval/llm_eval
@ 7c0bf28e75703cd41c6088bebb64eefcdf348bd4. Licence: no licence file
(pyproject.toml declares the "MIT License" classifier).

Output (in --out): judgments.csv (example_id, judge, p) and labels.csv. Standard
library only; never commit the outputs.
"""
import argparse
import csv
import os
import sys

from jury_files import write_jury

VERSIONS = {
    "V1": ("TriviaQA_Judges_w_HumanJudgement_V1.csv", "HumanJudgement", []),
    "V2": ("TriviaQA_Judges_w_HumanJudgement_V2.csv", "Human-Eval", ["Human-Eval_Confidence"]),
}
META = ["model", "response", "question", "references", "benchmark"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, help="checkout of UMass-Meta-LLM-Eval/llm_eval")
    ap.add_argument("--version", choices=sorted(VERSIONS), default="V1")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    name, label_col, skip = VERSIONS[args.version]
    path = os.path.join(args.input, "results", name)
    csv.field_size_limit(10**8)
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        judges = [c for c in reader.fieldnames if c not in META and c != label_col and c not in skip]
        data = list(reader)
    if label_col not in reader.fieldnames or not judges:
        sys.exit(f"error: {path}: unexpected columns {reader.fieldnames}")
    verdict = {"True": 1.0, "False": 0.0}
    rows, labels = [], {}
    for i, r in enumerate(data):
        if r[label_col] not in verdict:
            continue
        ex = f"tqa-{args.version.lower()}-{i:04d}"
        votes = [(ex, j, verdict[r[j]]) for j in judges if r[j] in verdict]
        if votes:
            labels[ex] = int(verdict[r[label_col]])
            rows.extend(votes)

    write_jury(args.out, rows, labels)


if __name__ == "__main__":
    main()
