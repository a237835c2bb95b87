#!/usr/bin/env python3
"""Writes crates/jury-neural/testdata/tiny-gpt2/: a tiny random GPT-2 in the hub's file
layout (config.json, model.safetensors with Conv1D weights [in, out] and the causal-mask
buffers older hub files carry, a word-level tokenizer.json) and golden.json, the
L2-normalised final hidden state of each test sequence's last token computed here with
NumPy, independently of jury's candle code (gpt2.rs tests compare against it).

    scripts/make-gpt2-fixture.py      (needs numpy only; deterministic)
"""
import json
import pathlib
import struct

import numpy as np

OUT = pathlib.Path(__file__).resolve().parent.parent / "crates/jury-neural/testdata/tiny-gpt2"
WORDS = ["<|endoftext|>", "the", "answer", "is", "good", "bad", "very", "a", "response", "dialogue",
         "history", "paris", "london", "capital", "of", "france", "yes", "no", "true", "false",
         "x", "y", "z", "w"]
CFG = {"model_type": "gpt2", "vocab_size": len(WORDS), "n_positions": 12, "n_embd": 16, "n_layer": 2,
       "n_head": 4, "n_inner": None, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}
SEQS = [[3, 9, 4, 17, 2], [5, 11, 1], [7]]


def weights(rng):
    h, L, v, p = CFG["n_embd"], CFG["n_layer"], CFG["vocab_size"], CFG["n_positions"]
    w = {"wte.weight": rng.normal(0, 0.5, (v, h)), "wpe.weight": rng.normal(0, 0.3, (p, h))}
    for i in range(L):
        for ln in ("ln_1", "ln_2"):
            w[f"h.{i}.{ln}.weight"] = 1 + rng.normal(0, 0.1, h)
            w[f"h.{i}.{ln}.bias"] = rng.normal(0, 0.1, h)
        for name, (a, b) in {"attn.c_attn": (h, 3 * h), "attn.c_proj": (h, h), "mlp.c_fc": (h, 4 * h),
                             "mlp.c_proj": (4 * h, h)}.items():
            w[f"h.{i}.{name}.weight"] = rng.normal(0, 0.3, (a, b))
            w[f"h.{i}.{name}.bias"] = rng.normal(0, 0.1, b)
        w[f"h.{i}.attn.bias"] = np.tril(np.ones((p, p)))[None, None]
    w["ln_f.weight"] = 1 + rng.normal(0, 0.1, h)
    w["ln_f.bias"] = rng.normal(0, 0.1, h)
    return {k: np.asarray(a, np.float32) for k, a in w.items()}


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_new(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def embed(w, ids):
    """One sequence, no padding: last token's final state, unit length (float64)."""
    w = {k: a.astype(np.float64) for k, a in w.items()}
    h, nh, eps = CFG["n_embd"], CFG["n_head"], CFG["layer_norm_epsilon"]
    d, t = h // nh, len(ids)
    x = w["wte.weight"][ids] + w["wpe.weight"][:t]
    for i in range(CFG["n_layer"]):
        p = lambda n: w[f"h.{i}.{n}"]
        a = layer_norm(x, p("ln_1.weight"), p("ln_1.bias"), eps)
        q, k, v = np.split(a @ p("attn.c_attn.weight") + p("attn.c_attn.bias"), 3, axis=-1)
        heads = lambda m: m.reshape(t, nh, d).transpose(1, 0, 2)
        s = heads(q) @ heads(k).transpose(0, 2, 1) / np.sqrt(d)
        s = np.where(np.tril(np.ones((t, t))) > 0, s, -np.inf)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        ctx = (s @ heads(v)).transpose(1, 0, 2).reshape(t, h)
        x = x + ctx @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        m = gelu_new(layer_norm(x, p("ln_2.weight"), p("ln_2.bias"), eps) @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"))
        x = x + m @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    last = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"], eps)[-1]
    return last / np.linalg.norm(last)


def save_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        data = tensors[name].astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    w = weights(np.random.default_rng(20261123))
    save_safetensors(OUT / "model.safetensors", w)
    (OUT / "config.json").write_text(json.dumps(CFG, indent=2) + "\n")
    tok = {"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [{"id": 0, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": True}],
           "normalizer": {"type": "Lowercase"}, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
           "decoder": None, "model": {"type": "WordLevel", "vocab": {t: i for i, t in enumerate(WORDS)},
                                      "unk_token": "<|endoftext|>"}}
    (OUT / "tokenizer.json").write_text(json.dumps(tok, indent=1) + "\n")
    golden = {"ids": SEQS, "embeddings": [[round(float(v), 7) for v in embed(w, s)] for s in SEQS]}
    (OUT / "golden.json").write_text(json.dumps(golden) + "\n")


if __name__ == "__main__":
    main()
