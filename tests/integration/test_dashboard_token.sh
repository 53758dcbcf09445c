# The dashboard's read-token banner, typed into: headless Chromium driven
# over the DevTools protocol (--remote-debugging-pipe) opens the
# dashboard of a serve that wants a read token, types a wrong token and
# Enter (the banner stays, no DAG shows), then the right one (the DAGs
# show, the banner goes, the token is this tab's: kept in sessionStorage
# and as the dagrun_token cookie), and reloads (still shown, not asked).
# test_serve_attacks.sh checks the banner appears; this one that it works.
. "$(dirname "$0")/lib.sh"
CHROMIUM=$(command -v chromium || true)
[ -n "$CHROMIUM" ] || fail "chromium is not installed: the dashboard's checks
need Debian's chromium package (scripts/setup.sh --tests installs it)"
export DAGRUN_HOME="$T/home"
mkdir -p dags
printf 'dag: quick\ntasks:\n  a: {stage: exec, with: {command: [true]}}\n' >dags/quick.yaml
openssl rand -hex 32 >rtoken
chmod 600 rtoken
: >serve.log
"$DAGRUN" serve dags --port 0 --no-cron --read-token-file rtoken >serve.log 2>&1 &
SERVE_PID=$!
trap 'kill "$SERVE_PID" 2>/dev/null || true' EXIT
serve_port serve.log "$SERVE_PID"

cat >cdp.py <<'P'
"""Drives headless Chromium over --remote-debugging-pipe: the protocol's
JSON messages, each ended by a NUL byte, written to its fd 3 and read
from its fd 4."""
import json, os, subprocess, sys, time

chromium, url, good, profile = sys.argv[1:5]
to_browser_r, to_browser_w = os.pipe()
from_browser_r, from_browser_w = os.pipe()

def fds():
    os.dup2(to_browser_r, 3)
    os.dup2(from_browser_w, 4)

browser = subprocess.Popen(
    [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
     f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
    preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL,
    stderr=open(profile + ".err", "w"))
os.close(to_browser_r)
os.close(from_browser_w)
buf = b""
next_id = 0
session = None

def send(method, params=None, deadline=30):
    global buf, next_id
    next_id += 1
    msg = {"id": next_id, "method": method, "params": params or {}}
    if session and not method.startswith("Target."):
        msg["sessionId"] = session
    os.write(to_browser_w, json.dumps(msg).encode() + b"\0")
    end = time.time() + deadline
    while time.time() < end:
        while b"\0" in buf:
            raw, buf = buf.split(b"\0", 1)
            m = json.loads(raw)
            if m.get("id") == next_id:
                if "error" in m:
                    sys.exit(f"{method}: {m['error']}")
                return m["result"]
        chunk = os.read(from_browser_r, 65536)
        if not chunk:
            sys.exit("chromium closed the pipe")
        buf += chunk
    sys.exit(f"{method}: no answer")

def js(expr):
    r = send("Runtime.evaluate", {"expression": expr, "returnByValue": True})
    return r["result"].get("value")

def wait_for(expr, what, secs=20):
    end = time.time() + secs
    while time.time() < end:
        if js(expr):
            return
        time.sleep(0.1)
    sys.exit(f"not seen in {secs}s: {what}\n--- page:\n" + str(js("document.body.innerText")))

def type_token(text):
    """Clicks into the banner's field, types text and presses Enter, as a
    user would: key events, not a value set by script."""
    js("document.getElementById('read-token').value = ''")
    js("document.getElementById('read-token').focus()")
    send("Input.insertText", {"text": text})
    for kind in ("keyDown", "keyUp"):
        send("Input.dispatchKeyEvent", {"type": kind, "key": "Enter", "code": "Enter",
                                        "windowsVirtualKeyCode": 13,
                                        **({"text": "\r"} if kind == "keyDown" else {})})

DAGS = "[...document.querySelectorAll('.name')].map(e => e.textContent).join(' ')"
FORM = "!!document.getElementById('read-token-form')"
try:
    target = send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    send("Page.enable")
    send("Page.navigate", {"url": url})
    wait_for(FORM, "the read-token form")
    assert "quick" not in js(DAGS), "a DAG showed before any token"

    type_token("not-the-token-0123456789abcdef")
    wait_for("sessionStorage.getItem('dagrun-token') === 'not-the-token-0123456789abcdef'",
             "the wrong token kept")
    time.sleep(1.5)  # a poll or two answered 401
    assert js(FORM), "the banner went away after a wrong token"
    assert "quick" not in js(DAGS), "a DAG showed after a wrong token"

    type_token(good)
    wait_for(f"({DAGS}).includes('quick')", "the DAG list after the right token")
    wait_for(f"!{FORM}", "the banner gone")
    assert js("sessionStorage.getItem('dagrun-token')") == good, "token not kept for the tab"
    assert f"dagrun_token={good}" in js("document.cookie"), "no dagrun_token cookie"

    send("Page.reload")
    time.sleep(0.5)
    wait_for(f"({DAGS}).includes('quick')", "the DAG list after a reload")
    assert not js(FORM), "asked again after a reload"
    print("dashboard token entry: ok")
finally:
    browser.kill()
    browser.wait()
P
good=$(tr -d '\n' <rtoken)
set +e
timeout 90 "$PY" cdp.py "$CHROMIUM" "http://127.0.0.1:$PORT/" "$good" "$T/chromium" >cdp.out 2>&1
RC=$?
set -e
[ "$RC" -eq 0 ] || fail "typing the token into the dashboard (exit $RC): $(cat cdp.out)
--- chromium:
$(tail -5 "$T/chromium.err" 2>/dev/null)"
expect_in cdp.out "dashboard token entry: ok"
kill -TERM "$SERVE_PID"
wait "$SERVE_PID" 2>/dev/null || true
trap - EXIT
pass
