#!/usr/bin/python3
"""GPT-2 in plain PyTorch, as the reference for dagrun's CPU engine.

    torch_gpt.py check DIR
        Reads what `gpt_dump dump DIR` wrote (layout.txt, params.bin,
        inputs.bin, targets.bin, logits.bin, loss.txt, grads.bin), runs
        the same model in float64 from those weights and compares:
          logits: max|ours - ref| / max|ref|   < 1e-5 (real vocab columns)
          loss:   |ours - ref| / |ref|         < 1e-5
          each gradient: max|ours - ref| / max|ref| of that tensor < 1e-4
        Prints the worst error per tensor; exits 1 if any is over.

    torch_gpt.py bench L H C T V B ITERS THREADS
        Times forward+backward (no optimizer) of the same model in float32
        and prints tokens/s.

The model is written out here from the GPT-2 paper and code (not taken
from transformers): token + position embeddings, pre-LayerNorm blocks of
causal self-attention and a tanh-GELU MLP, final LayerNorm, output head
tied to the token embedding, mean cross-entropy over the real vocabulary.
"""
import math
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import torch_llama

LAYER = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
         "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
         "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight",
         "mlp.c_proj.bias"]


def forward(p, idx, targets, L, H, V):
    """p: name -> tensor (HF layout, weights (in,out)); idx, targets (B,T)
    -> logits (B,T,Vp), loss."""
    B, T = idx.shape
    C = p["wte.weight"].shape[1]
    hs = C // H
    x = p["wte.weight"][idx] + p["wpe.weight"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        g = lambda n: p["h.%d.%s" % (l, n)]
        h = F.layer_norm(x, (C,), g("ln_1.weight"), g("ln_1.bias"), 1e-5)
        qkv = h @ g("attn.c_attn.weight") + g("attn.c_attn.bias")
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, H, hs).transpose(1, 2)
        k = k.view(B, T, H, hs).transpose(1, 2)
        v = v.view(B, T, H, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ g("attn.c_proj.weight") + g("attn.c_proj.bias")
        h = F.layer_norm(x, (C,), g("ln_2.weight"), g("ln_2.bias"), 1e-5)
        h = F.gelu(h @ g("mlp.c_fc.weight") + g("mlp.c_fc.bias"),
                   approximate="tanh")
        x = x + h @ g("mlp.c_proj.weight") + g("mlp.c_proj.bias")
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
    logits = x @ p["wte.weight"].t()
    loss = None
    if targets is not None:
        loss = F.cross_entropy(logits[:, :, :V].reshape(-1, V),
                               targets.reshape(-1))
    return logits, loss


def check(d):
    layout = []
    with open(d + "/layout.txt") as f:
        cfg = [int(v) for v in f.readline().split()[1:]]
        for line in f:
            name, off, n, d0, d1 = line.split()
            layout.append((name, int(off), int(n), int(d0), int(d1)))
    L, H, C, Tm, V, Vp, B, T = cfg
    flat = np.fromfile(d + "/params.bin", dtype=np.float32)
    ours_g = np.fromfile(d + "/grads.bin", dtype=np.float32)
    idx = torch.from_numpy(
        np.fromfile(d + "/inputs.bin", dtype=np.uint32).astype(np.int64))
    tgt = torch.from_numpy(
        np.fromfile(d + "/targets.bin", dtype=np.uint32).astype(np.int64))
    idx, tgt = idx.view(B, T), tgt.view(B, T)
    ours_logits = np.fromfile(d + "/logits.bin", dtype=np.float32)
    ours_loss = float(open(d + "/loss.txt").read())
    p = {}
    for name, off, n, d0, d1 in layout:
        a = flat[off:off + n].astype(np.float64)
        p[name] = torch.tensor(a.reshape((d0, d1) if d1 else (d0,)),
                               requires_grad=True)
    llama = torch_llama.read_config(d)
    if llama:
        assert len(layout) == torch_llama.n_tensors(L, llama), \
            "unexpected tensor count"
        print("llama: n_kv_head %d, head size %d, intermediate %d, "
              "rope_theta %g, %s head" % (llama["kv"], C // H, llama["ff"],
                                          llama["theta"], "untied"
                                          if llama["untied"] else "tied"))
        logits, loss = torch_llama.forward(p, idx, tgt, L, H, V, llama)
    else:
        assert len(layout) == 4 + 12 * L, "unexpected tensor count"
        logits, loss = forward(p, idx, tgt, L, H, V)
    loss.backward()
    bad = 0

    def report(what, err, tol):
        nonlocal bad
        flag = "ok" if err < tol else "FAIL"
        if err >= tol:
            bad += 1
        print("%-28s worst rel err %.3e (tol %.0e) %s" % (what, err, tol,
                                                          flag))

    ref = logits.detach().numpy()[:, :, :V]
    ol = ours_logits.reshape(B, T, Vp)[:, :, :V]
    report("logits", np.abs(ol - ref).max() / np.abs(ref).max(), 1e-5)
    report("loss", abs(ours_loss - loss.item()) / abs(loss.item()), 1e-5)
    for name, off, n, d0, d1 in layout:
        r = p[name].grad.numpy().reshape(-1)
        o = ours_g[off:off + n].astype(np.float64)
        scale = np.abs(r).max()
        if scale == 0:
            report(name, np.abs(o).max(), 1e-30)
            continue
        report(name, np.abs(o - r).max() / scale, 1e-4)
    print("loss ours %.7f torch %.7f" % (ours_loss, loss.item()))
    return 1 if bad else 0


def bench(L, H, C, T, V, B, iters, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    Vp = (V + 63) // 64 * 64
    p = {"wte.weight": torch.randn(Vp, C) * 0.02,
         "wpe.weight": torch.randn(T, C) * 0.02}
    shapes = {"ln_1.weight": (C,), "ln_1.bias": (C,),
              "attn.c_attn.weight": (C, 3 * C), "attn.c_attn.bias": (3 * C,),
              "attn.c_proj.weight": (C, C), "attn.c_proj.bias": (C,),
              "ln_2.weight": (C,), "ln_2.bias": (C,),
              "mlp.c_fc.weight": (C, 4 * C), "mlp.c_fc.bias": (4 * C,),
              "mlp.c_proj.weight": (4 * C, C), "mlp.c_proj.bias": (C,)}
    for l in range(L):
        for n in LAYER:
            t = torch.randn(*shapes[n]) * 0.02
            if n.startswith("ln_") and n.endswith("weight"):
                t = torch.ones(*shapes[n])
            p["h.%d.%s" % (l, n)] = t
    p["ln_f.weight"], p["ln_f.bias"] = torch.ones(C), torch.zeros(C)
    for t in p.values():
        t.requires_grad_(True)
    idx = torch.randint(0, V, (B, T))
    tgt = torch.randint(0, V, (B, T))
    tf = tb = 0.0
    for it in range(iters + 1):
        t0 = time.perf_counter()
        _, loss = forward(p, idx, tgt, L, H, V)
        t1 = time.perf_counter()
        for t in p.values():
            t.grad = None
        loss.backward()
        t2 = time.perf_counter()
        if it > 0:
            tf += t1 - t0
            tb += t2 - t1
    print("torch %s, %d threads, L%d H%d C%d T%d V%d B%d: %.0f tokens/s "
          "forward+backward (forward %.1f ms, backward %.1f ms per step), "
          "loss %.4f" % (torch.__version__, torch.get_num_threads(), L, H, C,
                         T, V, B, B * T * iters / (tf + tb),
                         1e3 * tf / iters, 1e3 * tb / iters, loss.item()))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "check":
        torch.set_default_dtype(torch.float64)
        sys.exit(check(sys.argv[2]))
    if len(sys.argv) == 10 and sys.argv[1] == "bench":
        sys.exit(bench(*[int(a) for a in sys.argv[2:]]))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
