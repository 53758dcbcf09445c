# Mapping over a list known only at run time: `map:
# ${tasks.gen.outputs.lrs}` expands `work` when gen has succeeded, into
# one instance per item of gen's output (work-0 .. work-4), each with its
# own attempts; a failed instance retries alone; the downstream task gets
# the instances' outputs in item order; an output that is no list, or too
# long a list, fails the mapped task with a message naming the output; an
# empty list makes no instance; a resume goes on with the instances the
# run had; `dagrun check` points at a map naming a task that is not
# upstream.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"

# gen outputs lrs: the JSON in $T/list.json. The instance of item "c"
# fails while $T/c.ok is missing, once when $T/c.once is there.
cat > rt.yaml <<Y
dag: rtmap
tasks:
  gen:
    stage: exec
    with:
      command: [sh, -c, 'printf "{\\"lrs\\": %s}" "\$(cat $T/list.json)" > "\$DAGRUN_OUTPUTS"']
  work:
    stage: exec
    needs: [gen]
    map: \${tasks.gen.outputs.lrs}
    retries: 2
    retry_delay: 0
    with:
      command:
        - sh
        - -c
        - |
          echo "\$1" >> $T/ran.txt
          if [ "\$1" = c ] && [ ! -e $T/c.ok ]; then
            if [ -e $T/c.once ]; then touch $T/c.ok; fi
            exit 3
          fi
          printf '{"word": "%s-%s"}' "\$1" "\$2" > "\$DAGRUN_OUTPUTS"
        - work
        - \${item}
        - \${item_index}
  join:
    stage: exec
    needs: [work]
    with:
      command: [sh, -c, 'printf "%s\n" "\$1" > $T/join.txt', join, '\${tasks.work.outputs.word|json}']
  # Runs when an instance failed for good: the rule counts instances.
  page:
    stage: exec
    needs: [work]
    trigger: one_failed
    with: {command: ['true']}
Y
run_dagrun check rt.yaml
expect_rc 0

# Five items; c's first attempt fails and is retried alone.
echo '["a", "b", "c", "d", "e"]' > list.json
touch c.once
run_dagrun run rt.yaml
expect_rc 0
R=$(run_dir rtmap)
[ "$(task_states "$R")" = "gen=success/1 work=success/0 join=success/1 page=skipped/0 work-0=success/1 work-1=success/1 work-2=success/2 work-3=success/1 work-4=success/1" ] ||
  fail "states: $(task_states "$R")"
[ "$(sort ran.txt | tr '\n' ' ')" = "a b c c d e " ] || fail "ran: $(cat ran.txt)"
expect_in "$T/out" "work: mapped into 5 instances"
[ "$(cat join.txt)" = '["a-0","b-1","c-2","d-3","e-4"]' ] || fail "join got: $(cat join.txt)"
[ -d "$R/work-2/attempt-2" ] && [ ! -d "$R/work-1/attempt-2" ] || fail "attempts: $(ls "$R"/work-*)"
[ "$(task_field "$R" work outputs)" = "{'items': ['a', 'b', 'c', 'd', 'e']}" ] ||
  fail "recorded list: $(task_field "$R" work outputs)"
# The store (so the API and dashboard) and the report have the instances.
RID=$(basename "$R")
run_dagrun status "$RID"
grep -E '^work-2 +success +2 ' "$T/out" >/dev/null || fail "status: $(cat "$T/out")"
[ "$(store_task_state "$RID" work-4)" = success ] || fail "store: $("$DAGRUN" status --json "$RID")"
grep -q 'work-3' "$R/report.html" || fail "report.html has no work-3"

# An instance that fails for good fails the mapped task as a whole; a
# resume goes on with the same five instances (the list recorded, not
# read again) and runs only the failed one and what follows it.
rm -f c.ok c.once ran.txt join.txt
sed -i 's/retries: 2/retries: 0/' rt.yaml
rm -rf "$DAGRUN_RUNS_DIR"
run_dagrun run rt.yaml
expect_rc 1
R=$(run_dir rtmap)
[ "$(task_states "$R")" = "gen=success/1 work=success/0 join=upstream_failed/0 page=success/1 work-0=success/1 work-1=success/1 work-2=failed/1 work-3=success/1 work-4=success/1" ] ||
  fail "failed instance: $(task_states "$R")"
echo '["x", "y"]' > list.json
touch c.ok
: > ran.txt
run_dagrun resume "$(basename "$R")"
expect_rc 0
[ "$(task_states "$R")" = "gen=success/1 work=success/0 join=success/1 page=success/1 work-0=success/1 work-1=success/1 work-2=success/2 work-3=success/1 work-4=success/1" ] ||
  fail "resumed: $(task_states "$R")"
[ "$(cat ran.txt)" = c ] || fail "the resume ran: $(cat ran.txt)"
[ "$(cat join.txt)" = '["a-0","b-1","c-2","d-3","e-4"]' ] || fail "join after resume: $(cat join.txt)"

# gen taken from the cache (settled while the scheduler starts tasks):
# work expands all the same.
cat > cached.yaml <<Y
dag: cached
tasks:
  gen: {stage: exec, cache: true, with: {command: [sh, -c, 'printf "{\\"xs\\": [1, 2]}" > "\$DAGRUN_OUTPUTS"']}}
  two: {stage: exec, needs: [gen], map: '\${tasks.gen.outputs.xs}', with: {command: ['true']}}
Y
run_dagrun run cached.yaml
expect_rc 0
set +e
timeout 20 "$DAGRUN" run cached.yaml >cached.out 2>&1
RC=$?
set -e
[ "$RC" = 0 ] || fail "second run of cached.yaml: exit $RC (124: it hung): $(cat cached.out)"
# Both runs may start in the same second: the second is the one it names.
R=$DAGRUN_RUNS_DIR/cached/$(sed -n 's/.* run \([^ ]*\) of cached started.*/\1/p' cached.out)
[ "$(task_states "$R")" = "gen=cached/0 two=success/0 two-0=success/1 two-1=success/1" ] ||
  fail "after a cached gen: $(task_states "$R")"

# An empty list makes no instance; join runs and gets [].
rm -rf "$DAGRUN_RUNS_DIR" join.txt
echo '[]' > list.json
run_dagrun run rt.yaml
expect_rc 0
R=$(run_dir rtmap)
[ "$(task_states "$R")" = "gen=success/1 work=success/0 join=success/1 page=skipped/0" ] || fail "empty: $(task_states "$R")"
[ "$(cat join.txt)" = '[]' ] || fail "join of none got: $(cat join.txt)"

# An output that is no list fails the mapped task, naming the output and
# what it held; join is upstream_failed.
rm -rf "$DAGRUN_RUNS_DIR"
echo '"abc"' > list.json
run_dagrun run rt.yaml
expect_rc 1
R=$(run_dir rtmap)
[ "$(task_states "$R")" = "gen=success/1 work=failed/0 join=upstream_failed/0 page=success/1" ] || fail "not a list: $(task_states "$R")"
[ "$(task_field "$R" work reason)" = "task 'work' maps over \${tasks.gen.outputs.lrs}, which is a string (\"abc\"), not a JSON list" ] ||
  fail "reason: $(task_field "$R" work reason)"
expect_in "$T/out" "task 'work' maps over \${tasks.gen.outputs.lrs}, which is a string"

# Over SPEC_MAP_MAX (1024) items: refused, before any instance is made.
rm -rf "$DAGRUN_RUNS_DIR"
"$PY" -c 'import json; print(json.dumps(list(range(1025))))' > list.json
run_dagrun run rt.yaml
expect_rc 1
R=$(run_dir rtmap)
[ "$(task_field "$R" work reason)" = "task 'work' maps over \${tasks.gen.outputs.lrs}, a list of 1025 items: a mapped task has at most 1024 instances" ] ||
  fail "cap: $(task_field "$R" work reason)"

# slow.yaml: nap-0 .. nap-2 sleep for as long as $T/nap.s says, after
# the item is written to $T/naps.txt; at most two at once.
cat > slow.yaml <<Y
dag: slow
tasks:
  gen: {stage: exec, with: {command: [sh, -c, 'printf "{\\"xs\\": [1, 2, 3]}" > "\$DAGRUN_OUTPUTS"']}}
  nap:
    stage: exec
    needs: [gen]
    map: \${tasks.gen.outputs.xs}
    with: {command: [sh, -c, 'echo \$1 >> $T/naps.txt; sleep \$(cat $T/nap.s)', nap, '\${item}']}
Y
# start_slow: starts slow.yaml in the background (PID), sets SID once
# nap-1 runs.
start_slow() {
  rm -rf "$DAGRUN_RUNS_DIR"
  "$DAGRUN" run -q -j2 slow.yaml >slow.out 2>&1 &
  PID=$!
  wait_until 10 test -d "$DAGRUN_RUNS_DIR/slow" || fail "the run did not start"
  SID=$(basename "$(run_dir slow)")
  running() { [ "$(store_task_state "$SID" nap-1)" = running ]; }
  wait_until 10 running || fail "nap-1 not running: $("$DAGRUN" status "$SID")"
}

# A kill -9 of dagrun after the expansion: the resume has the same three
# instances, and runs the two it had started and the one it had not.
echo 60 > nap.s
start_slow
kill -9 "$PID"
wait "$PID" 2>/dev/null || true
echo 0 > nap.s
: > naps.txt
run_dagrun resume "$SID"
expect_rc 0
[ "$(task_states "$(run_dir slow)")" = "gen=success/1 nap=success/0 nap-0=success/2 nap-1=success/2 nap-2=success/1" ] ||
  fail "resumed after kill -9: $(task_states "$(run_dir slow)")"
[ "$(sort naps.txt | tr '\n' ' ')" = "1 2 3 " ] || fail "the resume ran: $(cat naps.txt)"

# `dagrun cancel` stops the running instances and cancels the others.
echo 60 > nap.s
start_slow
run_dagrun cancel "$SID"
expect_rc 0
wait "$PID" || true
[ "$(task_states "$(run_dir slow)")" = "gen=success/1 nap=success/0 nap-0=cancelled/1 nap-1=cancelled/1 nap-2=cancelled/0" ] ||
  fail "cancelled: $(task_states "$(run_dir slow)")"
[ "$(store_run_state "$SID")" = cancelled ] || fail "run: $(store_run_state "$SID")"

# dagrun check: a map over a task that is not upstream, over an unknown
# task, over a task's directory, over an output the task does not
# declare; a task named like a future instance.
cat > bad.yaml <<'Y'
dag: bad
tasks:
  a: {stage: exec, outputs: [items], with: {command: [echo, a]}}
  b: {stage: exec, map: '${tasks.a.outputs.items}', with: {command: [echo, '${item}']}}
  c: {stage: exec, needs: [a], map: '${tasks.zz.outputs.items}', with: {command: [echo]}}
  d: {stage: exec, needs: [a], map: '${tasks.a.dir}', with: {command: [echo]}}
  e: {stage: exec, needs: [a], map: '${tasks.a.outputs.lst}', with: {command: [echo]}}
  f: {stage: exec, needs: [a], map: '${tasks.a.outputs.items}', with: {command: [echo]}}
  f-1: {stage: exec, with: {command: [echo]}}
Y
run_dagrun check bad.yaml
expect_rc 2
expect_in "$T/err" "bad.yaml:4:26: error: task 'b' refers to task 'a' in \${tasks.a.outputs.items}, but 'a' is not upstream of 'b'; add 'a' to the needs of 'b'"
expect_in "$T/err" "bad.yaml:5:38: error: unknown task 'zz' in \${tasks.zz.outputs.items}"
expect_in "$T/err" "bad.yaml:6:37: error: 'map' in task 'd': \${tasks.a.dir} is not a task's output"
expect_in "$T/err" "bad.yaml:7:38: error: task 'a' declares no output 'lst'"
expect_in "$T/err" "bad.yaml:9:8: error: task name 'f-1' may be taken by an instance of mapped task 'f' (line 8)"
# The example: lr_find's suggestion, a list around it, one train task per
# rate, the best val_loss picked and promoted.
make_corpus "$T/corpus" 2
rm -rf "$DAGRUN_RUNS_DIR"
DAGRUN_CORPUS="$T/corpus" DAGRUN_TRAIN_STEPS=6 run_dagrun run -j3 "$DAGRUN_SOURCE_DIR/examples/sweep/sweep-found.yaml"
expect_rc 0
R=$(run_dir lr-sweep-found)
[ "$(task_states "$R")" = "shard=success/1 tokenize=success/1 lr_find=success/1 grid=success/1 train=success/0 pick=success/1 validate=success/1 promote=success/1 train-0=success/1 train-1=success/1 train-2=success/1" ] ||
  fail "sweep-found: $(task_states "$R")"
"$PY" - "$R" <<'P' || fail "pick did not choose the best of grid's rates"
import json, sys
run = json.load(open(sys.argv[1] + "/run.json"))
out = {t["name"]: t.get("outputs", {}) for t in run["tasks"]}
lrs = json.loads(out["grid"]["lrs"])
lr = float(out["lr_find"]["lr"])
assert [round(x / lr, 6) for x in lrs] == [0.25, 1, 4], (lrs, lr)
assert out["train"]["items"] == lrs, out["train"]
losses = [float(out[f"train-{i}"]["val_loss"]) for i in range(3)]
best = losses.index(min(losses))
assert float(out["pick"]["lr"]) == lrs[best], (out["pick"], lrs, losses)
assert out["validate"]["checkpoint"] == out["pick"]["checkpoint"], out["validate"]
P
pass
