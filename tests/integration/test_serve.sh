# `dagrun serve` for real: DAG files from a directory, cron triggers on a
# fake clock (DAGRUN_FAKE_CLOCK: one minute per second) with each overlap
# policy, catch-up after downtime with and without `catchup`, the HTTP API
# with and without a valid token or HMAC signature and with a malformed
# body, reloading changed, broken and new files, SIGTERM stopping runs that
# the next start resumes, kill -9 of the daemon leaving its runs going, and
# one daemon per store.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"
mkdir -p dags
write_serve_secrets

# minute-by-minute DAGs whose runs last 2.5 fake minutes
for ov in skip queue allow; do
  cat > "dags/m_$ov.yaml" <<Y
dag: m_$ov
schedule: "* * * * *"
overlap: $ov
tasks:
  a: {stage: exec, cache: false, with: {command: [sh, -c, 'sleep 2.5']}}
Y
done


# ---- a port another program listens on: "address in use", exit 2 ----
/usr/bin/python3 - "$T/taken.port" <<'P' &
import os, socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(s.getsockname()[1]))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)
P
LISTENER=$!
for _ in $(seq 100); do [ -s "$T/taken.port" ] && break; sleep 0.1; done
TAKEN=$(cat "$T/taken.port")
# (a store of its own: loading the DAGs records their schedules' start)
DAGRUN_HOME="$T/home-port" run_dagrun serve dags --port "$TAKEN" --no-cron
kill "$LISTENER"
wait "$LISTENER" 2>/dev/null || true
expect_rc 2
expect_in "$T/err" "cannot listen on 127.0.0.1 port $TAKEN: address in use"
expect_not_in "$T/err" "MHD_OPTION"


# run_state RUN: the run's state in the store ("" while it is not there).
run_state() {
  "$DAGRUN" status "$1" --json 2>/dev/null | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])' 2>/dev/null || true
}

# wait_state RUN STATE TRIES: waits (0.1 s a try) until the run is in
# STATE; fails naming the state it is in.
wait_state() {
  local st
  for _ in $(seq "$3"); do
    st=$(run_state "$1")
    [ "$st" = "$2" ] && return 0
    sleep 0.1
  done
  fail "run $1 is ${st:-not recorded}, expected $2"
}

# runs_json DAG: the store's runs of DAG as JSON, oldest first.
runs_json() {
  "$DAGRUN" runs "$1" --json | /usr/bin/python3 -c 'import json,sys; print(json.dumps(sorted(json.load(sys.stdin), key=lambda r: r["started"])))'
}

# ---- overlap on a fake clock: 9 fake minutes ----
T0=$(date -d 2026-03-08T06:58:30Z +%s)
# (--on-shutdown finish: the runs going at the end finish, so that no run
# is left for the next start to resume.)
DAGRUN_FAKE_CLOCK="$T0*60" serve_start --log "$T/serve1.log" --on-shutdown finish
sleep 9.2
serve_stop
expect_in "$T/serve1.log" "m_skip: run for 2026-03-08T07:00:00+00:00 UTC  (2026-03-08T07:00:00Z) skipped (overlap: skip, a run is going)"
for ov in skip queue allow; do runs_json "m_$ov" > "runs_$ov.json"; done
/usr/bin/python3 - <<'P' || fail "overlap policies: $(cat "$T/serve1.log")"
import json
def load(ov):
    return json.load(open(f"runs_{ov}.json"))
def overlaps(runs):
    return any(a["started"] < b.get("finished", 1e12) and b["started"] < a.get("finished", 1e12)
               for i, a in enumerate(runs) for b in runs[i + 1:])
skip, queue, allow = load("skip"), load("queue"), load("allow")
minute = 60
for name, runs in (("skip", skip), ("queue", queue), ("allow", allow)):
    assert all(r["trigger"] == "cron" for r in runs), (name, runs)
    assert len(runs) >= 2, (name, len(runs))
    assert all(r["state"] == "success" for r in runs), (name, [r["state"] for r in runs])
# skip: never two at once, and fire times were skipped (runs last 2.5 min)
assert not overlaps(skip), skip
ld = [r["logical_date"] for r in skip]
assert any(b - a > minute for a, b in zip(ld, ld[1:])), ld
# queue: never two at once, and no fire time is missing between runs
assert not overlaps(queue), queue
ld = [r["logical_date"] for r in queue]
assert all(b - a == minute for a, b in zip(ld, ld[1:])), ld
# allow: every fire time ran at its time, beside the previous runs
assert overlaps(allow), allow
ld = [r["logical_date"] for r in allow]
assert all(b - a == minute for a, b in zip(ld, ld[1:])), ld
assert len(allow) > len(skip), (len(allow), len(skip))
P
expect_in "$T/serve1.log" "stopped"

# ---- catch-up after downtime ----
rm dags/m_*.yaml
for c in true false; do
  cat > "dags/c_$c.yaml" <<Y
dag: c_$c
schedule: "*/10 * * * *"
catchup: $c
tasks:
  a: {stage: exec, cache: false, with: {command: [sh, -c, 'echo "date \${run.date}"']}}
Y
done
# First sight at 12:00 (fake): nothing is due; the daemon records 12:00.
T1=$(date -d 2026-06-01T12:00:00Z +%s)
DAGRUN_FAKE_CLOCK="$T1*1" serve_start --log "$T/serve2.log"
sleep 1
serve_stop
[ -z "$(runs_json c_true | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin) or "")')" ] || fail "runs before any schedule time"
# Down until 12:55: 12:10 ... 12:50 were missed (5 times).
T2=$(date -d 2026-06-01T12:55:00Z +%s)
DAGRUN_FAKE_CLOCK="$T2*1" serve_start --log "$T/serve3.log"
for _ in $(seq 100); do
  n=$(runs_json c_true | /usr/bin/python3 -c 'import json,sys; print(sum(r["state"] == "success" for r in json.load(sys.stdin)))')
  [ "$n" -ge 5 ] && break
  sleep 0.2
done
serve_stop
expect_in "$T/serve3.log" "c_false: 4 earlier schedule times missed while down or paused, not run (catchup: false)"
expect_in "$T/serve3.log" "c_true: run for 2026-06-01T12:10:00+00:00 UTC  (2026-06-01T12:10:00Z) queued (catch-up)"
runs_json c_true > c_true.json
runs_json c_false > c_false.json
/usr/bin/python3 - "$T1" <<'P' || fail "catch-up: $(cat c_true.json c_false.json)"
import json, sys
t1 = int(sys.argv[1])
ct, cf = json.load(open("c_true.json")), json.load(open("c_false.json"))
# every missed time, in order, one after another
assert [r["logical_date"] for r in ct] == [t1 + 600 * k for k in range(1, 6)], ct
assert all(r["state"] == "success" for r in ct), ct
assert all(a["finished"] <= b["started"] for a, b in zip(ct, ct[1:])), ct
# only the latest
assert [r["logical_date"] for r in cf] == [t1 + 3000], cf
P

# ---- the API ----
rm dags/c_*.yaml
cat > dags/api.yaml <<'Y'
dag: api
params: {n: 1, who: world}
overlap: skip
tasks:
  a: {stage: exec, cache: false, with: {command: [sh, -c, 'echo "n=${params.n} who=${params.who}"; sleep ${params.n}']}}
Y
serve_start --log "$T/serve4.log" --no-cron
out=$(http GET /api/health)
case "$out" in "200 "*'"status":"ok"'*) ;; *) fail "health: $out" ;; esac
out=$(http GET /api/dags)
case "$out" in "200 "*'"name":"api"'*) ;; *) fail "dags: $out" ;; esac
for auth in none badtoken badhmac stalehmac; do
  out=$(http POST /api/dags/api/runs '{"params":{"n":0}}' $auth)
  case "$out" in "401 "*) ;; *) fail "trigger with $auth auth: $out" ;; esac
done
out=$(http POST /api/dags/api/runs '{"params": {"n": 0' token)
case "$out" in "400 "*malformed*) ;; *) fail "malformed body: $out" ;; esac
out=$(http POST /api/dags/api/runs '{"params":{"n":"many"}}' token)
case "$out" in "400 "*"param 'n' is a number"*) ;; *) fail "bad param: $out" ;; esac
out=$(http POST /api/dags/nope/runs '{}' token)
case "$out" in "404 "*) ;; *) fail "unknown dag: $out" ;; esac
[ ! -d "$DAGRUN_RUNS_DIR/api" ] || fail "refused triggers made runs: $(ls "$DAGRUN_RUNS_DIR/api")"
out=$(http POST /api/dags/api/runs '{"params":{"n":2,"who":"hmac"}}' hmac)
case "$out" in "201 "*) ;; *) fail "trigger with HMAC: $out" ;; esac
RUN1=$(echo "$out" | sed 's/^201 //' | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
# overlap: skip, and a run is going
out=$(http POST /api/dags/api/runs '{}' token)
case "$out" in "409 "*) ;; *) fail "trigger while running (overlap skip): $out" ;; esac
wait_state "$RUN1" success 100
expect_in "$DAGRUN_RUNS_DIR/api/$RUN1/a/attempt-1/log" "n=2 who=hmac"
out=$(http GET "/api/runs/$RUN1")
case "$out" in "200 "*'"trigger":"api"'*'"state":"success"'*) ;; *) fail "run by id: $out" ;; esac

# cancel through the API
out=$(http POST /api/dags/api/runs '{"params":{"n":30,"who":"pssst-s3cret"}}' token)
RUN2=$(echo "$out" | sed 's/^201 //' | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
sleep 1
# The params reached the task, but not the run's command line, which any
# user can read (they go through its environment).
expect_in "$DAGRUN_RUNS_DIR/api/$RUN2/a/attempt-1/log" "n=30 who=pssst-s3cret"
RUNPID=$(pgrep -f -- "--run-id $RUN2" | head -n 1)
[ -n "$RUNPID" ] || fail "no dagrun run process for $RUN2"
CMDLINE=$(tr '\0' ' ' < "/proc/$RUNPID/cmdline")
case "$CMDLINE" in *pssst*) fail "a param on the command line: $CMDLINE" ;; esac
case "$CMDLINE" in *--params-from-env*) ;; *) fail "params not from the environment: $CMDLINE" ;; esac
out=$(http POST "/api/runs/$RUN2/cancel" '' none)
case "$out" in "401 "*) ;; *) fail "cancel without a token: $out" ;; esac
out=$(http POST "/api/runs/$RUN2/cancel" '' token)
case "$out" in "202 "*) ;; *) fail "cancel: $out" ;; esac
wait_state "$RUN2" cancelled 100

# ---- reload: a changed file, a broken one, a new one ----
sed -i 's/who: world/who: reloaded/' dags/api.yaml
cat > dags/new.yaml <<'Y'
dag: newcomer
tasks: {a: {stage: exec, with: {command: ["true"]}}}
Y
for _ in $(seq 50); do grep -q "loaded dag newcomer" "$T/serve4.log" && grep -q "reloaded dag api" "$T/serve4.log" && break; sleep 0.1; done
expect_in "$T/serve4.log" "reloaded dag api"
out=$(http POST /api/dags/api/runs '{"params":{"n":0}}' token)
RUN3=$(echo "$out" | sed 's/^201 //' | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
for _ in $(seq 50); do [ -s "$DAGRUN_RUNS_DIR/api/$RUN3/a/attempt-1/log" ] && grep -q "who=" "$DAGRUN_RUNS_DIR/api/$RUN3/a/attempt-1/log" && break; sleep 0.1; done
expect_in "$DAGRUN_RUNS_DIR/api/$RUN3/a/attempt-1/log" "n=0 who=reloaded"
printf 'dag: api\ntasks:\n  a: {stage: exec, with: {command: [true]}, needs: [ghost]}\n' > dags/api.yaml
for _ in $(seq 50); do grep -q "api.yaml does not load (its previous version is shown; no run starts until it loads)" "$T/serve4.log" && break; sleep 0.1; done
expect_in "$T/serve4.log" "api.yaml does not load (its previous version is shown; no run starts until it loads)"
out=$(http GET /api/dags)
case "$out" in *'"error":"'*"api.yaml:3:"*"ghost"*) ;; *) fail "broken file's error in /api/dags: $out" ;; esac
# No run starts while the file does not load (a run loads it as it is):
# 409 with the error, and no run is recorded.
n_runs() { "$DAGRUN" runs api --json | /usr/bin/python3 -c 'import json,sys; print(len(json.load(sys.stdin)))'; }
before=$(n_runs)
out=$(http POST /api/dags/api/runs '{"params":{"n":0}}' token)
case "$out" in "409 "*"does not load; no run starts until it does"*"ghost"*) ;; *) fail "a run of a broken file: $out" ;; esac
sleep 1
[ "$(n_runs)" = "$before" ] || fail "a run of a broken file was recorded"
# Two files of one dag: the second is refused, naming the first; once
# the first is gone, the second loads and runs start (they were a 404).
printf 'dag: twin\ntasks: {a: {stage: exec, with: {command: ["true"]}}}\n' > dags/twin1.yaml
wait_until 10 grep -qE "loaded dag twin from .*/dags/twin1.yaml" "$T/serve4.log" || fail "twin1 not loaded: $(tail -3 "$T/serve4.log")"
cp dags/twin1.yaml dags/twin2.yaml
wait_until 10 grep -qE "twin2.yaml: dag .twin. is already defined in .*/dags/twin1.yaml" "$T/serve4.log" ||
  fail "twin2 not refused: $(tail -3 "$T/serve4.log")"
rm dags/twin1.yaml
wait_until 10 grep -qE "loaded dag twin from .*/dags/twin2.yaml" "$T/serve4.log" ||
  fail "twin2 did not load once twin1 was gone: $(tail -3 "$T/serve4.log")"
out=$(http POST /api/dags/twin/runs '{}' token)
case "$out" in "201 "*) ;; *) fail "a run of twin once twin1 was gone: $out" ;; esac
out=$(http GET /api/dags)
case "$out" in *"already defined"*) fail "a stale duplicate error in /api/dags: $out" ;; esac
# one daemon per store
run_dagrun serve dags --port 0
expect_rc 2
expect_in "$T/err" "another dagrun serve (pid $SERVE_PID)"
serve_stop

# ---- SIGTERM stops runs; the next start resumes them ----
cat > dags/api.yaml <<Y
dag: api
params: {n: 1}
tasks:
  a: {stage: exec, cache: false, with: {command: [sh, -c, 'if [ -f $T/resumed.flag ]; then echo second; else touch $T/resumed.flag; sleep 60; fi']}}
  b: {stage: exec, needs: [a], with: {command: [echo, b-ran]}}
Y
serve_start --log "$T/serve5.log" --no-cron
out=$(http POST /api/dags/api/runs '{}' token)
RUN4=$(echo "$out" | sed 's/^201 //' | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
for _ in $(seq 100); do [ -f "$T/resumed.flag" ] && break; sleep 0.1; done
serve_stop
expect_in "$T/serve5.log" "stopping run $RUN4"
[ "$(run_state "$RUN4")" = interrupted ] ||
  fail "run stopped by the shutdown: $("$DAGRUN" status "$RUN4")"
serve_start --log "$T/serve6.log" --no-cron
wait_state "$RUN4" success 150
expect_in "$T/serve6.log" "resuming run $RUN4 of api (interrupted by the last shutdown)"
expect_in "$DAGRUN_RUNS_DIR/api/$RUN4/b/attempt-1/log" "b-ran"

# ---- kill -9 of the daemon: its run goes on, and counts as going ----
cat > dags/api.yaml <<'Y'
dag: api
overlap: skip
tasks:
  a: {stage: exec, cache: false, with: {command: [sh, -c, 'sleep 3; echo survived']}}
Y
for _ in $(seq 50); do grep -q "reloaded dag api" "$T/serve6.log" && break; sleep 0.1; done
out=$(http POST /api/dags/api/runs '{}' token)
RUN5=$(echo "$out" | sed 's/^201 //' | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
sleep 0.5
kill -9 "$SERVE_PID"
wait "$SERVE_PID" 2>/dev/null || true
serve_start --log "$T/serve7.log" --no-cron
out=$(http POST /api/dags/api/runs '{}' token)
case "$out" in "409 "*) ;; *) fail "a run left by a killed daemon does not count as going: $out" ;; esac
wait_state "$RUN5" success 100
expect_in "$DAGRUN_RUNS_DIR/api/$RUN5/a/attempt-1/log" "survived"
expect_not_in "$T/serve7.log" "resuming run $RUN5"
serve_stop

# ---- credentials from the environment stay with the daemon ----
cat > dags/api.yaml <<'Y'
dag: api
tasks:
  a: {stage: exec, cache: false, with: {command: [sh, -c, 'env; echo "token=[$DAGRUN_API_TOKEN] hmac=[$DAGRUN_API_HMAC_SECRET]"']}}
Y
: >"$T/serve8.log"
DAGRUN_API_TOKEN=env-token-77 DAGRUN_API_HMAC_SECRET=env-hmac-88 \
  "$DAGRUN" serve dags --port 0 --no-cron >"$T/serve8.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 100); do
  PORT=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$T/serve8.log")
  [ -n "$PORT" ] && break
  sleep 0.1
done
[ -n "$PORT" ] || fail "serve with env credentials: $(cat "$T/serve8.log")"
out=$(http POST /api/dags/api/runs '{}' token)
case "$out" in "401 "*) ;; *) fail "the file's token accepted by a daemon given another in its env: $out" ;; esac
out=$(/usr/bin/python3 - "$PORT" <<'P'
import sys, urllib.request
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/api/dags/api/runs", data=b"{}",
                             method="POST", headers={"Authorization": "Bearer env-token-77"})
with urllib.request.urlopen(req, timeout=30) as r:
    print(r.status, r.read().decode())
P
)
case "$out" in "201 "*) ;; *) fail "trigger with the token from DAGRUN_API_TOKEN: $out" ;; esac
RUN6=$(echo "$out" | sed 's/^201 //' | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
wait_state "$RUN6" success 100
expect_in "$DAGRUN_RUNS_DIR/api/$RUN6/a/attempt-1/log" "token=[] hmac=[]"
expect_not_in "$DAGRUN_RUNS_DIR/api/$RUN6/a/attempt-1/log" "env-token-77"
expect_not_in "$DAGRUN_RUNS_DIR/api/$RUN6/a/attempt-1/log" "env-hmac-88"
serve_stop
pass
