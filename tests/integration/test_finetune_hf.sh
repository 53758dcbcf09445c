#!/usr/bin/env bash
# examples/finetune-hf/finetune.yaml as its README says to run it, on a
# random Hugging Face LlamaForCausalLM directory written by Python without
# dagrun (tests/reference/make_hf_llama.py), with a tokenizer.json beside
# it laid out as SmolLM's (its pre_tokenizer a Sequence of Digits then
# ByteLevel), and a small corpus:
# - the DAG checks, and runs end to end: shard, tokenize with the
#   directory's tokenizer, the base model's validation, train from its
#   weights (init_from), validate (gated on the base's loss), export;
# - the fine-tuned model's val loss is below the base's (both over the
#   same batches), and the log says init_from read a Hugging Face Llama;
# - the export is a LlamaForCausalLM directory of the base's shape whose
#   logits in PyTorch (torch_llama.py) are the trained checkpoint's;
# - a GPT2LMHeadModel directory (dagrun's own export of a GPT-2) is
#   fine-tuned and exported as one, better than it started;
# - a model_dir without config.json fails the run in its first task,
#   naming the path and what the directory must hold; none at all says
#   how to give one; a relative path is refused before anything runs.
# About 10 s.
. "$(dirname "$0")/lib.sh"

EX="$DAGRUN_SOURCE_DIR/examples/finetune-hf/finetune.yaml"
REF="$DAGRUN_SOURCE_DIR/tests/reference"
BIN="$DAGRUN_BUILD_DIR/bin"

# The "downloaded" model: 2 layers, 4 heads on 2 key/value heads, width
# 40, context 32, vocabulary 320, and a byte-level BPE tokenizer.json of
# 320 ids (trained by dagrun on another corpus: any HF tokenizer.json of
# the model's vocabulary would do).
TOKDATA=$(make_token_data tok 320)
"$PY" "$REF/make_hf_llama.py" base --ctx 32 --seed 7 || fail "make_hf_llama.py"
# SmolLM's pre_tokenizer: every digit its own piece, then GPT-2's.
"$PY" - "$TOKDATA/tokenizer.json" base/tokenizer.json <<'P'
import json, sys
t = json.load(open(sys.argv[1]))
t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
    {"type": "Digits", "individual_digits": True},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
json.dump(t, open(sys.argv[2], "w"), ensure_ascii=False)
P
make_corpus corpus 2

export DAGRUN_CORPUS="$T/corpus"
run_dagrun check "$EX"
expect_rc 0
run_dagrun run "$EX" -p model_dir="$T/base" -p steps=40 -p lr=0.003 -p val_batches=4 --plain
expect_rc 0
R=$(run_dir finetune-hf)
expect_in "$R/train/attempt-1/log" "init_from $T/base (Hugging Face Llama)"
"$PY" - "$R" <<'P' || fail "the fine-tuned model is not better than the base"
import json, sys
R = sys.argv[1]
b = json.load(open(R + "/base/out/metrics.json"))
v = json.load(open(R + "/validate/out/metrics.json"))
assert b["batches"] == v["batches"] == 4 and b["tokens"] == v["tokens"], (b, v)
assert v["passed"] and v["val_loss"] < b["val_loss"] - 0.5, (b["val_loss"], v["val_loss"])
print("val loss: base %.4f, fine-tuned %.4f" % (b["val_loss"], v["val_loss"]))
P
E="$R/export/out/model"
"$PY" - "$E/config.json" <<'P' || fail "the export's config: $(cat "$E/config.json")"
import json, sys
c = json.load(open(sys.argv[1]))
want = dict(model_type="llama", num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, hidden_size=40, max_position_embeddings=32,
            vocab_size=320, tie_word_embeddings=False)
for k, v in want.items():
    assert c[k] == v, (k, c)
P
# The export's tokenizer is the base's, SmolLM's pre_tokenizer included
# (the tokenize stage wrote it back; JSON the same, not its spacing).
"$PY" - "$E/tokenizer.json" base/tokenizer.json <<'P' || fail "the export's tokenizer is not the base's"
import json, sys
e, b = (json.load(open(p)) for p in sys.argv[1:3])
for k in ("pre_tokenizer", "added_tokens", "normalizer"):
    assert e[k] == b[k], (k, e[k], b[k])
for k in ("type", "vocab", "merges"):
    assert e["model"][k] == b["model"][k], k
assert e["pre_tokenizer"]["pretokenizers"][0]["type"] == "Digits"
P
echo "3 17 42 99 5 250 7 7 300 1 64 128 2 9 11 13 0 5 6 7" > prompt.ids
"$BIN/model_logits" "$R/train/checkpoints" prompt.ids ours.bin >/dev/null ||
  fail "model_logits on the fine-tuned checkpoint failed"
"$PY" "$REF/check_export.py" logits "$E" prompt.ids ours.bin 1e-5 > logits.out 2>&1 ||
  fail "the export's logits in PyTorch are not the fine-tuned model's: $(cat logits.out)"
cat logits.out

# A GPT2LMHeadModel directory too: dagrun's own export of a GPT-2 trained
# a few steps on the tokenizer's corpus (config.json of model_type gpt2,
# GPT-2's tensor names, tokenizer.json) is fine-tuned and exported as
# one, better than it started.
cat > g.yaml <<Y
dag: g
tasks:
  train: {stage: train, with: {data: "$TOKDATA", n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, batch_size: 4, threads: 1, steps: 5, eval_every: 0, samples: 0}}
  export: {stage: export, needs: [train], with: {model: "\${tasks.train.outputs.checkpoint}"}}
Y
run_dagrun run g.yaml --plain
expect_rc 0
G="$(run_dir g)/export/out/model"
# Each run of the example in its own runs directory: two runs in the
# same second would not sort by time.
export DAGRUN_RUNS_DIR="$T/runs-gpt2"
run_dagrun run "$EX" -p model_dir="$G" -p steps=20 -p lr=0.003 -p val_batches=4 --plain
expect_rc 0
RG=$(run_dir finetune-hf)
expect_in "$RG/train/attempt-1/log" "init_from $G (Hugging Face GPT-2)"
"$PY" - "$RG" <<'P' || fail "the fine-tuned GPT-2: see above"
import json, sys
R = sys.argv[1]
b = json.load(open(R + "/base/out/metrics.json"))
v = json.load(open(R + "/validate/out/metrics.json"))
assert v["passed"] and v["val_loss"] < b["val_loss"] - 0.1, (b["val_loss"], v["val_loss"])
c = json.load(open(R + "/export/out/model/config.json"))
assert c["model_type"] == "gpt2" and c["n_layer"] == 2 and c["n_embd"] == 32, c
print("GPT-2 val loss: base %.4f, fine-tuned %.4f" % (b["val_loss"], v["val_loss"]))
P

# A directory without config.json: the first task fails, naming the path
# and what the directory must hold, before the corpus is read.
mkdir bad
cp base/tokenizer.json base/model.safetensors bad/
export DAGRUN_RUNS_DIR="$T/runs-bad"
run_dagrun run "$EX" -p model_dir="$T/bad" -p steps=2 --plain
expect_rc 1
RB=$(run_dir finetune-hf)
[ "$(task_field "$RB" model state)" = failed ] || fail "model: $(task_field "$RB" model state)"
expect_in "$RB/model/attempt-1/log" "model_dir $T/bad: no config.json there; a Hugging Face GPT2LMHeadModel or LlamaForCausalLM directory holds config.json, model.safetensors"
for t in shard train export; do
  [ "$(task_field "$RB" $t state)" = upstream_failed ] || fail "$t ran on a bad model_dir: $(task_field "$RB" $t state)"
done
# No model_dir at all: the same task says how to give one; a relative
# path is refused before anything runs.
unset DAGRUN_MODEL_DIR
export DAGRUN_RUNS_DIR="$T/runs-unset"
run_dagrun run "$EX" --plain
expect_rc 1
expect_in "$(run_dir finetune-hf)/model/attempt-1/log" "model_dir is not set: give -p model_dir=DIR (or DAGRUN_MODEL_DIR=DIR)"
run_dagrun run "$EX" -p model_dir=base --plain
expect_rc 2
expect_in "$T/err" "param 'model_dir': 'base' does not match its pattern '(/.*)?'"
pass
