# A run is never left "running" by a dagrun that is gone.
#
# 1. SIGHUP (the terminal closed) stops the run as SIGTERM does: dagrun
#    exits 129 after stopping its attempts (no worker, no command left),
#    the run is recorded "interrupted", and `dagrun resume` finishes it.
# 2. kill -9 of dagrun: without anyone running `cancel`, `dagrun runs`,
#    `status`, `status --json` and serve's API show the run interrupted,
#    saying that its dagrun is gone and how to resume it; resume finishes
#    it. While dagrun lives, the same readers say "running".
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"

# The long task runs `sleep` as the process it records, until $T/quick
# exists; `after` needs it.
cat > hup.yaml <<Y
dag: hup
tasks:
  long: {stage: exec, cache: false, with: {command: [sh, -c, 'if [ -e $T/quick ]; then echo fast; else echo \$\$ > $T/long.pid; exec sleep 300; fi']}}
  after: {stage: exec, cache: false, needs: [long], with: {command: [sh, -c, 'echo after >> $T/after.log']}}
Y

# run_procs: the processes (other than this check) whose command line
# names this test's run directory: workers and what they started.
run_procs() {
  "$PY" - "$DAGRUN_RUNS_DIR" "$T/long.pid" <<'P'
import os, sys
me = os.getpid()
want = open(sys.argv[2]).read().strip() if os.path.exists(sys.argv[2]) else ""
for p in os.listdir("/proc"):
    if not p.isdigit() or int(p) == me:
        continue
    try:
        cmd = open(f"/proc/{p}/cmdline", "rb").read().decode(errors="replace")
        state = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        continue
    if state != "Z" and (sys.argv[1] in cmd or p == want):
        print(p, cmd.replace("\0", " "))
P
}

# start_hup: dagrun run hup.yaml in the background (PID), once the long
# task's sleep runs (its run id in RID).
start_hup() {
  rm -f "$T/long.pid" "$T/quick" "$T/after.log"
  "$DAGRUN" run hup.yaml --plain >"$T/run.out" 2>&1 &
  PID=$!
  for _ in $(seq 150); do [ -s "$T/long.pid" ] && break; sleep 0.1; done
  [ -s "$T/long.pid" ] || fail "long never started: $(cat "$T/run.out")"
  RID=$(ls -t "$DAGRUN_RUNS_DIR/hup" | head -n 1)
}

# state_json RUN: status --json's state and note, "STATE|NOTE".
state_json() {
  "$DAGRUN" status "$1" --json | "$PY" -c \
    'import json,sys; r=json.load(sys.stdin); print(r["state"] + "|" + r.get("note", ""))'
}

# resume_ok RUN: resume finishes the run: long runs again (fast), after
# once, the run recorded success.
resume_ok() {
  touch "$T/quick"
  run_dagrun resume "$1" --plain
  expect_rc 0
  [ "$(state_json "$1")" = "success|" ] || fail "after resume: $(state_json "$1")"
  [ "$(cat "$T/after.log")" = after ] || fail "after ran $(wc -l < "$T/after.log") times"
}

# ---- 1. SIGHUP ----
start_hup
[ "$(state_json "$RID")" = "running|" ] || fail "a live run: $(state_json "$RID")"
SLEEP=$(cat "$T/long.pid")
kill -HUP "$PID"
set +e; wait "$PID"; RC=$?; set -e
expect_rc 129
# dagrun waited for its attempts: nothing of the run is left running.
pid_alive "$SLEEP" && fail "long's sleep (pid $SLEEP) still running after SIGHUP"
[ -z "$(run_procs)" ] || fail "left running after SIGHUP: $(run_procs)"
st=$(state_json "$RID")
case "$st" in "interrupted|"*gone*"dagrun resume $RID"*) ;; *) fail "after SIGHUP: $st" ;; esac
expect_in "$T/run.out" "hangup"
"$DAGRUN" status "$RID" --json | "$PY" -c '
import json, sys
r = json.load(sys.stdin)
t = {x["name"]: x for x in r["tasks"]}
assert t["long"]["state"] == "cancelled", t["long"]
assert t["long"]["attempt_list"][0]["state"] == "cancelled", t["long"]
assert t["after"]["state"] == "cancelled", t["after"]
assert r["finished"] >= r["started"], r' || fail "tasks after SIGHUP"
"$PY" -c 'import json,sys; assert json.load(open(sys.argv[1]))["state"] == "interrupted"' \
  "$DAGRUN_RUNS_DIR/hup/$RID/run.json" || fail "run.json after SIGHUP"
resume_ok "$RID"

# Two hangups at once (the kernel and the shell both send one when a
# terminal closes) still stop the attempts cleanly: the second is not a
# second Ctrl-C. The task's command ignores SIGTERM for 1 s, then exits.
cat > hup2.yaml <<Y
dag: hup2
tasks:
  slow: {stage: exec, cache: false, kill_grace: 30s, with: {command: [sh, -c, 'trap "sleep 1; echo stopped > $T/slow.stopped; exit 1" TERM; echo \$\$ > $T/slow.pid; while :; do sleep 0.1; done']}}
Y
rm -f "$T/slow.pid"
"$DAGRUN" run hup2.yaml --plain >"$T/run2.out" 2>&1 &
PID=$!
for _ in $(seq 150); do [ -s "$T/slow.pid" ] && break; sleep 0.1; done
[ -s "$T/slow.pid" ] || fail "slow never started: $(cat "$T/run2.out")"
kill -HUP "$PID"
kill -HUP "$PID"
set +e; wait "$PID"; RC=$?; set -e
expect_rc 129
[ -s "$T/slow.stopped" ] || fail "a second SIGHUP killed the task instead of letting it stop"
expect_not_in "$T/run2.out" "killing running tasks"

# ---- 2. kill -9 ----
start_hup
# A `logs --follow` of the running task ends, saying why, not silently.
"$DAGRUN" logs "$RID" long --follow >"$T/follow.out" 2>"$T/follow.err" &
FOLLOW=$!
kill -9 "$PID"
wait "$PID" 2>/dev/null || true
set +e; timeout 20 tail --pid="$FOLLOW" -f /dev/null; wait "$FOLLOW"; RC=$?; set -e
expect_rc 1
expect_in "$T/follow.err" "dagrun: run $RID was interrupted (its dagrun stopped, or is gone) before task 'long' ended; \`dagrun resume $RID\` goes on with it"
# The worker sees its dagrun go and stops the command by itself.
for _ in $(seq 50); do [ -z "$(run_procs)" ] && break; sleep 0.1; done
[ -z "$(run_procs)" ] || fail "left running after kill -9: $(run_procs)"
# No cancel: the readers see the dagrun gone.
"$DAGRUN" runs >"$T/runs.out"
grep -q "^$RID .* interrupted " "$T/runs.out" || fail "runs: $(cat "$T/runs.out")"
expect_in "$T/runs.out" "dagrun (pid $PID) is gone"
expect_in "$T/runs.out" "dagrun resume $RID"
"$DAGRUN" status "$RID" >"$T/status.out"
expect_in "$T/status.out" "run $RID  dag hup  interrupted"
expect_in "$T/status.out" "dagrun (pid $PID) is gone"
expect_in "$T/status.out" "dagrun resume $RID"
expect_not_in "$T/status.out" "running for"
st=$(state_json "$RID")
case "$st" in "interrupted|dagrun (pid $PID) is gone"*"dagrun resume $RID"*) ;; *) fail "status --json: $st" ;; esac

# serve's API (and so the dashboard) says the same.
mkdir -p dags
echo "t0ken-0123456789abcdef" > token
chmod 600 token
serve_start --log "$T/serve.log" --no-cron
"$PY" - "$PORT" "$RID" "$PID" <<'P' || { kill "$SERVE_PID"; fail "API: see above"; }
import json, sys, urllib.request
port, rid, pid = sys.argv[1:4]
base = f"http://127.0.0.1:{port}/api/runs"
run = json.load(urllib.request.urlopen(f"{base}/{rid}", timeout=30))
assert run["state"] == "interrupted", run
assert f"dagrun (pid {pid}) is gone" in run["note"], run
runs = json.load(urllib.request.urlopen(f"{base}?state=interrupted", timeout=30))
assert [r["id"] for r in runs if r["id"] == rid] == [rid], runs
assert "gone" in [r for r in runs if r["id"] == rid][0]["note"], runs
runs = json.load(urllib.request.urlopen(f"{base}?state=running", timeout=30))
assert rid not in [r["id"] for r in runs], runs
P
serve_stop
expect_not_in "$T/serve.log" "resuming run $RID"

# cancel says what happened; resume finishes the run.
run_dagrun cancel "$RID"
expect_rc 1
expect_in "$T/err" "is gone"
resume_ok "$RID"
pass
