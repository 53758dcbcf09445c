# The lr_find stage on a tiny model: from scratch it suggests a learning
# rate inside [min_lr, max_lr] and below the one where the loss diverged,
# and the suggestion is checked for real: 40 steps of train at it (taken
# downstream as ${tasks.lr_find.outputs.lr}) lower the loss by a clear
# margin, and 40 steps at 100x it end worse. From init_from, it starts
# at the checkpoint's (trained) loss and leaves the checkpoint's files
# byte-identical. Its JSON, CSV and SVG agree with each other.
. "$(dirname "$0")/lib.sh"

DATA=$(make_token_data lf 320)
MODEL='n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, threads: 1, seed: 7'
# train at a constant learning rate, no warmup, nothing skipped.
TRAIN="$MODEL, batch_size: 8, steps: 40, warmup: 0, schedule: constant, spike_policy: none, eval_every: 0, eval_batches: 10, checkpoint_every: 0, samples: 0"

cat > find.yaml <<Y
dag: find
tasks:
  lr_find: {stage: lr_find, with: {data: "$DATA", $MODEL, batch_size: 8}}
  train: {stage: train, needs: [lr_find], with: {data: "$DATA", $TRAIN, lr: "\${tasks.lr_find.outputs.lr}"}}
Y
run_dagrun run find.yaml --plain
expect_rc 0
R=$(run_dir find)
O="$R/lr_find/out"
expect_in "$R/lr_find/attempt-1/log" "suggested lr"
/usr/bin/python3 - "$O" >suggest.txt <<'P' || fail "lr_find result: $(head -c 3000 "$O/lr_find.json")"
import csv, json, math, re, sys
out = sys.argv[1]
r = json.load(open(out + "/lr_find.json"))
pts, s = r["points"], r["suggestion"]
assert r["min_lr"] <= s <= r["max_lr"], (s, r["min_lr"], r["max_lr"])
# max_lr 10 diverges, and the suggestion lies before it.
assert r["stopped_reason"].startswith("diverged"), r["stopped_reason"]
assert r["diverged_lr"] is not None and s < r["diverged_lr"] / 10, (s, r["diverged_lr"])
assert 10 <= len(pts) <= 200, len(pts)
# lr grows exponentially from min_lr: lr_i = min_lr (max/min)^(i/199).
for i, p in enumerate(pts):
    want = 1e-7 * (10 / 1e-7) ** (i / 199)
    assert abs(p["lr"] / want - 1) < 1e-9, (i, p["lr"], want)
# The smoothed loss is the bias-corrected EMA (0.98) of the raw losses.
avg = 0
for i, p in enumerate(pts):
    if p["loss"] is None:
        break
    avg = 0.98 * avg + 0.02 * p["loss"]
    assert abs(p["smoothed"] - avg / (1 - 0.98 ** (i + 1))) < 1e-6, i
# The suggestion is a point of the test; the smoothed loss falls there.
k = [p["lr"] for p in pts].index(s)
assert pts[k + 1]["smoothed"] < pts[k - 1]["smoothed"], k
assert r["suggested_lr"] == s, (r["suggested_lr"], s)
# min_loss_lr is honest: where the raw loss is at its lowest, not the
# forward average's lagging minimum (which sat in the divergence).
ok = [p for p in pts if "unlagged" in p]
km = [p["lr"] for p in pts].index(r["min_loss_lr"])
raw = [p["loss"] for p in ok]
lagged = min(range(len(ok)), key=lambda i: ok[i]["smoothed"])
near = sorted(raw[max(0, km - 5):km + 6])[len(raw[max(0, km - 5):km + 6]) // 2]
assert near <= min(raw) + 0.25 * (raw[0] - min(raw)), (near, min(raw), raw[0])
assert km <= lagged and r["min_loss_lr"] < r["diverged_lr"], (km, lagged)
# The plot's y axis spans the useful band, from under the lowest loss to
# 1.5x the first, not the divergence; both marks are labelled in view.
lo, hi = r["plot_y_range"]
assert lo <= min(raw) and abs(hi - 1.5 * raw[0]) < 1e-9, (lo, hi, raw[0])
rows = list(csv.DictReader(open(out + "/lr_find.csv")))
assert len(rows) == len(pts), (len(rows), len(pts))
assert abs(float(rows[k]["lr"]) - s) < 1e-7 * s
svg = open(out + "/lr_find.svg").read()
assert svg.count('class="chart"') == 1
n = [int(x) for x in re.findall(r'class="series" data-label="[^"]*" data-points="(\d+)"', svg)]
inband = lambda key, ps: sum(1 for p in ps if p.get(key) is not None and lo <= p[key] <= hi)
assert n == [inband("loss", pts), inband("smoothed", pts), inband("unlagged", ok)], n
assert max(p["loss"] for p in ok) > hi or r["diverged_lr"], "nothing to clip"
labels = re.findall(r'<text class="mark-label"[^>]*>([^<]*)</text>', svg)
assert len(labels) == 2 and labels[0].startswith("suggested lr") and labels[1].startswith("min loss lr"), labels
print(repr(s))
P
SUGGEST=$(cat suggest.txt)
expect_in "$R/lr_find/attempt-1/log" "output lr="
expect_in "$R/lr_find/attempt-1/log" "output suggested_lr="

# grad_accum: the test runs at the global batch train will use, as
# train's grad_accum means it (the first step averages two batches).
cat > accum.yaml <<Y
dag: accum
tasks:
  lr_find: {stage: lr_find, with: {data: "$DATA", $MODEL, batch_size: 8, grad_accum: 2, steps: 20, max_lr: 0.01}}
Y
run_dagrun run accum.yaml --plain
expect_rc 0
"$PY" - "$O/lr_find.json" "$(run_dir accum)/lr_find/out/lr_find.json" <<'P' || fail "grad_accum: $(head -c 600 "$(run_dir accum)/lr_find/out/lr_find.json")"
import json, sys
one, two = (json.load(open(p)) for p in sys.argv[1:3])
assert one["grad_accum"] == 1 and one["global_batch"] == 8, one["global_batch"]
assert two["grad_accum"] == 2 and two["global_batch"] == 16, two["global_batch"]
assert two["points"][0]["loss"] != one["points"][0]["loss"], (two["points"][0], one["points"][0])
P
expect_in "$(run_dir accum)/lr_find/attempt-1/log" "20 steps of 2 x 8 sequences (grad_accum 2)"

# 100x the suggestion (train takes lr below 10).
BIG=$(/usr/bin/python3 -c "import sys; print(100 * float(sys.argv[1]))" "$SUGGEST")
cat > big.yaml <<Y
dag: big
tasks:
  train: {stage: train, with: {data: "$DATA", $TRAIN, lr: $BIG}}
Y
run_dagrun run big.yaml --plain
expect_rc 0
RB=$(run_dir big)
/usr/bin/python3 - "$R/train/out/summary.json" "$RB/train/out/summary.json" "$R/train/metrics.jsonl" "$SUGGEST" <<'P' || fail "training at the suggestion $SUGGEST vs 100x: $(cat "$R/train/out/summary.json" "$RB/train/out/summary.json")"
import json, math, sys
good, big = (json.load(open(p)) for p in sys.argv[1:3])
lr = [json.loads(l)["value"] for l in open(sys.argv[3]) if json.loads(l)["name"] == "lr"]
# the output has 6 digits
assert all(abs(x - float(sys.argv[4])) < 1e-5 * x for x in lr), lr[:3]
print("suggested lr %s: loss %.3f -> val %.3f; 100x: val %s" % (sys.argv[4], good["init_loss"], good["val_loss"], big.get("val_loss")))
# At the suggestion the loss drops by a clear margin...
assert good["val_loss"] < good["init_loss"] - 0.5, good
# ...and 100x does worse: a higher loss, or none at all.
bv = big.get("val_loss")
assert bv is None or not math.isfinite(bv) or bv > good["val_loss"] + 0.2, (bv, good["val_loss"])
P

# init_from a checkpoint: the test starts from its weights (a loss well
# below the scratch model's) and the checkpoint is left byte-identical.
cat > base.yaml <<Y
dag: base
tasks:
  train: {stage: train, with: {data: "$DATA", $MODEL, batch_size: 8, steps: 60, lr: 0.01, warmup: 0, eval_every: 0, checkpoint_every: 0, samples: 0}}
Y
run_dagrun run base.yaml --plain
expect_rc 0
CK=$(ls -d "$(run_dir base)"/train/checkpoints/step-*/ | tail -n 1)
(cd "$CK" && find . -type f | sort | xargs sha256sum) > before.sha
cat > tune.yaml <<Y
dag: tune
tasks:
  lr_find: {stage: lr_find, with: {data: "$DATA", $MODEL, batch_size: 8, steps: 50, min_lr: 1e-6, max_lr: 1, init_from: "$CK"}}
Y
run_dagrun run tune.yaml --plain
expect_rc 0
(cd "$CK" && find . -type f | sort | xargs sha256sum) > after.sha
cmp before.sha after.sha || fail "lr_find changed the checkpoint it started from: $(diff before.sha after.sha)"
[ "$(wc -l < before.sha)" -ge 3 ] || fail "checkpoint files: $(cat before.sha)"
RT=$(run_dir tune)
expect_in "$RT/lr_find/attempt-1/log" "init_from $CK"
/usr/bin/python3 - "$R/lr_find/out/lr_find.json" "$RT/lr_find/out/lr_find.json" <<'P' || fail "init_from did not start from the checkpoint's weights"
import json, sys
scratch, tuned = (json.load(open(p)) for p in sys.argv[1:3])
assert tuned["points"][0]["loss"] < scratch["points"][0]["loss"] - 0.5, (tuned["points"][0], scratch["points"][0])
assert 1e-6 <= tuned["suggestion"] <= 1
P

# Bad params are refused.
cat > bad.yaml <<Y
dag: bad
tasks:
  lr_find: {stage: lr_find, with: {data: "$DATA", $MODEL, min_lr: 1, max_lr: 0.1}}
Y
run_dagrun run bad.yaml --plain
expect_rc 1
expect_in "$T/out" "need 0 < min_lr < max_lr"
echo "suggested lr $SUGGEST" >&2
pass
