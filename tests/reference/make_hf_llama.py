#!/usr/bin/python3
"""A random LlamaForCausalLM directory as Hugging Face writes one, made
without dagrun and without transformers (which is not installed here):
config.json with LlamaConfig's keys, and model.safetensors (or shards with
model.safetensors.index.json) holding the tensors under
LlamaForCausalLM's names (torch_llama.LAYER), nn.Linear's (out, in)
shapes, in F32, F16 or BF16.

    make_hf_llama.py DIR [--dtype F32|F16|BF16] [--layers L] [--heads H]
        [--kv KV] [--embd C] [--ff I] [--vocab V] [--ctx T] [--theta X]
        [--eps E] [--tied] [--shards N] [--inv-freq] [--seed S]
        [--omit KEY]... [--set KEY=JSON]...

--tied writes tie_word_embeddings true and no lm_head; otherwise the
head is lm_head.weight and tie_word_embeddings is false. --inv-freq adds
the rotary_emb.inv_freq buffers older checkpoints carry. --omit drops a
key from config.json (LlamaConfig's default then applies); --set puts one
in (a variant dagrun must refuse).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_llama import LAYER  # noqa: E402


def tensors(a):
    rng = np.random.default_rng(a.seed)
    C, KVD, hs = a.embd, a.kv * (a.embd // a.heads), a.embd // a.heads
    shapes = {"self_attn.q_proj.weight": (C, C),
              "self_attn.k_proj.weight": (KVD, C),
              "self_attn.v_proj.weight": (KVD, C),
              "self_attn.o_proj.weight": (C, C),
              "mlp.gate_proj.weight": (a.ff, C),
              "mlp.up_proj.weight": (a.ff, C),
              "mlp.down_proj.weight": (C, a.ff),
              "input_layernorm.weight": (C,),
              "post_attention_layernorm.weight": (C,)}
    assert sorted(shapes) == sorted(LAYER)
    t = {"model.embed_tokens.weight": rng.normal(0, 1.0, (a.vocab, C))}
    for l in range(a.layers):
        for n in LAYER:
            s = shapes[n]
            t["model.layers.%d.%s" % (l, n)] = (
                1 + 0.2 * rng.normal(size=s) if len(s) == 1
                else rng.normal(0, 1.5 / np.sqrt(s[1]), s))
        if a.inv_freq:
            t["model.layers.%d.self_attn.rotary_emb.inv_freq" % l] = \
                1.0 / a.theta ** (np.arange(0, hs, 2) / hs)
    t["model.norm.weight"] = 1 + 0.2 * rng.normal(size=(C,))
    if not a.tied:
        t["lm_head.weight"] = rng.normal(0, 1.0 / np.sqrt(C), (a.vocab, C))
    return t


def encode(arr, dtype):
    f = np.ascontiguousarray(arr, dtype="<f4")
    if dtype == "F32":
        return f.tobytes()
    if dtype == "F16":
        return f.astype("<f2").tobytes()
    u = f.view(np.uint32).astype(np.uint64)  # BF16: nearest even
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()


def write(path, t, names, dtype):
    h, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for k in names:
        b = encode(t[k], dtype)
        h[k] = {"dtype": dtype, "shape": list(t[k].shape),
                "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    j = json.dumps(h).encode()
    j += b" " * (-len(j) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(j)) + j + b"".join(blobs))


def config(a):
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
         "vocab_size": a.vocab, "hidden_size": a.embd,
         "intermediate_size": a.ff, "num_hidden_layers": a.layers,
         "num_attention_heads": a.heads, "num_key_value_heads": a.kv,
         "head_dim": a.embd // a.heads, "max_position_embeddings": a.ctx,
         "hidden_act": "silu", "rms_norm_eps": a.eps, "rope_theta": a.theta,
         "rope_scaling": None, "attention_bias": False, "mlp_bias": False,
         "tie_word_embeddings": a.tied, "torch_dtype": {
             "F32": "float32", "F16": "float16", "BF16": "bfloat16"}[a.dtype]}
    for k in a.omit:
        c.pop(k, None)
    for kv in a.set:
        k, v = kv.split("=", 1)
        c[k] = json.loads(v)
    return c


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--dtype", default="F32", choices=["F32", "F16", "BF16"])
    for k, v in [("layers", 2), ("heads", 4), ("kv", 2), ("embd", 40),
                 ("ff", 100), ("vocab", 320), ("ctx", 64), ("shards", 1),
                 ("seed", 1)]:
        p.add_argument("--" + k, type=int, default=v)
    p.add_argument("--theta", type=float, default=10000.0)
    p.add_argument("--eps", type=float, default=1e-5)
    p.add_argument("--tied", action="store_true")
    p.add_argument("--inv-freq", action="store_true")
    p.add_argument("--omit", action="append", default=[])
    p.add_argument("--set", action="append", default=[])
    a = p.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    t = tensors(a)
    with open(os.path.join(a.dir, "config.json"), "w") as f:
        json.dump(config(a), f, indent=2)
    names = list(t)
    if a.shards == 1:
        write(os.path.join(a.dir, "model.safetensors"), t, names, a.dtype)
        return
    wmap, per = {}, -(-len(names) // a.shards)
    for i in range(a.shards):
        f = "model-%05d-of-%05d.safetensors" % (i + 1, a.shards)
        part = names[i * per:(i + 1) * per]
        write(os.path.join(a.dir, f), t, part, a.dtype)
        wmap.update({k: f for k in part})
    with open(os.path.join(a.dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wmap}, f)


if __name__ == "__main__":
    main()
