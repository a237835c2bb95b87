#!/usr/bin/env python3
"""Reference experiment (PyTorch, GPU), not part of jury: the fine-tuned-encoder setting
of the SkillAggregation paper with all-MiniLM-L6-v2, to tell whether a fine-tuned
encoder closes the gap that jury's frozen encoder leaves on HaluEval (issue 4), on a
machine where jury's own fine-tuned mode (candle, CPU) would take hours per epoch.

Same protocol as `jury aggregate --encoder finetune`: context = response || history
(first MAX_TOKENS tokens), mean-pooled encoder -> linear bottleneck softmax s; Train-on-MV
(cross-entropy against majority-vote labels), Crowdlayer and SkillAggregation
(task-level skills) and SkillAggregation-X (context-level skills), loss = masked
cross-entropy against each judge's probability + lambda * mean slope^2; posterior of
section 4.3 over binary verdicts; a labeled dev set of 250 drawn per seed picks the epoch;
accuracy on the other examples.

    reference-finetune-torch.py DATA_DIR [--epochs 3] [--seeds 0] [--lambda 0.01]
DATA_DIR holds contexts.csv.gz, judgments.csv.gz, labels.csv.gz (`jury
import skillagg-halueval --dialogues` output, gzipped) and the encoder (config.json,
tokenizer.json, model.safetensors).
"""
import argparse
import csv
import gzip
import json
import math
import time

import numpy as np
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer
from transformers import BertConfig, BertModel


def load(data):
    labels = {r["example_id"]: int(r["label"]) for r in csv.DictReader(gzip.open(f"{data}/labels.csv.gz", "rt"))}
    ids = sorted(labels)
    index = {e: i for i, e in enumerate(ids)}
    judges = {}
    rows = list(csv.DictReader(gzip.open(f"{data}/judgments.csv.gz", "rt")))
    for r in rows:
        judges.setdefault(r["judge"], len(judges))
    y = np.zeros((len(ids), len(judges)), np.float32)
    mask = np.zeros_like(y)
    for r in rows:
        i, j = index[r["example_id"]], judges[r["judge"]]
        y[i, j], mask[i, j] = float(r["p"]), 1.0
    texts = [""] * len(ids)
    for r in csv.DictReader(gzip.open(f"{data}/contexts.csv.gz", "rt")):
        texts[index[r["example_id"]]] = r["text"]
    return texts, y, mask, np.array([labels[e] for e in ids]), list(judges)


class Model(torch.nn.Module):
    def __init__(self, data, k, method, skill_init=0.8):
        super().__init__()
        cfg = BertConfig.from_json_file(f"{data}/config.json")
        self.bert = BertModel(cfg, add_pooling_layer=False)
        state = {k_: v.float() for k_, v in load_file(f"{data}/model.safetensors").items() if "position_ids" not in k_ and not k_.startswith("pooler.")}
        missing, unexpected = self.bert.load_state_dict(state, strict=False)
        assert not [m for m in missing if "position_ids" not in m] and not unexpected, (missing, unexpected)
        h = cfg.hidden_size
        self.head = torch.nn.Linear(h, 2)
        logit = math.log(skill_init / (1 - skill_init))
        self.skill_b = torch.nn.Parameter(torch.full((2 * k,), logit))
        self.skill_w = torch.nn.Linear(h, 2 * k, bias=False) if method == "skillagg-x" else None
        if self.skill_w is not None:
            torch.nn.init.normal_(self.skill_w.weight, std=0.01 / math.sqrt(h))
        self.k, self.method = k, method

    def forward(self, ids, att):
        out = self.bert(input_ids=ids, attention_mask=att).last_hidden_state
        m = att.unsqueeze(-1).float()
        x = (out * m).sum(1) / m.sum(1).clamp(min=1.0)
        x = torch.nn.functional.normalize(x, dim=-1)
        s = torch.softmax(self.head(x), -1)
        logits = self.skill_b.expand(x.shape[0], -1) if self.skill_w is None else self.skill_w(x) + self.skill_b
        p = torch.sigmoid(logits)
        return s, p[:, : self.k], p[:, self.k:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--methods", default="train-on-mv,crowdlayer,skillagg,skillagg-x")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--lambda", dest="lam", type=float, default=0.01)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--head-lr", type=float, default=1e-3)
    ap.add_argument("--dev-size", type=int, default=250)
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    texts, y, mask, labels, judges = load(args.data)
    n, k = y.shape
    tok = Tokenizer.from_file(f"{args.data}/tokenizer.json")
    tok.no_padding()
    tok.enable_truncation(args.max_tokens)
    enc = tok.encode_batch(texts)
    L = max(len(e.ids) for e in enc)
    ids = torch.zeros((n, L), dtype=torch.long)
    att = torch.zeros((n, L), dtype=torch.long)
    for i, e in enumerate(enc):
        ids[i, : len(e.ids)] = torch.tensor(e.ids)
        att[i, : len(e.ids)] = 1
    ids, att = ids.to(dev), att.to(dev)
    yt, mt = torch.tensor(y, device=dev), torch.tensor(mask, device=dev)
    b = (yt > 0.5).float()
    mv = (((b * mt).sum(1) * 2) >= mt.sum(1)).float()
    # Dawid-Skene-free reference points, computed here for the same split.
    results = {}
    for seed in [int(s) for s in args.seeds.split(",")]:
        order = np.random.default_rng(seed).permutation(n)
        dev_idx, test_idx = order[: args.dev_size], order[args.dev_size:]
        for method in args.methods.split(","):
            torch.manual_seed(seed)
            model = Model(args.data, k, method).to(dev)
            lam = 0.0 if method in ("train-on-mv", "crowdlayer") else args.lam
            opt = torch.optim.AdamW([
                {"params": model.bert.parameters(), "lr": args.lr},
                {"params": [p for n_, p in model.named_parameters() if not n_.startswith("bert.")], "lr": args.head_lr},
            ], weight_decay=0.0)
            best = (-1.0, None, -1)
            t0 = time.time()
            for epoch in range(args.epochs):
                model.train()
                perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1000 + epoch)).to(dev)
                for start in range(0, n, args.batch):
                    idx = perm[start: start + args.batch]
                    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dev.type == "cuda"):
                        s, p0, p1 = model(ids[idx], att[idx])
                    s, p0, p1 = s.float(), p0.float(), p1.float()
                    if method == "train-on-mv":
                        t = mv[idx]
                        loss = -(t * torch.log(s[:, 1] + 1e-6) + (1 - t) * torch.log(s[:, 0] + 1e-6)).mean()
                    else:
                        q = ((1 - p0) * s[:, :1] + p1 * s[:, 1:]).clamp(1e-6, 1 - 1e-6)
                        ce = -(yt[idx] * q.log() + (1 - yt[idx]) * (1 - q).log()) * mt[idx]
                        loss = ce.sum() / mt[idx].sum().clamp(min=1.0) + lam * ((p0 + p1 - 1) ** 2).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                model.eval()
                post = []
                with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=dev.type == "cuda"):
                    for start in range(0, n, 256):
                        sl = slice(start, start + 256)
                        s, p0, p1 = (t.float() for t in model(ids[sl], att[sl]))
                        if method in ("train-on-mv", "crowdlayer"):
                            post.append(s[:, 1])
                            continue
                        p0, p1 = p0.clamp(1e-6, 1 - 1e-6), p1.clamp(1e-6, 1 - 1e-6)
                        bb, mm = b[sl], mt[sl]
                        l1 = ((bb * p1.log() + (1 - bb) * (1 - p1).log()) * mm).sum(1)
                        l0 = ((bb * (1 - p0).log() + (1 - bb) * p0.log()) * mm).sum(1)
                        post.append(torch.sigmoid((s[:, 1] + 1e-6).log() + l1 - (s[:, 0] + 1e-6).log() - l0))
                post = torch.cat(post).cpu().numpy()
                pred = (post > 0.5).astype(int)
                dev_acc = float((pred[dev_idx] == labels[dev_idx]).mean())
                test_acc = float((pred[test_idx] == labels[test_idx]).mean())
                print(json.dumps({"seed": seed, "method": method, "epoch": epoch, "dev": dev_acc, "test": test_acc,
                                  "seconds": round(time.time() - t0, 1)}), flush=True)
                if dev_acc > best[0]:
                    best = (dev_acc, test_acc, epoch)
            results.setdefault(method, []).append(best[1])
            print(json.dumps({"seed": seed, "method": method, "chosen_epoch": best[2], "accuracy": best[1]}), flush=True)
    for method, accs in results.items():
        print(f"| {method} | {100 * np.mean(accs):.2f} +- {100 * np.std(accs):.2f} | {len(accs)} seeds |")


if __name__ == "__main__":
    main()
