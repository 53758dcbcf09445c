# Gangs: a task with world_size N starts N ranks together, each with its
# rank, the world size, a local rank, a rendezvous directory and its own
# log. One failing rank stops the others at once and the whole gang is
# retried; a timeout and Ctrl-C stop every rank; outputs are rank 0's.
. "$(dirname "$0")/lib.sh"

# all_gone FILE...: every pid named in the files has exited.
# wait_for FILE...: each file exists (up to 10 s).
wait_for() {
  for _ in $(seq 100); do
    local all=1
    for f in "$@"; do [ -s "$f" ] || all=0; done
    [ $all = 1 ] && return 0
    sleep 0.1
  done
  fail "never appeared: $*"
}

# --- Four ranks: environment, logs, rendezvous, outputs of rank 0. Each
# rank sees its own GPU (lib.sh hides the GPUs from the tests: not here).
unset CUDA_VISIBLE_DEVICES
cat > g.yaml <<Y
dag: g
tasks:
  env:
    stage: exec
    world_size: 4
    with:
      command: [sh, -c, 'echo "hello from rank \$DAGRUN_RANK"; echo "\$DAGRUN_RANK \$DAGRUN_WORLD_SIZE \$DAGRUN_LOCAL_RANK \$DAGRUN_RENDEZVOUS \$CUDA_VISIBLE_DEVICES" > $T/env-\$DAGRUN_RANK']
  ro:
    stage: rank_output
    world_size: 4
  use:
    stage: exec
    needs: [ro]
    with:
      command: [sh, -c, 'echo "\${tasks.ro.outputs.rank}" > $T/used']
Y
run_dagrun run g.yaml --plain
expect_rc 0
R=$(run_dir g)
for r in 0 1 2 3; do
  [ -s "$T/env-$r" ] || fail "rank $r did not run"
  [ "$(cat "$T/env-$r")" = "$r 4 $r $R/env/attempt-1/rendezvous $r" ] \
    || fail "rank $r environment: $(cat "$T/env-$r")"
  expect_in "$R/env/attempt-1/rank-$r/log" "hello from rank $r"
done
[ -d "$R/env/attempt-1/rendezvous" ] || fail "no rendezvous directory"
expect_in "$R/env/attempt-1/log" "hello from rank 0"
expect_not_in "$R/env/attempt-1/log" "hello from rank 1"
[ "$(cat "$T/used")" = 0 ] || fail "downstream saw outputs of rank $(cat "$T/used"), not rank 0"
[ "$(task_field "$R" ro outputs)" = "{'rank': '0'}" ] || fail "ro outputs: $(task_field "$R" ro outputs)"

# dagrun's own CUDA_VISIBLE_DEVICES: rank r gets the r-th entry; set but
# empty (GPUs hidden), every rank gets it empty, not a GPU of its own.
n=0
for vis in "7,5,3,1" ""; do
  n=$((n + 1))
  sed "s/^dag: g\$/dag: gv$n/" g.yaml > gv$n.yaml
  CUDA_VISIBLE_DEVICES=$vis run_dagrun run gv$n.yaml --plain --no-cache
  expect_rc 0
  R=$(run_dir gv$n)
  for r in 0 1 2 3; do
    want="$r 4 $r $R/env/attempt-1/rendezvous "
    [ -z "$vis" ] || want="$want$(echo "$vis" | cut -d, -f$((r + 1)))"
    [ "$(cat "$T/env-$r")" = "$want" ] \
      || fail "CUDA_VISIBLE_DEVICES='$vis': rank $r environment: '$(cat "$T/env-$r")', want '$want'"
  done
done
[ "$(task_field "$R" env world_size)" = 4 ] || fail "run.json world_size: $(task_field "$R" env world_size)"
/usr/bin/python3 - "$R/run.json" <<'P' || fail "run.json ranks"
import json, sys
t = [t for t in json.load(open(sys.argv[1]))["tasks"] if t["name"] == "env"][0]
assert [(r["rank"], r["exit_code"]) for r in t["ranks"]] == [(k, 0) for k in range(4)], t["ranks"]
P
run_dagrun logs "$(basename "$R")" env --rank 2
expect_rc 0
expect_in "$T/out" "hello from rank 2"
expect_not_in "$T/out" "hello from rank 1"
run_dagrun logs "$(basename "$R")" env --rank 4
expect_rc 2
expect_in "$T/err" "no rank 4"

# --- Rank 2 exits 3 on the first attempt while the others sleep: the
# attempt fails at once, the others are killed, and the retry runs every
# rank again.
cat > f.yaml <<Y
dag: f
tasks:
  gang:
    stage: exec
    world_size: 4
    cache: false
    retries: 1
    retry_delay: 0
    with:
      command: [sh, -c, 'echo \$\$ > $T/pid-\$DAGRUN_ATTEMPT-\$DAGRUN_RANK; if [ \$DAGRUN_ATTEMPT = 1 ]; then if [ \$DAGRUN_RANK = 2 ]; then sleep 0.5; exit 3; fi; exec sleep 60; fi']
Y
start=$(date +%s)
run_dagrun run f.yaml --plain
end=$(date +%s)
expect_rc 0
[ $((end - start)) -lt 20 ] || fail "the gang took $((end - start)) s: the sleeping ranks were not stopped"
all_gone "$T"/pid-1-0 "$T"/pid-1-1 "$T"/pid-1-3
for r in 0 1 2 3; do [ -s "$T/pid-2-$r" ] || fail "attempt 2 did not run rank $r"; done
expect_in "$T/out" "rank 2 exited 3"
expect_in "$T/out" "stopped ranks 0, 1, 3"
R=$(run_dir f)
[ "$(task_field "$R" gang attempts)" = 2 ] || fail "attempts: $(task_field "$R" gang attempts)"
for r in 1 2 3; do [ -s "$R/gang/attempt-2/rank-$r/log" ] || fail "no log of rank $r, attempt 2"; done

# Without retries the failure is the task's, in run.json.
sed -e 's/retries: 1/retries: 0/' -e 's/dag: f/dag: f0/' f.yaml > f0.yaml
rm -f "$T"/pid-*
run_dagrun run f0.yaml --plain
expect_rc 1
R=$(run_dir f0)
case "$(task_field "$R" gang reason)" in
"rank 2 exited 3"*"; stopped ranks 0, 1, 3") ;;
*) fail "reason: $(task_field "$R" gang reason)" ;;
esac
all_gone "$T"/pid-1-0 "$T"/pid-1-1 "$T"/pid-1-3

# --- A rank that crashes (SIGKILL) fails the gang the same way.
cat > k.yaml <<Y
dag: k
tasks:
  gang:
    stage: exec
    world_size: 2
    with:
      command: [sh, -c, 'echo \$\$ > $T/k-\$DAGRUN_RANK; if [ \$DAGRUN_RANK = 1 ]; then sleep 0.3; kill -9 \$\$; fi; exec sleep 60']
Y
run_dagrun run k.yaml --plain
expect_rc 1
expect_in "$T/out" "rank 1 exited"
expect_in "$T/out" "stopped rank 0"
all_gone "$T/k-0"

# --- A gang past its timeout is stopped whole, a rank that ignores
# SIGTERM included.
write_term_ignorer stubborn.sh
cat > to.yaml <<Y
dag: to
tasks:
  gang:
    stage: exec
    world_size: 3
    timeout: 1s
    kill_grace: 1s
    with:
      command: [sh, -c, 'if [ \$DAGRUN_RANK = 1 ]; then exec sh $T/stubborn.sh $T/to-1; fi; echo \$\$ > $T/to-\$DAGRUN_RANK; exec sleep 60']
Y
start=$(date +%s)
run_dagrun run to.yaml --plain
end=$(date +%s)
expect_rc 1
expect_in "$T/out" "timed out after 1.0s"
[ $((end - start)) -lt 10 ] || fail "timeout took $((end - start)) s"
all_gone "$T/to-0" "$T/to-1" "$T/to-2"

# --- Ranks that hang without a sign of life: the first missed heartbeat
# stops the gang, and no worker of it is left.
cat > hb.yaml <<Y
dag: hb
tasks:
  gang: {stage: hang, world_size: 3, heartbeat_timeout: 1s, kill_grace: 500ms}
Y
start=$(date +%s)
run_dagrun run hb.yaml --plain
end=$(date +%s)
expect_rc 1
expect_in "$T/out" "hung: no heartbeat for 1.0s; stopped ranks"
R=$(run_dir hb)
case "$(task_field "$R" gang reason)" in
"rank "[012]" hung: no heartbeat for 1.0s; stopped ranks "*) ;;
*) fail "reason: $(task_field "$R" gang reason)" ;;
esac
[ $((end - start)) -lt 10 ] || fail "hung gang took $((end - start)) s"
if pgrep -f "$R/gang" >/dev/null; then fail "workers of the hung gang left: $(pgrep -af "$R/gang")"; fi

# --- Ctrl-C and SIGTERM of dagrun stop every rank.
cat > cc.yaml <<Y
dag: cc
tasks:
  gang:
    stage: exec
    world_size: 3
    with:
      command: [sh, -c, 'echo \$\$ > $T/cc-\$DAGRUN_RANK; exec sleep 300']
Y
for sig in INT TERM; do
  rm -f "$T"/cc-*
  "$DAGRUN" run cc.yaml --plain >"$T/out" 2>"$T/err" &
  pid=$!
  wait_for "$T/cc-0" "$T/cc-1" "$T/cc-2"
  kill -$sig $pid
  set +e
  wait $pid
  RC=$?
  set -e
  [ $sig = INT ] && expect_rc 130
  [ $sig = TERM ] && expect_rc 143
  all_gone "$T/cc-0" "$T/cc-1" "$T/cc-2"
done

# --- Bad gangs are check errors at file:line:col.
cat > bad.yaml <<Y
dag: bad
tasks:
  a: {stage: exec, world_size: 0, with: {command: ["true"]}}
  b: {stage: exec, launcher: mpirn, with: {command: ["true"]}}
  c: {stage: exec, launcher: sruun, with: {command: ["true"]}}
  d: {stage: exec, hosts: [n1], with: {command: ["true"]}}
  e: {stage: exec, launcher: mpirun, rendezvous: 10.0.0.300, with: {command: ["true"]}}
  f: {stage: exec, launcher: srun, rendezvous: "127.0.0.1:70000", with: {command: ["true"]}}
  g: {stage: exec, world_size: 2, rendezvous: 127.0.0.1, with: {command: ["true"]}}
Y
run_dagrun check bad.yaml
expect_rc 2
expect_in "$T/err" "bad.yaml:3:32: error: 'world_size' in task 'a': expected an integer from 1 to 65536"
expect_in "$T/err" "bad.yaml:4:30: error: 'launcher' in task 'b': expected local, mpirun or srun, found \"mpirn\"; did you mean 'mpirun'?"
expect_in "$T/err" "bad.yaml:5:30: error: 'launcher' in task 'c': expected local, mpirun or srun, found \"sruun\"; did you mean 'srun'?"
expect_in "$T/err" "bad.yaml:6:27: error: 'hosts' in task 'd'"
expect_in "$T/err" "bad.yaml:7:50: error: 'rendezvous' in task 'e': expected auto, an IP address or ADDRESS:PORT (IPv6 as [ADDRESS]:PORT, port 1-65535) that dagrun listens on for the gang's ranks, found \"10.0.0.300\""
expect_in "$T/err" "bad.yaml:8:48: error: 'rendezvous' in task 'f': expected auto"
expect_in "$T/err" "bad.yaml:9:47: error: 'rendezvous' in task 'g': the rendezvous is where the ranks of launcher mpirun or srun join"
cat > bad2.yaml <<Y
dag: bad2
defaults: {world_size: two}
tasks:
  a: {stage: exec, with: {command: ["true"]}}
Y
run_dagrun check bad2.yaml
expect_rc 2
expect_in "$T/err" "bad2.yaml:2:24: error: 'world_size' in defaults"
pass
