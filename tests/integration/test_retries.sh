# Retries are counted and spaced by the backoff; retry_on limits which exit
# codes are retried, and a task it stops says so; each attempt has its own
# log directory.
. "$(dirname "$0")/lib.sh"

cat > rt.yaml <<Y
dag: rt
defaults: {retry_delay: 200ms, retry_backoff: 2, retry_jitter: 0}
tasks:
  # Fails twice (exit 3), then succeeds: 3 attempts with 2 retries.
  flaky:
    stage: flaky
    retries: 2
    with: {counter_file: $T/flaky.count, fail_times: 2, exit_code: 3}
  # Fails 5 times but has 1 retry: fails for good after 2 attempts.
  stubborn:
    stage: flaky
    retries: 1
    with: {counter_file: $T/stubborn.count, fail_times: 5, exit_code: 3}
  # Exit 3 is not in retry_on: no retry despite retries: 3.
  picky:
    stage: flaky
    retries: 3
    retry_on: [75]
    with: {counter_file: $T/picky.count, fail_times: 5, exit_code: 3}
  # Exit 75 is in retry_on: retried.
  temp:
    stage: flaky
    retries: 3
    retry_on: [75]
    with: {counter_file: $T/temp.count, fail_times: 1, exit_code: 75}
Y
run_dagrun run rt.yaml --events json
expect_rc 1
R=$(run_dir rt)
check() { # task state attempts
  [ "$(task_field "$R" "$1" state)" = "$2" ] || fail "$1 state: $(task_field "$R" "$1" state), expected $2"
  [ "$(task_field "$R" "$1" attempts)" = "$3" ] || fail "$1 attempts: $(task_field "$R" "$1" attempts), expected $3"
  local n
  n=$(ls -d "$R/$1"/attempt-* | wc -l)
  [ "$n" = "$3" ] || fail "$1 has $n attempt directories, expected $3"
}
check flaky success 3
check stubborn failed 2
check picky failed 1
check temp success 2
[ "$(cat "$T/flaky.count")" = 3 ] || fail "flaky ran $(cat "$T/flaky.count") times"
# The retry delays follow the backoff: 200 ms, then 400 ms.
/usr/bin/python3 -c '
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
waits = [e["retry_in_s"] for e in ev if e.get("task") == "flaky" and e["state"] == "retry_wait"]
assert waits == [0.2, 0.4], waits
fails = [e for e in ev if e.get("task") == "stubborn" and e["state"] == "failed"]
assert fails[0]["attempt"] == 2 and fails[0]["exit_code"] == 3, fails
# stubborn used its retries: nothing to explain.
assert "not retried" not in fails[0]["reason"], fails
' "$T/out" || fail "retry events: $(grep flaky "$T/out")"
# picky failed with retries left: its reason says why they were not used,
# on the run's line, in its summary and in status.
NOT='not retried: exit 3 is not in retry_on [75]'
[ "$(task_field "$R" picky reason)" = "exit 3: flaky: failure 1 of 5 (on purpose); $NOT" ] ||
  fail "picky reason: $(task_field "$R" picky reason)"
run_dagrun run rt.yaml --plain --no-cache
expect_rc 1
grep "picky: failed (exit 3: " "$T/out" | grep -F "; $NOT) after " | grep -q ", attempt 1/4$" ||
  fail "picky's line: $(cat "$T/out")"
expect_in "$T/out" "  picky failed: exit 3: flaky: failure 2 of 5 (on purpose); $NOT"
run_dagrun status "$(basename "$(run_dir rt)")"
expect_rc 0
grep -E "^picky +failed +1 +3 " "$T/out" | grep -qF "(on purpose); $NOT" || fail "status: $(cat "$T/out")"
pass
