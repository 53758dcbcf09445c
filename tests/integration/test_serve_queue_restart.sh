# Runs dagrun serve has queued (overlap: queue, behind a going run) outlive
# serve: queued through the API while a run of the same DAG waits on a
# gate file, then serve is stopped (SIGTERM: the going run interrupted and
# resumed at the next start) or killed (kill -9: the going run goes on in
# its own session); the next serve puts the queued run back in its queue
# (logged), and once the gate opens it runs, under the id the API gave and
# with the params it was queued with. Before the run store kept serve's
# queue, both were lost. A run that sets a secret param stays out of the
# store (and so is not kept).
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"
mkdir -p dags
write_serve_secrets
for n in 1 2; do
  cat > "dags/gated$n.yaml" <<Y
dag: gated$n
overlap: queue
params: {tag: none}
tasks:
  wait:
    stage: exec
    cache: false
    with:
      command: [sh, -c, 'while [ ! -f "$T/open$n" ]; do sleep 0.1; done']
Y
done

# trigger DAG BODY: POSTs a run, prints its id.
trigger() {
  local out
  out=$(api POST "/api/dags/$1/runs" "$2" "$TOKEN")
  case "$out" in 20[12]" "*) ;; *) fail "trigger $1: $out" ;; esac
  echo "${out#* }" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["run_id"])'
}
# run_state ID: the run's state as the API shows it ("queued" while it
# waits in serve's queue), or "" for a run the API does not know.
run_state() {
  api GET "/api/runs/$1" | "$PY" -c 'import json,sys
s = sys.stdin.read(); code, _, body = s.partition(" ")
print(json.loads(body)["state"] if code == "200" else "")'
}
# wait_state ID STATE: up to 60 s.
wait_state() {
  for _ in $(seq 600); do
    [ "$(run_state "$1")" = "$2" ] && return 0
    sleep 0.1
  done
  fail "run $1 never reached $2 (now '$(run_state "$1")'); serve log: $(cat serve*.log)"
}

for n in 1 2; do
  serve_start --log "serve$n.log" --no-cron
  A=$(trigger "gated$n" '{}')
  wait_state "$A" running
  B=$(trigger "gated$n" '{"params": {"tag": "queued'$n'"}}')
  [ "$B" != "$A" ] || fail "the queued run has the going run's id"
  grep -q "API run $B queued" "serve$n.log" || fail "run $B was not queued: $(cat "serve$n.log")"
  if [ $n = 1 ]; then
    serve_stop
    grep -q "1 queued run kept for serve's next start" "serve$n.log" ||
      fail "SIGTERM: the queued run not kept: $(cat "serve$n.log")"
  else
    kill -9 "$SERVE_PID"
    wait "$SERVE_PID" 2>/dev/null || true
    trap - EXIT
  fi
  serve_start --log "serve$n-again.log" --no-cron
  for _ in $(seq 100); do
    grep -q "1 run queued before serve's last stop put back" "serve$n-again.log" && break
    sleep 0.1
  done
  grep -q "1 run queued before serve's last stop put back" "serve$n-again.log" ||
    fail "the queued run was not put back: $(cat "serve$n-again.log")"
  # Put back under the id the API gave, and shown waiting, not started.
  [ "$(run_state "$B")" = queued ] || fail "run $B is not queued while $A's gate is shut: '$(run_state "$B")'"
  touch "$T/open$n"
  wait_state "$A" success
  wait_state "$B" success
  api GET "/api/runs/$B" | "$PY" -c 'import json,sys
s = sys.stdin.read(); p = json.loads(s.partition(" ")[2])["params"]
p = json.loads(p) if isinstance(p, str) else p
assert p["tag"] == sys.argv[1], p' "queued$n" ||
    fail "run $B lost its params: $(api GET "/api/runs/$B")"
  serve_stop
  echo "$([ $n = 1 ] && echo SIGTERM || echo kill -9): the queued run $B ran after the restart"
done
# A queued run that sets a secret param is kept in memory only, saying
# so: the store's queue would hold the value unmasked.
cat > dags/sec.yaml <<Y
dag: sec
overlap: queue
secrets: [token]
params: {token: none}
tasks:
  wait: {stage: exec, cache: false, with: {command: [sh, -c, 'while [ ! -f "$T/open3" ]; do sleep 0.1; done']}}
Y
serve_start --log serve3.log --no-cron
for _ in $(seq 100); do grep -q "loaded dag sec" serve3.log && break; sleep 0.1; done
A=$(trigger sec '{}')
wait_state "$A" running
B=$(trigger sec '{"params": {"token": "queued-secret-4711"}}')
grep -q "sec: a queued run that sets a secret param is kept in memory only" serve3.log ||
  fail "no word of the secret run kept in memory: $(cat serve3.log)"
# The API shows it queued, and never its params' values.
[ "$(run_state "$B")" = queued ] || fail "the secret run is not shown queued: '$(run_state "$B")'"
for path in "/api/runs/$B" /api/runs "/api/dags/sec" /api/dags; do
  case "$(api GET "$path")" in *queued-secret-4711*) fail "GET $path shows the secret" ;; esac
done
"$PY" - "$DAGRUN_HOME/state.db" <<'P' || fail "the secret reached serve_queue"
import sqlite3, sys
rows = sqlite3.connect(sys.argv[1]).execute("SELECT params FROM serve_queue").fetchall()
assert not any("queued-secret-4711" in (r[0] or "") for r in rows), rows
P
touch "$T/open3"
wait_state "$B" success
serve_stop
# Nothing is left in the store's queue.
"$PY" - "$DAGRUN_HOME/state.db" <<'P' || fail "rows left in serve_queue"
import sqlite3, sys
n = sqlite3.connect(sys.argv[1]).execute("SELECT count(*) FROM serve_queue").fetchone()[0]
assert n == 0, n
P

# ---- A run's dagrun killed (kill -9, the OOM killer) under a live serve:
# the run is resumed at once, not at serve's next start; if its resume is
# killed as well, the run is left interrupted (said in the log), not
# resumed in a loop.
cat > dags/killed.yaml <<Y
dag: killed
tasks:
  wait:
    stage: exec
    cache: false
    with:
      command: [sh, -c, 'while [ ! -f "$T/open-\$DAGRUN_RUN_ID" ]; do sleep 0.1; done']
Y
serve_start --log serve-k.log --no-cron
# kill_dagrun PATTERN: kill -9 to the dagrun whose command line matches.
kill_dagrun() {
  local pid
  wait_until 30 pgrep -f -- "$1" >/dev/null || fail "no dagrun matches '$1': $(cat serve-k.log)"
  pid=$(pgrep -f -- "$1" | head -n 1)
  kill -9 "$pid"
}
K=$(trigger killed '{}')
wait_state "$K" running
kill_dagrun "--run-id $K"
wait_until 30 grep -q "run $K of killed: resuming it" serve-k.log ||
  fail "the killed run was not resumed: $(cat serve-k.log)"
wait_until 30 pgrep -f -- "resume $K" >/dev/null || fail "no resume of $K runs: $(cat serve-k.log)"
touch "$T/open-$K"
wait_state "$K" success
K2=$(trigger killed '{}')
wait_state "$K2" running
kill_dagrun "--run-id $K2"
wait_until 30 grep -q "run $K2 of killed: resuming it" serve-k.log ||
  fail "the second killed run was not resumed: $(cat serve-k.log)"
kill_dagrun "resume $K2"
wait_until 30 grep -q "run $K2 of killed: not resumed again (its resume was killed too): left interrupted" serve-k.log ||
  fail "the killed resume: $(cat serve-k.log)"
wait_state "$K2" interrupted
sleep 1
[ "$(grep -c "run $K2 of killed: resuming it" serve-k.log)" = 1 ] ||
  fail "run $K2 was resumed more than once: $(cat serve-k.log)"
serve_stop
pass
