#!/usr/bin/python3
"""Repeats optim_dump's run in PyTorch and compares, step by step.

    torch_optim.py DIR      (DIR written by `optim_dump adamw|lion DIR`)

The reference: torch.optim.AdamW (one param group per optim_dump group,
weight_decay 0 for the no-decay group), torch.nn.utils.clip_grad_norm_
over all parameters at 1.0, the learning rate set by hand each step from
warmup + cosine computed here, and Lion as lion-pytorch implements it
(written out below, since lion-pytorch is not packaged). The
hyperparameters are written here, not read from DIR, so a wrong value on
either side shows.

Metric, per step: the largest relative error over the parameters,
|ours - torch| / max(|torch|, 1e-3) (the floor keeps parameters that
cross zero from dividing by nothing); it must stay below 1e-5. Also: the
learning rates (1e-12 relative), the grad norms before clipping (1e-6
relative) and, after the last step, the optimizer moments (largest
error over the largest magnitude, 1e-5). Exit status 0 when all agree.
"""
import json
import math
import os
import sys

import numpy as np
import torch

TOL = 1e-5
CONFIG = {
    "adamw": dict(beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1,
                  max_lr=1e-2, min_lr=1e-3),
    "lion": dict(beta1=0.9, beta2=0.99, eps=0.0, weight_decay=1.0,
                 max_lr=1e-3, min_lr=1e-4),
}
WARMUP, TOTAL, MAX_NORM = 3, 10, 1.0


def lr_at(c, step):
    if step < WARMUP:
        return c["max_lr"] * (step + 1) / WARMUP
    p = min(max((step - WARMUP) / max(1, TOTAL - WARMUP), 0.0), 1.0)
    return c["min_lr"] + (c["max_lr"] - c["min_lr"]) * 0.5 * (
        1 + math.cos(math.pi * p))


class Lion(torch.optim.Optimizer):
    """lion-pytorch's Lion (lucidrains), update_fn without Triton."""

    def __init__(self, params, lr, betas, weight_decay):
        super().__init__(params, dict(lr=lr, betas=betas,
                                      weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            lr, wd = group["lr"], group["weight_decay"]
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                state = self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p)
                exp_avg, grad = state["exp_avg"], p.grad
                p.data.mul_(1 - lr * wd)
                update = exp_avg.clone().mul_(beta1).add(
                    grad, alpha=1 - beta1).sign_()
                p.add_(update, alpha=-lr)
                exp_avg.mul_(beta2).add_(grad, alpha=1 - beta2)


def main():
    d = sys.argv[1]
    meta = json.load(open(os.path.join(d, "meta.json")))
    kind, n, steps = meta["kind"], meta["n"], meta["steps"]
    c = CONFIG[kind]
    bad = []

    def load(name, shape):
        return np.fromfile(os.path.join(d, name), dtype="<f4").reshape(shape)

    p0 = load("params0.f32", (n,))
    grads = load("grads.f32", (steps, n))
    ours = load("params.f32", (steps, n))

    torch.set_num_threads(1)
    params, groups = [], []
    for off, num, decay in meta["groups"]:
        t = torch.nn.Parameter(torch.tensor(p0[off:off + num]))
        params.append(t)
        groups.append(dict(params=[t],
                           weight_decay=c["weight_decay"] if decay else 0.0))
    if kind == "adamw":
        opt = torch.optim.AdamW(groups, lr=c["max_lr"],
                                betas=(c["beta1"], c["beta2"]), eps=c["eps"])
    else:
        opt = Lion(groups, lr=c["max_lr"], betas=(c["beta1"], c["beta2"]),
                   weight_decay=0.0)

    clipped = 0
    for s in range(steps):
        for t, (off, num, _) in zip(params, meta["groups"]):
            t.grad = torch.tensor(grads[s, off:off + num])
        norm = float(torch.nn.utils.clip_grad_norm_(params, MAX_NORM))
        clipped += norm > MAX_NORM
        lr = lr_at(c, s)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        ref = torch.cat([t.detach() for t in params]).numpy().astype(np.float64)
        rel = np.abs(ours[s] - ref) / np.maximum(np.abs(ref), 1e-3)
        i = int(np.argmax(rel))
        lr_err = abs(meta["lr"][s] - lr) / lr
        norm_err = abs(meta["norm"][s] - norm) / norm
        print(f"{kind} step {s}: lr {lr:.6g} norm {norm:.6g} "
              f"max rel err {rel[i]:.3g} (param {i}: ours {ours[s, i]:.9g} "
              f"torch {ref[i]:.9g}); lr err {lr_err:.2g}, norm err "
              f"{norm_err:.2g}")
        if not rel[i] < TOL:
            bad.append(f"step {s}: params differ, max rel err {rel[i]:.3g}")
        if not lr_err < 1e-12:
            bad.append(f"step {s}: lr ours {meta['lr'][s]} torch {lr}")
        if not norm_err < 1e-6:
            bad.append(f"step {s}: norm ours {meta['norm'][s]} torch {norm}")

    # The moments after the last step, in optim_state's layout.
    names = ["exp_avg", "exp_avg_sq"] if kind == "adamw" else ["exp_avg"]
    state = load("state.f32", (len(names) * n,)).astype(np.float64)
    for k, name in enumerate(names):
        ref = torch.cat([opt.state[t][name] for t in params]).numpy()
        got = state[k * n:(k + 1) * n]
        err = np.max(np.abs(got - ref)) / np.max(np.abs(ref))
        print(f"{kind} final {name}: max err / max |torch| {err:.3g}")
        if not err < TOL:
            bad.append(f"{name} differs: {err:.3g}")

    # The run must exercise clipping both ways to mean anything.
    if not 0 < clipped < steps:
        bad.append(f"clipping acted on {clipped} of {steps} steps")
    if bad:
        print(f"{kind}: MISMATCH with torch (tolerance {TOL}):\n  " +
              "\n  ".join(bad))
        return 1
    print(f"{kind}: agrees with torch {torch.__version__} within {TOL}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
