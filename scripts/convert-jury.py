#!/usr/bin/env python3
"""Real juries that others released, written for `jury aggregate`: judgments.csv
(example_id, judge, p) and labels.csv (example_id, label) in --out.

  python3 scripts/convert-jury.py SOURCE --input DIR --out DIR [OPTIONS]

docs/reproduction/real-juries.md describes each SOURCE: the repository and commit it reads,
the items, the judges, what p and the label are, the example ids and the licence.
Standard library only; never commit the outputs.
"""
import argparse
import collections
import csv
import glob
import gzip
import json
import math
import os
import random
import re
import string
import sys


def write_jury(out, rows, labels):
    """Rows of (example_id, judge, p) and {example_id: label} into the folder `out`."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "judgments.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["example_id", "judge", "p"])
        w.writerows(rows)
    with open(os.path.join(out, "labels.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["example_id", "label"])
        w.writerows(sorted(labels.items()))
    print(f"wrote {len(rows)} judgments ({len({r[1] for r in rows})} judges, {len(labels)} examples) to {out}")


def logistic_z(values):
    """{key: score} -> {key: logistic of the standardised score}, 0.5 at the judge's mean."""
    xs = list(values.values())
    mean = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))
    if sd == 0:
        sys.exit("error: a judge gives one score to every item")
    return {k: 1.0 / (1.0 + math.exp(-(x - mean) / sd)) for k, x in values.items()}


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def read_qrels(path):
    """{"<qid>-<docid>": grade text} of a `qid 0 docid grade` file."""
    out = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 4:
                out[f"{parts[0]}-{parts[2]}"] = parts[3]
    return out


def llmjudge(a):
    gold = read_qrels(os.path.join(a.labels, "data", "llmjudge_test_qrel_idx.txt"))
    labels = {ex: 1 if int(g) >= 2 else 0 for ex, g in gold.items()}
    if not labels:
        sys.exit("error: no test labels read")
    runs = sorted(glob.glob(os.path.join(a.input, "submissions", "scores", "*.txt")))
    if not runs:
        sys.exit(f"error: {a.input}: no submissions/scores/*.txt")
    rows = []
    for run in runs:
        judge = os.path.splitext(os.path.basename(run))[0]
        for ex, grade in sorted(read_qrels(run).items()):
            if ex in labels and grade in ("0", "1", "2", "3"):
                rows.append((ex, judge, 1.0 if int(grade) >= 2 else 0.0))
    return rows, labels


TREC_COLLECTIONS = ("dl19", "dl20", "dl21")
TREC_COLLECTION = re.compile(r"(dl19|dl20|dl21|dl22|dlantique|antique)")


def trec_scores(path):
    """{(qid, docid): mean score} of a qrels-shaped file."""
    vals = collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 4:
                continue
            try:
                vals[(parts[0], parts[2])].append(float(parts[3]))
            except ValueError:
                pass
    return {k: sum(v) / len(v) for k, v in vals.items()}


def trec_sources(root):
    """(judge, collection, path) for every judgment file used."""
    out = []
    raw = os.path.join(root, "raw qrels")
    for dirpath, _, files in os.walk(raw):
        for name in files:
            m = TREC_COLLECTION.search(name)
            rel = os.path.relpath(dirpath, raw).replace(os.sep, "/")
            if m and rel.split("/")[-1] not in ("weighted", "weighted_strict"):
                out.append((f"raw/{rel.replace(' ', '-')}", m.group(1), os.path.join(dirpath, name)))
    fixed = [
        ("Binary/gpt-4", "methods/gpt-4/binary"),
        ("Binary/llama3.2", "methods/llama3.2/binary"),
        ("Umbrela_zeroshot/gpt4", "methods/gpt-4/umbrela"),
        ("Exam/selfrate_binary/gpt4/exam_binary_qrels", "methods/gpt-4/exam-binary-{agg}"),
        ("Exam/selfrate_graded/gpt4/exam_graded_qrels", "methods/gpt-4/exam-graded-{agg}"),
    ]
    for sub, judge in fixed:
        d = os.path.join(root, "Methods", sub)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            m = TREC_COLLECTION.search(name)
            if m and name.endswith(".txt"):
                agg = "max" if name.startswith("qrels.max") else "mean"
                out.append((judge.format(agg=agg), m.group(1), os.path.join(d, name)))
    return sorted(out)


def trecdl_llm_qrels(a):
    labels = {}
    for c in TREC_COLLECTIONS:
        for (q, d), g in trec_scores(os.path.join(a.input, "data", f"qrels.{c}-passage.txt")).items():
            labels[f"{c}-{q}-{d}"] = 1 if g >= 2 else 0
    if not labels:
        sys.exit("error: no qrels read")
    rows = []
    for judge, coll, path in trec_sources(a.input):
        if coll not in TREC_COLLECTIONS:
            continue
        j = judge.lower()
        top = 3.0 if "umbrela" in j else 5.0 if "graded" in j else 1.0
        for (q, d), v in sorted(trec_scores(path).items()):
            ex = f"{coll}-{q}-{d}"
            if ex not in labels:
                continue
            p = v / top
            if not 0.0 <= p <= 1.0:
                sys.exit(f"error: {path}: score {v} outside 0..{top}")
            rows.append((ex, judge, f"{p:.6g}"))
    return rows, labels


TRIVIAQA_VERSIONS = {
    "V1": ("TriviaQA_Judges_w_HumanJudgement_V1.csv", "HumanJudgement", []),
    "V2": ("TriviaQA_Judges_w_HumanJudgement_V2.csv", "Human-Eval", ["Human-Eval_Confidence"]),
}


def triviaqa(a):
    name, label_col, skip = TRIVIAQA_VERSIONS[a.version or "V1"]
    path = os.path.join(a.input, "results", name)
    csv.field_size_limit(10**8)
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        meta = ["model", "response", "question", "references", "benchmark", label_col] + skip
        judges = [c for c in reader.fieldnames if c not in meta]
        data = list(reader)
    if label_col not in reader.fieldnames or not judges:
        sys.exit(f"error: {path}: unexpected columns {reader.fieldnames}")
    verdict = {"True": 1.0, "False": 0.0}
    rows, labels = [], {}
    for i, r in enumerate(data):
        if r[label_col] not in verdict:
            continue
        ex = f"tqa-{(a.version or 'V1').lower()}-{i:04d}"
        votes = [(ex, j, verdict[r[j]]) for j in judges if r[j] in verdict]
        if votes:
            labels[ex] = int(verdict[r[label_col]])
            rows.extend(votes)
    return rows, labels


JUDGEBENCH_FILES = "dataset=judgebench,response_model=gpt-4o-2024-05-13,judge_name=*,judge_model=*.jsonl"
JUDGEBENCH_SHORT = {
    "Ray2333_GRM-Gemma-2B-rewardmodel-ft": "GRM-Gemma-2B",
    "Skywork_Skywork-Reward-Gemma-2-27B": "Skywork-Reward-Gemma-2-27B",
    "Skywork_Skywork-Reward-Llama-3.1-8B": "Skywork-Reward-Llama-3.1-8B",
    "internlm_internlm2-20b-reward": "internlm2-20b-reward",
    "internlm_internlm2-7b-reward": "internlm2-7b-reward",
    "o1-mini-2024-09-12": "o1-mini",
}


def judgebench(a):
    files = sorted(glob.glob(os.path.join(a.input, "outputs", JUDGEBENCH_FILES)))
    if not files:
        sys.exit(f"error: {a.input}: no outputs/{JUDGEBENCH_FILES}")
    rows, labels = [], {}
    for path in files:
        fields = dict(kv.split("=", 1) for kv in os.path.basename(path)[: -len(".jsonl")].split(","))
        name = JUDGEBENCH_SHORT.get(fields["judge_model"], fields["judge_model"])
        with open(path) as f:
            pairs = [json.loads(line) for line in f if line.strip()]
        for pair in pairs:
            ex = pair["pair_id"]
            label = {"A>B": 1, "B>A": 0}[pair["label"]]
            if labels.setdefault(ex, label) != label:
                sys.exit(f"error: {ex}: labels disagree across files")
            js = pair.get("judgments") or []
            if fields["judge_name"] == "reward_model":
                if js and js[0] and js[0]["judgment"].get("scores"):
                    score_a, score_b = js[0]["judgment"]["scores"]
                    rows.append((ex, name, f"{sigmoid(score_a - score_b):.6g}"))
                continue
            for k, order in enumerate(("AB", "BA")):
                if k < len(js) and js[k] is not None:
                    v = {"A>B": 1.0, "A>>B": 1.0, "B>A": 0.0, "B>>A": 0.0}.get(js[k].get("decision"))
                    if v is not None:
                        v = 1.0 - v if k == 1 else v
                        rows.append((ex, f"{name}/{fields['judge_name']}/order={order}", f"{v:.6g}"))
    return rows, labels


FAITHBENCH_SEVERITY = {"Benign": 1, "Questionable": 2, "Unwanted": 3, "Unwanted.Intrinsic": 3, "Unwanted.Extrinsic": 3}


def faithbench(a):
    files = glob.glob(os.path.join(a.input, "data_for_release", "batch_*.json"))
    if not files:
        sys.exit(f"error: no data_for_release/batch_*.json under {a.input}")
    rows, labels = [], {}
    batch_of = lambda p: int(re.search(r"batch_(\d+)\.json$", p).group(1))
    for path in sorted(files, key=batch_of):
        with open(path) as f:
            samples = json.load(f)["samples"]
        for s in samples:
            ex = f"faithbench-b{batch_of(path):02d}-{int(s['sample_id']):03d}"
            if ex in labels:
                sys.exit(f"error: duplicate example {ex}")
            meta, votes = s["metadata"], []
            for j in ["hhemv1", "hhem-2.1", "hhem-2.1-english"]:
                if meta.get(j) is not None:
                    v = float(meta[j])
                    if not 0.0 <= v <= 1.0:
                        sys.exit(f"error: {path}: {j}={v} outside [0, 1]")
                    votes.append((ex, j, v))
            for j in ["trueteacher", "true_nli", "gpt-3.5-turbo", "gpt-4-turbo", "gpt_4o"]:
                if meta.get(j) is not None:
                    if meta[j] not in (0, 1):
                        sys.exit(f"error: {path}: {j}={meta[j]!r} is not 0/1")
                    votes.append((ex, j, float(meta[j])))
            if not votes:
                continue
            worst = 0
            for ann in s.get("annotations") or []:
                for lab in ann["label"]:
                    if lab not in FAITHBENCH_SEVERITY:
                        sys.exit(f"error: {path} sample {s['sample_id']}: unknown annotation label {lab!r}")
                    worst = max(worst, FAITHBENCH_SEVERITY[lab])
            labels[ex] = 0 if worst >= 2 else 1
            rows.extend(votes)
    return rows, labels


def standardised(scores, names, labels):
    """Rows of each judge's logistic_z scores sorted by (example, judge order), and the
    labels of the examples some judge scored."""
    rows = []
    for j, name in names.items():
        if scores[j]:
            rows.extend((ex, name, p) for ex, p in logistic_z(scores[j]).items())
    order = {name: i for i, name in enumerate(names.values())}
    rows.sort(key=lambda r: (r[0], order[r[1]]))
    seen = {r[0] for r in rows}
    return rows, {ex: y for ex, y in labels.items() if ex in seen}


def frank(a):
    with open(os.path.join(a.input, "data", "human_annotations.json")) as f:
        human = json.load(f)
    with open(os.path.join(a.input, "data", "baseline_factuality_metrics_outputs.json")) as f:
        metrics = json.load(f)
    labels = {}
    for h in human:
        if a.split in (None, "all") or h["split"] == a.split:
            ex = f"frank-{h['hash']}-{h['model_name']}"
            if ex in labels:
                sys.exit(f"error: duplicate example {ex}")
            labels[ex] = 1 if float(h["Factuality"]) == 1.0 else 0
    judges = [k for k in metrics[0] if k not in ["hash", "model_name", "dataset", "split"]]
    scores = {j: {} for j in judges}
    for m in metrics:
        ex = f"frank-{m['hash']}-{m['model_name']}"
        for j in judges if ex in labels else []:
            v = m.get(j)
            if v is not None and not (isinstance(v, float) and math.isnan(v)):
                scores[j][ex] = float(v)
    return standardised(scores, {j: j.lower().replace(" ", "-") for j in judges}, labels)


HUMANEVAL_JUDGES = {
    "bleu": "bleu", "codebleu": "codebleu", "chrf": "chrf", "rougel": "rouge-l", "meteor": "meteor", "ruby": "ruby",
    "codebertscore_f1": "codebertscore-f1", "codebertscore_f3": "codebertscore-f3",
    "codebertscore_s_f1": "codebertscore-src-f1", "codebertscore_s_f3": "codebertscore-src-f3",
    "gpt35_nsnr": "gpt35-noref", "gpt35_nswr": "gpt35-ref",
}


def humaneval_ice(a):
    langs = ["python", "cpp", "java", "js"] if a.lang == "all" else [a.lang or "python"]
    labels, scores = {}, {j: {} for j in HUMANEVAL_JUDGES}
    for lang in langs:
        path = os.path.join(a.input, "data", "humaneval", f"humaneval_{lang}_grade.json")
        with open(path) as f:
            problems = json.load(f)
        for prob in problems:
            for key, grade in prob.items():
                if not key.startswith("grade-"):
                    continue
                k = key[len("grade-"):]
                ex = f"he-{lang}-{int(prob['task_id']):03d}-{int(k):03d}"
                if ex in labels:
                    sys.exit(f"error: duplicate example {ex}")
                if grade.get("execution") not in (0, 1):
                    sys.exit(f"error: {path}: {ex}: execution {grade!r}")
                labels[ex] = int(grade["execution"])
                for j in HUMANEVAL_JUDGES:
                    v = prob.get(f"{j}-{k}")
                    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                        scores[j][ex] = float(v)
    return standardised(scores, HUMANEVAL_JUDGES, labels)


YES_NO = {"Yes": 1.0, "No": 0.0}


def read_tsv(path):
    csv.field_size_limit(10**8)
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def squad_normalize(s):
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())


def token_f1(pred, gold):
    p, g = squad_normalize(pred).split(), squad_normalize(gold).split()
    same = sum((collections.Counter(p) & collections.Counter(g)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def question_key(q):
    return re.sub(r"[^a-z0-9]", "", q.lower())


def nq_qa_eval(a):
    data = os.path.join(a.input, "data")
    files = [read_tsv(os.path.join(data, f"NQ301_{n}.tsv")) for n in ("human", "BEM", "gpt-4", "text-davinci-003")]
    if len({len(f) for f in files}) != 1:
        sys.exit("error: the four NQ301 files differ in length")
    for i, rows in enumerate(zip(*files)):
        if len({question_key(r["Question"]) for r in rows}) != 1:
            sys.exit(f"error: row {i}: the files are not in the same order")
    vicuna = collections.defaultdict(list)
    vicuna_files = glob.glob(os.path.join(data, "model_outputs", "NQ301_*_eval-vicuna.tsv"))
    if not vicuna_files:
        sys.exit("error: no data/model_outputs/NQ301_*_eval-vicuna.tsv")
    for path in vicuna_files:
        for r in read_tsv(path):
            if r["vicuna"] in ("0", "1"):
                vicuna[(question_key(r["Question"]), r["Model answer"].strip())].append(float(r["vicuna"]))
    rows, labels = [], {}
    for i, (h, b, g, d) in enumerate(zip(*files)):
        if h["Acceptable?"] not in YES_NO:
            continue
        ex, answer = f"nq301-{i:04d}", h["Model answer"]
        golds = [x.strip() for x in b["Gold answers"].split(" | ") if x.strip()]
        if not golds:
            sys.exit(f"error: row {i}: no gold answers")
        em = float(any(squad_normalize(answer) == squad_normalize(x) for x in golds))
        bem = max(float(p[1]) for p in json.loads(b["BEM probs per gold answer"]))
        votes = [(ex, "em", em), (ex, "f1", max(token_f1(answer, x) for x in golds)), (ex, "bem", bem)]
        if d["Acceptable?"] in YES_NO:
            votes.append((ex, "instructgpt-eval", YES_NO[d["Acceptable?"]]))
        if g["Acceptable?"] in YES_NO:
            votes.append((ex, "gpt4-eval", YES_NO[g["Acceptable?"]]))
        v = vicuna.get((question_key(h["Question"]), answer.strip()))
        if v:
            votes.append((ex, "vicuna-eval", sum(v) / len(v)))
        labels[ex] = int(YES_NO[h["Acceptable?"]])
        rows.extend(votes)
    return rows, labels


SALT_TASKS = {  # task: (verdict words -> 1/0, gold value -> 1/0)
    "tempowic": ({"a": 1, "b": 0}, {"Same": 1, "Different": 0}),
    "reddit_humor": ({"true": 1, "false": 0}, {"True": 1, "False": 0}),
    "conv_go_awry": ({"true": 1, "false": 0}, {"True": 1, "False": 0}),
}


def salt_css(a):
    task = a.task or "tempowic"
    words, gold_map = SALT_TASKS[task]
    d = os.path.join(a.input, "css_data", task)
    with open(os.path.join(d, "test.json")) as f:
        gold = [str(v) for v in json.load(f)["labels"].values()]
    n, width = len(gold), len(str(len(gold) - 1))
    labels = {f"{task}-{i:0{width}d}": gold_map[g] for i, g in enumerate(gold)}
    rows = []
    for name in sorted(os.listdir(d)):
        if not name.startswith("answer-"):
            continue
        judge, votes = name[len("answer-"):], {}
        with open(os.path.join(d, name)) as f:
            for line in f:
                if not line.strip():
                    continue
                idx, g, raw = line.rstrip("\n").split("\t", 2)
                i = int(idx)
                if gold[i] != g:
                    sys.exit(f"error: {name}: item {i}: gold {g!r} but test.json says {gold[i]!r}")
                m = re.match(r"[\"'(\[]*([A-Za-z]+)", re.sub(r"\s+", " ", raw.replace("&", " ")).strip())
                v = words.get(m.group(1).lower()) if m else None
                if v is not None:
                    votes[i] = v
        if len(votes) < a.min_coverage * n:
            print(f"note: {judge}: {len(votes)} of {n} items answered, left out")
            continue
        rows.extend((f"{task}-{i:0{width}d}", judge, v) for i, v in sorted(votes.items()))
    rows.sort(key=lambda r: (r[0], r[1]))
    return rows, labels


def wmt_name(col):
    return col.replace("_PLUS_", "+").replace("_DASH_", "-")


def wmt_seg_scores(root, lp, refset="newstest2020"):
    """{metric (agree-file spelling): {(sid, system): score}} of the segment-level files present."""
    out = {}
    for path in sorted(glob.glob(os.path.join(root, "final-metric-scores", "*", "*.seg.score.gz"))):
        with gzip.open(path, "rt", encoding="utf8") as f:
            for line in f:
                c = line.split()
                if len(c) == 8 and c[1] == lp and c[3] == refset:
                    metric = c[0].replace("+", "_PLUS_").replace("-", "_DASH_")
                    out.setdefault(metric, {})[(c[5] + "::" + c[6], c[4])] = float(c[7])
    return out


def wmt20_darr(a):
    lp = a.lp or "km-en"
    short = lp.replace("-", "")
    agree = os.path.join(a.input, "results", "output", "seglevel_allsys", f"RR-newstest2020-{short}-seg-nohy-agree.csv")
    with open(agree) as f:
        lines = [line.split() for line in f if line.strip()]
    header, body = lines[0], lines[1:]
    if header[:3] != ["SID", "BETTER", "WORSE"]:
        sys.exit(f"error: {agree}: unexpected header {header[:3]}")
    ncol = len(header) - 3
    if any(len(r) != 3 + ncol for r in body):
        sys.exit(f"error: {agree}: ragged rows")
    cols = [[r[3 + j] for r in body] for j in range(ncol)]
    scores = wmt_seg_scores(a.input, lp)
    # (1) Columns named by exact agreement with the segment scores present.
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
    # (2) The rest named by the tau the cor file gives each metric.
    cor_path, cor = agree.replace("-agree.csv", "-cor.csv"), {}
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
        if names[j] is None:
            t = f"{(2 * cols[j].count('1') - len(body)) / len(body):.4}"
            cand = [m for m, tm in left.items() if tm == t]
            if len(cand) != 1:
                sys.exit(f"error: column {j}: {len(cand)} metrics fit")
            names[j] = cand[0]
            del left[cand[0]]
    renamed = ", ".join(f"{wmt_name(h)}->{wmt_name(n)}" for h, n in zip(header[3:], names) if h != n)
    print(f"columns (header name -> metric): {renamed}")
    rng = random.Random(a.seed)
    labels, order = {}, []
    for k, r in enumerate(body):
        ex, swap = f"wmt20-{short}-{k:05d}", rng.random() < 0.5
        labels[ex] = 0 if swap else 1
        order.append((ex, r[0], r[1], r[2], swap))
    rows = []
    for j, m in enumerate(names):
        if m in soft:
            sc = scores[m]
            diffs = [(ex, (-1 if swap else 1) * (sc[(sid, b)] - sc[(sid, w)])) for ex, sid, b, w, swap in order]
            s = math.sqrt(sum(d * d for _, d in diffs) / len(diffs))
            if s == 0:
                sys.exit(f"error: {m}: every pair tied")
            rows.extend((ex, wmt_name(m), f"{sigmoid(d / s):.6g}") for ex, d in diffs)
        else:
            for (ex, _, _, _, swap), x in zip(order, cols[j]):
                rows.append((ex, wmt_name(m), 1 - int(x) if swap else int(x)))
    print(f"soft judges (segment scores): {', '.join(wmt_name(m) for m in names if m in soft)}")
    print(f"hard judges (agree column): {', '.join(wmt_name(m) for m in names if m not in soft)}")
    rows.sort(key=lambda r: r[0])
    return rows, labels


def llmbar(a):
    rows, labels = [], {}
    sets = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(a.input, "**", "dataset.json"), recursive=True))
    if not sets:
        sys.exit(f"error: {a.input}: no dataset.json below it")
    for s in sets:
        name = os.path.relpath(s, a.input).replace(os.sep, "/")
        data = json.load(open(os.path.join(s, "dataset.json")))
        prefix = f"{name}-" if name != "." else ""
        for i, d in enumerate(data):
            labels[f"{prefix}{i:04d}"] = 1 if d["label"] == 1 else 0
        for result in sorted(glob.glob(os.path.join(s, "evaluators", "*", "*", "result.json"))):
            strategy_dir = os.path.dirname(result)
            judge = f"{os.path.basename(os.path.dirname(strategy_dir))}/{os.path.basename(strategy_dir)}"
            res = json.load(open(result))
            if len(res) != len(data):
                sys.exit(f"error: {result}: {len(res)} rows, {len(data)} in dataset.json")
            for i, r in enumerate(res):
                for order in ("swap = False", "swap = True"):
                    winner = r["results"][-1][order]["winner"]
                    if winner in ("1", "2"):
                        rows.append((f"{prefix}{i:04d}", f"{judge}/{order.replace(' ', '')}", 1.0 if winner == "1" else 0.0))
    return rows, labels


def pandalm(a):
    tests = json.load(open(os.path.join(a.input, "testset-v1.json")))
    gpt = {r["idx"]: r["gpt_result"] for r in json.load(open(os.path.join(a.input, "gpt-3.5-turbo-testset-v1.json")))}
    panda = {r["idx"]: r["pandalm_result"] for r in json.load(open(os.path.join(a.input, "pandalm-7b-testset-v1.json")))}
    rows, labels = [], {}
    for t in tests:
        votes = [t["annotator1"], t["annotator2"], t["annotator3"]]
        top = max(set(votes), key=votes.count)
        if votes.count(top) < 2 or top == 0:
            continue
        ex = f"pandalm-{t['idx']:04d}"
        labels[ex] = 1 if top == 1 else 0
        for judge, verdict in (("gpt-3.5-turbo", str(gpt[t["idx"]])), ("pandalm-7b", str(panda[t["idx"]]))):
            if verdict in ("1", "2"):
                rows.append((ex, judge, 1.0 if verdict == "1" else 0.0))
    return rows, labels


def care(a):
    csv.field_size_limit(sys.maxsize)
    labels_path = os.path.join(a.input, "data", "binary", "civilcomments.csv")
    judges_dir = os.path.join(a.input, "judge_outputs", "gaussian_mixture", "civilcomments")
    for path in (labels_path, judges_dir):
        if not os.path.exists(path):
            sys.exit(f"error: {path} not found (is --input a checkout of SprocketLab/CARE?)")
    with open(labels_path, newline="", encoding="utf-8") as f:
        comments = list(csv.DictReader(f))
    index = {r["text"]: n for n, r in enumerate(comments)}
    labels = {f"civil-{n:04d}": int(float(r["label"])) for n, r in enumerate(comments)}
    names = sorted(p[:-4] for p in os.listdir(judges_dir) if p.endswith(".csv"))
    if not names:
        sys.exit(f"error: no judge files in {judges_dir}")
    rows = []
    for name in names:
        path = os.path.join(judges_dir, name + ".csv")
        seen, unread, unknown = set(), 0, 0
        with open(path, newline="", encoding="utf-8") as f:
            for r in csv.DictReader(f):
                n = index.get(r["text"])
                m = re.search(r"[-+]?\d*\.?\d+", r["parsed_output"])
                v = float(m.group(0)) if m else None
                if n is None:
                    unknown += 1
                elif v is None or not 0.0 <= v <= 9.0:
                    unread += 1
                elif n not in seen:
                    seen.add(n)
                    rows.append((f"civil-{n:04d}", name, f"{v / 9:.6f}"))
        if unknown:
            sys.exit(f"error: {path}: {unknown} rows whose text is not in {labels_path}")
        print(f"{name}: {len(seen)} judgments, {unread} unreadable ratings", file=sys.stderr)
    return rows, labels


SOURCES = {
    "llmjudge": llmjudge, "trecdl-llm-qrels": trecdl_llm_qrels, "triviaqa-judges": triviaqa,
    "judgebench": judgebench, "faithbench": faithbench, "frank": frank, "humaneval-ice": humaneval_ice,
    "nq-qa-eval": nq_qa_eval, "salt-css": salt_css, "wmt20-darr": wmt20_darr, "llmbar": llmbar,
    "pandalm": pandalm, "care-civilcomments": care,
}

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", choices=sorted(SOURCES))
    ap.add_argument("--input", required=True, help="the source's checkout (or data folder)")
    ap.add_argument("--labels", help="llmjudge: a checkout of llm4eval/LLMJudge")
    ap.add_argument("--version", choices=sorted(TRIVIAQA_VERSIONS), help="triviaqa-judges (default V1)")
    ap.add_argument("--task", choices=sorted(SALT_TASKS), help="salt-css (default tempowic)")
    ap.add_argument("--min-coverage", type=float, default=0.5, help="salt-css: least share a judge answers")
    ap.add_argument("--split", choices=["all", "valid", "test"], help="frank (default all)")
    ap.add_argument("--lang", choices=["python", "cpp", "java", "js", "all"], help="humaneval-ice (default python)")
    ap.add_argument("--lp", help="wmt20-darr: language pair (default km-en)")
    ap.add_argument("--seed", type=int, default=0, help="wmt20-darr: seeds each pair's order")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.source == "llmjudge" and not args.labels:
        ap.error("llmjudge needs --labels")
    write_jury(args.out, *SOURCES[args.source](args))
