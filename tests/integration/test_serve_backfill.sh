# A backfill through dagrun serve's API and its dashboard: POST
# /api/dags/{dag}/backfill queues one run per schedule time of the range,
# run one after another with trigger backfill and the time as logical date;
# asked again, the times that succeeded are skipped (unless rerun);
# bad ranges, a DAG without a schedule, an unknown DAG and a missing
# token are refused. In headless Chromium, the dashboard's backfill form
# does the same, and says what it queued.
. "$(dirname "$0")/lib.sh"
need_chromium
export DAGRUN_HOME="$T/home"
mkdir -p dags
cat > dags/nightly.yaml <<'Y'
dag: nightly
schedule: "0 2 * * *"
tasks:
  a: {stage: exec, cache: false, with: {command: [true]}}
Y
printf 'dag: manual\ntasks:\n  a: {stage: exec, with: {command: [true]}}\n' > dags/manual.yaml
cat > dags/slow.yaml <<'Y'
dag: slow
schedule: "0 2 * * *"
tasks:
  a: {stage: exec, cache: false, with: {command: [sleep, "4"]}}
Y
TOKEN=s3cret-token-0123456789
serve_start --no-cron
bf() { api POST "/api/dags/$1/backfill" "$2" "${3:-$TOKEN}"; }
# backfill_runs N: waits (60 s) until N backfill runs of nightly succeeded;
# prints their logical dates, sorted.
backfill_runs() {
  "$PY" - "$PORT" "$1" <<'P'
import datetime, json, sys, time, urllib.request
port, n = sys.argv[1], int(sys.argv[2])
end = time.time() + 60
while True:
    runs = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs?dag=nightly&limit=1000", timeout=10))
    done = [r for r in runs if r.get("trigger") == "backfill" and r["state"] == "success"]
    if len(done) >= n or time.time() > end:
        break
    time.sleep(0.2)
for t in sorted(r["logical_date"] for r in done):
    print(datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
P
}

out=$(bf nightly '{"from": "2026-03-01", "to": "2026-03-03T23:59"}')
[ "${out%% *}" = 202 ] || fail "backfill: $out"
echo "${out#* }" | "$PY" -c 'import json,sys; j = json.load(sys.stdin); assert j["queued"] == ["2026-03-01T02:00:00Z", "2026-03-02T02:00:00Z", "2026-03-03T02:00:00Z"] and j["skipped"] == [], j' ||
  fail "backfill answer: $out"
[ "$(backfill_runs 3 | tr '\n' ' ')" = "2026-03-01T02:00:00Z 2026-03-02T02:00:00Z 2026-03-03T02:00:00Z " ] ||
  fail "backfill runs: $(backfill_runs 3)"
# Asked again: nothing to do; with rerun, the time runs again.
out=$(bf nightly '{"from": "2026-03-01", "to": "2026-03-03T23:59"}')
[ "${out%% *}" = 202 ] || fail "backfill again: $out"
echo "${out#* }" | "$PY" -c 'import json,sys; j = json.load(sys.stdin); assert j["queued"] == [] and [k["at"] for k in j["skipped"]] == ["2026-03-01T02:00:00Z", "2026-03-02T02:00:00Z", "2026-03-03T02:00:00Z"] and all(k["run"] for k in j["skipped"]), j' ||
  fail "backfill again: $out"
out=$(bf nightly '{"from": "2026-03-02", "to": "2026-03-02T23:00", "rerun": true}')
echo "${out#* }" | "$PY" -c 'import json,sys; j = json.load(sys.stdin); assert j["queued"] == ["2026-03-02T02:00:00Z"], j' ||
  fail "rerun: $out"
backfill_runs 4 >/dev/null
# A time whose run is still going is skipped, rerun or not, naming that
# run: never a second run of one logical date beside it.
out=$(bf slow '{"from": "2026-03-01", "to": "2026-03-01T23:00"}')
[ "${out%% *}" = 202 ] || fail "slow backfill: $out"
"$PY" - "$PORT" <<'P' || fail "the slow backfill run never ran"
import json, sys, time, urllib.request
end = time.time() + 30
while time.time() < end:
    runs = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/api/runs?dag=slow", timeout=10))
    if any(r["state"] == "running" for r in runs):
        sys.exit(0)
    time.sleep(0.1)
sys.exit(1)
P
for body in '{"from": "2026-03-01", "to": "2026-03-01T23:00"}' '{"from": "2026-03-01", "to": "2026-03-01T23:00", "rerun": true}'; do
  out=$(bf slow "$body")
  echo "${out#* }" | "$PY" -c 'import json,sys; j = json.load(sys.stdin); assert j["queued"] == [] and [k["at"] for k in j["skipped"]] == ["2026-03-01T02:00:00Z"] and j["skipped"][0]["run"] not in ("", "queued already"), j' ||
    fail "backfill of a time whose run is going ($body): $out"
done
# A run whose dagrun died (kill -9) is not going: it is interrupted,
# waits for a resume and blocks nothing, so its time is queued.
"$DAGRUN" run dags/slow.yaml -q --run-id dead-row --logical-date 2026-03-04T02:00:00Z --trigger backfill >dead.out 2>&1 &
DEAD=$!
wait_until 20 store_run_is dead-row running || fail "the run to kill did not start: $(cat dead.out)"
kill -9 "$DEAD"
wait "$DEAD" 2>/dev/null || true
out=$(bf slow '{"from": "2026-03-04", "to": "2026-03-04T23:00"}')
echo "${out#* }" | "$PY" -c 'import json,sys; j = json.load(sys.stdin); assert j["queued"] == ["2026-03-04T02:00:00Z"] and j["skipped"] == [], j' ||
  fail "backfill of a time whose run's dagrun died: $out"
# Refused.
for case in \
  '400|{"from": "March 1st", "to": "2026-03-03"}|from and to take times' \
  '400|{"from": "2026-03-05", "to": "2026-03-01"}|is before from' \
  '400|{"from": "2020-01-01", "to": "2026-01-01"}|more than 1000 schedule times' \
  '400|{"from": "2026-03-01T03:00", "to": "2026-03-01T04:00"}|no schedule time of nightly' \
  '400|{"from": "2026-03-01"}|(times such as 2026-11-01' \
  '400|{"from": "2026-03-01", "to": "2026-03-02", "dry": 1}|(times such as 2026-11-01'; do
  want=${case%%|*} rest=${case#*|} body=${rest%%|*} msg=${rest#*|}
  out=$(bf nightly "$body")
  [ "${out%% *}" = "$want" ] || fail "backfill $body: $out"
  case "$out" in *"$msg"*) ;; *) fail "backfill $body: expected '$msg' in $out" ;; esac
done
out=$(bf manual '{"from": "2026-03-01", "to": "2026-03-02"}')
[ "${out%% *}" = 400 ] || fail "a DAG without a schedule: $out"
expect_in <(echo "$out") "has no schedule"
out=$(bf nosuch '{"from": "2026-03-01", "to": "2026-03-02"}')
[ "${out%% *}" = 404 ] || fail "unknown DAG: $out"
out=$(bf nightly '{"from": "2026-03-01", "to": "2026-03-02"}' none)
[ "${out%% *}" = 401 ] || fail "no token: $out"

# The dashboard's form.
cat >bf_check.py <<'P'
import json, sys
chromium, cdp_dir, profile, port, token = sys.argv[1:6]
sys.path.insert(0, cdp_dir)
from cdp import Browser
with Browser(chromium, profile) as b:
    b.open(f"http://127.0.0.1:{port}/#dag=nightly")
    b.js(f"sessionStorage.setItem('dagrun-token', {json.dumps(token)})")
    b.wait_for("!document.getElementById('backfill-row').hidden", "the backfill form")
    b.type_text("backfill-from", "2026-03-10")
    b.type_text("backfill-to", "2026-03-11T23:00")
    b.click("#backfill-btn")
    b.wait_for("document.getElementById('backfill-msg').textContent.startsWith('queued 2, skipped 0')",
               "the form's answer")
    b.type_text("backfill-from", "2026-03-11")
    b.click("#backfill-btn")
    b.wait_for("document.getElementById('backfill-msg').textContent.startsWith('queued 0, skipped 1')",
               "the second answer")
    # manual has no schedule: no form.
    b.js("location.hash = '#dag=manual'; location.reload()")
    b.wait_for("document.getElementById('dag-title').textContent === 'manual'", "manual's view")
    assert b.js("document.getElementById('backfill-row').hidden"), "a backfill form for a DAG without a schedule"
    print("dashboard backfill: ok")
P
browser_check "dashboard backfill" bf_check.py "$PORT" "$TOKEN"
backfill_runs 6 | grep -q '2026-03-11T02:00:00Z' || fail "the dashboard's backfill runs: $(backfill_runs 6)"
serve_stop
pass
