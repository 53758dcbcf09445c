# A shard task stopped by its timeout ends promptly on SIGTERM, even in
# the middle of one enormous document (a gzip bomb: 400 concatenated
# members of 64 MiB of one letter, 25 GiB uncompressed in a 26 MB file;
# not zeros, which are binary data the reader refuses at once), and
# leaves no spool or temporary shard file behind.
. "$(dirname "$0")/lib.sh"

mkdir -p bomb
/usr/bin/python3 -c '
import gzip
member = gzip.compress(b"a" * (64 << 20), compresslevel=1)
with open("bomb/letters.gz", "wb") as f:
    for _ in range(400):
        f.write(member)
'
cat > bomb.yaml <<'Y'
dag: bomb
tasks:
  shard:
    stage: shard
    timeout: 1s
    kill_grace: 60s
    with: {input: bomb}
Y
start=$(date +%s.%N)
run_dagrun run bomb.yaml --plain
end=$(date +%s.%N)
expect_rc 1
expect_in "$T/out" "timed out"
R=$(run_dir bomb)
# Stopped by the stage itself on SIGTERM, not by the SIGKILL 60 s later.
/usr/bin/python3 -c "import sys; sys.exit(0 if $end - $start < 15 else 1)" \
  || fail "the stage took $(/usr/bin/python3 -c "print($end - $start)") s to stop"
expect_in "$R/shard/attempt-1/log" "cancelled while reading"
[ -z "$(find "$R" -name 'shard-spool-*' -o -name '.tmp-*')" ] \
  || fail "left behind: $(find "$R" -name 'shard-spool-*' -o -name '.tmp-*')"
[ -z "$(ls -A "$R/shard/out")" ] || fail "out/ not empty: $(ls -A "$R/shard/out")"
pass
