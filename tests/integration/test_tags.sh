# Tags and notes on recorded runs: `dagrun tag`, `dagrun note`, what
# `runs` (and `runs --tag`) and `status` show of them, and the same
# through the API (POST /api/runs/{run}/tags and /note behind the write
# token, GET /api/runs?tag=); bad tags, notes and requests refused with
# nothing changed. With them, what would poison the JSON answers or cut
# a value short (bytes that are not UTF-8, \u0000) and params too long to
# reach a run, from the CLI and the API.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"
mkdir -p dags
cat > dags/t.yaml <<'Y'
dag: t
params: {x: "v"}
tasks:
  a: {stage: exec, cache: false, with: {command: [true]}}
Y
run_dagrun run dags/t.yaml --plain
expect_rc 0
run_dagrun run dags/t.yaml --plain
expect_rc 0
run_dagrun runs --json
ids=$("$PY" -c 'import json,sys; print(" ".join(r["id"] for r in json.load(open(sys.argv[1]))))' "$T/out")
set -- $ids
B=$1 A=$2
tags_of() { run_dagrun runs --json; "$PY" -c 'import json,sys; print(" ".join([r for r in json.load(open(sys.argv[1])) if r["id"] == sys.argv[2]][0]["tags"]))' "$T/out" "$1"; }

# --- tags from the CLI ----------------------------------------------------------
run_dagrun tag "$A" baseline lr=3e-4
expect_rc 0
[ "$(cat "$T/out")" = "baseline
lr=3e-4" ] || fail "tag printed: $(cat "$T/out")"
run_dagrun tag "$A" baseline seed:1
expect_rc 0
[ "$(tags_of "$A")" = "baseline lr=3e-4 seed:1" ] || fail "tags: $(tags_of "$A")"
run_dagrun tag "$A" --remove baseline
expect_rc 0
[ "$(tags_of "$A")" = "lr=3e-4 seed:1" ] || fail "after --remove: $(tags_of "$A")"
run_dagrun tag "$A"
expect_rc 0
[ "$(cat "$T/out")" = "lr=3e-4
seed:1" ] || fail "tag RUN alone: $(cat "$T/out")"
# Refused, and nothing changed: a bad tag, too many, an unknown run.
run_dagrun tag "$A" 'two words'
expect_rc 2
expect_in "$T/err" "letters, digits and _ - . : = / + only"
run_dagrun tag "$A" $(seq -f 't%g' 31)
expect_rc 2
expect_in "$T/err" "at most 32 tags a run"
run_dagrun tag "$A" "$(printf 'x%.0s' $(seq 65))"
expect_rc 2
run_dagrun tag nosuchrun x
expect_rc 2
expect_in "$T/err" "no run 'nosuchrun'"
[ "$(tags_of "$A")" = "lr=3e-4 seed:1" ] || fail "a refused tag changed the tags: $(tags_of "$A")"
[ "$(tags_of "$B")" = "" ] || fail "B has tags: $(tags_of "$B")"

# runs --tag lists only the tagged run; runs and status show the tags.
run_dagrun runs --tag seed:1 --json
"$PY" -c 'import json,sys; r = json.load(open(sys.argv[1])); assert [x["id"] for x in r] == [sys.argv[2]], r' "$T/out" "$A" ||
  fail "runs --tag: $(cat "$T/out")"
run_dagrun runs --tag nothing
expect_rc 0
expect_in "$T/err" "no runs tagged nothing"
run_dagrun runs
expect_in "$T/out" "$A tags: lr=3e-4, seed:1"
expect_not_in "$T/out" "$B tags"
run_dagrun status "$A"
expect_in "$T/out" "tags: lr=3e-4, seed:1"

# --- notes from the CLI ---------------------------------------------------------
run_dagrun note "$A" "the baseline for the sweep"
expect_rc 0
run_dagrun note "$A"
[ "$(cat "$T/out")" = "the baseline for the sweep" ] || fail "note: $(cat "$T/out")"
printf 'line one\nline two\n' | "$DAGRUN" note "$A" - || fail "note from stdin"
run_dagrun status "$A"
expect_in "$T/out" "note: line one"
expect_in "$T/out" "line two"
run_dagrun runs
expect_in "$T/out" "$A note: line one ..."
run_dagrun note "$A" "$(printf 'bell\a')"
expect_rc 2
expect_in "$T/err" "control character 0x07"
# A C1 control (U+009B, which some terminals take as ESC [) is UTF-8 and
# kept, and shown, not obeyed, by status and runs.
run_dagrun note "$A" "$(printf 'csi \302\2332J here')"
expect_rc 0
run_dagrun status "$A"
expect_in "$T/out" 'note: csi \xc2\x9b2J here'
run_dagrun runs
expect_in "$T/out" "$A note: csi \\xc2\\x9b2J here"
printf 'line one\nline two\n' | "$DAGRUN" note "$A" - || fail "note from stdin, again"
run_dagrun note "$A" "$(head -c 4097 /dev/zero | tr '\0' n)"
expect_rc 2
expect_in "$T/err" "at most 4096"
# Bytes that are not UTF-8 would poison every JSON answer that shows the
# note; a NUL on stdin would cut the note there without a word.
run_dagrun note "$A" "$(printf 'x\377y')"
expect_rc 2
expect_in "$T/err" "note: invalid UTF-8 at byte 1 (byte 0xff)"
printf 'a\0b' > nul.txt
run_dagrun note "$A" - < nul.txt
expect_rc 2
expect_in "$T/err" "the note on stdin holds a NUL byte (at byte 1)"
run_dagrun run dags/t.yaml --plain -p "x=$(printf 'v\377')"
expect_rc 2
expect_in "$T/err" "--param x: the value is not UTF-8 text (byte 0xff at 1)"
run_dagrun run dags/t.yaml --plain -p "x=$(head -c 65537 /dev/zero | tr '\0' A)"
expect_rc 2
expect_in "$T/err" "param 'x': a value of 65537 bytes; at most 65536"
run_dagrun note "$A" text --clear
expect_rc 2
run_dagrun note "$A"
[ "$(cat "$T/out")" = "line one
line two" ] || fail "a refused note changed it: $(cat "$T/out")"
run_dagrun note "$A" --clear
expect_rc 0
run_dagrun note "$A"
[ -z "$(cat "$T/out")" ] || fail "cleared note: $(cat "$T/out")"

# --- the API --------------------------------------------------------------------
TOKEN=s3cret-token-0123456789
serve_start --no-cron
call() { api "$1" "$2" "${3:-}" "${4:-$TOKEN}"; }
out=$(call POST "/api/runs/$B/tags" '{"add": ["candidate", "lr=1e-3"]}')
[ "${out%% *}" = 200 ] || fail "POST tags: $out"
echo "${out#* }" | "$PY" -c 'import json,sys; j = json.load(sys.stdin); assert j["tags"] == ["candidate", "lr=1e-3"], j' ||
  fail "POST tags answer: $out"
out=$(call POST "/api/runs/$B/tags" '{"remove": ["lr=1e-3"]}')
[ "${out%% *}" = 200 ] || fail "POST tags remove: $out"
out=$(call POST "/api/runs/$B/tags" '{"add": ["x"]}' none)
[ "${out%% *}" = 401 ] || fail "POST tags without the token: $out"
out=$(call POST "/api/runs/$B/tags" '{"add": ["a b"]}')
[ "${out%% *}" = 400 ] || fail "a bad tag: $out"
out=$(call POST "/api/runs/$B/tags" '{"add": "candidate"}')
[ "${out%% *}" = 400 ] || fail "add not a list: $out"
out=$(call POST "/api/runs/$B/tags" '{"add": [1]}')
[ "${out%% *}" = 400 ] || fail "a tag not a string: $out"
out=$(call POST "/api/runs/nosuchrun/tags" '{"add": ["x"]}')
[ "${out%% *}" = 404 ] || fail "unknown run: $out"
out=$(call GET "/api/runs?tag=candidate")
[ "${out%% *}" = 200 ] || fail "GET runs?tag: $out"
echo "${out#* }" | "$PY" -c 'import json,sys; r = json.load(sys.stdin); assert [x["id"] for x in r] == [sys.argv[1]] and r[0]["tags"] == ["candidate"], r' "$B" ||
  fail "GET runs?tag=candidate: $out"
out=$(call POST "/api/runs/$B/note" '{"note": "promoted to staging\nby the API"}')
[ "${out%% *}" = 200 ] || fail "POST note: $out"
out=$(call GET "/api/runs/$B")
echo "${out#* }" | "$PY" -c 'import json,sys; r = json.load(sys.stdin); assert r["user_note"] == "promoted to staging\nby the API", r' ||
  fail "GET run's note: $out"
out=$(call POST "/api/runs/$B/note" '{"note": "\u0007"}')
[ "${out%% *}" = 400 ] || fail "a control character: $out"
# raw_call METHOD PATH FILE: the body's bytes as they are in FILE; prints
# the status and the answer (flagged when it is not UTF-8).
raw_call() {
  "$PY" - "$PORT" "$TOKEN" "$@" <<'P'
import sys, urllib.error, urllib.request
port, token, method, path, f = sys.argv[1:6]
req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                             data=open(f, "rb").read() or None, method=method,
                             headers={"Content-Type": "application/json",
                                      "Authorization": "Bearer " + token})
try:
    with urllib.request.urlopen(req, timeout=30) as r:
        status, body = r.status, r.read()
except urllib.error.HTTPError as e:
    status, body = e.code, e.read()
try:
    print(status, body.decode("utf-8"))
except UnicodeDecodeError:
    print(status, "(an answer that is not UTF-8)", body)
P
}
printf '{"note":"\377\376 bad"}' > bad.json
out=$(raw_call POST "/api/runs/$B/note" bad.json)
[ "${out%% *}" = 400 ] || fail "a note that is not UTF-8: $out"
case "$out" in *"invalid UTF-8 at byte 9"*) ;; *) fail "a note that is not UTF-8: $out" ;; esac
# cJSON ends a string at \u0000: "ok" would pass, the ESC after it unseen.
out=$(call POST "/api/runs/$B/note" '{"note": "ok\u0000\u001b]0;pwned\u0007"}')
[ "${out%% *}" = 400 ] || fail "a note with \\u0000: $out"
case "$out" in *"a NUL character"*) ;; *) fail "a note with \\u0000: $out" ;; esac
out=$(call POST "/api/dags/t/runs" '{"params": {"x": "ok\u0000;id"}}')
[ "${out%% *}" = 400 ] || fail "a param with \\u0000: $out"
case "$out" in *"a NUL character"*) ;; *) fail "a param with \\u0000: $out" ;; esac
# A param the run's environment cannot pass: a 400 naming it and the
# limit, not a 500 once the run fails to start.
"$PY" -c 'import json; print(json.dumps({"params": {"x": "A" * 200000}}))' > big.json
out=$(raw_call POST "/api/dags/t/runs" big.json)
[ "${out%% *}" = 400 ] || fail "a param of 200000 bytes: $out"
case "$out" in *"param 'x': a value of 200000 bytes; at most 65536"*) ;; *) fail "a param of 200000 bytes: $out" ;; esac
# 65536 bytes of control characters: each \u00XX in the JSON that
# carries the params to the run.
"$PY" -c 'import json; print(json.dumps({"params": {"x": "\x01" * 65536}}))' > big.json
out=$(raw_call POST "/api/dags/t/runs" big.json)
[ "${out%% *}" = 400 ] || fail "params of 393216 bytes as JSON: $out"
case "$out" in *"the params come to 393241 bytes"*"at most 131072 in all"*) ;; *) fail "params of 393216 bytes as JSON: $out" ;; esac
out=$(call POST "/api/dags/t/pause" '{"by": "a\u0000b"}')
[ "${out%% *}" = 400 ] || fail "a pause by with \\u0000: $out"
printf '{"by":"a\377b"}' > bad.json
out=$(raw_call POST "/api/dags/t/pause" bad.json)
[ "${out%% *}" = 400 ] || fail "a pause by that is not UTF-8: $out"
# A run id of bytes that are not UTF-8, echoed in the error: as U+FFFD.
: > empty.json
out=$(raw_call GET "/api/runs/%C0%AE" empty.json)
[ "${out%% *}" = 400 ] || fail "a run id that is not UTF-8: $out"
case "$out" in *"invalid run id '��'"*) ;; *) fail "a run id that is not UTF-8: $out" ;; esac
for path in /api/runs "/api/runs/$B" /api/dags; do
  out=$(call GET "$path")
  echo "${out#* }" | "$PY" -c 'import json,sys; json.loads(sys.stdin.buffer.read().decode("utf-8"))' ||
    fail "GET $path is not UTF-8 JSON: $out"
done
out=$(call POST "/api/runs/$B/note" '{"text": "x"}')
[ "${out%% *}" = 400 ] || fail "no note member: $out"
out=$(call POST "/api/runs/$B/note" '{"note": "x"}' none)
[ "${out%% *}" = 401 ] || fail "POST note without the token: $out"
run_dagrun note "$B"
[ "$(cat "$T/out")" = "promoted to staging
by the API" ] || fail "the API's note, read by the CLI: $(cat "$T/out")"
out=$(call POST "/api/runs/$B/note" '{"note": null}')
[ "${out%% *}" = 200 ] || fail "POST note null: $out"
run_dagrun note "$B"
[ -z "$(cat "$T/out")" ] || fail "a null note did not clear it: $(cat "$T/out")"
serve_stop
pass
