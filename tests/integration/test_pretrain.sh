# The main job, as the README's quick start runs it: dags/pretrain.yaml on
# the default corpus (Debian's fortunes) goes from raw text to token
# shards to a trained gpt-tiny whose validation loss ends well below the
# corpus's unigram entropy, passes its gate, is promoted into models/
# beside runs/ and exported as a Hugging Face directory that `dagrun
# generate` reads; a corpus given through DAGRUN_CORPUS replaces the
# default. Under the sanitizers (slow) it trains a few steps only (and the
# gate is opened for them).
. "$(dirname "$0")/lib.sh"

run_pipeline pretrain 20
full=$FULL
/usr/bin/python3 - "$R" <<'P' || fail "pretrain's outputs are not what a training run needs"
import json, sys
R = sys.argv[1]
shard = json.load(open(R + "/shard/out/manifest.json"))
tok = json.load(open(R + "/tokenize/out/manifest.json"))
# fortunes: about 2.5 MB in ~15,000 short texts, some of them repeated
assert shard["documents"]["train"] > 10000, shard["documents"]
assert shard["documents"]["val"] > 100, shard["documents"]
assert shard["dropped"]["duplicate"] > 0, shard["dropped"]
assert len([s for s in tok["shards"] if s["split"] == "train"]) == 8
assert tok["tokenizer"]["vocab_size"] == 4096, tok["tokenizer"]
assert tok["totals"]["train_tokens"] > 400000, tok["totals"]
assert tok["totals"]["val_tokens"] > 5000, tok["totals"]
# A 4096-id BPE on English prose: roughly 3-5 bytes per token.
assert 0.15 < tok["totals"]["tokens_per_byte"] < 0.4, tok["totals"]
P
/usr/bin/python3 - "$R" "$full" <<'P' || fail "pretrain's model did not learn: $(cat "$R/train/out/summary.json")"
import json, sys
R, full = sys.argv[1], sys.argv[2] == "1"
s = json.load(open(R + "/train/out/summary.json"))
print(f"val loss {s['val_loss']:.4f}, unigram entropy {s['unigram_entropy']:.4f}, "
      f"{s['tokens_per_s']:.0f} tokens/s over {s['steps']} steps")
assert s["val_loss"] < s["init_loss"], s
if full:
    assert s["steps"] == 1000, s
    # "well below": a model that uses context, not just frequencies
    assert s["val_loss"] < s["unigram_entropy"] - 1.0, s
P
expect_in "$R/train/out/samples.txt" "=== sample 3"
/usr/bin/python3 - "$R" "$T/models/pretrain" "$full" <<'P' || fail "validate, checkpoint or export did not give what they should"
import json, os, sys
R, models, full = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
v = json.load(open(R + "/validate/out/metrics.json"))
print(f"validate: val loss {v['val_loss']:.4f}, perplexity {v['perplexity']:.1f}, "
      f"accuracy {100 * v['accuracy']:.1f}% over {v['tokens']} tokens")
assert v["passed"] and v["gates"]["max_val_loss"] == (6.0 if full else 100), v
if full:
    assert v["step"] == 1000 and v["val_loss"] < 6.0 and v["accuracy"] > 0.1, v
latest = os.path.realpath(models + "/latest")
p = json.load(open(latest + "/promotion.json"))
assert p["step"] == v["step"] and p["val_loss"] == v["val_loss"], (p, v)
assert p["run"] == os.path.basename(R), (p["run"], R)
model = R + "/export/out/model"
for f in ("model.safetensors", "config.json", "generation_config.json",
          "tokenizer.json", "tokenizer_config.json"):
    assert os.path.getsize(model + "/" + f) > 0, f
cfg = json.load(open(model + "/config.json"))
assert cfg["model_type"] == "gpt2" and cfg["vocab_size"] == 4096, cfg
P
"$DAGRUN" generate "$T/models/pretrain/latest" --prompt "The" --tokens 20 --seed 7 >gen.txt 2>gen.err ||
  fail "dagrun generate on the promoted model: $(cat gen.err)"
"$DAGRUN" generate "$R/export/out/model" --prompt "The" --tokens 20 --seed 7 >gen2.txt 2>gen2.err ||
  fail "dagrun generate on the export: $(cat gen2.err)"
cmp gen.txt gen2.txt || fail "the export generates other text than the promoted model: $(cat gen.txt gen2.txt)"
grep -q '^The' gen.txt || fail "generate did not start with the prompt: $(cat gen.txt)"
echo "generated: $(head -c 200 gen.txt)"

# Any corpus through one variable: a JSON Lines file.
/usr/bin/python3 -c '
import json
with open("mine.jsonl", "w") as f:
    for i in range(300):
        f.write(json.dumps({"text": f"document {i}: " + "lorem ipsum dolor " * (i % 7 + 1)}) + "\n")
'
DAGRUN_TRAIN_STEPS=5 DAGRUN_MAX_VAL_LOSS=100 DAGRUN_CORPUS="$T/mine.jsonl" DAGRUN_CORPUS_FORMAT=jsonl run_dagrun run "$DAGRUN_SOURCE_DIR/dags/pretrain.yaml" --plain
expect_rc 0
# Run ids made in the same second do not sort by time: take the new one.
R2=$(ls -d "$DAGRUN_RUNS_DIR"/pretrain/*/ | sed 's:/$::' | grep -vxF "$R")
[ -d "$R2" ] || fail "no second run directory"
/usr/bin/python3 -c '
import json, sys
m = json.load(open(sys.argv[1] + "/shard/out/manifest.json"))
assert m["documents"]["kept"] == 300, m["documents"]
' "$R2" || fail "DAGRUN_CORPUS did not replace the corpus"
pass
