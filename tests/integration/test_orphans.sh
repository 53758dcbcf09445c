# What an attempt starts outside its process group (setsid, a daemon)
# ends with the attempt (orchestrator/run/orphans.h):
# 1. an exec task that leaves `setsid sleep` behind and exits: the sleep is
#    stopped when the task ends, and the attempt's log says so, by pid and
#    command line; `setsid sleep 101` as the command (setsid forks, its
#    parent returns at once) leaves nothing either, nor does a shell
#    waiting on `setsid sleep 102` that its timeout stops;
# 2. an orphan of an attempt that still runs is left alone while other
#    attempts end around it, and stopped when its own attempt ends;
# 3. the same from a gang's ranks, which run in workers;
# 4. kill -9 of dagrun: the run's guard stops the orphans of its attempts.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"

gone() { ! kill -0 "$1" 2>/dev/null; }

cat > o.yaml <<Y
dag: o
tasks:
  leaves:
    stage: exec
    with: {command: [sh, -c, 'setsid sleep 300 & echo \$! > $T/leaves.pid']}
  forks: {stage: exec, with: {command: [setsid, sleep, "101"]}}
  keeps:
    stage: exec
    with: {command: [sh, -c, '(setsid sleep 300 & echo \$! > $T/keeps.pid); sleep 2; kill -0 \$(cat $T/keeps.pid)']}
  quick1: {stage: exec, with: {command: ["true"]}}
  quick2: {stage: exec, needs: [quick1], with: {command: [sleep, "0.3"]}}
  quick3: {stage: exec, needs: [quick2], with: {command: [sleep, "0.3"]}}
Y
run_dagrun run o.yaml --plain -j 4
expect_rc 0
R=$(run_dir o)
for t in leaves keeps; do
  P=$(cat "$t.pid")
  wait_until 5 gone "$P" || fail "$t: pid $P outlived its task"
  # Its command line: "sleep 300", or "setsid sleep 300" when caught
  # between setsid's fork and its exec.
  grep -qE "WARN dagrun: pid $P \((setsid )?sleep 300\) was left running by this attempt outside its process group" \
    "$R/$t/attempt-1/log" || fail "$t: not in its log: $(cat "$R/$t/attempt-1/log")"
done
! pgrep -x -f "sleep 101" >/dev/null || fail "forks: setsid sleep 101 outlived its task"
cat > t.yaml <<Y
dag: t
tasks:
  timed: {stage: exec, timeout: 1s, with: {command: [sh, -c, 'setsid sleep 102']}}
Y
run_dagrun run t.yaml --plain
expect_rc 1
expect_in "$T/out" "timed out after 1.0s"
wait_until 5 sh -c '! pgrep -x -f "sleep 102"' || fail "timed: setsid sleep 102 outlived its task"

# 3. A gang: each rank runs in a worker.
cat > g.yaml <<Y
dag: g
tasks:
  gang:
    stage: exec
    world_size: 2
    with: {command: [sh, -c, 'setsid sleep 300 & echo \$! > $T/rank-\$DAGRUN_RANK.pid']}
Y
run_dagrun run g.yaml --plain
expect_rc 0
for r in 0 1; do
  P=$(cat "rank-$r.pid")
  wait_until 5 gone "$P" || fail "rank $r: pid $P outlived the gang"
done

# 4. kill -9 of dagrun: the guard stops the orphan.
cat > k.yaml <<Y
dag: k
tasks:
  k: {stage: exec, with: {command: [sh, -c, '(setsid sleep 300 & echo \$! > $T/k.pid); exec sleep 300']}}
Y
"$DAGRUN" run k.yaml --plain > k.out 2>&1 &
DPID=$!
wait_until 10 test -s k.pid || fail "k never started: $(cat k.out)"
kill -9 "$DPID"
wait "$DPID" 2>/dev/null || true
P=$(cat k.pid)
wait_until 5 gone "$P" || fail "k: orphan $P outlived a killed dagrun"

# 5. kill -9 of dagrun: the attempts get their task's kill_grace to stop
# (a training stage writing its stop checkpoint), not a fixed 10 s: a
# command run straight from dagrun (the guard stops it) and a gang's
# ranks (their workers do) that take 12 s after SIGTERM, within 20 s. A
# `dagrun resume` at once waits as long for them, rather than killing them
# 5 s after its own SIGTERM, then runs the tasks again.
cat > kg.yaml <<Y
dag: kg
tasks:
  direct: {stage: exec, kill_grace: 20s, with: {command: [sh, -c, '[ \$DAGRUN_ATTEMPT = 1 ] || exit 0; trap "sleep 12; echo clean > $T/kg-direct; exit 1" TERM; echo \$\$ > $T/kg-direct.pid; while :; do sleep 0.2; done']}}
  ranks: {stage: exec, world_size: 2, kill_grace: 20s, with: {command: [sh, -c, '[ \$DAGRUN_ATTEMPT = 1 ] || exit 0; trap "sleep 12; echo clean > $T/kg-rank-\$DAGRUN_RANK; exit 1" TERM; echo \$\$ > $T/kg-rank-\$DAGRUN_RANK.pid; while :; do sleep 0.2; done']}}
Y
"$DAGRUN" run kg.yaml --plain > kg.out 2>&1 &
DPID=$!
wait_until 20 test -s kg-direct.pid -a -s kg-rank-0.pid -a -s kg-rank-1.pid ||
  fail "kg never started: $(cat kg.out)"
kill -9 "$DPID"
wait "$DPID" 2>/dev/null || true
run_dagrun resume "$(ls "$DAGRUN_RUNS_DIR/kg")" --plain
expect_rc 0
for f in kg-direct kg-rank-0 kg-rank-1; do
  wait_until 25 test -s "$f" ||
    fail "$f: killed before its 12 s stop within a kill_grace of 20 s (dagrun killed, then resumed)"
  P=$(cat "$f.pid")
  wait_until 5 gone "$P" || fail "$f: pid $P outlived its stop"
done
pass
