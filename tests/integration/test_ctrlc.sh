# Ctrl-C (SIGINT) stops every running task cleanly, marks them and what
# had not started cancelled, and dagrun exits 130. A second signal is not
# needed when tasks honour SIGTERM.
. "$(dirname "$0")/lib.sh"

cat > cc.yaml <<Y
dag: cc
tasks:
  long1: {stage: exec, with: {command: [sh, -c, 'echo \$\$ > $T/long1.pid; sleep 300']}}
  long2: {stage: exec, with: {command: [sh, -c, 'echo \$\$ > $T/long2.pid; sleep 300']}}
  later: {stage: exec, needs: [long1], with: {command: ["true"]}}
Y
"$DAGRUN" run cc.yaml --plain >"$T/out" 2>"$T/err" &
pid=$!
for _ in $(seq 100); do
  [ -s "$T/long1.pid" ] && [ -s "$T/long2.pid" ] && break
  sleep 0.1
done
[ -s "$T/long1.pid" ] && [ -s "$T/long2.pid" ] || fail "tasks did not start"
kill -INT $pid
set +e
wait $pid
RC=$?
set -e
expect_rc 130
for f in long1 long2; do
  p=$(cat "$T/$f.pid")
  pid_alive "$p" && fail "$f (pid $p) still running after Ctrl-C"
done
R=$(run_dir cc)
for t in long1 long2 later; do
  [ "$(task_field "$R" $t state)" = cancelled ] || fail "$t: $(task_field "$R" $t state)"
done
expect_in "$T/out" "interrupted"
expect_in "$T/out" "cancelled"
/usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["state"]=="cancelled", r["state"]' "$R/run.json" \
  || fail "run.json state"

# SIGTERM does the same, with exit code 143.
rm -rf "$DAGRUN_RUNS_DIR" "$T"/*.pid
"$DAGRUN" run cc.yaml --plain >"$T/out" 2>"$T/err" &
pid=$!
for _ in $(seq 100); do [ -s "$T/long1.pid" ] && break; sleep 0.1; done
kill -TERM $pid
set +e; wait $pid; RC=$?; set -e
expect_rc 143
pid_alive "$(cat "$T/long1.pid")" && fail "long1 still running after SIGTERM"

# A task that ignores SIGTERM survives the first Ctrl-C until its grace
# runs out (60 s here); a second Ctrl-C kills it at once.
rm -rf "$DAGRUN_RUNS_DIR" "$T"/*.pid
write_term_ignorer stubborn.sh
cat > st.yaml <<Y
dag: st
tasks:
  stubborn: {stage: exec, kill_grace: 60s, with: {command: [sh, $T/stubborn.sh, $T/stubborn.pid]}}
Y
"$DAGRUN" run st.yaml --plain >"$T/out" 2>"$T/err" &
pid=$!
for _ in $(seq 100); do [ -s "$T/stubborn.pid" ] && break; sleep 0.1; done
[ -s "$T/stubborn.pid" ] || fail "stubborn task did not start"
kill -INT $pid
sleep 0.5
pid_alive "$(cat "$T/stubborn.pid")" || fail "the task died before its grace period"
kill -0 $pid || fail "dagrun exited while a task was still stopping"
kill -INT $pid
set +e; wait $pid; RC=$?; set -e
expect_rc 130
pid_alive "$(cat "$T/stubborn.pid")" && fail "second Ctrl-C did not kill the task"
expect_in "$T/out" "killing running tasks"
pass
