#!/usr/bin/env python3
"""Pools the seeds of several `jury aggregate` runs (each a `--first-seed N --seeds M`
share of one experiment) into the mean and sample standard deviation a single run over
all of them would report.

A seed's dev set, initialisation, batch order and checkpoints depend on the seed alone,
so runs on separate machines pool exactly, provided they share the data and every
setting but the seeds. This script checks what metrics.json can show: the same
`n_examples` and `dev_size`, the same methods, no seed twice, and for each method the
same seed count as `seeds`. It prints one line per seeded method (and the context-free
methods on the same test splits, `outside_dev`), and with `--out FILE` writes them as
JSON shaped like metrics.json's `methods` entries.

    python3 scripts/pool-seeds.py out/ft-run/seed0/metrics.json out/ft-run/seed1/metrics.json ...
"""
import argparse
import json
import math
import pathlib
import sys


def mean_std(xs):
    """Mean and sample standard deviation (n - 1; 0 for one value), as jury reports."""
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, 0.0
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def fail(msg):
    sys.exit(f"pool-seeds: {msg}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("metrics", nargs="+", type=pathlib.Path, help="metrics.json of each run")
    ap.add_argument("--out", type=pathlib.Path, help="write the pooled figures here (JSON)")
    args = ap.parse_args()

    runs = []
    for path in args.metrics:
        try:
            m = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            fail(f"{path}: {e}")
        if "dev_sets" not in m:
            fail(f"{path}: no dev_sets (not a run of the context-dependent methods)")
        seeds = m.get("seeds", list(range(len(m["dev_sets"]))))
        runs.append((path, m, seeds))

    first_path, first, _ = runs[0]
    seeded = sorted(n for n, e in first["methods"].items() if "seeds" in e)
    free = sorted(n for n, e in first["methods"].items() if "outside_dev" in e)
    seen = {}
    for path, m, seeds in runs:
        if m.get("n_examples") != first.get("n_examples"):
            fail(f"{path}: n_examples {m.get('n_examples')}, {first_path} has {first.get('n_examples')}")
        if sorted(n for n, e in m["methods"].items() if "seeds" in e) != seeded:
            fail(f"{path}: seeded methods differ from {first_path}'s ({', '.join(seeded)})")
        if sorted(n for n, e in m["methods"].items() if "outside_dev" in e) != free:
            fail(f"{path}: context-free methods differ from {first_path}'s ({', '.join(free)})")
        for s in seeds:
            if s in seen:
                fail(f"seed {s} is in both {seen[s]} and {path}")
            seen[s] = path
        for name in seeded:
            e = m["methods"][name]
            if e.get("dev_size") != first["methods"][name].get("dev_size"):
                fail(f"{path}: {name} dev_size {e.get('dev_size')}, {first_path} has "
                     f"{first['methods'][name].get('dev_size')}")
            if len(e["seeds"]) != len(seeds):
                fail(f"{path}: {name} has {len(e['seeds'])} results for seeds {seeds}")

    pooled = {}
    order = sorted(seen)
    for name in seeded + free:
        by_seed, context = {}, {}
        for path, m, seeds in runs:
            e = m["methods"][name]
            accs = e["seeds"] if name in seeded else e["outside_dev"]["seeds"]
            by_seed.update(zip(seeds, accs))
            ctx = e.get("context_accuracy", {}).get("seeds")
            if ctx is not None and len(ctx) == len(seeds):
                context.update(zip(seeds, ctx))
        accs = [by_seed[s] for s in order]
        mean, std = mean_std(accs)
        entry = {"accuracy": mean, "std": std, "seeds": accs, "seed_ids": order}
        note = ""
        if len(context) == len(order):
            cm, cs = mean_std([context[s] for s in order])
            entry["context_accuracy"] = {"accuracy": cm, "std": cs, "seeds": [context[s] for s in order]}
            note = f"; context model alone {100 * cm:.2f} +- {100 * cs:.2f}"
        where = "" if name in seeded else " (context-free, same test splits)"
        print(f"{name:<16} {100 * mean:.2f} +- {100 * std:.2f} over seeds {order}{where}{note}")
        pooled[name] = entry
    if args.out:
        args.out.write_text(json.dumps({"seeds": order, "methods": pooled}, indent=2) + "\n")


if __name__ == "__main__":
    main()
