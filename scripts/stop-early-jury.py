#!/usr/bin/env python3
"""A jury that stopped asking early, made from a fully judged one (docs/reproduction/
calibration-rates.md, "Juries that stop asking early"): each example keeps its judgments
in the judges' name order until at least three are asked and their summed log-odds
(probabilities clipped to 0.001 from 0 and 1) pass 4 in size, as an adaptive jury stops
once its first judges agree; labels.csv is copied.

    scripts/stop-early-jury.py JURY_DIR OUT_DIR
"""
import csv, math, os, shutil, sys

src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
rows = {}
for r in csv.DictReader(open(os.path.join(src, "judgments.csv"))):
    rows.setdefault(r["example_id"], {})[r["judge"]] = r["p"]
judges = sorted({j for v in rows.values() for j in v})
kept = 0
with open(os.path.join(out, "judgments.csv"), "w") as f:
    f.write("example_id,judge,p\n")
    for e, v in rows.items():
        total, asked = 0.0, 0
        for j in (j for j in judges if j in v):
            p = min(max(float(v[j]), 1e-3), 1 - 1e-3)
            total += math.log(p / (1 - p))
            asked += 1
            f.write(f"{e},{j},{v[j]}\n")
            kept += 1
            if asked >= 3 and abs(total) > 4.0:
                break
shutil.copy(os.path.join(src, "labels.csv"), os.path.join(out, "labels.csv"))
print(f"{out}: {kept / len(rows):.2f} of {len(judges)} judges per example")
