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
pass
