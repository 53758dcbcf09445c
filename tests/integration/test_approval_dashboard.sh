# The dashboard's approval buttons, in headless Chromium (cdp.py): a run
# whose approval task waits shows it waiting_approval with Approve and
# Reject; pressing Approve (with the POST token kept for the tab) records
# the approval through the API (via dashboard), the run goes on and the
# page then says who approved; pressing Reject on another run fails its
# task with the reason typed. Each is read back from the store. The run
# list filtered by state shows what the API gives for it. Then the
# DAG file breaks: "Run now" is disabled and says why (no run starts until
# the file loads, docs/serve.md), as the API's 409 does.
. "$(dirname "$0")/lib.sh"
need_chromium
export DAGRUN_HOME="$T/home"
mkdir -p dags
write_serve_secrets
cat > dags/gate.yaml <<Y
dag: gate
params: {model: small}
overlap: allow
tasks:
  promote: {approval: {message: "ship it?"}}
  deploy: {stage: exec, needs: [promote], with: {command: [true]}}
Y
serve_start --log serve.log --no-cron

new_run() {
  http POST /api/dags/gate/runs '{}' token | sed 's/^[0-9]* //' |
    "$PY" -c 'import json, sys; print(json.load(sys.stdin)["run_id"])'
}
RUN1=$(new_run)
RUN2=$(new_run)

cat > drive.py <<'P'
import sys
sys.path.insert(0, sys.argv[1])
from cdp import Browser
chromium, port, token, run1, run2, profile, dagfile = sys.argv[2:9]
base = f"http://127.0.0.1:{port}/"
BTN = "document.querySelector('[data-{}=\"promote\"]')"
with Browser(chromium, profile) as b:
    b.open(base)
    b.wait_for("document.readyState === 'complete'", "the page")
    b.js(f"sessionStorage.setItem('dagrun-token', {token!r})")
    b.js(f"location.hash = 'dag=gate&run={run1}'; location.reload()")
    b.wait_for("document.body.innerText.includes('waits for approval')",
               "run 1 waiting")
    assert "waiting_approval" in b.js("document.getElementById('tasks').innerText")
    assert 'params {"model":"small"}' in b.js("document.getElementById('run-meta').innerText")
    b.js(BTN.format("approve") + ".click()")
    b.wait_for("document.getElementById('tasks').innerText.includes('approved by dashboard via dashboard')",
               "run 1 approved")
    print("approved")
    b.js(f"location.hash = 'dag=gate&run={run2}'; location.reload()")
    b.wait_for(BTN.format("reject") + " !== null", "run 2's Reject")
    # The reason is typed into the browser's prompt: answered here.
    b.js("window.prompt = () => 'loss went up'")
    b.js(BTN.format("reject") + ".click()")
    b.wait_for("document.getElementById('tasks').innerText.includes('rejected: by dashboard via dashboard: loss went up')",
               "run 2 rejected")
    print("rejected")
    # The runs filtered by state: only the failed run is listed.
    ROWS = "[...document.querySelectorAll('#runs tbody tr td.mono')].map(e => e.textContent).join(' ')"
    b.wait_for(f"({ROWS}).includes('{run1}') && ({ROWS}).includes('{run2}')", "both runs listed")
    b.js("const s = document.getElementById('runs-state'); s.value = 'failed'; s.dispatchEvent(new Event('change'))")
    b.wait_for(f"({ROWS}) === '{run2}'", "only the failed run", secs=10)
    print("filtered:", b.js(ROWS))
    assert not b.js("document.getElementById('run-now').disabled"), "Run now disabled before the file broke"
    with open(dagfile, "w") as f:
        f.write("dag: gate\ntasks:\n  a: {stage: exec, with: {command: [true]}, needs: [ghost]}\n")
    b.wait_for("document.getElementById('run-now').disabled && document.getElementById('run-now').title"
               ".includes('no run starts until the DAG file loads: ')", "Run now disabled, saying why")
    assert "ghost" in b.js("document.getElementById('run-now').title")
    print("run now disabled")
P
set +e
timeout 90 "$PY" drive.py "$DAGRUN_SOURCE_DIR/tests/integration" "$CHROMIUM" "$PORT" \
  "$(tr -d '\n' <token)" "$RUN1" "$RUN2" "$T/chromium" "$T/dags/gate.yaml" >drive.out 2>&1
RC=$?
set -e
[ "$RC" -eq 0 ] || fail "driving the dashboard (exit $RC): $(cat drive.out)
--- chromium:
$(tail -5 "$T/chromium.err" 2>/dev/null)"
expect_in drive.out "run now disabled"
# What the filter showed is what the API answers for that state.
out=$(http GET "/api/runs?dag=gate&state=failed")
ids=$(echo "${out#* }" | "$PY" -c 'import json, sys; print(" ".join(r["id"] for r in json.load(sys.stdin)))')
[ "$ids" = "$RUN2" ] || fail "API's failed runs: $ids"
expect_in drive.out "filtered: $RUN2"
out=$(http POST /api/dags/gate/runs '{}' token)
case "$out" in "409 "*"ghost"*) ;; *) fail "a run of the broken file: $out" ;; esac

# Read back from the store, as the API would show it.
wait_until 20 store_run_is "$RUN1" success || fail "run 1: $(store_run_state "$RUN1")"
wait_until 20 store_run_is "$RUN2" failed || fail "run 2: $(store_run_state "$RUN2")"
"$DAGRUN" status --json "$RUN1" | "$PY" -c '
import json, sys
a = json.load(sys.stdin)["approvals"]
assert [(x["task"], x["decision"], x["via"]) for x in a] == [("promote", "approved", "dashboard")], a' ||
  fail "run 1's approvals: $("$DAGRUN" status --json "$RUN1")"
"$DAGRUN" status --json "$RUN2" | "$PY" -c '
import json, sys
a = json.load(sys.stdin)["approvals"]
assert [(x["decision"], x["via"], x.get("reason")) for x in a] == [("rejected", "dashboard", "loss went up")], a' ||
  fail "run 2's approvals: $("$DAGRUN" status --json "$RUN2")"
serve_stop
pass
