# The fingerprint cache: a task whose stage, plugin version, resolved
# params, env and upstream fingerprints match an earlier successful task
# whose outputs still exist is not run but `cached`; `cache: false` and
# --no-cache run everything; a failure is never reused.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"
export CACHE_LOG="$T/log"

cat > c.yaml <<'Y'
dag: cache
params: {tag: one}
defaults:
  env: {LOG: "${env:CACHE_LOG}"}
  cache: true # exec is cached only when asked
tasks:
  a:
    stage: exec
    with: {command: [sh, -c, 'echo a >> "$LOG"; echo A > "$DAGRUN_OUT_DIR/f"']}
  b:
    stage: exec
    needs: [a]
    with:
      command: [sh, -c, 'echo b >> "$LOG"; { cat "$1"; echo "$2"; } > "$DAGRUN_OUT_DIR/f"',
                x, "${tasks.a.dir}/f", "${params.tag}"]
  c:
    stage: exec
    needs: [b]
    with:
      command: [sh, -c, 'echo c >> "$LOG"; cat "$1" > "$DAGRUN_OUT_DIR/f"', x, "${tasks.b.dir}/f"]
Y

# The newest run directory of a dag.
newest() { ls -d "$DAGRUN_RUNS_DIR/$1"/*/ | sort | tail -n 1 | sed 's:/$::'; }
log_is() {
  [ "$(tr '\n' ' ' < "$CACHE_LOG")" = "$1" ] ||
    fail "log: expected '$1', found '$(tr '\n' ' ' < "$CACHE_LOG")'"
}
state_is() { # RUN_DIR TASK STATE
  [ "$(task_field "$1" "$2" state)" = "$3" ] ||
    fail "$2 in $1: expected $3, found $(task_field "$1" "$2" state)"
}

run_dagrun run c.yaml --plain
expect_rc 0
R1=$(newest cache)
log_is "a b c "

# Second run: nothing runs; every task is cached from the first.
sleep 1
run_dagrun run c.yaml --plain
expect_rc 0
R2=$(newest cache)
[ "$R2" != "$R1" ] || fail "no second run directory"
log_is "a b c "
for t in a b c; do
  state_is "$R2" $t cached
  [ "$(task_field "$R2" $t cached_from)" = "$(basename "$R1")" ] ||
    fail "$t cached_from: $(task_field "$R2" $t cached_from)"
done
expect_in "$T/out" "a: cached (from run $(basename "$R1"))"
expect_in "$T/out" "success"
run_dagrun status "$(basename "$R2")" --json
expect_rc 0
expect_in "$T/out" '"cached"'
expect_in "$T/out" "\"cached_from\":"
expect_in "$T/out" "$(basename "$R1")"
# status says where a cached task came from, in text and JSON (every task
# has cached_from: null where it ran).
run_dagrun status "$(basename "$R2")"
expect_rc 0
for t in a b c; do
  grep -E "^$t +cached .*cached from $(basename "$R1")\$" "$T/out" >/dev/null ||
    fail "status of $t: no 'cached from $(basename "$R1")': $(cat "$T/out")"
done
run_dagrun status "$(basename "$R2")" --json
/usr/bin/python3 - "$T/out" "$(basename "$R1")" <<'P' || fail "status --json cached_from: $(cat "$T/out")"
import json, sys
run = json.load(open(sys.argv[1]))
assert [t["cached_from"] for t in run["tasks"]] == [sys.argv[2]] * 3, run["tasks"]
P
run_dagrun status "$(basename "$R1")" --json
/usr/bin/python3 - "$T/out" <<'P' || fail "status --json of a run that ran: $(cat "$T/out")"
import json, sys
run = json.load(open(sys.argv[1]))
assert all("cached_from" in t and t["cached_from"] is None for t in run["tasks"]), run["tasks"]
P
run_dagrun status "$(basename "$R1")"
expect_not_in "$T/out" "cached from"

# Events say so too.
sleep 1
run_dagrun run c.yaml --events json
expect_rc 0
expect_in "$T/out" '"state":"cached"'
expect_in "$T/out" "\"cached_from\":\"$(basename "$R1")\""
log_is "a b c "

# A changed param: b and its downstream run, a stays cached; b reads a's
# cached output directory.
sed -i 's/tag: one/tag: two/' c.yaml
sleep 1
run_dagrun run c.yaml --plain
expect_rc 0
R4=$(newest cache)
log_is "a b c b c "
state_is "$R4" a cached
state_is "$R4" b success
state_is "$R4" c success
[ "$(tr '\n' ' ' < "$R4/c/out/f")" = "A two " ] ||
  fail "c got: $(cat "$R4/c/out/f")"

# The cached task's out/ directory is gone: it runs again (its
# downstream's fingerprint is unchanged, so they stay cached).
rm -rf "$R1/a/out"
sleep 1
run_dagrun run c.yaml --plain
expect_rc 0
R5=$(newest cache)
log_is "a b c b c a "
state_is "$R5" a success
state_is "$R5" b cached
state_is "$R5" c cached

# --no-cache runs everything.
sleep 1
run_dagrun run c.yaml --plain --no-cache
expect_rc 0
log_is "a b c b c a a b c "
state_is "$(newest cache)" a success

# cache: false on a task runs it (and only it).
sed -i 's/^    needs: \[b\]/    needs: [b]\n    cache: false/' c.yaml
sleep 1
run_dagrun run c.yaml --plain
expect_rc 0
log_is "a b c b c a a b c c "
state_is "$(newest cache)" a cached
state_is "$(newest cache)" c success

# A failed task is never a cache source.
cat > f.yaml <<'Y'
dag: failing
tasks:
  f:
    stage: exec
    cache: true
    env: {LOG: "${env:CACHE_LOG}"}
    with: {command: [sh, -c, 'echo f >> "$LOG"; exit 3']}
Y
: > "$CACHE_LOG"
run_dagrun run f.yaml --plain
expect_rc 1
sleep 1
run_dagrun run f.yaml --plain
expect_rc 1
log_is "f f "
state_is "$(newest failing)" f failed

# Outputs: a cached task's outputs resolve downstream; an output that is
# an absolute path and is gone makes the task run again.
export CACHE_DATA="$T/data"
touch "$CACHE_DATA"
cat > o.yaml <<'Y'
dag: outs
tasks:
  produce: {stage: outputs, with: {key: p, value: "${env:CACHE_DATA}"}}
  consume:
    stage: exec
    cache: true
    needs: [produce]
    with:
      command: [sh, -c, 'echo "$1 $2" > "$DAGRUN_OUT_DIR/got"', x, "${tasks.produce.outputs.p}", v1]
Y
run_dagrun run o.yaml --plain
expect_rc 0
sed -i 's/v1\]/v2]/' o.yaml
sleep 1
run_dagrun run o.yaml --plain
expect_rc 0
O2=$(newest outs)
state_is "$O2" produce cached
state_is "$O2" consume success
[ "$(cat "$O2/consume/out/got")" = "$CACHE_DATA v2" ] ||
  fail "consume got: $(cat "$O2/consume/out/got")"
# The cached task's outputs are in the new run too, written without error.
expect_in "$O2/produce/outputs.json" "\"p\""
expect_not_in "$T/err" "cannot write"
rm "$CACHE_DATA"
sleep 1
run_dagrun run o.yaml --plain
expect_rc 0
state_is "$(newest outs)" produce success

# A task downstream of one the cache may not serve (exec by default) is
# never served from the cache: the upstream ran again and may have made
# other files, which no fingerprint of its inputs can tell.
cat > fresh.yaml <<'Y'
dag: fresh
tasks:
  fetch:
    stage: exec
    env: {LOG: "${env:CACHE_LOG}"}
    with: {command: [sh, -c, 'echo fetch >> "$LOG"; date +%s%N > "$DAGRUN_OUT_DIR/data"']}
  use:
    stage: exec
    cache: true
    needs: [fetch]
    env: {LOG: "${env:CACHE_LOG}"}
    with: {command: [sh, -c, 'echo use >> "$LOG"; cp "$1" "$DAGRUN_OUT_DIR/copy"', x, "${tasks.fetch.dir}/data"]}
Y
: > "$CACHE_LOG"
run_dagrun run fresh.yaml --plain
expect_rc 0
sleep 1
run_dagrun run fresh.yaml --plain
expect_rc 0
log_is "fetch use fetch use "
state_is "$(newest fresh)" use success
cmp -s "$(newest fresh)/fetch/out/data" "$(newest fresh)/use/out/copy" ||
  fail "use copied another run's data"

# A bad `cache:` value is a check error at its position.
cat > bad.yaml <<'Y'
dag: bad
tasks:
  t:
    stage: exec
    cache: maybe
    with: {command: ["true"]}
Y
run_dagrun check bad.yaml
[ "$RC" -ne 0 ] || fail "check accepted cache: maybe"
expect_in "$T/err" "bad.yaml:5:12"
expect_in "$T/err" "'cache'"

# The live view on a terminal (script(1) gives dagrun one) says where a
# cached task came from too.
cat > tty.yaml <<Y
dag: tty
tasks:
  t: {stage: exec, cache: true, with: {command: [sh, -c, 'echo hi >> $T/tty.log']}}
Y
run_dagrun run tty.yaml --plain
expect_rc 0
TTY1=$(newest tty)
script -qec "$DAGRUN run tty.yaml" /dev/null > tty.out 2>&1 ||
  fail "run on a terminal failed: $(cat tty.out)"
expect_in tty.out "cached from run $(basename "$TTY1")"
[ "$(wc -l < tty.log)" -eq 1 ] || fail "the cached task ran again"

pass
