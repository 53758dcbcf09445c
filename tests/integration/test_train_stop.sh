# A training task stopped by its timeout (SIGTERM) writes a checkpoint,
# and the retry, with resume: auto, continues from it instead of starting
# over: the run succeeds with every step done once.
. "$(dirname "$0")/lib.sh"

DATA=$(make_token_data s 320)
# Enough steps to outlast one 3 s attempt on any machine; each attempt
# makes progress, so some retry finishes.
cat > stop.yaml <<Y
dag: stop
tasks:
  train:
    stage: train
    timeout: 3s
    kill_grace: 20s
    retries: 5
    retry_delay: 100ms
    with: {data: "$DATA", n_layer: 2, n_head: 2, n_embd: 64, block_size: 64,
           batch_size: 8, threads: 2, steps: 1500, checkpoint_every: 0,
           eval_every: 0, samples: 0}
Y
run_dagrun run stop.yaml --plain
expect_rc 0
R=$(run_dir stop)
[ -d "$R/train/attempt-2" ] || fail "the first attempt was not stopped by its timeout; make the task longer"
expect_in "$R/train/attempt-1/log" "stopped at step"
expect_in "$R/train/attempt-2/log" "resumed from"
/usr/bin/python3 - "$R/train/out/summary.json" <<'P' || fail "summary: $(cat "$R/train/out/summary.json")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["steps"] == 1500, s
P
pass
