# Plugins that segfault, abort or hang take down only their own attempt:
# each attempt fails with a reason that says what happened, is retried as
# configured, and dagrun itself carries on and reports.
. "$(dirname "$0")/lib.sh"

cat > crash.yaml <<'Y'
dag: crash
defaults: {retry_delay: 100ms}
tasks:
  segv:   {stage: segv, retries: 1}
  abort:  {stage: abort, retries: 1}
  hang:   {stage: hang, heartbeat_timeout: 1s, kill_grace: 500ms}
  hang_t: {stage: hang, timeout: 1s, kill_grace: 500ms}
  fine:   {stage: exec, with: {command: ["true"]}}
Y
run_dagrun run crash.yaml --plain
expect_rc 1
R=$(run_dir crash)
[ "$(task_field "$R" segv state)" = failed ] || fail "segv: $(task_field "$R" segv state)"
[ "$(task_field "$R" segv attempts)" = 2 ] || fail "segv attempts: $(task_field "$R" segv attempts)"
[ "$(task_field "$R" segv reason)" = "killed by signal 11 (SIGSEGV)" ] || fail "segv reason: $(task_field "$R" segv reason)"
[ "$(task_field "$R" abort attempts)" = 2 ] || fail "abort attempts: $(task_field "$R" abort attempts)"
[ "$(task_field "$R" abort reason)" = "killed by signal 6 (SIGABRT)" ] || fail "abort reason: $(task_field "$R" abort reason)"
[ "$(task_field "$R" hang reason)" = "hung: no heartbeat for 1.0s" ] || fail "hang reason: $(task_field "$R" hang reason)"
[ "$(task_field "$R" hang_t reason)" = "timed out after 1.0s" ] || fail "hang_t reason: $(task_field "$R" hang_t reason)"
[ "$(task_field "$R" fine state)" = success ] || fail "fine: $(task_field "$R" fine state)"
expect_in "$T/out" "segv: attempt 1/2 failed (killed by signal 11 (SIGSEGV))"
expect_in "$T/out" "  segv failed: killed by signal 11 (SIGSEGV)"
expect_in "$T/out" "    log: $R/segv/attempt-2/log"
# What the plugin printed before crashing is in its log.
[ -s "$R/segv/attempt-1/log" ] || fail "segv attempt log is empty"
pass
