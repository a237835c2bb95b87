#!/usr/bin/env python3
"""Convert the PandaLM test set into a 3-class jury for `jury aggregate` (the
context-dependent methods' multi-class check, docs/reproduction/winrate-ranking.md).

Classes: 0 = tie, 1 = response1 better, 2 = response2 better. Judges: gpt-3.5-turbo
("Tie" -> 0, "1", "2"; "garbage" -> no judgment) and pandalm-7b (0, 1, 2), each a
one-hot probability vector. Label: the majority of the 3 human annotators (always
defined). Context: instruction, input and both responses.

Output (in --out): judgments.csv (example_id, judge, probs), labels.csv, contexts.csv.
Standard library only. Never commit the outputs.
"""
import argparse
import collections
import csv
import json
import os


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help=".../data/pandalm")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    tests = json.load(open(os.path.join(args.dir, "testset-v1.json")))
    gpt = {r["idx"]: r["gpt_result"] for r in json.load(open(os.path.join(args.dir, "gpt-3.5-turbo-testset-v1.json")))}
    panda = {r["idx"]: r["pandalm_result"] for r in json.load(open(os.path.join(args.dir, "pandalm-7b-testset-v1.json")))}
    os.makedirs(args.out, exist_ok=True)
    onehot = lambda c: json.dumps([1.0 if k == c else 0.0 for k in range(3)])
    with open(os.path.join(args.out, "judgments.csv"), "w", newline="") as fj, \
         open(os.path.join(args.out, "labels.csv"), "w", newline="") as fl, \
         open(os.path.join(args.out, "contexts.csv"), "w", newline="") as fc:
        wj, wl, wc = csv.writer(fj), csv.writer(fl), csv.writer(fc)
        wj.writerow(["example_id", "judge", "probs"])
        wl.writerow(["example_id", "label"])
        wc.writerow(["example_id", "text"])
        for t in tests:
            eid = f"pandalm-{t['idx']}"
            label, n = collections.Counter([t["annotator1"], t["annotator2"], t["annotator3"]]).most_common(1)[0]
            assert n >= 2, t["idx"]
            wl.writerow([eid, label])
            g = {"Tie": 0, "1": 1, "2": 2}.get(gpt[t["idx"]])
            wj.writerow([eid, "gpt-3.5-turbo", onehot(g) if g is not None else ""])
            wj.writerow([eid, "pandalm-7b", onehot(int(panda[t["idx"]]))])
            text = f"{t['instruction']} {t['input']} || Response 1: {t['response1']} || Response 2: {t['response2']}"
            wc.writerow([eid, " ".join(text.split())])
    print(f"wrote {len(tests)} examples to {args.out}")


if __name__ == "__main__":
    main()
