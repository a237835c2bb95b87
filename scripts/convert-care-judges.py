#!/usr/bin/env python3
"""Convert the CARE authors' CivilComments judge outputs into jury's long judgments
table and a labels table.

Input (--input): a checkout of github.com/SprocketLab/CARE. It reads
`data/binary/civilcomments.csv` (label, text, ...; 5,000 comments, 1 = toxic) and
`judge_outputs/gaussian_mixture/civilcomments/<judge>.csv` (text, ..., parsed_output:
the judge's toxicity rating 0-9; 24 judges).

Output (in --out):
  judgments.csv   example_id, judge, p    p = rating / 9, so p > 0.5 is the authors'
                                          threshold 4.5
  labels.csv      example_id, label

Judge rows are matched to comments by their text: three judge files list the comments
in another order, which the authors' scripts (which align rows by position) do not
notice. A rating is the first number in parsed_output, kept only in 0-9 as in the
authors' `extract_score_from_parsed_output`; an unreadable rating is a missing
judgment. A text that occurs more than once names its last row. Standard library only.
"""
import argparse
import csv
import os
import re
import sys

NUMBER = re.compile(r"[-+]?\d*\.?\d+")


def rating(text: str):
    m = NUMBER.search(text)
    if not m:
        return None
    v = float(m.group(0))
    return v if 0.0 <= v <= 9.0 else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", required=True, help="a checkout of SprocketLab/CARE")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    csv.field_size_limit(sys.maxsize)
    labels_path = os.path.join(args.input, "data", "binary", "civilcomments.csv")
    judges_dir = os.path.join(args.input, "judge_outputs", "gaussian_mixture", "civilcomments")
    for path in (labels_path, judges_dir):
        if not os.path.exists(path):
            print(f"error: {path} not found (is --input a checkout of SprocketLab/CARE?)", file=sys.stderr)
            return 2
    with open(labels_path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    index = {r["text"]: n for n, r in enumerate(rows)}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "labels.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["example_id", "label"])
        for n, r in enumerate(rows):
            w.writerow([f"civil-{n:04d}", int(float(r["label"]))])
    names = sorted(p[:-4] for p in os.listdir(judges_dir) if p.endswith(".csv"))
    if not names:
        print(f"error: no judge files in {judges_dir}", file=sys.stderr)
        return 2
    with open(os.path.join(args.out, "judgments.csv"), "w", newline="") as out:
        w = csv.writer(out)
        w.writerow(["example_id", "judge", "p"])
        for name in names:
            path = os.path.join(judges_dir, name + ".csv")
            seen, unread, unknown = set(), 0, 0
            with open(path, newline="", encoding="utf-8") as f:
                for line, r in enumerate(csv.DictReader(f), start=2):
                    n = index.get(r["text"])
                    if n is None:
                        unknown += 1
                        continue
                    v = rating(r["parsed_output"])
                    if v is None:
                        unread += 1
                        continue
                    if n in seen:
                        continue
                    seen.add(n)
                    w.writerow([f"civil-{n:04d}", name, f"{v / 9:.6f}"])
            if unknown:
                print(f"error: {path}: {unknown} rows whose text is not in {labels_path}", file=sys.stderr)
                return 1
            print(f"{name}: {len(seen)} judgments, {unread} unreadable ratings", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
