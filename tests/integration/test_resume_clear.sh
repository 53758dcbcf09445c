# Running tasks of a finished run again (Airflow's clear): `dagrun resume
# RUN --clear TASK [--downstream]` from the command line, POST
# /api/runs/{run}/resume through dagrun serve, and the dashboard's Retry
# and "+ downstream" buttons in headless Chromium. The cleared task (and
# with downstream every task after it) gets its next attempt, not from
# the cache; the others keep theirs. Refused: an unknown task, downstream
# alone, a run going, a succeeded run with nothing to clear.
. "$(dirname "$0")/lib.sh"
need_chromium
export DAGRUN_HOME="$T/home"
mkdir -p dags
# a -> b -> c, a -> d; e fails until its flag file exists.
cat > dags/abc.yaml <<Y
dag: abc
tasks:
  a: {stage: exec, with: {command: [true]}}
  b: {stage: exec, needs: [a], with: {command: [true]}}
  c: {stage: exec, needs: [b], with: {command: [true]}}
  d: {stage: exec, needs: [a], with: {command: [true]}}
  e: {stage: exec, needs: [a], with: {command: [test, -e, "$T/e-ok"]}}
Y
attempts() { run_dagrun status "$1" --json; "$PY" -c 'import json,sys; r = json.load(open(sys.argv[1])); print(" ".join("%s%d" % (t["name"], t["attempts"]) for t in r["tasks"]))' "$T/out"; }
run_dagrun run dags/abc.yaml --plain
expect_rc 1
run_dagrun runs --json
R=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["id"])' "$T/out")
[ "$(attempts "$R")" = "a1 b1 c1 d1 e1" ] || fail "first run: $(attempts "$R")"

# --- the CLI ---------------------------------------------------------------------
run_dagrun resume "$R" --clear zz
expect_rc 2
expect_in "$T/err" "--clear zz: run $R's DAG has no such task"
run_dagrun resume "$R" --downstream
expect_rc 2
expect_in "$T/err" "--downstream goes with --clear TASK"
[ "$(attempts "$R")" = "a1 b1 c1 d1 e1" ] || fail "a refused resume changed the run: $(attempts "$R")"
touch "$T/e-ok"
run_dagrun resume "$R" --clear b --downstream --plain
expect_rc 0
expect_in "$T/out" "b runs again (--clear)"
expect_in "$T/out" "c runs again (--clear)"
[ "$(attempts "$R")" = "a1 b2 c2 d1 e2" ] || fail "after --clear b --downstream: $(attempts "$R")"
# A succeeded run: nothing to resume, unless a task is cleared.
run_dagrun resume "$R"
expect_rc 0
expect_in "$T/out" "already succeeded: nothing to resume"
run_dagrun resume "$R" --clear d --plain
expect_rc 0
[ "$(attempts "$R")" = "a1 b2 c2 d2 e2" ] || fail "after --clear d: $(attempts "$R")"

# --- the API and the dashboard -----------------------------------------------------
TOKEN=s3cret-token-0123456789
serve_start --no-cron
resume() { api POST "/api/runs/$1/resume" "$2" "${3:-$TOKEN}"; }
out=$(resume "$R" '{"clear": ["a"]}')
[ "${out%% *}" = 202 ] || fail "resume with clear a: $out"
wait_until 20 sh -c "[ \"\$(\"$DAGRUN\" status $R --json | \"$PY\" -c 'import json,sys; r = json.load(sys.stdin); print(r[\"state\"], [t[\"attempts\"] for t in r[\"tasks\"]][0])')\" = 'success 2' ]" ||
  fail "the API's resume did not run a again: $(attempts "$R")"
[ "$(attempts "$R")" = "a2 b2 c2 d2 e2" ] || fail "after the API's clear a: $(attempts "$R")"
out=$(resume "$R" '{}')
[ "${out%% *}" = 409 ] || fail "a succeeded run with nothing to clear: $out"
out=$(resume "$R" '{"clear": ["zz"]}')
[ "${out%% *}" = 400 ] || fail "an unknown task: $out"
out=$(resume "$R" '{"downstream": true}')
[ "${out%% *}" = 400 ] || fail "downstream alone: $out"
out=$(resume "$R" '{"clear": ["../x"]}')
[ "${out%% *}" = 400 ] || fail "a task name with a path: $out"
out=$(resume nosuchrun '{"clear": ["a"]}')
[ "${out%% *}" = 404 ] || fail "an unknown run: $out"
out=$(resume "$R" '{"clear": ["a"]}' none)
[ "${out%% *}" = 401 ] || fail "no token: $out"

cat >retry_check.py <<'P'
import json, sys, time, urllib.request
chromium, cdp_dir, profile, port, run, token = sys.argv[1:7]
sys.path.insert(0, cdp_dir)
from cdp import Browser
base = f"http://127.0.0.1:{port}"
def attempts():
    r = json.load(urllib.request.urlopen(f"{base}/api/runs/{run}", timeout=10))
    return r["state"], {t["name"]: t["attempts"] for t in r["tasks"]}
def until(want, what):
    end = time.time() + 20
    while time.time() < end:
        if attempts() == want:
            return
        time.sleep(0.2)
    sys.exit(f"{what}: {attempts()}")
with Browser(chromium, profile) as b:
    b.open(f"{base}/#dag=abc&run={run}")
    b.js(f"sessionStorage.setItem('dagrun-token', {json.dumps(token)})")
    b.wait_for("!!document.querySelector('button.retry-task[data-task=d]')", "d's Retry button")
    b.click("button.retry-task[data-task='d']")
    until(("success", {"a": 2, "b": 2, "c": 2, "d": 3, "e": 2}), "Retry d")
    b.wait_for("!!document.querySelector('button.retry-down[data-task=b]')", "b's + downstream button")
    b.click("button.retry-down[data-task='b']")
    until(("success", {"a": 2, "b": 3, "c": 3, "d": 3, "e": 2}), "b + downstream")
    print("dashboard retry: ok")
P
browser_check "dashboard retry" retry_check.py "$PORT" "$R" "$TOKEN"
serve_stop
pass
