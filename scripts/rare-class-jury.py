#!/usr/bin/env python3
"""A jury whose class 1 is rare, made from a fully labeled one (docs/reproduction/
calibration-rare.md, "A rare class"): every example of class 0 is kept, and a seeded
draw of class 1's examples, as many as make class 1 the share RATE of the examples kept;
their judgments are copied unchanged.

    scripts/rare-class-jury.py JURY_DIR OUT_DIR RATE [SEED]
"""
import csv, os, random, sys

src, out, rate = sys.argv[1], sys.argv[2], float(sys.argv[3])
seed = int(sys.argv[4]) if len(sys.argv) > 4 else 0
labels = [(r["example_id"], r["label"]) for r in csv.DictReader(open(os.path.join(src, "labels.csv")))]
zeros = [e for e, l in labels if float(l) == 0]
ones = [e for e, l in labels if float(l) == 1]
want = round(rate * len(zeros) / (1 - rate))
if want < 1 or want > len(ones):
    sys.exit(f"{src}: a share of {rate} needs {want} examples of class 1, and it has {len(ones)}")
kept = set(zeros) | set(random.Random(seed).sample(ones, want))
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "labels.csv"), "w") as f:
    f.write("example_id,label\n")
    f.writelines(f"{e},{l}\n" for e, l in labels if e in kept)
with open(os.path.join(src, "judgments.csv"), newline="") as f, open(os.path.join(out, "judgments.csv"), "w", newline="") as g:
    rows = csv.DictReader(f)
    w = csv.DictWriter(g, rows.fieldnames, lineterminator="\n")
    w.writeheader()
    w.writerows(r for r in rows if r["example_id"] in kept)
print(f"{out}: {len(kept)} examples, {want} of class 1 ({want / len(kept):.3f})")
