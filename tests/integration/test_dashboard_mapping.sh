# The dashboard shows the instances of a map over a run-time list, in
# headless Chromium (tests/integration/cdp.py): the run's task table has
# work-0 .. work-2 with their attempts, and the graph, drawn from the DAG
# file (where `work` is one task), draws them beside `work`.
. "$(dirname "$0")/lib.sh"
need_chromium
export DAGRUN_HOME="$T/home"
mkdir -p dags
cat > dags/fan.yaml <<'Y'
dag: fan
tasks:
  gen: {stage: exec, with: {command: [sh, -c, 'printf "{\"xs\": [\"a\", \"b\", \"c\"]}" > "$DAGRUN_OUTPUTS"']}}
  work: {stage: exec, needs: [gen], map: '${tasks.gen.outputs.xs}', with: {command: [echo, '${item}']}}
  join: {stage: exec, needs: [work], with: {command: [echo, '${tasks.work.dir|json}']}}
Y
run_dagrun run dags/fan.yaml --plain
expect_rc 0
run_dagrun runs --json
A=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["id"])' "$T/out")
serve_start --no-cron

cat >fan_check.py <<'P'
import json, sys
chromium, cdp_dir, profile, port, run, token = sys.argv[1:7]
sys.path.insert(0, cdp_dir)
from cdp import Browser

with Browser(chromium, profile) as b:
    b.open(f"http://127.0.0.1:{port}/#dag=fan&run={run}")
    b.js(f"sessionStorage.setItem('dagrun-token', {json.dumps(token)})")
    b.wait_for(f"document.getElementById('run-title').textContent === 'Run {run}'", "the run's view")
    b.wait_for("document.querySelectorAll('#graph svg g title').length === 6", "six nodes in the graph")
    nodes = b.js("[...document.querySelectorAll('#graph svg g title')].map(t => t.textContent)")
    want = ["gen (exec): success", "work (exec): success", "join (exec): success",
            "work-0 (exec): success", "work-1 (exec): success", "work-2 (exec): success"]
    assert sorted(nodes) == sorted(want), nodes
    # The instances sit in work's column (they need what it needs).
    xs = b.js("Object.fromEntries([...document.querySelectorAll('#graph svg g')].filter(g => g.querySelector('title'))"
              ".map(g => [g.querySelector('title').textContent.split(' ')[0], g.querySelector('rect').getAttribute('x')]))")
    assert xs["work-0"] == xs["work-2"] == xs["work"] != xs["join"], xs
    page = b.js("document.body.textContent")
    for name in ("work-0", "work-1", "work-2"):
        assert page.count(name) >= 2, f"{name} not in the task table: {page[:2000]}"
    print("dashboard mapping: ok")
P
browser_check "dashboard mapping" fan_check.py "$PORT" "$A" "$TOKEN"
serve_stop
pass
