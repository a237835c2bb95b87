#!/usr/bin/env python3
"""Writes the context encoders' test fixtures under crates/jury-neural/testdata/, each a
tiny random model in the hub's file layout with golden numbers computed here with
NumPy in float64, independently of jury's candle code:

- tiny-gpt2/: config.json, model.safetensors (Conv1D weights [in, out] and the
  causal-mask buffers older hub files carry), a word-level tokenizer.json, golden.json
  (each test sequence's L2-normalised final hidden state of its last token) and
  grads.safetensors (the gradient of sum(state . target) over the sequences, target in
  golden.json, with respect to every weight).
- tiny-bert/: config.json, model.safetensors (all-MiniLM-L6-v2's tensor names),
  golden.json (a padded batch's masked-mean-pooled, L2-normalised embeddings) and
  grads.safetensors (the gradient of sum(embedding . target) over the batch).

Gradients are central finite differences of the float64 forward pass (step 1e-6), so
they check candle's backward passes and jury's hand-written ones (train/kernels_grad.rs)
against nothing but the forward definition. gpt2.rs and bert.rs tests compare.

    scripts/make-encoder-fixtures.py      (needs numpy only; deterministic)
"""
import json
import math
import pathlib
import struct

import numpy as np

TESTDATA = pathlib.Path(__file__).resolve().parent.parent / "crates/jury-neural/testdata"
WORDS = ["<|endoftext|>", "the", "answer", "is", "good", "bad", "very", "a", "response", "dialogue",
         "history", "paris", "london", "capital", "of", "france", "yes", "no", "true", "false",
         "x", "y", "z", "w"]
CFG = {"model_type": "gpt2", "vocab_size": len(WORDS), "n_positions": 12, "n_embd": 16, "n_layer": 2,
       "n_head": 4, "n_inner": None, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}
SEQS = [[3, 9, 4, 17, 2], [5, 11, 1], [7]]
BERT_CFG = {"model_type": "bert", "vocab_size": 20, "hidden_size": 16, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 32, "max_position_embeddings": 12,
            "type_vocab_size": 2, "layer_norm_eps": 1e-12}
# A padded batch: the second and third rows end in padding (mask 0), which must change
# neither their embeddings nor any gradient.
BERT_IDS = [[1, 5, 7, 9, 2, 3], [1, 4, 2, 0, 0, 0], [1, 8, 8, 3, 2, 0]]
BERT_MASK = [[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]]
STEP = 1e-6


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


def bert_weights(rng):
    c = BERT_CFG
    h, f = c["hidden_size"], c["intermediate_size"]
    w = {"embeddings.word_embeddings.weight": rng.normal(0, 0.5, (c["vocab_size"], h)),
         "embeddings.position_embeddings.weight": rng.normal(0, 0.3, (c["max_position_embeddings"], h)),
         "embeddings.token_type_embeddings.weight": rng.normal(0, 0.3, (c["type_vocab_size"], h))}

    def norm(prefix):
        w[f"{prefix}.LayerNorm.weight"] = 1 + rng.normal(0, 0.1, h)
        w[f"{prefix}.LayerNorm.bias"] = rng.normal(0, 0.1, h)

    def dense(prefix, i, o):
        w[f"{prefix}.weight"] = rng.normal(0, 0.3, (o, i))
        w[f"{prefix}.bias"] = rng.normal(0, 0.1, o)

    norm("embeddings")
    for i in range(c["num_hidden_layers"]):
        layer = f"encoder.layer.{i}"
        for name in ("query", "key", "value"):
            dense(f"{layer}.attention.self.{name}", h, h)
        dense(f"{layer}.attention.output.dense", h, h)
        norm(f"{layer}.attention.output")
        dense(f"{layer}.intermediate.dense", h, f)
        dense(f"{layer}.output.dense", f, h)
        norm(f"{layer}.output")
    return {k: np.asarray(a, np.float32) for k, a in w.items()}


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_new(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


_erf = np.vectorize(math.erf)


def gelu_erf(x):
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def softmax(s):
    s = np.exp(s - s.max(-1, keepdims=True))
    return s / s.sum(-1, keepdims=True)


def embed(w, ids):
    """One sequence, no padding: last token's final state, unit length (w in float64)."""
    h, nh, eps = CFG["n_embd"], CFG["n_head"], CFG["layer_norm_epsilon"]
    d, t = h // nh, len(ids)
    x = w["wte.weight"][ids] + w["wpe.weight"][:t]
    for i in range(CFG["n_layer"]):
        p = lambda n: w[f"h.{i}.{n}"]
        a = layer_norm(x, p("ln_1.weight"), p("ln_1.bias"), eps)
        q, k, v = np.split(a @ p("attn.c_attn.weight") + p("attn.c_attn.bias"), 3, axis=-1)
        heads = lambda m: m.reshape(t, nh, d).transpose(1, 0, 2)
        s = heads(q) @ heads(k).transpose(0, 2, 1) / np.sqrt(d)
        s = softmax(np.where(np.tril(np.ones((t, t))) > 0, s, -np.inf))
        ctx = (s @ heads(v)).transpose(1, 0, 2).reshape(t, h)
        x = x + ctx @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        m = gelu_new(layer_norm(x, p("ln_2.weight"), p("ln_2.bias"), eps) @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"))
        x = x + m @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    last = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"], eps)[-1]
    return last / np.linalg.norm(last)


def bert_embed(w, ids, mask):
    """A padded batch: masked mean of the last layer's states, unit length (w in float64).
    Padded keys get no attention; padded positions are left out of the mean."""
    c = BERT_CFG
    h, nh, eps = c["hidden_size"], c["num_attention_heads"], c["layer_norm_eps"]
    ids, mask = np.asarray(ids), np.asarray(mask, np.float64)
    (b, t), d = ids.shape, h // nh
    dense = lambda x, n: x @ w[f"{n}.weight"].T + w[f"{n}.bias"]
    norm = lambda x, n: layer_norm(x, w[f"{n}.LayerNorm.weight"], w[f"{n}.LayerNorm.bias"], eps)
    e = "embeddings"
    x = w[f"{e}.word_embeddings.weight"][ids] + w[f"{e}.position_embeddings.weight"][:t]
    x = norm(x + w[f"{e}.token_type_embeddings.weight"][0], e)
    heads = lambda m: m.reshape(b, t, nh, d).transpose(0, 2, 1, 3)
    for i in range(c["num_hidden_layers"]):
        layer = f"encoder.layer.{i}"
        q, k, v = (heads(dense(x, f"{layer}.attention.self.{n}")) for n in ("query", "key", "value"))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
        s = softmax(np.where(mask[:, None, None, :] > 0, s, -np.inf))
        ctx = (s @ v).transpose(0, 2, 1, 3).reshape(b, t, h)
        a = norm(dense(ctx, f"{layer}.attention.output.dense") + x, f"{layer}.attention.output")
        inter = gelu_erf(dense(a, f"{layer}.intermediate.dense"))
        x = norm(dense(inter, f"{layer}.output.dense") + a, f"{layer}.output")
    pooled = (x * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def finite_difference_grads(loss, w, names):
    """d loss / d w[name] for each name, by central differences in float64."""
    grads = {}
    for name in names:
        g = np.zeros_like(w[name])
        flat, out = w[name].reshape(-1), g.reshape(-1)
        for i in range(flat.size):
            keep = flat[i]
            flat[i] = keep + STEP
            up = loss(w)
            flat[i] = keep - STEP
            down = loss(w)
            flat[i] = keep
            out[i] = (up - down) / (2 * STEP)
        grads[name] = g
    return grads


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


def rounded(rows):
    return [[round(float(v), 7) for v in row] for row in rows]


def write_fixture(out, cfg, w, forward, inputs, target_seed, trainable):
    """model.safetensors, config.json, golden.json (the inputs, `forward`'s output rows
    and a random target) and grads.safetensors (d sum(output * target) / d weight for
    each trainable name); `forward(weights)` maps float64 weights to [rows, hidden]."""
    out.mkdir(parents=True, exist_ok=True)
    save_safetensors(out / "model.safetensors", w)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    w64 = {k: a.astype(np.float64) for k, a in w.items()}
    rows = forward(w64)
    target = rounded(np.random.default_rng(target_seed).normal(0, 1, rows.shape))
    golden = {**inputs, "embeddings": rounded(rows), "target": target}
    (out / "golden.json").write_text(json.dumps(golden) + "\n")
    target = np.array(target)
    loss = lambda w: float((forward(w) * target).sum())
    save_safetensors(out / "grads.safetensors", finite_difference_grads(loss, w64, trainable))


def make_gpt2():
    out = TESTDATA / "tiny-gpt2"
    w = weights(np.random.default_rng(20261123))
    # The causal-mask buffers are not weights.
    trainable = [n for n in sorted(w) if not n.endswith(".attn.bias")]
    forward = lambda w: np.stack([embed(w, s) for s in SEQS])
    write_fixture(out, CFG, w, forward, {"ids": SEQS}, 7, trainable)
    tok = {"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [{"id": 0, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": True}],
           "normalizer": {"type": "Lowercase"}, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
           "decoder": None, "model": {"type": "WordLevel", "vocab": {t: i for i, t in enumerate(WORDS)},
                                      "unk_token": "<|endoftext|>"}}
    (out / "tokenizer.json").write_text(json.dumps(tok, indent=1) + "\n")


def make_bert():
    w = bert_weights(np.random.default_rng(20261124))
    forward = lambda w: bert_embed(w, BERT_IDS, BERT_MASK)
    write_fixture(TESTDATA / "tiny-bert", BERT_CFG, w, forward, {"ids": BERT_IDS, "mask": BERT_MASK}, 8, sorted(w))


def main():
    make_gpt2()
    make_bert()


if __name__ == "__main__":
    main()
