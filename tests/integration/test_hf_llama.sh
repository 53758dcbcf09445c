#!/usr/bin/env bash
# Hugging Face LlamaForCausalLM directories, as Python writes them without
# dagrun (tests/reference/make_hf_llama.py: random weights, F32, BF16 in
# shards, F16 with LlamaConfig's defaults, grouped-query heads, tied and
# untied heads, RoPE bases 1e4 to 1e6): our engine's logits are PyTorch's
# (torch_llama.py through check_export.py), `dagrun generate` with the
# KV-cache decoder draws PyTorch's greedy tokens and the same text for the
# same seed, train's init_from starts from the very weights with the
# directory's shape, and a config that asks for what dagrun's Llama does
# not compute is refused naming the key.
. "$(dirname "$0")/lib.sh"

REF="$DAGRUN_SOURCE_DIR/tests/reference"
BIN="$DAGRUN_BUILD_DIR/bin"
DATA=$(make_token_data h 320)
mk() { "$PY" "$REF/make_hf_llama.py" "$@" || fail "make_hf_llama.py $*"; }

mk a --theta 500000 --eps 1e-6 --tied --inv-freq --seed 1
mk b --dtype BF16 --kv 1 --shards 3 --theta 1e6 --seed 2
mk c --dtype F16 --heads 2 --embd 32 --layers 3 --seed 3 --omit num_key_value_heads \
  --omit tie_word_embeddings --omit rms_norm_eps --omit rope_theta --omit head_dim
ls b/model-00003-of-00003.safetensors b/model.safetensors.index.json >/dev/null || fail "b is not sharded: $(ls b)"
echo "3 17 42 99 5 250 7 7 300 1 64 128 2 9 11 13 0 5 6 7" > prompt.ids
for d in a b c; do
  "$BIN/model_logits" "$d" prompt.ids "$d.bin" > "$d.txt" 2>&1 || fail "model_logits on $d: $(cat "$d.txt")"
  expect_in "$d.txt" "kind hf step -1"
  "$PY" "$REF/check_export.py" logits "$d" prompt.ids "$d.bin" 1e-5 > "$d-logits.log" 2>&1 ||
    fail "$d: our logits are not PyTorch's: $(cat "$d-logits.log")"
  cat "$d-logits.log"
  # Greedy: every drawn id is PyTorch's argmax over the whole sequence
  # (44 tokens: within the context of 64, no slide).
  run_to "g$d" "$DAGRUN" generate "$d" --tokenizer "$DATA/tokenizer.json" --prompt "the cat" \
    --temperature 0 --tokens 40 --no-stop --ids
  [ "$RC" -eq 0 ] || fail "generate $d exited $RC: $(cat "g$d.err")"
  expect_in "g$d.err" "Hugging Face Llama"
  ids=$(grep -a "ids: " "g$d.err" | sed 's/.*ids: //')
  "$PY" "$REF/check_export.py" greedy "$d" "$ids" > "$d-greedy.log" 2>&1 ||
    fail "$d: generate's greedy ids are not PyTorch's: $(cat "$d-greedy.log")"
  cat "$d-greedy.log"
done
# F16 and BF16 were read as such: the same seed's F32 weights give other
# logits.
mk a32 --dtype F32 --kv 1 --shards 1 --theta 1e6 --seed 2
"$BIN/model_logits" a32 prompt.ids a32.bin >/dev/null || fail "model_logits a32"
cmp -s a32.bin b.bin && fail "BF16 weights gave the F32 logits: not read as BF16?"

# Sampling: the same seed gives the same text, another seed another.
sample() { run_to "$1" "$DAGRUN" generate b --tokenizer "$DATA/tokenizer.json" --prompt "the cat" --tokens 30 --no-stop --seed "$2"; }
sample s1 5
sample s2 5
sample s3 6
cmp s1.out s2.out || fail "same seed, other text: $(cat s1.out) / $(cat s2.out)"
cmp -s s1.out s3.out && fail "seeds 5 and 6 gave the same text: $(cat s1.out)"
expect_in s1.out "the cat"

# init_from: a run starts from the directory's weights and shape. One step
# at lr 1e-9 leaves them as they were to far below the tolerance, so the
# checkpoint's logits are PyTorch's on the directory's weights.
mk d --theta 500000 --eps 1e-6 --ctx 32 --seed 4
cat > init.yaml <<Y
dag: init
tasks:
  train: {stage: train, with: {data: "$DATA", init_from: "$T/d", steps: 1, lr: 1e-9, batch_size: 2, threads: 1, eval_every: 0, samples: 1}}
Y
run_dagrun run init.yaml --plain
expect_rc 0
R=$(run_dir init)
expect_in "$R/train/attempt-1/log" "init_from $T/d (Hugging Face Llama): its weights start the run, with its shape (2 layers, 4 heads, width 40, context 32)"
expect_in "$R/train/out/samples.txt" "=== sample"
CK=$(ls -d "$R"/train/checkpoints/step-* | tail -1)
"$PY" - "$CK/manifest.json" <<'P' || fail "the init_from run's checkpoint: $(cat "$CK/manifest.json")"
import json, sys
m = json.load(open(sys.argv[1]))["state"]["model"]
want = dict(family="llama", n_layer=2, n_head=4, n_kv_head=2, n_embd=40,
            intermediate_size=100, block_size=32, vocab_size=320,
            rope_theta=500000, tie_word_embeddings=False)
for k, v in want.items():
    assert m[k] == v, (k, m)
assert abs(m["norm_eps"] - 1e-6) < 1e-12, m
P
"$BIN/model_logits" "$CK" prompt.ids init.bin >/dev/null || fail "model_logits on the init_from checkpoint"
"$PY" "$REF/check_export.py" logits d prompt.ids init.bin 1e-5 > init-logits.log 2>&1 ||
  fail "the init_from run's model is not the directory's: $(cat init-logits.log)"
cat init-logits.log

# What dagrun's Llama does not compute is refused, the key named.
refused() { # NAME EXPECTED MAKE_ARGS...
  mk "$1" "${@:3}"
  run_to "r$1" "$BIN/model_logits" "$1" prompt.ids "r$1.bin"
  [ "$RC" -ne 0 ] || fail "$1 was read: $(cat "r$1.out")"
  expect_in "r$1.err" "$2"
}
refused scaled 'rope_scaling is set' --set 'rope_scaling={"type":"linear","factor":2.0}'
refused gelu 'hidden_act "gelu": dagrun'"'"'s Llama computes "silu"' --set 'hidden_act="gelu"'
refused abias 'attention_bias is true' --set 'attention_bias=true'
refused mbias 'mlp_bias is true' --set 'mlp_bias=true'
refused hdim 'head_dim 16' --set 'head_dim=16'
refused kv3 'n_kv_head (3) must divide n_head (4)' --set 'num_key_value_heads=3'
refused theta '"rope_theta" is not a positive number' --set 'rope_theta=-1'
refused mistral 'model_type "mistral"' --set 'model_type="mistral"'
refused layers 'model.layers.2.input_layernorm.weight" (40) is missing' --set 'num_hidden_layers=3'
pass
