# Webhook alerts, delivered to a real HTTP server on loopback: retry and
# failure alerts with their fields, a text whose error quotes Slack markup
# escaped, one success alert, retries on 500, an
# endpoint that never answers, every try recorded in the run store as in
# alerts.jsonl, run and per-task deadlines, the webhook URL kept out of
# every file and output, and `dagrun check` errors for bad alerts.
. "$(dirname "$0")/lib.sh"
start_webhook_server
SECRET=SECRET-TOKEN-123

# store_matches_jsonl RUN_DIR: the run store's alert_deliveries rows of the
# run are alerts.jsonl's lines (count, order, event, try, status, result),
# and their endpoint is scheme://host:port only (no path, no query).
store_matches_jsonl() {
  /usr/bin/python3 - "$1" "$T/.dagrun/state.db" "$BASE" <<'P' || fail "alert_deliveries of $1 do not match its alerts.jsonl"
import json, os, sqlite3, sys
run_dir, db, base = sys.argv[1:]
lines = [json.loads(l) for l in open(run_dir + "/alerts.jsonl")]
con = sqlite3.connect(db)
rows = con.execute("SELECT event, task, try, status, result, endpoint, error "
                   "FROM alert_deliveries WHERE run_id = ? ORDER BY rowid",
                   (os.path.basename(run_dir),)).fetchall()
assert len(lines) > 0 and len(rows) == len(lines), (rows, lines)
for r, l in zip(rows, lines):
    assert r[0] == l["event"] and r[1] == l["task"], (r, l)
    assert r[2] == l["attempt"] and r[4] == l["result"], (r, l)
    assert (r[3] or None) == l["status"], (r, l)
    assert r[6] == l["error"], (r, l)
    assert r[5] == base and r[5] == l["webhook"], (r, l)
    assert "/fail500" not in r[5] and "/hang" not in r[5] and "?" not in r[5], r
P
}

# dag_file NAME EXIT ON URL [EXTRA]: a one-task DAG whose task exits EXIT.
dag_file() {
  cat > "$1.yaml" <<Y
dag: $1
defaults: {retry_delay: 100ms, retry_jitter: 0}
alerts:
  - on: [$3]
    webhook: $4
${5:-}
tasks:
  job:
    stage: exec
    retries: 1
    with: {command: [sh, -c, 'echo first line; echo "it broke" >&2; exit $2']}
Y
}

# 1. A failing task: a retry alert, then a failure alert, with every field.
export HOOK="$BASE/ok/$SECRET?token=$SECRET"
dag_file fails 3 "failure, retry" '${env:HOOK}'
run_dagrun run fails.yaml --plain
expect_rc 1
R=$(run_dir fails)
/usr/bin/python3 - "$T/bodies.jsonl" "$R" <<'P' || fail "alert bodies: $(cat "$T/bodies.jsonl")"
import json, sys
b = [json.loads(l) for l in open(sys.argv[1])]
assert [x["event"] for x in b] == ["retry", "failure"], b
for x in b:
    for k in ["text", "dag", "run", "task", "state", "attempt", "error",
              "log_tail", "link"]:
        assert k in x, (k, x)
    assert x["dag"] == "fails" and x["task"] == "job", x
    assert "it broke" in x["log_tail"] and "first line" in x["log_tail"], x
    assert sys.argv[2] in x["link"], x
r, f = b
assert r["state"] == "retry_wait" and r["attempt"] == 1, r
assert f["state"] == "failed" and f["attempt"] == 2 and f["max_attempts"] == 2, f
assert "failed" in f["text"] and "job" in f["text"] and "exit" in f["error"], f
P
expect_in "$R/alerts.jsonl" "\"webhook\":\"$BASE\""
[ "$(grep -c '"result":"delivered"' "$R/alerts.jsonl")" = 2 ] || fail "alerts.jsonl: $(cat "$R/alerts.jsonl")"
# The URL's secret is in no file of the run and in no output.
if grep -rqF "$SECRET" "$DAGRUN_RUNS_DIR"; then
  fail "secret found under the runs dir: $(grep -rlF "$SECRET" "$DAGRUN_RUNS_DIR")"
fi
expect_not_in "$T/out" "$SECRET"
expect_not_in "$T/err" "$SECRET"

# 1b. An error that quotes a param with Slack's markup: in `text` it is
# plain words (& < > written as Slack wants them: no ping, no disguised
# link); `error` keeps it as it is.
rm -f "$T/bodies.jsonl"
cat > markup.yaml <<Y
dag: markup
alerts:
  - {on: [failure], webhook: "$BASE/ok"}
params:
  f: "/nonexistent/<!channel> <https://evil.example|Click> & <@U123>/x"
tasks:
  job: {stage: flaky, with: {counter_file: "\${params.f}"}}
Y
run_dagrun run markup.yaml --plain
expect_rc 1
/usr/bin/python3 - "$T/bodies.jsonl" <<'P' || fail "alert text not escaped: $(cat "$T/bodies.jsonl")"
import json, sys
[b] = [json.loads(l) for l in open(sys.argv[1])]
raw = "/nonexistent/<!channel> <https://evil.example|Click> & <@U123>/x"
esc = ("/nonexistent/&lt;!channel&gt; &lt;https://evil.example|Click&gt; "
       "&amp; &lt;@U123&gt;/x")
assert esc in b["text"], b["text"]
assert "<" not in b["text"] and ">" not in b["text"], b["text"]
assert b["text"].count("&") == b["text"].count("&amp;") + b["text"].count("&lt;") + b["text"].count("&gt;"), b["text"]
assert b["error"].endswith(raw), b["error"]
P

# 2. A successful run: one success alert. The webhook comes through a
# param this time, which run.json must not show either.
rm -f "$T/bodies.jsonl"
export HOOK2="$BASE/ok/$SECRET-2"
dag_file works 0 "failure, retry, success" '${params.hook}' \
  "params: {hook: '\${env:HOOK2}', other: visible}"
run_dagrun run works.yaml --events json
expect_rc 0
R=$(run_dir works)
expect_in "$R/run.json" '"other":'
if grep -rqF "$SECRET" "$DAGRUN_RUNS_DIR" "$T/out" "$T/err"; then
  fail "secret found: $(grep -rlF "$SECRET" "$DAGRUN_RUNS_DIR" "$T/out" "$T/err")"
fi
[ "$(wc -l < "$T/bodies.jsonl")" = 1 ] || fail "expected one alert: $(cat "$T/bodies.jsonl")"
expect_in "$T/bodies.jsonl" '"event":"success"'
expect_in "$T/bodies.jsonl" '"state":"success"'

# 3. An endpoint answering 500: three tries, 1 s then 2 s apart; the run's
# result is unchanged.
dag_file five 0 success "$BASE/fail500"
run_dagrun run five.yaml --plain
expect_rc 0
R=$(run_dir five)
[ "$(grep -c '"status":500' "$R/alerts.jsonl")" = 3 ] || fail "expected 3 tries with status 500: $(cat "$R/alerts.jsonl")"
expect_in "$R/alerts.jsonl" '"attempt":3'
expect_in "$R/alerts.jsonl" '"result":"failed"'
store_matches_jsonl "$R"

# 4. An endpoint that never answers: the per-try timeout is recorded...
dag_file hang1 0 success "$BASE/hang" "    timeout: 1s"
start=$(date +%s)
run_dagrun run hang1.yaml --plain
expect_rc 0
R=$(run_dir hang1)
expect_in "$R/alerts.jsonl" 'timed out'
store_matches_jsonl "$R"
# ... and with the default 10 s timeout the run still ends within the 5 s
# grace, with its own exit code, saying it gave up.
elapsed=$(( $(date +%s) - start ))
[ "$elapsed" -lt 10 ] || fail "a run with a hanging webhook took ${elapsed}s"
dag_file hang2 4 failure "$BASE/hang"
start=$(date +%s)
run_dagrun run hang2.yaml --plain
expect_rc 1
elapsed=$(( $(date +%s) - start ))
[ "$elapsed" -lt 9 ] || fail "a run with a hanging webhook took ${elapsed}s"
R=$(run_dir hang2)
expect_in "$R/alerts.jsonl" '"result":"abandoned"'
store_matches_jsonl "$R"
expect_in "$T/err" "gave up on 1 alert delivery"

# 5. A run still going after its deadline: one deadline alert.
rm -f "$T/bodies.jsonl"
cat > late.yaml <<Y
dag: late
alerts:
  - {on: [deadline], webhook: "$BASE/ok", deadline: 300ms}
tasks:
  job: {stage: exec, with: {command: [sleep, "1.5"]}}
Y
run_dagrun run late.yaml --plain
expect_rc 0
[ "$(wc -l < "$T/bodies.jsonl")" = 1 ] || fail "expected one alert: $(cat "$T/bodies.jsonl")"
expect_in "$T/bodies.jsonl" '"event":"deadline"'
expect_in "$T/bodies.jsonl" '"state":"running"'

# 5b. Per-task deadlines: each listed task not finished 1 s after it
# started. slow (2.5 s) gets one alert naming it; fast does not, and
# neither does the run as a whole (it takes longer than 1 s).
rm -f "$T/bodies.jsonl"
cat > tasklate.yaml <<Y
dag: tasklate
alerts:
  - {on: [deadline], webhook: "$BASE/ok", deadline: 1s, tasks: [slow, fast]}
tasks:
  fast: {stage: exec, with: {command: [sleep, "0.2"]}}
  slow: {stage: exec, needs: [fast], with: {command: [sh, -c, 'echo slow going; sleep 2.5']}}
Y
run_dagrun run tasklate.yaml --plain
expect_rc 0
[ "$(wc -l < "$T/bodies.jsonl")" = 1 ] || fail "expected one deadline alert: $(cat "$T/bodies.jsonl" 2>/dev/null)"
/usr/bin/python3 - "$T/bodies.jsonl" <<'P' || fail "deadline alert: $(cat "$T/bodies.jsonl")"
import json, sys
[b] = [json.loads(l) for l in open(sys.argv[1])]
assert b["event"] == "deadline" and b["task"] == "slow", b
assert b["state"] == "running" and b["attempt"] == 1, b
assert "slow" in b["text"] and "slow going" in b["log_tail"], b
P
store_matches_jsonl "$(run_dir tasklate)"

# 6. A webhook that resolves to "" turns its alert off.
rm -f "$T/bodies.jsonl"
unset NO_HOOK
dag_file off 3 "failure, retry" '${env:NO_HOOK:-}'
run_dagrun run off.yaml --plain
expect_rc 1
[ ! -e "$T/bodies.jsonl" ] || fail "an alert with an empty webhook was sent"

# 7. `dagrun check` reports bad alerts with file:line:col.
cat > bad.yaml <<'Y'
dag: bad
alerts:
  - on: [failur, success]
    webhook: http://example.invalid/x
  - on: [failure]
    deadline: 2h
  - {on: [deadline], webhook: "http://x.invalid/", deadline: 1s, tasks: [jbo]}
tasks:
  job: {stage: exec, with: {command: ["true"]}}
Y
run_dagrun check bad.yaml
expect_rc 2
expect_in "$T/err" "bad.yaml:3:10: error: alert 1: unknown event 'failur'; did you mean 'failure'?"
expect_in "$T/err" "bad.yaml:5:5: error: alert 2: missing 'webhook'"
expect_in "$T/err" "bad.yaml:6:15: error: alert 2: 'deadline' without the 'deadline' event"
expect_in "$T/err" "bad.yaml:7:74: error: alert 3: unknown task 'jbo'; did you mean 'job'?"
pass
