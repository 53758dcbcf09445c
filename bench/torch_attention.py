#!/usr/bin/env python3
"""PyTorch's attention kernels on the shape kernel_bench times ours at.

    bench/torch_attention.py [--kernel-bench LOG] [--B 8] [--T 1024]
                             [--C 768] [--NH 12] [--iters 20]

Times F.scaled_dot_product_attention (causal, BF16) forward and backward
with each backend PyTorch has (flash, cuDNN, memory-efficient), counting
causal attention as half the full T x T work, as kernel_bench does. With
--kernel-bench, the log of tests/gpu/kernel_bench.cu on the same card:
its first attention_forward / attention_backward lines (the default
kernels) are set beside each backend as dagrun's ms over the backend's
(below 1: dagrun's kernel is faster). This is how the choice between our
own attention and cuDNN's fused one is measured (issue 28): on an H100
(2026-11-28) cuDNN's was 10% faster forward and 23% backward, PyTorch's
flash backend slower than ours in both.

Without a GPU (or PyTorch without CUDA) it says so and exits 0: a
benchmark, not a test.
"""
import argparse
import re
import sys


def dagrun_ms(log):
    """(forward ms, backward ms) of the first attention lines in a
    kernel_bench log, None for a missing one."""
    found = {}
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = re.match(r"(attention_forward|attention_backward)\s+([0-9.]+) ms", line)
            if m and m.group(1) not in found:
                found[m.group(1)] = float(m.group(2))
    return found.get("attention_forward"), found.get("attention_backward")


def time_backend(torch, F, backend, a):
    """Mean forward and backward ms of one SDPA backend."""
    from torch.nn.attention import sdpa_kernel

    hs = a.C // a.NH
    shape = (a.B, a.NH, a.T, hs)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))
    dout = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    with sdpa_kernel([backend]):
        for _ in range(3):  # warm-up: kernel selection, compilation
            F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(dout)
        torch.cuda.synchronize()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        fwd = bwd = 0.0
        for _ in range(a.iters):
            ev[0].record()
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            ev[1].record()
            out.backward(dout)
            ev[2].record()
            torch.cuda.synchronize()
            fwd += ev[0].elapsed_time(ev[1])
            bwd += ev[1].elapsed_time(ev[2])
    return fwd / a.iters, bwd / a.iters


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernel-bench", help="kernel_bench's log on this card")
    ap.add_argument("--B", type=int, default=8)
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--C", type=int, default=768)
    ap.add_argument("--NH", type=int, default=12)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend
    except ImportError as e:
        print(f"torch_attention: skipped, PyTorch 2.3 or later not importable ({e})")
        return 0
    if not torch.cuda.is_available():
        print("torch_attention: skipped, no CUDA device")
        return 0
    ours = dagrun_ms(a.kernel_bench) if a.kernel_bench else (None, None)
    # FLOPs: QK^T and PV, 2*T*T*hs each per head, half of them causal;
    # backward 2.5x forward (five products where forward has two).
    fwd_flops = 4 * a.B * a.NH * a.T * a.T * (a.C // a.NH) / 2
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"{torch.cuda.get_device_name()}; B={a.B} T={a.T} C={a.C} NH={a.NH}, causal BF16")
    if ours[0] and ours[1]:
        print(f"{'dagrun (kernel_bench)':24} fwd {ours[0]:.3f} ms  bwd {ours[1]:.3f} ms")
    for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"):
        backend = getattr(SDPBackend, name, None)
        if backend is None:
            print(f"{name.lower():24} not in this PyTorch")
            continue
        try:
            f, b = time_backend(torch, F, backend, a)
        except RuntimeError as e:
            print(f"{name.lower():24} refused: {str(e).splitlines()[0][:160]}")
            continue
        line = (f"{name.lower():24} fwd {f:.3f} ms ({fwd_flops / f / 1e9:.0f} TFLOP/s)"
                f"  bwd {b:.3f} ms ({2.5 * fwd_flops / b / 1e9:.0f} TFLOP/s)")
        if ours[0] and ours[1]:
            line += f"  dagrun/this: fwd {ours[0] / f:.2f}x bwd {ours[1] / b:.2f}x"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
