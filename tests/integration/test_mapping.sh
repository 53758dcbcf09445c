# Dynamic task mapping: a task with `map:` runs one instance per item
# (T-0, T-1, ...), each with its own attempts, outputs and ${item}; a
# failed instance retries alone; a task that needs the mapped task waits
# for every instance and reads their outputs as a JSON list in item
# order; an empty list makes no instance and the downstream task gets [].
# `dagrun check` points at a bad `map:` and a misplaced ${item}, and the
# sweep example (examples/sweep) trains, picks and promotes.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"

# Five items; the instance of item "c" fails its first attempt.
cat > map.yaml <<Y
dag: mapped
params:
  names: [a, b, c, d, e]
tasks:
  prep: {stage: exec, with: {command: [touch, $T/prep.done]}}
  work:
    stage: exec
    needs: [prep]
    map: \${params.names}
    retries: 2
    retry_delay: 0
    with:
      command:
        - sh
        - -c
        - |
          if [ "\$1" = c ] && [ ! -e $T/c.failed ]; then touch $T/c.failed; exit 3; fi
          printf '{"word": "%s-%s", "n": %s}' "\$1" "\$2" "\$2" > "\$DAGRUN_OUTPUTS"
        - work
        - \${item}
        - \${item_index}
  none: {stage: exec, map: [], with: {command: [touch, $T/none.ran]}}
  join:
    stage: exec
    needs: [work, none]
    with:
      command: [sh, -c, 'printf "%s %s\n" "\$1" "\$2" > $T/join.txt', join,
                '\${tasks.work.outputs.word|json}', '\${tasks.none.outputs.x|json}']
Y
run_dagrun check map.yaml
expect_rc 0
expect_in "$T/out" "map.yaml: ok (dag mapped, 7 tasks)"
run_dagrun run map.yaml
expect_rc 0
R=$(run_dir mapped)
[ "$(task_states "$R")" = "prep=success/1 work-0=success/1 work-1=success/1 work-2=success/2 work-3=success/1 work-4=success/1 join=success/1" ] ||
  fail "states: $(task_states "$R")"
# The retry was of work-2 alone: its first attempt failed, the others ran once.
[ -d "$R/work-2/attempt-2" ] && [ ! -d "$R/work-1/attempt-2" ] || fail "attempts: $(ls "$R"/work-*)"
expect_in "$R/work-2/attempt-1/log" "exit"
[ "$(cat "$T/join.txt")" = '["a-0","b-1","c-2","d-3","e-4"] []' ] || fail "join got: $(cat "$T/join.txt")"
[ -e "$T/none.ran" ] && fail "an empty map ran a task"
run_dagrun status "$(basename "$R")"
grep -E '^work-2 +success +2 ' "$T/out" >/dev/null || fail "status: $(cat "$T/out")"

# --param may change the items, not their number.
rm -f "$T/c.failed"
run_dagrun run map.yaml -p 'names=["v","w","x","y","z"]'
expect_rc 0
[ "$(cat "$T/join.txt")" = '["v-0","w-1","x-2","y-3","z-4"] []' ] || fail "override: $(cat "$T/join.txt")"
run_dagrun run map.yaml -p 'names=["v"]'
expect_rc 2
expect_in "$T/err" "task 'work' maps over param 'names', and its 5 instances are fixed when the DAG file is loaded: give a list of 5 items"

# A failed instance fails the mapped task as a whole: join is
# upstream_failed, the other instances still succeed.
sed -i 's/retries: 2/retries: 0/' map.yaml
rm -f "$T/c.failed"
rm -rf "$DAGRUN_RUNS_DIR"
run_dagrun run map.yaml
expect_rc 1
R=$(run_dir mapped)
[ "$(task_states "$R")" = "prep=success/1 work-0=success/1 work-1=success/1 work-2=failed/1 work-3=success/1 work-4=success/1 join=upstream_failed/0" ] ||
  fail "failed instance: $(task_states "$R")"

# dagrun check: each bad map and misplaced ${item} at its place.
cat > bad.yaml <<'Y'
dag: bad
params: {lr: 0.1}
tasks:
  a: {stage: exec, with: {command: [echo, a]}}
  b: {stage: exec, map: 5, with: {command: [echo]}}
  c: {stage: exec, map: '${params.lr}', with: {command: [echo]}}
  d: {stage: exec, with: {command: [echo, '${item}']}}
  e: {stage: exec, map: [1, 2], with: {command: [echo]}}
  f: {stage: exec, with: {command: [echo, '${tasks.e.outputs.x|json}']}}
  h: {stage: exec, map: [1, 2, 3], with: {command: [echo], nope: 1}}
Y
run_dagrun check bad.yaml
expect_rc 2
expect_in "$T/err" "bad.yaml:5:25: error: 'map' in task 'b': expected a list ([a, b, c]), \${params.NAME} naming a param whose value is a list, or \${tasks.TASK.outputs.KEY} naming an upstream task's output that is a JSON list, found an integer"
expect_in "$T/err" "bad.yaml:6:25: error: 'map' in task 'c': param 'lr' is a number at line 2, not a list"
expect_in "$T/err" "bad.yaml:7:44: error: \${item} is used outside a mapped task"
expect_in "$T/err" "bad.yaml:9:44: error: task 'f' refers to task 'e' in \${tasks.e.outputs.x}, but 'e' is not upstream of 'f'"
# One mistake in a mapped task is one message, naming the task as written.
expect_in "$T/err" "bad.yaml:10:60: error: unknown param 'nope' for stage 'exec' in task 'h';"
[ "$(grep -c "unknown param 'nope'" "$T/err")" = 1 ] || fail "repeated: $(cat "$T/err")"

# Each instance owns its copy of what the task's settings hold (produces:,
# an approval's message): freeing them once each, not crashing.
cat > own.yaml <<'Y'
dag: own
tasks:
  t: {stage: exec, map: [1, 2], produces: [ds], with: {command: [echo, '${item}']}}
  ok: {map: [a, b], approval: {message: ship it?}}
Y
run_dagrun check own.yaml
expect_rc 0
expect_in "$T/out" "own.yaml: ok (dag own, 4 tasks)"

# The example: three learning rates, the best val_loss promoted.
make_corpus "$T/corpus" 2
rm -rf "$DAGRUN_RUNS_DIR"
DAGRUN_CORPUS="$T/corpus" DAGRUN_TRAIN_STEPS=6 run_dagrun run -j3 "$DAGRUN_SOURCE_DIR/examples/sweep/sweep.yaml"
expect_rc 0
R=$(run_dir lr-sweep)
[ "$(task_states "$R")" = "shard=success/1 tokenize=success/1 train-0=success/1 train-1=success/1 train-2=success/1 pick=success/1 validate=success/1 promote=success/1" ] ||
  fail "sweep: $(task_states "$R")"
# pick chose the lowest of the three val_loss outputs, and that
# checkpoint is the one validated and promoted.
"$PY" - "$R" <<'P' || fail "pick did not choose the best"
import json, sys
run = json.load(open(sys.argv[1] + "/run.json"))
out = {t["name"]: t.get("outputs", {}) for t in run["tasks"]}
losses = [float(out[f"train-{i}"]["val_loss"]) for i in range(3)]
best = losses.index(min(losses))
assert float(out["pick"]["val_loss"]) == losses[best], (out["pick"], losses)
assert out["pick"]["checkpoint"] == out[f"train-{best}"]["checkpoint"], out["pick"]
assert float(out["pick"]["lr"]) == [0.0005, 0.002, 0.008][best], out["pick"]
assert out["validate"]["checkpoint"] == out["pick"]["checkpoint"], out["validate"]
P
run_dagrun models lr-sweep
expect_rc 0
expect_in "$T/out" "$(basename "$R")"
pass
