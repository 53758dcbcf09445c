# A run's dagrun is judged alive only where its pid means something: on
# its host (boot id) and in its PID namespace (store/owner.h).
#
# 1. From another PID namespace (unshare, as root; skipped where it cannot
#    run): `dagrun runs` shows a live run running, with a note that its
#    dagrun runs elsewhere, and never records it interrupted; `dagrun
#    resume` refuses it (and names --force), `dagrun cancel` too.
# 2. A live run recorded "interrupted" (as an older dagrun in another
#    namespace did): `dagrun resume` on its host refuses it, since its
#    dagrun is alive; the run ends as it would have, each task run once.
# 3. A run recorded by a dagrun in another PID namespace that died: shown
#    running while its heartbeat is fresh; resume refuses it without
#    --force, goes on with it with --force. Once its heartbeat is stale (a
#    container killed: its dagrun stopped beating), it is interrupted, and
#    resumed without --force.
# 4. A run recorded before this host's last boot (same host name, another
#    boot id, a stale heartbeat) is interrupted, even if its pid names a
#    live process now; with a fresh heartbeat it is another host of the
#    same name, running; a run with no place recorded (a store of schema 8)
#    is judged here.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"
DB="$DAGRUN_HOME/state.db"

# sql STATEMENT...: runs statements on the store, as another dagrun would
# have written them.
sql() {
  "$PY" - "$DB" "$@" <<'P'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for s in sys.argv[2:]:
    db.execute(s)
db.commit()
P
}

# slow.yaml: a waits for $T/go, recording each attempt in trace.
cat > slow.yaml <<Y
dag: slow
tasks:
  a: {stage: exec, cache: false, with: {command: [sh, -c, 'echo "a \$DAGRUN_ATTEMPT" >> $T/trace; echo \$\$ > $T/a.pid; while [ ! -e $T/go ]; do sleep 0.1; done']}}
  b: {stage: exec, cache: false, needs: [a], with: {command: [sh, -c, 'echo "b \$DAGRUN_ATTEMPT" >> $T/trace']}}
Y

# start_slow: a run of slow.yaml (pid P, id R) once a runs.
start_slow() {
  rm -f "$T/go" "$T/a.pid" "$T/trace"
  "$DAGRUN" run slow.yaml --plain >"$T/slow.out" 2>&1 &
  P=$!
  wait_until 10 test -s "$T/a.pid" || fail "slow never started: $(cat "$T/slow.out")"
  R=$(ls -t "$DAGRUN_RUNS_DIR/slow" | head -n 1)
}

# kill_slow: kill -9 of the run's dagrun and of its task's process group.
kill_slow() {
  local pgid
  pgid=$(ps -o pgid= -p "$(cat "$T/a.pid")" | tr -d ' ')
  kill -KILL "$P"
  kill -KILL -- "-$pgid" 2>/dev/null || true
  wait "$P" 2>/dev/null || true
}

# ---- 1. from another PID namespace ----
start_slow
if unshare --pid --fork --mount-proc true 2>/dev/null; then
  ns() { unshare --pid --fork --mount-proc "$DAGRUN" "$@"; }
  run_to ns_runs ns runs
  [ "$RC" -eq 0 ] || fail "runs in another namespace: $(cat ns_runs.err)"
  grep -E "^$R +slow +running" ns_runs.out >/dev/null || fail "another namespace does not show $R running: $(cat ns_runs.out)"
  expect_in ns_runs.out "$R dagrun (pid $P) runs it in another PID namespace of host $(hostname): whether it is still alive cannot be seen from here"
  store_run_is "$R" running || fail "a reader in another namespace recorded $R $(store_run_state "$R")"
  run_to ns_resume ns resume "$R" --plain
  [ "$RC" -eq 1 ] || fail "resume from another namespace: rc $RC: $(cat ns_resume.out ns_resume.err)"
  expect_in ns_resume.err "dagrun: run $R is recorded running by dagrun (pid $P) in another PID namespace of host $(hostname), whose liveness cannot be seen from here: not resuming it"
  expect_in ns_resume.err "\`dagrun resume $R --force\`"
  run_to ns_cancel ns cancel "$R"
  [ "$RC" -eq 1 ] || fail "cancel from another namespace: rc $RC: $(cat ns_cancel.err)"
  expect_in ns_cancel.err "cancel\` it there"
  pid_alive "$P" || fail "the run's dagrun died"
  [ "$(cat "$T/trace")" = "a 1" ] || fail "a ran again: $(cat "$T/trace")"
else
  echo "part 1 skipped: unshare --pid does not run here (needs root)"
fi

# ---- 2. a live run recorded interrupted ----
sql "UPDATE runs SET state = 'interrupted' WHERE id = '$R'"
# Bounded: a resume that took the run over would wait for $T/go.
run_to host_resume timeout 20 "$DAGRUN" resume "$R" --plain
[ "$RC" -eq 1 ] || fail "resume of a live run recorded interrupted: rc $RC: $(cat host_resume.out host_resume.err)"
expect_in host_resume.err "dagrun: run $R is still running (dagrun pid $P): not resuming it"
touch "$T/go"
wait "$P" || fail "the run failed: $(cat "$T/slow.out")"
store_run_is "$R" success || fail "the run ended $(store_run_state "$R")"
[ "$(cat "$T/trace")" = "$(printf 'a 1\nb 1')" ] || fail "tasks ran more than once: $(cat "$T/trace")"

# ---- 3. a dead dagrun of another PID namespace: --force ----
start_slow
kill_slow
sql "UPDATE runs SET state = 'running', orch_pidns = 'pid:[1]' WHERE id = '$R'"
run_dagrun runs
grep -E "^$R +slow +running" "$T/out" >/dev/null || fail "a run of another namespace is not shown running: $(cat "$T/out")"
expect_in "$T/out" "$R dagrun (pid $P) runs it in another PID namespace of host $(hostname)"
store_run_is "$R" running || fail "recorded $(store_run_state "$R")"
run_dagrun resume "$R" --plain
expect_rc 1
expect_in "$T/err" "\`dagrun resume $R --force\`"
touch "$T/go"
run_dagrun resume "$R" --plain --force
expect_rc 0
store_run_is "$R" success || fail "the forced resume ended $(store_run_state "$R")"
"$DAGRUN" status "$R" --json > st.json
"$PY" - st.json <<'P' || fail "3: $(cat st.json)"
import json, sys
st = json.load(open(sys.argv[1]))
a = {x["name"]: x for x in st["tasks"]}["a"]["attempt_list"]
assert [x["state"] for x in a] == ["orphaned", "success"], a
assert "could not be checked from here" in a[0]["error"], a[0]
P
# Its heartbeat stale: gone, as a killed container's dagrun is.
start_slow
kill_slow
sql "UPDATE runs SET state = 'running', orch_pidns = 'pid:[1]', orch_beat = 1000 WHERE id = '$R'"
run_dagrun runs
expect_in "$T/out" "$R dagrun (pid $P) is gone: \`dagrun resume $R\` goes on with the run"
store_run_is "$R" interrupted || fail "a stale run of another namespace: $(store_run_state "$R")"
touch "$T/go"
run_dagrun resume "$R" --plain
expect_rc 0
store_run_is "$R" success || fail "its resume ended $(store_run_state "$R")"

# ---- 3b. a live dagrun beats: its orch_beat moves on every 30 s ----
start_slow
beat() {
  "$PY" - "$DB" "$R" <<'P'
import sqlite3, sys
print(sqlite3.connect(sys.argv[1]).execute("SELECT orch_beat FROM runs WHERE id = ?", (sys.argv[2],)).fetchone()[0])
P
}
b0=$(beat)
sleep 33
b1=$(beat)
"$PY" -c 'import sys; b0, b1 = map(float, sys.argv[1:]); assert 25 < b1 - b0 < 45, (b0, b1)' "$b0" "$b1" ||
  fail "the live run's heartbeat: $b0 then $b1, 33 s later"
touch "$T/go"
wait "$P" || fail "the beating run failed: $(cat "$T/slow.out")"

# ---- 4. a run from before this host's boot; a run of schema 8 ----
start_slow
kill_slow
# Its pid and start time now name a live process (this shell): only the
# boot id says it is another one.
me_start=$(awk '{print $22}' /proc/$$/stat)
sql "UPDATE runs SET state = 'running', orch_pid = $$, orch_start = $me_start, orch_boot = '00000000-0000-0000-0000-000000000000' WHERE id = '$R'"
# A fresh heartbeat: another host that has this one's name, alive.
run_dagrun runs
grep -E "^$R +slow +running" "$T/out" >/dev/null || fail "a fresh run of a namesake host: $(cat "$T/out")"
sql "UPDATE runs SET orch_beat = 1000 WHERE id = '$R'"
run_dagrun runs
expect_in "$T/out" "$R dagrun (pid $$) is gone: \`dagrun resume $R\` goes on with the run"
store_run_is "$R" interrupted || fail "a run from before the boot: $(store_run_state "$R")"
sql "UPDATE runs SET state = 'running', orch_pid = $P, orch_host = NULL, orch_boot = NULL, orch_pidns = NULL WHERE id = '$R'"
run_dagrun runs
expect_in "$T/out" "$R dagrun (pid $P) is gone"
store_run_is "$R" interrupted || fail "a dead run of schema 8: $(store_run_state "$R")"
sql "UPDATE runs SET state = 'running', orch_pid = $$, orch_start = $me_start WHERE id = '$R'"
run_dagrun runs
grep -E "^$R +slow +running" "$T/out" >/dev/null || fail "a live run of schema 8 is not running: $(cat "$T/out")"
expect_not_in "$T/out" "$R dagrun"
pass
