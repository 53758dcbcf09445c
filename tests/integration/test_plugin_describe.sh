# Plugins whose constructor exits (0), crashes (SIGSEGV) or hangs, on the
# plugin path (issue 23): dagrun describes each stage in a helper process
# (orchestrator/host/describe.h), so each such plugin is one unusable
# stage, named with what happened, and nothing else: `dagrun stages`
# lists the others; `check` and `run` of a DAG that uses one fail with
# exit 2 (never 0, never 139, never a hang); a DAG that does not use
# them runs; `serve` loads its other DAGs and answers. Before, dagrun
# dlopened them itself: `run` exited 0 having recorded nothing, died with
# 139, or hung.
. "$(dirname "$0")/lib.sh"
: "${DAGRUN_TEST_CTOR_PLUGIN_DIR:?}"
BAD=$DAGRUN_TEST_CTOR_PLUGIN_DIR
export DAGRUN_PLUGIN_PATH="$BAD:$DAGRUN_TEST_PLUGIN_DIR"
export DAGRUN_DESCRIBE_TIMEOUT=1
export DAGRUN_HOME="$T/home"

# run_bounded NAME ARGS...: dagrun ARGS under `timeout 20` (a hang is
# exit 124), output in $T/out and $T/err, exit code in RC, seconds in SECS.
run_bounded() {
  local t0 t1
  t0=$(date +%s%N)
  set +e
  timeout -s KILL 20 "$DAGRUN" "$@" >"$T/out" 2>"$T/err"
  RC=$?
  set -e
  t1=$(date +%s%N)
  SECS=$(((t1 - t0) / 1000000))
  SECS=$((SECS / 1000))
}

# Whether a describe helper of ctor_hang.so runs ("[_]": so that the
# pattern does not find the command line that holds it).
helper_alive() { pgrep -f "[_]_describe $BAD/ctor_hang.so" >/dev/null; }
helper_gone() { ! helper_alive; }

EXIT_MSG="$BAD/ctor_exit.so: exited with status 0 while being loaded, before describing itself"
SEGV_MSG="$BAD/ctor_segv.so: crashed while being loaded (SIGSEGV in its constructor or dagrun_stage_entry())"
HANG_MSG="$BAD/ctor_hang.so: did not describe itself within 1 s (killed"

# ---- dagrun stages: the good ones listed, each bad file named ----
run_bounded stages
[ "$RC" -eq 1 ] || fail "stages: expected exit 1 (some files unusable), got $RC: $(cat "$T/err")"
[ "$SECS" -lt 5 ] || fail "stages took ${SECS}s: the hang was not cut at 1 s"
expect_in "$T/out" "echo_params 1.0"
expect_in "$T/out" "exec "
expect_in "$T/out" "files that are not usable stage plugins:"
expect_in "$T/out" "$EXIT_MSG"
expect_in "$T/out" "$SEGV_MSG"
expect_in "$T/out" "$HANG_MSG"
run_bounded stages --json
"$PY" - "$T/out" "$BAD" <<'P' || fail "stages --json: $(cat "$T/out")"
import json, sys
stages = json.load(open(sys.argv[1]))
named = {s["name"] for s in stages if "name" in s}
assert {"echo_params", "exec", "train"} <= named, named
errors = {s["file"]: s["error"] for s in stages if "error" in s}
for f in ("ctor_exit", "ctor_segv", "ctor_hang"):
    assert f"{sys.argv[2]}/{f}.so" in errors, (f, errors)
P
run_bounded stages ctor_segv
[ "$RC" -eq 1 ] || fail "stages ctor_segv: expected exit 1, got $RC"
expect_in "$T/err" "$SEGV_MSG"
# A stage shown alone needs no other file described well.
run_bounded stages echo_params
[ "$RC" -eq 0 ] || fail "stages echo_params: exit $RC: $(cat "$T/err")"
expect_in "$T/out" "echo_params 1.0"

# ---- check and run of a DAG that uses each one: exit 2, the file named ----
for bad in exit segv hang; do
  cat >"uses_$bad.yaml" <<Y
dag: uses_$bad
tasks:
  first: {stage: echo_params, with: {s: hello}}
  broken: {stage: ctor_$bad, needs: [first]}
Y
  case $bad in
  exit) msg=$EXIT_MSG ;;
  segv) msg=$SEGV_MSG ;;
  hang) msg=$HANG_MSG ;;
  esac
  run_bounded check "uses_$bad.yaml"
  [ "$RC" -eq 2 ] || fail "check uses_$bad: expected exit 2, got $RC: $(cat "$T/err")"
  expect_in "$T/err" "uses_$bad.yaml:4:19: error: cannot load stage 'ctor_$bad' of task 'broken': $msg"
  run_bounded run "uses_$bad.yaml"
  [ "$RC" -eq 2 ] || fail "run uses_$bad: expected exit 2, got $RC: $(cat "$T/err")"
  expect_in "$T/err" "cannot load stage 'ctor_$bad' of task 'broken': $msg"
  [ "$SECS" -lt 5 ] || fail "run uses_$bad took ${SECS}s"
  [ ! -d "$DAGRUN_RUNS_DIR/uses_$bad" ] || fail "run uses_$bad made a run directory"
done

# The helper is gone with its group once killed: nothing of it left.
helper_gone || fail "a describe helper of ctor_hang.so outlived its time limit"

# A dagrun killed while it waits for a helper takes the helper with it.
DAGRUN_DESCRIBE_TIMEOUT=60 "$DAGRUN" check uses_hang.yaml >/dev/null 2>&1 &
CHECK_PID=$!
wait_until 10 helper_alive || fail "no describe helper of ctor_hang.so was started"
kill -KILL "$CHECK_PID"
wait "$CHECK_PID" 2>/dev/null || true
wait_until 5 helper_gone || fail "the describe helper outlived the dagrun that started it"

# ---- a DAG of good stages runs with the bad files on the path ----
cat >good.yaml <<'Y'
dag: good
tasks:
  hello: {stage: echo_params, with: {s: hi, i: 3}}
  after: {stage: exec, needs: [hello], with: {command: [echo, done]}}
Y
run_bounded run good.yaml --plain
[ "$RC" -eq 0 ] || fail "run good: exit $RC: $(cat "$T/err")"
R=$(run_dir good)
[ "$(task_field "$R" hello state)" = success ] || fail "hello did not succeed"
[ "$(task_field "$R" after state)" = success ] || fail "after did not succeed"

# ---- the time limit: a bad value is an error, a larger one waits longer ----
DAGRUN_DESCRIBE_TIMEOUT=abc run_bounded check good.yaml
[ "$RC" -eq 2 ] || fail "a bad DAGRUN_DESCRIBE_TIMEOUT: expected exit 2, got $RC"
expect_in "$T/err" "DAGRUN_DESCRIBE_TIMEOUT='abc' is not a number of seconds in (0, 3600]"
DAGRUN_DESCRIBE_TIMEOUT=2.5 run_bounded check uses_hang.yaml
[ "$RC" -eq 2 ] || fail "check with a 2.5 s limit: exit $RC"
expect_in "$T/err" "did not describe itself within 2.5 s (killed"
[ "$SECS" -ge 2 ] && [ "$SECS" -lt 6 ] || fail "a 2.5 s limit took ${SECS}s"

# ---- no dagrun-worker beside dagrun: every stage says so ----
mkdir -p lone/bin
cp "$DAGRUN" lone/bin/dagrun
cat >own.yaml <<Y
dag: own
tasks:
  a: {stage: $DAGRUN_TEST_PLUGIN_DIR/echo_params.so}
Y
set +e
timeout -s KILL 20 lone/bin/dagrun check own.yaml >"$T/out" 2>"$T/err"
RC=$?
set -e
[ "$RC" -eq 2 ] || fail "check without dagrun-worker: expected exit 2, got $RC"
expect_in "$T/err" "cannot run"
expect_in "$T/err" "echo_params.so: cannot be described: dagrun-worker, its helper, is missing"

# ---- serve: the DAG that uses the hanging plugin is refused, the other
# loads and the API answers ----
mkdir -p dags
cp good.yaml uses_hang.yaml uses_segv.yaml dags/
serve_start --no-cron
wait_until 10 grep -q "loaded dag good" serve.log || fail "serve did not load good: $(cat serve.log)"
expect_in serve.log "uses_hang.yaml does not load"
expect_in serve.log "$HANG_MSG"
expect_in serve.log "$SEGV_MSG"
out=$("$PY" - "$PORT" <<'P'
import json, sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/api/dags", timeout=10) as r:
    print(" ".join(sorted(d["name"] for d in json.load(r) if d.get("loaded"))))
P
) || fail "GET /api/dags failed: $(cat serve.log)"
[ "$out" = good ] || fail "GET /api/dags listed '$out', expected good"
pid_alive "$SERVE_PID" || fail "serve died: $(cat serve.log)"
serve_stop


# ---- serve describes a stage once while its file is unchanged ----
# It loads each DAG file, and each again when it changes; the stages'
# descriptions are kept under their files' identity (describe.h).
mkdir -p logdags mystages
cp "$DAGRUN_TEST_PLUGIN_DIR/load_log.so" mystages/
for i in 1 2 3 4 5; do
  printf 'dag: log%s\ntasks:\n  a: {stage: %s/mystages/load_log.so}\n' "$i" "$T" > "logdags/log$i.yaml"
done
export DAGRUN_TEST_LOAD_LOG="$T/loads.log"
serve_start --log serve_log.log --dags logdags --no-cron
loads() { grep -c '^__describe$' loads.log || true; }
[ "$(grep -c 'loaded dag log' serve_log.log)" = 5 ] || fail "serve did not load the 5 DAGs: $(cat serve_log.log)"
[ "$(loads)" = 1 ] || fail "5 DAGs of one stage: $(loads) describe helpers loaded it, expected 1"
echo "# changed" >> logdags/log1.yaml
wait_until 10 grep -q "reloaded dag log1" serve_log.log || fail "log1 not reloaded: $(cat serve_log.log)"
[ "$(loads)" = 1 ] || fail "a DAG reloaded, its stage unchanged: described again ($(loads))"
# The stage's file rebuilt (a new inode, as a compiler's output is): the
# next load describes it again.
cp mystages/load_log.so mystages/new.so && mv mystages/new.so mystages/load_log.so
echo "# changed" >> logdags/log2.yaml
wait_until 10 grep -q "reloaded dag log2" serve_log.log || fail "log2 not reloaded: $(cat serve_log.log)"
[ "$(loads)" = 2 ] || fail "the stage's file changed: $(loads) describe loads, expected 2"
serve_stop
unset DAGRUN_TEST_LOAD_LOG
echo "serve: 5 DAGs and a reload described the stage once; its new file once more"

pass
