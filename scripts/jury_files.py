"""The two files every converter in scripts/ writes for `jury aggregate`, in one place,
judgments.csv (example_id, judge, p) and labels.csv (example_id, label), and the one
mapping of a judge's raw scores into probabilities. Standard library only."""
import csv
import math
import os
import sys


def write_jury(out, rows, labels):
    """Writes rows of (example_id, judge, p) and a {example_id: label} map into the folder
    `out` (made if missing), each value as given."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "judgments.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["example_id", "judge", "p"])
        w.writerows(rows)
    with open(os.path.join(out, "labels.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["example_id", "label"])
        w.writerows(sorted(labels.items()))
    print(f"wrote {len(rows)} judgments ({len({r[1] for r in rows})} judges, {len(labels)} examples) to {out}")


def logistic_z(values):
    """{key: score} -> {key: logistic of the standardised score}: a judge's scores (higher
    = more positive) mapped monotonically into (0, 1), 0.5 at the judge's mean."""
    xs = list(values.values())
    mean = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))
    if sd == 0:
        sys.exit("error: a judge gives one score to every item")
    return {k: 1.0 / (1.0 + math.exp(-(x - mean) / sd)) for k, x in values.items()}
