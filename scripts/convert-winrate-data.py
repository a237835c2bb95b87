#!/usr/bin/env python3
"""Convert human-labeled pairwise data with LLM evaluator verdicts into jury's comparisons
table (comparison_id, generator_0, generator_1, evaluator, vote) for `jury winrate`.

vote = 1 when generator_1's output is preferred, 0 for generator_0's, empty for a tie or
an unparsable verdict. Human labels are rows with evaluator `human`.

  pandalm  DIR = .../data/pandalm: one generator pair per `cmp_key` ("a_b": response1 is
           a's, response2 is b's); human = majority of the 3 annotators (0 = tie);
           evaluators gpt-3.5-turbo ("Tie" and "garbage" are no vote) and pandalm-7b.
  llmbar   DIR = .../data/llmbar: each of Processed/{MT-Bench,LLMEval2,FairEval} is one
           "pair" (<set>/output_1 vs <set>/output_2: the sets carry no generator names);
           human = `label`; evaluators = each LLM x presentation order of the chosen
           prompting strategy (`<LLM>` for the original order, `<LLM>/swapped` for the
           reversed one; its winner is already mapped back to the original numbering).
  hanna    DIR = .../data/hanna: HANNA's per-story scores (11 story generators x 96
           writing prompts). As in the calibration paper, one generator (`--anchor`,
           GPT-2) is compared with each of the other ten on every prompt: ten pairs of
           96 comparisons. human = which story has the higher sum of the six criteria
           (each the mean of the 3 raters; equal sums are a tie, no vote); an LLM
           evaluator's vote compares its own six-criterion mean (`<LLM> AVG p`), averaged
           over the 4 prompt variants p; evaluators Beluga-13B, ChatGPT, Llama-13B,
           Mistral-7B, OrcaPlatypus. These are HANNA's pointwise LLM ratings turned into
           pairwise votes, not the win-rate calibration paper's own pairwise LLM runs (which are not here).

Standard library only. Never commit the outputs (the data's terms are its own).
"""
import argparse
import collections
import csv
import json
import os
import sys

FIELDS = ["comparison_id", "generator_0", "generator_1", "evaluator", "vote"]


def pandalm(root):
    tests = json.load(open(os.path.join(root, "testset-v1.json")))
    gpt = {r["idx"]: r["gpt_result"] for r in json.load(open(os.path.join(root, "gpt-3.5-turbo-testset-v1.json")))}
    panda = {r["idx"]: r["pandalm_result"] for r in json.load(open(os.path.join(root, "pandalm-7b-testset-v1.json")))}
    code = {"1": "0", "2": "1", 1: "0", 2: "1"}
    for t in tests:
        g0, g1 = t["cmp_key"].split("_", 1)
        votes = collections.Counter([t["annotator1"], t["annotator2"], t["annotator3"]])
        majority, n = votes.most_common(1)[0]
        if n < 2:
            sys.exit(f"{root}: idx {t['idx']}: no human majority")
        base = {"comparison_id": t["idx"], "generator_0": g0, "generator_1": g1}
        yield {**base, "evaluator": "human", "vote": code.get(majority, "")}
        yield {**base, "evaluator": "gpt-3.5-turbo", "vote": code.get(gpt[t["idx"]], "")}
        yield {**base, "evaluator": "pandalm-7b", "vote": code.get(panda[t["idx"]], "")}


def llmbar(root, strategy, sets):
    for name in sets:
        folder = os.path.join(root, "Processed", name)
        data = json.load(open(os.path.join(folder, "dataset.json")))
        g0, g1 = f"{name}/output_1", f"{name}/output_2"
        for i, d in enumerate(data):
            yield {"comparison_id": i, "generator_0": g0, "generator_1": g1, "evaluator": "human",
                   "vote": {1: "0", 2: "1"}[d["label"]]}
        for llm in sorted(os.listdir(os.path.join(folder, "evaluators"))):
            results = json.load(open(os.path.join(folder, "evaluators", llm, strategy, "result.json")))
            if len(results) != len(data):
                sys.exit(f"{folder}: {llm}: {len(results)} results for {len(data)} pairs")
            for i, r in enumerate(results):
                last = r["results"][-1]
                for key, evaluator in (("swap = False", llm), ("swap = True", f"{llm}/swapped")):
                    winner = last[key]["winner"]
                    vote = {"1": "0", "2": "1"}.get(str(winner), "")
                    yield {"comparison_id": i, "generator_0": g0, "generator_1": g1,
                           "evaluator": evaluator, "vote": vote}


HANNA_CRITERIA = ["Relevance", "Coherence", "Empathy", "Surprise", "Engagement", "Complexity"]
HANNA_LLMS = ["Beluga-13B", "ChatGPT", "Llama-13B", "Mistral-7B", "OrcaPlatypus"]


def hanna(root, anchor):
    path = os.path.join(root, "hanna_metric_scores_llm.csv")
    csv.field_size_limit(1 << 30)
    with open(path, newline="") as f:
        table = {r["Model"]: r for r in csv.DictReader(f)}
    if anchor not in table:
        sys.exit(f"{path}: no generator `{anchor}` (have {', '.join(table)})")

    def column(model, name):
        try:
            values = json.loads(table[model][name])
        except (KeyError, json.JSONDecodeError) as e:
            sys.exit(f"{path}: {model}, column `{name}`: {e}")
        if len(values) != 96:
            sys.exit(f"{path}: {model}, column `{name}`: {len(values)} stories, expected 96")
        return values

    def scores(model):
        human = [sum(v) for v in zip(*(column(model, c) for c in HANNA_CRITERIA))]
        llm = {e: [sum(v) / 4 for v in zip(*(column(model, f"{e} AVG {p}") for p in range(1, 5)))]
               for e in HANNA_LLMS}
        return human, llm

    def vote(a, b):
        return "" if a == b else ("1" if b > a else "0")

    base_h, base_llm = scores(anchor)
    for other in [m for m in table if m != anchor]:
        h, llm = scores(other)
        for i in range(96):
            ids = {"comparison_id": i, "generator_0": anchor, "generator_1": other}
            yield {**ids, "evaluator": "human", "vote": vote(base_h[i], h[i])}
            for e in HANNA_LLMS:
                yield {**ids, "evaluator": e, "vote": vote(base_llm[e][i], llm[e][i])}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["pandalm", "llmbar", "hanna"])
    ap.add_argument("dir")
    ap.add_argument("--out", required=True, help="comparisons CSV to write")
    ap.add_argument("--strategy", default="Vanilla_NoRules", help="llmbar prompting strategy folder")
    ap.add_argument("--sets", default="MT-Bench,LLMEval2,FairEval", help="llmbar Processed/ sets")
    ap.add_argument("--anchor", default="GPT-2", help="hanna: the generator compared with every other")
    args = ap.parse_args()
    if args.kind == "pandalm":
        rows = pandalm(args.dir)
    elif args.kind == "llmbar":
        rows = llmbar(args.dir, args.strategy, args.sets.split(","))
    else:
        rows = hanna(args.dir, args.anchor)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        n = 0
        for r in rows:
            w.writerow(r)
            n += 1
    print(f"wrote {n} rows to {args.out}")


if __name__ == "__main__":
    main()
