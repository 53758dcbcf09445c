# A plugin's outputs reach downstream tasks through ${tasks.T.outputs.K},
# task env and ${run.*} resolve at start, metrics land in metrics.jsonl,
# and outputs.json records them.
. "$(dirname "$0")/lib.sh"

cat > out.yaml <<'Y'
dag: outs
params: {greeting: hello}
tasks:
  produce: {stage: outputs, with: {key: model_path, value: "/models/${params.greeting}"}}
  consume:
    stage: exec
    needs: [produce]
    env: {RUN_ID: "${run.id}", MODEL: "${tasks.produce.outputs.model_path}"}
    with:
      command: [sh, -c, 'echo "$MODEL $RUN_ID $1" > "$DAGRUN_OUT_DIR/got"', x, "${tasks.produce.outputs.model_path}"]
Y
run_dagrun run out.yaml --plain
expect_rc 0
R=$(run_dir outs)
id=$(basename "$R")
[ "$(cat "$R/consume/out/got")" = "/models/hello $id /models/hello" ] || fail "consume got: $(cat "$R/consume/out/got")"
expect_in "$R/produce/outputs.json" '"model_path"'
[ -s "$R/produce/metrics.jsonl" ] || fail "no metrics.jsonl"
/usr/bin/python3 -c '
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    assert {"name", "value", "step", "time", "attempt"} <= m.keys(), m
' "$R/produce/metrics.jsonl" || fail "metrics.jsonl: $(cat "$R/produce/metrics.jsonl")"

# What YAML users write reaches the plugin typed to its schema: numbers as
# strings, a scalar as a 1-item list, map values as strings, an env var
# as an integer.
cat > types.yaml <<'Y'
dag: types
tasks:
  t:
    stage: echo_params
    with: {s: 12, i: "${env:DAGRUN_TEST_NUM}", f: 3, b: "true", l: one, m: {k: v, n: 3}}
Y
DAGRUN_TEST_NUM=42 run_dagrun run types.yaml --plain
expect_rc 0
R=$(run_dir types)
diff -u - "$R/t/out/params.txt" <<'EOF' || fail "params as the plugin saw them differ"
s string 12
i int 42
f float 3
b bool true
l list 1
l[0] one
m map 2
m[k] v
m[n] 3
EOF
# An output the upstream task never set fails the task that needs it at
# its start, with the reason, and without retrying: another attempt would
# meet the same problem.
cat > noout.yaml <<'Y'
dag: noout
tasks:
  produce: {stage: outputs, with: {key: other, value: x}}
  consume: {stage: exec, needs: [produce], retries: 3, with: {command: [echo, "${tasks.produce.outputs.model_path}"]}}
Y
run_dagrun run noout.yaml --plain
expect_rc 1
R=$(run_dir noout)
[ "$(task_field "$R" consume state)" = failed ] || fail "consume: $(task_field "$R" consume state)"
[ "$(task_field "$R" consume attempts)" = 1 ] || fail "consume attempts: $(task_field "$R" consume attempts)"
expect_in "$T/out" "model_path"

# An output value over 16 MiB is refused (the stage is told; the log
# says why), and a message line over the pipe's limit is dropped without
# dagrun holding it: dagrun's peak memory stays far below the line.
cat > big.yaml <<'Y'
dag: big
tasks:
  huge: {stage: outputs, with: {key: big, value: "0123456789abcdef", repeat: 1100000}}
Y
run_dagrun run big.yaml --plain
R=$(run_dir big)
[ "$(task_field "$R" huge state)" = failed ] || fail "huge: $(task_field "$R" huge state)"
expect_in "$R/huge/attempt-1/log" "output big refused: 17600000 bytes, over the 16 MiB an output may hold"
# The largest process of this run is dagrun itself (the worker writes
# 64 KiB at a time). Holding the line would take it past 120 MB; the
# limit leaves room for AddressSanitizer's own (about 70 MB in all).
cat > raw.yaml <<'Y'
dag: raw
tasks:
  raw: {stage: outputs, with: {key: fine, value: ok, raw_line: 120000000}}
Y
/usr/bin/time -f "%M" -o "$T/rss" "$DAGRUN" run raw.yaml --plain > "$T/out" 2>&1 || true
R=$(run_dir raw)
[ "$(task_field "$R" raw state)" = success ] || fail "raw: $(task_field "$R" raw state)"
expect_in "$T/out" "was dropped"
RSS_KIB=$(tail -n 1 "$T/rss")
[ "$RSS_KIB" -lt 110000 ] || fail "dagrun held a 120 MB message line: peak RSS $RSS_KIB KiB"

# An env var that is no integer is caught by check, before anything runs.
DAGRUN_TEST_NUM=forty run_dagrun check types.yaml
expect_rc 2
expect_in "$T/err" "param 'i' of stage 'echo_params' in task 't': expected an integer"
pass
