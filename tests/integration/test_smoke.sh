# The shipped smoke DAG runs end to end: every task succeeds, outputs flow
# downstream through ${tasks.T.dir}, logs and run.json land where
# docs/runs.md says.
. "$(dirname "$0")/lib.sh"

run_dagrun run "$DAGRUN_SOURCE_DIR/dags/smoke.yaml" --plain
expect_rc 0
expect_in "$T/out" "prepare: success"
expect_in "$T/out" "succeeded"
R=$(run_dir smoke)
for t in prepare count upper report cleanup; do
  [ "$(task_field "$R" $t state)" = success ] || fail "task $t: $(task_field "$R" $t state)"
  [ -f "$R/$t/attempt-1/log" ] || fail "no log for $t"
  [ -f "$R/$t/attempt-1/attempt.json" ] || fail "no attempt.json for $t"
done
[ "$(tr -d ' ' < "$R/count/out/count.txt")" = 4 ] || fail "count.txt: $(cat "$R/count/out/count.txt")"
expect_in "$R/upper/out/upper.txt" "GAMMA"
# report's stdout went to its log, with the run id substituted.
expect_in "$R/report/attempt-1/log" "run $(basename "$R"): 4 words"
expect_in "$R/report/attempt-1/log" "DELTA"
/usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["state"]=="success", r["state"]' "$R/run.json" \
  || fail "run.json state"
pass
