#!/usr/bin/env python3
"""Does the correlated Gaussian (`gauss`) depend on where its EM step starts, and can
its own likelihood choose the start without labels? A check outside jury (NumPy),
quoted in docs/reproduction/label-free.md (issue 48).

  python3 scripts/gauss-start-check.py [ROOT]

ROOT: the folder `scripts/reproduce-crowd-table` writes (default
out/reproduce-crowd-table): per data set, judgments.csv, labels.csv and result/ with
every method's posteriors in predictions.csv. For each data set and each method's
posteriors as the start, one M-step of gauss's model (a Gaussian per class over the
judges' log-odds, full covariance, clipped at 1e-3, a ridge of 1e-3 of the mean
variance, missing judges filled from the class means as jury does) and one E-step;
prints the accuracy of that step and the fitted mixture's mean log-likelihood per
example. Started from `ds`, it is jury's `gauss`. Labels only score.
"""
import csv
import os
import sys

import numpy as np

ROOT = "out/reproduce-crowd-table"
SETS = ["halueval-10", "halueval-9", "truthfulqa-8", "llmbar", "mt-bench", "pandalm"]
STARTS = ["ds", "mace", "kos", "mmsr", "onecoin", "glad", "care", "mv", "zbs"]
CLIP, RIDGE = 1e-3, 1e-3


def load(name):
    folder = os.path.join(ROOT, name)
    with open(os.path.join(folder, "result/predictions.csv")) as f:
        rows = list(csv.DictReader(f))
    ids = [r["example_id"] for r in rows]
    index = {e: i for i, e in enumerate(ids)}
    judges, cells = {}, []
    with open(os.path.join(folder, "judgments.csv")) as f:
        for r in csv.DictReader(f):
            k = judges.setdefault(r["judge"], len(judges))
            cells.append((index[r["example_id"]], k, float(r["p"])))
    x = np.full((len(ids), len(judges)), np.nan)
    for n, k, p in cells:
        p = min(max(p, CLIP), 1 - CLIP)
        x[n, k] = np.log(p / (1 - p))
    y = np.array([int(r["label"]) if r["label"] != "" else -1 for r in rows])
    starts = {m: np.array([float(r[f"{m}_p"]) for r in rows]) for m in STARTS if f"{m}_p" in rows[0]}
    return x, y, starts


def step(x, t, shared=False):
    """One M-step from P(positive) = t, then the posterior and mean log-likelihood.
    `shared`: one covariance for both classes, the classes' scatter pooled (care-gauss's
    model) instead of one per class (gauss's)."""
    present = ~np.isnan(x)
    values = np.nan_to_num(x)
    n, m = x.shape
    w = [1 - t, t]
    mean = []
    for c in range(2):
        ww = w[c][:, None] * present
        total = ww.sum(0)
        mean.append(np.where(total > 0, (values * ww).sum(0) / np.maximum(total, 1e-300), 0.0))
    filled = np.where(present, values, (1 - t)[:, None] * mean[0] + t[:, None] * mean[1])
    covs = []
    for c in range(2):
        d = filled - mean[c]
        covs.append((d * w[c][:, None]).T @ d / w[c].sum())
    if shared:
        pooled = (w[0].sum() * covs[0] + w[1].sum() * covs[1]) / n
        covs = [pooled, pooled]
    ridge = RIDGE * sum(np.trace(s) for s in covs) / (2 * m) + 1e-9
    covs = [s + ridge * np.eye(m) for s in covs]
    prior = np.array([w[0].sum(), w[1].sum()]) / n
    log = np.zeros((n, 2))
    patterns = {}
    for i in range(n):
        patterns.setdefault(tuple(np.flatnonzero(present[i])), []).append(i)
    for judged, rows in patterns.items():
        judged, rows = list(judged), np.array(rows)
        if not judged:
            log[rows] = np.log(prior)
            continue
        for c in range(2):
            chol = np.linalg.cholesky(covs[c][np.ix_(judged, judged)])
            z = np.linalg.solve(chol, (x[np.ix_(rows, judged)] - mean[c][judged]).T)
            log[rows, c] = (
                np.log(prior[c])
                - 0.5 * (z**2).sum(0)
                - np.log(np.diag(chol)).sum()
                - 0.5 * len(judged) * np.log(2 * np.pi)
            )
    top = log.max(1)
    loglik = (top + np.log(np.exp(log[:, 0] - top) + np.exp(log[:, 1] - top))).mean()
    posterior = 1 / (1 + np.exp(np.clip(log[:, 0] - log[:, 1], -700, 700)))
    return posterior, loglik


def accuracy(t, y):
    labeled = y >= 0
    # Ties to the positive class, as jury's default.
    return 100 * ((t >= 0.5).astype(int)[labeled] == y[labeled]).mean()


def table():
    print("| data set | " + " | ".join(f"from {s}" for s in STARTS) + " | the likelihood picks |")
    print("|---|" + "---|" * (len(STARTS) + 1))
    for name in SETS:
        if not os.path.isdir(os.path.join(ROOT, name)):
            continue
        x, y, starts = load(name)
        cells, best = [], None
        for s in STARTS:
            if s not in starts:
                cells.append("-")
                continue
            t, ll = step(x, starts[s])
            acc = accuracy(t, y)
            cells.append(f"{acc:.2f} ({ll:.3f})")
            if best is None or ll > best[1]:
                best = (s, ll, acc)
        print(f"| {name} | " + " | ".join(cells) + f" | {best[0]}: {best[2]:.2f} |")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        ROOT = sys.argv[1]
    table()
