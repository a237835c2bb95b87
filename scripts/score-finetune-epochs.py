#!/usr/bin/env python3
"""Scores every epoch a fine-tuning run left in its checkpoint folder, on one seed's dev
set and test split, next to Dawid-Skene on the same split.

`jury aggregate --encoder finetune` reports only the epoch its dev set chose; the folder
keeps each epoch's posteriors (`epoch-NNN-posteriors.json`, the method's read) and, since
2026-11-23, the context model's own (`epoch-NNN-prior.json`, Crowdlayer's read). Example
order is the run's `predictions.csv` order (the judgments' order), which also holds the
labels and the context-free methods' labels; `metrics.json` holds each seed's dev set.
Each epoch also shows, over all examples, the share it labels 1 and its agreement with
majority vote (the targets Train-on-MV fits), to tell a shifted decision boundary apart.

    python3 scripts/score-finetune-epochs.py --run out/ft-run/cl-ft-2ep \
        --checkpoints ~/.cache/jury/finetune/KEY/crowdlayer-seed0-lambda0 [--seed 0]
"""
import argparse
import csv
import json
import pathlib
import re
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, type=pathlib.Path, help="the run's --out folder")
    ap.add_argument("--checkpoints", required=True, type=pathlib.Path, help="one method/seed/lambda folder")
    ap.add_argument("--seed", type=int, default=0, help="whose dev set and test split (default 0)")
    args = ap.parse_args()

    with open(args.run / "predictions.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or "label" not in rows[0]:
        sys.exit(f"{args.run / 'predictions.csv'}: no `label` column (the run had no labels)")
    ids = [r["example_id"] for r in rows]
    labels = [int(r["label"]) if r["label"] != "" else None for r in rows]
    metrics = json.loads((args.run / "metrics.json").read_text())
    dev_sets = metrics.get("dev_sets") or []
    # Runs since `--first-seed` name their seeds; older ones ran seeds 0, 1, ...
    seeds = metrics.get("seeds", list(range(len(dev_sets))))
    if args.seed not in seeds:
        sys.exit(f"{args.run / 'metrics.json'}: no dev set for seed {args.seed} (the run's seeds: {seeds})")
    dev = set(dev_sets[seeds.index(args.seed)])
    dev_idx = [i for i, e in enumerate(ids) if e in dev]
    test_idx = [i for i, e in enumerate(ids) if e not in dev and labels[i] is not None]

    def share(hard, idx):
        return 100.0 * sum(hard[i] == labels[i] for i in idx) / max(len(idx), 1)

    print(f"seed {args.seed}: dev {len(dev_idx)} examples, test split {len(test_idx)}")
    seeded = {name for name, m in metrics.get("methods", {}).items() if "seeds" in m}
    for col in [c for c in rows[0] if c.endswith("_label") and c != "label"]:
        if args.seed != seeds[0] and col[:-6] in seeded:
            # predictions.csv holds the run's first seed's posteriors of the seeded
            # methods; on another seed's split they would read as that seed's result.
            print(f"  {col[:-6]:>12}: predictions.csv holds seed {seeds[0]}'s; see the epochs below")
            continue
        hard = [int(r[col]) for r in rows]
        print(f"  {col[:-6]:>12} on the test split: {share(hard, test_idx):.2f}")
    known = [y for y in labels if y is not None]
    mv = [int(r["mv_label"]) for r in rows] if "mv_label" in rows[0] else None
    print(f"label 1 on all examples: labels {100.0 * sum(known) / max(len(known), 1):.2f}%"
          + (f", majority vote {100.0 * sum(mv) / len(mv):.2f}%" if mv else ""))
    print(f"{'epoch':>5}  {'read':<10} {'test %':>7} {'dev %':>7} {'label 1 %':>9} {'= mv %':>7}")
    pattern = re.compile(r"epoch-(\d{3})-(posteriors|prior)\.json$")
    files = sorted(p for p in args.checkpoints.iterdir() if pattern.search(p.name))
    if not files:
        sys.exit(f"{args.checkpoints}: no epoch-NNN-posteriors.json files")
    for path in files:
        epoch, read = pattern.search(path.name).groups()
        post = json.loads(path.read_text())
        if len(post) != len(ids):
            sys.exit(f"{path}: {len(post)} posteriors for {len(ids)} examples")
        hard = [int(p > 0.5) for p in post]
        name = "method" if read == "posteriors" else "context"
        ones = 100.0 * sum(hard) / len(hard)
        agree = f"{100.0 * sum(h == m for h, m in zip(hard, mv)) / len(mv):>7.2f}" if mv else f"{'-':>7}"
        print(f"{int(epoch):>5}  {name:<10} {share(hard, test_idx):>7.2f} {share(hard, dev_idx):>7.2f} {ones:>9.2f} {agree}")


if __name__ == "__main__":
    main()
