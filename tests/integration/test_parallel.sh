# Independent tasks run at the same time (their 1 s sleeps overlap), and
# -j 1 serialises them.
. "$(dirname "$0")/lib.sh"

# overlap_s RUN_DIR T1 T2: seconds the two tasks' start..end spans share
# (negative: the gap between them), from the stamps each task wrote.
overlap_s() {
  /usr/bin/python3 -c '
import sys
r, x, y = sys.argv[1:]
x0, x1, y0, y1 = (float(open(f"{r}/{t}/out/{w}").read()) for t in (x, y) for w in ("start", "end"))
print(min(x1, y1) - max(x0, y0))' "$@"
}

cat > par.yaml <<'Y'
dag: par
tasks:
  a: {stage: exec, with: {command: [sh, -c, 'date +%s.%N > "$DAGRUN_OUT_DIR/start"; sleep 1; date +%s.%N > "$DAGRUN_OUT_DIR/end"']}}
  b: {stage: exec, with: {command: [sh, -c, 'date +%s.%N > "$DAGRUN_OUT_DIR/start"; sleep 1; date +%s.%N > "$DAGRUN_OUT_DIR/end"']}}
Y
run_dagrun run par.yaml --no-cache -j 2 --plain
expect_rc 0
R=$(run_dir par)
overlap=$(overlap_s "$R" a b)
/usr/bin/python3 -c "import sys; sys.exit(0 if $overlap > 0.5 else 1)" \
  || fail "with -j 2 the two 1 s tasks overlapped only ${overlap}s"

rm -rf "$DAGRUN_RUNS_DIR"
run_dagrun run par.yaml --no-cache -j 1 --plain
expect_rc 0
R=$(run_dir par)
overlap=$(overlap_s "$R" a b)
/usr/bin/python3 -c "import sys; sys.exit(0 if $overlap < 0 else 1)" \
  || fail "with -j 1 the tasks overlapped by ${overlap}s"

# A pool of size 1 serialises its tasks even with room overall, while a
# task outside the pool runs beside them.
rm -rf "$DAGRUN_RUNS_DIR"
cat > pool.yaml <<'Y'
dag: pool
pools: {gpu: 1}
tasks:
  a: {stage: exec, pool: gpu, with: {command: [sh, -c, 'date +%s.%N > "$DAGRUN_OUT_DIR/start"; sleep 1; date +%s.%N > "$DAGRUN_OUT_DIR/end"']}}
  b: {stage: exec, pool: gpu, with: {command: [sh, -c, 'date +%s.%N > "$DAGRUN_OUT_DIR/start"; sleep 1; date +%s.%N > "$DAGRUN_OUT_DIR/end"']}}
  c: {stage: exec, with: {command: [sh, -c, 'date +%s.%N > "$DAGRUN_OUT_DIR/start"; sleep 1; date +%s.%N > "$DAGRUN_OUT_DIR/end"']}}
Y
run_dagrun run pool.yaml --no-cache -j 3 --plain
expect_rc 0
R=$(run_dir pool)
/usr/bin/python3 -c '
import sys
r = sys.argv[1]
t = {k: [float(open(f"{r}/{k}/out/{w}").read()) for w in ("start", "end")] for k in "abc"}
ov = lambda x, y: min(t[x][1], t[y][1]) - max(t[x][0], t[y][0])
assert ov("a", "b") < 0, ("pool tasks overlapped", ov("a", "b"))
assert max(ov("a", "c"), ov("b", "c")) > 0.5, ("c did not run beside the pool", t)
' "$R" || fail "pool scheduling"
pass
