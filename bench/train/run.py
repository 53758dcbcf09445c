#!/usr/bin/python3
"""Training-step throughput: dagrun's CPU engine against PyTorch.

    scripts/build.sh && /usr/bin/python3 bench/train/run.py

For each config, in one run on the same machine with the same threads and
the same batch: tokens per second of forward + backward + grad-norm
clipping + AdamW on random tokens, by build/bin/engine_bench (dagrun's
engine) and by the same GPT-2 written here in PyTorch (Debian's
python3-torch under /usr/bin/python3). Prints the ratio; the issue's
target is dagrun at least as fast as PyTorch. A benchmark, not a test.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONFIGS = {
    # name: (layers, heads, width, context, vocab, batch)
    "gpt-tiny": (4, 4, 128, 128, 4096, 16),
    "gpt-small": (6, 6, 384, 256, 8192, 8),
}


def torch_tokens_per_s(L, H, C, T, V, B, steps, threads):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.manual_seed(1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
            mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
            att = att.masked_fill(mask, float("-inf")).softmax(-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, C)
            x = x + self.c_proj(y)
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.h = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(C)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for blk in self.h:
                x = blk(x)
            logits = self.ln_f(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    model = GPT()
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "wte" not in n and "wpe" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "wte" not in n and "wpe" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    idx = torch.randint(0, V, (B, T))
    tgt = torch.randint(0, V, (B, T))
    for step in range(-2, steps):
        if step == 0:
            t0 = time.monotonic()
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    dt = time.monotonic() - t0
    return steps * B * T / dt, sum(p.numel() for p in model.parameters())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="gpt-tiny,gpt-small")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--bench", default=os.path.join(ROOT, "build/bin/engine_bench"))
    a = ap.parse_args()
    print(f"{'config':12}{'params':>10}{'dagrun tok/s':>14}{'torch tok/s':>13}{'ratio':>8}")
    for name in a.configs.split(","):
        L, H, C, T, V, B = CONFIGS[name]
        out = subprocess.run([a.bench, str(L), str(H), str(C), str(T), str(V), str(B),
                              str(a.steps), str(a.threads)],
                             check=True, capture_output=True, text=True,
                             env=dict(os.environ, OMP_NUM_THREADS=str(a.threads),
                                      OPENBLAS_NUM_THREADS=str(a.threads))).stdout
        ours = json.loads(out)
        theirs, n = torch_tokens_per_s(L, H, C, T, V, B, a.steps, a.threads)
        ratio = ours["tokens_per_s"] / theirs
        print(f"{name:12}{n / 1e6:9.2f}M{ours['tokens_per_s']:14.0f}{theirs:13.0f}{ratio:7.2f}x"
              f"   (L{L} H{H} C{C} T{T} V{V} B{B}, {a.threads} threads; target >= 1)")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
