#!/usr/bin/env bash
# The Llama family in the model-parallel layouts on CPU ranks under
# mpirun: a 2-layer Llama with GQA (4 query heads, 2 key/value heads,
# head size 10) and an untied head, 20 steps of grad_accum 4
# micro-batches of batch_size 2.
# - pipeline_parallel 2 (1f1b): stage 0 the embedding and layer 0,
#   stage 1 layer 1, the final RMSNorm, lm_head and the loss. Every
#   step's loss within 1e-4 (relative) of one process with the same
#   batch_size and grad_accum, the final weights within 1e-4 of the
#   largest weight (test_pipeline's bounds). The same with a tied head
#   (the embedding's lookup and head gradients summed between the two
#   stages), and 2 data-parallel replicas of 2 stages on 4 ranks against
#   one process of batch_size 4, also at zero_stage 3 under gpipe (the
#   stage's parameters sharded over its replicas; no tied copy).
# - tensor_parallel 2: each rank 2 query heads and 1 key/value head (RoPE
#   on its own), 50 of the 100 SwiGLU columns, 160 of the 320 vocabulary
#   rows of embed_tokens and lm_head; the same bounds against one
#   process, untied and tied, 2 x 2 (tensor groups as 2 pipeline
#   stages) and 2 data-parallel replicas of 2 shards (against batch_size
#   4), at zero_stage 1 and 3 (the parameters sharded over the replicas:
#   the untied lm_head a group of its own, gathered for the head and its
#   gradient reduced before the layers'), and 2 data-parallel replicas
#   of 2 x 2 at zero_stage 3 under gpipe (8 ranks; the figures inside
#   the step the formula's). Refused: n_kv_head 1 with tensor_parallel 2, with the numbers.
. "$(dirname "$0")/lib.sh"

use_train_gang

DATA=$(make_token_data lpar 320)
MODEL="data: \"$DATA\", model: llama-tiny, n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 40, intermediate_size: 100, head: untied, block_size: 32, threads: 1, steps: 20, lr: 0.003, warmup: 2, eval_every: 0, samples: 0, spike_policy: none, batch_size: 2, grad_accum: 4, checkpoint_every: 20"
LAST=train/checkpoints/step-00000020/model.safetensors

# same_as REF NAME WITH [WORLD]: gang_dag NAME, with the losses and
# final weights of the one-process run REF (the last one_process).
same_as() {
  gang_dag "$2" "$3" "${4:-2}"
  expect_rc 0
  losses "$(run_dir "$2")" > "$2.losses"
  same_losses "$1.losses" "$2.losses" 1e-4
  same_weights "$R1/$LAST" "$(run_dir "$2")/$LAST" 1e-4
}

one_process one "$MODEL"
same_as one pipe "$MODEL, pipeline_parallel: 2"
expect_in "$(run_dir pipe)/train/attempt-1/log" "stage 0 of 2 (layers 0-0, embeddings), schedule 1f1b"
same_as one tp "$MODEL, tensor_parallel: 2"
expect_in "$(run_dir tp)/train/attempt-1/log" "tensor parallel: rank 0 is shard 0 of 2 (heads 0-1 of 4, MLP columns 0-49 of 100, vocabulary rows 0-159 of 320;"
same_as one txp "$MODEL, tensor_parallel: 2, pipeline_parallel: 2" 4
TIED=${MODEL/head: untied/head: tied}
one_process tied "$TIED"
same_as tied ptied "$TIED, pipeline_parallel: 2"
same_as tied ttied "$TIED, tensor_parallel: 2"
one_process one4 "${MODEL/batch_size: 2/batch_size: 4}"
same_as one4 dp "$MODEL, pipeline_parallel: 2" 4
expect_in "$(run_dir dp)/train/attempt-1/log" "data-parallel replica 0 of 2"
same_as one4 dt "$MODEL, tensor_parallel: 2" 4
same_as one4 dt3 "$MODEL, tensor_parallel: 2, zero_stage: 3" 4
# zero_stage 3 beside the stages, untied head (no tied copy on the last
# stage), under gpipe.
same_as one4 dp3 "$MODEL, pipeline_parallel: 2, pipeline_schedule: gpipe, zero_stage: 3" 4
# T=2 x P=2 x D=2 at zero_stage 3 under gpipe (8 ranks): each rank's
# groups cut from its stage's part (stage 0: the RMSNorms of layer 0, 80
# floats; embed_tokens' rows, 6400; layer 0's split tensors, 8400; stage
# 1: layer 1's RMSNorms and the final one, 120; layer 1's, 8400; the
# untied lm_head's rows, 6400, a group of its own). The head's gathered
# group, kept from a forward to its backward under 1f1b, is released by
# the next forward under gpipe (all the forwards come first) and
# gathered again for its backward, so that one group is gathered at a
# time beside the replicated tensors': each rank's parameters inside the
# step (summary.json's formula, the groups' buffers as the step held
# them) are its slice, the replicated group and the largest other one.
same_as one4 dtp3 "$MODEL, tensor_parallel: 2, pipeline_parallel: 2, pipeline_schedule: gpipe, zero_stage: 3" 8
/usr/bin/python3 - "$(run_dir dtp3)/train/out/summary.json" <<'P' || fail "dtp3: memory: $(jq -c .memory.ranks "$(run_dir dtp3)/train/out/summary.json")"
import json, sys
C, F, KVl, Vp, T, D = 40, 100, 10, 320, 2, 2
layer = 2 * C * C // T + 2 * KVl * C + 3 * F // T * C
stages = [[2 * C, Vp // T * C, layer], [3 * C, layer, Vp // T * C]]
ranks = json.load(open(sys.argv[1]))["memory"]["ranks"]
assert len(ranks) == 8, ranks
for r in ranks:
    pieces = [(n + D - 1) // D for n in stages[r["rank"] // T % 2]]
    S = sum(pieces)
    params = 4 * (S + D * pieces[0] + max(D * p for p in pieces[1:]))
    grads = 4 * (S + D * pieces[0] + max(D * p for p in pieces[1:]) + max(pieces))
    assert r["formula"]["params"] == params and r["formula"]["grads"] == grads, (r, params, grads)
    # As the step held them: rank 0 keeps the whole model beside.
    mine = r["whole_model"]["params"]
    assert (mine > 0) == (r["rank"] == 0), r
    assert r["peak"]["params"] == mine + params, (r, params)
P
gang_refused kv1 "tensor_parallel 2 does not divide the model's 1 key/value heads and its intermediate_size 100" \
  "${MODEL/n_kv_head: 2/n_kv_head: 1}, tensor_parallel: 2"
pass
