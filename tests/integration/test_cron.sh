# Cron triggers as a user checks them: `dagrun cron-next` across the DST
# transitions (the gap runs once at 03:00, a fixed time once in the repeat,
# a `*`-minute job in real time), each line's local time agreeing with
# date(1) from the same tz database; bad expressions and zones exit 2 with
# the column; `dagrun check` points at the bad token of a schedule.
. "$(dirname "$0")/lib.sh"

# New York, spring forward 2026-03-08 02:00 EST -> 03:00 EDT.
run_dagrun cron-next "30 2 * * *" --tz America/New_York --from 2026-03-07T12:00:00Z -n 3
expect_rc 0
cat > want <<'W'
2026-03-08T03:00:00-04:00 EDT  (2026-03-08T07:00:00Z)
2026-03-09T02:30:00-04:00 EDT  (2026-03-09T06:30:00Z)
2026-03-10T02:30:00-04:00 EDT  (2026-03-10T06:30:00Z)
W
diff want "$T/out" || fail "cron-next across the New York spring-forward"

# Berlin, fall back 2026-10-25 03:00 CEST -> 02:00 CET: every 30 minutes
# in real time (02:00 and 02:30 twice); --from in local time.
run_dagrun cron-next "*/30 * * * *" --tz Europe/Berlin --from 2026-10-25T01:45 -n 6
expect_rc 0
cat > want <<'W'
2026-10-25T02:00:00+02:00 CEST  (2026-10-25T00:00:00Z)
2026-10-25T02:30:00+02:00 CEST  (2026-10-25T00:30:00Z)
2026-10-25T02:00:00+01:00 CET  (2026-10-25T01:00:00Z)
2026-10-25T02:30:00+01:00 CET  (2026-10-25T01:30:00Z)
2026-10-25T03:00:00+01:00 CET  (2026-10-25T02:00:00Z)
2026-10-25T03:30:00+01:00 CET  (2026-10-25T02:30:00Z)
W
diff want "$T/out" || fail "cron-next across the Berlin fall-back"

# A fixed time in the repeated hour fires once.
run_dagrun cron-next "30 2 * * *" --tz Europe/Berlin --from 2026-10-24T12:00:00Z -n 2
expect_rc 0
expect_in "$T/out" "2026-10-25T02:30:00+02:00 CEST  (2026-10-25T00:30:00Z)"
expect_in "$T/out" "2026-10-26T02:30:00+01:00 CET  (2026-10-26T01:30:00Z)"

# The local side of every line agrees with date(1).
for zone in America/New_York Europe/Berlin; do
  run_dagrun cron-next "@hourly" --tz "$zone" --from 2026-03-07T00:00:00Z -n 60
  expect_rc 0
  while read -r local abbr utc; do
    u=${utc#(}
    u=${u%Z)}
    ref=$(TZ=$zone date -d "${u}Z" '+%Y-%m-%dT%H:%M:%S%:z %Z')
    [ "$local $abbr" = "$ref" ] || fail "$zone: $local $abbr for $utc, date(1) says $ref"
  done <"$T/out"
done

# Errors: the column of the bad token, exit 2.
run_dagrun cron-next "0 24 * * *"
expect_rc 2
expect_in "$T/err" "column 3: hour: 24 is out of range 0-23"
run_dagrun cron-next "@daily" --tz Mars/Base
expect_rc 2
expect_in "$T/err" "unknown time zone 'Mars/Base'"
# A schedule that never fires is refused at its day-of-month; the edge
# cases that do fire are not.
run_dagrun cron-next "0 0 30 2 *"
expect_rc 2
expect_in "$T/err" "column 5: day-of-month: '30' never falls in month '2' (at most 29 days): the schedule never fires"
run_dagrun cron-next "0 0 31 4,6,9,11 *"
expect_rc 2
expect_in "$T/err" "never fires"
run_dagrun cron-next "0 0 29 2 *" --from 2026-01-01T00:00:00Z -n 2
expect_rc 0
expect_in "$T/out" "2028-02-29T00:00:00+00:00"
expect_in "$T/out" "2032-02-29T00:00:00+00:00"
run_dagrun cron-next "0 0 30 2 1" --from 2026-01-01T00:00:00Z -n 1
expect_rc 0
expect_in "$T/out" "2026-02-02T00:00:00+00:00"
run_dagrun cron-next "* * * *" -n 0
expect_rc 2

# dagrun check: the bad token of a schedule at file:line:col.
cat > sched.yaml <<'Y'
dag: nightly
schedule: "15 3 * * MON-FUN"
timezone: Europe/Berlin
tasks:
  a: {stage: exec, with: {command: ["true"]}}
Y
run_dagrun check sched.yaml
expect_rc 2
expect_in "$T/err" "sched.yaml:2:25: error: 'schedule': day-of-week: 'FUN' is not a number or a day name (SUN-SAT)"
sed -i 's/MON-FUN/MON-FRI/; s#Europe/Berlin#Europe/Berlyn#' sched.yaml
run_dagrun check sched.yaml
expect_rc 2
expect_in "$T/err" "sched.yaml:3:11: error: 'timezone': unknown time zone 'Europe/Berlyn'"
sed -i 's#Europe/Berlyn#Europe/Berlin#' sched.yaml
run_dagrun check sched.yaml
expect_rc 0

# A schedule that never fires: an error at its line and column, reported
# with every other error of the file (each bad field too); run and serve
# refuse the file.
cat > never.yaml <<'Y'
dag: never
schedule: "0 0 30 2 *"
tasks:
  a: {stage: exec, with: {command: ["true"]}}
Y
run_dagrun check never.yaml
expect_rc 2
expect_in "$T/err" "never.yaml:2:16: error: 'schedule': day-of-month: '30' never falls in month '2' (at most 29 days): the schedule never fires"
run_dagrun run never.yaml
expect_rc 2
expect_in "$T/err" "never.yaml:2:16: error: 'schedule'"
[ -d "$DAGRUN_RUNS_DIR/never" ] && fail "a DAG whose schedule never fires ran"
mkdir -p serve-dags
cp never.yaml serve-dags/
DAGRUN_HOME="$T/home" serve_start --dags serve-dags --no-cron
serve_stop
expect_in serve.log "serve-dags/never.yaml does not load"
expect_in serve.log "never.yaml:2:16: error: 'schedule': day-of-month: '30' never falls in month '2'"
expect_not_in serve.log "loaded dag never"
cat > many.yaml <<'Y'
dag: many
schedule: "61 25 31 4 *"
timezone: Europe/Berlyn
tasks:
  a: {stage: exec, with: {command: ["true"]}}
Y
run_dagrun check many.yaml
expect_rc 2
expect_in "$T/err" "many.yaml:2:12: error: 'schedule': minute: 61 is out of range 0-59"
expect_in "$T/err" "many.yaml:2:15: error: 'schedule': hour: 25 is out of range 0-23"
expect_in "$T/err" "many.yaml:3:11: error: 'timezone': unknown time zone 'Europe/Berlyn'"

pass
