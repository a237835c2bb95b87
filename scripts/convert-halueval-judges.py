#!/usr/bin/env python3
"""Convert the SkillAggregation authors' HaluEval dialogue judge outputs into jury's
long judgments table plus a labels table.

Input: a directory of `halueval_dialogue_<judge>.json` files, each
`{"<judge>": [{"ref": "yes"|"no", "prob": [P(Yes), P(No)]}, ...]}` (20,000 entries;
entry 2i / 2i+1 = right / hallucinated response of item i of dialogue_data.json).

Output (in --out):
  judgments.csv (or .jsonl)  example_id, judge, p     with p = prob[0] = P(Yes)
  labels.csv                 example_id, label        with Yes (hallucinated) = 1
  contexts.csv (with --dialogues)  example_id, text   the context of each example for the
                             context-dependent aggregators. --context-style paper (default):
                             the SkillAggregation authors' text, "Query: {history}\nResponse:
                             {response}\nIs there any non-factual or hallucinated information
                             in the response?"; fields: "response || dialogue history"
                             (jury-v1's form, for --split-fields and the tables recorded with it)

Positive class = "Yes" = hallucinated, so p is the probability of the positive class.
Standard library only.
"""
import argparse
import csv
import glob
import json
import os
import sys


def example_id(n: int) -> str:
    return f"halueval-dialogue-{n:05d}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data",
                                                   "skillagg-judge-outputs", "halueval_dialogue"),
                    help="directory holding halueval_dialogue_*.json")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--format", choices=["csv", "jsonl"], default="csv")
    ap.add_argument("--dialogues", help="HaluEval dialogue_data.json: also write contexts.csv")
    ap.add_argument("--context-style", choices=["paper", "fields"], default="paper",
                    help="the contexts' text: the authors' prompt-shaped text, or jury-v1's fields")
    args = ap.parse_args()

    files = sorted(glob.glob(os.path.join(args.input, "halueval_dialogue_*.json")))
    if not files:
        print(f"error: no halueval_dialogue_*.json files in {args.input}", file=sys.stderr)
        return 2
    refs = None
    rows = []
    for path in files:
        with open(path) as f:
            data = json.load(f)
        if len(data) != 1:
            print(f"error: {path}: expected one top-level key (the judge name), got {list(data)}", file=sys.stderr)
            return 2
        (judge, entries), = data.items()
        these = []
        for i, e in enumerate(entries):
            ref = e.get("ref")
            prob = e.get("prob")
            if ref not in ("yes", "no") or not isinstance(prob, list) or len(prob) != 2:
                print(f"error: {path}: entry {i}: expected ref yes/no and prob [P(Yes), P(No)], got {e}", file=sys.stderr)
                return 2
            these.append(ref)
            rows.append((example_id(i), judge, prob[0]))
        if refs is None:
            refs = these
        elif refs != these:
            print(f"error: {path}: reference labels differ from {files[0]}", file=sys.stderr)
            return 2

    os.makedirs(args.out, exist_ok=True)
    jpath = os.path.join(args.out, f"judgments.{args.format}")
    tmp = jpath + ".tmp"
    with open(tmp, "w", newline="") as f:
        if args.format == "csv":
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["example_id", "judge", "p"])
            for r in rows:
                w.writerow([r[0], r[1], repr(float(r[2]))])
        else:
            for r in rows:
                f.write(json.dumps({"example_id": r[0], "judge": r[1], "p": float(r[2])}) + "\n")
    os.replace(tmp, jpath)
    lpath = os.path.join(args.out, "labels.csv")
    with open(lpath + ".tmp", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["example_id", "label"])
        for i, ref in enumerate(refs):
            w.writerow([example_id(i), 1 if ref == "yes" else 0])
    os.replace(lpath + ".tmp", lpath)
    if args.dialogues:
        cpath = os.path.join(args.out, "contexts.csv")
        n = 0
        with open(args.dialogues) as src, open(cpath + ".tmp", "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["example_id", "text"])
            for line in src:
                if not line.strip():
                    continue
                item = json.loads(line)
                for key in ("right_response", "hallucinated_response"):
                    if args.context_style == "paper":
                        text = (f"Query: {item['dialogue_history']}\nResponse: {item[key]}\n"
                                "Is there any non-factual or hallucinated information in the response?")
                    else:
                        text = f"{item[key]} || {item['dialogue_history']}"
                    w.writerow([example_id(n), text])
                    n += 1
        if n != len(refs):
            print(f"error: {args.dialogues}: {n} examples, the judge files have {len(refs)}", file=sys.stderr)
            return 2
        os.replace(cpath + ".tmp", cpath)
    print(f"wrote {len(rows)} judgments ({len(files)} judges x {len(refs)} examples) to {jpath} and labels to {lpath}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
