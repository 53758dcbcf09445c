# dagrun resume and dagrun cancel: a failed run goes on in its own run
# directory and runs again only what had not succeeded; after a kill -9 of
# dagrun (before a task, during one, between two attempts) resume finishes
# the run, records the orphaned attempt as such, never runs a succeeded
# task again and never runs one task twice at once; cancel stops a running
# run; resume refuses a run that is still running.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"

# status_json RUN: dagrun status --json into $T/st.json.
status_json() {
  "$DAGRUN" status "$1" --json >"$T/st.json" || fail "status $1 failed"
}

# ---- 1. A failed task, fixed, then resumed.
cat > r.yaml <<Y
dag: r
tasks:
  a: {stage: outputs, with: {key: k, value: from-a}}
  a_log: {stage: exec, with: {command: [sh, -c, 'echo a >> $T/a.log']}}
  b:
    stage: exec
    needs: [a, a_log]
    with: {command: [sh, -c, 'echo b >> $T/b.log; test -f $T/marker']}
  c:
    stage: exec
    needs: [b]
    with: {command: [sh, -c, 'echo "c \$1" >> $T/c.log', x, '\${tasks.a.outputs.k}']}
  d: {stage: exec, with: {command: [sh, -c, 'echo d >> $T/d.log']}}
  e:
    stage: exec
    retries: 1
    retry_delay: 10ms
    with: {command: [sh, -c, 'echo e >> $T/e.log; [ \$(wc -l < $T/e.log) -ge 4 ]']}
Y
run_dagrun run r.yaml --plain
expect_rc 1
R=$(run_dir r)
ID=$(basename "$R")
touch "$T/marker"
run_dagrun resume "$ID" --plain
expect_rc 0
expect_not_in "$T/err" "changed since"
[ "$(ls "$DAGRUN_RUNS_DIR/r" | wc -l)" -eq 1 ] || fail "resume made another run directory: $(ls "$DAGRUN_RUNS_DIR/r")"
[ "$(cat "$T/a.log")" = a ] || fail "a_log ran again: $(cat "$T/a.log")"
[ "$(cat "$T/d.log")" = d ] || fail "d ran again: $(cat "$T/d.log")"
[ "$(cat "$T/b.log")" = "b
b" ] || fail "b should have run twice: $(cat "$T/b.log")"
[ "$(cat "$T/c.log")" = "c from-a" ] || fail "c: $(cat "$T/c.log")"
# e failed twice (attempt and retry); resumed, it gets its retry again.
[ "$(wc -l < "$T/e.log")" -eq 4 ] || fail "e ran $(wc -l < "$T/e.log") times"
expect_not_in "$T/out" "a: running"
status_json "$ID"
/usr/bin/python3 - "$T/st.json" "$R/run.json" <<'P' || fail "after resume: $(cat "$T/st.json")"
import json, sys
st = json.load(open(sys.argv[1])); rj = json.load(open(sys.argv[2]))
assert st["state"] == rj["state"] == "success", (st["state"], rj["state"])
t = {x["name"]: x for x in st["tasks"]}
assert all(x["state"] == "success" for x in st["tasks"]), st["tasks"]
assert [a["state"] for a in t["b"]["attempt_list"]] == ["failed", "success"]
assert t["b"]["attempts"] == 2 and len(t["a"]["attempt_list"]) == 1
assert len(t["c"]["attempt_list"]) == 1
assert [a["n"] for a in t["e"]["attempt_list"]] == [1, 2, 3, 4]
assert rj["tasks"][0]["outputs"]["k"] == "from-a"
P
[ -f "$R/b/attempt-2/log" ] || fail "no attempt-2 directory for b"

# A finished run: nothing to resume; nothing to cancel.
run_dagrun resume "$ID"
expect_rc 0
expect_in "$T/out" "already succeeded"
run_dagrun cancel "$ID"
expect_rc 1
expect_in "$T/err" "is not running"
# A DAG file fixed between the run and the resume: resumed with the
# file as it is now, and said so.
cat > fix.yaml <<'Y'
dag: fix
tasks:
  t: {stage: exec, with: {command: [sh, -c, 'exit 4']}}
Y
run_dagrun run fix.yaml --plain
expect_rc 1
FID=$(basename "$(run_dir fix)")
sed -i "s/exit 4/exit 0/" fix.yaml
run_dagrun resume "$FID" --plain
expect_rc 0
expect_in "$T/err" "fix.yaml changed since run $FID started; resuming with the file as it is now"

run_dagrun resume nosuchrun
expect_rc 2

# ---- 2. kill -9 of dagrun at several points.
# tick.sh FILE N: appends "<pid> <ns>" to FILE N times, 0.1s apart; the
# intervals of two pids in one file must never overlap.
cat > tick.sh <<'S'
#!/bin/sh
[ "${IGNORE_TERM:-}" = 1 ] && trap '' TERM
i=0
while [ $i -lt "$2" ]; do
  echo "$$ $(date +%s%N)" >> "$1"
  sleep 0.1
  i=$((i + 1))
done
echo "$$ done" >> "$1.done"
S
chmod +x tick.sh
# make_k TICKS IGNORE_TERM RETRY_DELAY: writes k.yaml.
make_k() {
  cat > k.yaml <<Y
dag: k
defaults: {retry_jitter: 0}
tasks:
  first: {stage: exec, with: {command: [sh, -c, 'echo first >> $T/first.log']}}
  slow:
    stage: exec
    needs: [first]
    env: {IGNORE_TERM: "$2"}
    with: {command: [$T/tick.sh, $T/slow.ticks, "$1"]}
  flaky:
    stage: exec
    needs: [slow]
    retries: 1
    retry_delay: $3
    with: {command: [sh, -c, 'echo x >> $T/flaky.log; [ -f $T/flaky.ok ] || { touch $T/flaky.ok; exit 3; }']}
  last: {stage: exec, needs: [flaky], with: {command: [sh, -c, 'echo last >> $T/last.log']}}
Y
}

# check_kill NAME: after resume, the run succeeded, every task that
# succeeded before the kill ran once, slow's pids never overlapped.
check_ticks() {
  /usr/bin/python3 - "$T/slow.ticks" <<'P' || fail "slow ran twice at once: $(cat "$T/slow.ticks")"
import sys, collections
iv = collections.defaultdict(list)
for line in open(sys.argv[1]):
    pid, ns = line.split()
    iv[pid].append(int(ns))
spans = sorted((min(v), max(v), p) for p, v in iv.items())
for (a0, a1, p), (b0, b1, q) in zip(spans, spans[1:]):
    assert a1 < b0, (p, q, a1, b0)
P
}

reset_k() {
  rm -rf "$DAGRUN_RUNS_DIR/k" "$T"/first.log "$T"/slow.ticks* "$T"/flaky.* "$T"/last.log
}

# start_k ARGS: dagrun run k.yaml in the background; sets PID and KID (the
# run id, once recorded).
start_k() {
  "$DAGRUN" run k.yaml --plain "$@" >"$T/k.out" 2>&1 &
  PID=$!
}

k_id() { ls "$DAGRUN_RUNS_DIR/k" 2>/dev/null | head -n 1; }

# 2a. During a task: slow is running when dagrun dies. Its worker sees
# the pipe close and stops by itself.
reset_k
make_k 30 0 100ms
start_k
wait_until 10 test -s "$T/slow.ticks" || fail "slow never started: $(cat "$T/k.out")"
KID=$(k_id)
kill -9 "$PID"
wait "$PID" 2>/dev/null || true
# Without dagrun, the attempt stops within the worker's grace (it got
# SIGTERM: no more ticks after a moment).
n1=$(wc -l < "$T/slow.ticks")
sleep 1
n2=$(wc -l < "$T/slow.ticks")
sleep 0.5
n3=$(wc -l < "$T/slow.ticks")
[ "$n2" -eq "$n3" ] || fail "orphaned worker still running after dagrun died ($n1 $n2 $n3 ticks)"
make_k 10 0 100ms
run_dagrun resume "$KID" --plain
expect_rc 0
check_ticks
[ "$(wc -l < "$T/first.log")" -eq 1 ] || fail "first ran again"
[ "$(wc -l < "$T/slow.ticks.done")" -eq 1 ] || fail "slow finished $(wc -l < "$T/slow.ticks.done") times"
status_json "$KID"
/usr/bin/python3 - "$T/st.json" <<'P' || fail "2a: $(cat "$T/st.json")"
import json, sys
st = json.load(open(sys.argv[1]))
assert st["state"] == "success", st["state"]
t = {x["name"]: x for x in st["tasks"]}
sl = t["slow"]["attempt_list"]
assert [a["state"] for a in sl] == ["orphaned", "success"], sl
assert "orphaned" in sl[0]["error"] and "gone" in sl[0]["error"], sl[0]
assert len(t["first"]["attempt_list"]) == 1
P

# 2b. During a task whose worker ignores SIGTERM and so outlives dagrun:
# resume stops it (its process group) before slow runs again.
reset_k
make_k 60 1 100ms
start_k
wait_until 10 test -s "$T/slow.ticks" || fail "slow never started: $(cat "$T/k.out")"
KID=$(k_id)
kill -9 "$PID"
wait "$PID" 2>/dev/null || true
make_k 10 0 100ms
run_dagrun resume "$KID" --plain
expect_rc 0
# The wait for the worker (seconds: it ignores SIGTERM) is said, not silent.
expect_in "$T/err" "dagrun: run $KID: stopping task slow's attempt 1 (worker pid"
expect_in "$T/err" "which its dagrun (pid"
check_ticks
status_json "$KID"
/usr/bin/python3 - "$T/st.json" <<'P' || fail "2b: $(cat "$T/st.json")"
import json, sys
st = json.load(open(sys.argv[1]))
assert st["state"] == "success", st["state"]
sl = {x["name"]: x for x in st["tasks"]}["slow"]["attempt_list"]
assert [a["state"] for a in sl] == ["orphaned", "success"], sl
assert "still running" in sl[0]["error"], sl[0]
P

# 2c'. The same, but dagrun died between spawning the worker and recording
# its pid (the attempt is "starting", no pid): resume finds the worker by
# its command line and stops it all the same.
reset_k
make_k 60 1 100ms
start_k
wait_until 10 test -s "$T/slow.ticks" || fail "slow never started: $(cat "$T/k.out")"
KID=$(k_id)
kill -9 "$PID"
wait "$PID" 2>/dev/null || true
/usr/bin/python3 - "$DAGRUN_HOME/state.db" <<'P'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("UPDATE attempts SET state = 'starting', pid = NULL, pid_start = NULL WHERE task = 'slow'")
db.commit()
P
make_k 10 0 100ms
run_dagrun resume "$KID" --plain
expect_rc 0
check_ticks
status_json "$KID"
/usr/bin/python3 - "$T/st.json" <<'P' || fail "2c': $(cat "$T/st.json")"
import json, sys
st = json.load(open(sys.argv[1]))
assert st["state"] == "success", st["state"]
sl = {x["name"]: x for x in st["tasks"]}["slow"]["attempt_list"]
assert [a["state"] for a in sl] == ["orphaned", "success"], sl
assert "still running" in sl[0]["error"], sl[0]
P

# 2c. Between two attempts: flaky failed once and waits for its retry.
reset_k
make_k 1 0 30s
start_k
wait_until 20 test -f "$T/flaky.ok" || fail "flaky never ran: $(cat "$T/k.out")"
KID=$(k_id)
wait_until 5 sh -c "\"$DAGRUN\" status $KID | grep -q retry_wait" || fail "flaky not in retry_wait: $("$DAGRUN" status "$KID")"
kill -9 "$PID"
wait "$PID" 2>/dev/null || true
run_dagrun resume "$KID" --plain
expect_rc 0
[ "$(wc -l < "$T/first.log")" -eq 1 ] || fail "first ran again"
[ "$(wc -l < "$T/slow.ticks.done")" -eq 1 ] || fail "slow ran again"
[ "$(wc -l < "$T/flaky.log")" -eq 2 ] || fail "flaky: $(cat "$T/flaky.log")"
[ "$(wc -l < "$T/last.log")" -eq 1 ] || fail "last did not run once"
status_json "$KID"
/usr/bin/python3 - "$T/st.json" <<'P' || fail "2c: $(cat "$T/st.json")"
import json, sys
st = json.load(open(sys.argv[1]))
assert st["state"] == "success", st["state"]
fl = {x["name"]: x for x in st["tasks"]}["flaky"]["attempt_list"]
assert [a["state"] for a in fl] == ["failed", "success"], fl
assert [a["n"] for a in fl] == [1, 2], fl
P
make_k 10 0 100ms

# 2d. As soon as the run is recorded (before a task starts, or as early as
# the test can catch it: then first may be running), then resume.
reset_k
start_k
wait_until 10 sh -c "\"$DAGRUN\" runs k | grep -q running" || fail "run never recorded"
kill -9 "$PID"
wait "$PID" 2>/dev/null || true
KID=$(k_id)
run_dagrun resume "$KID" --plain
expect_rc 0
check_ticks
[ "$(wc -l < "$T/last.log")" -eq 1 ] || fail "last did not run once"
# first may have been caught running (then orphaned and run again): it ran
# at most once per recorded attempt, and only its last attempt succeeded.
status_json "$KID"
/usr/bin/python3 - "$T/st.json" "$(wc -l < "$T/first.log")" <<'P' || fail "2d: first ran $(wc -l < "$T/first.log") times: $(cat "$T/st.json")"
import json, sys
st = json.load(open(sys.argv[1]))
assert st["state"] == "success", st["state"]
fa = {x["name"]: x for x in st["tasks"]}["first"]["attempt_list"]
assert 1 <= int(sys.argv[2]) <= len(fa), fa
assert [a["state"] for a in fa] == ["orphaned"] * (len(fa) - 1) + ["success"], fa
P

# ---- 3. cancel and a refused resume of a running run.
reset_k
make_k 100 0 100ms
start_k
wait_until 10 test -s "$T/slow.ticks" || fail "slow never started: $(cat "$T/k.out")"
KID=$(k_id)
run_dagrun resume "$KID"
expect_rc 1
expect_in "$T/err" "still running"
run_dagrun cancel "$KID"
expect_rc 0
expect_in "$T/out" "cancelled"
wait "$PID" && fail "cancelled dagrun exited 0" || true
status_json "$KID"
/usr/bin/python3 - "$T/st.json" <<'P' || fail "cancel: $(cat "$T/st.json")"
import json, sys
st = json.load(open(sys.argv[1]))
assert st["state"] == "cancelled", st["state"]
t = {x["name"]: x["state"] for x in st["tasks"]}
assert t["slow"] == "cancelled" and t["last"] == "cancelled", t
P
run_dagrun cancel "$KID"
expect_rc 1
expect_in "$T/err" "not running"

# cancel as soon as the run is recorded: it is stopped cleanly all the
# same, never left "running".
reset_k
start_k
wait_until 10 sh -c "\"$DAGRUN\" runs k | grep -q running" || fail "run never recorded"
KID=$(k_id)
run_dagrun cancel "$KID"
expect_rc 0
expect_in "$T/out" "cancelled"
wait "$PID" && fail "cancelled dagrun exited 0" || true
"$DAGRUN" runs k | grep -q cancelled || fail "early cancel: $("$DAGRUN" runs k)"
pass
