#!/usr/bin/env bash
# The model-parallel layouts' check-time shape errors, memory report
# and rank placement (issue 25), on a 2-layer GPT (width 32, 4 heads,
# vocabulary 300 padded to 320) under mpirun, 3 steps a run.
# - Check: `dagrun check` refuses, at the value that decides it, heads
#   that tensor_parallel does not divide (n_head 3; a Llama preset's 6
#   heads by 4), layers that pipeline_parallel does not divide (gpt-tiny
#   with n_layer 3), and a world_size that T x P does not divide; a
#   tensor_parallel of run time (an upstream's output) is left to the
#   start; `dagrun run` refuses the same before anything runs.
# - Memory: T=2 and P=2 on 2 ranks write every rank's figures inside the
#   step (params, grads, optimizer, activations, the whole model's
#   arrays among them, the process's measured peak resident memory)
#   beside the layout's formula, in the log and in summary.json. A
#   tensor rank other than 0 keeps no whole-model array (the cut: it
#   held 4 x 36736 bytes of parameters), rank 0 keeps the whole model
#   and its one-process optimizer (for validation and checkpoints),
#   which the report says is no better than one process; a pipeline
#   stage keeps its own ranges alone (rank 0 the whole model's
#   parameters beside them, as with tensor parallel).
# - Placement: DAGRUN_TEST_NODES (for tests only: it stands for the
#   ranks' host names, since two real nodes cannot be had on one
#   machine) puts ranks 0 and 2 on node a, 1 and 3 on node b; T=2 x D=2
#   then makes ranks 0 and 2 one tensor group, 1 and 3 the other (by
#   rank order, 0-1 and 2-3, both groups would span the two nodes), and
#   still trains one process's losses; 3 ranks on one node with T=2 is
#   refused, naming the nodes and their counts.
. "$(dirname "$0")/lib.sh"

use_train_gang

cat > shapes.yaml <<'Y'
dag: shapes
tasks:
  up: {stage: exec, with: {command: ["true"]}}
  heads:
    stage: train
    world_size: 2
    launcher: mpirun
    with: {data: /nowhere, n_head: 3, tensor_parallel: 2}
  layers:
    stage: train
    world_size: 4
    launcher: mpirun
    with: {data: /nowhere, model: gpt-tiny, n_layer: 3, pipeline_parallel: 2}
  world:
    stage: train
    world_size: 6
    launcher: mpirun
    with: {data: /nowhere, tensor_parallel: 2, pipeline_parallel: 2}
  llama:
    stage: train
    world_size: 4
    launcher: mpirun
    with: {data: /nowhere, model: llama-small, tensor_parallel: 4}
  fine:
    stage: train
    world_size: 4
    launcher: mpirun
    with: {data: /nowhere, tensor_parallel: 2, pipeline_parallel: 2}
  later:
    stage: train
    needs: [up]
    world_size: 2
    launcher: mpirun
    with: {data: /nowhere, n_head: 3, tensor_parallel: "${tasks.up.outputs.tp}"}
Y
run_dagrun check shapes.yaml
expect_rc 2
cat > shapes.want <<'W'
shapes.yaml:8:56: error: task 'heads': tensor_parallel 2 does not divide the model's 3 heads (each rank gets n_head / tensor_parallel whole heads)
shapes.yaml:13:76: error: task 'layers': pipeline_parallel 2 does not divide the model's 3 layers (each stage gets n_layer / pipeline_parallel contiguous layers)
shapes.yaml:16:17: error: task 'world': world_size 6 is not a multiple of tensor_parallel x pipeline_parallel 4 (the gang is data-parallel replicas of tensor_parallel x pipeline_parallel ranks each)
shapes.yaml:23:65: error: task 'llama': tensor_parallel 4 does not divide the model's 6 heads (each rank gets n_head / tensor_parallel whole heads)
shapes.yaml: 4 errors
W
diff shapes.want "$T/err" || fail "check: $(cat "$T/out" "$T/err")"
printf 'dag: runshape\ntasks:\n  t: {stage: train, world_size: 2, launcher: mpirun, with: {data: /nowhere, n_head: 3, tensor_parallel: 2}}\n' > runshape.yaml
run_dagrun run runshape.yaml --plain
[ "$RC" -ne 0 ] || fail "run: exit 0"
expect_in "$T/err" "runshape.yaml:3:105: error: task 't': tensor_parallel 2 does not divide the model's 3 heads"
[ ! -e "$DAGRUN_RUNS_DIR/runshape" ] || fail "run: a run was started: $(ls -R "$DAGRUN_RUNS_DIR/runshape")"

DATA=$(make_token_data mpl 300)
MODEL="data: \"$DATA\", n_layer: 2, n_head: 4, n_embd: 32, block_size: 32, threads: 1, steps: 3, lr: 0.003, warmup: 1, eval_every: 0, eval_batches: 2, samples: 0, spike_policy: none, checkpoint_every: 0"

# A tensor_parallel of run time (tests/plugins/outputs.c's output) passes
# the check and is refused at start, with the same words.
cat > later.yaml <<Y
dag: later
tasks:
  tp: {stage: outputs, with: {key: tp, value: "2"}}
  train:
    stage: train
    needs: [tp]
    world_size: 2
    launcher: mpirun
    $GANG_ENV
    with: {${MODEL/n_head: 4, n_embd: 32/n_head: 3, n_embd: 48}, tensor_parallel: "\${tasks.tp.outputs.tp}"}
Y
run_dagrun check later.yaml
expect_rc 0
run_dagrun run later.yaml --plain
[ "$RC" -ne 0 ] || fail "later: exit code 0"
grep -rqF "tensor_parallel 2 does not divide the model's 3 heads" "$(run_dir later)/train" ||
  fail "later: not refused at start: $(cat "$(run_dir later)"/train/attempt-*/log)"

# mem_check RUN PY: PY (Python, with s the summary.json, m its memory,
# ranks its ranks) holds for RUN.
mem_check() {
  $PY - "$(run_dir "$1")/train/out/summary.json" "$2" <<'P' || fail "$1: memory: $(cat "$(run_dir "$1")/train/out/summary.json")"
import json, sys
s = json.load(open(sys.argv[1]))
m = s["memory"]
ranks = m["ranks"]
exec(sys.argv[2])
P
}

# Tensor parallel: the shards of 36736 parameters (19104 on rank 0).
gang_dag t2 "$MODEL, batch_size: 2, tensor_parallel: 2"
expect_rc 0
LOG=$(run_dir t2)/train/attempt-1/log
expect_in "$LOG" "placement: 2 ranks on 1 node, tensor groups of 2;"
expect_in "$LOG" "rank 0 memory inside the step (the layout's formula for its part): params 0.21 (0.07) MiB, of them the whole model's 0.14;"
expect_in "$LOG" "rank 1 memory inside the step (the layout's formula for its part): params 0.07 (0.07) MiB, of them the whole model's 0.00; grads 0.07 (0.07) MiB, of them the whole model's 0.00;"
mem_check t2 '
assert [r["rank"] for r in ranks] == [0, 1], ranks
for r in ranks:
    assert r["peak"]["params"] == r["formula"]["params"] + r["whole_model"]["params"], r
    assert r["peak"]["acts"] >= r["formula"]["acts"] > 0 and r["rss_peak"] > 0, r
    assert r["whole_model"]["grads"] == 0, r
assert ranks[0]["whole_model"]["params"] == 4 * 36736 and ranks[0]["formula"]["params"] == 4 * 19104, ranks
assert ranks[1]["whole_model"]["params"] == 0, ranks
assert ranks[0]["peak"]["optim"] == 8 * 19104 + 8 * 36736 and ranks[1]["peak"]["optim"] == ranks[1]["formula"]["optim"], ranks
w = m["worse_than_one_process"]
assert len(w) == 2 and w[0].startswith("rank 0: the parameters") and w[1].startswith("rank 0: the optimizer state"), m'

# Pipeline parallel: each stage keeps its own ranges (stage 1 its layer,
# ln_f and its copy of the tied wte: 24032 floats), rank 0 the whole
# model's parameters beside its stage's (validation, checkpoints); no
# rank keeps the whole gradient array. Stage 0's gradients in the step
# add the tied wte's buffer (11264 floats of wte and wpe's group).
gang_dag p2 "$MODEL, batch_size: 2, grad_accum: 2, pipeline_parallel: 2"
expect_rc 0
LOG=$(run_dir p2)/train/attempt-1/log
expect_in "$LOG" "rank 1 memory inside the step (the layout's formula for its part): params 0.09 (0.09) MiB, of them the whole model's 0.00; grads 0.09 (0.09) MiB, of them the whole model's 0.00;"
mem_check p2 '
for r in ranks:
    assert r["whole_model"]["grads"] == 0 and r["peak"]["acts"] > 0, r
    assert r["peak"]["params"] == r["formula"]["params"] + r["whole_model"]["params"], r
    assert r["formula"]["params"] < 4 * 36736, r
assert ranks[0]["whole_model"]["params"] == 4 * 36736 and ranks[1]["whole_model"]["params"] == 0, ranks
assert ranks[1]["formula"]["params"] == 4 * 24032, ranks
assert ranks[0]["peak"]["grads"] == ranks[0]["formula"]["grads"] + 4 * 11264, ranks[0]
w = m["worse_than_one_process"]
assert len(w) == 2 and all(x.startswith("rank 0: ") for x in w), m'

# Placement: two "nodes" of this machine (DAGRUN_TEST_NODES, for tests
# only), each rank's own log line saying where it sits.
printf 'dag: one\ntasks:\n  train: {stage: train, with: {%s}}\n' "$MODEL, batch_size: 4" > one.yaml
run_dagrun run one.yaml --plain
expect_rc 0
losses "$(run_dir one)" > one.losses
NODES_ENV="${GANG_ENV%\}}, DAGRUN_TEST_NODES: \"a,b,a,b\"}"
GANG_ENV=$NODES_ENV gang_dag tab "$MODEL, batch_size: 2, tensor_parallel: 2" 4
expect_rc 0
R=$(run_dir tab)
expect_in "$R/train/attempt-1/log" "placement: 4 ranks on 2 nodes, tensor groups of 2; a: 2 ranks from 0 to 2 at positions 0-1; b: 2 ranks from 1 to 3 at positions 2-3"
grep -rqF "tensor parallel: rank 2 is shard 1 of 2" "$R/train" || fail "tab: rank 2 is not shard 1: $(grep -rh "tensor parallel: rank" "$R/train")"
grep -rqF "tensor parallel: rank 1 is shard 0 of 2 (heads 0-1 of 4, MLP columns 0-63 of 128, vocabulary rows 0-159 of 320; 19104 of the model's 36736 parameters), 1 micro-batches (grad_accum) of 2 x 32; data-parallel replica 1 of 2" "$R/train" ||
  fail "tab: rank 1 is not shard 0 of replica 1: $(grep -rh "tensor parallel: rank" "$R/train")"
losses "$R" > tab.losses
same_losses one.losses tab.losses 1e-4

GANG_ENV="${GANG_ENV%\}}, DAGRUN_TEST_NODES: \"a,a,a,b\"}" gang_refused split \
  "tensor_parallel 2: a tensor group would span two nodes (its all-reduces, four a block each step, over the network): give every node a multiple of 2 ranks; ranks a node: a 3, b 1" \
  "$MODEL, batch_size: 2, tensor_parallel: 2" 4
GANG_ENV="${GANG_ENV%\}}, DAGRUN_TEST_NODES: \"a,b\"}" gang_refused short \
  "placement: DAGRUN_TEST_NODES \"a,b\" has no name of 1-63 characters for rank" \
  "$MODEL, batch_size: 2, tensor_parallel: 2" 4

pass
