#!/usr/bin/python3
"""The Llama family in plain PyTorch, as the reference for dagrun's CPU
engine; used by torch_gpt.py (check) and torch_train.py when the dump
directory holds llama.txt ("n_kv_head intermediate rope_theta norm_eps
untied", written by gpt_dump / train_dump with "llama").

Written here from the Llama papers and Hugging Face's documented layout,
not taken from transformers: token embedding (no positions); pre-RMSNorm
blocks of causal grouped-query attention (query head h reads key/value
head h // (H / KV), as HF's repeat_kv) with rotary embeddings in HF's
rotate_half layout (channel i turns with channel i + hs/2 by angle
t / theta^(2i/hs)), and a SwiGLU MLP down(silu(gate x) * up x); final
RMSNorm; the head lm_head or the tied embedding; nn.Linear weights
(out, in); no biases; mean cross-entropy over the real vocabulary.
"""
import math
import os

import torch
import torch.nn.functional as F

LAYER = ["input_layernorm.weight", "self_attn.q_proj.weight",
         "self_attn.k_proj.weight", "self_attn.v_proj.weight",
         "self_attn.o_proj.weight", "post_attention_layernorm.weight",
         "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"]
# The tensors AdamW decays by default: every matrix but the embedding.
DECAY = ("_proj.weight", "lm_head.weight")


def read_config(d):
    """llama.txt of d as a dict, or None for a GPT-2 dump."""
    path = os.path.join(d, "llama.txt")
    if not os.path.exists(path):
        return None
    kv, ff, theta, eps, untied = open(path).read().split()
    return dict(kv=int(kv), ff=int(ff), theta=float(theta), eps=float(eps),
                untied=int(untied))


def n_tensors(L, cfg):
    return 2 + len(LAYER) * L + cfg["untied"]


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, theta):
    """x (B, heads, T, hs) turned by position, HF's rotate_half layout."""
    T, hs = x.shape[-2], x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, hs, 2, dtype=x.dtype) / hs)
    f = torch.outer(torch.arange(T, dtype=x.dtype), inv)
    emb = torch.cat([f, f], dim=-1)
    x1, x2 = x[..., :hs // 2], x[..., hs // 2:]
    return x * emb.cos() + torch.cat([-x2, x1], dim=-1) * emb.sin()


def forward(p, idx, targets, L, H, V, cfg):
    """p: name -> tensor; idx, targets (B,T) -> logits (B,T,Vp), loss."""
    B, T = idx.shape
    emb = p["model.embed_tokens.weight"]
    C = emb.shape[1]
    hs, KV, eps = C // H, cfg["kv"], cfg["eps"]
    x = emb[idx]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        g = lambda n: p["model.layers.%d.%s" % (l, n)]
        h = rms_norm(x, g("input_layernorm.weight"), eps)
        q = (h @ g("self_attn.q_proj.weight").t()).view(B, T, H, hs)
        k = (h @ g("self_attn.k_proj.weight").t()).view(B, T, KV, hs)
        v = (h @ g("self_attn.v_proj.weight").t()).view(B, T, KV, hs)
        q = rope(q.transpose(1, 2), cfg["theta"])
        k = rope(k.transpose(1, 2), cfg["theta"])
        v = v.transpose(1, 2)
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ g("self_attn.o_proj.weight").t()
        h = rms_norm(x, g("post_attention_layernorm.weight"), eps)
        a = F.silu(h @ g("mlp.gate_proj.weight").t())
        x = x + (a * (h @ g("mlp.up_proj.weight").t())) @ \
            g("mlp.down_proj.weight").t()
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["lm_head.weight"] if cfg["untied"] else emb
    logits = x @ head.t()
    loss = None
    if targets is not None:
        loss = F.cross_entropy(logits[:, :, :V].reshape(-1, V),
                               targets.reshape(-1))
    return logits, loss
