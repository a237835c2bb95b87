#!/usr/bin/env python3
"""Simulated juries with known truth for the validation suite (docs/reproduction/validation-suite.md,
"The recommended method on juries it was not chosen on"), shaped after what broke the
earlier default: near-duplicate judges, hard verdicts only, one judge far better than
the rest, a wrong consensus, 2 to 6 judges and 30 or more, positive rates from 0.1 to
0.5, missing votes, soft scores with correlated errors.

Generative model: example i has truth y_i ~ Bernoulli(rate) and sign s_i = 2 y_i - 1.
Judge j reports the score z_ij = skill_j * s_i + bias_j + trap_j * t_i + noise_ij, where
noise_ij = sqrt(rho_j) * f_(family j, i) + sqrt(1 - rho_j) * e_ij (f and e standard
normal, f shared by a judge family, so rho near 1 makes near-copies) and t_i = -3 s_i on
a fraction of "trap" examples (0 elsewhere): judges with trap_j > 0 share one mistake
there. Soft juries report p = sigmoid(z), hard juries p = 1 if z > 0 else 0; each entry
is missing with the jury's missing rate.

Every jury is assigned to the part it belongs to (`tune`: methods and rules may be chosen
on it; `report`: only reported) by a seeded draw over the list below, made before any
method was run on them. Writes out/validation-suite/sim/<part>/<name>/{judgments.csv,
labels.csv}; the same seed gives the same files. NumPy only.

    python3 scripts/simulate-validation-juries.py [--out out/validation-suite/sim]
"""
import argparse
import os
import random

import numpy as np


def judges(n, skill, rho=0.0, family=None, bias=0.0, trap=0.0):
    """n judges with the same settings; skill may be a (low, high) range."""
    return [dict(skill=skill, rho=rho, family=family, bias=bias, trap=trap) for _ in range(n)]


# name -> (n_examples, positive rate, hard?, missing rate, judge list). Families name
# shared noise; a judge without one has only its own.
def scenarios():
    s = {}
    for rate in (0.1, 0.3, 0.5):
        s[f"independent-5-soft-r{rate}"] = (3000, rate, False, 0.0, judges(5, (0.3, 1.5)))
        s[f"independent-9-hard-r{rate}"] = (3000, rate, True, 0.0, judges(9, (0.3, 1.5)))
    for n in (2, 3, 4, 6):
        s[f"small-{n}-soft"] = (2000, 0.4, False, 0.0, judges(n, (0.4, 1.4)))
        s[f"small-{n}-hard"] = (2000, 0.4, True, 0.0, judges(n, (0.4, 1.4)))
    for rate in (0.15, 0.27, 0.45):
        # 30+ judges, hard: two clusters of near-copies of mediocre judges, the rest diverse.
        j = judges(10, 0.6, rho=0.97, family="a") + judges(8, 0.5, rho=0.97, family="b", bias=0.3)
        j += judges(14, (0.4, 1.6))
        s[f"copies-32-hard-r{rate}"] = (3000, rate, True, 0.0, j)
        s[f"copies-32-soft-r{rate}"] = (3000, rate, False, 0.0, j)
    for n in (4, 8):
        j = judges(1, 2.5) + judges(n - 1, (0.2, 0.6))
        s[f"one-strong-{n}-hard"] = (2500, 0.35, True, 0.0, j)
        s[f"one-strong-{n}-soft"] = (2500, 0.35, False, 0.0, j)
    for n in (5, 12):
        # Most judges share one mistake on the trap examples; two do not.
        j = judges(n - 2, (0.8, 1.4), trap=1.0, rho=0.3, family="crowd") + judges(2, (0.8, 1.4))
        s[f"wrong-consensus-{n}-hard"] = (3000, 0.3, True, 0.0, j)
        s[f"wrong-consensus-{n}-soft"] = (3000, 0.3, False, 0.0, j)
    for miss in (0.3, 0.6):
        s[f"missing-{miss}-8-soft"] = (3000, 0.3, False, miss, judges(8, (0.3, 1.5)))
        s[f"missing-{miss}-20-hard"] = (3000, 0.2, True, miss, judges(20, (0.3, 1.5)))
    # Pairwise reward models: five correlated soft scorers and one hard LLM judge.
    j = judges(5, (0.5, 0.9), rho=0.5, family="rm") + judges(1, 1.2)
    s["reward-models-5-plus-judge"] = (2000, 0.5, False, 0.0, j)
    j[-1] = dict(j[-1], hard=True)
    s["reward-models-5-plus-hard-judge"] = (2000, 0.5, False, 0.0, j)
    # Correlated soft judges in two families of mixed quality (the shape of HaluEval).
    j = judges(4, (0.6, 1.2), rho=0.6, family="x") + judges(4, (0.6, 1.2), rho=0.6, family="y") + judges(2, 1.0)
    s["families-10-soft"] = (4000, 0.5, False, 0.0, j)
    s["families-10-hard"] = (4000, 0.5, True, 0.0, j)
    return s


def split(names, seed=66):
    """Half the juries to `tune`, half to `report`, by one seeded draw over the sorted
    names (fixed before any method ran on them)."""
    names = sorted(names)
    report = set(random.Random(seed).sample(names, len(names) // 2))
    return {n: ("report" if n in report else "tune") for n in names}


def simulate(name, spec, seed):
    n, rate, hard, missing, js = spec
    rng = np.random.default_rng([seed, sum(map(ord, name))])
    y = (rng.random(n) < rate).astype(int)
    sign = 2 * y - 1
    trap = np.where(rng.random(n) < 0.15, -3.0 * sign, 0.0)
    family_noise = {}
    rows = []
    for k, spec_j in enumerate(js):
        skill = spec_j["skill"]
        skill = rng.uniform(*skill) if isinstance(skill, tuple) else skill
        fam = spec_j["family"]
        if fam is not None and fam not in family_noise:
            family_noise[fam] = rng.standard_normal(n)
        own = rng.standard_normal(n)
        rho = spec_j["rho"]
        noise = (np.sqrt(rho) * family_noise[fam] if fam is not None else 0.0) + np.sqrt(1 - rho) * own
        z = skill * sign + spec_j["bias"] + spec_j["trap"] * trap + noise
        p = (z > 0).astype(float) if hard or spec_j.get("hard") else 1 / (1 + np.exp(-z))
        present = rng.random(n) >= missing
        # Every example keeps at least one judge: the first judge is never missing there.
        for i in np.nonzero(present | (k == 0))[0]:
            rows.append((f"{name}-{i:05d}", f"judge-{k:02d}", p[i]))
    return y, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="out/validation-suite/sim")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    specs = scenarios()
    parts = split(specs)
    for name, spec in specs.items():
        y, rows = simulate(name, spec, args.seed)
        d = os.path.join(args.out, parts[name], name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "judgments.csv"), "w") as f:
            f.write("example_id,judge,p\n")
            f.writelines(f"{e},{j},{p:.6g}\n" for e, j, p in rows)
        with open(os.path.join(d, "labels.csv"), "w") as f:
            f.write("example_id,label\n")
            f.writelines(f"{name}-{i:05d},{v}\n" for i, v in enumerate(y))
        print(parts[name], name, len(y), len(spec[4]))


if __name__ == "__main__":
    main()
