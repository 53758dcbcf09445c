# The dashboard acting on runs, in headless Chromium (tests/integration/
# cdp.py): the timeline's bar per attempt (a retry's two), a tag typed in
# and added, then removed with its button, a note
# written and saved, each read back through the API as the store has it;
# any metric a task reported charted from the picker (one with a slash
# in its name too); two runs ticked and
# compared (the param that differs, each metric's final and best), their
# loss curves overlaid in one chart.
. "$(dirname "$0")/lib.sh"
need_chromium
export DAGRUN_HOME="$T/home"
mkdir -p dags
cat > dags/sweep.yaml <<'Y'
dag: sweep
params:
  lr: 0.1
  api_key: hunter2-not-for-the-page
  home: ${env:HOME}
secrets: [api_key]
tasks:
  train:
    stage: exec
    cache: false
    with:
      command:
        - sh
        - -c
        - |
          for s in 1 2 3 4 5; do
            echo "{\"step\": $s, \"loss\": $(awk -v s=$s -v lr=$1 'BEGIN { print (6 - s) * lr }'), \"accuracy\": 0.$s, \"val_loss/web\": $s}" >> "$DAGRUN_METRICS"
          done
        - train
        - ${params.lr}
  flaky:
    stage: exec
    cache: false
    retries: 1
    retry_delay: 1s
    with:
      command: [sh, -c, 'test -e "$DAGRUN_OUT_DIR/../tried" || { touch "$DAGRUN_OUT_DIR/../tried"; exit 1; }']
Y
run_dagrun run dags/sweep.yaml -p lr=0.1 --plain
expect_rc 0
run_dagrun run dags/sweep.yaml -p lr=0.3 --plain
expect_rc 0
run_dagrun runs --json
ids=$("$PY" -c 'import json,sys; print(" ".join(r["id"] for r in json.load(open(sys.argv[1]))))' "$T/out")
set -- $ids
B=$1 A=$2
TOKEN=s3cret-token-0123456789
serve_start --no-cron

cat >runs_check.py <<'P'
import json, sys, time, urllib.error, urllib.request
chromium, cdp_dir, profile, port, a, b_run, token = sys.argv[1:8]
sys.path.insert(0, cdp_dir)
from cdp import Browser

base = f"http://127.0.0.1:{port}"

def run_json(rid):
    with urllib.request.urlopen(f"{base}/api/runs/{rid}", timeout=10) as r:
        return json.load(r)

def until(pred, what, secs=10):
    """Polls pred; a run the store does not have yet (404) is not there."""
    end = time.time() + secs
    while time.time() < end:
        try:
            if pred():
                return
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise
        time.sleep(0.1)
    sys.exit(f"not in the store in {secs}s: {what}")

with Browser(chromium, profile) as b:
    b.open(f"{base}/#dag=sweep&run={a}")
    b.js(f"sessionStorage.setItem('dagrun-token', {json.dumps(token)})")
    b.wait_for(f"document.getElementById('run-title').textContent === 'Run {a}'", "run A's view")

    # The timeline: a bar per attempt, flaky's two (the retry) in its row.
    b.wait_for("document.querySelectorAll('#timeline rect.attempt-bar').length === 3", "three attempt bars")
    bars = b.js("[...document.querySelectorAll('#timeline rect.attempt-bar')].map(r => [r.dataset.task, r.dataset.attempt, getComputedStyle(r).fill])")
    assert sorted(x[:2] for x in bars) == [["flaky", "1"], ["flaky", "2"], ["train", "1"]], bars
    fills = {(t, n): f for t, n, f in bars}
    assert fills[("flaky", "1")] != fills[("flaky", "2")], f"the failed and the good attempt look alike: {fills}"

    # A tag, typed and added; then removed with its button.
    b.type_text("tag-input", "candidate")
    b.click("#tag-add")
    b.wait_for("[...document.querySelectorAll('#run-tags .tag')].some(e => e.textContent.startsWith('candidate'))",
               "the tag shown")
    until(lambda: run_json(a)["tags"] == ["candidate"], "the tag")
    assert run_json(b_run)["tags"] == [], "the other run got the tag"
    b.click("#run-tags button[data-tag='candidate']")
    until(lambda: run_json(a)["tags"] == [], "the tag removed")
    b.wait_for("document.querySelectorAll('#run-tags .tag').length === 0", "the tag gone from the page")

    # A note, typed and saved.
    b.type_text("note-input", "the baseline: lr 0.1")
    b.click("#note-save")
    b.wait_for("document.getElementById('note-msg').textContent === 'note saved'", "the note saved")
    until(lambda: run_json(a).get("user_note") == "the baseline: lr 0.1", "the note")

    # Any metric: the picker lists what the task reported; accuracy
    # charted, and a metric whose name has a slash (a data mixture's
    # val_loss/<source>).
    for pick in ("train/accuracy", "train/val_loss/web"):
        b.wait_for(f"[...document.getElementById('metric-pick').options].map(o => o.value).includes('{pick}')",
                   f"{pick} in the metric picker")
        b.js(f"{{ const p = document.getElementById('metric-pick'); p.value = '{pick}';"
             "p.dispatchEvent(new Event('change')); }")
        b.wait_for(f"document.querySelector('#chart-pick svg')?.getAttribute('aria-label') === '{pick}'",
                   f"the {pick} chart")
        n = b.js("document.querySelectorAll('#chart-pick svg circle').length")
        assert n == 5, f"{pick} chart: {n} points, expected 5"

    # Two runs ticked and compared.
    assert b.js("document.getElementById('compare-btn').disabled"), "compare enabled with no run ticked"
    b.click(f".compare-tick[data-run='{a}']")
    b.click(f".compare-tick[data-run='{b_run}']")
    b.wait_for("!document.getElementById('compare-btn').disabled", "compare enabled with two runs")
    b.click("#compare-btn")
    b.wait_for("!document.getElementById('compare-section').hidden && "
               "document.querySelectorAll('#compare-table tr.compare-row').length > 0", "the comparison")
    rows = b.js("[...document.querySelectorAll('#compare-table tbody tr')].map(r => [...r.children].map(c => c.textContent))")
    heads = b.js("[...document.querySelectorAll('#compare-table thead th')].map(c => c.textContent)")
    order = heads[1:]
    assert sorted(order) == sorted([a, b_run]), heads
    lr = [r for r in rows if r[0] == "lr"]
    want = {a: "0.1", b_run: "0.3"}
    assert lr and lr[0][1:] == [want[x] for x in order], (lr, order)
    loss = [r for r in rows if r[0] == "train.loss (lower)"]
    want = {a: "0.1", b_run: "0.3"}
    assert loss and loss[0][1:] == [want[x] for x in order], loss
    acc = [r for r in rows if r[0] == "train.accuracy (higher)"]
    assert acc and acc[0][1:] == ["0.5", "0.5"], acc
    b.wait_for("document.querySelectorAll('#chart-compare svg polyline').length === 2", "two loss curves overlaid")
    titles = b.js("[...document.querySelectorAll('#chart-compare svg polyline title')].map(t => t.textContent)")
    assert sorted(titles) == sorted([a, b_run]), titles

    # Run now with a param from the form: the field holds the default; a
    # secret and an environment's value are not on the page.
    fields = b.js("Object.fromEntries([...document.querySelectorAll('.param-field')].map(f => [f.dataset.param, f.value]))")
    assert fields == {"lr": "0.1", "api_key": "", "home": ""}, fields
    page = b.js("document.documentElement.outerHTML")
    assert "hunter2" not in page, "the secret's value is in the page"
    b.js("document.querySelector(\".param-field[data-param='lr']\").id = 'lr-field'")
    b.type_text("lr-field", "0.7")
    before = set(r["id"] for r in json.load(urllib.request.urlopen(f"{base}/api/runs?dag=sweep", timeout=10)))
    b.click("#run-now")
    b.wait_for("document.getElementById('run-msg').textContent.startsWith('started ')", "the run started")
    new = b.js("document.getElementById('run-msg').textContent.slice(8)")
    assert new not in before, new
    until(lambda: run_json(new)["state"] == "success", "the new run's success", 30)
    assert run_json(new)["params"]["lr"] == 0.7, run_json(new)["params"]
    print("dashboard runs: ok")
P
browser_check "dashboard runs" runs_check.py "$PORT" "$A" "$B" "$TOKEN"
# What the browser did is in the store, as the CLI reads it.
run_dagrun note "$A"
[ "$(cat "$T/out")" = "the baseline: lr 0.1" ] || fail "the note, read by the CLI: $(cat "$T/out")"
serve_stop
pass
