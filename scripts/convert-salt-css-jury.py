#!/usr/bin/env python3
"""Convert the zero-shot LLM verdicts that SALT-NLP/LLMs_for_CSS ships (Ziems et al. 2024,
"Can Large Language Models Transform Computational Social Science?", Computational
Linguistics 50(1), arXiv 2305.03514) into a binary jury, for one of its binary tasks:

  --task tempowic      TempoWiC (Loureiro et al. 2022): two tweets and a word; "would a
                       linguist consider the meaning of this word in text1 and text2 the
                       A: Same / B: Different?". Positive class = Same (option A).
                       344 items (the repo's balanced test sample); label = the TempoWiC
                       gold label (human annotation), "Same" -> 1, "Different" -> 0.
  --task reddit_humor  Reddit jokes (Weller & Seppi 2019, orionw/RedditHumorDetection):
                       "Is the above joke humorous to most of the people? True/False".
                       Positive class = True (humorous). 500 items; label = the dataset's
                       label (derived from the jokes' Reddit up-votes), True -> 1.
  --task conv_go_awry  Conversations Gone Awry (Zhang et al. 2018): "Will the previous
                       conversation eventually derail into a personal attack? True/False".
                       Positive class = True. 500 items; label = whether the Wikipedia
                       talk-page conversation did derail (crowd-annotated attack).

Judges: one per model whose output file css_data/<task>/answer-<model> exists, i.e.
flan-t5-{small,base,large,xl,xxl}, flan-ul2, text-{ada,babbage,curie}-001,
text-davinci-00{1,2,3}, chatgpt (gpt-3.5-turbo). Each answer file is tab-separated
`index <TAB> gold <TAB> raw model output`, index = the position of the item in the task's
test.json (its gold column is checked against test.json). The raw output has newlines
written as '&&&&&&'; it is parsed as the first word after stripping '&', whitespace and
punctuation: A/B for tempowic, true/false (any case) for the others. Any other output
(refusals, explanations that do not start with the verdict) is no row. Verdicts are hard:
p = 1 (positive) or 0. A judge that answered fewer than --min-coverage of the items
(default 0.5; text-ada-001 answered only 4 of the 344 TempoWiC items) is left out.

example_id: `<task>-<index>` (index as in test.json's order, zero-padded).

Input (--input): a checkout of github.com/SALT-NLP/LLMs_for_CSS
@ 55183a64d7faaf6d5fc23eddf2bfc48ece4cacad (only css_data/<task>/ is read).
Licence: the repository states none. Standard library only; never commit the outputs.
"""
import argparse
import csv
import json
import os
import re
import sys

from jury_files import write_jury

TASKS = {
    # task: (verdict words -> 1/0, gold value -> 1/0)
    "tempowic": ({"a": 1, "b": 0}, {"Same": 1, "Different": 0}),
    "reddit_humor": ({"true": 1, "false": 0}, {"True": 1, "False": 0}),
    "conv_go_awry": ({"true": 1, "false": 0}, {"True": 1, "False": 0}),
}


def parse(raw, words):
    text = re.sub(r"\s+", " ", raw.replace("&", " ")).strip()
    m = re.match(r"[\"'(\[]*([A-Za-z]+)", text)
    if not m:
        return None
    return words.get(m.group(1).lower())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, help="checkout of SALT-NLP/LLMs_for_CSS")
    ap.add_argument("--task", choices=sorted(TASKS), default="tempowic")
    ap.add_argument("--min-coverage", type=float, default=0.5)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    words, gold_map = TASKS[args.task]
    d = os.path.join(args.input, "css_data", args.task)
    with open(os.path.join(d, "test.json")) as f:
        test = json.load(f)
    gold = [str(v) for v in test["labels"].values()]
    n = len(gold)
    width = len(str(n - 1))
    labels = {f"{args.task}-{i:0{width}d}": gold_map[g] for i, g in enumerate(gold)}

    rows = []
    for name in sorted(os.listdir(d)):
        if not name.startswith("answer-"):
            continue
        judge = name[len("answer-"):]
        votes = {}
        with open(os.path.join(d, name)) as f:
            for line in f:
                if not line.strip():
                    continue
                idx, g, raw = line.rstrip("\n").split("\t", 2)
                i = int(idx)
                if gold[i] != g:
                    sys.exit(f"error: {name}: item {i}: gold {g!r} but test.json says {gold[i]!r}")
                v = parse(raw, words)
                if v is not None:
                    votes[i] = v
        if len(votes) < args.min_coverage * n:
            print(f"note: {judge}: {len(votes)} of {n} items answered, left out")
            continue
        rows.extend((f"{args.task}-{i:0{width}d}", judge, v) for i, v in sorted(votes.items()))
    rows.sort(key=lambda r: (r[0], r[1]))
    write_jury(args.out, rows, labels)


if __name__ == "__main__":
    main()
