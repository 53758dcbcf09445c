# A failed task marks its all_success downstream upstream_failed (through
# the whole chain), independent branches still run, and an all_done task
# runs once its upstream is finished, whatever happened.
. "$(dirname "$0")/lib.sh"

cat > up.yaml <<'Y'
dag: up
tasks:
  bad:      {stage: exec, with: {command: [sh, -c, 'exit 3']}}
  after:    {stage: exec, needs: [bad], with: {command: ["true"]}}
  after2:   {stage: exec, needs: [after], with: {command: ["true"]}}
  other:    {stage: exec, with: {command: [sh, -c, 'echo other > "$DAGRUN_OUT_DIR/x"']}}
  cleanup:  {stage: exec, needs: [after2, other], trigger: all_done, with: {command: [sh, -c, 'echo cleaned > "$DAGRUN_OUT_DIR/x"']}}
Y
run_dagrun run up.yaml --events json
expect_rc 1
R=$(run_dir up)
[ "$(task_field "$R" bad state)" = failed ] || fail "bad: $(task_field "$R" bad state)"
[ "$(task_field "$R" bad exit_code)" = 3 ] || fail "bad exit code: $(task_field "$R" bad exit_code)"
[ "$(task_field "$R" after state)" = upstream_failed ] || fail "after: $(task_field "$R" after state)"
[ "$(task_field "$R" after2 state)" = upstream_failed ] || fail "after2: $(task_field "$R" after2 state)"
[ "$(task_field "$R" after reason)" = "upstream task 'bad' failed" ] || fail "after reason: $(task_field "$R" after reason)"
[ "$(task_field "$R" other state)" = success ] || fail "other: $(task_field "$R" other state)"
[ "$(task_field "$R" cleanup state)" = success ] || fail "cleanup: $(task_field "$R" cleanup state)"
[ -d "$R/after" ] && fail "after never ran, yet has a directory"
expect_in "$R/cleanup/out/x" cleaned
# --events json: one object per line, each parseable, with the final run event.
/usr/bin/python3 -c '
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
assert ev[0]["event"] == "run" and ev[0]["state"] == "running", ev[0]
assert ev[-1]["event"] == "run" and ev[-1]["state"] == "failed", ev[-1]
assert ev[-1]["counts"] == {"success": 2, "cached": 0, "failed": 1, "upstream_failed": 2, "cancelled": 0, "skipped": 0}, ev[-1]
states = [(e["task"], e["state"]) for e in ev if e["event"] == "task"]
assert ("after2", "upstream_failed") in states
assert states.index(("cleanup", "running")) > states.index(("other", "success"))
' "$T/out" || fail "events: $(cat "$T/out")"

# --plain and --events json into a file (cron's `>> nightly.log`, `| tee`):
# each line is there as it happens, not when the run ends. b waits for
# the test to see a's success line.
cat > live.yaml <<Y
dag: live
tasks:
  a: {stage: exec, with: {command: [echo, a]}}
  b: {stage: exec, needs: [a], timeout: 30s, with: {command: [sh, -c, 'while [ ! -e "\$1" ]; do sleep 0.05; done', sh, "$T/go"]}}
Y
for mode in "--plain" "--events json"; do
  rm -f "$T/go"
  # shellcheck disable=SC2086
  "$DAGRUN" run live.yaml $mode >"$T/live.out" 2>"$T/live.err" &
  pid=$!
  seen=0
  wait_until 15 grep -Eq 'a: success|"task":"a","state":"success"' "$T/live.out" && seen=1
  touch "$T/go"
  wait "$pid" || fail "live ($mode) failed: $(cat "$T/live.out" "$T/live.err")"
  [ "$seen" = 1 ] || fail "$mode into a file: a's success was not there while b ran: $(cat "$T/live.out")"
done
pass
