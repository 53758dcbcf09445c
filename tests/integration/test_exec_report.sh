# An exec task reports as a plugin stage does: examples/wrapped-script,
# a Python script wrapped by exec, gives its outputs to the task
# downstream and its loss curve to metrics.jsonl, the TensorBoard file and
# report.html. Metrics are read while the command runs. `outputs:`
# declared on a task catches a typo'd ${tasks.T.outputs.K} at `check`,
# and a declared output that is never produced fails its task.
. "$(dirname "$0")/lib.sh"

EX="$DAGRUN_SOURCE_DIR/examples/wrapped-script/wrapped.yaml"

# --- the worked example, as its header says to run it ----------------------
run_dagrun check "$EX"
expect_rc 0
run_dagrun run "$EX" --plain
expect_rc 0
R=$(run_dir wrapped-script)
[ "$(task_field "$R" evaluate state)" = success ] || fail "evaluate: $(task_field "$R" evaluate state)"
# The downstream task got the model directory the script wrote.
expect_in "$R/evaluate/out/evaluated.txt" "weights.txt"
expect_in "$R/evaluate/attempt-1/log" "evaluating $R/train/out/model (train loss 0.5"
expect_in "$R/train/outputs.json" '"model_dir"'
expect_in "$R/train/outputs.json" '"final_loss"'

# metrics.jsonl: 20 losses, one per step, going down.
"$PY" - "$R/train/metrics.jsonl" <<'P' || fail "metrics.jsonl: $(head -c 600 "$R/train/metrics.jsonl")"
import json, sys
ms = [json.loads(l) for l in open(sys.argv[1])]
loss = [(m["step"], m["value"]) for m in ms if m["name"] == "loss"]
assert [s for s, _ in loss] == list(range(1, 21)), loss
assert all(a[1] > b[1] for a, b in zip(loss, loss[1:])), loss
assert sum(m["name"] == "lr" for m in ms) == 20, ms
P

# The TensorBoard file has the same loss scalars (TFRecord framing and
# the protobuf read by hand, as test_tensorboard.sh does in full).
"$PY" - "$R/train" <<'P' || fail "tfevents of $R/train"
import glob, struct, sys
files = glob.glob(sys.argv[1] + "/events.out.tfevents.*")
assert len(files) == 1, files
data = open(files[0], "rb").read()
def varint(b, i):
    v = shift = 0
    while True:
        x = b[i]; i += 1
        v |= (x & 0x7F) << shift
        shift += 7
        if not x & 0x80:
            return v, i
def fields(b):
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        f, w = key >> 3, key & 7
        if w == 0:
            v, i = varint(b, i)
        elif w == 1:
            v, i = b[i:i + 8], i + 8
        elif w == 5:
            v, i = b[i:i + 4], i + 4
        else:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        yield f, w, v
steps = []
at = 0
while at < len(data):
    (n,) = struct.unpack_from("<Q", data, at)
    body = data[at + 12:at + 12 + n]
    at += 16 + n
    step = 0
    for f, w, v in fields(body):
        if f == 2:
            step = v
        if f == 5:
            for _, _, sv in fields(v):
                tag = dict((vf, vv) for vf, _, vv in fields(sv)).get(1, b"")
                if tag == b"loss":
                    steps.append(step)
assert steps == list(range(1, 21)), steps
P

# report.html has the loss chart with its 20 points.
[ -f "$R/report.html" ] || fail "no report.html"
"$PY" - "$R/report.html" <<'P' || fail "report.html has no loss chart of train with 20 points"
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
m = re.search(r'data-title="train: loss".*?data-points="(\d+)"', text, re.S)
assert m and m.group(1) == "20", m and m.group(1)
P

# --- a typo'd reference to a declared output fails check at its place -----
sed 's/outputs\.final_loss}/outputs.final_los}/' "$EX" > typo.yaml
line=$(grep -n 'outputs.final_los}' typo.yaml | cut -d: -f1)
col=$(($(grep 'outputs.final_los}' typo.yaml | sed 's/\${.*//' | wc -c)))
run_dagrun check typo.yaml
expect_rc 2
expect_in "$T/err" "typo.yaml:$line:$col: error: task 'train' declares no output 'final_los' in \${tasks.train.outputs.final_los}; did you mean \${tasks.train.outputs.final_loss}?"

# Nothing close: the declared list is named.
cat > none.yaml <<'Y'
dag: none
tasks:
  a: {stage: exec, outputs: [], with: {command: ["true"]}}
  b: {stage: exec, needs: [a], with: {command: [echo, "${tasks.a.outputs.zzz}"]}}
Y
run_dagrun check none.yaml
expect_rc 2
expect_in "$T/err" "none.yaml:4:"
expect_in "$T/err" "task 'a' declares no output 'zzz' in \${tasks.a.outputs.zzz}; its outputs: are []"

# `outputs:` itself is checked: a list of keys, each valid and once, and
# only on a task.
cat > bad.yaml <<'Y'
dag: bad
defaults:
  outputs: [x]
tasks:
  a: {stage: exec, outputs: model_dir, with: {command: ["true"]}}
  b: {stage: exec, outputs: [ok, bad-key, ok, [x]], with: {command: ["true"]}}
Y
run_dagrun check bad.yaml
expect_rc 2
expect_in "$T/err" "bad.yaml:3:3: error: 'outputs' cannot be set in defaults, only in each task"
expect_in "$T/err" "bad.yaml:5:29: error: 'outputs' in task 'a': expected a list of output keys (e.g. [model_dir, val_loss]), found a string (\"model_dir\")"
expect_in "$T/err" "bad.yaml:6:34: error: 'outputs' in task 'b': \"bad-key\" is not an output key (letters, digits and '_')"
expect_in "$T/err" "bad.yaml:6:43: error: 'outputs' in task 'b': 'ok' is listed twice (first at line 6)"
expect_in "$T/err" "bad.yaml:6:47: error: 'outputs' in task 'b': expected an output key, found a list"

# --- a declared output never produced fails its task, not the next -------
cat > missing.yaml <<'Y'
dag: missing
tasks:
  train:
    stage: exec
    outputs: [model_dir, val_loss]
    with:
      command: [sh, -c, 'echo "{\"model_dir\": \"/m\"}" > "$DAGRUN_OUTPUTS"']
  eval: {stage: exec, needs: [train], with: {command: [echo, "${tasks.train.outputs.val_loss}"]}}
Y
run_dagrun run missing.yaml --plain
expect_rc 1
R=$(run_dir missing)
[ "$(task_field "$R" train state)" = failed ] || fail "train: $(task_field "$R" train state)"
[ "$(task_field "$R" eval state)" != success ] || fail "eval ran"
expect_in "$R/run.json" "did not produce output 'val_loss', which the task declares in outputs:"

# --- metrics reach metrics.jsonl while the command still runs ------------
cat > live.yaml <<'Y'
dag: live
tasks:
  t:
    stage: exec
    with:
      command:
        - sh
        - -c
        - |
          for i in 1 2 3; do echo "{\"step\": $i, \"loss\": $((10 - i))}" >> "$DAGRUN_METRICS"; done
          while [ ! -e "$0/go" ]; do sleep 0.1; done
        - ${env:LIVE_DIR}
Y
LIVE_DIR=$T "$DAGRUN" run live.yaml --plain >live.out 2>&1 &
pid=$!
ok=""
for _ in $(seq 100); do
  f=$(ls "$DAGRUN_RUNS_DIR"/live/*/t/metrics.jsonl 2>/dev/null | head -n 1 || true)
  if [ -n "$f" ] && [ "$(grep -c '"name":"loss"' "$f")" = 3 ]; then ok=1; break; fi
  sleep 0.1
done
touch "$T/go"
wait "$pid" || fail "the live run failed: $(cat live.out)"
[ -n "$ok" ] || fail "metrics.jsonl did not have the 3 losses while the command ran"
pass
