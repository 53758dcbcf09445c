# The batch_sweep stage on a tiny model: with a memory_cap between two
# sizes (computed from a first sweep's engine memory), the sweep stops
# there naming the cap, every row and the recommendation are within it,
# the accumulation reaches target_batch, and a train task downstream runs
# with ${tasks.batch_sweep.outputs.micro_batch} and grad_accum. The JSON,
# CSV, SVG (two charts) and log table agree. A real allocation failure
# (an address-space limit) is reported, not a crash.
. "$(dirname "$0")/lib.sh"

DATA=$(make_token_data bs 320)
MODEL='n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, threads: 1'

# A first sweep with room: up to max_batch.
cat > free.yaml <<Y
dag: free
tasks:
  batch_sweep: {stage: batch_sweep, with: {data: "$DATA", $MODEL, max_batch: 32, steps_per_size: 2, memory_cap: 4GiB}}
Y
run_dagrun run free.yaml --plain
expect_rc 0
RF=$(run_dir free)
# The cap: halfway between micro-batch 8's engine memory and 16's.
/usr/bin/python3 - "$RF/batch_sweep/out/sweep.json" >cap.txt <<'P' || fail "first sweep: $(cat "$RF/batch_sweep/out/sweep.json")"
import json, sys
r = json.load(open(sys.argv[1]))
rows = r["rows"]
assert [x["batch"] for x in rows] == [1, 2, 4, 8, 16, 32], rows
assert r["stopped_reason"].startswith("max_batch"), r["stopped_reason"]
mem = {x["batch"]: x["memory_bytes"] for x in rows}
assert all(mem[b] < mem[2 * b] for b in (1, 2, 4, 8, 16)), mem
print((mem[8] + mem[16]) // 2)
P
CAP=$(cat cap.txt)
# The same DAG again measures again: throughput is the machine's, not a
# function of the params, so the stage is not cached by default (it was,
# and a rerun elsewhere reused the old numbers)...
# The run directory that this run made: run ids of one second do not
# sort in the order they were made.
new_run() { # DAG OLD_RUN_DIR
  ls -d "$DAGRUN_RUNS_DIR/$1"/*/ | sed 's,/$,,' | grep -vx "$2"
}
run_dagrun run free.yaml --plain
expect_rc 0
RF2=$(new_run free "$RF")
[ "$(task_field "$RF2" batch_sweep state)" = success ] \
  || fail "second sweep: $(task_field "$RF2" batch_sweep state), not measured again"
[ -s "$RF2/batch_sweep/out/sweep.json" ] || fail "second sweep wrote no sweep.json"
# ...unless the task asks for it.
sed -e 's/dag: free/dag: kept/' -e 's/max_batch: 32/max_batch: 2/' -e 's/stage: batch_sweep,/stage: batch_sweep, cache: true,/' free.yaml > kept.yaml
run_dagrun run kept.yaml --plain
RK=$(run_dir kept)
run_dagrun run kept.yaml --plain
expect_rc 0
RK2=$(new_run kept "$RK")
[ "$(task_field "$RK2" batch_sweep state)" = cached ] \
  || fail "cache: true sweep: $(task_field "$RK2" batch_sweep state)"

cat > capped.yaml <<Y
dag: capped
tasks:
  batch_sweep: {stage: batch_sweep, with: {data: "$DATA", $MODEL, max_batch: 64, steps_per_size: 3, memory_cap: "$CAP", target_batch: 20}}
  train:
    stage: train
    needs: [batch_sweep]
    with: {data: "$DATA", $MODEL, steps: 3, eval_every: 0, checkpoint_every: 0, samples: 0,
           batch_size: "\${tasks.batch_sweep.outputs.micro_batch}",
           grad_accum: "\${tasks.batch_sweep.outputs.grad_accum}"}
Y
run_dagrun run capped.yaml --plain
expect_rc 0
R=$(run_dir capped)
O="$R/batch_sweep/out"
expect_in "$R/batch_sweep/attempt-1/log" "above the memory_cap"
expect_in "$R/batch_sweep/attempt-1/log" "<- recommended"
/usr/bin/python3 - "$O" "$R" "$CAP" <<'P' || fail "capped sweep: $(cat "$O/sweep.json")"
import csv, json, math, re, sys
out, run, cap = sys.argv[1], sys.argv[2], int(sys.argv[3])
r = json.load(open(out + "/sweep.json"))
rows = r["rows"]
assert r["memory_cap_bytes"] == cap, r["memory_cap_bytes"]
# Stopped at the cap, before micro-batch 16, which is named.
assert [x["batch"] for x in rows] == [1, 2, 4, 8], rows
assert rows[-1]["stopped_reason"] == r["stopped_reason"]
assert r["stopped_reason"].startswith("memory_cap: micro-batch 16 would take"), r["stopped_reason"]
for x in rows:
    assert x["memory_bytes"] <= cap, (x, cap)
    assert x["tokens_per_s"] > 0 and math.isfinite(x["loss"]) and x["grad_norm"] > 0, x
    # VmHWM, the cross-check, holds the engine and the rest of the process.
    assert x["rss_peak_bytes"] >= x["memory_bytes"], x
# The recommendation: a measured size within the cap, the smallest unless
# a larger one is faster by more than pick_margin (5%) than the pick so
# far, and accumulation up to target_batch 20.
rec = r["recommendation"]
byb = {x["batch"]: x for x in rows}
m = rec["micro_batch"]
assert m in byb and rec["memory_bytes"] == byb[m]["memory_bytes"] <= cap, rec
assert r["pick_margin"] == 0.05, r["pick_margin"]
want = None
for x in rows:
    if x["batch"] <= 20 and (want is None or x["tokens_per_s"] > 1.05 * want["tokens_per_s"]):
        want = x
assert m == want["batch"], (m, rows)
best = max(x["tokens_per_s"] for x in rows)
assert byb[m]["tokens_per_s"] >= best / 1.05, (rec, best)
assert rec["grad_accum"] == -(-20 // m) and rec["global_batch"] == m * rec["grad_accum"] >= 20, rec
# Outputs, as train downstream got them.
outs = json.load(open(run + "/batch_sweep/outputs.json"))
outs = outs.get("outputs", outs)
assert int(outs["micro_batch"]) == m and int(outs["grad_accum"]) == rec["grad_accum"], outs
assert int(outs["global_batch"]) == rec["global_batch"] and int(outs["memory_bytes"]) == rec["memory_bytes"], outs
assert outs["sweep"] == out + "/sweep.json" or outs["sweep"].endswith("/batch_sweep/out/sweep.json"), outs
a = json.load(open(run + "/train/attempt-1/attempt.json"))
assert a["params"]["batch_size"] == m and a["params"]["grad_accum"] == rec["grad_accum"], a["params"]
s = json.load(open(run + "/train/out/summary.json"))
assert s["tokens"] == 3 * m * rec["grad_accum"] * 32, s
# CSV and SVG.
c = list(csv.DictReader(open(out + "/sweep.csv")))
assert [int(x["batch"]) for x in c] == [1, 2, 4, 8], c
assert c[-1]["stopped_reason"] == r["stopped_reason"] and not c[0]["stopped_reason"], c
svg = open(out + "/sweep.svg").read()
charts = re.findall(r'<svg[^>]*class="chart"[^>]*data-title="([^"]*)"', svg)
assert len(charts) == 2, charts
series = dict(re.findall(r'class="series" data-label="([^"]*)" data-points="(\d+)"', svg))
assert series["tokens/s"] == "4" and series["engine (computed)"] == "4", series
assert any(k.startswith("memory_cap") for k in series), series
# The pick is marked and labelled in view on both charts.
labels = re.findall(r'<text class="mark-label"[^>]*>([^<]*)</text>', svg)
assert labels == ["recommended: micro-batch %d" % m] * 2, labels
assert svg.count('class="mark"') == 2, svg.count('class="mark"')
print("micro_batch %d, grad_accum %d; sweep:" % (m, rec["grad_accum"]))
for x in rows:
    print("  %3d %9.0f tok/s %8.0f KiB engine %8.0f KiB VmHWM loss %.3f" % (x["batch"], x["tokens_per_s"], x["memory_bytes"] / 1024, x["rss_peak_bytes"] / 1024, x["loss"]))
P

# A cap below even micro-batch 1 fails the task, saying so.
cat > tiny.yaml <<Y
dag: tiny
tasks:
  batch_sweep: {stage: batch_sweep, with: {data: "$DATA", $MODEL, memory_cap: 100KiB}}
Y
run_dagrun run tiny.yaml --plain
expect_rc 1
expect_in "$T/out" "memory_cap: micro-batch 1 would take"

# A real allocation failure: under an address-space limit, with the cap
# far above it, the sweep stops at the first size malloc refuses, reports
# it, and still recommends among the sizes before. (Sanitizers reserve
# terabytes of address space: there the limit cannot be set.)
if ! grep -q "DAGRUN_SANITIZE:BOOL=ON" "${DAGRUN_BUILD_DIR:-/nonexistent}/CMakeCache.txt" 2>/dev/null; then
  cat > oom.yaml <<Y
dag: oom
tasks:
  batch_sweep: {stage: batch_sweep, with: {data: "$DATA", n_layer: 2, n_head: 2, n_embd: 64, block_size: 128, threads: 1, steps_per_size: 1, max_batch: 4096, memory_cap: 64GiB}}
Y
  set +e
  (ulimit -v 1500000; "$DAGRUN" run oom.yaml --plain >"$T/out" 2>"$T/err")
  RC=$?
  set -e
  expect_rc 0
  RO=$(run_dir oom)
  /usr/bin/python3 - "$RO/batch_sweep/out/sweep.json" <<'P' || fail "allocation failure: $(cat "$RO/batch_sweep/attempt-1/log" | tail -20)"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["stopped_reason"].startswith("out of memory: micro-batch"), r["stopped_reason"]
assert len(r["rows"]) >= 1 and r["recommendation"]["micro_batch"] >= 1, r
print("allocation failure:", r["stopped_reason"][:150], "; rows", [x["batch"] for x in r["rows"]])
P
fi
pass
