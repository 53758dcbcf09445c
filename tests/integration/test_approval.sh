# Approval tasks: a task with `approval:` waits (waiting_approval, in the
# store, status and run.json) until a person approves it (dagrun approve:
# it succeeds, its downstream runs, the store says who and how) or rejects
# it (dagrun reject: it fails, with the reason); at its timeout it fails,
# retries waiting again; the `approval` alert fires when it starts to wait.
# What is refused: an unknown run or task, a task that does not wait, a
# decision once the task went on.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"
start_webhook_server

cat > gate.yaml <<Y
dag: gate
alerts:
  - on: [approval]
    webhook: $BASE/ok
tasks:
  train: {stage: exec, with: {command: [true]}}
  promote:
    needs: [train]
    approval: {timeout: 1h, message: "promote the new model?"}
  deploy: {stage: exec, needs: [promote], with: {command: [touch, $T/deployed]}}
Y

waits() { [ "$(store_task_state "$1" promote)" = waiting_approval ]; }

# start_run: `dagrun run gate.yaml` in the background; sets PID and RUN
# once promote waits.
start_run() {
  rm -rf "$DAGRUN_RUNS_DIR" "$T/deployed"
  "$DAGRUN" run gate.yaml "$@" >run.out 2>run.err &
  PID=$!
  wait_until 20 test -d "$DAGRUN_RUNS_DIR/gate" || fail "no run: $(cat run.err)"
  RUN=$(basename "$(run_dir gate)")
  wait_until 20 waits "$RUN" || fail "promote does not wait: $(cat run.out run.err)"
}

# 1. Approved with the CLI: promote succeeds, deploy runs.
start_run
expect_in run.out "promote: waiting for approval: promote the new model? (dagrun approve $RUN promote)"
run_dagrun status "$RUN"
grep -E '^promote +waiting_approval' "$T/out" >/dev/null || fail "status: $(cat "$T/out")"
[ -e "$T/deployed" ] && fail "deploy ran before the approval"
# The alert fired when promote began to wait.
wait_until 10 test -s "$T/bodies.jsonl" || fail "no approval alert"
"$PY" - "$T/bodies.jsonl" "$RUN" <<'P' || fail "alert: $(cat "$T/bodies.jsonl")"
import json, sys
b = [json.loads(l) for l in open(sys.argv[1])]
assert len(b) == 1, b
a = b[0]
assert a["event"] == "approval" and a["task"] == "promote" and a["run"] == sys.argv[2], a
assert a["state"] == "waiting_approval" and "promote the new model?" in a["text"], a
P
# Refused: unknown run, unknown task, a task that does not wait.
run_dagrun approve nosuchrun promote
[ "$RC" -ne 0 ] || fail "approve of an unknown run succeeded"
run_dagrun approve "$RUN" nosuchtask
expect_rc 1
expect_in "$T/err" "has no task 'nosuchtask'"
run_dagrun approve "$RUN" train
expect_rc 1
expect_in "$T/err" "task 'train' of run $RUN is not waiting for approval (it is success)"
run_dagrun approve "$RUN" promote extra
expect_rc 2
run_dagrun approve "$RUN" promote
expect_rc 0
expect_in "$T/out" "task promote of run $RUN approved"
wait "$PID" || fail "run failed after the approval: $(cat run.out run.err)"
[ -e "$T/deployed" ] || fail "deploy did not run"
R=$(run_dir gate)
[ "$(task_field "$R" promote state)" = success ] || fail "run.json: promote $(task_field "$R" promote state)"
"$DAGRUN" status --json "$RUN" | "$PY" -c '
import json, os, pwd, sys
r = json.load(sys.stdin)
a = r["approvals"]
assert len(a) == 1 and a[0]["decision"] == "approved" and a[0]["via"] == "cli", a
assert a[0]["by"] == pwd.getpwuid(os.getuid()).pw_name and a[0]["task"] == "promote", a
t = [t for t in r["tasks"] if t["name"] == "promote"][0]
assert t["outputs"]["approved_via"] == "cli", t' || fail "store: $("$DAGRUN" status --json "$RUN")"
# A replay after the task went on is refused: it no longer waits.
run_dagrun approve "$RUN" promote
expect_rc 1
expect_in "$T/err" "not running"

# 2. Rejected: promote fails with the reason, deploy never runs; approving
# after the rejection is refused.
start_run
run_dagrun reject "$RUN" promote --reason "val_loss went up"
expect_rc 0
expect_in "$T/out" "task promote of run $RUN rejected"
# (A replay and the other decision while the task still waits are
# unit/test_store's: here the run may have acted on the rejection first.)
run_dagrun approve "$RUN" promote
[ "$RC" -eq 1 ] || fail "approve after a reject: exit $RC: $(cat "$T/out")"
set +e; wait "$PID"; RC=$?; set -e
[ "$RC" -eq 1 ] || fail "rejected run exit $RC: $(cat run.out run.err)"
R=$(run_dir gate)
[ "$(task_field "$R" promote state)" = failed ] || fail "promote $(task_field "$R" promote state)"
[ "$(task_field "$R" deploy state)" = upstream_failed ] || fail "deploy $(task_field "$R" deploy state)"
expect_in run.out "rejected: by "
expect_in run.out "via cli: val_loss went up"
[ -e "$T/deployed" ] && fail "deploy ran after a rejection"

# 3. Timeout: each attempt waits 1s, the retry waits again, then the task
# fails "approval timed out after 1.0s".
sed -i 's/timeout: 1h/timeout: 1s/; s/    approval:/    retries: 1\n    retry_delay: 0\n    approval:/' gate.yaml
rm -rf "$DAGRUN_RUNS_DIR"
run_dagrun run gate.yaml
expect_rc 1
R=$(run_dir gate)
[ "$(task_field "$R" promote state)" = failed ] || fail "promote $(task_field "$R" promote state)"
[ "$(task_field "$R" promote attempts)" = 2 ] || fail "attempts $(task_field "$R" promote attempts)"
expect_in "$T/out" "approval timed out after 1.0s"
expect_in "$R/promote/attempt-2/log" "waiting for approval: promote the new model?"

run_dagrun check gate.yaml
expect_rc 0
run_dagrun graph gate.yaml
expect_rc 0
expect_in "$T/out" "promote (approval)"
run_dagrun reject --help
expect_rc 0
expect_in "$T/out" "usage: dagrun reject RUN TASK [--reason TEXT]"

# 4. A DAG file that mixes stage and approval, or gives approval params,
# is refused by check.
cat > bad.yaml <<Y
dag: bad
tasks:
  a: {stage: exec, approval: {}, with: {command: [true]}}
  b: {approval: {timeout: 1h, mesage: x}}
  c: {approval: {}, with: {x: 1}}
Y
run_dagrun check bad.yaml
expect_rc 2
expect_in "$T/err" "task 'a' has both 'stage' and 'approval'"
expect_in "$T/err" "unknown key 'approval.mesage'"
expect_in "$T/err" "an approval task has no stage params"
pass
