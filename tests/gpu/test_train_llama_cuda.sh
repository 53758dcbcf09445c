# The train stage with device: cuda on a Llama model (GQA, 4 query heads
# on 2 key/value heads of 16 channels, an untied head) against device:
# cpu, on real token files (GPU_TEST_STEPS steps, default 20, an even
# number; the CPU emulator's ctest trains 6):
# - the GPU's loss (with recompute: block, which the CPU engine has not
#   for a Llama) is within 5% of the CPU's at every step and 2% on
#   average; the summary says device cuda;
# - a checkpoint written on the GPU resumes on the CPU, continuing with
#   the GPU's losses (same tolerance);
# - deterministic: true: two GPU runs give bitwise identical losses.
. "$(dirname "$0")/gpu_env.sh"

gpu_steps 20 4
DATA=$(make_token_data llama 320)
MODEL='model: llama-tiny, n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 64, intermediate_size: 128, head: untied, block_size: 32'
COMMON="data: \"$DATA\", $MODEL, seq_len: 32, batch_size: 4, steps: $N, lr: 0.003, warmup: 2, eval_every: 0, samples: 0, spike_policy: none, checkpoint_every: $H, seed: 7$EVAL"

gpu_train cpu "device: cpu"
gpu_train gpu "device: cuda, recompute: block"
gpu_train det1 "device: cuda, deterministic: true"
gpu_train det2 "device: cuda, deterministic: true"
GPU=$(run_dir gpu)
CK=$(printf 'step-%08d' "$H")
gpu_train gpu2cpu "device: cpu, resume: \"$GPU/train/checkpoints/$CK\""
expect_in "$GPU/train/attempt-1/log" "recompute: block"

"$PY" - "$DAGRUN_RUNS_DIR" "$N" <<'P' || fail "the losses differ (above)"
import glob, json, os, sys
runs, N = sys.argv[1], int(sys.argv[2])
H = N // 2
sys.path.insert(0, os.environ["DAGRUN_SOURCE_DIR"] + "/tests/gpu")
import train_losses
def losses(name):
    return train_losses.losses(runs, name)
close = train_losses.close
_, cpu = losses("cpu")
gd, gpu = losses("gpu")
assert sorted(gpu) == list(range(1, N + 1)), sorted(gpu)
close("llama gpu vs cpu", gpu, cpu, list(range(1, N + 1)))
s = json.load(open(gd + "/out/summary.json"))
assert s["device"] == "cuda" and s["gpu_allocated_bytes"] > 0, s
rd, g2c = losses("gpu2cpu")
assert sorted(g2c) == list(range(H + 1, N + 1)), sorted(g2c)
close("llama gpu checkpoint resumed on cpu", g2c, gpu,
      list(range(H + 1, N + 1)))
_, d1 = losses("det1")
_, d2 = losses("det2")
assert d1 == d2, [(s, d1[s], d2[s]) for s in d1 if d1[s] != d2[s]][:5]
print(f"deterministic: {N} identical losses, last", repr(d1[N]))
P
pass
