# The shard stage on bad input and bad params: invalid UTF-8, empty files,
# unreadable files (a dangling symlink, a truncated .gz, and chmod 000 when
# not root), malformed JSON lines and missing fields are counted with file
# and line under on_bad_input: skip, and fail the task naming file:line
# under fail, leaving out/ as the last good attempt left it. Also: inputs
# that match nothing, nonsense params, the quality filters, documents too
# large for memory_limit, and too many documents for it. Binary files,
# FIFOs and symlink loops are bad input too.
. "$(dirname "$0")/lib.sh"

mkdir -p bad jl
printf 'good one\n%%\ngood two\n%%\n' > bad/a-good.txt
# Invalid byte on line 4 (the document starts on line 3).
printf 'fine doc\n%%\nline three\nbad \377 byte\n%%\nafter the bad one\n' > bad/b-utf8.txt
: > bad/c-empty.txt
ln -s /nonexistent/target bad/d-gone.txt
# A gzip stream cut short: none of its documents may be kept, and what
# was seen in it before the cut (an invalid document) is not counted.
/usr/bin/python3 -c '
import gzip, os
data = gzip.compress(b"bad \xff first\n%\nFROM-CORRUPT "
                     + os.urandom(100000).hex().encode() + b"\n%\n")
open("bad/e-cut.txt.gz", "wb").write(data[: len(data) // 2])
'
nbad_unreadable=2
if [ "$(id -u)" != 0 ]; then
  printf 'secret\n' > bad/f-noperm.txt
  chmod 000 bad/f-noperm.txt
  nbad_unreadable=3
fi
{
  printf '{"text": "json one"}\n'
  printf '{"text": "broken\n'
  printf '{"body": "no text field"}\n'
  printf '{"text": "json two"}\n'
  printf '{"text": "raw \377 byte"}\n'
  printf '{"text": ["not", "a", "string"]}\n'
} > jl/a.jsonl
: > jl/b-empty.jsonl

# skip: everything counted, with file and line; the good documents kept.
cat > skip.yaml <<'Y'
dag: skip
tasks:
  shard: {stage: shard, with: {input: bad, separator: "%", shards: 2, val_fraction: 0}}
  jl: {stage: shard, with: {input: jl, format: jsonl, shards: 1, val_fraction: 0}}
Y
run_dagrun run skip.yaml --plain
expect_rc 0
R=$(run_dir skip)
/usr/bin/python3 - "$R" "$nbad_unreadable" <<'P' || fail "skip: $(cat "$R/shard/out/manifest.json" "$R/jl/out/manifest.json")"
import json, sys
R, nunread = sys.argv[1], int(sys.argv[2])
m = json.load(open(R + "/shard/out/manifest.json"))
dr = m["dropped"]
assert dr["invalid_utf8"] == 1 and dr["empty_file"] == 1, dr
assert dr["unreadable"] == nunread, dr
assert m["documents"]["kept"] == 4, m["documents"]
texts = sorted(json.loads(l)["text"] for s in m["shards"]
               for l in open(R + "/shard/out/" + s["path"]))
assert texts == ["after the bad one", "fine doc", "good one", "good two"], texts
probs = {(p["file"].split("/")[-1], p["line"], p["kind"]): p["reason"]
         for p in m["problems"]}
assert ("b-utf8.txt", 4, "invalid_utf8") in probs, probs
assert ("c-empty.txt", 0, "empty_file") in probs, probs
assert ("d-gone.txt", 0, "unreadable") in probs, probs
assert "No such file" in probs[("d-gone.txt", 0, "unreadable")], probs
assert "truncated" in probs[("e-cut.txt.gz", 0, "unreadable")], probs
assert [k for k in probs if k[0] == "e-cut.txt.gz"] == [("e-cut.txt.gz", 0, "unreadable")], probs
assert m["problems_total"] == len(m["problems"]), m["problems_total"]
# Canonical order: by file, then line.
keys = [(p["file"], p["line"]) for p in m["problems"]]
assert keys == sorted(keys), keys

j = json.load(open(R + "/jl/out/manifest.json"))
dr = j["dropped"]
assert dr["malformed_json"] == 1 and dr["missing_field"] == 2, dr
assert dr["invalid_utf8"] == 1 and dr["empty_file"] == 1, dr
assert j["documents"]["read"] == 6 and j["documents"]["kept"] == 2, j["documents"]
probs = {(p["file"].split("/")[-1], p["line"], p["kind"]) for p in j["problems"]}
assert probs == {("a.jsonl", 2, "malformed_json"), ("a.jsonl", 3, "missing_field"),
                 ("a.jsonl", 5, "invalid_utf8"), ("a.jsonl", 6, "missing_field"),
                 ("b-empty.jsonl", 0, "empty_file")}, probs
P
# The log says where, too.
expect_in "$R/shard/attempt-1/log" "b-utf8.txt:4: invalid_utf8"
expect_in "$R/jl/attempt-1/log" "a.jsonl:2: malformed_json"

# fail: the task fails at the first bad input in canonical order, whatever
# the thread count, and names it; out/ gets no shard.
for th in 1 4; do
  cat > fail$th.yaml <<Y
dag: fail$th
tasks:
  shard: {stage: shard, with: {input: bad, separator: "%", on_bad_input: fail, threads: $th}}
  jl: {stage: shard, with: {input: jl, format: jsonl, on_bad_input: fail, threads: $th}}
Y
  run_dagrun run fail$th.yaml --plain
  [ "$RC" -ne 0 ] || fail "on_bad_input: fail with bad input succeeded"
  expect_in "$T/out" "bad/b-utf8.txt:4: invalid_utf8"
  expect_in "$T/out" "jl/a.jsonl:2: malformed_json"
  R=$(run_dir fail$th)
  [ "$(task_field "$R" shard state)" = failed ] || fail "shard: $(task_field "$R" shard state)"
  left=$(ls -A "$R/shard/out" "$R/jl/out")
  [ -z "$(ls -A "$R/shard/out")" ] || fail "fail left files in out/: $(ls -A "$R/shard/out")"
  [ -z "$(ls -A "$R/jl/out")" ] || fail "fail left files in out/: $(ls -A "$R/jl/out")"
done
# A whole-file problem names the file without a line.
rm bad/b-utf8.txt bad/c-empty.txt
cat > fail2.yaml <<'Y'
dag: failfile
tasks:
  shard: {stage: shard, with: {input: bad, separator: "%", on_bad_input: fail}}
Y
run_dagrun run fail2.yaml --plain
[ "$RC" -ne 0 ] || fail "unreadable file under fail succeeded"
expect_in "$T/out" "bad/d-gone.txt: unreadable: No such file or directory"

# Input that is not text, or not a file: a file of NUL bytes (binary,
# even when text comes first), a FIFO and symlink loops inside an input
# directory are bad input like the rest: counted under skip, named with
# what they are under fail; a FIFO named outright says it is one, and
# never blocks the stage.
mkdir -p odd/sub
printf 'good text\n' > odd/a-good.txt
head -c 20480 /dev/zero > odd/b-nul.txt
{ printf 'prose first\n%%\n'; head -c 100 /dev/zero; } > odd/c-late-nul.txt
mkfifo odd/d-fifo
ln -s . odd/e-loop
ln -s .. odd/sub/f-up
odd_run() { # NAME POLICY INPUT
  printf 'dag: %s\ntasks:\n  shard: {stage: shard, with: {input: %s, separator: "%%", on_bad_input: %s, shards: 1, val_fraction: 0}}\n' \
    "$1" "$3" "$2" > "$1.yaml"
  set +e
  timeout 60 "$DAGRUN" run "$1.yaml" --plain >"$T/out" 2>"$T/err"
  RC=$?
  set -e
  [ "$RC" -ne 124 ] || fail "$1: shard blocked on input $3"
}
odd_run oddskip skip odd
expect_rc 0
R=$(run_dir oddskip)
"$PY" - "$R" <<'P' || fail "odd skip: $(cat "$R/shard/out/manifest.json")"
import json, sys
m = json.load(open(sys.argv[1] + "/shard/out/manifest.json"))
dr = m["dropped"]
assert dr["binary"] == 2 and dr["unreadable"] == 3, dr
assert m["documents"]["kept"] == 1, m["documents"]
probs = {p["file"].split("odd/")[-1]: (p["kind"], p["reason"]) for p in m["problems"]}
assert probs["b-nul.txt"] == ("binary", "binary data: a NUL byte at byte 0"), probs
assert probs["c-late-nul.txt"][0] == "binary", probs
assert probs["d-fifo"][0] == "unreadable", probs
assert probs["d-fifo"][1].endswith("odd/d-fifo is a FIFO, not a regular file"), probs
assert "odd/e-loop is a symlink loop" in probs["e-loop"][1], probs
assert "odd/sub/f-up is a symlink loop" in probs["sub/f-up"][1], probs
assert len(probs) == 5, probs
P
# fail: each stops the task, named, in canonical order.
odd_run oddfail fail odd
[ "$RC" -ne 0 ] || fail "a file of NUL bytes passed on_bad_input: fail"
expect_in "$T/out" "odd/b-nul.txt: binary: binary data: a NUL byte at byte 0"
rm odd/b-nul.txt odd/c-late-nul.txt
odd_run oddfail2 fail odd
[ "$RC" -ne 0 ] || fail "a FIFO in the input passed on_bad_input: fail"
expect_in "$T/out" "odd/d-fifo: unreadable: ./odd/d-fifo is a FIFO, not a regular file"
rm odd/d-fifo
odd_run oddfail3 fail odd
[ "$RC" -ne 0 ] || fail "a symlink loop in the input passed on_bad_input: fail"
expect_in "$T/out" "odd/e-loop: unreadable: ./odd/e-loop is a symlink loop"
mkfifo lone-fifo
odd_run oddfifo skip lone-fifo
[ "$RC" -ne 0 ] || fail "a FIFO as the only input succeeded"
expect_in "$T/out" "lone-fifo is a FIFO, not a regular file"
rm -r odd lone-fifo

# Attempts share out/: a failed one leaves the last good shards as they
# were, a good one replaces them and removes the shards it did not write
# (and temporary files a killed attempt left). The worker is run by hand
# to give two attempts the same out/.
OUT="$T/shared-out"
mkdir -p "$OUT"
attempt() { # NAME PARAMS_JSON
  local A="$T/w/$1"
  mkdir -p "$A/attempt" "$T/w/dag"
  /usr/bin/python3 -c '
import json, sys
A, out, t, params, stage = sys.argv[1:6]
json.dump({"plugin": stage, "stage": "shard", "params": json.loads(params),
           "dirs": {"out": out, "task": A, "attempt": A + "/attempt",
                    "run": t + "/w", "dag": t},
           "info": {"dag": "w", "task": "shard", "run_id": "r-1", "attempt": 1}},
          open(A + "/attempt.json", "w"))
' "$A" "$OUT" "$T" "$2" "$DAGRUN_STAGE_DIR/shard.so"
  set +e
  "$DAGRUN" __worker "$A/attempt.json" 3>"$A/msgs.jsonl" >"$A/log" 2>&1
  RC=$?
  set -e
  LOG="$A/log"
}
attempt one '{"input": ["bad"], "separator": "%", "shards": 6, "val_shards": 2, "val_fraction": 0.5}'
[ "$RC" -eq 0 ] || fail "attempt one: $RC $(cat "$LOG")"
[ "$(ls "$OUT" | tr '\n' ' ')" = "manifest.json train-00000.jsonl train-00001.jsonl train-00002.jsonl train-00003.jsonl train-00004.jsonl train-00005.jsonl val-00000.jsonl val-00001.jsonl " ] \
  || fail "attempt one wrote: $(ls -A "$OUT")"
cp -r "$OUT" "$T/saved-out"
printf 'x \377\n' > bad/z-bad.txt
attempt two '{"input": ["bad"], "separator": "%", "on_bad_input": "fail"}'
[ "$RC" -eq 1 ] || fail "attempt two: $RC $(cat "$LOG")"
expect_in "$LOG" "d-gone.txt: unreadable"
diff -r "$T/saved-out" "$OUT" >/dev/null || fail "a failed attempt changed out/: $(ls -lA "$OUT")"
touch "$OUT/.tmp-train-00009.jsonl"
attempt three '{"input": ["bad"], "separator": "%", "shards": 2, "val_fraction": 0.3}'
[ "$RC" -eq 0 ] || fail "attempt three: $RC $(cat "$LOG")"
[ "$(ls -A "$OUT" | tr '\n' ' ')" = "manifest.json train-00000.jsonl train-00001.jsonl val-00000.jsonl " ] \
  || fail "attempt three left: $(ls -A "$OUT")"
rm bad/z-bad.txt

# Inputs that match nothing.
for input in '"nothing/*.txt"' '"missing-dir"' '[bad, "jl/*.csv"]'; do
  printf 'dag: nomatch\ntasks:\n  shard: {stage: shard, with: {input: %s}}\n' "$input" > nomatch.yaml
  run_dagrun run nomatch.yaml --plain
  [ "$RC" -ne 0 ] || fail "input $input succeeded"
  expect_in "$T/out" "matched no files"
done
mkdir -p emptydir
printf 'dag: nomatch\ntasks:\n  shard: {stage: shard, with: {input: emptydir}}\n' > nomatch.yaml
run_dagrun run nomatch.yaml --plain
[ "$RC" -ne 0 ] || fail "an empty directory succeeded"
expect_in "$T/out" "emptydir matched no files"

# Params that make no sense fail before reading anything, saying why.
check_bad_param() { # YAML_FLOW_ITEMS EXPECTED_TEXT
  printf 'dag: badparam\ntasks:\n  shard: {stage: shard, with: {input: bad, %s}}\n' "$1" > bp.yaml
  run_dagrun run bp.yaml --plain
  [ "$RC" -ne 0 ] || fail "param $1 was accepted"
  expect_in "$T/out" "$2"
}
check_bad_param 'shards: 0' "shards is 0: it must be at least 1"
check_bad_param 'shards: -3' "shards is -3: it must be at least 1"
check_bad_param 'val_shards: 0' "val_shards is 0"
check_bad_param 'val_fraction: 1' "val_fraction is 1: it must be in [0, 1)"
check_bad_param 'val_fraction: -0.1' "val_fraction is -0.1"
# Params with a fixed set of values are refused by check, at the value,
# before anything runs.
check_bad_choice() { # KEY VALUE CHOICES
  printf 'dag: badchoice\ntasks:\n  shard: {stage: shard, with: {input: bad, %s: %s}}\n' "$1" "$2" > bc.yaml
  local col=$(( $(sed -n 3p bc.yaml | grep -bo "$1: $2" | cut -d: -f1) + ${#1} + 3 ))
  run_dagrun run bc.yaml --plain
  expect_rc 2
  expect_in "$T/err" "bc.yaml:3:$col: error: task 'shard': stage 'shard' param '$1': '$2' is not one of $3"
  [ ! -d "$DAGRUN_RUNS_DIR/badchoice" ] || fail "$1: $2 started a run"
}
check_bad_choice format csv "text, jsonl"
check_bad_choice on_bad_input ignore "skip, fail"
check_bad_param 'separator: ""' "separator must be none, blank_line, or one line"
check_bad_param 'memory_limit: lots' "memory_limit 'lots' is not a size"
check_bad_param 'memory_limit: 1MiB' "memory_limit 1MiB is below the minimum of 4MiB"
check_bad_param 'min_bytes: 10, max_bytes: 5' "min_bytes (10) is above max_bytes (5)"
check_bad_param 'min_alpha_ratio: 2' "min_alpha_ratio is 2"
check_bad_param 'threads: -1' "threads is -1"

# Quality filters, each counted under its name; nothing left says why.
mkdir -p q
{
  printf 'tiny\n%%\n'                                       # too_short
  printf 'a perfectly fine document of prose\n%%\n'         # kept
  printf '1234 5678 9012 3456 7890 1234 5678 9012\n%%\n'   # low_alpha
  printf 'same line\nsame line\nsame line\nother line\n%%\n' # repeated (2/4)
  printf '%0300d\n%%\n' 0                                  # too_long (and low alpha)
} > q/q.txt
cat > q.yaml <<'Y'
dag: q
tasks:
  shard:
    stage: shard
    with: {input: q, separator: "%", min_bytes: 10, max_bytes: 200,
           min_alpha_ratio: 0.5, max_repeated_line_ratio: 0.4, shards: 1,
           val_fraction: 0}
Y
run_dagrun run q.yaml --plain
expect_rc 0
R=$(run_dir q)
/usr/bin/python3 -c '
import json, sys
m = json.load(open(sys.argv[1] + "/shard/out/manifest.json"))
d = m["dropped"]
assert (d["too_short"], d["too_long"], d["low_alpha"], d["repeated_lines"]) == (1, 1, 1, 1), d
assert m["documents"]["kept"] == 1, m["documents"]
' "$R" || fail "filters: $(cat "$R/shard/out/manifest.json")"
sed -i 's/min_bytes: 10/min_bytes: 1000, max_bytes: 2000/; s/max_bytes: 200,//' q.yaml
run_dagrun run q.yaml --plain
[ "$RC" -ne 0 ] || fail "no surviving document succeeded"
expect_in "$T/out" "no document survived: 5 read in 1 files; dropped: too_short 5"

# A document above memory_limit/64 is dropped as too_large, and said where.
mkdir -p large
/usr/bin/python3 -c '
open("large/l.txt", "w").write("small one\n%\n" + "x" * 100000 + "\n%\nsmall two\n")'
cat > large.yaml <<'Y'
dag: large
tasks:
  shard: {stage: shard, with: {input: large, separator: "%", memory_limit: 4MiB, shards: 1, val_fraction: 0}}
Y
run_dagrun run large.yaml --plain
expect_rc 0
R=$(run_dir large)
/usr/bin/python3 -c '
import json, sys
m = json.load(open(sys.argv[1] + "/shard/out/manifest.json"))
assert m["dropped"]["too_large"] == 1 and m["documents"]["kept"] == 2, m
p = m["problems"][0]
assert p["kind"] == "too_large" and p["line"] == 3, p
' "$R" || fail "too_large: $(cat "$R/shard/out/manifest.json")"

# More documents than memory_limit can hold records for: a clear failure
# that says what to set, not an out-of-memory kill; and what it says works.
/usr/bin/python3 -c '
with open("many.txt", "w") as f:
    for i in range(120000):
        f.write(f"d{i}\n%\n")'
cat > many.yaml <<'Y'
dag: many
tasks:
  shard: {stage: shard, with: {input: many.txt, separator: "%", memory_limit: 4MiB}}
Y
run_dagrun run many.yaml --plain
[ "$RC" -ne 0 ] || fail "120,000 documents fit in 4MiB?"
expect_in "$T/out" "set memory_limit to at least"
suggested=$(sed -n 's/.*set memory_limit to at least \([0-9]*MiB\).*/\1/p' "$T/out" | head -n 1)
[ -n "$suggested" ] || fail "no suggested memory_limit in: $(cat "$T/out")"
sed -i "s/memory_limit: 4MiB/memory_limit: $suggested/; s/^dag: many/dag: many2/" many.yaml
run_dagrun run many.yaml --plain
expect_rc 0
pass
