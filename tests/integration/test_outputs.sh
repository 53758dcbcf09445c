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
pass
