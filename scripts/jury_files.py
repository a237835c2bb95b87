"""The two files every converter in scripts/ writes for `jury aggregate`, in one place:
judgments.csv (example_id, judge, p) and labels.csv (example_id, label).
Standard library only."""
import csv
import os


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
