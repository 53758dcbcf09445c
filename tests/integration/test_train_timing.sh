# Where the train stage's time goes: every step reports its data wait,
# forward, backward, optimizer and communication time and its total, which
# add up; the cumulative tokens grow by a global batch a step; flops_per_s
# and mfu follow the stated formula; a slow loader (the test hook
# DAGRUN_TEST_LOADER_DELAY_MS) makes the stage warn, once, saying what to
# change, and a normal one does not.
. "$(dirname "$0")/lib.sh"

DATA=$(make_token_data tt 320)
# Big enough that a step takes milliseconds, so that the loader's thread
# (a few microseconds a batch) is nowhere near 5% of it.
MODEL='n_layer: 2, n_head: 2, n_embd: 64, block_size: 64, batch_size: 8, threads: 1, samples: 0, eval_every: 0, eval_batches: 2'

train_dag() { # NAME EXTRA_PARAMS
  cat > "$1.yaml" <<Y
dag: $1
tasks:
  train: {stage: train, with: {data: "$DATA", $MODEL, $2}}
Y
}

# check_times RUN_DIR STEPS ACCUM PEAK_TFLOPS: the per-step metrics.
check_times() {
  /usr/bin/python3 - "$1/train/metrics.jsonl" "$2" "$3" "$4" <<'P'
import json, sys
path, steps, accum, peak = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
B, T, L, C = 8, 64, 2, 64
m = {}
for line in open(path):
    j = json.loads(line)
    m.setdefault(j["name"], {})
    assert j["step"] not in m[j["name"]], ("twice", j)
    m[j["name"]][j["step"]] = j["value"]
phases = ["time_data_s", "time_forward_s", "time_backward_s",
          "time_optimizer_s", "time_comm_s"]
names = phases + ["step_time_s", "tokens", "flops_per_s"] + (["mfu"] if peak > 0 else [])
for n in names:
    assert sorted(m.get(n, {})) == list(range(1, steps + 1)), (n, sorted(m.get(n, {}))[:5])
if peak <= 0:
    assert "mfu" not in m, "mfu without peak_tflops"
N = m["parameters"][0] - 64 * C            # all but the position embeddings
fpt = 6 * N + 6 * L * C * T                # FLOPs per token
per_step = B * T * accum
for s in range(1, steps + 1):
    total = m["step_time_s"][s]
    parts = [m[p][s] for p in phases]
    assert all(p >= 0 for p in parts) and total > 0, (s, parts, total)
    assert m["time_comm_s"][s] == 0, s
    assert m["time_forward_s"][s] > 0 and m["time_backward_s"][s] > 0, s
    assert 0.5 * total <= sum(parts) <= 1.05 * total, (s, parts, total)
    assert m["tokens"][s] == s * per_step, (s, m["tokens"][s])
    want = fpt * per_step / total
    assert abs(m["flops_per_s"][s] - want) <= 1e-6 * want, (s, m["flops_per_s"][s], want)
    if peak > 0:
        assert abs(m["mfu"][s] - want / (peak * 1e12)) <= 1e-6 * want / (peak * 1e12), s
print("steps", steps, "mean step %.2f ms" % (1e3 * sum(m["step_time_s"].values()) / steps),
      "data %.3f ms" % (1e3 * sum(m["time_data_s"].values()) / steps))
P
}

# A normal run: 60 steps of 2 micro-batches, with a peak for mfu.
train_dag timing "steps: 60, grad_accum: 2, peak_tflops: 0.5"
run_dagrun run timing.yaml --plain
expect_rc 0
R=$(run_dir timing)
check_times "$R" 60 2 0.5 || fail "step times: see above"
expect_not_in "$R/train/attempt-1/log" "data wait is"
# No peak, no mfu.
train_dag nopeak "steps: 12"
run_dagrun run nopeak.yaml --plain
expect_rc 0
check_times "$(run_dir nopeak)" 12 1 0 || fail "step times without peak_tflops"

# A slow loader: each batch takes 4 times a step's compute to make (as
# measured above: a sanitizer build is slower), so the training thread
# waits for data most of the time. The stage warns, with the share and
# what to change, at the end of the first 50-step window, and not again at
# the end of the run (10 more steps).
DELAY=$(/usr/bin/python3 -c '
import json, sys
t = [j["value"] for j in map(json.loads, open(sys.argv[1])) if j["name"] == "step_time_s"]
print(max(20, round(4000 * sum(t) / len(t))))
' "$(run_dir nopeak)/train/metrics.jsonl")
echo "loader delay: $DELAY ms a batch"
train_dag slow "steps: 60"
DAGRUN_TEST_LOADER_DELAY_MS=$DELAY run_dagrun run slow.yaml --plain
expect_rc 0
RS=$(run_dir slow)
check_times "$RS" 60 1 0 || fail "step times with a slow loader"
expect_in "$RS/train/attempt-1/log" "% of step time (steps 1-50:"
expect_in "$RS/train/attempt-1/log" "raise the loader's prefetch depth (train param prefetch, now 2)"
expect_in "$T/out" "train: WARN: data wait is"
n=$(grep -c "data wait is" "$RS/train/attempt-1/log")
[ "$n" -eq 1 ] || fail "expected one data-wait warning, got $n"
share=$(sed -n 's/.*data wait is \([0-9]*\)% of step time.*/\1/p' "$RS/train/attempt-1/log")
[ "$share" -ge 30 ] || fail "data wait share $share%, expected far above 5%"

# Without prefetch the advice is to turn it on; a short run (12 steps) is
# checked at its end.
train_dag slow0 "steps: 12, prefetch: 0"
DAGRUN_TEST_LOADER_DELAY_MS=$DELAY run_dagrun run slow0.yaml --plain
expect_rc 0
expect_in "$(run_dir slow0)/train/attempt-1/log" "(train param prefetch is 0): set prefetch: 2"

train_dag badpeak "peak_tflops: -1"
run_dagrun run badpeak.yaml --plain
expect_rc 1
expect_in "$T/out" "peak_tflops must be 0 (unknown) or a positive number"
train_dag badprefetch "prefetch: -1"
run_dagrun run badprefetch.yaml --plain
expect_rc 1
expect_in "$T/out" "prefetch"
pass
