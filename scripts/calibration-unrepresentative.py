#!/usr/bin/env python3
"""Calibration sets not drawn as stated, on every real jury with labels
(docs/reproduction/calibration-rates.md, "Calibration sets not drawn as stated").

For each jury, three sets of K labels (100, or 50 on juries under 400 examples) given to
`jury aggregate --calibration` as if drawn uniformly: the first K examples of the
judgments file; the K the judges are least sure of (mean probability nearest one half);
and the K - K/10 they call most positive with the K/10 they call least (so both classes
are there). Prints one markdown row per set: the balance check's two z, whether it
flagged the set, the true rate, two of the corrected rates and how many of the four
intervals cover the true rate.

    scripts/calibration-unrepresentative.py [JURY...]
"""
import csv, json, os, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/jury-target"))
JURY = os.path.join(TARGET, "debug", "jury")
ALL = ["halueval-10", "llmbar", "truthfulqa-8", "civilcomments", "mt-bench", "halueval-9", "llmeval2", "pandalm",
       "faireval", "judgebench-gpt4o-pairs", "triviaqa-judges-v1", "triviaqa-judges-v2"]
ESTIMATORS = ["labels-only", "rogan-gladen", "ppi-best-judge", "ppi-jury"]


def folder(name):
    d = os.path.join(ROOT, "out", "reproduce-crowd-table", name)
    return d if os.path.isdir(d) else os.path.join(ROOT, "out", "validation-suite", "real", name)


def main(juries):
    subprocess.run(["cargo", "build", "-q", "-p", "jury-cli", "--bin", "jury"], cwd=ROOT, check=True)
    print("| jury | set | K | z: mean probability / p (1 - p) | flagged | true rate | labels-only | ppi-jury | intervals covering |")
    print("|---|---|---|---|---|---|---|---|---|")
    tmp = tempfile.mkdtemp()
    for name in juries:
        d = folder(name)
        if not os.path.isfile(os.path.join(d, "labels.csv")):
            print(f"note: {name} missing (scripts/reproduce-crowd-table or jury import builds it)", file=sys.stderr)
            continue
        sums, order = {}, []
        for r in csv.DictReader(open(os.path.join(d, "judgments.csv"))):
            if r["example_id"] not in sums:
                order.append(r["example_id"])
                sums[r["example_id"]] = [0.0, 0]
            sums[r["example_id"]][0] += float(r["p"])
            sums[r["example_id"]][1] += 1
        label = {r["example_id"]: r["label"] for r in csv.DictReader(open(os.path.join(d, "labels.csv")))}
        order = [e for e in order if e in label]
        mean = {e: sums[e][0] / sums[e][1] for e in order}
        true = sum(label[e] == "1" for e in order) / len(order)
        k = 100 if len(order) >= 400 else 50
        by_mean = sorted(order, key=lambda e: mean[e])
        sets = {
            "first": order[:k],
            "least sure": sorted(order, key=lambda e: abs(mean[e] - 0.5))[:k],
            "most positive": by_mean[::-1][: k - k // 10] + by_mean[: k // 10],
        }
        for set_name, ids in sets.items():
            cal = os.path.join(tmp, "calibration.csv")
            with open(cal, "w") as f:
                f.write("example_id,label\n" + "".join(f"{e},{label[e]}\n" for e in ids))
            out = os.path.join(tmp, "out")
            subprocess.run(["rm", "-rf", out], check=True)
            subprocess.run([JURY, "aggregate", "--judgments", os.path.join(d, "judgments.csv"), "--calibration", cal,
                            "--methods", "recommended", "--out", out], check=True, capture_output=True)
            c = json.load(open(os.path.join(out, "metrics.json")))["calibration"]
            b, r = c["balance"], c["rates"]
            covering = sum(r[e]["low"] <= true <= r[e]["high"] for e in ESTIMATORS)
            print(f"| {name} | {set_name} | {k} | {b['mean_probability']['z']:+.1f} / {b['uncertainty']['z']:+.1f} | "
                  f"{'yes' if not b['plausible'] else 'no'} | {true:.3f} | {r['labels-only']['estimate']:.3f} | "
                  f"{r['ppi-jury']['estimate']:.3f} | {covering} of 4 |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ALL)
