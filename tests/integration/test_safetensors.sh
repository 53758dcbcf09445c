#!/usr/bin/env bash
# safetensors against an independent reader and writer: Python with json
# and numpy only, following the format's description
# (https://huggingface.co/docs/safetensors). Our file must read back in
# Python with the names, shapes, values and metadata we wrote; Python's
# file must read back in C.
. "$(dirname "$0")/lib.sh"
ST_DUMP="${DAGRUN_BUILD_DIR:?}/bin/st_dump"
[ -x "$ST_DUMP" ] || fail "no $ST_DUMP (build the st_dump target)"
PY=/usr/bin/python3
$PY -c 'import numpy' 2>/dev/null || { echo "skip: no numpy"; pass; exit 0; }

"$ST_DUMP" write "$T/c.safetensors" || fail "st_dump write failed"

# Python reads C's file.
$PY - "$T/c.safetensors" <<'PYEOF' || fail "Python could not read our file"
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
assert n % 8 == 0 and raw[8 + n - 1:8 + n] in (b" ", b"}"), "header padding"
hdr = json.loads(raw[8:8 + n])
data = raw[8 + n:]
meta = hdr.pop("__metadata__")
assert meta == {"format": "pt", "step": "12"}, meta
def load(e):
    b, end = e["data_offsets"]
    if e["dtype"] == "F32":
        a = np.frombuffer(data[b:end], dtype="<f4")
    else:
        a = (np.frombuffer(data[b:end], dtype="<u2").astype("<u4") << 16).view("<f4")
    return a.reshape(e["shape"])
assert list(hdr) == ["wte", "ln", "scalar", "empty"], list(hdr)
t = {k: load(v) for k, v in hdr.items()}
assert np.array_equal(t["wte"], np.arange(12, dtype="<f4").reshape(4, 3) / 2 - 1)
# bf16 of 1, 1+2^-8 (tie: down to even), 1+3*2^-8 (tie: up to even), -2.5,
# 1e30 and pi, rounded to nearest even by hand:
src = np.array([1, 1 + 2**-8, 1 + 3 * 2**-8, -2.5, 1e30, 3.14159265], "<f4")
u = src.view("<u4").astype(np.uint64)
rne = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u4") << 16
want = rne.astype("<u4").view("<f4")
assert np.array_equal(t["ln"], want), (t["ln"], want)
assert t["ln"][1] == 1.0 and t["ln"][2] == 1 + 2**-6
assert t["scalar"].shape == () and t["scalar"] == 3.25
assert t["empty"].shape == (0, 3)
assert max(v["data_offsets"][1] for v in hdr.values()) == len(data)
PYEOF

# C reads Python's file (json.dumps' own spacing, BF16 by truncation, F16
# as numpy writes it).
$PY - "$T/py.safetensors" <<'PYEOF' || fail "Python could not write its file"
import json, struct, sys
import numpy as np
x = np.arange(6, dtype="<f4").reshape(2, 3) * 0.25
y = (np.array([1.5, -3.0, 0.0078125, 65536.0], "<f4").view("<u4") >> 16).astype("<u2")
# F16 (numpy's own half): normals, the largest, the smallest normal and
# subnormal, a subnormal between, signed zero, infinity, NaN.
z = np.array([1.5, -3.0, 65504.0, 2**-14, 2**-24, 3 * 2**-20, -0.0, np.inf, np.nan], "<f2")
hdr = {"__metadata__": {"note": "from python"},
       "x": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
       "y": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]},
       "z": {"dtype": "F16", "shape": [9], "data_offsets": [32, 50]}}
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + x.tobytes() + y.tobytes() + z.tobytes())
PYEOF
"$ST_DUMP" read "$T/py.safetensors" >"$T/out" 2>"$T/err" || fail "st_dump read: $(cat "$T/err")"
want='meta note=from python
x F32 [2,3] 0 0.25 0.5 0.75 1 1.25
y BF16 [4] 1.5 -3 0.0078125 65536
z F16 [9] 1.5 -3 65504 6.10351562e-05 5.96046448e-08 2.86102295e-06 -0 inf nan'
[ "$(cat "$T/out")" = "$want" ] || fail "st_dump read printed
$(cat "$T/out")
expected
$want"

# And our own file through our reader.
"$ST_DUMP" read "$T/c.safetensors" >"$T/out2" || fail "st_dump read c"
grep -q '^ln BF16 \[6\] 1 1 1.015625 -2.5 ' "$T/out2" || fail "ln: $(cat "$T/out2")"
pass
