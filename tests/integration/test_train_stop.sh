# A training task stopped by its timeout (SIGTERM) writes a checkpoint,
# and the retry, with resume: auto, continues from it instead of starting
# over: the run succeeds with every step done once. The same after a
# kill -9 of dagrun and `dagrun resume`, with every step's metrics kept.
. "$(dirname "$0")/lib.sh"

DATA=$(make_token_data s 320)
MODEL="data: \"$DATA\", n_layer: 2, n_head: 2, n_embd: 64, block_size: 64, batch_size: 8, threads: 1, checkpoint_every: 0, eval_every: 0, samples: 0"
# Calibrate: how many steps this machine does in 3 s, so that the task
# below needs about two 3-second attempts here, whatever the machine.
cat > calib.yaml <<Y
dag: calib
tasks:
  train: {stage: train, with: {$MODEL, steps: 200}}
Y
run_dagrun run calib.yaml --plain
expect_rc 0
STEPS=$(/usr/bin/python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
print(max(100, int(1.7 * 3.0 * s["tokens_per_s"] / (8 * 64))))
' "$(run_dir calib)/train/out/summary.json")
# Each attempt makes progress, so some retry finishes.
cat > stop.yaml <<Y
dag: stop
tasks:
  train:
    stage: train
    timeout: 3s
    kill_grace: 20s
    retries: 8
    retry_delay: 100ms
    with: {$MODEL, steps: $STEPS}
Y
run_dagrun run stop.yaml --plain
expect_rc 0
R=$(run_dir stop)
[ -d "$R/train/attempt-2" ] || fail "the first attempt was not stopped by its timeout; make the task longer"
expect_in "$R/train/attempt-1/log" "stopped at step"
expect_in "$R/train/attempt-2/log" "resumed from"
/usr/bin/python3 - "$R/train/out/summary.json" "$STEPS" <<'P' || fail "summary: $(cat "$R/train/out/summary.json")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["steps"] == int(sys.argv[2]), s
P

# dagrun killed (-9) mid-training: the worker stops the attempt, and the
# step it finishes on its way out, whose checkpoint it writes, is in
# metrics.jsonl too (it was lost with the pipe): after `dagrun resume`
# every step has its loss.
cat > dead.yaml <<Y
dag: dead
tasks:
  train: {stage: train, cache: false, with: {$MODEL, steps: $((STEPS / 2))}}
Y
"$DAGRUN" run dead.yaml --plain >dead.out 2>&1 &
PID=$!
has_loss() { grep -q '"name":"loss"' "$DAGRUN_RUNS_DIR"/dead/*/train/metrics.jsonl; }
wait_until 20 has_loss || fail "training never reported a loss: $(cat dead.out)"
kill -9 "$PID"
wait "$PID" 2>/dev/null || true
R=$(run_dir dead)
wait_until 20 grep -q "stopped at step" "$R/train/attempt-1/log" \
  || fail "the orphaned attempt did not stop: $(tail -5 "$R/train/attempt-1/log")"
CK=$(sed -n 's/.*stopped at step \([0-9]*\); checkpoint.*/\1/p' "$R/train/attempt-1/log")
"$PY" - "$R/train/metrics.jsonl" "$CK" <<'P' || fail "metrics after dagrun died: $(tail -3 "$R/train/metrics.jsonl")"
import json, sys
steps = [m["step"] for m in map(json.loads, open(sys.argv[1])) if m["name"] == "loss"]
assert max(steps) == int(sys.argv[2]), (max(steps), sys.argv[2])
P
run_dagrun resume "$(basename "$R")" --plain
expect_rc 0
"$PY" - "$R/train/metrics.jsonl" "$((STEPS / 2))" <<'P' || fail "metrics after resume: $(cat "$R/train/metrics.jsonl" | grep loss | tail -3)"
import json, sys
steps = {m["step"] for m in map(json.loads, open(sys.argv[1])) if m["name"] == "loss"}
assert steps == set(range(1, int(sys.argv[2]) + 1)), sorted(set(range(1, int(sys.argv[2]) + 1)) - steps)
P
pass
