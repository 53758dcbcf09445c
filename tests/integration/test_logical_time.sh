# Logical time (issue 22): every run has a logical date and, when cron or a
# backfill started it, a data interval from the schedule's previous fire
# time to this one; both reach templates (${run.logical_date},
# ${run.data_interval_start}, ${run.data_interval_end}, ${run.date} as the
# day in the DAG's time zone) and every attempt's environment. The cache
# never takes a run for one interval from a run for another, and an exec
# task is not cached unless it says `cache: true`.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"

# Four fire times a day in Berlin (CET, +01:00, in November).
cat > six.yaml <<'Y'
dag: six
schedule: "0 */6 * * *"
timezone: Europe/Berlin
tasks:
  a:
    stage: exec
    with: {command: [sh, -c, 'echo "ld=${run.logical_date} s=${run.data_interval_start} e=${run.data_interval_end} d=${run.date}" >> "$0"', "${env:TRACE}"]}
Y
export TRACE="$T/six.trace"
run_dagrun backfill six.yaml --from 2026-11-02T00:00 --to 2026-11-02T23:59 -q
expect_rc 0
[ "$(wc -l < "$TRACE")" -eq 4 ] || fail "4 fire times, 4 commands; got: $(cat "$TRACE")"
for want in \
  "ld=2026-11-02T00:00:00+01:00 s=2026-11-01T18:00:00+01:00 e=2026-11-02T00:00:00+01:00 d=2026-11-02" \
  "ld=2026-11-02T06:00:00+01:00 s=2026-11-02T00:00:00+01:00 e=2026-11-02T06:00:00+01:00 d=2026-11-02" \
  "ld=2026-11-02T12:00:00+01:00 s=2026-11-02T06:00:00+01:00 e=2026-11-02T12:00:00+01:00 d=2026-11-02" \
  "ld=2026-11-02T18:00:00+01:00 s=2026-11-02T12:00:00+01:00 e=2026-11-02T18:00:00+01:00 d=2026-11-02"; do
  grep -qxF "$want" "$TRACE" || fail "missing '$want' in: $(cat "$TRACE")"
done

# ${run.date} is the day in the DAG's zone: 00:30 CET on Nov 1 is still
# Oct 31 in UTC.
cat > half.yaml <<'Y'
dag: half
schedule: "30 0 * * *"
timezone: Europe/Berlin
tasks:
  a:
    stage: exec
    with: {command: [sh, -c, 'echo "d=${run.date} ld=${run.logical_date} s=${run.data_interval_start}"']}
Y
run_dagrun backfill half.yaml --from 2026-11-01 --to 2026-11-01T12:00 -q
expect_rc 0
expect_in "$DAGRUN_RUNS_DIR"/half/*/a/attempt-1/log \
  "d=2026-11-01 ld=2026-11-01T00:30:00+01:00 s=2026-10-31T00:30:00+01:00"

# A scheduled exec command that mentions no ${run.*} runs at every fire:
# neither the interval nor the exec default lets the cache take it.
cat > plain.yaml <<'Y'
dag: plain
schedule: "* * * * *"
tasks:
  train:
    stage: exec
    with: {command: [sh, -c, 'echo training >> "$0"', "${env:TRACE}"]}
Y
export TRACE="$T/plain.trace"
run_dagrun run plain.yaml -q --trigger cron --logical-date 2026-11-21T10:00:00Z
expect_rc 0
run_dagrun run plain.yaml -q --trigger cron --logical-date 2026-11-21T10:01:00Z
expect_rc 0
run_dagrun run plain.yaml -q
expect_rc 0
[ "$(wc -l < "$TRACE")" -eq 3 ] || fail "3 runs, 3 commands; got $(wc -l < "$TRACE")"
run_dagrun runs --json
/usr/bin/python3 - "$T/out" <<'PY' || fail "runs: $(cat "$T/out")"
import json, sys
rs = [r for r in json.load(open(sys.argv[1])) if r["dag"] == "plain"]
assert len(rs) == 3, rs
assert all(r["logical_date"] > 0 for r in rs), rs
PY

# The same for an exec task that asks for the cache: another interval is
# other work; the same interval (a rerun) is a hit; manual reruns hit.
cat > cached.yaml <<'Y'
dag: cached
schedule: "0 * * * *"
tasks:
  a:
    stage: exec
    cache: true
    with: {command: [sh, -c, 'echo x >> "$0"', "${env:TRACE}"]}
Y
export TRACE="$T/cached.trace"
for t in 10 11 11; do
  run_dagrun run cached.yaml -q --trigger cron --logical-date 2026-11-21T$t:00:00Z
  expect_rc 0
done
[ "$(wc -l < "$TRACE")" -eq 2 ] || fail "2 intervals, 2 commands; got $(wc -l < "$TRACE")"
run_dagrun run cached.yaml -q
run_dagrun run cached.yaml -q
[ "$(wc -l < "$TRACE")" -eq 3 ] || fail "a manual rerun hits the cache; got $(wc -l < "$TRACE")"

# The environment of an exec attempt.
cat > env.yaml <<'Y'
dag: envd
schedule: "0 0 * * *"
timezone: Europe/Berlin
tasks:
  a:
    stage: exec
    with: {command: [sh, -c, 'echo "L=$DAGRUN_LOGICAL_DATE S=$DAGRUN_DATA_INTERVAL_START E=$DAGRUN_DATA_INTERVAL_END R=$DAGRUN_RUN_ID T=$DAGRUN_TRIGGER"']}
Y
run_dagrun run env.yaml -q --run-id e1 --trigger backfill --logical-date 2026-11-03
expect_rc 0
expect_in "$DAGRUN_RUNS_DIR/envd/e1/a/attempt-1/log" \
  "L=2026-11-03T00:00:00+01:00 S=2026-11-02T00:00:00+01:00 E=2026-11-03T00:00:00+01:00 R=e1 T=backfill"
# A manual run with --logical-date: no interval, so both ends are the date.
run_dagrun run env.yaml -q --run-id e2 --logical-date 2026-07-01T12:00:00Z
expect_rc 0
expect_in "$DAGRUN_RUNS_DIR/envd/e2/a/attempt-1/log" \
  "L=2026-07-01T14:00:00+02:00 S=2026-07-01T14:00:00+02:00 E=2026-07-01T14:00:00+02:00 R=e2 T=manual"
# A manual run without one: the logical date is its start.
run_dagrun run env.yaml -q --run-id e3
expect_rc 0
grep -q "L=20[0-9-]*T[0-9:]*+0[12]:00 .* T=manual" "$DAGRUN_RUNS_DIR/envd/e3/a/attempt-1/log" ||
  fail "no logical date for a manual run: $(cat "$DAGRUN_RUNS_DIR/envd/e3/a/attempt-1/log")"

# --logical-date without an offset is local to the DAG's zone; a bad value
# is a usage error that runs nothing.
run_dagrun run env.yaml -q --run-id e4 --logical-date 2026-11-03T05:00
expect_rc 0
expect_in "$DAGRUN_RUNS_DIR/envd/e4/a/attempt-1/log" "L=2026-11-03T05:00:00+01:00"
run_dagrun run env.yaml -q --run-id e5 --logical-date 2026-13-45
expect_rc 2
expect_in "$T/err" "--logical-date takes a time such as"
[ ! -e "$DAGRUN_RUNS_DIR/envd/e5" ] || fail "a refused --logical-date made a run"
pass
