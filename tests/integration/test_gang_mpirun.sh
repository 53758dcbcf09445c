# Gangs started by mpirun (Open MPI): each rank learns its rank from
# mpirun, writes its own log and reports to dagrun over its socket; a
# failing rank, a timeout and Ctrl-C stop the whole gang.
. "$(dirname "$0")/lib.sh"

command -v mpirun >/dev/null || fail "mpirun not found (scripts/setup.sh installs openmpi-bin)"

# --- Two ranks: environment, logs, outputs of rank 0, per-rank exits.
cat > m.yaml <<Y
dag: m
tasks:
  env:
    stage: exec
    world_size: 2
    launcher: mpirun
    with:
      command: [sh, -c, 'echo "hello from rank \$DAGRUN_RANK"; echo "\$DAGRUN_RANK \$DAGRUN_WORLD_SIZE \$DAGRUN_LOCAL_RANK \$DAGRUN_RENDEZVOUS" > $T/env-\$DAGRUN_RANK']
  ro:
    stage: rank_output
    world_size: 2
    launcher: mpirun
Y
run_dagrun run m.yaml --plain
expect_rc 0
R=$(run_dir m)
for r in 0 1; do
  [ "$(cat "$T/env-$r")" = "$r 2 $r $R/env/attempt-1/rendezvous" ] \
    || fail "rank $r environment: $(cat "$T/env-$r" 2>/dev/null)"
  expect_in "$R/env/attempt-1/rank-$r/log" "hello from rank $r"
done
expect_not_in "$R/env/attempt-1/log" "hello from rank 1"
[ "$(task_field "$R" ro outputs)" = "{'rank': '0'}" ] || fail "ro outputs: $(task_field "$R" ro outputs)"
/usr/bin/python3 - "$R/run.json" <<'P' || fail "run.json ranks"
import json, sys
t = [t for t in json.load(open(sys.argv[1]))["tasks"] if t["name"] == "env"][0]
assert t["world_size"] == 2, t
assert [(r["rank"], r["exit_code"]) for r in t["ranks"]] == [(0, 0), (1, 0)], t["ranks"]
P
run_dagrun logs "$(basename "$R")" env --rank 1
expect_rc 0
expect_in "$T/out" "hello from rank 1"

# --- Rank 1 exits 3 while rank 0 sleeps: the gang stops within seconds,
# and the retry runs both ranks again.
expect_gang_stops_and_retries mpirun

# --- The rendezvous on a port the task names: the ranks join there, and
# the token that proved them is not left for the stage to see.
PORT=$(free_port)
cat > rv.yaml <<Y
dag: rv
tasks:
  gang:
    stage: exec
    world_size: 2
    launcher: mpirun
    rendezvous: "127.0.0.1:$PORT"
    with:
      command: [sh, -c, 'echo "\$DAGRUN_GANG_ADDR \$\${DAGRUN_GANG_TOKEN:-no-token}" > $T/rv-\$DAGRUN_RANK']
Y
run_dagrun run rv.yaml --plain
expect_rc 0
for r in 0 1; do
  [ "$(cat "$T/rv-$r")" = "127.0.0.1:$PORT no-token" ] || fail "rank $r saw: $(cat "$T/rv-$r")"
done

# Ranks started through rank.sh (lib.sh: wrap_launcher).
wrap_launcher mpirun
cat > late.yaml <<Y
dag: late
tasks:
  gang:
    stage: exec
    world_size: 2
    launcher: mpirun
    timeout: 30s
    kill_grace: 5s
    with:
      command: [sh, -c, 'echo \$\$ > $T/late-\$DAGRUN_RANK.tmp && mv $T/late-\$DAGRUN_RANK.tmp $T/late-\$DAGRUN_RANK; exec sleep 60']
Y
# (Each rank writes its pid under a temporary name and renames it: a rank
# stopped while it wrote would leave an empty file, whose process the
# test could not check; CI saw that.)
export T
# --- A rank with a wrong token is refused and says so; the refusal is in
# the attempt's log, and the gang fails without waiting for its timeout.
set +e
start=$(date +%s)
PATH="$T/bin:$PATH" RANK_MODE=badtoken "$DAGRUN" run late.yaml --plain >"$T/out" 2>"$T/err"
RC=$?
end=$(date +%s)
set -e
expect_rc 1
[ $((end - start)) -lt 15 ] || fail "the refused rank's gang took $((end - start)) s"
R=$(run_dir late)
expect_in "$R/gang/attempt-1/log" "WARN dagrun: refused a connection to the gang's rendezvous from 127.0.0.1:"
expect_in "$R/gang/attempt-1/log" ": wrong token"
expect_in "$R/gang/attempt-1/log" "refused rank 1 (a wrong DAGRUN_GANG_TOKEN"
expect_not_in "$T/out" "timed out"
expect_in "$T/out" "rank 1 never connected to dagrun's rendezvous at 127.0.0.1:"
all_gone "$T/late-pid"
# Rank 0 may have been stopped before its stage started.
[ ! -e "$T/late-0" ] || all_gone "$T/late-0"

# --- A rank whose host does not see the runs directory (as on a host
# without the shared filesystem) fails at once, and dagrun says why.
rm -f "$T"/late-*
set +e
PATH="$T/bin:$PATH" RANK_MODE=nolog "$DAGRUN" run late.yaml --plain >"$T/out" 2>"$T/err"
RC=$?
set -e
expect_rc 1
expect_in "$T/out" "rank 1 exited 125: rank 1 on $(hostname) cannot open its log /nonexistent/attempt/rank-1/log: No such file or directory (a gang across hosts needs the runs directory on a filesystem every host shares, at the same path)"
all_gone "$T/late-pid"
[ ! -e "$T/late-0" ] || all_gone "$T/late-0"

# --- A port the task names that is taken: the attempt fails saying so.
/usr/bin/python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1]); time.sleep(60)' "$T/taken" &
HOLDER=$!
for _ in $(seq 100); do [ -s "$T/taken" ] && break; sleep 0.05; done
sed -e "s/rendezvous: .*/rendezvous: \"127.0.0.1:$(cat "$T/taken")\"\n    cache: false/" -e 's/dag: rv/dag: taken/' rv.yaml > taken.yaml
run_dagrun run taken.yaml --plain
kill $HOLDER
expect_rc 1
expect_in "$T/out" "cannot listen for the gang's ranks on 127.0.0.1:$(cat "$T/taken"): address already in use"

# --- A rank that never connects: the gang's timeout stops it and says
# which rank never joined, and where it was expected. The timeout leaves
# mpirun time to start both ranks on a loaded 2-core machine (at 3 s, CI
# once saw rank 0 stopped before its stage wrote its pid).
rm -f "$T"/late-*
sed -e 's/timeout: 30s/timeout: 10s/' late.yaml > never.yaml
set +e
PATH="$T/bin:$PATH" RANK_MODE=never "$DAGRUN" run never.yaml --plain >"$T/out" 2>"$T/err"
RC=$?
set -e
expect_rc 1
expect_in "$T/out" "timed out after 10.0s; stopped ranks 0, 1; rank 1 never connected to dagrun's rendezvous at 127.0.0.1:"
all_gone "$T/late-0" "$T/late-pid"

# --- mpirun killed (kill -9, the OOM killer) under a running gang: the
# ranks stop, and the failure names the launcher's death, which the
# ranks, cut off from it, cannot tell.
cat > lk.yaml <<Y
dag: lk
tasks:
  gang: {stage: exec, world_size: 2, launcher: mpirun, with: {command: [sh, -c, 'echo \$\$ > $T/lk-\$DAGRUN_RANK.tmp && mv $T/lk-\$DAGRUN_RANK.tmp $T/lk-\$DAGRUN_RANK; exec sleep 60']}}
Y
"$DAGRUN" run lk.yaml --plain >"$T/out" 2>"$T/err" &
pid=$!
wait_until 30 test -s "$T/lk-0" -a -s "$T/lk-1" || fail "lk: ranks did not start: $(cat "$T/out" "$T/err")"
MPIRUN=$(pgrep -P "$pid" -x mpirun) || fail "lk: no mpirun under dagrun $pid"
kill -9 "$MPIRUN"
set +e
wait "$pid"
RC=$?
set -e
expect_rc 1
expect_in "$T/out" "its launcher was killed by signal 9 (SIGKILL), not by dagrun"
all_gone "$T/lk-0" "$T/lk-1"

# --- Timeout and Ctrl-C stop every rank.
cat > to.yaml <<Y
dag: to
tasks:
  gang:
    stage: exec
    world_size: 2
    launcher: mpirun
    timeout: 4s
    kill_grace: 2s
    with:
      command: [sh, -c, 'echo \$\$ > $T/to-\$DAGRUN_RANK.tmp && mv $T/to-\$DAGRUN_RANK.tmp $T/to-\$DAGRUN_RANK; exec sleep 60']
Y
run_dagrun run to.yaml --plain
expect_rc 1
expect_in "$T/out" "timed out after 4.0s; stopped ranks 0, 1"
all_gone "$T/to-0" "$T/to-1"
# mpirun ends its job on its own once its ranks are gone (Open MPI 4.1,
# signalled while it aborts, segfaults in PMIx_Finalize: a stack trace in
# the log of every stopped gang).
expect_clean_mpirun_log() {
  expect_not_in "$1" "abort is already in progress"
  expect_not_in "$1" "Segmentation fault"
}
expect_clean_mpirun_log "$(run_dir to)/gang/attempt-1/log"

sed -e 's/timeout: 4s/timeout: 0/' -e 's/dag: to/dag: cc/' -e 's/to-/cc-/g' to.yaml > cc.yaml
"$DAGRUN" run cc.yaml --plain >"$T/out" 2>"$T/err" &
pid=$!
for _ in $(seq 100); do [ -s "$T/cc-0" ] && [ -s "$T/cc-1" ] && break; sleep 0.1; done
[ -s "$T/cc-0" ] && [ -s "$T/cc-1" ] || fail "ranks did not start"
kill -INT $pid
set +e
wait $pid
RC=$?
set -e
expect_rc 130
all_gone "$T/cc-0" "$T/cc-1"
expect_clean_mpirun_log "$(run_dir cc)/gang/attempt-1/log"
# --- A gang's ranks get the task's kill_grace to stop, not mpirun's own
# (Open MPI kills its ranks 1 s after it forwards a SIGTERM): dagrun
# tells each rank over its connection, and signals mpirun only when they
# are gone or the grace is over.
# stop_yaml NAME GRACE STOP_S [TIMEOUT]: NAME.yaml, a gang of 2 under
# mpirun whose ranks take STOP_S s to stop on SIGTERM (a training stage
# writing its stop checkpoint), then write $T/NAME-clean-RANK; each
# writes its pid to $T/NAME-RANK once its trap is set.
stop_yaml() {
  cat > "$1.yaml" <<Y
dag: $1
tasks:
  gang:
    stage: exec
    world_size: 2
    launcher: mpirun
    kill_grace: $2
    ${4:+timeout: $4}
    with:
      command: [sh, -c, 'trap "sleep $3; echo stopped > $T/$1-clean-\$DAGRUN_RANK; exit 1" TERM; echo \$\$ > $T/$1-\$DAGRUN_RANK; sleep 60 & wait']
Y
}
# Ranks that take 3 s within a 10 s grace, after Ctrl-C once both run:
# both finish, and the gang ends when they do, not at the grace.
stop_yaml gr 10s 3
"$DAGRUN" run gr.yaml --plain >"$T/out" 2>"$T/err" &
pid=$!
for _ in $(seq 300); do [ -s "$T/gr-0" ] && [ -s "$T/gr-1" ] && break; sleep 0.1; done
[ -s "$T/gr-0" ] && [ -s "$T/gr-1" ] || fail "gr: ranks did not start"
t0=$(date +%s)
kill -INT $pid
set +e
wait $pid
RC=$?
set -e
took=$(($(date +%s) - t0))
expect_rc 130
for r in 0 1; do
  [ -s "$T/gr-clean-$r" ] || fail "rank $r was killed before its 3 s stop within a 10 s kill_grace
$(cat "$(run_dir gr)/gang/attempt-1/rank-$r/log" 2>/dev/null)"
  expect_in "$(run_dir gr)/gang/attempt-1/rank-$r/log" "dagrun worker: dagrun stops this gang's attempt (timeout, cancel or another rank's failure): cancelling"
done
[ "$took" -lt 9 ] || fail "the gang took $took s to end; its ranks stopped after 3 s"
all_gone "$T/gr-0" "$T/gr-1"
echo "gr: both ranks stopped cleanly; the gang ended $took s after Ctrl-C"
# Ranks that take 30 s within a 2 s grace (here on a timeout) are killed
# after it: mpirun gets SIGTERM then, and kills them itself.
stop_yaml gk 2s 30 4s
t0=$(date +%s)
run_dagrun run gk.yaml --plain
took=$(($(date +%s) - t0))
expect_rc 1
expect_in "$T/out" "timed out after 4.0s; stopped ranks 0, 1"
[ ! -e "$T/gk-clean-0" ] && [ ! -e "$T/gk-clean-1" ] ||
  fail "a rank ran its 30 s stop to the end within a 2 s kill_grace"
[ "$took" -lt 18 ] || fail "the gang took $took s to end (timeout 4 s, kill_grace 2 s)"
all_gone "$T/gk-0" "$T/gk-1"
echo "gk: ranks killed after the grace; the gang ended after $took s"

# --- dagrun killed by SIGKILL mid-gang: each rank sees its connection
# to the rendezvous close and stops (a stage that ignores cancel, as hang
# does, by SIGKILL after the worker's 10 s grace), and mpirun ends with
# them. The ranks' stage sends nothing, so only the closed connection can
# tell them.
cat > k9.yaml <<Y
dag: k9
tasks:
  gang: {stage: hang, world_size: 2, launcher: mpirun}
Y
expect_no_rank_outlives kill9 k9.yaml
# --- Ctrl-C twice ("kill them now") on the same gang: dagrun tells each
# rank to die at once before it kills mpirun, so no rank outlives it by
# the worker's grace (mpirun, killed, cannot end them).
expect_no_rank_outlives force k9.yaml logged
pass
