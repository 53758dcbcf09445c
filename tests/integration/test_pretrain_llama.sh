#!/usr/bin/env bash
# dags/pretrain-llama.yaml on the default corpus (Debian's fortunes): raw
# text to a trained llama-tiny on the CPU whose validation loss ends below
# the corpus's unigram entropy, passes its gate, and is exported as a
# Hugging Face LlamaForCausalLM directory whose logits in PyTorch
# (torch_llama.py) are the checkpoint's and from which `dagrun generate`
# writes text. Under the sanitizers (slow) it trains a few steps only (and
# the gate is opened for them).
. "$(dirname "$0")/lib.sh"

run_pipeline pretrain-llama 10
"$PY" - "$R" "$FULL" <<'P' || fail "pretrain-llama's model did not learn or pass: $(cat "$R/train/out/summary.json")"
import json, sys
R, full = sys.argv[1], sys.argv[2] == "1"
s = json.load(open(R + "/train/out/summary.json"))
print(f"val loss {s['val_loss']:.4f}, unigram entropy {s['unigram_entropy']:.4f}, "
      f"{s['tokens_per_s']:.0f} tokens/s over {s['steps']} steps")
assert s["val_loss"] < s["init_loss"], s
if full:
    assert s["steps"] == 100, s
    assert s["val_loss"] < s["unigram_entropy"] - 0.5, s
v = json.load(open(R + "/validate/out/metrics.json"))
assert v["passed"] and v["gates"]["max_val_loss"] == (5.5 if full else 100), v
m = json.load(open(R + "/export/out/model/config.json"))
assert m["model_type"] == "llama" and m["num_key_value_heads"] == 2, m
P
expect_in "$R/train/attempt-1/log" "model llama-tiny"
expect_in "$R/train/out/samples.txt" "=== sample"
E="$R/export/out/model"
CK=$(ls -d "$R"/train/checkpoints/step-* | tail -1)
echo "3 17 42 99 5 250 7 7 300 1 64 128 2 9 11 13 0 5 6 7" > prompt.ids
"$DAGRUN_BUILD_DIR/bin/model_logits" "$CK" prompt.ids ours.bin >/dev/null || fail "model_logits on $CK"
"$PY" "$DAGRUN_SOURCE_DIR/tests/reference/check_export.py" logits "$E" prompt.ids ours.bin 1e-5 >logits.log 2>&1 ||
  fail "the exported Llama's logits are not the checkpoint's: $(cat logits.log)"
cat logits.log
run_to gen "$DAGRUN" generate "$E" --prompt "The" --tokens 20 --seed 1
[ "$RC" -eq 0 ] || fail "generate from the export exited $RC: $(cat gen.err)"
expect_in gen.err "Hugging Face Llama"
expect_in gen.out "The"
pass
