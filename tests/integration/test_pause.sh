# Pausing a DAG's schedule under a real `dagrun serve` on a fake clock
# (DAGRUN_FAKE_CLOCK: ten minutes a second, every-ten-minutes schedules):
# the API's pause refused without credentials, for an unknown DAG and for
# an unknown body key (nothing changed); while paused no cron run and no
# file-triggered run starts, but a manual run does; the pause outlives a
# restart of serve; `dagrun pause`/`unpause`/`dags` on the same store
# (and `dagrun status` of a run says its DAG is paused); on
# unpause the missed times follow catchup (false: the latest only, true:
# each) and the file that landed while paused starts one run.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"
mkdir -p dags incoming
write_serve_secrets

for c in true false; do
  cat > "dags/p_$c.yaml" <<Y
dag: p_$c
schedule: "*/10 * * * *"
catchup: $c
tasks:
  a: {stage: exec, cache: false, with: {command: [sh, -c, 'echo "at \${run.date}"']}}
Y
done
cat > dags/files.yaml <<Y
dag: files
on: {files: {glob: "$T/incoming/*.txt", settle: 1s}}
tasks:
  a: {stage: exec, cache: false, with: {command: [sh, -c, 'echo "\${run.trigger_files}"']}}
Y

# dag_field DAG KEY: KEY of DAG in GET /api/dags ("None" when absent).
dag_field() {
  http GET /api/dags | /usr/bin/python3 -c '
import json, sys
status, body = sys.stdin.read().split(" ", 1)
for d in json.loads(body):
    if d["name"] == sys.argv[1]: print(d.get(sys.argv[2]))' "$1" "$2"
}
dag_is() { [ "$(dag_field "$1" "$2")" = "$3" ]; } # for wait_until
# count_runs DAG [TRIGGER]: the store's runs of DAG (started by TRIGGER).
count_runs() {
  "$DAGRUN" runs "$1" -n 1000 --json | /usr/bin/python3 -c '
import json, sys
print(sum(1 for r in json.load(sys.stdin) if not sys.argv[1] or r.get("trigger") == sys.argv[1]))' "${2:-}"
}
runs_done() { # runs_done DAG N: N runs of DAG, none going
  "$DAGRUN" runs "$1" -n 1000 --json | /usr/bin/python3 -c '
import json, sys
runs = json.load(sys.stdin)
sys.exit(0 if len(runs) == int(sys.argv[1]) and all(r["state"] == "success" for r in runs) else 1)' "$2"
}
at_least_runs() { [ "$(count_runs "$1" cron)" -ge "$2" ]; }
# none_since_pause WHEN: no cron run of p_false or p_true beyond those
# counted at the pause (n_false, n_true), no run of files.
none_since_pause() {
  [ "$(count_runs p_false cron)" = "$n_false" ] || fail "p_false ran $1: $(count_runs p_false cron) cron runs, $n_false at the pause"
  [ "$(count_runs p_true cron)" = "$n_true" ] || fail "p_true ran $1"
  [ "$(count_runs files)" = 0 ] || fail "a file started a run of the paused DAG files $1"
}

# ---- serve 1: both schedules fire, then pause ----
T0=$(date -d 2026-06-01T12:00:00Z +%s)
DAGRUN_FAKE_CLOCK="$T0*600" serve_start --log "$T/serve1.log"
wait_until 20 at_least_runs p_false 1 || fail "p_false never ran: $(cat "$T/serve1.log")"
wait_until 20 at_least_runs p_true 1 || fail "p_true never ran: $(cat "$T/serve1.log")"
[ "$(dag_field p_false paused)" = "False" ] || fail "p_false paused before any pause"

# Refusals, each changing nothing.
out=$(http POST /api/dags/p_false/pause "" none)
[ "${out%% *}" = 401 ] || fail "pause without credentials: $out"
out=$(http POST /api/dags/p_false/pause "" badtoken)
[ "${out%% *}" = 401 ] || fail "pause with a bad token: $out"
out=$(http POST /api/dags/p_false/pause "" badhmac)
[ "${out%% *}" = 401 ] || fail "pause with a bad signature: $out"
out=$(http POST /api/dags/nosuch/pause "" token)
[ "${out%% *}" = 404 ] || fail "pause of an unknown DAG: $out"
case "$out" in *"no dag 'nosuch'"*) ;; *) fail "404 says: $out" ;; esac
out=$(http POST /api/dags/p_false/pause '{"who": "me"}' token)
[ "${out%% *}" = 400 ] || fail "pause with an unknown key: $out"
case "$out" in *"unknown key 'who'"*) ;; *) fail "400 says: $out" ;; esac
out=$(http GET /api/dags/p_false/pause "" token)
[ "${out%% *}" = 405 ] || fail "GET of pause: $out"
[ "$(dag_field p_false paused)" = "False" ] || fail "a refused pause paused p_false"

# Pause: p_false and files through the API (token, HMAC), p_true by CLI.
out=$(http POST /api/dags/p_false/pause '{"by": "alice"}' token)
[ "${out%% *}" = 200 ] || fail "pause: $out"
echo "${out#* }" | "$PY" -c '
import json, sys
j = json.load(sys.stdin)
assert j["dag"] == "p_false" and j["paused"] is True and j["changed"] is True and j["paused_by"] == "alice", j' ||
  fail "pause answered $out"
out=$(http POST /api/dags/p_false/pause "" hmac)
[ "${out%% *}" = 200 ] || fail "pause again: $out"
case "$out" in *'"changed":false'*) ;; *) fail "a second pause changed something: $out" ;; esac
case "$out" in *'"paused_by":"alice"'*) ;; *) fail "a second pause: $out" ;; esac
out=$(http POST /api/dags/files/pause "" hmac)
[ "${out%% *}" = 200 ] || fail "pause of files: $out"
run_dagrun pause p_true
expect_rc 0
expect_in "$T/out" "dag p_true paused"
wait_until 5 dag_is p_true paused True || fail "serve did not see the CLI's pause"
[ "$(dag_field p_false next_fire)" = None ] || fail "a paused DAG shows a next fire time"
expect_in "$T/serve1.log" "p_true: schedule paused"

# Paused for 3 s (30 fake minutes, three schedule times): no cron run.
sleep 1 # a run started just before the pause gets recorded
wait_until 20 runs_done p_false "$(count_runs p_false)" || fail "p_false's runs do not finish"
wait_until 20 runs_done p_true "$(count_runs p_true)" || fail "p_true's runs do not finish"
n_false=$(count_runs p_false)
n_true=$(count_runs p_true)
echo data > incoming/while-paused.txt
sleep 3
none_since_pause "while paused"

# A manual run of a paused DAG still starts, and succeeds.
out=$(http POST /api/dags/p_false/runs "" token)
[ "${out%% *}" = 201 ] || fail "manual run of a paused DAG: $out"
manual=$(echo "${out#* }" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
wait_until 20 store_run_is "$manual" success || fail "the manual run did not succeed"
[ "$(count_runs p_false cron)" = "$n_false" ] || fail "a cron run came with the manual one"
run_dagrun status "$manual"
expect_in "$T/out" "dag p_false is paused since "
expect_in "$T/out" " by alice (dagrun unpause p_false)"

# The CLI's list.
run_dagrun dags
expect_rc 0
grep -Eq '^p_false +yes ' "$T/out" || fail "dagrun dags: p_false not paused: $(cat "$T/out")"
grep -Eq '^p_true +yes .* by ' "$T/out" || fail "dagrun dags: p_true: $(cat "$T/out")"
grep -Eq '^files +yes ' "$T/out" || fail "dagrun dags: files: $(cat "$T/out")"
run_dagrun dags --json
"$PY" -c '
import json, sys
d = {x["dag"]: x for x in json.load(open(sys.argv[1]))}
assert d["p_false"]["paused"] and d["p_false"]["paused_by"] == "alice", d
assert d["p_false"]["runs"] >= 2 and d["p_false"]["last_state"] == "success", d' "$T/out" ||
  fail "dagrun dags --json: $(cat "$T/out")"
L_FALSE=$(dag_field p_false last_fire)
L_TRUE=$(dag_field p_true last_fire)
serve_stop

# ---- serve 2: the pause survives the restart ----
# The clock goes on, one second a second, 35 minutes after the later of
# the two last fire times: 3 schedule times or so were missed.
T2=$("$PY" -c 'import sys; print(int(max(float(sys.argv[1]), float(sys.argv[2]))) + 35 * 60)' "$L_FALSE" "$L_TRUE")
DAGRUN_FAKE_CLOCK="$T2*1" serve_start --log "$T/serve2.log"
wait_until 5 dag_is p_false paused True || fail "the pause did not survive a restart"
[ "$(dag_field files paused)" = True ] || fail "files: the pause did not survive a restart"
expect_in "$T/serve2.log" "p_false: schedule paused"
sleep 2
none_since_pause "after the restart, paused"

# Unpause: p_false through the API, p_true and files by CLI.
out=$(http POST /api/dags/p_false/unpause "" token)
[ "${out%% *}" = 200 ] || fail "unpause: $out"
case "$out" in *'"paused":false'*) ;; *) fail "unpause answered $out" ;; esac
case "$out" in *'"changed":true'*) ;; *) fail "unpause answered $out" ;; esac
run_dagrun unpause dags/p_true.yaml
expect_rc 0
expect_in "$T/out" "dag p_true unpaused"
run_dagrun unpause files
expect_in "$T/out" "dag files unpaused"
run_dagrun unpause p_true
expect_rc 0
expect_in "$T/out" "dag p_true was already unpaused"

# catchup false: one run, the latest missed time; catchup true: each.
missed() { # missed LAST: the */10 times in (LAST, T2]
  "$PY" -c 'import sys; l, t = int(float(sys.argv[1])), int(sys.argv[2]); print(len(range(l + 600, t + 1, 600)))' "$1" "$T2"
}
m_true=$(missed "$L_TRUE")
m_false=$(missed "$L_FALSE")
wait_until 30 runs_done p_true $((n_true + m_true)) ||
  fail "p_true (catchup: true): $(count_runs p_true) runs, expected $n_true + $m_true: $(cat "$T/serve2.log")"
wait_until 30 runs_done p_false $((n_false + 2)) ||
  fail "p_false (catchup: false): $(count_runs p_false) runs, expected $n_false + 1 + the manual one"
wait_until 30 runs_done files 1 || fail "the file that landed while paused started $(count_runs files) runs"
sleep 1
[ "$(count_runs p_false)" = $((n_false + 2)) ] || fail "p_false: more than the latest missed time ran"
"$DAGRUN" runs p_false -n 1 --json | "$PY" -c '
import json, sys
r = json.load(sys.stdin)[0]
assert r["trigger"] == "cron" and int(r["logical_date"]) == int(sys.argv[1]) // 600 * 600, (r, sys.argv[1])' "$T2" ||
  fail "p_false's run after the unpause is not for the latest missed time"
expect_in "$T/serve2.log" "p_false: $((m_false - 1)) earlier schedule times missed while down or paused, not run (catchup: false)"
"$DAGRUN" runs files -n 1 --json | grep -q "while-paused.txt" || fail "the files run does not name the file"
[ "$(dag_field p_false paused)" = False ] || fail "p_false still paused"
run_dagrun status "$manual"
expect_not_in "$T/out" "is paused"

# CLI refusals: an unknown DAG, a file that does not load, bad usage.
run_dagrun pause nosuch
expect_rc 2
expect_in "$T/err" "knows no DAG 'nosuch'"
echo "dag: [" > broken.yaml
run_dagrun pause broken.yaml
expect_rc 2
expect_in "$T/err" "broken.yaml does not load"
run_dagrun pause
expect_rc 2
run_dagrun pause p_true p_false
expect_rc 2
serve_stop
pass
