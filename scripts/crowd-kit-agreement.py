#!/usr/bin/env python3
"""Label agreement of jury's crowd-sourcing methods with crowd-kit 1.4.2's, per jury.

For each jury folder (judgments.csv `example_id,judge,p` and labels.csv
`example_id,label`) this runs crowd-kit's DawidSkene, MACE, GLAD, OneCoinDawidSkene,
Wawa, ZeroBasedSkill, MMSR, KOS and MajorityVote, each with its defaults
(`fit_predict`), on the hard votes, and

    jury aggregate --methods ds,mace,glad,onecoin,wawa,zbs,mmsr,kos,mv --ties negative --seed 0

on the same file, then prints a markdown table per jury: method, share of examples
whose hard labels are equal (%), how many examples differ and how many of those jury's
posterior has tied (p = 0.5), jury's accuracy, crowd-kit's accuracy, jury's fit seconds
(metrics.json `seconds`) and crowd-kit's `fit_predict` seconds.

Hard votes: vote = 1 if p > 0.5, else 0. So p == 0.5 is a vote for 0, which is what
jury does: a binary judgment is the row [1 - p, p] and its vote is the row's argmax
with ties to the lower class (crates/jury-aggregate/src/votes.rs, `Votes::new`, and
jury_core::argmax).

Ties: crowd-kit labels a tied posterior by `idxmax`, its first column, and which label
that is depends on the method (crowd-kit 1.4.2 on pandas 3): GLAD, Wawa's and
ZeroBasedSkill's weighted votes and MMSR sort their columns (class 0 first), while
MajorityVote (`value_counts().unstack()`), DawidSkene and OneCoinDawidSkene (their
columns come from MajorityVote's), Wawa's first majority vote and MACE
(`pd.factorize`) order them by first appearance in the data, and KOS maps the first
label seen to +1 (an exact 0 sum is a KeyError). So crowd-kit gets judgments.csv's
votes in the file's order, judges sorted by name (stably; see `load_votes` for why),
except that a vote for 0 is moved to the top (the first judge's first): then
every crowd-kit method takes class 0 on an exact tie, and jury runs with
`--ties negative`. (jury first gives a tied posterior to the side most of the
example's judges took, ties.rs `label_by_sides`; crowd-kit has no such step.)

crowd-kit's labels are cached under --cache, keyed by the judgments file's SHA-256, the
ordering and the method, so reruns after a change to jury only rerun jury (crowd-kit's GLAD and
MACE take minutes on 200,000 votes). Use --no-cache to refit.

Set up the Python side as scripts/bench-dawid-skene does:

    python3 -m venv .venv-bench
    .venv-bench/bin/pip install 'crowd-kit==1.4.2' 'scikit-learn<1.6'

and run, e.g.,

    .venv-bench/bin/python scripts/crowd-kit-agreement.py out/reproduce-crowd-table/halueval-10

Extra arguments for jury go after --jury-args (e.g. `--jury-args=--ds-prior=uniform`).
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

import pandas as pd

# jury's method name -> crowd-kit's class name, each with crowd-kit's defaults.
SUITE = {
    "ds": "DawidSkene",
    "mace": "MACE",
    "glad": "GLAD",
    "onecoin": "OneCoinDawidSkene",
    "wawa": "Wawa",
    "zbs": "ZeroBasedSkill",
    "mmsr": "MMSR",
    "kos": "KOS",
    "mv": "MajorityVote",
}
DEFAULT_JURY = os.path.expanduser("~/.cache/jury-target/debug/jury")


def load_votes(path, keep_order=False):
    df = pd.read_csv(path, dtype={"example_id": str, "judge": str})
    df = df.dropna(subset=["p"])
    # p == 0.5 votes 0, as jury's argmax of [1 - p, p] does.
    votes = (df["p"] > 0.5).astype(int)
    out = pd.DataFrame({"task": df["example_id"].values, "worker": df["judge"].values, "label": votes.values})
    resorted = False
    if not keep_order:
        # Judges in sorted order (stable): crowd-kit's MACE indexes its strategy
        # parameters by the judges' order of first appearance (pd.factorize) but fills
        # them from a groupby sorted by name (mace.py `_e_step`, `.unstack()`), so on a
        # file whose judges are not sorted it mixes up the judges' strategies.
        seen = list(pd.unique(out["worker"]))
        if seen != sorted(seen):
            out = out.sort_values("worker", kind="stable").reset_index(drop=True)
            resorted = True
    # A vote for 0 goes to the top, so that crowd-kit's first-seen label is 0: the first
    # one of the first judge, so that the judges' order of first appearance (jury's judge
    # order, and the rows of crowd-kit MACE's parameters) stays the file's.
    zero = (out["label"] == 0).to_numpy()
    zeros = (zero & (out["worker"] == out["worker"].iloc[0]).to_numpy()).nonzero()[0]
    if len(zeros) == 0:
        zeros = zero.nonzero()[0]
    if len(zeros) and zeros[0] > 0:
        order = [zeros[0]] + [i for i in range(len(out)) if i != zeros[0]]
        out = out.iloc[order].reset_index(drop=True)
    return out, resorted


def load_labels(path):
    df = pd.read_csv(path, dtype={"example_id": str})
    df = df.dropna(subset=["label"])
    return pd.Series(df["label"].astype(int).values, index=df["example_id"].values)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def crowd_kit(method, votes, cache_dir, key):
    """crowd-kit's hard labels (a Series by task) and its fit_predict seconds, or an error."""
    path = os.path.join(cache_dir, f"{key}-{method}.json") if cache_dir else None
    if path and os.path.exists(path):
        with open(path) as f:
            got = json.load(f)
        labels = None if got["labels"] is None else pd.Series(got["labels"], dtype=object)
        return labels, got["seconds"], got.get("error")
    import crowdkit.aggregation as ca

    model = getattr(ca, SUITE[method])()
    start = time.perf_counter()
    error = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            labels = model.fit_predict(votes)
        labels = labels.map(lambda x: int(x))
    except Exception as e:  # e.g. KOS's KeyError on a task whose messages sum to 0
        labels, error = None, f"{type(e).__name__}: {e}"
    seconds = time.perf_counter() - start
    if path:
        os.makedirs(cache_dir, exist_ok=True)
        with open(path, "w") as f:
            json.dump({"labels": None if labels is None else {str(k): v for k, v in labels.items()},
                       "seconds": seconds, "error": error}, f)
    return labels, seconds, error


def run_jury(binary, folder, methods, ties, extra, out):
    cmd = [binary, "aggregate", "--judgments", f"{folder}/judgments.csv", "--methods", ",".join(methods),
           "--ties", ties, "--seed", "0", "--out", out]
    if os.path.exists(f"{folder}/labels.csv"):
        cmd[4:4] = ["--labels", f"{folder}/labels.csv"]
    subprocess.run(cmd + extra, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    pred = pd.read_csv(f"{out}/predictions.csv", dtype={"example_id": str})
    with open(f"{out}/metrics.json") as f:
        metrics = json.load(f)
    return pred.set_index("example_id"), metrics


def accuracy(labels, truth):
    common = truth.index.intersection(labels.index)
    if len(common) == 0:
        return float("nan")
    return 100.0 * float((labels.loc[common].astype(int).values == truth.loc[common].values).mean())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("juries", nargs="+", help="folders with judgments.csv and labels.csv")
    ap.add_argument("--jury", default=DEFAULT_JURY, help="the jury binary (default: %(default)s)")
    ap.add_argument("--methods", default=",".join(SUITE), help="jury method names (default: %(default)s)")
    ap.add_argument("--cache", default="out/crowd-kit-agreement/cache", help="crowd-kit label cache folder")
    ap.add_argument("--no-cache", action="store_true", help="refit crowd-kit even when cached")
    ap.add_argument("--jury-args", action="append", default=[], help="an extra argument for jury aggregate")
    ap.add_argument("--json", help="also write every row to this JSON file")
    ap.add_argument("--keep-order", action="store_true",
                    help="give crowd-kit the judges in the file's order, not sorted (see load_votes)")
    a = ap.parse_args()
    methods = [m for m in a.methods.split(",") if m]
    unknown = [m for m in methods if m not in SUITE]
    if unknown:
        sys.exit(f"unknown methods: {unknown}; known: {list(SUITE)}")
    import crowdkit

    print(f"crowd-kit {crowdkit.__version__}; jury {a.jury} {' '.join(a.jury_args)}".rstrip())
    rows_all = []
    worst = {}
    for folder in a.juries:
        folder = folder.rstrip("/")
        name = os.path.basename(folder)
        votes, resorted = load_votes(f"{folder}/judgments.csv", a.keep_order)
        truth = load_labels(f"{folder}/labels.csv") if os.path.exists(f"{folder}/labels.csv") else pd.Series(dtype=int)
        key = sha256(f"{folder}/judgments.csv")[:16] + ("-s1" if resorted else "-z1")
        with tempfile.TemporaryDirectory() as out:
            pred, metrics = run_jury(a.jury, folder, methods, "negative", a.jury_args, out)
        n_ex, n_judges = votes["task"].nunique(), votes["worker"].nunique()
        pos = 100.0 * float(truth.mean()) if len(truth) else float("nan")
        print(f"\n### {name}: {n_ex} examples, {n_judges} judges, {len(votes)} votes, "
              f"positive rate {pos:.1f}%\n")
        print("| method | equal labels % | differ (jury tied) | jury acc % | crowd-kit acc % | jury fit s "
              "| crowd-kit fit s |")
        print("|---|---|---|---|---|---|---|")
        for m in methods:
            ours = pred[f"{m}_label"].astype(int)
            theirs, ck_s, err = crowd_kit(m, votes, None if a.no_cache else a.cache, key)
            jury_s = metrics["methods"][m]["seconds"]
            if theirs is None:
                print(f"| {m} | crowd-kit failed: {err} | - | {accuracy(ours, truth):.2f} | - "
                      f"| {jury_s:.4f} | {ck_s:.2f} |")
                rows_all.append({"jury": name, "method": m, "error": err})
                continue
            theirs.index = theirs.index.astype(str)
            common = ours.index.intersection(theirs.index)
            same = ours.loc[common].values == theirs.loc[common].astype(int).values
            equal = 100.0 * float(same.mean())
            tied = int((pred.loc[common, f"{m}_p"].values[~same] == 0.5).sum())
            ja, ca_ = accuracy(ours, truth), accuracy(theirs, truth)
            print(f"| {m} | {equal:.2f} | {int((~same).sum())} ({tied}) | {ja:.2f} | {ca_:.2f} "
                  f"| {jury_s:.4f} | {ck_s:.2f} |")
            rows_all.append({"jury": name, "method": m, "equal": equal, "jury_acc": ja, "ck_acc": ca_,
                             "jury_s": jury_s, "ck_s": ck_s, "n": len(common), "differ": int((~same).sum()),
                             "differ_tied": tied})
            worst[m] = min(worst.get(m, 101.0), equal)
    if len(a.juries) > 1:
        print("\n| method | lowest equal labels % over the juries |")
        print("|---|---|")
        for m in methods:
            if m in worst:
                print(f"| {m} | {worst[m]:.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows_all, f, indent=1)


if __name__ == "__main__":
    main()
