# The shard stage streams: a corpus over ten times memory_limit (85 MB
# against 8 MiB) shards with the worker's peak RSS under the limit plus
# the process's own baseline, measured here on a two-document corpus with
# the same params (about 6 MiB on Debian 12 / x86-64: the dagrun binary,
# its libraries, libcrypto). A stage that held the corpus in memory
# would peak near 85 MB.
. "$(dirname "$0")/lib.sh"

LIMIT_MIB=8
mkdir -p tiny big
printf 'one\n%%\ntwo\n' > tiny/t.txt
# 17 files of 5 MB: "%"-separated documents of ~3 KB, distinct (random).
/usr/bin/python3 -c '
import os, base64
for f in range(17):
    raw = base64.b64encode(os.urandom(3_750_000)).decode()
    with open(f"big/part{f:02d}.txt", "w") as out:
        out.write("\n%\n".join(f"doc {f}-{i} " + raw[i:i + 3000]
                               for i in range(0, len(raw), 3000)) + "\n")
'
for c in tiny big; do
  cat > $c.yaml <<Y
dag: $c
tasks:
  shard: {stage: shard, with: {input: $c, separator: "%", memory_limit: ${LIMIT_MIB}MiB, shards: 8}}
Y
  run_dagrun run $c.yaml --plain
  expect_rc 0
done
/usr/bin/python3 - "$(run_dir tiny)" "$(run_dir big)" "$LIMIT_MIB" <<'P' || fail "memory not bounded"
import json, os, sys
tiny = json.load(open(sys.argv[1] + "/shard/out/manifest.json"))
big = json.load(open(sys.argv[2] + "/shard/out/manifest.json"))
limit = int(sys.argv[3]) << 20
corpus = sum(os.path.getsize("big/" + f) for f in os.listdir("big"))
assert corpus >= 10 * limit, (corpus, limit)
assert big["inputs"]["bytes"] == corpus, big["inputs"]
assert big["documents"]["kept"] == big["documents"]["read"] > 25000, big["documents"]
base, peak = tiny["peak_rss_bytes"], big["peak_rss_bytes"]
print(f"baseline {base / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB, "
      f"limit {limit / 2**20:.0f} MiB, corpus {corpus / 1e6:.0f} MB")
assert 0 < base < 64 << 20, base
assert peak <= base + limit, (peak, base, limit)
tb = [s["bytes"] for s in big["shards"] if s["split"] == "train"]
mean = sum(tb) / len(tb)
assert all(abs(b - mean) <= 0.01 * mean for b in tb), tb
P
# The scratch spools are gone.
[ -z "$(find "$(run_dir big)" -name 'shard-spool-*')" ] || fail "spool files left"
pass
