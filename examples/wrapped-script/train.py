#!/usr/bin/env python3
"""A stand-in for your own training script: what it takes to report to
dagrun when it runs as an `exec` task (see wrapped.yaml).

dagrun names three files in the environment; the script writes them with
nothing but the standard library:
  DAGRUN_METRICS   one JSON line per step, appended: {"step": N, "loss": x}
  DAGRUN_PROGRESS  "DONE TOTAL" lines
  DAGRUN_OUTPUTS   one JSON object at the end, for downstream tasks
Run by hand (no dagrun), the variables are unset and it only prints."""
import argparse
import json
import math
import os
import time

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--lr", type=float, default=0.1)
ap.add_argument("--out", default=os.path.join(os.environ.get("DAGRUN_OUT_DIR", "."), "model"))
ap.add_argument("--step-seconds", type=float, default=0.05)
args = ap.parse_args()

metrics_path = os.environ.get("DAGRUN_METRICS")
progress_path = os.environ.get("DAGRUN_PROGRESS")
outputs_path = os.environ.get("DAGRUN_OUTPUTS")

# Line-buffered: each step's line reaches the file (and dagrun) at once,
# so a run that is stopped keeps its curve up to that step.
metrics = open(metrics_path, "a", buffering=1) if metrics_path else None

loss = 3.0
for step in range(1, args.steps + 1):
    time.sleep(args.step_seconds)  # the "training"
    loss = 0.5 + 2.5 * math.exp(-args.lr * 2 * step)
    print(f"step {step}/{args.steps} loss {loss:.4f}", flush=True)
    if metrics:
        metrics.write(json.dumps({"step": step, "loss": loss, "lr": args.lr}) + "\n")
    if progress_path:
        with open(progress_path, "w") as f:
            f.write(f"{step} {args.steps}\n")

os.makedirs(args.out, exist_ok=True)
with open(os.path.join(args.out, "weights.txt"), "w") as f:
    f.write(f"final loss {loss}\n")

if outputs_path:
    with open(outputs_path, "w") as f:
        json.dump({"model_dir": os.path.abspath(args.out), "final_loss": round(loss, 6)}, f)
