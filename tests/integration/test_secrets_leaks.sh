# Secrets that leaked where test_secrets.sh did not look (issue 23), each
# found by grepping for the value:
#  - a secret in an output's key (not its value) in outputs.json, run.json,
#    the store and GET /api/runs/{id};
#  - samples.txt and the figures that report.html embeds, in report.html
#    and GET /api/runs/{id}/report (and `dagrun report RUN`, which cannot
#    know the secrets, leaves them out);
#  - a secret param POSTed to serve's API in the command line of the
#    `dagrun run` it starts (/proc/PID/cmdline, which any user may read).
# The prompt holds a '&', which HTML escapes: the secrets' cores (hex) are
# what the greps look for, so that neither the raw nor the escaped form
# passes.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"
mkdir -p dags
hex() { /usr/bin/python3 -c 'import secrets; print(secrets.token_hex(16))'; }
CORE=$(hex) PCORE=$(hex) API_CORE=$(hex) API_PCORE=$(hex)
export MY_TOKEN="tok_$CORE" MY_PROMPT="say & $PCORE"
echo "api-token-$(hex)" > token
chmod 600 token

# keyed: an output whose key holds the token. gen: samples.txt with the
# prompt, and a figure with it, in out/ (as train and validate write them);
# it lasts a second so that the API's run can be seen running.
cat > gen.sh <<'S'
printf 'prompt: %s\n---\nonce upon a time\n' "$1" > "$DAGRUN_OUT_DIR/samples.txt"
printf '<svg xmlns="http://www.w3.org/2000/svg"><text>%s</text></svg>\n' \
  "$(printf %s "$1" | sed 's/&/\&amp;/g')" > "$DAGRUN_OUT_DIR/fig.svg"
sleep 1
S
export GEN="$T/gen.sh"
cat > dags/sec.yaml <<'Y'
dag: sec
secrets: [token, prompt]
params: {token: "${env:MY_TOKEN}", prompt: "${env:MY_PROMPT}"}
tasks:
  keyed: {stage: outputs, with: {key: "k_${params.token}", value: "v"}}
  gen: {stage: exec, with: {command: [sh, "${env:GEN}", "${params.prompt}"]}}
Y

# no_leak LABEL FILE...: $CORES in none of the files (recursively, the
# store's bytes included), nor in what a page's base64 images decode to
# (report.html's figures), nor in the store's SQL dump.
no_leak() {
  local label=$1 core leaks
  shift
  for core in $CORES; do
    leaks=$(grep -rlaF -- "$core" "$@" || true)
    [ -z "$leaks" ] || fail "$label: a secret is in: $leaks"
    leaks=$(/usr/bin/python3 - "$core" "$@" <<'P'
import base64, os, re, sys
core = sys.argv[1].encode()
for top in sys.argv[2:]:
    for d, _, fs in os.walk(top) if os.path.isdir(top) else [("", [], [top])]:
        for f in fs:
            p = os.path.join(d, f)
            if p.endswith(".html"):
                for m in re.finditer(rb"base64,([A-Za-z0-9+/=]+)", open(p, "rb").read()):
                    if core in base64.b64decode(m.group(1)):
                        print(p)
P
)
    [ -z "$leaks" ] || fail "$label: a secret is in a base64 image of: $leaks"
    /usr/bin/python3 - "$DAGRUN_HOME/state.db" "$core" <<'P' || fail "$label: a secret is in the store's dump"
import sqlite3, sys
dump = "\n".join(sqlite3.connect(sys.argv[1]).iterdump())
assert "INSERT INTO" in dump
assert sys.argv[2] not in dump
P
  done
}

# 1. A run by hand: the key and the embedded files are masked, not dropped.
run_dagrun run dags/sec.yaml
expect_rc 0
R=$(run_dir sec)
RUN_ID=$(basename "$R")
# (the files of gen's own out/ are the stage's: the one place it may be)
[ "$(grep -rlaF -- "$PCORE" "$R/gen/out" | wc -l)" = 2 ] || fail "gen did not write the prompt"
mkdir own && mv "$R/gen/out" own/
CORES="$CORE $PCORE"
no_leak "run" "$DAGRUN_RUNS_DIR" "$DAGRUN_HOME" "$T/out" "$T/err"
mv own/out "$R/gen/out"
expect_in "$R/keyed/outputs.json" '"k_***"'
expect_in "$R/run.json" '"k_***"'
expect_in "$R/report.html" "prompt: ***"
/usr/bin/python3 - "$R/report.html" <<'P' || fail "the figure in report.html is not there, masked"
import base64, re, sys
figs = [base64.b64decode(m) for m in re.findall(rb"data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)", open(sys.argv[1], "rb").read())]
assert any(b"<text>***</text>" in f for f in figs), figs
P
expect_in "$R/report.html" "once upon a time"
# `dagrun report` again: it cannot know the secrets (run.json and the store
# hold "(redacted)"), so it leaves those files out.
cp "$R/report.html" report.first
run_dagrun report "$RUN_ID"
expect_rc 0
mkdir -p own && mv "$R/gen/out" own/
no_leak "dagrun report" "$R/report.html"
mv own/out "$R/gen/out"
expect_in "$R/report.html" "gen/out/samples.txt: not embedded (the run has secrets"
expect_in "$R/report.html" "gen/out/fig.svg: not embedded (the run has secrets"
mv report.first "$R/report.html"

# 1b. A secret with a ', a " and a \ written through |sh and |json: the
# attempt log's "running:" line, attempt.json and report.html show the
# quoted and escaped forms, which differ from the raw value.
SJ1=$(hex) SJ2=$(hex)
cat > dags/sj.yaml <<'Y'
dag: sj
secrets: [k]
params: {k: "unset-secret"}
tasks:
  a: {stage: exec, with: {command: [sh, -c, 'echo ${params.k|sh} >/dev/null', sh, 'l=${params.k|json}']}}
  # The "running:" line is cut at 512 bytes, in the middle of the secret.
  b: {stage: exec, with: {command: [sh, -c, ': PAD ${params.k|sh}']}}
  # The same in a gang of 2, whose ranks' workers log the line.
  c: {stage: exec, world_size: 2, with: {command: [sh, -c, ': PAD ${params.k|sh}']}}
Y
sed -i "s/PAD/$(head -c 470 /dev/zero | tr '\0' x)/g" dags/sj.yaml
run_dagrun run dags/sj.yaml -p "k=P1$SJ1'P2$SJ2\"Q\\B"
expect_rc 0
RSJ=$(run_dir sj)
expect_in "$RSJ/a/attempt-1/log" "running: sh -c echo *** >/dev/null sh l=***"
expect_in "$RSJ/b/attempt-1/log" "xxx ***"
expect_not_in "$RSJ/b/attempt-1/log" "${SJ1:0:8}"
for f in "$RSJ"/c/attempt-1/log "$RSJ"/c/attempt-1/rank-*/log; do
  expect_in "$f" "xxx ***"
  expect_not_in "$f" "${SJ1:0:8}"
done
CORES="$SJ1 $SJ2"
no_leak "a secret through |sh and |json" "$DAGRUN_RUNS_DIR" "$DAGRUN_HOME" "$T/out" "$T/err"

# 1c. No error message quotes a secret param's value: a default that its
# pattern refuses (`dagrun check`, and serve's GET /api/dags below), and
# values from outside that the pattern or the type refuses.
DEF_CORE=$(hex) OUT_CORE=$(hex)
cat > dags/m4def.yaml <<Y
dag: m4def
params: {tok: "Def_$DEF_CORE"}
secrets: [tok]
param_schema: {tok: {pattern: "[a-z0-9_]+"}}
tasks:
  a: {stage: exec, with: {command: [echo, hi]}}
Y
cat > dags/m4.yaml <<'Y'
dag: m4
params: {tok: "lowercase_default", n: 12345}
secrets: [tok, n]
param_schema: {tok: {pattern: "[a-z0-9_]+"}, n: {type: int}}
tasks:
  a: {stage: exec, with: {command: [echo, hi]}}
Y
run_dagrun check dags/m4def.yaml
expect_rc 2
expect_in "$T/err" "default of param 'tok': '***' does not match its pattern"
run_dagrun run dags/m4.yaml -p "tok=Out_$OUT_CORE"
expect_rc 2
expect_in "$T/err" "--param tok=***: param 'tok': '***' does not match its pattern"
run_dagrun run dags/m4.yaml -p "n=x$OUT_CORE"
expect_rc 2
expect_in "$T/err" "param 'n' is declared type: int; '***' is not an integer"
CORES="$DEF_CORE $OUT_CORE"
no_leak "errors about secret values" "$T/out" "$T/err"

# 2. The API: the run by hand, its report, and a run started with the
# secret as a param.
serve_start --log "$T/serve.log" --no-cron
# api METHOD PATH [BODY]: writes the answer's status and body to $T/api.
api() {
  /usr/bin/python3 - "$PORT" "$(cat token)" "$@" >"$T/api" <<'P'
import sys, urllib.error, urllib.request
port, token, method, path = sys.argv[1:5]
body = sys.argv[5].encode() if len(sys.argv) > 5 else None
h = {"Content-Type": "application/json", "Authorization": "Bearer " + token}
req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body,
                             method=method, headers=h)
try:
    with urllib.request.urlopen(req, timeout=30) as r:
        print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
P
}
api GET /api/dags
expect_in "$T/api" "default of param 'tok': '***' does not match"
cp "$T/api" "$T/api.dags"
api POST /api/dags/m4/runs "{\"params\":{\"tok\":\"Out_$OUT_CORE\"}}"
expect_in "$T/api" "400 "
expect_in "$T/api" "param 'tok': '***' does not match its pattern"
CORES="$DEF_CORE $OUT_CORE"
no_leak "the API's errors about secret values" "$T/api" "$T/api.dags" "$T/serve.log"
api GET "/api/runs/$RUN_ID"
expect_in "$T/api" '"k_***"'
no_leak "GET /api/runs/{id}" "$T/api"
api GET "/api/runs/$RUN_ID/report"
expect_in "$T/api" "prompt: ***"
no_leak "GET /api/runs/{id}/report" "$T/api"

api POST /api/dags/sec/runs "{\"params\":{\"token\":\"api_$API_CORE\",\"prompt\":\"hi & $API_PCORE\"}}"
expect_in "$T/api" "201 "
RUN2=$(sed 's/^201 //' "$T/api" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
wait_until 10 pgrep -f -- "--run-id $RUN2" >/dev/null || fail "no dagrun run process for $RUN2"
RUNPID=$(pgrep -f -- "--run-id $RUN2" | head -n 1)
CMDLINE=$(tr '\0' ' ' <"/proc/$RUNPID/cmdline")
case "$CMDLINE" in *"$API_CORE"* | *"$API_PCORE"*) fail "the secret param on the command line: $CMDLINE" ;; esac
case "$CMDLINE" in *"--run-id $RUN2"*) ;; *) fail "not the run's process: $CMDLINE" ;; esac
done_run() {
  "$DAGRUN" status "$RUN2" --json | /usr/bin/python3 -c 'import json,sys; sys.exit(json.load(sys.stdin)["state"] != "success")'
}
wait_until 30 done_run || fail "the API's run did not succeed: $("$DAGRUN" status "$RUN2" 2>&1)"
R2=$(ls -d "$DAGRUN_RUNS_DIR"/sec/*/ | grep -F "$RUN2")
R2=${R2%/}
[ "$(grep -rlaF -- "$API_PCORE" "$R2/gen/out" | wc -l)" = 2 ] || fail "the API's gen did not get the param"
mv "$R2/gen/out" own/
api GET "/api/runs/$RUN2"
cp "$T/api" "$T/api.run"
api GET "/api/runs/$RUN2/report"
CORES="$API_CORE $API_PCORE"
no_leak "the API's run" "$DAGRUN_RUNS_DIR" "$DAGRUN_HOME" "$T/api.run" "$T/api" "$T/serve.log"
expect_in "$T/api" "prompt: ***"
expect_in "$R2/keyed/outputs.json" '"k_***"'

# The |sh and |json forms of a secret POSTed to the API (1b by hand).
SJ1=$(hex) SJ2=$(hex)
api POST /api/dags/sj/runs "$(/usr/bin/python3 -c 'import json,sys; print(json.dumps({"params": {"k": "P1%s'"'"'P2%s\"Q\\B" % tuple(sys.argv[1:])}}))' "$SJ1" "$SJ2")"
expect_in "$T/api" "201 "
RUN3=$(sed 's/^201 //' "$T/api" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
RUN2=$RUN3
wait_until 30 done_run || fail "the API's sj run did not succeed: $("$DAGRUN" status "$RUN3" 2>&1)"
api GET "/api/runs/$RUN3/tasks/a/log"
expect_in "$T/api" "running: sh -c echo *** >/dev/null sh l=***"
cp "$T/api" "$T/api.log"
api GET "/api/runs/$RUN3/report"
CORES="$SJ1 $SJ2"
no_leak "the API's |sh and |json run" "$DAGRUN_RUNS_DIR" "$DAGRUN_HOME" "$T/api.log" "$T/api" "$T/serve.log"
serve_stop
pass
