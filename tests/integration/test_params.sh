# Params as untrusted input (issue 23): the injection of the issue, given
# with -p and through serve's API, runs nothing (refused where the param
# lands raw in a sh -c script, literal text where it is quoted with |sh);
# param_schema's type, enum, pattern, min and max refuse bad values from
# -p (exit 2) and the API (400, no run) and bad defaults (check, at
# file:line:col); a bad param_schema and a |sh inside quotes are errors at
# file:line:col; check warns where a param lands raw in a shell script.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"
INJ='x"; id > INJECTED; echo "'

# no_injection: nothing the injection would have made exists.
no_injection() {
  [ -z "$(find "$T" -name INJECTED)" ] || fail "the injection ran: $(find "$T" -name INJECTED)"
}

# msg_dag NAME COMMAND: dags/NAME.yaml, one exec task "say" running
# COMMAND (YAML flow list, on line 4) with the one param msg.
msg_dag() {
  printf 'dag: %s\nparams: {msg: hi}\ntasks:\n  say: {stage: exec, with: {command: %s}}\n' "$1" "$2" > "dags/$1.yaml"
}
mkdir dags
msg_dag quick "[sh, -c, 'echo \"quick \${params.msg}\"']"
# ---- check warns at the place the param lands raw ----
run_dagrun check dags/quick.yaml
expect_rc 0
expect_in "$T/err" 'dags/quick.yaml:4:60: warning: ${params.msg} lands raw (inside "...") in a shell script'

# ---- the injection with -p: refused, nothing run ----
run_dagrun run dags/quick.yaml -p "msg=$INJ"
expect_rc 2
expect_in "$T/err" "param 'msg': refused: it lands raw (inside \"...\") in the shell script at dags/quick.yaml:4:60"
no_injection
[ -z "$(ls -A "$DAGRUN_RUNS_DIR/quick" 2>/dev/null)" ] || fail "a refused run made a run directory"
# only a plain word passes, whatever the quotes: "..." may be inside $(...)
run_dagrun run dags/quick.yaml -p "msg=hello world"
expect_rc 2
expect_in "$T/err" "may hold only letters, digits and _.,:/=+@%-"
run_dagrun run dags/quick.yaml -q -p "msg=hello-world_1.2"
expect_rc 0
expect_in "$(run_dir quick)/say/attempt-1/log" "quick hello-world_1.2"
# behind a wrapper, inside $(...) inside "...": still found, still refused
msg_dag wrapped "[env, A=1, sh, -ec, 'echo \"\$(echo \${params.msg})\"']"
run_dagrun check dags/wrapped.yaml
expect_rc 0
expect_in "$T/err" 'dags/wrapped.yaml:4:72: warning: ${params.msg} lands raw'
run_dagrun run dags/wrapped.yaml -p "msg=a; id > INJECTED"
expect_rc 2
expect_in "$T/err" "param 'msg': refused"
no_injection

# ---- |sh: any value, printed as it is ----
msg_dag quoted "[sh, -c, 'printf \"<%s>\\\\n\" \${params.msg|sh}']"
run_dagrun check dags/quoted.yaml
expect_rc 0
expect_not_in "$T/err" warning
NASTY="a'b\"c\$HOME\`id\`;d
e"
run_dagrun run dags/quoted.yaml -q -p "msg=$NASTY"
expect_rc 0
printf '<%s>\n' "$NASTY" > want
# (the log's "running:" line shows the command, newline and all: skip it)
sed -n '/^<a/,/^e>$/p' "$(run_dir quoted)/say/attempt-1/log" > got
cmp -s want got || fail "|sh printed $(cat got), expected $(cat want)"
rm -rf "$DAGRUN_RUNS_DIR/quoted" # run_dir: the one run
run_dagrun run dags/quoted.yaml -q -p "msg=$INJ"
expect_rc 0
expect_in "$(run_dir quoted)/say/attempt-1/log" "<$INJ>"
no_injection

# ---- param_schema: each rule refuses with -p ----
cat > dags/typed.yaml <<'Y'
dag: typed
params: {n: 3, size: small, name: abc, ratio: 0.5, on: true}
param_schema:
  n: {type: int, min: 1, max: 10}
  size: {enum: [small, large]}
  name: {type: string, pattern: "[a-z]+"}
  ratio: {type: float, min: 0, max: 1}
  on: {type: bool}
tasks:
  t: {stage: exec, with: {command: [sh, -c, 'echo ${params.n} ${params.size} ${params.name} ${params.ratio} ${params.on}']}}
Y
run_dagrun check dags/typed.yaml
expect_rc 0
expect_not_in "$T/err" warning
bad() { # bad PARAM=VALUE MESSAGE
  run_dagrun run dags/typed.yaml -p "$1"
  expect_rc 2
  expect_in "$T/err" "$2"
}
bad n=abc "param 'n' is declared type: int; 'abc' is not an integer"
bad n=2.5 "param 'n' is declared type: int; '2.5' is not an integer"
bad n=0 "param 'n': '0' is not a number >= 1 and <= 10"
bad n=11 "param 'n': '11' is not a number >= 1 and <= 10"
bad ratio=1.5 "param 'ratio': '1.5' is not a number >= 0 and <= 1"
bad size=medium "param 'size': 'medium' is not one of its enum: [small, large]"
bad name=abc1 "param 'name': 'abc1' does not match its pattern '[a-z]+'"
bad "name=$INJ" "does not match its pattern"
bad on=yes "param 'on' is declared type: bool; 'yes' is not true or false"
[ -z "$(ls -A "$DAGRUN_RUNS_DIR/typed" 2>/dev/null)" ] || fail "a refused run made a run directory"
# In a fresh directory, with the defaults (runs/ and .dagrun/state.db
# here), a refused run leaves nothing at all behind.
mkdir fresh
set +e
(cd fresh && unset DAGRUN_HOME DAGRUN_RUNS_DIR && "$DAGRUN" run ../dags/typed.yaml -p n=0) >fresh.out 2>fresh.err
RC=$?
set -e
[ "$RC" = 2 ] || fail "refused run exited $RC: $(cat fresh.err)"
expect_in fresh.err "param 'n': '0' is not a number >= 1 and <= 10"
[ -z "$(ls -A fresh)" ] || fail "a refused run left: $(cd fresh && find . -mindepth 1)"
run_dagrun run dags/typed.yaml -q -p n=10 -p size=large -p name=xyz -p ratio=1 -p on=false
expect_rc 0
expect_in "$(run_dir typed)/t/attempt-1/log" "10 large xyz 1 false"

# ---- mistakes in the DAG file: errors at file:line:col ----
check_error() { # check_error FILE MESSAGE
  run_dagrun check "$1"
  expect_rc 2
  expect_in "$T/err" "$2"
}
printf 'dag: b\nparams: {n: 0}\nparam_schema:\n  n: {type: int, min: 1}\ntasks:\n  t: {stage: exec, with: {command: [echo, "${params.n}"]}}\n' > b1.yaml
check_error b1.yaml "b1.yaml:2:13: error: default of param 'n': '0' is not a number >= 1"
printf 'dag: b\nparams: {n: 0}\nparam_schema:\n  n: {type: integr}\ntasks:\n  t: {stage: exec, with: {command: [echo]}}\n' > b2.yaml
check_error b2.yaml "b2.yaml:4:13: error: param_schema 'n': 'type' must be string, int, float or bool"
printf 'dag: b\nparams: {n: x}\nparam_schema:\n  n: {pattern: "a(b"}\ntasks:\n  t: {stage: exec, with: {command: [echo]}}\n' > b3.yaml
check_error b3.yaml "b3.yaml:4:16: error: param_schema 'n': bad 'pattern'"
printf 'dag: b\nparams: {n: x}\nparam_schema:\n  m: {type: int}\n  n: {patern: x}\ntasks:\n  t: {stage: exec, with: {command: [echo]}}\n' > b4.yaml
check_error b4.yaml "b4.yaml:4:3: error: param_schema names unknown param 'm'"
expect_in "$T/err" "b4.yaml:5:7: error: param_schema 'n': unknown key 'patern'"
printf 'dag: b\nparams: {n: x}\nparam_schema:\n  n: {enum: []}\ntasks:\n  t: {stage: exec, with: {command: [echo]}}\n' > b5.yaml
check_error b5.yaml "b5.yaml:4:13: error: param_schema 'n': 'enum' must be a non-empty list"
printf 'dag: b\nparams: {n: 5}\nparam_schema:\n  n: {min: 3, max: 1}\ntasks:\n  t: {stage: exec, with: {command: [echo]}}\n' > b6.yaml
check_error b6.yaml "b6.yaml:4:3: error: param_schema 'n': min is above max"
cat > b7.yaml <<'Y'
dag: b
params: {msg: x}
tasks:
  t: {stage: exec, with: {command: [sh, -c, 'echo "${params.msg|sh}"']}}
Y
check_error b7.yaml "b7.yaml:4:52: error: \${params.msg|sh} is inside \"...\" in the shell script"
cat > b8.yaml <<'Y'
dag: b
params: {msg: x}
tasks:
  t: {stage: exec, with: {command: [echo, '${params.msg|quote}']}}
Y
check_error b8.yaml "b8.yaml:4:44: error: unknown filter 'quote' in \${params.msg|quote}"

# schema_dag FILE SCHEMA_LINE...: dags whose param_schema (from line 4 on)
# has the lines given, param n defaulting to x.
schema_dag() {
  local f=$1
  shift
  { printf 'dag: b\nparams: {n: x}\nparam_schema:\n'; printf '%s\n' "$@"
    printf 'tasks:\n  t: {stage: exec, with: {command: [echo]}}\n'; } > "$f"
}
schema_dag c1.yaml '  n: int'
check_error c1.yaml "c1.yaml:4:6: error: param_schema 'n': expected a map of type, enum, pattern, min, max"
schema_dag c2.yaml '  n: {min: a}'
check_error c2.yaml "c2.yaml:4:12: error: param_schema 'n': 'min' must be a number"
schema_dag c3.yaml '  n: {pattern: [a]}'
check_error c3.yaml "c3.yaml:4:16: error: param_schema 'n': bad 'pattern' (a POSIX extended regex): not a string"
schema_dag c4.yaml '  n: {type: int, type: string}'
check_error c4.yaml "c4.yaml:4:18: error: param_schema 'n': 'type' is given twice"
schema_dag c5.yaml '  n: {type: string}' '  n: {type: int}'
check_error c5.yaml "c5.yaml:5:3: error: param_schema: 'n' is given twice"
schema_dag c6.yaml '  n: {type: int}'
check_error c6.yaml "c6.yaml:2:13: error: default of param 'n' is declared type: int; 'x' is not an integer"
schema_dag c7.yaml '  n: {max: 3}'
check_error c7.yaml "c7.yaml:2:13: error: default of param 'n': 'x' is not a number <= 3"
printf 'dag: b\nparams: {n: x}\nparam_schema: 5\ntasks:\n  t: {stage: exec, with: {command: [echo]}}\n' > c8.yaml
check_error c8.yaml "c8.yaml:3:15: error: 'param_schema': expected a map of param names"
msg_dag c9 "['echo \"\${params.msg|sh}\"'], shell: true"
mv dags/c9.yaml .
check_error c9.yaml "c9.yaml:4:46: error: \${params.msg|sh} is inside \"...\" in the shell script"

# ---- what counts as declared safe: no warning, and the declaration decides ----
declared() { # declared NAME SCHEMA: the quick DAG with msg declared as SCHEMA
  { sed 's/^tasks:$/param_schema: {msg: '"$2"'}\ntasks:/' dags/quick.yaml; } > "dags/$1.yaml"
  sed -i "s/^dag: quick/dag: $1/" "dags/$1.yaml"
}
declared words '{pattern: "[a-z ]+"}'
run_dagrun check dags/words.yaml
expect_rc 0
expect_not_in "$T/err" warning
run_dagrun run dags/words.yaml -q -p "msg=hello world"
expect_rc 0
expect_in "$(run_dir words)/say/attempt-1/log" "quick hello world"
declared loose '{pattern: ".*"}'
run_dagrun check dags/loose.yaml
expect_rc 0
expect_in "$T/err" 'dags/loose.yaml:5:60: warning: ${params.msg} lands raw'
run_dagrun run dags/loose.yaml -p "msg=$INJ"
expect_rc 2
expect_in "$T/err" "param 'msg': refused"
declared spaced '{enum: [hi, "a b"]}'
run_dagrun check dags/spaced.yaml
expect_rc 0
expect_in "$T/err" 'dags/spaced.yaml:5:60: warning: ${params.msg} lands raw'
declared counted '{type: int}'
run_dagrun check dags/counted.yaml
expect_rc 2
expect_in "$T/err" "default of param 'msg' is declared type: int; 'hi' is not an integer"
no_injection

# ---- serve's API: refused with 400 and no run; |sh runs it as text ----
echo "params-token-0123456789" > token
chmod 600 token
mkdir serve
cp dags/quick.yaml dags/typed.yaml dags/quoted.yaml serve/
rm -rf "$DAGRUN_RUNS_DIR"
serve_start --log "$T/serve.log" --dags serve --no-cron
post() { # post DAG BODY: prints "STATUS BODY"
  "$PY" - "$PORT" "$1" "$2" <<'P'
import sys, urllib.error, urllib.request
port, dag, body = sys.argv[1:4]
req = urllib.request.Request(f"http://127.0.0.1:{port}/api/dags/{dag}/runs",
    data=body.encode(), method="POST",
    headers={"Content-Type": "application/json",
             "Authorization": "Bearer params-token-0123456789"})
try:
    with urllib.request.urlopen(req, timeout=30) as r:
        print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
P
}
JINJ='{"params":{"msg":"x\"; id > INJECTED; echo \""}}'
refused() { # refused DAG BODY TEXT: a 400 whose message holds TEXT
  local out
  out=$(post "$1" "$2")
  case "$out" in "400 "*"$3"*) ;; *) fail "POST $2 to $1: $out, expected 400 with $3" ;; esac
}
refused quick "$JINJ" "param 'msg': refused"
refused typed '{"params":{"n":11}}' "is not a number >= 1 and <= 10"
refused typed '{"params":{"size":"huge"}}' "is not one of its enum"
refused typed '{"params":{"name":"ab c"}}' "does not match its pattern"
refused typed '{"params":{"n":"3.5"}}' "declared type: int"
refused typed '{"params":{"on":"yes"}}' "declared type: bool; 'yes' is not true or false"
[ -z "$(ls -A "$DAGRUN_RUNS_DIR"/quick "$DAGRUN_RUNS_DIR"/typed 2>/dev/null)" ] ||
  fail "refused API triggers made runs: $(ls -R "$DAGRUN_RUNS_DIR")"
out=$(post quoted "$JINJ")
case "$out" in "201 "*) ;; *) fail "API trigger of the quoted DAG: $out" ;; esac
RUN=$(echo "$out" | sed 's/^201 //' | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
LOG="$DAGRUN_RUNS_DIR/quoted/$RUN/say/attempt-1/log"
wait_until 20 grep -qF "<$INJ>" "$LOG" || fail "the API value was not printed as text: $(cat "$LOG")"
serve_stop
no_injection
pass
