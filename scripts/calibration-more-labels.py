#!/usr/bin/env python3
"""Plans of more labels beside labels had (`jury label-plan --labeled`), on real juries
(docs/reproduction/calibration-more-labels.md).

For each jury, 25 labels chosen by no draw: the failures (the examples whose judges' mean
probability is most confidently on the wrong side of one half), the disputed (mean
probability nearest one half) or 25 examples of class 1 drawn at random (one class only);
then, for each of TRIALS seeds, `jury label-plan --labeled` plans 50 more among the
others, the plan is labeled from the jury's labels, and `jury aggregate --calibration`
gives the four corrected rates. For reference, plans of 50 and of 75 with no labels had.
Prints one markdown row per jury and set: each estimator's coverage of the jury's true
rate, mean interval width and mean error (estimate less the true rate).

    scripts/calibration-more-labels.py [TRIALS [JURY...]]
"""
import csv, json, os, random, subprocess, sys, tempfile
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/jury-target"))
JURY = os.environ.get("JURY_BIN", os.path.join(TARGET, "debug", "jury"))
ALL = ["llmbar", "mt-bench", "truthfulqa-8", "civilcomments", "pandalm"]
ESTIMATORS = ["labels-only", "rogan-gladen", "ppi-best-judge", "ppi-jury"]
HAD, MORE = 25, 50


def had_sets(labels, mean):
    """The sets of labels had, each with the budget planned beside it."""
    ids = sorted(k for k in mean if k in labels)
    wrong = [k for k in ids if (mean[k] > 0.5) != (labels[k] == 1)]
    return [
        ("none, plan of 50", [], MORE),
        ("none, plan of 75", [], HAD + MORE),
        ("failures", sorted(wrong, key=lambda k: -abs(mean[k] - 0.5))[:HAD], MORE),
        ("disputed", sorted(ids, key=lambda k: abs(mean[k] - 0.5))[:HAD], MORE),
        ("class 1 only", random.Random(0).sample([k for k in ids if labels[k] == 1], HAD), MORE),
    ]


def one_jury(name, trials, tmp):
    d = os.path.join(ROOT, "out", "reproduce-crowd-table", name)
    judgments = os.path.join(d, "judgments.csv")
    labels = {r["example_id"]: int(r["label"]) for r in csv.DictReader(open(os.path.join(d, "labels.csv")))}
    probabilities = defaultdict(list)
    for r in csv.DictReader(open(judgments)):
        if r["p"] != "":
            probabilities[r["example_id"]].append(float(r["p"]))
    mean = {k: sum(v) / len(v) for k, v in probabilities.items()}
    truth = sum(labels[k] for k in mean) / len(mean)
    for what, had, budget in had_sets(labels, mean):
        had_path, plan, labeled = (os.path.join(tmp, f) for f in ("had.csv", "plan.csv", "labeled.csv"))
        with open(had_path, "w") as f:
            f.write("example_id,label\n" + "".join(f"{k},{labels[k]}\n" for k in had))
        cover, width, error = defaultdict(int), defaultdict(float), defaultdict(float)
        for seed in range(trials):
            args = [JURY, "label-plan", "--judgments", judgments, "--budget", str(budget), "--seed", str(seed)]
            args += ["--out", plan, "--force"] + (["--labeled", had_path] if had else [])
            subprocess.run(args, check=True, capture_output=True)
            rows = list(csv.DictReader(open(plan)))
            columns = list(rows[0]) + ([] if "label" in rows[0] else ["label"])
            with open(labeled, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=columns)
                w.writeheader()
                for r in rows:
                    r["label"] = r.get("label") or labels[r["example_id"]]
                    w.writerow(r)
            out = os.path.join(tmp, "out")
            subprocess.run([JURY, "aggregate", "--judgments", judgments, "--calibration", labeled, "--methods",
                            "recommended", "--out", out, "--force"], check=True, capture_output=True)
            rates = json.load(open(os.path.join(out, "metrics.json")))["calibration"]["rates"]
            for e in ESTIMATORS:
                r = rates[e]
                cover[e] += r["low"] - 1e-9 <= truth <= r["high"] + 1e-9
                width[e] += r["high"] - r["low"]
                error[e] += r["estimate"] - truth
        cells = [f"{100 * cover[e] / trials:.1f}% / {width[e] / trials:.3f} / {error[e] / trials:+.4f}"
                 for e in ESTIMATORS]
        ones = sum(labels[k] for k in had)
        print(f"| {name} | {what} | {len(had)} ({ones} of class 1) + {budget} | " + " | ".join(cells) + " |",
              flush=True)


def main():
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    juries = sys.argv[2:] or ALL
    print(f"| jury | labels had | labels | {' | '.join(ESTIMATORS)} |")
    print("|" + "---|" * (3 + len(ESTIMATORS)))
    with tempfile.TemporaryDirectory() as tmp:
        for name in juries:
            one_jury(name, trials, tmp)


if __name__ == "__main__":
    main()
