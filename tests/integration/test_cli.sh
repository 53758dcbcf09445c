# The CLI a user meets: check reports every error with file:line:col and
# exits 2; graph prints the DAG in three formats; stages lists plugins with
# their params; a plugin built for another ABI is refused by name; typos of
# commands get a suggestion; every command answers --help.
. "$(dirname "$0")/lib.sh"

cat > bad.yaml <<'Y'
dag: bad
tasks:
  a:
    stage: exec
    retires: 2
    with: {command: ["true"]}
  b:
    stage: exec
    needs: [c]
    timeout: 2x
    with: {command: ["true"]}
Y
run_dagrun check bad.yaml
expect_rc 2
expect_in "$T/err" "bad.yaml:5:5: error: unknown key 'retires'"
expect_in "$T/err" "did you mean 'retries'?"
expect_in "$T/err" "bad.yaml:9:13: error:"
expect_in "$T/err" "'c'"
expect_in "$T/err" "bad.yaml:10:14: error:"
expect_in "$T/err" "2x"

cat > cyc.yaml <<'Y'
dag: cyc
tasks:
  a: {stage: exec, needs: [c], with: {command: ["true"]}}
  b: {stage: exec, needs: [a], with: {command: ["true"]}}
  c: {stage: exec, needs: [b], with: {command: ["true"]}}
Y
run_dagrun check cyc.yaml
expect_rc 2
expect_in "$T/err" "cycle"
grep -qE "a -> b -> c -> a|b -> c -> a -> b|c -> a -> b -> c" "$T/err" || fail "cycle not printed: $(cat "$T/err")"
# A DAG with errors does not run at all.
run_dagrun run cyc.yaml
expect_rc 2
[ -d "$DAGRUN_RUNS_DIR/cyc" ] && fail "a run directory was made for an invalid DAG"

cat > abi.yaml <<'Y'
dag: abi
tasks:
  old: {stage: abi2}
Y
run_dagrun check abi.yaml
expect_rc 2
expect_in "$T/err" "abi2.so"
expect_in "$T/err" "ABI 2.0"

cat > missing.yaml <<'Y'
dag: missing
tasks:
  a: {stage: exex, with: {command: ["true"]}}
  b: {stage: exec, with: {comand: ["true"]}}
  c: {stage: exec}
Y
run_dagrun check missing.yaml
expect_rc 2
expect_in "$T/err" "missing.yaml:3:14: error:"
expect_in "$T/err" "did you mean 'exec'?"
expect_in "$T/err" "did you mean 'command'?"
expect_in "$T/err" "missing.yaml:5:14: error: task 'c' is missing required param 'command'"
expect_in "$T/err" "command"

run_dagrun check "$DAGRUN_SOURCE_DIR/dags/smoke.yaml"
expect_rc 0
expect_in "$T/out" "ok (dag smoke, 5 tasks)"

run_dagrun graph "$DAGRUN_SOURCE_DIR/dags/smoke.yaml" --format dot
expect_rc 0
expect_in "$T/out" "digraph"
expect_in "$T/out" '"prepare" -> "count"'
run_dagrun graph "$DAGRUN_SOURCE_DIR/dags/smoke.yaml" --format mermaid
expect_rc 0
expect_in "$T/out" "flowchart"
expect_in "$T/out" 't0["prepare (exec)"]'
expect_in "$T/out" 't1["count (exec)"]'
expect_in "$T/out" "t0 --> t1"
run_dagrun graph "$DAGRUN_SOURCE_DIR/dags/smoke.yaml" --format text
expect_rc 0
expect_in "$T/out" "report (exec) <- count, upper"
run_dagrun graph "$DAGRUN_SOURCE_DIR/dags/smoke.yaml" --format svg
expect_rc 2
# A branch task and a trigger rule other than all_success are shown in
# every format (a branch task as a decision shape).
G="$DAGRUN_SOURCE_DIR/examples/branching/gate.yaml"
run_dagrun graph "$G" --format text
expect_rc 0
expect_in "$T/out" "gate (exec) [branch] <- evaluate"
expect_in "$T/out" "publish (exec) [trigger none_failed_min_one_success] <- export, alert"
expect_in "$T/out" "export (exec) <- gate"
run_dagrun graph "$G" --format dot
expect_rc 0
expect_in "$T/out" '"gate" [label="gate\n(exec)\nbranch", shape=diamond];'
expect_in "$T/out" '"publish" [label="publish\n(exec)\ntrigger none_failed_min_one_success"];'
run_dagrun graph "$G" --format mermaid
expect_rc 0
expect_in "$T/out" 't1{"gate (exec) [branch]"}'
expect_in "$T/out" 't4["publish (exec) [trigger none_failed_min_one_success]"]'

run_dagrun stages
expect_in "$T/out" "exec"
expect_in "$T/out" "command"
expect_in "$T/out" "abi2.so"
# Params with a fixed set of values show it, in text and in JSON.
expect_in "$T/out" "(one of: auto, cpu, cuda)"
expect_in "$T/out" "(one of: 0, 1, 2, 3)"
run_dagrun stages --json
/usr/bin/python3 - "$T/out" <<'P' || fail "stages --json: choices wrong"
import json, sys
st = {s["name"]: s for s in json.load(open(sys.argv[1])) if "name" in s}
p = {q["name"]: q for q in st["train"]["params"]}
assert p["device"]["choices"] == ["auto", "cpu", "cuda"], p["device"]
assert p["zero_stage"]["choices"] == ["0", "1", "2", "3"], p["zero_stage"]
assert p["steps"]["choices"] is None, p["steps"]
assert st["export"]["params"][2]["choices"] == ["safetensors", "dagrun"]
P
# One stage by name: as `stages` shows it, that one only (in JSON its
# object); an unknown name exits 2, with "did you mean" when one is close.
run_dagrun stages train
expect_rc 0
expect_in "$T/out" "(one of: auto, cpu, cuda)"
[ "$(grep -c '^[a-z_0-9]* .*(.*\.so)$' "$T/out")" = 1 ] ||
  fail "stages train shows other stages: $(cat "$T/out")"
expect_not_in "$T/out" "search path"
run_dagrun stages train --json
expect_rc 0
/usr/bin/python3 - "$T/out" <<'P' || fail "stages train --json: $(cat "$T/out")"
import json, sys
st = json.load(open(sys.argv[1]))
assert st["name"] == "train", st
p = {q["name"]: q for q in st["params"]}
assert p["device"]["choices"] == ["auto", "cpu", "cuda"], p["device"]
P
# A stage is the name a DAG writes, its file's name: a copy of flaky.so
# as counter.so is the stage counter (its descriptor's name said beside
# it), found by `stages counter` and by a DAG, and flaky stays flaky.
mkdir renamed
cp "$DAGRUN_TEST_PLUGIN_DIR/flaky.so" renamed/counter.so
export DAGRUN_PLUGIN_PATH="$T/renamed:$DAGRUN_TEST_PLUGIN_DIR"
run_dagrun stages
expect_rc 1 # abi2.so and the like
expect_in "$T/out" "counter 1.0  ($T/renamed/counter.so)
  (its descriptor calls it 'flaky': a DAG names it by its file, stage: counter)"
expect_in "$T/out" "flaky 1.0  ($DAGRUN_TEST_PLUGIN_DIR/flaky.so)"
expect_not_in "$T/out" "also in $DAGRUN_TEST_PLUGIN_DIR/flaky.so"
run_dagrun stages counter --json
expect_rc 0
/usr/bin/python3 - "$T/out" <<'P' || fail "stages counter --json: $(cat "$T/out")"
import json, sys
st = json.load(open(sys.argv[1]))
assert st["name"] == "counter" and st["descriptor_name"] == "flaky", st
P
printf 'dag: renamed\ntasks:\n  a: {stage: counter, with: {counter_file: %s/c, fail_times: 0}}\n' "$T" > renamed.yaml
run_dagrun run renamed.yaml -q
expect_rc 0
export DAGRUN_PLUGIN_PATH="$DAGRUN_TEST_PLUGIN_DIR"
run_dagrun stages trian
expect_rc 2
expect_in "$T/err" "unknown stage 'trian'; did you mean 'train'?"
[ -s "$T/out" ] && fail "stages trian printed: $(cat "$T/out")"
run_dagrun stages no_such_stage_at_all --json
expect_rc 2
expect_in "$T/err" "unknown stage 'no_such_stage_at_all'"
expect_not_in "$T/err" "did you mean"
run_dagrun stages bad_choice_default
expect_rc 1
expect_in "$T/err" "param 'device': its default 'gpu' is not one of cpu, cuda, auto"
run_dagrun stages train exec
expect_rc 2
expect_in "$T/err" "stages takes one stage name, got also 'exec'"
run_dagrun stages --jsn
expect_rc 2
expect_in "$T/err" "unknown option '--jsn' for stages"
run_dagrun stages --json
# A plugin whose default is not among its choices is refused by name.
expect_in "$T/out" "bad_choice_default.so: stage 'bad_choice_default' param 'device': its default 'gpu' is not one of cpu, cuda, auto"
cat > badchoice.yaml <<'Y'
dag: badchoice
tasks:
  a: {stage: bad_choice_default}
Y
run_dagrun check badchoice.yaml
expect_rc 2
expect_in "$T/err" "badchoice.yaml:3:14: error: cannot load stage 'bad_choice_default' of task 'a': "
expect_in "$T/err" "param 'device': its default 'gpu' is not one of cpu, cuda, auto"

run_dagrun chek bad.yaml
expect_rc 2
expect_in "$T/err" "did you mean 'check'?"

run_dagrun run no-such-file.yaml
expect_rc 2
expect_in "$T/err" "no-such-file.yaml"

# Bad options and an unusable runs directory: a clear message, exit 2.
run_dagrun run "$DAGRUN_SOURCE_DIR/dags/smoke.yaml" -j 0
expect_rc 2
expect_in "$T/err" "--max-parallel needs a number >= 1, got '0'"
run_dagrun run "$DAGRUN_SOURCE_DIR/dags/smoke.yaml" --bogus
expect_rc 2
expect_in "$T/err" "unknown option '--bogus'"
DAGRUN_RUN_PARAMS='{"n": 1}' run_dagrun run "$DAGRUN_SOURCE_DIR/dags/smoke.yaml" --params-from-env
expect_rc 2
expect_in "$T/err" "DAGRUN_RUN_PARAMS is not a JSON array"
touch not-a-dir
run_dagrun run "$DAGRUN_SOURCE_DIR/dags/smoke.yaml" --runs-dir not-a-dir/runs
expect_rc 2
expect_in "$T/err" "cannot create"
expect_in "$T/err" "not-a-dir/runs"

# Every command in the table answers --help and -h before doing anything
# else: its usage on stdout naming it, exit 0, nothing on stderr, no run
# store opened. The list is read from `dagrun --help`, so that a command
# added to the table is checked without touching this test.
export DAGRUN_HOME="$T/home"
run_dagrun --help
expect_rc 0
[ -s "$T/err" ] && fail "dagrun --help wrote on stderr: $(cat "$T/err")"
cp "$T/out" overview.txt
cmds=$(awk '/^commands:/ {f = 1; next} f && /^$/ {exit} f {print $1}' overview.txt)
for c in run check graph stages generate cron-next runs status logs resume \
  cancel report backfill serve version help; do
  grep -qx -- "$c" <<<"$cmds" || fail "dagrun --help does not list '$c': $cmds"
done
for c in $cmds; do
  for h in --help -h; do
    run_dagrun "$c" "$h"
    [ "$RC" -eq 0 ] || fail "dagrun $c $h exited $RC: $(cat "$T/err")"
    [ -s "$T/err" ] && fail "dagrun $c $h wrote on stderr: $(cat "$T/err")"
    grep -qE "^usage: dagrun $c( |\$)" "$T/out" ||
      fail "dagrun $c $h: no usage naming $c on stdout: $(cat "$T/out")"
  done
  cp "$T/out" "help-$c.txt"
  run_dagrun help "$c"
  expect_rc 0
  cmp -s "$T/out" "help-$c.txt" || fail "dagrun help $c differs from dagrun $c -h"
done
run_dagrun help
expect_rc 0
cmp -s "$T/out" overview.txt || fail "dagrun help differs from dagrun --help"
# --help anywhere wins: nothing is loaded, nothing runs.
run_dagrun run "$DAGRUN_SOURCE_DIR/dags/smoke.yaml" --help
expect_rc 0
expect_in "$T/out" "usage: dagrun run FILE"
run_dagrun "$DAGRUN_SOURCE_DIR/dags/smoke.yaml" -h
expect_rc 0
expect_in "$T/out" "usage: dagrun run FILE"
run_dagrun status no-such-run --help
expect_rc 0
[ -e "$DAGRUN_HOME" ] && fail "--help opened a run store in $DAGRUN_HOME"
[ -d "$DAGRUN_RUNS_DIR/smoke" ] && fail "--help made a run directory"
# No command: the overview on stderr, exit 2. An unknown command, or an
# unknown command to help: exit 2 with a message.
run_dagrun
expect_rc 2
expect_in "$T/err" "commands:"
run_dagrun frobnicate
expect_rc 2
expect_in "$T/err" "frobnicate"
run_dagrun help frobnicate
expect_rc 2
expect_in "$T/err" "unknown command 'frobnicate'"
unset DAGRUN_HOME
pass
