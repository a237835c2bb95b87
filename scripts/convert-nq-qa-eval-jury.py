#!/usr/bin/env python3
"""Convert the NQ-open answer-correctness judgments of Kamalloo et al. (ACL 2023,
"Evaluating Open-Domain Question Answering in the Era of Large Language Models") into a
binary QA-correctness jury: "is this model answer to a Natural Questions-open question
correct?", positive class = correct (human "Acceptable? = Yes").

Items: the 1,490 distinct (question, model answer) pairs of data/NQ301_human.tsv: answers
of open-domain QA models (FiD variants, EMDR2, R2D2, InstructGPT zero/few-shot, ...) to
301 sampled NQ-open test questions. Rows of NQ301_BEM.tsv, NQ301_gpt-4.tsv and
NQ301_text-davinci-003.tsv are in the same order (checked on the question text).
Judges (6):
  em          hard: SQuAD-normalised exact match of the answer with any gold answer
              (lower case, punctuation and a/an/the removed, whitespace collapsed),
              computed here from the gold answers in NQ301_BEM.tsv;
  f1          soft: the highest SQuAD token F1 against a gold answer, in [0, 1], used as
              is;
  bem         soft: BEM's probability that the answer is equivalent to a gold answer
              (`BEM probs per gold answer`, second entry of each pair), highest over the
              gold answers, in [0, 1], used as is;
  instructgpt-eval  hard: text-davinci-003's verdict (`Acceptable?` of
              NQ301_text-davinci-003.tsv, Yes -> 1, No -> 0);
  gpt4-eval   hard: GPT-4's verdict (`Acceptable?` of NQ301_gpt-4.tsv; 2 answers with an
              empty verdict are no rows);
  vicuna-eval hard: Vicuna's verdict (`vicuna` 0/1 of data/model_outputs/
              NQ301_*_eval-vicuna.tsv), matched on (question with non-alphanumerics
              dropped, answer); only 7 of the QA models were judged by Vicuna, so about a
              quarter of the answers have no row; an answer judged several times (the
              same string from several QA models) gets the mean of its verdicts.
  The three human annotator columns of NQ301_human.tsv are not judges.
Label: `Acceptable?` of NQ301_human.tsv, Yes -> 1, No -> 0.
example_id: `nq301-<row>` (0-based row of NQ301_human.tsv).

Input (--input): a checkout of github.com/castorini/qa-eval
@ 3163bec0d589e3f97c1c51f4d82966661388dc53 (the data also lives in ehsk/OpenQA-eval,
without the Vicuna files). Licence: MIT (LICENSE).

Output (in --out): judgments.csv (example_id, judge, p) and labels.csv. Standard
library only; never commit the outputs.
"""
import argparse
import collections
import csv
import glob
import json
import os
import re
import string
import sys

from jury_files import write_jury

YES_NO = {"Yes": 1.0, "No": 0.0}


def read_tsv(path):
    csv.field_size_limit(10**8)
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def normalize(s):
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def token_f1(pred, gold):
    p, g = normalize(pred).split(), normalize(gold).split()
    common = collections.Counter(p) & collections.Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def qkey(q):
    return re.sub(r"[^a-z0-9]", "", q.lower())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, help="checkout of castorini/qa-eval")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    data = os.path.join(args.input, "data")
    human = read_tsv(os.path.join(data, "NQ301_human.tsv"))
    bem = read_tsv(os.path.join(data, "NQ301_BEM.tsv"))
    gpt4 = read_tsv(os.path.join(data, "NQ301_gpt-4.tsv"))
    davinci = read_tsv(os.path.join(data, "NQ301_text-davinci-003.tsv"))
    if not (len(human) == len(bem) == len(gpt4) == len(davinci)):
        sys.exit("error: the four NQ301 files differ in length")
    for i, (h, b, g, d) in enumerate(zip(human, bem, gpt4, davinci)):
        if not qkey(h["Question"]) == qkey(b["Question"]) == qkey(g["Question"]) == qkey(d["Question"]):
            sys.exit(f"error: row {i}: the files are not in the same order")

    vicuna = collections.defaultdict(list)
    files = glob.glob(os.path.join(data, "model_outputs", "NQ301_*_eval-vicuna.tsv"))
    if not files:
        sys.exit("error: no data/model_outputs/NQ301_*_eval-vicuna.tsv")
    for path in files:
        for r in read_tsv(path):
            if r["vicuna"] in ("0", "1"):
                vicuna[(qkey(r["Question"]), r["Model answer"].strip())].append(float(r["vicuna"]))

    rows, labels = [], {}
    for i, (h, b, g, d) in enumerate(zip(human, bem, gpt4, davinci)):
        if h["Acceptable?"] not in YES_NO:
            continue
        ex = f"nq301-{i:04d}"
        answer = h["Model answer"]
        golds = [a.strip() for a in b["Gold answers"].split(" | ") if a.strip()]
        if not golds:
            sys.exit(f"error: row {i}: no gold answers")
        em = float(any(normalize(answer) == normalize(a) for a in golds))
        f1 = max(token_f1(answer, a) for a in golds)
        probs = json.loads(b["BEM probs per gold answer"])
        votes = [(ex, "em", em), (ex, "f1", f1), (ex, "bem", max(float(p[1]) for p in probs))]
        if d["Acceptable?"] in YES_NO:
            votes.append((ex, "instructgpt-eval", YES_NO[d["Acceptable?"]]))
        if g["Acceptable?"] in YES_NO:
            votes.append((ex, "gpt4-eval", YES_NO[g["Acceptable?"]]))
        v = vicuna.get((qkey(h["Question"]), answer.strip()))
        if v:
            votes.append((ex, "vicuna-eval", sum(v) / len(v)))
        labels[ex] = int(YES_NO[h["Acceptable?"]])
        rows.extend(votes)

    write_jury(args.out, rows, labels)


if __name__ == "__main__":
    main()
