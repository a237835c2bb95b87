#!/usr/bin/env python3
"""Convert the WMT20 Metrics Shared Task (Mathur et al., WMT 2020, "Results of the WMT20
Metrics Shared Task") segment-level DARR data of one language pair into a pairwise jury of
MT evaluation metrics: "is translation A of this source segment better than translation
B?", positive class = A better.

Items: the DARR ("relative ranking from direct assessment") pairs of the language pair,
as the task's own script results/combine-scores-seg-RR.py selected them (newstest2020,
human translations excluded, two MT outputs of the same segment whose averaged human DA
scores differ by more than 25 points): results/output/seglevel_allsys/
RR-newstest2020-<lp>-seg-nohy-agree.csv, one row per pair with SID, BETTER, WORSE (the
human-preferred and dis-preferred system) and one 0/1 column per metric. Every label
would otherwise be "BETTER wins", so each pair's order is randomised with a fixed seed
(--seed, default 0): with probability 1/2, A = BETTER and B = WORSE (label 1), otherwise
A = WORSE, B = BETTER (label 0).

Judges: the 29 metrics of that file (for km-en: sentBLEU, chrF, chrF++, TER, CharacTER,
EED, BERT-base-L2, BERT-large-L2, mBERT-L2, BLEURT, BLEURT-extended, COMET, COMET-2R,
COMET-HTER, COMET-MQM, COMET-Rank, the reference-free COMET-QE, OpenKiwi-Bert and
OpenKiwi-XLMR (QE), YiSi-0/1/2, esim, prism, parbleu, parchrf++, paresim-1, SWSS+METEOR,
MEE); names as WMT spells them.
  Column names: the agree file's header lists the metrics sorted by name, but the task
    script wrote the values in the order it had read the score files (a bug in
    results/combine-scores-seg-RR.py: header from sorted(met_names), values from
    met_names), so the header does not name the columns. Each column is named here by
    (1) an exact match with a metric's own segment scores where those are in the snapshot
    (the column must equal [score(BETTER) > score(WORSE)] on every pair), then (2) for the
    rest, the one remaining metric whose Kendall-like tau in the matching
    RR-...-seg-nohy-cor.csv (computed by name, correctly) equals the column's
    (2 * ones - N) / N at the file's 4 significant digits; the converter stops unless every
    column gets exactly one name. No per-judge figure is printed.
  Soft, where the segment scores are in the snapshot (final-metric-scores/*/<metric>.
    seg.score.gz; the others' files are over 4 MiB and absent): d = score(A) - score(B)
    (these "final" scores are all higher-is-better; TER is stored negated), and
    p = 1 / (1 + exp(-d / s)), s = the root mean square of d over the judge's pairs (the
    pair score standardised over the judge's examples; not centred, so a tie is 0.5 and
    the randomised order keeps the mean near 0). For km-en: TER, chrF, SWSS+METEOR,
    YiSi-2, parbleu, parchrf++.
  Hard, for the rest: the column is 1 where the metric scored BETTER strictly above
    WORSE, and 0 otherwise -- a tie is not told apart from a preference for WORSE (WMT20
    counts ties as discordant), so a tie becomes a vote against the human order. p = 1
    if the metric prefers A: the column if A = BETTER, else 1 - the column.
No missing votes (WMT kept only metrics that scored every pair).
example_id: `wmt20-<lp>-<row>` (row = the pair's position in the agree file, from 0).

Input (--input): a checkout of github.com/WMT-Metrics-task/wmt20-metrics
@ 3e434fc32fd02999c885575df6167c31f60ee996 (reads the agree and cor files named above and
final-metric-scores/*/*.seg.score.gz). Licence: none stated in the repository.
Standard library only; never commit the outputs.
"""
import argparse
import csv
import glob
import gzip
import math
import os
import random
import sys

from jury_files import write_jury


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def wmt_name(col):
    return col.replace("_PLUS_", "+").replace("_DASH_", "-")


def seg_scores(root, lp, refset="newstest2020"):
    """{metric (agree-file spelling): {(sid, system): score}} for the metrics whose
    segment-level file is present."""
    out = {}
    for path in sorted(glob.glob(os.path.join(root, "final-metric-scores", "*", "*.seg.score.gz"))):
        with gzip.open(path, "rt", encoding="utf8") as f:
            for line in f:
                c = line.split()
                if len(c) != 8 or c[1] != lp or c[3] != refset:
                    continue
                metric = c[0].replace("+", "_PLUS_").replace("-", "_DASH_")
                out.setdefault(metric, {})[(c[5] + "::" + c[6], c[4])] = float(c[7])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, help="checkout of WMT-Metrics-task/wmt20-metrics")
    ap.add_argument("--lp", default="km-en", help="language pair, e.g. km-en, ps-en")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    short = args.lp.replace("-", "")
    agree = os.path.join(args.input, "results", "output", "seglevel_allsys", f"RR-newstest2020-{short}-seg-nohy-agree.csv")
    with open(agree) as f:
        lines = [l.split() for l in f if l.strip()]
    header, body = lines[0], lines[1:]
    if header[:3] != ["SID", "BETTER", "WORSE"]:
        sys.exit(f"error: {agree}: unexpected header {header[:3]}")
    ncol = len(header) - 3
    if any(len(r) != 3 + ncol for r in body):
        sys.exit(f"error: {agree}: ragged rows")
    cols = [[r[3 + j] for r in body] for j in range(ncol)]
    scores = seg_scores(args.input, args.lp)

    # (1) name columns by exact agreement with the available segment scores
    names = [None] * ncol
    for m, sc in scores.items():
        if not all((r[0], s) in sc for r in body for s in (r[1], r[2])):
            continue
        v = ["1" if sc[(r[0], r[1])] > sc[(r[0], r[2])] else "0" for r in body]
        hit = [j for j in range(ncol) if cols[j] == v]
        if len(hit) != 1 or names[hit[0]] is not None:
            sys.exit(f"error: {m}: segment scores match columns {hit}")
        names[hit[0]] = m
    soft = {m for m in names if m is not None}
    # (2) name the rest by the tau the cor file gives each metric (values not printed)
    cor_path = agree.replace("-agree.csv", "-cor.csv")
    cor = {}
    with open(cor_path) as f:
        for line in f:
            if line.strip():
                m, tau, n = line.split()
                if int(n) != len(body):
                    sys.exit(f"error: {cor_path}: {m}: {n} pairs, agree file has {len(body)}")
                cor[m] = tau
    if sorted(cor) != sorted(header[3:]):
        sys.exit(f"error: {cor_path}: metrics differ from the agree header")
    left = {m: t for m, t in cor.items() if m not in soft}
    for j in range(ncol):
        if names[j] is not None:
            continue
        t = f"{(2 * cols[j].count('1') - len(body)) / len(body):.4}"
        cand = [m for m, tm in left.items() if tm == t]
        if len(cand) != 1:
            sys.exit(f"error: column {j}: {len(cand)} metrics fit")
        names[j] = cand[0]
        del left[cand[0]]
    print("columns (header name -> metric): " + ", ".join(
        f"{wmt_name(h)}->{wmt_name(n)}" for h, n in zip(header[3:], names) if h != n))

    rng = random.Random(args.seed)
    labels, order = {}, []
    for k, r in enumerate(body):
        ex = f"wmt20-{short}-{k:05d}"
        swap = rng.random() < 0.5
        labels[ex] = 0 if swap else 1
        order.append((ex, r[0], r[1], r[2], swap))

    rows = []
    for j, m in enumerate(names):
        if m in soft:
            sc = scores[m]
            diffs = []
            for ex, sid, better, worse, swap in order:
                d_bw = sc[(sid, better)] - sc[(sid, worse)]
                diffs.append((ex, -d_bw if swap else d_bw))
            s = math.sqrt(sum(d * d for _, d in diffs) / len(diffs))
            if s == 0:
                sys.exit(f"error: {m}: every pair tied")
            rows.extend((ex, wmt_name(m), f"{sigmoid(d / s):.6g}") for ex, d in diffs)
        else:
            for (ex, sid, better, worse, swap), a in zip(order, cols[j]):
                a = int(a)
                rows.append((ex, wmt_name(m), 1 - a if swap else a))
    print(f"soft judges (segment scores): {', '.join(wmt_name(m) for m in names if m in soft)}")
    print(f"hard judges (agree column): {', '.join(wmt_name(m) for m in names if m not in soft)}")
    rows.sort(key=lambda r: r[0])
    write_jury(args.out, rows, labels)


if __name__ == "__main__":
    main()
