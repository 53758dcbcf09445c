# max_active_runs: N caps a DAG's runs machine-wide.
#
# 1. Bad values (0, -1, "x") are errors of `dagrun check` at line:col.
# 2. max_active_runs: 1, two `dagrun run` at once: the second waits,
#    shown "queued" by `dagrun runs` and `dagrun status` with what it
#    waits for, says so on its terminal, then runs; their tasks' intervals
#    do not overlap and both succeed.
# 3. `dagrun cancel` (SIGTERM) of a queued run ends it: recorded
#    "cancelled", not left queued, exit 143, its task never ran.
# 4. A queued run whose dagrun is killed -9 is recorded "interrupted" by
#    the next reader, and counts no more: a new run starts at once.
# 5. A running run whose dagrun alone is killed -9, its task ignoring
#    SIGTERM: the task lives on for its grace, and the run keeps its place
#    until the task is gone (interrupted or not); a new run waits, saying
#    for which run, and its task starts after the killed one's last sign
#    of life.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"

# ---- 1. bad values ----
for bad in 0 -1 '"x"'; do
  printf 'dag: bad\nmax_active_runs: %s\ntasks:\n  a: {stage: exec, with: {command: [sh, -c, "true"]}}\n' "$bad" > bad.yaml
  run_dagrun check bad.yaml
  expect_rc 2
  expect_in "$T/err" "bad.yaml:2:18: error: 'max_active_runs': expected an integer from 1 to 1000000"
done

# lim: one task that records its interval, waiting for $T/go-<n> where n
# is the run's param (so that the test decides when each run ends).
cat > lim.yaml <<Y
dag: lim
max_active_runs: 1
params: {n: 0}
tasks:
  a: {stage: exec, cache: false, with: {command: [sh, -c, 's=\$(date +%s.%N); touch $T/started-\${params.n}; while [ ! -e $T/go-\${params.n} ]; do sleep 0.1; done; echo "\$s \$(date +%s.%N)" >> $T/iv.log']}}
Y

# run_state RUN: the run's state in the store.
run_state() {
  "$DAGRUN" status "$1" --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["state"])'
}

# ---- 2. the second run waits its turn ----
"$DAGRUN" run lim.yaml --plain -p n=1 >"$T/r1.out" 2>&1 &
P1=$!
for _ in $(seq 100); do [ -e "$T/started-1" ] && break; sleep 0.1; done
[ -e "$T/started-1" ] || fail "run 1 never started: $(cat "$T/r1.out")"
R1=$(ls -t "$DAGRUN_RUNS_DIR/lim" | head -n 1)
"$DAGRUN" run lim.yaml --plain -p n=2 >"$T/r2.out" 2>&1 &
P2=$!
R2=
for _ in $(seq 100); do
  R2=$(ls -t "$DAGRUN_RUNS_DIR/lim" | grep -v "^$R1\$" | head -n 1 || true)
  [ -n "$R2" ] && [ "$(run_state "$R2" 2>/dev/null)" = queued ] && break
  sleep 0.1
done
[ "$(run_state "$R2")" = queued ] || fail "run 2 not queued: $(cat "$T/r2.out")"
run_dagrun runs
expect_rc 0
grep -E "^$R2 +lim +queued" "$T/out" >/dev/null || fail "runs does not show $R2 queued: $(cat "$T/out")"
expect_in "$T/out" "$R2 waiting: max_active_runs 1 reached (run $R1)"
run_dagrun status "$R2"
expect_in "$T/out" "waiting: max_active_runs 1 reached (run $R1)"
expect_in "$T/r2.out" "waiting: max_active_runs 1 reached (run $R1)"
sleep 1 # still waiting a while later: its task has not started
[ ! -e "$T/started-2" ] || fail "run 2 started while run 1 was going"
touch "$T/go-1" "$T/go-2"
wait "$P1" || fail "run 1 failed: $(cat "$T/r1.out")"
wait "$P2" || fail "run 2 failed: $(cat "$T/r2.out")"
[ "$(run_state "$R2")" = success ] || fail "run 2: $(run_state "$R2")"
expect_in "$T/r2.out" "admitted: starting the run"
"$PY" - "$T/iv.log" <<'P' || fail "runs overlapped: $(cat "$T/iv.log")"
import sys
iv = sorted(tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip())
assert len(iv) == 2 and iv[0][1] <= iv[1][0], iv
P

# ---- 3. SIGTERM while queued ----
rm -f "$T"/started-* "$T"/go-*
"$DAGRUN" run lim.yaml --plain -p n=3 >"$T/r3.out" 2>&1 &
P3=$!
for _ in $(seq 100); do [ -e "$T/started-3" ] && break; sleep 0.1; done
[ -e "$T/started-3" ] || fail "run 3 never started: $(cat "$T/r3.out")"
"$DAGRUN" run lim.yaml --plain -p n=4 >"$T/r4.out" 2>&1 &
P4=$!
for _ in $(seq 100); do grep -q "waiting: max_active_runs" "$T/r4.out" && break; sleep 0.1; done
expect_in "$T/r4.out" "waiting: max_active_runs 1 reached"
R4=$(ls -t "$DAGRUN_RUNS_DIR/lim" | head -n 1)
run_dagrun cancel "$R4"
expect_rc 0
expect_in "$T/out" "run $R4 cancelled"
set +e
wait "$P4"
RC=$?
set -e
[ "$RC" -eq 143 ] || fail "a queued run stopped by SIGTERM exited $RC: $(cat "$T/r4.out")"
[ "$(run_state "$R4")" = cancelled ] || fail "queued run after SIGTERM: $(run_state "$R4")"
run_dagrun status "$R4"
expect_not_in "$T/out" "waiting:"
[ ! -e "$T/started-4" ] || fail "the cancelled queued run's task ran"
touch "$T/go-3"
wait "$P3" || fail "run 3 failed: $(cat "$T/r3.out")"

# ---- 4. kill -9 of a queued run's dagrun ----
"$DAGRUN" run lim.yaml --plain -p n=5 >"$T/r5.out" 2>&1 &
P5=$!
for _ in $(seq 100); do [ -e "$T/started-5" ] && break; sleep 0.1; done
[ -e "$T/started-5" ] || fail "run 5 never started: $(cat "$T/r5.out")"
"$DAGRUN" run lim.yaml --plain -p n=6 >"$T/r6.out" 2>&1 &
P6=$!
for _ in $(seq 100); do grep -q "waiting: max_active_runs" "$T/r6.out" && break; sleep 0.1; done
expect_in "$T/r6.out" "waiting: max_active_runs 1 reached"
R6=$(ls -t "$DAGRUN_RUNS_DIR/lim" | head -n 1)
kill -KILL "$P6"
wait "$P6" 2>/dev/null || true
[ "$(run_state "$R6")" = interrupted ] || fail "queued run of a killed dagrun: $(run_state "$R6")"
touch "$T/go-5" "$T/go-7"
wait "$P5" || fail "run 5 failed: $(cat "$T/r5.out")"
run_timed r7 "$DAGRUN" run lim.yaml --plain -p n=7
[ "$RC" -eq 0 ] || fail "run 7 failed: $(cat "$T/r7.out")"
expect_not_in "$T/r7.out" "waiting:"

# ---- 5. kill -9 of a running run's dagrun: its place is held while its task lives ----
cat > stub.yaml <<Y
dag: stub
max_active_runs: 1
params: {n: 0}
tasks:
  a: {stage: exec, cache: false, with: {command: [sh, -c, 'echo "\$(date +%s.%N)" > $T/stub-start-\${params.n}; [ \${params.n} = 2 ] && exit 0; trap "" TERM; echo \$\$ > $T/stub.pid; while :; do date +%s.%N > $T/stub-tick; sleep 0.1; done']}}
Y
"$DAGRUN" run stub.yaml --plain -p n=1 >"$T/s1.out" 2>&1 &
S1=$!
wait_until 10 test -s "$T/stub.pid" || fail "stub run 1 never started: $(cat "$T/s1.out")"
SR1=$(ls -t "$DAGRUN_RUNS_DIR/stub" | head -n 1)
kill -KILL "$S1"
wait "$S1" 2>/dev/null || true
[ "$(run_state "$SR1")" = interrupted ] || fail "run of a killed dagrun: $(run_state "$SR1")"
run_timed s2 timeout 40 "$DAGRUN" run stub.yaml --plain -p n=2
[ "$RC" -eq 0 ] || fail "stub run 2 failed: $(cat "$T/s2.out")"
expect_in "$T/s2.out" "waiting: max_active_runs 1 reached (run $SR1)"
! pid_alive "$(cat "$T/stub.pid")" || fail "the stubborn task outlived its grace"
"$PY" - "$T/stub-start-2" "$T/stub-tick" <<'P' || fail "run 2 started while run 1's task still ran: start $(cat "$T/stub-start-2"), last tick $(cat "$T/stub-tick")"
import sys
assert float(open(sys.argv[1]).read()) > float(open(sys.argv[2]).read())
P
pass
