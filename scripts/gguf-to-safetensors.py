#!/usr/bin/env python3
"""Turns a llama-architecture GGUF judge into a Hugging Face model directory
(config.json, model.safetensors, tokenizer.json, tokenizer_config.json).

Why: no hub is reachable here, so this is the only way to run a real safetensors judge
through jury's `model_id` path (the one GPU users take) on these machines. The weights
are the GGUF's, dequantized to f32, so the safetensors judge must give the same
probabilities as the GGUF judge with dense weights: the end-to-end test checks that.

    scripts/gguf-to-safetensors.py models/SmolLM2-135M-Instruct.Q4_1.gguf models/smollm2-135m-hf

Needs the `gguf`, `safetensors`, `numpy` and `tokenizers` packages (PyPI).
llama.cpp's converter permutes the rows of the query and key projections (interleaved
rotary halves); they are permuted back here, or the model would be a different one.
"""
import json
import os
import sys

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType
from gguf.quants import dequantize
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, AddedToken


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        if default is None:
            sys.exit(f"error: {reader.path}: GGUF metadata has no {key}")
        return default
    return f.contents()


def unpermute(w, heads):
    """Inverse of llama.cpp's `permute` for attn_q / attn_k (rows grouped per head)."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    r = GGUFReader(src)
    arch = field(r, "general.architecture")
    if arch not in ("llama", "qwen2"):
        sys.exit(f"error: {src}: architecture {arch!r}, only llama and qwen2 are converted")
    A = arch
    heads = int(field(r, f"{A}.attention.head_count"))
    kv_heads = int(field(r, f"{A}.attention.head_count_kv", heads))
    names = {
        "token_embd.weight": "model.embed_tokens.weight",
        "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight",
    }
    per_layer = {
        "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
        "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
    }
    tensors = {}
    for t in r.tensors:
        w = dequantize(t.data, GGMLQuantizationType(t.tensor_type)).astype(np.float32)
        # GGUF lists dimensions innermost first; numpy's shape is already (rows, cols).
        w = w.reshape([int(d) for d in reversed(t.shape)])
        if t.name in names:
            name = names[t.name]
        else:
            parts = t.name.split(".")
            if len(parts) != 4 or parts[0] != "blk" or parts[2] not in per_layer:
                sys.exit(f"error: {src}: tensor {t.name} has no Hugging Face name here")
            name = f"model.layers.{parts[1]}.{per_layer[parts[2]]}.{parts[3]}"
            if arch == "qwen2":
                pass  # llama.cpp permutes q/k only for llama (Qwen2 uses NeoX rotary)
            elif parts[2] == "attn_q":
                w = unpermute(w, heads)
            elif parts[2] == "attn_k":
                w = unpermute(w, kv_heads)
        tensors[name] = np.ascontiguousarray(w)
    tied = "lm_head.weight" not in tensors

    tokens = [str(t) for t in field(r, "tokenizer.ggml.tokens")]
    types = [int(t) for t in field(r, "tokenizer.ggml.token_type")]
    merges = [tuple(str(m).split(" ", 1)) for m in field(r, "tokenizer.ggml.merges")]
    if field(r, "tokenizer.ggml.model") != "gpt2":
        sys.exit(f"error: {src}: only byte-level BPE (gpt2) tokenizers are converted")
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    pre = field(r, "tokenizer.ggml.pre", "default")
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    # llama.cpp's "smollm" pre-tokenizer is GPT-2's regex with every digit split off.
    if pre == "qwen2":
        from tokenizers import Regex, normalizers
        pat = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pat), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    else:
        tok.pre_tokenizer = (
            pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
            if pre == "smollm" else byte_level
        )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    # Control (3) and user-defined (4) tokens are matched whole, before BPE.
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty in (3, 4)])

    os.makedirs(out, exist_ok=True)
    bos, eos = int(field(r, "tokenizer.ggml.bos_token_id")), int(field(r, "tokenizer.ggml.eos_token_id"))
    config = {
        "architectures": ["Qwen2ForCausalLM" if A == "qwen2" else "LlamaForCausalLM"], "model_type": A,
        "hidden_size": int(field(r, f"{A}.embedding_length")),
        "intermediate_size": int(field(r, f"{A}.feed_forward_length")),
        "num_hidden_layers": int(field(r, f"{A}.block_count")),
        "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "rms_norm_eps": float(field(r, f"{A}.attention.layer_norm_rms_epsilon")),
        "rope_theta": float(field(r, f"{A}.rope.freq_base", 10000.0)),
        "max_position_embeddings": int(field(r, f"{A}.context_length")),
        "vocab_size": len(tokens), "tie_word_embeddings": tied, "hidden_act": "silu",
        "bos_token_id": bos, "eos_token_id": eos, "torch_dtype": "float32",
    }
    if A == "qwen2":
        config.update({"use_sliding_window": False, "sliding_window": None, "max_window_layers": config["num_hidden_layers"],
                       "attention_dropout": 0.0})
    tok_config = {
        "chat_template": str(field(r, "tokenizer.chat_template")),
        "bos_token": tokens[bos], "eos_token": tokens[eos],
        "unk_token": tokens[int(field(r, "tokenizer.ggml.unknown_token_id", 0))],
        "add_bos_token": bool(field(r, "tokenizer.ggml.add_bos_token", False)),
        "model_max_length": config["max_position_embeddings"], "tokenizer_class": "GPT2Tokenizer",
    }
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    tok.save(os.path.join(out, "tokenizer.json"))
    for name, obj in (("config.json", config), ("tokenizer_config.json", tok_config),
                      ("generation_config.json", {"bos_token_id": bos, "eos_token_id": eos})):
        with open(os.path.join(out, name), "w") as f:
            json.dump(obj, f, indent=2)
    print(f"{out}: {len(tensors)} tensors, {len(tokens)} tokens, tied embeddings: {tied}")


if __name__ == "__main__":
    main()
