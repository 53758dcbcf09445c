#!/usr/bin/env bash
# The run report: after `dagrun run` the run directory holds report.html,
# and what a user looks for is in it: the tasks and their states, two
# attempts on the timeline for the task that was retried, the loss curve
# with one point per training step and one val_loss point per evaluation,
# the spike-guard event marked, the validation numbers; no script and
# nothing fetched from anywhere. `dagrun report RUN` writes it again; an
# unknown run is exit 2. Then Chromium (Debian's chromium package) renders
# it headless: every chart is there and sized, and a screenshot is kept
# for a person to look at.
. "$(dirname "$0")/lib.sh"

CHROMIUM=$(command -v chromium || true)
[ -n "$CHROMIUM" ] || fail "chromium is not installed: the report's rendering
test needs Debian's chromium package (scripts/setup.sh --tests installs it
with the tests' packages: apt-get install chromium)"

DATA=$(make_token_data rep 300)
# prep fails on its first attempt and succeeds on the retry; train is a
# tiny model, 30 steps, an evaluation every 10 (and the final one), a bad
# batch injected at step 21 for the loss-spike guard; validate gates it.
cat > rep.yaml <<Y
dag: rep
params: {lr: 0.01}
tasks:
  prep:
    stage: exec
    retries: 1
    retry_delay: 100ms
    with: {command: [sh, -c, 'test -f "$T/flag" || { touch "$T/flag"; echo "first try fails" >&2; exit 3; }']}
  train:
    stage: train
    needs: [prep]
    with: {data: "$DATA", n_layer: 1, n_head: 2, n_embd: 16, block_size: 16, batch_size: 4, threads: 1, steps: 30, eval_every: 10, eval_batches: 2, lr: "\${params.lr}", samples: 1, sample_tokens: 8, checkpoint_every: 0, spike_window: 8, peak_tflops: 0.05}
  validate:
    stage: validate
    needs: [train]
    with: {checkpoint: "\${tasks.train.outputs.checkpoint}", data: "$DATA", threads: 1, samples: 1, sample_tokens: 8, max_val_loss: 20}
Y
DAGRUN_FAULT_SPIKE_STEPS=21 run_dagrun run rep.yaml --plain --trigger backfill \
  --logical-date 2026-11-20T02:30:00Z
expect_rc 0
R=$(run_dir rep)
ID=$(basename "$R")
[ -f "$R/report.html" ] || fail "no report.html in $R after dagrun run"
STEPS=$(grep -c '"name":"loss"' "$R/train/metrics.jsonl")
EVALS=$(grep -c '"name":"val_loss"' "$R/train/metrics.jsonl")
[ "$STEPS" = 30 ] || fail "expected 30 loss metrics, got $STEPS"
[ "$EVALS" = 3 ] || fail "expected 3 evaluations (steps 10, 20, 30), got $EVALS"
grep -q '"name":"spike_events"' "$R/train/metrics.jsonl" ||
  fail "the injected bad batch did not fire the spike guard: $(grep -i spike "$R/train/attempt-1/log")"

# check_report FILE: what a reader of the page would look for.
check_report() {
  /usr/bin/python3 - "$1" "$R" "$ID" "$STEPS" "$EVALS" <<'P' || fail "report $1 (kept in $T)"
import html.parser, json, re, sys
path, run_dir, run_id, steps, evals = sys.argv[1:6]
steps, evals = int(steps), int(evals)
text = open(path, encoding="utf-8").read()
problems = []
def check(cond, what):
    if not cond:
        problems.append(what)

check(text.startswith("<!DOCTYPE html>"), "not an HTML5 document")
# Self-contained: no script, nothing fetched (links in text are fine).
check(re.search(r"<script", text, re.I) is None, "a <script> in the report")
for pat in (r"""(?:src|href|xlink:href|action)\s*=\s*["']?\s*(?:https?:)?//""",
            r"url\(", r"@import", r"<link\b", r"<iframe", r"<img\b"):
    m = re.search(pat, text, re.I)
    check(m is None, "a resource reference: %r" % (m.group(0) if m else ""))

class Page(html.parser.HTMLParser):
    VOID = {"meta", "br", "hr", "img", "input", "link", "wbr", "col"}
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.charts, self.chart = [], {}, None
        self.series, self.task_rows, self.row, self.cells = None, {}, None, []
        self.marks, self.data_keys, self.key, self.header = 0, {}, None, []
        self.in_header = False
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag not in self.VOID:
            self.stack.append(tag)
        self.open(tag, a)
    def handle_startendtag(self, tag, attrs):
        self.open(tag, dict(attrs))
    def open(self, tag, a):
        cls = (a.get("class") or "").split()
        if a.get("id"):
            check(a["id"] not in ids, "two elements with id %r" % a["id"])
            ids.add(a["id"])
        if tag == "a" and (a.get("href") or "").startswith("#"):
            links.append(a["href"][1:])
        if tag == "svg" and "chart" in cls:
            self.chart = a.get("data-title")
            check(self.chart not in self.charts, "two charts titled %r" % self.chart)
            self.charts[self.chart] = {"series": {}, "fills": {}, "marks": 0}
        elif tag == "g" and "series" in cls and self.chart:
            self.series = a["data-label"]
            self.charts[self.chart]["series"][self.series] = int(a["data-points"])
            self.charts[self.chart]["fills"][self.series] = []
        elif tag == "rect" and "span" in cls and self.chart and self.series:
            self.charts[self.chart]["fills"][self.series].append(a.get("fill"))
        elif tag == "line" and "mark" in cls and self.chart:
            self.charts[self.chart]["marks"] += 1
        elif tag == "tr" and a.get("data-task"):
            self.row, self.cells = a["data-task"], []
        elif tag == "td" and a.get("data-key"):
            self.key = a["data-key"]
        elif tag == "header":
            self.in_header = True
    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        check(self.stack and self.stack[-1] == tag,
              "</%s> closes <%s>" % (tag, self.stack[-1] if self.stack else "nothing"))
        if self.stack:
            self.stack.pop()
        if tag == "svg":
            self.chart = None
        elif tag == "g":
            self.series = None
        elif tag == "tr" and self.row:
            self.task_rows[self.row] = [c.strip() for c in self.cells]
            self.row = None
        elif tag == "td":
            self.key = None
        elif tag == "header":
            self.in_header = False
    def handle_data(self, data):
        if self.row is not None and self.stack and self.stack[-1] in ("td", "span"):
            self.cells.append(data)
        if self.key:
            self.data_keys[self.key] = self.data_keys.get(self.key, "") + data
        if self.in_header:
            self.header.append(data.strip())

ids, links = set(), []
p = Page()
p.feed(text)
p.close()
check(not p.stack, "unclosed elements: %s" % p.stack)
# The contents link to sections that are there (no finder ran: none).
for l in links:
    check(l in ids, "a link to #%s, which is not in the page" % l)
check("train-train" in links and "validation" in links and "finders" not in links,
      "contents: %s" % links)
c = p.charts

# The header: run id, state, trigger, logical date.
hdr = " | ".join(x for x in p.header if x)
for want in (run_id, "success", "backfill", "2026-11-20T02:30:00Z", "rep"):
    check(want in hdr, "header lacks %r: %s" % (want, hdr))

# The tasks and their states.
for task in ("prep", "train", "validate"):
    row = p.task_rows.get(task)
    check(row is not None and "success" in row, "task %s row: %s" % (task, row))
check(p.task_rows.get("prep", [None] * 4)[3] == "2",
      "prep attempts: %s" % p.task_rows.get("prep"))

# The DAG graph and the timeline: two bars for prep, failed then success.
check("DAG" in c, "no DAG graph")
tl = c.get("Attempts of every task")
check(tl is not None, "no timeline chart; charts: %s" % list(c))
if tl:
    check(tl["series"] == {"prep": 2, "train": 1, "validate": 1},
          "timeline rows: %s" % tl["series"])
    check(tl["fills"].get("prep") == ["#d9434b", "#2fa36b"],
          "prep bars: %s (expected failed red, then success green)" % tl["fills"].get("prep"))

# The loss curve: a point per step, a val_loss point per evaluation, the
# spike marked; the same against tokens.
for title in ("train: loss", "train: loss against tokens"):
    ch = c.get(title)
    check(ch is not None, "no chart %r; charts: %s" % (title, list(c)))
    if ch:
        check(ch["series"].get("loss (train)") == steps,
              "%s: loss points %s, expected %d" % (title, ch["series"], steps))
        check(ch["series"].get("val_loss") == evals,
              "%s: val_loss points %s, expected %d" % (title, ch["series"], evals))
        check(ch["marks"] >= 1, "%s: no loss-spike mark" % title)
for title, label in (("train: learning rate", "lr"),
                     ("train: gradient norm", "grad_norm")):
    ch = c.get(title)
    check(ch is not None and ch["series"].get(label) == steps,
          "%s: %s" % (title, ch and ch["series"]))
check("train: throughput" in c, "no throughput chart")
# MFU (train was given peak_tflops) and where the time went: a bar per
# step (30 steps: fewer than the 60-bar cap), a stack per phase.
ch = c.get("train: model FLOPs utilization")
check(ch is not None and ch["series"].get("mfu") == steps,
      "MFU chart: %s" % (ch and ch["series"]))
tc = [v for k, v in c.items() if k.startswith("train: where the time goes")]
check(len(tc) == 1, "time-split chart: %s" % list(c))
if tc:
    check(tc[0]["series"] == {k: steps for k in ("data wait", "forward", "backward",
                                                 "optimizer", "communication")},
          "time-split stacks: %s" % tc[0]["series"])

# Validation numbers as validate wrote them.
vm = json.load(open(run_dir + "/validate/out/metrics.json"))
check(p.data_keys.get("val_loss") == "%.4f" % vm["val_loss"],
      "val_loss shown %r, metrics.json %r" % (p.data_keys.get("val_loss"), vm["val_loss"]))
check(p.data_keys.get("perplexity") == "%.3f" % vm["perplexity"],
      "perplexity shown %r" % p.data_keys.get("perplexity"))
check(p.data_keys.get("accuracy") == "%.2f%%" % (100 * vm["accuracy"]),
      "accuracy shown %r" % p.data_keys.get("accuracy"))
check("gates passed" in text, "no gate verdict")
check("=== sample 1" in text, "no samples")
# The resolved params: the run's and a task's (from attempt.json).
check("spike_window" in text and "eval_batches" in text, "no task params")

if problems:
    sys.exit("\n".join(problems))
print(json.dumps(sorted(c)))
P
}
check_report "$R/report.html" > charts.json

# `dagrun report RUN` writes it again.
cp "$R/report.html" first.html
rm "$R/report.html"
run_dagrun report "$ID"
expect_rc 0
expect_in "$T/out" "$R/report.html"
[ -f "$R/report.html" ] || fail "dagrun report did not write $R/report.html"
check_report "$R/report.html" > charts2.json
cmp charts.json charts2.json || fail "the regenerated report has other charts: $(cat charts.json charts2.json)"

# A failed run has its report too, and `dagrun resume` writes it again:
# the task's second attempt on the timeline, the run now a success.
cat > flaky.yaml <<Y
dag: flaky
tasks:
  step: {stage: exec, with: {command: [sh, -c, 'test -f "$T/ok" || { echo "not yet <ok>" >&2; exit 4; }']}}
Y
run_dagrun run flaky.yaml --plain
expect_rc 1
F=$(run_dir flaky)
expect_in "$F/report.html" 'data-task="step" data-state="failed"'
expect_in "$F/report.html" 'data-label="step" data-points="1"'
touch "$T/ok"
run_dagrun resume "$(basename "$F")" --plain
expect_rc 0
expect_in "$F/report.html" 'data-task="step" data-state="success"'
expect_in "$F/report.html" 'data-label="step" data-points="2"'

run_dagrun report nosuchrun
expect_rc 2
expect_in "$T/err" "nosuchrun"
run_dagrun report
expect_rc 2

# Chromium renders it: a copy with the test's own script (the product has
# none, and its policy would refuse this one) measures every chart.
sed 's|<meta http-equiv="Content-Security-Policy"[^>]*>||' "$R/report.html" > measure.html
grep -q 'Content-Security-Policy' measure.html && fail "the measuring copy kept the page's policy"
cat >> measure.html <<'H'
<script>
(function () {
  var out = [];
  document.querySelectorAll("svg.chart").forEach(function (s) {
    var r = s.getBoundingClientRect();
    out.push(s.getAttribute("data-title") + ":" + Math.round(r.width) + ":" +
             Math.round(r.height));
  });
  var pre = document.createElement("pre");
  pre.id = "measure";
  pre.textContent = out.join("\n");
  document.body.appendChild(pre);
})();
</script>
H
chrome() {
  timeout 90 "$CHROMIUM" --headless --no-sandbox --disable-gpu \
    --user-data-dir="$T/chromium" --no-first-run --window-size=1400,3000 "$@"
}
chrome --dump-dom "file://$T/measure.html" > dom.html 2> chromium.err ||
  fail "chromium --dump-dom failed: $(tail -5 chromium.err)"
/usr/bin/python3 - dom.html charts.json <<'P' || fail "rendering (DOM in $T/dom.html)"
import html, json, re, sys
dom = open(sys.argv[1], encoding="utf-8").read()
want = json.load(open(sys.argv[2]))
m = re.search(r'<pre id="measure">(.*?)</pre>', dom, re.S)
if not m:
    sys.exit("no measurements: the page did not render")
got = {}
for line in html.unescape(m.group(1)).splitlines():
    title, w, h = line.rsplit(":", 2)
    got[title] = (int(w), int(h))
bad = [f"{t}: {got.get(t)}" for t in want
       if t not in got or got[t][0] <= 200 or got[t][1] <= 100]
if bad:
    sys.exit("charts missing or too small (width > 200, height > 100):\n" +
             "\n".join(bad) + "\nmeasured: " + json.dumps(got))
print(len(got), "charts rendered")
P
chrome --screenshot="$T/report.png" "file://$R/report.html" > /dev/null 2>> chromium.err ||
  fail "chromium --screenshot failed: $(tail -5 chromium.err)"
[ "$(head -c 8 report.png | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
  fail "the screenshot is not a PNG"
# Kept for a person to look at (the work dir goes when the test passes).
if [ -n "${DAGRUN_BUILD_DIR:-}" ]; then
  cp report.png "$DAGRUN_BUILD_DIR/test_report.png"
fi

# A task's hostile figures (an outside tester's, each of which ran script
# or fetched from a server in a report opened from disk when figures were
# markup filtered by a list): Chromium shows each, runs none and fetches
# nothing (a server on loopback counts the requests).
LEAK_PORT=$(free_port)
"$PY" - "$LEAK_PORT" "$T/leaks" <<'P' &
import http.server, sys
log = open(sys.argv[2], "a", buffering=1)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        log.write(self.path + "\n")
        self.send_response(404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
P
leak_pid=$!
: > "$T/leaks"
cat > figs.yaml <<Y
dag: figs
tasks:
  plot:
    stage: exec
    with:
      command:
        - /usr/bin/python3
        - -c
        - |
          import os
          o, X = os.environ["DAGRUN_OUT_DIR"], "xmlns='http://www.w3.org/2000/svg'"
          pwn = "document.documentElement.setAttribute('data-pwned','%s')"
          leak = "http://127.0.0.1:$LEAK_PORT/"
          figs = {
              "1-slash": "<svg/onload=" + pwn % "slash" + " " + X + "><rect width='10' height='10'/></svg>",
              "2-tab": "<svg " + X + "><image href='x' onerror\t=" + pwn % "tab" + " /></svg>",
              "3-animate": "<svg " + X + "><animate/onbegin=" + pwn % "animate" + " attributeName='x' dur='1s'/></svg>",
              "4-remote": "<svg " + X + "><image href=" + leak + "unquoted/><image href = '" + leak + "spaces'/></svg>",
              "5-style": "<svg " + X + "><style>@import url(" + leak + "css);</style><rect width='10' height='10'/></svg>",
          }
          for name, text in figs.items():
              open(os.path.join(o, name + ".svg"), "w").write(text)
Y
run_dagrun run figs.yaml --plain
expect_rc 0
FR=$(run_dir figs)
chrome --virtual-time-budget=3000 --dump-dom "file://$FR/report.html" > figs-dom.html 2>> chromium.err ||
  fail "chromium --dump-dom of the figures' report failed: $(tail -5 chromium.err)"
sleep 0.5
kill "$leak_pid" 2>/dev/null || true
wait "$leak_pid" 2>/dev/null || true
# (The page shows the task's command, which names the attribute: what
# would say a figure's script ran is the attribute set on the page.)
expect_not_in figs-dom.html 'data-pwned="'
[ ! -s "$T/leaks" ] || fail "the report fetched from a server: $(cat "$T/leaks")"
for f in 1-slash 2-tab 3-animate 4-remote 5-style; do
  expect_in figs-dom.html "<img alt=\"$f.svg\" src=\"data:image/svg+xml;base64,"
done

pass
