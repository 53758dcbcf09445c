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
run_dagrun cron-next "0 0 30 2 *"
expect_rc 2
expect_in "$T/err" "no fire time in 5 years"
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

pass
