#!/usr/bin/env bash
# The train stage with a Llama model on the CPU: it learns (the loss falls
# below the unigram entropy), its checkpoint records the family and its
# knobs, a run resumed from the middle checkpoint ends with the very same
# weights as one that never stopped, recompute: block and gelu train to
# none's very weights with less activation memory (the log says how
# much), a Llama checkpoint resumed by a GPT-2
# run (or by a Llama of other knobs) is refused naming both, and bad Llama
# params are refused naming the numbers.
. "$(dirname "$0")/lib.sh"

DATA=$(make_token_data t 320)
# Head size 10 (not a power of two), two key/value heads for four query
# heads, an untied head.
MODEL='model: llama-tiny, n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 40, intermediate_size: 100, head: untied, block_size: 32, batch_size: 4, threads: 1'

train_dag() { # NAME PARAMS
  cat > "$1.yaml" <<Y
dag: $1
tasks:
  train: {stage: train, with: {data: "$DATA", $2}}
Y
}

train_dag learn "$MODEL, steps: 200, lr: 0.003, eval_every: 50, checkpoint_every: 100, samples: 0"
run_dagrun run learn.yaml --plain
expect_rc 0
R=$(run_dir learn)
"$PY" - "$R/train/out/summary.json" "$R/train/checkpoints/step-00000200/manifest.json" <<'P' || fail "Llama did not learn or record itself: $(cat "$R/train/out/summary.json")"
import json, math, sys
s = json.load(open(sys.argv[1]))
assert s["steps"] == 200, s
assert abs(s["init_loss"] - s["ln_vocab"]) < 0.3, s
assert s["val_loss"] < s["unigram_entropy"] - 0.5, s
m = json.load(open(sys.argv[2]))["state"]["model"]
want = dict(family="llama", n_layer=2, n_head=4, n_kv_head=2, n_embd=40,
            intermediate_size=100, block_size=32, rope_theta=10000,
            tie_word_embeddings=False)
for k, v in want.items():
    assert m[k] == v, (k, m)
assert abs(m["norm_eps"] - 1e-5) < 1e-12, m
P
# The weights are Hugging Face LlamaForCausalLM's names, lm_head among
# them, without padding rows.
"$PY" - "$R/train/checkpoints/step-00000200/model.safetensors" <<'P' || fail "checkpoint tensors"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
assert h["model.layers.1.self_attn.k_proj.weight"]["shape"] == [20, 40], h
assert h["lm_head.weight"]["shape"] == h["model.embed_tokens.weight"]["shape"], h
assert h["model.layers.0.mlp.down_proj.weight"]["shape"] == [40, 100], h
assert not any(k.startswith("h.") for k in h), h
P

# A Llama run writes its samples with the KV-cache decoder, as GPT-2's.
train_dag samples "${MODEL/head: untied/head: tied}, steps: 5, samples: 1, eval_every: 0"
run_dagrun run samples.yaml --plain
expect_rc 0
expect_in "$(run_dir samples)/train/out/samples.txt" "=== sample"
expect_not_in "$(run_dir samples)/train/attempt-1/log" "no samples"

# Exact resume: 100 steps + resume from the step-100 checkpoint + 100 give
# the same bits as 200 in one go.
train_dag resume "$MODEL, steps: 200, lr: 0.003, eval_every: 50, checkpoint_every: 100, samples: 0, resume: \"$R/train/checkpoints/step-00000100\""
run_dagrun run resume.yaml --plain
expect_rc 0
R2=$(run_dir resume)
expect_in "$R2/train/attempt-1/log" "resumed from"
cmp "$R/train/checkpoints/step-00000200/model.safetensors" "$R2/train/checkpoints/step-00000200/model.safetensors" ||
  fail "the resumed Llama's weights differ from the uninterrupted run's"
cmp "$R/train/checkpoints/step-00000200/optim.bin" "$R2/train/checkpoints/step-00000200/optim.bin" ||
  fail "the resumed Llama's optimizer state differs"

# Recomputation: three layers (block rebuilds a layer between two
# others), 12 steps with each mode; gelu and block give none's weights
# and optimizer state bit for bit, and the log's activations shrink.
for rc in none gelu block; do
  train_dag "rc$rc" "${MODEL/n_layer: 2/n_layer: 3}, steps: 12, lr: 0.003, eval_every: 0, samples: 0, recompute: $rc"
  run_dagrun run "rc$rc.yaml" --plain
  expect_rc 0
done
losses "$(run_dir rcnone)" > rcnone.losses
[ "$(wc -l < rcnone.losses)" = 12 ] || fail "recompute: none logged $(wc -l < rcnone.losses) losses, not 12"
for rc in gelu block; do
  losses "$(run_dir "rc$rc")" | cmp - rcnone.losses || fail "a Llama with recompute: $rc logged other losses than with none"
  for f in model.safetensors optim.bin; do
    cmp "$(run_dir rcnone)/train/checkpoints/step-00000012/$f" \
      "$(run_dir "rc$rc")/train/checkpoints/step-00000012/$f" ||
      fail "a Llama with recompute: $rc trained another $f than with none"
  done
done
"$PY" - "$(run_dir rcnone)" "$(run_dir rcgelu)" "$(run_dir rcblock)" <<'P' || fail "a Llama's recompute: the log's activations"
import re, sys
acts = []
for d in sys.argv[1:]:
    log = open(d + "/train/attempt-1/log").read()
    m = re.search(r"recompute: (\w+); autocast: none; activations ([0-9.]+) MiB a micro-batch \(([0-9.]+) MiB with recompute: none\)", log)
    assert m, log
    acts.append(float(m.group(2)))
    assert float(m.group(3)) == acts[0], (m.group(0), acts)
assert acts[0] > acts[1] > acts[2], acts
print("Llama activations: none %.3f, gelu %.3f, block %.3f MiB" % tuple(acts))
P

# A Llama checkpoint is not a GPT-2's, nor another Llama's.
CK="$R/train/checkpoints/step-00000100"
train_dag asgpt "n_layer: 2, n_head: 4, n_embd: 40, block_size: 32, batch_size: 4, threads: 1, steps: 110, samples: 0, eval_every: 0, resume: \"$CK\""
run_dagrun run asgpt.yaml --plain
expect_rc 1
expect_in "$(run_dir asgpt)/train/attempt-1/log" "a checkpoint of the llama family; this run's model is of the gpt2 family"
train_dag otherkv "${MODEL/n_kv_head: 2/n_kv_head: 1}, steps: 110, samples: 0, eval_every: 0, resume: \"$CK\""
run_dagrun run otherkv.yaml --plain
expect_rc 1
expect_in "$(run_dir otherkv)/train/attempt-1/log" "a checkpoint of another model (n_kv_head 2, this run has 1)"

# validate reads the Llama checkpoint (its family from the manifest) and
# finds the loss the run ended with: below the unigram entropy.
cat > val.yaml <<Y
dag: val
tasks:
  validate: {stage: validate, with: {data: "$DATA", threads: 1, checkpoint: "$R/train/checkpoints/step-00000200"}}
Y
run_dagrun run val.yaml --plain
expect_rc 0
"$PY" - "$(run_dir val)/validate/out/metrics.json" "$R/train/out/summary.json" <<'P' || fail "validate of a Llama: $(cat "$(run_dir val)/validate/out/metrics.json")"
import json, sys
v, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert v["val_loss"] < s["unigram_entropy"] - 0.5, (v, s)
assert abs(v["val_loss"] - s["val_loss"]) < 0.05, (v, s)
P

# export writes a Hugging Face LlamaForCausalLM directory: config.json of
# model_type llama, HF's tensor names and rotary layout, no padding rows;
# Llama in PyTorch (torch_llama.py) on it gives our engine's logits for
# the checkpoint within 1e-5 (fp32), and within 2e-2 from the bf16 export.
CK2="$R/train/checkpoints/step-00000200"
cat > exp.yaml <<Y
dag: exp
tasks:
  fp32: {stage: export, with: {model: "$CK2"}}
  bf16: {stage: export, with: {model: "$CK2", dtype: bfloat16}}
Y
run_dagrun run exp.yaml --plain
expect_rc 0
E=$(run_dir exp)/fp32/out/model
"$PY" - "$E" <<'P' || fail "the Llama export's files: $(ls "$E")"
import json, struct, sys
d = sys.argv[1]
c = json.load(open(d + "/config.json"))
want = dict(model_type="llama", architectures=["LlamaForCausalLM"],
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            hidden_size=40, intermediate_size=100, head_dim=10,
            max_position_embeddings=32, vocab_size=320, rope_theta=10000,
            rms_norm_eps=1e-5, tie_word_embeddings=False, hidden_act="silu")
for k, v in want.items():
    assert c[k] == v, (k, c)
b = open(d + "/model.safetensors", "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
h.pop("__metadata__", None)
assert len(h) == 1 + 9 * 2 + 2, sorted(h)
assert h["model.layers.0.self_attn.q_proj.weight"]["shape"] == [40, 40], h
assert h["model.layers.1.self_attn.v_proj.weight"]["shape"] == [20, 40], h
assert h["model.embed_tokens.weight"]["shape"] == [320, 40], h
assert h["lm_head.weight"]["shape"] == [320, 40], h
card = open(d + "/README.md").read()
assert "LlamaForCausalLM.from_pretrained" in card and "dagrun generate" not in card, card
P
echo "3 17 42 99 5 250 7 7 300 1 64 128 2 9 11 13 0 5 6 7" > prompt.ids
"$DAGRUN_BUILD_DIR/bin/model_logits" "$CK2" prompt.ids ours.bin >/dev/null || fail "model_logits on the Llama checkpoint failed"
"$PY" "$DAGRUN_SOURCE_DIR/tests/reference/check_export.py" logits "$E" prompt.ids ours.bin 1e-5 >logits.out 2>&1 ||
  fail "the exported Llama's logits differ from ours: $(cat logits.out)"
cat logits.out
E16=$(run_dir exp)/bf16/out/model
"$PY" "$DAGRUN_SOURCE_DIR/tests/reference/check_export.py" logits "$E16" prompt.ids ours.bin 2e-2 >logits16.out 2>&1 ||
  fail "the bf16 Llama export's logits are far from ours: $(cat logits16.out)"
cat logits16.out
# A tied head exports without lm_head (tie_word_embeddings true) and
# gives the same logits too.
cat > expt.yaml <<Y
dag: expt
tasks:
  tied: {stage: export, with: {model: "$(run_dir samples)/train/checkpoints"}}
Y
run_dagrun run expt.yaml --plain
expect_rc 0
ET=$(run_dir expt)/tied/out/model
expect_in "$ET/config.json" '"tie_word_embeddings": true'
"$DAGRUN_BUILD_DIR/bin/model_logits" "$(run_dir samples)/train/checkpoints" prompt.ids ourst.bin >/dev/null || fail "model_logits on the tied Llama failed"
"$PY" "$DAGRUN_SOURCE_DIR/tests/reference/check_export.py" logits "$ET" prompt.ids ourst.bin 1e-5 >logitst.out 2>&1 ||
  fail "the tied Llama export's logits differ from ours: $(cat logitst.out)"
cat logitst.out

# lr_find and batch_sweep take the same model params: a Llama trains in
# both (batch_sweep's memory estimate is the Llama's activations).
SMALL='model: llama-tiny, n_layer: 2, n_head: 4, n_kv_head: 1, n_embd: 40, block_size: 32, threads: 1'
cat > tools.yaml <<Y
dag: tools
tasks:
  lr_find: {stage: lr_find, with: {data: "$DATA", $SMALL, batch_size: 4, steps: 20, max_lr: 0.1}}
  batch_sweep: {stage: batch_sweep, with: {data: "$DATA", $SMALL, max_batch: 8, steps_per_size: 2, memory_cap: 4GiB}}
Y
run_dagrun run tools.yaml --plain
expect_rc 0
expect_in "$(run_dir tools)/lr_find/attempt-1/log" "suggested lr"
"$PY" - "$(run_dir tools)/batch_sweep/out/sweep.json" <<'P' || fail "batch_sweep of a Llama: $(cat "$(run_dir tools)/batch_sweep/out/sweep.json")"
import json, sys
s = json.load(open(sys.argv[1]))
assert [r["batch"] for r in s["rows"]] == [1, 2, 4, 8], s
assert all(r["tokens_per_s"] > 0 and r["loss"] < 6.5 for r in s["rows"]), s
P

# Bad params, refused with their numbers.
bad() { # NAME PARAMS EXPECTED
  train_dag "$1" "$2, steps: 1, samples: 0"
  run_dagrun run "$1.yaml" --plain
  expect_rc 1
  expect_in "$(run_dir "$1")/train/attempt-1/log" "$3"
}
# The CUDA engine trains a Llama too: device: cuda is refused only for
# want of a GPU (lib.sh hides any from these tests), as for a GPT-2, and
# auto trains on the CPU saying that there is none.
bad cuda "$MODEL, device: cuda" "device: cuda, but"
expect_in "$(run_dir cuda)/train/attempt-1/log" "use device: cpu or auto"
expect_in "$(run_dir learn)/train/attempt-1/log" "device: cpu (device: auto, and no GPU: "
bad dropout "$MODEL, dropout: 0.1" "dropout 0.1: the Llama family has no dropout yet"
bad kv3 "${MODEL/n_kv_head: 2/n_kv_head: 3}" "n_kv_head (3) must divide n_head (4)"
bad odd "${MODEL/n_embd: 40/n_embd: 36}" "(36/4 = 9) must be even"
bad gptkv "n_layer: 2, n_head: 4, n_embd: 40, block_size: 32, batch_size: 4, threads: 1, n_kv_head: 2" "the GPT-2 family takes none of them"
pass
