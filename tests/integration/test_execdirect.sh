# An exec task of one process runs its command straight from dagrun, with
# no worker in between (orchestrator/run/execdirect.h), and behaves as the
# exec stage in a worker does:
# 1. the command's parent is dagrun itself, and its log says what ran;
# 2. the environment: dagrun's facts (DAGRUN_ATTEMPT_DIR included), the
#    task's env, the env param, a PATH set there to find the program;
#    cwd relative to the DAG file;
# 3. what cannot start (a program not found, shell: true with a list)
#    runs in a worker after all: exit 127 and 2 with the exec stage's
#    messages, and retries apply;
# 4. a command killed by a signal fails with 128 + the signal and says so;
# 5. kill -9 of dagrun: the run's guard stops the command and what it
#    started (SIGTERM to its group), and exits; nothing is left.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"
mkdir -p bin sub
printf '#!/bin/sh\necho "mytool ran in $(pwd)" > "$1"\n' > bin/mytool
chmod +x bin/mytool

cat > d.yaml <<Y
dag: direct
tasks:
  who:
    stage: exec
    env: {FROM_TASK: t1}
    with:
      command: [sh, -c, 'echo \$PPID > $T/ppid; env > $T/env.txt']
      env: {FROM_PARAM: p1}
  tool:
    stage: exec
    with: {command: [mytool, $T/tool.txt], cwd: sub, env: {PATH: "$T/bin:/usr/bin:/bin"}}
Y
"$DAGRUN" run d.yaml --plain > run.out 2>&1 &
DPID=$!
wait "$DPID" || fail "run failed: $(cat run.out)"
[ "$(cat ppid)" = "$DPID" ] || fail "the command's parent is $(cat ppid), not dagrun ($DPID)"
R=$(run_dir direct)
for want in "FROM_TASK=t1" "FROM_PARAM=p1" "DAGRUN_TASK=who" "DAGRUN_ATTEMPT=1" \
    "DAGRUN_ATTEMPT_DIR=$R/who/attempt-1" "DAGRUN_OUT_DIR=$R/who/out" \
    "DAGRUN_METRICS=$R/who/attempt-1/command-metrics.jsonl"; do
  grep -qxF "$want" env.txt || fail "no $want in the command's environment"
done
expect_in "$R/who/attempt-1/log" "INFO running: sh -c echo"
[ "$(cat tool.txt)" = "mytool ran in $T/sub" ] || fail "tool: $(cat tool.txt)"

# 3. What cannot start runs in a worker, which says why; retries apply.
cat > bad.yaml <<Y
dag: bad
tasks:
  missing: {stage: exec, retries: 1, retry_delay: 10ms, with: {command: [no-such-program-dagrun]}}
  listed: {stage: exec, with: {command: [echo, hi], shell: true}}
Y
run_dagrun run bad.yaml --plain
[ "$RC" -ne 0 ] || fail "bad.yaml succeeded"
"$DAGRUN" status "$(ls "$DAGRUN_RUNS_DIR/bad")" --json > st.json
"$PY" - st.json <<'P' || fail "bad: $(cat st.json)"
import json, sys
t = {x["name"]: x for x in json.load(open(sys.argv[1]))["tasks"]}
m = t["missing"]
assert m["state"] == "failed" and m["exit_code"] == 127, m
assert len(m["attempt_list"]) == 2, m["attempt_list"]
assert "command not found: no-such-program-dagrun" in m["error"], m["error"]
l = t["listed"]
assert l["exit_code"] == 2 and "shell: true needs command as one string" in l["error"], l
P

# 4. A command killed by a signal it did not get from dagrun.
cat > sig.yaml <<Y
dag: sig
tasks:
  crash: {stage: exec, with: {command: [sh, -c, 'kill -SEGV \$\$']}}
Y
run_dagrun run sig.yaml --plain
"$DAGRUN" status "$(ls "$DAGRUN_RUNS_DIR/sig")" --json > st.json
"$PY" - st.json <<'P' || fail "sig: $(cat st.json)"
import json, sys
t = json.load(open(sys.argv[1]))["tasks"][0]
assert t["exit_code"] == 139, t
assert "command killed by signal 11 (SIGSEGV)" in t["error"], t["error"]
P

# 5. kill -9 of dagrun: the guard stops the command's group.
cat > long.yaml <<Y
dag: long
tasks:
  long: {stage: exec, with: {command: [sh, -c, 'sleep 300 & echo \$! > $T/child.pid; wait']}}
Y
"$DAGRUN" run long.yaml --plain > long.out 2>&1 &
DPID=$!
wait_until 10 test -s child.pid || fail "the command never started: $(cat long.out)"
GUARD=$(pgrep -f "dagrun-worker __guard" -P "$DPID" || true)
[ -n "$GUARD" ] || fail "no guard process under dagrun"
kill -9 "$DPID"
wait "$DPID" 2>/dev/null || true
CHILD=$(cat child.pid)
wait_until 5 sh -c "! kill -0 $CHILD 2>/dev/null" || fail "sleep $CHILD outlived dagrun"
wait_until 5 sh -c "! kill -0 $GUARD 2>/dev/null" || fail "the guard $GUARD did not exit"
pass
