# The checkpoint stage on real checkpoints of a short training run:
# promotions over several runs keep exactly what retention must (keep_last
# newest + keep_best lowest loss), latest/best point right, promotion.json
# says where each model came from, the task's outputs name it; a corrupt
# checkpoint, a diverged one (NaN weights, good checksums), the metrics
# of another checkpoint, a missing tokenizer and bad params are refused
# with the registry untouched; a copy that fails (ulimit -f) leaves
# nothing half-written and the next promotion works;
# without dir: the registry is models/<dag> beside runs/ (or under
# $DAGRUN_MODELS_DIR).
. "$(dirname "$0")/lib.sh"

DATA=$(make_token_data c 320)
TOK="$DATA/tokenizer.json"

# Six checkpoints: steps 10, 20, ..., 60.
cat > train.yaml <<Y
dag: train
tasks:
  train: {stage: train, with: {data: "$DATA", n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, batch_size: 4, threads: 1, steps: 60, lr: 0.003, eval_every: 0, checkpoint_every: 10, keep_checkpoints: 10, samples: 0}}
Y
run_dagrun run train.yaml --no-cache --plain
expect_rc 0
CK="$(run_dir train)/train/checkpoints"
ck() { echo "$CK/step-$(printf %08d "$1")"; }
for s in 10 20 30 40 50 60; do [ -d "$(ck $s)" ] || fail "no checkpoint $s: $(ls "$CK")"; done
# model.safetensors must be well over the ulimit -f used below.
[ "$(stat -c %s "$(ck 10)/model.safetensors")" -gt 100000 ] || fail "model too small for the ulimit test"

# metrics STEP LOSS [CHECKPOINT]: a validate-style metrics.json; its path.
metrics() {
  local f="$T/metrics-$1-$2.json"
  /usr/bin/python3 - "$f" "$2" "${3:-$(ck "$1")}" <<'P'
import json, math, sys
json.dump({"val_loss": float(sys.argv[2]), "perplexity": math.exp(float(sys.argv[2])),
           "accuracy": 0.25, "tokens": 2048, "checkpoint": sys.argv[3]}, open(sys.argv[1], "w"))
P
  echo "$f"
}

REG="$T/registry"
# promote DAG CHECKPOINT METRICS [MORE WITH]: a DAG of one checkpoint task
# (retention from $KEEP when set), run; RC, $T/out as run_dagrun leaves
# them.
promote() {
  cat > "$1.yaml" <<Y
dag: $1
tasks:
  checkpoint: {stage: checkpoint, with: {checkpoint: "$2", metrics: "$3", dir: "$REG", ${KEEP:-keep_last: 2, keep_best: 2} ${4:-}}}
Y
  run_dagrun run "$1.yaml" --no-cache --plain
}
# The registry's names, link targets and file sizes: equal = untouched.
snap() { (cd "$REG" && find . -printf '%p %y %s %l\n' | sort); }
# The entries' steps, by seq.
steps() {
  /usr/bin/python3 - "$1" <<'P'
import json, os, sys
e = []
for n in os.listdir(sys.argv[1]):
    p = os.path.join(sys.argv[1], n, "promotion.json")
    if not n.startswith(".") and not os.path.islink(os.path.join(sys.argv[1], n)) and os.path.exists(p):
        j = json.load(open(p))
        e.append((j["seq"], j["step"]))
print(" ".join(str(s) for _, s in sorted(e)))
P
}
entry_of() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$(run_dir "$1")/checkpoint/outputs.json" "$2"; }

# Six promotions, losses 5, 3, 4, 2.5, 6, 7; keep_last 2, keep_best 2.
# The first takes its tokenizer from the checkpoint's manifest.
i=0
for sl in 10:5 20:3 30:4 40:2.5 50:6 60:7; do
  i=$((i + 1))
  s=${sl%%:*} l=${sl#*:}
  extra=", tokenizer: \"$TOK\""
  [ $i -eq 1 ] && extra=""
  promote "p$i" "$(ck "$s")" "$(metrics "$s" "$l")" "$extra"
  expect_rc 0
  expect_in "$(run_dir "p$i")/checkpoint/attempt-1/log" "promoted $(entry_of "p$i" name)"
  if [ $i -eq 3 ]; then
    # 5, 3, 4: the newest two (3, 4) are also the best two; 5 goes.
    [ "$(steps "$REG")" = "20 30" ] || fail "after 3 promotions: $(steps "$REG")"
    expect_in "$(run_dir p3)/checkpoint/attempt-1/log" "retention removed $(entry_of p1 name) (seq 1, step 10, val_loss 5.0000)"
  fi
done
[ "$(steps "$REG")" = "20 40 50 60" ] || fail "registry holds steps $(steps "$REG"), expected 20 40 50 60"
[ "$(readlink "$REG/latest")" = "$(entry_of p6 name)" ] || fail "latest -> $(readlink "$REG/latest")"
[ "$(readlink "$REG/best")" = "$(entry_of p4 name)" ] || fail "best -> $(readlink "$REG/best")"
expect_in "$(run_dir p6)/checkpoint/attempt-1/log" "latest $(entry_of p6 name), best $(entry_of p4 name)"

# dagrun models: the four entries, oldest first, each with the run that
# made it; latest and best marked as the links point.
run_dagrun models --root "$REG" --json
expect_rc 0
cp "$T/out" models.json
/usr/bin/python3 - models.json "$(basename "$(run_dir p2)")" "$(basename "$(run_dir p4)")" \
  "$(basename "$(run_dir p5)")" "$(basename "$(run_dir p6)")" <<'P' || fail "dagrun models --json: $(cat models.json)"
import json, sys
m = json.load(open(sys.argv[1]))
assert [e["step"] for e in m] == [20, 40, 50, 60], m
assert [e["run"] for e in m] == sys.argv[2:6], [e["run"] for e in m]
assert [e["val_loss"] for e in m] == [3, 2.5, 6, 7], m
assert [e["latest"] for e in m] == [False, False, False, True], m
assert [e["best"] for e in m] == [False, True, False, False], m
assert all(e["task"] == "checkpoint" and e["promoted_at"].endswith("Z") for e in m), m
P
run_dagrun models --root "$REG"
expect_rc 0
expect_in "$T/out" "4 models in $REG"
grep -q "$(entry_of p4 name) .*$(basename "$(run_dir p4)") .* 2\.5000 .*\[best\]$" "$T/out" ||
  fail "the best model's row: $(cat "$T/out")"
grep -q "$(entry_of p6 name) .*\[latest\]$" "$T/out" || fail "the latest model's row: $(cat "$T/out")"
run_dagrun models --root "$T/nothing-here"
expect_rc 0
expect_in "$T/out" "no models in $T/nothing-here"
run_dagrun models
expect_rc 2
expect_in "$T/err" "needs a DAG or --root DIR"
run_dagrun models ../p1
expect_rc 2
expect_in "$T/err" "is not a DAG name"
run_dagrun models --root "$REG/latest/promotion.json"
expect_rc 1

# The newest entry: its promotion.json, files and the task's outputs.
R6=$(run_dir p6)
N6=$(entry_of p6 name)
[ "$N6" = "$(basename "$R6")-step-00000060" ] || fail "name $N6"
[ "$(entry_of p6 model)" = "$REG/$N6" ] || fail "model output $(entry_of p6 model)"
[ "$(entry_of p6 models)" = "$REG" ] || fail "models output $(entry_of p6 models)"
[ "$(entry_of p6 val_loss)" = "7.000000" ] || fail "val_loss output $(entry_of p6 val_loss)"
task_field "$R6" checkpoint outputs | grep -qF "$REG/$N6" || fail "run.json outputs: $(task_field "$R6" checkpoint outputs)"
/usr/bin/python3 - "$REG/$N6/promotion.json" "$(basename "$R6")" "$(realpath "$(ck 60)")" "$(sha256sum "$TOK" | cut -c1-64)" <<'P' || fail "promotion.json: $(cat "$REG/$N6/promotion.json")"
import json, sys
p = json.load(open(sys.argv[1]))
assert p["format"] == "dagrun-model" and p["version"] == 1, p
assert p["seq"] == 6 and p["step"] == 60, p
assert p["run"] == sys.argv[2] and p["dag"] == "p6" and p["task"] == "checkpoint", p
assert p["source"] == sys.argv[3], p
assert p["val_loss"] == 7.0 and abs(p["accuracy"] - 0.25) < 1e-12, p
assert p["tokenizer_sha256"] == sys.argv[4], p
assert p["validation"]["tokens"] == 2048 and p["validation"]["checkpoint"] == sys.argv[3], p
P
for f in model.safetensors optim.bin guard.bin manifest.json; do
  cmp -s "$(ck 60)/$f" "$REG/$N6/$f" || fail "$f of the promoted model differs from the checkpoint's"
done
# The one whose tokenizer came from the manifest (p1) is gone; p4's copy
# is the tokenize stage's tokenizer.json, as p1's was.
cmp -s "$TOK" "$REG/$N6/tokenizer.json" || fail "tokenizer.json differs"
[ -f "$REG/latest/model.safetensors" ] || fail "latest does not lead to a model"

# An attempt run again after its promotion (a retry after a failure past
# the rename): the entry is this run's and verifies, so it is kept, not
# refused as a name already there.
set +e
"$DAGRUN" __worker "$R6/checkpoint/attempt-1/attempt.json" 3>/dev/null >again.log 2>&1
rc=$?
set -e
[ "$rc" -eq 0 ] || fail "attempt run again failed ($rc): $(cat again.log)"
expect_in again.log "$REG/$N6 was promoted by an earlier attempt of this run: kept"
[ "$(steps "$REG")" = "20 40 50 60" ] || fail "after the attempt again: $(steps "$REG")"

# A corrupt checkpoint (one flipped byte): refused, naming the file, and
# the registry untouched.
BEFORE=$(snap)
cp -r "$(ck 30)" "$T/bad-step"
printf '\x55' | dd of="$T/bad-step/model.safetensors" bs=1 seek=5000 conv=notrunc status=none
promote corrupt "$T/bad-step" "$(metrics 30 1.0 "$T/bad-step")"
expect_rc 1
expect_in "$T/out" "model.safetensors: sha256 mismatch"
expect_in "$(run_dir corrupt)/checkpoint/attempt-1/log" "model.safetensors: sha256 mismatch"
[ "$(snap)" = "$BEFORE" ] || fail "a refused promotion changed the registry"
# Truncated: the same.
cp -r "$(ck 30)" "$T/short-step"
truncate -s 1000 "$T/short-step/model.safetensors"
promote short "$T/short-step" "$(metrics 30 1.0 "$T/short-step")"
expect_rc 1
expect_in "$T/out" "model.safetensors: truncated"
[ "$(snap)" = "$BEFORE" ] || fail "a refused promotion changed the registry"
# A diverged model (every weight NaN, every checksum good): refused,
# naming the tensor, not promoted as latest.
set_weights "$(ck 30)" "$T/nan-step" nan
promote nan "$T/nan-step" "$(metrics 30 1.0 "$T/nan-step")"
expect_rc 1
expect_in "$T/out" 'tensor "wte.weight" holds nan at element 0: the weights are not finite numbers'
[ "$(snap)" = "$BEFORE" ] || fail "a refused promotion changed the registry"

# The metrics of another checkpoint: refused.
promote other "$(ck 50)" "$(metrics 40 0.5)"
expect_rc 1
expect_in "$T/out" "are of checkpoint $(ck 40), not of $(ck 50)"
# Metrics that do not say which checkpoint: refused.
echo '{"val_loss": 0.5}' > "$T/anon.json"
promote anon "$(ck 50)" "$T/anon.json"
expect_rc 1
expect_in "$T/out" "no \"checkpoint\""
[ "$(snap)" = "$BEFORE" ] || fail "refused metrics changed the registry"

# No tokenizer given and none recorded in the manifest: refused, saying
# what to do. (The manifest is not under its own checksums.)
cp -r "$(ck 30)" "$T/notok-step"
/usr/bin/python3 - "$T/notok-step/manifest.json" <<'P'
import json, sys
m = json.load(open(sys.argv[1]))
del m["state"]["config"]["tokenizer"]
json.dump(m, open(sys.argv[1], "w"))
P
promote notok "$T/notok-step" "$(metrics 30 1.0 "$T/notok-step")"
expect_rc 1
expect_in "$T/out" "records no tokenizer"
expect_in "$T/out" "set tokenizer:"
promote badtok "$(ck 30)" "$(metrics 30 1.0)" ", tokenizer: \"$T/nope.json\""
expect_rc 1
expect_in "$T/out" "tokenizer $T/nope.json: No such file or directory"
# A tokenizer of the same 320 ids trained on other text: not the one the
# checkpoint records, so not kept beside it.
OTHER=$(other_token_data c 320)
promote othertok "$(ck 30)" "$(metrics 30 1.0)" ", tokenizer: \"$OTHER/tokenizer.json\""
expect_rc 1
expect_in "$T/out" "the tokenizer $OTHER/tokenizer.json is not the model $(ck 30)'s ($TOK): set tokenizer: to the tokenizer.json it was trained with"
[ "$(snap)" = "$BEFORE" ] || fail "a refused promotion changed the registry"

# A copy that fails half-way: under ulimit -f 140 (KiB) the run's logs, the
# run store's WAL and small files fit but the 146 KiB model.safetensors
# does not. The task fails saying so; no entry, no temporary is left.
cat > full.yaml <<Y
dag: full
tasks:
  checkpoint: {stage: checkpoint, with: {checkpoint: "$(ck 30)", metrics: "$(metrics 30 1.0)", dir: "$REG", keep_last: 2, keep_best: 2, tokenizer: "$TOK"}}
Y
set +e
(ulimit -f 140 && exec "$DAGRUN" run full.yaml --plain) >"$T/out" 2>"$T/err"
RC=$?
set -e
expect_rc 1
expect_in "$T/out" "promotion refused: copy"
expect_in "$T/out" "model.safetensors: File too large"
[ "$(snap)" = "$BEFORE" ] || fail "a failed copy changed the registry:
$(snap)"
ls -a "$REG" | grep -q '^\.tmp-' && fail "a failed copy left $(ls -a "$REG" | grep '^\.tmp-')"
# The same promotion without the limit goes through (in a new run): with
# loss 1.0 it is the new best; 20 (3.0) and 50 (6.0) go.
sed 's/^dag: full$/dag: full2/' full.yaml > full2.yaml
run_dagrun run full2.yaml --no-cache --plain
expect_rc 0
[ "$(steps "$REG")" = "40 60 30" ] || fail "after the retried copy: $(steps "$REG")"
[ "$(readlink "$REG/best")" = "$(entry_of full2 name)" ] || fail "best -> $(readlink "$REG/best")"
[ "$(readlink "$REG/latest")" = "$(entry_of full2 name)" ] || fail "latest -> $(readlink "$REG/latest")"

# Without metrics: promoted with null numbers, a warning, never best.
REG="$T/models-nometrics"
promote nom "$(ck 60)" "" ", tokenizer: \"$TOK\""
expect_rc 0
expect_in "$(run_dir nom)/checkpoint/attempt-1/log" "no metrics"
/usr/bin/python3 -c '
import json, sys
p = json.load(open(sys.argv[1]))
assert p["val_loss"] is None and p["validation"] is None, p
' "$REG/latest/promotion.json" || fail "promotion.json: $(cat "$REG/latest/promotion.json")"
[ ! -e "$REG/best" ] && [ ! -L "$REG/best" ] || fail "best exists without a validated model"
[ -z "$(entry_of nom val_loss 2>/dev/null)" ] || fail "a val_loss output without metrics"

# No dir: models/<dag> beside the runs directory, or $DAGRUN_MODELS_DIR/<dag>.
cat > pdef.yaml <<Y
dag: pdef
tasks:
  checkpoint: {stage: checkpoint, with: {checkpoint: "$(ck 20)", tokenizer: "$TOK"}}
Y
run_dagrun run pdef.yaml --no-cache --plain
expect_rc 0
[ -f "$T/models/pdef/latest/promotion.json" ] || fail "no $T/models/pdef/latest: $(ls -R "$T/models" | head)"
[ "$(entry_of pdef models)" = "$T/models/pdef" ] || fail "models output $(entry_of pdef models)"
DAGRUN_MODELS_DIR="$T/elsewhere" run_dagrun run pdef.yaml --no-cache --plain
expect_rc 0
[ -f "$T/elsewhere/pdef/latest/promotion.json" ] || fail "DAGRUN_MODELS_DIR not used"
# dagrun models DAG finds the same registries.
run_dagrun models pdef
expect_rc 0
expect_in "$T/out" "1 model in $T/models/pdef"
DAGRUN_MODELS_DIR="$T/elsewhere" run_dagrun models pdef
expect_rc 0
expect_in "$T/out" "1 model in $T/elsewhere/pdef"

# Bad params: no checkpoint (the DAG is refused), keep_last 0 (the task
# exits 2, saying why).
cat > nock.yaml <<Y
dag: nock
tasks:
  checkpoint: {stage: checkpoint, with: {dir: "$T/x"}}
Y
run_dagrun run nock.yaml --no-cache --plain
[ "$RC" -ne 0 ] || fail "a checkpoint task without checkpoint ran"
grep -q "checkpoint" "$T/out" "$T/err" || fail "no message about the missing param: $(cat "$T/out" "$T/err")"
REG="$T/registry"
KEEP="keep_last: 0" promote keep0 "$(ck 20)" "$(metrics 20 3)"
expect_rc 1
expect_in "$T/out" "keep_last must be an integer of at least 1"
[ "$(task_field "$(run_dir keep0)" checkpoint exit_code)" = 2 ] || fail "keep_last 0: exit code $(task_field "$(run_dir keep0)" checkpoint exit_code)"
KEEP="keep_best: -1" promote keepb "$(ck 20)" "$(metrics 20 3)"
expect_rc 1
expect_in "$T/out" "keep_best must be an integer of at least 0"

pass
