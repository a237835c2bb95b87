#!/usr/bin/env python3
"""How far can a frozen context model trained on majority-vote labels get on HaluEval,
and what does it add to Dawid-Skene's posterior? A check outside jury (scikit-learn),
quoted in docs/reproduction/skill-aggregation.md (issue 4).

  python3 scripts/context-model-check.py EMBEDDINGS.f32 [RUN_DIR] [--mlp]

EMBEDDINGS.f32: jury's cached frozen embeddings of the `--split-fields --max-tokens 48`
run (~/.cache/jury/embeddings/KEY.f32, 40,000 rows of 384 floats: response, history per
example). RUN_DIR: a `jury aggregate` output with a `ds` column in predictions.csv
(default out/reproduce-halueval-neural/frozen-split48). Labels score only. --mlp adds
a 256-unit MLP on the two fields' vectors, alone and with |u - v| and u * v (slow).
"""
import csv
import sys

import numpy as np
from scipy.sparse import csr_matrix, hstack
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_predict

data = "out/reproduce-halueval-neural/data"
mlp = "--mlp" in sys.argv
sys.argv = [a for a in sys.argv if a != "--mlp"]
run = sys.argv[2] if len(sys.argv) > 2 else "out/reproduce-halueval-neural/frozen-split48"
rows = list(csv.DictReader(open(f"{data}/contexts.csv")))
ids = [r["example_id"] for r in rows]
label = {r["example_id"]: int(r["label"]) for r in csv.DictReader(open(f"{data}/labels.csv"))}
probs = {}
for r in csv.DictReader(open(f"{data}/judgments.csv")):
    probs.setdefault(r["example_id"], []).append(float(r["p"]))
y = np.array([label[i] for i in ids])
mv = np.array([np.mean([p > 0.5 for p in probs[i]]) >= 0.5 for i in ids]).astype(int)
emb = np.fromfile(sys.argv[1], dtype="<f4").reshape(len(ids), -1)
tfidf = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True).fit_transform(
    [r["text"].split(" || ")[0] for r in rows])
pred = {r["example_id"]: r for r in csv.DictReader(open(f"{run}/predictions.csv"))}
ds = np.array([float(pred[i]["ds_p"]) for i in ids]).clip(1e-6, 1 - 1e-6)
ds_logit = np.log(ds / (1 - ds))
print(f"majority vote {np.mean(mv == y):.4f}, Dawid-Skene {np.mean((ds_logit > 0) == y):.4f}")
print("| features | C | context model alone (out of fold) | + Dawid-Skene, weight 0.5 / 1 / 2 / 4 |")
print("|---|---|---|---|")
for name, x in [("embeddings", emb), ("tfidf", tfidf), ("both", hstack([tfidf, csr_matrix(emb)]).tocsr())]:
    for c in (0.3, 1.0):
        q = cross_val_predict(LogisticRegression(C=c, max_iter=2000), x, mv, cv=5, method="predict_proba")[:, 1]
        q = q.clip(1e-6, 1 - 1e-6)
        ctx = np.log(q / (1 - q))
        combined = " / ".join(f"{np.mean((ds_logit + w * ctx > 0) == y):.4f}" for w in (0.5, 1, 2, 4))
        print(f"| {name} | {c} | {np.mean((ctx > 0) == y):.4f} | {combined} |")
if mlp:
    from sklearn.neural_network import MLPClassifier
    u, v = emb[:, : emb.shape[1] // 2], emb[:, emb.shape[1] // 2 :]
    for name, x in [("u, v", emb), ("u, v, |u - v|, u * v", np.hstack([u, v, np.abs(u - v), u * v]))]:
        net = MLPClassifier((256,), alpha=1e-3, early_stopping=True, max_iter=200, random_state=0)
        q = cross_val_predict(net, x, mv, cv=5, method="predict_proba")[:, 1]
        print(f"MLP on {name}: context model alone (out of fold) {np.mean((q > 0.5) == y):.4f}")
