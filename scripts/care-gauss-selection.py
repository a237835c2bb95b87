#!/usr/bin/env python3
"""How the recommended default `care-gauss` and its settings were chosen (issue 48),
quoted in docs/reproduction/label-free.md: two stages, each by the same rule on the tuning sets
(HaluEval with 10 and with 9 judges, TruthfulQA half a): at or above Dawid-Skene and
every crowd-kit method on each tuning set, then the highest mean accuracy over them.
The other columns (TruthfulQA half b, CivilComments, LLMBar, MT-Bench, PandaLM,
FairEval, LLMEval2) are reported, not used.

  python3 scripts/care-gauss-selection.py [ROOT [JURY]]

ROOT: the folder `scripts/reproduce-crowd-table` writes (default
out/reproduce-crowd-table). JURY: the jury program (default
$CARGO_TARGET_DIR/debug/jury, which that script builds).

Stage 1, CARE's gamma: `jury aggregate --methods care --care-gamma G` for each G of the
grid (written under ROOT/care-gamma/G). Stage 2, the Gaussian refinement: from the
posteriors of Dawid-Skene or of CARE at the chosen gamma, 1 to 3 EM steps of a Gaussian
over the judges' log-odds with one covariance per class (gauss's model) or one shared
by the classes, by the NumPy step of scripts/gauss-start-check.py (the same model as
jury's; started from ds with one step per class it is `gauss`, from CARE with one
shared step `care-gauss`). Labels only score. Needs NumPy.
"""
import csv
import functools
import importlib.util
import os
import subprocess
import sys

import numpy as np

ROOT = sys.argv[1] if len(sys.argv) > 1 else "out/reproduce-crowd-table"
JURY = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
    os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/jury-target")), "debug/jury")
TUNING = ["halueval-10", "halueval-9", "truthfulqa-8a"]
OTHERS = ["truthfulqa-8b", "civilcomments", "llmbar", "mt-bench", "pandalm", "faireval", "llmeval2"]
CROWD_KIT = ["ds", "wawa", "zbs", "onecoin", "glad", "mace", "mmsr", "kos"]
GAMMAS = ["0.5", "1", "2", "5", "10", "20", "50", "100", "200", "500", "1000"]

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("gauss_start_check", os.path.join(here, "gauss-start-check.py"))
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)
check.ROOT = ROOT

sets = [s for s in TUNING + OTHERS if os.path.isdir(os.path.join(ROOT, s))]
missing = [s for s in TUNING if s not in sets]
if missing:
    sys.exit(f"error: {', '.join(missing)} not in {ROOT} (run scripts/reproduce-crowd-table with TruthfulQA)")
data = {s: check.load(s) for s in sets}


def method_accuracy(name, method):
    """A method's accuracy (%) from its labels in predictions.csv (its own tie rule)."""
    with open(os.path.join(ROOT, name, "result/predictions.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r["label"] != ""]
    return 100 * sum(r[f"{method}_label"] == r["label"] for r in rows) / len(rows)


bar = {s: max(method_accuracy(s, m) for m in CROWD_KIT) for s in sets}


@functools.cache
def care_posteriors(gamma, name):
    """CARE's P(positive) at `gamma` on data set `name`, in predictions.csv's order."""
    # The TruthfulQA halves share one judgments file; CARE is fitted once on it.
    source = "truthfulqa-8" if name.startswith("truthfulqa-8") else name
    out = os.path.join(ROOT, "care-gamma", gamma, source)
    if not os.path.isfile(os.path.join(out, "predictions.csv")):
        subprocess.run([JURY, "aggregate", "--judgments", os.path.join(ROOT, source, "judgments.csv"),
                        "--methods", "care", "--care-gamma", gamma, "--ties", "positive", "--out", out],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(out, "predictions.csv")) as f:
        p = {r["example_id"]: float(r["care_p"]) for r in csv.DictReader(f)}
    with open(os.path.join(ROOT, name, "result/predictions.csv")) as f:
        return np.array([p[r["example_id"]] for r in csv.DictReader(f)])


def row(label, accuracies):
    """A table row, the rule's verdict and the tuning mean."""
    passes = all(accuracies[s] >= bar[s] - 1e-9 for s in TUNING)
    mean = sum(accuracies[s] for s in TUNING) / len(TUNING)
    cells = " | ".join(f"{accuracies[s]:.2f}" for s in sets)
    print(f"| {label} | {cells} | {'yes' if passes else 'no'} | {mean:.3f} |", flush=True)
    return passes, mean


def header(first):
    print(f"| {first} | " + " | ".join(sets) + " | passes on tuning | tuning mean |")
    print("|---|" + "---|" * (len(sets) + 2))
    print("| bar (best of ds and crowd-kit) | " + " | ".join(f"{bar[s]:.2f}" for s in sets) + " | | |")


print("Stage 1: CARE's gamma\n")
header("care, gamma")
best = None
for gamma in GAMMAS:
    accuracies = {s: check.accuracy(care_posteriors(gamma, s), data[s][1]) for s in sets}
    passes, mean = row(gamma, accuracies)
    if passes and (best is None or mean > best[1]):
        best = (gamma, mean)
if best is None:
    sys.exit("no gamma passes on the tuning sets")
gamma = best[0]
print(f"\nchosen: gamma {gamma}\n\nStage 2: the Gaussian refinement (CARE at gamma {gamma})\n")
header("start, covariance, steps")
best = None
for start in ["ds", "care"]:
    for shared in [False, True]:
        # Posteriors after each step, per data set: step k continues from step k - 1.
        t = {s: data[s][2]["ds"] if start == "ds" else care_posteriors(gamma, s) for s in sets}
        for steps in [1, 2, 3]:
            accuracies = {}
            for s in sets:
                t[s], _ = check.step(data[s][0], t[s], shared)
                accuracies[s] = check.accuracy(t[s], data[s][1])
            label = f"{start}, {'shared' if shared else 'per class'}, {steps}"
            passes, mean = row(label, accuracies)
            if passes and (best is None or mean > best[1]):
                best = (label, mean)
print(f"\nchosen: {best[0] if best else 'none passes'}")
