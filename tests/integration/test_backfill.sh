# `dagrun backfill` runs a scheduled DAG once per schedule time in a range,
# in its time zone, with ${run.date} the schedule time's date and the run
# recorded as a backfill for that time; it skips what already succeeded
# and a time whose run is going, goes on past a failed run, and refuses
# bad ranges. Also the run options it is built on: --param, --run-id,
# --logical-date, --trigger.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"

cat > s.yaml <<'Y'
dag: sched
schedule: "30 1 * * *"
timezone: America/New_York
params: {n: 1, who: world}
tasks:
  a:
    stage: exec
    with: {command: [sh, -c, 'echo "date=${run.date} n=${params.n} who=${params.who}"; test ${params.n} != 7 || exit 3']}
Y

# Run options: typed overrides, a chosen id, a logical date, a trigger.
run_dagrun run s.yaml -q -p n=5 --param who=x --run-id first \
  --logical-date 2026-01-02T03:04:05Z --trigger cron
expect_rc 0
# 03:04Z on Jan 2 is 22:04 on Jan 1 in New York: the DAG's day.
expect_in "$DAGRUN_RUNS_DIR/sched/first/a/attempt-1/log" "date=2026-01-01 n=5 who=x"
run_dagrun status first --json
/usr/bin/python3 - "$T/out" <<'PY' || fail "status of run first: $(cat "$T/out")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["trigger"] == "cron", r
assert r["logical_date"] == 1767323045, r["logical_date"]
assert r["params"] == {"n": 5, "who": "x"}, r["params"]
PY
run_dagrun run s.yaml -q --run-id first
expect_rc 2
expect_in "$T/err" "run first already exists"
run_dagrun run s.yaml -q -p n=abc
expect_rc 2
expect_in "$T/err" "param 'n' is a number in the DAG; 'abc' is not"
run_dagrun run s.yaml -q -p nn=1
expect_rc 2
expect_in "$T/err" "unknown param 'nn'; did you mean 'n'?"
run_dagrun run s.yaml -q --trigger cronn
expect_rc 2
run_dagrun run s.yaml -q --run-id ../escape
expect_rc 2
run_dagrun run s.yaml -q --logical-date yesterday
expect_rc 2
[ ! -e "$T/escape" ] || fail "--run-id ../escape made a directory outside runs/"
[ "$(ls "$DAGRUN_RUNS_DIR/sched" | wc -l)" -eq 1 ] || fail "refused runs left directories: $(ls "$DAGRUN_RUNS_DIR/sched")"
# An empty directory of that id is a run killed before it was recorded:
# the id is free again.
mkdir "$DAGRUN_RUNS_DIR/sched/killed"
run_dagrun run s.yaml -q --run-id killed
expect_rc 0
run_dagrun status killed
expect_in "$T/out" "success"

# Three days across the spring-forward night (2026-03-08 in New York):
# 01:30 exists every day; times are local; the dates are the schedule's.
run_dagrun backfill s.yaml --from 2026-03-07 --to 2026-03-09T12:00 -q -p n=2
expect_rc 0
expect_in "$T/out" "backfill 1/3: 2026-03-07T01:30:00-05:00 EST  (2026-03-07T06:30:00Z)"
expect_in "$T/out" "backfill 2/3: 2026-03-08T01:30:00-05:00 EST  (2026-03-08T06:30:00Z)"
expect_in "$T/out" "backfill 3/3: 2026-03-09T01:30:00-04:00 EDT  (2026-03-09T05:30:00Z)"
expect_in "$T/out" "backfill sched: 3 runs, 0 failed, 0 skipped"
for d in 2026-03-07 2026-03-08 2026-03-09; do
  grep -l "date=$d n=2 who=world" "$DAGRUN_RUNS_DIR"/sched/*/a/attempt-1/log >/dev/null ||
    fail "no backfill run with date=$d"
done
run_dagrun runs sched --json
/usr/bin/python3 - "$T/out" <<'PY' || fail "backfill runs: $(cat "$T/out")"
import json, sys
runs = [r for r in json.load(open(sys.argv[1])) if r.get("trigger") == "backfill"]
assert sorted(r["logical_date"] for r in runs) == [1772865000, 1772951400, 1773034200], runs
assert all(r["state"] == "success" for r in runs), runs
PY

# Again over a wider range: the three are skipped, one new day runs.
run_dagrun backfill s.yaml --from 2026-03-07 --to 2026-03-10T02:00 -q
expect_rc 0
expect_in "$T/out" "backfill 1/4: 2026-03-07T01:30:00-05:00 EST  (2026-03-07T06:30:00Z): skipped, run"
expect_in "$T/out" "backfill sched: 1 run, 0 failed, 3 skipped"
# --rerun runs a succeeded day again; --dry-run only lists.
run_dagrun backfill s.yaml --from 2026-03-07 --to 2026-03-07T23:00 -q --rerun --dry-run
expect_rc 0
expect_in "$T/out" "backfill 1/1: 2026-03-07T01:30:00-05:00 EST"
expect_in "$T/out" "0 runs, 0 failed, 0 skipped (dry run)"
n_before=$(ls "$DAGRUN_RUNS_DIR/sched" | wc -l)

# A failing day does not stop the others; the exit status says so.
run_dagrun backfill s.yaml --from 2026-04-01 --to 2026-04-02T12:00 -q -p n=7
expect_rc 1
expect_in "$T/out" "backfill sched: 2 runs, 2 failed, 0 skipped"
[ "$(ls "$DAGRUN_RUNS_DIR/sched" | wc -l)" -eq $((n_before + 2)) ] || fail "expected 2 more runs"

# A time whose run is going (by hand here; serve's, or another
# backfill's, alike) is skipped, even with --rerun: two runs of one
# logical date at once would race on its outputs.
cat > hold.yaml <<Y
dag: sched
schedule: "30 1 * * *"
timezone: America/New_York
tasks:
  a: {stage: exec, with: {command: [sh, -c, 'while [ ! -e "$T/release" ]; do sleep 0.05; done']}}
Y
"$DAGRUN" run hold.yaml -q --run-id hold --logical-date 2026-05-01T05:30:00Z --trigger backfill >hold.out 2>&1 &
HOLD=$!
wait_until 20 store_run_is hold running || fail "the held run did not start: $(cat hold.out)"
run_dagrun backfill s.yaml --from 2026-04-30T12:00 --to 2026-05-01T12:00 -q --rerun
expect_rc 0
expect_in "$T/out" "backfill 1/1: 2026-05-01T01:30:00-04:00 EDT  (2026-05-01T05:30:00Z): skipped, run hold is going"
expect_in "$T/out" "backfill sched: 0 runs, 0 failed, 1 skipped"
touch "$T/release"
wait "$HOLD" || fail "the held run failed: $(cat hold.out)"

# Bad ranges and DAGs.
run_dagrun backfill s.yaml --from 2026-03-05 --to 2026-03-01
expect_rc 2
expect_in "$T/err" "to (2026-03-01) is before from (2026-03-05)"
run_dagrun backfill s.yaml --from 2026-03-05T02:00 --to 2026-03-05T03:00
expect_rc 2
expect_in "$T/err" "no schedule time of sched"
run_dagrun backfill s.yaml --from 2020-01-01 --to 2026-03-06
expect_rc 2
expect_in "$T/err" "more than 1000 schedule times"
run_dagrun backfill s.yaml --from 2026-13-01 --to 2026-03-06
expect_rc 2
expect_in "$T/err" "2026-13-01"
# A day the month lacks was taken as the next month's (2025-02-30 as
# March 2), and a year before 1900 ended in "time ... is out of range".
for d in 2025-02-30 2026-04-31 0001-01-01; do
  run_dagrun backfill s.yaml --from "$d" --to 2026-03-06
  expect_rc 2
  expect_in "$T/err" "from and to take times such as 2026-11-01 or 2026-11-01T02:30 (local in the DAG's timezone) or 2026-11-01T01:30:00Z, got '$d'"
done
run_dagrun backfill s.yaml --from 2026-03-01 --to 2026-03-02 --run-id x
expect_rc 2
cat > plain.yaml <<'Y'
dag: plain
tasks: {a: {stage: exec, with: {command: [true]}}}
Y
run_dagrun backfill plain.yaml --from 2026-03-01 --to 2026-03-02
expect_rc 2
expect_in "$T/err" "has no schedule"
pass
