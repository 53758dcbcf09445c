# A disk that fills during a run (issue 23). The run ends recorded: failed
# in the run store (not running for ever), run.json with every task's
# state, report.html written, and a message saying what to free; an
# attempt that could not start for want of space takes the task's
# retries, so that space freed meanwhile lets the task succeed. The full
# disk is a 4 MiB tmpfs holding the run store and the runs: mounting it
# needs root, as CI runs.
. "$(dirname "$0")/lib.sh"
D="$T/disk"
mkdir -p "$D"
mount -t tmpfs -o size=4m tmpfs "$D" 2>"$T/mount.err" ||
  fail "cannot mount a tmpfs (this test needs root): $(cat "$T/mount.err")"
trap 'umount -l "$D" 2>/dev/null || true' EXIT
export DAGRUN_HOME="$D/home" DAGRUN_RUNS_DIR="$D/runs"
# fill takes every free byte (head fails on the full disk; the task
# succeeds all the same), then after must start on the full disk.
dag() { # NAME RETRIES
  cat > "$1.yaml" <<Y
dag: $1
defaults: {retry_delay: 2s, retry_jitter: 0}
tasks:
  fill: {stage: exec, with: {command: [sh, -c, "head -c 8000000 /dev/zero > $D/big; exit 0"]}}
  after: {stage: exec, needs: [fill], retries: $2, with: {command: [sh, -c, "echo after-ran"]}}
Y
}
run_field() { "$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1/run.json" "$2"; }

# ---- the disk stays full: the run fails, recorded as such ----
dag stays 0
run_dagrun run stays.yaml
expect_rc 1
R=$(run_dir stays)
expect_in "$T/out" "No space left on device"
expect_in "$T/err" "is full (or nearly): free space there (df -h shows it), then \`dagrun resume $(basename "$R")\`"
[ "$(run_field "$R" state)" = failed ] || fail "run.json state: $(run_field "$R" state)"
[ "$(task_field "$R" fill state)" = success ] || fail "fill in run.json: $(task_field "$R" fill state)"
[ "$(task_field "$R" after state)" = failed ] || fail "after in run.json: $(task_field "$R" after state)"
[ -s "$R/report.html" ] || fail "no report.html"
[ ! -e "$R/.reserve" ] || fail "the run's reserve was left behind"
run_dagrun runs
expect_rc 0
grep -E "^$(basename "$R") +stays +failed " "$T/out" >/dev/null ||
  fail "the store does not say failed: $(cat "$T/out")"
rm -f "$D/big"

# ---- space freed while the attempt waits for its retry: it succeeds ----
dag freed 3
"$DAGRUN" run freed.yaml --plain >"$T/freed.out" 2>"$T/freed.err" &
PID=$!
# The attempt's directory is made before its attempt.json fails to be
# written (dagrun's output to a file comes at its end): then 2 s to the
# retry.
for _ in $(seq 400); do
  ls -d "$D"/runs/freed/*/after/attempt-1 >/dev/null 2>&1 && break
  pid_alive "$PID" || break
  sleep 0.05
done
sleep 0.5
rm -f "$D/big"
set +e
wait "$PID"
RC=$?
set -e
[ "$RC" -eq 0 ] || fail "the run after space was freed: exit $RC: $(cat "$T/freed.out" "$T/freed.err")"
grep -q "attempt 1/4 failed (cannot write .*attempt.json: No space left on device)" "$T/freed.out" ||
  fail "after's first attempt did not wait for a retry: $(cat "$T/freed.out" "$T/freed.err")"
R=$(run_dir freed)
[ "$(run_field "$R" state)" = success ] || fail "run.json state: $(run_field "$R" state)"
[ "$(task_field "$R" after attempts)" = 2 ] || fail "after's attempts: $(task_field "$R" after attempts)"
grep -q after-ran "$R/after/attempt-2/log" || fail "after's second attempt did not run"
run_dagrun runs
grep -E "^$(basename "$R") +freed +success " "$T/out" >/dev/null ||
  fail "the store does not say success: $(cat "$T/out")"
umount -l "$D"

# ---- the store's disk (DAGRUN_HOME elsewhere) fills, the runs' does not:
# the run that succeeded is recorded success, not left running (then
# interrupted, and resumed from its first task) ----
mount -t tmpfs -o size=2m tmpfs "$D" 2>"$T/mount.err" ||
  fail "cannot mount a tmpfs again: $(cat "$T/mount.err")"
export DAGRUN_HOME="$D/home" DAGRUN_RUNS_DIR="$T/runs-apart"
cat > apart.yaml <<Y
dag: apart
tasks:
  fill: {stage: exec, with: {command: [sh, -c, "head -c 4000000 /dev/zero > $D/big; exit 0"]}}
  after: {stage: exec, needs: [fill], with: {command: [sh, -c, "echo after-ran"]}}
Y
run_dagrun run apart.yaml --plain
expect_rc 0
R=$(run_dir apart)
[ "$(run_field "$R" state)" = success ] || fail "run.json state: $(run_field "$R" state)"
rm -f "$D/big"
run_dagrun runs
grep -E "^$(basename "$R") +apart +success " "$T/out" >/dev/null ||
  fail "the store's disk filled: the store does not say success: $(cat "$T/out")"
ls "$D/home" | grep -q reserve && fail "the store's reserve was left behind: $(ls "$D/home")"
# A killed run's reserve (no run ended it) goes at the next run's start.
head -c 1000 /dev/zero > "$D/home/state.db.reserve-20200101T000000Z-dead"
run_dagrun run apart.yaml --plain
expect_rc 0
[ ! -e "$D/home/state.db.reserve-20200101T000000Z-dead" ] ||
  fail "a dead run's reserve beside the store was not swept: $(ls "$D/home")"
umount -l "$D"
trap - EXIT
pass
