# The train stage with device: cuda against device: cpu, on real token
# files (gpt-tiny, 50 steps, batch 8 x 64, AdamW at 1e-3; GPU_TEST_STEPS,
# an even number, for another count: the CPU emulator's ctest,
# tests/gpu/emu/, trains fewer, its steps taking seconds each):
# - the GPU's loss is within 5% of the CPU's at every step and within 2%
#   on average (BF16 compute: the step's own error is well under 1%, see
#   tests/gpu/gpt_cuda_check.c, and 50 updates let the two trajectories
#   drift apart a little);
# - a checkpoint written on the GPU resumes on the CPU, and the reverse,
#   continuing with the other device's losses (same tolerance);
# - deterministic: true: two GPU runs give bitwise identical losses;
# - the summary says device cuda and the device memory;
# - the log names the attention: never cuDNN's in deterministic mode (its
#   backward adds dq with atomics); GPU_TEST_ATTENTION, where set, is
#   what the non-deterministic run's must say (the emulator's ctest: no
#   cuDNN in that build).
. "$(dirname "$0")/gpu_env.sh"

# N, the steps of a run (resumed runs from step N/2); EVAL: the final
# validation's batches (the stage's default, 20, unless set): no check
# here reads the validation loss; the emulator's ctest sets 2. SHAPE:
# gpu_env.sh's (GPU_TEST_LAYERS).
gpu_steps 50 10
DATA=$(make_token_data gpu 320)
COMMON="data: \"$DATA\", model: gpt-tiny, seq_len: 64, batch_size: 8, steps: $N, lr: 0.001, warmup: 5, eval_every: 0, samples: 0, spike_policy: none, checkpoint_every: $H, seed: 7$EVAL$SHAPE"

gpu_train cpu "device: cpu"
gpu_train gpu "device: cuda"
gpu_train det1 "device: cuda, deterministic: true"
gpu_train det2 "device: cuda, deterministic: true"
CPU=$(run_dir cpu) GPU=$(run_dir gpu)
CK=$(printf 'step-%08d' "$H")
gpu_train cpu2gpu "device: cuda, resume: \"$CPU/train/checkpoints/$CK\""
gpu_train gpu2cpu "device: cpu, resume: \"$GPU/train/checkpoints/$CK\""

"$PY" - "$DAGRUN_RUNS_DIR" "$N" <<'P' || fail "the losses differ (above)"
import glob, json, os, sys
runs = sys.argv[1]
N = int(sys.argv[2])
H = N // 2
sys.path.insert(0, os.environ["DAGRUN_SOURCE_DIR"] + "/tests/gpu")
import train_losses
def losses(name):
    return train_losses.losses(runs, name)
close = train_losses.close
_, cpu = losses("cpu")
gd, gpu = losses("gpu")
assert sorted(cpu) == list(range(1, N + 1)) and sorted(gpu) == list(range(1, N + 1))
close("gpu vs cpu", gpu, cpu, list(range(1, N + 1)))
s = json.load(open(gd + "/out/summary.json"))
assert s["device"] == "cuda" and s["gpu_allocated_bytes"] > 0, s
print("gpu run:", s["device_reason"], s["gpu_allocated_bytes"], "bytes")
# resumed from the other device's step-H checkpoint: steps H+1-N
rd, c2g = losses("cpu2gpu")
assert sorted(c2g) == list(range(H + 1, N + 1)), sorted(c2g)
close("cpu checkpoint resumed on gpu", c2g, cpu, list(range(H + 1, N + 1)))
rd2, g2c = losses("gpu2cpu")
assert sorted(g2c) == list(range(H + 1, N + 1)), sorted(g2c)
close("gpu checkpoint resumed on cpu", g2c, gpu, list(range(H + 1, N + 1)))
assert "resumed from" in open(rd + "/attempt-1/log").read()
_, d1 = losses("det1")
_, d2 = losses("det2")
assert d1 == d2, [(s, d1[s], d2[s]) for s in d1 if d1[s] != d2[s]][:5]
print(f"deterministic: {N} identical losses, last", repr(d1[N]))
import os, re
def attention(name):
    log = open(glob.glob(f"{runs}/{name}/*/train")[0] + "/attempt-1/log").read()
    m = re.search(r"; attention: (.*?); recompute:", log)
    assert m, f"{name}: no attention in the log"
    return m.group(1)
print("gpu run's attention:", attention("gpu"))
want = os.environ.get("GPU_TEST_ATTENTION")
assert not want or want in attention("gpu"), (want, attention("gpu"))
assert "not cuDNN's: deterministic" in attention("det1"), attention("det1")
P
pass
