#!/usr/bin/python3
"""Training-step throughput: dagrun's CPU engine against PyTorch.

    scripts/build.sh && /usr/bin/python3 bench/train/run.py

For each config, in one run on the same machine with the same threads and
the same batch: tokens per second of forward + backward + grad-norm
clipping + AdamW on random tokens, by build/bin/engine_bench (dagrun's
engine) and by the same GPT-2 written here in PyTorch (Debian's
python3-torch under /usr/bin/python3). Prints the ratio; the issue's
target is dagrun at least as fast as PyTorch. A benchmark, not a test.

The Llama configs run the same way against a Llama written here (RMSNorm,
RoPE in Hugging Face's rotate_half layout, grouped-query attention, SwiGLU,
no biases, the head tied or not), and each also times dagrun's GPT-2 of
the same size (its "gpt" pair) for the Llama/GPT-2 ratio. --check compares
that Llama, in float64 on a tiny shape, with tests/reference/torch_llama.py
(loss and every gradient) and exits 1 if they differ.
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
# The Llama configs: the shape above, the Llama knobs (key/value heads,
# SwiGLU width, untied head) and the GPT-2 config of the same size.
# llama-tiny is the preset (gpt.h: gpt-tiny's block matrices exactly);
# llama-small-tied is the llama-small preset (KV2, untied: 16.6M) with
# three key/value heads and the head tied, which gives gpt-small's block
# matrices exactly (2C^2 + 2C*KVD + 3C*I = 12C^2 at KVD = C/2, I = 3C).
LLAMA = {
    "llama-tiny": ((4, 4, 128, 128, 4096, 16), (2, 384, 0), "gpt-tiny"),
    "llama-small-tied": ((6, 6, 384, 256, 8192, 8), (3, 1152, 0), "gpt-small"),
    "llama-small": ((6, 6, 384, 256, 8192, 8), (2, 1152, 1), "gpt-small"),
}
DEFAULT = "gpt-tiny,gpt-small,llama-tiny,llama-small-tied"


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
    return time_steps(model, decay, other, V, B, T, steps)


def time_steps(model, decay, other, V, B, T, steps):
    """Tokens per second of model's training step (the loss of
    model(idx, targets), backward, clipping at 1.0, AdamW with weight
    decay on decay only) over steps steps after 2 warm-up ones; and the
    parameter count."""
    import torch

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


def torch_llama(L, H, C, T, V, KV, FF, untied, theta=10000.0, eps=1e-5,
                dtype=None):
    """The Llama family as an nn.Module with Hugging Face's tensor names
    (model.layers.N.self_attn.q_proj.weight, ...), so that its
    state_dict is tests/reference/torch_llama.py's parameter dict."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    hs = C // H
    dtype = dtype or torch.float32

    def linear(i, o):
        return nn.Linear(i, o, bias=False, dtype=dtype)

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(C, dtype=dtype))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * self.weight

    # RoPE's tables for positions 0..T-1, HF's layout: channel i turns
    # with channel i + hs/2 by angle t / theta^(2i/hs).
    inv = 1.0 / theta ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    ang = torch.cat([ang, ang], dim=-1)
    cos, sin = ang.cos().to(dtype), ang.sin().to(dtype)

    def rope(x):  # (B, heads, t, hs)
        t = x.shape[-2]
        x1, x2 = x[..., :hs // 2], x[..., hs // 2:]
        return x * cos[:t] + torch.cat([-x2, x1], dim=-1) * sin[:t]

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj, self.k_proj = linear(C, C), linear(C, KV * hs)
            self.v_proj, self.o_proj = linear(C, KV * hs), linear(C, C)

        def forward(self, x):
            b, t, _ = x.shape
            q = rope(self.q_proj(x).view(b, t, H, hs).transpose(1, 2))
            k = rope(self.k_proj(x).view(b, t, KV, hs).transpose(1, 2))
            v = self.v_proj(x).view(b, t, KV, hs).transpose(1, 2)
            # HF's repeat_kv: query head h reads key/value head h // (H/KV)
            k = k.repeat_interleave(H // KV, dim=1)
            v = v.repeat_interleave(H // KV, dim=1)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
            mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
            att = att.masked_fill(mask, float("-inf")).softmax(-1)
            return self.o_proj((att @ v).transpose(1, 2).reshape(b, t, C))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj, self.up_proj = linear(C, FF), linear(C, FF)
            self.down_proj = linear(FF, C)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm, self.self_attn = RMSNorm(), Attention()
            self.post_attention_layernorm, self.mlp = RMSNorm(), MLP()

        def forward(self, x):
            x = x + self.self_attn(self.input_layernorm(x))
            return x + self.mlp(self.post_attention_layernorm(x))

    class Body(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(V, C, dtype=dtype)
            self.layers = nn.ModuleList(Layer() for _ in range(L))
            self.norm = RMSNorm()

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = Body()
            if untied:
                self.lm_head = linear(C, V)

        def forward(self, idx, targets):
            x = self.model.embed_tokens(idx)
            for layer in self.model.layers:
                x = layer(x)
            x = self.model.norm(x)
            head = self.lm_head.weight if untied else self.model.embed_tokens.weight
            logits = x @ head.t()
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    return Llama()


def torch_llama_tokens_per_s(L, H, C, T, V, B, KV, FF, untied, steps, threads):
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = torch_llama(L, H, C, T, V, KV, FF, untied)
    # AdamW's default groups as dagrun's: every matrix but the embedding
    # decays (lm_head does), norms do not.
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "embed" not in n)]
    return time_steps(model, decay, other, V, B, T, steps)


def check_llama():
    """The bench's Llama against tests/reference/torch_llama.py in
    float64 on a tiny shape with GQA and each head: loss and every
    gradient. Returns the largest relative difference (1 if a name is
    missing)."""
    import torch

    sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
    import torch_llama as ref

    worst = 0.0
    for untied in (0, 1):
        L, H, C, T, V, B, KV, FF = 2, 4, 32, 8, 64, 2, 2, 48
        torch.manual_seed(3)
        model = torch_llama(L, H, C, T, V, KV, FF, untied, dtype=torch.float64)
        with torch.no_grad():  # norms away from 1, so their gradients count
            for n, p in model.named_parameters():
                if "norm" in n:
                    p.add_(0.1 * torch.randn_like(p))
        idx = torch.randint(0, V, (B, T))
        tgt = torch.randint(0, V, (B, T))
        loss = model(idx, tgt)
        loss.backward()
        p = {n: t.detach().clone().requires_grad_(True)
             for n, t in model.named_parameters()}
        if not untied:
            p["lm_head.weight"] = p["model.embed_tokens.weight"]
        cfg = dict(kv=KV, ff=FF, theta=10000.0, eps=1e-5, untied=untied)
        _, rloss = ref.forward(p, idx, tgt, L, H, V, cfg)
        rloss.backward()
        diffs = [abs(loss.item() - rloss.item()) / abs(rloss.item())]
        for n, t in model.named_parameters():
            g, r = t.grad, p[n].grad
            diffs.append(((g - r).abs().max() / r.abs().max().clamp_min(1e-30)).item())
        if len(p) != ref.n_tensors(L, cfg) + (not untied):
            diffs.append(1.0)
        worst = max(worst, *diffs)
        print(f"check: llama {'untied' if untied else 'tied'} L{L} H{H} KV{KV} C{C} "
              f"I{FF}: loss {loss.item():.12f} against {rloss.item():.12f}, "
              f"largest relative difference {max(diffs):.2e} over "
              f"{len(diffs) - 1} gradients")
    return worst

def dagrun_tokens_per_s(a, shape, llama=()):
    L, H, C, T, V, B = shape
    out = subprocess.run([a.bench, str(L), str(H), str(C), str(T), str(V), str(B),
                          str(a.steps), str(a.threads)] + [str(x) for x in llama],
                         check=True, capture_output=True, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS=str(a.threads),
                                  OPENBLAS_NUM_THREADS=str(a.threads))).stdout
    return json.loads(out)["tokens_per_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default=DEFAULT,
                    help="comma-separated, of: " + ", ".join(list(CONFIGS) + list(LLAMA)))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--bench", default=os.path.join(ROOT, "build/bin/engine_bench"))
    ap.add_argument("--check", action="store_true",
                    help="only compare the bench's Llama with the tests' reference")
    a = ap.parse_args()
    if a.check:
        worst = check_llama()
        print("check:", "ok" if worst < 1e-10 else "DIFFERS", f"({worst:.2e}, bound 1e-10)")
        sys.exit(0 if worst < 1e-10 else 1)
    names = a.configs.split(",")
    for name in names:
        if name not in CONFIGS and name not in LLAMA:
            sys.exit(f"run.py: unknown config {name} (configs: "
                     + ", ".join(list(CONFIGS) + list(LLAMA)) + ")")
    gpt_ours = {}  # dagrun's GPT-2 tok/s by config, for the Llama rows
    gpts = [n for n in names if n in CONFIGS]
    if gpts:
        print(f"{'config':12}{'params':>10}{'dagrun tok/s':>14}{'torch tok/s':>13}{'ratio':>8}")
    for name in gpts:
        L, H, C, T, V, B = CONFIGS[name]
        ours = dagrun_tokens_per_s(a, CONFIGS[name])
        gpt_ours[name] = ours
        theirs, n = torch_tokens_per_s(L, H, C, T, V, B, a.steps, a.threads)
        ratio = ours / theirs
        print(f"{name:12}{n / 1e6:9.2f}M{ours:14.0f}{theirs:13.0f}{ratio:7.2f}x"
              f"   (L{L} H{H} C{C} T{T} V{V} B{B}, {a.threads} threads; target >= 1)")
        sys.stdout.flush()
    llamas = [n for n in names if n in LLAMA]
    if llamas:
        print(f"{'config':18}{'params':>10}{'dagrun tok/s':>14}{'torch tok/s':>13}{'ratio':>8}"
              f"{'same-size GPT-2':>17}{'dagrun tok/s':>14}{'llama/gpt2':>12}")
    for name in llamas:
        shape, (KV, FF, untied), pair = LLAMA[name]
        L, H, C, T, V, B = shape
        ours = dagrun_tokens_per_s(a, shape, (KV, FF, untied))
        theirs, n = torch_llama_tokens_per_s(L, H, C, T, V, B, KV, FF, untied,
                                             a.steps, a.threads)
        if pair not in gpt_ours:
            gpt_ours[pair] = dagrun_tokens_per_s(a, CONFIGS[pair])
        print(f"{name:18}{n / 1e6:9.2f}M{ours:14.0f}{theirs:13.0f}{ours / theirs:7.2f}x"
              f"{pair:>17}{gpt_ours[pair]:14.0f}{ours / gpt_ours[pair]:11.2f}x"
              f"   (L{L} H{H} KV{KV} C{C} I{FF} T{T} V{V} B{B}, "
              f"{'untied' if untied else 'tied'}, {a.threads} threads)")
        sys.stdout.flush()

if __name__ == "__main__":
    main()
