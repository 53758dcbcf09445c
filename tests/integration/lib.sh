# Shared helpers for integration tests. Source it first thing:
#   . "$(dirname "$0")/lib.sh"
# It gives each test its own temporary directory ($T, removed on success)
# and fails loudly with what was expected and what was found.
set -euo pipefail

: "${DAGRUN:?DAGRUN must name the dagrun binary (ctest sets it)}"
: "${DAGRUN_SOURCE_DIR:?}"
: "${DAGRUN_TEST_PLUGIN_DIR:?}"
export DAGRUN_PLUGIN_PATH="$DAGRUN_TEST_PLUGIN_DIR"
# The Python of the helpers and checks (json; numpy where a check uses
# it): Debian's here, where the first python3 on PATH is another;
# DAGRUN_TEST_PYTHON elsewhere (tests/gpu/bundle.sh's env.sh sets it on a
# GPU machine).
PY=${DAGRUN_TEST_PYTHON:-/usr/bin/python3}
# The integration tests compare with CPU-exact results: on a machine with
# a GPU, train's default device: auto would take it. tests/gpu/ (gpu_env.sh
# sets DAGRUN_TEST_KEEP_GPU) is where the GPU is meant to be used.
[ -n "${DAGRUN_TEST_KEEP_GPU:-}" ] || export CUDA_VISIBLE_DEVICES=""
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

# run_to NAME CMD...: runs CMD with its stdout in NAME.out and its stderr
# in NAME.err (in the current directory), its exit code in RC. Never
# fails by itself.
run_to() {
  local name=$1
  shift
  set +e
  "$@" >"$name.out" 2>"$name.err"
  RC=$?
  set -e
}

# run_timed NAME CMD...: runs CMD under `timeout 60`, output in
# $T/NAME.out, exit code in RC, seconds taken in SECS.
run_timed() {
  local name=$1
  shift
  local t0 t1
  t0=$(date +%s%N)
  set +e
  timeout 60 "$@" >"$T/$name.out" 2>&1
  RC=$?
  set -e
  t1=$(date +%s%N)
  SECS=$(((t1 - t0) / 1000000000))
}

# wait_until SECONDS CMD...: polls CMD every 50ms until it succeeds;
# returns 1 when it never did.
wait_until() {
  local n=$(($1 * 20))
  shift
  while ! "$@" 2>/dev/null; do
    n=$((n - 1))
    [ "$n" -gt 0 ] || return 1
    sleep 0.05
  done
}

# serve_port LOG PID: waits (up to 10 s) for the `dagrun serve` of PID,
# started with --port 0 and its output in LOG, to say where it listens;
# sets PORT. Fails the test when it exits or never says.
serve_port() {
  PORT=
  for _ in $(seq 100); do
    PORT=$(sed -n 's|.*listening on http://[^ ]*:\([0-9][0-9]*\)/.*|\1|p' "$1")
    [ -n "$PORT" ] && return 0
    pid_alive "$2" || fail "serve exited: $(cat "$1")"
    sleep 0.1
  done
  fail "serve did not start: $(cat "$1")"
}

SERVE_PID=
# serve_start [--log FILE] [--dags PATH] [ARGS...]: `dagrun serve PATH
# --port 0 --token-file token --hmac-secret-file hmac ARGS...` in the
# background (PATH: dags unless given), its output in FILE (serve.log
# unless given). The write credentials are the files token and hmac, each
# passed when it exists; with neither, write_serve_secrets's are written
# (those http() signs with). TOKEN is set to the token. Sets SERVE_PID and
# PORT, and kills the daemon if the test exits early; serve_stop ends it.
# Schedules fire unless ARGS has --no-cron.
serve_start() {
  local log=serve.log dags=dags
  while [ $# -gt 0 ]; do
    case "$1" in
      --log) log=$2; shift 2 ;;
      --dags) dags=$2; shift 2 ;;
      *) break ;;
    esac
  done
  [ -f token ] || [ -f hmac ] || write_serve_secrets
  local creds=()
  [ ! -f token ] || creds+=(--token-file token)
  [ ! -f hmac ] || creds+=(--hmac-secret-file hmac)
  TOKEN=$(cat token 2>/dev/null || true)
  : >"$log" # before the background job opens it: serve_port reads it at once
  "$DAGRUN" serve "$dags" --port 0 "${creds[@]}" "$@" >"$log" 2>&1 &
  SERVE_PID=$!
  trap 'kill "$SERVE_PID" 2>/dev/null || true' EXIT
  serve_port "$log" "$SERVE_PID"
}

# serve_stop [PID]: SIGTERM to the `dagrun serve` of PID (default
# SERVE_PID, whose exit trap it then drops), and waits (up to 30 s) for it
# to exit; fails the test when it does not.
serve_stop() {
  local pid=${1:-$SERVE_PID}
  kill -TERM "$pid"
  for _ in $(seq 300); do
    if ! pid_alive "$pid"; then
      wait "$pid" 2>/dev/null || true
      [ "$pid" = "${SERVE_PID:-}" ] && trap - EXIT
      return 0
    fi
    sleep 0.1
  done
  fail "serve did not stop after SIGTERM"
}

# need_chromium: sets CHROMIUM, or fails the test saying what to install.
need_chromium() {
  CHROMIUM=$(command -v chromium || true)
  [ -n "$CHROMIUM" ] || fail "chromium is not installed: the dashboard's checks
need Debian's chromium package (scripts/setup.sh --tests installs it)"
}

# browser_check WHAT SCRIPT ARGS...: runs the Python SCRIPT (it drives
# headless Chromium with tests/integration/cdp.py) as SCRIPT CHROMIUM
# CDP_DIR PROFILE ARGS... under a 120 s limit; fails the test naming WHAT
# with its output and Chromium's last words unless it exits 0 and prints
# "WHAT: ok".
browser_check() {
  local what=$1 script=$2 rc=0
  shift 2
  timeout 120 "$PY" "$script" "$CHROMIUM" "$DAGRUN_SOURCE_DIR/tests/integration" \
    "$T/chromium" "$@" >cdp.out 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || fail "$what (exit $rc): $(cat cdp.out)
--- chromium:
$(tail -5 "$T/chromium.err" 2>/dev/null)"
  expect_in cdp.out "$what: ok"
}

# api METHOD PATH [BODY] [TOKEN]: http with TOKEN as the bearer token
# (none, or no TOKEN: no credentials); prints "STATUS BODY". Never fails
# by itself.
api() {
  local auth=none
  if [ -n "${4:-}" ] && [ "$4" != none ]; then auth="bearer:$4"; fi
  http "$1" "$2" "${3:-}" "$auth"
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

# The newest run directory under $DAGRUN_RUNS_DIR/<dag>/.
run_dir() {
  # The newest: by the id's second, then by run.json's started
  # (milliseconds). An id is its second and a random suffix, so two runs
  # in one second sort by chance by name. A directory without run.json
  # yet comes first within its second.
  local d x id best="" when=""
  for d in "$DAGRUN_RUNS_DIR/$1"/*/; do
    [ -d "$d" ] || continue
    id=$(basename "$d")
    x=$(jq -r '.started // ""' "$d/run.json" 2>/dev/null) || x=""
    x="${id%%-*}|$x"
    if [ -z "$best" ] || [[ ! "$x" < "$when" ]]; then
      best=$d when=$x
    fi
  done
  [ -n "$best" ] || fail "no run directory for dag $1"
  echo "${best%/}"
}

# run_pipeline DAG STEPS: checks and runs dags/DAG.yaml on the default
# corpus (Debian's fortunes), in full, or under the sanitizers (slow) for
# STEPS training steps with the gate opened (DAGRUN_MAX_VAL_LOSS 100).
# Sets FULL (1 or 0) and R (the run's directory).
run_pipeline() {
  [ -d /usr/share/games/fortunes ] || fail "the default corpus is missing: apt-get install fortunes (scripts/setup.sh does)"
  run_dagrun check "$DAGRUN_SOURCE_DIR/dags/$1.yaml"
  expect_rc 0
  FULL=1
  if [ -n "${DAGRUN_TEST_SANITIZED:-}" ]; then
    export DAGRUN_TRAIN_STEPS=$2 DAGRUN_MAX_VAL_LOSS=100
    FULL=0
  fi
  local start
  start=$(date +%s)
  run_dagrun run "$DAGRUN_SOURCE_DIR/dags/$1.yaml" --plain
  expect_rc 0
  echo "$1.yaml took $(( $(date +%s) - start )) s (full training: $FULL)"
  R=$(run_dir "$1")
}

# task_states RUN_DIR: "name=state/attempts ..." of run.json's tasks.
task_states() {
  "$PY" -c '
import json, sys
print(" ".join("%s=%s/%s" % (t["name"], t["state"], t["attempts"]) for t in json.load(open(sys.argv[1] + "/run.json"))["tasks"]))
' "$1"
}

# task_field RUN_DIR TASK FIELD: a field of a task in run.json.
task_field() {
  "$PY" -c '
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

# losses RUN_DIR [ATTEMPT]: the train task's loss metric of each step,
# "STEP VALUE" a line (VALUE as Python's repr: every digit), of every
# attempt or of attempt ATTEMPT.
losses() {
  "$PY" - "$1/train/metrics.jsonl" "${2:-0}" <<'P'
import json, sys
want = int(sys.argv[2])
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m["name"] == "loss" and (want == 0 or m["attempt"] == want):
        print(m["step"], repr(m["value"]))
P
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

# make_corpus DIR FILES: FILES text files of 150 "%"-separated documents
# of short sentences under DIR (the same ones each time), for the shard
# stage.
make_corpus() {
  mkdir -p "$1"
  "$PY" - "$1" "$2" <<'P'
import random, sys
rng = random.Random(11)
subjects = "the cat|a dog|my model|the gpu|our team|this loss|the data".split("|")
verbs = "eats|trains on|ignores|follows|beats|learns from|writes".split("|")
objects = "the fish|a batch|the tokens|every epoch|the logs|some text".split("|")
for f in range(int(sys.argv[2])):
    with open(f"{sys.argv[1]}/part{f}.txt", "w") as out:
        docs = []
        for d in range(150):
            n = rng.randint(3, 12)
            docs.append(" ".join(f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(objects)}."
                                 for _ in range(n)) + f" ({f}.{d})")
        out.write("\n%\n".join(docs) + "\n")
P
}

# tokenizer_refs PACKAGE: for the tokenizer reference tests, sets NM (the
# npm packages), REF (tests/reference) and TOOL (bpe_tool), and fails
# unless bpe_tool, node and PACKAGE (a path under NM) are there.
tokenizer_refs() {
  NM="${DAGRUN_NPM_DIR:?}/node_modules"
  REF="$DAGRUN_SOURCE_DIR/tests/reference"
  TOOL="$DAGRUN_BUILD_DIR/bin/bpe_tool"
  [ -x "$TOOL" ] || fail "no $TOOL (build the bpe_tool target)"
  [ -e "$NM/$1" ] || fail "no $1 in $NM (run scripts/setup.sh --tests)"
  command -v node >/dev/null || fail "node is needed for the reference"
}

# same_ids REF OURS WHAT: fails unless the id files REF (tokenizers.js's)
# and OURS are the same, saying WHAT and where they first differ.
same_ids() {
  cmp -s "$1" "$2" && return 0
  local d
  d=$("$PY" -c '
import sys
a, b = open(sys.argv[1]).read().split(), open(sys.argv[2]).read().split()
i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
print("first difference at token %d: tokenizers.js %s, ours %s" % (i, a[i:i+8], b[i:i+8]))
' "$1" "$2")
  fail "$3: $d"
}

# stage_docs OUT: from the tokenize stage's out/ directory OUT (its
# shard stage beside it), writes the first shard's tokens to stage.ids
# and its documents, each after <|endoftext|> as the stage encodes them,
# to docs.txt (both in the current directory); reads the tokens with the
# reader in docs/token-shards.md.
stage_docs() {
  sed -n '/^```python$/,/^```$/p' "$DAGRUN_SOURCE_DIR/docs/token-shards.md" |
    awk 'BEGIN{n=0} /^```python$/{n++; next} /^```$/{next} n==1' > reader.py
  "$PY" - "$1" "$(dirname "$1")/../shard/out" reader.py <<'P' || fail "could not lay out the documents of $1"
import json, sys
out, shard_dir, reader = sys.argv[1:4]
ns = {}
exec(open(reader).read().split("\ntokens, vocab")[0], ns)
s = json.load(open(out + "/manifest.json"))["shards"][0]
tokens = ns["read_tokens"](out + "/" + s["path"])[0]
open("stage.ids", "w").write(" ".join(map(str, tokens)) + "\n")
texts = [json.loads(l)["text"] for l in open(shard_dir + "/" + s["source"], encoding="utf-8")]
open("docs.txt", "w", encoding="utf-8").write("".join("<|endoftext|>" + t for t in texts))
P
}

# make_token_data NAME VOCAB: a small English-like corpus, sharded and
# tokenized by the real stages; prints the tokenize task's out/ directory.
make_token_data() {
  make_corpus "$T/corpus-$1" 4
  cat > "$T/data-$1.yaml" <<Y
dag: data-$1
tasks:
  shard: {stage: shard, with: {input: "$T/corpus-$1", separator: "%", shards: 2, val_fraction: 0.1}}
  tokenize: {stage: tokenize, needs: [shard], with: {shards: "\${tasks.shard.outputs.dir}", vocab_size: $2}}
Y
  "$DAGRUN" run "$T/data-$1.yaml" -q >"$T/data-$1.log" 2>&1 || fail "making token data failed: $(cat "$T/data-$1.log")"
  echo "$(run_dir "data-$1")/tokenize/out"
}

# tokenize_corpus NAME CORPUS TOKENIZE_PARAMS: CORPUS (documents split by
# "%") sharded (2 shards, a tenth for validation) and tokenized with
# TOKENIZE_PARAMS (e.g. "vocab_size: 320", or "tokenizer: \"DIR/
# tokenizer.json\"") by the DAG tok-NAME; prints the tokenize output.
tokenize_corpus() {
  cat > "$T/tok-$1.yaml" <<Y
dag: tok-$1
tasks:
  shard: {stage: shard, with: {input: "$2", separator: "%", shards: 2, val_fraction: 0.1}}
  tokenize: {stage: tokenize, needs: [shard], with: {shards: "\${tasks.shard.outputs.dir}", $3}}
Y
  "$DAGRUN" run "$T/tok-$1.yaml" -q >"$T/tok-$1.log" 2>&1 || fail "tokenizing $1 failed: $(cat "$T/tok-$1.log")"
  echo "$(run_dir "tok-$1")/tokenize/out"
}

# other_token_data NAME VOCAB: token data of other text than
# make_token_data's, tokenized by a tokenizer trained on it to VOCAB ids:
# a vocabulary of the same size, other merges (a model of one must not be
# used with the other); prints the tokenize output.
other_token_data() {
  mkdir -p "$T/corpus-other-$1"
  "$PY" - "$T/corpus-other-$1" <<'P'
import random, sys
rng = random.Random(5)
words = ["".join(rng.choice("bdfgkmpqvwxz") + rng.choice("aeiouy")
                 for _ in range(rng.randint(1, 4))) for _ in range(300)]
docs = [" ".join(rng.choice(words) for _ in range(rng.randint(20, 60)))
        for _ in range(300)]
open(sys.argv[1] + "/other.txt", "w").write("\n%\n".join(docs) + "\n")
P
  tokenize_corpus "other-$1" "$T/corpus-other-$1" "vocab_size: $2"
}

# kill_at_checkpoint DAG STEP DELAY_MS: runs DAG.yaml, whose train task
# has cache: false, with each train batch DELAY_MS slower, kills dagrun
# (-9) once the task has written the checkpoint of STEP, and waits until
# the orphaned attempt has stopped before that run's end. Sets KILLED (the
# run's directory) and STOPPED (the step the attempt stopped at).
kill_at_checkpoint() {
  local pid ck
  ck=$(printf 'step-%08d' "$2")
  DAGRUN_TEST_LOADER_DELAY_MS=$3 "$DAGRUN" run "$1.yaml" --plain >"$1.out" 2>&1 &
  pid=$!
  wait_until 60 eval "ls -d \"\$DAGRUN_RUNS_DIR\"/$1/*/train/checkpoints/$ck >/dev/null 2>&1" ||
    fail "no checkpoint at step $2: $(cat "$1.out")"
  kill -9 "$pid"
  wait "$pid" 2>/dev/null || true
  KILLED=$(run_dir "$1")
  wait_until 20 grep -q "stopped at step" "$KILLED/train/attempt-1/log" ||
    fail "the orphaned attempt did not stop: $(tail -5 "$KILLED/train/attempt-1/log")"
  STOPPED=$(sed -n 's/.*stopped at step \([0-9]*\);.*/\1/p' "$KILLED/train/attempt-1/log")
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
  "$PY" "$T/webhook_server.py" "$T/bodies.jsonl" "$T/port" &
  SERVER=$!
  trap 'kill $SERVER 2>/dev/null || true' EXIT
  for _ in $(seq 100); do [ -s "$T/port" ] && break; sleep 0.05; done
  [ -s "$T/port" ] || fail "test HTTP server did not start"
  PORT=$(cat "$T/port")
  BASE="http://127.0.0.1:$PORT"
}

# all_gone FILE...: each FILE holds the pid of a rank process, and none of
# them is still running.
# use_mpirun: Open MPI for a test that runs mpirun itself: it must be
# installed; as root it needs to be told twice (CI containers run as
# root); in the sanitizer build, leaks inside Open MPI's libraries are
# Open MPI's (tests/lsan-mpi.supp says which) and the slow unwinder is
# what lets the suppressions see through its frames. MPIRUN: the command
# line the ranks start with.
use_mpirun() {
  command -v mpirun >/dev/null || fail "no mpirun (Debian: openmpi-bin libopenmpi-dev)"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export LSAN_OPTIONS="suppressions=$DAGRUN_SOURCE_DIR/tests/lsan-mpi.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
  export ASAN_OPTIONS="fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
  MPIRUN=(mpirun --oversubscribe --bind-to none)
}

all_gone() {
  for f in "$@"; do
    [ -s "$f" ] || fail "$f: no pid written"
    pid_alive "$(cat "$f")" && fail "rank process $(cat "$f") ($f) still running"
  done
  return 0
}

# free_port: a TCP port on loopback that nothing listens on now.
free_port() {
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_slurm: a private one-node Slurm cluster (Debian's slurmctld,
# slurmd and munge), as root and without systemd: a fresh munge key and
# munged on its own socket, a slurm.conf with every directory under
# $T/slurm and ports nobody else uses, then slurmctld -D and slurmd -D in
# the background. Exports SLURM_CONF; returns once sinfo shows the node
# idle. stop_slurm (also run when the test exits) ends the daemons.
start_slurm() {
  for c in munged slurmctld slurmd srun sinfo; do
    command -v "$c" >/dev/null || fail "$c not found (scripts/setup.sh --tests installs slurmctld, slurmd, slurm-client and munge)"
  done
  [ "$(id -u)" -eq 0 ] || fail "start_slurm runs Slurm's daemons as root"
  local d="$T/slurm" host ctld_port slurmd_port srun_base
  host=$(hostname -s)
  mkdir -p "$d/munge" "$d/state" "$d/spool" "$d/log"
  chmod 700 "$d/munge"
  head -c 1024 /dev/urandom > "$d/munge/munge.key"
  chmod 400 "$d/munge/munge.key"
  # --force: munged refuses a socket directory that not everyone may
  # enter, as a private test directory is; root still reaches it.
  munged --force --key-file="$d/munge/munge.key" --socket="$d/munge/sock" \
    --pid-file="$d/munge/pid" --log-file="$d/log/munged.log" \
    --seed-file="$d/munge/seed" || fail "munged did not start: $(cat "$d/log/munged.log" 2>/dev/null)"
  ctld_port=$(free_port)
  slurmd_port=$(free_port)
  srun_base=$((40000 + RANDOM % 20000))
  cat > "$d/slurm.conf" <<C
ClusterName=dagrun-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SrunPortRange=$srun_base-$((srun_base + 99))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge/sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
KillWait=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
C
  export SLURM_CONF="$d/slurm.conf"
  trap stop_slurm EXIT
  slurmctld -D -i > "$d/log/slurmctld.out" 2>&1 &
  SLURMCTLD_PID=$!
  slurmd -D > "$d/log/slurmd.out" 2>&1 &
  SLURMD_PID=$!
  for _ in $(seq 150); do
    [ "$(sinfo -h -o %t 2>/dev/null)" = idle ] && return 0
    sleep 0.2
  done
  fail "Slurm did not come up: sinfo says '$(sinfo -h -o %t 2>&1)'
--- slurmctld:
$(tail -n 20 "$d/log/slurmctld.out")
--- slurmd:
$(tail -n 20 "$d/log/slurmd.out")"
}

stop_slurm() {
  local p
  for p in ${SLURMD_PID:-} ${SLURMCTLD_PID:-}; do
    kill "$p" 2>/dev/null && { wait "$p" 2>/dev/null || true; }
  done
  SLURMD_PID= SLURMCTLD_PID=
  [ -s "$T/slurm/munge/pid" ] && kill "$(cat "$T/slurm/munge/pid")" 2>/dev/null
  rm -f "$T/slurm/munge/pid"
  return 0
}

# expect_gang_stops_and_retries LAUNCHER: a 2-rank gang started by
# LAUNCHER (mpirun, srun) whose rank 1 exits 3 in its first attempt while
# rank 0 sleeps: the launcher stops rank 0 within seconds (none of the
# first attempt's ranks is left), the failure names both ranks, and the
# retry runs both ranks again.
expect_gang_stops_and_retries() {
  cat > "$T/f-$1.yaml" <<Y
dag: f-$1
tasks:
  gang:
    stage: exec
    world_size: 2
    launcher: $1
    cache: false
    retries: 1
    retry_delay: 0
    with:
      command: [sh, -c, 'f=$T/pid-$1-\$DAGRUN_ATTEMPT-\$DAGRUN_RANK; echo \$\$ > \$f.tmp && mv \$f.tmp \$f; if [ \$DAGRUN_ATTEMPT = 1 ]; then if [ \$DAGRUN_RANK = 1 ]; then sleep 0.3; exit 3; fi; exec sleep 60; fi']
Y
  local start end
  start=$(date +%s)
  run_dagrun run "$T/f-$1.yaml" --plain
  end=$(date +%s)
  expect_rc 0
  [ $((end - start)) -lt 30 ] || fail "the $1 gang took $((end - start)) s: rank 0 was not stopped"
  all_gone "$T/pid-$1-1-0" "$T/pid-$1-1-1"
  [ -s "$T/pid-$1-2-0" ] && [ -s "$T/pid-$1-2-1" ] || fail "attempt 2 did not run both ranks"
  expect_in "$T/out" "rank 1 exited 3"
  expect_in "$T/out" "stopped rank 0"
}

# wrap_launcher LAUNCHER: $T/bin/LAUNCHER (first on PATH for dagrun when
# a test puts it there) runs the real one with each rank started through
# $T/rank.sh, which, as $RANK_MODE says, writes each rank's pid to
# $T/k9-RANK (pids), or for rank 1 (its pid in $T/late-pid) sets a wrong
# token (badtoken), a runs directory its host cannot see (nolog), or
# never starts its worker (never).
wrap_launcher() {
  mkdir -p "$T/bin"
  cat > "$T/bin/$1" <<W
#!/usr/bin/python3
import os, sys
args = sys.argv[1:]
i = args.index("__worker") - 1
args[i:i + 1] = ["/bin/sh", "$T/rank.sh", args[i]]
os.execv("$(command -v "$1")", ["$1"] + args)
W
  chmod +x "$T/bin/$1"
  cat > "$T/rank.sh" <<'S'
rank=${OMPI_COMM_WORLD_RANK:-$SLURM_PROCID}
[ "$RANK_MODE" = pids ] && echo $$ > "$T/k9-$rank"
if [ "$rank" = 1 ]; then
  echo $$ > "$T/late-pid"
  case $RANK_MODE in
    badtoken) export DAGRUN_GANG_TOKEN=00000000000000000000000000000000 ;;
    nolog) export DAGRUN_GANG_DIR=/nonexistent/attempt ;;
    never) exec sleep 60 ;;
  esac
fi
exec "$@"
S
  export T
}

# expect_no_rank_outlives HOW DAG_FILE [logged]: runs DAG_FILE (a 2-rank gang of
# stage hang, which sends nothing and ignores cancel, under a launcher
# wrapped by wrap_launcher) and, once both ranks run, stops dagrun HOW:
# - kill9: dagrun killed by SIGKILL. Each rank must see its connection
#   to the rendezvous close and stop (by SIGKILL after the worker's 10 s
#   grace), and none may be left after 20 s.
# - force: Ctrl-C twice ("kill them now"). dagrun tells each rank to die
#   at once: every rank must be gone within 4 s of dagrun's end, well
#   before the worker's 10 s grace would end it; with logged, each
#   rank's log must say it was killed so (under srun, Slurm may end a
#   rank first when srun is killed).
expect_no_rank_outlives() {
  local how=$1 pid f waited=0 limit
  rm -f "$T"/k9-*
  PATH="$T/bin:$PATH" RANK_MODE=pids "$DAGRUN" run "$2" --plain >"$T/out" 2>"$T/err" &
  pid=$!
  for _ in $(seq 100); do [ -s "$T/k9-0" ] && [ -s "$T/k9-1" ] && break; sleep 0.1; done
  [ -s "$T/k9-0" ] && [ -s "$T/k9-1" ] || fail "ranks did not start"
  sleep 1 # both joined
  if [ "$how" = force ]; then
    limit=40
    kill -INT $pid
    sleep 0.5
    kill -INT $pid
  else
    limit=200
    kill -KILL $pid
  fi
  wait $pid 2>/dev/null || true
  while [ "$waited" -lt "$limit" ]; do
    pid_alive "$(cat "$T/k9-0")" || pid_alive "$(cat "$T/k9-1")" || break
    sleep 0.1
    waited=$((waited + 1))
  done
  # Left running, they would outlive the test: end them, then fail.
  for f in "$T/k9-0" "$T/k9-1"; do
    pid_alive "$(cat "$f")" && kill -KILL "$(cat "$T/k9-0")" "$(cat "$T/k9-1")" 2>/dev/null &&
      fail "rank process $(cat "$f") ($f) still running $((limit / 10)) s after dagrun was stopped ($how)"
  done
  if [ "${3:-}" = logged ]; then
    for f in 0 1; do
      expect_in "$(run_dir "$(basename "$2" .yaml)")/gang/attempt-1/rank-$f/log" \
        "dagrun kills this gang's attempt (a forced stop): killing it now"
    done
  fi
  echo "$how: no rank left $((waited / 10)).$((waited % 10)) s after dagrun ended"
  return 0
}

# http METHOD PATH [BODY] [auth: none|token|badtoken|hmac|badhmac|stalehmac|bearer:TOKEN]
# prints "STATUS BODY": a request to the `dagrun serve` on $PORT, started
# with --token-file and --hmac-secret-file holding write_serve_secrets's.
http() {
  /usr/bin/python3 - "$PORT" "$@" <<'P'
import hashlib, hmac, sys, time, urllib.error, urllib.request
port, method, path = sys.argv[1:4]
body = sys.argv[4].encode() if len(sys.argv) > 4 and sys.argv[4] else None
auth = sys.argv[5] if len(sys.argv) > 5 else "none"
h = {"Content-Type": "application/json"}
if auth == "token":
    h["Authorization"] = "Bearer s3cret-token-0123456789"
elif auth == "badtoken":
    h["Authorization"] = "Bearer s3cret-token-0123456788"
elif auth.startswith("bearer:"):
    h["Authorization"] = "Bearer " + auth[len("bearer:"):]
elif auth.endswith("hmac"):
    ts = str(int(time.time()) - (600 if auth == "stalehmac" else 0))
    key = b"hmac-key-42-0123456789" if auth != "badhmac" else b"hmac-key-43-0123456789"
    h["X-Dagrun-Timestamp"] = ts
    msg = f"{method}\n{path}\n{ts}\n".encode() + (body or b"")
    h["X-Dagrun-Signature"] = "sha256=" + hmac.new(key, msg, hashlib.sha256).hexdigest()
req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method, headers=h)
try:
    with urllib.request.urlopen(req, timeout=30) as r:
        print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
P
}

# write_serve_secrets: the files `token` and `hmac` that http() signs with.
write_serve_secrets() {
  echo "s3cret-token-0123456789" > token
  echo "hmac-key-42-0123456789" > hmac
  chmod 600 token hmac
}


# store_task_state RUN TASK, store_run_state RUN: as the run store (and so
# the API) has them, through `dagrun status --json`.
store_task_state() {
  "$DAGRUN" status --json "$1" | "$PY" -c '
import json, sys
for t in json.load(sys.stdin)["tasks"]:
    if t["name"] == sys.argv[1]: print(t["state"])' "$2"
}
store_run_state() {
  "$DAGRUN" status --json "$1" | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["state"])'
}
# store_run_is RUN STATE: for wait_until.
store_run_is() { [ "$(store_run_state "$1")" = "$2" ]; }

# Two train runs compared (the gang tests):
# same_losses A B TOL: the same steps, losses within relative TOL.
same_losses() {
  /usr/bin/python3 - "$1" "$2" "$3" <<'P' || fail "losses differ: $1 vs $2"
import sys
a = dict(l.split() for l in open(sys.argv[1]))
b = dict(l.split() for l in open(sys.argv[2]))
tol = float(sys.argv[3])
assert a and set(a) == set(b), (sorted(a), sorted(b))
worst = 0
for s in a:
    x, y = float(a[s]), float(b[s])
    assert abs(x - y) <= tol * abs(x), (s, x, y)
    worst = max(worst, abs(x - y) / abs(x))
print("losses %s vs %s: largest relative difference %.2g (tolerance %g)" % (sys.argv[1], sys.argv[2], worst, tol))
P
}

# same_weights A B TOL: two model.safetensors, max abs difference <= TOL
# times the largest weight. The key third of GPT-2's attention bias is
# left out: its gradient is zero in exact arithmetic (softmax does not
# see a shift common to every key), so AdamW moves it by its normalised
# rounding noise alone, which another summation order (a pipeline, an
# emulated GPU, another CPU's BLAS kernels) changes entirely.
same_weights() {
  /usr/bin/python3 - "$1" "$2" "$3" <<'P' || fail "weights differ: $1 vs $2"
import json, struct, sys
import numpy as np
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    out = {}
    for k, v in h.items():
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=np.float32)
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
assert set(a) == set(b), (sorted(a), sorted(b))
for k in a:
    if k.endswith("attn.c_attn.bias"):
        c = a[k].size // 3
        a[k] = np.concatenate([a[k][:c], a[k][2 * c:]])
        b[k] = np.concatenate([b[k][:c], b[k][2 * c:]])
big = max(float(np.abs(v).max()) for v in a.values())
worst = max(float(np.abs(a[k] - b[k]).max()) for k in a)
assert worst <= float(sys.argv[3]) * big, (worst, big)
print("weights: largest difference %.2g of the largest weight (tolerance %s)" % (worst / big, sys.argv[3]))
P
}

# resumed_as REF NAME TEXT [TOL]: the run of NAME succeeded, its log says
# TEXT, and its losses are REF's of steps 11-20 (REF.losses) within TOL
# relative (1e-5 unless given).
resumed_as() {
  expect_rc 0
  local R
  R=$(run_dir "$2")
  expect_in "$R/train/attempt-1/log" "$3"
  losses "$R" > "$2.losses"
  grep -E '^(1[1-9]|20) ' "$1.losses" > "$1.tail"
  same_losses "$1.tail" "$2.losses" "${4:-1e-5}"
}

# stage_parts_smaller NAME RT RTP: the run directories RT (a tensor
# group of 2) and RTP (that group as 2 pipeline stages, 4 ranks): every
# RTP rank's parameter bytes (summary.json's memory formula: the part it
# keeps) below every RT rank's, as a stage keeps its own part alone.
stage_parts_smaller() {
  /usr/bin/python3 - "$2/train/out/summary.json" "$3/train/out/summary.json" <<'P' ||
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
pa = [r["formula"]["params"] for r in a["memory"]["ranks"]]
pb = [r["formula"]["params"] for r in b["memory"]["ranks"]]
assert len(pa) == 2 and len(pb) == 4 and max(pb) < min(pa), (pa, pb)
print("parameter bytes a rank, T=2 vs T=2 x P=2:", pa, pb)
P
    fail "$1: a stage keeps more than its part"
}

# one_process NAME WITH: a DAG NAME of one train task in one process with
# params WITH, run; it must succeed with 20 steps' losses, written to
# NAME.losses (the gang tests' reference). Sets R1 to its run directory.
one_process() {
  printf 'dag: %s\ntasks:\n  train: {stage: train, with: {%s}}\n' "$1" "$2" > "$1.yaml"
  run_dagrun run "$1.yaml" --plain
  expect_rc 0
  R1=$(run_dir "$1")
  losses "$R1" > "$1.losses"
  [ "$(wc -l < "$1.losses")" -eq 20 ] || fail "one process $1: $(cat "$1.losses")"
}

# gang_dag NAME WITH [WORLD]: a DAG NAME of one train task, a gang of
# WORLD ranks (2 by default) under mpirun with GANG_ENV (use_train_gang)
# and params WITH, run.
gang_dag() {
  printf 'dag: %s\ntasks:\n  train:\n    stage: train\n    world_size: %s\n    launcher: mpirun\n    %s\n    with: {%s}\n' \
    "$1" "${3:-2}" "$GANG_ENV" "$2" > "$1.yaml"
  run_dagrun run "$1.yaml" --plain
}

# gang_refused NAME TEXT WITH [WORLD]: gang_dag NAME fails, and its train
# task's files say TEXT, or, where dagrun check refused it before the
# run started (a shape the check knows: plugin.h's check), dagrun's
# errors do.
gang_refused() {
  gang_dag "$1" "$3" "${4:-2}"
  [ "$RC" -ne 0 ] || fail "$1: exit code 0"
  if [ ! -d "$DAGRUN_RUNS_DIR/$1" ]; then
    grep -qF -- "$2" "$T/err" || fail "$1: no \"$2\" in: $(cat "$T/err")"
    return
  fi
  grep -rqF -- "$2" "$(run_dir "$1")/train" || fail "$1: no \"$2\" in:
$(cat "$(run_dir "$1")"/train/attempt-*/log)"
}

# use_train_gang: the preamble of a test of train gangs under mpirun
# (dagrun starts mpirun): mpirun present, Open MPI's own allocations left
# out of the sanitizer build's leak report, and GANG_ENV, the task's env
# key giving every rank one CPU thread and those settings.
use_train_gang() {
  command -v mpirun >/dev/null || fail "mpirun not found (scripts/setup.sh installs openmpi-bin)"
  export LSAN_OPTIONS="suppressions=$DAGRUN_SOURCE_DIR/tests/lsan-mpi-zero.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
  export ASAN_OPTIONS="fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
  GANG_ENV='env: {OMP_NUM_THREADS: "1", OPENBLAS_NUM_THREADS: "1", LSAN_OPTIONS: "'"$LSAN_OPTIONS"'", ASAN_OPTIONS: "'"$ASAN_OPTIONS"'"}'
}

# set_weights SRC DST VALUE [TENSOR]: DST, a copy of the checkpoint SRC
# whose tensor TENSOR (every one when none is named) holds VALUE in each
# element ("nan", "inf", "1e38"), with manifest.json's size and sha256
# made to match: a checkpoint as a diverged training would write it,
# every checksum good.
set_weights() {
  cp -r "$1" "$2"
  "$PY" - "$2" "$3" "${4:-}" <<'P'
import array, hashlib, json, os, struct, sys
d, value, only = sys.argv[1], float(sys.argv[2]), sys.argv[3]
path = os.path.join(d, "model.safetensors")
raw = bytearray(open(path, "rb").read())
(n,) = struct.unpack("<Q", raw[:8])
hdr = json.loads(raw[8:8 + n])
done = 0
for k, v in hdr.items():
    if k == "__metadata__" or (only and k != only):
        continue
    assert v["dtype"] == "F32", v
    a, b = v["data_offsets"]
    raw[8 + n + a:8 + n + b] = array.array("f", [value] * ((b - a) // 4)).tobytes()
    done += 1
assert done, "no tensor " + only
open(path, "wb").write(raw)
mpath = os.path.join(d, "manifest.json")
m = json.load(open(mpath))
m["files"]["model.safetensors"] = {"bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}
json.dump(m, open(mpath, "w"), indent="\t")
P
}

# corrupt_newest CKPTS DIR: DIR, a copy of the directory of checkpoints
# CKPTS (two or more) whose newest checkpoint has a byte of its weights
# flipped, so that its sha256 no longer matches. Prints that newest
# checkpoint's path and, on a second line, the one before it.
corrupt_newest() {
  cp -r "$1" "$2"
  local v
  v=$(ls -d "$2"/step-* | sort | tail -n 2)
  [ "$(echo "$v" | wc -l)" = 2 ] || fail "corrupt_newest: fewer than two checkpoints in $1"
  "$PY" -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(5000); b = f.read(1); f.seek(5000); f.write(bytes([b[0] ^ 0xff]))' \
    "$(echo "$v" | tail -n 1)/model.safetensors"
  echo "$v" | tail -n 1
  echo "$v" | head -n 1
}
