#!/usr/bin/env bash
# Tensor parallelism (gpu/tensor/tensor.h) in the train stage on CPU
# ranks under mpirun: a 2-layer GPT (width 32, 4 heads) on a vocabulary
# of 300 ids (padded to 320: the last rank's rows of wte hold the 20
# padding rows), 20 steps.
# - tensor_parallel 2 on 2 ranks (2 heads a rank), batch_size 2, and
#   tensor_parallel 4 on 4 (one head a rank): every step's loss within
#   1e-4 (relative) of one process's of batch_size 2, its val_loss within
#   1e-5 (relative), the final weights within 1e-4 of the largest weight
#   (the ZeRO and pipeline gangs' bound). The only differences are the
#   order of float sums (a row-split product is two partial products
#   added, the softmax's denominator two partial sums), which AdamW
#   carries on for 20 steps; AdamW divides each gradient by its own
#   scale, so an element whose gradient is rounding noise (the key
#   bias's, zero in exact arithmetic) moves up to lr a step whichever
#   way the noise points. Measured: losses 1e-7 apart, weights 8e-6 of
#   the largest at worst (single elements; the mean difference is near
#   3e-8). Each check fails with the thing it checks broken:
#   without the forward all-reduce of a row-split product the losses
#   are 6.5e-3 apart, without the MLP's backward one 3e-3, with each
#   rank's own row maxima in the cross-entropy 1.2e-2;
#   without the lookup's all-reduce, the replicas' gradient mean, the
#   second micro-batch, the optimizer state on resume or the gather of
#   rank 1's shards, the stages' gradient sum or the first stage's
#   gather (T x P), the check that covers it fails; and each refusal
#   removed, its run succeeds (n_head 3 over 2 ranks trains, wrongly).
# - 2 replicas of tensor groups of 2 on 4 ranks (rank r is shard r % 2
#   of replica r / 2), batch_size 2 and grad_accum 2: one process of
#   batch_size 4 and grad_accum 2 (the same global batch, drawn in 2
#   micro-batches of 4 rows, each replica training its 2 rows of each),
#   within the same bounds, val_loss too (the windows of batches of 4);
#   and the losses of one process of batch_size 8 (4x the micro-batch).
# - T=2 x P=2 on 4 ranks (1F1B over 2 micro-batches of 4): one process
#   of batch_size 4 and grad_accum 2, within the same bounds; its
#   checkpoint resumes as one process and as a ZeRO gang of 4 ranks;
#   over 4 micro-batches of 2, 1F1B (stage 0 keeping 2 micro-batches'
#   activations) and GPipe (4) give the same losses to the bit.
# - D=2 x T=2 at zero_stage 0, 1 and 2 (ZeRO over the replicas: each rank
#   keeps half its shards' optimizer state, at 2 half their gradient
#   between steps, the log's figures checked): one process's losses and
#   weights within the bounds above, and each other's losses; the
#   zero_stage 1 run's checkpoint (the state's halves gathered to rank
#   0) resumes as one process with its losses, and it resumes one
#   process's.
# - D=2 x T=2 at zero_stage 3 (FSDP: each rank keeps half of each group
#   of its shards, a group gathered for its forward and again for its
#   backward, its gradient reduce-scattered once final): the same bounds
#   against one process and stage 1 (measured: losses 1.1e-7 apart,
#   weights 3.4e-6 of the largest); the log's figures and summary.json's
#   memory.ranks[] against the formula, below stage 2's (rank 0 alone
#   keeps the whole model beside); its checkpoint resumes as one process
#   and as D x T at zero_stage 1, and it resumes one process's, all with
#   one process's losses of steps 11-20; with one layer beside the tied
#   embedding the log says stage 3's peaks are no better than stage 2's.
#   Without the micro-batches' sum into the slices, the gather of the
#   parameters' slices for the checkpoint, the parameters' or the
#   state's pieces taken on resume, a layer's release after its forward
#   or the count of the gathered groups, a check fails.
# - T=2 x P=2 x D=2 on 8 ranks at zero_stage 3 (each rank's groups cut
#   from its stage's part, gathered per pass of each micro-batch): one4's
#   losses and weights within the bounds above (measured: losses 2.7e-8
#   apart, weights 4.1e-6 of the largest), its val_loss, and the same
#   layout at zero_stage 2's losses within 1e-4 (not to the bit: stage
#   3 reduces each micro-batch's gradient, 2 the step's sum); every
#   rank's parameters between steps below stage 2's (summary.json) and
#   its figures inside the step the formula's, the log's line and its
#   warning that with one layer a stage the peak is no better than stage
#   2's; its step-10 checkpoint resumes as one process, and one4's as the
#   gang, with one4's losses of steps 11-20; its final checkpoint is
#   validated and exported. Without a layer group's gather, the tied
#   embedding's sum over the stages, its copy left out of the clipping
#   norm, the replicated gradient's reduction on the last stage, the
#   gather of the parameters or of the state for the checkpoint, the
#   parameters or the state taken on resume, or with the memory formula
#   of one stage, a check fails. (8 ranks, these 5 runs: 2.5 s.)
# - The checkpoints are one process's: one process resumes the T=2 run's
#   step-10 checkpoint and a T=2 run resumes one process's, both with one
#   process's losses of steps 11-20; the T=2 run's final checkpoint is
#   validated and exported downstream.
# - Refused at start with the numbers: n_head 3 with tensor_parallel 2,
#   a padded vocabulary of 320 with 3, world_size 3 with 2, dropout, device: cuda, recompute, n_layer 3 with
#   pipeline_parallel 2 beside it, world_size 6 for 2 x 2, and
#   tensor_parallel without a gang. (A Llama: test_llama_parallel.)
. "$(dirname "$0")/lib.sh"

use_train_gang
ENV=$GANG_ENV

DATA=$(make_token_data tp 300)
MODEL="data: \"$DATA\", n_layer: 2, n_head: 4, n_embd: 32, block_size: 32, threads: 1, steps: 20, lr: 0.003, warmup: 2, eval_every: 10, samples: 0, spike_policy: none, batch_size: 2, checkpoint_every: 10"

one_process one "$MODEL"
ONE=$R1

# like REF NAME: run NAME succeeded with REF's losses (REF.losses) within
# 1e-4 relative and the final weights of REF's run ($R1) within 1e-4 of
# the largest weight; sets R to its run directory.
like() {
  expect_rc 0
  R=$(run_dir "$2")
  losses "$R" > "$2.losses"
  same_losses "$1.losses" "$2.losses" 1e-4
  same_weights "$R1/train/checkpoints/step-00000020/model.safetensors" \
    "$R/train/checkpoints/step-00000020/model.safetensors" 1e-4
}

# same_val A B: the two runs' val_loss within 1e-5 relative.
same_val() {
  /usr/bin/python3 -c "import json, sys; a, b = (json.load(open(f))['val_loss'] for f in sys.argv[1:]); assert abs(a - b) <= 1e-5 * a, (a, b)" \
    "$1/train/out/summary.json" "$2/train/out/summary.json" || fail "val_loss differs: $1 vs $2"
}

# summary_is KEYS VALUES: run $R's summary.json has VALUES (a Python
# tuple) at KEYS (comma-separated).
summary_is() {
  /usr/bin/python3 -c "import json, sys; s = json.load(open(sys.argv[1])); got = tuple(s[k] for k in sys.argv[2].split(',')); assert got == eval(sys.argv[3]), (got, s)" \
    "$R/train/out/summary.json" "$1" "$2" || fail "$R: summary $1 is not $2"
}

# downstream NAME WITH WORLD: a DAG NAME of a train gang of WORLD ranks
# with params WITH and, after it, validate on its final checkpoint and
# export of its checkpoints, run.
downstream() {
  cat > "$1.yaml" <<Y
dag: $1
tasks:
  train:
    stage: train
    world_size: $3
    launcher: mpirun
    $ENV
    with: {$2}
  validate: {stage: validate, needs: [train], with: {data: "$DATA", threads: 1, max_batches: 4, checkpoint: "\${tasks.train.outputs.checkpoint}"}}
  export: {stage: export, needs: [train], with: {model: "\${tasks.train.outputs.checkpoints}"}}
Y
  run_dagrun run "$1.yaml" --plain
}

# downstream_ok: run $R's validate gave a finite val_loss below 6 and its
# export wrote the model.
downstream_ok() {
  /usr/bin/python3 -c "import json, math, sys; v = json.load(open(sys.argv[1]))['val_loss']; assert math.isfinite(v) and v < 6, v" \
    "$R/validate/out/metrics.json" || fail "$R: validate: $(cat "$R/validate/out/metrics.json")"
  ls "$R/export/out/model/"*.safetensors >/dev/null || fail "$R: export: $(ls -R "$R/export/out")"
}

downstream t2 "$MODEL, tensor_parallel: 2" 2
like one t2
T2=$R
expect_in "$R/train/attempt-1/log" "tensor parallel: rank 0 is shard 0 of 2 (heads 0-1 of 4, MLP columns 0-63 of 128, vocabulary rows 0-159 of 320; 19104 of the model's 36736 parameters), 1 micro-batches (grad_accum) of 2 x 32; data-parallel replica 0 of 1 (global batch 1 x 2 x 1 = 2 sequences)"
summary_is tensor_parallel,data_parallel,world_size "(2, 1, 2)"
# Rank 0's communication over the 20 steps (comm_stats, the tensor
# group's split counted): per micro-batch, one all-reduce a sublayer each
# way, the lookup's and the head's, and the loss's sums.
/usr/bin/python3 - "$R/train/out/summary.json" <<'P' || fail "t2: comm: $(cat "$R/train/out/summary.json")"
import json, sys
c = json.load(open(sys.argv[1]))["comm"]
assert c["steps"] == 20, c
assert c["allreduce"]["calls"] >= 20 * 2 * 4 and c["allreduce"]["bytes"] > 0, c
assert "send" not in c or c["send"]["calls"] == 0, c
P
same_val "$R1" "$R"
downstream_ok

# Four ranks of one head each (and 80 vocabulary rows, the last rank's
# 60 ids and 20 padding rows).
gang_dag t4 "$MODEL, tensor_parallel: 4" 4
like one t4
expect_in "$R/train/attempt-1/log" "rank 0 is shard 0 of 4 (heads 0-0 of 4, MLP columns 0-31 of 128, vocabulary rows 0-79 of 320;"

# One process resumes the T=2 run's checkpoint, and T=2 one process's.
printf 'dag: t2o\ntasks:\n  train: {stage: train, with: {%s, resume: "%s"}}\n' \
  "$MODEL" "$T2/train/checkpoints/step-00000010" > t2o.yaml
run_dagrun run t2o.yaml --plain
resumed_as one t2o "resumed from $T2/train/checkpoints/step-00000010 at step 10" 1e-4
gang_dag o2t "$MODEL, tensor_parallel: 2, resume: \"$ONE/train/checkpoints/step-00000010\""
resumed_as one o2t "resumed from $ONE/train/checkpoints/step-00000010 at step 10" 1e-4

# Two replicas of a tensor group of 2, each micro-batch's 4 rows split
# between them, 2 micro-batches a step: one process of batch_size 4 and
# grad_accum 2 (its validation windows too: batches of 4), and, the
# losses, one process of batch_size 8 (the step's 8 rows in one batch).
one_process one8 "${MODEL/batch_size: 2/batch_size: 8}"
one_process one4 "${MODEL/batch_size: 2/batch_size: 4}, grad_accum: 2"
gang_dag dt "$MODEL, grad_accum: 2, tensor_parallel: 2" 4
like one4 dt
expect_in "$R/train/attempt-1/log" "2 micro-batches (grad_accum) of 2 x 32; data-parallel replica 0 of 2 (global batch 2 x 2 x 2 = 8 sequences)"
summary_is tensor_parallel,data_parallel,tokens "(2, 2, 20 * 8 * 32)"
same_losses one8.losses dt.losses 1e-4
same_val "$R1" "$R"
summary_is zero_stage "(1,)"
DT=$R
# ZeRO over the 2 replicas: dt ran at zero_stage 1 (the default), each
# rank keeping the optimizer state of half its shards' 19104 floats
# (9552 x AdamW's 2 floats x 4 bytes = 0.073 MiB), its gradients whole
# (the 19104 floats) and its reduced half. At 0 it keeps all the state,
# at 2 the half of the gradient alone between steps. The three train as
# one process (like: losses within 1e-4, weights) and as each other.
expect_in "$R/train/attempt-1/log" "rank 0 holds 0.073 MiB of parameters, 0.109 MiB of gradients (0.109 MiB at most in a step) and 0.073 MiB of optimizer state between steps (zero_stage 1 over 2 data-parallel replicas)"
for z in 0 2; do
  gang_dag dt$z "$MODEL, grad_accum: 2, tensor_parallel: 2, zero_stage: $z" 4
  like one4 dt$z
  same_losses dt.losses dt$z.losses 1e-4
done
expect_in "$(run_dir dt0)/train/attempt-1/log" "rank 0 holds 0.073 MiB of parameters, 0.073 MiB of gradients (0.073 MiB at most in a step) and 0.146 MiB of optimizer state between steps (zero_stage 0 over 2 data-parallel replicas)"
expect_in "$R/train/attempt-1/log" "rank 0 holds 0.073 MiB of parameters, 0.036 MiB of gradients (0.109 MiB at most in a step) and 0.073 MiB of optimizer state between steps (zero_stage 2 over 2 data-parallel replicas)"
# dt's step-10 checkpoint (the state's halves gathered from both
# replicas) resumes as one process with one4's losses of steps 11-20.
printf 'dag: dt2o\ntasks:\n  train: {stage: train, with: {%s, resume: "%s"}}\n' \
  "${MODEL/batch_size: 2/batch_size: 4}, grad_accum: 2" "$DT/train/checkpoints/step-00000010" > dt2o.yaml
run_dagrun run dt2o.yaml --plain
resumed_as one4 dt2o "resumed from $DT/train/checkpoints/step-00000010 at step 10" 1e-4
# and dt resumes one4's (each rank taking its slice of its shards' state).
gang_dag o2dt "$MODEL, grad_accum: 2, tensor_parallel: 2, resume: \"$R1/train/checkpoints/step-00000010\"" 4
resumed_as one4 o2dt "resumed from $R1/train/checkpoints/step-00000010 at step 10" 1e-4
ONE4=$R1

# zero_stage 3 (FSDP) over the 2 replicas: each rank keeps half of each
# group of its shards (the replicated tensors, 1472 floats; wte's rows,
# 5120; each layer's split tensors, 6256), 9552 floats, its parameter
# and gradient slices between steps. In the step it gathers the
# replicated group for the whole step, wte's for the lookup and again
# for the head (to the head's backward), a layer's for its forward and
# again for its backward; each group's gradient is reduce-scattered
# into the slices once final (a layer's after its backward, the
# replicated tensors' and wte's after the lookup's), through a spare of
# the largest piece (3128) with grad_accum 2. So at most, beside the
# slice, parameters 1472 + 6256 and gradients 1472 + 5120 + 6256 + 3128
# floats. The same bounds as stages 0-2 against one4 and dt.
gang_dag dt3 "$MODEL, grad_accum: 2, tensor_parallel: 2, zero_stage: 3" 4
like one4 dt3
same_losses dt.losses dt3.losses 1e-4
DT3=$R
expect_in "$R/train/attempt-1/log" "rank 0 holds 0.036 MiB of parameters (0.066 MiB at most in a step), 0.036 MiB of gradients (0.097 MiB at most in a step) and 0.073 MiB of optimizer state between steps (zero_stage 3 over 2 data-parallel replicas)"
! grep -q "no better than zero_stage 2" "$R/train/attempt-1/log" || fail "dt3: $(grep "no better" "$R/train/attempt-1/log")"
# summary.json's figures inside the step (the groups' buffers as the
# first step held them) are the formula's, below zero_stage 2's (dt2:
# the shards whole, their gradient and its slice); rank 0 keeps the
# whole model's parameters beside (validation, checkpoints), the others
# none.
/usr/bin/python3 - "$R/train/out/summary.json" "$(run_dir dt2)/train/out/summary.json" <<'P' || fail "dt3: memory: $(jq -c .memory "$R/train/out/summary.json")"
import json, sys
C, L, Vp, block, T, D = 32, 2, 320, 32, 2, 2
groups = [block * C + L * 6 * C + 2 * C,          # wpe, LayerNorms, biases
          Vp // T * C] + [C * 3 * C // T + 3 * C // T + C // T * C
                          + C * 4 * C // T + 4 * C // T + 4 * C // T * C] * L
pieces = [(n + D - 1) // D for n in groups]
S = sum(pieces)
assert S == 9552 and groups[1:3] == [5120, 6256], (S, groups)
params = 4 * (S + D * pieces[0] + max(D * p for p in pieces[1:]))
grads = 4 * (S + D * pieces[0] + D * pieces[1] + D * max(pieces[2:]) + max(pieces))
whole = 4 * 36736
ranks = json.load(open(sys.argv[1]))["memory"]["ranks"]
for r in ranks:
    mine = whole if r["rank"] == 0 else 0
    assert r["whole_model"]["params"] == mine, r
    assert r["peak"]["params"] == mine + params and r["formula"]["params"] == params, (r, params)
    assert r["peak"]["grads"] == grads and r["formula"]["grads"] == grads, (r, grads)
two = json.load(open(sys.argv[2]))["memory"]["ranks"][1]
assert two["peak"]["params"] == 4 * 19104 > params and two["peak"]["grads"] > grads, (two, params, grads)
P
# Its step-10 checkpoint (the slices gathered over the replicas) resumes
# as one process and as D x T at zero_stage 1 with one4's losses of steps
# 11-20, and it resumes one4's (each rank taking its pieces).
printf 'dag: dt32o\ntasks:\n  train: {stage: train, with: {%s, resume: "%s"}}\n' \
  "${MODEL/batch_size: 2/batch_size: 4}, grad_accum: 2" "$DT3/train/checkpoints/step-00000010" > dt32o.yaml
run_dagrun run dt32o.yaml --plain
resumed_as one4 dt32o "resumed from $DT3/train/checkpoints/step-00000010 at step 10" 1e-4
gang_dag dt32dt "$MODEL, grad_accum: 2, tensor_parallel: 2, zero_stage: 1, resume: \"$DT3/train/checkpoints/step-00000010\"" 4
resumed_as one4 dt32dt "resumed from $DT3/train/checkpoints/step-00000010 at step 10" 1e-4
gang_dag o2dt3 "$MODEL, grad_accum: 2, tensor_parallel: 2, zero_stage: 3, resume: \"$ONE4/train/checkpoints/step-00000010\"" 4
resumed_as one4 o2dt3 "resumed from $ONE4/train/checkpoints/step-00000010 at step 10" 1e-4
# With one layer the tied embedding's rows dominate: the slice (6328
# floats) and the groups gathered at once (1280 + 6256) are more than
# stage 2's whole shards (12656), and the gradients' most (6328 + 1280 +
# 5120 + 6256) equals stage 2's (12656 + 6328): the log says so.
M1=${MODEL/n_layer: 2/n_layer: 1}
gang_dag dt3l1 "${M1/steps: 20/steps: 2}, tensor_parallel: 2, zero_stage: 3" 4
expect_rc 0
expect_in "$(run_dir dt3l1)/train/attempt-1/log" "rank 0: zero_stage 3's parameters at most in a step (0.053 MiB: its slice and the groups in use at once) are no better than zero_stage 2's 0.048 MiB for this model"
expect_in "$(run_dir dt3l1)/train/attempt-1/log" "rank 0: zero_stage 3's gradients at most in a step (0.072 MiB: its slice and the groups in use at once) are no better than zero_stage 2's 0.072 MiB for this model"

# Two pipeline stages of a tensor group of 2 (4 ranks: rank r is shard
# r % 2 of stage r / 2), batch_size 4 and grad_accum 2 (1F1B over the 2
# micro-batches): one4's losses, weights and val_loss; its step-10
# checkpoint resumes as one process and as a ZeRO gang of 4 ranks of
# batch_size 1, both with one4's losses of steps 11-20.
M4="${MODEL/batch_size: 2/batch_size: 4}, grad_accum: 2"
gang_dag txp "$M4, tensor_parallel: 2, pipeline_parallel: 2" 4
like one4 txp
expect_in "$R/train/attempt-1/log" "tensor parallel: rank 0 is shard 0 of 2 of stage 0 of 2 (layers 0-0, 1f1b schedule, the activations of 2 micro-batches kept at most) (heads 0-1 of 4,"
summary_is tensor_parallel,pipeline_parallel,data_parallel,pipeline_schedule "(2, 2, 1, '1f1b')"
same_val "$R1" "$R"
# Each stage keeps its part of the shards alone (its layer, the
# embeddings on the first stage, ln_f and its copy of the tied wte on
# the last): every rank's parameter bytes inside the step (summary.json's
# memory) below the tensor group's without stages (t2); with every
# stage keeping the whole shards they were equal.
stage_parts_smaller txp "$(run_dir t2)" "$R"
TXP=$R
# 4 micro-batches of 2 on the 2 stages: under 1F1B stage 0 keeps 2
# micro-batches' activations (P - s), under GPipe all 4; the gradients
# are summed in the same order, so the same losses to the bit.
for sched in 1f1b gpipe; do
  gang_dag tq$sched "$MODEL, grad_accum: 4, tensor_parallel: 2, pipeline_parallel: 2, pipeline_schedule: $sched" 4
  expect_rc 0
  losses "$(run_dir tq$sched)" > tq$sched.losses
done
same_losses tq1f1b.losses tqgpipe.losses 0
expect_in "$(run_dir tq1f1b)/train/attempt-1/log" "(layers 0-0, 1f1b schedule, the activations of 2 micro-batches kept at most)"
expect_in "$(run_dir tqgpipe)/train/attempt-1/log" "(layers 0-0, gpipe schedule, the activations of 4 micro-batches kept at most)"
R=$TXP
printf 'dag: txp2o\ntasks:\n  train: {stage: train, with: {%s, resume: "%s"}}\n' \
  "$M4" "$R/train/checkpoints/step-00000010" > txp2o.yaml
run_dagrun run txp2o.yaml --plain
resumed_as one4 txp2o "resumed from $R/train/checkpoints/step-00000010 at step 10" 1e-4
gang_dag txp2d "${M4/batch_size: 4/batch_size: 1}, zero_stage: 1, resume: \"$R/train/checkpoints/step-00000010\"" 4
resumed_as one4 txp2d "resumed from one-process checkpoint $R/train/checkpoints/step-00000010 at step 10" 1e-4

# T=2 x P=2 x D=2 on 8 ranks (rank r is shard r % 2 of stage (r / 2) % 2
# of replica r / 4), batch_size 2 and grad_accum 2, at zero_stage 3: each
# rank keeps half of each group of its stage's part (stage 0: the
# replicated tensors, wpe and layer 0's LayerNorms and biases, 1216
# floats; wte's rows, 5120; layer 0's split tensors, 6256; stage 1:
# layer 1's replicated tensors and ln_f, 256; its copy of the tied wte,
# 5120; layer 1's, 6256), each gathered for its pass as without stages.
# The same bounds against one4 (the same global batch), its val_loss,
# and the zero_stage 2 gang of the same layout within 1e-4 (not to the
# bit: stage 3 reduces each micro-batch's gradient, stage 2 the step's
# sum). Every rank keeps fewer parameter bytes between steps than at
# stage 2 (summary.json's between_steps; rank 0 both times beside the
# whole model), its slice's gradient and the buffer of the tied
# embedding's piece summed over the stages, and its figures inside the
# step are the formula's; with
# one layer a stage these are no better than stage 2's (the largest
# group, a layer's, is half the part), and the log says so. The step-10
# checkpoint resumes as one process with one4's losses of steps 11-20,
# and the gang resumes one4's; the final checkpoint is validated and
# exported downstream.
MTPD="$MODEL, grad_accum: 2, tensor_parallel: 2, pipeline_parallel: 2"
downstream tpd3 "$MTPD, zero_stage: 3" 8
like one4 tpd3
TPD3=$R
same_val "$R1" "$R"
downstream_ok
expect_in "$R/train/attempt-1/log" "rank 0 holds 0.024 MiB of parameters (0.053 MiB at most in a step), 0.034 MiB of gradients (0.074 MiB at most in a step) and 0.048 MiB of optimizer state between steps (zero_stage 3 over 2 data-parallel replicas)"
expect_in "$R/train/attempt-1/log" "rank 0: zero_stage 3's parameters at most in a step (0.053 MiB: its slice and the groups in use at once) are no better than zero_stage 2's 0.048 MiB for this model"
gang_dag tpd2 "$MTPD, zero_stage: 2" 8
expect_rc 0
losses "$(run_dir tpd2)" > tpd2.losses
same_losses tpd2.losses tpd3.losses 1e-4
/usr/bin/python3 - "$R/train/out/summary.json" "$(run_dir tpd2)/train/out/summary.json" <<'P' || fail "tpd3: memory: $(jq -c .memory "$R/train/out/summary.json")"
import json, sys
C, Vp, T, D = 32, 320, 2, 2
layer = C * 3 * C // T + 3 * C // T + C // T * C + C * 4 * C // T + 4 * C // T + 4 * C // T * C
stages = [[32 * C + 6 * C, Vp // T * C, layer],  # wpe, layer 0's LayerNorms and biases
          [6 * C + 2 * C, Vp // T * C, layer]]   # layer 1's, ln_f; the tied copy
whole = 4 * 36736
three, two = (json.load(open(f))["memory"]["ranks"] for f in sys.argv[1:])
assert len(three) == len(two) == 8, (three, two)
for r, t in zip(three, two):
    groups = stages[r["rank"] // T % 2]
    pieces = [(n + D - 1) // D for n in groups]
    S = sum(pieces)
    params = 4 * (S + D * pieces[0] + max(D * p for p in pieces[1:]))
    tied = 4 * pieces[1]  # the tied embedding's piece, summed over the stages
    grads = 4 * (S + D * pieces[0] + max(D * p for p in pieces[1:]) + max(pieces)) + tied
    mine = whole if r["rank"] == 0 else 0
    assert r["between_steps"]["params"] == mine + 4 * S, (r, S)
    assert r["between_steps"]["grads"] == 4 * S + tied, (r, S)
    assert r["between_steps"]["params"] < t["between_steps"]["params"] == mine + 4 * sum(groups), (r, t)
    assert r["peak"]["params"] == mine + params and r["formula"]["params"] == params, (r, params)
    assert r["peak"]["grads"] == grads and r["formula"]["grads"] == grads, (r, grads)
P
printf 'dag: tpd32o\ntasks:\n  train: {stage: train, with: {%s, resume: "%s"}}\n' \
  "$M4" "$TPD3/train/checkpoints/step-00000010" > tpd32o.yaml
run_dagrun run tpd32o.yaml --plain
resumed_as one4 tpd32o "resumed from $TPD3/train/checkpoints/step-00000010 at step 10" 1e-4
gang_dag o2tpd3 "$MTPD, zero_stage: 3, resume: \"$ONE4/train/checkpoints/step-00000010\"" 8
resumed_as one4 o2tpd3 "resumed from $ONE4/train/checkpoints/step-00000010 at step 10" 1e-4

M3=${MODEL/n_head: 4, n_embd: 32/n_head: 3, n_embd: 48}
gang_refused heads "tensor_parallel 2 does not divide the model's 3 heads" \
  "$M3, tensor_parallel: 2"
gang_refused vocab "tensor_parallel 3 does not divide the padded vocabulary of 320 rows (vocab_size 300" \
  "$M3, tensor_parallel: 3" 3
gang_refused world "world_size 3 is not a multiple of tensor_parallel 2" \
  "$MODEL, tensor_parallel: 2" 3
gang_refused dropout "tensor_parallel 2 runs on CPU ranks without dropout" \
  "$MODEL, tensor_parallel: 2, dropout: 0.1"
# device: cuda on 2 replicas: where the build has tensor parallel on
# GPUs (its train stage links NCCL and the CUDA runtime;
# test_train_tp_cuda.sh) the gang looks for a GPU a rank and finds none
# here; without it, device: cuda is refused as not built.
if readelf -d "$DAGRUN_STAGE_DIR/train.so" | grep -q 'libnccl' &&
  readelf -d "$DAGRUN_STAGE_DIR/train.so" | grep -q 'libcudart'; then
  gang_refused cuda "device: cuda in a gang of 4, but 0 of the 4 ranks see a usable GPU" \
    "$MODEL, tensor_parallel: 2, device: cuda" 4
else
  gang_refused cuda "tensor_parallel 2 runs on CPU ranks without device: cuda" \
    "$MODEL, tensor_parallel: 2, device: cuda" 4
fi
gang_refused recompute "tensor_parallel 2 runs without recompute" \
  "$MODEL, tensor_parallel: 2, recompute: gelu"
gang_refused tp_layers "pipeline_parallel 2 does not divide the model's 3 layers" \
  "${MODEL/n_layer: 2/n_layer: 3}, tensor_parallel: 2, pipeline_parallel: 2" 4
gang_refused tp_world "world_size 6 is not a multiple of tensor_parallel x pipeline_parallel 4" \
  "$MODEL, tensor_parallel: 2, pipeline_parallel: 2" 6
printf 'dag: solo\ntasks:\n  train: {stage: train, with: {%s, tensor_parallel: 2}}\n' "$MODEL" > solo.yaml
run_dagrun run solo.yaml --plain
[ "$RC" -ne 0 ] || fail "solo: exit code 0"
expect_in "$T/err" "tensor_parallel 2 needs a gang of 2 CPU ranks" # dagrun check's
pass
