# Outside values that reach a script raw, beyond ${params.X} after sh -c
# (test_params.sh): |json and other filters, sh options before -c, the
# ${item} of a map over a param, comments, $(...) and heredocs in the
# quote scanner (and the false positives it had), ${run.trigger_files},
# task outputs, and python -c / perl -e / node -e code. Each hostile value
# is refused with the place named and runs nothing (no INJECTED file);
# each fix the messages suggest works.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"
INJ="\$(touch $T/INJECTED)"

no_injection() {
  [ ! -e "$T/INJECTED" ] || fail "the injection ran"
}
# dag_with NAME: dags/NAME.yaml with params msg and x (strings) and lrs
# (a list), its tasks (from line 4 on) read from stdin.
dag_with() {
  { printf 'dag: %s\nparams: {msg: hi, x: hi, lrs: [a, b]}\ntasks:\n' "$1"; cat; } > "dags/$1.yaml"
}
# dag NAME COMMAND: one exec task "t" running COMMAND (YAML flow).
dag() { printf '  t: {stage: exec, with: {command: %s}}\n' "$2" | dag_with "$1"; }
# warns NAME TEXT: check passes with TEXT among its warnings.
warns() {
  run_dagrun check "dags/$1.yaml"
  expect_rc 0
  expect_in "$T/err" "$2"
}
# refused NAME PARAM=VALUE TEXT: run -p refused (exit 2) with TEXT.
refused() {
  run_dagrun run "dags/$1.yaml" -p "$2"
  expect_rc 2
  expect_in "$T/err" "$3"
  no_injection
}
# check_error NAME TEXT: check fails with TEXT.
check_error() {
  run_dagrun check "dags/$1.yaml"
  expect_rc 2
  expect_in "$T/err" "$2"
}
# accepted NAME TEXT: check passes without a warning, and a run with
# msg=$INJ prints TEXT (the value as text) and runs nothing.
accepted() {
  run_dagrun check "dags/$1.yaml"
  expect_rc 0
  expect_not_in "$T/err" warning
  run_dagrun run "dags/$1.yaml" -q -p "msg=$INJ"
  expect_rc 0
  expect_in "$(run_dir "$1")/t/attempt-1/log" "$2"
  no_injection
}
mkdir dags

# ---- H1: |json (any filter but |sh) lands raw ----
dag json "[sh, -c, 'echo \${params.msg|json}']"
warns json 'dags/json.yaml:4:51: warning: ${params.msg|json} lands raw (unquoted) in a shell script'
refused json "msg=$INJ" "param 'msg': refused: it lands raw (unquoted) in the shell script at dags/json.yaml:4:51"

# ---- H2: options before -c, with arguments or combined ----
dag pipefail "[bash, -o, pipefail, -c, 'echo \${params.msg} | cat']"
warns pipefail 'dags/pipefail.yaml:4:67: warning: ${params.msg} lands raw'
refused pipefail "msg=x;touch $T/INJECTED" "param 'msg': refused: it lands raw (unquoted) in the shell script at dags/pipefail.yaml:4:67"
dag euo "[env, A=1, sh, -euo, pipefail, +o, xtrace, -c, 'echo \${params.msg}']"
refused euo "msg=$INJ" "param 'msg': refused"
dag shopt "[bash, -O, extglob, --norc, -e, -c, 'echo \${params.msg}', name]"
refused shopt "msg=$INJ" "param 'msg': refused"

# ---- H3: ${item} of a map over a param: each outside item ----
cat > dags/mapped.yaml <<'Y'
dag: mapped
params: {lrs: [a, b], cfg: [{lr: a}, {lr: b}]}
tasks:
  t: {stage: exec, map: "${params.lrs}", with: {command: [sh, -c, 'echo "lr ${item}"']}}
  u: {stage: exec, map: "${params.cfg}", with: {command: [sh, -c, 'echo ${item.lr}']}}
Y
warns mapped 'dags/mapped.yaml:4:77: warning: ${item} lands raw (inside "...") in a shell script: an item of the list param it maps over'
expect_in "$T/err" 'dags/mapped.yaml:5:73: warning: ${item.lr} lands raw (unquoted)'
[ "$(grep -c 'item} lands raw' "$T/err")" = 1 ] || fail "one warning per place, not per instance: $(cat "$T/err")"
refused mapped "lrs=[\"x;touch $T/INJECTED\",\"y\"]" "param 'lrs': refused: its item 0, as \${item}, lands raw (inside \"...\") in the shell script at dags/mapped.yaml:4:77"
refused mapped "cfg=[{\"lr\":\"a\"},{\"lr\":\"$INJ\"}]" "param 'cfg': refused: its item 1, as \${item.lr}, lands raw"
run_dagrun run dags/mapped.yaml -q -p 'lrs=["0.1","2e-3"]'
expect_rc 0
expect_in "$(run_dir mapped)/t-1/attempt-1/log" "lr 2e-3"

# ---- H4: comments in the quote scanner ----
dag_with comment <<'Y'
  t: {stage: exec, with: {command: [sh, -c, "# don't touch\necho '${params.msg|sh}'"]}}
Y
check_error comment "\${params.msg|sh} is inside '...' in the shell script"
sed 's/don.t touch/say \\"hi/; s/comment$/comment2/' dags/comment.yaml > dags/comment2.yaml
check_error comment2 "\${params.msg|sh} is inside '...' in the shell script"
dag_with comment3 <<'Y'
  t: {stage: exec, with: {command: [sh, -c, "# don't\necho \"<\"${params.msg|sh}\">\" # it's \"fine\""]}}
Y
accepted comment3 "<$INJ>"

# a reference in a comment lands raw (a newline in the value ends the
# comment), and a backslash before "${" does not hide it
dag_with comment4 <<'Y'
  t: {stage: exec, with: {command: [sh, -c, "echo a # ${params.msg}\necho \\${params.x}"]}}
Y
warns comment4 'dags/comment4.yaml:4:55: warning: ${params.msg} lands raw (in a comment) in a shell script'
expect_in "$T/err" 'take it out of the comment (a newline in the value would end it)'
refused comment4 "msg=x
touch $T/INJECTED" "param 'msg': refused: it lands raw (in a comment)"
refused comment4 "x=x;touch $T/INJECTED" "param 'x': refused: it lands raw (unquoted)"
sed 's/comment4/comment5/; s/\${params.msg}/${params.msg|sh}/' dags/comment4.yaml > dags/comment5.yaml
check_error comment5 "\${params.msg|sh} is in a comment in the shell script: a newline in the value would end the comment"

# ---- M3: heredocs refuse |sh; $(...) and `...` start quoting afresh ----
dag_with heredoc <<'Y'
  t: {stage: exec, with: {command: [sh, -c, "cat <<EOF\n${params.msg|sh}\nEOF"]}}
  u: {stage: exec, with: {command: [sh, -c, "cat <<-'EOF'\n\t${params.msg|sh}\n\tEOF\n"]}}
Y
check_error heredoc "\${params.msg|sh} is in a heredoc in the shell script: a heredoc's body reads no quotes"
[ "$(grep -c 'is in a heredoc' "$T/err")" = 2 ] || fail "both heredocs: $(cat "$T/err")"
dag heredoc2 '[sh, -c, "cat <<EOF\n${params.msg}\nEOF\necho ${params.msg|sh}"]'
warns heredoc2 '${params.msg} lands raw (in a heredoc) in a shell script'
refused heredoc2 "msg=$INJ" "param 'msg': refused: it lands raw (in a heredoc)"
dag_with subst <<'Y'
  t: {stage: exec, with: {command: [sh, -c, 'echo "<$(printf %s ${params.msg|sh})>" "[`printf %s ${params.msg|sh}`]"']}}
Y
accepted subst "<$INJ> [$INJ]"

# ---- H6: ${run.trigger_files} ----
dag_with files <<'Y'
  t: {stage: exec, with: {command: [sh, -c, 'for f in ${run.trigger_files}; do echo "got $f"; done']}}
Y
warns files 'dags/files.yaml:4:55: warning: ${run.trigger_files} lands raw (unquoted) in a shell script'
expect_in "$T/err" 'write ${run.trigger_files|sh} (each name its own quoted word)'
DAGRUN_TRIGGER_INFO="{\"files\":[\"/x/incoming/$INJ.txt\"]}" run_dagrun run dags/files.yaml --trigger files
[ "$RC" != 0 ] || fail "a hostile file name ran"
expect_in "$T/out" 'dags/files.yaml:4:55: error: refused: ${run.trigger_files} lands raw (unquoted) in the shell script, and its value here (the names of the files that triggered the run) is not a plain word'
expect_in "$T/out" 'quote it there with ${run.trigger_files|sh}'
no_injection
DAGRUN_TRIGGER_INFO='{"files":["/x/incoming/a.txt"]}' run_dagrun run dags/files.yaml -q --trigger files
expect_rc 0
sed 's/trigger_files}/trigger_files|sh}/; s/files$/filesq/' dags/files.yaml > dags/filesq.yaml
run_dagrun check dags/filesq.yaml
expect_rc 0
expect_not_in "$T/err" warning
DAGRUN_TRIGGER_INFO="{\"files\":[\"/x/$INJ.txt\",\"/x/a b.txt\"]}" run_dagrun run dags/filesq.yaml -q --trigger files
expect_rc 0
expect_in "$(run_dir filesq)/t/attempt-1/log" "got /x/$INJ.txt"
expect_in "$(run_dir filesq)/t/attempt-1/log" "got /x/a b.txt"
no_injection

# ---- M2: a param laundered through an upstream task's output ----
dag_with outputs <<'Y'
  up: {stage: exec, outputs: [o], with: {command: [sh, -c, 'printf "{\"o\": \"%s\"}" "$1" > "$DAGRUN_OUTPUTS"', up, "${params.msg}"]}}
  down: {stage: exec, needs: [up], with: {command: [sh, -c, 'echo ${tasks.up.outputs.o}']}}
  quoted: {stage: exec, needs: [up], with: {command: [sh, -c, 'echo "<"${tasks.up.outputs.o|sh}">"']}}
Y
warns outputs 'dags/outputs.yaml:5:67: warning: ${tasks.up.outputs.o} lands raw (unquoted) in a shell script: a value that is not a plain word fails the task at run time'
run_dagrun run dags/outputs.yaml -p "msg=$INJ"
[ "$RC" != 0 ] || fail "a hostile output ran"
expect_in "$T/out" 'dags/outputs.yaml:5:67: error: refused: ${tasks.up.outputs.o} lands raw (unquoted) in the shell script'
expect_in "$(run_dir outputs)/quoted/attempt-1/log" "<$INJ>"
no_injection
run_dagrun run dags/outputs.yaml -q -p "msg=plain-word"
expect_rc 0
# the item of a map over an output: the same, per instance
dag_with rmap <<'Y'
  up: {stage: exec, outputs: [l], with: {command: [sh, -c, 'printf "{\"l\": [\"a\", \"%s\"]}" "$1" > "$DAGRUN_OUTPUTS"', up, "${params.msg}"]}}
  each: {stage: exec, needs: [up], map: "${tasks.up.outputs.l}", with: {command: [sh, -c, 'echo "got ${item}"']}}
Y
warns rmap 'dags/rmap.yaml:5:102: warning: ${item} lands raw (inside "...") in a shell script: a value that is not a plain word fails the task at run time'
run_dagrun run dags/rmap.yaml -p "msg=$INJ"
[ "$RC" != 0 ] || fail "a hostile item ran"
expect_in "$T/out" "each-1 failed: dags/rmap.yaml:5:102: error: refused: \${item} lands raw"
expect_in "$(run_dir rmap)/each-0/attempt-1/log" "got a"
no_injection

# ---- M1: interpreters' code ----
dag_with interp <<'Y'
  py: {stage: exec, with: {command: [timeout, 60, python3, -u, -c, 'print("${params.msg}")']}}
  pl: {stage: exec, with: {command: [perl, -le, 'print "${params.msg}"']}}
  nd: {stage: exec, with: {command: [node, --eval, 'console.log("${params.msg}")']}}
Y
warns interp 'dags/interp.yaml:4:76: warning: ${params.msg} lands raw in python3 -c code'
expect_in "$T/err" 'pass the value as an argument instead (sys.argv, @ARGV, ARGV, process.argv)'
expect_in "$T/err" 'dags/interp.yaml:5:57: warning: ${params.msg} lands raw in perl -le code'
expect_in "$T/err" 'dags/interp.yaml:6:66: warning: ${params.msg} lands raw in node --eval code'
refused interp "msg=\"+__import__('os').system('touch $T/INJECTED')+\"" "param 'msg': refused: it lands raw in the python3 -c code at dags/interp.yaml:4:76"
dag rubysh "[ruby, -e, 'puts \${params.msg|sh}']"
check_error rubysh "\${params.msg|sh} is in the ruby -e code: |sh quotes a word for a shell, not for this interpreter"

# ---- the API: 400 naming the param, no run ----
echo "params-token-0123456789" > token
chmod 600 token
mkdir serve
cp dags/json.yaml dags/mapped.yaml serve/
rm -rf "$DAGRUN_RUNS_DIR"
serve_start --log "$T/serve.log" --dags serve --no-cron
api_refused() { # api_refused DAG BODY TEXT
  local out
  out=$(api POST "/api/dags/$1/runs" "$2" params-token-0123456789)
  case "$out" in "400 "*"$3"*) ;; *) fail "POST $2 to $1: $out, expected 400 with $3" ;; esac
}
api_refused json "{\"params\":{\"msg\":\"$INJ\"}}" "param 'msg': refused"
api_refused mapped "{\"params\":{\"lrs\":\"[\\\"x;touch $T/INJECTED\\\",\\\"y\\\"]\"}}" "param 'lrs': refused: its item 0"
[ -z "$(ls -A "$DAGRUN_RUNS_DIR" 2>/dev/null)" ] ||
  fail "refused API triggers made runs: $(ls -R "$DAGRUN_RUNS_DIR")"
serve_stop
no_injection
pass
