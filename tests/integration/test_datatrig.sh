# Data triggers under `dagrun serve`, for real: a file landing under a
# watched glob starts exactly one run (one per settled batch), a file still
# being written does not start one until it has settled, a file that
# arrived while serve was down starts a run at the next start; a dataset
# that DAG A's task produces starts DAG B with the dataset's version and the
# producer's outputs in its templates, a missed update included; `dagrun
# runs`, `status` and the API show what started each run; `dagrun check`
# points at bad `on:` and `produces:` keys.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"
mkdir -p dags incoming seen

# ---- dagrun check: bad keys, with file:line:col ----
cat > bad.yaml <<'Y'
dag: bad
on:
  files: {glob: "in/*.txt", settle: soon}
  dataset: [x]
tasks:
  a: {stage: exec, produces: ["no way"], with: {command: [true]}}
  b: {stage: exec, produces: [], with: {command: [true]}}
Y
run_dagrun check bad.yaml
expect_rc 2
expect_in "$T/err" "bad.yaml:3:37: error: 'on.files.settle': expected a duration such as 30s or 2m, found \"soon\""
expect_in "$T/err" "bad.yaml:4:3: error: unknown key 'dataset' in 'on'; expected files or datasets"
expect_in "$T/err" "bad.yaml:6:31: error: 'produces' in task 'a': a dataset name takes letters, digits, '_', '-' and '.', found \"no way\""
expect_in "$T/err" "bad.yaml:7:30: error: 'produces' in task 'b': the list is empty"
cat > bad2.yaml <<'Y'
dag: bad2
on: {files: {settle: 1s}}
tasks:
  a: {stage: exec, with: {command: [true]}}
Y
run_dagrun check bad2.yaml
expect_rc 2
expect_in "$T/err" "bad2.yaml:2:13: error: 'on.files': missing required key 'glob'"
# check_bad ON_LINE TASK_LINE MESSAGE: a DAG with those lines is refused
# with MESSAGE.
check_bad() {
  printf 'dag: b\n%s\ndefaults: {retries: 0}\ntasks:\n  a: {stage: exec, %swith: {command: [true]}}\n' "$1" "$2" > b.yaml
  run_dagrun check b.yaml
  expect_rc 2
  expect_in "$T/err" "$3"
}
check_bad 'on: {}' '' "b.yaml:2:5: error: 'on': expected files and/or datasets, found an empty map"
check_bad 'on: [files]' '' "b.yaml:2:5: error: 'on': expected a map with files and/or datasets, found a list"
check_bad 'on: {files: {glob: "in/"}}' '' "b.yaml:2:20: error: 'on.files.glob': \"in/\" names directories"
check_bad 'on: {datasets: [a, a]}' '' "b.yaml:2:20: error: 'on.datasets': dataset 'a' is named twice"
check_bad 'on: {datasets: x, files: {glob: "*.txt", when: now}}' '' "unknown key 'when' in 'on.files'; expected glob or settle"
check_bad '' 'produces: {a: 1}, ' "'produces' in task 'a': expected a dataset name or a list of them, found a map"
sed -i 's/^defaults: .*/defaults: {produces: x}/' b.yaml
run_dagrun check b.yaml
expect_rc 2
expect_in "$T/err" "'produces' cannot be set in defaults"

# ---- the DAGs ----
# watch: runs on *.txt landing in incoming/, records what it was given.
cat > dags/watch.yaml <<Y
dag: watch
on:
  files: {glob: "$T/incoming/*.txt", settle: 2s}
overlap: queue
tasks:
  list:
    stage: exec
    cache: false
    with:
      command: [sh, -c, 'printf "%s" "\$1" > "$T/seen/\$2.files"', sh,
                "\${run.trigger_files}", "\${run.id}"]
Y
# deep: a glob with a wildcard directory (no inotify watch: a scan on
# every poll).
cat > dags/deep.yaml <<Y
dag: deep
on: {files: {glob: "$T/deep/*/*.csv", settle: 1s}}
tasks:
  a: {stage: exec, cache: false, with: {command: [true]}}
Y
# flaky: fails until $T/ok exists; a resume sees the same trigger files.
cat > dags/flaky.yaml <<Y
dag: flaky
on: {files: {glob: "$T/flaky/*.txt", settle: 1s}}
tasks:
  a:
    stage: exec
    cache: false
    with:
      command: [sh, -c, '[ -e "$T/ok" ] || exit 3; printf "%s" "\$1" > "$T/seen/flaky"',
                sh, "\${run.trigger_files}"]
Y
# prod: its task makes a new version of dataset "tokens", with an output.
cat > prod.yaml <<Y
dag: prod
tasks:
  make:
    stage: exec
    cache: false
    produces: tokens
    outputs: [path]
    with:
      command: [sh, -c, 'echo "{\"path\": \"$T/shard-\$1\"}" > "\$DAGRUN_OUTPUTS"',
                sh, "\${run.id}"]
Y
# cons: runs on each update of "tokens".
cat > dags/cons.yaml <<Y
dag: cons
on: {datasets: [tokens]}
tasks:
  use:
    stage: exec
    cache: false
    with:
      command: [sh, -c, 'printf "%s %s %s" "\$1" "\$2" "\$3" > "$T/seen/cons-\$2"',
                sh, "\${run.trigger_dataset}", "\${run.trigger_dataset_version}",
                "\${run.trigger_dataset_outputs}"]
Y
run_dagrun check dags/watch.yaml
expect_rc 0
# --trigger files|dataset is serve's: without what triggered the run, no run.
run_dagrun run dags/watch.yaml --trigger files
expect_rc 2
expect_in "$T/err" "--trigger files needs \$DAGRUN_TRIGGER_INFO, a JSON object"
[ ! -d "$DAGRUN_RUNS_DIR/watch" ] || [ -z "$(ls "$DAGRUN_RUNS_DIR/watch")" ] ||
  fail "a refused run left a run directory"
run_dagrun check dags/cons.yaml
expect_rc 0

# runs_of DAG: how many runs of DAG the store has.
runs_of() {
  "$DAGRUN" runs "$1" -n 100 --json 2>/dev/null |
    "$PY" -c 'import json,sys; print(len(json.load(sys.stdin)))'
}
# done_runs DAG N: N runs of DAG have succeeded.
done_runs() {
  [ "$("$DAGRUN" runs "$1" -n 100 --json | "$PY" -c '
import json, sys
print(sum(r["state"] == "success" for r in json.load(sys.stdin)))')" -eq "$2" ]
}

# A file present before the DAG was first seen is not new (a schedule
# starts from now too).
echo old > incoming/old.txt
serve_start --log serve1.log
wait_until 10 grep -q "loaded dag watch" serve1.log || fail "watch not loaded"
sleep 3
[ "$(runs_of watch)" -eq 0 ] || fail "a file present at the first sight started a run"

# A half-written file: appended to every 0.5 s for 4 s, past the 2 s
# settle time; no run while it grows, exactly one once it settled.
( for i in 1 2 3 4 5 6 7 8; do echo "line $i" >> incoming/a.txt; sleep 0.5; done ) &
WRITER=$!
while pid_alive "$WRITER"; do
  [ "$(runs_of watch)" -eq 0 ] || fail "a run started while incoming/a.txt was still growing"
  sleep 0.2
done
wait "$WRITER"
wait_until 15 done_runs watch 1 || fail "no run after a.txt settled: $(cat serve1.log)"
sleep 3
[ "$(runs_of watch)" -eq 1 ] || fail "a settled file started more than one run"
ID=$("$DAGRUN" runs watch -n 100 --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
[ "$(cat "seen/$ID.files")" = "$T/incoming/a.txt" ] || fail "\${run.trigger_files}: $(cat "seen/$ID.files")"

# Three files at once: one run, given all three (sorted).
echo 1 > incoming/c.txt; echo 2 > incoming/b.txt; echo 3 > incoming/d.txt
echo skip > incoming/not-matched.dat
wait_until 15 done_runs watch 2 || fail "no run for the batch: $(cat serve1.log)"
sleep 3
[ "$(runs_of watch)" -eq 2 ] || fail "a batch of three files started more than one run"
ID=$("$DAGRUN" runs watch -n 100 --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
printf '%s\n%s\n%s' "$T/incoming/b.txt" "$T/incoming/c.txt" "$T/incoming/d.txt" > want
cmp -s want "seen/$ID.files" || fail "batch files: $(cat "seen/$ID.files")"
mkdir -p deep/x deep/y
echo 1 > deep/x/1.csv; echo 2 > deep/y/2.csv
wait_until 15 done_runs deep 1 || fail "no run for deep/*/*.csv: $(cat serve1.log)"
sleep 2
[ "$(runs_of deep)" -eq 1 ] || fail "deep: more than one run for one batch"
run_dagrun runs deep
expect_in "$T/out" "2 files: $T/deep/x/1.csv, ..."

# A data-triggered run that failed, resumed by hand: the same files.
mkdir -p flaky
echo f > flaky/f.txt
failed_run() {
  [ "$("$DAGRUN" runs flaky --json | "$PY" -c 'import json,sys; r=json.load(sys.stdin); print(r[0]["state"] if r else "")')" = failed ]
}
wait_until 15 failed_run || fail "flaky did not run and fail: $(cat serve1.log)"
FL=$("$DAGRUN" runs flaky --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
touch ok
run_dagrun resume "$FL" -q
expect_rc 0
[ "$(cat seen/flaky)" = "$T/flaky/f.txt" ] || fail "resumed run's \${run.trigger_files}: $(cat seen/flaky)"
run_dagrun runs watch
expect_in "$T/out" "files"
expect_in "$T/out" "3 files: $T/incoming/b.txt, ..."
run_dagrun status "$ID"
expect_in "$T/out" "triggered by 3 files: $T/incoming/b.txt"
"$PY" - "$PORT" "$ID" <<'P' || fail "API run object"
import json, sys, urllib.request
port, rid = sys.argv[1:3]
run = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs/{rid}"))
assert run["trigger"] == "files", run["trigger"]
assert [f.rsplit("/", 1)[1] for f in run["trigger_info"]["files"]] == ["b.txt", "c.txt", "d.txt"], run
dags = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/dags"))
w = [d for d in dags["dags"] if d["name"] == "watch"][0] if isinstance(dags, dict) else [d for d in dags if d["name"] == "watch"][0]
assert w["on"]["files"]["settle_s"] == 2, w
P

# The dashboard shows what started a data-triggered run: in the runs
# table and in the run's view (every file in its tooltip).
cat >dt_check.py <<'P'
import sys
chromium, cdp_dir, profile, port, rid, files = sys.argv[1:7]
sys.path.insert(0, cdp_dir)
from cdp import Browser
with Browser(chromium, profile) as b:
    b.open(f"http://127.0.0.1:{port}/#dag=watch")
    sel = f"document.querySelector('.compare-tick[data-run=\"{rid}\"]')"
    b.wait_for(f"{sel} !== null", "the run in watch's table")
    cell = b.js(f"{sel}.closest('tr').querySelector('.run-trigger').textContent")
    assert cell.startswith("files: 3 files: ") and cell.endswith("/incoming/b.txt, ..."), cell
    tip = b.js(f"{sel}.closest('tr').querySelector('.run-trigger').title")
    assert tip == files, (tip, files)
    b.js(f"{sel}.closest('tr').click()")
    b.wait_for("document.getElementById('run-meta').textContent.includes('triggered by 3 files: ')", "the run's view")
    assert b.js("document.getElementById('run-meta').title") == files
    print("dashboard trigger info: ok")
P
need_chromium
browser_check "dashboard trigger info" dt_check.py "$PORT" "$ID" "$(cat want)"

# ---- datasets: prod's success starts cons with the version ----
run_dagrun run prod.yaml
expect_rc 0
wait_until 15 done_runs cons 1 || fail "the dataset update did not start cons: $(cat serve1.log)"
PROD1=$("$DAGRUN" runs prod -n 100 --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
[ "$(cat seen/cons-1)" = "tokens 1 {\"path\":\"$T/shard-$PROD1\"}" ] || fail "cons's templates: $(cat seen/cons-1)"
run_dagrun runs cons
expect_in "$T/out" "dataset tokens v1"
serve_stop

# ---- while serve is down: a file lands and prod runs again ----
echo late > incoming/e.txt
run_dagrun run prod.yaml
expect_rc 0
serve_start --log serve2.log
wait_until 20 done_runs watch 3 || fail "a file that arrived while serve was down started no run: $(cat serve2.log)"
wait_until 15 done_runs cons 2 || fail "a dataset update while serve was down started no run: $(cat serve2.log)"
ID=$("$DAGRUN" runs watch -n 100 --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
[ "$(cat "seen/$ID.files")" = "$T/incoming/e.txt" ] || fail "after downtime: $(cat "seen/$ID.files")"
expect_in seen/cons-2 "tokens 2 "
sleep 3
[ "$(runs_of watch)" -eq 3 ] || fail "the restart ran a file twice"
[ "$(runs_of cons)" -eq 2 ] || fail "the restart ran a dataset version twice"
serve_stop

# ---- examples/data-triggers as its README says to try it ----
cp -r "$DAGRUN_SOURCE_DIR/examples/data-triggers" ex
mkdir -p ex/incoming
export DAGRUN_HOME="$T/home-ex"
serve_start --log ex.log --dags ex
wait_until 10 grep -q "loaded dag evaluate" ex.log || fail "example not loaded: $(cat ex.log)"
sleep 1 # evaluate has seen text_shards (no version yet) before shards runs
seq 100 > ex/incoming/part-1.txt
wait_until 30 done_runs evaluate 1 || fail "the example pair did not run: $(cat ex.log)"
EV=$("$DAGRUN" runs evaluate --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
run_dagrun logs "$EV" count
expect_in "$T/out" "text_shards v1: "
expect_in "$T/out" "shard.txt has 100 lines"
serve_stop
pass
