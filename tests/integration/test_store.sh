# The run store: `dagrun run` records runs, tasks and attempts in
# $DAGRUN_HOME/state.db; `dagrun runs`, `status` and `logs` read them back
# (as run.json has them), `logs --follow` follows a running attempt to its
# end, and a store that cannot be opened refuses the run up front.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"

cat > st.yaml <<Y
dag: st
defaults: {retry_delay: 100ms, retry_jitter: 0}
tasks:
  hello: {stage: exec, with: {command: [sh, -c, 'echo hello-out; echo hello-err >&2']}}
  flaky:
    stage: exec
    retries: 1
    with: {command: [sh, -c, 'if [ -f $T/flaky.done ]; then echo second-try; else touch $T/flaky.done; echo first-try; exit 3; fi']}
  after: {stage: exec, needs: [flaky], with: {command: [echo, after-ran]}}
  bad: {stage: exec, with: {command: [sh, -c, 'echo bad-out; exit 4']}}
  never: {stage: exec, needs: [bad], with: {command: [echo, never]}}
Y
run_dagrun run st.yaml --plain
expect_rc 1
R=$(run_dir st)
ID=$(basename "$R")
[ -f "$DAGRUN_HOME/state.db" ] || fail "no $DAGRUN_HOME/state.db"
[ ! -e .dagrun ] || fail "DAGRUN_HOME set, yet .dagrun/ was made"

# runs: the run, its state and succeeded/total tasks.
run_dagrun runs
expect_rc 0
expect_in "$T/out" "$ID"
grep -E "^$ID +st +failed .* 3/5 +manual *$" "$T/out" >/dev/null || fail "runs line: $(cat "$T/out")"
run_dagrun runs other-dag
expect_rc 0
expect_not_in "$T/out" "$ID"

# status --json agrees with run.json on every task's state, attempts and
# exit code; the attempts have pids, logs and exit codes.
run_dagrun status "$ID" --json
expect_rc 0
/usr/bin/python3 - "$T/out" "$R/run.json" <<'P' || fail "status --json does not match run.json: $(cat "$T/out")"
import json, sys
st = json.load(open(sys.argv[1]))
rj = json.load(open(sys.argv[2]))
assert st["state"] == rj["state"] == "failed", (st["state"], rj["state"])
assert st["run_dir"] == rj["dir"]
tasks = {t["name"]: t for t in st["tasks"]}
assert len(tasks) == len(rj["tasks"]) == 5
for t in rj["tasks"]:
    s = tasks[t["name"]]
    assert s["state"] == t["state"], (t["name"], s["state"], t["state"])
    assert s["attempts"] == t["attempts"], (t["name"], s, t)
    assert s.get("exit_code") == t.get("exit_code"), (t["name"], s, t)
    assert s.get("error") == t.get("reason"), (t["name"], s, t)
    assert len(s["attempt_list"]) == t["attempts"]
    for a in s["attempt_list"]:
        assert a["pid"] > 0 and a["log"].endswith("attempt-%d/log" % a["n"])
        assert a["finished"] >= a["started"] > 0
fl = tasks["flaky"]["attempt_list"]
assert [a["state"] for a in fl] == ["failed", "success"], fl
assert [a["exit_code"] for a in fl] == [3, 0], fl
assert tasks["bad"]["attempt_list"][0]["exit_code"] == 4
assert tasks["never"]["state"] == "upstream_failed"
P
run_dagrun status "$ID"
expect_rc 0
grep -E "^flaky +success +2 +0 " "$T/out" >/dev/null || fail "status: $(cat "$T/out")"
grep -E "^bad +failed +1 +4 .*exit 4" "$T/out" >/dev/null || fail "status: $(cat "$T/out")"

# A task's error quotes what it was given: here a param with a terminal's
# escapes (set the title, clear the screen, and a CSI as the one character
# U+009B, which some terminals obey) and a line of its own. The
# run's lines, its summary and status show those bytes escaped, on one
# line; status --json keeps them as they are (JSON escapes them).
cat > esc.yaml <<'Y'
dag: esc
params:
  f: "/nonexistent/\e]0;PWNED\a\e[2J\u009b1m\nFAKE: all tasks succeeded\r/x"
tasks:
  bad: {stage: flaky, with: {counter_file: "${params.f}"}}
Y
run_dagrun run esc.yaml --plain
expect_rc 1
cp "$T/out" "$T/esc-run.out"
EID=$(basename "$(run_dir esc)")
run_dagrun status "$EID"
expect_rc 0
cp "$T/out" "$T/esc-status.out"
for f in esc-run.out esc-status.out; do
  ! LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$T/$f" ||
    fail "control bytes printed raw by dagrun ($f): $(cat -v "$T/$f")"
  ! grep -q "^FAKE" "$T/$f" || fail "a task's error forged a line ($f): $(cat "$T/$f")"
done
expect_in "$T/esc-run.out" 'bad failed: exit 2: flaky: cannot write /nonexistent/\x1b]0;PWNED\x07\x1b[2J\xc2\x9b1m\x0aFAKE: all tasks succeeded\x0d/x'
grep -E '^bad +failed +1 +2 .*cannot write /nonexistent/\\x1b]0;PWNED\\x07\\x1b\[2J\\xc2\\x9b1m\\x0aFAKE: all tasks succeeded\\x0d/x$' \
  "$T/esc-status.out" >/dev/null || fail "status: $(cat -v "$T/esc-status.out")"
run_dagrun status "$EID" --json
expect_rc 0
/usr/bin/python3 - "$T/out" <<'P' || fail "status --json changed the error: $(cat "$T/out")"
import json, sys
t = json.load(open(sys.argv[1]))["tasks"][0]
assert t["error"].endswith("/nonexistent/\x1b]0;PWNED\x07\x1b[2J\u009b1m\nFAKE: all tasks succeeded\r/x"), t["error"]
P

# logs: the latest attempt, or the one asked for.
run_dagrun logs "$ID" hello
expect_rc 0
expect_in "$T/out" hello-out
expect_in "$T/out" hello-err
run_dagrun logs "$ID" flaky
expect_rc 0
# (the worker logs the command line too: compare whole lines)
grep -qx second-try "$T/out" || fail "no second-try in: $(cat "$T/out")"
! grep -qx first-try "$T/out" || fail "first-try in the 2nd attempt's log"
run_dagrun logs "$ID" flaky --attempt 1
expect_rc 0
grep -qx first-try "$T/out" || fail "no first-try in: $(cat "$T/out")"
! grep -qx second-try "$T/out" || fail "second-try in the 1st attempt's log"
run_dagrun logs "$ID" flaky --attempt 3
expect_rc 2
expect_in "$T/err" "no attempt 3"
run_dagrun logs "$ID" never
expect_rc 2
expect_in "$T/err" "has not started"
run_dagrun logs "$ID" nope
expect_rc 2
expect_in "$T/err" "no task 'nope'"

# A unique prefix names the run; an unknown one is exit 2.
run_dagrun status "${ID:0:${#ID}-2}"
expect_rc 0
expect_in "$T/out" "run $ID"
run_dagrun status 1999
expect_rc 2
expect_in "$T/err" "no run '1999'"
run_dagrun logs 1999 hello
expect_rc 2

# logs --follow on a running task: every line arrives, and follow ends
# when the attempt does (not before, not long after).
cat > tick.yaml <<'Y'
dag: tick
tasks:
  ticker: {stage: exec, with: {command: [sh, -c, 'for i in 1 2 3 4 5 6 7 8 9 10; do echo tick-$i; sleep 0.2; done']}}
Y
"$DAGRUN" run tick.yaml -q >"$T/tick.out" 2>&1 &
BG=$!
TID=
for _ in $(seq 100); do
  TID=$("$DAGRUN" runs tick --json 2>/dev/null | /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin); print(r[0]["id"] if r else "")')
  [ -n "$TID" ] && break
  sleep 0.05
done
[ -n "$TID" ] || fail "the tick run was not recorded"
start=$(date +%s.%N)
run_dagrun logs "$TID" ticker --follow
end=$(date +%s.%N)
expect_rc 0
for i in 1 2 3 4 5 6 7 8 9 10; do grep -qx "tick-$i" "$T/out" || fail "follow missed tick-$i: $(cat "$T/out")"; done
"$DAGRUN" status "$TID" --json > "$T/tick.json"
/usr/bin/python3 - "$T/tick.json" "$start" "$end" <<'P' || fail "follow ended at the wrong time: $(cat "$T/tick.json")"
import json, sys
run = json.load(open(sys.argv[1]))
start, end = float(sys.argv[2]), float(sys.argv[3])
t = run["tasks"][0]
a = t["attempt_list"][0]
# Follow began while the task ran (it started before the last tick), and
# it stopped once the attempt was recorded over, within a second.
assert t["state"] == "success", t
assert a["state"] == "success", a
assert start < a["finished"], (start, a)
assert end >= a["finished"] - 0.05 and end - a["finished"] < 1.5, (end, a)
P
wait "$BG" || fail "the tick run failed: $(cat "$T/tick.out")"

# runs: newest first, -n, a DAG filter.
run_dagrun runs -n 1
expect_rc 0
expect_in "$T/out" "$TID"
expect_not_in "$T/out" "$ID"
run_dagrun runs st --json
expect_rc 0
expect_in "$T/out" "\"$ID\""
expect_not_in "$T/out" "\"$TID\""
# A prefix that names both runs is ambiguous.
common=$(/usr/bin/python3 -c 'import os,sys; print(os.path.commonprefix(sys.argv[1:]))' "$ID" "$TID")
run_dagrun status "$common"
expect_rc 2
expect_in "$T/err" "more than one run"

# logs --follow follows a task through its retries to its last attempt,
# and exits with the task's outcome: 0 for flap (fails twice, then
# succeeds), 1 for dud (fails both attempts). Both followed from their
# first attempt, at once.
cat > flap.yaml <<'Y'
dag: flap
defaults: {retry_delay: 300ms, retry_jitter: 0}
tasks:
  flap:
    stage: exec
    retries: 2
    cache: false
    with: {command: [sh, -c, 'n=$(cat "$1" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$1"; echo flap-try-$n; sleep 1; [ $n -ge 3 ]', x, COUNTER.flap]}
  dud:
    stage: exec
    retries: 1
    cache: false
    with: {command: [sh, -c, 'n=$(cat "$1" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$1"; echo dud-try-$n; sleep 1; exit 3', x, COUNTER.dud]}
Y
sed -i "s#COUNTER#$T/count#g" flap.yaml
"$DAGRUN" run flap.yaml -q >"$T/flap.out" 2>&1 &
BG=$!
FID=
for _ in $(seq 100); do
  FID=$("$DAGRUN" runs flap --json 2>/dev/null | /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin); print(r[0]["id"] if r else "")')
  [ -n "$FID" ] && break
  sleep 0.05
done
[ -n "$FID" ] || fail "the flap run was not recorded"
set +e
"$DAGRUN" logs "$FID" flap --follow >"$T/f1.out" 2>"$T/f1.err" &
F1=$!
"$DAGRUN" logs "$FID" dud -f >"$T/f2.out" 2>"$T/f2.err" &
F2=$!
wait "$F1"
RC1=$?
wait "$F2"
RC2=$?
set -e
wait "$BG" && fail "the flap run succeeded: $(cat "$T/flap.out")"
[ "$(cat "$T/count.flap")" = 3 ] || fail "flap ran $(cat "$T/count.flap") times"
[ "$(grep -x "flap-try-[0-9]" "$T/f1.out" | tr '\n' ' ')" = "flap-try-1 flap-try-2 flap-try-3 " ] ||
  fail "logs --follow of flap: $(cat "$T/f1.out") / $(cat "$T/f1.err")"
[ "$RC1" = 0 ] || fail "logs --follow of flap (succeeded) exited $RC1: $(cat "$T/f1.err")"
expect_in "$T/f1.err" "attempt 1 failed (exit 1); following attempt 2"
expect_in "$T/f1.err" "attempt 2 failed (exit 1); following attempt 3"
[ "$(grep -x "dud-try-[0-9]" "$T/f2.out" | tr '\n' ' ')" = "dud-try-1 dud-try-2 " ] ||
  fail "logs --follow of dud: $(cat "$T/f2.out") / $(cat "$T/f2.err")"
[ "$RC2" = 1 ] || fail "logs --follow of dud (failed) exited $RC2: $(cat "$T/f2.err")"
expect_in "$T/f2.err" "dagrun: task 'dud' of run $FID ended failed"
# Without --follow, the latest attempt, exit 0; --attempt N --follow: that
# attempt's outcome.
run_dagrun logs "$FID" dud
expect_rc 0
[ "$(grep -x "dud-try-[0-9]" "$T/out")" = dud-try-2 ] || fail "logs of dud: $(cat "$T/out")"
run_dagrun logs "$FID" flap --attempt 3 --follow
expect_rc 0
run_dagrun logs "$FID" flap --attempt 1 --follow
expect_rc 1
expect_in "$T/err" "dagrun: attempt 1 failed (exit 1)"
expect_in "$T/out" "flap-try-1"

# Three runs at once write the same store (WAL, busy timeout): all three
# are recorded complete.
cat > par.yaml <<'Y'
dag: par
tasks:
  a: {stage: exec, with: {command: [echo, a]}}
  b: {stage: exec, needs: [a], with: {command: [echo, b]}}
  c: {stage: exec, needs: [a], with: {command: [echo, c]}}
Y
pids=
for k in 1 2 3; do "$DAGRUN" run par.yaml -q --no-cache >"$T/par$k.out" 2>&1 & pids="$pids $!"; done
for p in $pids; do wait "$p" || fail "a concurrent run failed: $(cat "$T"/par*.out)"; done
run_dagrun runs par --json
expect_rc 0
/usr/bin/python3 - "$T/out" <<'P' || fail "concurrent runs: $(cat "$T/out")"
import json, sys
runs = json.load(open(sys.argv[1]))
assert len(runs) == 3, runs
for r in runs:
    assert r["state"] == "success" and r["tasks_succeeded"] == r["tasks_total"] == 3, r
P

# A run's records are batched (docs/internals/store.md): committed before
# a process starts on them and whenever the run waits. While `slow` waits
# (for $T/release), a reader sees `first` succeeded and `slow` running with
# its pid, and another run writes to the same store at once (a batch left
# open would hold the write lock: that run would wait for busy_timeout,
# 10 s, and fail).
cat > batch.yaml <<Y
dag: batch
tasks:
  first: {stage: exec, with: {command: [echo, first]}}
  slow: {stage: exec, needs: [first], with: {command: [sh, -c, 'touch $T/slow.started; for i in \$(seq 600); do [ -e $T/release ] && exit 0; sleep 0.1; done; exit 1']}}
Y
rm -f "$T/slow.started" "$T/release"
"$DAGRUN" run batch.yaml -q >"$T/batch.out" 2>&1 &
BG=$!
wait_until 30 test -e "$T/slow.started" || fail "slow never started: $(cat "$T/batch.out")"
sleep 0.3
BID=$("$DAGRUN" runs batch --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
run_dagrun status "$BID" --json
expect_rc 0
/usr/bin/python3 - "$T/out" <<'P' || fail "records not committed while the run waits: $(cat "$T/out")"
import json, sys
run = json.load(open(sys.argv[1]))
t = {x["name"]: x for x in run["tasks"]}
assert run["state"] == "running", run["state"]
assert t["first"]["state"] == "success", t["first"]
assert t["slow"]["state"] == "running", t["slow"]
assert t["slow"]["attempt_list"][0]["pid"] > 0, t["slow"]
P
printf 'dag: other\ntasks:\n  one: {stage: exec, with: {command: [true]}}\n' > other.yaml
t0=$(date +%s%N)
run_dagrun run other.yaml -q
t1=$(date +%s%N)
expect_rc 0
[ $(((t1 - t0) / 1000000)) -lt 6000 ] || fail "a second run waited $(((t1 - t0) / 1000000)) ms on the store held by the first"
kill -0 "$BG" 2>/dev/null || fail "the batch run ended before the second run did: the check proved nothing"
touch "$T/release"
wait "$BG" || fail "the batch run failed: $(cat "$T/batch.out")"

# A DAGRUN_HOME that is a file: the store cannot be opened, the run is
# refused before anything runs, naming the path and DAGRUN_HOME.
: > "$T/not-a-dir"
DAGRUN_HOME="$T/not-a-dir" run_dagrun run tick.yaml
expect_rc 2
expect_in "$T/err" "$T/not-a-dir/state.db"
expect_in "$T/err" "DAGRUN_HOME"
[ "$(ls "$DAGRUN_RUNS_DIR/tick" | wc -l)" = 1 ] || fail "a refused run made a run directory"
# A corrupt database: the same.
mkdir -p "$T/corrupt"
head -c 8192 /dev/urandom > "$T/corrupt/state.db"
DAGRUN_HOME="$T/corrupt" run_dagrun run tick.yaml
expect_rc 2
expect_in "$T/err" "$T/corrupt/state.db"
# Without DAGRUN_HOME the store is .dagrun/state.db here.
(unset DAGRUN_HOME; cd "$T" && "$DAGRUN" run st.yaml -q >/dev/null 2>&1 || true)
[ -f "$T/.dagrun/state.db" ] || fail "no .dagrun/state.db without DAGRUN_HOME"
pass
