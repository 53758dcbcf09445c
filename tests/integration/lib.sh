# Shared helpers for integration tests. Source it first thing:
#   . "$(dirname "$0")/lib.sh"
# It gives each test its own temporary directory ($T, removed on success)
# and fails loudly with what was expected and what was found.
set -euo pipefail

: "${DAGRUN:?DAGRUN must name the dagrun binary (ctest sets it)}"
: "${DAGRUN_SOURCE_DIR:?}"
: "${DAGRUN_TEST_PLUGIN_DIR:?}"
export DAGRUN_PLUGIN_PATH="$DAGRUN_TEST_PLUGIN_DIR"
T=$(mktemp -d "${TMPDIR:-/tmp}/dagrun-test.XXXXXX")
export DAGRUN_RUNS_DIR="$T/runs"
cd "$T"
TEST_NAME=$(basename "$0" .sh)

fail() {
  echo "FAIL [$TEST_NAME]: $*" >&2
  echo "  (work dir kept: $T)" >&2
  exit 1
}

pass() {
  rm -rf "$T"
  echo "ok"
}

# run_dagrun ARGS...: runs dagrun, stores its exit code in RC and its
# output in $T/out and $T/err. Never fails by itself.
run_dagrun() {
  set +e
  "$DAGRUN" "$@" >"$T/out" 2>"$T/err"
  RC=$?
  set -e
}

expect_rc() {
  [ "$RC" -eq "$1" ] || fail "expected exit code $1, got $RC
--- stdout:
$(cat "$T/out")
--- stderr:
$(cat "$T/err")"
}

# expect_in FILE TEXT: FILE contains the fixed string TEXT.
expect_in() {
  grep -qF -- "$2" "$1" || fail "expected $1 to contain: $2
--- $1:
$(cat "$1")"
}

expect_not_in() {
  if grep -qF -- "$2" "$1"; then fail "expected $1 not to contain: $2"; fi
}

# The one run directory made under $DAGRUN_RUNS_DIR/<dag>/.
run_dir() {
  local d
  d=$(ls -d "$DAGRUN_RUNS_DIR/$1"/*/ 2>/dev/null | tail -n 1)
  [ -n "$d" ] || fail "no run directory for dag $1"
  echo "${d%/}"
}

# task_field RUN_DIR TASK FIELD: a field of a task in run.json.
task_field() {
  /usr/bin/python3 -c '
import json, sys
run = json.load(open(sys.argv[1] + "/run.json"))
for t in run["tasks"]:
    if t["name"] == sys.argv[2]:
        v = t.get(sys.argv[3])
        print("" if v is None else v)
        break
else:
    sys.exit("no task " + sys.argv[2])
' "$1" "$2" "$3"
}

# A process counts as alive unless it is gone or a zombie (a container's
# init may be slow to reap the orphans a killed task leaves).
pid_alive() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

# write_term_ignorer FILE: a shell script that ignores SIGTERM, writes its
# pid to its first argument and runs until SIGKILL (for the tests of the
# grace period between SIGTERM and SIGKILL).
write_term_ignorer() {
  cat > "$1" <<'S'
trap '' TERM
echo $$ > "$1"
while :; do sleep 0.2; done
S
}

# make_token_data NAME VOCAB: a small English-like corpus, sharded and
# tokenized by the real stages; prints the tokenize task's out/ directory.
make_token_data() {
  mkdir -p "$T/corpus-$1"
  /usr/bin/python3 - "$T/corpus-$1" <<'P'
import random, sys
rng = random.Random(11)
subjects = "the cat|a dog|my model|the gpu|our team|this loss|the data".split("|")
verbs = "eats|trains on|ignores|follows|beats|learns from|writes".split("|")
objects = "the fish|a batch|the tokens|every epoch|the logs|some text".split("|")
for f in range(4):
    with open(f"{sys.argv[1]}/part{f}.txt", "w") as out:
        docs = []
        for d in range(150):
            n = rng.randint(3, 12)
            docs.append(" ".join(f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(objects)}."
                                 for _ in range(n)) + f" ({f}.{d})")
        out.write("\n%\n".join(docs) + "\n")
P
  cat > "$T/data-$1.yaml" <<Y
dag: data-$1
tasks:
  shard: {stage: shard, with: {input: "$T/corpus-$1", separator: "%", shards: 2, val_fraction: 0.1}}
  tokenize: {stage: tokenize, needs: [shard], with: {shards: "\${tasks.shard.outputs.dir}", vocab_size: $2}}
Y
  "$DAGRUN" run "$T/data-$1.yaml" -q >"$T/data-$1.log" 2>&1 || fail "making token data failed: $(cat "$T/data-$1.log")"
  echo "$(run_dir "data-$1")/tokenize/out"
}

# start_webhook_server: a webhook endpoint on loopback for alert tests.
# POSTs to /ok... are answered 200 and their bodies appended, one a line,
# to $T/bodies.jsonl; /fail500 answers 500, /hang never answers, anything
# else 404. Sets BASE (http://127.0.0.1:PORT) and PORT; the server is
# killed when the test exits.
start_webhook_server() {
  unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
  cat > "$T/webhook_server.py" <<'P'
import http.server, json, socketserver, sys, threading, time
bodies = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(n)
        if self.path.startswith("/ok"):
            with open(bodies, "ab") as f:
                f.write(body + b"\n")
            self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
        elif self.path.startswith("/fail500"):
            self.send_response(500); self.end_headers()
        elif self.path.startswith("/hang"):
            time.sleep(3600)
        else:
            self.send_response(404); self.end_headers()
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
s = S(("127.0.0.1", 0), H)
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write(str(s.server_address[1]))
import os; os.rename(sys.argv[2] + ".tmp", sys.argv[2])
s.serve_forever()
P
  /usr/bin/python3 "$T/webhook_server.py" "$T/bodies.jsonl" "$T/port" &
  SERVER=$!
  trap 'kill $SERVER 2>/dev/null || true' EXIT
  for _ in $(seq 100); do [ -s "$T/port" ] && break; sleep 0.05; done
  [ -s "$T/port" ] || fail "test HTTP server did not start"
  PORT=$(cat "$T/port")
  BASE="http://127.0.0.1:$PORT"
}
