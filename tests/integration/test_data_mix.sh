# The train stage's data_mix: two tokenize outputs with one tokenizer,
# mixed 0.8/0.2 with a token budget on one: the tokens drawn from each
# are metrics (metrics.jsonl, tfevents) and in summary.json, the budgeted
# source stops at its budget exactly; a run killed mid-training (kill -9
# of dagrun) and resumed ends with the very weights and optimizer state
# of a run that never stopped; with every source budgeted, steps is cut to
# what the budgets hold; bad mixtures are refused naming the param and
# the source.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"

WEB=$(make_token_data web 320)
# code: another corpus, tokenized with web's tokenizer.
mkdir -p "$T/corpus-code"
"$PY" - "$T/corpus-code" <<'P'
import random, sys
rng = random.Random(5)
for f in range(2):
    with open(f"{sys.argv[1]}/code{f}.txt", "w") as out:
        docs = []
        for d in range(120):
            lines = [f"x{rng.randint(0, 9)} = f(x{rng.randint(0, 9)}) + {rng.randint(0, 99)}"
                     for _ in range(rng.randint(3, 9))]
            docs.append("\n".join(lines))
        out.write("\n%\n".join(docs) + "\n")
P
CODE=$(tokenize_corpus code "$T/corpus-code" "tokenizer: \"$WEB/tokenizer.json\"")

BASE='n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, batch_size: 4, threads: 1, samples: 0, eval_every: 0, lr: 0.003'
MIX="data_mix: {web: \"$WEB\", code: \"$CODE\"}, data_weights: {web: 0.8, code: 0.2}"
mix_dag() { # NAME EXTRA_PARAMS [TASK_KEYS]
  cat > "$1.yaml" <<Y
dag: $1
tasks:
  train: {stage: train, ${3:-} with: {$BASE, $MIX, $2}}
Y
}

# ---- Shares, budget and metrics: 200 steps of 4 rows of 32 tokens; code
# may have 3200 tokens (100 rows), which it uses up around step 125.
RUN="steps: 200, checkpoint_every: 50, data_max_tokens: {code: 3200}"
mix_dag whole "$RUN"
run_dagrun run whole.yaml --plain
expect_rc 0
R=$(run_dir whole)
"$PY" - "$R/train" <<'P' || fail "mixture accounting: $(cat "$R/train/out/summary.json")"
import glob, json, sys
d = sys.argv[1]
s = json.load(open(d + "/out/summary.json"))
mix = s["data_mix"]
assert s["steps"] == 200 and s["tokens"] == 200 * 4 * 32, s
assert mix["code"]["tokens"] == 3200, mix
assert mix["web"]["tokens"] + mix["code"]["tokens"] == s["tokens"], mix
assert abs(mix["web"]["weight"] - 0.8) < 1e-9 and mix["code"]["max_tokens"] == 3200, mix
series = {}
for line in open(d + "/metrics.jsonl"):
    m = json.loads(line)
    if m["name"].startswith("mix_tokens_"):
        series.setdefault(m["name"], {})[m["step"]] = m["value"]
web, code = series["mix_tokens_web"], series["mix_tokens_code"]
assert sorted(web) == sorted(code) == list(range(1, 201)), (len(web), len(code))
assert all(web[k] + code[k] == k * 128 for k in web), "per-step tokens do not add up"
assert web[200] == mix["web"]["tokens"] and code[200] == 3200
# Until code's budget is near, the draw follows 0.8/0.2 (400 rows: a few
# percent of noise); after it is spent, web takes every row.
assert abs(web[100] / (100 * 128) - 0.8) < 0.06, web[100] / 12800
full = min(k for k in code if code[k] == 3200)
assert 100 < full < 200 and web[200] - web[full] == (200 - full) * 128, full
ev = b"".join(open(f, "rb").read() for f in glob.glob(d + "/events.out.tfevents.*"))
assert b"mix_tokens_web" in ev and b"mix_tokens_code" in ev, "no mix_tokens in tfevents"
P

# ---- Killed and resumed: the same run, slowed (each batch 15 ms more: the
# same batches), dagrun killed (-9) once a checkpoint is written, then
# `dagrun resume` (resume: auto): the final weights and optimizer state
# are the uninterrupted run's, bit for bit.
mix_dag killed "$RUN" "cache: false,"
kill_at_checkpoint killed 50 15
K=$KILLED
[ -n "$STOPPED" ] && [ "$STOPPED" -lt 200 ] || fail "not stopped mid-run: step '$STOPPED'"
run_dagrun resume "$(basename "$K")" --plain
expect_rc 0
expect_in "$K/train/attempt-2/log" "resumed from"
cmp "$R/train/checkpoints/step-00000200/model.safetensors" "$K/train/checkpoints/step-00000200/model.safetensors" ||
  fail "the killed and resumed mixture run's weights differ from the uninterrupted run's"
cmp "$R/train/checkpoints/step-00000200/optim.bin" "$K/train/checkpoints/step-00000200/optim.bin" ||
  fail "the killed and resumed mixture run's optimizer state differs"
"$PY" - "$R/train/out/summary.json" "$K/train/out/summary.json" <<'P' || fail "resumed run's mixture: $(cat "$K/train/out/summary.json")"
import json, sys
a, b = (json.load(open(p))["data_mix"] for p in sys.argv[1:3])
assert a == b, (a, b)
P

# ---- Every source budgeted (web: one epoch, code: 3200 tokens): steps is
# cut to the steps they hold, with a warning, and the run ends there.
mix_dag budget "steps: 5000, data_epochs: {web: 1}, data_max_tokens: {code: 3200}"
run_dagrun run budget.yaml --plain
expect_rc 0
B=$(run_dir budget)
expect_in "$B/train/attempt-1/log" "of the 5000 asked: training ends at step"
"$PY" - "$B/train/out/summary.json" <<'P' || fail "budgeted run: $(cat "$B/train/out/summary.json")"
import json, sys
s = json.load(open(sys.argv[1]))
mix = s["data_mix"]
assert 100 < s["steps"] < 5000, s
assert mix["code"]["tokens"] <= 3200 and mix["web"]["epochs"] == 1, mix
assert mix["web"]["tokens"] + mix["code"]["tokens"] == s["steps"] * 128, s
P

# ---- Templates in data_mix's values: an upstream task's output.
cat > tmpl.yaml <<Y
dag: tmpl
tasks:
  web: {stage: outputs, with: {key: dir, value: "$WEB"}}
  train: {stage: train, needs: [web], with: {$BASE, steps: 3, data_mix: {web: "\${tasks.web.outputs.dir}", code: "$CODE"}}}
Y
run_dagrun run tmpl.yaml --plain
expect_rc 0
expect_in "$(run_dir tmpl)/train/out/summary.json" "\"dir\":	\"$WEB\""

# ---- Refusals, each naming the param and the source.
refused() { # NAME EXTRA_PARAMS MESSAGE (data_mix without data_weights)
  cat > "$1.yaml" <<Y
dag: $1
tasks:
  train: {stage: train, with: {$BASE, data_mix: {web: "$WEB", code: "$CODE"}, steps: 2, $2}}
Y
  run_dagrun run "$1.yaml" --plain
  expect_rc 1
  expect_in "$T/out" "$3"
}
refused w0 "data_weights: {web: 0.8, code: 0}" "data_weights: code: '0' must be a number above 0"
refused wneg "data_weights: {web: 0.8, code: -1}" "data_weights: code: '-1' must be a number above 0"
refused wtypo "data_weights: {web: 0.8, cod: 1}" "data_weights: 'cod' is not a source of data_mix"
refused both "data_max_tokens: {code: 10}, data_epochs: {code: 1}" "code: data_max_tokens and data_epochs are both set"
refused frac "data_max_tokens: {code: 10.5}" "data_max_tokens: code: '10.5' must be a whole number of tokens above 0"
refused withdata "data: \"$WEB\"" "data and data_mix exclude each other"
# Another tokenizer: same vocabulary size, other merges; another size.
OTHER=$(tokenize_corpus other "$T/corpus-code" "vocab_size: 320")
SMALL=$(make_token_data small 300)
code_from() { # NAME DIR MESSAGE: whole.yaml with code from DIR is refused
  sed "s|code: \"$CODE\"|code: \"$2\"|; s/dag: whole/dag: $1/" whole.yaml > "$1.yaml"
  run_dagrun run "$1.yaml" --plain
  expect_rc 1
  expect_in "$T/out" "$3"
}
code_from other "$OTHER" "data_mix: code's tokenizer $OTHER/tokenizer.json is not web's ($WEB/tokenizer.json)"
code_from small "$SMALL" "data_mix: code ($SMALL) has a vocabulary of 300 tokens, but web ($WEB) has 320"
code_from nowhere "$T/nowhere" "data_mix: code: $T/nowhere/manifest.json: missing"
cat > nodata.yaml <<Y
dag: nodata
tasks:
  train: {stage: train, with: {$BASE, steps: 2}}
Y
run_dagrun run nodata.yaml --plain
expect_rc 1
expect_in "$T/out" "no data: give data"
pass
