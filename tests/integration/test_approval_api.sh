# Approval through `dagrun serve`'s API: POST .../tasks/TASK/approve and
# /reject need the POST token or an HMAC signature, refuse an unknown run
# or task, a task that does not wait, a bad body, and a run that is not
# running; a waiting approval outlives a restart of serve (the next start
# resumes the run and the task waits again), and the approval given then
# is recorded with who and how.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"
mkdir -p dags
write_serve_secrets
cat > dags/gate.yaml <<Y
dag: gate
tasks:
  train: {stage: exec, with: {command: [true]}}
  promote:
    needs: [train]
    approval: {message: "promote?"}
  deploy: {stage: exec, needs: [promote], with: {command: [touch, $T/deployed]}}
Y

waits() { [ "$(store_task_state "$1" promote)" = waiting_approval ]; }
# expect_status OUT CODE: OUT ("STATUS BODY") has status CODE.
expect_status() {
  case "$1" in "$2 "*) ;; *) fail "expected $2, got: $1" ;; esac
}

serve_start --log serve1.log
out=$(http POST /api/dags/gate/runs '{}' token)
expect_status "$out" 201
RUN=$(echo "${out#* }" | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["run_id"])')
wait_until 20 waits "$RUN" || fail "promote does not wait: $(cat serve1.log)"
# The API shows the state.
out=$(http GET "/api/runs/$RUN")
echo "$out" | grep -q '"name":"promote","state":"waiting_approval"' || fail "GET run: $out"

A="/api/runs/$RUN/tasks/promote/approve"
for auth in none badtoken badhmac stalehmac; do
  out=$(http POST "$A" '' $auth)
  expect_status "$out" 401
done
expect_status "$(http POST /api/runs/nosuchrun/tasks/promote/approve '' token)" 404
expect_status "$(http POST "/api/runs/$RUN/tasks/nosuch/approve" '' token)" 404
out=$(http POST "/api/runs/$RUN/tasks/train/approve" '' token)
expect_status "$out" 409
case "$out" in *"not waiting for approval (it is success)"*) ;; *) fail "train: $out" ;; esac
expect_status "$(http POST "/api/runs/$RUN/tasks/a..b/approve" '' token)" 400
expect_status "$(http POST "$A" '{"who":"x"}' token)" 400
expect_status "$(http POST "$A" '{"via":"cli"}' token)" 400
expect_status "$(http POST "$A" '{"by":7}' token)" 400
expect_status "$(http POST "$A" '{"by":"x\u001b[2Jy"}' token)" 400
# reason is for reject only
expect_status "$(http POST "$A" '{"reason":"x"}' token)" 400
# Nothing was recorded by the refused requests.
"$DAGRUN" status --json "$RUN" | "$PY" -c 'import json, sys; assert json.load(sys.stdin)["approvals"] == []' ||
  fail "a refused request left an approval"
waits "$RUN" || fail "promote no longer waits"

# serve stops (SIGTERM): the run is interrupted, and nothing can approve it.
serve_stop
store_run_is "$RUN" interrupted || fail "run after stop: $(store_run_state "$RUN")"
run_dagrun approve "$RUN" promote
expect_rc 1
expect_in "$T/err" "is not running (it is interrupted)"

# The next start resumes the run: promote waits again, and is approved
# through the API (HMAC-signed), as the dashboard's button does.
serve_start --log serve2.log
wait_until 20 waits "$RUN" || fail "promote does not wait after the restart: $(cat serve2.log)"
out=$(http POST "$A" '{"by":"alice","via":"dashboard"}' hmac)
expect_status "$out" 200
case "$out" in *'"decision":"approved"'*'"replay":false'*) ;; *) fail "approve: $out" ;; esac
wait_until 20 store_run_is "$RUN" success || fail "run after the approval: $(store_run_state "$RUN")"
[ -e "$T/deployed" ] || fail "deploy did not run"
"$DAGRUN" status --json "$RUN" | "$PY" -c '
import json, sys
a = json.load(sys.stdin)["approvals"]
assert len(a) == 1, a
a = a[0]
assert (a["task"], a["decision"], a["by"], a["via"], a["attempt"]) == ("promote", "approved", "alice", "dashboard", 2), a
assert a["time"] > 0, a' || fail "store: $("$DAGRUN" status --json "$RUN")"
# A replay once the task went on: it no longer waits.
expect_status "$(http POST "$A" '{"by":"alice"}' token)" 409

# Rejected through the API: the task fails with the reason.
out=$(http POST /api/dags/gate/runs '{}' token)
RUN2=$(echo "${out#* }" | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["run_id"])')
wait_until 20 waits "$RUN2" || fail "promote of run 2 does not wait"
out=$(http POST "/api/runs/$RUN2/tasks/promote/reject" '{"by":"bob","reason":"not yet"}' token)
expect_status "$out" 200
wait_until 20 store_run_is "$RUN2" failed || fail "run 2: $(store_run_state "$RUN2")"
"$DAGRUN" status --json "$RUN2" | "$PY" -c '
import json, sys
r = json.load(sys.stdin)
t = {t["name"]: t for t in r["tasks"]}
assert t["promote"]["state"] == "failed", t
assert t["promote"]["error"] == "rejected: by bob via api: not yet", t["promote"]
assert t["deploy"]["state"] == "upstream_failed", t' || fail "run 2: $("$DAGRUN" status --json "$RUN2")"
serve_stop
pass
