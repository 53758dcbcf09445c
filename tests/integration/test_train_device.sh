# The train stage's device, recompute and deterministic params, on a
# machine as CI has it (the GPU side is tests/gpu/):
# - device: auto trains, and says which device it chose and why (cpu and
#   "no GPU" here; cuda and the device count where a GPU is present);
# - where auto chose cpu, device: cuda fails: non-zero exit, the run
#   recorded failed, a message saying what is missing and to use
#   device: cpu or auto;
# - (device: cuda in a gang without GPUs: test_train_gang.sh);
# - bad values of device and recompute are refused by check, at the
#   value, naming the choices; one from a template when the task starts;
# - on the CPU, recompute: gelu and block train to the very weights of
#   none (dropout on), and the log gives the activations' size against
#   none's (a Llama's: test_train_llama.sh);
# - autocast: bf16 on the CPU follows fp32's loss curve within 2%.
. "$(dirname "$0")/lib.sh"

DATA=$(make_token_data dev 320)
MODEL='n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, batch_size: 4, threads: 1, samples: 0, eval_every: 0'

train_dag() { # NAME EXTRA_PARAMS [TASK_KEYS]
  cat > "$1.yaml" <<Y
dag: $1
tasks:
  train: {stage: train, ${3:-} with: {data: "$DATA", $MODEL, $2}}
Y
}

# auto: trains, says the device and the reason, in the log and summary.
train_dag auto "steps: 5, device: auto, recompute: gelu, deterministic: true"
run_dagrun run auto.yaml --plain
expect_rc 0
R=$(run_dir auto)
DEV=$(/usr/bin/python3 - "$R/train/out/summary.json" <<'P'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["steps"] == 5, s
d, why = s["device"], s["device_reason"]
if d == "cpu":
    assert why.startswith("device: auto, and no GPU: "), why
else:
    assert d == "cuda" and "CUDA device" in why, (d, why)
print(d)
P
) || fail "auto: $(cat "$R/train/out/summary.json")"
expect_in "$R/train/attempt-1/log" "device: $DEV (device: auto"
[ "$(task_field "$R" train state)" = success ] || fail "auto run not recorded success"
if [ "$DEV" = cpu ]; then
  expect_in "$R/train/attempt-1/log" "recompute: gelu; autocast: none; activations "

  # CPU recomputation: the same weights, bit for bit, and less memory.
  for rc in none gelu block; do
    train_dag "rc$rc" "steps: 12, device: cpu, dropout: 0.1, recompute: $rc"
    run_dagrun run "rc$rc.yaml" --plain
    expect_rc 0
  done
  for rc in gelu block; do
    cmp "$(run_dir rcnone)/train/checkpoints/step-00000012/model.safetensors" \
      "$(run_dir "rc$rc")/train/checkpoints/step-00000012/model.safetensors" ||
      fail "recompute: $rc trained other weights than recompute: none"
  done
  "$PY" - "$(run_dir rcnone)/train/attempt-1/log" "$(run_dir rcgelu)/train/attempt-1/log" \
    "$(run_dir rcblock)/train/attempt-1/log" <<'P' || fail "recompute's activations in the log"
import re, sys
acts = []
for path in sys.argv[1:]:
    m = re.search(r"recompute: (\w+); autocast: none; activations ([0-9.]+) MiB a micro-batch \(([0-9.]+) MiB with recompute: none\)", open(path).read())
    assert m, path
    acts.append(float(m.group(2)))
    assert float(m.group(3)) == acts[0], (m.group(0), acts)
assert acts[0] > acts[1] > acts[2], acts
print("activations: none %.2f, gelu %.2f, block %.2f MiB" % tuple(acts))
P
  # autocast: bf16 (emulated): the loss curve of fp32 within 2% at every
  # step, but not its bits; the log and the checkpoint's config say it.
  train_dag bf16 "steps: 60, device: cpu, autocast: bf16, lr: 0.003"
  train_dag fp32 "steps: 60, device: cpu, autocast: none, lr: 0.003"
  for d in bf16 fp32; do
    run_dagrun run "$d.yaml" --plain
    expect_rc 0
  done
  expect_in "$(run_dir bf16)/train/attempt-1/log" "autocast: bf16; activations"
  expect_in "$(run_dir bf16)/train/checkpoints/step-00000060/manifest.json" '"autocast":	"bf16"'
  "$PY" - "$(run_dir fp32)/train/metrics.jsonl" "$(run_dir bf16)/train/metrics.jsonl" <<'P' || fail "bf16's loss curve against fp32's"
import json, sys
def loss(p):
    return {m["step"]: m["value"] for m in map(json.loads, open(p)) if m["name"] == "loss"}
a, b = loss(sys.argv[1]), loss(sys.argv[2])
assert sorted(a) == sorted(b) == list(range(1, 61)), (len(a), len(b))
worst = max(abs(b[k] - a[k]) / a[k] for k in a)
assert worst < 0.02, worst
assert a[60] < a[1] - 0.5 and b[60] < b[1] - 0.5, (a[1], a[60], b[1], b[60])
assert any(a[k] != b[k] for k in a), "bf16 gave fp32's very losses: no rounding"
print("bf16 vs fp32 over 60 steps: largest relative loss difference %.2g; final %.4f vs %.4f" % (worst, b[60], a[60]))
P
  train_dag badac "steps: 5, autocast: fp16"
  run_dagrun check badac.yaml
  expect_rc 2
  expect_in "$T/err" "param 'autocast': 'fp16' is not one of none, bf16"

  # device: cuda where there is no GPU (or no CUDA in this build).
  train_dag cuda "steps: 5, device: cuda"
  run_dagrun run cuda.yaml --plain
  expect_rc 1
  expect_in "$T/out" "device: cuda, but"
  expect_in "$T/out" "use device: cpu or auto"
  RC2=$(run_dir cuda)
  [ "$(task_field "$RC2" train state)" = failed ] ||
    fail "device: cuda run recorded as '$(task_field "$RC2" train state)', not failed"
  [ ! -d "$RC2/train/checkpoints" ] || [ -z "$(ls "$RC2/train/checkpoints")" ] ||
    fail "device: cuda without a GPU wrote checkpoints"
else
  echo "a GPU is present: device: cuda's no-GPU error is not testable here"
fi

# Bad values: refused by check (and so by run, before anything starts) at
# the value's line:col, naming the choices.
train_dag baddev "steps: 5, device: gpu"
run_dagrun check baddev.yaml
expect_rc 2
COL=$(( $(sed -n 3p baddev.yaml | grep -bo 'gpu' | cut -d: -f1) + 1 ))
expect_in "$T/err" "baddev.yaml:3:$COL: error: task 'train': stage 'train' param 'device': 'gpu' is not one of auto, cpu, cuda; did you mean 'cpu'?"
run_dagrun run baddev.yaml --plain
expect_rc 2
expect_in "$T/err" "param 'device': 'gpu' is not one of auto, cpu, cuda"
[ ! -d "$DAGRUN_RUNS_DIR/baddev" ] || fail "device: gpu started a run"
train_dag badrc "steps: 5, recompute: all"
run_dagrun check badrc.yaml
expect_rc 2
expect_in "$T/err" "param 'recompute': 'all' is not one of none, gelu, block"
# A value that only a template gives is checked when the task starts:
# the task fails before the stage runs, with the same words.
cat > late.yaml <<Y
dag: late
tasks:
  pick: {stage: outputs, with: {key: dev, value: tpu}}
  train: {stage: train, needs: [pick], with: {data: "$DATA", $MODEL, steps: 5, device: "\${tasks.pick.outputs.dev}"}}
Y
run_dagrun check late.yaml
expect_rc 0
run_dagrun run late.yaml --plain
expect_rc 1
expect_in "$T/out" "param 'device': 'tpu' is not one of auto, cpu, cuda"
train_dag baddet "steps: 5, deterministic: maybe"
run_dagrun check baddet.yaml
expect_rc 2
expect_in "$T/err" "baddet.yaml:3:"
expect_in "$T/err" "param 'deterministic' of stage 'train'"
pass
