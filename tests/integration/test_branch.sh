# Branching: a `branch: true` task names in its output `branch` which of
# its direct downstream tasks run; the others are skipped, the skip goes
# down to the tasks that need them, and a none_failed_min_one_success join
# runs after whichever path ran. A bad choice (a task that is not a direct
# downstream, no choice at all) fails the branch task and says why; a
# resumed run follows the choice its branch task made before. The worked
# example examples/branching/gate.yaml takes each path.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"
EX="$DAGRUN_SOURCE_DIR/examples/branching/gate.yaml"

# task_states RUN_DIR: "name=state ..." of run.json's tasks.
task_states() {
  "$PY" -c '
import json, sys
print(" ".join(t["name"] + "=" + t["state"] for t in json.load(open(sys.argv[1] + "/run.json"))["tasks"]))
' "$1"
}

# The example, gate passed: export runs, alert is skipped, publish runs.
run_dagrun run "$EX"
expect_rc 0
R=$(run_dir gated-export)
[ "$(task_states "$R")" = "evaluate=success gate=success export=success alert=skipped publish=success" ] ||
  fail "passed gate: $(task_states "$R")"
[ "$(task_field "$R" alert reason)" = "not chosen by branch task 'gate'" ] || fail "alert reason: $(task_field "$R" alert reason)"
expect_in "$R/export/out/exported.txt" "exported (val_loss 2.4)"
[ -e "$R/alert/out/alert.txt" ] && fail "alert ran"
expect_in "$T/out" "4 succeeded, 1 skipped"
rm -rf "$DAGRUN_RUNS_DIR"

# Gate missed: alert runs, export is skipped, publish still runs.
run_dagrun run "$EX" -p val_loss=3.4
expect_rc 0
R=$(run_dir gated-export)
[ "$(task_states "$R")" = "evaluate=success gate=success export=skipped alert=success publish=success" ] ||
  fail "missed gate: $(task_states "$R")"
expect_in "$R/alert/out/alert.txt" "val_loss 3.4 missed the gate"
[ -e "$R/export/out/exported.txt" ] && fail "export ran"
run_dagrun status "$(basename "$R")"
grep -E '^export +skipped .*not chosen by branch task .gate.' "$T/out" >/dev/null || fail "status: $(cat "$T/out")"

# choose CHOICE: a DAG whose branch task writes CHOICE (JSON) as its
# output `branch`, or none at all when CHOICE is empty.
choose() {
  cat > br.yaml <<Y
dag: br
tasks:
  pick:
    stage: exec
    branch: true
    with: {command: [sh, -c, '[ -z "\$1" ] || printf "{\"branch\": %s}" "\$1" > "\$DAGRUN_OUTPUTS"', pick, '$1']}
  a:     {stage: exec, needs: [pick], with: {command: [touch, $T/ran.a]}}
  b:     {stage: exec, needs: [pick], with: {command: [touch, $T/ran.b]}}
  after_b: {stage: exec, needs: [b], with: {command: [touch, $T/ran.after_b]}}
  join:  {stage: exec, needs: [a, after_b], trigger: none_failed_min_one_success, with: {command: [touch, $T/ran.join]}}
  cleanup: {stage: exec, needs: [a, b], trigger: all_done, with: {command: [touch, $T/ran.cleanup]}}
Y
  rm -rf "$DAGRUN_RUNS_DIR" "$T"/ran.*
  run_dagrun run br.yaml
  R=$(run_dir br)
}

# expect_states RC STATES: dagrun exited RC and the tasks ended so.
expect_states() {
  expect_rc "$1"
  [ "$(task_states "$R")" = "$2" ] || fail "expected $2, found $(task_states "$R")"
}

# expect_pick_failed REASON: the bad choice failed pick, saying so.
expect_pick_failed() {
  expect_rc 1
  [ "$(task_field "$R" pick reason)" = "$1" ] || fail "pick reason: $(task_field "$R" pick reason)"
}

# Both, as a list: everything runs.
choose '["a", "b"]'
expect_states 0 "pick=success a=success b=success after_b=success join=success cleanup=success"

# One bare name: the skip of b goes down to after_b.
choose '"b"'
expect_states 0 "pick=success a=skipped b=success after_b=success join=success cleanup=success"
[ -e "$T/ran.a" ] && fail "a ran"
choose '["a"]'
expect_states 0 "pick=success a=success b=skipped after_b=skipped join=success cleanup=success"
[ "$(task_field "$R" after_b reason)" = "upstream task 'b' was skipped" ] || fail "after_b: $(task_field "$R" after_b reason)"
[ -e "$T/ran.b" ] || [ -e "$T/ran.after_b" ] && fail "b's path ran"

# None: both paths and the join are skipped; cleanup (all_done) still
# runs once they ended.
choose '[]'
expect_states 0 "pick=success a=skipped b=skipped after_b=skipped join=skipped cleanup=success"
[ "$(ls "$T"/ran.*)" = "$T/ran.cleanup" ] || fail "ran after an empty choice: $(ls "$T"/ran.*)"

# A task that is not a direct downstream of pick: pick fails, says which
# it may choose from, and nothing after it runs.
choose '["a", "join"]'
expect_states 1 "pick=failed a=upstream_failed b=upstream_failed after_b=upstream_failed join=upstream_failed cleanup=success"
expect_pick_failed "output 'branch' of task 'pick' names 'join', which is not a direct downstream task of 'pick' (it may choose from: a, b)"
[ -e "$T/ran.a" ] && fail "a ran after a bad choice"
run_dagrun status "$(basename "$R")"
expect_in "$T/out" "names 'join', which is not a direct downstream task of 'pick'"
choose '"nosuch"'
expect_pick_failed "output 'branch' of task 'pick' names 'nosuch', which is not a direct downstream task of 'pick' (it may choose from: a, b)"
choose '[1]'
expect_pick_failed "output 'branch' of task 'pick' must be a task name or a JSON list of task names, found [1]"
choose ''
expect_pick_failed "branch task 'pick' succeeded without an output 'branch' naming the downstream tasks to run (of: a, b; [] for none)"

# A plugin stage chooses through host->output("branch", ...).
cat > pl.yaml <<Y
dag: pl
tasks:
  pick: {stage: outputs, branch: true, with: {key: branch, value: '["y"]'}}
  x:    {stage: exec, needs: [pick], with: {command: [touch, $T/ran.x]}}
  y:    {stage: exec, needs: [pick], with: {command: [touch, $T/ran.y]}}
Y
run_dagrun run pl.yaml
expect_rc 0
R=$(run_dir pl)
[ "$(task_states "$R")" = "pick=success x=skipped y=success" ] || fail "plugin: $(task_states "$R")"

# Resume: b fails the first time; the resumed run runs b again and keeps
# a skipped, as pick (which does not run again) chose.
cat > rs.yaml <<Y
dag: rs
tasks:
  pick: {stage: exec, branch: true, with: {command: [sh, -c, 'touch $T/ran.pick; echo "{\"branch\": \"b\"}" > "\$DAGRUN_OUTPUTS"']}}
  a:    {stage: exec, needs: [pick], with: {command: [touch, $T/ran.a]}}
  b:    {stage: exec, needs: [pick], with: {command: [sh, -c, '[ -e $T/fixed ]']}}
  join: {stage: exec, needs: [a, b], trigger: none_failed_min_one_success, with: {command: [touch, $T/ran.join]}}
Y
rm -f "$T"/ran.*
run_dagrun run rs.yaml
expect_rc 1
R=$(run_dir rs)
[ "$(task_states "$R")" = "pick=success a=skipped b=failed join=upstream_failed" ] || fail "rs: $(task_states "$R")"
rm "$T/ran.pick"
touch "$T/fixed"
run_dagrun resume "$(basename "$R")"
expect_rc 0
[ "$(task_states "$R")" = "pick=success a=skipped b=success join=success" ] || fail "resumed: $(task_states "$R")"
[ -e "$T/ran.pick" ] && fail "pick ran again on resume"
[ -e "$T/ran.a" ] && fail "a ran on resume"
[ -e "$T/ran.join" ] || fail "join did not run on resume"

# dagrun check: a branch task without downstream tasks, at file:line:col.
cat > lone.yaml <<'Y'
dag: lone
tasks:
  pick: {stage: exec, branch: true, with: {command: ["true"]}}
Y
run_dagrun check lone.yaml
expect_rc 2
expect_in "$T/err" "lone.yaml:3:31: error: 'branch' in task 'pick': a branch task chooses which of its downstream tasks run, and no task needs 'pick'"
pass
