# A training task stopped by its timeout (SIGTERM) writes a checkpoint,
# and the retry, with resume: auto, continues from it instead of starting
# over: the run succeeds with every step done once.
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
pass
