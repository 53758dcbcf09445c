# A task past its timeout is stopped with SIGTERM, then SIGKILL after the
# grace period, and everything it started dies with it, grandchildren
# included. The failure says why.
. "$(dirname "$0")/lib.sh"

# The grandchild ignores SIGTERM, so only the SIGKILL after the grace
# period can end it.
write_term_ignorer grandchild.sh
cat > to.yaml <<Y
dag: to
tasks:
  slow:
    stage: exec
    timeout: 1s
    kill_grace: 1s
    with:
      command: [sh, -c, 'sh $T/grandchild.sh $T/grandchild.pid & wait']
Y
start=$(date +%s.%N)
run_dagrun run to.yaml --plain
end=$(date +%s.%N)
expect_rc 1
expect_in "$T/out" "slow: failed (timed out after 1.0s)"
[ -s "$T/grandchild.pid" ] || fail "the grandchild never started"
gc=$(cat "$T/grandchild.pid")
pid_alive "$gc" && fail "grandchild $gc survived the timeout"
/usr/bin/python3 -c "import sys; d=$end-$start; sys.exit(0 if d < 10 else 1)" \
  || fail "dagrun took too long ($start .. $end) to stop a 1 s timeout"
R=$(run_dir to)
[ "$(task_field "$R" slow reason)" = "timed out after 1.0s" ] || fail "run.json reason: $(task_field "$R" slow reason)"
pass
