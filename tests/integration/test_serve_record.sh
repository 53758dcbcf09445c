# An API trigger is answered once its run is recorded, so the run id it
# hands out can be looked up at once (a GET right after a 201 once found
# nothing). The store's write lock, held from here, keeps the run's dagrun
# from recording itself: the answer waits for it; a dagrun that gives up
# (exit 2) is a 500 naming the run, not a 201 for a run never seen; one
# stopped (SIGSTOP) past the wait is answered with its id all the same.
# Runs the daemon knows before the store does are listed (starting, and
# queued behind a going run under the id their 201 gave); a run that
# records itself and ends while the daemon is stopped is still a 201; a
# SIGTERM while a run waits for the store leaves it recorded interrupted
# and answers its trigger 503 naming it.
# Then `dagrun run --ready-fd` by hand: its line, no task inheriting the
# descriptor, and a descriptor that is not open refused.
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"
mkdir -p dags
cat > dags/q.yaml <<'Y'
dag: q
overlap: allow
tasks:
  a: {stage: exec, cache: false, with: {command: [sh, -c, 'sleep 0.2']}}
Y
cat > dags/qq.yaml <<Y
dag: qq
overlap: queue
tasks:
  a: {stage: exec, cache: false, with: {command: [sh, -c, 'while [ ! -e $T/go ]; do sleep 0.05; done']}}
Y
serve_start --no-cron

"$PY" - "$PORT" "$DAGRUN_HOME/state.db" "$SERVE_PID" <<'P' || fail "API triggers against a locked store: see above"
import json, os, signal, sqlite3, subprocess, sys, threading, time
import urllib.error, urllib.request
port, db_path = int(sys.argv[1]), sys.argv[2]
AUTH = {"Authorization": "Bearer s3cret-token-0123456789",
        "Content-Type": "application/json"}

def call(method, path, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 data=body, method=method, headers=AUTH)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())

def trigger_in_background():
    """POSTs a run of q in a thread; returns (thread, result dict)."""
    out = {}
    def go():
        t0 = time.monotonic()
        out["status"], out["body"] = call("POST", "/api/dags/q/runs", b"{}")
        out["s"] = time.monotonic() - t0
    th = threading.Thread(target=go)
    th.start()
    return th, out

def lock_store():
    db = sqlite3.connect(db_path, timeout=30, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")  # the write lock: no run records itself
    return db

def wait_success(rid):
    for _ in range(200):
        st, run = call("GET", f"/api/runs/{rid}")
        if st == 200 and run["state"] == "success":
            return
        time.sleep(0.05)
    raise AssertionError(f"run {rid} did not succeed: {st} {run}")

def run_count():
    st, runs = call("GET", "/api/runs?dag=q")
    assert st == 200, (st, runs)
    return len(runs)

# 1. Held 1.5 s: the 201 comes after the run is recorded, and the run is
#    there the moment it comes; meanwhile the listing shows it "starting".
db = lock_store()
th, out = trigger_in_background()
time.sleep(1.5)
assert "status" not in out, f"answered while the run could not be recorded: {out}"
st, runs = call("GET", "/api/runs?dag=q")
assert st == 200, (st, runs)
starting = [r for r in runs if r["state"] == "starting"]
assert st == 200 and len(starting) == 1, (st, runs)
st, run = call("GET", f"/api/runs/{starting[0]['id']}")
assert st == 200 and run["state"] == "starting" and run["tasks"] == [], (st, run)
st, runs = call("GET", "/api/runs?state=running")
assert st == 200 and runs == [], (st, runs)
db.rollback()
th.join()
assert out["status"] == 201, out
rid = out["body"]["run_id"]
st, run = call("GET", f"/api/runs/{rid}")
assert st == 200 and run["id"] == rid == starting[0]["id"], (st, run, starting)
assert run["state"] != "starting", run
print(f"recorded run answered after {out['s']:.2f} s and found at once")
wait_success(rid)

# 2. Held past the store's busy timeout (10 s): the run's dagrun gives up
#    and the trigger says so; no run is listed for it, and no run
#    directory is left.
before = run_count()
db = lock_store()
th, out = trigger_in_background()
th.join(timeout=14)
db.rollback()
th.join()
assert out["status"] == 500, out
err = out["body"]["error"]
assert "did not start" in err and "exited with 2" in err, err
assert run_count() == before, "a run that failed to start is listed"
failed = err.split()[1]
assert not os.path.exists(f"runs/q/{failed}"), f"run {failed} left its directory"
print(f"unrecorded run answered {out['status']} after {out['s']:.1f} s: {err}")

def store_opener(pids):
    """The pid among pids that has the store open, or None."""
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == db_path for fd in fds):
                return pid
        except OSError:
            pass
    return None

# 3. A dagrun stopped before it records (at the locked store, its DAG
#    loaded): after the wait (20 s), the id is answered; the run records
#    itself and succeeds once it goes on.
db = lock_store()
th, out = trigger_in_background()
child = None
for _ in range(200):
    ps = subprocess.run(["pgrep", "-f", "--", " run .*--ready-fd 3"],
                        capture_output=True, text=True).stdout.split()
    child = store_opener(int(p) for p in ps)
    if child:
        break
    time.sleep(0.05)
assert child, "no dagrun run --ready-fd 3 opened the store"
os.kill(child, signal.SIGSTOP)
db.rollback()
th.join()
os.kill(child, signal.SIGCONT)
assert out["status"] == 201 and 19 < out["s"] < 29, out
wait_success(out["body"]["run_id"])
print(f"stopped run answered with its id after {out['s']:.1f} s, then ran")

# 4. overlap: queue: a second API run waits in serve's queue; its id is
#    listed "queued" from its 201 on, and it never reads as missing until
#    it has run.
st, a = call("POST", "/api/dags/qq/runs", b"{}")
assert st == 201, (st, a)
st, b = call("POST", "/api/dags/qq/runs", b"{}")
assert st == 201, (st, b)
b = b["run_id"]
st, run = call("GET", f"/api/runs/{b}")
assert st == 200 and run["state"] == "queued", (st, run)
assert "in dagrun serve's queue" in run["waiting"] and run["trigger"] == "api", run
st, runs = call("GET", "/api/runs?dag=qq")
assert st == 200 and [r["id"] for r in runs][0] == b, (st, runs)
for query, listed in (("state=queued", True), ("state=running", False),
                      ("dag=q", False), ("tag=x", False), ("limit=1", True)):
    st, runs = call("GET", f"/api/runs?{query}")
    assert st == 200 and (b in [r["id"] for r in runs]) == listed, (query, st, runs)
open("go", "w").close()  # the test runs in $T
seen = []
for _ in range(400):
    st, run = call("GET", f"/api/runs/{b}")
    assert st == 200, f"queued run {b} read as {st} {run} after {seen}"
    if not seen or seen[-1] != run["state"]:
        seen.append(run["state"])
    if run["state"] == "success":
        break
    time.sleep(0.025)
assert seen[-1] == "success", seen
print("queued API run seen as", " -> ".join(seen))

# 5. The daemon stopped (SIGSTOP) while a run records itself and ends: its
#    exit and its line reach the loop in one poll, in either order; the
#    trigger is answered 201 all the same.
serve_pid = int(sys.argv[3])
ps = lambda: set(subprocess.run(["pgrep", "-f", "--", " run .*--ready-fd 3"],
                                capture_output=True, text=True).stdout.split())
old = ps()
th, out = trigger_in_background()
for _ in range(200):
    new = ps() - old
    if new:
        break
    time.sleep(0.005)
assert new, "no new dagrun run --ready-fd 3"
os.kill(serve_pid, signal.SIGSTOP)
child = int(new.pop())
for _ in range(400):  # until it has ended: a zombie of the stopped daemon
    with open(f"/proc/{child}/stat") as f:
        if f.read().rsplit(")", 1)[1].split()[0] == "Z":
            break
    time.sleep(0.025)
else:
    raise AssertionError(f"run {child} did not end while the daemon was stopped")
os.kill(serve_pid, signal.SIGCONT)
th.join()
assert out["status"] == 201, out
print("a run that recorded itself and ended while the daemon was stopped: 201")

# 6. SIGTERM while a trigger waits for its run's record: the run records
#    itself once the store is free and is recorded interrupted (the next
#    serve resumes it), not lost; the trigger is answered 503 naming it
#    (the daemon lets the answers in flight go out before it closes the
#    connections; it closed them mid-answer).
db = lock_store()
old = ps()
th, out = trigger_in_background()
child = None
for _ in range(200):
    child = store_opener(int(p) for p in ps() - old)
    if child:
        break
    time.sleep(0.01)
assert child, "no new dagrun run --ready-fd 3 at the store"
with open(f"/proc/{child}/cmdline") as f:
    argv = f.read().split("\0")
rid = argv[argv.index("--run-id") + 1]
os.kill(serve_pid, signal.SIGTERM)
th.join()
db.rollback()
assert out.get("status") == 503, out
assert rid in out["body"]["error"] and "shutting down" in out["body"]["error"], out
with open("stopped_run", "w") as f:
    f.write(rid)
print(f"SIGTERM while run {rid} waited for the store: 503 naming it")
P
expect_in serve.log "not recorded after 20 s; its id is answered all the same"
expect_in serve.log "before it recorded the run (its message is above)"
# The daemon stopped itself on the SIGTERM above; its last run is
# recorded interrupted, for the next serve to resume.
for _ in $(seq 300); do pid_alive "$SERVE_PID" || break; sleep 0.1; done
pid_alive "$SERVE_PID" && fail "serve did not stop after SIGTERM: $(tail -5 serve.log)"
trap - EXIT
state=$(store_run_state "$(cat stopped_run)")
[ "$state" = interrupted ] || fail "run $(cat stopped_run) after the SIGTERM: '$state', expected interrupted"

# ---- --ready-fd by hand ----
cat > fd.yaml <<Y
dag: fd
tasks:
  a: {stage: exec, cache: false, with: {command: [sh, -c, 'if [ -e /proc/self/fd/7 ]; then echo inherited; else echo closed; fi > $PWD/fd7']}}
Y
run_dagrun run fd.yaml -q --ready-fd 7 7>ready.out
expect_rc 0
[ "$(cat ready.out)" = recorded ] || fail "--ready-fd wrote '$(cat ready.out)'"
expect_in fd7 closed
run_dagrun run fd.yaml -q --ready-fd 9
expect_rc 2
expect_in "$T/err" "--ready-fd takes an open file descriptor above 2, got '9'"
run_dagrun run fd.yaml -q --ready-fd 1
expect_rc 2
pass
