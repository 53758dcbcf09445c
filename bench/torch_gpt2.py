#!/usr/bin/python3
"""The PyTorch half of bench/gpu_train.sh: GPT-2 trained on one GPU the way
a PyTorch user makes it fast, on the shapes bench/gpu_train.c trains.

    torch_gpt2.py [--model gpt2-124M] [--B 16] [--T 1024] [--steps 20]
                  [--warmup 5] [--peak-tflops 989] [--no-compile]
                  [--profile TOP]

The model is dagrun's (gpu/model/gpt.h): pre-LN blocks, GELU (tanh) MLP
of width 4C, learned positions, the head tied to the token embedding,
vocabulary 50257 padded to 50304 (dagrun pads to a multiple of 64; so
both compute the same logits). PyTorch's speed settings: bf16 autocast
(FP32 weights, master copy and AdamW state, as dagrun keeps them),
torch.compile, F.scaled_dot_product_attention (flash attention),
AdamW(fused=True), TF32 allowed. A step: forward, backward, clip to norm
1, AdamW (lr 6e-4, betas 0.9/0.95, weight decay 0.1 on the matrices),
zero the gradients; uniform random ids (seeded).

FLOPs per token = 6N + 6*L*C*T with N = vocab_size*C + L*(12C^2 + 13C)
+ 2C (bench/gpu_train.c's N); MFU = that x tokens/s / peak. Peak memory
is torch.cuda.max_memory_allocated() (the caching allocator's tensors:
the counterpart of dagrun's allocation) and the device's use (total -
free) at the end.

Prints human lines and one "RESULT key=value ..." line. With --profile
TOP, after the warm-up it times one step under torch.profiler instead:
each CUDA kernel's launches, milliseconds and share of the step's GPU
time, the TOP largest, in bench/gpu_profile.sh's layout, so that the two
engines' steps can be set side by side kernel by kernel.
"""
import argparse
import sys
import time

PRESETS = {"gpt-tiny": (4, 4, 128, 128), "gpt-small": (6, 6, 384, 256),
           "gpt2-124M": (12, 12, 768, 1024), "gpt2-350M": (24, 16, 1024, 1024)}
VOCAB = 50257
VOCAB_PADDED = (VOCAB + 63) // 64 * 64


def build(torch, L, H, C, T):
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C)
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            self.ln_2 = nn.LayerNorm(C)
            self.c_fc = nn.Linear(C, 4 * C)
            self.mlp_proj = nn.Linear(4 * C, C)

        def forward(self, x):
            B, Tn, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q = q.view(B, Tn, H, C // H).transpose(1, 2)
            k = k.view(B, Tn, H, C // H).transpose(1, 2)
            v = v.view(B, Tn, H, C // H).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            y = y.transpose(1, 2).contiguous().view(B, Tn, C)
            x = x + self.c_proj(y)
            h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
            return x + self.mlp_proj(h)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(VOCAB_PADDED, C)
            self.wpe = nn.Embedding(T, C)
            self.h = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(C)
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, idx, targets):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for b in self.h:
                x = b(x)
            logits = self.ln_f(x) @ self.wte.weight.t()  # tied head
            return F.cross_entropy(logits.float().view(-1, logits.size(-1)),
                                   targets.view(-1))

    return GPT()


def profile_step(torch, step, top):
    """One step under torch.profiler: its kernels by name, largest first
    (the trace's kernel events, whose durations are GPU time)."""
    import collections, json, os, tempfile
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        events = json.load(open(path)).get("traceEvents", [])
    finally:
        os.unlink(path)
    tot, cnt = collections.defaultdict(float), collections.defaultdict(int)
    for e in events:
        if e.get("cat") == "kernel" and "dur" in e:
            tot[e["name"]] += e["dur"] / 1e3
            cnt[e["name"]] += 1
    ms = sum(tot.values())
    print(f"{sum(cnt.values())} kernels, {ms:.2f} ms of GPU time in the step")
    print(f"{'kernel':<60} {'launches':>8} {'ms':>8} {'share':>7}")
    for name in sorted(tot, key=tot.get, reverse=True)[:top]:
        print(f"{name[:60]:<60} {cnt[name]:>8} {tot[name]:>8.3f} "
              f"{100 * tot[name] / ms if ms else 0:>6.1f}%")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2-124M", choices=sorted(PRESETS))
    ap.add_argument("--B", type=int, default=16)
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--profile", type=int, default=0, metavar="TOP")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("torch_gpt2.py: skip: PyTorch is not installed")
        return 0
    if not hasattr(torch, "compile") or not hasattr(
            torch.nn.functional, "scaled_dot_product_attention"):
        print(f"torch_gpt2.py: skip: PyTorch {torch.__version__} has no "
              "torch.compile / scaled_dot_product_attention (2.0 or later "
              "needed)")
        return 0
    if not torch.cuda.is_available():
        print("torch_gpt2.py: skip: PyTorch sees no CUDA device")
        return 0
    L, H, C, Tmax = PRESETS[a.model]
    if a.T > Tmax:
        sys.exit(f"torch_gpt2.py: --T {a.T} is above {a.model}'s {Tmax}")
    torch.manual_seed(1234)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = "cuda"
    model = build(torch, L, H, C, Tmax).to(dev)
    decay = [p for p in model.parameters() if p.dim() == 2 and p is not model.wte.weight and p is not model.wpe.weight]
    ids_decay = {id(p) for p in decay}
    rest = [p for p in model.parameters() if id(p) not in ids_decay]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_model = model if a.no_compile else torch.compile(model)
    g = torch.Generator(device="cpu").manual_seed(1234)
    x = torch.randint(0, VOCAB, (a.B, a.T), generator=g).to(dev)
    y = torch.randint(0, VOCAB, (a.B, a.T), generator=g).to(dev)

    def step():
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = step_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t_c = time.monotonic()
    for _ in range(a.warmup):  # torch.compile's work happens here
        step()
    torch.cuda.synchronize()
    print(f"torch: warmup ({a.warmup} steps, compile included) "
          f"{time.monotonic() - t_c:.1f} s")
    if a.profile:
        return profile_step(torch, step, a.profile)
    torch.cuda.reset_peak_memory_stats()
    t0 = time.monotonic()
    for _ in range(a.steps):
        loss = step()
    torch.cuda.synchronize()
    el = time.monotonic() - t0
    tps = a.B * a.T * a.steps / el
    N = VOCAB * C + L * (12 * C * C + 13 * C) + 2 * C
    fpt = 6 * N + 6 * L * C * a.T
    mfu = fpt * tps / (a.peak_tflops * 1e12) if a.peak_tflops > 0 else 0
    peak = torch.cuda.max_memory_allocated()
    free, total = torch.cuda.mem_get_info()
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}: "
          f"B={a.B} T={a.T}: {tps:.0f} tokens/s, {1e3 * el / a.steps:.2f} "
          f"ms/step, peak allocated {peak / 2**30:.2f} GiB, device in use "
          f"{(total - free) / 2**30:.2f} GiB, MFU {100 * mfu:.1f}%, "
          f"last loss {loss.item():.4f}")
    print(f"RESULT engine=torch B={a.B} T={a.T} steps={a.steps} "
          f"tokens_per_s={tps:.1f} ms_per_step={1e3 * el / a.steps:.3f} "
          f"peak_alloc_bytes={peak} device_used_bytes={total - free} "
          f"flops_per_token={fpt:.6g} mfu={mfu:.4f} loss={loss.item():.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
