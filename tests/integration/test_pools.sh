# Machine-wide pools: a pool is leased through the run store, so that it
# holds across dagruns, not only within one run.
#
# 1. Two `dagrun run` at once of a DAG with pools: {gpu: 1}: the four GPU
#    tasks' intervals (each appends its start and end) never overlap.
# 2. A run started by `dagrun serve` (API trigger) of another DAG naming
#    the same pool, beside a `dagrun run` that holds it: the serve run's
#    task waits, and `dagrun status` and the API say for what and held by
#    whom; once the holder ends, it runs; no intervals overlap.
# 3. kill -9 of a dagrun that holds the pool (and of its task's process
#    group): its lease is freed, and another run gets the pool at once
#    (as soon as the run's guard has seen its task gone: a wait, if any,
#    says so).
# 4. An attempt that times out gives its slot back, and a task waiting to
#    be retried holds none: another run's task runs in that wait.
# 5. kill -9 of the dagrun alone, its task ignoring SIGTERM: the task
#    lives on for its grace (GUARD_GRACE_S), and the pool stays held
#    until it is gone; another run's tasks wait, saying why, and start
#    only after the killed task's last sign of life.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"
mkdir -p dags

# gpu_task NAME: an exec task of pool gpu recording "START END" in iv.log.
gpu_task() {
  echo "  $1: {stage: exec, cache: false, pool: gpu, with: {command: [sh, -c, 's=\$(date +%s.%N); sleep 1; echo \"\$s \$(date +%s.%N)\" >> $T/iv.log']}}"
}
{ printf 'dag: gpu\npools: {gpu: 1}\ntasks:\n'; gpu_task t1; gpu_task t2; } > gpu.yaml
{ printf 'dag: other\npools: {gpu: 1}\ntasks:\n'; gpu_task o1; } > dags/other.yaml
# hold: holds the pool until $T/release exists (its sleep's pid in hold.pid)
cat > hold.yaml <<Y
dag: hold
pools: {gpu: 1}
tasks:
  hold: {stage: exec, cache: false, pool: gpu, with: {command: [sh, -c, 's=\$(date +%s.%N); echo \$\$ > $T/hold.pid; while [ ! -e $T/release ]; do sleep 0.1; done; echo "\$s \$(date +%s.%N)" >> $T/iv.log']}}
Y

# no_overlap N: iv.log has N intervals, none overlapping another.
no_overlap() {
  "$PY" - "$T/iv.log" "$1" <<'P' || fail "pool intervals overlap: $(cat "$T/iv.log")"
import sys
iv = sorted(tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip())
assert len(iv) == int(sys.argv[2]), iv
assert all(a[1] <= b[0] for a, b in zip(iv, iv[1:])), iv
P
}

# start_hold: dagrun run hold.yaml in the background (HOLD_PID) once its
# task holds the pool; its run id in HOLD_RUN.
start_hold() {
  rm -f "$T/hold.pid" "$T/release"
  "$DAGRUN" run hold.yaml --plain >"$T/hold.out" 2>&1 &
  HOLD_PID=$!
  for _ in $(seq 100); do [ -s "$T/hold.pid" ] && break; sleep 0.1; done
  [ -s "$T/hold.pid" ] || fail "hold never started: $(cat "$T/hold.out")"
  HOLD_RUN=$(ls -t "$DAGRUN_RUNS_DIR/hold" | head -n 1)
}

# ---- 1. two dagrun run at once ----
"$DAGRUN" run gpu.yaml --plain >"$T/a.out" 2>&1 &
A=$!
"$DAGRUN" run gpu.yaml --plain >"$T/b.out" 2>&1 &
B=$!
wait "$A" || fail "first run failed: $(cat "$T/a.out")"
wait "$B" || fail "second run failed: $(cat "$T/b.out")"
no_overlap 4
cat "$T/a.out" "$T/b.out" > "$T/ab.out"
expect_in "$T/ab.out" "waiting for pool gpu (held by run "

# ---- 2. a serve run beside a dagrun run, across two DAGs ----
rm -f "$T/iv.log"
echo "s3cret-token-for-pools" > token; chmod 600 token
serve_start --log "$T/serve.log" --no-cron
# api METHOD PATH [BODY]: "STATUS BODY" of a request with the token.
api() {
  "$PY" - "$PORT" "$@" <<'P'
import sys, urllib.error, urllib.request
port, method, path = sys.argv[1:4]
body = sys.argv[4].encode() if len(sys.argv) > 4 else None
req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method,
                             headers={"Authorization": "Bearer s3cret-token-for-pools", "Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=30) as r:
        print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
P
}
start_hold
out=$(api POST /api/dags/other/runs '{}')
case "$out" in "201 "*) ;; *) fail "trigger: $out" ;; esac
ORUN=$(echo "$out" | sed 's/^201 //' | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
want="pool gpu (held by run $HOLD_RUN task hold)"
seen=
for _ in $(seq 100); do
  out=$(api GET "/api/runs/$ORUN")
  case "$out" in *"\"waiting\":\"$want\""*) seen=1; break ;; esac
  sleep 0.1
done
[ -n "$seen" ] || fail "the API never said the serve run's task waits for $want: $out"
run_dagrun status "$ORUN"
expect_rc 0
expect_in "$T/out" "waiting for $want"
touch "$T/release"
wait "$HOLD_PID" || fail "hold failed: $(cat "$T/hold.out")"
for _ in $(seq 100); do
  state=$("$DAGRUN" status "$ORUN" --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["state"])')
  [ "$state" = success ] && break
  sleep 0.1
done
[ "$state" = success ] || fail "serve run ended $state: $(cat "$T/serve.log")"
no_overlap 2
run_dagrun status "$ORUN"
expect_not_in "$T/out" "waiting for"
serve_stop

# ---- 3. kill -9 of a dagrun holding the pool frees its lease ----
rm -f "$T/iv.log"
start_hold
pgid=$(ps -o pgid= -p "$(cat "$T/hold.pid")" | tr -d ' ')
kill -KILL "$HOLD_PID"
kill -KILL -- "-$pgid" 2>/dev/null || true
wait "$HOLD_PID" 2>/dev/null || true
run_timed after timeout 20 "$DAGRUN" run gpu.yaml --plain
[ "$RC" -eq 0 ] || fail "a run after the holder's kill -9 failed: $(cat "$T/after.out")"
[ "$SECS" -le 6 ] || fail "the pool was not freed at once (${SECS}s): $(cat "$T/after.out")"
if grep -q "waiting for pool" "$T/after.out"; then
  expect_in "$T/after.out" "whose dead dagrun's attempts are being stopped)"
fi
no_overlap 2

# ---- 4. a timeout and a retry's wait hold no slot ----
rm -f "$T/iv.log" "$T/first"
cat > flaky.yaml <<Y
dag: flaky
pools: {gpu: 1}
tasks:
  f: {stage: exec, cache: false, pool: gpu, timeout: 1s, kill_grace: 1s, retries: 1, retry_delay: 4s, retry_jitter: 0,
      with: {command: [sh, -c, 'if [ ! -e $T/first ]; then touch $T/first; exec sleep 30; fi; s=\$(date +%s.%N); echo "\$s \$(date +%s.%N)" >> $T/iv.log']}}
Y
"$DAGRUN" run flaky.yaml --plain >"$T/flaky.out" 2>&1 &
F=$!
for _ in $(seq 100); do [ -e "$T/first" ] && break; sleep 0.1; done
[ -e "$T/first" ] || fail "flaky never started: $(cat "$T/flaky.out")"
run_timed during timeout 20 "$DAGRUN" run gpu.yaml --plain
[ "$RC" -eq 0 ] || fail "a run beside the timed-out task failed: $(cat "$T/during.out")"
pid_alive "$F" || fail "flaky ended before the other run did: the slot was held through the timeout or the retry's wait: $(cat "$T/flaky.out") $(cat "$T/during.out")"
wait "$F" || fail "flaky failed: $(cat "$T/flaky.out")"
expect_in "$T/flaky.out" "timed out after 1.0s"
expect_in "$T/flaky.out" "retrying in"
no_overlap 3

# ---- 5. kill -9 of the dagrun alone: the pool is held while its task lives ----
rm -f "$T/iv.log" "$T/hold.pid" "$T/tick"
cat > stubborn.yaml <<Y
dag: stubborn
pools: {gpu: 1}
tasks:
  hold: {stage: exec, cache: false, pool: gpu, with: {command: [sh, -c, 'trap "" TERM; echo \$\$ > $T/hold.pid; while :; do date +%s.%N > $T/tick; sleep 0.1; done']}}
Y
"$DAGRUN" run stubborn.yaml --plain >"$T/stubborn.out" 2>&1 &
S=$!
wait_until 10 test -s "$T/hold.pid" || fail "stubborn never started: $(cat "$T/stubborn.out")"
SRUN=$(ls -t "$DAGRUN_RUNS_DIR/stubborn" | head -n 1)
kill -KILL "$S"
wait "$S" 2>/dev/null || true
run_timed after5 timeout 40 "$DAGRUN" run gpu.yaml --plain
[ "$RC" -eq 0 ] || fail "a run after the stubborn holder's kill -9 failed: $(cat "$T/after5.out")"
expect_in "$T/after5.out" "waiting for pool gpu (held by run $SRUN task hold, whose dead dagrun's attempts are being stopped)"
"$PY" - "$T/iv.log" "$T/tick" <<'P' || fail "a task had the pool while the killed run's task still ran: $(cat "$T/iv.log"), its last tick $(cat "$T/tick")"
import sys
starts = [float(l.split()[0]) for l in open(sys.argv[1]) if l.strip()]
last = float(open(sys.argv[2]).read())
assert len(starts) == 2 and min(starts) > last, (starts, last)
P
! pid_alive "$(cat "$T/hold.pid")" || fail "the stubborn task outlived its grace"
pass
