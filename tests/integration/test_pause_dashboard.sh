# The dashboard's Pause/Unpause button, in headless Chromium (cdp.py):
# each loaded DAG has one; pressing Pause (with the POST token kept for
# the tab) pauses that DAG only, through the API (via dashboard), without
# selecting it; the list then says who paused it, and the store (`dagrun
# dags`) has it; Unpause undoes it. A pause written by `dagrun pause`
# shows on the page at its next poll.
. "$(dirname "$0")/lib.sh"
need_chromium
export DAGRUN_HOME="$T/home"
mkdir -p dags
cat > dags/alpha.yaml <<'Y'
dag: alpha
tasks:
  a: {stage: exec, with: {command: [true]}}
Y
cat > dags/nightly.yaml <<'Y'
dag: nightly
schedule: "0 2 * * *"
tasks:
  a: {stage: exec, with: {command: [true]}}
Y
TOKEN=s3cret-token-0123456789
serve_start --no-cron

cat >pause_check.py <<'P'
import json, os, subprocess, sys, time, urllib.request
chromium, cdp_dir, profile, port, token, dagrun = sys.argv[1:7]
sys.path.insert(0, cdp_dir)
from cdp import Browser

base = f"http://127.0.0.1:{port}"

def api_dags():
    with urllib.request.urlopen(f"{base}/api/dags", timeout=10) as r:
        return {d["name"]: d for d in json.load(r)}

def store_dags():
    out = subprocess.run([dagrun, "dags", "--json"], check=True, capture_output=True, text=True).stdout
    return {d["dag"]: d for d in json.loads(out)}

def until(pred, what, secs=10):
    end = time.time() + secs
    while time.time() < end:
        if pred():
            return
        time.sleep(0.1)
    sys.exit(f"not so in {secs}s: {what}")

BTN = "document.querySelector('.pause-btn[data-dag=\"{}\"]')"
with Browser(chromium, profile) as b:
    b.open(base + "/")
    b.js(f"sessionStorage.setItem('dagrun-token', {json.dumps(token)})")
    b.wait_for(BTN.format("nightly") + " !== null && " + BTN.format("alpha") + " !== null",
               "a Pause button on each DAG")
    assert b.js(BTN.format("nightly") + ".textContent") == "Pause"
    selected = b.js("document.getElementById('dag-title').textContent")

    b.click('.pause-btn[data-dag="nightly"]')
    b.wait_for(BTN.format("nightly") + ".textContent === 'Unpause'", "nightly's button says Unpause")
    PAUSED = "[...document.querySelectorAll('.dag .paused')].map(e => e.textContent)"
    b.wait_for(f"{PAUSED}.length === 1 && {PAUSED}[0].startsWith('paused by dashboard since ')",
               "one DAG marked paused by dashboard")
    assert b.js(BTN.format("alpha") + ".textContent") == "Pause", "alpha paused too"
    # The button does not select the DAG it pauses.
    assert b.js("document.getElementById('dag-title').textContent") == selected
    d = api_dags()
    assert d["nightly"]["paused"] is True and d["nightly"]["paused_by"] == "dashboard", d["nightly"]
    assert d["alpha"]["paused"] is False, d["alpha"]
    s = store_dags()
    assert s["nightly"]["paused"] and s["nightly"]["paused_by"] == "dashboard", s
    print("paused")

    b.click('.pause-btn[data-dag="nightly"]')
    b.wait_for(BTN.format("nightly") + ".textContent === 'Pause'", "nightly's button says Pause again")
    assert b.js("document.querySelectorAll('.dag .paused').length") == 0
    until(lambda: api_dags()["nightly"]["paused"] is False, "the API shows nightly going")
    assert not store_dags()["nightly"]["paused"]
    print("unpaused")

    # A pause from the command line shows at the next poll.
    subprocess.run([dagrun, "pause", "dags/alpha.yaml"], check=True, capture_output=True)
    b.wait_for(BTN.format("alpha") + ".textContent === 'Unpause'", "alpha paused by the CLI", secs=15)
    print("pause dashboard: ok")
P
browser_check "pause dashboard" pause_check.py "$PORT" "$TOKEN" "$DAGRUN"
expect_in cdp.out "paused"
expect_in cdp.out "unpaused"
serve_stop
pass
