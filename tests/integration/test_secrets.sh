# Secrets: a param listed in `secrets:` (from ${env:MY_TOKEN}) and the
# ${env:...} value of a webhook are masked as "***" everywhere dagrun
# writes or prints: the attempt logs (stdout and stderr written in pieces,
# so that the secret straddles two reads of the pipe, and the stage's own
# log lines), attempt.json, outputs.json, run.json, the run store, the
# events (--events json and the plain view), `dagrun status` and `dagrun
# logs`, and the alert bodies a webhook receives. The plugin still gets
# the real value (it writes it to a file of its own, the one place it may
# appear), and so does a downstream task through ${tasks.T.outputs.K}.
. "$(dirname "$0")/lib.sh"
start_webhook_server

TOKEN="tok-$(/usr/bin/python3 -c 'import secrets; print(secrets.token_hex(20))')"
HOOK_KEY="key-$(/usr/bin/python3 -c 'import secrets; print(secrets.token_hex(12))')"
export MY_TOKEN="$TOKEN" HOOK_KEY

# leak prints the token to stdout and stderr in two halves 0.3 s apart
# (two reads of the pipe), and the webhook's key; its command line (with
# the token) is the exec stage's own "running:" log line. out sets the
# token as an output, which check must receive unmasked. boom fails with
# the token in its error message, once retried.
cat > sec.yaml <<'Y'
dag: sec
secrets: [token]
params: {token: "${env:MY_TOKEN}"}
alerts:
  - {on: [failure, retry], webhook: "${env:BASE}/ok?key=${env:HOOK_KEY}"}
tasks:
  leak:
    stage: exec
    with:
      command:
        - sh
        - -c
        - |
          a=$(printf %s "$0" | cut -c1-20); b=$(printf %s "$0" | cut -c21-)
          printf 'stdout: %s' "$a"; sleep 0.3; printf '%s;\n' "$b"
          printf 'stderr: %s' "$a" >&2; sleep 0.3; printf '%s;\n' "$b" >&2
          echo "hook key: $HOOK_KEY"
          printf %s "$0" > "$DAGRUN_OUT_DIR/mine.txt"
        - "${params.token}"
  out:
    stage: outputs
    with: {key: tok, value: "${params.token}"}
  check:
    stage: exec
    needs: [out]
    with:
      command: [sh, -c, 'test "$0" = "$MY_TOKEN" && echo downstream got it', "${tasks.out.outputs.tok}"]
  boom:
    stage: exec
    retries: 1
    retry_delay: 100ms
    with: {command: ["/nonexistent/${params.token}"]}
Y
export BASE

run_dagrun check sec.yaml
expect_rc 0
expect_not_in "$T/err" "warning"

# no_secret_anywhere LABEL: neither secret in any file of the runs, the
# store, dagrun's output or the webhook's bodies, but in leak's own file.
no_secret_anywhere() {
  for s in "$TOKEN" "$HOOK_KEY"; do
    leaks=$(grep -rlaF -- "$s" "$DAGRUN_RUNS_DIR" "$T/.dagrun" "$T/out" \
              "$T/err" "$T/bodies.jsonl" | grep -v '/leak/out/mine.txt$' || true)
    [ -z "$leaks" ] || fail "$1: a secret is in: $leaks"
  done
  /usr/bin/python3 - "$T/.dagrun/state.db" "$TOKEN" "$HOOK_KEY" <<'P' || fail "$1: a secret is in the store"
import sqlite3, sys
dump = "\n".join(sqlite3.connect(sys.argv[1]).iterdump())
assert "INSERT INTO" in dump
for s in sys.argv[2:]:
    assert s not in dump, s
P
}

# 1. With --events json.
run_dagrun run sec.yaml --events json
expect_rc 1
R=$(run_dir sec)
no_secret_anywhere "--events json"
# The plugin got the real value, and so did the downstream task.
[ "$(cat "$R/leak/out/mine.txt")" = "$TOKEN" ] || fail "leak did not get the token: $(cat "$R/leak/out/mine.txt")"
[ "$(task_field "$R" check state)" = success ] || fail "check did not get the real output: $(cat "$R/check/attempt-1/log")"
expect_in "$R/check/attempt-1/log" "downstream got it"
# What was printed is there, masked: not dropped.
L="$R/leak/attempt-1/log"
expect_in "$L" "stdout: ***;"
expect_in "$L" "stderr: ***;"
expect_in "$L" "hook key: ***"
expect_in "$L" "running: sh -c"
expect_in "$R/leak/attempt-1/attempt.json" '"***"'
expect_in "$R/out/outputs.json" '"***"'
expect_in "$R/boom/attempt-1/log" "/nonexistent/***"
expect_in "$R/run.json" '"(redacted)"'
expect_in "$T/out" '/nonexistent/***'
/usr/bin/python3 - "$T/bodies.jsonl" <<'P' || fail "alert bodies: $(cat "$T/bodies.jsonl")"
import json, sys
b = [json.loads(l) for l in open(sys.argv[1])]
assert [x["event"] for x in b] == ["retry", "failure"], b
for x in b:
    assert x["task"] == "boom" and "/nonexistent/***" in x["error"], x
    assert "/nonexistent/***" in x["text"], x
P
RUN_ID=$(basename "$R")
run_dagrun status "$RUN_ID"
no_secret_anywhere "dagrun status"
expect_in "$T/out" "/nonexistent/***"
run_dagrun logs "$RUN_ID" leak
no_secret_anywhere "dagrun logs"
expect_in "$T/out" "stdout: ***;"

# 2. Again, with the plain view. out is not taken from the cache: its
# recorded outputs are masked, and check would get "***" from them.
rm -f "$T/bodies.jsonl"
sleep 1 # a new run id
run_dagrun run sec.yaml --plain
expect_rc 1
no_secret_anywhere "--plain"
expect_in "$T/out" "/nonexistent/***"
R2=$(run_dir sec)
[ "$R2" != "$R" ] || fail "no second run"
[ "$(task_field "$R2" out state)" = success ] || fail "out was not run again: $(task_field "$R2" out state)"
case "$(task_field "$R2" check state)" in
  success|cached) ;;
  *) fail "check failed in the second run: $(cat "$R2"/check/attempt-*/log)" ;;
esac

# 3. `dagrun check`: an unknown name in `secrets:` is an error with its
# position; a secret too short to be masked is a warning.
cat > bad.yaml <<'Y'
dag: bad
params: {token: x, pw: ab}
secrets: [tokn, pw]
tasks:
  job: {stage: exec, with: {command: ["true"]}}
Y
run_dagrun check bad.yaml
expect_rc 2
expect_in "$T/err" "bad.yaml:3:11: error: 'secrets' names unknown param 'tokn'; did you mean 'token'?"
sed -i 's/tokn, //' bad.yaml
run_dagrun check bad.yaml
expect_rc 0
expect_in "$T/err" "bad.yaml:3:11: warning: secret param 'pw' is shorter than 4 bytes"
pass
