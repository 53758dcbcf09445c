# TensorBoard event files: every task that reports metrics gets one per
# attempt in its task directory, and read back by a reader written here
# (TFRecord framing, both masked CRC-32Cs with its own CRC-32C, protobuf
# varints decoded by hand) they hold exactly metrics.jsonl's scalars:
# same tags, steps and values (as float32), in the same order, every
# scalar with its simple_value (0.0 included). Where the
# tensorboard package is installed, its own EventAccumulator reads them
# too. A kill -9 of dagrun mid-run leaves every record written whole.
. "$(dirname "$0")/lib.sh"

PY=${DAGRUN_TEST_PYTHON:-/usr/bin/python3}

cat > "$T/tbread.py" <<'P'
"""An independent reader of TensorBoard event files: checks them against
the task's metrics.jsonl. Usage: tbread.py TASK_DIR [--prefix]."""
import glob, json, math, os, socket, struct, sys, time

def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    return c ^ 0xFFFFFFFF

assert crc32c(b"123456789") == 0xE3069283

def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

def records(path):
    data = open(path, "rb").read()
    at = 0
    while at < len(data):
        assert len(data) - at >= 12, f"{path}: torn header at {at}"
        (n,) = struct.unpack_from("<Q", data, at)
        (hcrc,) = struct.unpack_from("<I", data, at + 8)
        assert hcrc == masked(data[at:at + 8]), f"{path}: bad length CRC at {at}"
        assert at + 16 + n <= len(data), f"{path}: torn record at {at}"
        body = data[at + 12:at + 12 + n]
        (dcrc,) = struct.unpack_from("<I", data, at + 12 + n)
        assert dcrc == masked(body), f"{path}: bad data CRC at {at}"
        yield body
        at += 16 + n

def varint(b, i):
    v = shift = 0
    while True:
        x = b[i]; i += 1
        v |= (x & 0x7F) << shift
        shift += 7
        if not x & 0x80:
            return v, i

def fields(b):
    """(field number, wire type, value) of one message, in order."""
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        f, w = key >> 3, key & 7
        if w == 0:
            v, i = varint(b, i)
        elif w == 1:
            v = b[i:i + 8]; i += 8
        elif w == 2:
            n, i = varint(b, i)
            v = b[i:i + n]; i += n
        elif w == 5:
            v = b[i:i + 4]; i += 4
        else:
            raise AssertionError(f"wire type {w}")
        assert i <= len(b), "field runs past its message"
        yield f, w, v

def event(b):
    e = {"wall_time": 0.0, "step": 0}
    for f, w, v in fields(b):
        if (f, w) == (1, 1):
            e["wall_time"] = struct.unpack("<d", v)[0]
        elif (f, w) == (2, 0):
            e["step"] = v - (1 << 64) if v >= 1 << 63 else v
        elif (f, w) == (3, 2):
            e["file_version"] = v.decode()
        elif (f, w) == (5, 2):
            vals = []
            for sf, sw, sv in fields(v):
                assert (sf, sw) == (1, 2), (sf, sw)
                tag, val = "", None
                for vf, vw, vv in fields(sv):
                    if (vf, vw) == (1, 2):
                        tag = vv.decode()
                    elif (vf, vw) == (2, 5):
                        val = struct.unpack("<f", vv)[0]
                    else:
                        raise AssertionError(f"Value field {vf}/{vw}")
                # simple_value is a member of summary.proto's oneof value:
                # a scalar without it (0.0 left out) has no value at all.
                assert val is not None, f"{tag}: Value without simple_value"
                vals.append((tag, val))
            e["values"] = vals
        else:
            raise AssertionError(f"Event field {f}/{w}")
    return e

def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]

def same(a, b):
    return a == b or (math.isnan(a) and math.isnan(b))

task_dir, prefix = sys.argv[1], "--prefix" in sys.argv
want = [json.loads(l) for l in open(os.path.join(task_dir, "metrics.jsonl"))]
files = sorted(glob.glob(os.path.join(task_dir, "events.out.tfevents.*")))
attempts = sorted({m["attempt"] for m in want})
assert len(files) == len(attempts), (files, attempts)
host = socket.gethostname()
got = []
for path in files:
    name = os.path.basename(path)
    secs, rest = name[len("events.out.tfevents."):].split(".", 1)
    assert abs(int(secs) - time.time()) < 3600, path
    assert rest.startswith(host + "."), (path, host)
    evs = [event(r) for r in records(path)]
    assert evs[0].get("file_version") == "brain.Event:2", evs[0]
    assert "values" not in evs[0]
    for e in evs[1:]:
        assert len(e["values"]) == 1, e
        tag, val = e["values"][0]
        got.append((tag, e["step"], val, e["wall_time"]))
# Records go out before their metrics.jsonl line: after a kill, the events
# may hold a record more. They may also hold fewer: the metrics of the
# step the orphaned worker finished on its way out are appended to
# metrics.jsonl by the worker (worker.h), not to dagrun's events file;
# those come after every step the events hold.
if prefix:
    assert len(got) - len(want) <= 1, (len(got), len(want))
    extra = want[len(got):]
    assert all(m["step"] >= g[1] for m in extra for g in got), extra
    got = got[:len(want)]
    want = want[:len(got)]
assert len(got) == len(want), (len(got), len(want))
for i, (g, m) in enumerate(zip(got, want)):
    tag, step, val, wall = g
    assert (tag, step) == (m["name"], m["step"]), (g, m)
    assert same(val, f32(m["value"])), (g, m)
    # After a kill, the last record dagrun wrote may have no line of its
    # own: the orphaned worker appends that metric itself, at its own
    # time (CI met 11 ms under ASan). Its tag, step and value still match.
    if not (prefix and i == len(got) - 1):
        assert abs(wall - m["time"]) < 1e-3, (g, m)
zeros = sum(1 for g in got if g[2] == 0.0)
if "--zeros" in sys.argv:
    assert zeros, "no scalar of exactly 0.0 to check"
print(f"{task_dir}: {len(files)} file(s), {len(got)} scalars "
      f"({zeros} of 0.0), "
      f"{len({g[0] for g in got})} tags")

if "--tensorboard" in sys.argv:
    from tensorboard.backend.event_processing import event_accumulator as ea
    acc = ea.EventAccumulator(task_dir, size_guidance={ea.SCALARS: 0})
    acc.Reload()
    tags = sorted(acc.Tags()["scalars"])
    assert tags == sorted({m["name"] for m in want}), tags
    for tag in tags:
        mine = [(m["step"], f32(m["value"])) for m in want if m["name"] == tag]
        theirs = [(s.step, s.value) for s in acc.Scalars(tag)]
        assert len(mine) == len(theirs) and all(
            a[0] == b[0] and same(a[1], b[1]) for a, b in zip(mine, theirs)), (tag, mine[:3], theirs[:3])
    print(f"{task_dir}: tensorboard's EventAccumulator agrees on {len(tags)} tags")
P

readers="the test's own reader"
TB=""
if "$PY" -c 'import tensorboard.backend.event_processing.event_accumulator' 2>/dev/null; then
  TB=--tensorboard
  readers="$readers and tensorboard's EventAccumulator"
fi

# check_task TASK_DIR [--prefix]
check_task() {
  "$PY" "$T/tbread.py" "$1" $TB "${@:2}" || fail "events of $1 differ from its metrics.jsonl"
}

# The data stages' tasks (shard, tokenize) report metrics too.
DATA=$(make_token_data tb 320)
D=$(run_dir data-tb)
for task in shard tokenize; do
  [ -s "$D/$task/metrics.jsonl" ] || fail "$task reported no metrics"
  check_task "$D/$task"
done

# A short training run: loss, lr, grad_norm, the step times, ...
cat > train.yaml <<Y
dag: tb
tasks:
  train: {stage: train, with: {data: "$DATA", n_layer: 1, n_head: 2, n_embd: 32, block_size: 32, batch_size: 4, threads: 1, steps: 20, eval_every: 10, eval_batches: 2, samples: 0}}
Y
run_dagrun run train.yaml --plain
expect_rc 0
R=$(run_dir tb)
# time_comm_s is exactly 0.0 in one process: every record of it must carry
# its simple_value.
grep -q '"name":"time_comm_s","value":0[,}]' "$R/train/metrics.jsonl" ||
  fail "no time_comm_s of 0.0 to check: $(grep -m1 time_comm_s "$R/train/metrics.jsonl")"
check_task "$R/train" --zeros
for tag in loss val_loss lr grad_norm tokens_per_s step_time_s time_data_s tokens; do
  grep -q "\"name\":\"$tag\"" "$R/train/metrics.jsonl" || fail "no $tag metric"
done

# kill -9 of dagrun in the middle of a long run: every record written is
# whole and matches metrics.jsonl.
sed -e 's/dag: tb/dag: tbkill/' -e 's/steps: 20/steps: 100000/' train.yaml > kill.yaml
"$DAGRUN" run kill.yaml --plain >kill.out 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  f=$(ls "$DAGRUN_RUNS_DIR"/tbkill/*/train/metrics.jsonl 2>/dev/null || true)
  [ -n "$f" ] && [ "$(wc -l < "$f")" -ge 200 ] && break
  sleep 0.1
done
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
# The worker sees its pipe close and stops its attempt (a checkpoint
# first): wait for it, so that it writes nothing while the test reads.
RK=$(run_dir tbkill)
wpid=$(/usr/bin/python3 -c '
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
print(db.execute("SELECT pid FROM attempts WHERE task = ?", ("train",)).fetchone()[0] or "")
' "$T/.dagrun/state.db" 2>/dev/null || true)
for _ in $(seq 1 200); do
  [ -n "$wpid" ] && pid_alive "$wpid" || break
  sleep 0.1
done
[ "$(wc -l < "$RK/train/metrics.jsonl")" -ge 200 ] || fail "the long run never got going: $(cat kill.out)"
check_task "$RK/train" --prefix

echo "readers: $readers"
pass
