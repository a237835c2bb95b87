#!/usr/bin/env python3
"""A large simulated jury that is nearly always right (docs/reproduction/calibration-rates.md,
"The verdicts' accuracy read off the calibration labels"): N examples, class 1 with
probability RATE, and JUDGES judges whose log-odds are normal around a class-signed mean
that grows from the first judge to the last (its skill from 0.6 to 0.9), spread 1.5.
Writes OUT_DIR/judgments.csv and OUT_DIR/labels.csv; the same seed writes the same files.

    scripts/accurate-jury.py OUT_DIR [N [JUDGES [RATE [SEED]]]]    # defaults 200000 10 0.3 11
"""
import math, os, random, sys

out = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
k = int(sys.argv[3]) if len(sys.argv) > 3 else 10
rate = float(sys.argv[4]) if len(sys.argv) > 4 else 0.3
rng = random.Random(int(sys.argv[5]) if len(sys.argv) > 5 else 11)
skill = [0.6 + 0.3 * j / max(1, k - 1) for j in range(k)]
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "judgments.csv"), "w") as f, open(os.path.join(out, "labels.csv"), "w") as g:
    f.write("example_id,judge,p\n")
    g.write("example_id,label\n")
    for i in range(n):
        t = 1 if rng.random() < rate else 0
        g.write(f"e{i},{t}\n")
        for j in range(k):
            z = rng.gauss(4.8 * (2 * t - 1) * (skill[j] - 0.5), 1.5)
            f.write(f"e{i},j{j},{1 / (1 + math.exp(-z)):.5f}\n")
